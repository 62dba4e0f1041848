"""Controlled shutdown (Kafka's): a node stopped cleanly hands its leaderships over first.

The cluster's session timeout here is 30 s, so a stopped broker that only went silent would
keep its leaderships (and clients would meet NOT_LEADER from it, then nothing) for 30 s; a
controlled shutdown moves them before the process exits. A rolling restart of librdkafka's
producer's leaders lost 8-17 s of writes per restart before (the chaos suite's Kafka-client
rolling-restart rows).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin
from tests.integration._cluster import Cluster, Describe, started_cluster

TOPIC = "handover"
PARTITIONS = 6
# Far longer than the waits below: a broker fenced for silence would not be, in time.
SESSION_TIMEOUT_MS = 30_000
MOVED_S = 10.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, 3, session_timeout_ms=SESSION_TIMEOUT_MS) as c:
        yield c


def _leaders(d: Describe) -> dict[int, int]:
    return {p["partition"]: p["leader"] for p in d["partitions"] if p["topic"] == TOPIC}


def _broker(d: Describe, node_id: int) -> dict[str, object]:
    (b,) = [b for b in d["brokers"] if b["node_id"] == node_id]
    return b


def test_a_clean_stop_moves_every_leadership_before_the_process_exits(cluster: Cluster) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    d = cluster.wait_view(
        lambda d: len(_leaders(d)) == PARTITIONS and all(p >= 0 for p in _leaders(d).values()),
        30,
        "every partition led",
    )
    led = collections.Counter(_leaders(d).values())
    node_id = led.most_common(1)[0][0]
    assert cluster.nodes[node_id].stop() == 0

    d = cluster.wait_view(
        lambda d: _broker(d, node_id)["fenced"] and node_id not in _leaders(d).values(),
        MOVED_S,
        f"node {node_id}'s leaderships moved after its clean stop",
    )
    assert _broker(d, node_id)["shutting_down"] is True
    assert all(node_id not in p["isr"] for p in d["partitions"] if p["topic"] == TOPIC), d
    assert all(leader >= 0 for leader in _leaders(d).values()), d

    # Heartbeats do not unfence it; a restart (a new registration) does, and it rejoins.
    cluster.nodes[node_id].start()
    cluster.wait_brokers_settled(30)
    d = cluster.wait_view(
        lambda d: all(len(p["isr"]) == 3 for p in d["partitions"] if p["topic"] == TOPIC),
        30,
        f"node {node_id} back in every ISR",
    )
    assert _broker(d, node_id)["shutting_down"] is False
