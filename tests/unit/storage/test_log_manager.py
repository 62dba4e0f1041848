"""LogManager: one bad partition never stops the others; offline logs come back by themselves.

Real files throughout: damaged segments, a directory removed under an open log, and a full
tmpfs (root only, like test_write_errors.py). The manager's clock is injected, so backoff is
checked without sleeping.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct

import pytest

from raftlog.broker.logs import (
    ERROR_LOG_INTERVAL_S,
    OPEN_RETRY_BACKOFF_MS_MAX,
    OPEN_RETRY_BACKOFF_MS_MIN,
    LogManager,
)
from raftlog.errors import LogCorruptedError, LogOfflineError, StorageError
from raftlog.metadata.model import PartitionInfo, TopicInfo
from raftlog.storage.log import CLEAN_SHUTDOWN_FILE
from raftlog.topics import TopicPartition

from ._helpers import batch_of, fill_until_enospc
from .test_corruption_offline import batches_of, overwrite, seg_path, snapshot

SMALL = {"segment.bytes": "4096", "index.interval.bytes": "1024", "retention.ms": "-1"}
NODE = 1


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def topic(
    partitions: int = 3, config: dict[str, str] | None = None, tid: str = "id-t"
) -> TopicInfo:
    return TopicInfo(
        "t",
        tid,
        tuple(PartitionInfo(i, NODE, 0, (NODE,), (NODE,)) for i in range(partitions)),
        dict(SMALL if config is None else config),
    )


def tp(p: int) -> TopicPartition:
    return TopicPartition("t", p)


def filled(
    data_dir: str, clock: Clock, batches: int = 20, config: dict[str, str] | None = None
) -> LogManager:
    logs = LogManager(data_dir, clock=clock)
    logs.reconcile([topic(config=config)], NODE)
    for p in range(3):
        for _ in range(batches):
            logs.get(tp(p)).append(batch_of(10, value_bytes=40), 0)
    return logs


def damage_middle_segment(data_dir: str, p: int) -> tuple[str, int]:
    """Overwrite the length of the last batch of partition p's second segment."""
    path = os.path.join(data_dir, "logs", f"t-{p}")
    bases = sorted(int(n[:-4]) for n in os.listdir(path) if n.endswith(".log"))
    victim = seg_path(path, bases[1])
    pos = batches_of(victim)[-1][0]
    overwrite(victim, pos + 8, struct.pack("<i", 0x7FFFFFF0))
    return victim, pos


def test_a_corrupt_partition_stays_offline_and_the_others_open(tmp_path: str) -> None:
    data_dir, clock = str(tmp_path), Clock()
    filled(data_dir, clock).close()
    victim, pos = damage_middle_segment(data_dir, 1)
    before = snapshot(os.path.dirname(victim))
    changes = []
    logs = LogManager(data_dir, clock=clock)
    logs.on_offline_change = lambda: changes.append(logs.offline_report())
    logs.reconcile([topic()], NODE)
    assert sorted(logs.partitions()) == [tp(0), tp(2)]
    error = logs.offline_error(tp(1))
    assert isinstance(error, LogCorruptedError)
    assert (error.log_path, error.position) == (victim, pos)
    with pytest.raises(LogOfflineError, match=f"byte {pos}"):
        logs.get(tp(1))
    assert len(changes) == 1 and [e[:2] for e in changes[0]] == [["t", 1]]
    assert victim in changes[0][0][2]
    assert snapshot(os.path.dirname(victim)) == before, "the damaged partition was touched"
    logs.close()


