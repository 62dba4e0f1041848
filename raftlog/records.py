"""raftlog's own record batch (magic 1), and the functions that read either batch format.

A producer encodes many records into one batch; the broker checks the batch checksum, stamps the
base offset and leader epoch into the header and appends the bytes unchanged; a fetch sends the
same bytes back; only the consumer decodes individual records. So the broker's cost is per batch,
never per record.

Two formats live side by side in a log, told apart by the magic byte at 16 (record_types.py):
this module's (magic 1) and Kafka's record batch v2 (magic 2, records_v2.py), stored as Kafka's
clients send it. `validate_batch`, `read_header`, `unpack_header`, `batch_size_at`,
`base_offset_at`, `stamp`, `decode_records` and `decode_records_as` take either and dispatch on
that byte, so storage and readers never unpack a header with one format's struct directly;
`convert_v1_to_v2` turns one of this module's batches into v2 for a Kafka client, and
`convert_to_v2` every one in a log read's bytes.

All integers are little-endian (the native order of the machines we run on) and fixed width,
because Python decodes fixed-width fields with one `struct` call where varints need a loop.

Batch layout (header = 65 bytes)::

    offset size field
    0      8    base_offset         int64   offset of the first record; stamped by the leader
    8      4    batch_length        int32   bytes that follow this field (total size - 12)
    12     4    partition_leader_epoch int32 epoch of the leader that appended; stamped
    16     1    magic               int8    format version, 1
    17     8    checksum            uint64  xxh3_64 of bytes [25, total size)
    25     2    attributes          int16   bits 0-2 compression codec (0 = none); rest reserved 0
    27     4    last_offset_delta   int32   record_count - 1 (offsets are consecutive)
    31     8    first_timestamp     int64   ms since the epoch, of the first record
    39     8    max_timestamp       int64   largest record timestamp in the batch
    47     8    producer_id         int64   -1 when not idempotent
    55     2    producer_epoch      int16   -1 when not idempotent
    57     4    base_sequence       int32   -1 when not idempotent
    61     4    record_count        int32   number of records, >= 1
    65     4*n  record_lengths      int32[n] byte length of each record body below
    ...         record bodies       concatenated, in offset order

Record body layout (fixed part = 21 bytes)::

    size  field
    1     attributes      int8   reserved, 0
    8     timestamp       int64  ms since the epoch
    4     key_length      int32  -1 for a null key
    k     key
    4     value_length    int32  -1 for a null value
    v     value
    4     header_count    int32
          headers, each:  int32 key_length, key (UTF-8), int32 value_length (-1 = null), value

Record n of a batch has offset base_offset + n: offsets are never stored per record.

Decisions, and why:
- The checksum covers everything from `attributes` to the end, and not `base_offset`,
  `batch_length`, `partition_leader_epoch`, `magic`. The broker can therefore stamp offset and
  epoch by writing 16 header bytes in front of the untouched rest (one `writev`), without
  re-encoding or re-hashing records. `magic` sits before the checksum so that a reader knows
  which checksum a batch uses before computing it (as in Kafka). A wrong `batch_length` is still
  caught: the checksum is then computed over other bytes, and recovery also checks that lengths
  fit the file.
- The table of record lengths up front lets the broker check "record count matches the bytes"
  with C-speed operations (one `array` view, `sum` and `min`), never a Python loop per record.
- xxh3_64: one C call, about 10 GB/s here; the cheapest strong-enough check for torn writes and
  bit flips.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, groupby, repeat
from typing import Any, TypeVar

import xxhash

from raftlog.errors import CorruptRecordError
from raftlog.invariants import InvariantError

# The shared prefix's positions and the two types, re-exported: their home before the
# second format came.
from raftlog.record_types import BASE_OFFSET_AT as BASE_OFFSET_AT
from raftlog.record_types import EPOCH_AT as EPOCH_AT
from raftlog.record_types import LENGTH_AT as LENGTH_AT
from raftlog.record_types import LOG_OVERHEAD as LOG_OVERHEAD
from raftlog.record_types import MAGIC_AT as MAGIC_AT
from raftlog.record_types import PREFIX_SIZE as PREFIX_SIZE
from raftlog.record_types import BatchHeader as BatchHeader
from raftlog.record_types import Record as Record
from raftlog.records_v2 import (
    HEADER_V2_SIZE,
    decode_records_v2,
    encode_batch_v2,
    unpack_header_v2,
    validate_batch_v2,
)
from raftlog.records_v2 import MAGIC_V2 as MAGIC_V2
from raftlog.records_v2 import STAMP_V2 as STAMP_V2

MAGIC = 1
HEADER = struct.Struct("<qiibQhiqqqhii")
HEADER_SIZE = HEADER.size  # 65
if HEADER_SIZE != 65:
    raise InvariantError("HEADER_SIZE == 65 does not hold")
# The stamped prefix: base_offset, batch_length, partition_leader_epoch.
STAMP = struct.Struct("<qii")
STAMP_SIZE = STAMP.size  # 16
# Offsets of single fields (the prefix ones are record_types.py's, shared by both formats).
CHECKSUM_AT = 17
CHECKSUMMED_FROM = 25
# base_offset, batch_length, epoch, magic: what a scan over a file needs first.
PREFIX = struct.Struct("<qiib")
# The smallest header of the two formats (Kafka's v2): "is there room for a header" checks
# of code that reads either format.
HEADER_SIZE_MIN = HEADER_V2_SIZE  # 61

RECORD_FIXED = struct.Struct("<bqi")  # attributes, timestamp, key_length
# attributes, timestamp, key_length and the 4 bytes after it: the value length when the key
# is null (the common case), so one struct call packs or unpacks a record's fixed part.
_FIXED_AND_VLEN = struct.Struct("<bqii")
RECORD_MIN_SIZE = 21  # fixed part of a record with null key, null value and no headers
INT32 = struct.Struct("<i")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
COMPRESSION_MASK = 0x07

_NATIVE_LITTLE = sys.byteorder == "little"
_checksum = xxhash.xxh3_64_intdigest
_T = TypeVar("_T", bound=tuple[Any, ...])


def encode_record(
    key: bytes | None,
    value: bytes | None,
    timestamp: int,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    """Encode one record body (without its entry in the length table)."""
    parts: list[bytes] = []
    if key is None:
        parts.append(RECORD_FIXED.pack(0, timestamp, -1))
    else:
        parts.append(RECORD_FIXED.pack(0, timestamp, len(key)))
        parts.append(key)
    if value is None:
        parts.append(b"\xff\xff\xff\xff")
    else:
        parts.append(INT32.pack(len(value)))
        parts.append(value)
    parts.append(INT32.pack(len(headers)))
    for hkey, hvalue in headers:
        hk = hkey.encode()
        parts.append(INT32.pack(len(hk)))
        parts.append(hk)
        if hvalue is None:
            parts.append(b"\xff\xff\xff\xff")
        else:
            parts.append(INT32.pack(len(hvalue)))
            parts.append(hvalue)
    return b"".join(parts)


class BatchBuilder:
    """Accumulates records and encodes them into one batch.

    The producer keeps one builder per partition; `size_bytes` tells it when the batch is full.
    Records are kept as encoded pieces (fixed part, key, value, trailer) in one flat list and
    joined once, by `build`: a record costs one struct call and one list extend, not a join.
    """

    __slots__ = (
        "_built",
        "_count",
        "_first_ts",
        "_lengths",
        "_max_ts",
        "_parts",
        "base_sequence",
        "producer_epoch",
        "producer_id",
        "size_bytes",
    )

    def __init__(
        self,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
    ):
        # Two leading slots for the batch's fixed tail and its length table, filled by build().
        self._parts: list[bytes] = [b"", b""]
        self._lengths: list[int] = []
        self._first_ts = 0
        self._max_ts = -1
        self._built: tuple[bytes, bytes] | None = None  # set by seal()
        self._count = 0  # records, once sealed
        self.size_bytes = HEADER_SIZE  # the size of the batch if it were built now
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence

    def __len__(self) -> int:
        return self._count if self._built is not None else len(self._lengths)

    @classmethod
    def sealed_one(
        cls,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> BatchBuilder:
        """A sealed builder holding one record, encoded in one go: what a producer makes when
        a record fills a batch on its own (one message per request). The bytes are those of
        `append` + `seal`, without the builder's lists and per-record bookkeeping."""
        if key is None and value is not None and not headers:
            n = len(value)
            tail = b"".join(
                (
                    _ONE_VALUE_FIXED.pack(
                        0, 0, timestamp, timestamp, NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
                        NO_SEQUENCE, 1, RECORD_MIN_SIZE + n, 0, timestamp, -1, n,
                    ),
                    value,
                    _NO_HEADERS,
                )
            )  # fmt: skip
        else:
            body = encode_record(key, value, timestamp, headers)
            tail = b"".join(
                (
                    _TAIL_FIXED.pack(
                        0, 0, timestamp, timestamp, NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
                        NO_SEQUENCE, 1,
                    ),
                    INT32.pack(len(body)),
                    body,
                )
            )  # fmt: skip
        head = _HEAD_FIXED.pack(
            0,
            CHECKSUMMED_FROM + len(tail) - LOG_OVERHEAD,
            NO_PARTITION_LEADER_EPOCH,
            MAGIC,
            _checksum(tail),
        )
        self = cls.__new__(cls)
        self._parts = self._lengths = _SEALED_EMPTY
        self._first_ts = self._max_ts = timestamp
        self._built = (head, tail)
        self._count = 1
        self.size_bytes = len(head) + len(tail)
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE
        return self

    def seal(self) -> tuple[bytes, bytes]:
        """Build the batch as a producer sends it (offset 0, no leader epoch) and keep only its
        bytes: the record pieces and their lists go at once, instead of living on (and being
        walked by the garbage collector) while the batch waits to be sent. Returns the parts;
        `build_parts()` with default arguments returns them again. No record can be added
        after this (an assertion)."""
        built = self._built
        if built is None:
            built = self._built = self.build_parts()
            self._count = len(self._lengths)
            # Shared empty lists: no new objects for the collector; the asserts in the append
            # methods keep anything from being added to them.
            self._parts = self._lengths = _SEALED_EMPTY
        return built

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> int:
        """Add a record; returns its offset delta within the batch."""
        if self._built is not None:
            raise InvariantError("a sealed batch takes no more records")
        if key is None and value is not None and not headers:
            # The common case: attributes, timestamp, null key and value length in one call.
            n = len(value)
            self._parts += (_FIXED_AND_VLEN.pack(0, timestamp, -1, n), value, _NO_HEADERS)
            n += RECORD_MIN_SIZE
        elif key is not None and value is not None and not headers:
            n = len(key)
            self._parts += (
                RECORD_FIXED.pack(0, timestamp, n),
                key,
                INT32.pack(len(value)),
                value,
                _NO_HEADERS,
            )
            n += len(value) + RECORD_MIN_SIZE
        else:
            body = encode_record(key, value, timestamp, headers)
            self._parts.append(body)
            n = len(body)
        lengths = self._lengths
        if not lengths:
            self._first_ts = timestamp
        if timestamp > self._max_ts:
            self._max_ts = timestamp
        lengths.append(n)
        self.size_bytes += 4 + n
        return len(lengths) - 1

    def append_value(self, value: bytes, timestamp: int) -> int:
        """`append(None, value, timestamp)` for a batch that already holds a record: the
        producer's hot path (no key, no headers), kept to one struct call."""
        if self._built is not None:
            raise InvariantError("a sealed batch takes no more records")
        n = len(value)
        self._parts += (_FIXED_AND_VLEN.pack(0, timestamp, -1, n), value, _NO_HEADERS)
        if timestamp > self._max_ts:
            self._max_ts = timestamp
        lengths = self._lengths
        lengths.append(n + RECORD_MIN_SIZE)
        self.size_bytes += 4 + RECORD_MIN_SIZE + n
        return len(lengths) - 1

    def append_values(
        self, values: Sequence[bytes], timestamp: int, start: int, size_bytes_max: int
    ) -> int:
        """Append `values[start:]` (non-empty `bytes`, no key, no headers, one timestamp) while
        the batch stays within `size_bytes_max`, at least one record into an empty batch;
        returns the index of the first value not appended (`len(values)` when all were).

        The many-record hot path (`send_many`): runs of values of one length are appended
        with one struct call and C-level list extends, not a Python step per record."""
        if self._built is not None:
            raise InvariantError("a sealed batch takes no more records")
        lengths = self._lengths
        parts = self._parts
        size = self.size_bytes
        end = len(values)
        i = start
        if not lengths and i < end:
            self._first_ts = timestamp
        while i < end:
            n = len(values[i])
            added = 4 + RECORD_MIN_SIZE + n
            room = (size_bytes_max - size) // added
            if room <= 0:
                if lengths:
                    break
                room = 1  # a batch holds at least one record
            chunk = values[i : min(end, i + room)]
            run = len(chunk)
            if run > 1 and set(map(len, chunk)) != {n}:
                run = next(k for k, v in enumerate(chunk) if len(v) != n)
                chunk = chunk[:run]
            fixed = _FIXED_AND_VLEN.pack(0, timestamp, -1, n)
            parts += chain.from_iterable(
                zip(repeat(fixed, run), chunk, repeat(_NO_HEADERS, run), strict=True)
            )
            lengths += repeat(RECORD_MIN_SIZE + n, run)
            size += added * run
            i += run
        if i > start and timestamp > self._max_ts:
            self._max_ts = timestamp
        self.size_bytes = size
        return i

    def build(
        self, base_offset: int = 0, partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    ) -> bytes:
        head, tail = self.build_parts(base_offset, partition_leader_epoch)
        return head + tail

    def build_parts(
        self, base_offset: int = 0, partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    ) -> tuple[bytes, bytes]:
        """The batch as its first 25 bytes and the rest (written back to back, no copy made)."""
        built = self._built
        if built is not None:
            if not (base_offset == 0 and partition_leader_epoch == NO_PARTITION_LEADER_EPOCH):
                raise InvariantError("a sealed batch is built for a producer only")
            return built
        lengths = self._lengths
        if not lengths:
            raise InvariantError("cannot build an empty batch")
        count = len(lengths)
        table = array("i", lengths)
        if not _NATIVE_LITTLE:
            table.byteswap()
        parts = self._parts
        parts[0] = _TAIL_FIXED.pack(
            0,
            count - 1,
            self._first_ts,
            self._max_ts,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            count,
        )
        parts[1] = table.tobytes()
        tail = b"".join(parts)
        parts[0] = parts[1] = b""
        batch_length = CHECKSUMMED_FROM + len(tail) - LOG_OVERHEAD
        head = _HEAD_FIXED.pack(
            base_offset, batch_length, partition_leader_epoch, MAGIC, _checksum(tail)
        )
        return head, tail


