"""ReplicaManager's lifecycle: metadata that arrives while its loops wind down.

A node stops by cancelling its TaskGroup; while that group waits for its tasks, the Raft thread
still hands metadata changes to the event loop. One that makes this broker follow a new leader
used to start a fetcher in the shutting-down group: `RuntimeError: TaskGroup ... is shutting
down` in the node's log and a coroutine never awaited (seen in a Docker rolling restart).
"""

from __future__ import annotations

import asyncio

import pytest

from raftlog.errors import LogOfflineError
from raftlog.metadata.model import PartitionInfo, TopicInfo
from raftlog.records import encode_batch
from raftlog.replication.core import Role
from raftlog.replication.manager import ReplicaManager, ReplicationConfig
from raftlog.storage import LogConfig, PartitionLog
from raftlog.storage.tools import scan_segment, segment_files
from raftlog.topics import TopicPartition


async def _never_connect(node_id: int) -> None:
    raise AssertionError(f"no fetch may run here (asked for broker {node_id})")


async def _no_isr_changes(*args: object) -> None:
    raise AssertionError("no ISR change expected")


def _follower_of(leader: int, epoch: int) -> list[TopicInfo]:
    info = PartitionInfo(0, leader, epoch, (1, 2, 3), (1, 2, 3), epoch)
    return [TopicInfo("t", "id-t", (info,))]


@pytest.mark.asyncio
async def test_a_metadata_change_while_the_loops_wind_down_starts_no_fetcher(tmp_path) -> None:
    manager = ReplicaManager(1, ReplicationConfig(), _no_isr_changes, _never_connect, lambda: 7)
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig())
    try:
        manager.add(TopicPartition("t", 0), plog, {})
        runner = asyncio.create_task(manager.run())
        await asyncio.sleep(0)  # the group exists and the tick loop runs
        assert manager._task_group is not None

        # A task of the group that takes a while to finish: the group is "shutting down"
        # for that long after the cancel, as a node's group is while its broker stops.
        release = asyncio.Event()

        async def slow_to_stop() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                await release.wait()

        manager._task_group.create_task(slow_to_stop())
        await asyncio.sleep(0)
        runner.cancel()
        await asyncio.sleep(0.01)
        assert not runner.done(), "the group must still be waiting for slow_to_stop"

        manager.apply_metadata(_follower_of(2, 1), {2: 1})  # raised RuntimeError before

        assert list(manager._fetchers) == [2]
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(runner, 5)
    finally:
        manager.close()
        plog.close()


def test_a_followers_fetch_is_given_up_after_the_lag_bound_not_the_socket_timeout() -> None:
    """A fetch request a link swallowed is never answered: the follower waits at most the
    long-poll wait plus replica.lag.time.max.ms before it reconnects, so it is back in the ISR
    soon after the link heals (tests/chaos/test_link_faults.py shows it on real nodes)."""
    from raftlog.replication.manager import ReplicationConfig

    short = ReplicationConfig(replica_lag_time_max_ms=3000, replica_fetch_wait_max_ms=500)
    assert short.fetch_response_timeout_ms == 3500
    assert ReplicationConfig().fetch_response_timeout_ms == 30_000  # the socket timeout bounds


@pytest.mark.asyncio
async def test_a_fetch_that_times_out_drops_its_connection_and_reconnects(tmp_path) -> None:
    """A leader that accepts the follower's connection but never answers (a connection stuck
    after a network cut): after fetch_response_timeout_ms the follower closes it and fetches
    on a new one. It used to send every later fetch on the same dead connection."""
    from raftlog.client.connection import BrokerConnection

    accepted: list[asyncio.StreamWriter] = []

    async def silent_leader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        while await reader.read(65536):
            pass  # reads every fetch, answers none

    server = await asyncio.start_server(silent_leader, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conns: dict[int, BrokerConnection] = {}

    async def connect(node_id: int) -> BrokerConnection:
        """As the broker's _replica_connection: one cached connection per leader, a new one
        only once it is closed."""
        conn = conns.get(node_id)
        if conn is None or conn.closed:
            conn = conns[node_id] = await BrokerConnection.connect("127.0.0.1", port, "f", 5)
        return conn

    cfg = ReplicationConfig(
        replica_lag_time_max_ms=200, replica_fetch_wait_max_ms=100, replica_fetch_backoff_ms=10
    )
    manager = ReplicaManager(1, cfg, _no_isr_changes, connect, lambda: 7)
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig())
    runner: asyncio.Task[None] | None = None
    try:
        manager.add(TopicPartition("t", 0), plog, {})
        runner = asyncio.create_task(manager.run())
        await asyncio.sleep(0)
        manager.apply_metadata(_follower_of(2, 1), {2: 1})
        async with asyncio.timeout(10):
            while len(accepted) < 3:  # two timeouts, two new connections
                await asyncio.sleep(0.02)
        assert len(accepted) >= 3
    finally:
        if runner is not None:
            runner.cancel()
            with pytest.raises(asyncio.CancelledError):
                await runner
        manager.close()
        plog.close()
        server.close()
        for w in accepted:
            w.close()


def test_an_election_of_a_replica_whose_log_just_went_offline_takes_no_role(tmp_path) -> None:
    """The scrubber finds damage and takes a log offline; before the broker's offline report
    reaches the controller, the controller elects that replica (a chaos run). The replica must
    take no role with the offline log, and the rest of the metadata change must still apply:
    assign_epoch raised LogOfflineError out of apply_metadata before, a traceback in the node's
    log and the other partitions left in their old roles."""
    manager = ReplicaManager(1, ReplicationConfig(), _no_isr_changes, _never_connect, lambda: 7)
    damaged = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=1000))
    healthy = PartitionLog.open(str(tmp_path / "t-1"), LogConfig())
    try:
        for i in range(40):
            damaged.append(encode_batch([(None, b"value-%d" % i)]), leader_epoch=1)
        manager.add(TopicPartition("t", 0), damaged, {})
        manager.add(TopicPartition("t", 1), healthy, {})
        manager.apply_metadata(
            [TopicInfo("t", "id-t", tuple(
                PartitionInfo(p, 2, 1, (1, 2, 3), (1, 2, 3), 1) for p in (0, 1)
            ))],
            {2: 1},
        )  # fmt: skip
        old = segment_files(str(tmp_path / "t-0"))[0][1]
        last = list(scan_segment(old))[-1]
        with open(old, "r+b") as f:  # a bit flipped in the last record of the old segment
            f.seek(last.position + last.size - 1)
            byte = f.read(1)[0]
            f.seek(last.position + last.size - 1)
            f.write(bytes([byte ^ 0x40]))
        with pytest.raises(LogOfflineError):
            damaged.scrub(1 << 20)

        # Leader 2 died: the controller elects node 1 for t-0 (its damage not yet reported)
        # and makes node 3 the leader of t-1.
        manager.apply_metadata(
            [TopicInfo("t", "id-t", (
                PartitionInfo(0, 1, 2, (1, 2, 3), (1, 3), 2),
                PartitionInfo(1, 3, 2, (1, 2, 3), (1, 3), 2),
            ))],
            {1: 1, 3: 1},
        )  # fmt: skip

        t0, t1 = manager.get(TopicPartition("t", 0)), manager.get(TopicPartition("t", 1))
        assert t0 is not None and t1 is not None
        assert t0.core.role is Role.OFFLINE and t0.core.leader_epoch == 2
        assert t1.core.role is Role.FOLLOWER and t1.core.leader_id == 3
        assert list(manager._fetchers) == [3]
    finally:
        manager.close()
        damaged.close()
        healthy.close()
