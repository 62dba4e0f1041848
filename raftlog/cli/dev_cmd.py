"""`raftlog dev` (a local cluster in the foreground) and `raftlog node` (one node of a real one).

`raftlog dev --nodes 1` runs one combined controller+broker node in this process, with its data
directly in --data-dir. `raftlog dev --nodes 3` writes `DIR/node-<id>/node.toml` for three
combined nodes on 127.0.0.1 (client ports PORT, PORT+1, ...; Raft ports PORT+100, ...;
replication listeners, where followers fetch, PORT+200, ...; Kafka listeners PORT+300, ...;
metrics listeners, Prometheus' http://HOST:PORT+400/metrics, ...), starts
each as its own process (`raftlog node --config ...`), and stops them all on Ctrl-C or SIGTERM.
A restart with the same DIR reuses the written configs, so the cluster and its data come back.
Each node writes its pid to its data directory's `node.pid`, and `node.ready` once it serves
(raftlog/readiness.py); when every node is ready, `raftlog dev` prints one line with the
bootstrap servers. A node that fails by itself (exit status > 0: a port in use, a failed Raft
thread) stops the whole cluster with status 1; one killed by a signal leaves the others
running. Every line a process writes to the shared stdout/stderr is one write, so lines from
the nodes never merge.

The configs, the ports and the node processes come from the launcher (raftlog/launcher.py):
ports for `--port 0` come from below the kernel's ephemeral port range (`free_ports`,
`free_base_port` for one node, whose Kafka port is PORT+300 across restarts), checked
free for TCP and UDP: a port chosen by binding 0 comes from that range, where any process's
next outgoing connection can take it before the node binds it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from typing import Any

from raftlog.cli.client_cmd import non_negative_int
from raftlog.client import Admin
from raftlog.errors import InvalidConfigError, RaftlogError
from raftlog.launcher import (
    KAFKA_PORT_OFFSET,
    METRICS_PORT_OFFSET,
    PROFILE_DIR_ENV,
    NodeProcess,
    PortPlan,
    free_base_port,
    free_ports,
    node_command,
    node_dir,
    stop_all,
    write_cluster_configs,
)
from raftlog.node import NodeConfig, run_node
from raftlog.readiness import read_ready_file, write_line

# `raftlog node --health`: a healthy node answers a DescribeCluster in milliseconds; a container
# health check's own timeout (docker/compose.yaml) must be longer than this.
HEALTH_TIMEOUT_MS = 3000


def register(sub: Any) -> None:
    p = sub.add_parser("dev", help="run a local raftlog cluster in the foreground")
    p.add_argument("--nodes", type=int, default=1, help="number of nodes (1, 3 or 5 typical)")
    p.add_argument(
        "--controllers",
        type=int,
        default=None,
        help="how many of the nodes (the first ones) are metadata quorum voters; the others "
        "are broker-only nodes that follow the quorum (default: up to 3)",
    )
    p.add_argument("--data-dir", default="./data", help="where the nodes keep their data")
    p.add_argument("--host", default="127.0.0.1", help="address every node listens on (127.0.0.1)")
    p.add_argument(
        "--port",
        type=int,
        default=9092,
        help="client port of node 1; node i uses PORT+i-1 (0 = any free ports)",
    )
    p.add_argument(
        "--kafka",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="open a Kafka-protocol listener on every node, for Kafka's own clients and tools "
        "(the default; node i's on PORT+300+i-1, or any free port with --port 0)",
    )
    p.add_argument(
        "--metrics",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve Prometheus metrics over HTTP on every node (the default; node i's at "
        "http://HOST:PORT+400+i-1/metrics, or any free port with --port 0; docs/METRICS.md)",
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
    if args.controllers is not None and not 1 <= args.controllers <= args.nodes:
        raise InvalidConfigError(
            f"--controllers {args.controllers}: must be 1..{args.nodes} (--nodes)"
        )
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
        # --port 0: a base port whose Kafka offset is free too (free_base_port says why).
        offsets = (
            (0,)
            + ((KAFKA_PORT_OFFSET,) if args.kafka else ())
            + ((METRICS_PORT_OFFSET,) if args.metrics else ())
        )
        port = args.port or free_base_port(offsets, args.host)
        config = NodeConfig(
            node_id=1,
            data_dir=args.data_dir,
            controller_voters=[f"1@{raft_address}"],
            client_listener=f"{args.host}:{port}",
            kafka_listener=f"{args.host}:{port + KAFKA_PORT_OFFSET}" if args.kafka else None,
            metrics_listener=(
                f"{args.host}:{port + METRICS_PORT_OFFSET}" if args.metrics else None
            ),
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
# ... and a restarted node, once back in the ISR, gets its preferred leaderships back within
# this (Kafka's leader.imbalance.check.interval.seconds, 300 s, as NodeConfig's).
DEV_LEADER_IMBALANCE_CHECK_INTERVAL_MS = 10_000
# How long `raftlog dev` waits for its nodes to stop cleanly before it kills them.
DEV_STOP_TIMEOUT_S = 30.0


def replication_defaults(nodes: int) -> dict[str, Any]:
    """What `raftlog dev --nodes N` gives new topics: replication factor 3 (fewer nodes: all of
    them) and min.insync.replicas 2 where there are 3 replicas, so acks=all survives one loss."""
    rf = min(3, nodes)
    return {
        "default_replication_factor": rf,
        "replica_lag_time_max_ms": DEV_REPLICA_LAG_TIME_MAX_MS,
        "leader_imbalance_check_interval_ms": DEV_LEADER_IMBALANCE_CHECK_INTERVAL_MS,
        "log": {"min.insync.replicas": 2 if rf >= 3 else 1},
    }


def _announce_when_ready(nodes: list[NodeProcess]) -> bool:
    """Print the bootstrap servers once every node has written its ready file; True if so."""
    addresses = []
    kafka = []
    metrics = []
    for node in nodes:
        infos = node.ready_infos()
        if infos is None:
            return False  # not ready yet, or a file from an earlier start
        addresses.append(str(infos[0]["client_address"]))
        if infos[0].get("kafka_address"):
            kafka.append(str(infos[0]["kafka_address"]))
        if infos[0].get("metrics_url"):
            metrics.append(str(infos[0]["metrics_url"]))
    also = f"; Kafka protocol bootstrap servers {','.join(kafka)}" if kafka else ""
    also += f"; metrics at {' '.join(metrics)}" if metrics else ""
    write_line(
        sys.stdout,
        f"raftlog dev: {len(nodes)} nodes ready; bootstrap servers {','.join(addresses)}{also}",
    )
    return True


def _run_cluster(args: argparse.Namespace) -> int:
    n = args.nodes
    paths = [node_dir(args.data_dir, i) / "node.toml" for i in range(1, n + 1)]
    if not all(p.exists() for p in paths):
        ports = (
            PortPlan.picked(n, args.host, args.kafka, args.metrics)
            if args.port == 0
            else PortPlan.based(args.port, n, args.kafka, args.metrics)
        )
        write_cluster_configs(
            args.data_dir,
            ports,
            [args.host] * n,
            {
                "auto_create_topics": args.auto_create_topics,
                "fetch_zero_copy": args.fetch_zero_copy,
                "fetch_zero_copy_min_bytes": args.fetch_zero_copy_min_bytes,
                "broker_session_timeout_ms": args.session_timeout_ms,
                **replication_defaults(n),
            },
            controllers=min(3, n) if args.controllers is None else args.controllers,
        )
    # The nodes share our stdout and stderr; each writes its lines whole (write_line).
    nodes = [
        NodeProcess(f"node {i}", node_command(p, args.log_level), [p.parent])
        for i, p in enumerate(paths, start=1)
    ]
    # Started by us, not by the launcher's wait: the ready line is printed by the loop below,
    # which also watches for nodes that fail.
    for node in nodes:
        node.launch()
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for node in nodes:
            if node.running():
                node.begin_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = 0
    reported: set[int] = set()
    announced = False
    try:
        while any(node.running() for node in nodes):
            for i, node in enumerate(nodes):
                code = node.proc.poll() if node.proc is not None else None
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
                announced = _announce_when_ready(nodes)
            time.sleep(0.2)
    finally:
        stop_all(nodes, DEV_STOP_TIMEOUT_S)
    return status
