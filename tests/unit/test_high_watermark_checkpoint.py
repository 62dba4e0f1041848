"""A broker's high watermarks: one checkpoint file for every partition (Kafka's
replication-offset-checkpoint), read back per topic incarnation."""

from __future__ import annotations

import asyncio
import os

import pytest

from raftlog.metadata.model import PartitionInfo, TopicInfo
from raftlog.records import encode_batch
from raftlog.replication.manager import (
    HIGH_WATERMARK_FILE,
    HIGH_WATERMARKS_FILE,
    ReplicaManager,
    ReplicationConfig,
)
from raftlog.storage import LogConfig, PartitionLog
from raftlog.storage.checkpoint import CheckpointError, OffsetCheckpoint, PartitionOffsets
from raftlog.topics import TopicPartition

TP = TopicPartition("t", 0)


async def _never_connect(node_id: int) -> None:
    raise AssertionError(f"no fetch may run here (asked for broker {node_id})")


async def _no_isr_changes(*args: object) -> None:
    raise AssertionError("no ISR change expected")


def _manager(data_dir: str, interval_ms: int = 5000) -> ReplicaManager:
    cfg = ReplicationConfig(high_watermark_checkpoint_interval_ms=interval_ms)
    return ReplicaManager(1, cfg, _no_isr_changes, _never_connect, lambda: 7, data_dir=data_dir)


def _lead_alone(manager: ReplicaManager, topic_id: str) -> None:
    info = PartitionInfo(0, 1, 1, (1,), (1,), 1)
    manager.apply_metadata([TopicInfo("t", topic_id, (info,))], {})


def _append(manager: ReplicaManager, plog: PartitionLog, n: int) -> None:
    p = manager.leader(TP)
    for i in range(n):
        plog.append(encode_batch([(None, b"v%d" % i)]), leader_epoch=1)
        manager.after_leader_append(p)


def test_the_file_round_trips_and_a_malformed_one_names_file_and_line(tmp_path) -> None:
    f = PartitionOffsets(str(tmp_path / HIGH_WATERMARKS_FILE))
    assert f.read() == {}
    f.write([("a", 0, "id-a", 12), ("a.b-c_d", 7, "id-b", 0)])
    assert f.read() == {("a", 0): ("id-a", 12), ("a.b-c_d", 7): ("id-b", 0)}
    text = (tmp_path / HIGH_WATERMARKS_FILE).read_text()
    assert text == "0\n2\na 0 id-a 12\na.b-c_d 7 id-b 0\n"
    (tmp_path / HIGH_WATERMARKS_FILE).write_text("0\n1\na zero id-a 12\n")
    with pytest.raises(CheckpointError, match=r"replication-offset-checkpoint: line 3 .*'a zero"):
        f.read()


def test_close_writes_every_high_watermark_and_a_restart_reads_them_back(tmp_path) -> None:
    data = str(tmp_path)
    plog = PartitionLog.open(os.path.join(data, "logs", "t-0"), LogConfig())
    manager = _manager(data)
    manager.add(TP, plog, {}, "id-a")
    _lead_alone(manager, "id-a")
    _append(manager, plog, 3)
    assert manager.get(TP).high_watermark == 3  # type: ignore[union-attr]
    manager.close()
    plog.close()
    assert PartitionOffsets(os.path.join(data, HIGH_WATERMARKS_FILE)).read() == {
        ("t", 0): ("id-a", 3)
    }
    # No file per partition any more.
    assert not os.path.exists(os.path.join(data, "logs", "t-0", HIGH_WATERMARK_FILE))

    plog = PartitionLog.open(os.path.join(data, "logs", "t-0"), LogConfig())
    again = _manager(data)
    try:
        assert again.add(TP, plog, {}, "id-a").high_watermark == 3
    finally:
        again.close()
        plog.close()


def test_an_entry_of_an_earlier_topic_of_the_same_name_is_not_taken(tmp_path) -> None:
    """The topic was deleted and created again while the broker was down: the old topic's
    high watermark must not mark the new one's records committed."""
    data = str(tmp_path)
    PartitionOffsets(os.path.join(data, HIGH_WATERMARKS_FILE)).write([("t", 0, "id-old", 5)])
    plog = PartitionLog.open(os.path.join(data, "logs", "t-0"), LogConfig())
    for i in range(8):
        plog.append(encode_batch([(None, b"v%d" % i)]), leader_epoch=1)
    manager = _manager(data)
    try:
        assert manager.add(TP, plog, {}, "id-new").high_watermark == 0
    finally:
        manager.close()
        plog.close()


def test_a_partition_checkpointed_by_an_earlier_version_keeps_its_high_watermark(tmp_path) -> None:
    data = str(tmp_path)
    plog = PartitionLog.open(os.path.join(data, "logs", "t-0"), LogConfig())
    for i in range(8):
        plog.append(encode_batch([(None, b"v%d" % i)]), leader_epoch=1)
    OffsetCheckpoint(os.path.join(plog.path, HIGH_WATERMARK_FILE)).write(6)
    manager = _manager(data)
    try:
        assert manager.add(TP, plog, {}, "id-a").high_watermark == 6
    finally:
        manager.close()
        plog.close()


@pytest.mark.asyncio
async def test_the_tick_loop_checkpoints_changed_high_watermarks_off_the_loop(tmp_path) -> None:
    data = str(tmp_path)
    path = os.path.join(data, HIGH_WATERMARKS_FILE)
    plog = PartitionLog.open(os.path.join(data, "logs", "t-0"), LogConfig())
    manager = _manager(data, interval_ms=50)
    manager.add(TP, plog, {}, "id-a")
    _lead_alone(manager, "id-a")
    runner = asyncio.create_task(manager.run())
    try:
        _append(manager, plog, 2)

        async def checkpointed(hw: int) -> None:
            async with asyncio.timeout(10):
                while PartitionOffsets(path).read().get(("t", 0)) != ("id-a", hw):
                    await asyncio.sleep(0.02)

        await checkpointed(2)
        written = os.stat(path).st_mtime_ns
        _append(manager, plog, 3)
        await checkpointed(5)
        assert os.stat(path).st_mtime_ns >= written
        # Nothing changed: the file is left as it is.
        before = os.stat(path).st_ino
        await asyncio.sleep(0.3)
        assert os.stat(path).st_ino == before
    finally:
        runner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await runner
        manager.close()
        plog.close()
