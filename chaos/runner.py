"""The chaos runner: a recorded workload under a seeded fault schedule, then the checker.

`run(config)` does, in order (Redpanda's steady / fault / recovery phases, Jepsen's history):

1. starts a cluster of `nodes` combined nodes on the `backend`: "local" (chaos/local_cluster.py:
   processes on this host, each in its own network namespace when the schedule has network
   faults, chaos/netns.py) or "docker" (chaos/docker_cluster.py: docker/compose.yaml's three
   containers as a compose project of their own, network faults by iptables inside them; it
   refuses the link and disk kinds before starting anything), and creates the topic:
   `partitions` partitions, replication factor `replication_factor`, `min.insync.replicas`,
   unclean election as asked; with `compact`, a compacted topic (COMPACT_TOPIC_CONFIG) and
   cleaners that run often and slowly (COMPACT_NODE_SETTINGS), so that kills strike cleans;
2. runs the workload for `duration_s`, or longer while the nemesis is still applying the
   schedule (bounded by SCHEDULE_OVERRUN_S_MAX: a loaded machine still applies every fault):
   `producers` producer threads send unique values ("p<i>-<n>") with `acks` to every
   partition in turn at `rate` sends/s each (with `compact`, each record has a key, one of
   `compact_keys` per partition, and about `tombstone_ratio` of them are tombstones: a null
   value whose `id` header carries the unique value); `consumers` group members poll and
   commit every `commit_interval_s`; every operation is written to `history.jsonl`
   (chaos/history.py) with its invoke and completion;
3. meanwhile the nemesis thread applies the schedule (`faults.schedule(seed, ...)`): each
   fault is resolved when it starts, injected, and healed when its window ends, always;
4. after the workload: waits until every partition is led with its whole ISR again (bounded by
   `settle_s`), reads every partition from offset 0 to its high watermark ("final-read"),
   stops the nodes cleanly and reads every replica's log from its files ("replica-read"; on
   docker, from copies `docker cp` took of the stopped containers' log directories, before the
   project is removed with its volumes);
5. checks the history (chaos/checker.py) and writes `report.json` (the checker's report plus
   the run's configuration) and `report.png` (acknowledged sends per second and their latency
   over time, fault windows shaded).

Rules: the same seed and arguments give the same fault schedule (the workload's timing is the
machine's); a send that ends in an error is "info" (indeterminate: an earlier attempt may
have been appended), so the checker never counts a maybe-written record as certainly absent;
only a send the client refused before queueing it is "fail"; every thread stops at the
run's deadline and every fault heals before the final reads; the run's exit status is the
report's `valid`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos import checker, disk_faults
from chaos.docker_cluster import DockerCluster, refuse_unsupported
from chaos.faults import (
    DISK_KINDS,
    LINK_KINDS,
    MOVE_KINDS,
    NETWORK_KINDS,
    FaultError,
    FaultSpec,
    inject,
    resolve_role,
    schedule,
)
from chaos.history import HistoryWriter, op, read_history
from chaos.kafka_workers import KafkaConsumerWorker, KafkaProducerWorker
from chaos.link_faults import Links, inject_link
from chaos.local_cluster import LocalCluster
from chaos.move_faults import moved_replicas
from chaos.workload_thread import WorkloadThread
from raftlog.broker.logs import TOPIC_ID_FILE
from raftlog.client import Admin, Consumer, Producer
from raftlog.errors import RaftlogError
from raftlog.record_types import Record
from raftlog.records import iter_records
from raftlog.replication.manager import HIGH_WATERMARK_FILE, HIGH_WATERMARKS_FILE
from raftlog.storage.checkpoint import OffsetCheckpoint, PartitionOffsets
from raftlog.storage.cleaner import CLEANER_CHECKPOINT_FILE
from raftlog.storage.tools import scan_segment, segment_files
from raftlog.topics import TopicPartition

# A producer has at most this many sends in flight: memory stays bounded while a partition
# has no leader (its sends wait in the client until their delivery timeout).
IN_FLIGHT_MAX = 2000
# Every send resolves within the run: retried inside the client up to this, then indeterminate.
DELIVERY_TIMEOUT_MS = 20_000
# The same for librdkafka (message.timeout.ms), longer: when it expires on a request in flight,
# librdkafka bumps the idempotent producer's epoch and re-sends the rest of that request's
# records as new ones (its INTRODUCTION.md, "Message timeout considerations"), so records the
# partition holds are written again. raftlog's client keeps a timed-out batch's epoch and
# sequence; librdkafka recommends a large timeout (its default is 300 s).
KAFKA_DELIVERY_TIMEOUT_MS = 60_000
# How long the nodes get after the last fault to be whole again before the final reads.
SETTLE_S = 90.0
FINAL_READ_S = 120.0
# disk-full: the size of the tmpfs mounted over a target's log directory. A 60 s run writes
# about 2 MB per replica; 64 MiB leaves room for a ten-minute run before the filler comes.
SMALL_DISK_BYTES = 64 << 20
# bitflip: segments this small roll every few seconds at the workload's rate, so that a
# follower has old segments to damage early in a short run.
BITFLIP_SEGMENT_BYTES = 16384
# bitflip: one read of the damaged partition from offset 0 gives up after this.
SCRUB_READ_S = 10.0
# compact: the topic's configs. Small segments and a tiny dirty ratio make a segment cleanable,
# and cleaned, every few seconds at the workload's rate; delete.retention.ms (a day) outlasts
# every run, so a tombstone that is the last record of its key stays, as any last record does
# (the checker holds tombstones to the same rule: chaos/compaction_check.py).
COMPACT_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "16384",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(24 * 3600 * 1000),
}
# compact: the nodes' cleaners look for a due log every 150 ms and read and write at most
# 64 KiB/s, so a clean of a few 16 KiB segments takes about a second: kills and pauses strike
# cleans in progress and installs, not only the time between them.
COMPACT_NODE_SETTINGS = {"log_cleaner_backoff_ms": 150, "log_cleaner_io_bytes_per_s": 64 * 1024}
# The node log line of an installed clean (raftlog/broker/server.py `_clean`), counted per
# replica after the run: "<topic>-<partition>: cleaned offsets [a, b) ...".
CLEANED_LINE = ": cleaned offsets ["
# The workload outlasts `duration_s` by at most this while the nemesis is still applying the
# schedule (faults that waited for a node or a leader on a loaded machine); then it stops and
# the faults not applied are missing from the report's `faults`, counted in `faults_skipped`.
SCHEDULE_OVERRUN_S_MAX = 120.0


BACKENDS = ("local", "docker")
CLIENTS = ("raftlog", "kafka")


@dataclass
class RunConfig:
    out: Path
    backend: str = "local"  # one of BACKENDS
    duration_s: float = 60.0
    faults: tuple[str, ...] = ("kill", "pause", "isolate")
    seed: int = 0
    nodes: int = 3
    topic: str = "chaos"
    # The topic's partitions; a `reassign` fault that grows the topic raises it mid-run.
    partitions: int = 3
    replication_factor: int = 3
    acks: str = "all"
    min_insync: int = 2
    unclean: bool = False
    durability: str = "replication"
    producers: int = 2
    consumers: int = 2
    rate: float = 100.0  # sends per second per producer
    commit_interval_s: float = 1.0
    session_timeout_ms: int = 1500
    replica_lag_time_max_ms: int = 3000
    # The controller's automatic preferred-leader rebalance runs this often (raftlog dev's
    # 10 s, not the 300 s default): leaderships move back while faults strike, and a run
    # checks that those moves lose nothing either.
    leader_imbalance_check_interval_ms: int = 10_000
    # Schedule shape (chaos/faults.py defaults are for long runs; a short run scales them).
    steady_s: float | None = None
    fault_s: tuple[float, float] | None = None
    quiet_s: tuple[float, float] | None = None
    recovery_s: float | None = None
    progress: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    # Topic configs added to the run's own (e.g. {"segment.bytes": "16384"}).
    topic_config: dict[str, str] = field(default_factory=dict)
    # Whose client runs the workload: "raftlog" (its own) or "kafka" (confluent-kafka through
    # the brokers' Kafka listeners, chaos/kafka_workers.py).
    client: str = "raftlog"
    # A compacted topic (COMPACT_TOPIC_CONFIG), keyed records and the checker's compacted mode.
    compact: bool = False
    # compact: the keys each partition's records take ("k00", "k01", ...), and the share of
    # sends that are tombstones.
    compact_keys: int = 32
    tombstone_ratio: float = 0.05

    def schedule(self) -> list[FaultSpec]:
        kw: dict[str, Any] = {}
        if self.steady_s is not None:
            kw["steady_s"] = self.steady_s
        if self.fault_s is not None:
            kw["fault_s"] = self.fault_s
        if self.quiet_s is not None:
            kw["quiet_s"] = self.quiet_s
        if self.recovery_s is not None:
            kw["recovery_s"] = self.recovery_s
        return schedule(
            self.seed, self.duration_s, self.faults, list(range(1, self.nodes + 1)), **kw
        )

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        d["faults"] = list(self.faults)
        return d


def tp_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


class Recorder:
    """The history file plus a run clock and unique operation ids (thread-safe)."""

    def __init__(self, path: Path):
        self.writer = HistoryWriter(path)
        self.t0 = time.monotonic()
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 6)

    def new_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def invoke(self, process: str, f: str, value: Any = None, **extra: Any) -> int:
        i = self.new_id()
        self.writer.write(op(process, "invoke", f, self.now(), i, value, **extra))
        return i

    def complete(
        self, process: str, type_: str, f: str, i: int, value: Any = None, **extra: Any
    ) -> None:
        self.writer.write(op(process, type_, f, self.now(), i, value, **extra))

    def standalone(self, process: str, f: str, value: Any = None, **extra: Any) -> None:
        self.writer.write(
            op(process, "info" if f == "run" else "ok", f, self.now(), -1, value, **extra)
        )

    def close(self) -> None:
        self.writer.close()


# -- the workload -------------------------------------------------------------------------------


class ProducerWorker(WorkloadThread):
    def __init__(
        self, n: int, cfg: RunConfig, bootstrap: str, rec: Recorder, stop: threading.Event
    ):
        super().__init__(f"producer-{n}", stop)
        self.n, self.cfg, self.bootstrap, self.rec = n, cfg, bootstrap, rec
        self.acked = 0
        self.sent = 0
        self._room = threading.Semaphore(IN_FLIGHT_MAX)
        # compact: keys and tombstones are drawn from the run's seed (a run's workload replays).
        self._keys = random.Random(f"keys-{cfg.seed}-{n}")

    def _run(self) -> None:
        acks: str | int = "all" if self.cfg.acks == "all" else int(self.cfg.acks)
        producer = Producer(
            bootstrap_servers=self.bootstrap,
            acks=acks,
            linger_ms=1,
            delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
            request_timeout_ms=5000,
            retry_backoff_ms=50,
        )
        interval = 1.0 / self.cfg.rate
        next_at = time.monotonic()
        try:
            for seq in itertools.count():
                if self.stop.is_set():
                    break
                next_at += interval
                delay = next_at - time.monotonic()
                if delay > 0 and self.stop.wait(delay):
                    break
                while not self._room.acquire(timeout=0.1):
                    if self.stop.is_set():
                        return
                self._send(producer, seq)
            producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 10)
        finally:
            producer.close()

    def _send(self, producer: Producer, seq: int) -> None:
        partition = (seq + self.n) % self.cfg.partitions
        tp = f"{self.cfg.topic}-{partition}"
        value = f"p{self.n}-{seq}"
        extra: dict[str, Any] = {}
        key: bytes | None = None
        payload: bytes | None = value.encode()
        headers: list[tuple[str, bytes | None]] = []
        if self.cfg.compact:
            key_s = f"k{self._keys.randrange(self.cfg.compact_keys):02d}"
            key = key_s.encode()
            extra["key"] = key_s
            if self._keys.random() < self.cfg.tombstone_ratio:
                headers = [(TOMBSTONE_ID_HEADER, payload)]
                payload = None
                value = TOMBSTONE_PREFIX + value
        i = self.rec.invoke(self.process, "send", value, tp=tp, **extra)
        self.sent += 1
        try:
            fut = producer.send(
                self.cfg.topic, payload, key=key, headers=headers or None, partition=partition
            )
        except RaftlogError as e:
            # Refused before it was queued (no metadata within max_block_ms, a full buffer):
            # certainly not written.
            self._room.release()
            self.rec.complete(
                self.process, "fail", "send", i, value, tp=tp, error=str(e)[:200], **extra
            )
            return

        def done(f: Any) -> None:
            self._room.release()
            error = f.exception(0)
            if error is None:
                self.acked += 1
                self.rec.complete(
                    self.process, "ok", "send", i, value, tp=tp, offset=f.result(0).offset, **extra
                )
            else:
                self.rec.complete(
                    self.process, "info", "send", i, value, tp=tp, error=str(error)[:200], **extra
                )

        fut.add_done_callback(done)


class ConsumerWorker(WorkloadThread):
    GROUP = "chaos-group"

    def __init__(
        self, n: int, cfg: RunConfig, bootstrap: str, rec: Recorder, stop: threading.Event
    ):
        super().__init__(f"consumer-{n}", stop)
        self.n, self.cfg, self.bootstrap, self.rec = n, cfg, bootstrap, rec
        self.polled = 0

    def _run(self) -> None:
        consumer = Consumer(
            self.cfg.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.GROUP,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            request_timeout_ms=5000,
        )
        assignment: set[TopicPartition] = set()
        next_commit = time.monotonic() + self.cfg.commit_interval_s
        try:
            while not self.stop.is_set():
                i = self.rec.invoke(self.process, "poll", group=self.GROUP)
                try:
                    batch = consumer.poll(timeout_ms=300)
                except RaftlogError as e:
                    self.rec.complete(
                        self.process, "info", "poll", i, group=self.GROUP, error=str(e)[:200]
                    )
                    continue
                now_assigned = set(consumer.assignment())
                if now_assigned != assignment:
                    assignment = now_assigned
                    self.rec.standalone(
                        self.process,
                        "assign",
                        sorted(tp_name(tp) for tp in assignment),
                        group=self.GROUP,
                    )
                value = {
                    tp_name(tp): [entry(r, self.cfg.compact) for r in records]
                    for tp, records in batch.items()
                }
                self.polled += sum(len(v) for v in value.values())
                self.rec.complete(self.process, "ok", "poll", i, value, group=self.GROUP)
                if time.monotonic() >= next_commit and assignment:
                    next_commit = time.monotonic() + self.cfg.commit_interval_s
                    self._commit(consumer, assignment)
        finally:
            with contextlib.suppress(RaftlogError):
                consumer.close()

    def _commit(self, consumer: Consumer, assignment: set[TopicPartition]) -> None:
        offsets = {tp: consumer.position(tp) for tp in sorted(assignment)}
        value = {tp_name(tp): o for tp, o in offsets.items()}
        i = self.rec.invoke(self.process, "commit", value, group=self.GROUP)
        try:
            consumer.commit(offsets)
        except RaftlogError as e:
            self.rec.complete(
                self.process, "info", "commit", i, value, group=self.GROUP, error=str(e)[:200]
            )
            return
        self.rec.complete(self.process, "ok", "commit", i, value, group=self.GROUP)


@dataclass
class Targets:
    """What the nemesis breaks: the nodes, and the network, proxies and small disks if any."""

    cluster: LocalCluster | DockerCluster
    topic: str
    network: Any = None
    links: Links | None = None
    disks: dict[int, disk_faults.SmallDisk] = field(default_factory=dict)
    # Told the topic's new partition count when a `reassign` fault grows it.
    grown: Callable[[int], None] = lambda count: None
    # The topic is compacted: reads record keys (`entry`).
    compact: bool = False


class Nemesis(threading.Thread):
    """Applies the schedule; each fault is healed when its window ends, or at once on stop."""

    def __init__(
        self,
        specs: list[FaultSpec],
        targets: Targets,
        rec: Recorder,
        stop: threading.Event,
        bootstrap: str,
    ):
        super().__init__(name="nemesis", daemon=True)
        self.specs, self.targets, self.rec, self.stop = specs, targets, rec, stop
        self.bootstrap = bootstrap
        self.cluster = targets.cluster
        self.applied: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.started = time.monotonic()  # the schedule's time 0: set again when the run starts

    def run(self) -> None:
        try:
            for spec in self.specs:
                delay = spec.start_s - (time.monotonic() - self.started)
                if delay > 0 and self.stop.wait(delay):
                    return
                if self.stop.is_set():
                    return
                self._one(spec)
        except BaseException as e:
            self.error = e

    def _one(self, spec: FaultSpec) -> None:
        if spec.role:
            live = next(iter(n for n in self.cluster.node_ids() if self.cluster.pid(n)), 1)
            spec = resolve_role(spec, self.cluster.describe(live), _rng(spec))
        i = self.rec.invoke("nemesis", "fault", spec.to_json())
        ends_at = time.monotonic() + spec.duration_s
        result: Any = None
        try:
            with self._inject(spec, ends_at) as result:
                self.stop.wait(max(ends_at - time.monotonic(), 0))
        except FaultError as e:
            self.rec.complete("nemesis", "info", "fault", i, spec.to_json(), error=str(e)[:500])
            self.applied.append({**spec.to_json(), "error": str(e)})
            return
        done = spec.to_json()
        if result is not None and not isinstance(result, FaultSpec):
            done["result"] = result
        self.rec.complete("nemesis", "ok", "fault", i, done)
        self.applied.append(done)

    def _inject(self, spec: FaultSpec, ends_at: float) -> contextlib.AbstractContextManager[Any]:
        """The injector for the spec's kind (chaos/faults.py, link_faults.py, disk_faults.py)."""
        t = self.targets
        if spec.kind in LINK_KINDS:
            if t.links is None:
                raise FaultError("fault link: the run has no proxies (link not in its faults)")
            return inject_link(spec, t.links)
        if spec.kind in MOVE_KINDS:
            return moved_replicas(spec, t.cluster, t.topic, _rng(spec), t.grown)
        if spec.kind in DISK_KINDS and not isinstance(t.cluster, LocalCluster):
            raise FaultError(f"fault {spec.kind}: local backend only")
        if spec.kind == "disk-full":
            return disk_faults.full_disks(spec, t.disks)
        if spec.kind == "torn-tail":
            return disk_faults.torn_tails(spec, t.cluster, t.topic, _rng(spec))
        if spec.kind == "bitflip":

            def window_over(wait_s: float) -> bool:
                left = ends_at - time.monotonic()
                return left <= 0 or self.stop.wait(min(wait_s, left))

            return disk_faults.flipped_follower(
                spec, t.cluster, t.topic, _rng(spec), self._scrub, window_over
            )
        assert spec.kind not in DISK_KINDS, spec.kind
        return inject(spec, t.cluster, t.network)

    def _scrub(self, tp: str) -> None:
        """Read `tp` from offset 0 to its high watermark, recorded as a new assignment's poll
        (the checker compares every value it returns with what was acknowledged there)."""
        topic, _, partition = tp.rpartition("-")
        self.rec.standalone("scrubber", "assign", [tp], group="scrubber")
        i = self.rec.invoke("scrubber", "poll", group="scrubber")
        try:
            value = final_read(
                self.bootstrap, topic, [int(partition)], SCRUB_READ_S, self.targets.compact
            )
        except (RaftlogError, RuntimeError) as e:
            self.rec.complete("scrubber", "info", "poll", i, group="scrubber", error=str(e)[:200])
            return
        self.rec.complete("scrubber", "ok", "poll", i, value, group="scrubber")


