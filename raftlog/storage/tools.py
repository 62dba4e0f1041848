"""Read-only inspection of a partition directory: `dump` (like Kafka's dump-log tool) and `verify`.

Neither opens the log for writing nor runs recovery: they show the files exactly as they are,
so an operator can look at a crashed partition before a broker recovers it. `examine` returns
what it found in two lists, each entry naming the file and the byte position or index entry:

- problems: damage to the records themselves (a bad checksum or length, a torn tail, offsets out
  of order, a missing segment), which the broker either cuts (losing the unflushed records
  there) or refuses to serve (the partition stays offline); `raftlog storage verify` exits 1.
- notes: derived data that the broker rebuilds by itself from the batches: a missing, torn or
  stale index or time index, a missing or unreadable recovery-point or leader-epoch
  checkpoint. A live or just-refetched log routinely has some (its active segment's indices
  are written at roll and close), so they are not problems: `verify` prints them and exits 0.
  Each note says what rebuilds it and when.

`verify(path)` is the problems alone.

A segment may hold batches of both formats (raftlog's, magic 1; Kafka's v2, magic 2): `dump`
shows each batch's magic, and its checksum as the format has it (xxh3-64 for magic 1, 16 hex
digits; CRC-32C for magic 2, 8 hex digits). `dump --records` decompresses compressed v2
batches.

Gaps (log compaction): offsets never change, but a compacted log has offsets that hold no
record. A log that was ever compacted says so with a marker file in its directory
(`COMPACTED_MARKER_FILE`, written by the broker: storage/cleaner.py); in such a log, and only
there, gaps are not damage, as for the broker's recovery (segment.py's `gaps`). A batch may
start above where the one before ends (whole batches removed), a segment above where the
segment before ends, and its first batch above the segment's base offset (the base offset
names the file; the batch it was rolled at may be gone); a cleaned v2 batch keeps its base
offset and last offset delta but fewer records (its record offsets have holes), or none.
`verify` accepts these and counts them (`Findings.gaps`, `Findings.holes`); `dump` prints a
`gap:` line between batches and, for a batch with holes, its record count against its offset
span. What stays a problem: offsets that go backwards or overlap (a batch starting below where
the one before ends, or below its segment's base offset; a segment starting inside the
segment before), and a cleaned v2 batch whose record offsets go back or leave the batch (its
records are decoded for this; an ungapped batch's are not). In a log without the marker a
gap is damage as before (a lost segment file, a rewritten base offset). In a compacted log a
lost segment file, or a base offset whose bits flipped upwards (it lies outside the checksum),
reads as a gap; the flipped one is found at the batch after it, whose offsets then go back.

One fault, one problem: after a damaged batch the rest of its segment cannot be read, so the
index entries past it and the next segment's expected start are unknown; `verify` does not
report them (they would name the same damage again as an index mismatch and a gap). For a
partition directory, each damaged batch or gap also says what the broker's recovery does with
it: below the recovery point the partition stays offline and nothing is deleted; at or above it
the segment is cut there and later segments are deleted (log.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

from raftlog.errors import CorruptRecordError
from raftlog.records import (
    HEADER_SIZE,
    HEADER_SIZE_MIN,
    LOG_OVERHEAD,
    PREFIX_SIZE,
    batch_size_at,
    decode_records,
    unpack_header,
    validate_batch,
)
from raftlog.storage.checkpoint import CheckpointError, OffsetCheckpoint
from raftlog.storage.cleaner import COMPACTED_MARKER_FILE
from raftlog.storage.epoch_cache import LeaderEpochCache
from raftlog.storage.index import IndexFormatError, SparseIndex
from raftlog.storage.log import CLEAN_SHUTDOWN_FILE, EPOCH_CACHE_FILE, RECOVERY_POINT_FILE
from raftlog.storage.segment import INDEX_SUFFIX, TIMEINDEX_SUFFIX, parse_segment_name

CHUNK_BYTES = 1024 * 1024


# What rebuilds an index (the notes' last words); see segment.py's load() and log.py's
# _repair_index for the rules.
REBUILT_AT_OPEN = "derived data: the broker's next open rebuilds both index files from the batches"
REBUILT_BY_CHECK = (
    "derived data: the broker's next open checks this segment batch by batch and rebuilds its "
    "indices"
)
REBUILT_BY_READ = "derived data: the first read that uses it rebuilds the index"
EPOCHS_REBUILT = "derived data: the broker's next open rebuilds it from the batches' leader epochs"


@dataclass(frozen=True, slots=True)
class Findings:
    """What `examine` found: `problems` (damage to records; rc 1), `notes` (derived data the
    broker rebuilds by itself; see the module docstring), and what compaction left: `gaps`,
    the offset ranges [start, end) between batches that no batch holds, and `holes`, the
    offsets inside cleaned v2 batches that hold no record."""

    problems: tuple[str, ...]
    notes: tuple[str, ...]
    gaps: tuple[tuple[int, int], ...] = ()
    holes: int = 0


def offsets_step(expected: int, floor: int, base_offset: int) -> tuple[bool, int]:
    """Pure: a batch at `base_offset` after offsets that reach `expected`, in a segment whose
    base offset is `floor`: (whether it goes backwards or overlaps: damage, the size of the
    gap before it: compaction when > 0)."""
    backwards = base_offset < max(expected, floor)
    return backwards, 0 if backwards else base_offset - expected


def record_offsets_problem(offsets: list[int], base_offset: int, next_offset: int) -> str | None:
    """Pure: what is wrong with a batch's record offsets (they must increase and lie in
    [base_offset, next_offset)), or None."""
    previous = base_offset - 1
    for offset in offsets:
        if offset <= previous or offset >= next_offset:
            return (
                f"record offset {offset} follows {previous} in the batch at offsets "
                f"[{base_offset}, {next_offset})"
            )
        previous = offset
    return None


def _holes(header: tuple[int, ...]) -> int:
    """Offsets of a batch (raw header fields) that hold no record: a cleaned v2 batch's."""
    return header[6] + 1 - header[12]


