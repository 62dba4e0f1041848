"""`raftlog chaos check HISTORY`: re-run the chaos suite's checker on a saved history.

The chaos suite (chaos/) lives in the source tree, not in the installed package: the command
imports it when `chaos` is importable or when the `raftlog` package in use sits in a checkout
next to `chaos/checker.py`; elsewhere it says so and exits 1. Exit status: 0 when the history
is valid, 1 when it is not (the summary names every anomaly) or cannot be read.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import raftlog


def register(sub: Any) -> None:
    p = sub.add_parser("chaos", help="the chaos suite: check a recorded history")
    csub = p.add_subparsers(dest="chaos_command", required=True, metavar="SUBCOMMAND")
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
    """`chaos.<name>`, from the path or from the checkout the raftlog package sits in."""
    root = Path(raftlog.__file__).resolve().parents[1]
    try:
        return importlib.import_module(f"chaos.{name}")
    except ImportError:
        if not (root / "chaos" / f"{name}.py").is_file():
            raise
    sys.path.insert(0, str(root))
    return importlib.import_module(f"chaos.{name}")


def _check(args: argparse.Namespace) -> int:
    try:
        history = _import_chaos("history")
        checker = _import_chaos("checker")
    except ImportError as e:
        print(
            f"raftlog: error: the chaos suite is not installed ({e}); run this command from a "
            "raftlog source checkout",
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
    print(f"{path}: {'VALID' if report['valid'] else 'INVALID'} (seed {seed})")
    print(
        f"  sends {report['sends']}: acknowledged {report['acknowledged']}, "
        f"failed {report['failed']}, indeterminate {report['indeterminate']}"
    )
    for kind, cases in report["anomalies"].items():
        print(f"  {kind}: {report[kind]}")
        for case in cases[:3]:
            print(f"    {json.dumps(case, sort_keys=True)}")
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
