"""`raftlog cluster status`: the quorum, the brokers and the partitions at a glance.

`--json` prints DescribeCluster's body (docs/PROTOCOL.md), every field named, plus two lists
derived from its partitions: `offline_partitions` (no leader) and `under_replicated_partitions`
(ISR smaller than the replica list), each as [topic, partition]. Each broker's `replication` is
where followers fetch from it ([host, port] of its replication listener; null: its client
listener); its `kafka` and `kafka_external` are [host, port] of its Kafka-protocol listeners
(absent or null: none), and its `metrics` [host, port] of its metrics listener, where
Prometheus scrapes http://host:port/metrics (null: none). The human form marks the same
(OFFLINE, UNDER-REPLICATED) and replicas whose logs their broker reported offline (damaged data,
a full disk), with the broker's reason.

Each compacted partition also shows its leader replica's cleaning (`cleaning` in --json:
dirty_ratio, last_clean_ms, last_clean, or the error saying why they are unknown; null for a
partition that is not compacted), from DescribeReplicas asked of every live broker: state each
broker keeps for its own replica, which the metadata does not hold. Brokers that did not
answer are listed (`replica_states_unanswered`: [[node_id, error], ...]); the rest is shown.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from raftlog.cli.client_cmd import (
    add_bootstrap,
    format_cleaning,
    is_compacted,
    leader_cleaning,
    replica_states,
)
from raftlog.client import Admin
from raftlog.client.admin import ReplicaStates
from raftlog.topics import TopicPartition


def register(sub: Any) -> None:
    c = sub.add_parser("cluster", help="cluster-wide views")
    csub = c.add_subparsers(dest="cluster_command", required=True, metavar="SUBCOMMAND")
    s = csub.add_parser("status", help="controllers and leader, Raft term, brokers, partitions")
    s.add_argument("--json", action="store_true", help="print the status as JSON, fields named")
    add_bootstrap(s)
    s.set_defaults(func=_status)


def _status(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        st = admin.describe_cluster()
        live = {b["node_id"] for b in st["brokers"] if not b["fenced"]}
        add_cleaning(st, replica_states(admin, None, live))
    st["offline_partitions"] = [[p["topic"], p["partition"]] for p in offline(st)]
    st["under_replicated_partitions"] = [[p["topic"], p["partition"]] for p in under_replicated(st)]
    for b in st["brokers"]:
        b.setdefault("metrics", None)  # answered by a node that predates metrics listeners
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    print(format_status(st), end="")
    return 0


def add_cleaning(st: dict[str, Any], states: ReplicaStates) -> None:
    """Give each partition of `st` its leader replica's `cleaning` (null unless some replica
    reports the log compacted), and `st` the brokers that did not answer."""
    compacted = {r.tp for r in states.replicas if is_compacted(r.cleanup_policy)}
    for p in st["partitions"]:
        tp = TopicPartition(p["topic"], p["partition"])
        p["cleaning"] = leader_cleaning(states, tp, p["leader"]) if tp in compacted else None
    st["replica_states_unanswered"] = [[n, why] for n, why in sorted(states.unanswered.items())]


def offline(st: dict[str, Any]) -> list[dict[str, Any]]:
    """Partitions with no leader: nobody can read or write them."""
    return [p for p in st["partitions"] if p["leader"] < 0]


def under_replicated(st: dict[str, Any]) -> list[dict[str, Any]]:
    """Led partitions whose ISR lacks some replica: one more loss is closer to data loss."""
    return [p for p in st["partitions"] if p["leader"] >= 0 and len(p["isr"]) < len(p["replicas"])]


def format_status(st: dict[str, Any], now_ms: int | None = None) -> str:
    """The human form of a describe_cluster() result (with `add_cleaning`'s fields, if
    added)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    lines = []
    q = st["quorum"]
    controller = st["controller_id"]
    lines.append(
        f"Metadata quorum (as seen by node {st['node_id']}): leader node "
        f"{controller if controller >= 0 else 'NONE'}, term {q['term']}, "
        f"commit index {q['commit_index']}, applied {q['last_applied']}"
    )
    for v in st["voters"]:
        role = "leader" if v["node_id"] == controller else "follower"
        lines.append(f"  controller {v['node_id']}  {v['address']}  {role}")
    lines.append("Brokers:")
    for b in st["brokers"]:
        # Where followers fetch from it (brokers without a replication listener: the client's).
        replication = b.get("replication")
        fetched_at = f"{replication[0]}:{replication[1]}" if replication else "client listener"
        # Its Kafka listener(s), for Kafka's clients and tools.
        kafka = "".join(
            f"  {name.replace('_', ' ')} {b[name][0]}:{b[name][1]}"
            for name in ("kafka", "kafka_external")
            if b.get(name)
        )
        if b.get("metrics"):
            kafka += f"  metrics http://{b['metrics'][0]}:{b['metrics'][1]}/metrics"
        lines.append(
            f"  broker {b['node_id']}  {b['host']}:{b['port']}  replication {fetched_at}{kafka}  "
            f"rack={b['rack'] or '-'}  epoch={b['broker_epoch']}  "
            f"{_broker_state(b)}"
        )
    partitions = st["partitions"]
    degraded = [p for p in partitions if p["offline_replicas"]]
    lines.append(
        f"Partitions: {len(partitions)}, offline: {len(offline(st))}, "
        f"under-replicated: {len(under_replicated(st))}, with offline replicas: {len(degraded)}"
    )
    for p in partitions:
        state = "OFFLINE" if p["leader"] < 0 else f"leader {p['leader']}"
        extra = (
            "  UNDER-REPLICATED" if p["leader"] >= 0 and len(p["isr"]) < len(p["replicas"]) else ""
        )
        if p["offline_replicas"]:
            extra += f"  OFFLINE REPLICAS {p['offline_replicas']}"
        if p.get("cleaning") is not None:
            extra += f"  cleaning: {format_cleaning(p['cleaning'], now_ms)}"
        lines.append(
            f"  {p['topic']}-{p['partition']}  {state}  epoch {p['leader_epoch']}  "
            f"replicas {p['replicas']}  isr {p['isr']}{extra}"
        )
    for node, why in st.get("replica_states_unanswered", ()):
        lines.append(f"Broker {node} did not answer for its replicas' state: {why}")
    if st.get("offline_logs"):
        lines.append("Offline replica logs (reported by their brokers):")
        for o in st["offline_logs"]:
            lines.append(f"  {o['topic']}-{o['partition']} on broker {o['node_id']}: {o['reason']}")
    return "\n".join(lines) + "\n"


def _broker_state(b: dict[str, Any]) -> str:
    if b.get("shutting_down"):
        return "SHUT DOWN (stopped cleanly; fenced until it starts again)"
    return "FENCED" if b["fenced"] else "alive"