def _rng(spec: FaultSpec) -> random.Random:
    """The role's choice (a random follower, ...) is seeded by the fault: runs replay."""
    return random.Random(f"{spec.kind}-{spec.start_s}")


# -- after the workload -------------------------------------------------------------------------


def wait_whole(
    cluster: LocalCluster | DockerCluster, topic: str, timeout_s: float
) -> dict[str, Any] | None:
    """The first view in which every partition of `topic` is led with all replicas in sync."""

    def whole(view: dict[str, Any]) -> bool:
        parts = [p for p in view["partitions"] if p["topic"] == topic]
        return bool(parts) and all(
            p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"]) for p in parts
        )

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for n in cluster.node_ids():
            try:
                view = cluster.describe(n)
            except RaftlogError:
                continue
            if view["quorum"]["this_node_leads"] and whole(view):
                return view
        time.sleep(0.2)
    return None


# A tombstone (a null value) is recorded as this prefix and the unique value its
# TOMBSTONE_ID_HEADER carries; a producer never sends a value that starts with it.
TOMBSTONE_PREFIX = "~"
TOMBSTONE_ID_HEADER = "id"


def entry(r: Record, compact: bool) -> list[Any]:
    """A record as the history holds it: [offset, value], or in a compacted run [offset,
    value, key] with a tombstone's value TOMBSTONE_PREFIX + its id header (chaos/history.py)."""
    if not compact:
        return [r.offset, (r.value or b"").decode()]
    if r.value is None:
        ids = [v for k, v in r.headers if k == TOMBSTONE_ID_HEADER]
        value = TOMBSTONE_PREFIX + (ids[0] or b"").decode() if ids else TOMBSTONE_PREFIX
    else:
        value = r.value.decode()
    return [r.offset, value, None if r.key is None else r.key.decode()]