def test_an_offline_partition_is_retried_with_backoff_and_a_repair_brings_it_back(
    tmp_path: str,
) -> None:
    """The repair an operator does today: move the damaged directory away. The broker notices
    at its next retry and starts the partition empty (with replication, a follower refetches)."""
    data_dir, clock = str(tmp_path), Clock()
    filled(data_dir, clock).close()
    victim, _ = damage_middle_segment(data_dir, 1)
    logs = LogManager(data_dir, clock=clock)
    changes: list[object] = []
    logs.on_offline_change = lambda: changes.append(None)
    logs.reconcile([topic()], NODE)
    first = logs.offline()[tp(1)]
    assert first.attempts == 1
    assert first.retry_at_s == clock.now_s + OPEN_RETRY_BACKOFF_MS_MIN / 1000
    assert logs.retry_offline() == 0 and logs.offline()[tp(1)].attempts == 1  # not due yet
    waits = []
    for _ in range(10):
        clock.now_s = logs.offline()[tp(1)].retry_at_s
        before = clock.now_s
        assert logs.retry_offline() == 0
        waits.append(logs.offline()[tp(1)].retry_at_s - before)
    assert waits[0] == 2 * OPEN_RETRY_BACKOFF_MS_MIN / 1000
    assert max(waits) == OPEN_RETRY_BACKOFF_MS_MAX / 1000  # bounded
    assert len(changes) == 1  # same reason each time: reported once
    shutil.move(os.path.dirname(victim), str(tmp_path / "t-1.damaged"))
    clock.now_s = logs.offline()[tp(1)].retry_at_s
    assert logs.retry_offline() == 1
    assert logs.offline() == {} and logs.offline_report() == []
    assert logs.get(tp(1)).log_end_offset == 0
    assert len(changes) == 2
    logs.close()


def test_a_log_that_goes_offline_while_serving_is_moved_out_and_reopened(tmp_path: str) -> None:
    """Damage found by a read takes the log offline; the reopen checks that segment batch by
    batch and keeps it offline, instead of serving it until the next read trips again."""
    data_dir, clock = str(tmp_path), Clock()
    logs = filled(data_dir, clock)
    path = os.path.join(data_dir, "logs", "t-1")
    bases = logs.get(tp(1)).segment_base_offsets
    victim = seg_path(path, bases[1])
    pos, offset, _ = batches_of(victim)[0]
    overwrite(victim, pos + 8, struct.pack("<i", 0x7FFFFFF0))
    with pytest.raises(LogCorruptedError):
        logs.get(tp(1)).read(offset, 1)
    assert logs.check_offline() == 1
    assert tp(1) not in logs.partitions()
    assert logs.offline()[tp(1)].check_segments == (bases[1],)
    clock.now_s += OPEN_RETRY_BACKOFF_MS_MAX
    assert logs.retry_offline() == 0
    error = logs.offline_error(tp(1))
    assert isinstance(error, LogCorruptedError) and error.position == pos
    logs.close()


