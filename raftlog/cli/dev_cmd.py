"""`raftlog dev` (a local cluster in the foreground) and `raftlog node` (one node of a real one).

`raftlog dev --nodes 1` runs one combined controller+broker node in this process, with its data
directly in --data-dir. `raftlog dev --nodes 3` writes `DIR/node-<id>/node.toml` for three
combined nodes on 127.0.0.1 (client ports PORT, PORT+1, ...; Raft ports PORT+100, ...;
replication listeners, where followers fetch, PORT+200, ...), starts
each as its own process (`raftlog node --config ...`), and stops them all on Ctrl-C or SIGTERM.
A restart with the same DIR reuses the written configs, so the cluster and its data come back.
Each node writes its pid to its data directory's `node.pid`, and `node.ready` once it serves
(raftlog/readiness.py); when every node is ready, `raftlog dev` prints one line with the
bootstrap servers. A node that fails by itself (exit status > 0: a port in use, a failed Raft
thread) stops the whole cluster with status 1; one killed by a signal leaves the others
running. Every line a process writes to the shared stdout/stderr is one write, so lines from
the nodes never merge.

Ports for `--port 0` come from below the kernel's ephemeral port range (`free_ports`), checked
free for TCP and UDP: a port chosen by binding 0 comes from that range, where any process's
next outgoing connection can take it before the node binds it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from raftlog.cli.client_cmd import non_negative_int
from raftlog.client import Admin
from raftlog.errors import InvalidConfigError, RaftlogError
from raftlog.node import NodeConfig, run_node
from raftlog.readiness import read_ready_file, write_line

RAFT_PORT_OFFSET = 100
# Node i's replication listener (followers fetch there): PORT + REPLICATION_PORT_OFFSET + i - 1.
REPLICATION_PORT_OFFSET = 200
# `raftlog node --health`: a healthy node answers a DescribeCluster in milliseconds; a container
# health check's own timeout (docker/compose.yaml) must be longer than this.
HEALTH_TIMEOUT_MS = 3000
# `raftlog node` under this environment variable runs under cProfile and writes
# <dir>/node-<id>-<pid>.prof when it stops (a node killed with -9 writes nothing).
PROFILE_DIR_ENV = "RAFTLOG_PROFILE_DIR"
# Ports `free_ports` picks from: below the ephemeral range, above the ports services usually
# claim. If the kernel's ephemeral range leaves no room there, free_ports binds port 0.
PICKED_PORT_MIN = 20000
# How many random candidates free_ports tries per port before giving up on the range.
PORT_PICK_ATTEMPTS = 200


def register(sub: Any) -> None:
    p = sub.add_parser("dev", help="run a local raftlog cluster in the foreground")
    p.add_argument("--nodes", type=int, default=1, help="number of nodes (1, 3 or 5 typical)")
    p.add_argument("--data-dir", default="./data", help="where the nodes keep their data")
    p.add_argument("--host", default="127.0.0.1", help="address every node listens on (127.0.0.1)")
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
        "--fetch-zero-copy-min-bytes",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="with sendfile, copy a partition's fetched data smaller than N bytes instead "
        "(default 65536; 0: sendfile everything)",
    )
    p.add_argument(
        "--session-timeout-ms",
        type=int,
        default=3000,
        help="fence a broker silent this long (broker_session_timeout_ms)",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="the nodes' log level (INFO)",
    )
    p.set_defaults(func=_dev)

    n = sub.add_parser("node", help="run one node of a cluster from its TOML config")
    n.add_argument(
        "--config",
        required=True,
        help="path of the node's TOML config (RAFTLOG_<SETTING> variables override it)",
    )
    n.add_argument(
        "--health",
        action="store_true",
        help="do not run the node: exit 0 if the node of this config is ready and sees a "
        "controller, 1 saying why not (a container's health check)",
    )
    n.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (INFO)",
    )
    n.set_defaults(func=_node)


def _ephemeral_port_min() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range starts here


def _port_free(host: str, port: int) -> bool:
    """Free for TCP and UDP (a controller's Raft port number also takes heartbeats by UDP)."""
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct ports free right now, picked at random below the kernel's ephemeral range.

    Not from binding port 0: that port comes from the ephemeral range, from which the kernel
    also takes the local port of every outgoing connection, so between this check and the
    node's own bind any process's connect() may take it (measured here: a cause of failed
    starts). A port below the range is only taken by an explicit bind.
    """
    top = _ephemeral_port_min()
    if top - PICKED_PORT_MIN < 10 * n:
        return _bound_ports(n, host)
    rng = random.Random()
    ports: list[int] = []
    for _ in range(PORT_PICK_ATTEMPTS * n):
        port = rng.randrange(PICKED_PORT_MIN, top)
        if port not in ports and _port_free(host, port):
            ports.append(port)
            if len(ports) == n:
                return ports
    raise RaftlogError(
        f"no {n} free ports found in {PICKED_PORT_MIN}..{top - 1} on {host} after "
        f"{PORT_PICK_ATTEMPTS * n} tries"
    )


def _bound_ports(n: int, host: str) -> list[int]:
    """n ports the kernel hands out for port 0 (may be taken again before they are used)."""
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
    """A node's TOML: plain settings first, then a [table] per dict setting (e.g. [log])."""
    lines = [
        f"{k} = {_toml_value(v)}"
        for k, v in settings.items()
        if v is not None and not isinstance(v, dict)
    ]
    for table, values in settings.items():
        if isinstance(values, dict):
            lines.append(f"\n[{table}]")
            lines.extend(f"{_toml_value(k)} = {_toml_value(v)}" for k, v in values.items())
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
        write_line(sys.stderr, f"raftlog: node {config.node_id} cannot start: {failure}")
        return 1
    return 0


def _node(args: argparse.Namespace) -> int:
    config = NodeConfig.load(args.config, os.environ)
    if args.health:
        problem = node_health_problem(config)
        if problem is not None:
            write_line(sys.stderr, f"raftlog: node {config.node_id} is not healthy: {problem}")
            return 1
        write_line(sys.stdout, f"raftlog: node {config.node_id} is healthy")
        return 0
    logging.getLogger().setLevel(args.log_level)
    profile_dir = os.environ.get(PROFILE_DIR_ENV)
    if not profile_dir:
        return _run_in_process(config)
    # Benchmarks (bench/replication_bench.py --profile) set this to see where a node's time
    # goes: cProfile of the main thread (the event loop), written when the node stops.
    import cProfile

    profiler = cProfile.Profile()
    try:
        return int(profiler.runcall(_run_in_process, config))
    finally:
        profiler.dump_stats(os.path.join(profile_dir, f"node-{config.node_id}-{os.getpid()}.prof"))


def node_health_problem(config: NodeConfig) -> str | None:
    """Why the node of `config`, running on this host, is not healthy; None if it is.

    Healthy: it wrote its ready file (it joined the quorum and, as a broker, registered), its
    process is alive, and, as a broker, it answers a DescribeCluster on its client listener
    with its own node id, naming a quorum leader (an isolated node has none) and itself as a
    registered, unfenced broker in its view."""
    info = read_ready_file(config.data_dir)
    if info is None:
        return f"no live ready file in {config.data_dir} (starting, failed or stopped)"
    if not config.is_broker:
        return None
    host, port = config.listener_address()
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    try:
        with Admin(f"{host}:{port}", request_timeout_ms=HEALTH_TIMEOUT_MS) as admin:
            view = admin.describe_cluster()
    except (OSError, RaftlogError) as e:
        return f"its client listener {host}:{port} does not answer: {e}"
    if view.get("node_id") != config.node_id:
        return f"{host}:{port} is node {view.get('node_id')}, not node {config.node_id}"
    if view.get("controller_id", -1) < 0:
        return "it sees no controller (no metadata quorum leader)"
    me = [b for b in view.get("brokers", []) if b.get("node_id") == config.node_id]
    if not me or me[0].get("fenced"):
        return "it is not a registered, unfenced broker in its own metadata"
    return None


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
            fetch_zero_copy_min_bytes=args.fetch_zero_copy_min_bytes,
            broker_session_timeout_ms=args.session_timeout_ms,
        )
        return _run_in_process(config)
    return _run_cluster(args)


