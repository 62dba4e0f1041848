"""Sparse per-segment indices: offset -> file position, and timestamp -> offset.

Both indices are derived data: recovery rebuilds them from their segment whenever they are
missing, torn or disagree with it, so they are written without fsync on the hot path and are
fsynced only when their segment is flushed or rolled.

`.index` file: a sequence of 8-byte entries, little-endian::

    4 bytes  relative offset  int32   base offset of a batch minus the segment's base offset
    4 bytes  position         int32   byte position of that batch in the segment's .log file

`.timeindex` file: a sequence of 12-byte entries, little-endian::

    8 bytes  timestamp        int64   the largest record timestamp of all batches BEFORE the batch
    4 bytes  relative offset  int32   base offset of that batch minus the segment's base offset

Both files hold one entry per indexed batch, taken together every `index_interval_bytes` of log
(a batch is indexed when at least that many bytes were appended since the last entry). The
first batch of a segment is never indexed: position 0 is implied.

Rules: relative offsets and positions strictly increase; time index timestamps never decrease
(each is a running maximum). The time entry (T, o) promises that every record before offset o in
the segment has a timestamp <= T, so the first record with timestamp >= t (t > T) is at o or
later: that is what `offset_for_timestamp` needs.

Entries are kept in memory (two arrays each) and appended to the files lazily: `persist` writes
those not yet written. One writer, the owning segment.
"""

from __future__ import annotations

import contextlib
import os
import struct
from array import array
from bisect import bisect_right

from raftlog.invariants import InvariantError

_OFFSET_ENTRY = struct.Struct("<ii")
_TIME_ENTRY = struct.Struct("<qi")
OFFSET_ENTRY_SIZE = _OFFSET_ENTRY.size  # 8
TIME_ENTRY_SIZE = _TIME_ENTRY.size  # 12


class IndexFormatError(ValueError):
    """An index file is torn or disagrees with its rules; the caller rebuilds it."""


