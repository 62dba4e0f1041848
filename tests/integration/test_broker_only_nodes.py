"""A broker-only node (not a metadata quorum voter) joins a running cluster, hosts replicas
and leads partitions, and follows the quorum through a controller failover.

Nodes 1-3 are controller+broker nodes (the voters); node 4's config names them as
`controller_voters` and has only the broker role (what `raftlog dev --nodes 4 --controllers 3`
writes). It is started after the others have formed their quorum.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin, Consumer, Producer
from raftlog.topics import TopicPartition
from tests.integration._cluster import Cluster, Describe
from tests.integration._support import wait_for

TOPIC = "spread"
PARTITIONS = 8
WAIT_S = 45.0
BROKER_ONLY = 4


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, 4, controllers=3)
    try:
        c.start(1, 2, 3)
        yield c
    finally:
        problems = c.shutdown_and_check()
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


def _partitions(d: Describe) -> list[dict[str, object]]:
    return [p for p in d["partitions"] if p["topic"] == TOPIC]


def test_a_broker_only_node_joins_hosts_replicas_and_survives_a_controller_failover(
    cluster: Cluster,
) -> None:
    d = cluster.wait_view(
        lambda d: len(d["brokers"]) == 3 and d["controller_id"] > 0, WAIT_S, "three brokers"
    )
    assert [v["node_id"] for v in d["voters"]] == [1, 2, 3], d["voters"]

    cluster.start(BROKER_ONLY)
    d = cluster.wait_brokers_settled(WAIT_S)
    assert BROKER_ONLY not in [v["node_id"] for v in d["voters"]], d["voters"]
    assert cluster.nodes[BROKER_ONLY].config.roles == ["broker"]

    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    d = cluster.wait_view(
        lambda d: (
            len(_partitions(d)) == PARTITIONS and all(len(p["isr"]) == 3 for p in _partitions(d))
        ),  # type: ignore[arg-type]
        WAIT_S,
        "every partition fully in sync",
    )
    hosted = [p for p in _partitions(d) if BROKER_ONLY in p["replicas"]]  # type: ignore[operator]
    assert hosted and any(p["leader"] == BROKER_ONLY for p in hosted), d

    # Records through the broker-only node's listener, acknowledged by every ISR.
    with Producer(bootstrap_servers=cluster.nodes[BROKER_ONLY].bootstrap, acks="all") as p:
        for i in range(200):
            p.send(TOPIC, b"%d" % i, partition=i % PARTITIONS)
        p.flush(30)

    # The quorum's leader goes; the broker-only node follows the new one and stays a broker.
    controller = int(d["controller_id"])
    cluster.kill9(controller)
    d = cluster.wait_view(
        lambda d: (
            d["controller_id"] not in (-1, controller)
            and all(int(p["leader"]) > 0 for p in _partitions(d))
        ),  # type: ignore[call-overload]
        WAIT_S,
        "a new controller and every partition led",
        via=BROKER_ONLY,
    )
    with Producer(bootstrap_servers=cluster.nodes[BROKER_ONLY].bootstrap, acks="all") as p:
        for i in range(200, 400):
            p.send(TOPIC, b"%d" % i, partition=i % PARTITIONS)
        p.flush(30)

    tps = [TopicPartition(TOPIC, i) for i in range(PARTITIONS)]
    seen: set[bytes] = set()
    with Consumer(
        bootstrap_servers=cluster.nodes[BROKER_ONLY].bootstrap, auto_offset_reset="earliest"
    ) as c:
        c.assign(tps)

        def all_read() -> bool:
            for records in c.poll(200).values():
                seen.update(r.value for r in records)
            return len(seen) == 400

        wait_for(all_read, WAIT_S, "all 400 records read back through node 4")
    assert seen == {b"%d" % i for i in range(400)}
