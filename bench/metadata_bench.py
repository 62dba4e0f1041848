"""Metadata benchmark: topic creates/s, offset commits/s, controller failover, group rebalance.

Run from the repository root::

    .venv/bin/python -m bench.metadata_bench                  # full run
    .venv/bin/python -m bench.metadata_bench --quick          # short run (tests)
    .venv/bin/python -m bench.metadata_bench --only commits   # one phase (for profiling)
    .venv/bin/python -m bench.metadata_bench --only commits --profile   # + py-spy of the nodes

The bench starts its own local cluster: three combined controller+broker nodes on 127.0.0.1,
each its own process (`python -m raftlog.cli node --config DIR/node-<id>/node.toml`, the configs
written as `raftlog dev --nodes 3 --port 0` writes them, with free ports), in a fresh data
directory on the real disk, by the launcher (raftlog/launcher.py). It waits for every node's
ready file (with a deadline) and stops every node at the end (SIGTERM, then SIGKILL), also
after an error or Ctrl-C. The clients run in this process, on one asyncio loop per phase.

Phases, in the order they run (`--only` picks some):

- `topics`: `--topics` topic creates (1 partition, replication factor 1), first one at a time,
  then `--topic-concurrency` in flight at once (asyncio.gather behind a semaphore), each through
  an `AsyncAdmin` bootstrapped on the active controller's broker (as Kafka clients send
  CreateTopics to the controller). Each create returns once its Raft entry is applied.
- `commits`: `--members` members of one group (raw `GroupMembership`s, each with its own
  connections, as separate consumers would have), on a topic of `--partitions-per-member`
  partitions per member; each member commits the offsets of its own partitions in a loop, for
  `--commit-seconds` after `--commit-warmup` seconds that are not counted. Two runs on the same
  group: the "sustained" one with `--commit-inflight` (1) OffsetCommit request outstanding per
  member (a consumer committing synchronously), then a "pipelined" one with
  `--pipelined-inflight` (10) per member (commits not awaited one by one; 0 skips it), which
  shows how far the coordinator goes when more commits wait. Members heartbeat every second.
  commits/s = successful OffsetCommit requests completed in the measured window / its length;
  latency = request sent to response received. The coordinator batches concurrent commits into
  one Raft entry (`commit_batch`), one batch at a time. CPU time of every node and of this
  process over each window is reported, so the report shows where the time goes.
- `rebalance`: `--rebalances` rounds, each with a fresh group of `--group-size` members on a
  topic of `--rebalance-partitions` partitions. Every member heartbeats every
  `--heartbeat-ms` (50 ms) and, when a heartbeat says the generation moved on, joins again.
  Then one member leaves cleanly (LEAVE_GROUP). Rebalance time = from sending the leave until
  the last remaining member's re-join returned, with every remaining member on the new
  generation and their assignments covering every partition exactly once.
- `failover`: `--failovers` rounds. With a healthy cluster (all nodes agree on the active
  controller, every broker registered and unfenced), kill -9 the active controller's process;
  failover time = from the kill until a surviving node reports another controller id AND a
  metadata write (a topic create, sent to the new controller's broker) succeeded. The killed
  node is then restarted from its config, and the next round waits until it is ready and the
  cluster is healthy again.

Targets (from the issue): >= 5,000 offset commits/s sustained; controller failover median
<= 1.5 s; rebalance after a clean leave <= 1 s. Topic creates have no target.

`--profile` runs `py-spy record` (collapsed stacks, every thread) on every node during the
concurrent topic creates and each commit window; the files go next to the results.

Results: a markdown table on stdout and in bench/results/metadata-<timestamp>.md, the same
figures in .json, and metadata-<timestamp>.png (failover time per kill, commit latency
histogram; skipped with a note without matplotlib). Progress goes to stderr. The nodes' logs
stay in the data directory while the bench runs (`--keep-data` keeps them afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import common
from bench.common import REPO
from raftlog import launcher
from raftlog.client.admin import AsyncAdmin
from raftlog.client.cluster import ClusterClient
from raftlog.client.group import GroupMembership
from raftlog.errors import RaftlogError
from raftlog.launcher import LaunchError, PortPlan, process_cpu_seconds, stop_all
from raftlog.topics import TopicPartition

HOST = "127.0.0.1"
NODES = 3
PHASES = ("topics", "commits", "rebalance", "failover")

COMMITS_TARGET = 5_000.0
FAILOVER_TARGET_S = 1.5
REBALANCE_TARGET_S = 1.0

# The first column of the results table, one row per metric, in this order.
ROWS = {
    "create_seq": "topic creates/s, sequential",
    "create_conc": "topic creates/s, concurrent",
    "commits": "offset commits/s, sustained",
    "commit_p50": "offset commit latency p50",
    "commit_p99": "offset commit latency p99",
    "commits_pipelined": "offset commits/s, pipelined",
    "failover_median": "controller failover, median",
    "failover_min": "controller failover, min",
    "failover_max": "controller failover, max",
    "election_median": "new controller reported, median",
    "rebalance_median": "rebalance after a clean leave, median",
}
ROW_PHASE = {
    "create_seq": "topics",
    "create_conc": "topics",
    "commits": "commits",
    "commit_p50": "commits",
    "commit_p99": "commits",
    "commits_pipelined": "commits",
    "failover_median": "failover",
    "failover_min": "failover",
    "failover_max": "failover",
    "election_median": "failover",
    "rebalance_median": "rebalance",
}

DEFAULTS: dict[str, Any] = {
    "topics": 200,
    "commit_seconds": 10.0,
    "commit_warmup": 1.0,
    "failovers": 10,
    "rebalances": 5,
}
QUICK: dict[str, Any] = {
    "topics": 20,
    "commit_seconds": 3.0,
    "commit_warmup": 0.5,
    "failovers": 2,
    "rebalances": 1,
}


# -- progress -----------------------------------------------------------------------------------

_T0 = time.monotonic()


def progress(message: str) -> None:
    print(
        f"[metadata-bench {time.monotonic() - _T0:7.1f} s] {message}", file=sys.stderr, flush=True
    )


# -- the local cluster --------------------------------------------------------------------------


class LocalCluster(launcher.LocalCluster):
    """Three combined controller+broker nodes on 127.0.0.1, configured as `raftlog dev
    --nodes 3 --port 0` would configure them (free client, Raft and replication ports), each
    started by the launcher in its own session (a Ctrl-C at the terminal reaches only the
    bench, which then stops the nodes itself); each start logs to DIR/logs/node-<id>-<k>.err.
    Errors are RuntimeErrors naming the node, with its log's tail."""

    def __init__(self, data_dir: str, session_timeout_ms: int, log_level: str):
        self.log_level = log_level
        self.session_timeout_ms = session_timeout_ms
        ports = PortPlan.picked(NODES, HOST)
        paths = launcher.write_cluster_configs(
            data_dir,
            ports,
            settings={
                "auto_create_topics": False,
                "fetch_zero_copy": False,
                "broker_session_timeout_ms": session_timeout_ms,
            },
        )
        super().__init__(
            paths,
            [f"{HOST}:{p}" for p in ports.client],
            log_dir=os.path.join(data_dir, "logs"),
            log_level=log_level,
            cwd=REPO,
            new_session=True,
        )

    def start(self, *node_ids: int, timeout_s: float = launcher.START_TIMEOUT_S) -> None:
        for i in node_ids or self.node_ids():
            self.nodes[i].launch()
        self.wait_ready(list(node_ids or self.node_ids()), timeout_s)

    def wait_ready(self, ids: Sequence[int], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for i in ids:
            node = self.nodes[i]
            try:
                node.wait_ready(max(deadline - time.monotonic(), 0.05))
            except LaunchError as e:
                raise RuntimeError(f"{e}; its log ends with:\n{node.log_tail()}") from None

    def restart(self, node_id: int) -> None:
        self.nodes[node_id].launch()

    def kill9(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def address(self, node_id: int) -> str:
        return self.nodes[node_id].client_address

    def cpu(self) -> dict[int, float | None]:
        return {
            i: (process_cpu_seconds(n.pid) if n.pid is not None else None)
            for i, n in self.nodes.items()
        }

    def stop(self, timeout_s: float = 15.0) -> None:  # type: ignore[override]
        """SIGTERM every live node, wait, then SIGKILL the ones still running."""
        for problem in stop_all(list(self.nodes.values()), timeout_s):
            progress(problem)


# -- helpers ------------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


async def describe_views(
    cluster: LocalCluster, admins: dict[int, AsyncAdmin]
) -> dict[int, dict[str, Any] | BaseException]:
    ids = list(admins)
    results = await asyncio.gather(
        *(admins[i].describe_cluster() for i in ids), return_exceptions=True
    )
    return dict(zip(ids, results, strict=True))


def node_admins(
    cluster: LocalCluster, ids: Sequence[int], timeout_ms: int
) -> dict[int, AsyncAdmin]:
    """One admin client per node, bootstrapped on that node only (its own view)."""
    return {
        i: AsyncAdmin(
            cluster.address(i), client_id=f"bench-view-{i}", request_timeout_ms=timeout_ms
        )
        for i in ids
    }


async def close_all(admins: dict[int, AsyncAdmin]) -> None:
    for a in admins.values():
        await a.close()


async def wait_healthy(cluster: LocalCluster, timeout_s: float) -> int:
    """Wait until every node is up, agrees on the active controller, reports a ready quorum,
    and sees every broker registered and unfenced; returns the controller id."""
    deadline = time.monotonic() + timeout_s
    admins = node_admins(cluster, list(cluster.nodes), 1000)
    last: Any = None
    try:
        while True:
            views = await describe_views(cluster, admins)
            last = views
            good = [v for v in views.values() if isinstance(v, dict)]
            if len(good) == len(cluster.nodes):
                controllers = {v["controller_id"] for v in good}
                brokers_ok = all(
                    sorted(b["node_id"] for b in v["brokers"]) == sorted(cluster.nodes)
                    and not any(b["fenced"] for b in v["brokers"])
                    for v in good
                )
                ready = all(v["quorum"]["ready"] for v in good)
                applied = [v["quorum"]["last_applied"] for v in good]
                caught_up = max(applied) - min(applied) <= 5
                one = len(controllers) == 1 and -1 not in controllers
                if one and brokers_ok and ready and caught_up:
                    return int(controllers.pop())
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster not healthy after {timeout_s:.0f} s: {last!r}")
            await asyncio.sleep(0.1)
    finally:
        await close_all(admins)


def new_member(bootstrap: str, group: str, name: str, session_timeout_ms: int) -> GroupMembership:
    return GroupMembership(
        ClusterClient(bootstrap, name, 10_000),
        group,
        name,
        None,
        session_timeout_ms,
        session_timeout_ms,
        ["range"],
        10_000,
    )


def all_partitions(topic: str, n: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(n)}


def stable(members: Sequence[GroupMembership], topic: str, partitions: int) -> bool:
    """Same generation everywhere and every partition owned by exactly one member."""
    if len({m.generation for m in members}) != 1:
        return False
    owned = [tp for m in members for tp in m.assignment]
    return len(owned) == partitions and set(owned) == all_partitions(topic, partitions)


async def join_group(
    members: Sequence[GroupMembership],
    topic: str,
    partitions: int,
    heartbeat_s: float = 0.05,
    timeout_s: float = 60.0,
) -> None:
    """All members join at once, as consumers starting together do, until every member holds
    the current generation's assignment. A join waits while the group rebalances (the
    coordinator answers it when every member has joined again), and the members that already
    hold a generation learn of the next one from a heartbeat: so each member heartbeats every
    `heartbeat_s` and joins again when told to, like a consumer's poll loop."""
    done = asyncio.Event()

    async def member(m: GroupMembership) -> None:
        await m.join([topic])
        while not done.is_set():
            if stable(members, topic, partitions):
                done.set()
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), heartbeat_s)
            if not done.is_set() and not await m.heartbeat():
                await m.join([topic])

    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.gather(*(member(m) for m in members))
    except TimeoutError:
        raise RuntimeError(
            f"group of {len(members)} on {topic} did not settle in {timeout_s:.0f} s "
            f"(generations {sorted({m.generation for m in members})})"
        ) from None