class SparseIndex:
    """Both sparse indices of one segment, in memory, with their files."""

    __slots__ = (
        "_offset_path",
        "_persisted",
        "_synced",
        "_time_path",
        "positions",
        "rels",
        "timestamps",
    )

    def __init__(self, offset_path: str, time_path: str):
        self._offset_path = offset_path
        self._time_path = time_path
        # Invariant: len(rels) == len(positions) == len(timestamps); all strictly increasing
        # except timestamps, which never decrease.
        self.rels = array("i")
        self.positions = array("i")
        self.timestamps = array("q")
        # Entries [0, _persisted) are in both files.
        self._persisted = 0
        # Both files exist and hold entries [0, _synced) as fsynced or loaded; -1: they may
        # not exist. persist(fsync=True) of nothing new is then free (a clean shutdown of a
        # broker with thousands of idle partitions costs no fsync per index).
        self._synced = -1

    def __len__(self) -> int:
        return len(self.rels)

    def add(self, rel: int, position: int, max_timestamp_before: int) -> None:
        if self.rels and (rel <= self.rels[-1] or position <= self.positions[-1]):
            raise InvariantError(
                f"index entry ({rel}, {position}) not after the last "
                f"({self.rels[-1]}, {self.positions[-1]}): offsets and positions must increase"
            )
        self.rels.append(rel)
        self.positions.append(position)
        if self.timestamps and max_timestamp_before < self.timestamps[-1]:
            max_timestamp_before = self.timestamps[-1]
        self.timestamps.append(max_timestamp_before)

    def floor_by_offset(self, rel: int) -> tuple[int, int]:
        """(relative offset, position) of the last entry with relative offset <= rel."""
        i = bisect_right(self.rels, rel) - 1
        if i < 0:
            return 0, 0
        return self.rels[i], self.positions[i]

    def floor_by_position(self, position: int) -> tuple[int, int]:
        """(relative offset, position) of the last entry with position <= `position`."""
        i = bisect_right(self.positions, position) - 1
        if i < 0:
            return 0, 0
        return self.rels[i], self.positions[i]

    def floor_by_timestamp(self, timestamp: int) -> tuple[int, int]:
        """(relative offset, position) of the last entry whose earlier batches are all < ts."""
        # timestamps[i] < timestamp  <=>  index i qualifies; they never decrease.
        lo, hi = 0, len(self.timestamps)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.timestamps[mid] < timestamp:
                lo = mid + 1
            else:
                hi = mid
        i = lo - 1
        if i < 0:
            return 0, 0
        return self.rels[i], self.positions[i]

    def truncate_to_position(self, position: int) -> None:
        """Drop every entry at or after byte `position` (the log is being cut there)."""
        keep = bisect_right(self.positions, position - 1)
        if keep == len(self.rels):
            return
        del self.rels[keep:]
        del self.positions[keep:]
        del self.timestamps[keep:]
        if self._persisted > keep:
            self._persisted = keep
            self._synced = -1
            for path, size in (
                (self._offset_path, OFFSET_ENTRY_SIZE),
                (self._time_path, TIME_ENTRY_SIZE),
            ):
                if os.path.exists(path):
                    os.truncate(path, keep * size)

    def persist(self, fsync: bool) -> None:
        """Append the entries not yet in the files; fsync them if asked."""
        n = len(self.rels)
        if self._persisted == n and (not fsync or self._synced == n):
            return
        new = range(self._persisted, n)
        offset_bytes = b"".join(_OFFSET_ENTRY.pack(self.rels[i], self.positions[i]) for i in new)
        time_bytes = b"".join(_TIME_ENTRY.pack(self.timestamps[i], self.rels[i]) for i in new)
        for path, data, size in (
            (self._offset_path, offset_bytes, OFFSET_ENTRY_SIZE),
            (self._time_path, time_bytes, TIME_ENTRY_SIZE),
        ):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, data, self._persisted * size)
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        self._persisted = n
        self._synced = n if fsync else -1

    def rewrite(self, fsync: bool = False) -> None:
        """Write both files from scratch (after a rebuild). Not fsynced unless asked: an
        index is derived data, and one a power failure tears is rebuilt by the next open."""
        for path in (self._offset_path, self._time_path):
            # Created even with no entries: a missing file means "rebuild me" to the next open.
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        self._persisted = 0
        self._synced = -1
        self.persist(fsync=fsync)

    def load(self, segment_size: int) -> None:
        """Read both files; raise IndexFormatError if they are torn or break the rules."""
        try:
            with open(self._offset_path, "rb") as f:
                offset_bytes = f.read()
            with open(self._time_path, "rb") as f:
                time_bytes = f.read()
        except FileNotFoundError as e:
            raise IndexFormatError(f"{e.filename} is missing") from None
        if len(offset_bytes) % OFFSET_ENTRY_SIZE:
            raise IndexFormatError(
                f"{self._offset_path}: size {len(offset_bytes)} is not a multiple of "
                f"{OFFSET_ENTRY_SIZE}"
            )
        if len(time_bytes) % TIME_ENTRY_SIZE:
            raise IndexFormatError(
                f"{self._time_path}: size {len(time_bytes)} is not a multiple of {TIME_ENTRY_SIZE}"
            )
        n = len(offset_bytes) // OFFSET_ENTRY_SIZE
        if len(time_bytes) // TIME_ENTRY_SIZE != n:
            raise IndexFormatError(
                f"{self._offset_path} has {n} entries but {self._time_path} has "
                f"{len(time_bytes) // TIME_ENTRY_SIZE}"
            )
        rels, positions, timestamps = array("i"), array("i"), array("q")
        prev_rel, prev_pos, prev_ts = 0, 0, -(2**63)
        for (rel, pos), (ts, trel) in zip(
            _OFFSET_ENTRY.iter_unpack(offset_bytes),
            _TIME_ENTRY.iter_unpack(time_bytes),
            strict=True,
        ):
            if (
                rel <= prev_rel
                or pos <= prev_pos
                or pos >= segment_size
                or trel != rel
                or ts < prev_ts
            ):
                raise IndexFormatError(
                    f"{self._offset_path}: entry {len(rels)} ({rel}, {pos}, ts {ts}) breaks "
                    f"the index rules (previous ({prev_rel}, {prev_pos}), segment size "
                    f"{segment_size})"
                )
            rels.append(rel)
            positions.append(pos)
            timestamps.append(ts)
            prev_rel, prev_pos, prev_ts = rel, pos, ts
        self.rels, self.positions, self.timestamps = rels, positions, timestamps
        self._persisted = n
        self._synced = n

    def clear(self) -> None:
        self.rels, self.positions, self.timestamps = array("i"), array("i"), array("q")
        self._persisted = 0
        self._synced = -1

    def delete_files(self) -> None:
        self._synced = -1
        for path in (self._offset_path, self._time_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
