"""Many partitions on the three-node local cluster: what a big topic costs, and whether the
cluster stays responsive while it is created, while it idles, and through a failover.

Run from the repository root::

    .venv/bin/python -m bench.scale_bench --partitions 10000
    .venv/bin/python -m bench.scale_bench --partitions 1000,5000,10000   # a plot over N
    .venv/bin/python -m bench.scale_bench --quick                         # small (tests)
    raftlog bench scale [same options]                                    # the same, from the CLI

For each N (a new cluster each): `raftlog dev --nodes 3` on the real disk; a small topic
`other` (1 partition, RF 3, min.insync.replicas 2) takes one acks=all write every
`--ping-interval-ms` from a process of its own (so that this process's own work, such as
the writes to every partition, cannot delay it) for the whole run; the run waits for the
pinger's first acknowledgement (at most `PINGER_FIRST_ACK_S_MAX`: starting a process and
its client takes seconds on a loaded machine) before the baseline starts, so that every
window below has a running pinger in it; then:

- create: `topic create big -p N -r 3` (one CreateTopics request); `create_s` is until it
  returns, `ready_s` until one acks=all record sent to each partition of `big` is
  acknowledged (every partition's log is open on all three brokers and led).
- fenced: how many times the controller fenced a broker while the topic was being created
  (the nodes' log lines), which must be 0: a fenced broker has every partition re-led.
- longest write pause: the longest gap between two acknowledged writes to `other` while the
  topic is created (from the create until it returns: the issue's target), and while every
  partition takes its first record at once (from then to `ready_s` + 5 s: 10,000 produce
  appends and 20,000 replica appends in a burst, stricter than the target), beside the longest
  gap in as long a time before it (at most `--baseline-seconds`: the baseline of this machine
  at that moment); a note says when in the window the longest began. A window with no
  acknowledgement in it paused for all of it (a 200-partition create can return before one
  acks=all write does); a pause is missing (None, with a note saying why) only if the pinger
  never acknowledged a write.
- idle: with the pings stopped, each node's CPU over `--idle-seconds` (percent of one core),
  its resident memory and its open file descriptors.
- failover: kill -9 of node 3; `failover_s` from the kill until no partition names it as leader
  any more (every one it led re-led elsewhere); then it is started again on its config and
  `rejoin_s` is until every ISR holds all 3 replicas again.
- admin: how long `raftlog cluster status` and `raftlog topic describe big` take (each a new
  process, Python's start included).

The issue's targets at N = 10,000 (30,000 replicas): 0 fenced, no pause over 1 s, idle CPU
under 10% of a core per node, failover within 5 s, rejoin within 30 s, admin within 2 s.

Results: a markdown table on stdout and in bench/results/scale-<timestamp>.md, the figures in
.json, and -scale.png (each figure over N). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import common
from bench.common import REPO, default_base_dir, machine_facts
from bench.replication_bench import DEFAULT_SESSION_TIMEOUT_MS, NODES, LocalCluster

DEFAULT_RESULTS_DIR = REPO / "bench" / "results"
# The targets.
TARGET_PAUSE_S = 1.0
TARGET_IDLE_CPU_PERCENT = 10.0
TARGET_FAILOVER_S = 5.0
TARGET_REJOIN_S = 30.0
TARGET_ADMIN_S = 2.0
# Bounds of the waits (a loaded 2-core machine is slow; a bound hit is reported, not hidden).
READY_S_MAX = 600.0
FAILOVER_S_MAX = 120.0
REJOIN_S_MAX = 600.0
POLL_INTERVAL_S = 0.25
# The pinger's first acknowledgement: a new Python process, its imports, its metadata and an
# acks=all write; seconds on a loaded 2-core machine, far less than this.
PINGER_FIRST_ACK_S_MAX = 120.0
# How long the pause window runs past readiness, and the CLI's timeout.
AFTER_READY_S = 5.0
CLI_TIMEOUT_S = 120.0
FENCE_LINE = re.compile(r"fenced broker (\d+)")
VICTIM = 3


@dataclass
class ScaleResult:
    partitions: int
    create_s: float | None = None
    ready_s: float | None = None
    fenced: int = 0
    pause_s: float | None = None
    burst_pause_s: float | None = None
    baseline_pause_s: float | None = None
    pings_failed: int = 0
    idle_cpu_percent: dict[int, float] = field(default_factory=dict)
    rss_mb: dict[int, float] = field(default_factory=dict)
    fds: dict[int, int] = field(default_factory=dict)
    failover_s: float | None = None
    rejoin_s: float | None = None
    status_s: float | None = None
    describe_s: float | None = None
    notes: list[str] = field(default_factory=list)


def _ping(bootstrap: str, topic: str, interval_s: float, stop: Any, acked: Any, out: Any) -> None:
    """The pinger's process: one acks=all write at a time until `stop` is set (`acked` set at
    the first acknowledgement), then sends (acknowledgement times, failures) on `out`.
    CLOCK_MONOTONIC is the same in every process of a machine, so the times compare with the
    parent's."""
    from raftlog.client import Producer
    from raftlog.errors import RaftlogError

    acks: list[float] = []
    failed = 0
    with Producer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=0,
        request_timeout_ms=30_000,
        delivery_timeout_ms=60_000,
    ) as producer:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                producer.send(topic, value=b"ping %d" % n).result(60)
                acks.append(time.monotonic())
                acked.set()
            except RaftlogError:
                failed += 1
            stop.wait(interval_s)
    out.send((acks, failed))


