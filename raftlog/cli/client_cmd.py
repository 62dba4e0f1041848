"""Client commands, after Kafka's tools: `topic`, `produce`, `consume`, `offsets`.

All take `-b/--bootstrap-server HOST:PORT[,HOST:PORT]` (default $RAFTLOG_BOOTSTRAP or
127.0.0.1:9092). Errors (unreachable server, unknown topic) print one line and exit 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from raftlog.client import Admin, Consumer, Producer, RecordFuture
from raftlog.client.admin import ReplicaStates
from raftlog.client.partitioner import PARTITIONERS
from raftlog.client.producer_config import COMPRESSION_TYPES
from raftlog.errors import InvalidConfigError, RaftlogError
from raftlog.topics import TopicPartition

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# `produce` waits for the outcome of every this many records before it reads more lines, so
# its memory stays bounded however long stdin is.
PRODUCE_WINDOW_RECORDS = 10_000
# `consume` polls for at most this long, so a stop signal is acted on within it.
CONSUME_POLL_MS = 500


def add_bootstrap(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-b",
        "--bootstrap-server",
        default=os.environ.get("RAFTLOG_BOOTSTRAP", DEFAULT_BOOTSTRAP),
        help="HOST:PORT[,HOST:PORT...] of any broker (default: $RAFTLOG_BOOTSTRAP or "
        f"{DEFAULT_BOOTSTRAP})",
    )


def _config_pair(s: str) -> tuple[str, str]:
    key, sep, value = s.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{s!r} must be KEY=VALUE, e.g. retention.ms=60000")
    return key, value


def positive_int(s: str) -> int:
    """An argparse type: argparse names the option, this says what is wrong with the value
    (a ValueError would make argparse print this function's name instead)."""
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a positive integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{s!r} is not a positive integer (must be >= 1)")
    return v


def non_negative_int(s: str) -> int:
    """An argparse type, like `positive_int`, for values >= 0."""
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not an integer >= 0") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{s!r} is not an integer >= 0")
    return v


