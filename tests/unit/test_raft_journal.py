"""The metadata quorum's Raft journal (raftlog/metadata/raft_journal.py).

It must read and write pysyncobj's own journal format (a data directory from before it, or
after it, opens either way), keep the longest valid prefix of a torn file, and on a full disk
(a real tmpfs, no mocks) refuse with JournalFullError, change nothing, and work again once
space is back; pysyncobj's mmap journal died of SIGBUS there instead.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pysyncobj.journal import FileJournal

from raftlog.metadata.raft_journal import (
    HEADER_BYTES,
    RECORD_OVERHEAD_BYTES,
    JournalFullError,
    RaftJournal,
)
from tests._tmpfs import fill, tmpfs

ENTRIES = [(b"\x01" + bytes([i % 256]) * (i * 37 % 500), i + 1, 1 + i // 10) for i in range(60)]


def contents(journal: RaftJournal | FileJournal) -> list[tuple[bytes, int, int]]:
    return [(bytes(c), i, t) for c, i, t in (journal[k] for k in range(len(journal)))]


def test_reads_and_writes_pysyncobjs_format(tmp_path: Path) -> None:
    theirs = FileJournal(str(tmp_path / "a"))
    for e in ENTRIES:
        theirs.add(*e)
    theirs.setCurrentTerm(7, "127.0.0.1:1")
    theirs.setRaftCommitIndex(42)
    theirs.onOneSecondTimer()
    theirs._destroy()
    ours = RaftJournal(str(tmp_path / "a"))
    assert contents(ours) == ENTRIES
    assert (ours.getCurrentTerm(), ours.getVotedForNodeId(), ours.getRaftCommitIndex()) == (
        7,
        "127.0.0.1:1",
        42,
    )
    ours.deleteEntriesFrom(50)
    ours.deleteEntriesTo(5)
    ours.add(b"\x01new", 51, 9)
    ours.setCurrentTerm(9, None)
    ours._destroy()
    again = FileJournal(str(tmp_path / "a"))
    assert contents(again) == [*ENTRIES[5:50], (b"\x01new", 51, 9)]
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (9, None)
    again._destroy()


def test_every_operation_survives_a_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    j = RaftJournal(path)
    model: list[tuple[bytes, int, int]] = []
    for step, e in enumerate(ENTRIES):
        j.add(*e)
        model.append(e)
        if step % 7 == 6:
            j.deleteEntriesFrom(len(model) - 2)
            del model[-2:]
        if step % 13 == 12:
            j.deleteEntriesTo(3)
            del model[:3]
        assert contents(j) == model
        j._destroy()
        j = RaftJournal(path)
        assert contents(j) == model, step
    j.deleteEntriesTo(len(j))
    j.add(b"\x01last", 99, 9)
    j.clear()
    j.add(b"\x01only", 100, 9)
    j._destroy()
    assert contents(RaftJournal(path)) == [(b"\x01only", 100, 9)]


def test_a_torn_tail_keeps_the_longest_valid_prefix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "j")
    j = RaftJournal(path)
    for e in ENTRIES[:10]:
        j.add(*e)
    end = HEADER_BYTES + sum(len(c) + RECORD_OVERHEAD_BYTES for c, _, _ in ENTRIES[:10])
    j._destroy()
    last = end - len(ENTRIES[9][0]) - RECORD_OVERHEAD_BYTES
    with open(path, "r+b") as f:  # the last record's trailing size torn
        f.seek(end - 2)
        f.write(b"\xff\xff")
    with caplog.at_level(logging.WARNING):
        j = RaftJournal(path)
    assert contents(j) == ENTRIES[:9]
    assert f"the record at byte {last} is torn or corrupt" in caplog.text
    j.add(*ENTRIES[9])  # written over the torn record
    j._destroy()
    assert contents(RaftJournal(path)) == ENTRIES[:10]


FS_BYTES = 2 * 1024 * 1024


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted afterwards whatever happens."""
    mount_point = tmp_path / "small-fs"
    mount_point.mkdir()
    with tmpfs(mount_point, FS_BYTES):
        yield mount_point


def test_a_full_disk_refuses_then_recovers(small_fs: Path) -> None:
    path = str(small_fs / "journal")
    j = RaftJournal(path)
    j.setCurrentTerm(1, None)
    ballast = small_fs / "ballast"
    fill(ballast)
    # The first 64 KiB were reserved up front: entries still go in, until they are used up.
    added = 0
    with pytest.raises(JournalFullError, match="No space left on device"):
        while True:
            j.add(b"\x01" + b"x" * 4000, added + 1, 1)
            added += 1
    assert 10 < added < 20
    assert len(j) == added and j.full is not None and "journal" in j.full
    with pytest.raises(JournalFullError):
        j.reserve(4000)
    # Term and vote cannot be stored: refused, so pysyncobj does not vote or campaign.
    with pytest.raises(JournalFullError, match="term and vote"):
        j.setCurrentTerm(2, "someone")
    j.setRaftCommitIndex(added)
    j.onOneSecondTimer()  # the commit index may lag: no exception
    j._destroy()
    j = RaftJournal(path)  # nothing half-written
    assert len(j) == added and j.getCurrentTerm() == 1
    os.unlink(ballast)
    j.setCurrentTerm(2, "someone")
    j.add(b"\x01after", added + 1, 2)
    assert j.full is None
    j._destroy()
    j = RaftJournal(path)
    assert len(j) == added + 1 and j[-1] == (b"\x01after", added + 1, 2)
    assert j.getCurrentTerm() == 2
