"""The producer state's snapshot files in a log directory, and rebuilding the state from them.

Producer state (producer_state.py) lives with the log, so that it changes exactly when the log
does: the leader path checks idempotent batches before the write (a duplicate is answered with
its original offsets and not written; a gap or a fenced epoch is that chunk's error) and
publishes the state after the write succeeded; the follower path records what it wrote;
truncation rebuilds it; rolls and close snapshot it (`<offset>.snapshot`, no fsync: derived
data); open loads the newest snapshot at or below the log end and replays the batch headers
after it. An idempotent batch must be alone in its chunk (one batch per partition per request,
as Kafka requires), so that a duplicate's answer is one batch's offsets.

This module holds the file side of that: where snapshots live, writing one
(`write_producer_snapshot`) and the rebuild from the newest valid one plus the batches after
it (`rebuild_producer_state`). Its functions take the log directory, the state and the
segments they use; the log calls them at open, roll, truncation and close.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from raftlog.records import NO_PRODUCER_ID
from raftlog.storage.file_io import os_error_text
from raftlog.storage.producer_state import SNAPSHOT_SUFFIX, ProducerState, SnapshotError
from raftlog.storage.segment import LogSegment

# The partition log's messages keep the log's logger name, whichever of its modules writes
# them: operators' log configurations and filters name it.
log = logging.getLogger("raftlog.storage.log")

# Producer state snapshots kept (the newest ones): recovery and a truncation near the log end
# replay only the batches after the newest one at or below the log end.
PRODUCER_SNAPSHOTS_KEPT = 2


def snapshot_path(log_dir: str, offset: int) -> str:
    return os.path.join(log_dir, f"{offset:020d}{SNAPSHOT_SUFFIX}")


def snapshot_offsets(log_dir: str) -> list[int]:
    """The offsets of the snapshots in `log_dir`, oldest first."""
    out = []
    for entry in os.listdir(log_dir):
        stem = entry[: -len(SNAPSHOT_SUFFIX)]
        if entry.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            out.append(int(stem))
    return sorted(out)


def delete_producer_snapshots(log_dir: str) -> None:
    """Delete every snapshot (the log was emptied). Raises OSError."""
    for offset in snapshot_offsets(log_dir):
        os.unlink(snapshot_path(log_dir, offset))


def rebuild_producer_state(
    name: str,
    log_dir: str,
    state: ProducerState,
    segments: Sequence[LogSegment],
    log_start: int,
    log_end: int,
) -> None:
    """Make `state` the producer state as of `log_end`: the newest valid snapshot at or below
    it, then the idempotent batches after it. Snapshots above the log end describe records
    that are gone (a cut tail, a truncation) and are deleted, as are damaged ones.
    Raises OSError, and SegmentDamage from the headers it walks."""
    state.clear()
    replay_from = log_start
    for offset in reversed(snapshot_offsets(log_dir)):
        path = snapshot_path(log_dir, offset)
        if offset <= log_end:
            try:
                with open(path, "rb") as f:
                    state.load_snapshot(f.read(), path)
                replay_from = max(offset, log_start)
                break
            except SnapshotError as e:
                log.warning("%s: ignoring a producer state snapshot: %s", name, e)
        os.unlink(path)
    state.truncate_head(log_start)
    replayed = 0
    record = state.record
    for seg in segments:
        if seg.next_offset <= replay_from:
            continue
        pos = seg.position_of(replay_from) if seg.base_offset < replay_from else 0
        for _, h in seg.iter_headers(pos, seg.size):
            # base_offset, ..., max_timestamp (8), producer_id, epoch, base_sequence, count
            if h[9] != NO_PRODUCER_ID and h[0] + h[6] >= replay_from:
                # A cleaned batch's sequences span its offsets, not its kept records.
                record(h[9], h[10], h[11], h[6] + 1, h[0], h[8])
                replayed += 1
    if replayed or len(state):
        log.info(
            "%s: producer state rebuilt: %d producers, %d batches replayed from offset %d",
            name,
            len(state),
            replayed,
            replay_from,
        )


def write_producer_snapshot(name: str, log_dir: str, state: ProducerState, offset: int) -> None:
    """Snapshot `state` as of the log end `offset` (at a roll, on close), keeping the newest
    PRODUCER_SNAPSHOTS_KEPT. Derived data, written without fsync: a lost or torn snapshot
    fails its checksum and recovery replays from an older one (or the log start). A failure
    to write is logged, never fatal to the log."""
    path = snapshot_path(log_dir, offset)
    try:
        with open(path + ".tmp", "wb") as f:
            f.write(state.encode_snapshot(offset))
        os.replace(path + ".tmp", path)
        for old in snapshot_offsets(log_dir)[:-PRODUCER_SNAPSHOTS_KEPT]:
            os.unlink(snapshot_path(log_dir, old))
    except OSError as e:
        log.warning(
            "%s: writing producer state snapshot %s failed (%s); recovery will replay "
            "more of the log",
            name,
            path,
            os_error_text(e),
        )
