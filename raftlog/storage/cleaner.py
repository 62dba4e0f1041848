"""Log compaction: the log cleaner's work on one partition log (Kafka's `Cleaner.doClean`).

A compacted log keeps, for every key, at least its last record: a clean rewrites the closed
segments below the first uncleanable offset, dropping each record whose key has a later
record in the cleaned range.

How a clean goes (`plan` on the log's thread, `run` on a worker thread, `install` on the
log's thread again):
1. `plan`: the cleanable range is the log's closed segments from the log start up to the
   first uncleanable offset: never the active segment, never at or past the high watermark
   (what a follower has not got may still be truncated), never a segment holding a record
   younger than min.compaction.lag.ms. Its dirty part starts at the offset the last clean
   ended at (the cleaner checkpoint). The log is due when the dirty part is at least
   min.cleanable.dirty.ratio of the range's bytes, or its oldest dirty record is older than
   max.compaction.lag.ms.
2. `run`: an offset map (key hash -> last offset) of the dirty part, bounded (`OffsetMap`);
   where it fills, the range ends at the last segment it holds whole. Then every segment of
   the range is rewritten, in groups whose old sizes fit one segment, into `.cleaned` files.
   Reads and writes together keep under an I/O budget (`Throttle`).
3. `install`: each group's `.cleaned` file becomes its `.swap` file (the commit point), the
   group's old files go, the `.swap` becomes the group's `.log` (`commit_groups`). A crash
   before a group's commit point leaves its old segments (recovery deletes `.cleaned` files);
   after it, recovery finishes the swap (`complete_swaps`): for each group the old segments
   or the new one, never a mix.

Rules of the rewrite (Kafka's):
- Offsets never change. A batch keeps its base offset, last offset delta, leader epoch and
  producer fields; where records go, it is rewritten as a v2 batch (records_v2.py) holding
  the kept records at their own offsets (raftlog's own batches become v2 batches: they cannot
  hold gaps). A batch that loses nothing is copied byte for byte.
- A record without a key is dropped (Kafka's cleaner does the same; a compacted topic refuses
  them on produce).
- A tombstone (a key with a null value) is kept by the clean that first sees it, which stamps
  its batch with a delete horizon (now + delete.retention.ms: DELETE_HORIZON_BIT); a clean
  after the horizon drops it. A consumer that reads the log from the start in less than
  delete.retention.ms so sees every delete.
- An idempotent producer's last batch is kept, with no records if need be, so that its
  sequence survives (a retry after a clean is still recognised as a duplicate).
- Compressed batches are decompressed and the kept records compressed again with the same
  codec.

Pure except for the file I/O of `run` and `install`; no asyncio.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import xxhash

from raftlog.errors import CleanFailedError, CorruptRecordError
from raftlog.invariants import InvariantError
from raftlog.record_types import PREFIX_SIZE, BatchHeader, Record
from raftlog.records import MAGIC_V2, batch_size_at, decode_records, validate_batch
from raftlog.records_v2 import (
    COMPRESSION_MASK,
    DELETE_HORIZON_BIT,
    TIMESTAMP_TYPE_BIT,
    KeptOffsets,
    encode_batch_v2,
)
from raftlog.storage.checkpoint import fsync_dir
from raftlog.storage.index import SparseIndex
from raftlog.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    NO_TIMESTAMP,
    TIMEINDEX_SUFFIX,
    segment_name,
)

if TYPE_CHECKING:
    from raftlog.storage.config import LogConfig
    from raftlog.storage.segment import LogSegment

log = logging.getLogger("raftlog.storage.log")

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
# Where a log's cleaner checkpoint (the offset its last clean ended at) and its compacted
# marker live: a log that was ever compacted may hold gaps, whatever its policy is now.
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
COMPACTED_MARKER_FILE = "compacted"
# Keys the offset map holds by default: each entry is a 128-bit key hash and an offset in a
# dict, 122 bytes a key in a full map of 1,000,000 (42 of the dict's table, 48 the hash, 32 the
# offset; measured by bench/cleaner_bench.py), up to 170 during the dict's last resize: about
# 122 MB, 170 MB at the peak. A dirty part with more keys is cleaned over several passes.
OFFSET_MAP_KEYS_DEFAULT = 1_000_000
READ_CHUNK_BYTES = 1 << 20


class OffsetMap:
    """Key hash -> the last offset seen for it, holding at most `keys_max` keys.

    Keys are their xxh3-128 hashes: two keys colliding (about 1 in 2^128 per pair) would make
    the older one's last record look superseded; Kafka's map uses 128-bit MD5 for the same
    reason."""

    __slots__ = ("_map", "keys_max")

    def __init__(self, keys_max: int = OFFSET_MAP_KEYS_DEFAULT):
        if keys_max < 1:
            raise InvariantError(f"offset map of {keys_max} keys")
        self.keys_max = keys_max
        self._map: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._map)

    def room_for(self, new_keys: int) -> bool:
        return len(self._map) + new_keys <= self.keys_max

    def put(self, key: bytes, offset: int) -> None:
        self._map[xxhash.xxh3_128_intdigest(key)] = offset

    def new_keys(self, keys: list[bytes]) -> int:
        """How many of `keys` the map does not hold yet (counting each once)."""
        m = self._map
        return len({h for k in keys if (h := xxhash.xxh3_128_intdigest(k)) not in m})

    def latest(self, key: bytes) -> int:
        """The last offset of `key` in the mapped range; -1 if it has none there."""
        return self._map.get(xxhash.xxh3_128_intdigest(key), -1)


class Throttle:
    """Keeps a worker's bytes under `bytes_per_s` by sleeping (Kafka's cleaner Throttler);
    0 means no limit. Every read and write of a clean passes through `spend`, so it is also
    where a clean asked to stop (`cancelled`) stops."""

    def __init__(self, bytes_per_s: int, cancelled: Callable[[], bool] | None = None):
        self.bytes_per_s = bytes_per_s
        self.cancelled = cancelled
        self._start = time.monotonic()
        self._bytes = 0

    def spend(self, nbytes: int) -> None:
        if self.cancelled is not None and self.cancelled():
            raise CleanFailedError("the clean was stopped")
        if self.bytes_per_s <= 0:
            return
        self._bytes += nbytes
        due = self._start + self._bytes / self.bytes_per_s
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        elif wait < -1.0:
            # Idle for a while (waiting on the disk): a budget unspent then is not spent later.
            self._start, self._bytes = time.monotonic(), 0


@dataclass(frozen=True, slots=True)
class SegmentView:
    """A closed segment as a clean sees it: `fd` is the clean's own duplicate (closed by
    `CleanPlan.close`), `end` the next segment's base offset, `first_ts` its first batch's
    max timestamp (its age, for max.compaction.lag.ms), `path` its file (a clean in another
    process opens it by that)."""

    base: int
    end: int
    size: int
    fd: int
    first_ts: int
    path: str = ""


@dataclass(slots=True)
class CleanPlan:
    name: str
    log_dir: str
    segments: list[SegmentView]  # the cleanable range, from the log start, in order
    first_dirty: int
    end: int  # the first uncleanable offset: segments[-1].end
    producer_last: dict[int, int]  # producer id -> last offset of its last batch
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    index_interval: int
    generation: int  # the log's, when planned: install refuses a log changed since

    def close(self) -> None:
        for seg in self.segments:
            os.close(seg.fd)

    @property
    def dirty_bytes(self) -> int:
        return sum(s.size for s in self.segments if s.base >= self.first_dirty)

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.segments)


@dataclass(slots=True)
class CleanedGroup:
    """Old segments [base, end) rewritten into one file at `path` (a `.cleaned` file), with
    its indices beside it (`.index.cleaned`, `.timeindex.cleaned`), built as it was written:
    the swap only renames them, so the event loop never walks a cleaned segment."""

    base: int
    end: int
    old_bases: list[int]
    path: str
    size: int


@dataclass(slots=True)
class CleanResult:
    plan: CleanPlan
    end: int  # cleaned up to here (below plan.end where the offset map filled)
    groups: list[CleanedGroup] = field(default_factory=list)
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    seconds: float = 0.0


# -- choosing what to clean ----------------------------------------------------------------


def uncleanable_from(
    closed: list[tuple[int, int, int]], active_base: int, max_offset: int, now_ms: int, lag_ms: int
) -> int:
    """The first uncleanable offset: a segment base. `closed` holds (base, end, max timestamp)
    of the closed segments in order; the range stops before the first that ends past
    `max_offset` (the high watermark) or holds a record younger than `lag_ms`."""
    end = active_base
    for base, seg_end, max_ts in closed:
        if seg_end > max_offset or (lag_ms > 0 and max_ts > now_ms - lag_ms):
            return min(base, end)
    return end


def cleanable(
    config: LogConfig,
    segments: Sequence[LogSegment],
    bases: Sequence[int],
    first_dirty: int,
    max_offset: int,
    now_ms: int,
) -> list[SegmentView] | None:
    """The closed segments a clean of the log would rewrite (their own fds), or None where it
    is not due: nothing dirty below the first uncleanable offset, or a dirty ratio under
    min.cleanable.dirty.ratio while the oldest dirty record is younger than
    max.compaction.lag.ms."""
    closed = list(zip(segments, bases[1:], strict=False))
    end = uncleanable_from(
        [(s.base_offset, e, s.max_timestamp) for s, e in closed],
        bases[-1],
        max_offset,
        now_ms,
        config.min_compaction_lag_ms,
    )
    views = [
        SegmentView(s.base_offset, e, s.size, s.fd, s.first_batch_timestamp, s.log_path)
        for s, e in closed
        if e <= end
    ]
    dirty = [v for v in views if v.base >= first_dirty]
    if not dirty:
        return None
    ratio = dirty_ratio([(v.base, v.size) for v in views], first_dirty)
    overdue = dirty[0].first_ts >= 0 and now_ms - dirty[0].first_ts > config.max_compaction_lag_ms
    if ratio < config.min_cleanable_dirty_ratio and not overdue:
        return None
    return views


def dirty_ratio(sizes: list[tuple[int, int]], first_dirty: int) -> float:
    """Dirty bytes / all bytes of (base, size) segments; 0 for an empty range."""
    total = sum(size for _, size in sizes)
    dirty = sum(size for base, size in sizes if base >= first_dirty)
    return dirty / total if total else 0.0


# -- reading segments ----------------------------------------------------------------------


def iter_batches(
    seg: SegmentView, throttle: Throttle | None = None
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every batch of `seg`, checked (validate_batch), as (header, bytes). Raises
    CorruptRecordError naming the file offset of a damaged batch (a clean never writes what
    it could not read whole)."""
    pos = 0
    buf = b""
    at = 0
    while pos < seg.size:
        rel = pos - at
        if rel + PREFIX_SIZE > len(buf):
            buf = os.pread(seg.fd, min(READ_CHUNK_BYTES, seg.size - pos), pos)
            at, rel = pos, 0
            if throttle is not None:
                throttle.spend(len(buf))
        size = batch_size_at(buf, rel)
        if rel + size > len(buf):
            buf = os.pread(seg.fd, max(size, min(READ_CHUNK_BYTES, seg.size - pos)), pos)
            at, rel = pos, 0
            if throttle is not None:
                throttle.spend(len(buf))
        view = memoryview(buf)[rel : rel + size]
        if len(view) != size:
            raise CorruptRecordError(
                f"segment {seg.base}: batch at byte {pos} cut short ({len(view)} of {size} bytes)"
            )
        try:
            header = validate_batch(view, 0, size)
        except CorruptRecordError as e:
            raise CorruptRecordError(f"segment {seg.base}, byte {pos}: {e}") from None
        yield header, view
        pos += size


