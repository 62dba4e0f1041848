"""Replication on the three-node local cluster: what RF=3 and acks=all cost, and how long a
partition is unavailable after kill -9 of its leader.

Run from the repository root::

    .venv/bin/python -m bench.replication_bench               # full run (3 runs per phase)
    .venv/bin/python -m bench.replication_bench --quick       # small and short (tests)
    .venv/bin/python -m bench.replication_bench --only failover
    raftlog bench replication [same options]                  # the same, from the CLI

The cluster is `raftlog dev --nodes 3 --port 0` (three combined controller+broker processes on
this machine, data on the real disk, stopped with SIGTERM at the end); the clients run in this
process, except the end-to-end consumer, which runs in a child process. Every topic has one
partition; values are 200 bytes, keys null. All the processes share this machine's cores, so
the replicated rows measure the cost of replication on one machine (three brokers' work on the
cores the client also needs), not a network.

Phases (`--only` picks some):

- `rf1-acks1`: the baseline: a topic with replication factor 1, acks=1, the paper benchmark's
  `linger` producer (linger_ms=5, batch_size=1,000,000, 5 requests in flight).
- `rf3-all`: the same producer with acks=all on a topic with RF 3 and min.insync.replicas 2
  (`durability.policy=replication`: committed = in every ISR member's log). Target: at least
  400,000 rec/s and at least 0.7x the baseline of the same run.
- `rf3-all-fsync`: the same on a topic with `durability.policy=fsync` (committed = fsynced by
  every ISR member: one fsync per replica covers every append before it).
- `e2e-rf1-acks1`, `e2e-rf3-all`: end-to-end latency at `--e2e-rate` (10,000 rec/s): the paper
  benchmark's method (sends stamped with time.monotonic_ns(), linger_ms=0, paced as Kafka's
  ThroughputThrottler paces: `--e2e-pacing-ms`, see bench/paper_bench.py; a consumer in a
  child process, which reads only what is committed), first with acks=1 on RF 1 (the
  baseline: what this machine gives without replication), then with acks=all on RF 3. Target:
  RF 3 p50 at most 5 ms.
- `failover`: an acks=all producer sends at `--failover-rate` (1,000 rec/s, linger_ms=0) to a
  topic with RF 3 and min.insync.replicas 2 while the partition's leader gets kill -9,
  `--failover-reps` times. Unavailability = time from the kill to the first acknowledgement of
  a record sent after the kill (records are acknowledged in order, so it is also when the
  partition took writes again). Between repetitions the killed node is restarted
  (`raftlog node --config` on its config) and the benchmark waits until it is back in the ISR.
  Target: median at most the broker session timeout (`--session-timeout-ms`) + 1 s.

The throughput phases take turns, `--runs` times (each run on new topics), so a drift of the
shared machine's speed hits them alike; the tables give medians, and the ratio is the median
of the replicated phase over the median of the baseline measured in the same invocation. Each
producer phase sends `--messages` records or stops after `--max-seconds`; its time runs from
the first send to the end of flush(); afterwards the partition's high watermark must equal
the records sent.

Where the CPU goes: for every phase, this process's CPU time (all threads), each node
process's (utime + stime from /proc/<pid>/stat, across restarts) with its role for the phase's
partition (leader, follower, -), and what every other process on the machine used (from
/proc/stat: the machine is shared), each also per record.

Results: a markdown report on stdout and in bench/results/replication-<timestamp>.md, the same
figures in .json, and plots -throughput.png, -latency.png, -failover.png (acknowledged writes
over time, kills marked). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import functools
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from bench import common
from bench.common import REPO, report_head
from bench.paper_bench import (
    PHASE_IN_FLIGHT,
    E2EResult,
    Progress,
    _cpu_seconds,
    _median,
    add_e2e_arguments,
    add_run_arguments,
    option_picker,
    pacing_note,
    parse_only,
    plot_latency,
    python_floor,
    render_e2e,
    run_e2e,
    send_all,
    targets_line,
    write_report,
)
from bench.paper_bench import Settings as PaperSettings
from raftlog.launcher import (
    ClusterNode,
    LaunchError,
    NodeProcess,
    dev_process,
    node_dir,
    stop_all,
)

DEFAULT_RESULTS_DIR = REPO / "bench" / "results"
MB = 1e6
NODES = 3
# `raftlog dev`'s default broker_session_timeout_ms: the failover target is this + 1 s.
DEFAULT_SESSION_TIMEOUT_MS = 3000
# The targets.
TARGET_RF3_RECORDS_PER_S = 400_000.0
TARGET_RF3_RATIO = 0.7
TARGET_E2E_P50_MS = 5.0
TARGET_FAILOVER_MARGIN_S = 1.0
# Bounds of the waits on the cluster (a loaded 2-core machine has taken 10 s to start a node).
CLUSTER_CHANGE_S_MAX = 120.0
ACK_AFTER_KILL_S_MAX = 60.0
POLL_INTERVAL_S = 0.05
# How often the failover phase looks for the first acknowledgement after a kill.
ACK_POLL_S = 0.005
# The event loop waiting for I/O: idle time, not work; left out of the --profile tables.
IDLE_FUNCTIONS = {"<method 'poll' of 'select.epoll' objects>"}
# Functions per node in the --profile tables.
PROFILE_TOP_FUNCTIONS = 15
# Acknowledgements the failover producer must see flow before a kill (the pipeline is warm).
FAILOVER_WARM_ACKS = 200

THROUGHPUT_PHASES = ("rf1-acks1", "rf3-all", "rf3-all-many", "rf3-all-fsync")
# Phases whose producer sends with send_many (SEND_MANY_VALUES values per call), not send().
SEND_MANY_PHASES = ("rf3-all-many",)
SEND_MANY_VALUES = 1000
E2E_PHASES = ("e2e-rf1-acks1", "e2e-rf3-all")
PHASES = (*THROUGHPUT_PHASES, *E2E_PHASES, "failover")


@dataclass(frozen=True)
class TopicSpec:
    replication_factor: int
    acks: int | str
    durability: str  # durability.policy

    def config(self) -> dict[str, str]:
        return {
            "min.insync.replicas": "2" if self.replication_factor >= 3 else "1",
            "durability.policy": self.durability,
        }


SPECS = {
    "rf1-acks1": TopicSpec(1, 1, "replication"),
    "rf3-all": TopicSpec(3, "all", "replication"),
    "rf3-all-many": TopicSpec(3, "all", "replication"),
    "rf3-all-fsync": TopicSpec(3, "all", "fsync"),
    "e2e-rf1-acks1": TopicSpec(1, 1, "replication"),
    "e2e-rf3-all": TopicSpec(3, "all", "replication"),
    "failover": TopicSpec(3, "all", "replication"),
}
LABELS = {
    "rf1-acks1": "RF=1 acks=1, linger 5 ms, 1 MB batches (baseline)",
    "rf3-all": "RF=3 acks=all, linger 5 ms, 1 MB batches",
    "rf3-all-many": "RF=3 acks=all, send_many (1,000 values a call), linger 5 ms, 1 MB batches",
    "rf3-all-fsync": "RF=3 acks=all, fsync policy, linger 5 ms, 1 MB batches",
    "e2e_base_p50": "end-to-end latency p50, RF=1 acks=1 (baseline)",
    "e2e_p50": "end-to-end latency p50, RF=3 acks=all",
    "e2e_p99": "end-to-end latency p99, RF=3 acks=all",
    "e2e_p999": "end-to-end latency p99.9, RF=3 acks=all",
    "failover_median": "unavailability after kill -9 of the leader, median",
    "failover_max": "unavailability after kill -9 of the leader, max",
}

DEFAULTS: dict[str, Any] = {
    "messages": 3_000_000,
    "max_seconds": 20.0,
    "runs": 3,
    "e2e_rate": 10_000,
    "e2e_seconds": 15.0,
    "e2e_warmup": 1.0,
    "failover_reps": 10,
}
QUICK: dict[str, Any] = {
    "messages": 50_000,
    "max_seconds": 5.0,
    "runs": 1,
    "e2e_rate": 2_000,
    "e2e_seconds": 2.0,
    "e2e_warmup": 0.0,
    "failover_reps": 2,
}


# -- options ------------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared with `raftlog bench replication`)."""
    p.add_argument(
        "--messages",
        type=int,
        help=f"records per throughput run (default {DEFAULTS['messages']:,}; quick "
        f"{QUICK['messages']:,})",
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        help="time budget of each throughput run: stop sending after this long (default "
        f"{DEFAULTS['max_seconds']:g}; quick {QUICK['max_seconds']:g})",
    )
    p.add_argument(
        "--runs",
        type=int,
        help="runs of each throughput phase, taking turns; the tables give the median "
        f"(default {DEFAULTS['runs']}; quick {QUICK['runs']})",
    )
    p.add_argument("--value-bytes", type=int, default=200, help="record value size (200)")
    add_e2e_arguments(p)
    p.add_argument(
        "--failover-reps",
        type=int,
        help="kill -9s of the leader in the failover phase (default "
        f"{DEFAULTS['failover_reps']}; quick {QUICK['failover_reps']})",
    )
    p.add_argument(
        "--failover-rate",
        type=int,
        default=1000,
        help="records/s the acks=all producer sends during the failover phase (1000)",
    )
    p.add_argument(
        "--session-timeout-ms",
        type=int,
        default=DEFAULT_SESSION_TIMEOUT_MS,
        help="the cluster's broker session timeout (`raftlog dev --session-timeout-ms`, "
        f"default {DEFAULT_SESSION_TIMEOUT_MS}); the failover target is this + 1 s",
    )
    p.add_argument(
        "--only",
        default=",".join(PHASES),
        help=f"comma-separated phases to run, of {', '.join(PHASES)} (default all)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="run every node under cProfile (its event-loop thread; slower) and add each "
        "node's top functions to the report",
    )
    add_run_arguments(p, "the cluster")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.replication_bench",
        description="Replicated throughput, latency and failover on a 3-node local cluster.",
    )
    add_arguments(p)
    return p


