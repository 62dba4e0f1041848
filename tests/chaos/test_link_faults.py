"""Link faults on real nodes: three `raftlog node` processes, each behind Toxiproxy proxies that
it advertises (chaos/link_faults.py: one for its client listener, one for its replication
listener), so clients and replica fetchers reach it through a proxy; toxics added through the
Toxiproxy API (ours, or TOXIPROXY_URL's) hurt those links.

- The proxies are in the path: the metadata names them, and a record produced and consumed
  through them arrives.
- A follower whose fetch request a link swallowed (reset_peer: the first data starts a timer and
  is never delivered; the toxic removed before the reset) gets no answer on that connection. It
  must give up on it and rejoin the ISR within about replica.lag.time.max.ms of the link
  healing, not after the 30 s socket timeout (found by the chaos runner: chaos-1 had no ISR
  quorum for 28 s after a 5 s reset_peer fault).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.faults import FaultSpec
from chaos.link_faults import Links, inject_link
from chaos.local_cluster import LocalCluster
from raftlog.client import Admin, Consumer, Producer
from raftlog.topics import TopicPartition
from tests.integration._support import wait_for

NODES = 3
LAG_MS = 3000
TOPIC = "links"
# Election, registration and a topic's first ISR on a loaded 2-core machine.
CONVERGE_TIMEOUT_S = 60.0
# A follower rejoins once a fetch reaches the leader's log end: one fetch wait (0.5 s) after its
# stalled request is given up (lag bound + wait), plus an ISR proposal through the controller;
# room for a loaded machine. The bug took 26 s here.
REJOIN_TIMEOUT_S = 12.0
HOLD_S = 2.0


@pytest.fixture
def linked(tmp_path: Path) -> Iterator[tuple[LocalCluster, Links]]:
    with Links.open(os.environ.get("TOXIPROXY_URL")) as links:
        c = LocalCluster(
            tmp_path,
            NODES,
            settings={"replica_lag_time_max_ms": LAG_MS},
            advertise=links.proxy,
        )
        try:
            c.start()
            with Admin(c.bootstrap) as admin:
                admin.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
            wait_for(lambda: partition(c) and full(partition(c)), CONVERGE_TIMEOUT_S,
                     f"{TOPIC}-0 led with a full ISR")  # fmt: skip
            yield c, links
        finally:
            problems = c.close()
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


def partition(c: LocalCluster) -> dict[str, Any] | None:
    view = c.describe(1)
    return next((p for p in view["partitions"] if p["topic"] == TOPIC), None)


def full(p: dict[str, Any]) -> bool:
    return p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"])


def test_the_nodes_advertise_their_proxies_and_data_flows_through_them(
    linked: tuple[LocalCluster, Links],
) -> None:
    c, links = linked
    # The client listener's proxy, the replication listener's (replica fetchers dial it) and,
    # where the node has one, the Kafka listener's (Kafka's clients dial it).
    advertised = {
        b["node_id"]: [f"{b['host']}:{b['port']}", "{}:{}".format(*b["replication"])]
        + (["{}:{}".format(*b["kafka"])] if b.get("kafka") else [])
        for b in c.describe(1)["brokers"]
    }
    assert all(len(a) == 3 for a in advertised.values()), advertised
    assert advertised == {n: [str(p.listen) for p in links.proxies[n]] for n in c.node_ids()}
    with Producer(bootstrap_servers=c.bootstrap, acks="all") as producer:
        producer.send(TOPIC, b"through the proxy", partition=0).result(30)
    tp = TopicPartition(TOPIC, 0)
    with Consumer(bootstrap_servers=c.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        got = wait_for(lambda: consumer.poll(timeout_ms=500).get(tp), 30, "the record")
    assert [r.value for r in got] == [b"through the proxy"]


def test_a_follower_whose_fetch_was_swallowed_rejoins_the_isr_soon_after_the_link_heals(
    linked: tuple[LocalCluster, Links],
) -> None:
    c, links = linked
    p = partition(c)
    assert p is not None
    leader = p["leader"]
    # Every request to the leader starts a 60 s timer and is never delivered: the followers'
    # next fetches (each long-polls 0.5 s) vanish on their open connections. The fault lasts
    # HOLD_S, as a fault of the chaos schedule does.
    spec = FaultSpec(
        "link",
        (leader,),
        options={"toxic": "reset_peer", "stream": "upstream", "attributes": {"timeout": 60_000}},
    )
    with inject_link(spec, links):
        time.sleep(HOLD_S)
    healed = time.monotonic()
    # A record the followers must fetch: the leader waits for them (acks=all), or drops them
    # from the ISR after the lag bound; either way the ISR is whole once they fetch again.
    with Producer(bootstrap_servers=c.bootstrap, acks="all", request_timeout_ms=60_000) as pr:
        pr.send(TOPIC, b"after the heal", partition=0).exception(90)
    wait_for(lambda: (q := partition(c)) and full(q) and q, 90.0, f"{TOPIC}-0's ISR whole")
    took = time.monotonic() - healed
    assert took < REJOIN_TIMEOUT_S, f"the ISR was whole again {took:.1f} s after the heal"
