"""What a consumer makes of a fetched partition's bytes: `ConsumerRecord`s, one list per batch.

`decode_fetch` is the consumer's decode path (AsyncConsumer, and so the sync Consumer and
`raftlog consume`), pure: bytes in, records out, no I/O, no clock.

A partition's log holds batches of two formats, told apart by the magic byte at byte 16 of
each: raftlog's own (magic 1, records.py: little-endian, fixed-width records, never
compressed) and Kafka's record batch v2 (magic 2, records_v2.py: big-endian, varint records,
maybe compressed), what Kafka's clients and a compressing raftlog producer write. Both decode
to the same `ConsumerRecord`s, offsets, keys, values, headers and timestamps alike. Raftlog's
own batches keep their fast path and a v2 batch is decompressed and decoded by records_v2,
both behind records.decode_records_as, which dispatches on the magic byte.

Rules it keeps:
- Every whole batch is checked before any of its records is handed out (`validate_batch`:
  lengths, counts, and the checksum unless `check_crcs` is off; a reader that trusted a
  corrupt length could loop, so only the checksum can be skipped).
- A batch cut off by the fetch's byte limit at the end is not an error: it is left for the
  next fetch. A batch that fails its checks raises CorruptRecordError naming the partition and
  the offset where it starts; the batches before it have been yielded.
- A fetch may start inside a batch: records below the fetch offset are dropped.
- A batch "cut off at the end" is told by its length field, read in its format's byte order
  (little-endian for magic 1, big-endian for magic 2); fewer than HEADER_SIZE (65) bytes left
  are always a cut-off batch, since a whole batch of either format is longer (a v2 batch
  takes at least 61 + 7 bytes).
- Control batches (Kafka's transaction markers, attribute bit 5) hold no application records
  and are skipped, as Kafka's consumer skips them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from raftlog.errors import CorruptRecordError
from raftlog.records import (
    HEADER_SIZE,
    INT32,
    LENGTH_AT,
    LOG_OVERHEAD,
    MAGIC_AT,
    decode_records_as,
    validate_batch,
)
from raftlog.records_v2 import CONTROL_BIT, MAGIC_V2
from raftlog.topics import TopicPartition

INT32_BE = struct.Struct(">i")


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
        if cut_off(chunk, pos, end):
            break  # a partial batch at the end of a fetch is not an error
        try:
            header = validate_batch(chunk, pos, end, check_crcs)
            if header.magic == MAGIC_V2 and header.attributes & CONTROL_BIT:
                records = []  # a transaction marker: no application records
            else:
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


def cut_off(chunk: memoryview | bytes, pos: int, end: int) -> bool:
    """Whether the bytes [pos, end) are the start of a batch that the fetch's byte limit cut
    off (the next fetch brings it whole): fewer than HEADER_SIZE bytes, or a plausible length
    field (in the byte order of the batch's format) that reaches past `end`. A length too
    small for any batch is not a cut: validate_batch then says what is wrong."""
    if end - pos < HEADER_SIZE:
        return True
    v2 = chunk[pos + MAGIC_AT] == MAGIC_V2
    length: int = (INT32_BE if v2 else INT32).unpack_from(chunk, pos + LENGTH_AT)[0]
    return length >= HEADER_SIZE - LOG_OVERHEAD and pos + LOG_OVERHEAD + length > end