def final_read(
    bootstrap: str,
    topic: str,
    partitions: int | list[int],
    timeout_s: float,
    compact: bool = False,
) -> dict[str, Any]:
    """Every partition (or those listed) from offset 0 to its high watermark:
    {tp: [[offset, value], ...]} ([offset, value, key] with `compact`)."""
    numbers = range(partitions) if isinstance(partitions, int) else partitions
    tps = [TopicPartition(topic, p) for p in numbers]
    out: dict[str, list[list[Any]]] = {tp_name(tp): [] for tp in tps}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise RuntimeError(f"final read: not at the end after {timeout_s:g} s")
            for tp, records in consumer.poll(timeout_ms=500).items():
                out[tp_name(tp)].extend(entry(r, compact) for r in records)
    return out


def read_replica(path: Path, compact: bool = False) -> tuple[list[list[Any]], int, int]:
    """A stopped replica's records from its files: ([[offset, value], ...], HW, log end);
    [offset, value, key] with `compact`."""
    records: list[list[Any]] = []
    for _base, seg in segment_files(str(path)):
        for b in scan_segment(seg):
            if b.error is not None:
                break
            records.extend(entry(r, compact) for r in iter_records(b.data))
    leo = records[-1][0] + 1 if records else 0
    return records, replica_high_watermark(path), leo


