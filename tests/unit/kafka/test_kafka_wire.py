"""The Kafka primitives: what the Writer encodes the Reader decodes; the byte layouts are
Kafka's; bad lengths are KafkaDecodeErrors naming the field; and every raftlog error has a
deliberate Kafka error code."""

from __future__ import annotations

import inspect

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog import errors as raftlog_errors
from raftlog.kafka import errors as kafka_errors
from raftlog.kafka.errors import ErrorCode, kafka_code
from raftlog.kafka.wire import (
    KafkaDecodeError,
    Reader,
    Writer,
    encode_uvarint,
    encode_varint,
    encode_varlong,
)
from raftlog.protocol import RemoteProtocolError

INT32_RANGE = st.integers(-(2**31), 2**31 - 1)
INT64_RANGE = st.integers(-(2**63), 2**63 - 1)


def test_fixed_width_integers_are_big_endian() -> None:
    w = Writer()
    w.int8(-2)
    w.int16(0x0102)
    w.int32(-1)
    w.uint32(0xFFFFFFFE)
    w.int64(1)
    w.boolean(True)
    data = w.getvalue()
    assert data == bytes.fromhex("fe0102fffffffffffffffe000000000000000101")
    r = Reader(data)
    assert (r.int8(), r.int16(), r.int32(), r.uint32(), r.int64(), r.boolean()) == (
        -2,
        0x0102,
        -1,
        0xFFFFFFFE,
        1,
        True,
    )
    r.expect_end("the test")


def test_varint_layouts_match_kafkas_examples() -> None:
    # Kafka's ByteUtilsTest and the protocol guide: 300 is ac 02; zigzag 0,-1,1,-2 -> 0,1,2,3.
    assert encode_uvarint(300) == b"\xac\x02"
    assert [encode_varint(v) for v in (0, -1, 1, -2)] == [b"\x00", b"\x01", b"\x02", b"\x03"]
    assert encode_varint(-(2**31)) == b"\xff\xff\xff\xff\x0f"
    assert len(encode_varlong(-(2**63))) == 10


@given(st.integers(0, 2**32 - 1))
def test_uvarint_round_trips(value: int) -> None:
    r = Reader(encode_uvarint(value))
    assert r.uvarint() == value
    assert r.remaining == 0


@given(INT32_RANGE)
def test_varint_round_trips(value: int) -> None:
    w = Writer()
    w.varint(value)
    r = Reader(w.getvalue())
    assert r.varint() == value
    r.expect_end("varint")


@given(INT64_RANGE)
def test_varlong_round_trips(value: int) -> None:
    w = Writer()
    w.varlong(value)
    r = Reader(w.getvalue())
    assert r.varlong() == value
    r.expect_end("varlong")


@given(st.text(max_size=300), st.none() | st.text(max_size=50))
def test_strings_round_trip_in_both_encodings(text: str, maybe: str | None) -> None:
    w = Writer()
    w.string(text)
    w.nullable_string(maybe)
    w.compact_string(text)
    w.compact_nullable_string(maybe)
    r = Reader(w.getvalue())
    assert r.string() == text
    assert r.nullable_string() == maybe
    assert r.compact_string() == text
    assert r.compact_nullable_string() == maybe
    r.expect_end("strings")


@given(st.binary(max_size=300), st.none() | st.binary(max_size=50))
def test_bytes_round_trip_as_views_of_the_input(data: bytes, maybe: bytes | None) -> None:
    w = Writer()
    w.bytes_(data)
    w.nullable_bytes(maybe)
    w.compact_bytes(data)
    w.compact_nullable_bytes(maybe)
    frame = w.getvalue()
    r = Reader(frame)
    first = r.bytes_()
    assert isinstance(first, memoryview) and first.obj is r.buf.obj  # zero copy
    assert bytes(first) == data
    second = r.nullable_bytes()
    assert (None if second is None else bytes(second)) == maybe
    assert bytes(r.compact_bytes()) == data
    third = r.compact_nullable_bytes()
    assert (None if third is None else bytes(third)) == maybe
    r.expect_end("bytes")


@given(st.lists(INT32_RANGE, max_size=20), st.none() | st.lists(st.text(max_size=5), max_size=5))
def test_arrays_round_trip(ints: list[int], names: list[str] | None) -> None:
    w = Writer()
    w.array_length(len(ints))
    for v in ints:
        w.int32(v)
    w.array_length(None if names is None else len(names))
    for name in names or ():
        w.string(name)
    w.compact_array_length(len(ints))
    for v in ints:
        w.int32(v)
    w.compact_array_length(None if names is None else len(names))
    for name in names or ():
        w.compact_string(name)
    r = Reader(w.getvalue())
    assert r.array(lambda r: r.int32()) == tuple(ints)
    got = r.nullable_array(lambda r: r.string())
    assert got == (None if names is None else tuple(names))
    assert r.compact_array(lambda r: r.int32()) == tuple(ints)
    got = r.compact_nullable_array(lambda r: r.compact_string())
    assert got == (None if names is None else tuple(names))
    r.expect_end("arrays")