def test_housekeeping_goes_on_past_an_offline_log(
    tmp_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One offline log used to end retention (it raised LogOfflineError, and only OSError was
    caught) for every partition after it."""
    data_dir, clock = str(tmp_path), Clock()
    logs = filled(data_dir, clock, config={**SMALL, "retention.bytes": "8192"})
    plog = logs.get(tp(0))
    victim = seg_path(plog.path, plog.segment_base_offsets[1])
    pos, offset, _ = batches_of(victim)[0]
    overwrite(victim, pos + 8, struct.pack("<i", 0x7FFFFFF0))
    with pytest.raises(LogCorruptedError):
        plog.read(offset, 1)
    with caplog.at_level(logging.ERROR, logger="raftlog.broker.logs"):
        deleted = [logs.enforce_retention() for _ in range(3)]
        logs.maybe_flush()
    assert deleted[0] > 0 and deleted[1:] == [0, 0]
    assert [logs.get(tp(p)).segment_base_offsets[0] > 0 for p in (1, 2)] == [True, True]
    lines = [r.getMessage() for r in caplog.records if "retention on t-0" in r.getMessage()]
    assert len(lines) == 1, "a repeated error is logged once per interval"
    clock.now_s += ERROR_LOG_INTERVAL_S
    with caplog.at_level(logging.ERROR, logger="raftlog.broker.logs"):
        logs.enforce_retention()
    lines = [r.getMessage() for r in caplog.records if "retention on t-0" in r.getMessage()]
    assert len(lines) == 2 and "2 similar lines" in lines[1]
    logs.close()


def test_close_closes_every_log_even_if_one_fails(tmp_path: str) -> None:
    data_dir, clock = str(tmp_path), Clock()
    logs = filled(data_dir, clock)
    shutil.rmtree(os.path.join(data_dir, "logs", "t-0"))  # its close cannot write anything
    logs.close()
    for p in (1, 2):
        assert os.path.exists(os.path.join(data_dir, "logs", f"t-{p}", CLEAN_SHUTDOWN_FILE))


def test_unknown_keys_in_an_existing_topic_do_not_stop_its_log_from_opening(
    tmp_path: str,
) -> None:
    """A topic created before unknown configs were refused keeps working."""
    logs = LogManager(str(tmp_path), clock=Clock())
    logs.reconcile([topic(1, {"foo": "bar", "segment.bytes": "4096"})], NODE)
    assert logs.get(tp(0)).config.segment_bytes == 4096
    logs.close()


def test_broker_log_defaults_are_checked_like_topic_configs(tmp_path: str) -> None:
    from raftlog.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError, match=r"unknown topic config 'retention\.msx'"):
        LogManager(str(tmp_path), {"retention.msx": "5"})
    with pytest.raises(InvalidConfigError, match=r"^retention\.ms=-5"):
        LogManager(str(tmp_path), {"retention.ms": "-5"})


def test_a_partition_created_while_the_disk_is_full_opens_when_space_returns(
    small_fs: str,
) -> None:
    """It used to stay "opening" forever: the failed open was never retried."""
    clock = Clock()
    logs = LogManager(small_fs, clock=clock)
    ballast = os.path.join(small_fs, "ballast")
    fill_until_enospc(ballast)
    logs.reconcile([topic(1)], NODE)
    error = logs.offline_error(tp(0))
    assert error is not None, "the open should have failed on a full disk"
    assert "t-0" in str(error) and "ENOSPC" in str(error), error
    clock.now_s += OPEN_RETRY_BACKOFF_MS_MAX
    assert logs.retry_offline() == 0  # still full
    os.unlink(ballast)
    clock.now_s += OPEN_RETRY_BACKOFF_MS_MAX
    assert logs.retry_offline() == 1
    assert logs.get(tp(0)).append(batch_of(1), 0).base_offset == 0
    logs.close()


def test_a_log_whose_disk_fills_goes_offline_and_reopens_once_there_is_room(
    small_fs: str,
) -> None:
    """The append the full disk refuses takes the log offline and says so at once (the broker
    then reports it, which moves the leadership). While the disk stays full no reopen is tried
    and none counted, however long it lasts, so the backoff does not grow: the first round
    after space returns brings the log back, holding everything appended before."""
    clock = Clock()
    logs = LogManager(small_fs, clock=clock)
    went: list[None] = []
    logs.on_went_offline = lambda: went.append(None)
    ballast = os.path.join(small_fs, "ballast")
    with open(ballast, "wb") as f:
        f.write(b"\0" * (64 * 1024))
    logs.reconcile([topic(1, {})], NODE)
    plog = logs.get(tp(0))
    appended = 0
    with pytest.raises(LogOfflineError, match="ENOSPC: No space left on device"):
        for _ in range(1000):
            appended = plog.append(batch_of(20, value_bytes=500), 0).last_offset + 1
    assert appended > 0 and went == [None]
    assert logs.check_offline() == 1 and logs.hosted(tp(0)) is None
    off = logs.offline()[tp(0)]
    assert off.disk_full and off.attempts == 1
    assert [e[:2] for e in logs.offline_report()] == [["t", 0]]
    for _ in range(10):
        clock.now_s += OPEN_RETRY_BACKOFF_MS_MAX / 1000
        assert logs.retry_offline() == 0
    assert logs.offline()[tp(0)].attempts == 1, "a reopen was tried on a full disk"
    os.unlink(ballast)
    clock.now_s += OPEN_RETRY_BACKOFF_MS_MIN / 1000
    assert logs.retry_offline() == 1
    assert logs.offline_report() == []
    assert logs.get(tp(0)).log_end_offset == appended
    logs.close()


def test_a_full_disk_refuses_appends_naming_the_partition_and_enospc(small_fs: str) -> None:
    logs = LogManager(small_fs, clock=Clock())
    logs.reconcile([topic(1, {})], NODE)
    plog = logs.get(tp(0))
    with pytest.raises(StorageError) as e:
        for _ in range(1000):
            plog.append(batch_of(20, value_bytes=500), 0)
    assert "t-0" in str(e.value) and "ENOSPC: No space left on device" in str(e.value)
    logs.close()