def _holes_problem(b: ScannedBatch) -> str | None:
    """For a batch with holes (whose records a cleaner chose), whether its record offsets
    go back or leave it; None for an ungapped batch, whose records are not decoded."""
    if not _holes(b.header):
        return None
    base, next_offset = b.header[0], b.header[0] + b.header[6] + 1
    try:
        offsets = [r.offset for r in decode_records(b.data)]
    except CorruptRecordError as e:
        return str(e)
    return record_offsets_problem(offsets, base, next_offset)


@dataclass(frozen=True, slots=True)
class ScannedBatch:
    position: int
    size: int
    header: tuple[int, ...]  # raw header fields (BatchHeader's order), () if unreadable
    error: str | None  # None when the batch is valid
    data: bytes  # the batch bytes (empty when the length itself was impossible)


def segment_files(path: str) -> list[tuple[int, str]]:
    """(base offset, .log path) of the segments at `path` (a partition dir or one .log file)."""
    if os.path.isfile(path):
        base = parse_segment_name(os.path.basename(path))
        if base is None:
            raise ValueError(f"{path}: not a segment file (expected NNNNNNNNNNNNNNNNNNNN.log)")
        return [(base, path)]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: no such partition directory or segment file")
    out = []
    for name in sorted(os.listdir(path)):
        base = parse_segment_name(name)
        if base is not None:
            out.append((base, os.path.join(path, name)))
    return out


