"""`raftlog storage dump|verify`, run as real subprocesses, and storage/tools.py behind them."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest

from raftlog.records import Record, encode_batch
from raftlog.storage import LogConfig, PartitionLog, tools
from raftlog.storage.segment import segment_name

from ._helpers import FakeClock

SCRIPT = os.path.join(os.path.dirname(sys.executable), "raftlog")


def raftlog(*args: str, module: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the installed `raftlog` command (or `python -m raftlog.cli`)."""
    if module:
        argv = [sys.executable, "-m", "raftlog.cli", *args]
    else:
        assert os.path.exists(SCRIPT), f"{SCRIPT} missing: install raftlog (scripts/test does)"
        argv = [SCRIPT, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


BATCHES = [
    [Record(b"user-1", b"hello", (), 1000), Record(None, b"\xff\x00", (("trace", b"t1"),), 1005)],
    [Record(b"user-2", None, (), 990)],
    [Record(b"k", b"v" * 100, (("a", None),), 2000)] * 3,
]


@pytest.fixture
def partition(tmp_path: str) -> str:
    path = os.path.join(str(tmp_path), "orders-0")
    with PartitionLog.open(path, LogConfig(segment_bytes=300), clock_ms=FakeClock()) as log:
        for epoch, recs in zip((4, 4, 6), BATCHES, strict=True):
            log.append(encode_batch(recs), epoch)
        assert log.segment_base_offsets == [0, 3]
    return path


def seg(path: str, base: int) -> str:
    return os.path.join(path, segment_name(base) + ".log")


def test_dump_prints_every_batch_and_record(partition: str) -> None:
    run = raftlog("storage", "dump", partition, "--records")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"Dumping {seg(partition, 0)}"
    assert lines[1].startswith(
        "baseOffset: 0 lastOffset: 1 count: 2 partitionLeaderEpoch: 4 magic: 1 position: 0 "
    )
    assert "firstTimestamp: 1000 maxTimestamp: 1005 producerId: -1" in lines[1]
    assert lines[1].endswith("valid: True")
    assert lines[2] == "| offset: 0 timestamp: 1000 key: user-1 value: hello"
    assert lines[3] == "| offset: 1 timestamp: 1005 key: null value: ff00 headers: trace=b't1'"
    assert lines[4].startswith("baseOffset: 2 lastOffset: 2 count: 1 partitionLeaderEpoch: 4")
    assert lines[5] == "| offset: 2 timestamp: 990 key: user-2 value: null"
    assert lines[6] == f"Dumping {seg(partition, 3)}"
    assert lines[7].startswith("baseOffset: 3 lastOffset: 5 count: 3 partitionLeaderEpoch: 6")
    assert lines[8] == (
        f"| offset: 3 timestamp: 2000 key: k value: {'v' * 80}...(100 bytes) headers: a=None"
    )
    assert len(lines) == 11


def test_dump_without_records_and_of_one_segment_file(partition: str) -> None:
    run = raftlog("storage", "dump", seg(partition, 3))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"Dumping {seg(partition, 3)}"
    assert len(lines) == 2 and lines[1].startswith("baseOffset: 3 lastOffset: 5")


def test_verify_a_good_partition(partition: str) -> None:
    run = raftlog("storage", "verify", partition)
    assert (run.returncode, run.stdout, run.stderr) == (0, f"{partition}: ok\n", "")


def test_verify_names_the_file_and_byte_of_a_flipped_bit(partition: str) -> None:
    path = seg(partition, 0)
    second = len(encode_batch(BATCHES[0]))
    with open(path, "r+b") as f:
        f.seek(second + 70)
        byte = f.read(1)[0]
        f.seek(second + 70)
        f.write(bytes([byte ^ 4]))
    run = raftlog("storage", "verify", partition)
    assert run.returncode == 1
    # The damaged batch only: where the next segment should start is unknown once a batch is
    # damaged, so it is not reported as a second (derived) problem. The log was closed cleanly:
    # the damage lies below its recovery point, and verify says what the broker does then.
    assert run.stdout.splitlines() == [
        f"{path}: byte {second}: checksum mismatch in batch at byte {second} [offset 2 is below "
        "the recovery point 6: the broker keeps this partition offline and deletes nothing]",
    ]
    assert run.stderr == f"1 problem(s) in {partition}\n"
    dump = raftlog("storage", "dump", partition)
    assert dump.returncode == 1
    assert f"INVALID: checksum mismatch in batch at byte {second}" in dump.stdout


def test_verify_reports_a_torn_tail(partition: str) -> None:
    path = seg(partition, 3)
    os.truncate(path, os.path.getsize(path) - 10)
    run = raftlog("storage", "verify", partition)
    assert run.returncode == 1
    assert f"{path}: byte 0: impossible batch length" in run.stdout


def test_verify_a_missing_path_exits_1_with_one_line(tmp_path: str) -> None:
    missing = os.path.join(str(tmp_path), "nope")
    for module in (False, True):
        run = raftlog("storage", "verify", missing, module=module)
        assert run.returncode == 1
        assert run.stderr == (
            f"raftlog: error: {missing}: no such partition directory or segment file\n"
        )
        assert "Traceback" not in run.stderr


def test_verify_a_file_that_is_not_a_segment(tmp_path: str) -> None:
    other = os.path.join(str(tmp_path), "notes.txt")
    with open(other, "w") as f:
        f.write("hello")
    run = raftlog("storage", "verify", other)
    assert run.returncode == 1
    assert f"{other}: not a segment file" in run.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["storage", "verify"],
        ["storage", "dump"],
        ["storage", "bogus", "x"],
        ["storage", "dump", "--bogus", "x"],
        ["storage"],
    ],
)
def test_bad_arguments_exit_2(args: list[str]) -> None:
    run = raftlog(*args)
    assert run.returncode == 2
    assert "usage: raftlog" in run.stderr
    assert "Traceback" not in run.stderr


