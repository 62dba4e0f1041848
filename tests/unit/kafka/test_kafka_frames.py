"""KafkaFrameDecoder: Kafka's size-prefixed frames split out of a byte stream, whatever the
reads' boundaries; a size below a request header or over the limit is refused at once."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog.kafka.frames import KafkaFrameDecoder
from raftlog.protocol import FrameTooLargeError, PartialFrame, RemoteProtocolError


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@given(
    bodies=st.lists(st.binary(min_size=8, max_size=300), min_size=1, max_size=8),
    cuts=st.lists(st.integers(0, 4000), max_size=10),
)
def test_frames_come_out_whole_whatever_the_reads(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frame(b) for b in bodies)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    decoder = KafkaFrameDecoder(1 << 20)
    got: list[bytes] = []
    for start, end in itertools.pairwise(points):
        decoder.feed(stream[start:end])
        while (f := decoder.next_frame()) is not None:
            got.append(bytes(f))
    assert got == bodies
    assert decoder.buffered_bytes == 0 and decoder.partial_frame() is None


def test_a_partial_frame_says_how_much_is_missing() -> None:
    decoder = KafkaFrameDecoder(1 << 20)
    decoder.feed(frame(b"x" * 20) + struct.pack(">i", 100) + b"y" * 10)
    assert decoder.has_frame
    assert bytes(decoder.next_frame() or b"") == b"x" * 20
    assert not decoder.has_frame
    assert decoder.partial_frame() == PartialFrame(1, 104, 14)
    assert decoder.partial_frame().missing_bytes == 90  # type: ignore[union-attr]


@pytest.mark.parametrize("size", [0, 7, -1])
def test_a_size_below_a_request_header_is_refused(size: int) -> None:
    decoder = KafkaFrameDecoder(1 << 20)
    decoder.feed(struct.pack(">i", size))
    assert decoder.has_frame  # next_frame would raise: the caller must look
    with pytest.raises(RemoteProtocolError, match="too small for a request header"):
        decoder.next_frame()


def test_a_size_over_the_limit_is_refused_before_the_frame_arrives() -> None:
    decoder = KafkaFrameDecoder(1000)
    decoder.feed(struct.pack(">i", 1001))
    with pytest.raises(FrameTooLargeError, match="1001 bytes exceeds the limit of 1000") as e:
        decoder.next_frame()
    assert e.value.frame_bytes == 1005