def replica_high_watermark(path: Path) -> int:
    """A stopped replica's high watermark: its broker's entry for the partition in the one
    checkpoint file beside `logs/` (HIGH_WATERMARKS_FILE), if the entry's topic id is the
    replica's; else the per-partition file of earlier versions; else 0. (The suite read only
    the per-partition file, which brokers no longer write, so every replica read 0 and the
    replica checks below the high watermark compared nothing.)"""
    topic, _, partition = path.name.rpartition("-")
    entries = PartitionOffsets(str(path.parent.parent / HIGH_WATERMARKS_FILE)).read()
    found = entries.get((topic, int(partition)))
    id_file = path / TOPIC_ID_FILE
    topic_id = id_file.read_bytes().decode("ascii", "replace").strip() if id_file.exists() else ""
    if found is not None and (not topic_id or found[0] == topic_id):
        return found[1]
    return OffsetCheckpoint(str(path / HIGH_WATERMARK_FILE)).read() or 0


def cleaner_state(
    cluster: LocalCluster | DockerCluster, node_id: int, path: Path, tp: str
) -> dict[str, Any]:
    """What a replica's cleaner did: where its last clean ended (its cleaner checkpoint; None
    if it never cleaned) and, on the local backend, how many cleans its node logged for `tp`
    over all its incarnations (None elsewhere: the docker backend keeps no node log files)."""
    checkpoint = OffsetCheckpoint(str(path / CLEANER_CHECKPOINT_FILE)).read()
    cleans: int | None = None
    if isinstance(cluster, LocalCluster):
        needle = f"{tp}{CLEANED_LINE}"
        cleans = 0
        for err in cluster.nodes[node_id].err_paths:
            if err.exists():
                with open(err, encoding="utf-8", errors="replace") as f:
                    cleans += sum(1 for line in f if needle in line)
    return {"cleaned_to": checkpoint, "cleans": cleans}


