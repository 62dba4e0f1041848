"""`raftlog dev`: run a local node in the foreground; Ctrl-C (or SIGTERM) stops it cleanly."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any

from raftlog.broker import BrokerConfig, run_broker
from raftlog.errors import InvalidConfigError


def register(sub: Any) -> None:
    p = sub.add_parser("dev", help="run a local raftlog node in the foreground")
    p.add_argument("--nodes", type=int, default=1, help="number of nodes (1 for now)")
    p.add_argument("--data-dir", default="./data", help="where partitions live (default ./data)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9092, help="client port (0 = any free port)")
    p.add_argument("--node-id", type=int, default=1)
    p.add_argument(
        "--auto-create-topics",
        action="store_true",
        help="create unknown topics on first produce/metadata request",
    )
    p.add_argument(
        "--fetch-zero-copy",
        action="store_true",
        help="serve fetches with sendfile instead of pread+write",
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=_dev)


def _dev(args: argparse.Namespace) -> int:
    if args.nodes != 1:
        raise InvalidConfigError(
            f"--nodes {args.nodes}: this version runs one node; the multi-node local cluster "
            "comes with the metadata quorum"
        )
    logging.getLogger().setLevel(args.log_level)
    os.makedirs(args.data_dir, exist_ok=True)
    with open(os.path.join(args.data_dir, "node.pid"), "w") as f:
        f.write(f"{os.getpid()}\n")
    config = BrokerConfig(
        data_dir=args.data_dir,
        node_id=args.node_id,
        host=args.host,
        port=args.port,
        auto_create_topics=args.auto_create_topics,
        fetch_zero_copy=args.fetch_zero_copy,
    )
    try:
        asyncio.run(run_broker(config))
    except OSError as e:
        print(f"raftlog: cannot start the broker on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    return 0
