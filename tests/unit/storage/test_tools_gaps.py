"""`storage verify` and `storage dump` on a compacted log: gaps are no damage, damage still is.

The segment files are written by hand (concatenated batches, as a log cleaner leaves them):
whole batches removed between batches and at a segment's start, cleaned v2 batches with
holes, and v2 batches without records, in a directory with the compacted marker; without it
the same gaps are damage (test_tools_cli.py has the ungapped cases).
"""

from __future__ import annotations

import io
import os

from raftlog.records import Record, encode_batch
from raftlog.records_v2 import KeptOffsets, encode_batch_v2
from raftlog.storage import tools
from raftlog.storage.cleaner import COMPACTED_MARKER_FILE
from raftlog.storage.segment import segment_name

from .test_tools_cli import raftlog

TS = 1_764_000_000_000


def own(base: int, count: int) -> bytes:
    return encode_batch([(b"k", b"v%d" % (base + i)) for i in range(count)], base)


def cleaned(base: int, last_offset_delta: int, kept: list[int]) -> bytes:
    records = [Record(b"k%d" % o, b"v%d" % o, (), TS + o, o) for o in kept]
    return encode_batch_v2(
        records, base_offset=base, kept=KeptOffsets(last_offset_delta, TS, TS + 100)
    )


def write_segments(
    path: str, segments: dict[int, list[bytes]], marked: bool = True
) -> dict[int, str]:
    """The segment files of a partition directory, with the compacted marker if `marked`."""
    os.makedirs(path, exist_ok=True)
    if marked:
        with open(os.path.join(path, COMPACTED_MARKER_FILE), "wb"):
            pass
    files = {}
    for base, batches in segments.items():
        files[base] = os.path.join(path, segment_name(base) + ".log")
        with open(files[base], "wb") as f:
            f.write(b"".join(batches))
    return files


COMPACTED = {
    0: [own(0, 3), cleaned(10, 9, [10, 13, 15]), cleaned(20, 4, [])],  # 0-2, 10-19, 20-24
    25: [own(27, 2), cleaned(30, 2, [31])],  # segment base 25: its first batch starts at 27
}


def test_verify_accepts_the_gaps_and_counts_them(tmp_path: str) -> None:
    path = os.path.join(str(tmp_path), "compacted-0")
    write_segments(path, COMPACTED)
    found = tools.examine(path)
    assert found.problems == ()
    assert found.gaps == ((3, 10), (25, 27), (29, 30))
    assert found.holes == 7 + 5 + 2  # in 10-19, 20-24 and 30-32
    run = raftlog("storage", "verify", path)
    assert run.returncode == 0, run.stdout
    assert run.stdout.splitlines()[-1] == (
        f"{path}: ok (3 gap(s) between batches, 10 offset(s); 14 offset(s) without a record "
        "inside cleaned batches: log compaction)"
    )


def test_without_the_marker_the_same_gaps_are_damage(tmp_path: str) -> None:
    path = os.path.join(str(tmp_path), "plain-0")
    files = write_segments(path, COMPACTED, marked=False)
    assert tools.verify(path) == [
        f"{files[0]}: byte {len(own(0, 3))}: batch has offset 10, expected 3 [offset 3 is at "
        "or above the recovery point 0: the broker's recovery cuts the segment here and "
        "deletes the 1 segment files after it]",
        f"{files[25]}: byte 0: batch has offset 27, expected 25 [offset 25 is at or above the "
        "recovery point 0: the broker's recovery cuts the segment here]",
    ]
    out = io.StringIO()
    assert tools.dump(path, out) == 3
    assert "gap: offsets 3-9 (7 offsets) MISSING (the log was never compacted)" in out.getvalue()
    # A single segment file is judged by its directory's marker.
    assert tools.compacted(files[0]) is False
    assert tools.compacted(write_segments(path + "-marked", COMPACTED)[0]) is True