async def close_members(members: Sequence[GroupMembership]) -> None:
    await asyncio.gather(*(m.leave() for m in members), return_exceptions=True)
    for m in members:
        await m.close()
        await m.client.close()


# -- phase: topic creates -----------------------------------------------------------------------


@dataclass
class TopicsResult:
    count: int
    concurrency: int
    seq_seconds: float
    seq_latencies_ms: list[float]
    conc_seconds: float
    conc_latencies_ms: list[float]
    via_node: int
    profiles: list[str] = field(default_factory=list)

    @property
    def seq_rate(self) -> float:
        return self.count / self.seq_seconds

    @property
    def conc_rate(self) -> float:
        return self.count / self.conc_seconds


async def phase_topics(
    cluster: LocalCluster, count: int, concurrency: int, profile_prefix: str | None
) -> TopicsResult:
    controller = await wait_healthy(cluster, 60)
    async with AsyncAdmin(cluster.address(controller), client_id="bench-topics") as admin:
        await admin.describe_cluster()  # connected before the clock starts
        seq: list[float] = []
        progress(f"topics: {count} creates one at a time via node {controller} (the controller)")
        t0 = time.perf_counter()
        for i in range(count):
            t = time.perf_counter()
            await admin.create_topic(f"bench-seq-{i}", 1, 1)
            seq.append((time.perf_counter() - t) * 1000)
        seq_s = time.perf_counter() - t0
        progress(f"topics: sequential {count / seq_s:,.0f} creates/s")

        conc: list[float] = []
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                t = time.perf_counter()
                await admin.create_topic(f"bench-conc-{i}", 1, 1)
                conc.append((time.perf_counter() - t) * 1000)

        progress(f"topics: {count} creates, {concurrency} in flight")
        profiler = (
            Profiler(cluster, f"{profile_prefix}-topics-concurrent", controller)
            if profile_prefix
            else None
        )
        if profiler:
            profiler.start()
        t0 = time.perf_counter()
        try:
            await asyncio.gather(*(one(i) for i in range(count)))
        finally:
            conc_s = time.perf_counter() - t0
            profiles = profiler.stop() if profiler else []
        progress(f"topics: concurrent {count / conc_s:,.0f} creates/s")
    return TopicsResult(count, concurrency, seq_s, seq, conc_s, conc, controller, profiles)


