"""Damage below the recovery point: the log goes offline naming it, and nothing is deleted.

Kafka does not recover a cleanly shut down log at all, and recovers an uncleanly shut down one
only from its recovery point: bytes below it were fsynced, so damage there is not a torn write
but a disk or an operator fault, and truncating there would delete every later record (this
once removed 17,000 valid records and let new writes reuse their offsets). These tests damage
flushed data and check that the open (or the read that finds it) raises LogCorruptedError
naming the file, the byte and the offsets, leaves every file byte for byte as it was, and that
`verify` reports the damage once, with no derived problems.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct

import pytest

from raftlog.errors import LogCorruptedError, LogOfflineError
from raftlog.records import HEADER, LOG_OVERHEAD
from raftlog.storage import LogConfig, PartitionLog, tools
from raftlog.storage.checkpoint import OffsetCheckpoint
from raftlog.storage.log import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE
from raftlog.storage.segment import segment_name

from ._helpers import FakeClock, batch_of

# ~16 KiB segments of ~1.7 KiB batches (50 records each): 20 segments hold ~9,000 records.
CONFIG = LogConfig(
    segment_bytes=16 * 1024, index_interval_bytes=4096, recovery_point_checkpoint_ms=0
)
RECORDS_PER_BATCH = 50
SEGMENTS = 20


def build(path: str, segments: int = SEGMENTS, flush: bool = True) -> PartitionLog:
    """A log of `segments` full segments plus one batch in the active one; left open."""
    log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    while len(log.segment_base_offsets) <= segments:
        log.append(batch_of(RECORDS_PER_BATCH, value_bytes=20), 0)
    if flush:
        log.flush()
    return log


def snapshot(path: str) -> dict[str, str]:
    """Every file's name and content hash (checkpoints included)."""
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def batches_of(seg_path: str) -> list[tuple[int, int, int]]:
    """(position, base offset, size) of each batch in a segment file."""
    with open(seg_path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        h = HEADER.unpack_from(data, pos)
        out.append((pos, h[0], h[1] + LOG_OVERHEAD))
        pos += h[1] + LOG_OVERHEAD
    return out


def overwrite(path: str, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def seg_path(root: str, base: int) -> str:
    return os.path.join(root, segment_name(base) + ".log")


@pytest.mark.parametrize("which", ["first after the last index entry", "last"])
@pytest.mark.parametrize("length", [0x7FFFFFF0, 100, -5])
def test_a_corrupt_batch_length_in_a_closed_segment_of_a_clean_log_deletes_nothing(
    tmp_path: str, which: str, length: int
) -> None:
    """The issue's case: 4 bytes of a `batch_length` overwritten in a middle segment of a
    20-segment partition that was stopped cleanly. The open must not truncate there and delete
    the later segments: it raises LogCorruptedError naming file, byte and offsets, and leaves
    every file as it was. (The open of a trusted segment walks the headers after its last index
    entry; damage before that is found by reads, see the next test.)"""
    path = str(tmp_path / "t-0")
    log = build(path)
    bases = log.segment_base_offsets
    log_end = log.log_end_offset
    log.close()
    assert len(bases) > SEGMENTS
    victim = bases[SEGMENTS // 2]
    batches = batches_of(seg_path(path, victim))
    with open(os.path.join(path, segment_name(victim) + ".index"), "rb") as f:
        index = f.read()
    assert index, "the segment must have index entries for this test"
    last_indexed = struct.unpack("<ii", index[-8:])[1]
    if which == "last":
        pos, offset, _ = batches[-1]
    else:
        pos, offset, _ = next(b for b in batches if b[0] > last_indexed)
    overwrite(seg_path(path, victim), pos + 8, struct.pack("<i", length))
    before = snapshot(path)

    with pytest.raises(LogCorruptedError) as e:
        PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    message = str(e.value)
    assert seg_path(path, victim) in message
    assert f"byte {pos}" in message
    assert f"offset {offset}" in message
    assert f"recovery point {log_end}" in message
    assert e.value.log_path == seg_path(path, victim)
    assert e.value.position == pos
    assert e.value.offset == offset
    assert isinstance(e.value, LogOfflineError)
    assert snapshot(path) == before, "an offline log must not touch its files"

    problems = tools.verify(path)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{seg_path(path, victim)}: byte {pos}: ")


def test_damage_before_the_last_index_entry_of_a_clean_log_is_found_by_the_read(
    tmp_path: str,
) -> None:
    """A clean open walks only the headers after each segment's last index entry (Kafka does not
    scan a cleanly closed log). Damage before it is found by the read that reaches it: that read
    and every later call raise LogCorruptedError, and a reopen that is told which segment was
    damaged checks it batch by batch and stays offline."""
    path = str(tmp_path / "t-0")
    log = build(path)
    bases = log.segment_base_offsets
    log.close()
    victim = bases[5]
    pos, offset, _ = batches_of(seg_path(path, victim))[1]
    overwrite(seg_path(path, victim), pos + 8, struct.pack("<i", 0x7FFFFFF0))

    log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    try:
        assert log.read(bases[1], 1)  # undamaged data still reads
        with pytest.raises(LogCorruptedError) as e:
            log.read(offset + 1, 1)
        assert e.value.log_path == seg_path(path, victim)
        assert e.value.position == pos
        assert log.offline_error is e.value
        with pytest.raises(LogOfflineError):
            log.append(batch_of(1), 0)
        with pytest.raises(LogOfflineError):
            log.read(bases[1], 1)
    finally:
        log.close()
    before = snapshot(path)
    with pytest.raises(LogCorruptedError) as e:
        PartitionLog.open(path, CONFIG, clock_ms=FakeClock(), check_segments=[victim])
    assert (e.value.position, e.value.offset) == (pos, offset)
    assert snapshot(path) == before
    assert len(tools.verify(path)) == 1


def test_a_clean_log_whose_last_segment_lost_its_tail_is_offline(tmp_path: str) -> None:
    """A cleanly closed log whose last segment was cut at a batch boundary looks valid; the
    clean-shutdown marker records the log end, so the missing records are noticed."""
    path = str(tmp_path / "t-0")
    log = build(path, segments=3)
    log.append(batch_of(10), 0)
    end = log.log_end_offset
    last = log.segment_base_offsets[-1]
    log.close()
    assert os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_FILE))
    pos, offset, _ = batches_of(seg_path(path, last))[-1]
    os.truncate(seg_path(path, last), pos)
    with pytest.raises(LogCorruptedError) as e:
        PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    assert f"offset {offset}" in str(e.value) and f"{end}" in str(e.value)
    assert os.path.getsize(seg_path(path, last)) == pos


def test_a_clean_log_is_trusted_even_without_its_recovery_point_checkpoint(tmp_path: str) -> None:
    """The clean-shutdown marker alone says that every byte was fsynced: a lost recovery point
    checkpoint does not turn damage into truncation."""
    path = str(tmp_path / "t-0")
    log = build(path, segments=6)
    bases = log.segment_base_offsets
    log.close()
    os.unlink(os.path.join(path, RECOVERY_POINT_FILE))
    pos, _, _ = batches_of(seg_path(path, bases[2]))[-1]
    overwrite(seg_path(path, bases[2]), pos + 8, struct.pack("<i", 0x7FFFFFF0))
    with pytest.raises(LogCorruptedError):
        PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    assert sorted(n for n in os.listdir(path) if n.endswith(".log")) == [
        segment_name(b) + ".log" for b in bases
    ]


def test_the_marker_stays_through_appends_and_a_crash_after_them_is_recovered(
    tmp_path: str,
) -> None:
    """The marker vouches for the bytes below the offset it holds; appends only add bytes
    above it, and recovery checks everything above the recovery point, so it may stay. A
    change to bytes below it (a truncation) removes it first."""
    path = str(tmp_path / "t-0")
    build(path, segments=2).close()
    log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    assert os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_FILE))
    log.append(batch_of(3), 0)
    assert os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_FILE))
    end = log.log_end_offset
    pos = log.read_slice(end - 3, 1).position
    # A crash: no close. The torn tail above the recovery point is cut as before.
    os.truncate(seg_path(path, log.segment_base_offsets[-1]), pos + 20)
    log2 = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    try:
        assert log2.log_end_offset == end - 3
    finally:
        log2.close()
        log.close()


