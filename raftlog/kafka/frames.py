"""Kafka's framing: a stream of size-prefixed frames, split without copying (pure, no I/O).

Frame layout (Kafka's, all integers big-endian)::

    4 bytes   size     int32   bytes after this field (request header + body)
    size      frame    request header (api_key int16, api_version int16, correlation_id
                       int32, client_id nullable string [, tagged fields]) then the body

`KafkaFrameDecoder` has the interface raftlog/broker/connection.py's machinery drives (the
native `protocol.FrameDecoder`'s: `feed`, `next_frame`, `has_frame`, `partial_frame`,
`buffered_bytes`, `discarding_bytes`), so the Kafka listener shares the request-memory pool,
the frame deadline, back-pressure and the idle timeout with the native one.

Rules:
- `next_frame` returns a memoryview of one whole frame (after its size field), valid until the
  next `feed`; the header is decoded by the caller (raftlog/kafka/api.py), which knows which
  header version an API uses.
- A size below the smallest request header (8 bytes: api key, version, correlation id) or
  above `max_frame_bytes` raises `RemoteProtocolError` / `FrameTooLargeError` as soon as the
  size field is in, before any of the frame is buffered: Kafka's broker closes such a
  connection (its InvalidReceiveException), and so does ours. Nothing of such a frame is
  answered, so `discarding_bytes` is always 0.
"""

from __future__ import annotations

import struct

from raftlog.protocol import FrameBuffer, FrameTooLargeError, RemoteProtocolError

SIZE = struct.Struct(">i")
SIZE_BYTES = SIZE.size  # 4
# api_key int16 + api_version int16 + correlation_id int32: the least a request header holds.
REQUEST_HEADER_MIN_BYTES = 8


class KafkaFrameDecoder(FrameBuffer):
    """Splits a byte stream into Kafka request frames (memoryviews of header + body).

    Keeps at most one partial frame (and, until taken, the whole frames before it), like the
    native FrameDecoder; see the module docstring for what it refuses.
    """

    __slots__ = ("_max_frame_bytes",)
    _SIZE = SIZE

    def __init__(self, max_frame_bytes: int):
        super().__init__()
        self._max_frame_bytes = max_frame_bytes

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._append(data)

    @property
    def discarding_bytes(self) -> int:
        """Always 0: an oversized Kafka frame closes the connection (module docstring)."""
        return 0

    @property
    def max_frame_bytes(self) -> int:
        return self._max_frame_bytes

    @property
    def has_frame(self) -> bool:
        """Whether next_frame would return a frame or raise (rather than return None)."""
        avail = len(self._buf) - self._pos
        if avail < SIZE_BYTES:
            return False
        size: int = SIZE.unpack_from(self._buf, self._pos)[0]
        if size < REQUEST_HEADER_MIN_BYTES or size > self._max_frame_bytes:
            return True
        return avail >= SIZE_BYTES + size

    def next_frame(self) -> memoryview | None:
        """The next whole frame (header + body, without the size field), or None for "need
        more". Raises RemoteProtocolError (FrameTooLargeError for a size over the limit)."""
        buf, pos = self._buf, self._pos
        avail = len(buf) - pos
        if avail < SIZE_BYTES:
            return None
        (size,) = SIZE.unpack_from(buf, pos)
        if size > self._max_frame_bytes:
            raise FrameTooLargeError(
                f"Kafka frame of {size} bytes exceeds the limit of {self._max_frame_bytes}",
                SIZE_BYTES + size,
                self._max_frame_bytes,
            )
        if size < REQUEST_HEADER_MIN_BYTES:
            raise RemoteProtocolError(
                f"Kafka frame size {size} is too small for a request header "
                f"({REQUEST_HEADER_MIN_BYTES} bytes at least)"
            )
        end = pos + SIZE_BYTES + size
        if len(buf) < end:
            return None
        self._pos = end
        self._frames += 1
        return memoryview(buf)[pos + SIZE_BYTES : end]