class Pinger:
    """Writes to `topic` from another process (`_ping`); after `stop()`, `acks` holds the
    time (monotonic) of each acknowledgement."""

    def __init__(self, bootstrap: str, topic: str, interval_s: float):
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._acked = ctx.Event()
        self._recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=_ping,
            args=(bootstrap, topic, interval_s, self._stop, self._acked, send),
            daemon=True,
        )
        self.acks: list[float] = []
        self.failed = 0

    def start(self) -> None:
        self._proc.start()

    def wait_first_ack(self, timeout_s: float) -> float | None:
        """Wait until the pinger has had a write acknowledged; the seconds it took, or None
        after `timeout_s`."""
        t0 = time.monotonic()
        if self._acked.wait(timeout_s):
            return time.monotonic() - t0
        return None

    def stop(self) -> None:
        self._stop.set()
        if self._recv.poll(90):
            self.acks, self.failed = self._recv.recv()
        self._proc.join(30)
        if self._proc.is_alive():
            self._proc.kill()

    def longest_gap(self, start: float, end: float) -> tuple[float, float] | None:
        """The longest time in [start, end] without an acknowledgement, and when it began; None
        if the pinger had no acknowledgement by `start` (it was not writing yet, so a gap
        says nothing). No acknowledgement inside the window is a pause of all of it."""
        if not any(t <= start for t in self.acks):
            return None
        inside = [t for t in self.acks if start <= t <= end]
        points = [start, *inside, end]
        return max((b - a, a) for a, b in itertools.pairwise(points))


def _topic_state(bootstrap: str, topic: str) -> tuple[int, int, dict[int, int]]:
    """(partitions, partitions led with a full ISR, leaderships per broker) of `topic`."""
    from raftlog.client import Admin

    with Admin(bootstrap, request_timeout_ms=10_000) as admin:
        info = admin.list_topics().get(topic)
    if info is None:
        return 0, 0, {}
    full = sum(1 for p in info.partitions if p.leader >= 0 and len(p.isr) == NODES)
    leaders: dict[int, int] = {}
    for p in info.partitions:
        leaders[p.leader] = leaders.get(p.leader, 0) + 1
    return len(info.partitions), full, leaders


def _every_partition_writable(bootstrap: str, n: int, t0: float) -> float | None:
    """Seconds from `t0` until one acks=all record sent to each partition of `big` is
    acknowledged (the client retries a partition whose leader is not ready yet), or None."""
    from raftlog.client import Producer
    from raftlog.errors import RaftlogError

    with Producer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,
        request_timeout_ms=30_000,
        delivery_timeout_ms=int(READY_S_MAX * 1000),
    ) as producer:
        futures = [producer.send("big", value=b"ready", partition=i) for i in range(n)]
        try:
            producer.flush(READY_S_MAX)
            for f in futures:
                f.result(0)
        except RaftlogError as e:
            print(f"  ... a write to every partition failed: {e}", file=sys.stderr)
            return None
    return time.monotonic() - t0


