"""Idle logs cost no disk writes: creating, opening and closing thousands of partitions.

A broker hosting 10,000 partitions opens them all at start and closes them all at stop. Each
fsync costs ~0.3 ms here (about 3,500 a second), and the old open/close wrote four
checkpoints and fsynced every segment and index: about 8 fsyncs per partition, a minute of
disk work per broker for logs in which nothing had changed. These tests pin the rule: a log
writes (and fsyncs) only what differs from what its files already say, and what a power
failure could not lose anyway (an empty log) is never fsynced.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator

import pytest

from raftlog.storage import LogConfig, PartitionLog
from raftlog.storage.checkpoint import OffsetCheckpoint
from raftlog.storage.epoch_cache import LeaderEpochCache
from raftlog.storage.log import CLEAN_SHUTDOWN_FILE

from ._helpers import FakeClock, batch_of

CONFIG = LogConfig(segment_bytes=16 * 1024, recovery_point_checkpoint_ms=0)


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every fsync and fdatasync the code under test makes (they still run)."""
    calls: list[str] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fsync(fd: int) -> None:
        calls.append(f"fsync {os.readlink(f'/proc/self/fd/{fd}')}")
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        calls.append(f"fdatasync {os.readlink(f'/proc/self/fd/{fd}')}")
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    yield calls


def files(path: str) -> dict[str, tuple[str, int]]:
    """Each file's content hash and inode: a rewrite (even of the same bytes) changes one."""
    out = {}
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        with open(full, "rb") as f:
            out[name] = (hashlib.sha256(f.read()).hexdigest(), os.stat(full).st_ino)
    return out


def test_a_new_log_is_created_opened_and_closed_without_an_fsync(
    tmp_path: str, syncs: list[str]
) -> None:
    path = str(tmp_path / "t-0")
    PartitionLog.open(path, CONFIG, clock_ms=FakeClock()).close()
    log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    assert log.log_end_offset == 0
    log.close()
    assert syncs == []


def test_a_cleanly_closed_log_reopens_and_closes_without_writing(
    tmp_path: str, syncs: list[str]
) -> None:
    path = str(tmp_path / "t-0")
    log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    for _ in range(30):  # several segments
        log.append(batch_of(20, value_bytes=40), 0)
    end = log.log_end_offset
    log.close()
    before = files(path)
    syncs.clear()
    for _ in range(3):
        log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
        assert log.log_end_offset == end
        log.close()
    assert syncs == []
    assert files(path) == before


def test_a_crash_before_any_change_reopens_as_cleanly_shut_down(tmp_path: str) -> None:
    path = str(tmp_path / "t-0")
    log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    log.append(batch_of(5), 0)
    log.close()
    PartitionLog.open(path, CONFIG, clock_ms=FakeClock())  # "crashes": never closed
    assert os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_FILE))
    log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    assert log.log_end_offset == 5
    # Appends leave the marker (they add bytes above the offset it vouches for)...
    log.append(batch_of(2), 0)
    assert os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_FILE))
    # ...and a crash after them recovers as after any crash: what is above is checked.
    log2 = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    assert log2.log_end_offset == 7
    # A change below the offset it vouches for removes it first.
    log2.truncate_to(3)
    assert not os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_FILE))
    log2.close()


def test_a_changed_log_writes_what_changed_on_close(tmp_path: str, syncs: list[str]) -> None:
    path = str(tmp_path / "t-0")
    log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    log.append(batch_of(5), 0)
    log.close()
    assert any("fdatasync" in c and c.endswith(".log") for c in syncs), syncs
    assert os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_FILE))


def test_a_checkpoint_of_the_value_it_holds_is_not_written_again(
    tmp_path: str, syncs: list[str]
) -> None:
    cp = OffsetCheckpoint(str(tmp_path / "cp"))
    cp.write(7)
    written = len(syncs)
    assert written > 0
    cp.write(7)
    assert len(syncs) == written
    fresh = OffsetCheckpoint(str(tmp_path / "cp"))
    assert fresh.read() == 7
    fresh.write(7)
    assert len(syncs) == written
    fresh.remove()
    fresh.write(7)  # the file is gone: written again
    assert len(syncs) > written
    assert OffsetCheckpoint(str(tmp_path / "cp")).read() == 7