# -- the run ------------------------------------------------------------------------------------


def _say(cfg: RunConfig, text: str) -> None:
    if cfg.progress:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


@contextlib.contextmanager
def _network(cfg: RunConfig) -> Iterator[Any]:
    if not any(k in NETWORK_KINDS for k in cfg.faults):
        yield None
        return
    from chaos import netns

    reason = netns.available()
    if reason:
        raise FaultError(f"network faults need network namespaces: {reason}")
    with netns.network(list(range(1, cfg.nodes + 1))) as net:
        yield net


@contextlib.contextmanager
def _links(cfg: RunConfig) -> Iterator[Links | None]:
    """The proxies of link faults: on TOXIPROXY_URL's Toxiproxy, or on our own server."""
    if not any(k in LINK_KINDS for k in cfg.faults):
        yield None
        return
    if any(k in NETWORK_KINDS for k in cfg.faults):
        # The proxies listen on the host: traffic through them would pass a partition's rules.
        raise FaultError("link faults cannot share a run with network faults (namespaces)")
    with Links.open(os.environ.get("TOXIPROXY_URL")) as links:
        yield links


@contextlib.contextmanager
def _small_disks(
    cluster: LocalCluster, specs: list[FaultSpec]
) -> Iterator[dict[int, disk_faults.SmallDisk]]:
    """A small tmpfs over the log directory of every disk-full target, before it starts;
    unmounted on exit (after the replica reads, which read them)."""
    nodes = sorted({n for s in specs if s.kind == "disk-full" for n in s.targets})
    with contextlib.ExitStack() as stack:
        disks: dict[int, disk_faults.SmallDisk] = {}
        for n in nodes:
            path = cluster.nodes[n].config_path.parent / "logs"
            path.mkdir(parents=True, exist_ok=True)
            disks[n] = stack.enter_context(disk_faults.SmallDisk(path, SMALL_DISK_BYTES))
        yield disks