# -- the offset map ------------------------------------------------------------------------


def map_dirty(plan: CleanPlan, offsets: OffsetMap, throttle: Throttle | None = None) -> int:
    """Fill `offsets` from the dirty segments in order; returns where the mapped range ends:
    plan.end, or the base of the first segment the map could not hold whole (then not mapped
    at all)."""
    for seg in plan.segments:
        if seg.base < plan.first_dirty:
            continue
        batches: list[tuple[list[bytes], list[int]]] = []
        keys: list[bytes] = []
        for header, view in iter_batches(seg, throttle):
            records = decode_records(view, 0, header)
            ks = [r.key for r in records if r.key is not None]
            keys.extend(ks)
            batches.append((ks, [r.offset for r in records if r.key is not None]))
        if not offsets.room_for(offsets.new_keys(keys)):
            if len(offsets) == 0:
                raise InvariantError(
                    f"{plan.name}: segment {seg.base} alone holds more keys than the offset "
                    f"map's {offsets.keys_max}"
                )
            return seg.base
        for ks, os_ in batches:
            for k, o in zip(ks, os_, strict=True):
                offsets.put(k, o)
    return plan.end


# -- rewriting -----------------------------------------------------------------------------


def retained(
    header: BatchHeader,
    view: memoryview,
    offsets: OffsetMap,
    plan: CleanPlan,
    result: CleanResult,
) -> bytes | memoryview | None:
    """The batch as the clean writes it: `view` itself where it keeps everything, a rewritten
    v2 batch, or None where nothing of it stays (see the module rules)."""
    records = decode_records(view, 0, header)
    result.records_read += len(records)
    v2 = header.magic == MAGIC_V2
    flagged = v2 and bool(header.attributes & DELETE_HORIZON_BIT)
    horizon_passed = flagged and plan.now_ms >= header.first_timestamp
    kept: list[Record] = []
    tombstones = 0
    for r in records:
        if r.key is None or offsets.latest(r.key) > r.offset:
            continue
        if r.value is None:
            if horizon_passed:
                result.tombstones_removed += 1
                continue
            tombstones += 1
        kept.append(r)
    result.records_kept += len(kept)
    stamp = tombstones > 0 and not flagged
    if not kept:
        last_offset = header.base_offset + header.last_offset_delta
        if plan.producer_last.get(header.producer_id, -2) != last_offset:
            return None
        if not records:
            return view  # already its producer's empty last batch
    elif len(kept) == len(records) and not stamp:
        return view
    if stamp:
        base_ts, with_horizon = plan.now_ms + plan.delete_retention_ms, True
    elif flagged and tombstones:
        base_ts, with_horizon = header.first_timestamp, True
    else:
        # No tombstone left: an ordinary base timestamp again (the first kept record's).
        base_ts = min((r.timestamp for r in kept), default=header.max_timestamp)
        with_horizon = False
    attributes = header.attributes if v2 else 0
    return encode_batch_v2(
        kept,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        compression=attributes & COMPRESSION_MASK,
        timestamp_type=attributes & TIMESTAMP_TYPE_BIT,
        kept=KeptOffsets(header.last_offset_delta, base_ts, header.max_timestamp, with_horizon),
    )


