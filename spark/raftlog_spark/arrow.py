"""Record batches (raftlog's wire format) to Arrow record batches in the Kafka source's schema.

A Spark task reads millions of records; a Python object per record would cost more than the
rest of the read. So the columns are built from whole-chunk operations:
- the record bodies of every batch in a chunk are joined into one buffer (one copy per batch);
  the length tables give their offsets, so the bodies form one Arrow binary array, no copy;
- the fixed fields (timestamp, key length, value length, header count) are read for all
  records at once with numpy gathers at computed byte positions;
- keys and values are cut out of the bodies by Arrow's `binary_slice` kernel, which needs one
  key length for the whole chunk: the common cases (no keys, or keys of one length: ids,
  user names of fixed width) take this path.
Anything else (headers, keys of mixed lengths, a field that does not fit its record) goes
through the checked Python decoder, record by record: correct for every input, slower. So do
chunks holding Kafka's record batches v2 (magic 2: what Kafka's clients and a compressing
raftlog producer write; varint records, maybe compressed), which the fast path's fixed-width
reads cannot cut: `RangeChunk.records` decompresses and decodes them.

Gaps: a compacted log has offsets without records (whole batches removed; a cleaned v2
batch keeps only some records, or none). Offsets are taken from the batches, never counted
from the chunk's start, so a record keeps its offset across a gap, and a chunk whose range
starts or ends in a gap, or holds no record at all, gives the records it holds (maybe none).

Column types are what Spark expects for the schema in `schema.py` (timestamps are
microseconds in UTC; record timestamps are milliseconds, so they are multiplied by 1000).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raftlog.client.reader import RangeChunk
from raftlog.records import HEADER_SIZE, MAGIC, RECORD_MIN_SIZE, Record

# Timestamp type of every record: 0 = CreateTime (the producer's clock), as in Kafka. raftlog
# has no LogAppendTime topics.
CREATE_TIME = 0

HEADER_TYPE = pa.list_(
    pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())]))
)
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", TIMESTAMP_TYPE),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(("headers", HEADER_TYPE))
    return pa.schema(fields)


def chunk_to_arrow(chunk: RangeChunk, include_headers: bool) -> pa.RecordBatch:
    """The records of `chunk` in [chunk.start, chunk.end) as one Arrow record batch."""
    batch = _fast(chunk, include_headers)
    if batch is None:
        batch = records_to_arrow(
            chunk.tp.topic, chunk.tp.partition, chunk.records(), include_headers
        )
    return batch


def _field(bodies: pa.BinaryArray, start: int, stop: int | None, dtype: str) -> np.ndarray:
    """The little-endian integer at bytes [start, stop) of every record body (all long
    enough): Arrow slices them into one contiguous buffer, numpy views it."""
    sliced = pc.binary_slice(bodies, start, stop)
    data = sliced.buffers()[2]
    return np.frombuffer(data, dtype, len(bodies)) if data is not None else np.zeros(0, dtype)


def _fast(chunk: RangeChunk, include_headers: bool) -> pa.RecordBatch | None:
    if any(header.magic != MAGIC for _pos, header in chunk.batches):
        return None  # Kafka v2 batches: the record decoder reads them
    data = chunk.data
    view = memoryview(data)
    lengths_parts = []
    offsets_parts = []
    pieces = []
    for pos, header in chunk.batches:
        count = header.record_count
        lengths_parts.append(np.frombuffer(data, "<i4", count, pos + HEADER_SIZE))
        offsets_parts.append(np.arange(header.base_offset, header.next_offset, dtype=np.int64))
        pieces.append(view[pos + HEADER_SIZE + 4 * count : pos + header.size])
    lengths = np.concatenate(lengths_parts).astype(np.int64)
    # A raftlog batch's records are consecutive (record i of a batch has offset base + i), but
    # compaction may have removed whole batches between them: the offsets come per batch, and
    # [start, end) is found by search, since no record need sit at start or end - 1.
    record_offsets = np.concatenate(offsets_parts)
    lo = int(np.searchsorted(record_offsets, chunk.start))
    hi = int(np.searchsorted(record_offsets, chunk.end))
    n = hi - lo
    if n <= 0:
        return records_to_arrow(chunk.tp.topic, chunk.tp.partition, [], include_headers)
    ends = np.cumsum(lengths)
    byte_lo = int(ends[lo - 1]) if lo > 0 else 0
    byte_hi = int(ends[hi - 1])
    if byte_hi - byte_lo >= 2**31:
        return None  # beyond an Arrow binary array's 32-bit offsets: the slow path copes
    joined = b"".join(pieces)[byte_lo:byte_hi]
    lengths = lengths[lo:hi]
    offsets32 = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    bodies = pa.BinaryArray.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets32), pa.py_buffer(joined)]
    )
    # Every body is at least RECORD_MIN_SIZE bytes (validate_batch checked it).
    klen = _field(bodies, 9, 13, "<i4")
    key_length = int(klen[0])
    if key_length < -1 or not (klen == key_length).all():
        return None
    k = max(key_length, 0)
    if (lengths < RECORD_MIN_SIZE + k).any():
        return None
    vlen = _field(bodies, 13 + k, 17 + k, "<i4")
    null_values = vlen == -1
    v = np.where(null_values, 0, vlen)
    if (vlen < -1).any() or not (lengths == RECORD_MIN_SIZE + k + v).all():
        return None  # a header, or a field that does not fit: the checked path says which
    if _field(bodies, -4, None, "<i4").any():
        return None
    timestamps = _field(bodies, 1, 9, "<i8")
    values = pc.binary_slice(bodies, RECORD_MIN_SIZE - 4 + k, -4)
    if null_values.any():
        values = pc.if_else(pa.array(null_values), pa.scalar(None, pa.binary()), values)
    if key_length < 0:
        keys = pa.nulls(n, pa.binary())
    else:
        keys = pc.binary_slice(bodies, 13, 13 + k)
    columns: list[Any] = [
        keys,
        values,
        _repeated_string(chunk.tp.topic, n),
        pa.array(np.full(n, chunk.tp.partition, np.int32)),
        pa.array(record_offsets[lo:hi]),
        pa.array(timestamps * 1000, TIMESTAMP_TYPE),
        pa.array(np.full(n, CREATE_TIME, np.int32)),
    ]
    if include_headers:
        columns.append(
            pa.ListArray.from_arrays(
                pa.array(np.zeros(n + 1, np.int32)), pa.array([], HEADER_TYPE.value_type)
            ).cast(HEADER_TYPE)
        )
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def _repeated_string(text: str, n: int) -> pa.Array:
    raw = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def records_to_arrow(
    topic: str, partition: int, records: Sequence[Record], include_headers: bool
) -> pa.RecordBatch:
    """Decoded records (any shape) as an Arrow record batch: the general, slower path."""
    n = len(records)
    columns: list[Any] = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        _repeated_string(topic, n),
        pa.array(np.full(n, partition, np.int32)),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array(np.array([r.timestamp for r in records], np.int64) * 1000, TIMESTAMP_TYPE),
        pa.array(np.full(n, CREATE_TIME, np.int32)),
    ]
    if include_headers:
        columns.append(
            pa.array(
                [[{"key": hk, "value": hv} for hk, hv in r.headers] for r in records],
                HEADER_TYPE,
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))