def register(sub: Any) -> None:
    t = sub.add_parser("topic", help="create, list, describe and delete topics")
    tsub = t.add_subparsers(dest="topic_command", required=True, metavar="SUBCOMMAND")
    c = tsub.add_parser("create", help="create a topic")
    c.add_argument("topic", help="the topic's name (1-249 of a-z A-Z 0-9 . _ -)")
    c.add_argument(
        "-p", "--partitions", type=positive_int, default=1, help="number of partitions (1)"
    )
    c.add_argument(
        "-r",
        "--replication-factor",
        type=positive_int,
        default=None,
        help="replicas of each partition, on distinct brokers (the brokers' default: "
        "1, or 3 in a `raftlog dev --nodes 3` cluster)",
    )
    c.add_argument(
        "-c",
        "--config",
        type=_config_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topic config, e.g. retention.ms=60000",
    )
    c.add_argument(
        "--if-not-exists", action="store_true", help="succeed if the topic already exists"
    )
    add_bootstrap(c)
    c.set_defaults(func=_topic_create)
    ls = tsub.add_parser("list", help="list topics")
    add_json(ls, "one object per topic: name, topic_id, partitions")
    add_bootstrap(ls)
    ls.set_defaults(func=_topic_list)
    d = tsub.add_parser(
        "describe",
        help="partitions, leaders, offsets and configs",
        description="Partitions, leaders, offsets and configs; for a compacted topic also each "
        "partition's cleaning as its leader's replica reports it: the dirty ratio (bytes "
        "written since the last clean over the cleanable bytes) and the last clean.",
    )
    d.add_argument("topic", nargs="*", help="topics to describe (default: all)")
    add_json(
        d,
        "one object per topic, its partitions as objects; unknown figures are null; "
        "`cleaning` (null unless compacted): the leader replica's dirty_ratio, last_clean_ms, "
        "last_clean, or the error saying why they are unknown",
    )
    add_bootstrap(d)
    d.set_defaults(func=_topic_describe)
    a = tsub.add_parser(
        "alter",
        help="grow a topic to more partitions, or change its configs",
        description="Grow a topic to more partitions (it never shrinks). Producers and "
        "consumer groups pick the new partitions up without a restart: native clients at "
        "their next metadata refresh, groups by a rebalance. Records with a key may go to "
        "another partition than before (the partition is the key's hash modulo the count). "
        "Or change its configs on the live topic (-c KEY=VALUE, --delete-config KEY: back to "
        "the default), as kafka-configs --alter: every broker's logs of it take them within "
        "a metadata round; durability.policy and min.insync.replicas stay as created.",
    )
    a.add_argument("topic", help="the topic to change")
    a.add_argument(
        "-p",
        "--partitions",
        type=positive_int,
        help="the new total number of partitions (more than it has)",
    )
    a.add_argument(
        "-c",
        "--config",
        type=_config_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a topic config, e.g. retention.ms=60000 (repeat for more)",
    )
    a.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="put a topic config back to the brokers' default (repeat for more)",
    )
    a.add_argument(
        "--replica-assignment",
        type=_replica_assignment,
        metavar="B:B:B,B:B:B,...",
        help="the new partitions' replicas, broker ids, first the preferred leader (as "
        "kafka-topics: a list of every partition's, or of the new ones' only; default: "
        "the controller places them)",
    )
    a.add_argument("--validate-only", action="store_true", help="check, change nothing")
    add_bootstrap(a)
    a.set_defaults(func=_topic_alter)
    rm = tsub.add_parser("delete", help="delete topics and their data")
    rm.add_argument("topic", nargs="+", help="topics to delete")
    add_bootstrap(rm)
    rm.set_defaults(func=_topic_delete)

    p = sub.add_parser("produce", help="send lines from stdin as records")
    p.add_argument("topic", help="the topic to send to")
    p.add_argument("--key-separator", help="split each line into KEY<SEP>VALUE at the first SEP")
    p.add_argument(
        "--acks",
        default="all",
        choices=["all", "-1", "0", "1"],
        help="all/-1: wait until committed; 1: the leader's append; 0: no answer (all)",
    )
    p.add_argument(
        "--partition",
        type=non_negative_int,
        help="send every record to this partition (default: by key, or sticky without one)",
    )
    p.add_argument(
        "--linger-ms",
        type=non_negative_int,
        default=5,
        help="wait up to this long to fill a batch (5)",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=64 * 1024,
        help="target batch size in bytes (65536)",
    )
    p.add_argument(
        "--delivery-timeout-ms",
        type=positive_int,
        default=120_000,
        help="give up on a record not acknowledged this long after it was read (default "
        "120000); a failed record is reported on stderr and makes the exit status 1",
    )
    p.add_argument(
        "--compression-type",
        default="none",
        choices=list(COMPRESSION_TYPES),
        help="compress batches with this codec, as Kafka record batches v2 (none: raftlog's "
        "own batches)",
    )
    p.add_argument(
        "--partitioner",
        default="default",
        choices=list(PARTITIONERS),
        help="hash of a record's key: default (xxhash) or murmur2 (where Kafka's Java client, "
        "kafka-python and aiokafka put a key)",
    )
    add_bootstrap(p)
    p.set_defaults(func=_produce)

    co = sub.add_parser("consume", help="print records to stdout")
    co.add_argument("topic", help="the topic to read")
    co.add_argument(
        "--group",
        help="consume as a member of this consumer group "
        "(partitions shared with the other members, offsets committed)",
    )
    co.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset where no position is known (default: the end)",
    )
    co.add_argument(
        "--partition",
        type=non_negative_int,
        action="append",
        help="only these partitions (repeat for several)",
    )
    co.add_argument("--offset", type=non_negative_int, help="start here (needs one --partition)")
    co.add_argument("--max-messages", type=positive_int, help="exit after this many records")
    co.add_argument(
        "--timeout-ms",
        type=non_negative_int,
        help="exit when no record arrives for this long (default: wait forever)",
    )
    co.add_argument(
        "--format",
        choices=["value", "kv", "json"],
        default="value",
        help="value: the value; kv: key<TAB>value; json: one object per record (headers as "
        "a list of {key, value} objects, in order, repeated keys kept)",
    )
    add_bootstrap(co)
    co.set_defaults(func=_consume)

    o = sub.add_parser("offsets", help="earliest and latest offset of each partition")
    o.add_argument("topic", help="the topic")
    o.add_argument(
        "--time",
        type=non_negative_int,
        help="also the first offset at or after this ms timestamp",
    )
    add_json(o, "one object per partition; null where no leader could answer")
    add_bootstrap(o)
    o.set_defaults(func=_offsets)


