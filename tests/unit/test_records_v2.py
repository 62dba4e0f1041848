"""Kafka's record batch v2 (records_v2.py) and the format dispatch of records.py: round trips
of both formats, cross-checks with kafka-python's implementation (encode with one, read with
the other, CRC checked), conversion of raftlog batches to v2, and damage."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import encode_varint

from raftlog import compression
from raftlog.errors import CorruptRecordError
from raftlog.records import (
    BatchHeader,
    Record,
    convert_to_v2,
    convert_v1_to_v2,
    decode_records,
    decode_records_as,
    encode_batch,
    iter_batches,
    read_header,
    stamp,
    validate_batch,
)
from raftlog.records_v2 import (
    HEADER_V2,
    MAGIC_V2,
    crc32c,
    decode_records_v2,
    encode_batch_v2,
    read_varint,
    validate_batch_v2,
    zigzag_varint,
)

CODECS = sorted(compression.CODEC_NAMES)
blobs = st.one_of(st.none(), st.binary(max_size=64), st.binary(min_size=100, max_size=300))
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16)))
# key, value, headers, timestamp (>= 0: both formats refuse negative timestamps)
records = st.builds(
    Record, blobs, blobs, st.lists(header, max_size=3).map(tuple), st.integers(0, 2**50)
)
record_lists = st.lists(records, min_size=1, max_size=40)
producers = st.one_of(
    st.just((-1, -1, -1)),
    st.tuples(st.integers(0, 2**62), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1)),
)


def producer_fields(producer: tuple[int, int, int]) -> dict[str, int]:
    """An idempotent producer's (id, epoch, base sequence) as the encoders' keywords."""
    pid, epoch, seq = producer
    return {"producer_id": pid, "producer_epoch": epoch, "base_sequence": seq}


def with_offsets(recs: list[Record], base: int) -> list[Record]:
    return [r._replace(offset=base + i) for i, r in enumerate(recs)]


@given(record_lists, st.integers(0, 2**40), st.integers(-1, 2**20), producers)
@settings(max_examples=60)
def test_both_formats_round_trip_through_the_dispatching_functions(
    recs: list[Record], base: int, epoch: int, producer: tuple[int, int, int]
) -> None:
    v1 = encode_batch(
        recs,
        base_offset=base,
        partition_leader_epoch=epoch,
        **producer_fields(producer),
    )
    for codec in CODECS:
        v2 = encode_batch_v2(
            recs,
            base_offset=base,
            partition_leader_epoch=epoch,
            **producer_fields(producer),
            compression=codec,
        )
        h = validate_batch(v2)
        assert h == read_header(v2) == validate_batch_v2(v2)
        assert (h.magic, h.attributes & 7, h.size) == (MAGIC_V2, codec, len(v2))
        assert decode_records(v2) == with_offsets(recs, base) == decode_records(v1)
        hv1 = validate_batch(v1)
        # Every field but the format's own (magic, checksum, length, attributes) agrees.
        assert _common(h) == _common(hv1)


def _common(h: BatchHeader) -> tuple[int, ...]:
    return (
        h.base_offset,
        h.partition_leader_epoch,
        h.last_offset_delta,
        h.first_timestamp,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.record_count,
    )


class ConsumerRecord(tuple[Any, ...]):
    """A stand-in for the consumer's NamedTuple: decode_records_as builds it with
    tuple.__new__."""


def test_decode_records_as_builds_the_consumers_tuples_for_v2() -> None:
    recs = [Record(b"k", b"v", (("h", None),), 5), Record(None, b"w", (), 9)]
    raw = encode_batch_v2(recs, base_offset=40)
    out = decode_records_as(raw, 0, validate_batch(raw), ConsumerRecord, "t", 3)
    assert [tuple(r) for r in out] == [
        ("t", 3, 40, 5, b"k", b"v", (("h", None),)),
        ("t", 3, 41, 9, None, b"w", ()),
    ]
    assert all(type(r) is ConsumerRecord for r in out)


@given(record_lists, producers)
@settings(max_examples=40)
def test_convert_v1_to_v2_keeps_every_field(
    recs: list[Record], producer: tuple[int, int, int]
) -> None:
    pid = producer[0]
    v1 = encode_batch(recs, **producer_fields(producer))
    v1 = stamp(1234, struct.unpack_from("<i", v1, 8)[0], 17) + v1[16:]  # as stored
    v2 = convert_v1_to_v2(v1)
    h1, h2 = validate_batch(v1), validate_batch(v2)
    assert h2.magic == 2 and _common(h2) == _common(h1)
    assert decode_records(v2) == decode_records(v1) == with_offsets(recs, 1234)
    kb = DefaultRecordBatch(v2)  # Kafka's reader takes it
    assert kb.validate_crc() and kb.base_offset == 1234 and kb.producer_id == pid
    assert [(r.offset, r.timestamp, r.key, r.value) for r in kb] == [
        (r.offset, r.timestamp, r.key, r.value) for r in with_offsets(recs, 1234)
    ]


def test_convert_refuses_a_damaged_batch() -> None:
    v1 = bytearray(encode_batch([Record(None, b"x" * 20, (), 1)]))
    v1[-3] ^= 1
    with pytest.raises(CorruptRecordError, match="checksum"):
        convert_v1_to_v2(v1)


# -- kafka-python as the other side ---------------------------------------------------------


class _CramjamSnappy:
    """python-snappy's two functions, for kafka-python's snappy codec, on cramjam's raw
    snappy (python-snappy is not installed): kafka-python's own xerial framing runs on it."""

    @staticmethod
    def compress(data: bytes) -> bytes:
        import cramjam

        return bytes(cramjam.snappy.compress_raw(bytes(data)))

    @staticmethod
    def decompress(data: bytes) -> bytes:
        import cramjam

        return bytes(cramjam.snappy.decompress_raw(bytes(data)))


