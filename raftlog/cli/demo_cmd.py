"""`raftlog demo`: the main job end to end on the local default.

Starts a local node as its own process, creates the `pageviews` topic, produces a stream of
page-view events keyed by user (acks=all, idempotent) through both of the brokers' doors,
consumes the whole topic back, checks that every record arrived once and in order per
partition, prints what happened, and stops the node with SIGTERM (a clean shutdown). Exit
status 0 means the pipeline moved every event.

The two doors: the events of even-numbered users (user-0000, user-0002, ...) are produced with
confluent-kafka (librdkafka) through the brokers' Kafka-protocol listeners, those of
odd-numbered users with raftlog's own Producer through the native listeners; about half of
the events come through each. A user's events all take one door, so per-user order is one
producer's order (two producers never race on one key). Both producers hash keys with Kafka's
murmur2 (librdkafka's "murmur2_random", raftlog's partitioner="murmur2"), so a user lands in
the same partition whichever door it takes: the consumer checks every record's partition
against murmur2 of its key. Each event names its door (`"door": "kafka"` or `"raftlog"`); the
report gives the count per door, produced and consumed, and Spark's total must equal the sum
of both (a Spark that read one door only fails the run).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import confluent_kafka

from raftlog.cli.client_cmd import positive_int
from raftlog.client import Admin, Consumer, Producer
from raftlog.client.partitioner import murmur2_partitioner
from raftlog.errors import RaftlogError
from raftlog.launcher import (
    ExitedBeforeReadyError,
    LaunchError,
    NodeProcess,
    bootstrap_of,
    dev_process,
    kafka_bootstrap_of,
)
from raftlog.topics import TopicPartition

PAGES = ["/", "/pricing", "/docs", "/blog", "/signup", "/login", "/docs/install", "/careers"]
# A node is ready 1-3 s after it starts here; a loaded 2-core CI machine has taken 10 s.
READY_TIMEOUT_S = 60
# `raftlog dev` stops its nodes within its own 30 s; past this the demo kills the group.
STOP_TIMEOUT_S = 30
# How long the demo topic may take to settle (whole ISRs, high watermarks at the log ends).
SETTLE_TIMEOUT_S = 60
SETTLE_POLL_S = 0.1
# The doors an event can take (its "door" field): Kafka's wire protocol (confluent-kafka) for
# even-numbered users, raftlog's own protocol (raftlog's Producer) for odd-numbered ones.
KAFKA_DOOR = "kafka"
RAFTLOG_DOOR = "raftlog"
# How long the end of step 3 waits for confluent-kafka's last acknowledgements.
KAFKA_FLUSH_TIMEOUT_S = 60
# Delivery callbacks are run (poll) once per this many records sent: per record, the calls
# cost more than the sending.
KAFKA_POLL_EVERY = 1000


def door_of(user_number: int) -> str:
    """The door user `user_number`'s events take: Kafka's for even numbers, raftlog's for odd."""
    return KAFKA_DOOR if user_number % 2 == 0 else RAFTLOG_DOOR


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the page-view pipeline on a local node and report")
    p.add_argument("--events", type=int, default=200_000, help="page views to produce")
    p.add_argument(
        "--partitions", type=positive_int, default=6, help="partitions of the demo topic (6)"
    )
    p.add_argument("--nodes", type=int, default=3, help="nodes in the local cluster")
    p.add_argument("--data-dir", help="keep the node's data here (default: a temp dir, removed)")
    p.set_defaults(func=_demo)


def _progress(label: str, done: int, total: int, started: float) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    rate = done / max(time.monotonic() - started, 1e-9)
    sys.stderr.write(
        f"\r  {label} [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} {rate:,.0f}/s"
    )
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


class Bootstraps(NamedTuple):
    """Where clients reach the cluster: raftlog's own listeners and the Kafka-protocol ones
    ("host:port,..." each, one address per node)."""

    raftlog: str
    kafka: str


