"""Rebalance benchmark: how long a consumer group takes to rebalance, by group size.

Run from the repository root::

    .venv/bin/python -m bench.rebalance_bench                      # sizes 1, 10, 50; 5 rounds
    .venv/bin/python -m bench.rebalance_bench --quick              # sizes 1, 3; 1 round (tests)
    .venv/bin/python -m bench.rebalance_bench --sizes 10 --heartbeat-ms 1000

The bench starts its own three-node local cluster (bench/metadata_bench.py's LocalCluster:
combined controller+broker node processes on 127.0.0.1, data on a real disk) and one topic of
`--partitions` partitions. Members are raw `GroupMembership`s in this process, each with its
own connections (as separate consumers would have), each running a consumer's group loop: a
heartbeat every `--heartbeat-ms`, and a join when the heartbeat says the group rebalances.
Their heartbeats are spread evenly over the interval, as those of consumers started at
different times are.

For every size N, `--rounds` rounds of two kinds, each on a fresh group:

- join: a group of N - 1 members is formed and settles; then one more member joins. For N = 1
  that is the first join into an empty group.
- leave: a group of N + 1 members settles; then one member leaves cleanly (LeaveGroup).

Rebalance time = from sending the JoinGroup (or LeaveGroup) until the last of the N members
holds the new generation's assignment (its join returned with it), every partition owned by
exactly one member. The two-step rebalance (docs/ARCHITECTURE.md, "Consumer groups") makes
this at least the time until every earlier member's next heartbeat, so it grows with
`--heartbeat-ms`; the rest is one Raft entry per rejoining member and the coordinator's
assignment.

Results: a markdown table (median, min and max per size and kind) on stdout and in
bench/results/rebalance-<timestamp>.md, every round in .json. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench import common
from bench.common import REPO
from bench.metadata_bench import (
    LocalCluster,
    close_members,
    create_rebalance_topic,
    join_group,
    new_member,
    stable,
)
from raftlog.client.group import GroupMembership

KINDS = ("join", "leave")
# A member's session: far longer than any round, so no member expires during one.
SESSION_TIMEOUT_MS = 30_000
# A round that has not settled by then has failed.
ROUND_TIMEOUT_S = 60.0


_T0 = time.monotonic()


def progress(message: str) -> None:
    print(
        f"[rebalance-bench {time.monotonic() - _T0:6.1f} s] {message}", file=sys.stderr, flush=True
    )


@dataclass
class Round:
    size: int
    kind: str
    round: int
    generation_before: int
    generation_after: int
    total_ms: float  # request sent -> the last member holds the new generation
    request_ms: float  # the JoinGroup (answered when the rebalance completed) or LeaveGroup


class Member:
    """A member's group loop: heartbeat every `heartbeat_s`; join again when told to. Records
    when each generation's join returned."""

    def __init__(self, m: GroupMembership, topic: str, heartbeat_s: float):
        self.m, self.topic, self.heartbeat_s = m, topic, heartbeat_s
        self.joined_at: dict[int, float] = {}  # generation -> perf_counter when it came
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self, phase: float = 0.0) -> None:
        """Start the loop; the first heartbeat `phase` (0..1) of an interval later."""
        self.task = asyncio.create_task(self._loop(phase))

    async def _loop(self, phase: float) -> None:
        # Consumers started at different times heartbeat at different moments: the members
        # are spread evenly over the interval, so the last one to hear of a rebalance hears
        # of it nearly a whole interval later, as in a real group (started together, they
        # would all hear of it at once).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), phase * self.heartbeat_s)
        while not self.stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.heartbeat_s)
            if self.stop.is_set():
                return
            if not await self.m.heartbeat():
                await self.m.join([self.topic])
                self.joined_at.setdefault(self.m.generation, time.perf_counter())

    async def halt(self) -> None:
        self.stop.set()
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)


async def one_round(
    bootstrap: str, topic: str, partitions: int, size: int, kind: str, heartbeat_s: float, r: int
) -> Round:
    group = f"bench-{kind}-{size}-{r}"
    before_n = size - 1 if kind == "join" else size + 1
    raw = [
        new_member(bootstrap, group, f"{group}-{i}", SESSION_TIMEOUT_MS) for i in range(before_n)
    ]
    if raw:
        await join_group(raw, topic, partitions, heartbeat_s)
    members = [Member(m, topic, heartbeat_s) for m in raw]
    for k, m in enumerate(members):
        m.start(k / len(members))
    newcomer: GroupMembership | None = None
    try:
        await asyncio.sleep(3 * heartbeat_s)  # heartbeats in their steady state
        before = raw[0].generation if raw else 0
        t0 = time.perf_counter()
        if kind == "join":
            newcomer = new_member(bootstrap, group, f"{group}-new", SESSION_TIMEOUT_MS)
            await newcomer.join([topic])
            t_request = time.perf_counter()
            joiner = Member(newcomer, topic, heartbeat_s)
            joiner.joined_at[newcomer.generation] = t_request
            joiner.start(1.0)
            final = [*members, joiner]
        else:
            leaver, final = members[-1], members[:-1]
            await leaver.halt()
            await leaver.m.leave()
            t_request = time.perf_counter()
        deadline = t0 + ROUND_TIMEOUT_S
        group_members = [m.m for m in final]
        while not (
            stable(group_members, topic, partitions)
            and group_members[0].generation > before
            and all(group_members[0].generation in m.joined_at for m in final)
        ):
            if time.perf_counter() > deadline:
                raise RuntimeError(
                    f"{kind} round {r} of {size}: not settled after {ROUND_TIMEOUT_S:.0f} s "
                    f"(generations {sorted({m.generation for m in group_members})})"
                )
            await asyncio.sleep(0.002)
        after = group_members[0].generation
        t_done = max(m.joined_at[after] for m in final)
    finally:
        everyone = [*members, *([joiner] if newcomer is not None else [])]
        for m in everyone:
            await m.halt()
        await close_members([m.m for m in everyone])
    return Round(
        size=size,
        kind=kind,
        round=r,
        generation_before=before,
        generation_after=after,
        total_ms=(t_done - t0) * 1000,
        request_ms=(t_request - t0) * 1000,
    )


