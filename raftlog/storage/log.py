"""`PartitionLog`: one partition's append-only log, a directory of segments.

How it works:
- Segments are kept in a list ordered by base offset, with a parallel list of base offsets that
  `bisect` searches to find the segment holding an offset (the paper's "in-memory sorted
  table"). Appends go to the last segment, the active one.
- The leader path (`append`) validates each batch without decoding its records (records.py),
  then writes 16 stamped header bytes (base offset, length, leader epoch) plus the untouched
  rest of each batch with one `pwritev`: no copy of the batch, no re-hash.
- The follower path (`append_as_follower`) writes batches with the offsets and epochs the leader
  gave them, after the same validation and a check that they continue the log.
- Reads return whole batches: the batch holding the wanted offset, then as many whole batches as
  fit `max_bytes` (at least one, so a consumer always progresses), never past `max_offset`,
  within one segment. `read_slice` gives (fd, position, size) for `sendfile`; `read` the bytes.
  The OS page cache is the only cache.

Durability rules:
- Data is fsynced on `flush()` (by `flush_messages` / `flush_ms`), on every roll and on close.
  The recovery point is the offset below which everything is known fsynced; its checkpoint file
  may lag it (written at most every `recovery_point_checkpoint_ms`, and on roll and close).
- `close()` writes a clean-shutdown marker (the log end offset) after everything is fsynced;
  `open()` deletes it. A log opened with its marker is not recovered at all (Kafka's
  `.kafka_cleanshutdown`): every byte up to the marker's log end is trusted.
- On open, segments wholly below the recovery point are trusted: their indices are
  sanity-checked (rebuilt if they disagree: derived data) and the headers after the last index
  entry are walked. The segment holding the recovery point and those after it are checked batch
  by batch. Damage ABOVE the recovery point is a torn or unflushed tail: the segment is cut at
  the first invalid byte, with a log line naming the file, position and bytes removed, and later
  segments are deleted. Damage BELOW it (fsynced bytes: a disk or operator fault, not a crash)
  is never cut: the open raises LogCorruptedError naming the file, byte and offsets and touches
  no file. The same holds for a gap between segments, or a log that ends, below it.
- A read that finds damaged batches (in trusted data, which the open does not scan) raises
  LogCorruptedError and takes the log offline; `open(check_segments=...)` then checks the
  named segments batch by batch.
- Fetches serve trusted data without checking checksums (zero copy), so `scrub(budget)` checks
  the closed segments' batch checksums in the background, `budget` bytes a call, from where
  the last call stopped, round and round: damage it finds takes the log offline exactly as a
  read's would (the broker then sets a follower's damaged log aside and refetches it).
- A failed write is rolled back (ftruncate to the old size) and raised as StorageError; if even
  the rollback fails, or an fsync fails, the log goes offline (LogOfflineError: reads and writes
  refused) until reopened, which recovers it.
- The log start offset is checkpointed before segments below it are deleted, so a crash in
  between leaves only files that the next open deletes.
- Truncation below the recovery point rewrites the recovery point checkpoint first, so
  recovery can never trust bytes that were rewritten after it, nor find the log ending below
  its recovery point after a crash in between.

Producer state (producer_state.py) lives with the log, so that it changes exactly when the log
does: the leader path checks idempotent batches before the write (a duplicate is answered with
its original offsets and not written; a gap or a fenced epoch is that chunk's error) and
publishes the state after the write succeeded; the follower path records what it wrote;
truncation rebuilds it; rolls and close snapshot it (`<offset>.snapshot`, no fsync: derived
data); open loads the newest snapshot at or below the log end and replays the batch headers
after it. An idempotent batch must be alone in its chunk (one batch per partition per request,
as Kafka requires), so that a duplicate's answer is one batch's offsets.

One writer per log; reads and writes from one thread (the broker's event loop) or under a lock.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple, NoReturn

from raftlog.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidOffsetError,
    InvalidRequestError,
    LogCorruptedError,
    LogOfflineError,
    OffsetOutOfRangeError,
    RaftlogError,
    RecordTooLargeError,
    StorageError,
)
from raftlog.records import (
    HEADER,
    HEADER_SIZE,
    INT32,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    STAMP,
    STAMP_SIZE,
    Record,
    decode_records,
    validate_batch,
)
from raftlog.storage.checkpoint import CheckpointError, OffsetCheckpoint, atomic_write, fsync_dir
from raftlog.storage.config import INT32_MAX, LogConfig
from raftlog.storage.epoch_cache import LeaderEpochCache
from raftlog.storage.producer_state import (
    SNAPSHOT_SUFFIX,
    ProducerAppend,
    ProducerState,
    SnapshotError,
)
from raftlog.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    LogSegment,
    SegmentDamage,
    parse_segment_name,
    segment_name,
)

log = logging.getLogger(__name__)

# What the scrubber reads at a time (whole batches of it are checked): small, because a chunk
# of small batches costs ~2 us each (64 KiB of 190-byte batches: ~0.7 ms) and it runs on the
# broker's event loop between its deadline checks.
SCRUB_CHUNK_BYTES = 64 * 1024

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
EPOCH_CACHE_FILE = "leader-epoch-checkpoint"
# Written by close() once everything is fsynced (holds the log end offset), deleted by open().
CLEAN_SHUTDOWN_FILE = "clean-shutdown"
# Producer state snapshots kept (the newest ones): recovery and a truncation near the log end
# replay only the batches after the newest one at or below the log end.
PRODUCER_SNAPSHOTS_KEPT = 2
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
# fsyncs of rolled segments run on this thread (fsync releases the GIL), so that an append
# that rolls does not wait for a whole segment (up to 1 GiB) to reach the disk. One thread:
# the disk is the bottleneck, and it keeps rolled segments flushing in order.
_ROLL_FLUSHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raftlog-roll-flush")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def os_error_text(e: OSError) -> str:
    """ "ENOSPC: No space left on device": the errno's name, so that an operator can grep it."""
    name = errno.errorcode.get(e.errno) if e.errno is not None else None
    if name and e.strerror:
        return f"{name}: {e.strerror}"
    return str(e)