@dataclass
class Settings:
    messages: int
    max_seconds: float
    runs: int
    value_bytes: int
    e2e_rate: int
    e2e_seconds: float
    e2e_warmup: float
    e2e_pacing_ms: float
    failover_reps: int
    failover_rate: int
    session_timeout_ms: int
    phases: list[str]
    quick: bool
    profile: bool


def settings_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Settings:
    pick = option_picker(args, DEFAULTS, QUICK)
    phases = parse_only(args.only, PHASES, parser)
    s = Settings(
        messages=pick("messages"),
        max_seconds=pick("max_seconds"),
        runs=pick("runs"),
        value_bytes=args.value_bytes,
        e2e_rate=pick("e2e_rate"),
        e2e_seconds=pick("e2e_seconds"),
        e2e_warmup=pick("e2e_warmup"),
        e2e_pacing_ms=args.e2e_pacing_ms,
        failover_reps=pick("failover_reps"),
        failover_rate=args.failover_rate,
        session_timeout_ms=args.session_timeout_ms,
        phases=phases,
        quick=args.quick,
        profile=args.profile,
    )
    for name in ("messages", "runs", "failover_reps", "failover_rate", "e2e_rate"):
        if getattr(s, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if s.value_bytes < 8:
        parser.error("--value-bytes must be >= 8 (the latency phase stamps 8 bytes)")
    if s.max_seconds <= 0 or s.e2e_seconds <= 0:
        parser.error("--max-seconds and --e2e-seconds must be > 0")
    if s.e2e_pacing_ms < 0:
        parser.error("--e2e-pacing-ms must be >= 0")
    if s.e2e_warmup < 0 or s.e2e_warmup >= s.e2e_seconds:
        parser.error("--e2e-warmup must be >= 0 and shorter than --e2e-seconds")
    if s.session_timeout_ms < 1000:
        parser.error("--session-timeout-ms must be >= 1000 (above the heartbeat interval)")
    return s


def producer_options(acks: int | str) -> dict[str, Any]:
    """The paper benchmark's `linger` producer, with the phase's acks."""
    return {
        "acks": acks,
        "max_in_flight_requests_per_connection": PHASE_IN_FLIGHT["linger"],
        "linger_ms": 5,
        "batch_size": 1_000_000,
    }


# -- the cluster --------------------------------------------------------------------------------


def _machine_jiffies() -> tuple[int, int]:
    """(busy, total) clock ticks of every CPU since boot, from /proc/stat (idle and iowait
    count as not busy; steal counts as busy: another VM had the core)."""
    try:
        with open("/proc/stat") as f:
            values = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    total = sum(values[:8])
    return total - idle, total


class LocalCluster:
    """`raftlog dev --nodes 3 --port 0` in its own process group; a node killed with -9 is
    restarted as `raftlog node --config <its config>`, a child of this process. Both are
    started by the launcher (raftlog/launcher.py).

    Node pids come from the nodes' ready files (raftlog/readiness.py). CPU seconds are summed
    over every incarnation of a node: `kill9` reads the victim's counter just before the kill.
    """

    def __init__(self, work: str, session_timeout_ms: int, extra: Sequence[str] = ()):
        self.work = work
        # More `raftlog dev` options (e.g. a log level), after the session timeout.
        self.extra = list(extra)
        self.data_dir = os.path.join(work, "data")
        self.session_timeout_ms = session_timeout_ms
        self.log_path = os.path.join(work, "nodes.log")
        self.dev: NodeProcess | None = None
        self.restarted: dict[int, ClusterNode] = {}
        self.addresses: dict[int, str] = {}
        self.pids: dict[int, int] = {}
        self.dead_cpu_s: dict[int, float] = dict.fromkeys(range(1, NODES + 1), 0.0)
        self.down: set[int] = set()
        self._log: IO[Any] | None = None

    def node_dir(self, node_id: int) -> str:
        return str(node_dir(self.data_dir, node_id))

    def start(self) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.dev = dev_process(
            self.data_dir,
            [
                "--port",
                "0",
                "--log-level",
                "WARNING",
                "--session-timeout-ms",
                str(self.session_timeout_ms),
                *self.extra,
            ],
            NODES,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            new_session=True,
        )
        for info in self.dev.start():
            self.addresses[int(info["node_id"])] = str(info["client_address"])
            self.pids[int(info["node_id"])] = int(info["pid"])

    @property
    def bootstrap(self) -> str:
        """The live nodes' client addresses (a dead node in the list costs clients a timeout)."""
        return ",".join(a for i, a in sorted(self.addresses.items()) if i not in self.down)

    def cpu_seconds(self) -> dict[int, float]:
        return {
            i: self.dead_cpu_s[i] + (0.0 if i in self.down else _cpu_seconds(self.pids[i]))
            for i in self.pids
        }

    def kill9(self, node_id: int) -> float:
        """SIGKILL the node; returns time.monotonic() right after the signal was sent."""
        pid = self.pids[node_id]
        self.dead_cpu_s[node_id] += _cpu_seconds(pid)
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        self.down.add(node_id)
        old = self.restarted.pop(node_id, None)
        if old is not None:
            old.kill()  # reaps it
        return killed

    def restart(self, node_id: int) -> None:
        """Start the node again on its config; returns once its ready file names the new pid."""
        node = ClusterNode(
            node_id,
            os.path.join(self.node_dir(node_id), "node.toml"),
            self.addresses[node_id],
            log_level="WARNING",
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            cwd=REPO,
        )
        self.restarted[node_id] = node
        try:
            node.start(CLUSTER_CHANGE_S_MAX)
        except LaunchError as e:
            raise RuntimeError(f"restarted {e}") from None
        self.pids[node_id] = int(node.proc.pid if node.proc is not None else 0)
        self.down.discard(node_id)

    def stop(self) -> None:
        if self.dev is not None:
            # The restarted nodes and `raftlog dev` (which stops its own) at once.
            stop_all([*self.restarted.values(), self.dev])
        if self._log is not None:
            self._log.close()

    def log_tail(self, lines: int = 10) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:]).strip() or "(no output)"
        except OSError:
            return "(no log)"

    # -- the partition's state, as the live nodes report it ---------------------------------

    def describe(self, topic: str) -> Any:
        """Partition 0 of `topic` (a PartitionDescription), asked of a live node."""
        from raftlog.client import Admin

        with Admin(self.bootstrap, request_timeout_ms=3000) as admin:
            (desc,) = admin.describe_topics([topic])
        return desc.partitions[0]

    def controller(self) -> int:
        from raftlog.client import Admin

        with Admin(self.bootstrap, request_timeout_ms=3000) as admin:
            return int(admin.describe_cluster()["controller_id"])

    def create_topic(self, topic: str, spec: TopicSpec) -> None:
        from raftlog.client import Admin

        with Admin(self.bootstrap) as admin:
            admin.create_topic(topic, 1, spec.replication_factor, spec.config())
        self.wait_in_sync(topic, spec.replication_factor)

    def wait_in_sync(self, topic: str, replicas: int) -> Any:
        """Partition 0 led, with `replicas` replicas in its ISR; returns its description."""
        from raftlog.errors import RaftlogError

        deadline = time.monotonic() + CLUSTER_CHANGE_S_MAX
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self.describe(topic)
            except RaftlogError:
                last = None  # no leader yet, or a node between kill and exit: ask again
            if last is not None and last.leader >= 0 and len(last.isr) == replicas:
                return last
            time.sleep(POLL_INTERVAL_S)
        raise RuntimeError(f"{topic}-0 not led with {replicas} in sync replicas: {last}")


