"""The wire protocol: frames, API keys and the codec, as a pure module (no sockets, no asyncio).

Bring-your-own-I/O in the style of h11: `FrameDecoder.feed(data)` takes bytes as they arrive and
`FrameDecoder.next_frame()` hands back whole frames; `encode_request` / `encode_response` return
the bytes to send. docs/PROTOCOL.md documents every request and response.

Frame layout (all integers little-endian)::

    4 bytes   frame_length   uint32  bytes after this field
    4 bytes   header_length  uint32  bytes of the msgpack header that follows
    h bytes   header         msgpack
    rest      payload        raw record-batch bytes (Produce requests, Fetch responses) or empty

Request header: msgpack array [api_key, api_version, correlation_id, client_id, body].
Response header: msgpack array [correlation_id, body].
`body` is a msgpack map whose fields depend on the API (docs/PROTOCOL.md). Record batches never
pass through msgpack: they travel in the payload, and the body says how many payload bytes
belong to each partition, in order. So the broker slices the payload without copying, and a
Fetch response can be written as a header followed by file bytes (`sendfile`).

Errors are split as h11 does: `RemoteProtocolError` when the peer sent something we cannot
parse (the connection is then answered with an error, if possible, and closed), programmer
errors as assertions.
"""

from __future__ import annotations

import enum
import struct
import threading
from collections.abc import Sequence
from typing import Any

import msgpack

FRAME_PREFIX = struct.Struct("<II")
FRAME_PREFIX_SIZE = FRAME_PREFIX.size  # 8
# Requests larger than this are refused (Kafka's socket.request.max.bytes is 100 MiB).
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
# A header is small metadata; bounding it keeps msgpack from allocating for garbage.
MAX_HEADER_BYTES = 16 * 1024 * 1024


class ApiKey(enum.IntEnum):
    API_VERSIONS = 0
    METADATA = 1
    CREATE_TOPICS = 2
    DELETE_TOPICS = 3
    DESCRIBE_CONFIGS = 4
    PRODUCE = 5
    FETCH = 6
    LIST_OFFSETS = 7
    DESCRIBE_CLUSTER = 8
    FIND_COORDINATOR = 9
    JOIN_GROUP = 10
    HEARTBEAT = 11
    LEAVE_GROUP = 12
    OFFSET_COMMIT = 13
    OFFSET_FETCH = 14
    LIST_GROUPS = 15
    DESCRIBE_GROUPS = 16
    DELETE_GROUPS = 17
    RESET_OFFSETS = 18


# api key -> (min version, max version) this code speaks.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {int(k): (0, 0) for k in ApiKey}

# ListOffsets special timestamps, as in Kafka.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


class RemoteProtocolError(Exception):
    """The peer sent bytes that are not a valid frame; `fatal` means close the connection."""

    def __init__(self, message: str, fatal: bool = True):
        super().__init__(message)
        self.fatal = fatal


class FrameTooLargeError(RemoteProtocolError):
    pass


class FrameDecoder:
    """Splits a byte stream into frames: (header, payload) pairs.

    The decoder keeps at most one partial frame. A frame larger than `max_frame_bytes` raises
    FrameTooLargeError as soon as its length prefix arrives, before any of it is buffered.
    """

    __slots__ = ("_buf", "_max_frame_bytes", "_pos")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        self._buf = bytearray()
        self._pos = 0
        self._max_frame_bytes = max_frame_bytes

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        # Payload views handed out earlier may still be alive: a bytearray with live views
        # cannot be resized, so the unconsumed tail moves to a new buffer instead.
        if self._pos == len(self._buf):
            self._buf = bytearray(data)
            self._pos = 0
            return
        if self._pos > 1 << 20:
            self._buf = self._buf[self._pos :] + data
            self._pos = 0
            return
        try:
            self._buf += data
        except BufferError:
            self._buf = self._buf[self._pos :] + data
            self._pos = 0

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos

    def next_frame(self) -> tuple[list[Any], memoryview] | None:
        """The next whole frame as (decoded header array, payload view), or None for "need more".

        The payload view stays valid until the next `feed` call. Raises RemoteProtocolError.
        """
        buf, pos = self._buf, self._pos
        avail = len(buf) - pos
        if avail < 4:
            return None
        if avail >= FRAME_PREFIX_SIZE:
            frame_length, header_length = FRAME_PREFIX.unpack_from(buf, pos)
        else:
            (frame_length,) = struct.unpack_from("<I", buf, pos)
            header_length = 0  # not read yet: the frame is incomplete (or too small)
        if frame_length > self._max_frame_bytes:
            raise FrameTooLargeError(
                f"frame of {frame_length} bytes exceeds the limit of {self._max_frame_bytes}"
            )
        if frame_length < 4:
            raise RemoteProtocolError(f"frame length {frame_length} is too small for a header")
        if avail < 4 + frame_length:
            return None
        if header_length > frame_length - 4 or header_length > MAX_HEADER_BYTES:
            raise RemoteProtocolError(
                f"header length {header_length} does not fit a frame of {frame_length} bytes"
            )
        start = pos + FRAME_PREFIX_SIZE
        try:
            header = msgpack.unpackb(
                buf[start : start + header_length], raw=False, strict_map_key=False
            )
        except Exception as e:  # msgpack raises several unrelated types for garbage
            raise RemoteProtocolError(f"header is not valid msgpack: {e}") from None
        if not isinstance(header, list):
            raise RemoteProtocolError(
                f"header must be a msgpack array, got {type(header).__name__}"
            )
        end = pos + 4 + frame_length
        payload = memoryview(buf)[start + header_length : end]
        self._pos = end
        return header, payload


