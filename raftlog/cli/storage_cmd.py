"""`raftlog storage dump|verify`: inspect partition directories offline (see storage/tools.py)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from raftlog.storage import tools


def register(sub: Any) -> None:
    p = sub.add_parser("storage", help="inspect partition logs on disk")
    ssub = p.add_subparsers(dest="storage_command", required=True, metavar="SUBCOMMAND")

    d = ssub.add_parser("dump", help="print the batches (and records) of a partition or segment")
    d.add_argument("path", help="a partition directory or one NNNN.log segment file")
    d.add_argument("--records", action="store_true", help="print every record too")
    d.set_defaults(func=_dump)

    v = ssub.add_parser(
        "verify",
        help="check every batch and index; exit 1 naming each problem found",
        description="Check every batch, index and derived checkpoint of a partition directory "
        "(or one segment) without changing a file. Problems (damaged records: a bad checksum "
        "or length, a torn tail, offsets out of order, a missing segment) are printed and the "
        "exit status is 1. What the broker rebuilds by itself (a missing or stale index, a "
        "missing recovery-point or leader-epoch checkpoint: derived data) is printed as a "
        "note and is no problem: with notes only, the exit status is 0.",
    )
    v.add_argument("path", help="a partition directory or one NNNN.log segment file")
    v.set_defaults(func=_verify)


def _dump(args: argparse.Namespace) -> int:
    problems = tools.dump(args.path, sys.stdout, records=args.records)
    return 1 if problems else 0


def _verify(args: argparse.Namespace) -> int:
    found = tools.examine(args.path)
    for p in found.problems:
        print(p)
    for n in found.notes:
        print(f"note: {n}")
    if found.problems:
        print(f"{len(found.problems)} problem(s) in {args.path}", file=sys.stderr)
        return 1
    print(f"{args.path}: ok")
    return 0
