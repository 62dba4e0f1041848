"""The leader-epoch cache (KIP-101): its rules, its file, and its rebuild from the log."""

from __future__ import annotations

import logging
import os
import re

import pytest

from raftlog.records import encode_batch
from raftlog.storage import LogConfig, PartitionLog
from raftlog.storage.checkpoint import CheckpointError
from raftlog.storage.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache
from raftlog.storage.log import EPOCH_CACHE_FILE

from ._helpers import FakeClock, batch_of

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def cache(tmp_path: str, *entries: tuple[int, int]) -> LeaderEpochCache:
    c = LeaderEpochCache(os.path.join(str(tmp_path), "leader-epoch-checkpoint"))
    for epoch, start in entries:
        assert c.assign(epoch, start)
    return c


def test_assign_only_newer_epochs(tmp_path: str) -> None:
    c = cache(tmp_path, (1, 0), (3, 10))
    assert c.assign(3, 20) is False  # not newer
    assert c.assign(2, 30) is False
    assert c.entries() == [(1, 0), (3, 10)]
    assert c.latest_epoch == 3
    assert c.assign(4, 15) is True
    assert c.entries() == [(1, 0), (3, 10), (4, 15)]


def test_assign_replaces_epochs_that_wrote_nothing(tmp_path: str) -> None:
    c = cache(tmp_path, (1, 0), (3, 10), (4, 10))
    # Epoch 3 wrote nothing before 4 started at the same offset: 4 replaces it.
    assert c.entries() == [(1, 0), (4, 10)]
    assert c.assign(6, 5)  # starts before 4's start: 4 goes too
    assert c.entries() == [(1, 0), (6, 5)]


def test_end_offset_for_epoch(tmp_path: str) -> None:
    assert cache(tmp_path).end_offset_for_epoch(3, 100) == UNDEFINED
    c = cache(tmp_path, (2, 0), (4, 10), (7, 25))
    assert c.end_offset_for_epoch(1, 40) == UNDEFINED  # older than every epoch here
    assert c.end_offset_for_epoch(2, 40) == (2, 10)
    assert c.end_offset_for_epoch(3, 40) == (2, 10)  # unknown epoch: the largest one below
    assert c.end_offset_for_epoch(4, 40) == (4, 25)
    assert c.end_offset_for_epoch(6, 40) == (4, 25)
    assert c.end_offset_for_epoch(7, 40) == (7, 40)  # the latest ends at the log end
    assert c.end_offset_for_epoch(100, 40) == (7, 40)


def test_epoch_for_offset(tmp_path: str) -> None:
    c = cache(tmp_path, (2, 5), (4, 10))
    assert [c.epoch_for_offset(o) for o in (0, 4, 5, 9, 10, 1000)] == [
        UNDEFINED_EPOCH,
        UNDEFINED_EPOCH,
        2,
        2,
        4,
        4,
    ]


def test_truncate_from_end(tmp_path: str) -> None:
    c = cache(tmp_path, (1, 0), (2, 10), (3, 20))
    c.truncate_from_end(21)
    assert c.entries() == [(1, 0), (2, 10), (3, 20)]
    c.truncate_from_end(20)  # epoch 3 started at 20: it wrote nothing below the new end
    assert c.entries() == [(1, 0), (2, 10)]
    c.truncate_from_end(5)
    assert c.entries() == [(1, 0)]
    c.truncate_from_end(0)
    assert c.entries() == []
    assert LeaderEpochCache.load(c.path).entries() == []


def test_truncate_from_start(tmp_path: str) -> None:
    c = cache(tmp_path, (1, 5), (2, 10), (3, 20))
    c.truncate_from_start(3)  # before every epoch: nothing to forget
    assert c.entries() == [(1, 5), (2, 10), (3, 20)]
    c.truncate_from_start(5)
    assert c.entries() == [(1, 5), (2, 10), (3, 20)]
    c.truncate_from_start(12)  # epoch 2 covers 12: it now starts there
    assert c.entries() == [(2, 12), (3, 20)]
    c.truncate_from_start(20)
    assert c.entries() == [(3, 20)]
    c.truncate_from_start(50)  # past the last start: the latest epoch is kept
    assert c.entries() == [(3, 50)]
    assert LeaderEpochCache.load(c.path).entries() == [(3, 50)]