def _wait(what: str, check: Any, bound_s: float, progress: bool = True) -> float | None:
    """Poll `check()` (truthy when done) until `bound_s`; the seconds it took, or None."""
    from raftlog.errors import RaftlogError

    t0 = time.monotonic()
    last = 0.0
    while time.monotonic() - t0 < bound_s:
        try:
            if check():
                return time.monotonic() - t0
        except RaftlogError:
            pass  # a leader moving, a node starting: ask again
        if progress and time.monotonic() - last > 5:
            last = time.monotonic()
            print(f"  ... {what}: {last - t0:.0f} s", file=sys.stderr, flush=True)
        time.sleep(POLL_INTERVAL_S)
    return None


def _proc_status(pid: int) -> tuple[float, int]:
    """(resident MiB, open fds) of a process."""
    rss_kb = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
    return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/fd"))


def _fences(log_path: str, since: int) -> int:
    with open(log_path, errors="replace") as f:
        f.seek(since)
        return sum(1 for line in f if FENCE_LINE.search(line) and "unfenced" not in line)


def _time_cli(args: list[str]) -> float | None:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "raftlog.cli", *args],
        capture_output=True,
        timeout=CLI_TIMEOUT_S,
        cwd=REPO,
        check=False,
    )
    return time.monotonic() - t0 if proc.returncode == 0 else None