def add_json(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print JSON: {what}")


def _topic_create(args: argparse.Namespace) -> int:
    from raftlog.errors import TopicAlreadyExistsError

    with Admin(args.bootstrap_server) as admin:
        try:
            admin.create_topic(
                args.topic, args.partitions, args.replication_factor, dict(args.config)
            )
        except TopicAlreadyExistsError:
            if not args.if_not_exists:
                raise
            print(f"topic {args.topic} already exists")
            return 0
    print(f"created topic {args.topic} with {args.partitions} partition(s)")
    return 0


def _topic_list(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        topics = admin.list_topics()
    if args.json:
        rows = [
            {"name": name, "topic_id": t.topic_id, "partitions": len(t.partitions)}
            for name, t in sorted(topics.items())
        ]
        print(json.dumps(rows, indent=2))
        return 0
    for name in sorted(topics):
        print(name)
    return 0


def _topic_describe(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        topics = admin.describe_topics(args.topic or None)
        compacted = [t for t in topics if is_compacted(t.config.get("cleanup.policy"))]
        leaders = {p.leader for t in compacted for p in t.partitions if p.leader >= 0}
        states = replica_states(admin, [t.name for t in compacted], leaders) if compacted else None
    cleaning: dict[tuple[str, int], dict[str, Any]] = {}
    if states is not None:
        for t in compacted:
            for p in t.partitions:
                cleaning[t.name, p.partition] = leader_cleaning(
                    states, TopicPartition(t.name, p.partition), p.leader
                )
    if args.json:
        print(json.dumps([_desc_json(t, cleaning) for t in topics], indent=2))
        return 0
    now_ms = int(time.time() * 1000)
    for t in topics:
        overrides = ",".join(f"{k}={v}" for k, v in sorted(t.overrides.items())) or "-"
        print(
            f"Topic: {t.name}  TopicId: {t.topic_id}  Partitions: {len(t.partitions)}  "
            f"Configs: {overrides}"
        )
        for p in t.partitions:
            elr = f"  Elr: {','.join(map(str, p.elr))}" if p.elr else ""
            leos = (
                "  ReplicaLogEnds: "
                + ",".join(f"{n}={_known(o)}" for n, o in sorted(p.log_end_offsets.items()))
                if p.log_end_offsets
                else ""
            )
            print(
                f"  Partition: {p.partition}  Leader: {_leader(p.leader)}  "
                f"Epoch: {p.leader_epoch}  "
                f"Replicas: {','.join(map(str, p.replicas))}  Isr: {','.join(map(str, p.isr))}"
                f"{elr}  LogStart: {or_unknown(p.log_start_offset)}  "
                f"LogEnd: {or_unknown(p.log_end_offset)}  "
                f"HighWatermark: {or_unknown(p.high_watermark)}  "
                f"Size: {or_unknown(p.size_bytes)}  Segments: {or_unknown(p.segments)}{leos}"
                + _cleaning_column(cleaning.get((t.name, p.partition)), now_ms)
            )
    return 0


def _cleaning_column(c: dict[str, Any] | None, now_ms: int) -> str:
    return "" if c is None else f"  Cleaning: {format_cleaning(c, now_ms)}"


def is_compacted(cleanup_policy: object) -> bool:
    """A cleanup.policy value that has the log cleaner compact the log."""
    return "compact" in str(cleanup_policy or "").split(",")


def replica_states(admin: Admin, topics: list[str] | None, nodes: set[int]) -> ReplicaStates:
    """Admin.describe_replicas, or, if it fails whole, that error as every one of `nodes`'
    answer: the caller shows what it knows and says what it does not, rather than failing."""
    try:
        return admin.describe_replicas(topics)
    except RaftlogError as e:
        return ReplicaStates((), {n: f"{type(e).__name__}: {e}" for n in nodes})


def leader_cleaning(states: ReplicaStates, tp: TopicPartition, leader: int) -> dict[str, Any]:
    """The cleaning of `tp` as its leader's replica reports it (describe's and status'
    --json `cleaning`): node_id, dirty_ratio, last_clean_ms (-1: none since that broker
    started), last_clean (records and bytes read and kept, tombstones removed, seconds) and
    error (why the others are unknown: no leader, its broker did not answer, its log offline)."""
    out: dict[str, Any] = {
        "node_id": leader if leader >= 0 else None,
        "dirty_ratio": None,
        "last_clean_ms": -1,
        "last_clean": None,
        "error": None,
    }
    r = states.get(leader, tp)
    if leader < 0:
        out["error"] = "no leader"
    elif leader in states.unanswered:
        out["error"] = f"broker {leader} did not answer ({states.unanswered[leader]})"
    elif r is None:
        out["error"] = f"broker {leader} reported no replica of {tp}"
    elif r.offline:
        out["error"] = f"offline on broker {leader}: {r.offline_reason}"
    else:
        out["dirty_ratio"] = r.dirty_ratio
        out["last_clean_ms"] = r.last_clean_ms
        out["last_clean"] = None if r.last_clean is None else r.last_clean.to_wire()
    return out


def format_cleaning(c: dict[str, Any], now_ms: int) -> str:
    """A `leader_cleaning` map as a phrase: "dirty 0.42, last clean 12 s ago (1,204 of
    9,000 records kept)"."""
    if c["error"] is not None:
        return f"unknown ({c['error']})"
    ratio = c["dirty_ratio"]
    dirty = "dirty ?" if ratio is None else f"dirty {ratio:.2f}"
    if c["last_clean_ms"] < 0:
        return f"{dirty}, not cleaned since broker {c['node_id']} started"
    ago_s = max(now_ms - c["last_clean_ms"], 0) // 1000
    last = c["last_clean"]
    kept = (
        ""
        if last is None
        else f" ({last['records_kept']:,} of {last['records_read']:,} records kept)"
    )
    return f"{dirty}, last clean {ago_s:,} s ago{kept}"


def _leader(node: int) -> str:
    return "none" if node < 0 else str(node)


def _known(value: int) -> str:
    return "?" if value < 0 else str(value)


def or_unknown(value: int | None) -> str:
    """A figure, or "unknown" where no leader could give it (an offline partition)."""
    return "unknown" if value is None else str(value)


def _desc_json(t: Any, cleaning: dict[tuple[str, int], dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": t.name,
        "topic_id": t.topic_id,
        "config": t.config,
        "overrides": t.overrides,
        "partitions": [
            {
                "partition": p.partition,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "elr": list(p.elr),
                "log_start_offset": p.log_start_offset,
                "log_end_offset": p.log_end_offset,
                "high_watermark": p.high_watermark,
                # Per replica, as the leader knows them (null: no leader answered).
                "log_end_offsets": None
                if p.log_end_offsets is None
                else {str(n): (o if o >= 0 else None) for n, o in p.log_end_offsets.items()},
                "size_bytes": p.size_bytes,
                "segments": p.segments,
                # The leader replica's (leader_cleaning); null: the topic is not compacted.
                "cleaning": cleaning.get((t.name, p.partition)),
            }
            for p in t.partitions
        ],
    }


def _replica_assignment(s: str) -> list[list[int]]:
    """An argparse type: "1:2:3,2:3:1" -> [[1, 2, 3], [2, 3, 1]]."""
    out = []
    for part in s.split(","):
        try:
            replicas = [int(b) for b in part.split(":")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{s!r}: each partition's replicas are broker ids joined by ':' and the "
                "partitions are joined by ',', e.g. 1:2:3,2:3:1"
            ) from None
        out.append(replicas)
    return out


def _topic_alter(args: argparse.Namespace) -> int:
    if args.partitions is None and not args.config and not args.delete_config:
        raise InvalidConfigError("topic alter needs --partitions, -c KEY=VALUE or --delete-config")
    if args.config or args.delete_config:
        changes: dict[str, str | None] = {k: None for k in args.delete_config}
        changes.update({k: str(v) for k, v in args.config})
        with Admin(args.bootstrap_server) as admin:
            config = admin.alter_topic_config(args.topic, changes, args.validate_only)
        verb = "would be" if args.validate_only else "now"
        shown = ", ".join(f"{k}={v}" for k, v in sorted(config.items())) or "(all defaults)"
        print(f"topic {args.topic} configs {verb}: {shown}")
    if args.partitions is None:
        return 0
    with Admin(args.bootstrap_server) as admin:
        known = admin.list_topics().get(args.topic)
        before = 0 if known is None else len(known.partitions)  # unknown: the broker says so
        assignment = args.replica_assignment
        if assignment is not None and len(assignment) == args.partitions and before:
            assignment = assignment[before:]  # kafka-topics' form: every partition's replicas
        admin.create_partitions(args.topic, args.partitions, assignment, args.validate_only)
    if args.validate_only:
        print(f"topic {args.topic} can grow from {before} to {args.partitions} partitions")
    else:
        print(f"grew topic {args.topic} from {before} to {args.partitions} partitions")
    return 0


def _topic_delete(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        admin.delete_topics(args.topic)
    print(f"deleted {', '.join(args.topic)}")
    return 0


class _FirstError:
    """Prints the first delivery error as it happens (from the producer's thread): a full
    disk or a lost partition must not look like a producer that is just slow."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._printed = False

    def __call__(self, fut: RecordFuture) -> None:
        error = fut.exception(0)
        if error is None or self._printed:
            return
        with self._lock:
            if self._printed:
                return
            self._printed = True
        print(
            f"raftlog: error: a record was not delivered: {type(error).__name__}: {error}",
            file=sys.stderr,
            flush=True,
        )


def _produce(args: argparse.Namespace) -> int:
    producer = Producer(
        bootstrap_servers=args.bootstrap_server,
        acks=args.acks,
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        delivery_timeout_ms=args.delivery_timeout_ms,
        compression_type=args.compression_type,
        partitioner=args.partitioner,
    )
    futures: list[RecordFuture] = []
    sent = failed = 0
    first_error = _FirstError()
    try:
        producer.partitions_for(args.topic)  # an unknown topic fails here, before reading stdin
        for raw in sys.stdin.buffer:
            line = raw.rstrip(b"\r\n")
            key = None
            if args.key_separator is not None:
                sep = args.key_separator.encode()
                if sep in line:
                    key, line = line.split(sep, 1)
            fut = producer.send(args.topic, line, key=key, partition=args.partition)
            fut.add_done_callback(first_error)
            futures.append(fut)
            sent += 1
            if len(futures) >= PRODUCE_WINDOW_RECORDS:
                failed += sum(f.exception() is not None for f in futures)
                futures.clear()
        producer.flush()
        failed += sum(f.exception() is not None for f in futures)
    finally:
        producer.close()
    print(f"produced {sent - failed} record(s) to {args.topic}", file=sys.stderr)
    if failed:
        print(
            f"raftlog: error: {failed} of {sent} record(s) not delivered (the first error is "
            "above)",
            file=sys.stderr,
        )
        return 1
    return 0


class _StopSignals:
    """SIGINT and SIGTERM ask `consume` to stop: the flag is checked between polls (every
    CONSUME_POLL_MS at most), so the consumer commits, leaves its group and prints its
    summary, instead of dying mid-call (SIGTERM's default) or raising KeyboardInterrupt
    wherever the main thread happens to be. A second signal acts as if unhandled."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.stop = threading.Event()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def _handle(self, signum: int, frame: Any) -> None:
        if not self.stop.is_set():
            self.stop.set()
            return
        signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))
        signal.raise_signal(signum)


def _consume(args: argparse.Namespace) -> int:
    if args.offset is not None and (not args.partition or len(args.partition) != 1):
        raise InvalidConfigError("--offset needs exactly one --partition")
    if args.group and (args.partition or args.offset is not None):
        raise InvalidConfigError("--group cannot be combined with --partition or --offset")
    group_options: dict[str, Any] = {"group_id": args.group} if args.group else {}
    shown = 0
    out = sys.stdout
    with _StopSignals() as signals:
        consumer = Consumer(
            **group_options,
            bootstrap_servers=args.bootstrap_server,
            auto_offset_reset="earliest" if args.from_beginning else "latest",
        )
        try:
            if args.partition:
                consumer.assign([TopicPartition(args.topic, p) for p in args.partition])
            else:
                consumer.subscribe([args.topic])
            if args.offset is not None:
                consumer.seek(TopicPartition(args.topic, args.partition[0]), args.offset)
            elif args.from_beginning and not args.group:
                consumer.seek_to_beginning()
            idle_since = time.monotonic()
            while not signals.stop.is_set() and (
                args.max_messages is None or shown < args.max_messages
            ):
                wait = CONSUME_POLL_MS
                if args.timeout_ms is not None:
                    wait = min(wait, args.timeout_ms)
                remaining = None if args.max_messages is None else args.max_messages - shown
                batch = consumer.poll(wait, max_records=remaining)
                if not batch:
                    if (
                        args.timeout_ms is not None
                        and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms
                    ):
                        break
                    continue
                idle_since = time.monotonic()
                for records in batch.values():
                    for r in records:
                        out.write(_format(r, args.format))
                        shown += 1
                out.flush()
        finally:
            consumer.close()  # commits what was printed and leaves the group
    print(f"consumed {shown} record(s)", file=sys.stderr)
    return 0


def _text(b: bytes | None) -> str | None:
    if b is None:
        return None
    try:
        return b.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(b).decode()


def _format(r: Any, fmt: str) -> str:
    if fmt == "value":
        return f"{_text(r.value) or ''}\n"
    if fmt == "kv":
        return f"{_text(r.key) or ''}\t{_text(r.value) or ''}\n"
    return (
        json.dumps(
            {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": _text(r.key),
                "value": _text(r.value),
                # A list, in order: a record may repeat a header key (Kafka allows it), and
                # an object keyed by header name would keep only one of them.
                "headers": [{"key": k, "value": _text(v)} for k, v in r.headers],
            }
        )
        + "\n"
    )


def _offsets(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        (desc,) = admin.describe_topics([args.topic])
        tps = [TopicPartition(args.topic, p.partition) for p in desc.partitions]
        earliest = admin.list_offsets_known({tp: -2 for tp in tps})
        latest = admin.list_offsets_known({tp: -1 for tp in tps})
        at = (
            admin.list_offsets_known({tp: args.time for tp in tps}) if args.time is not None else {}
        )
    rows = []
    for tp in tps:
        # None: the partition is offline (no leader to ask), shown as "unknown" / null.
        row: dict[str, Any] = {
            "partition": tp.partition,
            "earliest": _offset(earliest[tp]),
            "latest": _offset(latest[tp]),
        }
        if args.time is not None:
            row["at_time"] = _offset(at[tp])
        rows.append(row)
    if args.json:
        print(json.dumps(rows))
    else:
        for row in rows:
            extra = (
                f"  at {args.time}: {or_unknown(row['at_time'])}" if args.time is not None else ""
            )
            print(
                f"{args.topic}:{row['partition']}  earliest {or_unknown(row['earliest'])}  "
                f"latest {or_unknown(row['latest'])}{extra}"
            )
    return 0


def _offset(found: tuple[int, int] | None) -> int | None:
    return None if found is None else found[0]
