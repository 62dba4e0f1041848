"""A real Prometheus (Debian's 2.42) scraping a live three-node cluster and evaluating the
shipped alert rules (docs/prometheus/alerts.yml), asked only over its HTTP API.

Checked, in this order on one cluster and one server: every node is a target and `up`; a
follower killed with -9 makes `sum(raftlog_under_replicated_partitions)` rise above 0 within
30 s and fires RaftlogUnderReplicatedPartitions and RaftlogNodeDown for it, and its restart
brings the sum back to 0 and resolves both; a consumer group that read part of a topic shows
its lag in Prometheus, and RaftlogConsumerGroupLagGrowing fires while a producer keeps writing;
over all of that neither RaftlogNoActiveController nor RaftlogOfflinePartitions ever fired
(Prometheus' own ALERTS series); and when two of the three voters are killed the last one
reports no active controller and that alert fires.

The rules are the shipped file with shorter `for:` and range windows (`_prometheus.
shortened_rules`): operators want a minute of under-replication before a page, a test wants
seconds. The expressions are the shipped ones; the durations' own logic is what
docs/prometheus/alerts_test.yml checks with promtool on synthetic series. Scrapes and rule
evaluations run every second. Every wait is a poll of Prometheus' API with a deadline.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from raftlog.client import Admin, Producer
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._prometheus import (
    RULES,
    PrometheusServer,
    Shortening,
    need_prometheus,
    scrape_config,
    shortened_rules,
)
from tests.integration._support import consume_and_commit, wait_for

# The test's durations (alerts.yml has the operators'): a few scrape intervals each, so one
# missed scrape does not decide, and the whole file runs in about a minute.
SHORTENED = {
    "RaftlogNodeDown": Shortening(for_="2s"),
    "RaftlogUnderReplicatedPartitions": Shortening(for_="2s"),
    # Longer than a Prometheus start's first evaluations, which may see only some targets.
    "RaftlogNoActiveController": Shortening(for_="5s"),
    "RaftlogConsumerGroupLagGrowing": Shortening(for_="5s", window="10s"),
}
# The bound: under-replication visible in Prometheus within 30 s of a kill -9 (the
# session timeout fences the node in 1.5 s, then one scrape and one evaluation).
UNDER_REPLICATED_TIMEOUT_S = 30.0
# A restarted node recovers, registers, catches up and rejoins the ISR: seconds; generous.
RECOVERY_TIMEOUT_S = 60.0
# Alerts fire `for:` after their condition, seen at a 1 s evaluation.
ALERT_TIMEOUT_S = 30.0
POLL_S = 0.25
# The lag alert's floor is 1000 records: the producer writes 1000 a second, so the lag
# passes it in about a second and keeps growing.
PRODUCE_BATCH = 100
PRODUCE_PERIOD_S = 0.1


@dataclass
class Watched:
    cluster: Cluster
    prometheus: PrometheusServer

    def instance(self, node_id: int) -> str:
        """The node's `instance` label: its metrics listener, as the config names it."""
        return str(self.cluster.nodes[node_id].config.metrics_listener)

    def active(self, name: str, state: str = "firing", **labels: str) -> list[dict[str, Any]]:
        return [
            a
            for a in self.prometheus.alerts()
            if a["labels"]["alertname"] == name
            and a["state"] == state
            and all(a["labels"].get(k) == v for k, v in labels.items())
        ]

    def wait_firing(self, name: str, **labels: str) -> dict[str, Any]:
        found = wait_for(
            lambda: self.active(name, **labels),
            ALERT_TIMEOUT_S,
            f"alert {name}{labels} firing",
            interval_s=POLL_S,
        )
        return found[0]

    def wait_resolved(self, name: str, **labels: str) -> None:
        wait_for(
            lambda: (
                not self.active(name, "firing", **labels)
                and not self.active(name, "pending", **labels)
            ),
            RECOVERY_TIMEOUT_S,
            f"alert {name}{labels} resolved",
            interval_s=POLL_S,
        )

    def value(self, expr: str) -> float | None:
        return self.prometheus.scalar(expr)


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Watched]:
    need_prometheus()
    root: Path = tmp_path_factory.mktemp("prometheus")
    with started_cluster(root, 3, default_replication_factor=3) as cluster:
        rules = root / "alerts.yml"
        rules.write_text(shortened_rules(RULES.read_text(), SHORTENED))
        targets = [str(node.config.metrics_listener) for node in cluster.nodes.values()]
        config = root / "prometheus.yml"
        config.write_text(scrape_config(targets, rules))
        server = PrometheusServer(config, root)
        try:
            server.start()
            yield Watched(cluster, server)
        finally:
            server.stop()


def test_every_node_is_a_target_and_up(watched: Watched) -> None:
    nodes = watched.cluster.nodes
    expected = {watched.instance(i) for i in nodes}

    def all_up() -> bool:
        targets = watched.prometheus.targets()
        healthy = {t["labels"]["instance"] for t in targets if t["health"] == "up"}
        return healthy == expected and len(targets) == len(nodes)

    wait_for(all_up, ALERT_TIMEOUT_S, f"targets {sorted(expected)} up", interval_s=POLL_S)
    up = watched.prometheus.query('up{job="raftlog"}')
    assert {labels["instance"]: v for labels, v in up} == dict.fromkeys(expected, 1.0)
    # The scrapes are raftlog's metrics: one active controller, three unfenced brokers.
    assert watched.value("sum(raftlog_active_controller)") == 1
    assert watched.value("sum(raftlog_active_brokers)") == len(nodes)


