"""Codec tests for the record batch: round trips, validation and the stamp-without-rehash rule."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog.errors import CorruptRecordError
from raftlog.records import (
    HEADER_SIZE,
    BatchBuilder,
    Record,
    decode_records,
    decode_records_as,
    encode_batch,
    iter_batches,
    iter_records,
    stamp,
    validate_batch,
)

blobs = st.one_of(st.none(), st.binary(max_size=64))
headers = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=3
).map(tuple)
records = st.builds(
    Record,
    key=blobs,
    value=blobs,
    headers=headers,
    timestamp=st.integers(min_value=0, max_value=2**62),
)


@given(st.lists(records, min_size=1, max_size=30), st.integers(0, 2**40), st.integers(-1, 2**20))
def test_round_trip(recs: list[Record], base_offset: int, epoch: int) -> None:
    raw = encode_batch(recs, base_offset=base_offset, partition_leader_epoch=epoch)
    header = validate_batch(raw)
    assert header.size == len(raw)
    assert header.base_offset == base_offset
    assert header.partition_leader_epoch == epoch
    assert header.record_count == len(recs)
    assert header.first_timestamp == recs[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in recs)
    back = decode_records(raw)
    assert back == [r._replace(offset=base_offset + i) for i, r in enumerate(recs)]


# Runs of same-sized keyless records without headers (the decoder's fast path reads a run with
# one iter_unpack) broken up by other shapes: keyed, null value, with headers, empty value.
plain_runs = st.lists(
    st.one_of(
        st.tuples(st.sampled_from([0, 1, 7, 200]), st.integers(1, 20)).map(
            lambda lk: [Record(None, bytes([lk[0] % 251]) * lk[0], (), 5)] * lk[1]
        ),
        # A run of one length whose records are not all plain: a keyed record or one with a
        # header, as long as its plain neighbours, sits somewhere in it.
        st.tuples(st.integers(0, 12), st.integers(0, 12), st.booleans()).map(
            lambda abh: (
                [Record(None, b"p" * 40, (), 9)] * abh[0]
                + [
                    Record(None, b"q" * 31, (("h", b""),), 9)
                    if abh[2]
                    else Record(b"kk", b"q" * 38)
                ]
                + [Record(None, b"r" * 40, (), 9)] * abh[1]
            )
        ),
        records.map(lambda r: [r]),
    ),
    min_size=1,
    max_size=12,
).map(lambda runs: [r for run in runs for r in run])


@given(plain_runs, st.integers(0, 2**40), st.booleans())
def test_fast_decoding_of_record_runs_matches_the_records(
    recs: list[Record], base_offset: int, as_view: bool
) -> None:
    """decode_records_as (runs read by iter_unpack, the rest record by record) gives every
    record back, for bytes and memoryview buffers alike."""
    raw = encode_batch(recs, base_offset=base_offset)
    buf = memoryview(bytearray(raw)) if as_view else raw
    header = validate_batch(buf)

    class Row(tuple):  # type: ignore[type-arg]  # the shape of a consumer's record
        pass

    rows = decode_records_as(buf, 0, header, Row, "t", 3)
    assert [tuple(r) for r in rows] == [
        ("t", 3, base_offset + i, r.timestamp, r.key, r.value, r.headers)
        for i, r in enumerate(recs)
    ]
    assert decode_records(buf) == [r._replace(offset=base_offset + i) for i, r in enumerate(recs)]


def test_stamping_keeps_checksum_valid() -> None:
    raw = encode_batch([(b"k", b"v"), (None, b"w")], timestamp=5)
    h = validate_batch(raw)
    stamped = stamp(1234, h.batch_length, 7) + raw[16:]
    h2 = validate_batch(stamped)
    assert (h2.base_offset, h2.partition_leader_epoch, h2.checksum) == (1234, 7, h.checksum)
    assert [r.offset for r in decode_records(stamped)] == [1234, 1235]


def test_several_batches_in_one_buffer() -> None:
    a = encode_batch([(None, b"a")] * 3, base_offset=0)
    b = encode_batch([(None, b"b")] * 2, base_offset=3)
    assert [p for p, _ in iter_batches(a + b)] == [0, len(a)]
    assert [r.value for r in iter_records(a + b)] == [b"a"] * 3 + [b"b"] * 2


def test_partial_trailing_batch() -> None:
    a = encode_batch([(None, b"a")] * 3)
    buf = a + a[:30]
    assert len(list(iter_batches(buf, validate=False))) == 1
    with pytest.raises(CorruptRecordError, match="truncated batch"):
        list(iter_batches(buf, validate=True))


@given(st.data())
def test_any_single_bit_flip_after_the_stamp_is_caught(data: st.DataObject) -> None:
    raw = bytearray(encode_batch([(b"key", b"value" * 10), (None, b"x")], timestamp=3))
    bit = data.draw(st.integers(16 * 8, len(raw) * 8 - 1))
    raw[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(CorruptRecordError):
        validate_batch(raw)


def test_count_mismatch_is_refused_even_with_a_good_checksum() -> None:
    import xxhash

    raw = bytearray(encode_batch([(None, b"x" * 10)] * 3))
    # Claim 4 records (and last offset delta 3) and re-checksum: the lengths table disagrees.
    struct.pack_into("<i", raw, 61, 4)
    struct.pack_into("<i", raw, 27, 3)
    struct.pack_into("<Q", raw, 17, xxhash.xxh3_64_intdigest(bytes(raw[25:])))
    with pytest.raises(CorruptRecordError, match="record"):
        validate_batch(raw)


def test_impossible_length_and_unknown_magic() -> None:
    raw = bytearray(encode_batch([(None, b"x")]))
    bad = bytearray(raw)
    struct.pack_into("<i", bad, 8, 10**9)
    with pytest.raises(CorruptRecordError, match="impossible batch length"):
        validate_batch(bad)
    bad = bytearray(raw)
    bad[16] = 9
    with pytest.raises(CorruptRecordError, match="magic"):
        validate_batch(bad)
    with pytest.raises(CorruptRecordError):
        validate_batch(raw[: HEADER_SIZE - 1])


def test_builder_size_matches_encoding() -> None:
    b = BatchBuilder()
    for i in range(10):
        b.append(str(i).encode(), b"v" * i, 100 + i, [("h", b"x")] if i % 2 else ())
    assert len(b.build()) == b.size_bytes
    assert len(b) == 10


def test_a_sealed_builder_keeps_only_its_bytes_and_refuses_records() -> None:
    b = BatchBuilder()
    b.append(b"k", b"v" * 10, 5)
    b.append_value(b"w" * 3, 7)
    expected = b.build()
    head, tail = b.seal()
    assert head + tail == expected and len(b) == 2 and b.size_bytes == len(expected)
    assert b.build_parts() == (head, tail) and b.seal() == (head, tail)
    with pytest.raises(AssertionError):
        b.append_value(b"x", 8)
    with pytest.raises(AssertionError):
        b.append(None, b"x", 8)
    with pytest.raises(AssertionError):
        b.build_parts(base_offset=5)  # a sealed batch is what a producer sends, nothing else
    assert b.build() == expected


@given(
    key=st.one_of(st.none(), st.binary(max_size=20)),
    value=st.one_of(st.none(), st.binary(max_size=300)),
    headers=st.lists(
        st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2
    ),
    timestamp=st.integers(0, 2**62),
)
def test_sealed_one_encodes_exactly_like_append_and_seal(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]], timestamp: int
) -> None:
    reference = BatchBuilder()
    reference.append(key, value, timestamp, headers)
    one = BatchBuilder.sealed_one(key, value, timestamp, headers)
    assert one.seal() == reference.seal()
    assert (len(one), one.size_bytes) == (1, reference.size_bytes)
    validate_batch(b"".join(one.build_parts()))


def test_a_negative_timestamp_is_refused_from_the_header_alone() -> None:
    """The broker checks timestamps without decoding records: a batch whose first timestamp
    is negative (its max timestamp is then checked against it) is refused, as Kafka refuses
    negative timestamps."""
    for ts in (-1, -5, -(2**63)):
        raw = encode_batch([(None, b"x"), (None, b"y")], timestamp=ts)
        with pytest.raises(CorruptRecordError, match=f"negative first timestamp {ts} "):
            validate_batch(raw)
    validate_batch(encode_batch([(None, b"x")], timestamp=0))
    validate_batch(encode_batch([(None, b"x")], timestamp=2**63 - 1))


def _one_record_batch(body: bytes) -> bytes:
    """A batch of one record with this body, and header, length table and checksum right: what
    a broker accepts without decoding records."""
    import xxhash

    tail = struct.pack("<hiqqqhii", 0, 0, 0, 0, -1, -1, -1, 1) + struct.pack("<i", len(body))
    tail += body
    head = struct.pack("<qiibQ", 0, 25 + len(tail) - 12, -1, 1, xxhash.xxh3_64_intdigest(tail))
    return head + tail


@pytest.mark.parametrize(
    ("hcount", "headers", "match"),
    [
        # A count the record cannot hold (each header takes at least 8 bytes).
        (2**31 - 1, struct.pack("<ii", 0, -1) * 4, "header count 2147483647"),
        # Key lengths -4 then -8: the old decoder stepped back and forth between the two
        # 2^31 times (a tuple each; still running after 60 s) instead of failing.
        (2**31 - 1, struct.pack("<ii", -4, -8) + bytes(8000), "header count 2147483647"),
        (1, struct.pack("<ii", -8, -1), "header key length -8"),
        (-3, struct.pack("<ii", 0, -1), "header count -3"),
    ],
)
def test_hostile_header_counts_fail_at_once_naming_the_record(
    hcount: int, headers: bytes, match: str
) -> None:
    """Records are checked only by consumers: a record body with an impossible header count
    or a negative header key length must fail fast with CorruptRecordError, not loop (up to
    2^31 times, backwards) through bytes that are not its own."""
    import time

    body = struct.pack("<bqii", 0, 0, -1, -1) + struct.pack("<i", hcount) + headers
    raw = _one_record_batch(body)
    validate_batch(raw)  # the broker's checks pass: only a consumer can find this
    started = time.monotonic()
    for buf in (raw, bytearray(raw), memoryview(raw)):
        with pytest.raises(CorruptRecordError, match=match):
            decode_records(buf)
    assert time.monotonic() - started < 1.0


def test_with_producer_stamps_the_header_and_keeps_the_checksum_valid() -> None:
    from raftlog.records import BatchBuilder, validate_batch, with_producer

    b = BatchBuilder()
    b.append(None, b"a", 5)
    b.append(b"k", b"bb", 6)
    head, tail = with_producer(*b.seal(), 77, 3, 2**31 - 2)
    h = validate_batch(head + tail)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) == (
        77,
        3,
        2**31 - 2,
        2,
    )
    again = validate_batch(b"".join(with_producer(head, tail, 78, 4, 0)))
    assert (again.producer_id, again.producer_epoch, again.base_sequence) == (78, 4, 0)
