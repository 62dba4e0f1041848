"""The pure parts of the Spark source, without Spark or a broker: option parsing, offset JSON,
range splitting, admission control, and the columnar decoder against the record decoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from raftlog_spark.arrow import chunk_to_arrow, records_to_arrow
from raftlog_spark.offsets import from_json, to_json
from raftlog_spark.options import (
    ByTimestamp,
    Earliest,
    Group,
    Latest,
    PerPartition,
    RaftlogSparkOptionError,
    SourceOptions,
)
from raftlog_spark.source import rate_limit, split_ranges

from raftlog.client.reader import RangeChunk
from raftlog.records import Record, encode_batch, iter_batches
from raftlog.topics import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
BASE = {"raftlog.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def parse(streaming: bool = False, **options: str) -> SourceOptions:
    return SourceOptions.parse({**BASE, **options}, streaming)


def test_defaults_follow_the_kafka_source() -> None:
    batch, stream = parse(), parse(streaming=True)
    assert (batch.starting, batch.ending) == (Earliest(), Latest())
    assert stream.starting == Latest()
    assert batch.fail_on_data_loss and not batch.include_headers
    assert stream.max_offsets_per_trigger is None and stream.commit_to_group is None


def test_offset_specs_and_precedence() -> None:
    assert parse(startingOffsets="group:g1").starting == Group("g1")
    assert parse(endingOffsets="group:g1").ending == Group("g1")
    spec = parse(startingOffsets='{"t": {"0": 5, "1": -2}}').starting
    assert spec == PerPartition({T0: 5, T1: -2})
    # Kafka's precedence: startingTimestamp over startingOffsetsByTimestamp over startingOffsets.
    both = parse(startingOffsets="earliest", startingOffsetsByTimestamp='{"t": {"0": 7}}')
    assert both.starting == ByTimestamp({T0: 7})
    assert parse(startingTimestamp="9", startingOffsetsByTimestamp='{"t": {"0": 7}}').starting == (
        ByTimestamp({}, 9)
    )
    # Option names are case-insensitive, as in Spark.
    assert parse(STARTINGOFFSETS="group:x").starting == Group("x")


@pytest.mark.parametrize(
    ("streaming", "options", "message"),
    [
        (False, {"startingOffsets": "latest"}, "not allowed in a batch query"),
        (False, {"endingOffsets": "earliest"}, "'earliest' is not allowed"),
        (False, {"endingOffsets": '{"t": {"0": -2}}'}, "allowed here: >= 0, -1"),
        (True, {"endingOffsets": "latest"}, "batch queries (spark.read) only"),
        (False, {"maxOffsetsPerTrigger": "5"}, "streaming queries (spark.readStream) only"),
        (True, {"maxOffsetsPerTrigger": "-5"}, "must be a positive integer"),
        (True, {"commitToGroup": " "}, "must name a consumer group"),
        (False, {"startingOffsets": "group:"}, "needs a group id"),
        (False, {"startingOffsets": "[1]"}, "must be 'earliest', 'latest'"),
        (False, {"startingOffsets": '{"t": {"0": true}}'}, "not an integer"),
        (False, {"startingOffsets": '{"t": []}'}, "must be an object of partition -> offset"),
        (False, {"startingTimestamp": "yesterday"}, "milliseconds since the epoch"),
        (False, {"startingOffsetsByTimestampStrategy": "closest"}, "'error' or 'latest'"),
        (False, {"includeHeaders": "yes"}, "must be true or false"),
        (False, {"subscribe": " , "}, "names no topic"),
        (False, {"kafka.bootstrap.servers": "x:1"}, "unknown option 'kafka.bootstrap.servers'"),
    ],
)
def test_bad_options(streaming: bool, options: dict[str, str], message: str) -> None:
    with pytest.raises(RaftlogSparkOptionError) as info:
        parse(streaming, **options)
    assert message in str(info.value)


def test_offsets_json_round_trip() -> None:
    offsets = {T1: 7, T0: 3, TopicPartition("a", 2): 0}
    obj = to_json(offsets)
    assert list(obj) == ["a", "t"] and obj["t"] == {"0": 3, "1": 7}
    assert from_json(obj) == offsets


def test_split_ranges_one_per_partition_or_proportional_pieces() -> None:
    ranges = {T0: (0, 900), T1: (50, 150), TopicPartition("t", 2): (5, 5)}
    parts = split_ranges(ranges, None)
    assert [(p.partition, p.start, p.end) for p in parts] == [(0, 0, 900), (1, 50, 150)]
    parts = split_ranges(ranges, 10)
    assert len([p for p in parts if p.partition == 0]) == 9
    assert len([p for p in parts if p.partition == 1]) == 1
    for tp, (start, end) in ranges.items():
        mine = [p for p in parts if p.partition == tp.partition]
        covered = [o for p in mine for o in range(p.start, p.end)]
        assert covered == list(range(start, end))


@given(
    sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=6),
    minimum=st.integers(1, 40),
)
@settings(max_examples=300, deadline=None)
def test_split_ranges_reach_min_partitions_and_cover_every_offset_once(
    sizes: list[int], minimum: int
) -> None:
    ranges = {TopicPartition("t", i): (100, 100 + n) for i, n in enumerate(sizes)}
    parts = split_ranges(ranges, minimum)
    offsets = sum(sizes)
    assert len(parts) >= min(minimum, offsets)
    for tp, (start, end) in ranges.items():
        mine = [p for p in parts if p.partition == tp.partition]
        assert [o for p in mine for o in range(p.start, p.end)] == list(range(start, end))


@given(
    backlog=st.lists(st.integers(0, 10_000), min_size=1, max_size=8),
    limit=st.integers(1, 20_000),
)
@settings(max_examples=300, deadline=None)
def test_rate_limit_admits_at_most_the_limit_and_always_progresses(
    backlog: list[int], limit: int
) -> None:
    begin = {TopicPartition("t", i): 100 * i for i in range(len(backlog))}
    ends = {tp: begin[tp] + b for tp, b in zip(begin, backlog, strict=True)}
    out = rate_limit(begin, ends, limit)
    admitted = sum(out[tp] - begin[tp] for tp in begin)
    assert all(begin[tp] <= out[tp] <= ends[tp] for tp in begin)
    assert admitted == min(limit, sum(backlog))


RECORDS = st.lists(
    st.builds(
        Record,
        key=st.none() | st.binary(max_size=12),
        value=st.none() | st.binary(max_size=300),
        headers=st.lists(
            st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2
        ).map(tuple)
        | st.just(()),
        timestamp=st.integers(0, 2**41),
    ),
    min_size=1,
    max_size=40,
)


@given(
    batches=st.lists(RECORDS, min_size=1, max_size=4),
    trim=st.tuples(st.integers(0, 20), st.integers(0, 20)),
    headers=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_columnar_decoder_equals_the_record_decoder(
    batches: list[list[Record]], trim: tuple[int, int], headers: bool
) -> None:
    data, base = b"", 40
    for records in batches:
        data += encode_batch(records, base_offset=base)
        base += len(records)
    start = min(40 + trim[0], base - 1)
    end = max(base - trim[1], start + 1)
    chunk = RangeChunk(T1, data, tuple(iter_batches(data)), start, end)
    expected = records_to_arrow("t", 1, chunk.records(), headers)
    got = chunk_to_arrow(chunk, headers)
    assert got.num_rows == end - start
    assert got.equals(expected), (got.to_pylist()[:3], expected.to_pylist()[:3])


def test_columnar_fast_path_for_plain_and_keyed_records() -> None:
    """Records of one key length take the whole-chunk path (not the record decoder)."""
    from raftlog_spark import arrow

    for key in (None, b"user-0001"):
        records = [Record(key, b"v" * (i % 40), (), 1000 + i) for i in range(100)]
        data = encode_batch(records[:60], base_offset=0) + encode_batch(records[60:], 60)
        chunk = RangeChunk(T0, data, tuple(iter_batches(data)), 3, 97)
        fast = arrow._fast(chunk, include_headers=True)
        assert fast is not None
        assert fast.equals(records_to_arrow("t", 0, chunk.records(), True))


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_a_chunk_with_kafka_v2_batches_decodes_to_the_same_columns(codec: int) -> None:
    """Kafka's record batches v2 (what Kafka's clients and a compressing producer write) next
    to raftlog's own: the columns hold every record of both, keys, headers and timestamps."""
    from raftlog_spark import arrow

    from raftlog.records_v2 import encode_batch_v2

    records = [Record(b"k%d" % (i % 3), b"v" * i, (("h", b"%d" % i),), 1000 + i) for i in range(50)]
    data = encode_batch(records[:20], base_offset=0)
    v2 = bytearray(encode_batch_v2(records[20:], compression=codec))
    v2[:8] = (20).to_bytes(8, "big")  # what the leader stamps
    data += bytes(v2)
    chunk = RangeChunk(T0, data, tuple(iter_batches(data)), 5, 45)
    assert arrow._fast(chunk, include_headers=True) is None  # the record decoder reads v2
    batch = chunk_to_arrow(chunk, include_headers=True)
    got = batch.to_pylist()
    assert [r["offset"] for r in got] == list(range(5, 45))
    assert [(r["key"], r["value"], r["headers"]) for r in got] == [
        (r.key, r.value, [{"key": "h", "value": r.headers[0][1]}]) for r in records[5:45]
    ]
    micros = batch.column("timestamp").cast("int64").to_pylist()
    assert micros == [r.timestamp * 1000 for r in records[5:45]]
