"""`raftlog cluster status`: the quorum, the brokers and the partitions at a glance."""

from __future__ import annotations

import argparse
import json
from typing import Any

from raftlog.cli.client_cmd import add_bootstrap
from raftlog.client import Admin


def register(sub: Any) -> None:
    c = sub.add_parser("cluster", help="cluster-wide views")
    csub = c.add_subparsers(dest="cluster_command", required=True, metavar="SUBCOMMAND")
    s = csub.add_parser("status", help="controllers and leader, Raft term, brokers, partitions")
    s.add_argument("--json", action="store_true")
    add_bootstrap(s)
    s.set_defaults(func=_status)


def _status(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        st = admin.describe_cluster()
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    q = st["quorum"]
    print(
        f"Metadata quorum (as seen by node {st['node_id']}): leader node "
        f"{st['controller_id'] if st['controller_id'] >= 0 else 'NONE'}, term {q['term']}, "
        f"commit index {q['commit_index']}, applied {q['last_applied']}"
    )
    for node, addr in st["voters"]:
        role = "leader" if node == st["controller_id"] else "follower"
        print(f"  controller {node}  {addr}  {role}")
    print("Brokers:")
    for node, host, port, rack, epoch, fenced in st["brokers"]:
        print(
            f"  broker {node}  {host}:{port}  rack={rack or '-'}  epoch={epoch}  "
            f"{'FENCED' if fenced else 'alive'}"
        )
    offline = [p for p in st["partitions"] if p[2] < 0]
    print(f"Partitions: {len(st['partitions'])}, offline: {len(offline)}")
    for topic, part, leader, epoch, replicas, isr in st["partitions"]:
        state = "OFFLINE" if leader < 0 else f"leader {leader}"
        print(f"  {topic}-{part}  {state}  epoch {epoch}  replicas {replicas}  isr {isr}")
    return 0
