"""Prometheus metrics on a real three-node cluster: every node's /metrics over HTTP, parsed with
prometheus_client's own parser (the format a Prometheus server reads).

Checked: exactly one active controller; `cluster status --json` names each broker's metrics
address; produce and fetch counters and the topic traffic counters move by what was sent; a
consumer group's lag appears for its partitions and falls to 0 once it has consumed; a
follower killed with -9 makes its leader's under-replicated gauge rise, and its restart brings
it back to 0 (and the leader counts an ISR expansion); other paths get 404 and garbage does not
hurt the node.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftlog.client import Admin, Consumer, Producer
from raftlog.topics import TopicPartition
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._support import consume, consume_and_commit, run_cli, wait_for

Samples = dict[str, list[tuple[dict[str, str], float]]]

SCRAPE_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("metrics")
    with started_cluster(root, 3, default_replication_factor=3) as c:
        yield c


def url(cluster: Cluster, node_id: int, path: str = "/metrics") -> str:
    address = cluster.nodes[node_id].config.metrics_listener
    assert address is not None, "the test cluster's nodes have metrics listeners"
    return f"http://{address}{path}"


def scrape(cluster: Cluster, node_id: int) -> Samples:
    with urllib.request.urlopen(url(cluster, node_id), timeout=SCRAPE_TIMEOUT_S) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=")
        text = resp.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of `name` with these labels (0 if there is none: a counter not yet
    incremented has no series)."""
    found = [v for ls, v in samples.get(name, []) if all(ls.get(k) == x for k, x in labels.items())]
    assert len(found) <= 1, f"{name}{labels}: {len(found)} samples"
    return found[0] if found else 0.0


def test_exactly_one_node_is_the_active_controller(cluster: Cluster) -> None:
    def one() -> list[float] | None:
        values = [value(scrape(cluster, i), "raftlog_active_controller") for i in cluster.nodes]
        return values if sorted(values) == [0, 0, 1] else None

    values = wait_for(one, 30, "exactly one node reporting raftlog_active_controller 1")
    active = 1 + values.index(1)
    samples = scrape(cluster, active)
    assert value(samples, "raftlog_raft_leader") == 1
    assert value(samples, "raftlog_active_brokers") == 3
    assert value(samples, "raftlog_offline_partitions") == 0
    for i in cluster.nodes:
        s = scrape(cluster, i)
        assert value(s, "raftlog_raft_term") >= 1
        assert value(s, "raftlog_raft_commit_index") >= value(s, "raftlog_raft_last_applied") > 0


def test_cluster_status_names_each_brokers_metrics_address(cluster: Cluster) -> None:
    res = run_cli("cluster", "status", "--json", "-b", cluster.bootstrap)
    assert res.returncode == 0, res.stderr
    brokers = {b["node_id"]: b for b in json.loads(res.stdout)["brokers"]}
    for i, node in cluster.nodes.items():
        host, port = str(node.config.metrics_listener).rsplit(":", 1)
        assert brokers[i]["metrics"] == [host, int(port)]
    human = run_cli("cluster", "status", "-b", cluster.bootstrap)
    assert human.returncode == 0, human.stderr
    for node in cluster.nodes.values():
        assert f"metrics http://{node.config.metrics_listener}/metrics" in human.stdout


def test_produce_and_fetch_counters_move_by_what_was_sent(cluster: Cluster) -> None:
    topic, n = "metered", 40
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, 1, 3)
    leader = cluster.wait_leader(topic)
    before = scrape(cluster, leader)
    # One record per request, each waited for: n Produce requests on the leader exactly.
    with Producer(bootstrap_servers=cluster.nodes[leader].bootstrap, acks="all") as p:
        for i in range(n):
            p.send(topic, b"value-%d" % i, key=b"k").result(10)
    after = scrape(cluster, leader)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    produce = {"api": "Produce", "listener": "client"}
    assert delta("raftlog_requests_total", **produce) == n
    assert delta("raftlog_request_errors_total", **produce) == 0
    assert delta("raftlog_request_duration_seconds_count", **produce) == n
    assert delta("raftlog_request_duration_seconds_bucket", le="+Inf", **produce) == n
    assert delta("raftlog_request_duration_seconds_sum", **produce) > 0
    assert delta("raftlog_topic_records_in_total", topic=topic) == n
    # A new topic's log holds exactly the batches appended to it.
    size = value(after, "raftlog_log_size_bytes", topic=topic, partition="0")
    assert size > 0
    assert delta("raftlog_topic_bytes_in_total", topic=topic) == size
    assert value(after, "raftlog_log_end_offset", topic=topic, partition="0") == n
    assert value(after, "raftlog_high_watermark", topic=topic, partition="0") == n
    assert value(after, "raftlog_topic_partitions", topic=topic) == 1
    assert value(after, "raftlog_topic_log_size_bytes", topic=topic) == size
    # Followers fetched it over the replication listener.
    assert delta("raftlog_requests_total", api="Fetch", listener="replication") > 0
    assert delta("raftlog_replication_bytes_out_total") >= 2 * size

    # A consumer reads it all once: the bytes it was sent are the log's.
    with Consumer(
        bootstrap_servers=cluster.nodes[leader].bootstrap, auto_offset_reset="earliest"
    ) as c:
        c.assign([TopicPartition(topic, 0)])
        consume(c, n)
    consumed = scrape(cluster, leader)
    assert (
        value(consumed, "raftlog_topic_bytes_out_total", topic=topic)
        - value(after, "raftlog_topic_bytes_out_total", topic=topic)
        == size
    )
    fetches = value(consumed, "raftlog_requests_total", api="Fetch", listener="client")
    assert fetches - value(after, "raftlog_requests_total", api="Fetch", listener="client") >= 1