def test_an_epoch_cache_change_that_changes_nothing_writes_nothing(
    tmp_path: str, syncs: list[str]
) -> None:
    path = str(tmp_path / "leader-epoch-checkpoint")
    cache = LeaderEpochCache.load(path)
    cache.clear()  # empty, and no file: the same thing
    cache.truncate_from_end(0)
    assert syncs == [] and not os.path.exists(path)
    cache.assign(3, 10)
    assert LeaderEpochCache.load(path).entries() == [(3, 10)]
    assert syncs == []  # written; fsynced by sync(), before a recovery point moves over it
    cache.sync()
    assert syncs
    syncs.clear()
    cache.truncate_from_end(11)
    cache.truncate_from_start(10)
    cache.sync()
    assert syncs == []


def test_a_new_epoch_is_written_when_the_recovery_point_passes_it_not_before(
    tmp_path: str, syncs: list[str]
) -> None:
    """Becoming leader of 3,000 partitions wrote 3,000 epoch files with two fsyncs each, and
    the first write to 10,000 new partitions 10,000 more files. The file must be right only
    below the recovery point: above it, recovery rebuilds the entries from the batches."""
    path = str(tmp_path / "t-0")
    log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    epoch_file = os.path.join(path, "leader-epoch-checkpoint")
    log.assign_epoch(4)
    assert syncs == [] and log.epoch_cache.latest_epoch == 4
    log.append(batch_of(3), 4)
    assert not os.path.exists(epoch_file) and syncs == []
    # A crash now: the copy has the batches and no epoch file; recovery rebuilds it.
    crashed = str(tmp_path / "crashed")
    shutil.copytree(path, crashed)
    copy = PartitionLog.open(crashed, CONFIG, clock_ms=FakeClock())
    assert copy.epoch_cache.entries() == [(4, 0)] and copy.end_offset_for_epoch(3) == (-1, -1)
    copy.close()
    log.flush()
    assert LeaderEpochCache.load(epoch_file).entries() == [(4, 0)]
    assert any(c.endswith("leader-epoch-checkpoint") for c in syncs), syncs
    log.close()


def _write_cache(path: str, entries: list[tuple[int, int]]) -> None:
    """The epoch cache file as a power failure may leave it: an older or newer version."""
    from raftlog.storage.checkpoint import write_entries

    write_entries(os.path.join(path, "leader-epoch-checkpoint"), entries)


def test_recovery_rebuilds_the_epoch_cache_above_the_recovery_point_from_the_batches(
    tmp_path: str,
) -> None:
    """The epoch cache is written without fsync and fsynced only before the recovery point
    moves over what it describes, so after a power failure its file may lag the batches above
    the recovery point (or hold entries of a history that was cut). Recovery walks those
    batches anyway: their epochs replace the file's tail."""
    path = str(tmp_path / "t-0")
    log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    log.append(batch_of(10), 1)
    log.flush()  # recovery point 10, the cache [(1, 0)] durable
    log.assign_epoch(3)
    log.append(batch_of(5), 3)
    log.assign_epoch(4)
    log.append(batch_of(5), 4)  # offsets 15..19 in epoch 4
    assert log.epoch_cache.entries() == [(1, 0), (3, 10), (4, 15)]
    # A crash (no close) that lost the last cache writes: the file is the flushed version.
    _write_cache(path, [(1, 0)])
    again = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    assert again.epoch_cache.entries() == [(1, 0), (3, 10), (4, 15)]
    assert again.end_offset_for_epoch(3) == (3, 15)
    # A file from a history that was cut and rewritten (a follower truncated, then took other
    # epochs): entries the batches above the recovery point contradict go.
    _write_cache(path, [(1, 0), (2, 12), (7, 18)])
    again.close()
    os.unlink(os.path.join(path, CLEAN_SHUTDOWN_FILE))  # as after a crash
    os.unlink(os.path.join(path, "recovery-point-offset-checkpoint"))
    third = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    assert third.epoch_cache.entries() == [(1, 0), (3, 10), (4, 15)]
    third.close()
