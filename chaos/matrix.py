"""The fault matrix: long chaos runs, one row per fault kind, for docs/CHAOS.md (not run in CI).

    python -m chaos.matrix --out runs/matrix                     # the full matrix (hours)
    python -m chaos.matrix --out runs/m --duration 120 --runs 1  # a shorter one
    python -m chaos.matrix --out runs/d --duration 60 --combined-runs 0 \
        --kinds link,disk-full,torn-tail,bitflip                 # the link and disk rows
    python -m chaos.matrix --out runs/k --client kafka --combined-runs 0  # Kafka's client
    python -m chaos.matrix --out runs/c --compact --kinds kill --combined-runs 0  # compacted

Runs `--runs` runs of `--duration` seconds for each fault kind alone (`--kinds`), plus
`--combined-runs` runs with every kind mixed, each with its own seed (`--first-seed` plus the
run's index), through chaos/runner.py. Each run's directory keeps its history, report and
plot; `matrix.md` and `matrix.json` sum them up: per row the runs, acknowledged writes, lost,
duplicated, other anomalies, the longest unavailability (the maximum over the runs) and how
many runs were valid. With `--compact` every run's topic is compacted (the runner's
`compact`: keyed records, cleaners that run often, the checker's per-key rules) and each row is
labelled `compact+KIND`; its rows also give the acknowledged sends compacted away and the
longest run of missing offsets in a partition's final read. Exit status 0 only when every run
was valid.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chaos.runner import RunConfig, run

KINDS = ("kill", "pause", "restart", "rolling-restart", "isolate", "split", "bridge", "one-way")
# Rows of their own, not mixed into the combined runs: link faults cannot share a run with the
# network faults (their proxies listen on the host), and the disk faults need root (a tmpfs)
# and, for torn tails, the fsync durability policy; reassign runs on four nodes. `--kinds`
# picks them as any other row.
SEPARATE_KINDS = ("link", "disk-full", "torn-tail", "bitflip", "reassign")
# A `reassign` row runs one node more than the replication factor (3), so that replicas move
# rather than only reorder: the fourth node is a broker only (three Raft voters).
OTHER_ANOMALIES = (
    "unseen",
    "inconsistent_offsets",
    "nonmonotonic_send",
    "nonmonotonic_poll",
    "committed_offset_regressions",
    "replica_divergence",
    # A compacted run's own (chaos/compaction_check.py); absent from other runs' reports.
    "vanished",
    "unsent_read",
    "stale_last_value",
)


def row(label: str, reports: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "faults": label,
        "runs": len(reports),
        "valid": sum(1 for r in reports if r["valid"]),
        "acknowledged": sum(r["acknowledged"] for r in reports),
        "lost": sum(r["lost"] for r in reports),
        "duplicated": sum(r["duplicated"] for r in reports),
        "other_anomalies": sum(r.get(k, 0) for r in reports for k in OTHER_ANOMALIES),
        "max_unavailability_s": max((r["max_unavailability_s"] for r in reports), default=0.0),
        "max_partition_unavailability_s": max(
            (r.get("max_partition_unavailability_s", 0.0) for r in reports), default=0.0
        ),
        **_compaction_figures(reports),
    }


def _compaction_figures(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """A compacted row's figures (nothing for other rows)."""
    figures = [r["compaction"] for r in reports if "compaction" in r]
    if not figures:
        return {}
    return {
        "compacted_away": sum(f["compacted_away"] for f in figures),
        "max_offset_gap": max(f["max_offset_gap"] for f in figures),
        "cleans": sum(f["cleans"] or 0 for f in figures),
    }


def render(rows: list[dict[str, Any]], duration_s: float, client: str = "raftlog") -> str:
    lines = [
        f"Each run {duration_s:g} s; acks=all, min.insync.replicas=2, RF 3, idempotent producers"
        f"; client: {client}.",
        "",
        "| faults | runs (valid) | acknowledged | lost | duplicated | other anomalies "
        "| longest unavailability | longest for one partition |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['faults']} | {r['runs']} ({r['valid']}) | {r['acknowledged']:,} | {r['lost']} "
            f"| {r['duplicated']} | {r['other_anomalies']} | {r['max_unavailability_s']:.2f} s "
            f"| {r['max_partition_unavailability_s']:.2f} s |"
        )
    compacted = [r for r in rows if "compacted_away" in r]
    if compacted:
        lines += [
            "",
            "| compacted row | acknowledged sends compacted away | longest offset gap | cleans |",
            "|---|---:|---:|---:|",
        ]
        lines += [
            f"| {r['faults']} | {r['compacted_away']:,} | {r['max_offset_gap']:,} "
            f"| {r['cleans']:,} |"
            for r in compacted
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m chaos.matrix", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="directory for the runs and matrix.md")
    p.add_argument("--duration", type=float, default=600.0, help="seconds per run (600)")
    p.add_argument("--runs", type=int, default=1, help="runs per single fault kind (1)")
    p.add_argument("--combined-runs", type=int, default=10, help="runs mixing every kind (10)")
    p.add_argument("--kinds", default=",".join(KINDS), help="fault kinds for single-kind rows")
    p.add_argument(
        "--client",
        choices=["raftlog", "kafka"],
        default="raftlog",
        help="the workload's client (raftlog): kafka runs confluent-kafka through the Kafka "
        "listeners (no link rows: their proxies front raftlog's own listeners)",
    )
    p.add_argument(
        "--compact",
        action="store_true",
        help="every run on a compacted topic, checked per key (rows labelled compact+KIND)",
    )
    p.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="seed of each row's first run, the next runs counting up (0): two matrices with "
        "different first seeds run side by side and add up",
    )
    args = p.parse_args(argv)
    out = Path(args.out)
    kinds = [k for k in args.kinds.split(",") if k]
    plan: list[tuple[str, tuple[str, ...], int]] = []
    for k in kinds:
        plan += [(k, (k,), args.first_seed + i) for i in range(args.runs)]
    mixed = tuple(k for k in kinds if k not in SEPARATE_KINDS)
    if mixed:
        plan += [("combined", mixed, args.first_seed + i) for i in range(args.combined_runs)]
    reports: dict[str, list[dict[str, Any]]] = {}
    started = time.monotonic()
    if args.compact:
        plan = [(f"compact+{label}", faults, seed) for label, faults, seed in plan]
    for n, (label, faults, seed) in enumerate(plan, 1):
        sys.stderr.write(
            f"matrix: run {n}/{len(plan)}: {label} seed {seed} "
            f"({time.monotonic() - started:.0f} s so far)\n"
        )
        # A torn tail loses nothing acknowledged only under the fsync policy (what it cuts is
        # what a power loss takes: the unsynced bytes).
        durability = "fsync" if "torn-tail" in faults else "replication"
        nodes = 4 if "reassign" in faults else 3
        cfg = RunConfig(out=out / f"{label}-{seed}", duration_s=args.duration, faults=faults,
                        seed=seed, progress=False, durability=durability,
                        client=args.client, nodes=nodes, compact=args.compact)  # fmt: skip
        reports.setdefault(label, []).append(run(cfg))
    rows = [row(label, rs) for label, rs in reports.items()]
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix.json").write_text(json.dumps(rows, indent=2) + "\n")
    table = render(rows, args.duration, args.client)
    (out / "matrix.md").write_text(table)
    print(table, end="")
    return 0 if all(r["valid"] == r["runs"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
