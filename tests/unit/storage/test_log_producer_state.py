"""PartitionLog keeps the producer state with its log: the leader's duplicate answer, the
follower's records, truncation, snapshots at rolls, and the rebuild after a crash."""

from __future__ import annotations

import os
import shutil

import pytest

from raftlog.errors import (
    InvalidProducerEpochError,
    InvalidRequestError,
    OutOfOrderSequenceError,
    RaftlogError,
)
from raftlog.records import encode_batch
from raftlog.storage import AppendInfo, LogConfig, PartitionLog
from raftlog.storage.log import CLEAN_SHUTDOWN_FILE
from raftlog.storage.producer_state import SNAPSHOT_SUFFIX

CONFIG = LogConfig(segment_bytes=1000, index_interval_bytes=100)


def idem(pid: int, seq: int, n: int = 2, epoch: int = 0, ts: int = 1000) -> bytes:
    return encode_batch(
        [(None, b"v%d" % (seq + i)) for i in range(n)],
        timestamp=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def plain(n: int = 1) -> bytes:
    return encode_batch([(None, b"x")] * n, timestamp=1000)


def produce(log: PartitionLog, *chunks: bytes) -> list[AppendInfo | RaftlogError]:
    return log.append_chunks([memoryview(c) for c in chunks], 0)


def snapshots(path: str) -> list[str]:
    return sorted(e for e in os.listdir(path) if e.endswith(SNAPSHOT_SUFFIX))


def test_duplicate_is_answered_with_its_offsets_and_not_appended(tmp_path: str) -> None:
    with PartitionLog.open(str(tmp_path), CONFIG) as log:
        first = produce(log, idem(5, 0), plain(), idem(5, 2))
        assert [o.base_offset for o in first] == [0, 2, 3]  # type: ignore[union-attr]
        again = produce(log, idem(5, 2), idem(5, 0), idem(5, 4))
        assert [(o.base_offset, o.last_offset) for o in again] == [(3, 4), (0, 1), (5, 6)]  # type: ignore[union-attr]
        assert log.log_end_offset == 7
        gap, fenced = produce(log, idem(5, 9), idem(5, 6, epoch=-1))
        assert isinstance(gap, OutOfOrderSequenceError)
        assert isinstance(fenced, OutOfOrderSequenceError)  # a negative epoch is not idempotent
        produce(log, idem(5, 0, epoch=1))
        (zombie,) = produce(log, idem(5, 6, epoch=0))
        assert isinstance(zombie, InvalidProducerEpochError)
        assert log.log_end_offset == 9


def test_an_idempotent_batch_must_be_alone_in_its_chunk(tmp_path: str) -> None:
    with PartitionLog.open(str(tmp_path), CONFIG) as log:
        (out,) = produce(log, idem(1, 0) + idem(1, 2))
        assert isinstance(out, InvalidRequestError)
        assert log.log_end_offset == 0


def test_checks_within_one_append_see_its_earlier_chunks(tmp_path: str) -> None:
    with PartitionLog.open(str(tmp_path), CONFIG) as log:
        out = produce(log, idem(1, 0), idem(1, 2), idem(1, 2), idem(1, 5))
        assert [getattr(o, "base_offset", type(o)) for o in out] == [
            0,
            2,
            2,
            OutOfOrderSequenceError,
        ]
        assert log.log_end_offset == 4


def test_follower_records_and_truncation_rebuilds(tmp_path: str) -> None:
    leader_dir, follower_dir = str(tmp_path / "l"), str(tmp_path / "f")  # type: ignore[operator]
    with (
        PartitionLog.open(leader_dir, CONFIG) as leader,
        PartitionLog.open(follower_dir, CONFIG) as follower,
    ):
        for seq in range(0, 40, 2):
            produce(leader, idem(1, seq))
        while follower.log_end_offset < leader.log_end_offset:
            follower.append_as_follower(leader.read(follower.log_end_offset, 1 << 20))
        assert follower.log_end_offset == 40 and len(follower.segment_base_offsets) > 1
        # The follower, made leader, deduplicates a retry the old leader appended.
        (dup,) = produce(follower, idem(1, 38))
        assert dup.base_offset == 38  # type: ignore[union-attr]
        # Truncated below the last batches: their sequences are new again there.
        follower.truncate_to(30)
        (again,) = produce(follower, idem(1, 30))
        assert again.base_offset == 30 and follower.log_end_offset == 32  # type: ignore[union-attr]
        (gap,) = produce(follower, idem(1, 34))
        assert isinstance(gap, OutOfOrderSequenceError)
        follower.truncate_fully(100)
        assert len(follower.producer_state) == 0


@pytest.mark.parametrize("clean", [True, False])
def test_restart_rebuilds_from_snapshot_and_tail(tmp_path: str, clean: bool) -> None:
    path = str(tmp_path)
    log = PartitionLog.open(path, CONFIG)
    for seq in range(0, 60, 2):
        produce(log, idem(1, seq), plain())
    produce(log, idem(2, 7, n=3))
    assert snapshots(path)  # rolls wrote some
    assert len(snapshots(path)) <= 2
    log.close()
    if not clean:
        # As after a crash: no clean-shutdown marker, and only the roll snapshots.
        os.unlink(os.path.join(path, CLEAN_SHUTDOWN_FILE))
        os.unlink(os.path.join(path, snapshots(path)[-1]))
    with PartitionLog.open(path, CONFIG) as log:
        assert log.log_end_offset == 93
        (dup,) = produce(log, idem(1, 58))
        assert dup.base_offset == 87  # type: ignore[union-attr]
        (dup2,) = produce(log, idem(2, 7, n=3))
        assert dup2.base_offset == 90  # type: ignore[union-attr]
        (gap,) = produce(log, idem(1, 61))
        assert isinstance(gap, OutOfOrderSequenceError)


def test_damaged_or_stale_snapshots_are_replaced_by_replay(tmp_path: str) -> None:
    path = str(tmp_path)
    with PartitionLog.open(path, CONFIG) as log:
        for seq in range(0, 60, 2):
            produce(log, idem(1, seq))
    newest = os.path.join(path, snapshots(path)[-1])
    with open(newest, "r+b") as f:
        f.seek(30)
        f.write(b"\xff")
    # A snapshot beyond the log end (of records a crash lost) must be ignored and deleted.
    shutil.copy(newest, os.path.join(path, f"{10**6:020d}{SNAPSHOT_SUFFIX}"))
    with PartitionLog.open(path, CONFIG) as log:
        (dup,) = produce(log, idem(1, 50))
        assert dup.base_offset == 50  # type: ignore[union-attr]
        assert f"{10**6:020d}{SNAPSHOT_SUFFIX}" not in os.listdir(path)


def test_expiry(tmp_path: str) -> None:
    config = LogConfig(producer_id_expiration_ms=1000)
    with PartitionLog.open(str(tmp_path), config) as log:
        produce(log, idem(1, 0, ts=5000))
        assert log.expire_producers(5500) == 0
        assert log.expire_producers(6500) == 1
        (out,) = produce(log, idem(1, 0, ts=7000))
        assert out.base_offset == 2  # type: ignore[union-attr]  # unknown now: appended again
