"""`PartitionLog`: one partition's append-only log, a directory of segments.

How it works:
- Segments are kept in a list ordered by base offset, with a parallel list of base offsets that
  `bisect` searches to find the segment holding an offset (the paper's "in-memory sorted
  table"). Appends go to the last segment, the active one.
- The leader path (`append_chunks`) stamps offsets and its epoch into the batches' headers; the
  follower path (`append_as_follower`) keeps the leader's, which must continue the log. Both
  check batches without decoding their records (append_checks.py) and write each append with
  one `pwritev`: no copy of the batch, no re-hash.
- Reads return whole batches: the batch holding the wanted offset, then as many whole batches as
  fit `max_bytes` (at least one, so a consumer always progresses), never past `max_offset`,
  within one segment. `read_slice` gives (fd, position, size) for `sendfile`; `read` the bytes.
  The OS page cache is the only cache.

Where each part lives: this class keeps the log's state and its public operations (appends,
rolls, flushes, reads, truncation, retention, close); procedures that need only what they are
given live beside it:
- append_checks.py: the leader's and the follower's checks of an append's batches, and the
  buffers to write (pure: the log writes them and publishes the producer state after);
- recovery.py: opening a directory after a crash or a clean shutdown (what is trusted, checked,
  cut; the clean-shutdown marker; LogCorruptedError for damage below the recovery point);
- producer_snapshots.py: the producer state's snapshot files and its rebuild (the rules of
  producer state living with the log);
- scrub.py: the background check of closed segments' checksums;
- retention.py: which closed segments retention deletes;
- file_io.py: vectored writes, `FileSlice`, small side files, OS error text.

Durability rules:
- Data is fsynced on `flush()` (by `flush_messages` / `flush_ms`), on every roll and on close.
  The recovery point is the offset below which everything is known fsynced; its checkpoint file
  may lag it (written at most every `recovery_point_checkpoint_ms`, and on roll and close).
- `close()` writes a clean-shutdown marker (the log end offset) after everything is fsynced;
  it is removed before the first change after the next open (recovery.py).
- A read that finds damaged batches (in trusted data, which the open does not scan) raises
  LogCorruptedError and takes the log offline; `open(check_segments=...)` then checks the
  named segments batch by batch. `scrub(budget)` looks for such damage ahead of reads
  (scrub.py).
- A write the log cannot make (ENOSPC, EDQUOT, EIO, EROFS, EFBIG: the segment append, a roll,
  a checkpoint, the epoch cache, an fsync) takes the log offline (LogOfflineError: reads and
  writes refused; `on_offline` tells the owner) until it is reopened, which recovers it:
  Kafka's rule (docs/ARCHITECTURE.md, "Durability and recovery"), so that a leader on a full or
  failing disk hands its partition to an in-sync replica instead of refusing writes for as
  long as the disk stays full. A failed append is rolled back first (ftruncate to the old
  size), so the reopened log holds exactly what was appended before it.
- The log start offset is checkpointed before segments below it are deleted, so a crash in
  between leaves only files that the next open deletes.
- Truncation below the recovery point rewrites the recovery point checkpoint first, so
  recovery can never trust bytes that were rewritten after it, nor find the log ending below
  its recovery point after a crash in between.
- Producer state changes exactly when the log does (producer_snapshots.py): the leader path
  checks idempotent batches before the write and publishes the state after it succeeded; an
  idempotent batch must be alone in its chunk.

One writer per log; reads and writes from one thread (the broker's event loop) or under a lock.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from bisect import bisect_right
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NoReturn

import raftlog.storage.cleaner as cleaner
from raftlog.errors import (
    FencedLeaderEpochError,
    LogCorruptedError,
    LogOfflineError,
    OffsetOutOfRangeError,
    RaftlogError,
    StorageError,
)
from raftlog.records import (
    LOG_OVERHEAD,
    PREFIX_SIZE,
    Record,
    base_offset_at,
    decode_records,
    iter_records,
)
from raftlog.storage.append_checks import (
    AppendInfo,
    check_follower_batches,
    check_leader_chunks,
)
from raftlog.storage.checkpoint import OffsetCheckpoint, fsync_dir
from raftlog.storage.config import INT32_MAX, LogConfig
from raftlog.storage.epoch_cache import LeaderEpochCache
from raftlog.storage.file_io import (
    EMPTY_SLICE,
    IOV_MAX,
    FileSlice,
    close_all,
    os_error_text,
    pwritev_all,
    slice_of,
    write_side_file,
)
from raftlog.storage.log_compaction import CompactedLog
from raftlog.storage.producer_snapshots import (
    delete_producer_snapshots,
    rebuild_producer_state,
    write_producer_snapshot,
)
from raftlog.storage.producer_state import ProducerState
from raftlog.storage.recovery import LogCheckpoints, corrupted_error, recover
from raftlog.storage.retention import expired_segments
from raftlog.storage.scrub import Scrubber
from raftlog.storage.segment import LOG_SUFFIX, LogSegment, SegmentDamage, segment_name

# Re-exported: the broker, the tools and the tests import them from here.
__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "EMPTY_SLICE",
    "EPOCH_CACHE_FILE",
    "IOV_MAX",
    "LOG_START_FILE",
    "RECOVERY_POINT_FILE",
    "AppendInfo",
    "FileSlice",
    "PartitionLog",
    "os_error_text",
    "wall_clock_ms",
]

log = logging.getLogger(__name__)

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
EPOCH_CACHE_FILE = "leader-epoch-checkpoint"
# Written by close() once everything is fsynced (holds the log end offset), deleted by open().
CLEAN_SHUTDOWN_FILE = "clean-shutdown"
# fsyncs of rolled segments run on this thread (fsync releases the GIL), so that an append
# that rolls does not wait for a whole segment (up to 1 GiB) to reach the disk. One thread:
# the disk is the bottleneck, and it keeps rolled segments flushing in order.
_ROLL_FLUSHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raftlog-roll-flush")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class PartitionLog(CompactedLog):
    """A partition's log. Build it with `PartitionLog.open(path, config)`."""

    def __init__(self, path: str, config: LogConfig, clock_ms: Callable[[], int]):
        self.path = path
        self.name = os.path.basename(os.path.normpath(path))
        # Replaced whole (a frozen LogConfig) when the topic's configs change on a live topic:
        # each setting counts from the next append, roll, flush or retention pass that reads it.
        self._config = config
        # The log was ever compacted (its marker file is there): its segments may hold gaps.
        self._gaps = False
        # Where the last clean ended (cleaner.py): the dirty part starts here.
        self._cleaner_checkpoint = OffsetCheckpoint(
            os.path.join(path, cleaner.CLEANER_CHECKPOINT_FILE)
        )
        # Bumped by whatever changes closed segments (truncation, deletion, a clean): a clean
        # planned before is not installed.
        self._generation = 0
        self._cleaned_to: int | None = None  # the checkpoint's offset, once read
        self.last_clean: cleaner.CleanResult | None = None
        self.last_clean_ms = -1
        self._clock_ms = clock_ms
        self._segments: list[LogSegment] = []
        # Invariant: _bases[i] == _segments[i].base_offset, strictly increasing, and
        # _segments[i].next_offset == _segments[i + 1].base_offset.
        self._bases: list[int] = []
        # Invariant: log_start <= next_offset; recovery_point <= next_offset.
        self._log_start = 0
        self._next_offset = 0
        self._recovery_point = 0
        self._rp_checkpoint = OffsetCheckpoint(os.path.join(path, RECOVERY_POINT_FILE))
        self._clean_checkpoint = OffsetCheckpoint(os.path.join(path, CLEAN_SHUTDOWN_FILE))
        self._start_checkpoint = OffsetCheckpoint(os.path.join(path, LOG_START_FILE))
        self.epoch_cache = LeaderEpochCache(os.path.join(path, EPOCH_CACHE_FILE))
        self.producer_state = ProducerState(
            self.name, config.producer_ids_max, config.producer_id_expiration_ms
        )
        self._unflushed_messages = 0
        # Bumped by every truncation: an fsync started before one cannot vouch for what
        # was written after it (flush_begin / flush_end).
        self._truncations = 0
        self._last_flush_ms = clock_ms()
        self._last_rp_checkpoint_ms = 0
        self._scrubber = Scrubber()
        # Set when the log goes offline (or is closed): every later call raises a copy.
        self._offline: LogOfflineError | None = None
        # Called when the log goes offline while serving (its owner moves it out, soon).
        self.on_offline: Callable[[], None] | None = None
        # The clean-shutdown marker is still on disk: the log was opened from a clean
        # shutdown and nothing has changed since. It is removed before the first change
        # (`_begin_change`), not at open, so that opening and closing an idle log writes and
        # fsyncs nothing (a broker with 10,000 partitions restarts in seconds, not minutes).
        self._clean_marker = False
        # Nothing has changed on disk since open, and the files recover to this very state
        # (the clean marker is there, or the log is new and empty): close just closes them.
        self._unchanged = False
        # The fsync of the segment rolled last, running on _ROLL_FLUSHER, and the recovery
        # point it establishes when it completes.
        self._roll_flush: Future[None] | None = None
        self._roll_flush_offset = 0

    # -- opening and recovery ------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str,
        config: LogConfig | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        check_segments: Collection[int] = (),
    ) -> PartitionLog:
        """Open (creating if needed) the log in directory `path`, recovering after a crash.

        Raises LogCorruptedError, having changed no file, if data below the recovery point is
        damaged, and StorageError if the files cannot be read or written (a full disk).
        `check_segments`: base offsets of segments to check batch by batch even if they are
        trusted (the segment where a read found damage).
        """
        self = cls(path, config or LogConfig(), clock_ms)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            try:
                os.mkdir(path)
                created = True
            except FileExistsError:
                created = False
            self._gaps = os.path.exists(os.path.join(path, cleaner.COMPACTED_MARKER_FILE))
            if created:
                self._create()
            else:
                self._open_recovered(frozenset(check_segments))
            if self._config.compact:
                self._mark_compacted()
        except OSError as e:
            # E.g. a full disk: recovery rewrites indices and checkpoints. Close what was opened.
            close_all(self._segments)
            raise StorageError(f"{self.name}: opening {path} failed ({os_error_text(e)})") from e
        except LogCorruptedError:
            close_all(self._segments)
            raise
        return self

    def _create(self) -> None:
        """A new log in the new, empty directory: one empty segment and nothing else (no
        checkpoint, no index, no fsync): what the next open finds recovers to this same empty
        log, and a broker creating 10,000 partitions makes two files each, not fifteen calls."""
        seg = LogSegment(
            self.path,
            0,
            os.open(
                os.path.join(self.path, segment_name(0) + LOG_SUFFIX),
                os.O_RDWR | os.O_CREAT | os.O_EXCL,
                0o644,
            ),
        )
        seg.index_interval = self.config.index_interval_bytes
        seg.gaps = self._gaps
        self._segments = [seg]
        self._bases = [0]
        self.epoch_cache = LeaderEpochCache.new(self.epoch_cache.path)
        self._unchanged = True
        log.debug("%s: created", self.name)

    def _open_recovered(self, check_segments: frozenset[int]) -> None:
        """An existing directory: recover it (recovery.py) and take the state it found."""
        recovered = recover(
            self.path,
            self.name,
            self.config,
            LogCheckpoints(self._rp_checkpoint, self._start_checkpoint, self._clean_checkpoint),
            self.epoch_cache.path,
            self.producer_state,
            check_segments,
            self._segments,  # filled as segments open, so that a failing open closes them
            gaps=self._gaps or self._config.compact,
        )
        self.epoch_cache = recovered.epoch_cache
        self._bases = [s.base_offset for s in self._segments]
        self._log_start = recovered.log_start
        self._next_offset = self._recovery_point = recovered.log_end
        self._clean_marker = recovered.clean_marker
        self._unchanged = recovered.unchanged

    # -- state ---------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def offline_error(self) -> LogOfflineError | None:
        """Why the log is offline (or "closed"); None while it serves."""
        return self._offline

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def latest_epoch(self) -> int:
        return self.epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= `epoch` known here, the offset where it ends); see epoch_cache."""
        return self.epoch_cache.end_offset_for_epoch(epoch, self._next_offset)

    def expire_producers(self, now_ms: int | None = None) -> int:
        """Drop idempotent producers idle for producer_id_expiration_ms; returns how many."""
        return self.producer_state.remove_expired(self._clock_ms() if now_ms is None else now_ms)

    # -- appending -----------------------------------------------------------------------------

    def append(self, batch_bytes: bytes | bytearray | memoryview, leader_epoch: int) -> AppendInfo:
        """Leader path: validate one or more batches, assign consecutive offsets, append."""
        result = self.append_chunks([memoryview(batch_bytes)], leader_epoch)[0]
        if isinstance(result, RaftlogError):
            raise result
        return result

    def append_chunks(
        self, chunks: Sequence[memoryview], leader_epoch: int
    ) -> list[AppendInfo | RaftlogError]:
        """Leader path for many appends at once, each a chunk of one or more batches: the
        broker gathers the Produce requests that one socket read brought for this partition.

        Each chunk is validated on its own: a corrupt or oversized chunk gets its error in the
        result list and is left out, so one bad producer costs the others nothing. The valid
        chunks get consecutive offsets in list order and are written with one pwritev, as one
        unit: a failed write raises (StorageError, LogOfflineError) and appends none of them.
        Raises too when the whole log refuses (offline, a fenced leader epoch).
        """
        self._check_writable()
        latest = self.epoch_cache.latest_epoch
        if leader_epoch < latest:
            raise FencedLeaderEpochError(
                f"{self.name}: append with leader epoch {leader_epoch}, log is at epoch {latest}"
            )
        first_offset = self._next_offset
        iov, nbytes, batches, offset, records, max_ts, outcomes, producers = check_leader_chunks(
            self.name,
            chunks,
            first_offset,
            leader_epoch,
            self.config.max_message_bytes,
            self.producer_state,
            keys_required=self.config.compact,
        )
        if batches:
            if leader_epoch > latest:
                self._assign_epoch(leader_epoch, first_offset)
            self._write(iov, nbytes, batches, offset, records, max_ts)
        if producers is not None:
            producers.commit()
        log_start = self._log_start
        return [o if isinstance(o, RaftlogError) else AppendInfo(*o, log_start) for o in outcomes]

    def append_as_follower(self, batch_bytes: bytes | bytearray | memoryview) -> AppendInfo:
        """Follower path: append batches that already carry the leader's offsets and epochs."""
        self._check_writable()
        mv = memoryview(batch_bytes)
        batches, epochs, next_offset, records, max_ts, idempotent = check_follower_batches(
            self.name, mv, self._next_offset, self.epoch_cache.latest_epoch, self._gaps
        )
        for epoch, start in epochs:
            self._assign_epoch(epoch, start)
        info = self._write([mv], len(mv), batches, next_offset, records, max_ts)
        for b in idempotent:
            self.producer_state.record(*b)
        return info

    def assign_epoch(self, epoch: int) -> None:
        """A new leader: record that `epoch` starts at the log end, before any batch of it
        (Kafka does this at become-leader, so a follower asking where the previous epoch ends
        gets the right answer even before the first append)."""
        self._check_writable()
        if epoch > self.epoch_cache.latest_epoch:
            # In memory: the file is written before the recovery point passes it (sync()).
            self.epoch_cache.assign(epoch, self._next_offset, persist=False)

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        """A batch of a new epoch is about to be written: in memory only (epoch_cache.py's
        rules: the file is made durable before the recovery point passes it, and recovery
        rebuilds what lies above the recovery point from the batches). Writing the file here
        cost the first append to each of 10,000 partitions a file write and a rename on the
        event loop: seconds."""
        self.epoch_cache.assign(epoch, start_offset, persist=False)

    def _write(
        self,
        iov: list[bytes | memoryview],
        nbytes: int,
        batches: list[tuple[int, int, int]],
        next_offset: int,
        records: int,
        max_ts: int,
    ) -> AppendInfo:
        """Write the batches, rolling first (and between batches) as the segment rules say.

        `iov` holds two buffers per batch (leader: stamp + body) or one buffer for all of
        them (follower). The whole append is one unit: if any part fails, all of it is undone.
        """
        # Appends leave the clean-shutdown marker: it still tells the truth about every byte
        # below the offset it holds, and recovery checks everything above the recovery point.
        self._unchanged = False
        if self._roll_flush is not None and self._roll_flush.done():
            self._finish_roll_flush()
        seg = self._segments[-1]
        if self._should_roll(seg, nbytes, next_offset - 1, max_ts):
            seg = self._roll()
        if len(batches) > 1 and seg.size + nbytes > self.config.segment_bytes:
            self._write_split(iov, batches, next_offset)  # many batches, more than one segment
        else:
            start = seg.size
            try:
                written = pwritev_all(seg.fd, iov, start)
                if written != nbytes:
                    raise OSError(errno.EIO, f"short write: {written} of {nbytes} bytes")
            except OSError as e:
                self._undo_write(seg, start, nbytes, e)
            self._note_written(seg, start, batches, next_offset)
        base_offset = self._next_offset
        self._next_offset = next_offset
        self._unflushed_messages += records
        flush_messages, flush_ms = self.config.flush_messages, self.config.flush_ms
        if (flush_messages is not None and self._unflushed_messages >= flush_messages) or (
            flush_ms is not None and self._clock_ms() - self._last_flush_ms >= flush_ms
        ):
            self.flush()
        return AppendInfo(
            base_offset, next_offset - 1, records, len(batches), nbytes, max_ts, self._log_start
        )

    def _should_roll(self, seg: LogSegment, nbytes: int, last_offset: int, max_ts: int) -> bool:
        return bool(seg.size) and (
            seg.size + nbytes > self.config.segment_bytes
            or last_offset - seg.base_offset > INT32_MAX
            or (
                seg.first_batch_timestamp >= 0
                and max_ts - seg.first_batch_timestamp > self.config.segment_ms
            )
        )

    def _note_written(
        self, seg: LogSegment, start: int, batches: list[tuple[int, int, int]], next_offset: int
    ) -> None:
        pos = start
        for base, size, batch_max_ts in batches:
            seg.note_batch(pos, base, size, batch_max_ts)
            if pos == 0:
                seg.first_batch_timestamp = batch_max_ts
            pos += size
        seg.size = pos
        seg.next_offset = next_offset
        seg.unflushed = True

    def _write_split(
        self, iov: list[bytes | memoryview], batches: list[tuple[int, int, int]], next_offset: int
    ) -> None:
        """Write batches group by group, rolling between groups so that every segment stays
        within `segment_bytes` (a segment holds at least one batch). Undone as one unit."""
        per_batch = len(iov) == 2 * len(batches)
        first_index = len(self._segments) - 1
        first = self._segments[first_index]
        saved = (
            first.size,
            first.next_offset,
            first.max_timestamp,
            first.first_batch_timestamp,
            first.bytes_since_index,
        )
        byte_at = [0]
        for _, size, _ in batches:
            byte_at.append(byte_at[-1] + size)
        i = 0
        try:
            while i < len(batches):
                seg = self._segments[-1]
                base_i, size_i, ts_i = batches[i]
                if i and self._should_roll(seg, size_i, base_i, ts_i):
                    seg = self._roll(base_i)
                j, total = i, 0
                while j < len(batches) and (
                    j == i or seg.size + total + batches[j][1] <= self.config.segment_bytes
                ):
                    total += batches[j][1]
                    j += 1
                group = iov[2 * i : 2 * j] if per_batch else [iov[0][byte_at[i] : byte_at[j]]]
                start = seg.size
                written = pwritev_all(seg.fd, group, start)
                if written != total:
                    raise OSError(errno.EIO, f"short write: {written} of {total} bytes")
                self._note_written(
                    seg, start, batches[i:j], batches[j][0] if j < len(batches) else next_offset
                )
                i = j
        except OSError as e:
            # Undo every group: drop the segments this append created, restore the first.
            # The first segment's background fsync must finish before we touch it, and the
            # recovery point it set must not stay above the restored log end.
            with contextlib.suppress(RaftlogError):
                self._finish_roll_flush()
            if self._recovery_point > self._next_offset:
                self._recovery_point = self._next_offset
                try:
                    self._rp_checkpoint.write(self._recovery_point)
                except OSError as e2:
                    self._go_offline(f"rewriting the recovery point failed ({e2})", e2)
            for seg in self._segments[first_index + 1 :]:
                seg.delete()
            del self._segments[first_index + 1 :]
            del self._bases[first_index + 1 :]
            first.index.truncate_to_position(saved[0])
            (
                first.size,
                first.next_offset,
                first.max_timestamp,
                first.first_batch_timestamp,
                first.bytes_since_index,
            ) = saved
            self._undo_write(first, saved[0], byte_at[-1], e)

    def _undo_write(self, seg: LogSegment, start: int, nbytes: int, error: OSError) -> NoReturn:
        what = (
            f"{self.name}: writing {nbytes} bytes at byte {start} of {seg.log_path} failed "
            f"({os_error_text(error)})"
        )
        try:
            os.ftruncate(seg.fd, start)
        except OSError as e2:
            self._set_offline(
                LogOfflineError(f"{what}, and undoing it failed ({os_error_text(e2)})"), error
            )
        # An epoch this append started describes nothing now (in memory: the file is written
        # when the recovery point passes it, and recovery drops entries at the log end).
        self.epoch_cache.truncate_from_end(self._next_offset, persist=False)
        self._set_offline(LogOfflineError(f"{what}; rolled back, nothing appended"), error)

    def _roll(self, base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at `base_offset` (default: the log end); the old one is
        fsynced in the background."""
        self._finish_roll_flush()  # at most one rolled segment in flight
        old = self._segments[-1]
        try:
            # The rolled segment's fsync moves the recovery point past it: the epoch cache
            # describing it must be durable first (rarely an fsync: it changes at elections).
            self.epoch_cache.sync()
            new = LogSegment.create(
                self.path, self._next_offset if base_offset is None else base_offset
            )
            fsync_dir(self.path)
        except OSError as e:
            self._go_offline(f"rolling {old.log_path} failed ({os_error_text(e)})", e)
        new.index_interval = self.config.index_interval_bytes
        new.gaps = self._gaps
        self._segments.append(new)
        self._bases.append(new.base_offset)
        write_producer_snapshot(self.name, self.path, self.producer_state, self._next_offset)
        self._roll_flush = _ROLL_FLUSHER.submit(old.flush)
        self._roll_flush_offset = new.base_offset
        log.debug("%s: rolled segment at offset %d", self.name, new.base_offset)
        return new

    def _finish_roll_flush(self) -> None:
        """Wait for the background fsync of the last rolled segment; checkpoint its offset."""
        future, self._roll_flush = self._roll_flush, None
        if future is None:
            return
        try:
            future.result()
        except OSError as e:
            self._go_offline(f"fsync of a rolled segment failed ({os_error_text(e)})", e)
        if self._roll_flush_offset > self._recovery_point:
            self._recovery_point = self._roll_flush_offset
            try:
                self._rp_checkpoint.write(self._recovery_point)
            except OSError as e:
                self._go_offline(f"writing the recovery point failed ({os_error_text(e)})", e)
            self._last_rp_checkpoint_ms = self._clock_ms()

    def _go_offline(self, why: str, error: BaseException) -> NoReturn:
        self._set_offline(LogOfflineError(f"{self.name}: {why}"), error)

    def _set_offline(self, offline: LogOfflineError, cause: BaseException | None) -> NoReturn:
        self._offline = offline
        log.error("%s; the log is offline until reopened", offline)
        if self.on_offline is not None:
            self.on_offline()
        raise offline from cause

    def _repair_index(self, seg: LogSegment, damage: SegmentDamage) -> None:
        """A read found no batch where it expected one. The sparse index may be wrong (derived
        data, only sanity-checked at open): rebuild it from the batch headers. If they do not
        chain either, the batches are damaged, and the log goes offline."""
        log.warning("%s: %s; rebuilding the index of %s", self.name, damage, seg.log_path)
        try:
            seg.rebuild_index()
        except SegmentDamage as e:
            self._damaged(e)
        except OSError as e:
            self._go_offline(
                f"rewriting the index of {seg.log_path} failed ({os_error_text(e)})", e
            )

    def _damaged(self, damage: SegmentDamage) -> NoReturn:
        """A read found damaged batches: they lie below the recovery point (recovery checked
        the rest), so the log goes offline as the open would have taken it."""
        self._set_offline(corrupted_error(self.name, self.path, self._recovery_point, damage), None)

    def scrub(self, budget_bytes: int, deadline: float | None = None) -> int:
        """Check the checksums of about `budget_bytes` of closed segments' batches, going on
        from where the last call stopped, and stop at `deadline` (time.monotonic()) too;
        returns the bytes checked (0 when there is no closed segment). A full pass ends a
        call, so one call never checks a byte twice. Damage takes the log offline
        (LogCorruptedError naming the file and byte, as a read's damage does).
        """
        self._check_writable()
        return self._scrubber.scrub(
            self._segments[:-1],
            self._bases,
            budget_bytes,
            deadline,
            self._damaged,
            self._scrub_read_failed,
        )

    def _scrub_read_failed(self, seg: LogSegment, error: OSError) -> NoReturn:
        self._go_offline(
            f"reading {seg.log_path} to check it failed ({os_error_text(error)})", error
        )

    def _check_writable(self) -> None:
        if self._offline is not None:
            # A new exception each time: re-raising one object would grow its traceback.
            raise LogOfflineError(str(self._offline))

    def _begin_change(self) -> None:
        """Before bytes already written change (a truncation, a new log start): remove the
        clean-shutdown marker if it is still there (and make that durable), since it would
        vouch for bytes below its offset that are no longer the ones it saw. Appends need
        not: they only add bytes above it. Free once done."""
        self._unchanged = False
        if not self._clean_marker:
            return
        try:
            self._clean_checkpoint.remove()
            fsync_dir(self.path)
        except OSError as e:
            why = f"removing {self._clean_checkpoint.path} before a change failed"
            self._go_offline(f"{why} ({os_error_text(e)}); nothing changed", e)
        self._clean_marker = False

    def write_side_file(self, name: str, data: bytes, sync: bool = True) -> str:
        """Write a small file of the owner's into the log's directory (the broker's topic
        id); returns its path. Into a new, empty log it is written in place (torn, it can only
        describe an empty log, and the owner then drops the directory), else atomically
        (file_io.write_side_file). `sync=False` leaves the fsync to the caller
        (`fsync_paths`, for many logs at once). Raises OSError."""
        in_place = self._unchanged and not self._next_offset
        return write_side_file(self.path, name, data, sync, in_place)

    # -- flushing ------------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync everything appended so far and advance the recovery point."""
        self._check_writable()
        self._finish_roll_flush()
        try:
            self.epoch_cache.sync()  # before the recovery point passes what it describes
            for seg in reversed(self._segments):
                if not seg.unflushed:
                    break
                os.fdatasync(seg.fd)
                seg.unflushed = False
        except OSError as e:
            # After a failed fsync the page cache state is unknown (Linux may drop the dirty
            # pages): only recovery can tell what is on disk.
            self._go_offline(f"fsync failed ({os_error_text(e)})", e)
        now = self._clock_ms()
        self._recovery_point = self._next_offset
        self._unflushed_messages = 0
        self._last_flush_ms = now
        if now - self._last_rp_checkpoint_ms >= self.config.recovery_point_checkpoint_ms:
            try:
                self._rp_checkpoint.write(self._recovery_point)
            except OSError as e:
                # The data is fsynced, but a disk that refuses a small file refuses the next
                # append too: the log goes offline now, as for any write it cannot make.
                why = f"writing {self._rp_checkpoint.path} failed ({os_error_text(e)})"
                self._go_offline(f"{why}; the data is flushed", e)
            self._last_rp_checkpoint_ms = now

    def flush_begin(self) -> tuple[list[int], int, int]:
        """Start an fsync on another thread (the fsync durability policy): returns duplicated
        fds of every segment with unflushed bytes (the caller fdatasyncs and closes them), the
        log end offset they cover, and a token for `flush_end`. Appends made meanwhile mark
        their segment unflushed again, for the next round."""
        self._check_writable()
        fds: list[int] = []
        try:
            # Here, not on the thread: the cache changes only at elections, so this rarely
            # costs an fsync, and it must be durable before the recovery point moves.
            self.epoch_cache.sync()
        except OSError as e:
            self._go_offline(f"writing {self.epoch_cache.path} failed ({os_error_text(e)})", e)
        try:  # dup fails only for want of fds (EMFILE): the process's limit, not the disk's
            for seg in self._segments:
                if seg.unflushed:
                    fds.append(os.dup(seg.fd))
                    seg.unflushed = False
        except OSError as e:
            for fd in fds:
                os.close(fd)
            for seg in self._segments:
                seg.unflushed = True
            raise StorageError(f"{self.name}: starting an fsync failed ({os_error_text(e)})") from e
        return fds, self._next_offset, self._truncations

    def flush_end(self, offset: int, token: int) -> int:
        """The fsync from `flush_begin` succeeded: everything below `offset` is on disk, unless
        the log was truncated since (then only what is below the truncation is known to be).
        Returns the recovery point (what is durable). The recovery point checkpoint is
        written later (maybe_flush, roll, close): recovery tolerates it lagging."""
        if token == self._truncations and offset > self._recovery_point:
            self._recovery_point = min(offset, self._next_offset)
            self._unflushed_messages = 0
            self._last_flush_ms = self._clock_ms()
        return self._recovery_point

    def flush_failed(self, error: OSError) -> NoReturn:
        """The fsync from `flush_begin` failed: only recovery can tell what is on disk."""
        self._go_offline(f"fsync failed ({os_error_text(error)})", error)

    def maybe_flush(self) -> bool:
        """Flush if `flush_ms` has passed since the last flush; the broker calls it on a timer."""
        flush_ms = self.config.flush_ms
        if flush_ms is None or self._recovery_point == self._next_offset:
            return False
        if self._clock_ms() - self._last_flush_ms < flush_ms:
            return False
        self.flush()
        return True

    # -- reading -------------------------------------------------------------------------------

    def _check_offset(self, offset: int) -> None:
        if offset < self._log_start or offset > self._next_offset:
            raise OffsetOutOfRangeError(
                f"{self.name}: offset {offset} is out of range; valid offsets are "
                f"[{self._log_start}, {self._next_offset}]",
                self._log_start,
                self._next_offset,
            )

    def _segment_for(self, offset: int) -> LogSegment:
        return self._segments[max(bisect_right(self._bases, offset) - 1, 0)]

    def read_slice(self, offset: int, max_bytes: int, max_offset: int | None = None) -> FileSlice:
        """Where the whole batches to return for a read at `offset` lie (see `read`)."""
        if self._offline is not None:
            self._check_writable()
        self._check_offset(offset)
        if offset == self._next_offset or (max_offset is not None and max_offset <= offset):
            return EMPTY_SLICE
        i = max(bisect_right(self._bases, offset) - 1, 0)
        while True:
            seg = self._segments[i]
            found = self._slice(seg, offset, max_bytes, max_offset)
            i += 1
            # A compacted segment may end in a gap: the read goes on in the next one.
            if found.size or i == len(self._segments):
                return found
            offset = self._bases[i]
            if max_offset is not None and max_offset <= offset:
                return found

    def _slice(
        self, seg: LogSegment, offset: int, max_bytes: int, max_offset: int | None
    ) -> FileSlice:
        try:
            return slice_of(seg, offset, max_bytes, max_offset)
        except SegmentDamage as e:
            self._repair_index(seg, e)
        try:
            return slice_of(seg, offset, max_bytes, max_offset)
        except SegmentDamage as e:
            self._damaged(e)

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Bytes of whole batches from the batch containing `offset`.

        At most `max_bytes` unless the first batch alone is larger (it is returned whole, so a
        reader always progresses); only batches whose last offset is below `max_offset` (the
        high watermark, for consumers); from one segment. Empty at the log end. Raises
        OffsetOutOfRangeError outside [log_start_offset, log_end_offset].
        """
        return self.read_slice(offset, max_bytes, max_offset).read()

    def read_records(
        self, offset: int, max_bytes: int = 1 << 20, max_offset: int | None = None
    ) -> list[Record]:
        """Decoded records from `offset` on (a convenience for tools and tests)."""
        data = self.read(offset, max_bytes, max_offset)
        return [r for r in iter_records(data) if r.offset >= offset]

    def iter_batches(self) -> Iterator[tuple[LogSegment, int, tuple[int, ...]]]:
        """(segment, position, raw header) for every batch, headers only."""
        for seg in self._segments:
            try:
                for pos, h in seg.iter_headers(0, seg.size):
                    yield seg, pos, h
            except SegmentDamage as e:
                self._damaged(e)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`, or None."""
        if self._offline is not None:
            self._check_writable()
        for seg in self._segments:
            if seg.max_timestamp < timestamp or seg.next_offset <= self._log_start:
                continue
            try:
                found = self._first_at_or_after(seg, timestamp)
            except SegmentDamage as e:
                self._repair_index(seg, e)
                try:
                    found = self._first_at_or_after(seg, timestamp)
                except SegmentDamage as e2:
                    self._damaged(e2)
            if found is not None:
                return found
        return None

    def _first_at_or_after(self, seg: LogSegment, timestamp: int) -> tuple[int, int] | None:
        _, pos = seg.index.floor_by_timestamp(timestamp)
        for p, h in seg.iter_headers(pos, seg.size):
            if h[8] < timestamp or h[0] + h[6] < self._log_start:
                continue
            data = seg.read_at(p, h[1] + LOG_OVERHEAD)
            for r in decode_records(data, 0):
                if r.timestamp >= timestamp and r.offset >= self._log_start:
                    return r.offset, r.timestamp
        return None

    # -- removing ------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove records at `offset` and after (the whole batch holding `offset`).

        For a follower whose log diverged from its leader's. Returns the new log end offset,
        which is <= `offset`. Epochs starting at or after `offset` leave the epoch cache even
        when no record goes (an epoch a former leader assigned but never wrote in must not
        make its next fetch look divergent forever).
        """
        self._check_writable()
        if offset >= self._next_offset:
            try:
                self.epoch_cache.truncate_from_end(max(offset, self._next_offset))
            except OSError as e:
                self._go_offline(f"writing {self.epoch_cache.path} failed ({os_error_text(e)})", e)
            return self._next_offset
        self._begin_change()
        self._truncations += 1
        self._generation += 1
        self._finish_roll_flush()
        try:
            if offset <= self._segments[0].base_offset or offset < self._log_start:
                self._truncate_fully(offset)
            else:
                i = bisect_right(self._bases, offset) - 1
                seg = self._segments[i]
                pos = seg.position_of(offset)
                new_end = (
                    seg.next_offset
                    if pos >= seg.size
                    else base_offset_at(seg.read_at(pos, PREFIX_SIZE))
                )
                self._lower_recovery_point(new_end)  # before any byte goes
                for later in self._segments[i + 1 :]:
                    later.delete()
                del self._segments[i + 1 :]
                del self._bases[i + 1 :]
                # In a compacted log `offset` may lie in a gap: the log then ends at it.
                self._next_offset = seg.next_offset = min(seg.truncate_to(offset), offset)
                if self._next_offset < self._log_start:
                    # The batch holding `offset` began below the log start: the log is now
                    # empty, and must start where it ends (invariant log_start <= next_offset).
                    self._log_start = self._next_offset
                    self._start_checkpoint.write(self._log_start)
            self.epoch_cache.truncate_from_end(self._next_offset)
            self._lower_recovery_point(self._next_offset)
            rebuild_producer_state(
                self.name,
                self.path,
                self.producer_state,
                self._segments,
                self._log_start,
                self._next_offset,
            )
        except OSError as e:
            self._go_offline(f"truncating to offset {offset} failed ({os_error_text(e)})", e)
        except SegmentDamage as e:
            self._damaged(e)
        log.info("%s: truncated to offset %d, log end now %d", self.name, offset, self._next_offset)
        return self._next_offset

    def _lower_recovery_point(self, offset: int) -> None:
        """Checkpoint a recovery point of at most `offset` before bytes above it are removed:
        after a crash in between, recovery must neither trust rewritten bytes nor find the log
        ending below its recovery point (which it reports as damage)."""
        if self._recovery_point > offset:
            self._recovery_point = offset
            self._rp_checkpoint.write(offset)

    def truncate_fully(self, offset: int) -> None:
        """Empty the log and restart it at `offset` (a follower whose position the leader no
        longer has: its log start moved past it)."""
        self._check_writable()
        self._begin_change()
        self._truncations += 1
        self._generation += 1
        self._finish_roll_flush()
        try:
            self._truncate_fully(offset)
        except OSError as e:
            why = f"restarting the log at offset {offset} failed ({os_error_text(e)})"
            self._go_offline(why, e)
        log.info("%s: emptied, log restarts at offset %d", self.name, offset)

    def _truncate_fully(self, offset: int) -> None:
        self._lower_recovery_point(offset)
        for seg in self._segments:
            seg.delete()
        seg = LogSegment.create(self.path, offset)
        seg.index_interval = self.config.index_interval_bytes
        seg.gaps = self._gaps
        self._segments, self._bases = [seg], [offset]
        self._next_offset = offset
        self._log_start = offset
        self._start_checkpoint.write(offset)
        self._recovery_point = offset
        self._rp_checkpoint.write(offset)
        self.epoch_cache.clear()
        self.producer_state.clear()
        delete_producer_snapshots(self.path)

    def delete_records_before(self, offset: int) -> int:
        """Make `offset` the log start offset; delete segments wholly below it.

        Returns the new log start offset (unchanged if `offset` is not above it).
        """
        self._check_writable()
        if offset > self._next_offset:
            raise OffsetOutOfRangeError(
                f"{self.name}: cannot delete records before {offset}, beyond the log end "
                f"{self._next_offset}",
                self._log_start,
                self._next_offset,
            )
        if offset <= self._log_start:
            return self._log_start
        self._advance_log_start(offset)
        return self._log_start

    def enforce_retention(self, now_ms: int | None = None, max_offset: int | None = None) -> int:
        """Delete the oldest closed segments beyond `retention_ms` / `retention_bytes` (only
        where cleanup.policy includes delete).

        Closed segments wholly below the log start offset go too (one that was active when
        `delete_records_before` passed it, and rolled since). Only a prefix of closed segments
        goes, never the active one, and never a segment holding offsets at or past
        `max_offset` (the high watermark: uncommitted records are not retention's to delete).
        Returns how many went.
        """
        self._check_writable()
        deletes = self.config.delete  # cleanup.policy=compact alone: the cleaner's, not ours
        count = expired_segments(
            self._segments,
            self._log_start,
            self._clock_ms() if now_ms is None else now_ms,
            self.config.retention_ms if deletes else -1,
            self.config.retention_bytes if deletes else -1,
            max_offset,
        )
        if count:
            new_start = self._segments[count].base_offset
            log.info(
                "%s: retention deletes %d segments, log start %d -> %d",
                self.name,
                count,
                self._log_start,
                max(self._log_start, new_start),
            )
            self._advance_log_start(max(self._log_start, new_start))
        return count

    def _advance_log_start(self, offset: int) -> None:
        self._begin_change()
        self._finish_roll_flush()  # a segment being fsynced must not be deleted under it
        try:
            self._log_start = offset
            self._start_checkpoint.write(offset)
            self._delete_segments_below(offset)
            self.epoch_cache.truncate_from_start(offset)
            self.producer_state.truncate_head(offset)
        except OSError as e:
            self._go_offline(f"advancing the log start to {offset} failed ({os_error_text(e)})", e)

    def _delete_segments_below(self, offset: int) -> None:
        self._generation += 1
        while len(self._segments) > 1 and self._segments[0].next_offset <= offset:
            seg = self._segments.pop(0)
            self._bases.pop(0)
            seg.delete()

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush everything, checkpoint, and close the files. The log is unusable after.

        Every file is closed even if flushing fails (a full disk, an I/O error); the failure is
        then raised as StorageError. The next open recovers whatever was not checkpointed. Only
        a close that flushed everything writes the clean-shutdown marker; an offline log's
        close just closes its files.
        """
        failure: OSError | StorageError | None = None
        if self._unchanged:
            pass  # the files on disk recover to this state as they are: nothing to write
        elif self._offline is None:
            try:
                self._finish_roll_flush()
                self.epoch_cache.sync()
                for seg in self._segments:
                    if seg.unflushed:
                        os.fdatasync(seg.fd)
                        seg.unflushed = False
                    seg.index.persist(fsync=True)
                self._recovery_point = self._next_offset
                self._rp_checkpoint.write(self._recovery_point)
                self._start_checkpoint.write(self._log_start)
                # The next open replays nothing.
                write_producer_snapshot(
                    self.name, self.path, self.producer_state, self._next_offset
                )
                # Last: it promises that every byte up to the log end is on disk.
                self._clean_checkpoint.write(self._next_offset)
            except (OSError, StorageError) as e:
                failure = e
        # An offline log skipped that, but a rolled segment's background fsync may still run:
        # it writes the segment's index, so it ends before the files close (its error no longer
        # matters: the next open recovers the log).
        pending, self._roll_flush = self._roll_flush, None
        if pending is not None:
            with contextlib.suppress(OSError):
                pending.result()
        closing_failure = close_all(self._segments)
        failure = failure or closing_failure
        self._offline = LogOfflineError(f"{self.name} is closed")
        if isinstance(failure, StorageError):
            raise failure
        if failure is not None:
            raise StorageError(
                f"{self.name}: closing failed ({os_error_text(failure)}); the next open "
                "recovers the log"
            ) from failure

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
