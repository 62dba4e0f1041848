"""The Spark source's Arrow decoder on chunks of a compacted log (no Spark session, no broker).

Raftlog's own batches are never gapped inside, but compaction removes whole batches between
them; cleaned Kafka v2 batches have holes or no records. The fast (whole-chunk) path and the
record decoder must give every kept record with its own offset, and a chunk whose range starts
or ends in a gap, or holds no record, must decode to what it holds.
"""

from __future__ import annotations

import pytest
from raftlog_spark import arrow
from raftlog_spark.arrow import chunk_to_arrow, records_to_arrow

from raftlog.client.reader import RangeChunk
from raftlog.records import Record, encode_batch, iter_batches
from raftlog.records_v2 import KeptOffsets, encode_batch_v2
from raftlog.topics import TopicPartition

TP = TopicPartition("t", 0)
TS = 1_764_000_000_000


def own(base: int, count: int) -> bytes:
    return encode_batch(
        [Record(None, b"v%d" % (base + i), (), TS + base + i) for i in range(count)], base
    )


def chunk(data: bytes, start: int, end: int) -> RangeChunk:
    return RangeChunk(TP, data, tuple(iter_batches(data)), start, end)


OWN = own(0, 3) + own(25, 2) + own(40, 5)  # gaps 3-24 and 27-39


@pytest.mark.parametrize(
    ("start", "end", "kept"),
    [
        (0, 45, [0, 1, 2, 25, 26, 40, 41, 42, 43, 44]),
        (1, 42, [1, 2, 25, 26, 40, 41]),
        (3, 30, [25, 26]),  # starts and ends in a gap
        (3, 25, []),  # nothing but the gap
        (26, 40, [26]),
    ],
)
def test_the_fast_path_keeps_offsets_across_removed_batches(
    start: int, end: int, kept: list[int]
) -> None:
    c = chunk(OWN, start, end)
    fast = arrow._fast(c, include_headers=False)
    assert fast is not None
    assert fast.column("offset").to_pylist() == kept
    assert fast.column("value").to_pylist() == [b"v%d" % o for o in kept]
    assert fast.equals(records_to_arrow("t", 0, c.records(), False))


def test_cleaned_v2_batches_decode_at_their_own_offsets() -> None:
    kept = [Record(b"k%d" % o, b"v%d" % o, (), TS + o, o) for o in (10, 13, 15)]
    data = (
        own(0, 3)
        + encode_batch_v2(kept, base_offset=10, kept=KeptOffsets(9, TS, TS + 20))
        + encode_batch_v2([], base_offset=20, kept=KeptOffsets(4, TS, TS))
    )
    for start, end, offsets in [(0, 25, [0, 1, 2, 10, 13, 15]), (11, 25, [13, 15]), (16, 25, [])]:
        batch = chunk_to_arrow(chunk(data, start, end), include_headers=True)
        assert batch.column("offset").to_pylist() == offsets