_NO_HEADERS = b"\0\0\0\0"
_SEALED_EMPTY: list[Any] = []
_TAIL_FIXED = struct.Struct("<hiqqqhii")
# _TAIL_FIXED, a one-entry length table and a record's fixed part with its value length.
_ONE_VALUE_FIXED = struct.Struct("<hiqqqhiiibqii")
_HEAD_FIXED = struct.Struct("<qiibQ")


def encode_batch(
    records: Iterable[Record | tuple[bytes | None, bytes | None]],
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """Encode records into one batch. Tuples are (key, value) stamped with `timestamp`."""
    builder = BatchBuilder(producer_id, producer_epoch, base_sequence)
    for r in records:
        if isinstance(r, Record):
            builder.append(r.key, r.value, r.timestamp, r.headers)
        else:
            builder.append(r[0], r[1], timestamp)
    return builder.build(base_offset, partition_leader_epoch)


# producer_id, producer_epoch, base_sequence: at bytes [47, 61) of a batch, [22, 36) of the
# part after the first CHECKSUMMED_FROM bytes.
_PRODUCER_FIELDS = struct.Struct("<qhi")
_PRODUCER_AT_IN_TAIL = 47 - CHECKSUMMED_FROM
_CHECKSUM = struct.Struct("<Q")


def with_producer(
    head: bytes, tail: bytes, producer_id: int, producer_epoch: int, base_sequence: int
) -> tuple[bytes, bytes]:
    """A producer's batch (`BatchBuilder.build_parts`) stamped with an idempotent producer's
    id, epoch and base sequence, checksum recomputed: one copy and one hash of the batch, made
    when the batch is first sent and again only if a new epoch restamps it."""
    tail = b"".join(
        (
            tail[:_PRODUCER_AT_IN_TAIL],
            _PRODUCER_FIELDS.pack(producer_id, producer_epoch, base_sequence),
            tail[_PRODUCER_AT_IN_TAIL + _PRODUCER_FIELDS.size :],
        )
    )
    return head[:CHECKSUM_AT] + _CHECKSUM.pack(_checksum(tail)), tail


def stamp(
    base_offset: int, batch_length: int, partition_leader_epoch: int, magic: int = MAGIC
) -> bytes:
    """The 16 bytes that replace a batch's first 16 when the leader assigns offset and epoch,
    in the byte order of the batch's format (`magic`)."""
    if magic == MAGIC_V2:
        return STAMP_V2.pack(base_offset, batch_length, partition_leader_epoch)
    return STAMP.pack(base_offset, batch_length, partition_leader_epoch)


def header_size(magic: int) -> int:
    """The header size of format `magic` (65 for raftlog's batch, 61 for Kafka's v2)."""
    if magic == MAGIC:
        return HEADER_SIZE
    if magic == MAGIC_V2:
        return HEADER_V2_SIZE
    raise CorruptRecordError(f"unknown magic {magic}")


def unpack_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, ...]:
    """The raw header fields (BatchHeader's order) of the batch at `pos`, of either format;
    checks only that the header is there and its magic is known (CorruptRecordError)."""
    avail = len(buf) - pos
    if avail > MAGIC_AT:
        magic = buf[pos + MAGIC_AT]
        if magic == MAGIC:
            if avail >= HEADER_SIZE:
                return HEADER.unpack_from(buf, pos)
        elif magic == MAGIC_V2:
            if avail >= HEADER_V2_SIZE:
                return unpack_header_v2(buf, pos)
        else:
            raise CorruptRecordError(f"unknown magic {magic} in batch at byte {pos}")
    raise CorruptRecordError(f"torn batch header at byte {pos} ({avail} bytes)")


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header at `pos`, of either format; checks only that it is there."""
    return BatchHeader._make(unpack_header(buf, pos))


def batch_size_at(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The whole size of the batch at `pos` as its length field says, read in the byte order
    of its format; needs PREFIX_SIZE bytes. Checks nothing else: CorruptRecordError only for
    a short prefix or an unknown magic."""
    if len(buf) - pos < PREFIX_SIZE:
        raise CorruptRecordError(
            f"torn batch header at byte {pos} ({len(buf) - pos} bytes, at least "
            f"{PREFIX_SIZE} needed)"
        )
    magic = buf[pos + MAGIC_AT]
    if magic == MAGIC:
        return int(INT32.unpack_from(buf, pos + LENGTH_AT)[0]) + LOG_OVERHEAD
    if magic == MAGIC_V2:
        return int(_INT32_BE.unpack_from(buf, pos + LENGTH_AT)[0]) + LOG_OVERHEAD
    raise CorruptRecordError(f"unknown magic {magic} in batch at byte {pos}")