def unclean_copy(tmp_path: str, segments: int, flushed_segments: int) -> tuple[str, list[int], int]:
    """A crashed copy of a log whose first `flushed_segments` segments are below the recovery
    point and whose later ones are not; (path, segment bases, recovery point)."""

    live = str(tmp_path / "live" / "t-0")
    log = PartitionLog.open(live, CONFIG, clock_ms=FakeClock())
    while len(log.segment_base_offsets) <= flushed_segments:
        log.append(batch_of(RECORDS_PER_BATCH, value_bytes=20), 0)
    log.flush()
    rp = log.log_end_offset
    while len(log.segment_base_offsets) <= segments:
        log.append(batch_of(RECORDS_PER_BATCH, value_bytes=20), 0)
    copy = str(tmp_path / "crashed" / "t-0")
    shutil.copytree(live, copy)
    log.close()
    # The copy was taken while the log was open: no clean-shutdown marker, and a recovery point
    # checkpoint that lags (as it may, by up to recovery_point_checkpoint_ms).
    assert not os.path.exists(os.path.join(copy, CLEAN_SHUTDOWN_FILE))
    OffsetCheckpoint(os.path.join(copy, RECOVERY_POINT_FILE)).write(rp)
    return copy, log.segment_base_offsets, rp


def test_damage_in_the_segment_that_holds_the_recovery_point_only_cuts_above_it(
    tmp_path: str,
) -> None:
    """The segment that straddles the recovery point is checked batch by batch; damage above
    the recovery point is a torn tail and is cut; damage below it takes the log offline."""
    path, bases, rp = unclean_copy(tmp_path, segments=4, flushed_segments=2)
    straddling = max(b for b in bases if b < rp)
    batches = batches_of(seg_path(path, straddling))
    below = [b for b in batches if b[1] + RECORDS_PER_BATCH <= rp]
    above = [b for b in batches if b[1] >= rp]
    assert below and above, (straddling, rp, batches)
    # Above: cut, later segments deleted (the unflushed tail: Kafka's recovery).
    above_copy = str(tmp_path / "above" / "t-0")
    shutil.copytree(path, above_copy)
    pos, offset, _ = above[0]
    overwrite(seg_path(above_copy, straddling), pos + 8, struct.pack("<i", 0x7FFFFFF0))
    log = PartitionLog.open(above_copy, CONFIG, clock_ms=FakeClock())
    try:
        assert log.log_end_offset == offset
    finally:
        log.close()
    # Below: offline, nothing touched.
    pos, offset, _ = below[-1]
    overwrite(seg_path(path, straddling), pos + 8, struct.pack("<i", 0x7FFFFFF0))
    before = snapshot(path)
    with pytest.raises(LogCorruptedError) as e:
        PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    assert e.value.offset == offset and e.value.position == pos
    assert snapshot(path) == before


