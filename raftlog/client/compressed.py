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
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate, repeat
from typing import Any

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
_new_tuple = tuple.__new__
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
    4 zstd); see the module docstring.

    Records are kept as four columns (keys, values, headers, timestamps), not a tuple each:
    a run of values is appended by C-level list extends, and the record tuples the encoder
    reads are made one at a time while it reads them (`_Columns`), so none is kept: in
    CPython a long-lived tuple per record cost more than the rest of `send_many`'s work.
    Invariant: the four columns have one length; `_built` is set and the columns are None
    once sealed."""

    __slots__ = (
        "_built",
        "_codec",
        "_count",
        "_headers",
        "_keys",
        "_timestamps",
        "_values",
        "size_bytes",
    )

    def __init__(self, codec: int):
        if not 1 <= codec <= 4:
            raise InvariantError(f"compression codec {codec}: must be 1-4")
        self._codec = codec
        self._keys: list[bytes | None] | None = []
        self._values: list[bytes | None] = []
        self._headers: list[tuple[tuple[str, bytes | None], ...]] = []
        self._timestamps: list[int] = []
        self._built: tuple[bytes, bytes] | None = None
        self._count = 0
        self.size_bytes = HEADER_SIZE

    def __len__(self) -> int:
        return self._count if self._keys is None else len(self._keys)

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

    def _open(self) -> list[bytes | None]:
        keys = self._keys
        if keys is None:
            raise InvariantError("a sealed batch takes no more records")
        return keys

    def append(
        self, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers = ()
    ) -> int:
        """Add a record; returns its offset delta within the batch."""
        keys = self._open()
        keys.append(key)
        self._values.append(value)
        self._headers.append(tuple(headers))
        self._timestamps.append(timestamp)
        self.size_bytes += _record_bytes(key, value, headers)
        return len(keys) - 1

    def append_value(self, value: bytes, timestamp: int) -> int:
        """`append(None, value, timestamp)`: the producer's hot path."""
        keys = self._open()
        keys.append(None)
        self._values.append(value)
        self._headers.append(())
        self._timestamps.append(timestamp)
        self.size_bytes += 4 + RECORD_MIN_SIZE + len(value)
        return len(keys) - 1

    def append_values(
        self, values: Sequence[bytes], timestamp: int, start: int, size_bytes_max: int
    ) -> int:
        """Append `values[start:]` (no key, no headers, one timestamp) while `size_bytes`
        stays within `size_bytes_max`, at least one record into an empty batch; returns the
        index of the first value not appended (BatchBuilder.append_values' contract)."""
        keys = self._open()
        fixed = 4 + RECORD_MIN_SIZE  # what a record adds besides its value
        room = size_bytes_max - self.size_bytes
        # At most room // fixed records can fit: look no further (a long send_many would
        # otherwise sum its whole remainder for every batch).
        chunk = values[start : start + max(room // fixed, 1)]
        # The first n records fit while totals[n - 1] + fixed * n <= room, which grows with n:
        # a bisection finds n over C-level sums, with no Python step per record.
        totals = list(accumulate(map(len, chunk)))
        n = bisect_right(range(len(chunk)), room, key=lambda k: totals[k] + fixed * (k + 1))
        if n == 0 and not keys and chunk:
            n = 1  # a batch holds at least one record
        if n:
            keys += repeat(None, n)
            self._values += chunk[:n]
            self._headers += repeat((), n)
            self._timestamps += repeat(timestamp, n)
            self.size_bytes += totals[n - 1] + fixed * n
        return start + n

    def seal(self) -> tuple[bytes, bytes]:
        """Encode and compress the batch now and keep only its bytes; no record can be added
        after this. Returns `build_parts()`."""
        built = self._built
        if built is None:
            keys = self._open()
            if not keys:
                raise InvariantError("cannot build an empty batch")
            data = encode_batch_v2(
                _Columns(keys, self._values, self._headers, self._timestamps),
                base_offset=0,
                partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
                producer_id=NO_PRODUCER_ID,
                producer_epoch=NO_PRODUCER_EPOCH,
                base_sequence=NO_SEQUENCE,
                compression=self._codec,
                timestamp_type=_CREATE_TIME,
            )
            built = self._built = (data[:CRC_FROM], data[CRC_FROM:])
            self._count = len(keys)
            self._keys = None
            self._values, self._headers, self._timestamps = [], [], []
        return built

    def build_parts(self) -> tuple[bytes, bytes]:
        """The batch as a producer sends it (offset 0, no leader epoch, no producer id) as its
        first CRC_FROM bytes and the rest; encoded once (`seal`)."""
        return self.seal()


class _Columns(Sequence[Record]):
    """A builder's columns as the sequence of Records the encoder reads, each Record made
    when it is read and dropped after: no tuple per record outlives the encoding."""

    __slots__ = ("_headers", "_keys", "_timestamps", "_values")

    def __init__(
        self,
        keys: list[bytes | None],
        values: list[bytes | None],
        headers: list[tuple[tuple[str, bytes | None], ...]],
        timestamps: list[int],
    ):
        self._keys, self._values, self._headers = keys, values, headers
        self._timestamps = timestamps

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, i: Any) -> Any:  # int -> Record; slice -> list[Record]
        if isinstance(i, slice):
            return list(self)[i]
        return Record(self._keys[i], self._values[i], self._headers[i], self._timestamps[i])

    def __iter__(self) -> Iterator[Record]:
        return map(
            _new_tuple,
            repeat(Record),
            zip(self._keys, self._values, self._headers, self._timestamps, repeat(-1)),
        )


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