def test_tagged_fields_are_skipped_and_uuid_reads_16_bytes() -> None:
    # Two tagged fields: tag 0 with 3 bytes, tag 5 with 1 byte; then an int8 and a uuid.
    data = b"\x02" + b"\x00\x03abc" + b"\x05\x01z" + b"\x07" + bytes(range(16))
    r = Reader(data)
    r.tagged_fields()
    assert r.int8() == 7
    assert r.uuid().bytes == bytes(range(16))
    r.expect_end("tagged fields")
    w = Writer()
    w.empty_tagged_fields()
    assert w.getvalue() == b"\x00"


def test_raw_parts_pass_through_untouched_between_joined_fields() -> None:
    class FileSlice:  # stands for the connection's sendfile part: never read
        pass

    part = FileSlice()
    view = memoryview(b"records")
    w = Writer()
    w.int32(1)
    w.int16(2)
    w.raw(part)
    w.int32(len(view))
    w.raw(view)
    w.int8(3)
    parts = w.parts()
    assert parts == [b"\x00\x00\x00\x01\x00\x02", part, b"\x00\x00\x00\x07", view, b"\x03"]
    assert parts[1] is part and parts[3] is view
    assert w.parts() == []


@pytest.mark.parametrize(
    ("data", "read", "detail"),
    [
        (b"\x00\x00\x0f\xa0" + b"x" * 12, "bytes_", "4000 bytes announced, 12 left"),
        (b"\x7f\xff\xff\xff", "bytes_", "2147483647 bytes announced, 0 left"),
        (b"\xff\xff\xff\xfe", "nullable_bytes", "bytes length -2"),
        (b"\xff\xff\xff\xff", "bytes_", "null where bytes are required"),
        (b"\x00\x05ab", "string", "5 bytes announced, 2 left"),
        (b"\xff\xfe", "nullable_string", "string length -2"),
        (b"\xff\xff", "string", "null where a string is required"),
        (b"\x00\x02\xff\xfe", "string", "not UTF-8"),
        (b"\x00\x00", "int32", "needs 4 bytes, 2 left"),
        (b"\x01", "int16", "needs 2 bytes, 1 left"),
        (b"", "int8", "needs 1 bytes, 0 left"),
        (b"\x01" * 7, "int64", "needs 8 bytes, 7 left"),
        (b"\x80\x80", "uvarint", "varint cut short"),
        (b"\x80\x80\x80\x80\x80\x01", "uvarint", "varint longer than 5 bytes"),
        (b"\x80" * 10 + b"\x01", "varlong", "varint longer than 10 bytes"),
        (b"\x90\x4e", "compact_string", "9999 bytes announced, 0 left"),
        (b"\x00", "compact_bytes", "null where bytes are required"),
        (b"\x05\x00", "tagged_fields", "5 tagged fields announced, 1 left"),
        (b"\x01\x00\x09", "tagged_fields", "9 bytes announced, 0 left"),
        (b"\x01\x02", "uuid", "needs 16 bytes, 2 left"),
    ],
)
def test_bad_lengths_raise_decode_errors_naming_the_field(
    data: bytes, read: str, detail: str
) -> None:
    r = Reader(data)
    with pytest.raises(KafkaDecodeError) as info:
        getattr(r, read)("records")
    assert detail in str(info.value)
    assert isinstance(info.value, RemoteProtocolError) and info.value.fatal


def test_a_huge_array_count_is_refused_before_reading_items() -> None:
    r = Reader(b"\x7f\xff\xff\xff\x00\x00")
    with pytest.raises(KafkaDecodeError, match="2147483647 items announced, 2 bytes left"):
        r.array(lambda r: r.int8(), "topics")
    with pytest.raises(KafkaDecodeError, match="array length -3"):
        Reader(b"\xff\xff\xff\xfd").nullable_array(lambda r: r.int8(), "topics")
    assert Reader(b"\xff\xff\xff\xff").nullable_array(lambda r: r.int8()) is None
    with pytest.raises(KafkaDecodeError, match="null where an array is required"):
        Reader(b"\x00").compact_array(lambda r: r.int8())