# -- tools.verify on indices and segment chains ------------------------------------------------


def test_verify_checks_the_indices(tmp_path: str) -> None:
    path = str(tmp_path)
    with PartitionLog.open(path, LogConfig(index_interval_bytes=0), clock_ms=FakeClock()) as log:
        for i in range(4):
            log.append(encode_batch([(b"k", b"v" * 30)], timestamp=100 + i), 0)
    stem = os.path.join(path, segment_name(0))
    with open(stem + ".index", "rb") as f:
        entries = list(struct.iter_unpack("<ii", f.read()))
    assert [rel for rel, _ in entries] == [1, 2, 3]
    _, pos = entries[1]
    with open(stem + ".index", "r+b") as f:
        f.seek(8 + 4)
        f.write(struct.pack("<i", pos + 1))
    with open(stem + ".timeindex", "r+b") as f:
        f.seek(2 * 12)
        f.write(struct.pack("<q", 101))  # below batch 2's 102, not below entry 1's 101
    # The log was closed cleanly, so the next open trusts this segment: it checks only the
    # index rules and the last entry. A wrong middle offset entry is rebuilt by the read that
    # uses it (a note); a time index entry that keeps the rules is rebuilt by nothing (a
    # problem).
    found = tools.examine(path)
    assert found.notes == (
        f"{stem}.index: entry 1 maps offset 2 to byte {pos + 1}, where no batch starts "
        f"({tools.REBUILT_BY_READ})",
    )
    assert found.problems == (
        f"{stem}.timeindex: entry 2 (101, offset 3) disagrees with the segment "
        "(batches before offset 3 reach timestamp 102): nothing rebuilds it while the file "
        "keeps the index rules, and lookups by time use it; delete both index files of this "
        "segment (the broker's next open rebuilds them)",
    )
    assert tools.verify(path) == list(found.problems)
    # A time index entry below the one before it breaks the rules: the open rebuilds both.
    with open(stem + ".timeindex", "r+b") as f:
        f.seek(2 * 12)
        f.write(struct.pack("<q", 5))
    found = tools.examine(path)
    assert found.problems == () and len(found.notes) == 1, found
    assert found.notes[0].startswith(f"{stem}.index: entry 2 (3, ")
    size = os.path.getsize(stem + ".log")
    assert found.notes[0].endswith(
        f"ts 5) breaks the index rules (previous (2, {pos + 1}), segment size {size}) "
        f"({tools.REBUILT_AT_OPEN})"
    )
    os.unlink(stem + ".timeindex")
    assert tools.examine(path) == tools.Findings(
        (), (f"{stem}.timeindex is missing ({tools.REBUILT_AT_OPEN})",)
    )