# A local cluster reacts in seconds: a follower that has not caught up for this long leaves the
# ISR (Kafka's replica.lag.time.max.ms, 30 s by default, as NodeConfig's).
DEV_REPLICA_LAG_TIME_MAX_MS = 5000


def replication_defaults(nodes: int) -> dict[str, Any]:
    """What `raftlog dev --nodes N` gives new topics: replication factor 3 (fewer nodes: all of
    them) and min.insync.replicas 2 where there are 3 replicas, so acks=all survives one loss."""
    rf = min(3, nodes)
    return {
        "default_replication_factor": rf,
        "replica_lag_time_max_ms": DEV_REPLICA_LAG_TIME_MAX_MS,
        "log": {"min.insync.replicas": 2 if rf >= 3 else 1},
    }


def _announce_when_ready(procs: list[subprocess.Popen[bytes]], data_dirs: list[str]) -> bool:
    """Print the bootstrap servers once every node has written its ready file; True if so."""
    addresses = []
    for proc, data_dir in zip(procs, data_dirs, strict=True):
        info = read_ready_file(data_dir)
        if info is None or info.get("pid") != proc.pid:
            return False  # not ready yet, or a file from an earlier start
        addresses.append(str(info["client_address"]))
    write_line(
        sys.stdout,
        f"raftlog dev: {len(procs)} nodes ready; bootstrap servers {','.join(addresses)}",
    )
    return True


def _run_cluster(args: argparse.Namespace) -> int:
    n = args.nodes
    paths = [os.path.join(args.data_dir, f"node-{i}", "node.toml") for i in range(1, n + 1)]
    if not all(os.path.exists(p) for p in paths):
        if args.port == 0:
            ports = free_ports(3 * n, args.host)
            client, raft, replication = ports[:n], ports[n : 2 * n], ports[2 * n :]
        else:
            client = [args.port + i for i in range(n)]
            raft = [args.port + RAFT_PORT_OFFSET + i for i in range(n)]
            replication = [args.port + REPLICATION_PORT_OFFSET + i for i in range(n)]
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
                    "replication_listener": f"{args.host}:{replication[i]}",
                    "controller_voters": voters,
                    "auto_create_topics": args.auto_create_topics,
                    "fetch_zero_copy": args.fetch_zero_copy,
                    "fetch_zero_copy_min_bytes": args.fetch_zero_copy_min_bytes,
                    "broker_session_timeout_ms": args.session_timeout_ms,
                    **replication_defaults(n),
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
    announced = False
    data_dirs = [os.path.dirname(p) for p in paths]
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
                        write_line(
                            sys.stderr,
                            f"raftlog dev: node {i + 1} failed (exit status {code}); stopping "
                            "the others",
                        )
                        stop(signal.SIGTERM, None)
                    else:
                        # Killed by a signal (a kill -9 to watch failover): the others go on.
                        write_line(
                            sys.stderr,
                            f"raftlog dev: node {i + 1} exited with status {code}; the others "
                            "keep running",
                        )
            if not announced and not stopping:
                announced = _announce_when_ready(procs, data_dirs)
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