def test_a_killed_follower_shows_as_under_replicated_and_fires_alerts_until_it_returns(
    watched: Watched,
) -> None:
    cluster = watched.cluster
    topic = "guarded"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, 1, 3)
    leader = cluster.wait_leader(topic)
    controller = cluster.wait_controller(30)
    # A follower of the partition that is not the active controller: the controller's loss
    # would start an election, which is not what this test watches.
    victim = next(i for i in cluster.nodes if i not in (leader, controller))
    under_replicated = "sum(raftlog_under_replicated_partitions)"
    wait_for(
        lambda: watched.value(under_replicated) == 0,
        RECOVERY_TIMEOUT_S,
        "no under-replicated partition in Prometheus before the kill",
        interval_s=POLL_S,
    )
    cluster.kill9(victim)
    wait_for(
        lambda: (watched.value(under_replicated) or 0) > 0,
        UNDER_REPLICATED_TIMEOUT_S,
        f"{under_replicated} > 0 within 30 s of node {victim}'s kill -9",
        interval_s=POLL_S,
    )
    alert = watched.wait_firing("RaftlogUnderReplicatedPartitions")
    assert float(alert["value"]) >= 1
    assert alert["labels"]["severity"] == "warning"
    watched.wait_firing("RaftlogNodeDown", instance=watched.instance(victim))
    assert not watched.active("RaftlogNodeDown", instance=watched.instance(leader))

    cluster.start(victim)
    wait_for(
        lambda: (
            watched.value(under_replicated) == 0
            and watched.value(f'up{{instance="{watched.instance(victim)}"}}') == 1
        ),
        RECOVERY_TIMEOUT_S,
        f"{under_replicated} back to 0 and node {victim} up after its restart",
        interval_s=POLL_S,
    )
    watched.wait_resolved("RaftlogUnderReplicatedPartitions")
    watched.wait_resolved("RaftlogNodeDown")


@contextlib.contextmanager
def producing(bootstrap: str, topic: str) -> Iterator[None]:
    """A thread that writes PRODUCE_BATCH records every PRODUCE_PERIOD_S until the block ends;
    its failure fails the test at the end of the block."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with Producer(bootstrap_servers=bootstrap, acks="all") as p:
                i = 0
                while not stop.is_set():
                    for _ in range(PRODUCE_BATCH):
                        p.send(topic, b"view-%d" % i)
                        i += 1
                    p.flush(10)
                    stop.wait(PRODUCE_PERIOD_S)
        except BaseException as e:  # handed to the test's thread, raised there
            errors.append(e)

    thread = threading.Thread(target=run, name="producing", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive(), "the producer thread did not stop within 30 s"
    if errors:
        raise errors[0]


def test_a_consumer_groups_lag_is_visible_and_growing_lag_fires(watched: Watched) -> None:
    cluster = watched.cluster
    topic, group, first = "pageviews", "reporting", 200
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, 2, 3)
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as p:
        for i in range(first):
            p.send(topic, b"view-%d" % i, partition=i % 2)
        p.flush(30)
    # The group reads what is there, commits, and stops: the part of the topic it consumed.
    consume_and_commit(cluster.bootstrap, topic, group, first)
    lag = f'sum(raftlog_consumer_group_lag{{group="{group}", topic="{topic}"}})'
    wait_for(
        lambda: watched.value(lag) == 0,
        ALERT_TIMEOUT_S,
        f"{group}'s lag 0 in Prometheus after its commit",
        interval_s=POLL_S,
    )
    with producing(cluster.bootstrap, topic):
        wait_for(
            lambda: (watched.value(lag) or 0) > 0,
            ALERT_TIMEOUT_S,
            f"{group}'s lag above 0 in Prometheus while the topic is written",
            interval_s=POLL_S,
        )
        alert = watched.wait_firing("RaftlogConsumerGroupLagGrowing", group=group, topic=topic)
        assert alert["labels"]["severity"] == "warning"
        # The alert's value is the lag's slope (records per second): positive.
        assert float(alert["value"]) > 0
        total = watched.value(f'raftlog:consumer_group_topic_lag:sum{{group="{group}"}}')
        assert total is not None and total > 1000


def fired_during_the_run(watched: Watched, name: str) -> float | None:
    """How many evaluations Prometheus recorded `name` as firing in the last hour (None:
    never); ALERTS is the series Prometheus writes for every pending and firing alert."""
    return watched.value(
        f'sum(count_over_time(ALERTS{{alertname="{name}", alertstate="firing"}}[1h]))'
    )


def test_no_controller_or_offline_partition_alert_fired_meanwhile(watched: Watched) -> None:
    # The check can see a firing alert: the under-replicated one fired in the test before
    # (this module's tests run in order on one cluster and server).
    assert fired_during_the_run(watched, "RaftlogUnderReplicatedPartitions"), (
        "ALERTS holds no firing RaftlogUnderReplicatedPartitions: run the whole module"
    )
    assert fired_during_the_run(watched, "RaftlogNoActiveController") is None
    assert fired_during_the_run(watched, "RaftlogOfflinePartitions") is None
    assert fired_during_the_run(watched, "RaftlogOfflineLogs") is None


def test_losing_the_quorum_fires_the_no_active_controller_alert(watched: Watched) -> None:
    cluster = watched.cluster
    controller = cluster.wait_controller(30)
    # Two of the three voters, the controller among them: the last one has no majority.
    others = [i for i in cluster.nodes if i != controller]
    killed = [controller, others[0]]
    cluster.kill9(*killed)
    alert = watched.wait_firing("RaftlogNoActiveController")
    assert float(alert["value"]) == 0
    assert watched.value("sum(raftlog_active_controller)") == 0
    cluster.start(*killed)
    cluster.wait_brokers_settled(RECOVERY_TIMEOUT_S)
    watched.wait_resolved("RaftlogNoActiveController")
    assert watched.value("sum(raftlog_active_controller)") == 1
