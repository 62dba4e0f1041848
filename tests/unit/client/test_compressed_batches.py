"""Kafka's record batch v2 in raftlog's clients: batches built by kafka-python (an independent
oracle, test-only) decode through the consumer's decode path, and the batches a compressing
raftlog producer builds decode with kafka-python, for every codec; plus compression_type's
checks and the accumulator building compressed batches."""

from __future__ import annotations

import struct
import types
from collections.abc import Iterator

import cramjam
import kafka.codec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from raftlog.client.accumulator import Accumulator
from raftlog.client.compressed import CompressedBatchBuilder, with_producer_v2
from raftlog.client.fetched import ConsumerRecord, decode_fetch
from raftlog.client.producer_config import InvalidConfigValueError, ProducerConfig
from raftlog.client.reader import RangeChunk
from raftlog.errors import CorruptRecordError, InvalidConfigError
from raftlog.metadata.model import PartitionInfo, TopicInfo
from raftlog.records import BatchBuilder, encode_batch, validate_batch
from raftlog.records_v2 import MAGIC_V2
from raftlog.topics import TopicPartition

TP = TopicPartition("events", 3)
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
T0 = 1_764_000_000_000

# (key, value, headers, timestamp): null keys and values, empty ones, headers with a null
# value, timestamps out of order, a value long enough for the codecs to have work.
RECORDS: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = [
    (None, b"plain value", [], T0),
    (b"user-1", b"keyed", [], T0 + 5),
    (b"user-2", None, [("trace", b"abc"), ("empty", b""), ("null", None)], T0 + 3),
    (b"", b"", [("\u00e9t\u00e9", b"\x00\xff")], T0 + 1000),
    (None, b"x" * 5000 + bytes(range(256)) * 4, [], T0 + 7),
] + [(f"k{i}".encode(), f"value {i}".encode() * (i % 7), [], T0 + i) for i in range(300)]


@pytest.fixture(autouse=True)
def kafka_python_snappy(monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python's snappy needs python-snappy, which is not installed: give it cramjam's raw
    snappy as that module. Its xerial framing (what Kafka's Java client writes) stays
    kafka-python's own, so the framing is still checked independently of ours."""
    shim = types.SimpleNamespace(
        compress=lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))),
        decompress=lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))),
    )
    monkeypatch.setattr(kafka.codec, "snappy", shim)


def kafka_python_batch(codec: int, base_offset: int, records: list = RECORDS) -> bytes:  # type: ignore[type-arg]
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=16 * 1024 * 1024,
    )
    for delta, (key, value, headers, ts) in enumerate(records):
        if builder.append(delta, ts, key, value, headers) is None:
            raise AssertionError("kafka-python's builder refused a record")
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)  # what the leader stamps (not in the CRC)
    return bytes(data)


def expected(base_offset: int, records: list = RECORDS) -> list[ConsumerRecord]:  # type: ignore[type-arg]
    return [
        ConsumerRecord(TP.topic, TP.partition, base_offset + i, ts, k, v, tuple(hs))
        for i, (k, v, hs, ts) in enumerate(records)
    ]


def consumed(chunk: bytes, start: int, check_crcs: bool = True) -> list[ConsumerRecord]:
    runs = decode_fetch(TP, memoryview(chunk), start, check_crcs)
    return [r for run in runs for r in run.records]


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
def test_a_kafka_python_batch_decodes_through_the_consumers_path(codec: int) -> None:
    data = kafka_python_batch(codec, 1000)
    assert DefaultRecordBatch(data).compression_type == codec  # it did compress
    assert consumed(data, 1000) == expected(1000)
    assert consumed(data, 1000, check_crcs=False) == expected(1000)
    # A fetch at an offset inside the batch gets the records from there on.
    assert consumed(data, 1250) == expected(1000)[250:]


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
def test_a_fetch_of_both_formats_decodes_in_offset_order(codec: int) -> None:
    own = encode_batch([(b"a", b"one"), (None, b"two")], base_offset=0, timestamp=T0)
    kafkas = kafka_python_batch(codec, 2, RECORDS[:20])
    after = encode_batch([(None, b"three")], base_offset=22, timestamp=T0 + 1)
    chunk = own + kafkas + after + kafkas[:40]  # a v2 batch cut off by the fetch limit
    got = consumed(chunk, 0)
    assert [r.offset for r in got] == list(range(23))
    assert [r.value for r in got[:2]] == [b"one", b"two"]
    assert got[2:22] == expected(2, RECORDS[:20])
    assert got[22].value == b"three"
    # Cut just after a v2 batch's length field: still a cut, not a corrupt batch.
    assert consumed(own + kafkas[:70], 0) == consumed(own, 0)


