"""The `raftlog` command line. Each command group lives in its own module and registers itself.

Rules: bad arguments exit 2 with argparse's message; operating errors (an unreadable file, an
unreachable server) print one line naming what was wrong to stderr and exit 1; nothing prints a
Python traceback for an expected failure.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from raftlog.cli import (
    bench_cmd,
    broker_cmd,
    chaos_cmd,
    client_cmd,
    cluster_cmd,
    demo_cmd,
    dev_cmd,
    group_cmd,
    partitions_cmd,
    storage_cmd,
)
from raftlog.errors import RaftlogError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftlog", description="raftlog: a Kafka-style distributed commit log"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    dev_cmd.register(sub)
    client_cmd.register(sub)
    cluster_cmd.register(sub)
    group_cmd.register(sub)
    partitions_cmd.register(sub)
    broker_cmd.register(sub)
    demo_cmd.register(sub)
    storage_cmd.register(sub)
    bench_cmd.register(sub)
    chaos_cmd.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except (OSError, ValueError, RaftlogError) as e:
        print(f"raftlog: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