def base_offset_at(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The base offset of the batch at `pos`, of either format (PREFIX_SIZE bytes needed)."""
    batch_size_at(buf, pos)  # the checks
    fmt = _INT64_BE if buf[pos + MAGIC_AT] == MAGIC_V2 else _INT64
    return int(fmt.unpack_from(buf, pos + BASE_OFFSET_AT)[0])


_INT32_BE = struct.Struct(">i")
_INT64 = struct.Struct("<q")
_INT64_BE = struct.Struct(">q")


def validate_batch(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    end: int | None = None,
    checksum: bool = True,
) -> BatchHeader:
    """Check the batch at `pos` without decoding its records, and return its header.

    `checksum=False` skips only the checksum (a consumer with check_crcs off): the structural
    checks stay, since a reader that trusts a corrupt length can loop or read out of bounds.

    Checks: the length fits inside [pos, end); magic is known; the record count agrees with
    last_offset_delta and with the table of record lengths, whose sum must fill the batch
    exactly; every record is at least the minimum size; the checksum matches; compression is
    none; the timestamps are ordered and not negative (Kafka refuses negative timestamps too;
    the header's first timestamp stands for the batch, since records are never decoded here).
    Raises CorruptRecordError naming the byte position.

    A batch of Kafka's format (magic 2, the byte at pos + 16) is checked by records_v2's
    `validate_batch_v2` instead; any other magic is refused. One byte comparison is all that
    costs this format's batches.
    """
    if end is None:
        end = len(buf)
    avail = end - pos
    if avail < HEADER_SIZE or buf[pos + MAGIC_AT] != MAGIC:
        if avail > MAGIC_AT:
            other = buf[pos + MAGIC_AT]
            if other == MAGIC_V2:
                return validate_batch_v2(buf, pos, end, checksum)
            if other != MAGIC:
                raise CorruptRecordError(f"unknown magic {other} in batch at byte {pos}")
        raise CorruptRecordError(
            f"truncated batch at byte {pos}: {avail} bytes, a header needs {HEADER_SIZE}"
        )
    (
        base_offset,
        batch_length,
        epoch,
        magic,
        crc,
        attributes,
        last_delta,
        first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = HEADER.unpack_from(buf, pos)
    size = batch_length + LOG_OVERHEAD
    if size < HEADER_SIZE or size > avail:
        raise CorruptRecordError(
            f"impossible batch length {batch_length} at byte {pos} ({avail} bytes available)"
        )
    if count < 1 or last_delta != count - 1:
        raise CorruptRecordError(
            f"record count {count} does not match last offset delta {last_delta} "
            f"in batch at byte {pos}"
        )
    bodies_start = pos + HEADER_SIZE + 4 * count
    batch_end = pos + size
    if bodies_start > batch_end:
        raise CorruptRecordError(
            f"record count {count} does not fit batch of {size} bytes at byte {pos}"
        )
    if count == 1:
        (length,) = INT32.unpack_from(buf, pos + HEADER_SIZE)
        total, smallest = length, length
    else:
        lengths = memoryview(buf)[pos + HEADER_SIZE : bodies_start].cast("B").cast("i")
        if not _NATIVE_LITTLE:
            lengths = array("i", lengths)  # type: ignore[assignment]
            lengths.byteswap()  # type: ignore[attr-defined]
        total, smallest = sum(lengths), min(lengths)
    if smallest < RECORD_MIN_SIZE or total != batch_end - bodies_start:
        raise CorruptRecordError(
            f"record lengths sum to {total} but batch at byte {pos} holds "
            f"{batch_end - bodies_start} bytes of records for {count} records"
        )
    if checksum and _checksum(memoryview(buf)[pos + CHECKSUMMED_FROM : batch_end]) != crc:
        raise CorruptRecordError(f"checksum mismatch in batch at byte {pos}")
    if attributes & COMPRESSION_MASK:
        raise CorruptRecordError(
            f"compression codec {attributes & COMPRESSION_MASK} in batch at byte {pos} "
            "is not supported"
        )
    if max_ts < first_ts or first_ts < 0:
        if first_ts < 0:
            raise CorruptRecordError(
                f"negative first timestamp {first_ts} in batch at byte {pos}: timestamps are "
                "ms since the epoch, >= 0"
            )
        raise CorruptRecordError(
            f"max timestamp {max_ts} < first timestamp {first_ts} in batch at byte {pos}"
        )
    return BatchHeader(
        base_offset,
        batch_length,
        epoch,
        magic,
        crc,
        attributes,
        last_delta,
        first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )


def iter_batches(
    buf: bytes | bytearray | memoryview, validate: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each whole batch in `buf`.

    A trailing partial batch raises CorruptRecordError when `validate`; otherwise it ends the
    iteration quietly (a fetch may end inside a batch).
    """
    pos, end = 0, len(buf)
    while pos < end:
        if validate:
            header = validate_batch(buf, pos, end)
        else:
            try:
                header = read_header(buf, pos)
            except CorruptRecordError:
                return
            if header.size < HEADER_SIZE_MIN or pos + header.size > end:
                return
        yield pos, header
        pos += header.size


def decode_records(
    buf: bytes | bytearray | memoryview, pos: int = 0, header: BatchHeader | None = None
) -> list[Record]:
    """Decode the records of the (already validated) batch at `pos`, of either format (a v2
    batch by records_v2's `decode_records_v2`, decompressed if need be).

    Raises CorruptRecordError when a record's inner lengths do not fit its body.
    """
    if header is None:
        header = read_header(buf, pos)
    if header.magic == MAGIC_V2:
        return decode_records_v2(buf, pos, header)
    out = _decode_fast(buf, pos, header, None)
    return out if out is not None else _decode_checked(buf, pos, header)


# The record tuples a consumer hands out: (topic, partition, offset, timestamp, key, value,
# headers), built by `tuple.__new__` on a NamedTuple class given by the caller.
ConsumerLayout = tuple[type, str, int]


def decode_records_as(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    cls: type[_T],
    topic: str,
    partition: int,
) -> list[_T]:
    """Like `decode_records`, but builds `cls(topic, partition, offset, timestamp, key, value,
    headers)` for each record directly (a consumer's record type), with the same checks."""
    if header.magic == MAGIC_V2:
        return decode_records_v2(buf, pos, header, (cls, topic, partition))
    out = _decode_fast(buf, pos, header, (cls, topic, partition))
    if out is None:
        new = tuple.__new__
        out = [
            new(cls, (topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers))
            for r in _decode_checked(buf, pos, header)
        ]
    return out


# record length -> Struct of a record of that length with a null key and no headers:
# attributes, timestamp, key length (-1), value length, value, header count (0).
_PLAIN_RECORD_STRUCTS: dict[int, struct.Struct] = {}
_MAX_PLAIN_STRUCTS = 4096


# record length -> Struct reading only (timestamp, value) of a plain record of that length
# (null key, no headers), for runs that `_all_plain` has checked. Bounded like the one above.
_PLAIN_FIELD_STRUCTS: dict[int, struct.Struct] = {}


def _all_plain(data: bytes, at: int, k: int, length: int) -> bool:
    """Whether all `k` records of `length` bytes at `at` have a null key (key length -1), a
    value that fills the record (value length = length - 21) and no headers (count 0).
    Checked a byte column at a time: 12 strided slices of `data`, no Python work per record."""
    end = at + k * length
    vlen = INT32.pack(length - RECORD_MIN_SIZE)
    for i in range(4):
        if (
            data[at + 9 + i : end : length] != b"\xff" * k
            or data[at + 13 + i : end : length] != vlen[i : i + 1] * k
            or data[at + length - 4 + i : end : length] != b"\0" * k
        ):
            return False
    return True


def _decode_fast(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    layout: ConsumerLayout | None,
) -> list[Any] | None:
    """The records of a well-formed batch, or None for anything unusual.

    Returns None on any malformed field (without raising): the caller then decodes the batch
    again with `_decode_checked`, which raises the precise error. So this path only has to be
    right for well-formed input, and is free to skip the bookkeeping that error messages need:
    it slices record bytes out of one `bytes` object (one allocation per field, no memoryview
    per field) and reads the fixed part and the value length of a null-key record in one call.
    """
    count = header.record_count
    start = pos + HEADER_SIZE + 4 * count
    try:
        lengths = struct.unpack_from(f"<{count}i", buf, pos + HEADER_SIZE)
    except struct.error:
        return None
    if type(buf) is bytes:
        data, at = buf, start
    else:
        data, at = bytes(memoryview(buf)[start : start + sum(lengths)]), 0
    unpack_fixed = _FIXED_AND_VLEN.unpack_from
    unpack_int = INT32.unpack_from
    new = tuple.__new__
    offset = header.base_offset
    out: list[Any] = []
    append = out.append
    if layout is not None:
        cls, topic, partition = layout
    no_headers: tuple[tuple[str, bytes | None], ...] = ()
    structs = _PLAIN_RECORD_STRUCTS
    view = memoryview(data)
    try:
        # Records come in runs of equal length (same-sized events, the common case). A run of
        # records with a null key and no headers is read by one Struct's iter_unpack (one
        # Struct per record length, cached); the first record of another shape ends that, and
        # it and the rest of its run take the general path, one record at a time.
        for length, run in groupby(lengths):
            k = len(list(run))
            st = structs.get(length)
            if st is None and length >= RECORD_MIN_SIZE and len(structs) < _MAX_PLAIN_STRUCTS:
                st = structs[length] = struct.Struct(f"<bqii{length - RECORD_MIN_SIZE}si")
            if st is not None and k > 1 and _all_plain(data, at, k, length):
                # The whole run is plain (checked column by column in C): read only the
                # timestamp and the value of each record.
                fields = _PLAIN_FIELD_STRUCTS.get(length)
                if fields is None:
                    fields = _PLAIN_FIELD_STRUCTS[length] = struct.Struct(
                        f"<xq8x{length - RECORD_MIN_SIZE}s4x"
                    )
                if layout is None:
                    for ts, value in fields.iter_unpack(view[at : at + k * length]):
                        append(new(Record, (None, value, no_headers, ts, offset)))
                        offset += 1
                else:
                    for ts, value in fields.iter_unpack(view[at : at + k * length]):
                        append(new(cls, (topic, partition, offset, ts, None, value, no_headers)))
                        offset += 1
                at += k * length
                continue
            if st is not None:
                plain_vlen = length - RECORD_MIN_SIZE
                first = offset
                if layout is None:
                    for _attrs, ts, klen, vlen, value, hcount in st.iter_unpack(
                        view[at : at + k * length]
                    ):
                        if klen != -1 or hcount or vlen != plain_vlen:
                            break
                        append(new(Record, (None, value, no_headers, ts, offset)))
                        offset += 1
                else:
                    for _attrs, ts, klen, vlen, value, hcount in st.iter_unpack(
                        view[at : at + k * length]
                    ):
                        if klen != -1 or hcount or vlen != plain_vlen:
                            break
                        append(new(cls, (topic, partition, offset, ts, None, value, no_headers)))
                        offset += 1
                at += (offset - first) * length
                k -= offset - first
            for _ in range(k):
                end = at + length
                _attrs, ts, klen, vlen = unpack_fixed(data, at)
                if klen == -1:
                    key = None
                    p = at + 17
                elif klen >= 0:
                    p = at + 13 + klen
                    key = data[at + 13 : p]
                    (vlen,) = unpack_int(data, p)
                    p += 4
                else:
                    return None
                if vlen >= 0:
                    value = data[p : p + vlen]
                    p += vlen
                elif vlen == -1:
                    value = None
                else:
                    return None
                (hcount,) = unpack_int(data, p)
                p += 4
                if hcount:
                    headers, p = _decode_headers_fast(data, p, hcount, end)
                else:
                    headers = no_headers
                if p != end:
                    return None
                if layout is None:
                    append(new(Record, (key, value, headers, ts, offset)))
                else:
                    append(new(cls, (topic, partition, offset, ts, key, value, headers)))
                offset += 1
                at = end
    except (struct.error, UnicodeDecodeError, ValueError):
        return None
    return out


def _decode_headers_fast(
    data: bytes, p: int, hcount: int, end: int
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    """Headers at `p` of a record ending at `end`, for `_decode_fast`; raises ValueError on
    anything unusual (a count the record cannot hold: each header takes at least 8 bytes)."""
    if not 0 < hcount <= (end - p) // 8:
        raise ValueError
    unpack_int = INT32.unpack_from
    hs: list[tuple[str, bytes | None]] = []
    for _ in range(hcount):
        (hklen,) = unpack_int(data, p)
        if hklen < 0:
            raise ValueError
        hkey = data[p + 4 : p + 4 + hklen].decode()
        p += 4 + hklen
        (hvlen,) = unpack_int(data, p)
        p += 4
        if hvlen >= 0:
            hs.append((hkey, data[p : p + hvlen]))
            p += hvlen
        elif hvlen == -1:
            hs.append((hkey, None))
        else:
            raise ValueError  # the checked decoder decides what that length means
    return tuple(hs), p


def _decode_checked(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> list[Record]:
    """The record decoder that names what is wrong: used when `_decode_fast` gives up."""
    count = header.record_count
    lengths = struct.unpack_from(f"<{count}i", buf, pos + HEADER_SIZE)
    at = pos + HEADER_SIZE + 4 * count
    base = header.base_offset
    out: list[Record] = []
    mv = memoryview(buf)
    unpack_fixed = RECORD_FIXED.unpack_from
    unpack_int = INT32.unpack_from
    for i, length in enumerate(lengths):
        end = at + length
        try:
            _attrs, ts, klen = unpack_fixed(mv, at)
            p = at + 13
            if klen < 0:
                key = None
            else:
                key = bytes(mv[p : p + klen])
                p += klen
            (vlen,) = unpack_int(mv, p)
            p += 4
            if vlen < 0:
                value = None
            else:
                value = bytes(mv[p : p + vlen])
                p += vlen
            (hcount,) = unpack_int(mv, p)
            p += 4
            headers: tuple[tuple[str, bytes | None], ...] = ()
            if hcount:
                # Each header takes at least 8 bytes: a count the record cannot hold, or a
                # negative key length, would otherwise walk (even backwards) through bytes
                # that are not this record's, up to 2^31 times.
                if not 0 < hcount <= (end - p) // 8:
                    raise CorruptRecordError(
                        f"record {base + i} in batch at byte {pos}: header count {hcount} does "
                        f"not fit the {end - p} bytes left of the record"
                    )
                hs = []
                for _ in range(hcount):
                    (hklen,) = unpack_int(mv, p)
                    if not 0 <= hklen <= end - p - 8:
                        raise CorruptRecordError(
                            f"record {base + i} in batch at byte {pos}: header key length "
                            f"{hklen} does not fit the record"
                        )
                    hkey = bytes(mv[p + 4 : p + 4 + hklen]).decode()
                    p += 4 + hklen
                    (hvlen,) = unpack_int(mv, p)
                    p += 4
                    if hvlen < 0:
                        hvalue = None
                    else:
                        hvalue = bytes(mv[p : p + hvlen])
                        p += hvlen
                    hs.append((hkey, hvalue))
                headers = tuple(hs)
        except (struct.error, UnicodeDecodeError) as e:
            raise CorruptRecordError(
                f"record {base + i} in batch at byte {pos} is malformed: {e}"
            ) from None
        if p != end or klen < -1 or vlen < -1:
            raise CorruptRecordError(
                f"record {base + i} in batch at byte {pos}: fields take {p - at} bytes, "
                f"its length says {length}"
            )
        out.append(Record(key, value, headers, ts, base + i))
        at = end
    return out


def iter_records(buf: bytes | bytearray | memoryview, validate: bool = True) -> Iterator[Record]:
    """Yield every record of every whole batch in `buf`, in offset order."""
    for pos, header in iter_batches(buf, validate):
        yield from decode_records(buf, pos, header)


def convert_v1_to_v2(
    buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
) -> bytes:
    """The raftlog batch (magic 1) at `pos` as an equivalent Kafka v2 batch: the same base
    offset, leader epoch, producer id, epoch and base sequence, and every record with its
    offset, timestamp, key, value and headers; uncompressed, like the original. For a Kafka
    client fetching what raftlog's own producer wrote. The batch is validated first (a fetch
    serves stored bytes unchecked, and a conversion must not turn damage into a valid CRC)."""
    h = validate_batch(buf, pos, end)
    if h.magic != MAGIC:
        raise InvariantError(f"convert_v1_to_v2 got a batch of magic {h.magic}")
    return encode_batch_v2(
        _decode_fast(buf, pos, h, None) or _decode_checked(buf, pos, h),
        base_offset=h.base_offset,
        partition_leader_epoch=h.partition_leader_epoch,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
    )


def convert_to_v2(buf: bytes) -> bytes:
    """The batches of `buf` (whole batches as a log read returns them, of either format) with
    every raftlog batch converted to v2 (`convert_v1_to_v2`) and v2 batches as they are: what
    a Kafka client fetches. `buf` itself when it holds no raftlog batch (no copy). A partial
    batch at the end (a read may end inside one) is left out when it is raftlog's (it cannot be
    converted) and kept when it is v2 (Kafka's clients skip a partial last batch)."""
    pos, end = 0, len(buf)
    parts: list[bytes] | None = None
    kept = 0  # start of the bytes not yet copied into `parts`
    while end - pos >= PREFIX_SIZE:
        size = batch_size_at(buf, pos)
        if buf[pos + MAGIC_AT] == MAGIC:
            if parts is None:
                parts = []
            parts.append(buf[kept:pos])
            if size < HEADER_SIZE or pos + size > end:
                return b"".join(parts)  # a partial raftlog batch: left out
            parts.append(convert_v1_to_v2(buf, pos, pos + size))
            kept = pos + size
        if size < HEADER_SIZE_MIN:
            raise CorruptRecordError(f"impossible batch length {size - LOG_OVERHEAD} at byte {pos}")
        pos += size
    if parts is None:
        return buf
    parts.append(buf[kept:])
    return b"".join(parts)