def test_errors_in_nested_arrays_name_the_path_and_the_api() -> None:
    # topics: 1 item (name "t", partitions: 3 items of (int32 index, bytes records)); the
    # third partition's records announce 4000 bytes where 12 are left.
    w = Writer()
    w.array_length(1)
    w.string("t")
    w.array_length(3)
    for index in range(2):
        w.int32(index)
        w.bytes_(b"")
    w.int32(2)
    w.int32(4000)
    w.raw_bytes(b"x" * 12)

    def partition(r: Reader) -> tuple[int, memoryview]:
        return r.int32("partition"), r.bytes_("records")

    def topic(r: Reader) -> tuple[str, tuple[tuple[int, memoryview], ...]]:
        return r.string("name"), r.array(partition, "partitions")

    with pytest.raises(KafkaDecodeError) as info:
        Reader(w.getvalue()).array(topic, "topics")
    info.value.set_context("Produce v7")
    assert str(info.value) == (
        "Produce v7: topics[0].partitions[2].records: 4000 bytes announced, 12 left"
    )


def test_reader_bounds_stop_at_end_not_at_the_buffer() -> None:
    r = Reader(b"\x00\x00\x00\x01\x00\x00\x00\x02", pos=0, end=4)
    assert r.int32() == 1
    with pytest.raises(KafkaDecodeError):
        r.int32()
    r = Reader(b"\x00\x00", 0, 1)
    with pytest.raises(KafkaDecodeError, match="1 bytes left over after the header"):
        r.expect_end("the header")
    r.skip(1)
    with pytest.raises(KafkaDecodeError):
        r.skip(-1)


def _raftlog_error_classes() -> list[type[raftlog_errors.RaftlogError]]:
    return [
        cls
        for _, cls in inspect.getmembers(raftlog_errors, inspect.isclass)
        if issubclass(cls, raftlog_errors.RaftlogError)
    ]


def test_every_raftlog_error_is_mapped_deliberately() -> None:
    classes = _raftlog_error_classes()
    assert len(classes) > 40
    missing = [cls.__name__ for cls in classes if cls not in kafka_errors._BY_CLASS]
    assert missing == []


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (raftlog_errors.NotLeaderOrFollowerError("x"), 6),
        (raftlog_errors.FencedLeaderEpochError("x"), 74),
        (raftlog_errors.UnknownLeaderEpochError("x"), 75),
        (raftlog_errors.OutOfOrderSequenceError("x"), 45),
        (raftlog_errors.DuplicateSequenceError("x"), 46),
        (raftlog_errors.InvalidProducerEpochError("x"), 47),
        (raftlog_errors.NotEnoughReplicasError("x"), 19),
        (raftlog_errors.NotEnoughReplicasAfterAppendError("x"), 20),
        (raftlog_errors.RecordTooLargeError("x"), 10),
        (raftlog_errors.CorruptRecordError("x"), 2),
        (raftlog_errors.RequestTimedOutError("x"), 7),
        (raftlog_errors.RaftlogTimeoutError("x"), 7),
        (raftlog_errors.OffsetOutOfRangeError("x"), 1),
        (raftlog_errors.UnknownTopicOrPartitionError("x"), 3),
        (raftlog_errors.TopicAlreadyExistsError("x"), 36),
        (raftlog_errors.InvalidTopicError("x"), 17),
        (raftlog_errors.InvalidPartitionsError("x"), 37),
        (raftlog_errors.InvalidReplicationFactorError("x"), 38),
        (raftlog_errors.InvalidConfigError("x"), 40),
        (raftlog_errors.InvalidRequestError("x"), 42),
        (raftlog_errors.PolicyViolationError("x"), 44),
        (raftlog_errors.UnsupportedVersionError("x"), 35),
        (raftlog_errors.LogOfflineError("x"), 56),
        (raftlog_errors.LogCorruptedError("x"), 56),
        (raftlog_errors.StorageError("x"), 56),
        (raftlog_errors.BrokerNotAvailableError("x"), 8),
        (raftlog_errors.NotControllerError("x"), 41),
        (raftlog_errors.NotCoordinatorError("x"), 16),
        (raftlog_errors.UnknownMemberIdError("x"), 25),
        (raftlog_errors.IllegalGenerationError("x"), 22),
        (raftlog_errors.RebalanceInProgressError("x"), 27),
        (raftlog_errors.InconsistentGroupProtocolError("x"), 23),
        (raftlog_errors.GroupNotEmptyError("x"), 68),
        (raftlog_errors.GroupIdNotFoundError("x"), 69),
        (raftlog_errors.UnknownProducerIdError("x"), 14),
        (raftlog_errors.RaftlogError("x"), -1),
        (ValueError("a bug"), -1),
    ],
)
def test_kafka_codes(error: BaseException, code: int) -> None:
    assert kafka_code(error) == code


def test_error_codes_are_kafkas_numbers() -> None:
    assert ErrorCode.NONE == 0 and ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode.UNSUPPORTED_VERSION == 35 and ErrorCode.KAFKA_STORAGE_ERROR == 56
    assert ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE == 80
    assert ErrorCode.DUPLICATE_RESOURCE == 92
    values = [int(code) for code in ErrorCode]
    assert len(values) == len(set(values))