def run_one(n: int, args: argparse.Namespace, base: str, work: str) -> ScaleResult:
    from raftlog.client import Admin
    from raftlog.errors import RaftlogError

    r = ScaleResult(n)
    cluster = LocalCluster(work, DEFAULT_SESSION_TIMEOUT_MS, extra=["--log-level", "INFO"])
    pinger: Pinger | None = None
    try:
        # Each N starts with nothing left to write back from the one before: creating 10,000
        # logs is filesystem-metadata bound, and took 25-60 s instead of 6-9 on a busy journal.
        os.sync()
        print(f"== {n} partitions: starting the cluster", file=sys.stderr, flush=True)
        cluster.start()
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic("other", 1, NODES, {"min.insync.replicas": "2"})
        _wait("other in sync", lambda: _topic_state(cluster.bootstrap, "other")[1] == 1, 60)
        pinger = Pinger(cluster.bootstrap, "other", args.ping_interval_ms / 1000)
        pinger.start()
        first_ack_s = pinger.wait_first_ack(PINGER_FIRST_ACK_S_MAX)
        if first_ack_s is None:
            r.notes.append(
                f"no write pause measured: the pinger had no write to other acknowledged "
                f"within {PINGER_FIRST_ACK_S_MAX:g} s of its start"
            )
        else:
            print(
                f"  ... the pinger's first write acknowledged after {first_ack_s:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        time.sleep(args.baseline_seconds)  # the pings' baseline, before anything happens
        log_mark = os.path.getsize(cluster.log_path)
        print(f"== {n} partitions: creating the topic", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            with Admin(cluster.bootstrap, request_timeout_ms=300_000) as admin:
                admin.create_topic("big", n, NODES, {})
            r.create_s = time.monotonic() - t0
        except RaftlogError as e:
            # Reported, and the run goes on: the command may still have been applied.
            r.notes.append(f"creating the topic failed after {time.monotonic() - t0:.1f} s: {e}")
        r.ready_s = _every_partition_writable(cluster.bootstrap, n, t0)
        ready = (time.monotonic() if r.ready_s is None else t0 + r.ready_s) + AFTER_READY_S
        while time.monotonic() < ready:
            time.sleep(POLL_INTERVAL_S)
        window = time.monotonic() - t0
        pinger.stop()
        created = t0 + (r.create_s if r.create_s is not None else window)
        during = pinger.longest_gap(t0, created)
        r.pause_s = None if during is None else during[0]
        burst = pinger.longest_gap(created, t0 + window)
        r.burst_pause_s = None if burst is None else burst[0]
        gap = pinger.longest_gap(t0, t0 + window)
        if gap is not None:
            r.notes.append(
                f"longest write pause began {gap[1] - t0:.1f} s after the create started "
                f"(create returned at {_fmt(r.create_s)}, every partition writable at "
                f"{_fmt(r.ready_s)})"
            )
        # The baseline: as long a window as the creation's, within the pings before it.
        base = pinger.longest_gap(t0 - min(created - t0, args.baseline_seconds), t0)
        r.baseline_pause_s = None if base is None else base[0]
        r.fenced = _fences(cluster.log_path, log_mark)
        r.pings_failed = pinger.failed
        pinger = None

        print(f"== {n} partitions: idle for {args.idle_seconds:g} s", file=sys.stderr, flush=True)
        time.sleep(args.settle_seconds)
        cpu0, w0 = cluster.cpu_seconds(), time.monotonic()
        time.sleep(args.idle_seconds)
        cpu1, w1 = cluster.cpu_seconds(), time.monotonic()
        for i in sorted(cpu1):
            r.idle_cpu_percent[i] = 100 * (cpu1[i] - cpu0[i]) / (w1 - w0)
            r.rss_mb[i], r.fds[i] = _proc_status(cluster.pids[i])

        r.status_s = _time_cli(["cluster", "status", "-b", cluster.bootstrap])
        r.describe_s = _time_cli(["topic", "describe", "big", "-b", cluster.bootstrap])

        print(f"== {n} partitions: kill -9 of node {VICTIM}", file=sys.stderr, flush=True)
        _, _, leaders = _topic_state(cluster.bootstrap, "big")
        r.notes.append(f"node {VICTIM} led {leaders.get(VICTIM, 0)} partitions when killed")
        cluster.kill9(VICTIM)

        def re_led() -> bool:
            total, _, now = _topic_state(cluster.bootstrap, "big")
            return total == n and VICTIM not in now and -1 not in now

        r.failover_s = _wait("its partitions re-led", re_led, FAILOVER_S_MAX)
        print(f"== {n} partitions: restarting node {VICTIM}", file=sys.stderr, flush=True)
        t1 = time.monotonic()
        cluster.restart(VICTIM)
        rejoined = _wait(
            "every ISR full again",
            lambda: _topic_state(cluster.bootstrap, "big")[1] == n,
            REJOIN_S_MAX,
        )
        # From the restart's start: the node's own start-up counts.
        r.rejoin_s = None if rejoined is None else time.monotonic() - t1
    finally:
        if pinger is not None:
            pinger.stop()
        cluster.stop()
        if args.keep:
            r.notes.append(f"data kept in {work}")
    return r


def _fmt(v: float | None, unit: str = "s") -> str:
    return "—" if v is None else f"{v:.2f} {unit}".strip()


def render(results: list[ScaleResult]) -> str:
    head = (
        "| partitions (RF 3) | create | every partition writable | fenced | longest write pause "
        "while created (baseline) | ... while first written | idle CPU per node | RSS per node | "
        "fds per node | failover | rejoin | cluster status | topic describe |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in results:
        cpu = ", ".join(f"{v:.1f}%" for _, v in sorted(r.idle_cpu_percent.items()))
        rss = ", ".join(f"{v:.0f}" for _, v in sorted(r.rss_mb.items()))
        fds = ", ".join(str(v) for _, v in sorted(r.fds.items()))
        lines.append(
            f"| {r.partitions:,} | {_fmt(r.create_s)} | {_fmt(r.ready_s)} | {r.fenced} | "
            f"{_fmt(r.pause_s)} ({_fmt(r.baseline_pause_s)}) | {_fmt(r.burst_pause_s)} | "
            f"{cpu} | {rss} MiB | {fds} | "
            f"{_fmt(r.failover_s)} | {_fmt(r.rejoin_s)} | {_fmt(r.status_s)} | "
            f"{_fmt(r.describe_s)} |"
        )
    targets = (
        f"Targets at 10,000: 0 fenced, longest pause while created <= {TARGET_PAUSE_S:g} s, "
        "idle CPU < "
        f"{TARGET_IDLE_CPU_PERCENT:g}% of a core per node, failover <= {TARGET_FAILOVER_S:g} s, "
        f"rejoin <= {TARGET_REJOIN_S:g} s, admin <= {TARGET_ADMIN_S:g} s."
    )
    notes = [f"- {r.partitions:,}: {n}" for r in results for n in r.notes]
    return "\n".join([*lines, "", targets, *(["", *notes] if notes else [])])


def plot(results: list[ScaleResult], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"skipped the plot: matplotlib is not importable ({e})", file=sys.stderr)
        return None
    ns = [r.partitions for r in results]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))

    def series(ax: Any, values: list[list[float | None]], labels: list[str], target: float) -> None:
        for vs, label in zip(values, labels, strict=True):
            pts = [(n, v) for n, v in zip(ns, vs, strict=True) if v is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
        ax.axhline(target, color="red", ls="--", lw=1, label="target")
        ax.set_xlabel("partitions (RF 3)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)

    series(
        axes[0][0],
        [[r.create_s for r in results], [r.ready_s for r in results]],
        ["create returns", "every partition writable"],
        TARGET_REJOIN_S,
    )
    axes[0][0].set_ylabel("seconds")
    axes[0][0].set_title("creating the topic")
    series(
        axes[0][1],
        [
            [r.pause_s for r in results],
            [r.burst_pause_s for r in results],
            [r.baseline_pause_s for r in results],
        ],
        ["while the topic is created", "while every partition is first written", "before"],
        TARGET_PAUSE_S,
    )
    axes[0][1].set_ylabel("seconds")
    axes[0][1].set_title("acks=all writes elsewhere meanwhile")
    series(
        axes[1][0],
        [[r.idle_cpu_percent.get(i) for r in results] for i in range(1, NODES + 1)],
        [f"node {i}" for i in range(1, NODES + 1)],
        TARGET_IDLE_CPU_PERCENT,
    )
    axes[1][0].set_ylabel("% of one core")
    axes[1][0].set_title("idle CPU")
    series(
        axes[1][1],
        [[r.failover_s for r in results], [r.rejoin_s for r in results]],
        ["failover (kill -9)", "rejoin (restart)"],
        TARGET_FAILOVER_S,
    )
    axes[1][1].set_ylabel("seconds")
    axes[1][1].set_title("kill -9 of a node, then its restart")
    fig.suptitle("raftlog, 3-node local cluster, one topic of N partitions")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--partitions",
        default="10000",
        help="partitions of the big topic; a comma-separated list runs each (default 10000)",
    )
    p.add_argument("--idle-seconds", type=float, default=30.0, help="the idle CPU window")
    p.add_argument("--settle-seconds", type=float, default=10.0, help="wait before the idle window")
    p.add_argument("--baseline-seconds", type=float, default=5.0, help="pings before the create")
    p.add_argument("--ping-interval-ms", type=int, default=20, help="between acks=all writes")
    p.add_argument("--quick", action="store_true", help="200 partitions, short windows (tests)")
    p.add_argument("--keep", action="store_true", help="keep the cluster's data directories")
    p.add_argument("--base-dir", default=None, help="where the cluster's data goes")
    p.add_argument("--results-dir", default=str(DEFAULT_RESULTS_DIR), help="where reports go")


def _partition_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or any(c < 1 or c > 10_000 for c in counts):
        raise argparse.ArgumentTypeError(
            f"--partitions {text!r}: one or more comma-separated counts of 1..10000"
        )
    return counts


def run(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    try:
        counts = [200] if args.quick else _partition_counts(args.partitions)
    except argparse.ArgumentTypeError as e:
        if parser is not None:
            parser.error(str(e))
        raise
    if args.quick:
        args.idle_seconds, args.settle_seconds, args.baseline_seconds = 3.0, 1.0, 1.0
    base = args.base_dir or default_base_dir()
    facts = machine_facts(base)
    results = []
    works = []
    try:
        for n in counts:
            works.append(tempfile.mkdtemp(prefix=f"raftlog-scale-{n}-", dir=base))
            results.append(run_one(n, args, base, works[-1]))
    finally:
        # At the end, not between runs: deleting 30,000 directories keeps the filesystem's
        # journal busy for a minute afterwards, and the next cluster then took 25-64 s
        # instead of 8-10 to create its logs (measured here).
        if not args.keep:
            for work in works:
                shutil.rmtree(work, ignore_errors=True)
    prefix = common.results_prefix(args.results_dir, "scale", common.run_stamp(utc=False))
    table = render(results)
    facts_text = "\n".join(f"- {k}: {v}" for k, v in facts.items())
    command = getattr(args, "command_line", "python -m bench.scale_bench")
    report = f"# Scale benchmark\n\n`{command}`\n\n{facts_text}\n\n{table}\n"
    png = plot(results, Path(f"{prefix}-scale.png"))
    if png:
        report += f"\n![scale]({Path(png).name})\n"
    Path(f"{prefix}.md").write_text(report)
    Path(f"{prefix}.json").write_text(
        json.dumps({"facts": facts, "results": [asdict(r) for r in results]}, indent=2)
    )
    print(report)
    print(f"report: {prefix}.md", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.scale_bench", description=__doc__)
    add_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    return run(parser.parse_args(argv), parser)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
