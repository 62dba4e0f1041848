"""Network faults on real nodes: three `raftlog node` processes, each in its own network
namespace, listening on its namespace address (the voters list names those addresses). Cutting
one node off with iptables must cut Raft, broker heartbeats and its client and replication
listeners alike: the majority elects a controller without it and fences its broker; healing
brings it back unfenced."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos import netns
from chaos.faults import FaultSpec, inject
from chaos.local_cluster import NETNS_REPLICATION_PORT, LocalCluster, wait_until
from chaos.netns import NetnsNetwork
from raftlog.client import Admin, Producer
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.messages.metadata import MetadataRequest, MetadataResponse
from tests.kafka._raw import KafkaRawClient
from tests.kafka.test_listener import batch, produce

pytestmark = pytest.mark.skipif(
    netns.available() is not None, reason=f"network namespaces: {netns.available()}"
)

NODES = [1, 2, 3]
SESSION_TIMEOUT_MS = 1500
# Election (0.4-2 s) + fencing after the session timeout + one controller pass, with room for a
# loaded 2-core machine.
CONVERGE_TIMEOUT_S = 45.0
# A send to a cut-off leader: 2 s request timeout, fencing after 1.5 s, a new leader, a
# metadata refresh from another node; the rest is room for a loaded machine.
ISOLATED_SEND_TIMEOUT_S = 30.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, NetnsNetwork]]:
    with NetnsNetwork(NODES) as net:
        c = LocalCluster(tmp_path, len(NODES), network=net, session_timeout_ms=SESSION_TIMEOUT_MS)
        try:
            yield c, net
        finally:
            problems = c.close()
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


def brokers(view: dict[str, Any]) -> dict[int, bool]:
    """node id -> fenced, as a describe_cluster / cluster status view lists them."""
    return {b["node_id"]: bool(b["fenced"]) for b in view["brokers"]}


def can_connect(net: NetnsNetwork, src: int, dst_address: str, port: int) -> bool:
    """Whether a TCP connection from node `src`'s namespace to the address opens within 1 s."""
    code = (
        "import socket,sys\n"
        "try:\n"
        f"    socket.create_connection(({dst_address!r}, {port}), timeout=1).close()\n"
        "except OSError:\n"
        "    sys.exit(1)\n"
    )
    proc = subprocess.run([*net.exec_prefix(src), sys.executable, "-c", code], timeout=30)
    return proc.returncode == 0


def test_isolated_controller_is_fenced_then_returns(
    cluster: tuple[LocalCluster, NetnsNetwork],
) -> None:
    c, net = cluster
    c.start()
    assert all(n.client_address.startswith(net.address(n.node_id) + ":") for n in c.nodes.values())

    def settled(view: dict[str, Any]) -> bool:
        return view["quorum"]["this_node_leads"] and brokers(view) == dict.fromkeys(NODES, False)

    view = c.wait_view(1, lambda v: v["controller_id"] > 0, CONVERGE_TIMEOUT_S, "a controller")
    victim = view["controller_id"]
    c.wait_view(victim, settled, CONVERGE_TIMEOUT_S, "3 registered, unfenced brokers")
    live = next(n for n in NODES if n != victim)
    victim_host, _, victim_port = c.nodes[victim].client_address.rpartition(":")
    assert can_connect(net, live, victim_host, int(victim_port))
    # Followers fetch from the victim at its replication listener: the rules must cut it too.
    replication = {b["node_id"]: b["replication"] for b in c.status_from(live)["brokers"]}
    assert replication[victim] == [victim_host, NETNS_REPLICATION_PORT], replication
    assert can_connect(net, live, victim_host, NETNS_REPLICATION_PORT)

    with inject(FaultSpec("isolate", (victim,)), network=net):
        assert net.rules(victim) == [
            f"-A INPUT -s {net.address(n)}/32 -j DROP" for n in NODES if n != victim
        ]
        assert not can_connect(net, live, victim_host, int(victim_port))
        assert not can_connect(net, live, victim_host, NETNS_REPLICATION_PORT)

        def fenced_by_majority(v: dict[str, Any]) -> bool:
            return v["controller_id"] not in (-1, victim) and brokers(v)[victim]

        c.wait_view(live, fenced_by_majority, CONVERGE_TIMEOUT_S, f"node {victim} fenced")
        # The same, as an operator sees it from a live node.
        status = c.status_from(live)
        assert status["controller_id"] not in (-1, victim) and brokers(status)[victim], status

    assert net.rules(victim) == [] and all(net.rules(n) == [] for n in NODES)
    assert can_connect(net, live, victim_host, int(victim_port))
    assert can_connect(net, live, victim_host, NETNS_REPLICATION_PORT)

    def returned(v: dict[str, Any]) -> bool:
        return v["controller_id"] > 0 and brokers(v) == dict.fromkeys(NODES, False)

    back = c.wait_view(live, returned, CONVERGE_TIMEOUT_S, f"node {victim} unfenced again")
    # The healed node follows the same controller again.
    c.wait_view(
        victim,
        lambda v: v["controller_id"] == back["controller_id"],
        CONVERGE_TIMEOUT_S,
        f"node {victim} agreeing on controller {back['controller_id']}",
    )
    status = c.status_from(live)
    assert brokers(status) == dict.fromkeys(NODES, False), status


