"""`raftlog chaos run ...`: a chaos run (chaos/runner.py); `raftlog chaos check HISTORY`: re-run
the chaos suite's checker on a saved history.

The chaos suite is the `chaos` package, installed beside `raftlog` (pyproject.toml); the
command imports it when it runs, and says so and exits 1 where it is missing. Exit status: 0
when the history is valid, 1 when it is not (the summary names every anomaly) or cannot be
read; `run` the same for the history it records, and 2 for bad arguments or a run that could
not start (the backend refused a fault kind, e.g. a disk kind on docker, or the cluster did
not come up).
`run --backend docker` needs the docker engine and Compose v2 (docker/cluster sets them up).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "chaos", help="the chaos suite: run faults against a cluster, check a history"
    )
    csub = p.add_subparsers(dest="chaos_command", required=True, metavar="SUBCOMMAND")
    r = csub.add_parser(
        "run",
        help="run a workload under a seeded fault schedule, record and check its history",
        description="Start a cluster, produce and consume under faults for --duration "
        "seconds, heal, read everything back, and check the history; writes "
        "OUT/history.jsonl, OUT/report.json and OUT/report.png. Exit 0 only when valid. "
        "Backends: local (node processes on this host; network faults in network namespaces, "
        "root) and docker (docker/compose.yaml's three containers as a compose project of "
        "their own with free host ports, removed with its volumes at the end: kill, kill-all, "
        "pause, restart, rolling-restart by docker kill/pause/stop/start; isolate, split, "
        "bridge, one-way by iptables inside the containers; link and disk kinds are local "
        "only and refused).",
    )
    r.add_argument(
        "--backend",
        choices=["local", "docker"],
        default="local",
        help="where the nodes run: local processes or docker containers (local)",
    )
    r.add_argument(
        "--client",
        choices=["raftlog", "kafka"],
        default="raftlog",
        help="the workload's client: raftlog's own, or kafka (confluent-kafka through the "
        "brokers' Kafka listeners: idempotent producers, a Kafka consumer group) (raftlog)",
    )
    r.add_argument(
        "--duration", type=_positive_float, default=60.0, help="seconds of workload (60)"
    )
    r.add_argument(
        "--faults",
        type=_fault_kinds,
        default=("kill", "pause", "isolate"),
        help="comma-separated fault kinds (kill,pause,isolate); network kinds need root",
    )
    r.add_argument("--seed", type=int, default=0, help="seed of the fault schedule (0)")
    r.add_argument("--out", required=True, help="directory for the history, report and plot")
    r.add_argument("--acks", choices=["all", "1", "0"], default="all", help="producer acks (all)")
    r.add_argument("--min-insync", type=int, default=2, help="the topic's min.insync.replicas (2)")
    r.add_argument(
        "--unclean", action="store_true", help="allow unclean leader election (control runs)"
    )
    r.add_argument(
        "--durability",
        choices=["replication", "fsync"],
        default="replication",
        help="the topic's durability.policy (replication)",
    )
    r.add_argument("--partitions", type=int, default=3, help="partitions of the topic (3)")
    r.add_argument(
        "--compact",
        action="store_true",
        help="a compacted topic (cleanup.policy=compact, 16 KiB segments, cleaners every "
        "150 ms at 64 KiB/s): keyed records, 32 keys per partition, some tombstones, checked "
        "per key (the last acknowledged write of every key survives); raftlog's client only",
    )
    r.add_argument(
        "--nodes",
        type=int,
        choices=range(3, 8),
        default=3,
        metavar="N",
        help="nodes in the cluster, 3 to 7 (3; three are Raft voters, the rest brokers only). "
        "A reassign fault moves replicas only with more nodes than the replication factor "
        "(3): --nodes 4",
    )
    r.add_argument("--rate", type=_positive_float, default=100.0, help="sends/s per producer (100)")
    r.add_argument(
        "--fault-seconds",
        type=_range,
        default=None,
        help="MIN,MAX length of a fault (the schedule's default: 5,20)",
    )
    r.add_argument(
        "--quiet-seconds",
        type=_range,
        default=None,
        help="MIN,MAX pause between faults (the schedule's default: 5,15)",
    )
    r.set_defaults(func=_run)
    c = csub.add_parser(
        "check",
        help="check a history.jsonl (lost, duplicated, reordered records, availability)",
        description="Re-run the checker on a saved history and print its report; exit 0 only "
        "when the history is valid.",
    )
    c.add_argument("history", help="a history.jsonl written by a chaos run")
    c.add_argument("--json", action="store_true", help="print the whole report as JSON")
    c.add_argument(
        "--out", help="also write the report as JSON to this file (e.g. DIR/report.json)"
    )
    c.add_argument(
        "--examples",
        type=int,
        default=None,
        help="cases listed per anomaly (default: the checker's EXAMPLES_MAX)",
    )
    c.set_defaults(func=_check)


def _import_chaos(name: str) -> ModuleType:
    """`chaos.<name>`, imported when a chaos command runs, never when raftlog is imported (the
    chaos suite imports raftlog, not the reverse)."""
    return importlib.import_module(f"chaos.{name}")


def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{s!r} must be > 0")
    return v


def _range(s: str) -> tuple[float, float]:
    parts = s.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"{s!r}: expected MIN,MAX (e.g. 3,8)")
    lo, hi = (_positive_float(p) for p in parts)
    if lo > hi:
        raise argparse.ArgumentTypeError(f"{s!r}: MIN is above MAX")
    return lo, hi


def _fault_kinds(s: str) -> tuple[str, ...]:
    try:
        kinds = _import_chaos("faults").KINDS
    except ImportError:
        kinds = ()
    out = tuple(k.strip() for k in s.split(",") if k.strip())
    bad = [k for k in out if kinds and k not in kinds]
    if not out or bad:
        known = ", ".join(kinds) or "the chaos suite's kinds"
        raise argparse.ArgumentTypeError(f"{s!r}: fault kinds must be among {known}")
    return out


def _run(args: argparse.Namespace) -> int:
    try:
        runner = _import_chaos("runner")
    except ImportError as e:
        print(
            f"raftlog: error: the chaos suite is not installed ({e}); install raftlog from its "
            "source checkout (pip install -e .)",
            file=sys.stderr,
        )
        return 1
    cfg = runner.RunConfig(
        out=Path(args.out),
        backend=args.backend,
        client=args.client,
        duration_s=args.duration,
        faults=args.faults,
        seed=args.seed,
        nodes=args.nodes,
        partitions=args.partitions,
        compact=args.compact,
        acks=args.acks,
        min_insync=args.min_insync,
        unclean=args.unclean,
        durability=args.durability,
        rate=args.rate,
        fault_s=args.fault_seconds,
        quiet_s=args.quiet_seconds,
    )
    faults = _import_chaos("faults")
    try:
        report = runner.run(cfg)
    except faults.FaultError as e:
        # The backend refused the run (a fault kind it cannot inject) or could not start it.
        print(f"raftlog: error: {e}", file=sys.stderr)
        return 2
    print(runner.summary(report))
    print(f"history {cfg.out / 'history.jsonl'}, report {cfg.out / 'report.json'}")
    return 0 if report["valid"] else 1


def _check(args: argparse.Namespace) -> int:
    try:
        history = _import_chaos("history")
        checker = _import_chaos("checker")
    except ImportError as e:
        print(
            f"raftlog: error: the chaos suite is not installed ({e}); install raftlog from its "
            "source checkout (pip install -e .)",
            file=sys.stderr,
        )
        return 1
    ops = history.read_history(args.history)
    examples = checker.EXAMPLES_MAX if args.examples is None else args.examples
    report = checker.check(ops, examples_max=examples)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, sort_keys=True)
            f.write("\n")
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        _print_summary(args.history, report)
    return 0 if report["valid"] else 1


def _print_summary(path: str, report: dict[str, Any]) -> None:
    seed = report["seed"]
    mode = ", compacted topic: per-key rules" if report.get("mode") == "compacted" else ""
    print(f"{path}: {'VALID' if report['valid'] else 'INVALID'} (seed {seed}{mode})")
    print(
        f"  sends {report['sends']}: acknowledged {report['acknowledged']}, "
        f"failed {report['failed']}, indeterminate {report['indeterminate']}"
    )
    for kind, cases in report["anomalies"].items():
        print(f"  {kind}: {report[kind]}")
        for case in cases[:3]:
            print(f"    {json.dumps(case, sort_keys=True)}")
    compaction = report.get("compaction")
    if compaction is not None:
        print(
            f"  compaction: {compaction['superseded']} acknowledged sends superseded, "
            f"{compaction['compacted_away']} compacted away, longest offset gap "
            f"{compaction['max_offset_gap']}, cleans {compaction['cleans']}"
        )
    print(f"  longest time without an acknowledged write: {report['max_unavailability_s']:.3f} s")
    for f in report["faults"]:
        healed = "not healed" if f["healed_s"] is None else f"healed at {f['healed_s']:.3f} s"
        gap = f["max_unavailability_s"]
        print(
            f"  fault {f.get('kind')} {f.get('targets')}: at {f['started_s']:.3f} s, {healed}, "
            f"unavailable {'-' if gap is None else f'{gap:.3f} s'}"
        )
    if report["invalid_because"]:
        print(f"  invalid because: {', '.join(report['invalid_because'])}")
