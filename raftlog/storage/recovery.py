"""Opening a partition log's directory after a crash or a clean shutdown: what to trust, what
to check, what to cut.

Rules (Kafka's log recovery, with damage below the recovery point never cut):
- `close()` writes a clean-shutdown marker (the log end offset) after everything is fsynced.
  A log opened with its marker is not recovered at all (Kafka's `.kafka_cleanshutdown`):
  every byte up to the marker's log end is trusted. The marker stays on disk until the log's
  first change (PartitionLog._begin_change), so that opening and closing an idle log writes
  nothing.
- Segments wholly below the recovery point are trusted: their indices are sanity-checked
  (rebuilt if they disagree: derived data) and the headers after the last index entry are
  walked. The segment holding the recovery point and those after it are checked batch by
  batch. Damage ABOVE the recovery point is a torn or unflushed tail: the segment is cut at
  the first invalid byte, with a log line naming the file, position and bytes removed, and
  later segments are deleted. Damage BELOW it (fsynced bytes: a disk or operator fault, not a
  crash) is never cut: the open raises LogCorruptedError naming the file, byte and offsets
  (`corrupted_error`) and touches no file. The same holds for a gap between segments, or a
  log that ends, below it.
- `check_segments` names segments to check batch by batch although they are trusted (where a
  read found damage).
- Only once the log is known sound do files change: leftovers are tidied, segments below the
  log start deleted, the checked segments fsynced, changed checkpoints rewritten. A new, empty
  log writes nothing at all.
- The leader epoch cache file is right below the recovery point (it is fsynced before the
  recovery point moves); above it, the checked batches say what it holds. An unreadable cache
  is rebuilt from every batch header.
- The producer state is rebuilt from its snapshots (producer_snapshots.py).
- A compacted log (`gaps`) may have gaps between batches and between segments; offsets must
  still go up. A clean's `.swap` file is a committed clean: it is finished before anything
  loads, and `.cleaned` files (cleans that never committed) are removed (cleaner.py).

`recover` takes everything it uses as arguments and returns the state the log starts from;
the segments it opens go into the caller's list as they are opened, so that a failing open
can close them all.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from raftlog.errors import LogCorruptedError
from raftlog.records import NO_PARTITION_LEADER_EPOCH
from raftlog.storage.checkpoint import CheckpointError, OffsetCheckpoint, fsync_dir
from raftlog.storage.cleaner import complete_swaps
from raftlog.storage.config import LogConfig
from raftlog.storage.epoch_cache import LeaderEpochCache
from raftlog.storage.producer_snapshots import rebuild_producer_state
from raftlog.storage.producer_state import ProducerState
from raftlog.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    LogSegment,
    SegmentDamage,
    parse_segment_name,
)

# The partition log's messages keep the log's logger name, whichever of its modules writes
# them: operators' log configurations and filters name it.
log = logging.getLogger("raftlog.storage.log")


@dataclass(frozen=True, slots=True)
class LogCheckpoints:
    """The checkpoint files of one log directory (names: log.py)."""

    recovery_point: OffsetCheckpoint
    log_start: OffsetCheckpoint
    clean_shutdown: OffsetCheckpoint


@dataclass(frozen=True, slots=True)
class Recovered:
    """The state a recovered log starts from. Everything below `log_end` is on disk (the
    recovery point is the log end), and `log_start <= log_end`."""

    log_start: int
    log_end: int
    epoch_cache: LeaderEpochCache
    # The clean-shutdown marker is still on disk and tells the truth (PartitionLog keeps it
    # until the first change).
    clean_marker: bool
    # The files recover to this very state as they are: close need write nothing.
    unchanged: bool


def corrupted_error(
    name: str, log_dir: str, recovery_point: int, damage: SegmentDamage, later_segments: int = -1
) -> LogCorruptedError:
    """The error for damage below the recovery point: what, where, and what was kept."""
    later = f"; {later_segments} later segment files follow it" if later_segments > 0 else ""
    offset = (
        f"; the batch there should start at offset {damage.offset}" if damage.offset >= 0 else ""
    )
    return LogCorruptedError(
        f"{name}: damaged data below the recovery point {recovery_point}: "
        f"{damage}{offset}{later}. Nothing was truncated or deleted: the partition stays "
        f"offline on this broker until the damage is repaired (`raftlog storage verify "
        f"{log_dir}` names it)",
        damage.log_path,
        damage.position,
        damage.offset,
    )


def recover(
    log_dir: str,
    name: str,
    config: LogConfig,
    checkpoints: LogCheckpoints,
    epoch_cache_path: str,
    producer_state: ProducerState,
    check_segments: frozenset[int],
    segments: list[LogSegment],
    gaps: bool = False,
) -> Recovered:
    """Recover the log in the existing directory `log_dir` (see the module's rules).

    `segments` is the caller's empty list: the log's segments go into it. Rebuilds
    `producer_state` in place. Raises LogCorruptedError, having changed no file, if data below
    the recovery point is damaged, and OSError if the files cannot be read or written.
    """
    rp_on_disk = _read_checkpoint(name, checkpoints.recovery_point, default=0)
    clean_end = _read_clean_shutdown(name, checkpoints.clean_shutdown)
    recovery_point = rp_on_disk
    if clean_end is not None:
        # Closed cleanly: everything up to the log end the marker holds was fsynced. Take
        # the larger of the two, so that a lost checkpoint cannot turn damage into a cut.
        recovery_point = max(recovery_point, clean_end)
    log_start = start_on_disk = _read_checkpoint(name, checkpoints.log_start, default=0)
    try:
        epoch_cache = LeaderEpochCache.load(epoch_cache_path)
        rebuild_epochs = False
    except CheckpointError as e:
        log.warning("%s: rebuilding leader epoch cache from the log: %s", name, e)
        epoch_cache = LeaderEpochCache(epoch_cache_path)
        rebuild_epochs = True
    # A clean's swap that committed is finished, one that did not is dropped (cleaner.py);
    # the swapped-in segments have no indices yet: checked, they get them.
    swapped = complete_swaps(log_dir)
    if swapped:
        gaps = True
        check_segments = check_segments | frozenset(swapped)
    bases = sorted(b for e in os.listdir(log_dir) if (b := parse_segment_name(e)) is not None)
    if not os.path.exists(epoch_cache_path) and bases:
        rebuild_epochs = True
    try:
        unsynced = _load_segments(
            log_dir, name, config, bases, recovery_point, check_segments, segments, gaps
        )
        # The log is sound: from here on files may change. Tidy leftovers first.
        _remove_leftovers(log_dir)
        if not segments:
            seg = LogSegment.create(log_dir, log_start)
            seg.index_interval = config.index_interval_bytes
            segments.append(seg)
        log_end = segments[-1].next_offset
        log_start = min(max(log_start, segments[0].base_offset), log_end)
        while len(segments) > 1 and segments[0].next_offset <= log_start:
            segments.pop(0).delete()
        if rebuild_epochs:
            _rebuild_epoch_cache(epoch_cache, segments)
        else:
            _reconcile_epoch_cache(epoch_cache, unsynced, segments, log_start, log_end)
        # Epochs starting at or after the log end never wrote a batch here (assigned just
        # before a crash), except in an empty log: there the epoch covering the log start
        # starts at the log end, as the running log keeps it after delete_records_before.
        empty = log_start == log_end
        epoch_cache.truncate_from_end(log_end + 1 if empty else log_end)
        epoch_cache.truncate_from_start(log_start)
        rebuild_producer_state(name, log_dir, producer_state, segments, log_start, log_end)
    except SegmentDamage as e:
        # Found in trusted data after the segments were loaded (the epoch cache rebuild and
        # the producer state replay walk headers): below the recovery point by construction.
        raise corrupted_error(name, log_dir, recovery_point, e) from None
    # Everything that survived was checked; make it durable and start from a clean point.
    # Segments below the recovery point are on disk already (a cleanly closed log's are
    # all): only the checked ones are fsynced, and only changed checkpoints are written.
    # A new, empty log writes nothing at all: losing it to a power failure loses nothing.
    for seg in unsynced:
        if seg in segments and seg.size:
            os.fdatasync(seg.fd)
            seg.index.persist(fsync=True)
    epoch_cache.sync()  # before the recovery point moves up over what it describes
    if log_end != rp_on_disk:
        checkpoints.recovery_point.write(log_end)
    if log_start != start_on_disk:
        checkpoints.log_start.write(log_start)
    # The marker stays until the first change (`_begin_change`): until then it still
    # tells the truth. A crash before that reopens this log as cleanly shut down.
    clean_marker = clean_end is not None and clean_end == log_end
    if clean_end is not None and not clean_marker:
        checkpoints.clean_shutdown.remove()
        fsync_dir(log_dir)
    log.debug(
        "%s: opened %d segments, log start %d, log end %d%s",
        name,
        len(segments),
        log_start,
        log_end,
        " (clean shutdown: not recovered)" if clean_end is not None else "",
    )
    return Recovered(
        log_start,
        log_end,
        epoch_cache,
        clean_marker,
        unchanged=clean_marker or log_start == log_end == 0,
    )


def _load_segments(
    log_dir: str,
    name: str,
    config: LogConfig,
    bases: list[int],
    recovery_point: int,
    check_segments: frozenset[int],
    segments: list[LogSegment],
    gaps: bool,
) -> list[LogSegment]:
    """Open the segment files `bases` into `segments`, checking and cutting as the rules say;
    returns the segments that may hold bytes not yet on disk (checked, cut), to be fsynced."""

    def corrupted(damage: SegmentDamage, later_segments: int = -1) -> LogCorruptedError:
        return corrupted_error(name, log_dir, recovery_point, damage, later_segments)

    unsynced: list[LogSegment] = []
    for i, base in enumerate(bases):
        seg = LogSegment.open(log_dir, base)
        seg.index_interval = config.index_interval_bytes
        seg.gaps = gaps
        if gaps and segments and base > segments[-1].next_offset:
            # The previous segment's last batches were compacted away: it ends where this
            # one starts (offsets never change).
            segments[-1].next_offset = base
        if segments and base != segments[-1].next_offset:
            end = segments[-1].next_offset
            if min(end, base) < recovery_point:
                seg.close()
                raise corrupted(
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
                name,
                seg.log_path,
                base,
                end,
                recovery_point,
            )
            seg.close()
            _delete_files_from(log_dir, bases[i:])
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
                log.warning("%s: %s; checking every batch of the segment", name, e)
                needs_check = True
            else:
                if last and seg.next_offset < recovery_point:
                    raise corrupted(
                        SegmentDamage(
                            seg.log_path,
                            seg.size,
                            seg.next_offset,
                            f"the log ends at offset {seg.next_offset}: records "
                            f"[{seg.next_offset}, {recovery_point}) are missing",
                        ),
                    )
                needs_check = not trusted and seg.next_offset > recovery_point
        if needs_check:
            unsynced.append(seg)
            valid, reason = seg.check()
            if reason and (trusted or seg.next_offset < recovery_point):
                raise corrupted(
                    SegmentDamage(seg.log_path, valid, seg.next_offset, reason),
                    len(bases) - i - 1,
                )
            removed = seg.cut(valid)
            if removed:
                log.warning(
                    "%s: recovery truncated %s at byte %d, removing %d bytes (from offset "
                    "%d, at or above the recovery point %d): %s",
                    name,
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
                        name,
                        len(later),
                        later[0],
                    )
                    _delete_files_from(log_dir, later)
                break
    return unsynced


def _remove_leftovers(log_dir: str) -> None:
    """Delete a checkpoint write that never got renamed, and the indices of a missing
    segment."""
    for entry in os.listdir(log_dir):
        stem, _, suffix = entry.partition(".")
        if entry.endswith(".tmp") or (
            "." + suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX)
            and not os.path.exists(os.path.join(log_dir, stem + LOG_SUFFIX))
        ):
            os.unlink(os.path.join(log_dir, entry))


def _reconcile_epoch_cache(
    cache: LeaderEpochCache,
    unsynced: list[LogSegment],
    segments: list[LogSegment],
    log_start: int,
    log_end: int,
) -> None:
    """The file is right below the recovery point (it is fsynced before the recovery point
    moves); from the first batch checked on, the batches say what it holds."""
    runs = [
        (epoch, start)
        for seg in unsynced
        if seg in segments
        for epoch, start in seg.checked_epochs
        if start < seg.next_offset and epoch != NO_PARTITION_LEADER_EPOCH
    ]
    # Only runs that reach into the log (above its start): batches below it are gone for the
    # log, and so are their epochs.
    ends = [start for _, start in runs[1:]] + [log_end]
    walked = [run for run, end in zip(runs, ends[: len(runs)], strict=True) if end > log_start]
    if walked:
        # An epoch the file starts at the log end describes no batch, and stays as the running
        # log kept it (an empty log's epoch starts at its end).
        at_end = [e for e in cache.entries() if e[1] >= log_end]
        cache.truncate_from_end(walked[0][1])
        for epoch, start in [*walked, *at_end]:
            cache.assign(epoch, start)


def _read_clean_shutdown(name: str, checkpoint: OffsetCheckpoint) -> int | None:
    """The log end offset the clean-shutdown marker holds, or None (no marker, unreadable)."""
    try:
        return checkpoint.read()
    except CheckpointError as e:
        log.warning("%s: ignoring %s; recovering as after a crash", name, e)
        return None


def _read_checkpoint(name: str, checkpoint: OffsetCheckpoint, default: int) -> int:
    try:
        value = checkpoint.read()
    except CheckpointError as e:
        log.warning("%s: ignoring %s", name, e)
        return default
    return default if value is None else value


def _delete_files_from(log_dir: str, bases: list[int]) -> None:
    for base in bases:
        seg = LogSegment.open(log_dir, base)
        seg.delete()


def _rebuild_epoch_cache(cache: LeaderEpochCache, segments: list[LogSegment]) -> None:
    cache.clear()
    for seg in segments:
        for _, h in seg.iter_headers(0, seg.size):
            epoch = h[2]
            if epoch != NO_PARTITION_LEADER_EPOCH and epoch > cache.latest_epoch:
                cache.assign(epoch, h[0])
