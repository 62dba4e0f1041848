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
        "verify", help="check every batch and index; exit 1 naming each problem found"
    )
    v.add_argument("path", help="a partition directory or one NNNN.log segment file")
    v.set_defaults(func=_verify)


def _dump(args: argparse.Namespace) -> int:
    problems = tools.dump(args.path, sys.stdout, records=args.records)
    return 1 if problems else 0


def _verify(args: argparse.Namespace) -> int:
    problems = tools.verify(args.path)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) in {args.path}", file=sys.stderr)
        return 1
    print(f"{args.path}: ok")
    return 0