def test_a_gap_between_segments_below_the_recovery_point_is_offline(tmp_path: str) -> None:
    path = str(tmp_path / "t-0")
    log = build(path, segments=6)
    bases = log.segment_base_offsets
    log.close()
    os.unlink(seg_path(path, bases[3]))
    before = snapshot(path)
    with pytest.raises(LogCorruptedError) as e:
        PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    assert f"offset {bases[3]}" in str(e.value) and f"{bases[4]}" in str(e.value)
    assert snapshot(path) == before
    problems = tools.verify(path)
    assert len(problems) == 1, problems
    assert f"starts at offset {bases[4]}, expected {bases[3]}" in problems[0]


def test_a_corrupt_index_below_the_recovery_point_is_rebuilt(tmp_path: str) -> None:
    """Indices are derived data: damage there is repaired, not a reason to go offline."""
    path = str(tmp_path / "t-0")
    log = build(path, segments=4)
    bases, end = log.segment_base_offsets, log.log_end_offset
    log.close()
    index = os.path.join(path, segment_name(bases[1]) + ".index")
    with open(index, "rb") as f:
        first_rel = struct.unpack("<ii", f.read(8))[0]
    # The first entry now points into the middle of a batch: the open's sanity checks (sizes,
    # order, the last entry) cannot see that; the read that uses it rebuilds the index.
    overwrite(index, 4, struct.pack("<i", 3))
    log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    try:
        assert log.log_end_offset == end
        wanted = bases[1] + first_rel + 1
        records = log.read_records(wanted, 1)
        assert records and records[0].offset == wanted
        assert log.offline_error is None
    finally:
        log.close()
    assert tools.verify(path) == []


