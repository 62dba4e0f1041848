"""Retention and log start: which segments go, which never do, and what survives a reopen."""

from __future__ import annotations

import os

import pytest

from raftlog.errors import OffsetOutOfRangeError
from raftlog.storage import LogConfig, PartitionLog, tools
from raftlog.storage.checkpoint import OffsetCheckpoint
from raftlog.storage.log import LOG_START_FILE
from raftlog.storage.segment import segment_name

from ._helpers import FakeClock, batch_of

BATCH = batch_of(2, 100)  # 2 records per batch
SIZE = len(BATCH)


def segment_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".log"))


def build(path: str, clock: FakeClock, batches: int, **config: int) -> PartitionLog:
    """A log with two batches per segment, the batch i stamped at time 1000 * i."""
    log = PartitionLog.open(path, LogConfig(segment_bytes=2 * SIZE, **config), clock_ms=clock)
    for i in range(batches):
        log.append(batch_of(2, 100, timestamp=1000 * i), 0)
    return log


def test_retention_bytes_deletes_the_oldest_segments_over_the_limit(tmp_path: str) -> None:
    clock = FakeClock(0)
    with build(str(tmp_path), clock, 9, retention_bytes=4 * SIZE, retention_ms=-1) as log:
        assert log.segment_base_offsets == [0, 4, 8, 12, 16]  # 2+2+2+2+1 batches
        # 9 batches: delete segments while what stays is still >= retention_bytes.
        assert log.enforce_retention() == 2
        assert log.segment_base_offsets == [8, 12, 16]
        assert log.size_bytes == 5 * SIZE
        assert log.log_start_offset == 8
        assert log.enforce_retention() == 0
        with pytest.raises(OffsetOutOfRangeError, match=r"\[8, 18\]"):
            log.read(7, 100)
        assert log.read_records(8, 1)[0].offset == 8
    assert segment_files(str(tmp_path)) == [segment_name(b) + ".log" for b in (8, 12, 16)]
    assert not os.path.exists(os.path.join(str(tmp_path), segment_name(0) + ".index"))
    assert OffsetCheckpoint(os.path.join(str(tmp_path), LOG_START_FILE)).read() == 8
    with PartitionLog.open(str(tmp_path), LogConfig(segment_bytes=2 * SIZE)) as log:
        assert (log.log_start_offset, log.log_end_offset) == (8, 18)
    assert tools.verify(str(tmp_path)) == []


def test_retention_ms_uses_the_newest_timestamp_of_each_segment(tmp_path: str) -> None:
    clock = FakeClock(0)
    with build(str(tmp_path), clock, 7, retention_ms=5000) as log:
        # Segments: batches 0-1 (max ts 1000), 2-3 (3000), 4-5 (5000), 6 (6000, active).
        clock.now_ms = 6000
        assert log.enforce_retention() == 0
        clock.now_ms = 6001  # the first segment is now more than 5000 ms old
        assert log.enforce_retention() == 1
        assert log.log_start_offset == 4
        assert log.enforce_retention(now_ms=8001) == 1  # an explicit time wins over the clock
        assert log.log_start_offset == 8
        assert log.enforce_retention(now_ms=10**9) == 1
        # Everything has expired but the active segment stays, with its data readable.
        assert log.segment_base_offsets == [12]
        assert log.log_start_offset == 12
        assert [r.offset for r in log.read_records(12)] == [12, 13]
        assert log.enforce_retention(now_ms=10**12) == 0


def test_retention_never_deletes_the_active_segment(tmp_path: str) -> None:
    clock = FakeClock(10**9)
    with build(str(tmp_path), clock, 1, retention_ms=0, retention_bytes=0) as log:
        assert log.enforce_retention() == 0
        assert log.segment_base_offsets == [0]
        assert log.log_start_offset == 0
        log.append(BATCH, 0)
        log.append(BATCH, 0)  # rolls: the first segment is now closed
        assert log.enforce_retention() == 1
        assert log.segment_base_offsets == [4]
        assert log.log_start_offset == 4


def test_no_retention_limits_keep_everything(tmp_path: str) -> None:
    clock = FakeClock(10**12)
    with build(str(tmp_path), clock, 9, retention_ms=-1, retention_bytes=-1) as log:
        assert log.enforce_retention() == 0
        assert log.log_start_offset == 0
        assert len(log.segment_base_offsets) == 5


def test_delete_records_before_moves_the_log_start(tmp_path: str) -> None:
    clock = FakeClock(0)
    with build(str(tmp_path), clock, 9, retention_ms=-1) as log:
        assert log.delete_records_before(3) == 3  # inside the first segment: it stays
        assert log.segment_base_offsets == [0, 4, 8, 12, 16]
        assert log.read_records(3, 1)[0].offset == 3
        assert log.delete_records_before(2) == 3  # never moves back
        assert log.delete_records_before(9) == 9
        assert log.segment_base_offsets == [8, 12, 16]
        with pytest.raises(OffsetOutOfRangeError, match="beyond the log end 18"):
            log.delete_records_before(19)
        assert log.delete_records_before(18) == 18  # everything: the active segment stays
        assert log.segment_base_offsets == [16]
        assert log.read(18, 100) == b""
        assert log.offset_for_timestamp(0) is None
    with PartitionLog.open(str(tmp_path), LogConfig(segment_bytes=2 * SIZE)) as log:
        assert (log.log_start_offset, log.log_end_offset) == (18, 18)
        log.append(BATCH, 0)
        assert [r.offset for r in log.read_records(18)] == [18, 19]


def test_a_segment_left_below_the_log_start_goes_at_the_next_retention(tmp_path: str) -> None:
    """delete_records_before cannot delete the active segment; once that segment has rolled,
    retention deletes it even with no time or size limit (it once stayed until a reopen)."""
    clock = FakeClock(0)
    with build(str(tmp_path), clock, 1, retention_ms=-1, retention_bytes=-1) as log:
        assert log.delete_records_before(2) == 2  # offsets 0-1: the whole active segment
        log.append(BATCH + BATCH, 0)  # does not fit: rolls, segment 0 is now closed
        assert log.segment_base_offsets == [0, 2]
        assert log.enforce_retention() == 1
        assert log.segment_base_offsets == [2]
        assert log.log_start_offset == 2
        assert [r.offset for r in log.read_records(2)] == [2, 3, 4, 5]
    assert segment_files(str(tmp_path)) == [segment_name(2) + ".log"]