def test_a_corrupt_v2_batch_stops_its_partition_naming_the_offset() -> None:
    good = kafka_python_batch(4, 0, RECORDS[:3])
    bad = bytearray(kafka_python_batch(4, 3, RECORDS[:3]))
    bad[-1] ^= 0xFF
    batches = decode_fetch(TP, memoryview(good + bytes(bad)), 0)
    assert len(next(batches).records) == 3
    with pytest.raises(CorruptRecordError, match=r"events-3.*offset 3"):
        next(batches)


def test_range_chunks_decode_v2_batches_too() -> None:
    data = kafka_python_batch(1, 10, RECORDS[:30])
    header = validate_batch(data, 0)
    assert header.magic == MAGIC_V2
    chunk = RangeChunk(TP, data, ((0, header),), 15, 25)
    got = chunk.records()
    assert [r.offset for r in got] == list(range(15, 25))
    assert [(r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (k, v, tuple(hs), ts) for k, v, hs, ts in RECORDS[5:15]
    ]


def our_batch(codec: int, records: list = RECORDS) -> CompressedBatchBuilder:  # type: ignore[type-arg]
    builder = CompressedBatchBuilder(codec)
    for key, value, headers, ts in records:
        builder.append(key, value, ts, headers)
    return builder


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_our_compressed_batch_decodes_with_kafka_python(codec: int) -> None:
    head, tail = our_batch(codec).seal()
    head, tail = with_producer_v2(head, tail, 4242, 7, 1_000_000)
    batch = DefaultRecordBatch(head + tail)
    assert batch.validate_crc()
    assert batch.magic == 2 and batch.compression_type == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 7, 1_000_000)
    assert batch.records_count == len(RECORDS)
    assert batch.first_timestamp == T0 and batch.max_timestamp == max(r[3] for r in RECORDS)
    got = [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in batch]
    assert got == [(i, k, v, hs, ts) for i, (k, v, hs, ts) in enumerate(RECORDS)]
    # And through our own consumer, with the sequence stamped (the CRC was recomputed).
    assert consumed(head + tail, 0) == expected(0)


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_a_compressed_batch_is_smaller_and_counts_its_records_uncompressed(codec: int) -> None:
    values = [b"page view of /index.html by user %d" % (i % 10) for i in range(1000)]
    builder = CompressedBatchBuilder(codec)
    assert builder.append_values(values, T0, 0, 30_000) < len(values)  # stops at the bound
    n = len(builder)
    assert builder.size_bytes == 65 + sum(25 + len(v) for v in values[:n]) <= 30_000
    assert builder.append_values(values, T0, n, 10**9) == len(values)
    head, tail = builder.seal()
    assert len(head) + len(tail) < builder.size_bytes // 5  # repetitive: compresses well
    assert len(builder) == len(values) and builder.seal() == (head, tail)  # encoded once
    assert [r.value for r in consumed(head + tail, 0)] == values


def test_a_sealed_compressed_builder_takes_no_more_records() -> None:
    builder = CompressedBatchBuilder.sealed_one(4, b"k", b"v", T0, [("h", b"1")])
    assert len(builder) == 1
    with pytest.raises(AssertionError):
        builder.append_value(b"more", T0)
    [record] = consumed(b"".join(builder.build_parts()), 0)
    assert (record.key, record.value, record.headers) == (b"k", b"v", (("h", b"1"),))


def test_with_producer_v2_refuses_raftlogs_own_batches() -> None:
    own = encode_batch([(None, b"v")], timestamp=T0)
    with pytest.raises(AssertionError, match="not a v2 batch"):
        with_producer_v2(own[:25], own[25:], 9, 1, 5)


@pytest.mark.parametrize("name, codec", [(None, 0), *CODECS.items()])
def test_compression_type_takes_kafka_pythons_names(name: str | None, codec: int) -> None:
    assert ProducerConfig(compression_type=name).compression_codec == codec