# -- phase: offset commits ----------------------------------------------------------------------


@dataclass
class CommitsResult:
    members: int
    partitions: int
    inflight: int
    warmup_s: float
    window_s: float
    commits: int  # successful, completed in the window
    latencies_ms: list[float]  # of those, sorted
    per_second: list[int]  # completed in each whole second of the window
    errors: dict[str, int]
    coordinator: int
    cpu_percent: dict[str, float | None]
    join_seconds: float
    profiles: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.commits / self.window_s

    def summary(self) -> dict[str, Any]:
        """The JSON form: percentiles and a histogram instead of every latency."""
        d = {k: v for k, v in self.__dict__.items() if k != "latencies_ms"}
        lats = self.latencies_ms
        d["rate"] = self.rate
        d["latency_ms"] = {f"p{q:g}": percentile(lats, q) for q in (0, 10, 50, 90, 99, 99.9, 100)}
        edges = [0.5 * 2 ** (i / 2) for i in range(25)]  # 0.5 ms .. 2 s, sqrt(2) apart
        counts = [0] * (len(edges) + 1)
        j = 0
        for v in lats:  # sorted
            while j < len(edges) and v > edges[j]:
                j += 1
            counts[j] += 1
        d["latency_histogram_ms"] = {"upper_edges": edges, "counts": counts}
        return d


class Profiler:
    """`py-spy record` of every node (collapsed stacks, every thread, idle left out) from
    `start()` until `stop()`; the files go next to the results."""

    def __init__(self, cluster: LocalCluster, prefix: str, controller: int):
        self.cluster, self.prefix, self.controller = cluster, prefix, controller
        self.procs: list[tuple[subprocess.Popen[bytes], str]] = []

    def start(self) -> None:
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if not os.path.exists(spy):
            progress("profile: py-spy not found; not profiling")
            return
        for i, node in self.cluster.nodes.items():
            if node.pid is None:
                continue
            role = "controller" if i == self.controller else "follower"
            path = f"{self.prefix}-node{i}-{role}.txt"
            cmd = [spy, "record", "--pid", str(node.pid), "--rate", "250", "--threads"]
            cmd += ["--format", "raw", "--output", path, "--nonblocking"]
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append((proc, path))

    def stop(self) -> list[str]:
        for proc, _ in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        for proc, _ in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        return [path for _, path in self.procs if os.path.exists(path)]


async def commit_run(
    cluster: LocalCluster,
    members: Sequence[GroupMembership],
    controller: int,
    inflight: int,
    warmup_s: float,
    seconds: float,
    profile_prefix: str | None,
) -> tuple[float, list[tuple[float, float]], dict[str, int], dict[str, float | None], list[str]]:
    """Every member commits its own partitions in a loop with `inflight` requests
    outstanding; returns (window seconds, [(completion time in the window, latency ms)],
    errors, CPU %, profile paths)."""
    stop = asyncio.Event()
    done: list[tuple[float, float]] = []
    errors: dict[str, int] = {}

    async def committer(m: GroupMembership, lane: int) -> None:
        offset = lane
        while not stop.is_set():
            offset += inflight
            t0 = time.perf_counter()
            try:
                await m.commit(dict.fromkeys(m.assignment, offset))
            except RaftlogError as e:
                name = type(e).__name__
                errors[name] = errors.get(name, 0) + 1
                await asyncio.sleep(0.05)
                continue
            t1 = time.perf_counter()
            done.append((t1, (t1 - t0) * 1000))

    tasks = [asyncio.create_task(committer(m, lane)) for m in members for lane in range(inflight)]
    profiler = Profiler(cluster, profile_prefix, controller) if profile_prefix else None
    profiles: list[str] = []
    try:
        await asyncio.sleep(warmup_s)
        start = time.perf_counter()
        cpu0, self0 = cluster.cpu(), time.process_time()
        if profiler:
            profiler.start()
        progress(
            f"commits: {len(members)} members x {inflight} in flight, measuring for {seconds:g} s"
        )
        await asyncio.sleep(seconds)
        end = time.perf_counter()
        cpu1, self1 = cluster.cpu(), time.process_time()
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        if profiler:
            profiles = profiler.stop()
    window = end - start
    cpu: dict[str, float | None] = {}
    for i in cluster.nodes:
        a, b = cpu0.get(i), cpu1.get(i)
        role = " (controller, coordinator)" if i == controller else ""
        cpu[f"node {i}{role}"] = None if a is None or b is None else 100 * (b - a) / window
    cpu["bench clients (this process)"] = 100 * (self1 - self0) / window
    return window, [(t - start, lat) for t, lat in done if start <= t <= end], errors, cpu, profiles


