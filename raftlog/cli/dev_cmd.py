"""`raftlog dev` (a local cluster in the foreground) and `raftlog node` (one node of a real one).

`raftlog dev --nodes 1` runs one combined controller+broker node in this process, with its data
directly in --data-dir. `raftlog dev --nodes 3` writes `DIR/node-<id>/node.toml` for three
combined nodes on 127.0.0.1 (client ports PORT, PORT+1, ...; Raft ports PORT+100, ...), starts
each as its own process (`raftlog node --config ...`), and stops them all on Ctrl-C or SIGTERM.
A restart with the same DIR reuses the written configs, so the cluster and its data come back.
Each node writes its pid to its data directory's `node.pid`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from raftlog.errors import InvalidConfigError, RaftlogError
from raftlog.node import NodeConfig, run_node

RAFT_PORT_OFFSET = 100


def register(sub: Any) -> None:
    p = sub.add_parser("dev", help="run a local raftlog cluster in the foreground")
    p.add_argument("--nodes", type=int, default=1, help="number of nodes (1, 3 or 5 typical)")
    p.add_argument("--data-dir", default="./data", help="where the nodes keep their data")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--port",
        type=int,
        default=9092,
        help="client port of node 1; node i uses PORT+i-1 (0 = any free ports)",
    )
    p.add_argument(
        "--auto-create-topics",
        action="store_true",
        help="create unknown topics on first produce/metadata request",
    )
    p.add_argument(
        "--fetch-zero-copy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve fetches with sendfile (the default; --no-fetch-zero-copy: pread + write)",
    )
    p.add_argument(
        "--session-timeout-ms",
        type=int,
        default=3000,
        help="fence a broker silent this long (broker_session_timeout_ms)",
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=_dev)

    n = sub.add_parser("node", help="run one node of a cluster from its TOML config")
    n.add_argument("--config", required=True, help="path of the node's TOML config")
    n.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    n.set_defaults(func=_node)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n ports free right now (bound then released: another process may still take one)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind((host, 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_node_config(path: str, settings: dict[str, Any]) -> None:
    lines = [f"{k} = {_toml_value(v)}" for k, v in settings.items() if v is not None]
    with open(path, "w") as f:
        f.write("# written by `raftlog dev`; edit or delete to change the cluster\n")
        f.write("\n".join(lines) + "\n")


def _run_in_process(config: NodeConfig) -> int:
    os.makedirs(config.data_dir, exist_ok=True)
    with open(os.path.join(config.data_dir, "node.pid"), "w") as f:
        f.write(f"{os.getpid()}\n")
    failure: BaseException | None = None
    try:
        asyncio.run(run_node(config))
    except* (OSError, RaftlogError) as group:
        failure = group.exceptions[0]
    if failure is not None:
        print(f"raftlog: node {config.node_id} cannot start: {failure}", file=sys.stderr)
        return 1
    return 0


def _node(args: argparse.Namespace) -> int:
    logging.getLogger().setLevel(args.log_level)
    return _run_in_process(NodeConfig.load(args.config))


def _dev(args: argparse.Namespace) -> int:
    if not 1 <= args.nodes <= 9:
        raise InvalidConfigError(f"--nodes {args.nodes}: must be 1..9")
    logging.getLogger().setLevel(args.log_level)
    if args.nodes == 1:
        # The Raft address is chosen once and kept in DIR/raft-address, so that restarts
        # (even on another client port) find the same single-voter quorum.
        os.makedirs(args.data_dir, exist_ok=True)
        address_file = os.path.join(args.data_dir, "raft-address")
        if os.path.exists(address_file):
            with open(address_file) as f:
                raft_address = f.read().strip()
        else:
            raft_address = f"{args.host}:{free_ports(1, args.host)[0]}"
            with open(address_file, "w") as f:
                f.write(raft_address + "\n")
        config = NodeConfig(
            node_id=1,
            data_dir=args.data_dir,
            controller_voters=[f"1@{raft_address}"],
            client_listener=f"{args.host}:{args.port}",
            auto_create_topics=args.auto_create_topics,
            fetch_zero_copy=args.fetch_zero_copy,
            broker_session_timeout_ms=args.session_timeout_ms,
        )
        return _run_in_process(config)
    return _run_cluster(args)


def _run_cluster(args: argparse.Namespace) -> int:
    n = args.nodes
    paths = [os.path.join(args.data_dir, f"node-{i}", "node.toml") for i in range(1, n + 1)]
    if not all(os.path.exists(p) for p in paths):
        if args.port == 0:
            ports = free_ports(2 * n, args.host)
            client, raft = ports[:n], ports[n:]
        else:
            client = [args.port + i for i in range(n)]
            raft = [args.port + RAFT_PORT_OFFSET + i for i in range(n)]
        voters = [f"{i + 1}@{args.host}:{raft[i]}" for i in range(n)]
        for i, path in enumerate(paths):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_node_config(
                path,
                {
                    "node_id": i + 1,
                    "roles": ["controller", "broker"],
                    "data_dir": os.path.abspath(os.path.dirname(path)),
                    "client_listener": f"{args.host}:{client[i]}",
                    "controller_voters": voters,
                    "auto_create_topics": args.auto_create_topics,
                    "fetch_zero_copy": args.fetch_zero_copy,
                    "broker_session_timeout_ms": args.session_timeout_ms,
                },
            )
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "raftlog.cli",
                "node",
                "--config",
                p,
                "--log-level",
                args.log_level,
            ]
        )
        for p in paths
    ]
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = 0
    reported: set[int] = set()
    try:
        while any(p.poll() is None for p in procs):
            for i, p in enumerate(procs):
                code = p.poll()
                if code is not None and not stopping and i not in reported:
                    reported.add(i)
                    status = 1
                    if code > 0:
                        # The node failed by itself (it printed why: a taken port, a failed
                        # Raft thread): a dev cluster missing a node is not what was asked for.
                        print(
                            f"raftlog dev: node {i + 1} failed (exit status {code}); stopping "
                            "the others",
                            file=sys.stderr,
                        )
                        stop(signal.SIGTERM, None)
                    else:
                        # Killed by a signal (a kill -9 to watch failover): the others go on.
                        print(
                            f"raftlog dev: node {i + 1} exited with status {code}; the others "
                            "keep running",
                            file=sys.stderr,
                        )
            time.sleep(0.2)
    finally:
        stop(signal.SIGTERM, None)
        deadline = time.monotonic() + 30
        for p in procs:
            try:
                p.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
    return status