# -- measurements -------------------------------------------------------------------------------


@dataclass
class CpuUse:
    """CPU seconds over one measured interval: this process, each node, the rest of the
    machine, and the wall time and load average around it."""

    wall_s: float = 0.0
    client_s: float = 0.0
    nodes_s: dict[int, float] = field(default_factory=dict)
    others_s: float = 0.0  # every other process on the machine (busy ticks minus ours)
    machine_s: float = 0.0  # CPU seconds the machine had (wall x cores)
    load_average: float = 0.0  # 1-minute, at the end

    def add(self, other: CpuUse) -> None:
        self.wall_s += other.wall_s
        self.client_s += other.client_s
        for i, v in other.nodes_s.items():
            self.nodes_s[i] = self.nodes_s.get(i, 0.0) + v
        self.others_s += other.others_s
        self.machine_s += other.machine_s
        self.load_average = max(self.load_average, other.load_average)


@contextlib.contextmanager
def measured(cluster: LocalCluster, use: CpuUse) -> Iterator[None]:
    hz = os.sysconf("SC_CLK_TCK")
    busy0, total0 = _machine_jiffies()
    nodes0, cpu0, t0 = cluster.cpu_seconds(), time.process_time(), time.perf_counter()
    try:
        yield
    finally:
        use.wall_s = time.perf_counter() - t0
        use.client_s = time.process_time() - cpu0
        nodes1 = cluster.cpu_seconds()
        use.nodes_s = {i: nodes1[i] - nodes0[i] for i in nodes1}
        busy1, total1 = _machine_jiffies()
        ours = use.client_s + sum(use.nodes_s.values())
        use.others_s = max((busy1 - busy0) / hz - ours, 0.0)
        use.machine_s = (total1 - total0) / hz
        use.load_average = os.getloadavg()[0]