async def phase_commits(
    cluster: LocalCluster,
    members_n: int,
    per_member: int,
    inflights: Sequence[int],
    warmup_s: float,
    seconds: float,
    profile_prefix: str | None,
) -> list[CommitsResult]:
    controller = await wait_healthy(cluster, 60)
    topic = "bench-commits"
    partitions = members_n * per_member
    async with AsyncAdmin(cluster.address(controller), client_id="bench-commits") as admin:
        await admin.create_topic(topic, partitions, 1)
    bootstrap = cluster.bootstrap
    members = [
        new_member(bootstrap, "bench-commits", f"committer-{i}", 30_000) for i in range(members_n)
    ]
    progress(f"commits: {members_n} members join group bench-commits ({partitions} partitions)")
    t = time.monotonic()
    await join_group(members, topic, partitions)
    join_s = time.monotonic() - t
    progress(f"commits: group stable at generation {members[0].generation} in {join_s:.1f} s")
    stop = asyncio.Event()

    async def heartbeats(m: GroupMembership) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            if not stop.is_set():
                await m.heartbeat()

    hb = [asyncio.create_task(heartbeats(m)) for m in members]
    out = []
    try:
        for inflight in inflights:
            prefix = f"{profile_prefix}-commits-inflight{inflight}" if profile_prefix else None
            window, done, errors, cpu, profiles = await commit_run(
                cluster, members, controller, inflight, warmup_s, seconds, prefix
            )
            per_second = [0] * max(1, int(seconds))
            for t_rel, _ in done:
                if int(t_rel) < len(per_second):
                    per_second[int(t_rel)] += 1
            r = CommitsResult(
                members=members_n,
                partitions=partitions,
                inflight=inflight,
                warmup_s=warmup_s,
                window_s=window,
                commits=len(done),
                latencies_ms=sorted(lat for _, lat in done),
                per_second=per_second,
                errors=errors,
                coordinator=controller,
                cpu_percent=cpu,
                join_seconds=join_s,
                profiles=profiles,
            )
            progress(
                f"commits: {inflight} in flight: {r.rate:,.0f} commits/s, p50 "
                f"{percentile(r.latencies_ms, 50):.1f} ms, p99 "
                f"{percentile(r.latencies_ms, 99):.1f} ms, errors {errors or 'none'}"
            )
            out.append(r)
    finally:
        stop.set()
        await asyncio.gather(*hb, return_exceptions=True)
        await close_members(members)
    return out


# -- phase: rebalance ---------------------------------------------------------------------------


@dataclass
class RebalanceRound:
    generation_before: int
    generation_after: int
    leave_ms: float  # the LEAVE_GROUP request itself
    first_rejoin_ms: float
    total_ms: float  # leave sent -> last remaining member re-joined with full coverage


async def rebalance_round(
    bootstrap: str, topic: str, partitions: int, size: int, heartbeat_s: float, r: int
) -> RebalanceRound:
    group = f"bench-rebalance-{r}"
    members = [new_member(bootstrap, group, f"rebalance-{r}-{i}", 10_000) for i in range(size)]
    await join_group(members, topic, partitions)
    leaver, stayers = members[-1], members[:-1]
    before = leaver.generation
    rejoined: dict[int, float] = {}
    stop = asyncio.Event()

    async def member_loop(k: int, m: GroupMembership) -> None:
        while not stop.is_set():
            if not await m.heartbeat():
                await m.join([topic])
                rejoined[k] = time.perf_counter()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), heartbeat_s)

    tasks = [asyncio.create_task(member_loop(k, m)) for k, m in enumerate(stayers)]
    try:
        await asyncio.sleep(max(0.3, 4 * heartbeat_s))  # heartbeats in their steady state
        rejoined.clear()
        t0 = time.perf_counter()
        await leaver.leave()
        t_left = time.perf_counter()
        deadline = t0 + 30
        while not (
            len(rejoined) == len(stayers)
            and stable(stayers, topic, partitions)
            and stayers[0].generation > before
        ):
            if time.perf_counter() > deadline:
                raise RuntimeError(
                    f"rebalance round {r}: not settled after 30 s (generations "
                    f"{sorted(m.generation for m in stayers)}, {len(rejoined)} re-joined)"
                )
            await asyncio.sleep(0.002)
        t_done = max(rejoined.values())
        t_first = min(rejoined.values())
        after = stayers[0].generation
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await close_members(members)
    return RebalanceRound(
        generation_before=before,
        generation_after=after,
        leave_ms=(t_left - t0) * 1000,
        first_rejoin_ms=(t_first - t0) * 1000,
        total_ms=(t_done - t0) * 1000,
    )


async def create_rebalance_topic(cluster: LocalCluster, partitions: int) -> str:
    """The topic the rebalance rounds' groups share, made on the healthy cluster's controller."""
    controller = await wait_healthy(cluster, 60)
    topic = "bench-rebalance"
    async with AsyncAdmin(cluster.address(controller), client_id="bench-rebalance") as admin:
        await admin.create_topic(topic, partitions, 1)
    return topic


async def phase_rebalance(
    cluster: LocalCluster, rounds: int, size: int, partitions: int, heartbeat_ms: int
) -> list[RebalanceRound]:
    topic = await create_rebalance_topic(cluster, partitions)
    out = []
    for r in range(1, rounds + 1):
        res = await rebalance_round(
            cluster.bootstrap, topic, partitions, size, heartbeat_ms / 1000, r
        )
        progress(
            f"rebalance {r}/{rounds}: {res.total_ms:.0f} ms (leave {res.leave_ms:.0f} ms, "
            f"first re-join at {res.first_rejoin_ms:.0f} ms), generation "
            f"{res.generation_before} -> {res.generation_after}"
        )
        out.append(res)
    return out


