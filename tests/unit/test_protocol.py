"""The frame codec: split streams at any byte, refuse garbage, keep payload views valid."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog import protocol
from raftlog.protocol import FrameDecoder, RemoteProtocolError


def _request(corr: int, payload: bytes = b"") -> bytes:
    return b"".join(
        bytes(p)
        for p in protocol.encode_request(
            protocol.ApiKey.PRODUCE, 0, corr, "t", {"n": corr}, [payload] if payload else []
        )
    )


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=8), st.data())
def test_frames_survive_any_split(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(_request(i, p) for i, p in enumerate(payloads))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    dec = FrameDecoder()
    got = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        dec.feed(stream[prev:cut])
        prev = cut
        while (frame := dec.next_frame()) is not None:
            header, payload = frame
            got.append((protocol.parse_request_header(header)[2], bytes(payload)))
    assert got == list(enumerate(payloads))
    assert dec.buffered_bytes == 0


def test_payload_views_stay_valid_across_feeds() -> None:
    dec = FrameDecoder()
    dec.feed(_request(1, b"a" * 100) + _request(2, b"b" * 50)[:10])
    _header, first = dec.next_frame()  # type: ignore[misc]
    dec.feed(_request(2, b"b" * 50)[10:])  # would resize the buffer under `first`
    _, second = dec.next_frame()  # type: ignore[misc]
    assert bytes(first) == b"a" * 100
    assert bytes(second) == b"b" * 50


def test_oversized_frame_refused_from_its_prefix() -> None:
    dec = FrameDecoder(max_frame_bytes=1000)
    dec.feed((5000).to_bytes(4, "little"))
    with pytest.raises(protocol.FrameTooLargeError, match="5000 bytes exceeds the limit of 1000"):
        dec.next_frame()


@pytest.mark.parametrize(
    "frame, match",
    [
        ((2).to_bytes(4, "little") + b"xx", "too small"),
        ((8).to_bytes(4, "little") + (99).to_bytes(4, "little") + b"abcd", "does not fit"),
        ((6).to_bytes(4, "little") + (2).to_bytes(4, "little") + b"\xc1\xc1", "not valid msgpack"),
        (
            (5).to_bytes(4, "little") + (1).to_bytes(4, "little") + msgpack.packb(1),
            "must be a msgpack array",
        ),
    ],
)
def test_garbage_frames(frame: bytes, match: str) -> None:
    dec = FrameDecoder()
    dec.feed(frame)
    with pytest.raises(RemoteProtocolError, match=match):
        dec.next_frame()


def test_request_header_checks() -> None:
    assert protocol.parse_request_header([5, 0, 7, "c", {}]) == (5, 0, 7, "c", {})
    with pytest.raises(RemoteProtocolError) as e:
        protocol.parse_request_header([5, 0, 7, "c", []])
    assert not e.value.fatal  # the correlation id is usable: answer, keep the connection
    with pytest.raises(RemoteProtocolError) as e:
        protocol.parse_request_header([5, 0, "x", "c", {}])
    assert e.value.fatal


def test_split_payload() -> None:
    mv = memoryview(b"aabbb")
    assert [bytes(p) for p in protocol.split_payload(mv, [2, 3])] == [b"aa", b"bbb"]
    with pytest.raises(RemoteProtocolError, match="declares 4 payload bytes"):
        protocol.split_payload(mv, [2, 2])
    with pytest.raises(RemoteProtocolError, match="non-negative"):
        protocol.split_payload(mv, [-1, 6])


@given(
    client_id=st.text(max_size=40),
    acks=st.sampled_from([-1, 0, 1]),
    timeout_ms=st.integers(0, 2**31 - 1),
    topic=st.text(min_size=1, max_size=249),
    partition=st.integers(0, 2**31 - 1),
    corr=st.integers(0, 0xFFFFFFFF),
    payload=st.binary(max_size=300),
)
def test_produce_template_frames_decode_like_encode_request(
    client_id: str,
    acks: int,
    timeout_ms: int,
    topic: str,
    partition: int,
    corr: int,
    payload: bytes,
) -> None:
    template = protocol.ProduceTemplate(client_id, acks, timeout_ms, topic, partition)
    frame = template.frame_prefix(corr, len(payload)) + payload
    body = {
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topics": [[topic, [[partition, len(payload)]]]],
    }
    reference = b"".join(
        bytes(p)
        for p in protocol.encode_request(
            protocol.ApiKey.PRODUCE, 0, corr, client_id, body, [payload]
        )
    )
    decoded = []
    for stream in (frame, reference):
        dec = FrameDecoder()
        dec.feed(stream)
        got = dec.next_frame()
        assert got is not None and dec.buffered_bytes == 0
        decoded.append((protocol.parse_request_header(got[0]), bytes(got[1])))
    assert decoded[0] == decoded[1]
    assert decoded[0][0] == (protocol.ApiKey.PRODUCE, 0, corr, client_id, body)


def test_a_header_length_that_cannot_fit_is_refused_before_the_frame_arrives() -> None:
    """Detected from the first 8 bytes: an HTTP answer ("HTTP/1.1 400") reads as a header of
    808 MB, and waiting for the frame would mean waiting for bytes that never come."""
    dec = FrameDecoder(max_frame_bytes=1 << 31)
    dec.feed(b"HTTP/1.1 400 Bad Request\r\n")
    with pytest.raises(RemoteProtocolError, match="does not fit a frame"):
        dec.next_frame()


def test_partial_frame_names_the_incomplete_frame_at_the_end_of_the_buffer() -> None:
    first, second = _request(1, b"p" * 1000), _request(2, b"q" * 10)
    dec = FrameDecoder()
    assert dec.partial_frame() is None
    dec.feed(first[:3])
    assert dec.partial_frame() == (0, 0, 3)  # no length yet
    assert dec.partial_frame().missing_bytes == 5  # type: ignore[union-attr]  # its prefix
    dec.feed(first[3:10])
    assert dec.partial_frame() == (0, len(first), 10)
    dec.feed(first[10:] + second[:5])
    # A whole frame not taken yet is stepped over: the partial one is frame number 1.
    assert dec.partial_frame() == (1, len(second), 5)
    assert dec.next_frame() is not None
    dec.feed(second[5:])
    assert dec.partial_frame() is None
    assert dec.next_frame() is not None


def test_an_oversized_frame_is_refused_with_its_header_and_its_rest_dropped() -> None:
    big = _request(7, b"x" * 5000)
    after = _request(8)
    dec = FrameDecoder(max_frame_bytes=1000, oversized_header_bytes_max=1024)
    dec.feed(big[:6])
    assert dec.next_frame() is None and not dec.has_frame  # its header is not in yet
    dec.feed(big[6:100])
    assert dec.has_frame
    with pytest.raises(protocol.FrameTooLargeError) as e:
        dec.next_frame()
    assert e.value.frame_bytes == len(big) and e.value.limit_bytes == 1000
    assert protocol.parse_request_header(e.value.header)[2] == 7
    assert dec.buffered_bytes == 0 and dec.discarding_bytes == len(big) - 100
    dec.feed(big[100:3000])
    assert dec.buffered_bytes == 0 and dec.discarding_bytes == len(big) - 3000
    dec.feed(big[3000:] + after)  # the stream goes on after it
    assert dec.discarding_bytes == 0
    frame = dec.next_frame()
    assert frame is not None and protocol.parse_request_header(frame[0])[2] == 8


@pytest.mark.parametrize(
    "header_length, why", [(5000, "longer than what is read"), (2, "not msgpack")]
)
def test_an_oversized_frame_without_a_readable_header_is_refused_without_one(
    header_length: int, why: str
) -> None:
    dec = FrameDecoder(max_frame_bytes=1000, oversized_header_bytes_max=4096)
    dec.feed(struct.pack("<II", 100_000, header_length) + b"\xc1\xc1")
    with pytest.raises(protocol.FrameTooLargeError) as e:
        dec.next_frame()
    assert e.value.header is None, why


# -- request body shapes -------------------------------------------------------------------

VALID_BODIES: dict[int, dict[str, object]] = {
    protocol.ApiKey.API_VERSIONS: {},
    protocol.ApiKey.METADATA: {"topics": None, "allow_auto_create": False},
    protocol.ApiKey.CREATE_TOPICS: {
        "topics": [
            {"name": "t", "partitions": 3, "replication_factor": 1, "config": {"a.b": "1"}},
            {"name": "u", "config": {"retention.ms": 5, "flush.ms": None}},
        ],
        "validate_only": True,
    },
    protocol.ApiKey.DELETE_TOPICS: {"topics": ["t"]},
    protocol.ApiKey.CREATE_PARTITIONS: {
        "topics": [
            {"name": "t", "count": 6},
            {"name": "u", "count": 3, "assignments": [[1, 2], [2, 3]]},
        ],
        "validate_only": False,
    },
    protocol.ApiKey.ELECT_LEADERS: {"partitions": [["t", 0], ["u", 3]]},
    protocol.ApiKey.ALTER_PARTITION_REASSIGNMENTS: {
        "reassignments": [["t", 0, [4, 1, 2]], ["t", 1, None]],
        "throttle": 1_000_000,
    },
    protocol.ApiKey.ALTER_TOPIC_CONFIG: {
        "topic": "t",
        "changes": {"retention.ms": "60000", "max.message.bytes": None},
        "validate_only": True,
    },
    protocol.ApiKey.DESCRIBE_CONFIGS: {"topics": None},
    protocol.ApiKey.DESCRIBE_REPLICAS: {"topics": ["t"]},
    protocol.ApiKey.PRODUCE: {"acks": -1, "timeout_ms": 1, "topics": [["t", [[0, 5], [1, 0]]]]},
    protocol.ApiKey.FETCH: {
        "replica_id": -1,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [["t", [[0, 0, 1 << 20]]]],
    },
    protocol.ApiKey.LIST_OFFSETS: {"topics": [["t", [[0, -2], [1, 1_700_000_000_000]]]]},
    protocol.ApiKey.DESCRIBE_CLUSTER: {},
    protocol.ApiKey.FIND_COORDINATOR: {"group_id": "g"},
    protocol.ApiKey.JOIN_GROUP: {
        "group_id": "g",
        "member_id": "",
        "client_id": "c",
        "instance_id": None,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "topics": ["t"],
        "protocols": ["range"],
    },
    protocol.ApiKey.HEARTBEAT: {"group_id": "g", "member_id": "m", "generation": 1},
    protocol.ApiKey.LEAVE_GROUP: {"group_id": "g", "member_ids": ["m"]},
    protocol.ApiKey.OFFSET_COMMIT: {
        "group_id": "g",
        "member_id": "m",
        "generation": 1,
        "offsets": [["t", 0, 5, ""], ["t", 1, 7, None]],
    },
    protocol.ApiKey.OFFSET_FETCH: {"group_id": "g", "partitions": [["t", 0]]},
    protocol.ApiKey.LIST_GROUPS: {},
    protocol.ApiKey.DESCRIBE_GROUPS: {"group_id": "g"},
    protocol.ApiKey.DELETE_GROUPS: {"group_id": "g"},
    protocol.ApiKey.RESET_OFFSETS: {"group_id": "g", "offsets": [["t", 0, 0]]},
    protocol.ApiKey.INIT_PRODUCER_ID: {},
}


def test_every_api_has_a_body_shape_and_accepts_its_documented_body() -> None:
    assert set(VALID_BODIES) == set(protocol.ApiKey)
    for api, body in VALID_BODIES.items():
        protocol.check_request_body(api, body)
        protocol.check_request_body(api, {**body, "a_newer_field": [1, 2]})  # ignored


@pytest.mark.parametrize(
    "api, body, message",
    [
        (
            protocol.ApiKey.FETCH,
            {"topics": [["t", [[0, 1.5, 100]]]]},
            "malformed FETCH request: topics[0][1][0][1] (fetch_offset) must be a 64-bit "
            "integer, got 1.5",
        ),
        (
            protocol.ApiKey.PRODUCE,
            {"acks": 1, "topics": [["t", [[0, -3]]]]},
            "malformed PRODUCE request: topics[0][1][0][1] (nbytes) must be an integer >= 0, "
            "got -3",
        ),
        (
            protocol.ApiKey.PRODUCE,
            {"acks": True, "topics": []},
            "malformed PRODUCE request: acks must be a 64-bit integer, got True",
        ),
        (
            protocol.ApiKey.LIST_OFFSETS,
            {"topics": [["t", [[0, 2**64 - 1]]]]},
            "malformed LIST_OFFSETS request: topics[0][1][0][1] (timestamp) must be a 64-bit "
            "integer, got 18446744073709551615",
        ),
        (
            protocol.ApiKey.JOIN_GROUP,
            {"group_id": "g", "topics": [], "protocols": []},
            "malformed JOIN_GROUP request: session_timeout_ms is missing (a 64-bit integer)",
        ),
        (
            protocol.ApiKey.CREATE_TOPICS,
            {"topics": [{"name": "t", "config": {"retention.ms": float("inf")}}]},
            "malformed CREATE_TOPICS request: topics[0].config['retention.ms'] must be a "
            "string or an integer or null, got inf",
        ),
        (
            protocol.ApiKey.CREATE_PARTITIONS,
            {"topics": [{"name": "t", "count": 4, "assignments": [[1, "2"]]}]},
            "malformed CREATE_PARTITIONS request: topics[0].assignments[0][1] must be a 64-bit "
            "integer, got '2'",
        ),
        (
            protocol.ApiKey.OFFSET_COMMIT,
            {"group_id": "g", "generation": 1, "offsets": [["t", 0, 1]]},
            "malformed OFFSET_COMMIT request: offsets[0] must be an array [topic, partition, "
            "offset, metadata], got ['t', 0, 1]",
        ),
        (
            protocol.ApiKey.METADATA,
            {"topics": "t"},
            "malformed METADATA request: topics must be an array or null, got 't'",
        ),
    ],
)
def test_a_body_of_the_wrong_shape_is_refused_naming_the_field(
    api: int, body: dict[str, object], message: str
) -> None:
    with pytest.raises(protocol.InvalidBodyError) as e:
        protocol.check_request_body(api, body)
    assert e.value.describe(api) == message
    assert not e.value.fatal  # answered with an error; the connection stays open


@given(
    topics=st.lists(
        st.tuples(
            st.text(max_size=5),
            st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**63 - 1))),
        ),
        max_size=4,
    ),
    acks=st.integers(-(2**63), 2**63 - 1),
)
def test_the_produce_fast_path_accepts_what_the_generic_shape_accepts(
    topics: list[tuple[str, list[tuple[int, int]]]], acks: int
) -> None:
    body = {"acks": acks, "topics": [[t, [list(p) for p in ps]] for t, ps in topics]}
    protocol.check_request_body(protocol.ApiKey.PRODUCE, body)  # must not raise
    broken = {**body, "topics": [*body["topics"], ["x", [[0, -1]]]]}
    with pytest.raises(protocol.InvalidBodyError, match=r"\(nbytes\)"):
        protocol.check_request_body(protocol.ApiKey.PRODUCE, broken)


@given(st.binary(max_size=64), st.integers(4, 64))
def test_has_frame_tells_whether_next_frame_has_something_to_say(data: bytes, limit: int) -> None:
    dec = FrameDecoder(max_frame_bytes=limit)
    dec.feed(data)
    expected = dec.has_frame
    try:
        got = dec.next_frame() is not None
    except RemoteProtocolError:
        got = True
    assert got == expected
