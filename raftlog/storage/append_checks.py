"""Checking the batches of an append before the log writes them: the leader's and the
follower's rules, with no I/O.

Rules:
- Pure: these functions read the bytes they are given and return what to write; they touch no
  file and change no log state. The leader's idempotent batches are checked and recorded in a
  `ProducerAppend` that the caller commits only once the write succeeded (producer_state.py).
- Batches are validated without decoding their records (records.py's `validate_batch`), of
  either format: raftlog's own (magic 1) or Kafka's v2 (magic 2), side by side in one log;
  each is stamped in its own byte order. A leader refuses v2 batches that are transactional
  or control batches (raftlog has no transactions).
- Leader (`check_leader_chunks`): each chunk (one Produce request's batches for the partition)
  is checked on its own: a corrupt or oversized chunk gets its error and is left out, so one bad
  producer costs the others nothing. The valid chunks get consecutive offsets in order, and
  each batch becomes two buffers: its 16 stamped header bytes (base offset, length, leader
  epoch) and the untouched rest of the batch, so the write copies nothing and re-hashes
  nothing. An idempotent batch must be alone in its chunk (one batch per partition per
  request, as Kafka requires), so that a duplicate's answer is one batch's offsets; a duplicate
  is answered with its original offsets and not written.
- Follower (`check_follower_batches`): the batches carry the leader's offsets and epochs; they
  must continue the log exactly, else nothing is appended. In a compacted log they may start
  above where it ends (the leader's cleaner removed the batches between): offsets still go up.
- Per batch they build only what the write needs; the log calls each once per append.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from raftlog.errors import (
    CorruptRecordError,
    InvalidOffsetError,
    InvalidRecordError,
    InvalidRequestError,
    RaftlogError,
    RecordTooLargeError,
)
from raftlog.records import (
    LOG_OVERHEAD,
    MAGIC,
    NO_PRODUCER_ID,
    STAMP,
    STAMP_SIZE,
    STAMP_V2,
    BatchHeader,
    decode_records,
    validate_batch,
)
from raftlog.records_v2 import CONTROL_BIT, TRANSACTIONAL_BIT
from raftlog.storage.producer_state import ProducerAppend, ProducerState

# Kafka v2 attributes a producer's batch may not carry here: raftlog has no transactions (so
# no transactional batch could ever be committed or aborted), and control batches (commit and
# abort markers) come from brokers, never from clients, in Kafka too (INVALID_RECORD).
_NOT_FROM_PRODUCERS = TRANSACTIONAL_BIT | CONTROL_BIT


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


# Per chunk: (base offset, last offset, records, batches, bytes, max timestamp) or the chunk's
# error. The log makes an AppendInfo of each once the write has succeeded.
ChunkOutcome = tuple[int, int, int, int, int, int] | RaftlogError
# Per batch to write: (base offset, size in bytes, max timestamp).
BatchSpan = tuple[int, int, int]
# What the leader's chunks come to: (iov, bytes, batches, next offset, records, max timestamp,
# one outcome per chunk, the uncommitted producer state changes or None). A plain tuple, not a
# NamedTuple: it is built on every append, and a tuple is several times cheaper.
LeaderChunks = tuple[
    list[bytes | memoryview],
    int,
    list[BatchSpan],
    int,
    int,
    int,
    list[ChunkOutcome],
    ProducerAppend | None,
]
# What a follower's batches come to: (batches, new epochs as (epoch, start offset), next
# offset, records, max timestamp, idempotent batches as ProducerState.record's arguments).
FollowerBatches = tuple[
    list[BatchSpan], list[tuple[int, int]], int, int, int, list[tuple[int, int, int, int, int, int]]
]


def check_leader_chunks(
    name: str,
    chunks: Sequence[memoryview],
    first_offset: int,
    leader_epoch: int,
    max_message_bytes: int,
    producer_state: ProducerState,
    keys_required: bool = False,
) -> LeaderChunks:
    """Check `chunks` for a leader append at `first_offset` (see the module's rules): the
    buffers to write (two per batch), their byte count, the batches, the offset after the
    last one, the record count and max timestamp of what is written, one outcome per chunk,
    and the producer state changes to commit after the write (None if no idempotent batch)."""
    offset = first_offset
    max_bytes = max_message_bytes
    iov: list[bytes | memoryview] = []
    batches: list[BatchSpan] = []
    outcomes: list[ChunkOutcome] = []
    records = 0
    nbytes = 0
    max_ts = -1
    stamp, stamp_v2 = STAMP.pack, STAMP_V2.pack
    # Idempotent batches' checks and records, published once the write succeeded.
    producers: ProducerAppend | None = None
    for mv in chunks:
        n = len(mv)
        if n == 0:
            outcomes.append(CorruptRecordError(f"{name}: empty append"))
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
                    raise CorruptRecordError(f"{name}: {e}; nothing appended") from None
                size = h.batch_length + LOG_OVERHEAD
                if size > max_bytes:
                    raise RecordTooLargeError(
                        f"{name}: batch of {size} bytes at byte {pos} exceeds "
                        f"max_message_bytes={max_bytes}; nothing appended"
                    )
                if h.last_offset_delta != h.record_count - 1 or h.record_count < 1:
                    raise CorruptRecordError(
                        f"{name}: batch at byte {pos} has {h.record_count} records and last "
                        f"offset delta {h.last_offset_delta}: a producer's batch holds at "
                        "least one record, at consecutive offsets; nothing appended"
                    )
                if keys_required:
                    check_keys(name, mv, pos, h)
                if h.magic != MAGIC and h.attributes & _NOT_FROM_PRODUCERS:
                    raise InvalidRequestError(
                        f"{name}: v2 batch at byte {pos} is transactional or a control batch "
                        f"(attributes {h.attributes:#06x}): raftlog has no transactions, and "
                        "control batches are written by brokers only; nothing appended"
                    )
                if h.producer_id != NO_PRODUCER_ID:
                    if size != n:
                        raise InvalidRequestError(
                            f"{name}: the batch of idempotent producer {h.producer_id} "
                            f"must be the only batch of its partition in a request (it is "
                            f"{size} of {n} bytes); nothing appended"
                        )
                    if producers is None:
                        producers = producer_state.begin()
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
                # The stamp's byte order is the batch's: raftlog's format or Kafka's v2.
                iov.append(
                    (stamp if h.magic == MAGIC else stamp_v2)(offset, h.batch_length, leader_epoch)
                )
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
    return iov, nbytes, batches, offset, records, max_ts, outcomes, producers


def check_keys(name: str, mv: memoryview, pos: int, h: BatchHeader) -> None:
    """A compacted topic's batch: every record has a key (Kafka's rule: the cleaner keeps the
    last record of each key, and a record without one could only be dropped). Decodes the
    records: only compacted topics pay for it."""
    for r in decode_records(mv, pos, h):
        if r.key is None:
            raise InvalidRecordError(
                f"{name}: the record at offset delta {r.offset - h.base_offset} of the batch at "
                f"byte {pos} has no key: a compacted topic (cleanup.policy=compact) keeps the "
                "last record of each key and takes only records with one; nothing appended"
            )


def check_follower_batches(
    name: str, mv: memoryview, log_end: int, latest_epoch: int, gaps: bool = False
) -> FollowerBatches:
    """Check a follower's batches `mv` (see the module's rules), which must start at
    `log_end` (in a compacted log, `gaps`, at or above it): the batches, the epochs above
    `latest_epoch` they start, the offset after the last one, the record count, the max
    timestamp and the idempotent batches. Raises CorruptRecordError or InvalidOffsetError,
    for all of them."""
    n = len(mv)
    if n == 0:
        raise CorruptRecordError(f"{name}: empty append")
    expected = log_end
    batches: list[BatchSpan] = []
    epochs: list[tuple[int, int]] = []
    records = 0
    max_ts = -1
    pos = 0
    latest = latest_epoch
    # Idempotent batches, recorded in the producer state once written.
    idempotent: list[tuple[int, int, int, int, int, int]] = []
    while pos < n:
        try:
            h = validate_batch(mv, pos, n)
        except CorruptRecordError as e:
            raise CorruptRecordError(f"{name}: {e}; nothing appended") from None
        if h.base_offset != expected and not (gaps and h.base_offset > expected):
            raise InvalidOffsetError(
                f"{name}: follower batch at byte {pos} has base offset "
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
                    h.last_offset_delta + 1,  # a cleaned batch's records span its offsets
                    h.base_offset,
                    h.max_timestamp,
                )
            )
        expected = h.next_offset
        records += h.record_count
        if h.max_timestamp > max_ts:
            max_ts = h.max_timestamp
        pos += size
    return batches, epochs, expected, records, max_ts, idempotent
