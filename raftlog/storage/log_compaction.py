"""`CompactedLog`: the part of PartitionLog that concerns compaction (the cleaner's rules are
cleaner.py's): the compacted marker, planning a clean and installing one.

Rules:
- A log that was ever compact writes a marker file; from then on its segments may hold gaps
  (segment.py), whatever its cleanup.policy becomes, so that it still opens.
- A clean is planned and installed on the log's own thread; only `cleaner.run` runs
  elsewhere, on duplicated file descriptors. Whatever changes closed segments (truncation,
  deletion, a clean) bumps `_generation`: a clean planned before it is dropped, not installed.
- The cleaner checkpoint (where the last clean ended) is written after the swap; lost or
  unreadable, the whole log is dirty again (a clean of a clean log changes nothing).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from bisect import bisect_right
from collections.abc import Callable
from typing import NoReturn

import raftlog.storage.cleaner as cleaner
from raftlog.errors import LogOfflineError, StorageError
from raftlog.storage.checkpoint import CheckpointError, OffsetCheckpoint
from raftlog.storage.config import LogConfig
from raftlog.storage.file_io import os_error_text, write_side_file
from raftlog.storage.producer_state import ProducerState
from raftlog.storage.scrub import Scrubber
from raftlog.storage.segment import LogSegment, SegmentDamage

log = logging.getLogger("raftlog.storage.log")


class CompactedLog:
    """PartitionLog's compaction methods (a base class, for the module's size)."""

    path: str
    name: str
    _config: LogConfig
    _gaps: bool
    _segments: list[LogSegment]
    _bases: list[int]
    _log_start: int
    _offline: LogOfflineError | None
    _clock_ms: Callable[[], int]
    _cleaner_checkpoint: OffsetCheckpoint
    _cleaned_to: int | None
    _generation: int
    producer_state: ProducerState
    _scrubber: Scrubber
    last_clean: cleaner.CleanResult | None
    last_clean_ms: int

    def _begin_change(self) -> None:
        raise NotImplementedError

    def _finish_roll_flush(self) -> None:
        raise NotImplementedError

    def _go_offline(self, why: str, error: BaseException) -> NoReturn:
        raise NotImplementedError

    def _roll(self, base_offset: int | None = None) -> LogSegment:
        raise NotImplementedError

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self._config = config
        if config.compact and self._segments:
            self._mark_compacted()

    def _mark_compacted(self) -> None:
        """From the first time the log is compact on: segments may hold gaps (a marker file,
        so that a log whose policy went back to delete still opens)."""
        if self._gaps:
            return
        self._gaps = True
        for seg in self._segments:
            seg.gaps = True
        name = cleaner.COMPACTED_MARKER_FILE
        if not os.path.exists(os.path.join(self.path, name)):
            try:
                write_side_file(self.path, name, b"", sync=True, in_place=False)
            except OSError as e:
                raise StorageError(
                    f"{self.name}: writing {name} failed ({os_error_text(e)})"
                ) from e

    def plan_clean(self, max_offset: int, now_ms: int | None = None) -> cleaner.CleanPlan | None:
        """The clean this compacted log is due for (cleaner.py's rules), below `max_offset`
        (the high watermark), or None. Run it (`cleaner.run`, any thread), then
        `install_clean`, or `plan.close()`."""
        if not self.config.compact or self._offline is not None:
            return None
        now = self._clock_ms() if now_ms is None else now_ms
        active = self._segments[-1]
        roll_ms = min(self.config.segment_ms, self.config.max_compaction_lag_ms)
        if active.size and 0 <= active.first_batch_timestamp < now - roll_ms:
            # A quiet topic's active segment rolls by segment.ms too, or it is never cleaned
            # (an append would have rolled it: Kafka rolls only then); and by
            # max.compaction.lag.ms (KIP-354), which the active segment would outlast.
            self._begin_change()
            self._roll()
        first_dirty = self._first_dirty()
        segs = self._segments
        views = cleaner.cleanable(self.config, segs, self._bases, first_dirty, max_offset, now)
        if views is None:
            return None
        dup = [dataclasses.replace(v, fd=os.dup(v.fd)) for v in views]
        last = {e.producer_id: e.last_offset for e in self.producer_state.entries()}
        return cleaner.CleanPlan(
            self.name, self.path, dup, first_dirty, dup[-1].end, last, now,
            self.config.delete_retention_ms, self.config.segment_bytes,
            self.config.index_interval_bytes, self._generation,
        )  # fmt: skip

    def install_clean(self, result: cleaner.CleanResult) -> bool:
        """Swap in what `result` cleaned (cleaner.commit_groups); False, changing nothing, if
        the log changed under the clean (truncated, segments deleted, closed)."""
        plan = result.plan
        try:
            if self._offline is not None or plan.generation != self._generation:
                cleaner.discard(result)
                return False
            self._begin_change()
            self._finish_roll_flush()
            self._generation += 1
            try:
                for group in result.groups:
                    for old in self._segments_in(group.base, group.end):
                        os.close(old.fd)  # its files go in the swap
                        old.fd = -1
                cleaner.commit_groups(self.path, result.groups)
                for group in result.groups:
                    i = self._bases.index(group.base)
                    j = bisect_right(self._bases, group.end - 1)
                    new = LogSegment.open(self.path, group.base)
                    new.index_interval, new.gaps = self.config.index_interval_bytes, True
                    new.load()  # the indices the clean wrote; headers after their last entry
                    new.next_offset = group.end
                    self._segments[i:j], self._bases[i:j] = [new], [group.base]
                    if group.base <= self._scrubber.at[0] < group.end:
                        # Its byte position was in an old file: scrub the new one from its start.
                        self._scrubber.at = (group.base, 0)
                self._cleaner_checkpoint.write(result.end)
                self._cleaned_to = result.end
            except (OSError, SegmentDamage) as e:
                self._go_offline(f"installing a clean failed ({e})", e)
        finally:
            plan.close()
        self.last_clean, self.last_clean_ms = result, plan.now_ms
        return True

    def _segments_in(self, base: int, end: int) -> list[LogSegment]:
        return self._segments[self._bases.index(base) : bisect_right(self._bases, end - 1)]

    def _first_dirty(self) -> int:
        """Where the dirty part starts: where the last clean ended (its checkpoint; an
        unreadable one makes the whole log dirty again), a segment base."""
        if self._cleaned_to is None:
            try:
                self._cleaned_to = self._cleaner_checkpoint.read() or 0
            except CheckpointError as e:
                log.warning("%s: %s; the whole log counts as dirty", self.name, e)
                self._cleaned_to = 0
        return max(self._cleaned_to, self._bases[0])

    def cleaning_state(self, max_offset: int) -> tuple[float, int]:
        """(dirty ratio of the cleanable range below `max_offset`, the last clean's time in
        ms or -1), for describe and status."""
        first_dirty = self._first_dirty()
        ends = self._bases[1:]
        closed = zip(self._segments, ends, strict=False)
        sizes = [(s.base_offset, s.size) for s, e in closed if e <= max_offset]
        return cleaner.dirty_ratio(sizes, first_dirty), self.last_clean_ms
