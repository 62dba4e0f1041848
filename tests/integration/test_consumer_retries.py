"""A group consumer rides out a dead broker and a controller failover inside `poll`.

As Kafka's consumer does, retriable errors (a broker that cannot be reached, a partition with
no leader, a coordinator that moved) are retried with backoff inside `poll` and the group
calls; `poll` returns what it has by its timeout and never throws them at the caller. Only
non-retriable errors surface. Three real node processes; the active controller (which is also
the group coordinator and a partition leader) is killed with SIGKILL.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin, Consumer, Producer
from raftlog.errors import RaftlogError
from raftlog.topics import TopicPartition
from tests.integration._cluster import Cluster, started_cluster

# Long enough that the topic is created before the killed node is fenced, so that one of its
# partitions is placed on the dead node (then offline: one replica, no leader).
SESSION_TIMEOUT_MS = 6000
FAILOVER_MAX_S = 10.0
SETTLE_DEADLINE_S = 30.0
TOPIC = "after-crash"
PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, 3, SESSION_TIMEOUT_MS, SETTLE_DEADLINE_S) as c:
        yield c


def retry_until(what: str, deadline: float, fn):  # type: ignore[no-untyped-def]
    """The test's own set-up steps (not the code under test) retried through the failover."""
    while True:
        try:
            return fn()
        except RaftlogError as e:
            if not e.retriable or time.monotonic() >= deadline:
                raise AssertionError(f"{what}: {e!r}") from e
            time.sleep(0.1)


def leaders(bootstrap: str) -> dict[int, int]:
    with Admin(bootstrap, request_timeout_ms=3000) as admin:
        info = admin.list_topics()[TOPIC]
    return {p.partition: p.leader for p in info.partitions}


def test_a_group_member_polls_through_a_controller_crash(cluster: Cluster) -> None:
    controller = cluster.wait_controller(FAILOVER_MAX_S)
    live = [n for n in cluster.nodes if n != controller]
    bootstrap = ",".join(cluster.nodes[n].bootstrap for n in live)
    cluster.kill9(controller)
    deadline = time.monotonic() + 30
    # At once, before the dead node is fenced: some partitions go to it.
    retry_until(
        "create the topic",
        deadline,
        lambda: Admin(bootstrap, request_timeout_ms=3000).create_topic(TOPIC, PARTITIONS, 1),
    )
    consumer = Consumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        group_id="survivors",
        auto_offset_reset="earliest",
        request_timeout_ms=3000,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        fetch_max_wait_ms=200,
        retry_backoff_ms=50,
    )
    try:
        owner = retry_until("leaders", deadline, lambda: leaders(bootstrap))
        alive = sorted(p for p, node in owner.items() if node in live)
        dead = sorted(p for p, node in owner.items() if node not in live)
        assert alive, owner
        # The topic was made before the dead node was fenced (6 s): it leads a partition.
        assert dead, owner
        expected: set[bytes] = set()
        with Producer(bootstrap_servers=bootstrap, acks=1, delivery_timeout_ms=20_000) as prod:
            for p in alive:
                for i in range(20):
                    expected.add(b"%d-%d" % (p, i))
                    prod.send(TOPIC, b"%d-%d" % (p, i), partition=p)
            prod.flush(20)
        got: set[bytes] = set()
        polls = 0
        while not expected <= got:
            assert time.monotonic() < deadline, (sorted(expected - got), owner)
            # Never raises: a partition led by the dead node, the coordinator that died with
            # it, and the failover are all retried inside poll.
            for records in consumer.poll(300).values():
                got.update(r.value for r in records)
            polls += 1
        assert got == expected

        # The dead node comes back: its partitions (if any) are read too, from offset 0.
        cluster.nodes[controller].start()
        if dead:
            with Producer(bootstrap_servers=cluster.bootstrap, acks=1) as prod:
                for p in dead:
                    retry_until(
                        "produce to the restarted node",
                        time.monotonic() + 30,
                        lambda p=p: prod.send(TOPIC, b"back-%d" % p, partition=p).result(10),
                    )
            want = {b"back-%d" % p for p in dead}
            back: set[bytes] = set()
            deadline = time.monotonic() + 30
            while not want <= back:
                assert time.monotonic() < deadline, sorted(want - back)
                for records in consumer.poll(300).values():
                    back.update(r.value for r in records)
        assert consumer.assignment() == {TopicPartition(TOPIC, p) for p in range(PARTITIONS)}
    finally:
        consumer.close()