@pytest.mark.parametrize("value", ["brotli", "GZIP", "", "lz4-hc", 1])
def test_an_unknown_compression_type_is_refused_naming_the_value_and_the_choices(
    value: object,
) -> None:
    with pytest.raises(InvalidConfigValueError) as info:
        ProducerConfig(compression_type=value)  # type: ignore[arg-type]
    text = str(info.value)
    assert f"compression_type={value!r}" in text
    assert all(repr(name) in text for name in CODECS)
    assert isinstance(info.value, ValueError) and isinstance(info.value, InvalidConfigError)


def accumulator(**options: object) -> Accumulator:
    partitions = tuple(PartitionInfo(p, 0, 0, (0,), (0,)) for p in range(2))
    return Accumulator(
        ProducerConfig(**options),  # type: ignore[arg-type]
        {"t": TopicInfo("t", "id", partitions)},
        lambda: None,
    )


def queued_bytes(acc: Accumulator) -> Iterator[tuple[int, bytes]]:
    for q in acc.queues.values():
        for b in q:
            yield b.builder.size_bytes, b"".join(b.builder.build_parts())


@pytest.mark.parametrize("compression_type", ["gzip", "snappy", "lz4", "zstd"])
def test_a_compressing_producer_builds_compressed_v2_batches(compression_type: str) -> None:
    acc = accumulator(compression_type=compression_type, batch_size=4096)
    sent = []
    for i in range(200):
        fut = acc.append("t", b"value %d" % i, b"key %d" % (i % 5), [("n", b"%d" % i)], None,
                         T0 + i, False)  # fmt: skip
        assert fut is not None
        sent.append(fut)
    spans: list = []  # type: ignore[type-arg]
    assert acc.append_many("t", [b"many %d" % i for i in range(500)], 0, 1, False, spans) == 500
    assert acc.append("t", b"y" * 10_000, None, None, 0, T0, False) is not None  # a batch alone
    total = 0
    values = []
    for size, data in queued_bytes(acc):
        total += size
        batch = DefaultRecordBatch(data)
        assert batch.magic == 2 and batch.compression_type == CODECS[compression_type]
        assert batch.validate_crc()
        values += [r.value for r in consumed(data, 0)]
    assert total == acc.buffered_bytes  # the buffer counts what the builders count
    assert sorted(values) == sorted(
        [b"value %d" % i for i in range(200)]
        + [b"many %d" % i for i in range(500)]
        + [b"y" * 10_000]
    )


def test_a_producer_without_compression_builds_raftlogs_own_batches() -> None:
    for options in ({}, {"compression_type": None}, {"compression_type": "none"}):
        acc = accumulator(**options)
        assert acc.append("t", b"v", b"k", None, None, T0, False) is not None
        [(_size, data)] = list(queued_bytes(acc))
        assert validate_batch(data).magic == 1


RANDOM_RECORDS = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3),
        st.integers(0, 2**42),
    ),
    min_size=1,
    max_size=40,
)


@given(records=RANDOM_RECORDS, codec=st.sampled_from([1, 2, 3, 4]), start=st.integers(0, 45))
@settings(max_examples=150, deadline=None)
def test_any_records_survive_our_compressed_batch_both_ways(
    records: list,
    codec: int,
    start: int,  # type: ignore[type-arg]
) -> None:
    head, tail = our_batch(codec, records).seal()
    data = head + tail
    want = expected(0, records)
    assert consumed(data, start) == want[start:]
    got = [(r.key, r.value, r.headers, r.timestamp) for r in DefaultRecordBatch(data)]
    assert got == [(k, v, hs, ts) for k, v, hs, ts in records]


@given(
    lengths=st.lists(st.integers(1, 500), min_size=1, max_size=200),
    bound=st.integers(1, 20_000),
    first=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_append_values_fills_a_batch_exactly_as_raftlogs_builder_does(
    lengths: list[int], bound: int, first: bool
) -> None:
    """The accumulator treats both builders alike: the same values fit, the same size counts."""
    values = [b"v" * n for n in lengths]
    ours, theirs = CompressedBatchBuilder(4), BatchBuilder()
    if first:
        assert ours.append(b"key", b"value", T0, [("h", None)]) == theirs.append(
            b"key", b"value", T0, [("h", None)]
        )
    i = j = 0
    while i < len(values):
        i_next = ours.append_values(values, T0, i, bound)
        assert i_next == theirs.append_values(values, T0, j, bound)
        assert ours.size_bytes == theirs.size_bytes and len(ours) == len(theirs)
        assert i_next > i or len(ours) > 0  # an empty batch always takes one record
        i = j = i_next
        ours, theirs = CompressedBatchBuilder(4), BatchBuilder()