@pytest.fixture(autouse=True)
def kafka_python_snappy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if not kafka_codec.has_snappy():
        monkeypatch.setattr(kafka_codec, "snappy", _CramjamSnappy)
    yield


def kafka_python_batch(recs: list[Record], codec: int, producer: tuple[int, int, int]) -> bytes:
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        **producer_fields(producer),
        batch_size=1 << 24,
    )
    for i, r in enumerate(recs):
        b.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers))
    return bytes(b.build())


@pytest.mark.parametrize("codec", CODECS)
@given(recs=record_lists, producer=producers)
@settings(max_examples=25)
def test_kafka_pythons_batches_decode_with_ours(
    codec: int, recs: list[Record], producer: tuple[int, int, int]
) -> None:
    raw = kafka_python_batch(recs, codec, producer)
    h = validate_batch(raw)  # its CRC-32C checks out
    # (kafka-python leaves a batch uncompressed when compressing would make it larger.)
    assert (h.magic, h.record_count) == (2, len(recs)) and h.attributes & 7 in (0, codec)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == producer
    assert decode_records(raw) == with_offsets(recs, 0)


@pytest.mark.parametrize("codec", CODECS)
@given(recs=record_lists, producer=producers, base=st.integers(0, 2**40))
@settings(max_examples=25)
def test_our_batches_read_with_kafka_python(
    codec: int, recs: list[Record], producer: tuple[int, int, int], base: int
) -> None:
    pid, epoch, seq = producer
    raw = encode_batch_v2(
        recs,
        base_offset=base,
        **producer_fields(producer),
        compression=codec,
    )
    kb = DefaultRecordBatch(raw)
    assert kb.validate_crc()
    assert (kb.base_offset, kb.compression_type, kb.producer_id) == (base, codec, pid)
    assert (kb.producer_epoch, kb.base_sequence) == (epoch, seq)
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kb] == [
        (r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in with_offsets(recs, base)
    ]


def test_log_append_time_gives_every_record_the_batch_max_timestamp() -> None:
    raw = bytearray(encode_batch_v2([Record(None, b"a", (), 5), Record(None, b"b", (), 9)]))
    raw[22] |= 0x08  # timestamp type bit: log append time (the broker's, as max_timestamp)
    struct.pack_into(">q", raw, 35, 777)
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    assert [r.timestamp for r in decode_records(raw)] == [777, 777]
    assert [r.timestamp for r in DefaultRecordBatch(bytes(raw))] == [777, 777]


@given(st.integers(-(2**63), 2**63 - 1))
def test_varints_are_kafkas(n: int) -> None:
    expected = bytearray()
    encode_varint(n, expected.append)
    assert zigzag_varint(n) == bytes(expected)
    if len(expected) <= 5:  # an int32's varint; longer ones are varlongs
        assert read_varint(bytes(expected), 0) == (n, len(expected))


# -- damage ------------------------------------------------------------------------------------


def recrc(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


def test_validate_batch_v2_names_what_is_wrong() -> None:
    good = encode_batch_v2([Record(None, b"x" * 10, (), 5)] * 3)
    cases: dict[str, bytes] = {
        "truncated batch": good[:50],
        "impossible batch length": good[:-1],
        "does not match last offset delta": recrc(_with(good, ">i", 23, 0)),
        "unknown compression codec 5": recrc(_with(good, ">h", 21, 5)),
        "does not fit v2 batch": recrc(_with(_with(good, ">i", 57, 50), ">i", 23, 49)),
        "CRC-32C": bytes(_with(good, ">i", 57, 2)),
        "timestamps out of order": recrc(_with(good, ">q", 27, -5)),
        "unknown magic 3": bytes(_with(good, ">b", 16, 3)),
    }
    for reason, raw in cases.items():
        with pytest.raises(CorruptRecordError, match=reason):
            validate_batch(raw)
    assert validate_batch(good, checksum=True).record_count == 3
    assert validate_batch(bytes(_with(good, ">i", 17, 1)), checksum=False).record_count == 3


def _with(raw: bytes | bytearray, fmt: str, at: int, value: int) -> bytearray:
    out = bytearray(raw)
    struct.pack_into(fmt, out, at, value)
    return out


def test_kafkas_offset_gaps_after_compaction_are_kept() -> None:
    """Kafka's compaction leaves batches whose offsets have gaps: last_offset_delta > count - 1
    and each record's offset from its own offset delta."""
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    b.append(0, timestamp=5, key=None, value=b"a", headers=[])
    b.append(5, timestamp=9, key=None, value=b"b", headers=[])
    raw = stamp(100, len(b.build()) - 12, 3, 2) + bytes(b.build())[16:]
    h = validate_batch(raw)
    assert (h.record_count, h.last_offset_delta, h.next_offset) == (2, 5, 106)
    assert [r.offset for r in decode_records(raw)] == [100, 105]


@given(st.data())
@settings(max_examples=200)
def test_damaged_record_streams_raise_corrupt_record_error_only(data: st.DataObject) -> None:
    """Bytes of the record stream changed, the CRC recomputed (as a buggy or hostile client
    would send it): decoding either works or raises CorruptRecordError."""
    recs = data.draw(record_lists, label="records")
    raw = bytearray(encode_batch_v2(recs))
    for _ in range(data.draw(st.integers(1, 4), label="changes")):
        at = data.draw(st.integers(61, len(raw) - 1), label="at")
        raw[at] = data.draw(st.integers(0, 255), label="byte")
    cut = data.draw(st.integers(61, len(raw)), label="cut")
    raw = raw[:cut]
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    try:
        h = validate_batch(recrc(raw))
    except CorruptRecordError:
        return
    with contextlib.suppress(CorruptRecordError):
        decode_records(bytes(raw), 0, h)


@pytest.mark.parametrize("codec", [c for c in CODECS if c])
def test_bad_compressed_data_is_a_corrupt_record_error(codec: int) -> None:
    raw = bytearray(encode_batch_v2([Record(None, b"x" * 500, (), 5)] * 5, compression=codec))
    raw[61:] = b"\x00garbage, not compressed" * 3
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    h = validate_batch(recrc(raw))
    with pytest.raises(CorruptRecordError, match=r"bad|ends|length"):
        decode_records(bytes(raw), 0, h)


def test_a_compressed_batch_over_the_bound_is_refused() -> None:
    raw = encode_batch_v2([Record(None, b"\0" * 100_000, (), 5)] * 10, compression=4)
    assert len(raw) < 2000
    with pytest.raises(CorruptRecordError, match="more than 100000 bytes"):
        decode_records_v2(raw, 0, None, None, 100_000)


def test_header_v2_is_61_bytes_in_batch_header_order() -> None:
    raw = encode_batch_v2([Record(None, b"v", (), 3)], base_offset=9, producer_id=4)
    assert HEADER_V2.size == 61
    h = BatchHeader._make(HEADER_V2.unpack_from(raw))
    assert (h.base_offset, h.magic, h.producer_id, h.record_count) == (9, 2, 4, 1)


# Runs of same-shaped records (records_v2's run reader) broken in every way it checks: a
# value of another length, a key, a header, timestamp and offset deltas whose varints
# widen (at 64 and 8192), a null value.
run_records = st.lists(
    st.one_of(
        st.builds(
            Record,
            key=st.none(),
            value=st.sampled_from([b"", b"v" * 20, b"w" * 20, b"x" * 200, b"y" * 9000]),
            timestamp=st.sampled_from([1000, 1001, 1063, 1064, 1065, 9191, 9192, 9500, 2**33]),
        ),
        records,
    ),
    min_size=1,
    max_size=300,
)


@given(run_records, st.sampled_from([0, 3]))
@settings(max_examples=60)
def test_runs_of_same_shaped_records_decode_like_any_other(recs: list[Record], codec: int) -> None:
    raw = encode_batch_v2(recs, base_offset=10, compression=codec)
    assert decode_records(raw) == with_offsets(recs, 10)
    assert [(r.offset, r.timestamp, r.value) for r in DefaultRecordBatch(raw)] == [
        (r.offset, r.timestamp, r.value) for r in with_offsets(recs, 10)
    ]


def test_a_long_run_is_read_by_the_run_reader_in_windows() -> None:
    recs = [Record(None, b"%05d" % i, (), 1000 + i % 100) for i in range(5000)]
    raw = encode_batch_v2(recs)
    assert decode_records(raw) == with_offsets(recs, 0)
    out = decode_records_as(raw, 0, validate_batch(raw), ConsumerRecord, "t", 0)
    assert [tuple(r)[2:6] for r in out] == [
        (i, 1000 + i % 100, None, b"%05d" % i) for i in range(5000)
    ]


def test_convert_to_v2_converts_every_raftlog_batch_of_a_read() -> None:
    recs = [Record(None, b"v%d" % i, (), 100 + i) for i in range(6)]
    batches = [
        encode_batch(recs[:2], base_offset=0),
        encode_batch_v2(recs[2:3], base_offset=2, compression=3),
        encode_batch(recs[3:6], base_offset=3, producer_id=9, producer_epoch=1, base_sequence=3),
    ]
    read = b"".join(batches)
    converted = convert_to_v2(read)
    headers = [h for _, h in iter_batches(converted)]
    assert [h.magic for h in headers] == [2, 2, 2]
    assert [h.base_offset for h in headers] == [0, 2, 3]
    assert headers[2].producer_id == 9
    assert decode_records(converted, 0) + decode_records(converted, headers[0].size) == [
        *decode_records(batches[0]),
        *decode_records(batches[1]),
    ]
    kafka_read = [
        (r.offset, r.value)
        for pos, h in iter_batches(converted)
        for r in DefaultRecordBatch(converted[pos : pos + h.size])
    ]
    assert kafka_read == [(i, b"v%d" % i) for i in range(6)]
    # Nothing to convert: the same object back. A partial raftlog batch at the end is left
    # out (it cannot be converted); a partial v2 batch is kept (Kafka's clients skip it).
    only_v2 = batches[1] + batches[1]
    assert convert_to_v2(only_v2) is only_v2
    assert convert_to_v2(read[:-5]) == converted[: -headers[2].size]
    partial_v2 = batches[1][:-5]
    assert convert_to_v2(batches[0] + partial_v2) == converted[: headers[0].size] + partial_v2


def test_a_max_timestamp_below_the_base_reads_as_the_base() -> None:
    """Sarama 1.22 writes max_timestamp -1 (Kafka's NO_TIMESTAMP; Kafka's broker recomputes
    it): the batch is accepted and every header reader sees the base timestamp, so the time
    index and retention never take it for a batch from 1970."""
    batch = bytearray(encode_batch_v2([Record(b"k", b"v", (), 1_700_000_000_000)]))
    struct.pack_into(">q", batch, 35, -1)  # max_timestamp
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    header = validate_batch_v2(bytes(batch))
    assert (header.first_timestamp, header.max_timestamp) == (1_700_000_000_000,) * 2
    assert read_header(bytes(batch)).max_timestamp == 1_700_000_000_000
    assert [r.value for r in decode_records_v2(bytes(batch))] == [b"v"]