def test_consumer_group_lag_appears_and_falls_to_zero(cluster: Cluster) -> None:
    topic, group, n = "lagged", "lag-watchers", 30
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, 2, 3)
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as p:
        for i in range(n):
            p.send(topic, b"%d" % i, partition=i % 2)
        p.flush(30)
    leaders = {pt: cluster.wait_leader(topic, pt) for pt in (0, 1)}
    with Admin(cluster.bootstrap) as admin:
        admin.reset_offsets(group, {TopicPartition(topic, 0): 5, TopicPartition(topic, 1): 0})
    expected = {0: n // 2 - 5, 1: n // 2}

    def lags() -> dict[int, float] | None:
        found = {
            pt: value(
                scrape(cluster, leaders[pt]),
                "raftlog_consumer_group_lag",
                group=group,
                topic=topic,
                partition=str(pt),
            )
            for pt in (0, 1)
        }
        return found if found == expected else None

    wait_for(lags, 30, f"group lag {expected} on the partitions' leaders")
    # Reported by the leader only: a sum over the nodes counts each partition once.
    total = sum(
        value(scrape(cluster, i), "raftlog_consumer_group_topic_lag", group=group, topic=topic)
        for i in cluster.nodes
    )
    assert total == sum(expected.values())

    consume_and_commit(cluster.bootstrap, topic, group, sum(expected.values()))
    wait_for(
        lambda: all(
            value(
                scrape(cluster, leaders[pt]),
                "raftlog_consumer_group_lag",
                group=group,
                topic=topic,
                partition=str(pt),
            )
            == 0
            for pt in (0, 1)
        ),
        30,
        "the group's lag to fall to 0",
    )


def test_a_killed_follower_makes_its_leader_under_replicated_until_it_is_back(
    cluster: Cluster,
) -> None:
    topic = "guarded"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, 1, 3)
    leader = cluster.wait_leader(topic)
    follower = next(i for i in cluster.nodes if i != leader)
    wait_for(
        lambda: value(scrape(cluster, leader), "raftlog_under_replicated_partitions") == 0,
        30,
        "no under-replicated partition before the kill",
    )
    expands = value(scrape(cluster, leader), "raftlog_isr_expands_total")
    cluster.kill9(follower)
    wait_for(
        lambda: value(scrape(cluster, leader), "raftlog_under_replicated_partitions") > 0,
        30,
        f"node {leader}'s under-replicated gauge to rise after node {follower}'s kill -9",
    )
    cluster.start(follower)
    wait_for(
        lambda: all(
            value(scrape(cluster, i), "raftlog_under_replicated_partitions") == 0
            for i in cluster.nodes
        ),
        60,
        f"every node's under-replicated gauge back to 0 after node {follower}'s restart",
    )
    if cluster.wait_leader(topic) == leader:  # it still leads: it let the follower back in
        assert value(scrape(cluster, leader), "raftlog_isr_expands_total") > expands


def test_other_paths_are_404_and_garbage_does_not_hurt_the_node(cluster: Cluster) -> None:
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url(cluster, 1, "/"), timeout=SCRAPE_TIMEOUT_S)
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url(cluster, 1, "/metricsx"), timeout=SCRAPE_TIMEOUT_S)
    assert e.value.code == 404
    request = urllib.request.Request(url(cluster, 1), data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, timeout=SCRAPE_TIMEOUT_S)
    assert e.value.code == 405
    host, port = str(cluster.nodes[1].config.metrics_listener).rsplit(":", 1)
    for garbage in (b"\x00\xff garbage\r\n\r\n", b"GET /metrics\r\n\r\n", b"A" * 20_000):
        with socket.create_connection((host, int(port)), timeout=SCRAPE_TIMEOUT_S) as s:
            s.sendall(garbage)
            answer = s.recv(1024)
            assert answer.startswith(b"HTTP/1.1 4"), answer[:100]
            assert s.recv(1024) in (b"", answer[len(answer) :]), "the connection closes"
    for _ in range(3):  # connect and close without a byte: a port check
        socket.create_connection((host, int(port)), timeout=SCRAPE_TIMEOUT_S).close()
    assert value(scrape(cluster, 1), "raftlog_partitions") >= 1
    with Producer(bootstrap_servers=cluster.nodes[1].bootstrap, acks="all") as p:
        p.send("metered", b"after the garbage").result(10)