def groups_of(segments: list[SegmentView], end: int, segment_bytes: int) -> list[list[SegmentView]]:
    """The segments below `end` in runs whose old sizes add up to at most `segment_bytes`
    (each at least one segment) and whose offsets span less than 2^31 (the index's relative
    offsets)."""
    out: list[list[SegmentView]] = []
    for seg in segments:
        if seg.base >= end:
            break
        group = out[-1] if out else None
        if (
            group is not None
            and sum(s.size for s in group) + seg.size <= segment_bytes
            and seg.end - group[0].base < 2**31
        ):
            group.append(seg)
        else:
            out.append([seg])
    return out


def cleaned_path(log_dir: str, base: int) -> str:
    return os.path.join(log_dir, segment_name(base) + LOG_SUFFIX + CLEANED_SUFFIX)


def swap_path(log_dir: str, base: int, end: int) -> str:
    return os.path.join(log_dir, f"{segment_name(base)}.{segment_name(end)}{SWAP_SUFFIX}")


def run(
    plan: CleanPlan,
    keys_max: int,
    bytes_per_s: int,
    cancelled: Callable[[], bool] | None = None,
) -> CleanResult:
    """Map the dirty part and write the cleaned groups (`.cleaned` files, fsynced); the log
    is not changed. On any error the `.cleaned` files written so far are removed."""
    started = time.monotonic()
    throttle = Throttle(bytes_per_s, cancelled)
    offsets = OffsetMap(keys_max)
    end = map_dirty(plan, offsets, throttle)
    result = CleanResult(plan, end)
    try:
        for group in groups_of(plan.segments, end, plan.segment_bytes):
            result.groups.append(_rewrite(plan, group, offsets, throttle, result))
    except BaseException:
        discard(result)
        raise
    result.bytes_read = sum(s.size for s in plan.segments if s.base < end)
    result.seconds = time.monotonic() - started
    return result


