"""The metadata quorum on real pysyncobj members over loopback TCP (in one process).

Leader election, forwarding from followers and observers, failover, catch-up of a restarted
voter from its journal, and snapshots/journals that survive a full restart.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from raftlog.errors import TopicAlreadyExistsError
from raftlog.metadata.quorum import MetadataQuorum


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_until(cond: Callable[[], bool], timeout_s: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what or cond}")


@pytest.fixture
def voters(tmp_path) -> Iterator[tuple[list[str], Callable[[int], MetadataQuorum], dict]]:  # type: ignore[no-untyped-def]
    addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
    nodes: dict[int, MetadataQuorum] = {}

    def start(i: int) -> MetadataQuorum:
        q = MetadataQuorum(addrs[i], addrs, str(tmp_path / f"node-{i}"))
        q.start()
        nodes[i] = q
        return q

    yield addrs, start, nodes
    for q in nodes.values():
        q.stop()


def leader_of(nodes: dict[int, MetadataQuorum]) -> int:
    leaders = [i for i, q in nodes.items() if q.is_leader]
    return leaders[0] if len(leaders) == 1 else -1


def propose(q: MetadataQuorum, name: str, /, **args: object) -> object:
    return asyncio.run(q.propose(name, timeout_s=10, **args))


def register(q: MetadataQuorum, node_id: int) -> None:
    propose(
        q,
        "register_broker",
        node_id=node_id,
        host="127.0.0.1",
        port=9000 + node_id,
        rack=None,
        incarnation=f"i{node_id}",
        now_ms=0,
    )


def test_elect_replicate_failover_and_catch_up(voters) -> None:  # type: ignore[no-untyped-def]
    _addrs, start, nodes = voters
    for i in range(3):
        start(i)
    wait_until(lambda: leader_of(nodes) >= 0, what="a leader")
    follower = next(i for i in nodes if i != leader_of(nodes))
    register(nodes[follower], 1)  # proposed on a follower: forwarded to the leader
    propose(
        nodes[follower],
        "create_topic",
        name="t",
        topic_id="x",
        partitions=2,
        replication_factor=1,
        config={},
    )
    with pytest.raises(TopicAlreadyExistsError, match="'t'"):
        propose(
            nodes[follower],
            "create_topic",
            name="t",
            topic_id="y",
            partitions=2,
            replication_factor=1,
            config={},
        )
    wait_until(
        lambda: all("t" in q.read(lambda s: s.topics) for q in nodes.values()),
        what="topic on every voter",
    )

    old = leader_of(nodes)
    t0 = time.monotonic()
    nodes.pop(old).stop()
    wait_until(lambda: leader_of(nodes) >= 0, what="a new leader")
    failover_s = time.monotonic() - t0
    new = leader_of(nodes)
    assert new != old
    propose(
        nodes[new],
        "create_topic",
        name="u",
        topic_id="z",
        partitions=1,
        replication_factor=1,
        config={},
    )
    # The old leader restarts from its journal and catches up on what it missed.
    start(old)
    wait_until(lambda: "u" in nodes[old].read(lambda s: s.topics), what="catch-up")
    states = [q.read(lambda s: s.snapshot()) for q in nodes.values()]
    wait_until(lambda: len({q.read(lambda s: s.version) for q in nodes.values()}) == 1)
    states = [q.read(lambda s: s.snapshot()) for q in nodes.values()]
    assert states[0] == states[1] == states[2]
    assert failover_s < 10


def test_full_restart_keeps_state_and_observer_follows(voters, tmp_path) -> None:  # type: ignore[no-untyped-def]
    addrs, start, nodes = voters
    for i in range(3):
        start(i)
    wait_until(lambda: leader_of(nodes) >= 0, what="a leader")
    register(nodes[0], 1)
    for k in range(20):
        propose(
            nodes[k % 3],
            "create_topic",
            name=f"t{k}",
            topic_id=str(k),
            partitions=1,
            replication_factor=1,
            config={},
        )
    observer = MetadataQuorum(None, addrs, str(tmp_path / "observer"))
    observer.start()
    try:
        wait_until(lambda: len(observer.read(lambda s: s.topics)) == 20, what="observer copy")
        propose(
            observer,
            "create_topic",
            name="from-observer",
            topic_id="o",
            partitions=1,
            replication_factor=1,
            config={},
        )
        wait_until(lambda: "from-observer" in nodes[0].read(lambda s: s.topics))
    finally:
        observer.stop()
    before = nodes[0].read(lambda s: s.snapshot())
    for i in list(nodes):
        nodes.pop(i).stop()
    for i in range(3):
        start(i)
    wait_until(lambda: leader_of(nodes) >= 0, what="a leader after restart")
    wait_until(
        lambda: all(q.read(lambda s: s.snapshot()) == before for q in nodes.values()),
        what="the same state on every voter after a full restart",
    )