def _cluster(
    cfg: RunConfig, stack: contextlib.ExitStack
) -> tuple[LocalCluster | DockerCluster, Any, Links | None]:
    """The run's cluster on its backend, the network its network faults go through, and the
    proxies of its link faults (local only)."""
    settings = {
        "replica_lag_time_max_ms": cfg.replica_lag_time_max_ms,
        "leader_imbalance_check_interval_ms": cfg.leader_imbalance_check_interval_ms,
        **(COMPACT_NODE_SETTINGS if cfg.compact else {}),
        **cfg.extra,
    }
    if cfg.backend == "docker":
        docker = DockerCluster(cfg.out / "cluster", cfg.nodes, cfg.session_timeout_ms, settings)
        return docker, docker.network, None
    net = stack.enter_context(_network(cfg))
    links = stack.enter_context(_links(cfg))
    local = LocalCluster(
        cfg.out / "cluster",
        cfg.nodes,
        network=net,
        session_timeout_ms=cfg.session_timeout_ms,
        settings=settings,
        advertise=links.proxy if links is not None else None,
    )
    return local, net, links


def run(cfg: RunConfig) -> dict[str, Any]:
    """One chaos run; returns the report (also written to OUT/report.json). FaultError before
    anything starts when the backend cannot run the asked fault kinds."""
    if cfg.backend not in BACKENDS:
        raise FaultError(f"backend {cfg.backend!r}: must be one of {', '.join(BACKENDS)}")
    if cfg.client not in CLIENTS:
        raise FaultError(f"client {cfg.client!r}: must be one of {', '.join(CLIENTS)}")
    if cfg.backend == "docker":
        refuse_unsupported(cfg.faults, cfg.nodes)
    if cfg.compact and cfg.client != "raftlog":
        # kafka_workers.py sends no keys: a compacted topic would refuse every record.
        raise FaultError("a compacted run (compact) needs raftlog's client")
    cfg.out.mkdir(parents=True, exist_ok=True)
    history = cfg.out / "history.jsonl"
    if history.exists():
        history.unlink()
    specs = cfg.schedule()
    rec = Recorder(history)
    rec.standalone(
        "runner",
        "run",
        {
            "seed": cfg.seed,
            "compact": cfg.compact,
            "config": cfg.to_json(),
            "schedule": [s.to_json() for s in specs],
        },
    )
    problems: list[str] = []
    workers: list[Any] = []
    applied = 0
    with contextlib.ExitStack() as stack:
        cluster, net, links = _cluster(cfg, stack)
        disks = (
            stack.enter_context(_small_disks(cluster, specs))
            if isinstance(cluster, LocalCluster)
            else {}
        )
        try:
            _say(
                cfg,
                f"chaos: starting {cfg.nodes} nodes ({cfg.backend}) under {cfg.out / 'cluster'}",
            )
            if isinstance(cluster, DockerCluster):
                cluster.prepare(cfg.faults)
            cluster.start()
            _create_topic(cluster, cfg)
            _say(
                cfg,
                f"chaos: {len(specs)} faults over {cfg.duration_s:g} s, seed {cfg.seed}: "
                + ", ".join(f"{s.kind}@{s.start_s:g}s" for s in specs),
            )
            stop = threading.Event()
            workers = _workers(cfg, cluster, rec, stop)
            targets = Targets(
                cluster, cfg.topic, net, links, disks, _grow_workload(cfg), cfg.compact
            )
            nemesis = Nemesis(specs, targets, rec, stop, cluster.bootstrap)
            nemesis.started = time.monotonic()  # the schedule counts from here
            for w in [*workers, nemesis]:
                w.start()
            _progress_until(cfg, nemesis.started, rec, workers, nemesis, stop)
            stop.set()
            nemesis.join(120)
            applied = len(nemesis.applied)
            for w in workers:
                w.join(max(DELIVERY_TIMEOUT_MS, KAFKA_DELIVERY_TIMEOUT_MS) / 1000 + 60)
            for t in [*workers, nemesis]:
                if t.is_alive():
                    problems.append(f"{t.name} did not stop")
                if t.error is not None:
                    problems.append(f"{t.name} failed: {t.error!r}")
            _say(cfg, "chaos: workload over; waiting for every partition to be whole again")
            view = wait_whole(cluster, cfg.topic, SETTLE_S)
            if view is None:
                problems.append(f"partitions not whole {SETTLE_S:g} s after the last fault")
            try:
                reads = final_read(
                    cluster.bootstrap, cfg.topic, cfg.partitions, FINAL_READ_S, cfg.compact
                )
                rec.standalone("final-reader", "final-read", reads)
            except (RaftlogError, RuntimeError) as e:
                problems.append(f"final read failed: {e}")
            isr = {
                (p["topic"], p["partition"]): p["isr"] for p in (view or {}).get("partitions", [])
            }
        finally:
            problems.extend(cluster.close())
        for n in cluster.node_ids():
            for p in range(cfg.partitions):
                path = cluster.partition_dir(n, f"{cfg.topic}-{p}")
                if not path.is_dir():
                    continue
                records, hw, leo = read_replica(path, cfg.compact)
                tp = f"{cfg.topic}-{p}"
                cleaning = cleaner_state(cluster, n, path, tp) if cfg.compact else {}
                rec.standalone(
                    "replica-reader",
                    "replica-read",
                    records,
                    node=n,
                    tp=f"{cfg.topic}-{p}",
                    high_watermark=hw,
                    log_end_offset=leo,
                    isr=isr.get((cfg.topic, p), []),
                    **cleaning,
                )
    rec.close()
    report = checker.check(read_history(history))
    report["config"] = cfg.to_json()
    report["problems"] = problems
    report["faults_skipped"] = len(specs) - applied
    if problems:
        report["valid"] = False
        report["invalid_because"] = [*report["invalid_because"], "run_problems"]
    (cfg.out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    plot(history, cfg.out / "report.png", report)
    return report


def _workers(
    cfg: RunConfig, cluster: LocalCluster | DockerCluster, rec: Recorder, stop: threading.Event
) -> list[Any]:
    """The workload's producer and consumer threads, with the run's client."""
    producers = range(1, cfg.producers + 1)
    consumers = range(1, cfg.consumers + 1)
    if cfg.client == "kafka":
        kafka = cluster.kafka_bootstrap
        return [
            *(
                KafkaProducerWorker(n, cfg, kafka, rec, stop, KAFKA_DELIVERY_TIMEOUT_MS)
                for n in producers
            ),
            *(KafkaConsumerWorker(n, cfg, kafka, rec, stop) for n in consumers),
        ]
    return [
        *(ProducerWorker(n, cfg, cluster.bootstrap, rec, stop) for n in producers),
        *(ConsumerWorker(n, cfg, cluster.bootstrap, rec, stop) for n in consumers),
    ]


def _grow_workload(cfg: RunConfig) -> Callable[[int], None]:
    """What a `reassign` fault calls once it grew the topic: the producers send to every
    partition from now on, and the final read and replica reads cover them all (they read
    `cfg.partitions`)."""

    def grown(count: int) -> None:
        cfg.partitions = max(cfg.partitions, count)

    return grown


def _create_topic(cluster: LocalCluster | DockerCluster, cfg: RunConfig) -> None:
    config = {"min.insync.replicas": str(cfg.min_insync), "durability.policy": cfg.durability}
    if "bitflip" in cfg.faults:
        config["segment.bytes"] = str(BITFLIP_SEGMENT_BYTES)
    if cfg.compact:
        config.update(COMPACT_TOPIC_CONFIG)
    config.update(cfg.topic_config)
    if cfg.unclean:
        config["unclean.leader.election.enable"] = "true"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(cfg.topic, cfg.partitions, cfg.replication_factor, config)
    if wait_whole(cluster, cfg.topic, 60) is None:
        raise FaultError(f"topic {cfg.topic} not led with a full ISR 60 s after its creation")


def _progress_until(
    cfg: RunConfig,
    started: float,
    rec: Recorder,
    workers: list[Any],
    nemesis: Nemesis,
    stop: threading.Event,
) -> None:
    end = started + cfg.duration_s
    overrun_end = end + SCHEDULE_OVERRUN_S_MAX
    said = started
    while True:
        now = time.monotonic()
        # The workload goes on past `duration_s` until the nemesis has applied and healed the
        # whole schedule (on a loaded machine faults take longer to apply), up to a bound.
        if now >= end and (not nemesis.is_alive() or now >= overrun_end):
            return
        if stop.wait(min(2.0, end - now) if now < end else 0.25):
            return
        if time.monotonic() - said < 1.9:
            continue
        said = time.monotonic()
        # Either client's workers (runner.py's, kafka_workers.py's) count the same way.
        acked = sum(getattr(w, "acked", 0) for w in workers)
        sent = sum(getattr(w, "sent", 0) for w in workers)
        polled = sum(getattr(w, "polled", 0) for w in workers)
        faults = len(nemesis.applied)
        _say(
            cfg,
            f"chaos: {said - started:6.1f}/{cfg.duration_s:g} s  sent {sent}  "
            f"acked {acked}  polled {polled}  faults done {faults}/{len(nemesis.specs)}",
        )


# -- the plot -----------------------------------------------------------------------------------


def plot(history: Path, out: Path, report: dict[str, Any]) -> bool:
    """Acknowledged sends per second and send latency over time, fault windows shaded."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    invoked: dict[int, float] = {}
    acks: list[tuple[float, float]] = []
    for o in read_history(history):
        if o.f != "send":
            continue
        if o.type == "invoke":
            invoked[o.id] = o.time
        elif o.type == "ok" and o.id in invoked:
            acks.append((o.time, o.time - invoked[o.id]))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    if acks:
        end = int(max(t for t, _ in acks)) + 1
        per_s = [0] * (end + 1)
        for t, _ in acks:
            per_s[int(t)] += 1
        ax1.plot(range(len(per_s)), per_s, drawstyle="steps-post", lw=1)
        ax2.scatter([t for t, _ in acks], [lat * 1000 for _, lat in acks], s=1)
        ax2.set_yscale("log")
    for f in report.get("faults", []):
        start, healed = f.get("started_s"), f.get("healed_s")
        if start is None:
            continue
        for ax in (ax1, ax2):
            ax.axvspan(start, healed if healed is not None else start + 1, color="red", alpha=0.15)
        ax1.annotate(f.get("kind", "?"), (start, 0), fontsize=7, rotation=90, va="bottom")
    ax1.set_ylabel("acknowledged sends / s")
    ax2.set_ylabel("send latency (ms)")
    ax2.set_xlabel("seconds since the run started")
    verdict = (
        "valid"
        if report.get("valid")
        else "INVALID: " + ", ".join(report.get("invalid_because", []))
    )
    fig.suptitle(
        f"chaos run, seed {report.get('seed')}: {verdict}; "
        f"max unavailability {report.get('max_unavailability_s')} s"
    )
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return True


def summary(report: dict[str, Any]) -> str:
    keys = (
        "acknowledged",
        "lost",
        "unseen",
        "duplicated",
        "inconsistent_offsets",
        "nonmonotonic_send",
        "nonmonotonic_poll",
        "committed_offset_regressions",
        "replica_divergence",
        "max_unavailability_s",
        "max_partition_unavailability_s",
    )
    head = "VALID" if report["valid"] else "INVALID (" + ", ".join(report["invalid_because"]) + ")"
    return head + ": " + ", ".join(f"{k} {report.get(k)}" for k in keys)