def _rewrite(
    plan: CleanPlan,
    group: list[SegmentView],
    offsets: OffsetMap,
    throttle: Throttle,
    result: CleanResult,
) -> CleanedGroup:
    base = group[0].base
    path = cleaned_path(plan.log_dir, base)
    index = SparseIndex(*_cleaned_indices_at(plan.log_dir, base))
    since_index, max_ts = 0, NO_TIMESTAMP
    # A new file, never one an earlier clean (a cleaner process orphaned by a crash of its
    # broker, still writing) may hold open.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    written = 0
    try:
        pending: list[bytes | memoryview] = []
        pending_bytes = 0
        for seg in group:
            for header, view in iter_batches(seg, throttle):
                out = retained(header, view, offsets, plan, result)
                if out is None:
                    continue
                # The index entries LogSegment.note_batch would make.
                at = written + pending_bytes
                if at > 0 and since_index >= plan.index_interval:
                    index.add(header.base_offset - base, at, max_ts)
                    since_index = 0
                since_index += len(out)
                max_ts = max(max_ts, header.max_timestamp)
                pending.append(bytes(out) if isinstance(out, memoryview) else out)
                pending_bytes += len(out)
                if pending_bytes >= READ_CHUNK_BYTES:
                    written += _write_all(fd, pending, written)
                    throttle.spend(pending_bytes)
                    pending, pending_bytes = [], 0
        if pending:
            written += _write_all(fd, pending, written)
            throttle.spend(pending_bytes)
        os.fsync(fd)
    finally:
        os.close(fd)
    for stale in _cleaned_indices_at(plan.log_dir, base):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)  # new files, as for the .cleaned segment above
    index.rewrite()
    result.bytes_written += written
    return CleanedGroup(base, group[-1].end, [s.base for s in group], path, written)