# -- phase: controller failover -----------------------------------------------------------------


@dataclass
class FailoverRound:
    killed: int
    new_controller: int
    reported_by: int
    election_s: float  # kill -> a survivor reports another controller
    write_s: float  # kill -> the first metadata write succeeded
    write_attempts: int
    recovery_s: float  # restart of the killed node -> healthy cluster again

    @property
    def failover_s(self) -> float:
        return max(self.election_s, self.write_s)


async def failover_round(cluster: LocalCluster, k: int, poll_s: float) -> FailoverRound:
    controller = await wait_healthy(cluster, 90)
    await asyncio.sleep(0.5)  # let the last joiner's Raft connections settle
    survivors = [i for i in cluster.nodes if i != controller]
    views = node_admins(cluster, survivors, 500)
    writers = {
        i: AsyncAdmin(cluster.address(i), client_id=f"bench-write-{i}", request_timeout_ms=2000)
        for i in survivors
    }
    try:
        # Connected before the kill, so the measurement holds no connection set-up.
        for a in [*views.values(), *writers.values()]:
            await a.describe_cluster()
        t0 = time.perf_counter()
        cluster.kill9(controller)
        new, reporter = -1, -1
        while new < 0:
            for i, v in (await describe_views(cluster, views)).items():
                if isinstance(v, dict) and v["controller_id"] not in (-1, controller):
                    new, reporter = int(v["controller_id"]), i
                    break
            else:
                if time.perf_counter() - t0 > 60:
                    raise RuntimeError(f"no new controller 60 s after killing node {controller}")
                await asyncio.sleep(poll_s)
        election_s = time.perf_counter() - t0
        # The write goes to the new controller's broker (a client learns it from metadata);
        # any RaftlogError (no leader yet, timeout) is retried at once.
        writer = writers.get(new) or writers[reporter]
        attempts = 0
        while True:
            attempts += 1
            try:
                await writer.create_topic(f"bench-failover-{k}-{attempts}", 1, 1)
                break
            except RaftlogError as e:
                if time.perf_counter() - t0 > 60:
                    raise RuntimeError(f"no metadata write 60 s after the kill: {e}") from e
                await asyncio.sleep(poll_s)
        write_s = time.perf_counter() - t0
    finally:
        await close_all(views)
        await close_all(writers)
    t1 = time.perf_counter()
    cluster.restart(controller)
    await asyncio.to_thread(cluster.wait_ready, [controller], 90)
    await wait_healthy(cluster, 90)
    return FailoverRound(
        killed=controller,
        new_controller=new,
        reported_by=reporter,
        election_s=election_s,
        write_s=write_s,
        write_attempts=attempts,
        recovery_s=time.perf_counter() - t1,
    )


async def phase_failover(cluster: LocalCluster, rounds: int, poll_ms: int) -> list[FailoverRound]:
    out = []
    for k in range(1, rounds + 1):
        res = await failover_round(cluster, k, poll_ms / 1000)
        progress(
            f"failover {k}/{rounds}: killed node {res.killed}; node {res.new_controller} "
            f"reported at {res.election_s:.3f} s, write ok at {res.write_s:.3f} s "
            f"({res.write_attempts} attempt(s)); back to healthy {res.recovery_s:.1f} s "
            "after the restart"
        )
        out.append(res)
    return out


# -- report -------------------------------------------------------------------------------------


def fmt_rate(x: float) -> str:
    return f"{x:,.0f} /s"


def fmt_ms(x: float) -> str:
    return f"{x:,.1f} ms"


def fmt_s(x: float) -> str:
    return f"{x:.3f} s"