def test_a_producer_leaves_a_leader_cut_off_from_the_cluster(
    cluster: tuple[LocalCluster, NetnsNetwork],
) -> None:
    """A partition leader cut off from its followers and the controller, but still reachable
    by clients (the default of the isolate fault), answers metadata at once with its own stale
    view ("I lead") while its acks=all produce requests hang. A producer whose metadata came
    from it must go elsewhere after a request timeout, not ask it again until the cut heals:
    the chaos matrix saw 20-25 s without an acknowledged write in such windows."""
    c, net = cluster
    c.start()
    c.wait_view(1, lambda v: v["controller_id"] > 0, CONVERGE_TIMEOUT_S, "a controller")
    with Admin(c.bootstrap) as admin:
        admin.create_topic("zombie", 1, 3, {"min.insync.replicas": "2"})
        leader = wait_until(
            lambda: next(
                (p.leader for p in admin.describe_topics(["zombie"])[0].partitions
                 if p.leader > 0 and len(p.isr) == 3),
                None,
            ),
            CONVERGE_TIMEOUT_S,
            "a leader with 3 in-sync replicas",
        )  # fmt: skip
    # Bootstrapped from the leader alone, so the producer's metadata comes from it.
    with Producer(
        bootstrap_servers=c.nodes[leader].client_address,
        acks="all",
        request_timeout_ms=2000,
        delivery_timeout_ms=120_000,
    ) as producer:
        producer.send("zombie", b"before").result(CONVERGE_TIMEOUT_S)
        with inject(FaultSpec("isolate", (leader,)), network=net):
            started = time.monotonic()
            future = producer.send("zombie", b"during")
            # Fencing the leader (1.5 s) and re-electing take a few seconds; the cut lasts as
            # long as this waits. Before the fix the send stayed on the cut-off leader.
            future.result(ISOLATED_SEND_TIMEOUT_S)
            took = time.monotonic() - started
        with Admin(c.address(next(n for n in NODES if n != leader))) as admin:
            now = admin.describe_topics(["zombie"])[0].partitions[0]
    assert now.leader != leader, (now, took)


def _kafka_leaders(address: str, topic: str) -> list[int]:
    """The leaders of `topic`'s partitions as the broker at `address` names them to Kafka's
    clients (Metadata v8)."""
    with KafkaRawClient(address) as c:
        body = c.request(ApiKey.METADATA, 8, MetadataRequest((topic,)))
    (t,) = MetadataResponse.decode(body, 8).topics
    return [p.leader for p in sorted(t.partitions, key=lambda p: p.partition)]


def test_a_leader_cut_off_from_the_quorum_names_no_leader_to_kafka_clients(
    cluster: tuple[LocalCluster, NetnsNetwork],
) -> None:
    """Kafka's clients ask any broker for metadata. A leader cut off from the others but not
    from clients (the isolate fault's default) answered with its stale view ("I lead") while
    the majority had fenced it and moved its partitions, and librdkafka kept sending it
    produce requests that could not commit (20.6 s without writes in a 10-minute chaos run).
    Past its session timeout without a majority it names no leader; healed, it names them."""
    c, net = cluster
    c.start()
    c.wait_view(1, lambda v: v["controller_id"] > 0, CONVERGE_TIMEOUT_S, "a controller")
    topic = "stale"
    with Admin(c.bootstrap) as admin:
        admin.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
        leader = wait_until(
            lambda: next(
                (p.leader for p in admin.describe_topics([topic])[0].partitions if p.leader > 0),
                None,
            ),
            CONVERGE_TIMEOUT_S,
            "a leader",
        )
    address = c.kafka_address(leader)
    assert wait_until(
        lambda: _kafka_leaders(address, topic) == [leader] or None,
        CONVERGE_TIMEOUT_S,
        f"node {leader} naming itself the leader",
    )
    with inject(FaultSpec("isolate", (leader,)), network=net):
        assert wait_until(
            lambda: _kafka_leaders(address, topic) == [-1] or None,
            CONVERGE_TIMEOUT_S,
            f"node {leader}, cut off, naming no leader",
        )
        # ... and closing the connection once it has answered: librdkafka asks the broker it
        # sent to last for metadata again, so over an open connection it kept asking this one
        # (23.7 s without writes in a 10-minute isolate run).
        with KafkaRawClient(address) as raw:
            body = raw.request(ApiKey.METADATA, 8, MetadataRequest((topic,)))
            (t,) = MetadataResponse.decode(body, 8).topics
            assert [p.leader for p in t.partitions] == [-1]
            assert raw.closed_by_broker(CONVERGE_TIMEOUT_S)
        # ... and refusing writes (NOT_LEADER_OR_FOLLOWER: librdkafka refreshes its metadata
        # on that; on a request timeout it only retries the same broker).
        with KafkaRawClient(address) as raw:
            answer = produce(raw, topic, 0, batch([(None, b"during")]))
        assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, answer
        # ... and says so in its log, once (its housekeeping also fails waiting produces).
        assert wait_until(
            lambda: "cut off from the metadata quorum" in c.nodes[leader].err_paths[-1].read_text(),
            CONVERGE_TIMEOUT_S,
            f"node {leader} logging that it is cut off",
        )
    assert wait_until(
        lambda: min(_kafka_leaders(address, topic)) > 0 or None,
        CONVERGE_TIMEOUT_S,
        f"node {leader}, healed, naming a leader again",
    )
    # ... and keeping the connection open again.
    with KafkaRawClient(address) as raw:
        raw.request(ApiKey.METADATA, 8, MetadataRequest((topic,)))
        assert not raw.closed_by_broker(1.0)
