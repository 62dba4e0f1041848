"""What a consumer makes of a fetched partition's bytes: `ConsumerRecord`s, one list per batch.

`decode_fetch` is the consumer's decode path (AsyncConsumer, and so the sync Consumer and
`raftlog consume`), pure: bytes in, records out, no I/O, no clock.

Rules it keeps:
- Every whole batch is checked before any of its records is handed out (`validate_batch`:
  lengths, counts, and the checksum unless `check_crcs` is off; a reader that trusted a
  corrupt length could loop, so only the checksum can be skipped).
- A batch cut off by the fetch's byte limit at the end is not an error: it is left for the
  next fetch. A batch that fails its checks raises CorruptRecordError naming the partition and
  the offset where it starts; the batches before it have been yielded.
- A fetch may start inside a batch: records below the fetch offset are dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from raftlog.errors import CorruptRecordError
from raftlog.records import (
    HEADER_SIZE,
    INT32,
    LENGTH_AT,
    LOG_OVERHEAD,
    decode_records_as,
    validate_batch,
)
from raftlog.topics import TopicPartition


class ConsumerRecord(NamedTuple):
    """One record as a consumer hands it out; `offset` is its place in the partition."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def decode_fetch(
    tp: TopicPartition, chunk: memoryview | bytes, start: int, check_crcs: bool = True
) -> Iterator[list[ConsumerRecord]]:
    """The records of `chunk` (one partition's fetched bytes) at offsets >= `start`, one
    non-empty list per batch; see the module docstring for the rules."""
    pos, end = 0, len(chunk)
    topic, partition = tp
    at = start  # the offset the next batch holds (for the error message)
    while pos < end:
        if end - pos < HEADER_SIZE:
            break  # a partial batch at the end of a fetch is not an error
        (length,) = INT32.unpack_from(chunk, pos + LENGTH_AT)
        if length >= HEADER_SIZE - LOG_OVERHEAD and pos + LOG_OVERHEAD + length > end:
            break
        try:
            header = validate_batch(chunk, pos, end, check_crcs)
            records = decode_records_as(chunk, pos, header, ConsumerRecord, topic, partition)
        except CorruptRecordError as e:
            raise CorruptRecordError(
                f"{tp}: corrupt record batch at offset {at} (byte {pos} of the fetch): {e}; "
                f"the position stays at offset {at}: seek past it to go on"
            ) from None
        skip = start - header.base_offset  # a fetch may start inside the first batch
        if skip > 0:
            records = records[skip:]
        if records:
            yield records
        at = max(at, header.next_offset)
        pos += header.size