def _write_all(fd: int, parts: list[bytes | memoryview], position: int) -> int:
    data = b"".join(parts)
    view = memoryview(data)
    done = 0
    while done < len(data):
        done += os.pwrite(fd, view[done:], position + done)
    return done


def discard(result: CleanResult) -> None:
    """Remove a clean's `.cleaned` files (it is not installed)."""
    for g in result.groups:
        for path in (g.path, *_cleaned_indices(g)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _cleaned_indices(group: CleanedGroup) -> tuple[str, str]:
    return _cleaned_indices_at(os.path.dirname(group.path), group.base)


def _cleaned_indices_at(log_dir: str, base: int) -> tuple[str, str]:
    stem = os.path.join(log_dir, segment_name(base))
    return stem + INDEX_SUFFIX + CLEANED_SUFFIX, stem + TIMEINDEX_SUFFIX + CLEANED_SUFFIX


# -- swapping ------------------------------------------------------------------------------


def commit_groups(log_dir: str, groups: Sequence[CleanedGroup]) -> None:
    """Make each group's cleaned file the segment of its [base, end): rename it to its `.swap`
    name (the group's commit point; one directory fsync makes them all durable), remove the old
    segments' files, rename each swap to its group's `.log`, fsync the directory again.
    `complete_swaps` finishes a group whose swap a crash interrupted; one whose rename had not
    reached the disk is still old. Two fsyncs however many groups: a clean of 1 MiB segments
    swaps a hundred groups at once, on the broker's event loop."""
    swaps = []
    for g in groups:
        swap = swap_path(log_dir, g.base, g.end)
        os.rename(g.path, swap)
        swaps.append((swap, g.base, g.end))
    fsync_dir(log_dir)
    _finish_swaps(log_dir, swaps)
    # Derived data, in place after the swap: lost to a crash, recovery rebuilds them.
    for g in groups:
        for cleaned in _cleaned_indices(g):
            os.rename(cleaned, cleaned[: -len(CLEANED_SUFFIX)])


def _finish_swaps(log_dir: str, swaps: Sequence[tuple[str, int, int]]) -> None:
    """Remove the files of the old segments each (swap, base, end) replaces, rename each swap
    to its base's `.log` (which replaces the old segment of that base in one step), fsync."""
    ranges = sorted((base, end) for _, base, end in swaps)
    starts = [base for base, _ in ranges]
    for entry in os.listdir(log_dir):
        stem, dot, suffix = entry.partition(".")
        if not dot or not stem.isdigit() or len(stem) != 20 or "." + suffix not in _SEGMENT_FILES:
            continue
        offset = int(stem)
        k = bisect.bisect_right(starts, offset) - 1
        if k >= 0 and offset < ranges[k][1] and not (offset == starts[k] and suffix == "log"):
            os.unlink(os.path.join(log_dir, entry))
    for swap, base, _ in swaps:
        os.rename(swap, os.path.join(log_dir, segment_name(base) + LOG_SUFFIX))
    fsync_dir(log_dir)


_SEGMENT_FILES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX)


def complete_swaps(log_dir: str) -> list[int]:
    """At open, before the segments load: remove `.cleaned` files (cleans that never
    committed) and finish every swap that did. Returns the bases of the segments swapped in
    (their indices are gone: the caller rebuilds them)."""
    swapped: list[int] = []
    swaps: list[tuple[str, int, int]] = []
    for entry in sorted(os.listdir(log_dir)):
        path = os.path.join(log_dir, entry)
        if entry.endswith(CLEANED_SUFFIX):
            os.unlink(path)
        elif entry.endswith(SWAP_SUFFIX):
            parts = entry[: -len(SWAP_SUFFIX)].split(".")
            if len(parts) != 2 or not all(p.isdigit() for p in parts):
                log.warning(
                    "%s: ignoring a swap file with a name not a clean's: %s", log_dir, entry
                )
                continue
            base, end = int(parts[0]), int(parts[1])
            log.warning(
                "%s: finishing the swap of cleaned segment %d (offsets [%d, %d)) a crash "
                "interrupted",
                log_dir,
                base,
                base,
                end,
            )
            swaps.append((path, base, end))
            swapped.append(base)
    if swaps:
        _finish_swaps(log_dir, swaps)
    return swapped