def build_rows(
    results: dict[str, Any], errors: dict[str, str], settings: dict[str, Any]
) -> list[dict[str, Any]]:
    phases = settings["phases"]
    rows: dict[str, dict[str, Any]] = {}

    def put(
        key: str,
        value: float,
        text: str,
        unit: str,
        notes: str,
        target: str = "—",
        met: bool | None = None,
    ) -> None:
        rows[key] = {
            "key": key,
            "metric": ROWS[key],
            "value": value,
            "value_text": text,
            "unit": unit,
            "target": target,
            "met": met,
            "status": "—" if met is None else ("met" if met else "missed"),
            "notes": notes,
        }

    t: TopicsResult | None = results.get("topics")
    if t is not None:
        seq = sorted(t.seq_latencies_ms)
        conc = sorted(t.conc_latencies_ms)
        put(
            "create_seq",
            t.seq_rate,
            fmt_rate(t.seq_rate),
            "ops/s",
            f"{t.count} creates, one at a time; latency p50 {percentile(seq, 50):.1f} ms, "
            f"p99 {percentile(seq, 99):.1f} ms",
        )
        put(
            "create_conc",
            t.conc_rate,
            fmt_rate(t.conc_rate),
            "ops/s",
            f"{t.count} creates, {t.concurrency} in flight; latency p50 "
            f"{percentile(conc, 50):.1f} ms, p99 {percentile(conc, 99):.1f} ms",
        )
    runs: list[CommitsResult] = results.get("commits") or []
    for key, c in zip(("commits", "commits_pipelined"), runs, strict=False):
        lo = min(c.per_second) if c.per_second else 0
        hi = max(c.per_second) if c.per_second else 0
        errs = ", ".join(f"{k} {v}" for k, v in sorted(c.errors.items())) or "no errors"
        lat = c.latencies_ms
        put(
            key,
            c.rate,
            fmt_rate(c.rate),
            "commits/s",
            f"{c.members} members, {c.inflight} commit(s) in flight each, {c.partitions} "
            f"partitions, {c.window_s:.1f} s after {c.warmup_s:g} s warm-up; whole seconds "
            f"{lo:,}-{hi:,}; latency p50 {percentile(lat, 50):.1f} ms, p99 "
            f"{percentile(lat, 99):.1f} ms; {errs}",
            f">= {COMMITS_TARGET:,.0f} /s",
            c.rate >= COMMITS_TARGET,
        )
        if key == "commits":
            for k, q in (("commit_p50", 50), ("commit_p99", 99)):
                v = percentile(lat, q)
                put(k, v, fmt_ms(v), "ms", f"{len(lat):,} commits, {c.inflight} in flight each")
    f: list[FailoverRound] | None = results.get("failover")
    if f:
        times = [r.failover_s for r in f]
        med = statistics.median(times)
        put(
            "failover_median",
            med,
            fmt_s(med),
            "s",
            f"median of {len(f)} kill -9 of the active controller (new controller reported "
            "AND a topic create succeeded)",
            f"<= {FAILOVER_TARGET_S:g} s",
            med <= FAILOVER_TARGET_S,
        )
        put("failover_min", min(times), fmt_s(min(times)), "s", f"of {len(f)}")
        put("failover_max", max(times), fmt_s(max(times)), "s", f"of {len(f)}")
        el = statistics.median(r.election_s for r in f)
        put(
            "election_median",
            el,
            fmt_s(el),
            "s",
            "kill -> a surviving node reports another controller id",
        )
    rb: list[RebalanceRound] | None = results.get("rebalance")
    if rb:
        med = statistics.median(r.total_ms for r in rb) / 1000
        put(
            "rebalance_median",
            med,
            fmt_s(med),
            "s",
            f"median of {len(rb)}; {settings['group_size']} members, "
            f"{settings['rebalance_partitions']} partitions, heartbeats every "
            f"{settings['heartbeat_ms']} ms; leave request "
            f"{statistics.median(r.leave_ms for r in rb):.0f} ms of it",
            f"<= {REBALANCE_TARGET_S:g} s",
            med <= REBALANCE_TARGET_S,
        )
    targets = {
        "commits": f">= {COMMITS_TARGET:,.0f} /s",
        "commits_pipelined": f">= {COMMITS_TARGET:,.0f} /s",
        "failover_median": f"<= {FAILOVER_TARGET_S:g} s",
        "rebalance_median": f"<= {REBALANCE_TARGET_S:g} s",
    }
    out = []
    for key, metric in ROWS.items():
        if key in rows:
            out.append(rows[key])
            continue
        phase = ROW_PHASE[key]
        failed = phase in errors
        out.append(
            {
                "key": key,
                "metric": metric,
                "value": None,
                "value_text": "—",
                "unit": "",
                "target": targets.get(key, "—"),
                "met": None,
                "status": "failed" if failed else "not run",
                "notes": errors[phase]
                if failed
                else ("not asked for" if phase in phases else "phase not selected"),
            }
        )
    return out


