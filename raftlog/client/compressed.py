"""The producer's compressed batches: Kafka record batches v2, built by `CompressedBatchBuilder`.

With `compression_type` set, the producer's batches are Kafka's record batch v2 (magic 2,
records_v2.py) with their records compressed by that codec, so Kafka's clients fetch them as
they are stored, and the broker never decompresses (raftlog's own batch, magic 1, has no
compression). With none, batches stay raftlog's own (records.BatchBuilder), unchanged.

`CompressedBatchBuilder` has the interface of `records.BatchBuilder` that the accumulator and
the sender use (`append`, `append_value`, `append_values`, `sealed_one`, `seal`,
`build_parts`, `size_bytes`, `len()`), so they treat both alike. Its rules:
- `size_bytes` is what the batch would take as raftlog's own batch (65 bytes of header, and
  per record 25 bytes plus key, value and headers, as BatchBuilder counts): the accumulator's
  arithmetic (`batch_size`, `buffer_memory`, its per-record 25 + len(value)) is the same for
  both formats, and it bounds the uncompressed records a batch holds, which is what the
  producer keeps in memory until the batch is sealed. The bytes sent are fewer; the sender
  releases `size_bytes` from the buffer, not the bytes it sent, so the count stays exact.
  (Kafka's producer estimates the compressed size instead; an uncompressed bound is simpler
  and never makes a batch too big for the broker.) The sender checks a batch against the
  broker's request limit by `size_bytes` too, before it is built: a record is refused for its
  uncompressed size, as Kafka's producer checks `max.request.size`.
- Records are kept as tuples until `seal` (or the first `build_parts`) encodes and compresses
  them once; a retried batch is sent from those bytes again, never recompressed.
- `build_parts` returns the batch as its first 21 bytes (up to and with the CRC) and the rest
  (the CRC-covered part), as BatchBuilder returns its first 25 and the rest, so that
  `with_producer_v2` stamps an idempotent producer's fields into the rest and recomputes the
  checksum in front, as records.with_producer does for raftlog's own batches.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from raftlog.invariants import InvariantError
from raftlog.records import (
    HEADER_SIZE,
    MAGIC_AT,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RECORD_MIN_SIZE,
    Record,
)
from raftlog.records_v2 import CRC_AT, CRC_FROM, MAGIC_V2, crc32c, encode_batch_v2

Headers = Sequence[tuple[str, bytes | None]]

# producer_id, producer_epoch, base_sequence: bytes [43, 57) of a v2 batch, [22, 36) of the
# part after its first CRC_FROM bytes.
_PRODUCER_FIELDS_V2 = struct.Struct(">qhi")
_PRODUCER_AT_IN_TAIL_V2 = 43 - CRC_FROM
_CRC = struct.Struct(">I")
# Timestamp type 0: CreateTime, the producer's clock (as raftlog's own batches).
_CREATE_TIME = 0


def _record_bytes(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """What a record adds to `size_bytes`: what BatchBuilder adds for it."""
    n = 4 + RECORD_MIN_SIZE + (len(key) if key else 0) + (len(value) if value else 0)
    for hkey, hvalue in headers:
        n += 8 + len(hkey.encode()) + (len(hvalue) if hvalue else 0)
    return n


class CompressedBatchBuilder:
    """Records into one Kafka record batch v2 compressed with `codec` (1 gzip, 2 snappy, 3 lz4,
    4 zstd); see the module docstring. Invariant: `_records` is None once sealed, and `_built`
    is set then."""

    __slots__ = ("_built", "_codec", "_count", "_records", "size_bytes")

    def __init__(self, codec: int):
        if not 1 <= codec <= 4:
            raise InvariantError(f"compression codec {codec}: must be 1-4")
        self._codec = codec
        self._records: list[Record] | None = []
        self._built: tuple[bytes, bytes] | None = None
        self._count = 0
        self.size_bytes = HEADER_SIZE

    def __len__(self) -> int:
        return self._count if self._records is None else len(self._records)

    @classmethod
    def sealed_one(
        cls,
        codec: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers = (),
    ) -> CompressedBatchBuilder:
        """A sealed builder holding one record (a record that fills a batch on its own)."""
        self = cls(codec)
        self.append(key, value, timestamp, headers)
        self.seal()
        return self

    def _open(self) -> list[Record]:
        records = self._records
        if records is None:
            raise InvariantError("a sealed batch takes no more records")
        return records

    def append(
        self, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers = ()
    ) -> int:
        """Add a record; returns its offset delta within the batch."""
        records = self._open()
        records.append(Record(key, value, tuple(headers), timestamp))
        self.size_bytes += _record_bytes(key, value, headers)
        return len(records) - 1

    def append_value(self, value: bytes, timestamp: int) -> int:
        """`append(None, value, timestamp)`: the producer's hot path."""
        records = self._open()
        records.append(Record(None, value, (), timestamp))
        self.size_bytes += 4 + RECORD_MIN_SIZE + len(value)
        return len(records) - 1

    def append_values(
        self, values: Sequence[bytes], timestamp: int, start: int, size_bytes_max: int
    ) -> int:
        """Append `values[start:]` (no key, no headers, one timestamp) while `size_bytes`
        stays within `size_bytes_max`, at least one record into an empty batch; returns the
        index of the first value not appended (BatchBuilder.append_values' contract)."""
        records = self._open()
        size = self.size_bytes
        i, end = start, len(values)
        while i < end:
            added = 4 + RECORD_MIN_SIZE + len(values[i])
            if size + added > size_bytes_max and records:
                break
            records.append(Record(None, values[i], (), timestamp))
            size += added
            i += 1
        self.size_bytes = size
        return i

    def seal(self) -> tuple[bytes, bytes]:
        """Encode and compress the batch now and keep only its bytes; no record can be added
        after this. Returns `build_parts()`."""
        built = self._built
        if built is None:
            records = self._open()
            if not records:
                raise InvariantError("cannot build an empty batch")
            data = encode_batch_v2(
                records,
                base_offset=0,
                partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
                producer_id=NO_PRODUCER_ID,
                producer_epoch=NO_PRODUCER_EPOCH,
                base_sequence=NO_SEQUENCE,
                compression=self._codec,
                timestamp_type=_CREATE_TIME,
            )
            built = self._built = (data[:CRC_FROM], data[CRC_FROM:])
            self._count = len(records)
            self._records = None
        return built

    def build_parts(self) -> tuple[bytes, bytes]:
        """The batch as a producer sends it (offset 0, no leader epoch, no producer id) as its
        first CRC_FROM bytes and the rest; encoded once (`seal`)."""
        return self.seal()


def with_producer_v2(
    head: bytes, tail: bytes, producer_id: int, producer_epoch: int, base_sequence: int
) -> tuple[bytes, bytes]:
    """A producer's v2 batch (`build_parts`) stamped with an idempotent producer's id, epoch
    and base sequence, its CRC-32C recomputed: records.with_producer for Kafka's format."""
    if head[MAGIC_AT] != MAGIC_V2:
        raise InvariantError(f"magic {head[MAGIC_AT]}: not a v2 batch")
    tail = b"".join(
        (
            tail[:_PRODUCER_AT_IN_TAIL_V2],
            _PRODUCER_FIELDS_V2.pack(producer_id, producer_epoch, base_sequence),
            tail[_PRODUCER_AT_IN_TAIL_V2 + _PRODUCER_FIELDS_V2.size :],
        )
    )
    return head[:CRC_AT] + _CRC.pack(crc32c(tail)), tail
