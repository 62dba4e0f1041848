"""Reassignment benchmark: how long moving one replica of a 1 GB partition takes, with and
without a replication throttle, and what the move costs a producer meanwhile.

Run from the repository root::

    .venv/bin/python -m bench.reassign_bench                          # 1 GB, 3 rounds, 50 MB/s
    .venv/bin/python -m bench.reassign_bench --quick                  # 20 MB, 1 round, 5 MB/s
    .venv/bin/python -m bench.reassign_bench --size-mb 256 --throttle-mb 20 --rounds 5

MB is 2^20 bytes throughout (sizes, the throttle, the rates).

The bench starts its own four-node local cluster (raftlog/launcher.py, the configs `raftlog
dev --nodes 4 --controllers 3` would write: nodes 1-3 controller+broker voters, node 4
broker-only; data on a real disk, bench/common.py's default_base_dir). Nodes 1-3 start first
and get two topics, each one partition, RF 3, min.insync.replicas 2, so both live on brokers
1-3 and node 4 is the spare; then node 4 starts:

- `moving`: filled with `--size-mb` of 10 KB values by `Producer.send_many`, acks=all, as fast
  as it goes (the fill ends with three full replicas; its rate is reported), then the ISR is
  waited for.
- `load`: a steady producer (1 KB values, acks=all, at most 16 chunks of 64 records in
  flight, as fast as acknowledgements allow, or `--load-mb` MB/s) runs from the first
  measurement to the last; its acknowledged records and bytes are counted in time (1 s buckets
  for the plot, exact windows for the figures). It is a second topic, not the moving
  partition, so the partition to copy holds the same bytes in every move (copy MB/s =
  partition bytes / time, comparable across rounds), and so the move can end at all: a
  producer writing faster than the throttle into the moving partition keeps the joining
  replica out of the ISR for ever (as in Kafka). Its leader is made the moving partition's
  leader (a reorder and a preferred election if the controller placed it elsewhere), so
  producer and copy share the leader's CPU and disk: the case the throttle is for.
  retention.bytes keeps it from filling the disk.

For each of `--rounds` rounds, each mode (unthrottled, then throttled at `--throttle-mb` MB/s;
the order alternates by round so that a drift of the shared machine does not always favour the
same mode) moves one follower of `moving` (not its leader) to broker 4 ("out"), then back to
the broker it came from ("back"), the throttle passed in the same command as the move
(`Admin.alter_partition_reassignments(..., throttle=N)`; 0 for unthrottled removes it). Every
move is measured the same way; the out moves are the headline (the joining broker is the
broker-only node), the back moves are reported beside them. Per move:

- time to move: from sending the reassignment until the cluster's view (`describe_cluster`,
  polled every 50 ms) shows the target replicas, all in the ISR, nothing adding or removing;
- copy MB/s: the partition's bytes (its segment files on the leader) / that time; bytes
  copied over time from the joining replica's segment files, sampled every 0.1 s;
- the producer's acknowledged records/s and MB/s during the move against the `--baseline-s`
  window just before it (same run; each move waits first until the leaving replica's log is
  deleted, so no deletion falls in a baseline), and the MB it forwent: (baseline - during)
  x the move's time, what the move cost it in all.

Results: a markdown table (median, min and max per mode and direction; ratios throttled /
unthrottled and producer during / baseline) on stdout and in
bench/results/reassign-<timestamp>.md, every move in .json (with its samples), and a plot in
.png (bytes copied over time per mode; the producer's MB/s over the run with the moves
shaded; skipped with a note without matplotlib). Progress goes to stderr; the nodes' logs to
<data dir>/logs (removed with the data unless `--keep-data`).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import common
from bench.common import REPO, report_head
from raftlog import launcher
from raftlog.client import Admin, Producer, RecordFuture
from raftlog.errors import RaftlogError
from raftlog.launcher import LaunchError, PortPlan
from raftlog.topics import TopicPartition

MB = 1 << 20
MODES = ("unthrottled", "throttled")
DIRECTIONS = ("out", "back")
NODES = 4
CONTROLLERS = 3
SPARE = 4  # the broker-only node, which holds no replica until a move puts one there
TOPIC = "moving"
LOAD_TOPIC = "load"
TP = TopicPartition(TOPIC, 0)
LOAD_TP = TopicPartition(LOAD_TOPIC, 0)
HOST = launcher.LOOPBACK

FILL_VALUE_BYTES = 10 * 1024
FILL_CHUNK_RECORDS = 100  # values per send_many: 1,000 KB
# Large batches: the fill is a bulk load, and fewer batches cost the producer less CPU.
FILL_BATCH_BYTES = 1_000_000
LOAD_VALUE_BYTES = 1024
LOAD_CHUNK_RECORDS = 64  # values per send_many: 64 KB
# Chunks the load keeps unacknowledged at most: 1 MB, a few batches per request, so the
# producer is steady without a deep queue whose acknowledgements would come in bursts.
LOAD_CHUNKS_IN_FLIGHT = 16
# The load topic keeps at most about this much per replica (plus a segment and one retention
# check's worth), whatever the run's length.
LOAD_RETENTION_BYTES = 256 * MB
LOAD_SEGMENT_BYTES = 64 * MB
RETENTION_CHECK_MS = 5_000

POLL_S = 0.05  # describe_cluster polls: one small request each, 20 a second
DISK_SAMPLE_S = 0.1
SETTLE_TIMEOUT_S = 120.0
# A move has failed if it has not completed in this long plus this many seconds per MB to
# copy (a 1 GB move at 1 MB/s: far slower than any throttle this bench sets).
MOVE_TIMEOUT_BASE_S = 60.0
MOVE_TIMEOUT_S_PER_MB = 1.0
ADMIN_TIMEOUT_MS = 10_000

_T0 = time.perf_counter()


def now() -> float:
    """Seconds since the bench started (every time in the results is on this clock)."""
    return time.perf_counter() - _T0


def progress(message: str) -> None:
    print(f"[reassign-bench {now():6.1f} s] {message}", file=sys.stderr, flush=True)


def wait_until(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll `check` every POLL_S until it returns something truthy; that value. RuntimeError
    naming `what` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise RuntimeError(f"not reached after {timeout_s:.0f} s: {what}")
        time.sleep(POLL_S)


def segment_bytes(partition_dir: Path) -> int:
    """Bytes in a partition directory's segment files (.log; not the indices): what was
    copied. 0 for a directory that does not exist (yet, or any more)."""
    total = 0
    try:
        with os.scandir(partition_dir) as it:
            for entry in it:
                if entry.name.endswith(".log"):
                    try:
                        total += entry.stat().st_size
                    except FileNotFoundError:
                        continue  # a segment deleted under us
    except FileNotFoundError:
        return 0
    return total


# -- the cluster ------------------------------------------------------------------------------


class Cluster:
    """Nodes 1..4 on 127.0.0.1 (1-3 voters, 4 broker-only), each `raftlog node --config`,
    started by the launcher in its own session (a Ctrl-C reaches only the bench, which then
    stops the nodes), each start logging to DIR/logs/node-<id>-<k>.err."""

    def __init__(self, work: str, log_level: str):
        ports = PortPlan.picked(NODES, HOST)
        self.settings = launcher.cluster_settings(
            work,
            ports,
            settings={
                "auto_create_topics": False,
                # The load topic's retention.bytes must act within seconds, not 5 minutes.
                "retention_check_interval_ms": RETENTION_CHECK_MS,
            },
            controllers=CONTROLLERS,
        )
        paths = []
        for node in self.settings:
            path = launcher.node_dir(work, node["node_id"]) / "node.toml"
            path.parent.mkdir(parents=True, exist_ok=True)
            launcher.write_node_config(path, node)
            paths.append(path)
        self.local = launcher.LocalCluster(
            paths,
            [f"{HOST}:{p}" for p in ports.client],
            log_dir=os.path.join(work, "logs"),
            log_level=log_level,
            cwd=REPO,
            new_session=True,
        )

    @property
    def bootstrap(self) -> str:
        return self.local.bootstrap

    def start(self, *node_ids: int) -> None:
        try:
            self.local.start(*node_ids)
        except LaunchError as e:
            tails = "\n".join(self.local.nodes[i].log_tail() for i in node_ids)
            raise RuntimeError(f"{e}; the logs end with:\n{tails}") from None

    def partition_dir(self, node_id: int, topic: str = TOPIC) -> Path:
        return Path(self.settings[node_id - 1]["data_dir"]) / "logs" / f"{topic}-0"

    def close(self) -> list[str]:
        return self.local.close(20.0)


def partition_view(d: dict[str, Any], topic: str = TOPIC) -> dict[str, Any] | None:
    return next((p for p in d["partitions"] if p["topic"] == topic), None)


def wait_view(
    admin: Admin, predicate: Callable[[dict[str, Any]], bool], timeout_s: float, what: str
) -> dict[str, Any]:
    """Poll describe_cluster until its view satisfies `predicate`; that view."""
    last: list[dict[str, Any]] = []

    def check() -> dict[str, Any] | None:
        try:
            d = admin.describe_cluster()
        except RaftlogError:
            return None  # a node busy or between connections: asked again next poll
        last[:] = [d]
        return d if predicate(d) else None

    try:
        return wait_until(check, timeout_s, what)  # type: ignore[no-any-return]
    except RuntimeError as e:
        partitions = last[0]["partitions"] if last else None
        raise RuntimeError(f"{e}; last partitions: {partitions}") from None


def brokers_up(n: int) -> Callable[[dict[str, Any]], bool]:
    def ok(d: dict[str, Any]) -> bool:
        live = [b for b in d["brokers"] if not b["fenced"]]
        return len(live) >= n

    return ok


def in_sync(topic: str, replicas: Sequence[int] | None = None) -> Callable[[dict[str, Any]], bool]:
    """The partition settled: `replicas` (any 3 if None) all in the ISR, no move under way."""

    def ok(d: dict[str, Any]) -> bool:
        p = partition_view(d, topic)
        if p is None or p["adding"] or p["removing"] or p["leader"] < 0:
            return False
        if replicas is not None and list(p["replicas"]) != list(replicas):
            return False
        return len(p["replicas"]) == 3 and sorted(p["isr"]) == sorted(p["replicas"])

    return ok


# -- the producer load ------------------------------------------------------------------------


class Load:
    """A steady acks=all producer to `load`-0 in a thread of its own: at most
    LOAD_CHUNKS_IN_FLIGHT chunks unacknowledged (and, with `rate_bytes_per_s`, no faster than
    that). `acks` holds (time, records) per chunk, when its last record was acknowledged (a
    partition's batches are acknowledged in order, so the chunk is then complete)."""

    def __init__(self, bootstrap: str, rate_bytes_per_s: float | None):
        self.bootstrap = bootstrap
        self.rate_bytes_per_s = rate_bytes_per_s
        self.acks: list[tuple[float, int]] = []  # grows by ~1,000 entries per second at most
        self.failed_chunks = 0
        self.error: BaseException | None = None
        self.started_at = 0.0
        self._stop = threading.Event()
        self._slots = threading.Semaphore(LOAD_CHUNKS_IN_FLIGHT)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="reassign-bench-load", daemon=True)

    def start(self) -> None:
        self.started_at = now()
        self._thread.start()

    def _run(self) -> None:
        values = [os.urandom(LOAD_VALUE_BYTES)] * LOAD_CHUNK_RECORDS
        chunk_bytes = LOAD_VALUE_BYTES * LOAD_CHUNK_RECORDS
        try:
            with Producer(
                bootstrap_servers=self.bootstrap,
                client_id="reassign-bench-load",
                acks="all",
                linger_ms=2,
            ) as p:
                t0, sent = time.perf_counter(), 0
                while not self._stop.is_set():
                    if not self._slots.acquire(timeout=0.5):
                        continue
                    if self.rate_bytes_per_s:
                        due = t0 + sent * chunk_bytes / self.rate_bytes_per_s
                        delay = due - time.perf_counter()
                        if delay > 0 and self._stop.wait(delay):
                            break
                    futures = p.send_many(LOAD_TOPIC, values, partition=0)
                    futures[-1].add_done_callback(self._acked)
                    sent += 1
                p.flush(60)
        except BaseException as e:
            self.error = e

    def _acked(self, future: RecordFuture) -> None:
        # Runs on the producer's sender thread: cheap, and never raises.
        at = now()
        self._slots.release()
        if future.exception(0) is None:
            with self._lock:
                self.acks.append((at, LOAD_CHUNK_RECORDS))
        else:
            self.failed_chunks += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)
        if self._thread.is_alive():
            raise RuntimeError("the load producer did not stop within 90 s")
        if self.error is not None:
            raise RuntimeError(f"the load producer failed: {self.error!r}") from self.error

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the load producer failed: {self.error!r}") from self.error

    def rate(self, t0: float, t1: float) -> tuple[float, float]:
        """Acknowledged (records/s, bytes/s) over [t0, t1)."""
        with self._lock:
            acks = list(self.acks)
        records = sum(n for t, n in acks if t0 <= t < t1)
        span = max(t1 - t0, 1e-9)
        return records / span, records * LOAD_VALUE_BYTES / span

    def buckets(self, bucket_s: float = 1.0) -> list[tuple[float, float]]:
        """(bucket start, acknowledged bytes/s) for each whole `bucket_s` since the load
        started."""
        with self._lock:
            acks = list(self.acks)
        if not acks:
            return []
        n = int((acks[-1][0] - self.started_at) // bucket_s) + 1
        counts = [0] * n
        for t, records in acks:
            counts[int((t - self.started_at) // bucket_s)] += records
        # The last bucket is cut short by the stop: left out, it would read as a drop.
        return [
            (self.started_at + i * bucket_s, c * LOAD_VALUE_BYTES / bucket_s)
            for i, c in enumerate(counts[:-1])
        ]


class DiskSampler:
    """(time since `t0`, bytes) of a partition directory's segment files every DISK_SAMPLE_S,
    in a thread of its own, until stopped."""

    def __init__(self, partition_dir: Path):
        self.partition_dir = partition_dir
        self.samples: list[tuple[float, int]] = []
        self.t0 = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reassign-bench-disk", daemon=True)

    def start(self, t0: float) -> None:
        self.t0 = t0
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.samples.append((now() - self.t0, segment_bytes(self.partition_dir)))
            if self._stop.wait(DISK_SAMPLE_S):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.samples.append((now() - self.t0, segment_bytes(self.partition_dir)))


# -- one move ---------------------------------------------------------------------------------


@dataclass
class Move:
    round: int
    mode: str
    direction: str
    throttle_bytes_per_s: int  # 0: none
    replicas_before: list[int]
    target: list[int]
    leader: int
    joining: int
    leaving: int
    partition_bytes: int  # the leader's segment files when the move started
    copied_bytes: int  # the joining replica's segment files when the move completed
    move_s: float  # reassignment sent -> target replicas all in the ISR, nothing adding
    copy_mb_per_s: float  # partition_bytes / move_s, in MB/s
    started_at_s: float  # on the bench's clock (now())
    completed_at_s: float
    baseline_records_per_s: float  # the load's, over the --baseline-s before the move
    baseline_mb_per_s: float
    during_records_per_s: float  # the load's, from the move's start to its completion
    during_mb_per_s: float
    during_over_baseline: float
    # (baseline - during) x move_s: the MB the producer did not get acknowledged because of the
    # move, against its baseline (negative if it did better).
    producer_forgone_mb: float
    replication_throttle_seen: int  # describe_cluster's replication_throttle at completion
    # (s since the reassignment was sent, bytes on the joining broker): the copy's progress.
    samples: list[tuple[float, int]] = field(default_factory=list)


def one_move(
    cluster: Cluster,
    admin: Admin,
    load: Load,
    *,
    round_: int,
    mode: str,
    direction: str,
    replicas: list[int],
    target: list[int],
    leader: int,
    throttle: int,
    baseline_s: float,
) -> Move:
    [joining] = [b for b in target if b not in replicas]
    [leaving] = [b for b in replicas if b not in target]
    # The previous move's leaving replica is deleted and the cluster settled before the
    # baseline starts, so the baseline is the load alone.
    wait_until(
        lambda: not cluster.partition_dir(joining).exists(),
        SETTLE_TIMEOUT_S,
        f"broker {joining} holds no log of {TOPIC}-0 (deleted after the last move)",
    )
    wait_view(admin, in_sync(TOPIC, replicas), SETTLE_TIMEOUT_S, f"{TOPIC}-0 on {replicas}")
    partition_bytes = segment_bytes(cluster.partition_dir(leader))
    baseline_from = now()
    time.sleep(baseline_s)  # the baseline window: the load runs alone
    load.check()
    sampler = DiskSampler(cluster.partition_dir(joining))
    started = now()
    sampler.start(started)
    outcome = admin.alter_partition_reassignments({TP: target}, throttle=throttle)
    if outcome != {TP: None}:
        sampler.stop()
        raise RuntimeError(f"reassignment of {TOPIC}-0 to {target} refused: {outcome}")
    timeout_s = MOVE_TIMEOUT_BASE_S + MOVE_TIMEOUT_S_PER_MB * partition_bytes / MB
    try:
        view = wait_view(
            admin, in_sync(TOPIC, target), timeout_s, f"{TOPIC}-0 moved to {target} ({mode})"
        )
    finally:
        completed = now()
        sampler.stop()
    copied = segment_bytes(cluster.partition_dir(joining))
    move_s = completed - started
    base_rec, base_bytes = load.rate(baseline_from, started)
    during_rec, during_bytes = load.rate(started, completed)
    return Move(
        round=round_,
        mode=mode,
        direction=direction,
        throttle_bytes_per_s=throttle,
        replicas_before=replicas,
        target=target,
        leader=leader,
        joining=joining,
        leaving=leaving,
        partition_bytes=partition_bytes,
        copied_bytes=copied,
        move_s=move_s,
        copy_mb_per_s=partition_bytes / MB / move_s,
        started_at_s=started,
        completed_at_s=completed,
        baseline_records_per_s=base_rec,
        baseline_mb_per_s=base_bytes / MB,
        during_records_per_s=during_rec,
        during_mb_per_s=during_bytes / MB,
        during_over_baseline=during_bytes / base_bytes if base_bytes else math.nan,
        producer_forgone_mb=(base_bytes - during_bytes) / MB * move_s,
        replication_throttle_seen=int(view.get("replication_throttle", -1)),
        samples=[(round(t, 3), b) for t, b in sampler.samples],
    )


# -- the run ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settings:
    size_mb: int
    rounds: int
    throttle_mb: float
    baseline_s: float
    load_mb: float | None  # None: as fast as acknowledgements allow

    @property
    def throttle_bytes_per_s(self) -> int:
        return int(self.throttle_mb * MB)


def align_load_leader(admin: Admin, leader: int) -> None:
    """Make the load partition's leader `leader` (the moving partition's): a reorder of its
    replicas (completes at once) and a preferred-leader election."""
    d = admin.describe_cluster()
    p = partition_view(d, LOAD_TOPIC)
    assert p is not None, d
    if p["leader"] == leader:
        return
    order = [leader, *(r for r in p["replicas"] if r != leader)]
    outcome = admin.alter_partition_reassignments({LOAD_TP: order})
    if outcome != {LOAD_TP: None}:
        raise RuntimeError(f"reordering {LOAD_TOPIC}-0 to {order} refused: {outcome}")
    wait_view(admin, in_sync(LOAD_TOPIC, order), SETTLE_TIMEOUT_S, f"{LOAD_TOPIC}-0 on {order}")
    admin.elect_leaders([LOAD_TP])
    wait_view(
        admin,
        lambda d: (partition_view(d, LOAD_TOPIC) or {}).get("leader") == leader,
        SETTLE_TIMEOUT_S,
        f"broker {leader} leads {LOAD_TOPIC}-0",
    )


def fill(bootstrap: str, size_bytes: int) -> dict[str, Any]:
    """`size_bytes` of 10 KB values into `moving`-0, acks=all, as fast as it goes."""
    value = os.urandom(FILL_VALUE_BYTES)
    records = -(-size_bytes // FILL_VALUE_BYTES)
    started = time.perf_counter()
    with Producer(
        bootstrap_servers=bootstrap,
        client_id="reassign-bench-fill",
        acks="all",
        linger_ms=5,
        batch_size=FILL_BATCH_BYTES,
    ) as p:
        sent = 0
        last = None
        while sent < records:
            n = min(FILL_CHUNK_RECORDS, records - sent)
            last = p.send_many(TOPIC, [value] * n, partition=0)
            sent += n
        p.flush(600)
        assert last is not None
        last.result(60)  # raises if the last chunk failed
    took = time.perf_counter() - started
    return {
        "records": records,
        "value_bytes": FILL_VALUE_BYTES,
        "seconds": took,
        "mb_per_s": records * FILL_VALUE_BYTES / MB / took,
        "acks": "all",
    }


def run(cluster: Cluster, s: Settings) -> tuple[list[Move], dict[str, Any], Load]:
    cluster.start(1, 2, 3)
    with Admin(cluster.bootstrap, request_timeout_ms=ADMIN_TIMEOUT_MS) as admin:
        wait_view(admin, brokers_up(3), SETTLE_TIMEOUT_S, "brokers 1-3 registered")
        admin.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
        admin.create_topic(
            LOAD_TOPIC,
            1,
            3,
            {
                "min.insync.replicas": "2",
                "retention.bytes": str(LOAD_RETENTION_BYTES),
                "segment.bytes": str(LOAD_SEGMENT_BYTES),
            },
        )
        d = wait_view(admin, in_sync(TOPIC), SETTLE_TIMEOUT_S, f"{TOPIC}-0 in sync")
        wait_view(admin, in_sync(LOAD_TOPIC), SETTLE_TIMEOUT_S, f"{LOAD_TOPIC}-0 in sync")
        p = partition_view(d, TOPIC)
        assert p is not None, d
        replicas, leader = list(p["replicas"]), int(p["leader"])
        align_load_leader(admin, leader)
        progress(f"{TOPIC}-0 on {replicas}, leader {leader}; filling {s.size_mb} MB")
        filled = fill(cluster.bootstrap, s.size_mb * MB)
        progress(
            f"filled {filled['records']:,} records of {FILL_VALUE_BYTES} B in "
            f"{filled['seconds']:.1f} s ({filled['mb_per_s']:.0f} MB/s, acks=all)"
        )
        cluster.start(SPARE)
        wait_view(admin, brokers_up(NODES), SETTLE_TIMEOUT_S, f"broker {SPARE} registered")
        wait_view(admin, in_sync(TOPIC, replicas), SETTLE_TIMEOUT_S, f"{TOPIC}-0 in sync")
        # The follower that moves: the last replica that does not lead. Replaced in place, so
        # the preferred leader (the first replica) stays the same.
        leaving = next(r for r in reversed(replicas) if r != leader)
        out_target = [SPARE if r == leaving else r for r in replicas]
        filled["partition_bytes"] = segment_bytes(cluster.partition_dir(leader))
        load = Load(cluster.bootstrap, s.load_mb * MB if s.load_mb else None)
        load.start()
        moves: list[Move] = []
        try:
            for r in range(1, s.rounds + 1):
                modes = MODES if r % 2 else MODES[::-1]
                for mode in modes:
                    throttle = s.throttle_bytes_per_s if mode == "throttled" else 0
                    for direction, before, target in (
                        ("out", replicas, out_target),
                        ("back", out_target, replicas),
                    ):
                        m = one_move(
                            cluster,
                            admin,
                            load,
                            round_=r,
                            mode=mode,
                            direction=direction,
                            replicas=before,
                            target=target,
                            leader=leader,
                            throttle=throttle,
                            baseline_s=s.baseline_s,
                        )
                        moves.append(m)
                        progress(
                            f"round {r}/{s.rounds} {mode} {direction} "
                            f"(broker {m.leaving} -> {m.joining}): {m.move_s:.2f} s, "
                            f"{m.copy_mb_per_s:.1f} MB/s copied; producer "
                            f"{m.baseline_mb_per_s:.1f} -> {m.during_mb_per_s:.1f} MB/s "
                            f"({m.during_over_baseline:.2f}x)"
                        )
            # Leave no throttle behind (the cluster is stopped next anyway).
            admin.alter_partition_reassignments({}, throttle=0)
        finally:
            load.stop()
    if load.failed_chunks:
        progress(f"the load had {load.failed_chunks} failed chunks (not counted)")
    return moves, filled, load


# -- the report -------------------------------------------------------------------------------


def stats(values: Sequence[float]) -> dict[str, float | int | None]:
    v = sorted(x for x in values if not math.isnan(x))
    if not v:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "n": len(v)}


METRICS = (
    "move_s",
    "copy_mb_per_s",
    "baseline_mb_per_s",
    "baseline_records_per_s",
    "during_mb_per_s",
    "during_records_per_s",
    "during_over_baseline",
    "producer_forgone_mb",
)


def summary(moves: Sequence[Move]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for direction in DIRECTIONS:
        for mode in MODES:
            ms = [m for m in moves if m.mode == mode and m.direction == direction]
            rows[f"{mode} {direction}"] = {k: stats([getattr(m, k) for m in ms]) for k in METRICS}
    ratios: dict[str, Any] = {}
    for direction in DIRECTIONS:
        u, t = rows[f"unthrottled {direction}"], rows[f"throttled {direction}"]

        def ratio(a: dict[str, Any], b: dict[str, Any]) -> float | None:
            if a["median"] is None or not b["median"]:
                return None
            return float(a["median"] / b["median"])

        ratios[direction] = {
            "time_throttled_over_unthrottled": ratio(t["move_s"], u["move_s"]),
            "copy_rate_throttled_over_unthrottled": ratio(t["copy_mb_per_s"], u["copy_mb_per_s"]),
            "producer_during_throttled_over_unthrottled": ratio(
                t["during_mb_per_s"], u["during_mb_per_s"]
            ),
        }
    return {"rows": rows, "ratios": ratios}


def markdown(
    command: str,
    note: str,
    facts: dict[str, Any],
    s: Settings,
    filled: dict[str, Any],
    summ: dict[str, Any],
    plot_note: str,
) -> str:
    def cell(st: dict[str, Any], fmt: str) -> str:
        if st["median"] is None:
            return "-"
        return f"{st['median']:{fmt}} ({st['min']:{fmt}}-{st['max']:{fmt}})"

    def producer(row: dict[str, Any], which: str) -> str:
        mb, rec = row[f"{which}_mb_per_s"], row[f"{which}_records_per_s"]
        if mb["median"] is None:
            return "-"
        return f"{cell(mb, '.1f')}; {rec['median']:,.0f} rec/s"

    load = f"{s.load_mb:g} MB/s offered" if s.load_mb else "as fast as acknowledgements allow"
    lines = [
        *report_head("raftlog reassignment bench", command, note, facts),
        f"Four node processes on 127.0.0.1 (1-3 controller+broker voters, 4 broker-only), one "
        f"2-core machine shared with other work (load average "
        f"{facts['load_average_at_start']} at the start, {facts.get('load_average_at_end')} "
        f"at the end). `{TOPIC}`-0 (RF 3, min.insync.replicas 2) filled with "
        f"{filled['partition_bytes'] / MB:,.0f} MB of {FILL_VALUE_BYTES // 1024} KB values "
        f"(send_many, acks=all: {filled['mb_per_s']:.0f} MB/s); one follower moved to broker "
        f"{SPARE} (out) and back, unthrottled and throttled at {s.throttle_mb:g} MB/s, "
        f"{s.rounds} round(s), median (min-max). The producer: `{LOAD_TOPIC}`-0, same leader, "
        f"1 KB values, acks=all, {load}; its baseline is the {s.baseline_s:g} s before each "
        "move. MB = 2^20 bytes.",
        "",
        "| mode | move | time to move, s | copy MB/s | producer before, MB/s | "
        "producer during, MB/s | during / before | producer MB forgone |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for direction in DIRECTIONS:
        for mode in MODES:
            row = summ["rows"][f"{mode} {direction}"]
            name = f"throttled {s.throttle_mb:g} MB/s" if mode == "throttled" else mode
            where = f"to broker {SPARE}" if direction == "out" else "back"
            lines.append(
                f"| {name} | {where} | {cell(row['move_s'], '.2f')} | "
                f"{cell(row['copy_mb_per_s'], '.1f')} | {producer(row, 'baseline')} | "
                f"{producer(row, 'during')} | {cell(row['during_over_baseline'], '.2f')} | "
                f"{cell(row['producer_forgone_mb'], '.0f')} |"
            )
    lines.append("")
    for direction in DIRECTIONS:
        r = summ["ratios"][direction]

        def x(v: float | None) -> str:
            return "-" if v is None else f"{v:.2f}x"

        lines.append(
            f"- Throttled / unthrottled, moves {'to broker 4' if direction == 'out' else 'back'}"
            f": time {x(r['time_throttled_over_unthrottled'])}, copy rate "
            f"{x(r['copy_rate_throttled_over_unthrottled'])}, producer during the move "
            f"{x(r['producer_during_throttled_over_unthrottled'])}."
        )
    lines.append("")
    lines.append(
        "Time to move: reassignment sent until the view shows the target replicas all in the "
        "ISR and nothing adding or removing (polled every 50 ms). Copy MB/s: the partition's "
        "segment bytes on the leader / that time. Producer: acknowledged bytes (values) per "
        "second in the window; MB forgone: (before - during) x the move's time. The partition "
        "was just written, so the leader reads it from the page cache."
    )
    if plot_note:
        lines += ["", plot_note]
    return "\n".join(lines) + "\n"


def plot(moves: Sequence[Move], load: Load, s: Settings, path: Path, title: str) -> str | None:
    """Bytes copied over time per mode; the producer's MB/s over the run, moves shaded. A
    note if skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"skipped the plot: matplotlib is not importable ({e})"

    colors = {"unthrottled": "#d62728", "throttled": "#1f77b4"}
    fig, (copy_ax, load_ax) = plt.subplots(2, 1, figsize=(11, 8))
    labelled: set[str] = set()
    longest = 0.0
    for m in moves:
        t = [a for a, _ in m.samples]
        b = [x / MB for _, x in m.samples]
        label = None
        key = f"{m.mode} {m.direction}"
        if key not in labelled:
            labelled.add(key)
            label = key
        copy_ax.plot(
            t,
            b,
            color=colors[m.mode],
            ls="-" if m.direction == "out" else "--",
            lw=1,
            label=label,
        )
        longest = max(longest, m.move_s)
    if moves:
        size = max(m.partition_bytes for m in moves) / MB
        end = min(longest, size / s.throttle_mb + 1)
        copy_ax.plot(
            [0, end],
            [s.throttle_mb, s.throttle_mb * (end + 1)],
            color="grey",
            ls=":",
            lw=1,
            label=f"{s.throttle_mb:g} MB/s from a full 1 s bucket",
        )
    copy_ax.set_xlabel("s since the reassignment was sent")
    copy_ax.set_ylabel("MB on the joining broker")
    copy_ax.set_title("bytes copied (each round; solid: to broker 4, dashed: back)", fontsize=9)
    copy_ax.legend(fontsize=7, loc="lower right")

    buckets = load.buckets()
    # Each bucket drawn at its middle, so that a dip lines up with the move that caused it.
    load_ax.plot([t + 0.5 for t, _ in buckets], [v / MB for _, v in buckets], color="black", lw=1)
    shaded: set[str] = set()
    for m in moves:
        label = None if m.mode in shaded else f"{m.mode} move"
        shaded.add(m.mode)
        load_ax.axvspan(
            m.started_at_s, m.completed_at_s, color=colors[m.mode], alpha=0.25, label=label
        )
    load_ax.set_xlabel("s since the bench started")
    load_ax.set_ylabel("producer MB/s acknowledged (1 s buckets)")
    load_ax.set_ylim(bottom=0)
    load_ax.set_title(f"the producer on {LOAD_TOPIC}-0 (same leader), acks=all", fontsize=9)
    load_ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# -- main -------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.reassign_bench",
        description="Time and throughput of a partition move, with and without a throttle "
        "(see the module docstring).",
    )
    p.add_argument("--size-mb", type=int, default=None, help="the partition to move (1024)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of both modes (3)")
    p.add_argument("--throttle-mb", type=float, default=None, help="MB/s when throttled (50)")
    p.add_argument(
        "--baseline-s", type=float, default=None, help="producer baseline before each move (5)"
    )
    p.add_argument(
        "--load-mb", type=float, default=None, help="pace the producer to this (default: unpaced)"
    )
    p.add_argument("--quick", action="store_true", help="20 MB, 1 round, 5 MB/s, 2 s (tests)")
    p.add_argument("--data-dir", help="where the cluster's data goes (a real disk by default)")
    p.add_argument("--results-dir", default=str(REPO / "bench" / "results"))
    p.add_argument("--note", default="", help="a line for the report (e.g. what else ran)")
    p.add_argument("--keep-data", action="store_true", help="keep the data and node logs")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--log-level", default="WARNING")
    return p


def settings_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Settings:
    def pick(value: Any, quick: Any, full: Any) -> Any:
        return value if value is not None else (quick if args.quick else full)

    s = Settings(
        size_mb=pick(args.size_mb, 20, 1024),
        rounds=pick(args.rounds, 1, 3),
        throttle_mb=pick(args.throttle_mb, 5.0, 50.0),
        baseline_s=pick(args.baseline_s, 2.0, 5.0),
        load_mb=args.load_mb,
    )
    if s.size_mb < 1 or s.rounds < 1 or s.throttle_mb <= 0 or s.baseline_s <= 0:
        parser.error("--size-mb, --rounds, --throttle-mb and --baseline-s must be positive")
    if s.load_mb is not None and s.load_mb <= 0:
        parser.error("--load-mb must be positive")
    return s


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    s = settings_from(args, parser)
    command = common.command_line("bench.reassign_bench", argv)
    # Three replicas and a fourth during each move, the load topic, and room to spare.
    need_mb = 5 * s.size_mb + 4 * (LOAD_RETENTION_BYTES + LOAD_SEGMENT_BYTES) / MB
    wd = common.prepare_work_dir(
        args.data_dir,
        "raftlog-reassign-",
        need_mb=need_mb,
        parser=parser,
        needed_by=f"--size-mb {s.size_mb} needs",
    )
    work, facts = wd.path, wd.facts
    stamp = common.run_stamp()
    progress(
        f"{s.size_mb} MB, {s.rounds} round(s), throttle {s.throttle_mb:g} MB/s; data in {work} "
        f"({wd.free_mb:,.0f} MB free)"
    )
    cluster = Cluster(work, args.log_level)
    problems: list[str] = []
    try:
        moves, filled, load = run(cluster, s)
    finally:
        problems = cluster.close()
        for problem in problems:
            progress(problem)
        common.keep_or_remove(work, args.keep_data, progress, "the data and logs")
    facts["load_average_at_end"] = common.load_average()
    summ = summary(moves)
    prefix = common.results_prefix(args.results_dir, "reassign", stamp)
    title = (
        f"raftlog reassignment, {s.size_mb} MB partition, throttle {s.throttle_mb:g} MB/s, "
        f"{s.rounds} round(s), {facts['date']}"
    )
    plot_note = "plot skipped (--no-plots)"
    if not args.no_plots:
        plot_note = plot(moves, load, s, Path(f"{prefix}.png"), title) or f"Plot: {prefix}.png"
    text = markdown(command, args.note, facts, s, filled, summ, plot_note)
    payload = {
        "command": command,
        "machine": facts,
        "settings": {**asdict(s), "throttle_bytes_per_s": s.throttle_bytes_per_s, "mb": MB},
        "fill": filled,
        "summary": summ,
        "load": {
            "value_bytes": LOAD_VALUE_BYTES,
            "failed_chunks": load.failed_chunks,
            "buckets_1s": [(round(t, 3), v) for t, v in load.buckets()],
        },
        "moves": [asdict(m) for m in moves],
        "shutdown_problems": problems,
    }
    common.write_results(prefix, text, payload, progress)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
