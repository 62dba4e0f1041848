"""The frame codec: split streams at any byte, refuse garbage, keep payload views valid."""

from __future__ import annotations

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
