"""The types both record batch formats decode into: `Record` and `BatchHeader`.

raftlog stores two batch formats side by side (records.py: raftlog's own, magic 1;
records_v2.py: Kafka's record batch v2, magic 2). Their headers hold the same fields in the same
order, and both begin with the same 17-byte prefix::

    offset size field
    0      8    base_offset             int64
    8      4    batch_length            int32   bytes after this field (total size - 12)
    12     4    partition_leader_epoch  int32
    16     1    magic                   int8    1 = raftlog's batch, 2 = Kafka's v2

The integers are little-endian in magic 1 and big-endian in magic 2, so a reader looks at the
magic byte (which has no byte order) before anything else. This module holds only what the two
formats share, so that each format's module can use it without importing the other.
"""

from __future__ import annotations

from typing import NamedTuple

# Fields that precede `batch_length`'s payload: base_offset + batch_length.
LOG_OVERHEAD = 12
# Positions of the prefix fields, the same in both formats.
BASE_OFFSET_AT = 0
LENGTH_AT = 8
EPOCH_AT = 12
MAGIC_AT = 16
# Bytes a reader needs to know a batch's format and size: the prefix up to and with `magic`.
PREFIX_SIZE = 17


class Record(NamedTuple):
    """One record as a producer sends it and a consumer reads it.

    `offset` is -1 until the record has been read back from a log. A NamedTuple rather than a
    frozen dataclass: both are immutable, and a tuple is built three times faster, which matters
    on the consumer's per-record path.
    """

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int = 0
    offset: int = -1


class BatchHeader(NamedTuple):
    """The decoded fixed header of one batch, of either format. `size` is the whole batch in
    bytes. `checksum` is xxh3_64 (magic 1) or CRC-32C (magic 2); `first_timestamp` is Kafka's
    `base_timestamp` in magic 2. Invariant (after validation): last_offset_delta >=
    max(record_count - 1, 0); equal to record_count - 1 (and record_count >= 1) in magic 1 and
    in every batch a producer sends. Only the log cleaner writes v2 batches with fewer records
    than offsets (the others compacted away), or none (a producer's last, kept for its
    sequence).

    A NamedTuple so that a header `Struct.unpack_from` becomes a header with no per-field work.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    checksum: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1