def test_verify_reports_a_corrupt_length_once_not_as_index_or_gap_problems(
    tmp_path: str,
) -> None:
    """A bad length stops the scan of its segment; the index entries past it and the next
    segment's start are unknowable then, and reporting them would name one fault three times.
    Each problem also says what the broker's recovery does with it."""
    path = str(tmp_path / "t-0")
    log = build(path, segments=4)
    bases = log.segment_base_offsets
    log.close()
    pos, _, _ = batches_of(seg_path(path, bases[1]))[1]
    overwrite(seg_path(path, bases[1]), pos + 8, struct.pack("<i", 40))
    problems = tools.verify(path)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{seg_path(path, bases[1])}: byte {pos}: ")
    assert "below the recovery point" in problems[0] and "offline" in problems[0]


def test_the_scrubber_finds_a_flipped_byte_that_reads_would_serve(tmp_path: str) -> None:
    """Fetches serve trusted data without checking it; the scrubber checks every closed
    segment's checksums, a budget at a time, and takes the log offline at the damage."""
    path = str(tmp_path / "t-0")
    log = build(path, segments=6)
    bases = log.segment_base_offsets
    # An undamaged log: passes go round and round; a call stops at the end of a pass.
    closed_bytes = sum(os.path.getsize(seg_path(path, b)) for b in bases[:-1])
    assert sum(log.scrub(4096) for _ in range(200)) >= closed_bytes
    assert log.scrub(10 * closed_bytes) <= closed_bytes
    # One byte of a record in the fourth segment: after the checksum field, so a read
    # serves it as it is.
    damaged = seg_path(path, bases[3])
    pos, base, size = batches_of(damaged)[2]
    with open(damaged, "r+b") as f:
        f.seek(pos + size - 3)
        byte = f.read(1)
        f.seek(pos + size - 3)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert log.read(base, 1)  # served, unchecked
    with pytest.raises(LogCorruptedError) as raised:
        for _ in range(1000):
            log.scrub(8192)
    text = str(raised.value)
    assert damaged in text and f"byte {pos}" in text and "checksum" in text, text
    assert isinstance(log.offline_error, LogCorruptedError)
    with pytest.raises(LogOfflineError):
        log.read(0, 1)
    log.close()


def test_the_scrubber_takes_a_log_whose_segment_was_cut_short_offline(tmp_path: str) -> None:
    """A closed segment file shorter than the log knows (cut by something else): the
    scrubber's read comes back short. That is damage, the log goes offline with
    LogCorruptedError; the read's SegmentDamage escaped before and ended the broker's
    scrubbing of every log."""
    path = str(tmp_path / "t-0")
    log = build(path, segments=4)
    bases = log.segment_base_offsets
    cut = seg_path(path, bases[1])
    pos, _, _ = batches_of(cut)[1]
    os.truncate(cut, pos + 10)
    with pytest.raises(LogCorruptedError) as raised:
        for _ in range(1000):
            log.scrub(8192)
    assert cut in str(raised.value) and "shorter than the log knows" in str(raised.value)
    assert isinstance(log.offline_error, LogCorruptedError)
    log.close()