def test_dump_shows_the_gaps_and_the_holes(tmp_path: str) -> None:
    path = os.path.join(str(tmp_path), "compacted-0")
    files = write_segments(path, COMPACTED)
    out = io.StringIO()
    assert tools.dump(path, out, records=True) == 0
    lines = out.getvalue().splitlines()
    shown = [line for line in lines if not line.startswith("baseOffset")]
    assert shown == [
        f"Dumping {files[0]}",
        "| offset: 0 timestamp: 0 key: k value: v0",
        "| offset: 1 timestamp: 0 key: k value: v1",
        "| offset: 2 timestamp: 0 key: k value: v2",
        "gap: offsets 3-9 (7 offsets) compacted",
        "  holes: 3 records in 10 offsets (7 compacted)",
        f"| offset: 10 timestamp: {TS + 10} key: k10 value: v10",
        f"| offset: 13 timestamp: {TS + 13} key: k13 value: v13",
        f"| offset: 15 timestamp: {TS + 15} key: k15 value: v15",
        "  holes: 0 records in 5 offsets (5 compacted)",
        f"Dumping {files[25]}",
        "gap: offsets 25-26 (2 offsets) compacted",
        "| offset: 27 timestamp: 0 key: k value: v27",
        "| offset: 28 timestamp: 0 key: k value: v28",
        "gap: offsets 29-29 (1 offset) compacted",
        "  holes: 1 record in 3 offsets (2 compacted)",
        f"| offset: 31 timestamp: {TS + 31} key: k31 value: v31",
    ]
    batch_lines = [line for line in lines if line.startswith("baseOffset")]
    assert [line.split(" count: ")[0] for line in batch_lines] == [
        "baseOffset: 0 lastOffset: 2",
        "baseOffset: 10 lastOffset: 19",
        "baseOffset: 20 lastOffset: 24",
        "baseOffset: 27 lastOffset: 28",
        "baseOffset: 30 lastOffset: 32",
    ]
    assert all(line.endswith("valid: True") for line in batch_lines)


def test_offsets_that_go_backwards_or_overlap_stay_problems(tmp_path: str) -> None:
    path = os.path.join(str(tmp_path), "overlap-0")
    files = write_segments(path, {0: [cleaned(10, 9, [10, 13]), own(18, 2)]})
    at = len(cleaned(10, 9, [10, 13]))
    assert tools.verify(path) == [
        f"{files[0]}: byte {at}: batch has offset 18, below 20 (offsets go backwards or "
        "overlap) [offset 20 is at or above the recovery point 0: the broker's recovery cuts "
        "the segment here]"
    ]
    out = io.StringIO()
    assert tools.dump(path, out) == 1
    assert "OVERLAP: batch at offset 18 starts below 20" in out.getvalue()
    # A batch below its segment's base offset.
    path = os.path.join(str(tmp_path), "below-base-0")
    files = write_segments(path, {5: [own(3, 2)]})
    assert tools.verify(path) == [
        f"{files[5]}: byte 0: batch has offset 3, below 5 (offsets go backwards or overlap) "
        "[offset 5 is at or above the recovery point 0: the broker's recovery cuts the "
        "segment here]"
    ]


def test_a_cleaned_batch_whose_record_offsets_go_back_is_a_problem(tmp_path: str) -> None:
    bad = encode_batch_v2(
        [Record(None, b"a", (), TS, 14), Record(None, b"b", (), TS, 12)],
        base_offset=10,
        kept=KeptOffsets(9, TS, TS),
    )
    path = os.path.join(str(tmp_path), "backwards-0")
    files = write_segments(path, {0: [own(0, 2), bad]})
    at = len(own(0, 2))
    assert tools.verify(path) == [
        f"{files[0]}: byte {at}: record offset 12 follows 14 in the batch at offsets [10, 20) "
        "(its checksum holds: the writer of this cleaned batch put the records there; the "
        "broker serves it as it is)"
    ]


def test_checksums_and_torn_tails_are_still_found_in_a_compacted_log(tmp_path: str) -> None:
    path = os.path.join(str(tmp_path), "damaged-0")
    files = write_segments(path, COMPACTED)
    with open(files[0], "r+b") as f:
        f.seek(len(own(0, 3)) + 70)  # inside the cleaned batch's records
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 1]))
    os.truncate(files[25], os.path.getsize(files[25]) - 3)
    problems = tools.verify(path)
    assert len(problems) == 2
    assert problems[0].startswith(f"{files[0]}: byte {len(own(0, 3))}: checksum (CRC-32C)")
    assert problems[1].startswith(f"{files[25]}: byte {len(own(27, 2))}: impossible batch length")