def test_every_change_is_persisted_and_reloads(tmp_path: str) -> None:
    c = cache(tmp_path, (1, 0), (5, 7))
    with open(c.path) as f:
        assert f.read() == "0\n2\n1 0\n5 7\n"
    assert LeaderEpochCache.load(c.path).entries() == [(1, 0), (5, 7)]
    c.clear()
    with open(c.path) as f:
        assert f.read() == "0\n0\n"
    missing = LeaderEpochCache.load(os.path.join(str(tmp_path), "nope"))
    assert missing.entries() == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("0\n2\n1 0\n1 5\n", "entries (1, 0) then (1, 5) do not both increase"),
        ("0\n2\n1 5\n2 5\n", "entries (1, 5) then (2, 5) do not both increase"),
        ("0\n1\n1\n", "line 3 needs 2 integers"),
        ("0\n1\n1 x\n", "line 3 is not integers"),
        ("1\n0\n", "line 1 must be version 0"),
    ],
)
def test_load_refuses_a_malformed_file_naming_it(tmp_path: str, content: str, message: str) -> None:
    path = os.path.join(str(tmp_path), "leader-epoch-checkpoint")
    with open(path, "w") as f:
        f.write(content)
    with pytest.raises(CheckpointError, match=re.escape(message)) as e:
        LeaderEpochCache.load(path)
    assert str(e.value).startswith(path + ": ")


def test_a_failed_write_leaves_the_cache_unchanged(tmp_path: str) -> None:
    """The file is written before memory changes, so both keep agreeing when a write fails."""
    c = cache(tmp_path, (1, 0), (2, 10))
    c.path = os.path.join(str(tmp_path), "no-such-dir", "leader-epoch-checkpoint")
    for change in (
        lambda: c.assign(3, 20),
        lambda: c.truncate_from_end(5),
        lambda: c.truncate_from_start(12),
        c.clear,
    ):
        with pytest.raises(FileNotFoundError):
            change()
        assert c.entries() == [(1, 0), (2, 10)]


# -- the cache inside a log ----------------------------------------------------------------


def epoch_log(path: str) -> PartitionLog:
    log = PartitionLog.open(path, LogConfig(segment_bytes=600), clock_ms=FakeClock())
    for epoch in (1, 1, 3, 3, 3, 4, 6, 6):
        log.append(batch_of(2, 50), epoch)
    log.append_as_follower(encode_batch([(None, b"f")], base_offset=16, partition_leader_epoch=9))
    return log


EXPECTED = [(1, 0), (3, 4), (4, 10), (6, 12), (9, 16)]


@pytest.mark.parametrize(
    "damage", ["garbage", "not increasing", "missing", "empty", "version 7", "stale but valid"]
)
def test_the_log_rebuilds_a_bad_epoch_file_from_its_batches(
    tmp_path: str, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path)
    with epoch_log(path) as log:
        assert log.epoch_cache.entries() == EXPECTED
        assert len(log.segment_base_offsets) > 2
    file = os.path.join(path, EPOCH_CACHE_FILE)
    contents = {
        "garbage": "\x00\x01garbage",
        "not increasing": "0\n2\n3 4\n1 9\n",
        "empty": "",
        "version 7": "7\n0\n",
        "stale but valid": "0\n3\n1 0\n3 4\n50 17\n",  # an epoch past the log end
    }
    if damage == "missing":
        os.unlink(file)
    else:
        with open(file, "w") as f:
            f.write(contents[damage])
    with caplog.at_level(logging.WARNING), epoch_log_reopened(path) as log:
        if damage == "stale but valid":
            # A well-formed file is trusted; recovery drops only what lies past the log end.
            assert log.epoch_cache.entries() == [(1, 0), (3, 4)]
        else:
            assert log.epoch_cache.entries() == EXPECTED
            assert log.end_offset_for_epoch(5) == (4, 12)
            assert log.latest_epoch == 9
    if damage not in ("missing", "stale but valid"):
        assert f"rebuilding leader epoch cache from the log: {file}" in caplog.text


def epoch_log_reopened(path: str) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(segment_bytes=600), clock_ms=FakeClock())


def test_the_rebuilt_cache_starts_at_the_log_start(tmp_path: str) -> None:
    path = str(tmp_path)
    with epoch_log(path) as log:
        log.delete_records_before(11)
        assert log.epoch_cache.entries() == [(4, 11), (6, 12), (9, 16)]
    os.unlink(os.path.join(path, EPOCH_CACHE_FILE))
    with epoch_log_reopened(path) as log:
        assert log.epoch_cache.entries() == [(4, 11), (6, 12), (9, 16)]


def test_an_emptied_log_keeps_its_latest_epoch_across_a_reopen(tmp_path: str) -> None:
    """After delete_records_before(log_end) the epoch covering the start begins at the log end;
    a reopen once dropped it, so the reopened log stopped fencing older leaders."""
    path = str(tmp_path)
    with epoch_log(path) as log:
        log.delete_records_before(17)
        assert log.epoch_cache.entries() == [(9, 17)]
    with epoch_log_reopened(path) as log:
        assert log.epoch_cache.entries() == [(9, 17)]
        assert log.latest_epoch == 9
        assert log.end_offset_for_epoch(9) == (9, 17)


def test_an_epoch_assigned_before_a_crash_but_never_written_is_dropped(tmp_path: str) -> None:
    path = str(tmp_path)
    with epoch_log(path) as log:
        log.epoch_cache.assign(12, 17)  # as the leader path does just before writing
    with epoch_log_reopened(path) as log:
        assert log.epoch_cache.entries() == EXPECTED
        assert log.latest_epoch == 9
