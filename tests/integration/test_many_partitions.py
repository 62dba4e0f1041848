"""A topic of 2,000 partitions on a three-node cluster of real processes.

Creating one used to fence every broker at once: each took on its new partitions in one long
step of its event loop (about 8 fsyncs per partition), stopped heartbeating, and was fenced,
so every partition of every topic was re-led; the first write to every partition fenced them
again (four fsyncs each on the loop). Now: no broker is fenced while the topic is created and
written to, every partition takes an acks=all write, every ISR is full, and a node's kill -9
and restart move its leaderships away and bring it back into every ISR. The figures at
10,000 partitions (and the speed targets) are the scale benchmark's (bench/scale_bench.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin, Producer
from tests.integration._cluster import Cluster, Describe, started_cluster

PARTITIONS = 2000
# `raftlog dev`'s session timeout: a broker silent this long is fenced.
SESSION_TIMEOUT_MS = 3000
CHANGE_S = 120.0
FENCED = re.compile(r"\bfenced broker (\d+)")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, session_timeout_ms=SESSION_TIMEOUT_MS) as c:
        yield c


def fenced_brokers(c: Cluster) -> list[str]:
    """Every 'fenced broker N' line any node logged (as controller)."""
    lines = []
    for node in c.nodes.values():
        for path in node.log_files:
            text = path.read_text(errors="replace") if path.exists() else ""
            lines += [line for line in text.splitlines() if FENCED.search(line)]
    return lines


def big(d: Describe) -> list[dict]:
    return [p for p in d["partitions"] if p["topic"] == "big"]


def all_in_sync(d: Describe) -> bool:
    parts = big(d)
    return len(parts) == PARTITIONS and all(len(p["isr"]) == 3 for p in parts)


def test_a_topic_of_2000_partitions_fences_no_broker_and_every_partition_serves(
    cluster: Cluster,
) -> None:
    with Admin(cluster.bootstrap, request_timeout_ms=120_000) as admin:
        admin.create_topic("big", PARTITIONS, 3, {"min.insync.replicas": "2"})
    with Producer(
        bootstrap_servers=cluster.bootstrap,
        acks="all",
        linger_ms=5,
        delivery_timeout_ms=int(CHANGE_S * 1000),
    ) as producer:
        futures = [producer.send("big", b"first", partition=i) for i in range(PARTITIONS)]
        producer.flush(CHANGE_S)
        offsets = [f.result(0).offset for f in futures]
    assert offsets == [0] * PARTITIONS
    cluster.wait_view(all_in_sync, CHANGE_S, "every ISR of big full")
    assert fenced_brokers(cluster) == []

    # kill -9 of a node: every partition it led is led by another node, none is offline.
    cluster.kill9(3)

    def re_led(d: Describe) -> bool:
        parts = big(d)
        return len(parts) == PARTITIONS and all(p["leader"] in (1, 2) for p in parts)

    cluster.wait_view(re_led, CHANGE_S, "every partition of big led by node 1 or 2", via=1)
    # Its restart brings it back into every ISR.
    cluster.nodes[3].start()
    cluster.wait_view(all_in_sync, CHANGE_S, "node 3 back in every ISR of big")
    # Only the killed node was fenced (its heartbeats stopped), and only once.
    assert [FENCED.search(line)[1] for line in fenced_brokers(cluster)] == ["3"]