@dataclass
class PhaseResult:
    phase: str
    label: str
    options: dict[str, Any]
    topic_config: dict[str, str]
    runs: list[float] = field(default_factory=list)  # records/s of each run
    records: list[int] = field(default_factory=list)  # records of each run
    budget_hit: int = 0  # runs the time budget ended
    roles: dict[int, str] = field(default_factory=dict)  # node -> role in the last run
    cpu: CpuUse = field(default_factory=CpuUse)  # summed over the runs
    errors: list[str] = field(default_factory=list)

    @property
    def median(self) -> float:
        return _median(self.runs) if self.runs else 0.0


def phase_roles_text(results: dict[str, PhaseResult], node_id: int) -> str:
    """'rf3-all leader, rf3-all-fsync follower': the node's roles in the throughput phases."""
    roles = [
        f"{phase} {r.roles[node_id]}"
        for phase, r in results.items()
        if r.roles.get(node_id, "-") != "-"
    ]
    return ", ".join(roles) or "no throughput partition"


def roles_of(desc: Any) -> dict[int, str]:
    return {
        i: "leader" if i == desc.leader else "follower" if i in desc.replicas else "-"
        for i in range(1, NODES + 1)
    }


def run_throughput(
    phase: str, run: int, cluster: LocalCluster, s: Settings, progress: Progress, res: PhaseResult
) -> None:
    """One run of a throughput phase on a new topic; adds its figures to `res`."""
    from raftlog.client import Producer
    from raftlog.errors import RaftlogError

    spec = SPECS[phase]
    topic = f"repl-{phase}-{run}"
    cluster.create_topic(topic, spec)
    res.roles = roles_of(cluster.describe(topic))
    value = (bytes(range(256)) * (s.value_bytes // 256 + 1))[: s.value_bytes]
    producer = Producer(
        bootstrap_servers=cluster.bootstrap, client_id=f"bench-{phase}", **res.options
    )
    use = CpuUse()
    budget_hit = False
    progress.start(f"{phase} run {run + 1}/{s.runs}", s.messages, s.max_seconds)
    try:
        with measured(cluster, use):
            send = send_all_many if phase in SEND_MANY_PHASES else send_all
            try:
                sent, budget_hit, last = send(producer, topic, value, s, progress)
            except RaftlogError as e:
                res.errors.append(f"run {run + 1}: a record failed: {e!r}")
                return
    finally:
        progress.finish("(time budget reached)" if budget_hit else "")
        producer.close()
    if last is not None and last.exception(0) is not None:
        res.errors.append(f"run {run + 1}: last record failed: {last.exception(0)!r}")
    desc = cluster.describe(topic)
    if desc.high_watermark != sent:
        res.errors.append(
            f"run {run + 1}: {sent:,} records sent but the high watermark is {desc.high_watermark}"
        )
    res.runs.append(sent / use.wall_s)
    res.records.append(sent)
    res.budget_hit += budget_hit
    res.cpu.add(use)


def send_all_many(
    producer: Any, topic: str, value: bytes, s: Settings, progress: Progress
) -> tuple[int, bool, Any]:
    """`send_all` with `send_many`: SEND_MANY_VALUES records a call. Every call's futures are
    checked after the flush: the first failure is raised (the caller reports it)."""
    sent, budget_hit = 0, False
    calls = []
    deadline = time.perf_counter() + s.max_seconds
    while sent < s.messages:
        k = min(SEND_MANY_VALUES, s.messages - sent)
        calls.append(producer.send_many(topic, [value] * k))
        sent += k
        progress.update(sent)
        if time.perf_counter() >= deadline:
            budget_hit = sent < s.messages
            break
    producer.flush()
    for futures in calls:
        futures.result(0)  # raises the first failed batch's error
    return sent, budget_hit, calls[-1][-1] if calls else None


# -- failover -----------------------------------------------------------------------------------


class PacedSender:
    """An acks=all producer in a thread sending record i at start + i / rate; it keeps each
    record's send time and, in the order they come, the acknowledgements (index,
    time.monotonic()), and counts failures."""

    def __init__(self, bootstrap: str, topic: str, rate: int, options: dict[str, Any]):
        from raftlog.client import Producer

        self.topic, self.rate = topic, rate
        self.sent_at: list[float] = []  # index -> send time; appended in order
        self.acks: list[tuple[int, float]] = []  # appended by the producer's callbacks
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(
            bootstrap_servers=bootstrap, client_id="bench-failover", **options
        )
        self._thread = threading.Thread(target=self._run, name="failover-sender", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _done(self, i: int, fut: Any) -> None:
        error = fut.exception(0)
        if error is None:
            self.acks.append((i, time.monotonic()))
        else:
            self.failed.append(f"record {i}: {error!r}")

    def _run(self) -> None:
        from raftlog.errors import RaftlogError

        pad = bytes(192)
        start = time.monotonic()
        interval = 1.0 / self.rate
        i = 0
        while not self._stop.is_set():
            wait = start + i * interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self.sent_at.append(time.monotonic())
            try:
                fut = self._producer.send(self.topic, i.to_bytes(8, "little") + pad)
            except RaftlogError as e:  # refused before it was queued: counts as failed
                self.failed.append(f"record {i}: {e!r}")
            else:
                fut.add_done_callback(functools.partial(self._done, i))
            i += 1

    def first_sent_at_or_after(self, t: float) -> int:
        """Index of the first record sent at or after time `t` (maybe not sent yet)."""
        return bisect.bisect_left(self.sent_at, t)

    def first_ack_from(self, index: int, cursor: int) -> tuple[float | None, int]:
        """(time of the first acknowledgement of a record >= `index` among the
        acknowledgements from position `cursor` on, or None; the position to go on from)."""
        acks = self.acks
        end = len(acks)
        for j in range(cursor, end):
            if acks[j][0] >= index:
                return acks[j][1], j
        return None, end

    def stop(self) -> None:
        from raftlog.errors import RaftlogError

        self._stop.set()
        self._thread.join(30)
        try:
            self._producer.flush(60)
        except RaftlogError as e:
            self.failed.append(f"flush: {e!r}")
        self._producer.close()


@dataclass
class FailoverRep:
    killed_node: int
    killed_was_controller: bool
    kill_at_s: float  # since the phase started
    unavailable_s: float | None
    new_leader: int | None
    leader_seen_s: float | None  # kill -> a live node's metadata names another leader
    back_in_isr_s: float | None  # restart -> the node is in the ISR again


@dataclass
class FailoverResult:
    rate: int
    session_timeout_ms: int
    options: dict[str, Any]
    reps: list[FailoverRep] = field(default_factory=list)
    sent: int = 0
    acked: int = 0
    failed: int = 0
    ack_times_s: list[float] = field(default_factory=list)  # since the phase started
    cpu: CpuUse = field(default_factory=CpuUse)
    errors: list[str] = field(default_factory=list)

    def unavailable(self, controller_too: bool | None = None) -> list[float]:
        """Every kill's unavailability; only those where the victim was (True) or was not
        (False) also the active controller."""
        return [
            r.unavailable_s
            for r in self.reps
            if r.unavailable_s is not None
            and (controller_too is None or r.killed_was_controller == controller_too)
        ]

    def split_by_controller(self) -> str:
        """'k of n victims were also the active controller (median ...); the others ...'."""
        both, alone = self.unavailable(True), self.unavailable(False)
        text = f"{len(both)} of {len(both) + len(alone)} victims were also the active controller"
        if both:
            text += f" (median {_median(both):.2f} s)"
        if alone:
            text += f", the others median {_median(alone):.2f} s"
        return text


def run_failover(cluster: LocalCluster, s: Settings, progress: Progress) -> FailoverResult:
    from raftlog.errors import RaftlogError

    topic = "repl-failover"
    options = {
        "acks": "all",
        "linger_ms": 0,
        "retry_backoff_ms": 50,
        "delivery_timeout_ms": 120_000,
        "max_in_flight_requests_per_connection": 5,
    }
    res = FailoverResult(s.failover_rate, s.session_timeout_ms, options)
    cluster.create_topic(topic, SPECS["failover"])
    sender = PacedSender(cluster.bootstrap, topic, s.failover_rate, options)
    t0 = time.monotonic()
    progress.message(
        f"failover: {s.failover_reps} kill -9s of the leader of {topic}-0 while an acks=all "
        f"producer sends {s.failover_rate:,} rec/s"
    )
    try:
        with measured(cluster, res.cpu):
            sender.start()
            for rep in range(s.failover_reps):
                desc = cluster.wait_in_sync(topic, NODES)
                # The pipeline is warm: records sent from now on are acknowledged.
                warm_from = sender.first_sent_at_or_after(time.monotonic()) + FAILOVER_WARM_ACKS
                cursor, deadline = len(sender.acks), time.monotonic() + CLUSTER_CHANGE_S_MAX
                while True:
                    acked, cursor = sender.first_ack_from(warm_from, cursor)
                    if acked is not None:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError("the failover producer gets no acknowledgements")
                    time.sleep(POLL_INTERVAL_S)
                victim = desc.leader
                was_controller = cluster.controller() == victim
                cursor = len(sender.acks)  # every later acknowledgement comes after the kill
                killed = cluster.kill9(victim)
                after_kill = sender.first_sent_at_or_after(killed)
                leader_seen: float | None = None
                new_leader: int | None = None
                first_ack: float | None = None
                next_describe = killed
                deadline = killed + ACK_AFTER_KILL_S_MAX
                while time.monotonic() < deadline and (first_ack is None or leader_seen is None):
                    if leader_seen is None and time.monotonic() >= next_describe:
                        next_describe = time.monotonic() + POLL_INTERVAL_S
                        with contextlib.suppress(RaftlogError):
                            d = cluster.describe(topic)
                            if d.leader >= 0 and d.leader != victim:
                                leader_seen, new_leader = time.monotonic() - killed, d.leader
                    if first_ack is None:
                        first_ack, cursor = sender.first_ack_from(after_kill, cursor)
                    time.sleep(ACK_POLL_S)
                unavailable = None if first_ack is None else first_ack - killed
                if unavailable is None:
                    res.errors.append(
                        f"rep {rep + 1}: no acknowledgement within {ACK_AFTER_KILL_S_MAX:g} s"
                    )
                progress.message(
                    f"  rep {rep + 1}/{s.failover_reps}: killed node {victim}"
                    + (" (also the active controller)" if was_controller else "")
                    + (f"; unavailable {unavailable:.2f} s" if unavailable is not None else "")
                    + (f"; node {new_leader} leads" if new_leader is not None else "")
                )
                restarted = time.monotonic()
                cluster.restart(victim)
                back: float | None = None
                try:
                    cluster.wait_in_sync(topic, NODES)
                    back = time.monotonic() - restarted
                except RuntimeError as e:
                    res.errors.append(f"rep {rep + 1}: {e}")
                res.reps.append(
                    FailoverRep(
                        victim,
                        was_controller,
                        killed - t0,
                        unavailable,
                        new_leader,
                        leader_seen,
                        back,
                    )
                )
                if back is None:
                    break
    finally:
        sender.stop()
    res.sent = len(sender.sent_at)
    res.acked = len({i for i, _ in sender.acks})
    res.failed = len(sender.failed)
    res.ack_times_s = sorted(t - t0 for _, t in sender.acks)
    if sender.failed:
        res.errors.append(f"{len(sender.failed)} records failed, first: {sender.failed[0]}")
    if res.acked != res.sent:
        res.errors.append(f"{res.sent:,} sent but {res.acked:,} acknowledged")
    return res


# -- the report ---------------------------------------------------------------------------------


def _pct(part: float, whole: float) -> str:
    return "—" if whole <= 0 else f"{part / whole * 100:.0f}%"


def build_rows(
    s: Settings,
    results: dict[str, PhaseResult],
    e2es: dict[str, E2EResult],
    failover: FailoverResult | None,
) -> list[dict[str, Any]]:
    """One row per measurement, every row present even when its phase did not run."""
    rows: list[dict[str, Any]] = []
    base = results.get("rf1-acks1")
    for phase in THROUGHPUT_PHASES:
        r = results.get(phase)
        row: dict[str, Any] = {"key": phase, "measurement": LABELS[phase], "unit": "rec/s"}
        if phase in ("rf3-all", "rf3-all-many"):
            row["target"] = (
                f">= {TARGET_RF3_RECORDS_PER_S:,.0f} and >= {TARGET_RF3_RATIO:g}x the baseline"
            )
        else:
            row["target"] = "—"
        if r is None or not r.runs:
            row.update(value=None, mb_s=None, ratio=None, status="not run", notes="")
            rows.append(row)
            continue
        rate = r.median
        ratio = (
            rate / base.median if base is not None and base.runs and phase != "rf1-acks1" else None
        )
        notes = [f"median of {len(r.runs)} runs ({min(r.runs):,.0f}-{max(r.runs):,.0f})"]
        if r.budget_hit:
            notes.append(f"{r.budget_hit} run(s) ended by the {s.max_seconds:g} s budget")
        notes.extend(f"ERROR: {e}" for e in r.errors)
        if r.errors:
            status = "failed"
        elif phase in ("rf3-all", "rf3-all-many"):
            ok_rate = rate >= TARGET_RF3_RECORDS_PER_S
            ok_ratio = ratio is None or ratio >= TARGET_RF3_RATIO
            status = "met" if ok_rate and ok_ratio else "missed"
            if not ok_rate or not ok_ratio:
                why = [
                    *(["rate"] if not ok_rate else []),
                    *(["ratio"] if not ok_ratio else []),
                ]
                status += f" ({' and '.join(why)})"
        else:
            status = "—"
        row.update(
            value=rate,
            mb_s=rate * s.value_bytes / MB,
            ratio=ratio,
            status=status,
            notes="; ".join(notes),
        )
        rows.append(row)
    base_e2e = e2es.get("e2e-rf1-acks1")
    for key, attr in (
        ("e2e_base_p50", "p50_ms"),
        ("e2e_p50", "p50_ms"),
        ("e2e_p99", "p99_ms"),
        ("e2e_p999", "p999_ms"),
    ):
        e2e = e2es.get("e2e-rf1-acks1" if key == "e2e_base_p50" else "e2e-rf3-all")
        row = {
            "key": key,
            "measurement": LABELS[key],
            "unit": "ms",
            "mb_s": None,
            "ratio": None,
            "target": f"<= {TARGET_E2E_P50_MS:g} ms at 10,000 rec/s" if key == "e2e_p50" else "—",
        }
        if e2e is None:
            row.update(value=None, status="not run", notes="")
            rows.append(row)
            continue
        value = getattr(e2e, attr)
        if key != "e2e_base_p50" and base_e2e is not None:
            row["ratio"] = value / getattr(base_e2e, attr)
        notes = [
            f"{e2e.rate:,} rec/s for {e2e.seconds:g} s (achieved {e2e.achieved_rate:,.0f}), "
            f"{pacing_note(e2e)}, first {e2e.warmup:g} s left out"
        ]
        if key == "e2e_base_p50":
            notes.append(f"p99 {e2e.p99_ms:.2f} ms, p99.9 {e2e.p999_ms:.2f} ms")
        if e2e.error:
            notes.append(f"ERROR: {e2e.error}")
        if e2e.error or math.isnan(value):
            status = "failed"
        elif key != "e2e_p50":
            status = "—"
        elif value > TARGET_E2E_P50_MS:
            status = "missed"
        else:
            status = "met" if e2e.rate >= 10_000 else f"met at {e2e.rate:,} rec/s only"
        row.update(value=value, status=status, notes="; ".join(notes))
        rows.append(row)
    target_s = s.session_timeout_ms / 1000 + TARGET_FAILOVER_MARGIN_S
    for key in ("failover_median", "failover_max"):
        row = {
            "key": key,
            "measurement": LABELS[key],
            "unit": "s",
            "mb_s": None,
            "ratio": None,
            "target": (
                f"<= {target_s:g} s (session timeout {s.session_timeout_ms / 1000:g} s + 1 s)"
                if key == "failover_median"
                else "—"
            ),
        }
        values = failover.unavailable() if failover is not None else []
        if failover is None:
            row.update(value=None, status="not run", notes="")
        elif not values:
            row.update(value=None, status="failed", notes="; ".join(failover.errors))
        else:
            value = _median(values) if key == "failover_median" else max(values)
            notes = [
                f"{len(values)} kill -9s at {failover.rate:,} rec/s "
                f"({min(values):.2f}-{max(values):.2f} s)",
                failover.split_by_controller(),
            ]
            notes.extend(f"ERROR: {e}" for e in failover.errors)
            if failover.errors:
                status = "failed"
            elif key == "failover_max":
                status = "—"
            else:
                status = "met" if value <= target_s else "missed"
            row.update(value=value, status=status, notes="; ".join(notes))
        rows.append(row)
    return rows


def render_table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| measurement | raftlog | MB/s | vs baseline | target | status | notes |\n"
        "|---|---:|---:|---:|---|---|---|\n"
    )
    lines = []
    for r in rows:
        if r["value"] is None:
            value = "—"
        elif r["unit"] == "rec/s":
            value = f"{r['value']:,.0f} rec/s"
        elif r["unit"] == "ms":
            value = f"{r['value']:.2f} ms"
        else:
            value = f"{r['value']:.2f} s"
        mb = "—" if r["mb_s"] is None else f"{r['mb_s']:.1f}"
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        lines.append(
            f"| {r['measurement']} | {value} | {mb} | {ratio} | {r['target']} | {r['status']} "
            f"| {r['notes']} |"
        )
    return head + "\n".join(lines) + "\n"


def render_cpu(
    results: dict[str, PhaseResult],
    e2e_cpu: dict[str, tuple[CpuUse, dict[int, str]]],
    failover: FailoverResult | None,
) -> str:
    """Where the CPU goes: per phase (summed over its runs), each process's CPU seconds, as a
    share of the phase's wall time (100% = one core) and per record."""
    head = (
        "| phase | wall s | records | client | "
        + " | ".join(f"node {i}" for i in range(1, NODES + 1))
        + " | other processes | load avg (1 min) |\n|---|---:|---:|"
        + "---:|" * (NODES + 1)
        + "---:|---:|\n"
    )
    lines = []

    def cell(cpu_s: float, wall_s: float, records: int, role: str = "") -> str:
        per = f", {cpu_s / records * 1e6:.1f} µs/rec" if records else ""
        return f"{role}{cpu_s:.1f} s ({_pct(cpu_s, wall_s)}{per})"

    entries: list[tuple[str, CpuUse, int, dict[int, str]]] = []
    for phase in THROUGHPUT_PHASES:
        r = results.get(phase)
        if r is not None and r.runs:
            entries.append((phase, r.cpu, sum(r.records), r.roles))
    for phase, (use, roles) in e2e_cpu.items():
        entries.append((f"{phase} (paced; producer only)", use, 0, roles))
    if failover is not None:
        entries.append(("failover (paced; leaders move)", failover.cpu, 0, {}))
    for name, use, records, roles in entries:
        nodes = " | ".join(
            cell(
                use.nodes_s.get(i, 0.0),
                use.wall_s,
                records,
                f"{roles[i]}: " if roles.get(i, "-") != "-" else "",
            )
            for i in range(1, NODES + 1)
        )
        client = cell(use.client_s, use.wall_s, records)
        lines.append(
            f"| {name} | {use.wall_s:.1f} | {records:,} | {client} "
            f"| {nodes} | {use.others_s:.1f} s ({_pct(use.others_s, use.wall_s)}) "
            f"| {use.load_average:.2f} |"
        )
    return head + "\n".join(lines) + "\n"


def render_failover(f: FailoverResult) -> str:
    values = f.unavailable()
    lines = [
        f"An acks=all producer ({', '.join(f'{k}={v}' for k, v in f.options.items())}) sent "
        f"{f.rate:,} rec/s: {f.sent:,} sent, {f.acked:,} acknowledged, {f.failed:,} failed. "
        f"Broker session timeout {f.session_timeout_ms / 1000:g} s.",
    ]
    if values:
        lines.append(
            f"Unavailability (kill -9 -> first acknowledgement of a record sent after it): "
            f"median {_median(values):.2f} s, min {min(values):.2f} s, max {max(values):.2f} s "
            f"over {len(values)} kills; {f.split_by_controller()}."
        )
    lines += [
        "",
        "| rep | killed node | was controller | new leader | new leader in metadata after s "
        "| unavailable s | back in ISR s after restart |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]

    def num(x: float | None) -> str:
        return "—" if x is None else f"{x:.2f}"

    for i, r in enumerate(f.reps, 1):
        lines.append(
            f"| {i} | {r.killed_node} | {'yes' if r.killed_was_controller else 'no'} "
            f"| {r.new_leader if r.new_leader is not None else '—'} | {num(r.leader_seen_s)} "
            f"| {num(r.unavailable_s)} | {num(r.back_in_isr_s)} |"
        )
    return "\n".join(lines) + "\n"


def plot(
    s: Settings,
    rows: list[dict[str, Any]],
    results: dict[str, PhaseResult],
    e2e: E2EResult | None,
    failover: FailoverResult | None,
    prefix: Path,
) -> tuple[list[str], str | None]:
    """Write the PNGs; returns (paths, a note when plotting was skipped)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return [], f"skipped the plots: matplotlib is not importable ({e})"
    paths = []
    thr = [r for r in rows if r["unit"] == "rec/s" and r["value"] is not None]
    if thr:
        fig, ax = plt.subplots(figsize=(10, 4))
        ys = list(range(len(thr)))
        ax.barh(ys, [r["value"] for r in thr], 0.6, color="#1f77b4", label="median")
        for y, r in zip(ys, thr, strict=True):
            runs = results[r["key"]].runs
            ax.plot(runs, [y] * len(runs), "k.", ms=6)
            text = f" {r['value']:,.0f}" + (f" ({r['ratio']:.2f}x)" if r["ratio"] else "")
            ax.text(r["value"], y, text, va="center", fontsize=8)
        ax.plot([], [], "k.", label="each run")
        ax.axvline(TARGET_RF3_RECORDS_PER_S, color="red", ls="--", lw=1.2, label="RF=3 target")
        ax.set_yticks(ys, [r["measurement"] for r in thr])
        ax.invert_yaxis()
        ax.set_xlabel("records/s")
        top = max(*(max(results[r["key"]].runs) for r in thr), TARGET_RF3_RECORDS_PER_S)
        ax.set_xlim(0, top * 1.3)
        ax.set_title(f"Producer throughput on the 3-node local cluster ({s.value_bytes} B records)")
        ax.legend(fontsize=8, loc="lower right")
        paths.append(_save(plt, fig, Path(f"{prefix}-throughput.png")))
    if e2e is not None and e2e.per_second:
        path = Path(f"{prefix}-latency.png")
        title = f"End-to-end latency at {e2e.rate:,} rec/s, RF=3 acks=all, linger_ms=0"
        plot_latency(plt, e2e, path, title, (TARGET_E2E_P50_MS, "p50 target"))
        paths.append(str(path))
    if failover is not None and failover.ack_times_s:
        bin_s = 0.1
        end = failover.ack_times_s[-1]
        counts = [0] * (int(end / bin_s) + 1)
        for t in failover.ack_times_s:
            counts[int(t / bin_s)] += 1
        fig, ax = plt.subplots(figsize=(11, 4))
        ax.plot(
            [i * bin_s for i in range(len(counts))],
            [c / bin_s for c in counts],
            lw=0.8,
            label="acknowledged writes/s (100 ms bins)",
        )
        for i, rep in enumerate(failover.reps):
            ax.axvline(
                rep.kill_at_s, color="red", lw=1, label="kill -9 of the leader" if i == 0 else None
            )
            if rep.unavailable_s is not None:
                ax.axvspan(
                    rep.kill_at_s,
                    rep.kill_at_s + rep.unavailable_s,
                    color="red",
                    alpha=0.12,
                    label="unavailable" if i == 0 else None,
                )
        ax.set_xlabel("seconds since the failover phase started")
        ax.set_ylabel("acknowledged records/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.set_title(
            f"acks=all writes at {failover.rate:,} rec/s through {len(failover.reps)} "
            f"kill -9s of the partition leader (session timeout "
            f"{failover.session_timeout_ms / 1000:g} s)"
        )
        ax.legend(fontsize=8, loc="lower right")
        paths.append(_save(plt, fig, Path(f"{prefix}-failover.png")))
    return paths, None


def node_profiles(profile_dir: str, top: int = PROFILE_TOP_FUNCTIONS) -> dict[int, list[list[Any]]]:
    """Per node, its `top` functions by own time over every incarnation's profile (written by
    `raftlog node` under RAFTLOG_PROFILE_DIR as node-<id>-<pid>.prof): [function, calls, own s,
    cumulative s]."""
    import pstats

    out: dict[int, list[list[Any]]] = {}
    for node_id in range(1, NODES + 1):
        files = sorted(Path(profile_dir).glob(f"node-{node_id}-*.prof"))
        if not files:
            continue
        stats: Any = pstats.Stats(*(str(f) for f in files))
        rows = []
        for (path, line, func), (_, calls, own, cum, _) in stats.stats.items():
            if func in IDLE_FUNCTIONS:
                continue
            where = f"{func} ({Path(path).name}:{line})" if line else func
            rows.append([where, calls, own, cum])
        rows.sort(key=lambda r: r[2], reverse=True)
        out[node_id] = rows[:top]
    return out


def render_profiles(profiles: dict[int, list[list[Any]]], roles: dict[str, str]) -> str:
    lines = []
    for node_id, rows in profiles.items():
        lines += [
            f"Node {node_id}{roles.get(str(node_id), '')}:",
            "",
            "| function | calls | own s | cumulative s |",
            "|---|---:|---:|---:|",
            *(f"| `{f}` | {calls:,} | {own:.2f} | {cum:.2f} |" for f, calls, own, cum in rows),
            "",
        ]
    return "\n".join(lines)


def _save(plt: Any, fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def _paper_settings(s: Settings) -> PaperSettings:
    """The paper benchmark's settings its latency phase reads."""
    return PaperSettings(
        messages=s.messages,
        max_seconds=s.max_seconds,
        value_bytes=s.value_bytes,
        max_in_flight=None,
        fetch_bytes=200 * 1024,
        poll_records=500,
        consume_from="linger",
        consumer_runs=1,
        producer_runs=1,
        e2e_rate=s.e2e_rate,
        e2e_seconds=s.e2e_seconds,
        e2e_warmup=s.e2e_warmup,
        e2e_pacing_ms=s.e2e_pacing_ms,
        phases=["e2e"],
        quick=s.quick,
    )


def run(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    s = settings_from(args, parser or build_parser())
    command = common.command_line(
        "bench.replication_bench", given=getattr(args, "command_line", None)
    )
    wd = common.prepare_work_dir(args.data_dir, "raftlog-repl-")
    work, facts = wd.path, wd.facts
    floor_start = python_floor(s.value_bytes)
    facts["python_floor_at_start"] = f"{floor_start:,.0f} rec/s"
    progress = Progress()
    progress.message(
        f"replication bench: {', '.join(s.phases)}; {s.messages:,} records of "
        f"{s.value_bytes} B x {s.runs} runs; data in {work}"
    )
    results: dict[str, PhaseResult] = {
        p: PhaseResult(p, LABELS[p], producer_options(SPECS[p].acks), SPECS[p].config())
        for p in THROUGHPUT_PHASES
        if p in s.phases
    }
    e2es: dict[str, E2EResult] = {}
    e2e_cpu: dict[str, tuple[CpuUse, dict[int, str]]] = {}
    failover: FailoverResult | None = None
    cluster = LocalCluster(work, s.session_timeout_ms)
    profile_dir = os.path.join(work, "profiles")
    if s.profile:
        from raftlog.launcher import PROFILE_DIR_ENV

        os.makedirs(profile_dir, exist_ok=True)
        os.environ[PROFILE_DIR_ENV] = profile_dir  # the nodes (and restarted ones) inherit it
    profiles: dict[int, list[list[Any]]] = {}
    stamp = common.run_stamp(utc=False)
    failure: str | None = None
    try:
        cluster.start()
        progress.message(
            f"cluster ready: nodes {', '.join(f'{i} pid {p}' for i, p in cluster.pids.items())} "
            f"on {cluster.bootstrap}"
        )
        for i in range(s.runs):
            for phase in THROUGHPUT_PHASES:
                if phase in s.phases:
                    run_throughput(phase, i, cluster, s, progress, results[phase])
        for phase in E2E_PHASES:
            if phase not in s.phases:
                continue
            topic = f"repl-{phase}"
            cluster.create_topic(topic, SPECS[phase])
            roles = roles_of(cluster.describe(topic))
            use = CpuUse()
            with measured(cluster, use):
                e2es[phase] = run_e2e(
                    topic,
                    cluster.bootstrap,
                    _paper_settings(s),
                    progress,
                    work,
                    acks=SPECS[phase].acks,
                    create=False,
                )
            e2e_cpu[phase] = (use, roles)
        if "failover" in s.phases:
            failover = run_failover(cluster, s, progress)
    except (RuntimeError, OSError) as e:
        failure = f"{type(e).__name__}: {e}; nodes' log: {cluster.log_tail()}"
        progress.message(f"FAILED: {failure}")
    finally:
        cluster.stop()
        if s.profile:
            profiles = node_profiles(profile_dir)
        common.keep_or_remove(work, args.keep_data, progress.message)

    rows = build_rows(s, results, e2es, failover)
    facts["python_floor_at_end"] = f"{python_floor(s.value_bytes):,.0f} rec/s"
    facts["load_average_at_end"] = common.load_average()
    prefix = common.results_prefix(args.results_dir, "replication", stamp)
    pngs: list[str] = []
    plot_note = "plots skipped (--no-plots)"
    if not args.no_plots:
        e2e = e2es.get("e2e-rf3-all")
        pngs, plot_note_or_none = plot(s, rows, results, e2e, failover, prefix)
        plot_note = plot_note_or_none or ""
    md = [
        *report_head(f"raftlog replication benchmark ({facts['date']})", command, args.note, facts),
        *([f"FAILED: {failure}", ""] if failure else []),
        render_table(rows),
        targets_line(rows),
        "",
        "Three `raftlog dev` nodes (combined controller+broker processes), the producer and, "
        f"for the latency phase, a consumer process, all on this machine ({facts['nproc']} "
        "cores). One partition per topic. 'vs baseline' is the median over the median of "
        "RF=1 acks=1 in this same invocation; the phases took turns run by run.",
        "",
        "## Where the CPU goes",
        "",
        "CPU seconds of each process per phase (summed over its runs), as a share of the wall "
        "time (100% = one core busy) and per record; the node's role for the phase's partition "
        "first. 'other processes' is what the rest of the machine used meanwhile (the machine "
        "is shared).",
        "",
        render_cpu(results, e2e_cpu, failover),
    ]
    for phase, e2e_result in e2es.items():
        spec = SPECS[phase]
        title = f"## End-to-end latency (RF={spec.replication_factor}, acks={spec.acks})"
        md += [title, "", render_e2e(e2e_result)]
    if failover is not None:
        md += ["## Failover: kill -9 of the partition leader", "", render_failover(failover)]
    if profiles:
        roles = {str(i): f" ({phase_roles_text(results, i)})" for i in range(1, NODES + 1)}
        md += [
            "## Node profiles (--profile)",
            "",
            "cProfile of each node's main thread (the event loop: every request handler, the "
            "replica fetchers, storage calls; not the Raft thread or the fsync thread) over its "
            "whole life, every incarnation summed; top functions by own time (the event loop's "
            "idle wait in epoll left out). Under the profiler the nodes run slower: the "
            "figures above are not comparable with an unprofiled run.",
            "",
            render_profiles(profiles, roles),
        ]
    if pngs:
        md += ["## Plots", "", *(f"- {p}" for p in pngs), ""]
    elif plot_note:
        md += [plot_note, ""]
    data = {
        "command": command,
        "machine": facts,
        "settings": asdict(s),
        "rows": rows,
        "phases": {k: {**asdict(v), "median": v.median} for k, v in results.items() if v.runs},
        "e2e": {k: asdict(v) for k, v in e2es.items()},
        "e2e_cpu": {k: asdict(v[0]) for k, v in e2e_cpu.items()},
        "failover": asdict(failover) if failover is not None else None,
        "failure": failure,
        "profiles": {str(k): v for k, v in profiles.items()},
        "plots": pngs,
    }
    write_report(prefix, "\n".join(md), data, plot_note)
    failed = [r for r in rows if r["status"] == "failed"]
    return 1 if failed or failure else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return run(args, parser)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