def test_what_recovery_rebuilds_is_a_note_and_verify_exits_0(tmp_path: str) -> None:
    """A live log (the broker running, or just refetched): its active segment and the one
    rolled last have no index files yet, and its recovery point lags. That is how a healthy
    log looks, and the broker rebuilds all of it by itself: notes, exit status 0."""
    path = os.path.join(str(tmp_path), "live-0")
    log = PartitionLog.open(path, LogConfig(segment_bytes=300), clock_ms=FakeClock())
    try:
        for i in range(6):
            log.append(encode_batch([(b"k", b"v" * 50)] * 2, timestamp=100 + i), 1)
        # The active segment's indices are written at roll and close; those of the segment
        # rolled last, by a background flush that may or may not have run yet.
        active = os.path.join(path, segment_name(log.segment_base_offsets[-1]))
        assert not os.path.exists(active + ".index")
        run = raftlog("storage", "verify", path)
        assert (run.returncode, run.stderr) == (0, ""), run.stdout
        lines = run.stdout.splitlines()
        assert lines[-1] == f"{path}: ok"
        note = f" is missing ({tools.REBUILT_BY_CHECK})"
        assert f"note: {active}.index{note}" in lines[:-1], lines
        assert all(line.endswith(note) for line in lines[:-1]), lines
    finally:
        log.close()
    assert tools.examine(path) == tools.Findings((), ())
    # Derived checkpoints, lost or unreadable: notes too.
    os.unlink(os.path.join(path, "recovery-point-offset-checkpoint"))
    with open(os.path.join(path, "leader-epoch-checkpoint"), "w") as f:
        f.write("garbage\n")
    for name in os.listdir(path):
        if name.startswith(segment_name(0)) and name.endswith("index"):
            os.unlink(os.path.join(path, name))
    run = raftlog("storage", "verify", path)
    assert (run.returncode, run.stderr) == (0, ""), run.stdout
    notes = [line for line in run.stdout.splitlines() if line.startswith("note: ")]
    assert len(notes) == 3 and run.stdout.endswith(f"{path}: ok\n"), run.stdout
    assert "recovery-point-offset-checkpoint: missing (derived data" in notes[0]
    assert "leader-epoch-checkpoint: unreadable (" in notes[1]
    assert notes[2] == f"note: {path}/{segment_name(0)}.index is missing ({tools.REBUILT_AT_OPEN})"
    # And the broker's open does rebuild them: afterwards nothing is left to note.
    PartitionLog.open(path, LogConfig(segment_bytes=300), clock_ms=FakeClock()).close()
    assert tools.examine(path) == tools.Findings((), ())


def test_damaged_records_stay_problems_beside_the_notes(partition: str) -> None:
    """Offsets out of order (a base offset rewritten: outside the checksum) are a problem,
    exit status 1, even where notes come with it; the notes are printed as well."""
    path = seg(partition, 3)
    with open(path, "r+b") as f:
        f.write(struct.pack("<q", 7))  # the batch should start at offset 3
    os.unlink(os.path.join(partition, segment_name(0) + ".index"))
    run = raftlog("storage", "verify", partition)
    assert run.returncode == 1
    assert run.stdout.splitlines() == [
        f"{path}: byte 0: batch has offset 7, expected 3 [offset 3 is below the recovery "
        "point 6: the broker keeps this partition offline and deletes nothing]",
        f"note: {os.path.join(partition, segment_name(0))}.index is missing "
        f"({tools.REBUILT_AT_OPEN})",
    ]
    assert run.stderr == f"1 problem(s) in {partition}\n"


def test_verify_checks_that_segments_chain(tmp_path: str) -> None:
    path = str(tmp_path)
    with PartitionLog.open(path, LogConfig(segment_bytes=100), clock_ms=FakeClock()) as log:
        for _ in range(3):
            log.append(encode_batch([(b"k", b"v" * 30)] * 2), 0)
        assert log.segment_base_offsets == [0, 2, 4]
    for suffix in (".log", ".index", ".timeindex"):
        os.unlink(os.path.join(path, segment_name(2) + suffix))
    assert tools.verify(path) == [
        f"{seg(path, 4)}: segment starts at offset 4, expected 2 [offset 2 is below the "
        "recovery point 6: the broker keeps this partition offline and deletes nothing]"
    ]
    # A lost recovery point checkpoint with no clean-shutdown marker: recovery starts at 0.
    os.unlink(os.path.join(path, "clean-shutdown"))
    os.unlink(os.path.join(path, "recovery-point-offset-checkpoint"))
    assert tools.verify(path) == [
        f"{seg(path, 4)}: segment starts at offset 4, expected 2 [offset 2 is at or above the "
        "recovery point 0: the broker's recovery deletes this segment file and the 0 after it]"
    ]
