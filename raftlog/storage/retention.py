"""Which of a log's oldest segments retention deletes: a pure decision over segment sizes,
offsets and timestamps; `PartitionLog.enforce_retention` deletes them.

Rules (Kafka's `retention.ms` / `retention.bytes`, per partition):
- Only a prefix of the closed segments goes, never the active (last) one: the first segment
  that is kept ends the prefix.
- A closed segment goes when its newest record is older than `retention_ms` (a negative value:
  no time limit), when the log is at least `retention_bytes` without it (negative: no size
  limit), or when it lies wholly below the log start offset (it was active when
  `delete_records_before` passed it, and rolled since).
- Never a segment holding offsets at or past `max_offset` (the high watermark: uncommitted
  records are not retention's to delete).
- Timestamps are the batches' max timestamps and `now_ms` is passed in: the same segments and
  the same time give the same answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class SegmentExtent(Protocol):
    """What retention reads of a segment (LogSegment has these)."""

    @property
    def size(self) -> int: ...

    @property
    def next_offset(self) -> int: ...

    @property
    def max_timestamp(self) -> int: ...


def expired_segments(
    segments: Sequence[SegmentExtent],
    log_start: int,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    max_offset: int | None,
) -> int:
    """How many of `segments` (all of a log's, oldest first, the active one last) retention
    deletes from the front, by the module's rules."""
    total = sum(s.size for s in segments)
    count = 0
    for seg in segments[:-1]:
        if max_offset is not None and seg.next_offset > max_offset:
            break
        below_start = seg.next_offset <= log_start
        expired = retention_ms >= 0 and now_ms - seg.max_timestamp > retention_ms
        oversize = retention_bytes >= 0 and total - seg.size >= retention_bytes
        if not (below_start or expired or oversize):
            break
        total -= seg.size
        count += 1
    return count
