"""The leader-epoch cache: for each leader epoch, the first offset written in it (KIP-101).

A follower that restarts or changes leader asks the leader "where does my epoch E end in your
log?" (`end_offset_for_epoch`) and truncates to the answer; this replaces early Kafka's
truncate-to-high-watermark, which could lose committed records.

Entries are (epoch, start_offset) with both strictly increasing. The cache is written with the
checkpoint format (`checkpoint.py`, entries "epoch start_offset") atomically (a temporary file
renamed over it) without an fsync when an entry is cut or dropped; a new epoch stays in memory
(`assign(..., persist=False)`). `sync()` writes what memory holds and makes it durable, and the
log calls it before its recovery point moves (a flush, a roll, a close): the file on disk is
right for every offset below the recovery point. Above it, recovery walks every batch anyway
and rebuilds the cache's tail from their epochs. So neither an election nor the first batch of
an epoch costs a file write (a broker taking over 3,000 partitions used to spend seconds of its
event loop on them, and the first write to 10,000 new partitions seconds more), and nothing
durable is described wrongly. The cache is derived data: every batch carries its partition
leader epoch, so the log can rebuild it when the file is missing or corrupt.

Rules: the file is written and fsynced before the recovery point passes an offset it describes
(until then a new epoch may live in memory only, batches of it written or not); after a crash,
entries at or beyond the first batch recovery checks are replaced by what the batches say, and
a log with segments but no file is rebuilt from every batch.
"""

from __future__ import annotations

import itertools
import os
from bisect import bisect_left, bisect_right

from raftlog.storage.checkpoint import fsync_dir, read_entries, write_entries

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, path: str, entries: list[tuple[int, int]] | None = None):
        self.path = path
        # Invariant: epochs and start offsets both strictly increase.
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries or ():
            self._epochs.append(epoch)
            self._starts.append(start)
        # The file holds exactly these entries (loaded or written by this object): a change
        # that leaves them as they are writes nothing. `_synced`: and it is fsynced.
        self._on_disk = False
        self._synced = False

    @classmethod
    def load(cls, path: str) -> LeaderEpochCache:
        """Read the cache; raises CheckpointError when the file is malformed or breaks the rules.

        A missing file gives an empty cache.
        """
        from raftlog.storage.checkpoint import CheckpointError

        raw = read_entries(path, 2)
        entries = [(e, s) for e, s in raw or []]
        for (e0, s0), (e1, s1) in itertools.pairwise(entries):
            if not (e1 > e0 and s1 > s0):
                raise CheckpointError(
                    f"{path}: entries ({e0}, {s0}) then ({e1}, {s1}) do not both increase"
                )
        cache = cls(path, entries)
        # No file reads as an empty cache, and an empty cache needs no file. What was read is
        # taken as durable: recovery replaces the part above the recovery point.
        cache._on_disk = cache._synced = True
        return cache

    @classmethod
    def new(cls, path: str) -> LeaderEpochCache:
        """The empty cache of a new log, whose file does not exist (and need not)."""
        cache = cls(path)
        cache._on_disk = cache._synced = True
        return cache

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, persist: bool = True) -> bool:
        """Record that `epoch` starts at `start_offset`; returns True if the cache changed.

        An epoch not newer than the latest is ignored (its start is already known). If the new
        start is not after the latest entry's start, that entry is replaced: an epoch that wrote
        nothing must not shadow the new one.

        `persist=False` (a new leader's epoch, or a batch's) keeps the change in memory only,
        until `sync()` or the next written change writes the file: the log syncs before its
        recovery point passes the entry, and recovery rebuilds the entries above the recovery
        point from the batches, so losing it to a crash loses nothing; writing it at once cost
        a new leader two fsyncs, and a broker taking over 3,000 partitions seconds of them.
        """
        if epoch <= self.latest_epoch:
            return False
        epochs, starts = self._epochs[:], self._starts[:]
        while starts and starts[-1] >= start_offset:
            epochs.pop()
            starts.pop()
        epochs.append(epoch)
        starts.append(start_offset)
        if persist:
            self._commit(epochs, starts)
        else:
            self._epochs, self._starts = epochs, starts
            self._on_disk = self._synced = False
        return True

    @property
    def unpersisted(self) -> bool:
        """Entries in memory that the file does not hold yet."""
        return not self._on_disk

    def persist(self) -> None:
        """Write the file if it lacks what memory holds, without fsync (raises OSError)."""
        if not self._on_disk:
            self._synced = False
            write_entries(
                self.path, list(zip(self._epochs, self._starts, strict=True)), fsync=False
            )
            self._on_disk = True

    def sync(self) -> None:
        """Make the file hold what memory holds, durably (raises OSError)."""
        if self._synced:
            return
        self.persist()
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            fd = -1  # an empty cache never written: nothing to make durable but its absence
        if fd >= 0:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        self._synced = True

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= `epoch` in the cache, the offset where that epoch ends).

        The end is the start of the next larger epoch, or the log end offset if `epoch` is at
        least the latest. (UNDEFINED_EPOCH, UNDEFINED_OFFSET) if `epoch` is older than all.
        """
        if not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch >= self._epochs[-1]:
            return self._epochs[-1], log_end_offset
        i = bisect_right(self._epochs, epoch)
        if i == 0:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        return self._epochs[i - 1], self._starts[i]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch in which `offset` was written, per the cache."""
        i = bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int, persist: bool = True) -> None:
        """Drop epochs that start at or after `end_offset` (the log was cut there).

        `persist=False`: in memory only (an append rolled back: the dropped epoch starts at the
        log end and describes nothing, and the file need not be written for it)."""
        keep = bisect_left(self._starts, end_offset)
        if keep < len(self._starts):
            if persist:
                self._commit(self._epochs[:keep], self._starts[:keep])
            else:
                self._epochs, self._starts = self._epochs[:keep], self._starts[:keep]
                self._on_disk = self._synced = False

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly before `start_offset`; the one that covers it starts there."""
        i = bisect_right(self._starts, start_offset)
        if i == 0:
            return
        if i == 1 and self._starts[0] == start_offset:
            return
        self._commit(self._epochs[i - 1 :], [start_offset, *self._starts[i:]])

    def clear(self) -> None:
        self._commit([], [])

    def _commit(self, epochs: list[int], starts: list[int]) -> None:
        """Write the new entries, then adopt them: if the write fails (OSError), nothing changed."""
        if self._on_disk and epochs == self._epochs and starts == self._starts:
            return
        self._on_disk = self._synced = False
        write_entries(self.path, list(zip(epochs, starts, strict=True)), fsync=False)
        self._epochs, self._starts = epochs, starts
        self._on_disk = True