def start_cluster(data_dir: str, nodes: int) -> tuple[NodeProcess, Bootstraps]:
    """Start `raftlog dev` on free ports; returns (process, its Bootstraps) once every node
    is ready. The cluster runs in its own process group, so stop_cluster (or a failure here)
    takes every node down with it. The nodes' stderr goes to ours.

    Readiness comes from each node's ready file (raftlog/readiness.py), never from parsing the
    nodes' output: they share one stdout, where lines from different processes can merge.
    """
    dev = dev_process(
        data_dir,
        ["--port", "0", "--log-level", "WARNING"],
        nodes,
        stdout=subprocess.DEVNULL,
        new_session=True,
    )
    try:
        infos = dev.start(READY_TIMEOUT_S)
    except ExitedBeforeReadyError:
        raise  # `_demo` decides whether to retry on new ports or to report it
    except LaunchError as e:
        raise RaftlogError(str(e)) from None
    kafka = kafka_bootstrap_of(infos)
    if kafka is None:  # a --data-dir whose configs were written without Kafka listeners
        stop_cluster(dev)
        raise RaftlogError("the cluster's nodes have no Kafka listener: the demo needs one each")
    return dev, Bootstraps(bootstrap_of(infos), kafka)


def stop_cluster(dev: NodeProcess) -> int:
    """SIGTERM the cluster (a clean stop); SIGKILL its whole group if it hangs. Its status."""
    rc = dev.stop(STOP_TIMEOUT_S)
    if rc is None:
        return dev.proc.returncode if dev.proc is not None else -signal.SIGKILL
    return rc


def _demo(args: argparse.Namespace) -> int:
    if args.events < 1 or args.partitions < 1:
        raise ValueError("--events and --partitions must be >= 1")
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # keep lines in order with the progress bars
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="raftlog-demo-")
    with _SparkStarter() as spark:
        return _demo_with(args, data_dir, spark)


class _SparkStarter:
    """Starts the Spark session of step 6 in a thread while steps 1-5 run: a session takes
    7 s to start here with the class archive (11-13 s without), as long as steps 1-5, and the
    whole main job has a budget (`raftlog demo --events 2000` in under 25 s). Stops the
    session on exit, whatever happened. Starting it where Spark cannot run fails in the
    thread; step 6 checks the environment first and says what is missing."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spark-start")
        self._future = self._pool.submit(self._start)
        self.start_s = 0.0

    def _start(self) -> Any:
        from raftlog_spark import local_session
        from raftlog_spark.environment import SHORT_JOBS_CONF

        started = time.monotonic()
        spark = local_session("pageview-report", conf=SHORT_JOBS_CONF)
        self.start_s = time.monotonic() - started
        return spark

    def session(self) -> Any:
        """The session (waits for it); raises what starting it raised."""
        return self._future.result()

    def __enter__(self) -> _SparkStarter:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self._future.result().stop()
        self._pool.shutdown()


def _demo_with(args: argparse.Namespace, data_dir: str, spark: _SparkStarter) -> int:
    print(f"1. starting a local raftlog cluster of {args.nodes} node(s) (data in {data_dir})")
    t0 = time.monotonic()
    try:
        try:
            dev, bootstraps = start_cluster(data_dir, args.nodes)
        except ExitedBeforeReadyError as e:
            if args.data_dir is not None:
                # Its configs fix the ports: the user must free them.
                raise RaftlogError(str(e)) from None
            # The ports a fresh cluster picks (outside the kernel's ephemeral range) can
            # still be taken by another program before the nodes bind them: a new directory
            # picks new ones.
            print(f"   {e}; retrying once on new ports")
            shutil.rmtree(data_dir, ignore_errors=True)
            data_dir = tempfile.mkdtemp(prefix="raftlog-demo-")
            try:
                dev, bootstraps = start_cluster(data_dir, args.nodes)
            except ExitedBeforeReadyError as again:
                raise RaftlogError(str(again)) from None
    except BaseException:
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
        raise
    print(
        f"   brokers ready on {bootstraps.raftlog} (Kafka protocol on {bootstraps.kafka}) "
        f"in {time.monotonic() - t0:.1f} s"
    )
    try:
        return _pipeline(bootstraps, args.events, args.partitions, spark)
    finally:
        status = stop_cluster(dev)
        print(f"7. stopped the cluster cleanly (exit status {status})")
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


class _KafkaDoor:
    """confluent-kafka's Producer (librdkafka) on the brokers' Kafka listeners: acks=all,
    idempotent, keys hashed with murmur2 as raftlog's Producer(partitioner="murmur2") does.
    `acked` counts the records the brokers acknowledged; `failures` holds each failed
    delivery's error (librdkafka retries on its own first). Used as a context manager: on
    exit, whatever is still queued is dropped and librdkafka closed, so it neither waits on
    nor logs lost connections to a cluster that is stopping (confluent-kafka 2.13+)."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer as KafkaProducer

        self.acked = 0
        self.failures: list[str] = []
        self._sent = 0
        self._producer = KafkaProducer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "partitioner": "murmur2_random",
                "linger.ms": 5,
            }
        )

    def _delivered(self, err: confluent_kafka.KafkaError | None, _msg: object) -> None:
        if err is None:
            self.acked += 1
        else:
            self.failures.append(str(err))

    def send(self, topic: str, value: bytes, key: bytes) -> None:
        while True:
            try:
                self._producer.produce(topic, value, key, on_delivery=self._delivered)
                break
            except BufferError:  # librdkafka's queue is full: let it send some
                self._producer.poll(0.05)
        self._sent += 1
        if self._sent % KAFKA_POLL_EVERY == 0:
            self._producer.poll(0)  # run the delivery callbacks that are due

    def flush(self) -> int:
        """Wait for every acknowledgement; the number of records still undelivered."""
        return int(self._producer.flush(KAFKA_FLUSH_TIMEOUT_S))

    def __enter__(self) -> _KafkaDoor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._producer.purge()
        self._producer.close()


