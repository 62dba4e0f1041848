"""What the partition log offers replication: epochs assigned at become-leader, truncation at and
below the log end, a full restart at the leader's log start, fsyncs off the event loop, and
retention bounded by the high watermark."""

from __future__ import annotations

import os
from pathlib import Path

from raftlog.storage import LogConfig, PartitionLog
from tests.unit.storage._helpers import FakeClock, batch_of, stamped


def test_assign_epoch_at_become_leader_says_where_the_previous_epoch_ends(tmp_path: Path) -> None:
    with PartitionLog.open(str(tmp_path / "p")) as log:
        log.append(batch_of(3), 1)
        log.assign_epoch(4)
        assert log.end_offset_for_epoch(1) == (1, 3)
        assert log.latest_epoch == 4
        log.assign_epoch(2)  # not newer: ignored
        assert log.latest_epoch == 4


def test_truncation_at_the_log_end_still_drops_an_unwritten_epoch(tmp_path: Path) -> None:
    """A former leader assigned epoch 4 and never wrote in it; as a follower it must not keep
    reporting epoch 4, or every fetch would look divergent."""
    with PartitionLog.open(str(tmp_path / "p")) as log:
        log.append(batch_of(3), 1)
        log.assign_epoch(4)
        assert log.truncate_to(3) == 3
        assert log.latest_epoch == 1


def test_truncation_of_an_emptied_log_at_its_end_drops_the_epoch_covering_its_start(
    tmp_path: Path,
) -> None:
    """An emptied log keeps the epoch covering its start at its end; a truncation there drops
    it by the same rule (found by the log model test), and a reopen keeps it dropped."""
    path = str(tmp_path / "p")
    with PartitionLog.open(path) as log:
        log.append(batch_of(6), 1)
        log.delete_records_before(6)
        assert log.epoch_cache.entries() == [(1, 6)]
        assert log.truncate_to(6) == 6
        assert (log.epoch_cache.entries(), log.latest_epoch) == ([], -1)
    with PartitionLog.open(path) as log:
        assert (log.log_start_offset, log.log_end_offset, log.latest_epoch) == (6, 6, -1)


def test_truncate_fully_restarts_at_the_leaders_log_start(tmp_path: Path) -> None:
    path = str(tmp_path / "p")
    with PartitionLog.open(path) as log:
        log.append(batch_of(5), 1)
        log.truncate_fully(100)
        assert (log.log_start_offset, log.log_end_offset) == (100, 100)
        assert log.latest_epoch == -1
        log.append_as_follower(stamped(batch_of(2), 100, 3))
        assert log.log_end_offset == 102
    with PartitionLog.open(path) as log:
        assert (log.log_start_offset, log.log_end_offset, log.latest_epoch) == (100, 102, 3)


def test_fsync_off_the_event_loop_advances_the_recovery_point(tmp_path: Path) -> None:
    with PartitionLog.open(str(tmp_path / "p")) as log:
        log.append(batch_of(4), 1)
        fds, offset, token = log.flush_begin()
        log.append(batch_of(2), 1)  # written during the fsync: not covered by it
        for fd in fds:
            os.fdatasync(fd)
            os.close(fd)
        assert log.flush_end(offset, token) == 4
        fds, offset, token = log.flush_begin()
        assert fds  # the second append marked its segment unflushed again
        for fd in fds:
            os.close(fd)
        assert log.flush_end(offset, token) == 6


def test_an_fsync_begun_before_a_truncation_vouches_for_nothing_after_it(tmp_path: Path) -> None:
    with PartitionLog.open(str(tmp_path / "p")) as log:
        log.append(batch_of(1), 1)
        log.flush()
        log.append(batch_of(1), 1)
        log.append(batch_of(1), 1)
        fds, offset, token = log.flush_begin()
        log.truncate_to(2)
        log.append_as_follower(stamped(batch_of(1), 2, 2))  # new bytes at offset 2
        for fd in fds:
            os.close(fd)
        assert log.flush_end(offset, token) == 1  # only what the first flush() covered


def test_retention_never_deletes_past_the_high_watermark(tmp_path: Path) -> None:
    clock = FakeClock()
    config = LogConfig(segment_bytes=300, retention_ms=10)
    with PartitionLog.open(str(tmp_path / "p"), config, clock_ms=clock) as log:
        for _ in range(6):
            log.append(batch_of(1, value_bytes=200, timestamp=0), 0)
        clock.now_ms += 1_000  # every segment is past retention.ms
        segments = len(log.segment_base_offsets)
        assert segments >= 4
        assert log.enforce_retention(max_offset=2) == 2
        assert log.log_start_offset == 2
        assert log.enforce_retention() == segments - 3
