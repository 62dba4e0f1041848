"""One segment of a partition log: a `.log` file of whole batches plus its sparse indices.

Files are named by the segment's base offset, zero-padded to 20 digits so they sort by name::

    00000000000000000000.log        batches, back to back, exactly as on the wire
    00000000000000000000.index      offset -> position (see index.py)
    00000000000000000000.timeindex  timestamp -> offset (see index.py)

Rules this module keeps:
- A segment holds offsets [base_offset, next_offset); batch n+1 starts where batch n ends and
  its base offset is batch n's last offset + 1, or, in a compacted log's segment (`gaps`),
  above it: offsets never change, so compaction leaves gaps (cleaner.py). A base offset at or
  below the previous batch's last offset is damage in every log.
- `size` is the byte length of the valid prefix, which is the whole file except during an
  append; readers never look past `size`.
- The indices are derived: `check()` checks every batch (length, magic, count, checksum,
  offsets) and rebuilds them; `load()` trusts a segment below the recovery point but rebuilds
  its indices if they break their rules.
- Damage found in the batches is raised as `SegmentDamage` (file, byte, offset) or, by
  `check()`, returned; this module never truncates on its own: the owning log decides whether
  the damage may be cut (a torn tail above the recovery point, `cut()`) or not.
- Batches are of either format records.py knows, side by side: raftlog's own (magic 1) and
  Kafka's record batch v2 (magic 2), stored as sent. Headers are read only through records.py's
  functions that dispatch on the magic byte (`unpack_header`, `batch_size_at`,
  `base_offset_at`, `validate_batch`), never with one format's struct; the raw header tuples
  they give have the same fields in the same order for both (record_types.BatchHeader).
- One writer (the owning PartitionLog). No sockets, no asyncio.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from raftlog.errors import CorruptRecordError
from raftlog.records import (
    HEADER_SIZE,
    HEADER_SIZE_MIN,
    LOG_OVERHEAD,
    PREFIX_SIZE,
    base_offset_at,
    batch_size_at,
    unpack_header,
    validate_batch,
)
from raftlog.storage.index import IndexFormatError, SparseIndex

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
# Bytes read at a time when walking batch headers or checking batches during recovery.
SCAN_WINDOW_BYTES = 16 * 1024
RECOVERY_CHUNK_BYTES = 1024 * 1024
NO_TIMESTAMP = -1


class SegmentDamage(Exception):
    """The batches of a segment file are damaged at `position`.

    `offset` is the offset the batch there should start with (-1 where the reader does not
    know it); `reason` says what is wrong, without the file and byte. Internal to the storage
    layer: PartitionLog turns it into LogCorruptedError (or cuts a torn tail), so it is not a
    RaftlogError with a wire code of its own.
    """

    def __init__(self, log_path: str, position: int, offset: int, reason: str):
        where = f"byte {position}" + (f" (offset {offset})" if offset >= 0 else "")
        super().__init__(f"{log_path}: {where}: {reason}")
        self.log_path = log_path
        self.position = position
        self.offset = offset
        self.reason = reason


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_segment_name(filename: str) -> int | None:
    """The base offset in a `.log` file name, or None if the name is not a segment's."""
    stem, dot, suffix = filename.partition(".")
    if dot and "." + suffix == LOG_SUFFIX and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class LogSegment:
    __slots__ = (
        "base_offset",
        "bytes_since_index",
        "checked_epochs",
        "dir",
        "fd",
        "first_batch_timestamp",
        "gaps",
        "index",
        "index_interval",
        "log_path",
        "max_timestamp",
        "next_offset",
        "size",
        "unflushed",
    )

    def __init__(self, directory: str, base_offset: int, fd: int):
        self.dir = directory
        self.base_offset = base_offset
        self.fd = fd
        stem = os.path.join(directory, segment_name(base_offset))
        self.log_path = stem + LOG_SUFFIX
        self.index = SparseIndex(stem + INDEX_SUFFIX, stem + TIMEINDEX_SUFFIX)
        # Invariant: base_offset <= next_offset; size == bytes of whole batches in the file.
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        # Max timestamp of the first batch: the segment's age for `segment_ms` (as Kafka).
        self.first_batch_timestamp = NO_TIMESTAMP
        self.bytes_since_index = 0
        # Set by the owning log from its config; tools that only read keep the default.
        self.index_interval = 4096
        # A compacted log's segment: a batch may start above the previous one's next offset
        # (the batches between were compacted away); offsets still only go up.
        self.gaps = False
        self.unflushed = False
        # After check(): (epoch, first offset) wherever the valid batches' leader epoch changed.
        self.checked_epochs: list[tuple[int, int]] = []

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: str, base_offset: int) -> LogSegment:
        path = os.path.join(directory, segment_name(base_offset) + LOG_SUFFIX)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        seg = cls(directory, base_offset, fd)
        seg.index.delete_files()
        return seg

    @classmethod
    def open(cls, directory: str, base_offset: int) -> LogSegment:
        path = os.path.join(directory, segment_name(base_offset) + LOG_SUFFIX)
        fd = os.open(path, os.O_RDWR)
        seg = cls(directory, base_offset, fd)
        seg.size = os.fstat(fd).st_size
        return seg

    def load(self) -> None:
        """Open a segment that was flushed before the crash (below the recovery point).

        Loads the indices (rebuilding them if torn or inconsistent) and walks the batch headers
        after the last index entry to learn next_offset and max_timestamp. Raises SegmentDamage
        if the headers do not chain; the files are then left as they were.
        """
        try:
            self.index.load(self.size)
            rel, pos = (
                (self.index.rels[-1], self.index.positions[-1]) if len(self.index) else (0, 0)
            )
            self._check_index_entry(rel, pos)
        except (IndexFormatError, SegmentDamage) as e:
            # The index is derived data: if it disagrees with the batches, rebuild it from
            # them. If the batches themselves do not chain, the rebuild raises SegmentDamage.
            log.warning("rebuilding index of %s: %s", self.log_path, e)
            self.rebuild_index()
            return
        max_ts = self.index.timestamps[-1] if len(self.index) else NO_TIMESTAMP
        self.max_timestamp = max_ts
        self._walk(pos, rebuild_index=False, expected_offset=self.base_offset + rel)

    def rebuild_index(self) -> None:
        """Rebuild both indices from the batch headers, and write them; raises SegmentDamage
        (leaving the index files as they were) if the headers do not chain."""
        saved = (self.max_timestamp, self.first_batch_timestamp)
        self.index.clear()
        self.max_timestamp = self.first_batch_timestamp = NO_TIMESTAMP
        try:
            self._walk(0, rebuild_index=True)
        except SegmentDamage:
            self.max_timestamp, self.first_batch_timestamp = saved
            raise
        self.index.rewrite()

    def _check_index_entry(self, rel: int, pos: int) -> None:
        if pos == 0:
            return
        head = os.pread(self.fd, PREFIX_SIZE, pos)
        try:
            found = base_offset_at(head)
        except CorruptRecordError:
            found = -1
        if found != self.base_offset + rel:
            raise IndexFormatError(
                f"last index entry ({rel}, {pos}) does not point at a batch with offset "
                f"{self.base_offset + rel}"
            )

    def _walk(self, start: int, rebuild_index: bool, expected_offset: int | None = None) -> None:
        """Walk headers from `start` to the end of file, setting next_offset and max_timestamp.

        Raises SegmentDamage naming the byte and the offset expected there if they do not chain.
        """
        expected = self.base_offset if expected_offset is None else expected_offset
        if start == 0:
            self.bytes_since_index = 0
        pos = start
        headers = self.iter_headers(start, self.size)
        while True:
            try:
                pos, h = next(headers)
            except StopIteration:
                break
            except SegmentDamage as e:
                raise SegmentDamage(self.log_path, e.position, expected, e.reason) from None
            base_offset, size, last_delta, max_ts = h[0], h[1] + LOG_OVERHEAD, h[6], h[8]
            if base_offset != expected and not (self.gaps and base_offset > expected):
                raise SegmentDamage(self.log_path, pos, expected, f"batch has offset {base_offset}")
            if last_delta < 0:
                # Offsets never go backwards; without this check a bit flip here could make a
                # damaged segment look as if it ended below the recovery point, and be trusted.
                raise SegmentDamage(
                    self.log_path, pos, expected, f"batch has last offset delta {last_delta}"
                )
            if rebuild_index or pos > start:
                self.note_batch(pos, base_offset, size, max_ts, index=rebuild_index)
            else:
                self.bytes_since_index = size
                if max_ts > self.max_timestamp:
                    self.max_timestamp = max_ts
            if pos == 0:
                self.first_batch_timestamp = max_ts
            expected = base_offset + last_delta + 1
        self.next_offset = expected
        if self.first_batch_timestamp == NO_TIMESTAMP and self.size:
            self.first_batch_timestamp = unpack_header(os.pread(self.fd, HEADER_SIZE, 0))[8]

    def check(self) -> tuple[int, str]:
        """Check every batch and rebuild the indices in memory; change no file.

        Returns (bytes of the valid prefix, why the byte after it is invalid, or "" if the whole
        file is valid). Afterwards `next_offset` is the offset the first invalid batch should
        start with, and `size` the file size: `cut()` then removes the invalid rest, or the
        caller refuses to (damage below the recovery point). The checks: the length fits the
        file, magic, record count against the lengths table, checksum, and that offsets
        continue without a gap (or, with `gaps`, go up).
        """
        self.index.clear()
        self.max_timestamp = NO_TIMESTAMP
        self.first_batch_timestamp = NO_TIMESTAMP
        self.bytes_since_index = 0
        self.checked_epochs = []
        file_size = os.fstat(self.fd).st_size
        pos, expected, reason = 0, self.base_offset, ""
        buf, buf_at = b"", 0
        while pos < file_size:
            rel = pos - buf_at
            if rel + HEADER_SIZE > len(buf):
                buf, buf_at, rel = os.pread(self.fd, RECOVERY_CHUNK_BYTES, pos), pos, 0
            if len(buf) - rel < PREFIX_SIZE:
                reason = f"torn batch header ({len(buf) - rel} bytes)"
                break
            try:
                total = batch_size_at(buf, rel)
            except CorruptRecordError as e:
                reason = str(e).replace(f"at byte {rel}", f"at byte {pos}")
                break
            if total < HEADER_SIZE_MIN or pos + total > file_size:
                reason = (
                    f"impossible batch length {total - LOG_OVERHEAD} "
                    f"({file_size - pos} bytes left in file)"
                )
                break
            if rel + total > len(buf):
                buf = os.pread(self.fd, max(RECOVERY_CHUNK_BYTES, total), pos)
                buf_at, rel = pos, 0
            try:
                h = validate_batch(buf, rel, rel + total)
            except CorruptRecordError as e:
                reason = str(e).replace(f"at byte {rel}", f"at byte {pos}")
                break
            if h.base_offset != expected and not (self.gaps and h.base_offset > expected):
                reason = f"batch has offset {h.base_offset}, expected {expected}"
                break
            epoch = h.partition_leader_epoch
            if not self.checked_epochs or epoch != self.checked_epochs[-1][0]:
                self.checked_epochs.append((epoch, h.base_offset))
            self.note_batch(pos, h.base_offset, total, h.max_timestamp, index=True)
            if pos == 0:
                self.first_batch_timestamp = h.max_timestamp
            pos += total
            expected = h.next_offset
        self.size = file_size
        self.next_offset = expected
        return pos, reason

    def cut(self, valid_bytes: int) -> int:
        """After `check()`: truncate the file to its valid prefix, write the rebuilt indices.

        Returns the bytes removed.
        """
        removed = self.size - valid_bytes
        if removed:
            os.ftruncate(self.fd, valid_bytes)
            os.fsync(self.fd)
        self.size = valid_bytes
        self.index.rewrite()
        return removed

    # -- appending (called by PartitionLog) ----------------------------------------------------

    def note_batch(
        self, pos: int, base_offset: int, size: int, max_timestamp: int, index: bool = True
    ) -> None:
        """Account for a batch written at `pos`: sparse index entry, running max timestamp."""
        if index and pos > 0 and self.bytes_since_index >= self.index_interval:
            self.index.add(base_offset - self.base_offset, pos, self.max_timestamp)
            self.bytes_since_index = 0
        self.bytes_since_index += size
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp

    # -- reading -------------------------------------------------------------------------------

    def iter_headers(self, start: int, end: int) -> Iterator[tuple[int, tuple[int, ...]]]:
        """Yield (position, raw header tuple) for each batch in [start, end), headers only.

        Raises SegmentDamage if a header is torn or a length runs past `end`.
        """
        pos, buf, buf_at = start, b"", start
        last_size = 0
        while pos < end:
            rel = pos - buf_at
            if rel + HEADER_SIZE > len(buf):
                # After a large batch read just the next header; after small ones a window.
                want = HEADER_SIZE if last_size > SCAN_WINDOW_BYTES else SCAN_WINDOW_BYTES
                buf, buf_at, rel = os.pread(self.fd, min(want, end - pos), pos), pos, 0
            try:
                h = unpack_header(buf, rel)
            except CorruptRecordError as e:
                # A header cut short by the segment's end, or a magic of no known format.
                why = str(e).replace(f"at byte {rel}", f"at byte {pos}")
                raise SegmentDamage(self.log_path, pos, -1, why) from None
            size = h[1] + LOG_OVERHEAD
            if size < HEADER_SIZE_MIN or pos + size > end:
                raise SegmentDamage(
                    self.log_path,
                    pos,
                    -1,
                    f"impossible batch length {h[1]} ({end - pos} bytes left in the segment)",
                )
            yield pos, h
            pos += size
            last_size = size

    def position_of(self, offset: int) -> int:
        """Byte position of the batch that contains `offset` (or `size` if none does)."""
        if offset >= self.next_offset:
            return self.size
        _rel, pos = self.index.floor_by_offset(offset - self.base_offset)
        for p, h in self.iter_headers(pos, self.size):
            if h[0] + h[6] >= offset:
                return p
        return self.size

    def boundary_at_or_before(self, start: int, position: int) -> int:
        """The last batch boundary <= `position`, not before `start`; at least one batch.

        `start` must be a batch boundary. If the batch at `start` ends after `position`, its
        end is returned anyway, so a read always makes progress (Kafka's KIP-74 rule).
        """
        if position >= self.size:
            return self.size
        _, pos = self.index.floor_by_position(position)
        pos = max(pos, start)
        best = pos
        for p, h in self.iter_headers(pos, self.size):
            end = p + h[1] + LOG_OVERHEAD
            if end > position:
                break
            best = end
        if best == start:
            try:
                return start + batch_size_at(self.read_at(start, PREFIX_SIZE))
            except CorruptRecordError as e:
                raise SegmentDamage(self.log_path, start, -1, str(e)) from None
        return best

    def read_at(self, position: int, size: int) -> bytes:
        data = os.pread(self.fd, size, position)
        if len(data) != size:
            raise SegmentDamage(
                self.log_path,
                position,
                -1,
                f"read {len(data)} of {size} bytes: the file is shorter than the log knows",
            )
        return data

    # -- changing ------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove the batch containing `offset` and all after it; returns the new next_offset."""
        pos = self.position_of(offset)
        if pos >= self.size:
            return self.next_offset
        try:
            new_next = base_offset_at(self.read_at(pos, PREFIX_SIZE))
        except CorruptRecordError as e:
            raise SegmentDamage(self.log_path, pos, -1, str(e)) from None
        os.ftruncate(self.fd, pos)
        self.size = pos
        self.next_offset = new_next
        self.index.truncate_to_position(pos)
        # Recompute the running values from what is left; this is rare (follower divergence).
        self.max_timestamp = self.index.timestamps[-1] if len(self.index) else NO_TIMESTAMP
        start = self.index.positions[-1] if len(self.index) else 0
        self.first_batch_timestamp = NO_TIMESTAMP
        self._walk(
            start,
            rebuild_index=False,
            expected_offset=self.base_offset + (self.index.rels[-1] if len(self.index) else 0),
        )
        self.unflushed = True
        return new_next

    def flush(self) -> None:
        if self.unflushed:
            os.fdatasync(self.fd)
            self.unflushed = False
        self.index.persist(fsync=True)

    def close(self) -> None:
        if self.fd >= 0:
            try:
                self.index.persist(fsync=False)
            finally:
                os.close(self.fd)
                self.fd = -1

    def delete(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        os.unlink(self.log_path)
        self.index.delete_files()