def _settled(admin: Admin, topic: str) -> int:
    """Wait until every partition of `topic` has its whole ISR and a high watermark at its
    leader's log end; its partition count. Right after a restart a leader's high watermark
    is its checkpoint's, which may lag its log until the followers fetch (as in Kafka):
    "latest" offsets taken then would count earlier runs' records as new."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        parts = admin.describe_topics([topic])[0].partitions
        lagging = [
            p.partition
            for p in parts
            if set(p.isr) != set(p.replicas)
            or p.high_watermark is None
            or p.high_watermark != p.log_end_offset
        ]
        if not lagging:
            return len(parts)
        if time.monotonic() > deadline:
            raise RaftlogError(
                f"partitions {lagging} of {topic!r} still lack their whole ISR or a high "
                f"watermark at the log end after {SETTLE_TIMEOUT_S} s"
            )
        time.sleep(SETTLE_POLL_S)


def _pipeline(bootstraps: Bootstraps, events: int, partitions: int, spark: _SparkStarter) -> int:
    topic = "pageviews"
    bootstrap = bootstraps.raftlog
    with Admin(bootstrap) as admin:
        if topic not in admin.list_topics():
            admin.create_topic(topic, partitions, config={"retention.ms": str(7 * 86400000)})
        partitions = _settled(admin, topic)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        start = {
            tp: offset for tp, (offset, _) in admin.list_offsets({tp: -1 for tp in tps}).items()
        }
    print(
        f"2. topic {topic!r} has {partitions} partitions; new events start at offsets "
        + ", ".join(f"{tp.partition}:{o}" for tp, o in sorted(start.items()))
    )

    print(
        f"3. producing {events:,} page-view events keyed by user (acks=all, idempotent, murmur2 "
        "keys): even-numbered users with confluent-kafka through the Kafka listeners, "
        "odd-numbered ones with raftlog's Producer"
    )
    rng = random.Random(7)
    sent_per_user: dict[str, int] = collections.Counter()
    sent_per_door: collections.Counter[str] = collections.Counter()
    started = time.monotonic()
    last_shown = 0.0
    with (
        _KafkaDoor(bootstraps.kafka) as kafka_door,
        Producer(
            bootstrap_servers=bootstrap, acks="all", linger_ms=5, partitioner="murmur2"
        ) as producer,
    ):
        futures = []
        for i in range(events):
            number = rng.randrange(1000)
            user = f"user-{number:04d}"
            door = door_of(number)
            event = {
                "user": user,
                "page": rng.choice(PAGES),
                "seq": sent_per_user[user],
                "ts": int(time.time() * 1000),
                "door": door,
            }
            sent_per_user[user] += 1
            sent_per_door[door] += 1
            value, key = json.dumps(event).encode(), user.encode()
            if door == KAFKA_DOOR:
                kafka_door.send(topic, value, key)
            else:
                futures.append(producer.send(topic, value, key=key))
            if time.monotonic() - last_shown > 0.25:
                _progress("produce", i + 1, events, started)
                last_shown = time.monotonic()
        producer.flush()
        for f in futures:
            f.result()
        undelivered = kafka_door.flush()
    if undelivered or kafka_door.failures or kafka_door.acked != sent_per_door[KAFKA_DOOR]:
        raise RaftlogError(
            f"confluent-kafka delivered {kafka_door.acked:,} of {sent_per_door[KAFKA_DOOR]:,} "
            f"events ({undelivered:,} still queued after {KAFKA_FLUSH_TIMEOUT_S} s)"
            + (f"; first error: {kafka_door.failures[0]}" if kafka_door.failures else "")
        )
    _progress("produce", events, events, started)
    produce_s = time.monotonic() - started

    print("4. consuming the new events back as consumer group 'pageview-report'")
    started = time.monotonic()
    pages: collections.Counter[str] = collections.Counter()
    per_partition: collections.Counter[int] = collections.Counter()
    seen_per_door: collections.Counter[str] = collections.Counter()
    partition_of: dict[bytes, int] = {}  # murmur2 of each user's key, computed once per user
    misplaced = 0
    next_seq: dict[str, int] = collections.defaultdict(int)
    last_offset: dict[int, int] = {}
    problems = 0
    seen = 0
    with Admin(bootstrap) as admin:
        # The group starts where this run's events start (a re-run on the same data dir
        # replays nothing old): the reset-offsets replay primitive.
        if "pageview-report" in {g["group_id"] for g in admin.list_groups()}:
            admin.delete_group("pageview-report")
        admin.reset_offsets("pageview-report", start)
    consumer = Consumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id="pageview-report",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        while seen < events:
            batch = consumer.poll(5000)
            if not batch:
                print(f"\n   no records for 5 s after {seen:,} of {events:,}")
                problems += 1
                break
            for tp, records in batch.items():
                for r in records:
                    e = json.loads(r.value or b"{}")
                    if last_offset.get(tp.partition, r.offset - 1) != r.offset - 1:
                        problems += 1
                    last_offset[tp.partition] = r.offset
                    if e["seq"] != next_seq[e["user"]]:
                        problems += 1  # per-key order broken
                    key = r.key or b""
                    if key not in partition_of:
                        partition_of[key] = murmur2_partitioner(key, partitions)
                    if partition_of[key] != tp.partition:
                        misplaced += 1  # the two doors put this key in different partitions
                    seen_per_door[e.get("door", "?")] += 1
                    next_seq[e["user"]] = e["seq"] + 1
                    pages[e["page"]] += 1
                    per_partition[tp.partition] += 1
                    seen += 1
            if seen % 20_000 < 500 or seen >= events:
                _progress("consume", min(seen, events), events, started)
        ends = consumer.end_offsets(tps)
        consumer.commit()
    finally:
        consumer.close()
    with Admin(bootstrap) as admin:
        report = admin.describe_group("pageview-report")
        cluster = admin.describe_cluster()
        described = {p.partition: p for p in admin.describe_topics([topic])[0].partitions}
    lag = sum(p["lag"] or 0 for p in report["partitions"])
    print(f"5. group 'pageview-report' committed its offsets: total lag {lag}")
    consume_s = time.monotonic() - started

    spark_ok, spark_line = _spark_report(bootstrap, topic, start, pages, spark)
    doors_ok = seen_per_door == sent_per_door and misplaced == 0

    print("\nWhat happened:")
    print(
        f"  produced  {events:>10,} events in {produce_s:6.2f} s "
        f"({events / produce_s:,.0f} events/s, every one acknowledged)"
    )
    for door, how in (
        (KAFKA_DOOR, "with confluent-kafka through the Kafka listeners (even-numbered users)"),
        (RAFTLOG_DOOR, "with raftlog's Producer through its own listeners (odd-numbered users)"),
    ):
        print(
            f"  door {door + ':':<8} {sent_per_door[door]:>7,} events produced {how}, "
            f"{seen_per_door[door]:,} consumed"
        )
    print(
        f"  consumed  {seen:>10,} events in {consume_s:6.2f} s "
        f"({seen / max(consume_s, 1e-9):,.0f} events/s)"
    )
    for p in range(partitions):
        d = described[p]
        log_ends = ", ".join(f"{n}: {o:,}" for n, o in sorted((d.log_end_offsets or {}).items()))
        print(
            f"  partition {p}: {per_partition[p]:,} events, high watermark "
            f"{ends[TopicPartition(topic, p)]:,}, leader {d.leader}, ISR {list(d.isr)}"
            + (f", replica log ends {{{log_ends}}}" if log_ends else "")
        )
    leaders = collections.Counter(p["leader"] for p in cluster["partitions"] if p["topic"] == topic)
    print(
        f"  cluster: controller node {cluster['controller_id']}, Raft term "
        f"{cluster['quorum']['term']}, partition leaders per broker "
        + ", ".join(f"{n}: {c}" for n, c in sorted(leaders.items()))
    )
    print("  top pages: " + ", ".join(f"{page} {n:,}" for page, n in pages.most_common(4)))
    print(
        f"  spark: {spark_line} (both doors: {sent_per_door[KAFKA_DOOR]:,} + "
        f"{sent_per_door[RAFTLOG_DOOR]:,})"
    )
    ok = (
        seen == events
        and problems == 0
        and doors_ok
        and lag == 0
        and sum(ends[tp] - start[tp] for tp in tps) == events
    )
    print(
        f"  check: {'every event arrived once, in order per user' if ok else 'FAILED'}"
        + (
            ""
            if ok
            else f" ({problems} order problems, {misplaced} records in another partition than "
            f"murmur2 of their key, {seen:,}/{events:,} seen, per door {dict(seen_per_door)} "
            f"of {dict(sent_per_door)})"
        )
        + ("; Spark counted the same" if spark_ok else "; Spark's counts DIFFER")
    )
    return 0 if ok and spark_ok else 1


def _spark_diagnostics() -> str:
    """One line about what Spark ran on, for a failed Spark step."""
    from raftlog_spark.environment import java_major_version

    tmp = tempfile.gettempdir()
    free = shutil.disk_usage(tmp).free
    memory = "?"
    with contextlib.suppress(OSError), open("/sys/fs/cgroup/memory.max") as f:
        memory = f.read().strip()
    return (
        f"Spark ran with Java {java_major_version() or '?'}, PYSPARK_PYTHON="
        f"{os.environ.get('PYSPARK_PYTHON', '?')}, {free / 2**30:.1f} GiB free in {tmp}, "
        f"cgroup memory.max {memory}"
    )


def _spark_report(
    bootstrap: str,
    topic: str,
    start: dict[TopicPartition, int],
    pages: collections.Counter[str],
    spark: _SparkStarter,
) -> tuple[bool, str]:
    """Step 6: the Spark page-view job over exactly this run's events: from the offsets the run
    started at to the offsets group 'pageview-report' committed (replay from committed
    offsets). (ok, one summary line): ok if Spark's per-page counts equal the consumer's."""
    print("6. Spark reads the same events: this run's start offsets to the group's commits")
    from raftlog_spark import check_environment
    from raftlog_spark.jobs.pageviews import run_pageview_report

    problems = check_environment()
    if problems:
        raise RaftlogError("Spark cannot run here: " + "; ".join(problems))
    starting = json.dumps({topic: {str(tp.partition): o for tp, o in sorted(start.items())}})
    waited = time.monotonic()
    try:
        summary = run_pageview_report(
            bootstrap, topic, None, starting, "group:pageview-report", spark.session()
        )
    except Exception as e:  # Spark's (Py4J, PySpark) errors have no common base here
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        print(f"   the Spark job failed: {first}")
        print(f"   {_spark_diagnostics()}")
        raise
    summary["session_start_s"] = spark.start_s
    summary["session_wait_s"] = time.monotonic() - waited - summary["job_s"]
    # `pages` is what the consumer counted, both doors' events (step 4 checks it read every
    # event of each door): a Spark that read only one door's records counts fewer per page.
    ok = summary["pages"] == dict(pages)
    line = (
        f"{summary['events']:,} events over {len(summary['pages'])} pages in "
        f"{summary['job_s']:.1f} s (session start {summary['session_start_s']:.1f} s, "
        f"of which step 6 waited {summary['session_wait_s']:.1f} s), "
        + ("the same per-page counts as the consumer" if ok else "per-page counts DIFFER")
    )
    return ok, line