async def run_rounds(
    cluster: LocalCluster, sizes: Sequence[int], rounds: int, partitions: int, heartbeat_ms: int
) -> list[Round]:
    topic = await create_rebalance_topic(cluster, partitions)
    out = []
    for size in sizes:
        for kind in KINDS:
            for r in range(1, rounds + 1):
                res = await one_round(
                    cluster.bootstrap, topic, partitions, size, kind, heartbeat_ms / 1000, r
                )
                what = "joins" if kind == "join" else "leaves"
                progress(
                    f"a member {what}, {size} after, round {r}/{rounds}: {res.total_ms:.0f} ms "
                    f"(request {res.request_ms:.0f} ms), generation {res.generation_before} -> "
                    f"{res.generation_after}"
                )
                out.append(res)
    return out


def summary(results: Sequence[Round], sizes: Sequence[int]) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        row: dict[str, Any] = {"size": size}
        for kind in KINDS:
            ms = sorted(r.total_ms for r in results if r.size == size and r.kind == kind)
            row[kind] = {
                "median_ms": statistics.median(ms) if ms else None,
                "min_ms": ms[0] if ms else None,
                "max_ms": ms[-1] if ms else None,
                "rounds": len(ms),
            }
        rows.append(row)
    return rows


def markdown(command: str, facts: dict[str, Any], settings: dict[str, Any], rows: Any) -> str:
    def cell(s: dict[str, Any]) -> str:
        if s["median_ms"] is None:
            return "-"
        return f"{s['median_ms']:.0f} ms ({s['min_ms']:.0f}-{s['max_ms']:.0f})"

    lines = [
        "# raftlog rebalance bench",
        "",
        f"`{command}`",
        "",
        f"{facts['date']}, {facts['nproc']} cores ({facts['cpu']}), {facts['python']}, "
        f"commit {facts['git_commit']}, load {facts['load_average_at_start']} at start",
        "",
        f"Three node processes on 127.0.0.1; one topic of {settings['partitions']} partitions; "
        f"members heartbeat every {settings['heartbeat_ms']} ms; median (min-max) of "
        f"{settings['rounds']} rounds, each on a fresh group. Rebalance time: request sent "
        "until the last member holds the new generation.",
        "",
        "| members after | a member joins | a member leaves |",
        "|---|---|---|",
    ]
    lines += [f"| {r['size']} | {cell(r['join'])} | {cell(r['leave'])} |" for r in rows]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.rebalance_bench",
        description="Consumer-group rebalance time by group size (see the module docstring).",
    )
    p.add_argument("--sizes", default=None, help="group sizes, comma-separated (1,10,50)")
    p.add_argument("--rounds", type=int, default=None, help="rounds per size and kind (5)")
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--heartbeat-ms", type=int, default=100, help="member heartbeat interval")
    p.add_argument("--quick", action="store_true", help="sizes 1,3 and one round (tests)")
    p.add_argument("--data-dir", help="where the cluster's data goes (a real disk by default)")
    p.add_argument("--results-dir", default=str(REPO / "bench" / "results"))
    p.add_argument("--log-level", default="WARNING")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    sizes_text = args.sizes or ("1,3" if args.quick else "1,10,50")
    try:
        sizes = [int(x) for x in sizes_text.split(",")]
    except ValueError:
        parser.error(f"--sizes must be integers separated by commas, got {sizes_text!r}")
    rounds = args.rounds or (1 if args.quick else 5)
    if min(sizes) < 1 or rounds < 1 or args.heartbeat_ms < 1:
        parser.error("--sizes, --rounds and --heartbeat-ms must be >= 1")
    if args.partitions < max(sizes) + 1:
        parser.error("--partitions must be at least the largest size + 1")
    settings = {
        "sizes": sizes,
        "rounds": rounds,
        "partitions": args.partitions,
        "heartbeat_ms": args.heartbeat_ms,
    }
    command = common.command_line("bench.rebalance_bench")
    wd = common.prepare_work_dir(args.data_dir, "raftlog-rebalance-")
    work, facts = wd.path, wd.facts
    cluster = LocalCluster(work, SESSION_TIMEOUT_MS, args.log_level)
    try:
        cluster.start(timeout_s=60)
        progress(f"cluster ready on {cluster.bootstrap}; sizes {sizes}, {rounds} rounds")
        results = asyncio.run(
            run_rounds(cluster, sizes, rounds, args.partitions, args.heartbeat_ms)
        )
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    rows = summary(results, sizes)
    text = markdown(command, facts, settings, rows)
    prefix = common.results_prefix(args.results_dir, "rebalance", common.run_stamp())
    payload = {
        "command": command,
        "machine": facts,
        "settings": settings,
        "summary": rows,
        "rounds": [asdict(r) for r in results],
    }
    common.write_results(prefix, text, payload, progress)
    return 0


if __name__ == "__main__":
    sys.exit(main())
