"""Leaders come back: a broker that failed and returned gets its preferred leaderships back,
by `raftlog partitions elect-leaders --preferred`, or by the controller's automatic rebalance
(Kafka's auto.leader.rebalance.enable), once it is back in the ISR.

Three real nodes, a 6-partition RF-3 topic: each node is the preferred leader (first replica)
of two partitions. Node 2 is killed with SIGKILL; its partitions are led by the others; it
restarts and catches up.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin, Producer
from raftlog.topics import TopicPartition
from tests.integration._cluster import Cluster, Describe, started_cluster
from tests.integration._support import run_cli

TOPIC = "balanced"
PARTITIONS = 6
WAIT_S = 45.0
VICTIM = 2


def _partitions(d: Describe) -> list[dict[str, object]]:
    return [p for p in d["partitions"] if p["topic"] == TOPIC]


def _preferred_of(d: Describe, node_id: int) -> set[int]:
    return {int(p["partition"]) for p in _partitions(d) if p["replicas"][0] == node_id}  # type: ignore[index]


def _led_by(d: Describe, node_id: int) -> set[int]:
    return {int(p["partition"]) for p in _partitions(d) if p["leader"] == node_id}  # type: ignore[call-overload]


def _fail_and_return(cluster: Cluster) -> set[int]:
    """Topic, records, node VICTIM killed and back in every ISR; returns its preferred ones."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    d = cluster.wait_view(
        lambda d: (
            len(_partitions(d)) == PARTITIONS
            and all(p["leader"] == p["replicas"][0] for p in _partitions(d))
        ),  # type: ignore[index]
        WAIT_S,
        "every partition led by its preferred leader",
    )
    preferred = _preferred_of(d, VICTIM)
    assert preferred, d
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as p:
        for i in range(300):
            p.send(TOPIC, b"%d" % i, partition=i % PARTITIONS)
        p.flush(30)
    cluster.kill9(VICTIM)
    cluster.wait_view(
        lambda d: not _led_by(d, VICTIM) and all(int(p["leader"]) > 0 for p in _partitions(d)),  # type: ignore[call-overload]
        WAIT_S,
        f"node {VICTIM}'s partitions led by the others",
    )
    cluster.nodes[VICTIM].start()
    cluster.wait_view(
        lambda d: all(VICTIM in p["isr"] for p in _partitions(d)),  # type: ignore[operator]
        WAIT_S,
        f"node {VICTIM} back in every ISR",
    )
    return preferred


def elect(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`raftlog partitions elect-leaders --preferred ARGS` against the cluster."""
    return run_cli("partitions", "elect-leaders", "--preferred", *args, "-b", cluster.bootstrap)


@pytest.fixture
def manual(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, 3, auto_leader_rebalance_enable=False) as c:
        yield c


@pytest.fixture
def automatic(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, 3, leader_imbalance_check_interval_ms=1000) as c:
        yield c


def test_elect_leaders_gives_a_returned_broker_its_preferred_leaderships_back(
    manual: Cluster, tmp_path: Path
) -> None:
    preferred = _fail_and_return(manual)
    d = manual.describe(1)
    assert not _led_by(d, VICTIM), "the automatic rebalance is off: nothing moved by itself"

    one = min(preferred)
    plan = tmp_path / "elect.json"
    plan.write_text(json.dumps({"partitions": [{"topic": TOPIC, "partition": one}]}))
    out = elect(manual, "--path-to-json-file", str(plan))
    assert out.returncode == 0, out.stderr
    assert (
        f"Successfully completed leader election (PREFERRED) for partitions {TOPIC}-{one}"
        in out.stdout
    )
    manual.wait_view(
        lambda d: _led_by(d, VICTIM) == {one}, WAIT_S, f"node {VICTIM} leading {TOPIC}-{one}"
    )

    out = elect(manual, "--all-topic-partitions")
    assert out.returncode == 0, out.stderr
    rest = ", ".join(f"{TOPIC}-{p}" for p in sorted(preferred - {one}))
    assert f"for partitions {rest}" in out.stdout, out.stdout
    d = manual.wait_view(
        lambda d: _led_by(d, VICTIM) == preferred,
        WAIT_S,
        f"node {VICTIM} leading {sorted(preferred)}",
    )
    assert all(p["leader"] == p["replicas"][0] for p in _partitions(d)), d  # type: ignore[index]

    out = elect(manual, "--topic", TOPIC, "--partition", str(one))
    assert out.returncode == 0 and "Valid replica already elected" in out.stdout, out
    out = elect(manual, "--topic", TOPIC, "--partition", "99")
    assert out.returncode == 1 and f"unknown partition {TOPIC}-99" in out.stderr, out
    out = elect(manual, "--all-topic-partitions", "--partition", "1")
    assert out.returncode != 0 and "--partition needs --topic" in out.stderr, out

    # Every record acknowledged before the moves is still there, on every leader.
    with Admin(manual.bootstrap) as admin:
        ends = admin.list_offsets({TopicPartition(TOPIC, p): -1 for p in range(PARTITIONS)})
    assert sum(end for end, _ in ends.values()) == 300, ends


def test_the_controller_moves_leaderships_back_by_itself(automatic: Cluster) -> None:
    preferred = _fail_and_return(automatic)
    d = automatic.wait_view(
        lambda d: _led_by(d, VICTIM) == preferred,
        WAIT_S,
        f"node {VICTIM} leading its preferred partitions {sorted(preferred)} again",
    )
    assert all(p["leader"] == p["replicas"][0] for p in _partitions(d)), d  # type: ignore[index]
    log = "".join(path.read_text() for node in automatic.nodes.values() for path in node.err_paths)
    assert "preferred-leader rebalance" in log