class AppendInfo(NamedTuple):
    """What an append did: the offsets it assigned (or kept) and the log's state after it.

    A NamedTuple, not a frozen dataclass: the broker makes one per Produce request, and a
    tuple is built several times faster."""

    base_offset: int
    last_offset: int
    record_count: int
    batch_count: int
    size_bytes: int
    max_timestamp: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class FileSlice:
    """Whole batches at [position, position + size) of an open segment file, for sendfile.

    The fd belongs to the log: use the slice before the log deletes or truncates that segment
    (on the same thread, that means before the next log call), or `os.dup` it.
    """

    fd: int
    path: str
    position: int
    size: int

    def read(self) -> bytes:
        if not self.size:
            return b""
        data = os.pread(self.fd, self.size, self.position)
        if len(data) != self.size:
            raise StorageError(
                f"{self.path}: read {len(data)} of {self.size} bytes at byte {self.position}"
            )
        return data


EMPTY_SLICE = FileSlice(-1, "", 0, 0)


class PartitionLog:
    """A partition's log. Build it with `PartitionLog.open(path, config)`."""

    def __init__(self, path: str, config: LogConfig, clock_ms: Callable[[], int]):
        self.path = path
        self.name = os.path.basename(os.path.normpath(path))
        self.config = config
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
        # Where the scrubber goes on: (segment base offset, byte position).
        self._scrub_at = (0, 0)
        # Set when the log goes offline (or is closed): every later call raises a copy.
        self._offline: LogOfflineError | None = None
        # The clean-shutdown marker is still on disk: the log was opened from a clean
        # shutdown and nothing has changed since. It is removed before the first change
        # (`_begin_change`), not at open, so that opening and closing an idle log writes and
        # fsyncs nothing (a broker with 10,000 partitions restarts in seconds, not minutes).
        # Called when the log goes offline while serving (its owner moves it out, soon).
        self.on_offline: Callable[[], None] | None = None
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
            if created:
                self._create()
            else:
                self._recover(frozenset(check_segments))
        except OSError as e:
            # E.g. a full disk: recovery rewrites indices and checkpoints. Close what was opened.
            _close_all(self._segments)
            raise StorageError(f"{self.name}: opening {path} failed ({os_error_text(e)})") from e
        except SegmentDamage as e:
            # Found in trusted data after the segments were loaded (the epoch cache rebuild
            # walks every header): below the recovery point by construction.
            _close_all(self._segments)
            raise self._corrupted(e) from None
        except LogCorruptedError:
            _close_all(self._segments)
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
        self._segments = [seg]
        self._bases = [0]
        self.epoch_cache = LeaderEpochCache.new(self.epoch_cache.path)
        self._unchanged = True
        log.debug("%s: created", self.name)

    def _corrupted(self, damage: SegmentDamage, later_segments: int = -1) -> LogCorruptedError:
        """The error for damage below the recovery point: what, where, and what was kept."""
        later = f"; {later_segments} later segment files follow it" if later_segments > 0 else ""
        offset = (
            f"; the batch there should start at offset {damage.offset}"
            if damage.offset >= 0
            else ""
        )
        return LogCorruptedError(
            f"{self.name}: damaged data below the recovery point {self._recovery_point}: "
            f"{damage}{offset}{later}. Nothing was truncated or deleted: the partition stays "
            f"offline on this broker until the damage is repaired (`raftlog storage verify "
            f"{self.path}` names it)",
            damage.log_path,
            damage.position,
            damage.offset,
        )

    def _read_clean_shutdown(self) -> int | None:
        """The log end offset the clean-shutdown marker holds, or None (no marker, unreadable)."""
        try:
            return self._clean_checkpoint.read()
        except CheckpointError as e:
            log.warning("%s: ignoring %s; recovering as after a crash", self.name, e)
            return None

    def _recover(self, check_segments: frozenset[int]) -> None:
        path = self.path
        bases = sorted(b for e in os.listdir(path) if (b := parse_segment_name(e)) is not None)
        recovery_point = rp_on_disk = self._read_checkpoint(self._rp_checkpoint, default=0)
        clean_end = self._read_clean_shutdown()
        if clean_end is not None:
            # Closed cleanly: everything up to the log end the marker holds was fsynced. Take
            # the larger of the two, so that a lost checkpoint cannot turn damage into a cut.
            recovery_point = max(recovery_point, clean_end)
        self._recovery_point = recovery_point
        log_start = start_on_disk = self._read_checkpoint(self._start_checkpoint, default=0)
        try:
            self.epoch_cache = LeaderEpochCache.load(self.epoch_cache.path)
            rebuild_epochs = False
        except CheckpointError as e:
            log.warning("%s: rebuilding leader epoch cache from the log: %s", self.name, e)
            rebuild_epochs = True
        if not os.path.exists(self.epoch_cache.path) and bases:
            rebuild_epochs = True

        # The log's own list, so that a failing open can close every segment opened so far.
        segments: list[LogSegment] = self._segments
        # Segments that may hold bytes not yet on disk (checked, cut, created): fsynced below.
        unsynced: list[LogSegment] = []
        for i, base in enumerate(bases):
            seg = LogSegment.open(path, base)
            seg.index_interval = self.config.index_interval_bytes
            if segments and base != segments[-1].next_offset:
                end = segments[-1].next_offset
                if min(end, base) < recovery_point:
                    seg.close()
                    raise self._corrupted(
                        SegmentDamage(
                            seg.log_path,
                            0,
                            end,
                            f"the segment starts at offset {base} but the log before it ends "
                            f"at {end} (a segment file is missing, cut or duplicated)",
                        ),
                        len(bases) - i - 1,
                    )
                log.error(
                    "%s: segment %s starts at %d but the log before it ends at %d, above the "
                    "recovery point %d; deleting it and every later segment",
                    self.name,
                    seg.log_path,
                    base,
                    end,
                    recovery_point,
                )
                seg.close()
                self._delete_files_from(bases[i:])
                break
            segments.append(seg)
            last = i + 1 == len(bases)
            next_base = None if last else bases[i + 1]
            # Trusted: every byte of it lies below the recovery point (a cleanly closed log's
            # last segment included). Checked: it holds unflushed bytes, or a read found damage.
            trusted = next_base is not None and next_base <= recovery_point
            needs_check = base in check_segments or base >= recovery_point
            if not needs_check:
                try:
                    seg.load()
                except SegmentDamage as e:
                    # The header walk saw where the chain breaks, which may be after the damaged
                    # batch (a wrong but plausible length): check every batch to find the first
                    # invalid byte, then decide below whether it may be cut.
                    log.warning("%s: %s; checking every batch of the segment", self.name, e)
                    needs_check = True
                else:
                    if last and seg.next_offset < recovery_point:
                        raise self._corrupted(
                            SegmentDamage(
                                seg.log_path,
                                seg.size,
                                seg.next_offset,
                                f"the log ends at offset {seg.next_offset}: records "
                                f"[{seg.next_offset}, {recovery_point}) are missing",
                            )
                        )
                    needs_check = not trusted and seg.next_offset > recovery_point
            if needs_check:
                unsynced.append(seg)
                valid, reason = seg.check()
                if reason and (trusted or seg.next_offset < recovery_point):
                    raise self._corrupted(
                        SegmentDamage(seg.log_path, valid, seg.next_offset, reason),
                        len(bases) - i - 1,
                    )
                removed = seg.cut(valid)
                if removed:
                    log.warning(
                        "%s: recovery truncated %s at byte %d, removing %d bytes (from offset "
                        "%d, at or above the recovery point %d): %s",
                        self.name,
                        seg.log_path,
                        valid,
                        removed,
                        seg.next_offset,
                        recovery_point,
                        reason,
                    )
                if reason:
                    later = bases[i + 1 :]
                    if later:
                        log.warning(
                            "%s: deleting %d later segments (from offset %d) after the corrupt one",
                            self.name,
                            len(later),
                            later[0],
                        )
                        self._delete_files_from(later)
                    break
        # The log is sound: from here on files may change. Tidy leftovers first.
        for entry in os.listdir(path):
            stem, _, suffix = entry.partition(".")
            if entry.endswith(".tmp") or (
                "." + suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX)
                and not os.path.exists(os.path.join(path, stem + LOG_SUFFIX))
            ):
                # A checkpoint write that never got renamed; the indices of a missing segment.
                os.unlink(os.path.join(path, entry))
        if not segments:
            seg = LogSegment.create(path, log_start)
            seg.index_interval = self.config.index_interval_bytes
            segments.append(seg)
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._next_offset = segments[-1].next_offset
        self._log_start = min(max(log_start, segments[0].base_offset), self._next_offset)
        self._delete_segments_below(self._log_start)
        if rebuild_epochs:
            self._rebuild_epoch_cache()
        else:
            # The file is right below the recovery point (it is fsynced before the recovery
            # point moves); from the first batch checked on, the batches say what it holds.
            runs = [
                (epoch, start)
                for seg in unsynced
                if seg in self._segments
                for epoch, start in seg.checked_epochs
                if start < seg.next_offset and epoch != NO_PARTITION_LEADER_EPOCH
            ]
            # Only runs that reach into the log (above its start): batches below it are gone
            # for the log, and so are their epochs.
            ends = [start for _, start in runs[1:]] + [self._next_offset]
            walked = [
                run
                for run, end in zip(runs, ends[: len(runs)], strict=True)
                if end > self._log_start
            ]
            if walked:
                cache = self.epoch_cache
                # An epoch the file starts at the log end describes no batch, and stays as the
                # running log kept it (an empty log's epoch starts at its end).
                at_end = [e for e in cache.entries() if e[1] >= self._next_offset]
                cache.truncate_from_end(walked[0][1])
                for epoch, start in [*walked, *at_end]:
                    cache.assign(epoch, start)
        # Epochs starting at or after the log end never wrote a batch here (assigned just before
        # a crash), except in an empty log: there the epoch covering the log start starts at the
        # log end, as the running log keeps it after delete_records_before(log_end).
        empty = self._log_start == self._next_offset
        self.epoch_cache.truncate_from_end(self._next_offset + 1 if empty else self._next_offset)
        self.epoch_cache.truncate_from_start(self._log_start)
        self._rebuild_producer_state()
        # Everything that survived was checked; make it durable and start from a clean point.
        # Segments below the recovery point are on disk already (a cleanly closed log's are
        # all): only the checked ones are fsynced, and only changed checkpoints are written.
        # A new, empty log writes nothing at all: losing it to a power failure loses nothing.
        for seg in unsynced:
            if seg in self._segments and seg.size:
                os.fdatasync(seg.fd)
                seg.index.persist(fsync=True)
        self.epoch_cache.sync()  # before the recovery point moves up over what it describes
        self._recovery_point = self._next_offset
        if self._recovery_point != rp_on_disk:
            self._rp_checkpoint.write(self._recovery_point)
        if self._log_start != start_on_disk:
            self._start_checkpoint.write(self._log_start)
        # The marker stays until the first change (`_begin_change`): until then it still
        # tells the truth. A crash before that reopens this log as cleanly shut down.
        self._clean_marker = clean_end is not None and clean_end == self._next_offset
        if clean_end is not None and not self._clean_marker:
            self._clean_checkpoint.remove()
            fsync_dir(path)
        self._unchanged = self._clean_marker or self._log_start == self._next_offset == 0
        log.debug(
            "%s: opened %d segments, log start %d, log end %d%s",
            self.name,
            len(self._segments),
            self._log_start,
            self._next_offset,
            " (clean shutdown: not recovered)" if clean_end is not None else "",
        )

    def _read_checkpoint(self, checkpoint: OffsetCheckpoint, default: int) -> int:
        try:
            value = checkpoint.read()
        except CheckpointError as e:
            log.warning("%s: ignoring %s", self.name, e)
            return default
        return default if value is None else value

    def _delete_files_from(self, bases: list[int]) -> None:
        for base in bases:
            seg = LogSegment.open(self.path, base)
            seg.delete()

    def _rebuild_epoch_cache(self) -> None:
        self.epoch_cache.clear()
        for seg in self._segments:
            for _, h in seg.iter_headers(0, seg.size):
                epoch = h[2]
                if epoch != NO_PARTITION_LEADER_EPOCH and epoch > self.epoch_cache.latest_epoch:
                    self.epoch_cache.assign(epoch, h[0])

    # -- producer state ------------------------------------------------------------------------

    def _snapshot_path(self, offset: int) -> str:
        return os.path.join(self.path, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def _snapshot_offsets(self) -> list[int]:
        out = []
        for entry in os.listdir(self.path):
            stem = entry[: -len(SNAPSHOT_SUFFIX)]
            if entry.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def _rebuild_producer_state(self) -> None:
        """The producer state as of the log end: the newest valid snapshot at or below it,
        then the idempotent batches after it. Snapshots above the log end describe records
        that are gone (a cut tail, a truncation) and are deleted, as are damaged ones."""
        state = self.producer_state
        state.clear()
        replay_from = self._log_start
        for offset in reversed(self._snapshot_offsets()):
            path = self._snapshot_path(offset)
            if offset <= self._next_offset:
                try:
                    with open(path, "rb") as f:
                        state.load_snapshot(f.read(), path)
                    replay_from = max(offset, self._log_start)
                    break
                except SnapshotError as e:
                    log.warning("%s: ignoring a producer state snapshot: %s", self.name, e)
            os.unlink(path)
        state.truncate_head(self._log_start)
        replayed = 0
        record = state.record
        for seg in self._segments:
            if seg.next_offset <= replay_from:
                continue
            pos = seg.position_of(replay_from) if seg.base_offset < replay_from else 0
            for _, h in seg.iter_headers(pos, seg.size):
                # base_offset, ..., max_timestamp (8), producer_id, epoch, base_sequence, count
                if h[9] != NO_PRODUCER_ID and h[0] + h[6] >= replay_from:
                    record(h[9], h[10], h[11], h[12], h[0], h[8])
                    replayed += 1
        if replayed or len(state):
            log.info(
                "%s: producer state rebuilt: %d producers, %d batches replayed from offset %d",
                self.name,
                len(state),
                replayed,
                replay_from,
            )

    def _write_producer_snapshot(self) -> None:
        """Snapshot the producer state as of the log end (at a roll, on close), keeping the
        newest PRODUCER_SNAPSHOTS_KEPT. Derived data, written without fsync: a lost or torn
        snapshot fails its checksum and recovery replays from an older one (or the log
        start). A failure to write is logged, never fatal to the log."""
        offset = self._next_offset
        path = self._snapshot_path(offset)
        try:
            with open(path + ".tmp", "wb") as f:
                f.write(self.producer_state.encode_snapshot(offset))
            os.replace(path + ".tmp", path)
            for old in self._snapshot_offsets()[:-PRODUCER_SNAPSHOTS_KEPT]:
                os.unlink(self._snapshot_path(old))
        except OSError as e:
            log.warning(
                "%s: writing producer state snapshot %s failed (%s); recovery will replay "
                "more of the log",
                self.name,
                path,
                os_error_text(e),
            )

    def expire_producers(self, now_ms: int | None = None) -> int:
        """Drop idempotent producers idle for producer_id_expiration_ms; returns how many."""
        return self.producer_state.remove_expired(self._clock_ms() if now_ms is None else now_ms)

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
        first_offset = offset = self._next_offset
        max_bytes = self.config.max_message_bytes
        iov: list[bytes | memoryview] = []
        batches: list[tuple[int, int, int]] = []
        # Per chunk: (base offset, last offset, records, batches, bytes, max timestamp) or
        # the chunk's error; AppendInfo is made once the write has succeeded.
        outcomes: list[tuple[int, int, int, int, int, int] | RaftlogError] = []
        records = 0
        nbytes = 0
        max_ts = -1
        stamp = STAMP.pack
        # Idempotent batches' checks and records, published once the write succeeded.
        producers: ProducerAppend | None = None
        for mv in chunks:
            n = len(mv)
            if n == 0:
                outcomes.append(CorruptRecordError(f"{self.name}: empty append"))
                continue
            chunk_offset, chunk_ts = offset, -1
            mark = len(batches)
            pos = 0
            duplicate = None
            try:
                while pos < n:
                    try:
                        h = validate_batch(mv, pos, n)
                    except CorruptRecordError as e:
                        raise CorruptRecordError(f"{self.name}: {e}; nothing appended") from None
                    size = h.batch_length + LOG_OVERHEAD
                    if size > max_bytes:
                        raise RecordTooLargeError(
                            f"{self.name}: batch of {size} bytes at byte {pos} exceeds "
                            f"max_message_bytes={max_bytes}; nothing appended"
                        )
                    if h.producer_id != NO_PRODUCER_ID:
                        if size != n:
                            raise InvalidRequestError(
                                f"{self.name}: the batch of idempotent producer {h.producer_id} "
                                f"must be the only batch of its partition in a request (it is "
                                f"{size} of {n} bytes); nothing appended"
                            )
                        if producers is None:
                            producers = self.producer_state.begin()
                        duplicate = producers.check(
                            h.producer_id, h.producer_epoch, h.base_sequence, h.record_count
                        )
                        if duplicate is not None:
                            break  # appended before: answered with its offsets, not appended
                        producers.record(
                            h.producer_id,
                            h.producer_epoch,
                            h.base_sequence,
                            h.record_count,
                            offset,
                            h.max_timestamp,
                        )
                    iov.append(stamp(offset, h.batch_length, leader_epoch))
                    iov.append(mv[pos + STAMP_SIZE : pos + size])
                    batches.append((offset, size, h.max_timestamp))
                    offset += h.record_count
                    if h.max_timestamp > chunk_ts:
                        chunk_ts = h.max_timestamp
                    pos += size
            except RaftlogError as e:
                del iov[2 * mark :], batches[mark:]
                offset = chunk_offset
                outcomes.append(e)
                continue
            if duplicate is not None:
                count = duplicate.last_offset - duplicate.first_offset + 1
                outcomes.append(
                    (
                        duplicate.first_offset,
                        duplicate.last_offset,
                        count,
                        0,
                        0,
                        duplicate.max_timestamp,
                    )
                )
                continue
            outcomes.append(
                (chunk_offset, offset - 1, offset - chunk_offset, len(batches) - mark, n, chunk_ts)
            )
            records += offset - chunk_offset
            nbytes += n
            if chunk_ts > max_ts:
                max_ts = chunk_ts
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
        n = len(mv)
        if n == 0:
            raise CorruptRecordError(f"{self.name}: empty append")
        expected = self._next_offset
        batches: list[tuple[int, int, int]] = []
        epochs: list[tuple[int, int]] = []
        records = 0
        max_ts = -1
        pos = 0
        latest = self.epoch_cache.latest_epoch
        # Idempotent batches, recorded in the producer state once written.
        idempotent: list[tuple[int, int, int, int, int, int]] = []
        while pos < n:
            try:
                h = validate_batch(mv, pos, n)
            except CorruptRecordError as e:
                raise CorruptRecordError(f"{self.name}: {e}; nothing appended") from None
            if h.base_offset != expected:
                raise InvalidOffsetError(
                    f"{self.name}: follower batch at byte {pos} has base offset "
                    f"{h.base_offset}, the log continues at {expected}; nothing appended"
                )
            epoch = h.partition_leader_epoch
            if epoch > latest:
                epochs.append((epoch, h.base_offset))
                latest = epoch
            size = h.batch_length + LOG_OVERHEAD
            batches.append((h.base_offset, size, h.max_timestamp))
            if h.producer_id != NO_PRODUCER_ID:
                idempotent.append(
                    (
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        h.record_count,
                        h.base_offset,
                        h.max_timestamp,
                    )
                )
            expected = h.next_offset
            records += h.record_count
            if h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
            pos += size
        for epoch, start in epochs:
            self._assign_epoch(epoch, start)
        info = self._write([mv], n, batches, expected, records, max_ts)
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
                written = _pwritev_all(seg.fd, iov, start)
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
                written = _pwritev_all(seg.fd, group, start)
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

    def _undo_write(self, seg: LogSegment, start: int, nbytes: int, error: OSError) -> None:
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
        log.warning("%s; rolled back, the log is unchanged", what)
        raise StorageError(f"{what}; nothing appended") from error

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
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._write_producer_snapshot()
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
        self._set_offline(self._corrupted(damage), None)

    def scrub(self, budget_bytes: int, deadline: float | None = None) -> int:
        """Check the checksums of about `budget_bytes` of closed segments' batches, going on
        from where the last call stopped, and stop at `deadline` (time.monotonic()) too;
        returns the bytes checked (0 when there is no closed segment). A full pass ends a
        call, so one call never checks a byte twice. Damage takes the log offline
        (LogCorruptedError naming the file and byte, as a read's damage does).
        """
        self._check_writable()
        closed = self._segments[:-1]
        if not closed:
            return 0
        base, pos = self._scrub_at
        i = bisect_left(self._bases, base, hi=len(closed))
        if i == len(closed) or self._bases[i] != base:
            pos = 0  # that segment went (retention, truncation): go on with the next one
            if i == len(closed):
                i = 0
        checked = 0
        seg = closed[i]
        try:
            while checked < budget_bytes:
                if pos >= seg.size:
                    i, pos = i + 1, 0
                    if i == len(closed):
                        self._scrub_at = (closed[0].base_offset, 0)
                        return checked  # a full pass
                    seg = closed[i]
                    continue
                done = self._scrub_chunk(seg, pos)
                pos += done
                checked += done
                if deadline is not None and time.monotonic() >= deadline:
                    break
        except OSError as e:
            self._go_offline(f"reading {seg.log_path} to check it failed ({os_error_text(e)})", e)
        self._scrub_at = (seg.base_offset, pos)
        return checked

    def _scrub_chunk(self, seg: LogSegment, pos: int) -> int:
        """Check the whole batches of one chunk of `seg` from `pos` (at least one batch);
        returns the bytes they take."""
        buf = seg.read_at(pos, min(SCRUB_CHUNK_BYTES, seg.size - pos))
        rel = 0
        while True:
            if len(buf) - rel < LOG_OVERHEAD:
                if rel:
                    return rel
                self._damaged(SegmentDamage(seg.log_path, pos, -1, "torn batch header"))
            total = INT32.unpack_from(buf, rel + 8)[0] + LOG_OVERHEAD
            if total < HEADER_SIZE or pos + rel + total > seg.size:
                why = f"impossible batch length {total - LOG_OVERHEAD}"
                self._damaged(SegmentDamage(seg.log_path, pos + rel, -1, why))
            if rel + total > len(buf):
                if rel:
                    return rel
                buf = seg.read_at(pos, total)  # one batch larger than a chunk
            try:
                validate_batch(buf, rel, rel + total)
            except CorruptRecordError as e:
                why = f"{e} (found by the scrubber)".replace(
                    f"at byte {rel}", f"at byte {pos + rel}"
                )
                self._damaged(SegmentDamage(seg.log_path, pos + rel, -1, why))
            rel += total

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
            raise StorageError(
                f"{self.name}: removing {self._clean_checkpoint.path} before a change failed "
                f"({os_error_text(e)}); nothing changed"
            ) from e
        self._clean_marker = False

    def write_side_file(self, name: str, data: bytes, sync: bool = True) -> str:
        """Write a small file of the owner's into the log's directory (the broker's topic
        id); returns its path. Into a new, empty log it is written in place (torn, it can only
        describe an empty log, and the owner then drops the directory), else atomically.
        `sync=False` leaves the fsync to the caller (`fsync_paths`, for many logs at once).
        Raises OSError."""
        path = os.path.join(self.path, name)
        if not self._unchanged or self._next_offset:
            atomic_write(path, data, sync)
            return path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, f"short write to {path}")
            if sync:
                os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(path)  # no half-written file left behind
            raise
        finally:
            os.close(fd)
        if sync:
            fsync_dir(self.path)
        return path

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
                # The data is fsynced; only the checkpoint lags, which recovery tolerates.
                raise StorageError(
                    f"{self.name}: writing {self._rp_checkpoint.path} failed "
                    f"({os_error_text(e)}); the data is flushed"
                ) from e
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
        seg = self._segment_for(offset)
        try:
            return _slice_of(seg, offset, max_bytes, max_offset)
        except SegmentDamage as e:
            self._repair_index(seg, e)
        try:
            return _slice_of(seg, offset, max_bytes, max_offset)
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
        out: list[Record] = []
        pos = 0
        while pos < len(data):
            h = validate_batch(data, pos)
            out.extend(r for r in decode_records(data, pos, h) if r.offset >= offset)
            pos += h.size
        return out

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
                raise StorageError(
                    f"{self.name}: writing {self.epoch_cache.path} failed ({os_error_text(e)})"
                ) from e
            return self._next_offset
        self._begin_change()
        self._truncations += 1
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
                    else int(HEADER.unpack_from(seg.read_at(pos, HEADER_SIZE))[0])
                )
                self._lower_recovery_point(new_end)  # before any byte goes
                for later in self._segments[i + 1 :]:
                    later.delete()
                del self._segments[i + 1 :]
                del self._bases[i + 1 :]
                self._next_offset = seg.truncate_to(offset)
                if self._next_offset < self._log_start:
                    # The batch holding `offset` began below the log start: the log is now
                    # empty, and must start where it ends (invariant log_start <= next_offset).
                    self._log_start = self._next_offset
                    self._start_checkpoint.write(self._log_start)
            self.epoch_cache.truncate_from_end(self._next_offset)
            self._lower_recovery_point(self._next_offset)
            self._rebuild_producer_state()
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
        self._segments, self._bases = [seg], [offset]
        self._next_offset = offset
        self._log_start = offset
        self._start_checkpoint.write(offset)
        self._recovery_point = offset
        self._rp_checkpoint.write(offset)
        self.epoch_cache.clear()
        self.producer_state.clear()
        for snapshot in self._snapshot_offsets():
            os.unlink(self._snapshot_path(snapshot))

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
        """Delete the oldest closed segments beyond `retention_ms` / `retention_bytes`.

        Closed segments wholly below the log start offset go too (one that was active when
        `delete_records_before` passed it, and rolled since). Only a prefix of closed segments
        goes, never the active one, and never a segment holding offsets at or past
        `max_offset` (the high watermark: uncommitted records are not retention's to delete).
        Returns how many went.
        """
        self._check_writable()
        now = self._clock_ms() if now_ms is None else now_ms
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        total = self.size_bytes
        count = 0
        for seg in self._segments[:-1]:
            if max_offset is not None and seg.next_offset > max_offset:
                break
            below_start = seg.next_offset <= self._log_start
            expired = retention_ms >= 0 and now - seg.max_timestamp > retention_ms
            oversize = retention_bytes >= 0 and total - seg.size >= retention_bytes
            if not (below_start or expired or oversize):
                break
            total -= seg.size
            count += 1
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
                self._write_producer_snapshot()  # the next open replays nothing
                # Last: it promises that every byte up to the log end is on disk.
                self._clean_checkpoint.write(self._next_offset)
            except (OSError, StorageError) as e:
                failure = e
        closing_failure = _close_all(self._segments)
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