def md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(
    command: str,
    facts: dict[str, Any],
    settings: dict[str, Any],
    rows: list[dict[str, Any]],
    results: dict[str, Any],
    plots: list[str],
    plot_note: str | None,
) -> str:
    lines = [
        f"# raftlog metadata benchmark ({facts['date']})",
        "",
        f"Command: `{command}`",
        "",
        "Machine: " + ", ".join(f"{k}={v}" for k, v in facts.items()),
        "",
        f"Cluster: {NODES} combined controller+broker nodes on {HOST}, each its own process, "
        f"broker_session_timeout_ms={settings['session_timeout_ms']}; the clients run in the "
        "bench process.",
        "",
        "| metric | value | target | met? | notes |",
        "|---|---:|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['metric']} | {row['value_text']} | {row['target']} | {row['status']} | "
            f"{md_cell(row['notes'])} |"
        )
    met = [row["metric"] for row in rows if row["met"] is True]
    missed = [row["metric"] for row in rows if row["met"] is False]
    lines += [
        "",
        f"Targets met: {len(met)}" + (f" ({'; '.join(met)})" if met else "") + f". Missed: "
        f"{len(missed)}" + (f" ({'; '.join(missed)})" if missed else "") + ".",
    ]
    t: TopicsResult | None = results.get("topics")
    if t is not None:
        lines += [
            "",
            "## Topic creates",
            "",
            f"Via node {t.via_node} (the active controller's broker); 1 partition, replication "
            "factor 1; a create returns once its Raft entry is committed and applied.",
            "",
            "| mode | creates | seconds | creates/s | p50 ms | p99 ms | max ms |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, secs, lats in (
            ("one at a time", t.seq_seconds, t.seq_latencies_ms),
            (f"{t.concurrency} in flight", t.conc_seconds, t.conc_latencies_ms),
        ):
            s = sorted(lats)
            lines.append(
                f"| {name} | {t.count} | {secs:.2f} | {t.count / secs:,.0f} | "
                f"{percentile(s, 50):.1f} | {percentile(s, 99):.1f} | {s[-1]:.1f} |"
            )
        if t.profiles:
            lines += ["", "py-spy profiles (collapsed stacks): " + ", ".join(t.profiles)]
    runs: list[CommitsResult] = results.get("commits") or []
    if runs:
        c0 = runs[0]
        lines += [
            "",
            "## Offset commits",
            "",
            f"{c0.members} members of one group (joined and settled in {c0.join_seconds:.1f} s), "
            f"{c0.partitions} partitions; each member commits the offsets of its own "
            f"{c0.partitions // c0.members} partitions in a loop (one OffsetCommit request per "
            f"commit); coordinator: node {c0.coordinator}, the active controller. Heartbeats "
            "every second.",
            "",
            "| in flight per member | commits | seconds | commits/s | p50 ms | p90 ms | p99 ms | "
            "max ms | errors |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for c in runs:
            lat = c.latencies_ms
            errs = ", ".join(f"{k} {v}" for k, v in sorted(c.errors.items())) or "none"
            lines.append(
                f"| {c.inflight} | {c.commits:,} | {c.window_s:.2f} | {c.rate:,.0f} | "
                f"{percentile(lat, 50):.1f} | {percentile(lat, 90):.1f} | "
                f"{percentile(lat, 99):.1f} | {percentile(lat, 100):.1f} | {errs} |"
            )
        lines += [""]
        for c in runs:
            lines.append(
                f"Commits completed per second, {c.inflight} in flight: "
                + ", ".join(f"{n:,}" for n in c.per_second)
            )
        lines += [
            "",
            f"CPU over the measured windows (% of one core; this machine has {os.cpu_count()} "
            "cores):",
            "",
            "| process | " + " | ".join(f"{c.inflight} in flight" for c in runs) + " |",
            "|---|" + "---:|" * len(runs),
        ]
        for name in c0.cpu_percent:
            cells = []
            for c in runs:
                pct = c.cpu_percent.get(name)
                cells.append("—" if pct is None else f"{pct:.0f}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        profiles = [p for c in runs for p in c.profiles]
        if profiles:
            lines += ["", "py-spy profiles (collapsed stacks): " + ", ".join(profiles)]
    rb: list[RebalanceRound] | None = results.get("rebalance")
    if rb:
        lines += [
            "",
            "## Rebalance after a clean leave",
            "",
            "| round | generation | leave request ms | first re-join ms | last re-join ms |",
            "|---:|---|---:|---:|---:|",
        ]
        for i, r in enumerate(rb, 1):
            lines.append(
                f"| {i} | {r.generation_before} -> {r.generation_after} | {r.leave_ms:.0f} | "
                f"{r.first_rejoin_ms:.0f} | {r.total_ms:.0f} |"
            )
    f: list[FailoverRound] | None = results.get("failover")
    if f:
        lines += [
            "",
            "## Controller failover",
            "",
            "| kill | killed node | new controller | reported s | write ok s | failover s | "
            "write attempts | restart -> healthy s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for i, fr in enumerate(f, 1):
            lines.append(
                f"| {i} | {fr.killed} | {fr.new_controller} | {fr.election_s:.3f} | "
                f"{fr.write_s:.3f} | {fr.failover_s:.3f} | {fr.write_attempts} | "
                f"{fr.recovery_s:.1f} |"
            )
    lines += ["", "## Plots", ""]
    lines += [f"- {shown_path(p)}" for p in plots] or [f"- {plot_note or 'none'}"]
    lines += ["", "Settings: " + json.dumps(settings, sort_keys=True)]
    return "\n".join(lines) + "\n"


def shown_path(path: str) -> str:
    """A path relative to the repository when it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return path


def plot(results: dict[str, Any], path: Path) -> tuple[list[str], str | None]:
    f: list[FailoverRound] | None = results.get("failover")
    runs: list[CommitsResult] = results.get("commits") or []
    c = runs[0] if runs else None
    if not f and c is None:
        return [], "no plot: neither the failover nor the commit phase ran"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return [], f"skipped the plot: matplotlib is not importable ({e})"
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    if f:
        xs = list(range(1, len(f) + 1))
        el = [r.election_s for r in f]
        rest = [r.failover_s - r.election_s for r in f]
        ax1.bar(xs, el, color="#1f77b4", label="new controller reported")
        ax1.bar(xs, rest, bottom=el, color="#ff7f0e", label="until a metadata write succeeded")
        ax1.axhline(FAILOVER_TARGET_S, color="red", ls="--", lw=1.2, label="target (median)")
        med = statistics.median(r.failover_s for r in f)
        ax1.axhline(med, color="black", ls=":", lw=1.2, label=f"median {med:.3f} s")
        for x, r in zip(xs, f, strict=True):
            ax1.text(x, r.failover_s, f"{r.failover_s:.2f}", ha="center", va="bottom", fontsize=7)
        ax1.set_xticks(xs, [f"{i}\nn{r.killed}" for i, r in zip(xs, f, strict=True)])
        ax1.set_xlabel("kill # (killed node)")
        ax1.set_ylabel("seconds after kill -9")
        ax1.set_ylim(0, max(FAILOVER_TARGET_S, *(r.failover_s for r in f)) * 1.2)
        ax1.legend(fontsize=7)
    else:
        ax1.text(0.5, 0.5, "failover phase not run", ha="center", va="center")
    ax1.set_title("Controller failover per kill")
    if c is not None and c.latencies_ms:
        lats = c.latencies_ms
        top = max(percentile(run.latencies_ms, 100) for run in runs if run.latencies_ms)
        bins = [top * i / 80 for i in range(81)]
        colors = ("#2ca02c", "#9467bd", "#8c564b")
        for run, color in zip(runs, colors, strict=False):
            if run.latencies_ms:
                ax2.hist(
                    run.latencies_ms,
                    bins=bins,
                    color=color,
                    alpha=0.75,
                    label=f"{run.inflight} in flight per member: {run.rate:,.0f} commits/s",
                )
        for q, style in ((50, "--"), (99, ":")):
            v = percentile(lats, q)
            ax2.axvline(
                v, color="black", ls=style, lw=1, label=f"p{q} {v:.1f} ms ({c.inflight} in flight)"
            )
        ax2.set_yscale("log")
        ax2.set_xlabel("commit latency, ms")
        ax2.set_ylabel("commits")
        ax2.legend(fontsize=8)
        ax2.set_title(f"Offset commit latency, {c.members} members")
    else:
        ax2.text(0.5, 0.5, "commit phase not run", ha="center", va="center")
        ax2.set_title("Offset commit latency")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [str(path)], None


# -- machine facts ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.metadata_bench",
        description="raftlog metadata benchmark on a local 3-node cluster",
    )
    p.add_argument("--quick", action="store_true", help="a short run (tests)")
    p.add_argument(
        "--only", default=",".join(PHASES), help=f"comma-separated phases of {', '.join(PHASES)}"
    )
    p.add_argument("--topics", type=int, help="topic creates per mode (200; quick 20)")
    p.add_argument("--topic-concurrency", type=int, default=20, help="creates in flight")
    p.add_argument("--members", type=int, default=50, help="group members committing")
    p.add_argument("--partitions-per-member", type=int, default=2)
    p.add_argument(
        "--commit-inflight",
        type=int,
        default=1,
        help="commits in flight per member in the main (sustained) run",
    )
    p.add_argument(
        "--pipelined-inflight",
        type=int,
        default=10,
        help="commits in flight per member in the second (pipelined) run; 0 = no second run",
    )
    p.add_argument("--commit-seconds", type=float, help="measured commit window (10; quick 3)")
    p.add_argument("--commit-warmup", type=float, help="warm-up before it (1; quick 0.5)")
    p.add_argument("--failovers", type=int, help="controller kills (10; quick 2)")
    p.add_argument("--failover-poll-ms", type=int, default=20, help="how often survivors are asked")
    p.add_argument("--rebalances", type=int, help="rebalance rounds (5; quick 1)")
    p.add_argument("--group-size", type=int, default=10)
    p.add_argument("--rebalance-partitions", type=int, default=20)
    p.add_argument("--heartbeat-ms", type=int, default=50, help="member heartbeat interval")
    p.add_argument("--session-timeout-ms", type=int, default=3000, help="broker session timeout")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--data-dir", help="where to make the temporary data directory")
    p.add_argument("--keep-data", action="store_true", help="keep the data directory and logs")
    p.add_argument("--results-dir", default=str(REPO / "bench" / "results"))
    p.add_argument(
        "--profile",
        action="store_true",
        help="py-spy every node during the concurrent topic creates and the commit windows",
    )
    return p


POSITIVE = (
    "topics",
    "failovers",
    "rebalances",
    "topic_concurrency",
    "members",
    "partitions_per_member",
    "commit_inflight",
    "failover_poll_ms",
    "group_size",
    "rebalance_partitions",
    "heartbeat_ms",
    "session_timeout_ms",
)


def settings_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, Any]:
    base = QUICK if args.quick else DEFAULTS
    s: dict[str, Any] = {}
    for name in DEFAULTS:
        v = getattr(args, name)
        s[name] = base[name] if v is None else v
    phases = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = [x for x in phases if x not in PHASES]
    if unknown or not phases:
        parser.error(f"--only: unknown phase(s) {', '.join(unknown) or '(none)'}; of {PHASES}")
    s["phases"] = [x for x in PHASES if x in phases]
    for name in POSITIVE:
        s[name] = getattr(args, name) if name not in DEFAULTS else s[name]
        if s[name] < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    s["pipelined_inflight"] = args.pipelined_inflight
    if s["pipelined_inflight"] < 0:
        parser.error("--pipelined-inflight must be >= 0")
    if s["commit_seconds"] <= 0 or s["commit_warmup"] < 0:
        parser.error("--commit-seconds must be > 0 and --commit-warmup >= 0")
    if s["group_size"] < 2:
        parser.error("--group-size must be >= 2 (one member leaves)")
    if s["rebalance_partitions"] < s["group_size"] - 1:
        parser.error("--rebalance-partitions must be >= --group-size - 1")
    s["quick"] = args.quick
    s["log_level"] = args.log_level
    return s


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    s = settings_from(args, parser)
    command = common.command_line("bench.metadata_bench")
    wd = common.prepare_work_dir(args.data_dir, "raftlog-metadata-")
    work, facts = wd.path, wd.facts
    prefix = common.results_prefix(args.results_dir, "metadata", common.run_stamp())
    profile_prefix = f"{prefix}-profile" if args.profile else None
    inflights = [s["commit_inflight"]] + (
        [s["pipelined_inflight"]] if s["pipelined_inflight"] else []
    )
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    progress(f"metadata bench: phases {', '.join(s['phases'])}; data in {work}")
    cluster = LocalCluster(work, s["session_timeout_ms"], s["log_level"])
    try:
        t = time.monotonic()
        cluster.start(timeout_s=60)
        pids = ", ".join(str(n.pid) for n in cluster.nodes.values())
        progress(
            f"cluster: {NODES} nodes ready in {time.monotonic() - t:.1f} s on "
            f"{cluster.bootstrap} (pids {pids})"
        )
        steps: dict[str, Callable[[], Coroutine[Any, Any, Any]]] = {
            "topics": lambda: phase_topics(
                cluster, s["topics"], s["topic_concurrency"], profile_prefix
            ),
            "commits": lambda: phase_commits(
                cluster,
                s["members"],
                s["partitions_per_member"],
                inflights,
                s["commit_warmup"],
                s["commit_seconds"],
                profile_prefix,
            ),
            "rebalance": lambda: phase_rebalance(
                cluster,
                s["rebalances"],
                s["group_size"],
                s["rebalance_partitions"],
                s["heartbeat_ms"],
            ),
            "failover": lambda: phase_failover(cluster, s["failovers"], s["failover_poll_ms"]),
        }
        for phase in s["phases"]:
            try:
                results[phase] = asyncio.run(steps[phase]())
            except Exception as e:  # reported in the table; the other phases still run
                errors[phase] = f"{type(e).__name__}: {e}"
                progress(f"{phase}: FAILED: {errors[phase]}")
                traceback.print_exc(file=sys.stderr)
                # The next phase needs every node up again.
                for n in cluster.nodes.values():
                    if not n.running():
                        n.launch()
                with contextlib.suppress(RuntimeError):
                    cluster.wait_ready(list(cluster.nodes), 60)
    finally:
        progress("stopping the nodes")
        cluster.stop()
        stopped = [n.proc.pid for n in cluster.nodes.values() if n.proc is not None]
        progress(f"nodes stopped (pids {', '.join(map(str, stopped))})")
        facts["load_average_at_end"] = common.load_average()
        common.keep_or_remove(work, args.keep_data, progress, "the data and node logs")
    rows = build_rows(results, errors, s)
    plots, plot_note = plot(results, Path(f"{prefix}.png"))
    text = markdown(command, facts, s, rows, results, plots, plot_note)
    payload = {
        "command": command,
        "machine": facts,
        "settings": s,
        "rows": rows,
        "errors": errors,
        "plots": plots,
        "topics": results["topics"].__dict__ if "topics" in results else None,
        "commits": [c.summary() for c in results.get("commits") or []],
        "rebalance": [r.__dict__ for r in results.get("rebalance") or []],
        "failover": [
            {**r.__dict__, "failover_s": r.failover_s} for r in results.get("failover") or []
        ],
    }
    common.write_results(prefix, text, payload, progress, plots)
    return 1 if errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    # SIGTERM stops the bench like Ctrl-C does: through the `finally` that stops the nodes.
    signal.signal(signal.SIGTERM, on_term)
    return run(args, parser)


if __name__ == "__main__":
    sys.exit(main())