def scan_segment(log_path: str) -> Iterator[ScannedBatch]:
    """Every batch of a .log file with its validation result; stops after the first bad one."""
    with open(log_path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        pos = 0
        while pos < file_size:
            f.seek(pos)
            head = f.read(HEADER_SIZE)
            if len(head) < PREFIX_SIZE:
                yield ScannedBatch(
                    pos, len(head), (), f"torn batch header ({len(head)} bytes)", b""
                )
                return
            try:
                total = batch_size_at(head)
            except CorruptRecordError as e:
                why = str(e).replace("at byte 0", f"at byte {pos}")
                yield ScannedBatch(pos, file_size - pos, (), why, b"")
                return
            if total < HEADER_SIZE_MIN or pos + total > file_size:
                yield ScannedBatch(
                    pos,
                    file_size - pos,
                    _header_or_none(head),
                    f"impossible batch length {total - LOG_OVERHEAD} "
                    f"({file_size - pos} bytes left in file)",
                    b"",
                )
                return
            f.seek(pos)
            data = f.read(total)
            try:
                validate_batch(data)
                error = None
            except CorruptRecordError as e:
                error = str(e).replace("at byte 0", f"at byte {pos}")
            yield ScannedBatch(pos, total, _header_or_none(data), error, data)
            if error:
                return
            pos += total


def _header_or_none(data: bytes) -> tuple[int, ...]:
    """The raw header fields at the start of `data`, or () where they are not all there."""
    try:
        return unpack_header(data)
    except CorruptRecordError:
        return ()


def recovery_point_of(path: str) -> int | None:
    """The recovery point a broker's open would use for the partition directory `path`: the
    larger of its checkpoint and a clean-shutdown marker, 0 if neither is readable (log.py).
    None for a single segment file."""
    if not os.path.isdir(path):
        return None
    found = [0]
    for name in (RECOVERY_POINT_FILE, CLEAN_SHUTDOWN_FILE):
        try:
            value = OffsetCheckpoint(os.path.join(path, name)).read()
        except CheckpointError:
            value = None
        if value is not None:
            found.append(value)
    return max(found)


def _consequence(offset: int, recovery_point: int | None, later_segments: int, gap: bool) -> str:
    """What the broker's open does with damage at `offset` (see log.py's recovery rules)."""
    if recovery_point is None:
        return ""
    if offset < recovery_point:
        return (
            f" [offset {offset} is below the recovery point {recovery_point}: the broker keeps "
            "this partition offline and deletes nothing]"
        )
    if gap:
        action = f"deletes this segment file and the {later_segments} after it"
    else:
        action = "cuts the segment here" + (
            f" and deletes the {later_segments} segment files after it" if later_segments else ""
        )
    return (
        f" [offset {offset} is at or above the recovery point {recovery_point}: the broker's "
        f"recovery {action}]"
    )


def compacted(path: str) -> bool:
    """Whether the partition (or the segment file's partition) at `path` was ever compacted,
    so that its offsets may have gaps."""
    directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    return os.path.exists(os.path.join(directory, COMPACTED_MARKER_FILE))


def verify(path: str) -> list[str]:
    """Every problem found in the partition (or segment) at `path`; empty when all is well
    (notes aside: see `examine`)."""
    return list(examine(path).problems)


def examine(path: str) -> Findings:
    """The problems and notes of the partition (or segment) at `path`."""
    problems: list[str] = []
    notes: list[str] = _checkpoint_notes(path)
    recovery_point = recovery_point_of(path)
    segments = segment_files(path)
    may_gap = compacted(path)
    gaps: list[tuple[int, int]] = []
    holes = 0
    expected: int | None = None  # None: unknown (the start, or after a damaged segment)
    for i, (base, log_path) in enumerate(segments):
        later = len(segments) - i - 1
        if expected is not None and (base < expected or (base > expected and not may_gap)):
            where = (
                f"inside the segment before (which ends at {expected})"
                if may_gap
                else f"expected {expected}"
            )
            problems.append(
                f"{log_path}: segment starts at offset {base}, {where}"
                + _consequence(min(base, expected), recovery_point, later, gap=True)
            )
            expected = None
        if expected is None:
            expected = base
        starts: dict[int, tuple[int, int]] = {}  # position -> (base offset, max ts before)
        damaged_at: int | None = None
        running_max_ts = -1
        for b in scan_segment(log_path):
            if b.error:
                problems.append(
                    f"{log_path}: byte {b.position}: {b.error}"
                    + _consequence(expected, recovery_point, later, gap=False)
                )
                damaged_at = b.position
                break
            base_offset, last_delta, max_ts = b.header[0], b.header[6], b.header[8]
            backwards, gap = offsets_step(expected, base, base_offset)
            if backwards or (gap and not may_gap):
                why = (
                    f"below {max(expected, base)} (offsets go backwards or overlap)"
                    if may_gap
                    else f"expected {expected}"
                )
                problems.append(
                    f"{log_path}: byte {b.position}: batch has offset {base_offset}, {why}"
                    + _consequence(expected, recovery_point, later, gap=False)
                )
                damaged_at = b.position
                break
            if gap:
                gaps.append((expected, base_offset))
            wrong = _holes_problem(b)
            if wrong is not None:
                # No recovery consequence to tell: recovery checks batches, not the records
                # inside them, so the broker would serve this batch as it is.
                problems.append(
                    f"{log_path}: byte {b.position}: {wrong} (its checksum holds: the writer "
                    "of this cleaned batch put the records there; the broker serves it as it is)"
                )
                damaged_at = b.position
                break
            holes += _holes(b.header)
            starts[b.position] = (base_offset, running_max_ts)
            running_max_ts = max(running_max_ts, max_ts)
            expected = base_offset + last_delta + 1
        # The broker's open checks batch by batch (rebuilding the indices) every segment that
        # holds offsets at or above the recovery point; it only sanity-checks the others'.
        end = segments[i + 1][0] if later else expected
        checked = recovery_point is not None and (
            base >= recovery_point or (end is not None and end > recovery_point)
        )
        index_problems, index_notes = _verify_index(log_path, base, starts, damaged_at, checked)
        problems.extend(index_problems)
        notes.extend(index_notes)
        if damaged_at is not None:
            expected = None
    return Findings(tuple(problems), tuple(notes), tuple(gaps), holes)


def _checkpoint_notes(path: str) -> list[str]:
    """Notes on the derived checkpoints of a partition directory that its next open replaces:
    the recovery point (missing or unreadable: every segment is checked batch by batch) and
    the leader epoch cache (rebuilt from the batches)."""
    if not os.path.isdir(path) or not segment_files(path):
        return []
    notes = []
    rp_path = os.path.join(path, RECOVERY_POINT_FILE)
    try:
        missing = OffsetCheckpoint(rp_path).read() is None
        why = "missing"
    except CheckpointError as e:
        missing, why = True, f"unreadable ({e})"
    if missing:
        notes.append(
            f"{rp_path}: {why} (derived data: the broker's next open checks every segment "
            "batch by batch, and cuts damage it finds there instead of keeping it offline, "
            "unless a clean-shutdown marker holds the log end)"
        )
    epoch_path = os.path.join(path, EPOCH_CACHE_FILE)
    if not os.path.exists(epoch_path):
        notes.append(f"{epoch_path}: missing ({EPOCHS_REBUILT})")
    else:
        try:
            LeaderEpochCache.load(epoch_path)
        except CheckpointError as e:
            notes.append(f"{epoch_path}: unreadable ({e}) ({EPOCHS_REBUILT})")
    return notes


def _verify_index(
    log_path: str,
    base: int,
    starts: dict[int, tuple[int, int]],
    damaged_at: int | None,
    checked_at_open: bool,
) -> tuple[list[str], list[str]]:
    """(problems, notes) of the segment's indices; entries at or past `damaged_at` (the first
    damaged batch, whose rest of segment is unreadable) are not checked.

    Index files are derived data, so nearly everything here is a note saying what rebuilds
    it: the open rebuilds indices that break SparseIndex.load's rules or whose last offset
    entry misses its batch (segment.py), a read rebuilds an offset index whose entry misses its
    batch, and the open rebuilds every index of a segment it checks batch by batch
    (`checked_at_open`). A time index entry that disagrees with the batches while the file
    keeps those rules is the one thing nothing rebuilds (offset-for-time lookups would use it):
    a problem, with the remedy."""
    stem = log_path[: -len(".log")]
    index_path, time_path = stem + INDEX_SUFFIX, stem + TIMEINDEX_SUFFIX
    at_open = REBUILT_BY_CHECK if checked_at_open else REBUILT_AT_OPEN
    index = SparseIndex(index_path, time_path)
    try:
        # The open's own checks (missing or torn files, entries out of order or past the
        # segment's end), on the files as they are: read-only.
        index.load(os.path.getsize(log_path))
    except IndexFormatError as e:
        return [], [f"{e} ({at_open})"]
    problems, notes = [], []
    entries = zip(index.rels, index.positions, index.timestamps, strict=True)
    for i, (rel, position, ts) in enumerate(entries):
        if damaged_at is not None and position >= damaged_at:
            break
        found = starts.get(position)
        if found is None or found[0] != base + rel:
            # The open checks the last entry (rebuilding the index if it misses); a read
            # that uses another one finds no batch there and rebuilds it then.
            last = i == len(index) - 1
            notes.append(
                f"{index_path}: entry {i} maps offset {base + rel} to byte {position}, "
                f"where {'no batch starts' if found is None else f'offset {found[0]} starts'} "
                f"({at_open if last or checked_at_open else REBUILT_BY_READ})"
            )
        elif ts < found[1]:
            text = (
                f"{time_path}: entry {i} ({ts}, offset {base + rel}) disagrees with the "
                f"segment (batches before offset {base + rel} reach timestamp {found[1]})"
            )
            if checked_at_open:
                notes.append(f"{text} ({at_open})")
            else:
                problems.append(
                    f"{text}: nothing rebuilds it while the file keeps the index rules, and "
                    "lookups by time use it; delete both index files of this segment (the "
                    "broker's next open rebuilds them)"
                )
    return problems, notes


def dump(path: str, out: TextIO, records: bool = False) -> int:
    """Print every batch (and with `records` every record) at `path`; returns problems found."""
    problems = 0
    may_gap = compacted(path)
    expected: int | None = None  # where the offsets before reach; None: unknown
    for base, log_path in segment_files(path):
        out.write(f"Dumping {log_path}\n")
        if expected is None or base < expected:
            expected = base  # overlapping segments: each batch is still checked below
        for b in scan_segment(log_path):
            h = b.header
            if not h:
                out.write(f"position: {b.position} INVALID: {b.error}\n")
                problems += 1
                break
            backwards, gap = offsets_step(expected, base, h[0])
            if gap:
                out.write(
                    f"gap: offsets {expected}-{h[0] - 1} ({gap} offset{'s' * (gap > 1)}) "
                    + ("compacted\n" if may_gap else "MISSING (the log was never compacted)\n")
                )
                problems += not may_gap
            elif backwards:
                out.write(f"OVERLAP: batch at offset {h[0]} starts below {max(expected, base)}\n")
                problems += 1
            out.write(
                f"baseOffset: {h[0]} lastOffset: {h[0] + h[6]} count: {h[12]} "
                f"partitionLeaderEpoch: {h[2]} magic: {h[3]} position: {b.position} "
                f"size: {b.size} firstTimestamp: {h[7]} maxTimestamp: {h[8]} "
                f"producerId: {h[9]} producerEpoch: {h[10]} baseSequence: {h[11]} "
                f"checksum: {h[4]:#0{18 if h[3] == 1 else 10}x} valid: {b.error is None}\n"
            )
            if b.error:
                out.write(f"  INVALID: {b.error}\n")
                problems += 1
                break
            expected = max(expected, h[0] + h[6] + 1)
            if _holes(h):
                out.write(
                    f"  holes: {h[12]} record{'s' * (h[12] != 1)} in {h[6] + 1} offsets "
                    f"({_holes(h)} compacted)\n"
                )
            if records:
                for r in decode_records(b.data):
                    hdrs = "".join(f" {k}={v!r}" for k, v in r.headers)
                    out.write(
                        f"| offset: {r.offset} timestamp: {r.timestamp} "
                        f"key: {_show(r.key)} value: {_show(r.value)}"
                        + (f" headers:{hdrs}" if hdrs else "")
                        + "\n"
                    )
    return problems


def _show(b: bytes | None, limit: int = 80) -> str:
    if b is None:
        return "null"
    try:
        s = b.decode()
    except UnicodeDecodeError:
        s = b.hex()
    return s if len(s) <= limit else s[:limit] + f"...({len(b)} bytes)"