def _slice_of(seg: LogSegment, offset: int, max_bytes: int, max_offset: int | None) -> FileSlice:
    start = seg.position_of(offset)
    limit = seg.size
    if max_offset is not None and max_offset < seg.next_offset:
        limit = seg.position_of(max_offset)
        if limit <= start:
            return EMPTY_SLICE
    want = start + max(max_bytes, 1)
    end = limit if want >= limit else min(seg.boundary_at_or_before(start, want), limit)
    return FileSlice(seg.fd, seg.log_path, start, end - start)


def _close_all(segments: list[LogSegment]) -> OSError | None:
    """Close every segment's file, even if writing some indices fails; the first failure."""
    failure = None
    for seg in segments:
        try:
            seg.close()
        except OSError as e:
            failure = failure or e
    return failure


def _pwritev_all(fd: int, iov: list[bytes | memoryview], position: int) -> int:
    """pwritev all of `iov` (at most IOV_MAX buffers per call); returns the bytes written.

    A short write is continued rather than taken as the error: the kernel writes what fits and
    then reports why the rest does not (ENOSPC, EFBIG, EIO) as an OSError on the next call.
    """
    total = sum(len(b) for b in iov)
    if len(iov) <= IOV_MAX:
        written = os.pwritev(fd, iov, position)
        if written == total:
            return written
    else:
        written = 0
    views = [memoryview(b) for b in iov]
    skip = written
    while views and skip >= len(views[0]):
        skip -= len(views.pop(0))
    if skip:
        views[0] = views[0][skip:]
    while views:
        n = os.pwritev(fd, views[:IOV_MAX], position + written)
        if n == 0:
            break
        written += n
        while views and n >= len(views[0]):
            n -= len(views.pop(0))
        if n:
            views[0] = views[0][n:]
    return written
