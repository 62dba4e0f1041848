"""The Docker cluster under failures, with an acks=all load from the host throughout.

Each test starts docker/compose.yaml from nothing (`docker/cluster up`), creates a topic with
replication factor 3 and min.insync.replicas=2 through the external listeners, and checks at
the end that every acknowledged record is in the log at the offset its acknowledgement named,
in order per key (tests/docker/_docker.py, check_acknowledged).
"""

from __future__ import annotations

import time

from chaos.docker_cluster import docker_pause
from tests.docker._docker import (
    DockerCluster,
    LoadProducer,
    check_acknowledged,
    docker,
    read_all,
    report,
)
from tests.integration._support import wait_for

# Failover needs the broker session timeout (3 s in compose.yaml) plus an election; a node's
# restart to healthy takes 5-15 s here. These deadlines leave a wide margin on a loaded machine
# and still fail a hang in bounded time.
FAILOVER_TIMEOUT_S = 60.0
REJOIN_TIMEOUT_S = 120.0
# The longest a rolling restart may leave the producer without an acknowledgement: one node's
# graceful stop moves its leaderships at once or, at worst, after the session timeout; 30 s
# means something hung.
ROLLING_GAP_S_MAX = 30.0


def _controller(cluster: DockerCluster) -> int:
    return int(cluster.wait_view(lambda d: True, 30.0, "a controller")["node_id"])


def test_kill_the_leader_under_acks_all_then_restart_it(docker_cluster: DockerCluster) -> None:
    c = docker_cluster
    c.create_topic("orders", 3)
    with LoadProducer(c.bootstrap, "orders") as load:
        load.wait_more_acks(300, 60.0)
        d = c.wait_full_isr("orders", 30.0)
        leader = c.partitions(d, "orders")[0]["leader"]
        others = tuple(n for n in (1, 2, 3) if n != leader)
        killed_at = time.monotonic()
        docker("kill", c.container(leader))

        def moved(d: dict) -> bool:
            p = c.partitions(d, "orders")[0]
            return p["leader"] not in (leader, -1) and leader not in p["isr"]

        c.wait_view(moved, FAILOVER_TIMEOUT_S, f"orders-0 to move off node {leader}", others)
        load.wait_more_acks(300, FAILOVER_TIMEOUT_S)
        failover_gap_s = load.longest_gap_s(since=killed_at - 1)

        docker("start", c.container(leader))
        c.wait_healthy(leader, REJOIN_TIMEOUT_S)
        c.wait_full_isr("orders", REJOIN_TIMEOUT_S)  # the restarted node is back in every ISR
        load.wait_more_acks(200, 60.0)
    assert not load.failed, load.failed[:5]
    counts = check_acknowledged(load, read_all(c.bootstrap, "orders", len(load.acked)))
    report(
        "kill_leader",
        {**counts, "killed_node": leader, "longest_ack_gap_s": round(failover_gap_s, 2)},
    )


def test_rolling_restart_under_acks_all_loses_nothing(docker_cluster: DockerCluster) -> None:
    c = docker_cluster
    c.create_topic("orders", 3)
    with LoadProducer(c.bootstrap, "orders") as load:
        load.wait_more_acks(300, 60.0)
        started = time.monotonic()
        for node in (1, 2, 3):
            docker("restart", "-t", "20", c.container(node), timeout_s=60)
            c.wait_healthy(node, REJOIN_TIMEOUT_S)
            c.wait_full_isr("orders", REJOIN_TIMEOUT_S)
            load.wait_more_acks(100, FAILOVER_TIMEOUT_S)
        rolling_s = time.monotonic() - started
        gap_s = load.longest_gap_s(since=started)
    assert not load.failed, load.failed[:5]
    counts = check_acknowledged(load, read_all(c.bootstrap, "orders", len(load.acked)))
    report(
        "rolling_restart",
        {**counts, "rolling_restart_s": round(rolling_s, 1), "longest_ack_gap_s": round(gap_s, 2)},
    )
    assert gap_s < ROLLING_GAP_S_MAX, f"no acknowledgement for {gap_s:.1f} s"


def test_paused_follower_leaves_the_isr_and_rejoins(docker_cluster: DockerCluster) -> None:
    c = docker_cluster
    c.create_topic("clicks", 1)
    controller = _controller(c)
    d = c.wait_full_isr("clicks", 30.0)
    leader = c.partitions(d, "clicks")[0]["leader"]
    # A follower that is not the Raft leader either: only the data path is under test here.
    follower = next(n for n in (1, 2, 3) if n not in (leader, controller))
    others = tuple(n for n in (1, 2, 3) if n != follower)
    with LoadProducer(c.bootstrap, "clicks", interval_s=0.01) as load:
        load.wait_more_acks(100, 60.0)
        docker_pause(c.container(follower))  # retries runc's "unable to freeze" under load
        try:
            c.wait_view(
                lambda d: follower not in c.partitions(d, "clicks")[0]["isr"],
                FAILOVER_TIMEOUT_S,
                f"paused node {follower} to leave the ISR of clicks-0",
                others,
            )
            load.wait_more_acks(100, FAILOVER_TIMEOUT_S)  # two in-sync replicas: acks go on
        finally:
            docker("unpause", c.container(follower))
        c.wait_full_isr("clicks", REJOIN_TIMEOUT_S)
        load.wait_more_acks(100, 60.0)
    assert not load.failed, load.failed[:5]
    counts = check_acknowledged(load, read_all(c.bootstrap, "clicks", len(load.acked)))
    report("pause_follower", {**counts, "paused_node": follower})


def test_network_cut_fences_the_isolated_node(docker_cluster: DockerCluster) -> None:
    c = docker_cluster
    c.create_topic("events", 3)
    controller = _controller(c)
    isolated = next(n for n in (1, 2, 3) if n != controller)
    others = tuple(n for n in (1, 2, 3) if n != isolated)
    service = f"raftlog-{isolated}"
    with LoadProducer(c.bootstrap, "events", interval_s=0.005) as load:
        load.wait_more_acks(200, 60.0)
        docker("network", "disconnect", c.network, c.container(isolated))
        try:
            c.wait_view(
                lambda d: (
                    any(b["node_id"] == isolated and b["fenced"] for b in d["brokers"])
                    and all(
                        p["leader"] not in (isolated, -1) and isolated not in p["isr"]
                        for p in c.partitions(d, "events").values()
                    )
                ),
                FAILOVER_TIMEOUT_S,
                f"isolated node {isolated} fenced, its leaderships moved",
                others,
            )
            load.wait_more_acks(300, FAILOVER_TIMEOUT_S)  # the others go on
            wait_for(
                lambda: c.health(isolated) == "unhealthy",
                FAILOVER_TIMEOUT_S,
                f"isolated node {isolated}'s health check to fail",
                interval_s=0.5,
            )
        finally:
            docker("network", "connect", "--alias", service, c.network, c.container(isolated))
        c.wait_view(
            lambda d: any(b["node_id"] == isolated and not b["fenced"] for b in d["brokers"]),
            REJOIN_TIMEOUT_S,
            f"node {isolated} unfenced after the cut healed",
            others,
        )
        c.wait_full_isr("events", REJOIN_TIMEOUT_S, others)
        load.wait_more_acks(100, 60.0)
    assert not load.failed, load.failed[:5]
    counts = check_acknowledged(load, read_all(c.bootstrap, "events", len(load.acked)))
    report("network_cut", {**counts, "isolated_node": isolated})
