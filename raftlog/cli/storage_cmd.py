"""`raftlog storage dump|verify`: inspect partition directories offline (see storage/tools.py).

Gaps in the offsets of a log that was ever compacted (its marker file says so) are not
problems: `verify` counts them on its ok line, `dump` prints them between batches. In any other
log a gap is damage, as before.
"""

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
        "or length, a torn tail, offsets that go backwards or overlap) are printed and the "
        "exit status is 1. Gaps in the offsets of a log that was ever compacted are no "
        "problem (the ok line counts them); in any other log they are damage. What the "
        "broker rebuilds by itself (a missing or stale index, a missing recovery-point or "
        "leader-epoch checkpoint: derived data) is printed as a note and is no problem: with "
        "notes only, the exit status is 0.",
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
    print(f"{args.path}: ok{_compacted(found)}")
    return 0


def _compacted(found: tools.Findings) -> str:
    """What compaction left (no problem: see storage/tools.py), for the "ok" line."""
    if not found.gaps and not found.holes:
        return ""
    between = sum(end - start for start, end in found.gaps)
    return (
        f" ({len(found.gaps)} gap(s) between batches, {between} offset(s); {found.holes} "
        "offset(s) without a record inside cleaned batches: log compaction)"
    )