# One msgpack Packer per thread: `msgpack.packb` builds a Packer (and its buffer) per call,
# twice the cost of packing a small header. A Packer resets itself after a failed pack.
_local = threading.local()


def _packer() -> Any:
    try:
        return _local.packer
    except AttributeError:
        packer = _local.packer = msgpack.Packer(use_bin_type=True)
        return packer


def _frame(header: Any, payload_size: int) -> bytes:
    packed: bytes = _packer().pack(header)
    return FRAME_PREFIX.pack(4 + len(packed) + payload_size, len(packed)) + packed


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str,
    body: dict[str, Any],
    payload: Sequence[bytes | memoryview] = (),
) -> list[bytes | memoryview]:
    """The buffers of one request frame (write them in order; no payload copy is made)."""
    size = sum(map(len, payload))
    return [_frame([api_key, api_version, correlation_id, client_id, body], size), *payload]


_U32_BE = struct.Struct(">I")
_MSGPACK_U32 = 0xCE  # msgpack's uint32 marker: a 4-byte big-endian integer follows


class ProduceTemplate:
    """The frame prefix and header of a one-partition Produce request, made once and then
    filled with a correlation id and a payload size per request: the producer's hot path
    sends one such request per batch, and packing the same header with msgpack every time
    costs more than the rest of sending it.

    The header is the msgpack of [PRODUCE, 0, correlation_id, client_id, {"acks", "timeout_ms",
    "topics": [[topic, [[partition, nbytes]]]]}], exactly as `encode_request` would make it,
    except that correlation_id and nbytes are always written in msgpack's uint32 form (0xce +
    4 bytes big-endian) so that they sit at fixed places. msgpack readers accept any int form.
    """

    __slots__ = ("_after_corr", "_before_corr", "_header_length")

    def __init__(self, client_id: str, acks: int, timeout_ms: int, topic: str, partition: int):
        marker = 0xFFFFFFFF  # packs as 0xce + 4 bytes: the place of each filled field
        header = msgpack.packb(
            [
                int(ApiKey.PRODUCE),
                0,
                marker,
                client_id,
                {
                    "acks": acks,
                    "timeout_ms": timeout_ms,
                    "topics": [[topic, [[partition, marker]]]],
                },
            ],
            use_bin_type=True,
        )
        hole = bytes([_MSGPACK_U32]) + _U32_BE.pack(marker)
        first = header.index(hole)
        last = header.rindex(hole)
        assert first != last and header.endswith(hole), "template markers not where expected"
        self._before_corr = header[: first + 1]
        self._after_corr = header[first + 5 : last + 1]
        self._header_length = len(header)

    def frame_prefix(self, correlation_id: int, nbytes: int) -> bytes:
        """Frame prefix and header of a request whose payload (`nbytes` long) follows.
        Both numbers must fit 32 bits unsigned (struct.error otherwise)."""
        h = self._header_length
        return b"".join(
            (
                FRAME_PREFIX.pack(4 + h + nbytes, h),
                self._before_corr,
                _U32_BE.pack(correlation_id),
                self._after_corr,
                _U32_BE.pack(nbytes),
            )
        )


def encode_response_header(correlation_id: int, body: dict[str, Any], payload_size: int) -> bytes:
    """Frame prefix and header of a response whose payload (of `payload_size`) follows."""
    return _frame([correlation_id, body], payload_size)


def encode_response(
    correlation_id: int, body: dict[str, Any], payload: Sequence[bytes | memoryview] = ()
) -> list[bytes | memoryview]:
    size = sum(len(p) for p in payload)
    return [encode_response_header(correlation_id, body, size), *payload]


def parse_request_header(header: list[Any]) -> tuple[int, int, int, str, dict[str, Any]]:
    """Check the request header array; returns (api_key, api_version, correlation_id,
    client_id, body). Raises RemoteProtocolError (non-fatal if the correlation id is usable)."""
    if len(header) != 5:
        raise RemoteProtocolError(f"request header must have 5 fields, got {len(header)}")
    api_key, api_version, correlation_id, client_id, body = header
    if not isinstance(correlation_id, int):
        raise RemoteProtocolError("correlation id must be an integer")
    if not isinstance(api_key, int) or not isinstance(api_version, int):
        raise RemoteProtocolError("api key and version must be integers", fatal=False)
    if not isinstance(client_id, str) or not isinstance(body, dict):
        raise RemoteProtocolError("client id must be a string and body a map", fatal=False)
    return api_key, api_version, correlation_id, client_id, body


def parse_response_header(header: list[Any]) -> tuple[int, dict[str, Any]]:
    if len(header) != 2 or not isinstance(header[0], int) or not isinstance(header[1], dict):
        raise RemoteProtocolError("response header must be [correlation_id, body]")
    return header[0], header[1]


def split_payload(payload: memoryview, sizes: Sequence[int]) -> list[memoryview]:
    """Cut the payload into consecutive pieces of the given sizes; they must add up exactly."""
    if any(not isinstance(s, int) or s < 0 for s in sizes):
        raise RemoteProtocolError(
            f"payload sizes must be non-negative integers: {sizes!r}", fatal=False
        )
    if len(sizes) == 1 and sizes[0] == len(payload):
        return [payload]  # the common case: one partition
    if sum(sizes) != len(payload):
        raise RemoteProtocolError(
            f"body declares {sum(sizes)} payload bytes, the frame carries {len(payload)}",
            fatal=False,
        )
    out, pos = [], 0
    for s in sizes:
        out.append(payload[pos : pos + s])
        pos += s
    return out
