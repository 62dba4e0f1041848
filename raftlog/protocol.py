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
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import msgpack

from raftlog.invariants import InvariantError

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
    INIT_PRODUCER_ID = 19
    CREATE_PARTITIONS = 20
    ELECT_LEADERS = 21
    ALTER_PARTITION_REASSIGNMENTS = 22
    ALTER_TOPIC_CONFIG = 23
    DESCRIBE_REPLICAS = 24


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
    """A frame longer than the decoder's limit. `frame_bytes` is the length its prefix
    announced (frame_length + 4, the whole frame); `header` is the frame's decoded header when
    the decoder was asked to read it (`oversized_header_bytes_max`) and could, else None."""

    def __init__(
        self, message: str, frame_bytes: int = 0, limit_bytes: int = 0, header: Any = None
    ):
        super().__init__(message)
        self.frame_bytes = frame_bytes
        self.limit_bytes = limit_bytes
        self.header = header


class PartialFrame(NamedTuple):
    """The incomplete frame at the end of a decoder's buffer."""

    number: int  # frames the decoder took before this one: the frame's number on the stream
    frame_bytes: int  # its whole length, prefix included (0: its length has not arrived yet)
    received_bytes: int  # how much of it the decoder holds

    @property
    def missing_bytes(self) -> int:
        """Bytes still to come (at least 1; a frame whose length is unknown needs its prefix)."""
        if not self.frame_bytes:
            return FRAME_PREFIX_SIZE - self.received_bytes
        return self.frame_bytes - self.received_bytes


class FrameBuffer:
    """Bytes as they arrive, split into frames that start with a 4-byte size field (`_SIZE`,
    the bytes after it): the buffering both protocols' decoders share (this module's
    FrameDecoder and raftlog/kafka/frames.py's). Frames taken are views into the buffer,
    valid until the next `feed`."""

    __slots__ = ("_buf", "_frames", "_pos")
    _SIZE = struct.Struct("<I")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0
        # Frames taken by next_frame (or refused as oversized), for PartialFrame.number.
        self._frames = 0

    def _append(self, data: bytes | bytearray | memoryview) -> None:
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

    def partial_frame(self) -> PartialFrame | None:
        """The incomplete frame at the end of the buffer, or None if the buffer ends where a
        frame ends. Whole frames not taken yet are stepped over (one step when there are none,
        the usual case)."""
        buf, pos, end = self._buf, self._pos, len(self._buf)
        number = self._frames
        size_field = self._SIZE
        while True:
            avail = end - pos
            if avail == 0:
                return None
            if avail < 4:
                return PartialFrame(number, 0, avail)
            frame_bytes = 4 + max(size_field.unpack_from(buf, pos)[0], 0)
            if avail < frame_bytes:
                return PartialFrame(number, frame_bytes, avail)
            pos += frame_bytes
            number += 1


class FrameDecoder(FrameBuffer):
    """Splits a byte stream into frames: (header, payload) pairs.

    The decoder keeps at most one partial frame (and, until they are taken, the whole frames
    before it). A frame larger than `max_frame_bytes` raises FrameTooLargeError before any of
    its payload is buffered: at once from its length prefix, or, with
    `oversized_header_bytes_max` > 0, once its header (if at most that long) has arrived, so
    that the error carries the header and the caller can answer its correlation id. The rest
    of that frame is then discarded as it arrives (never buffered: `discarding_bytes` counts
    it down) and the stream goes on at the next frame.
    """

    __slots__ = ("_discard", "_max_frame_bytes", "_oversized_header_bytes_max")

    def __init__(
        self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, oversized_header_bytes_max: int = 0
    ):
        super().__init__()
        self._max_frame_bytes = max_frame_bytes
        self._oversized_header_bytes_max = oversized_header_bytes_max
        # Bytes of a refused oversized frame still to come: dropped as they arrive.
        self._discard = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._discard:
            skip = min(self._discard, len(data))
            self._discard -= skip
            if skip == len(data):
                return
            data = memoryview(data)[skip:]
        self._append(data)

    @property
    def discarding_bytes(self) -> int:
        """Bytes of a refused oversized frame that are still to arrive (and be dropped)."""
        return self._discard

    @property
    def has_frame(self) -> bool:
        """Whether next_frame would return a frame or raise (rather than return None)."""
        avail = len(self._buf) - self._pos
        if avail < 4:
            return False
        frame_length: int = struct.unpack_from("<I", self._buf, self._pos)[0]
        if frame_length < 4:
            return True
        if frame_length > self._max_frame_bytes and not self._oversized_header_bytes_max:
            return True
        if avail >= FRAME_PREFIX_SIZE:
            header_length: int = struct.unpack_from("<I", self._buf, self._pos + 4)[0]
            if header_length > frame_length - 4 or header_length > MAX_HEADER_BYTES:
                return True
            if frame_length > self._max_frame_bytes:
                return (
                    header_length > self._oversized_header_bytes_max
                    or avail >= FRAME_PREFIX_SIZE + header_length
                )
        return avail >= 4 + frame_length

    @property
    def max_frame_bytes(self) -> int:
        return self._max_frame_bytes

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
            self._oversized(frame_length, header_length, avail)
            return None  # its header is not in yet
        if frame_length < 4:
            raise RemoteProtocolError(f"frame length {frame_length} is too small for a header")
        # Checked as soon as the prefix is in, not when the whole frame is: a peer that does
        # not speak this protocol (an HTTP server's "HTTP/1.1 400") is caught at its first
        # bytes instead of after waiting for a length it will never send.
        if avail >= FRAME_PREFIX_SIZE and (
            header_length > frame_length - 4 or header_length > MAX_HEADER_BYTES
        ):
            raise RemoteProtocolError(
                f"header length {header_length} does not fit a frame of {frame_length} bytes"
            )
        if avail < 4 + frame_length:
            return None
        start = pos + FRAME_PREFIX_SIZE
        header = _unpack_header(buf[start : start + header_length])
        end = pos + 4 + frame_length
        payload = memoryview(buf)[start + header_length : end]
        self._pos = end
        self._frames += 1
        return header, payload

    def _oversized(self, frame_length: int, header_length: int, avail: int) -> None:
        """Refuse a frame over the limit: at once, or (oversized_header_bytes_max) once its
        header is in, carrying the header; the rest of the frame is then discarded."""
        message = f"frame of {frame_length} bytes exceeds the limit of {self._max_frame_bytes}"
        limit = self._oversized_header_bytes_max
        if not limit:
            raise FrameTooLargeError(message, 4 + frame_length, self._max_frame_bytes)
        if avail < FRAME_PREFIX_SIZE:
            return None
        header = None
        if header_length <= min(limit, frame_length - 4):
            if avail < FRAME_PREFIX_SIZE + header_length:
                return None
            start = self._pos + FRAME_PREFIX_SIZE
            try:
                header = _unpack_header(self._buf[start : start + header_length])
            except RemoteProtocolError:
                header = None
        # Drop what is buffered of the frame; the rest is dropped as it arrives.
        end = self._pos + 4 + frame_length
        taken = min(end, len(self._buf))
        self._discard = end - taken
        self._pos = taken
        self._frames += 1
        raise FrameTooLargeError(message, 4 + frame_length, self._max_frame_bytes, header)


def _unpack_header(data: bytes | bytearray) -> list[Any]:
    try:
        header = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several unrelated types for garbage
        raise RemoteProtocolError(f"header is not valid msgpack: {e}") from None
    if not isinstance(header, list):
        raise RemoteProtocolError(f"header must be a msgpack array, got {type(header).__name__}")
    return header


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
        if not (first != last and header.endswith(hole)):
            raise InvariantError("template markers not where expected")
        self._before_corr = header[: first + 1]
        self._after_corr = header[first + 5 : last + 1]
        self._header_length = len(header)

    def frame_length(self, nbytes: int) -> int:
        """The frame_length field of a request with `nbytes` of payload."""
        return 4 + self._header_length + nbytes

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


# -- request bodies --------------------------------------------------------------------------
#
# Every request body is checked against its API's shape below before a handler sees it, so a
# handler can index and unpack it freely: a client that sends the wrong shape gets an
# InvalidRequestError naming the field, and anything a handler still raises is the broker's
# own bug (logged with its traceback, answered as an internal error; broker/connection.py).
# The shapes say types and arity only; values (topic names, timeouts, offsets in range) are
# the handlers' to judge, with their own typed errors. Unknown fields are ignored, so a newer
# client can add optional ones. Integers are msgpack's signed 64-bit range unless narrowed;
# booleans are not integers here (msgpack keeps them apart, and so does the check).

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class InvalidBodyError(RemoteProtocolError):
    """A request body does not have its API's shape. Not fatal: the connection stays open.

    Raised at the offending value; each enclosing shape adds its step to `where` on the way
    out, so the happy path builds no path strings at all.
    """

    def __init__(self, expected: str, value: Any, missing: bool = False):
        super().__init__(f"must be {expected}", fatal=False)
        self.expected = expected
        self.value = value
        self.missing = missing
        self.where: list[str] = []  # innermost step first
        self.name: str | None = None  # the innermost named array element

    def describe(self, api_key: int) -> str:
        path = "".join(reversed(self.where)).lstrip(".") or "body"
        if self.name is not None:
            path += f" ({self.name})"
        if self.missing:
            fault = f"is missing ({self.expected})"
        else:
            shown = repr(self.value)
            if len(shown) > 60:
                shown = shown[:57] + "..."
            fault = f"must be {self.expected}, got {shown}"
        return f"malformed {_api_name(api_key)} request: {path} {fault}"

    def __str__(self) -> str:
        return self.describe(-1)


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API {api_key}"


class _Shape:
    __slots__ = ("expected",)
    expected: str

    def check(self, value: Any) -> None:
        raise NotImplementedError


class _Int(_Shape):
    __slots__ = ("hi", "lo")

    def __init__(self, lo: int = INT64_MIN, hi: int = INT64_MAX):
        self.lo, self.hi = lo, hi
        if lo == INT64_MIN and hi == INT64_MAX:
            self.expected = "a 64-bit integer"
        elif hi == INT64_MAX:
            self.expected = f"an integer >= {lo}"
        else:
            self.expected = f"an integer in {lo}..{hi}"

    def check(self, value: Any) -> None:
        if type(value) is not int or not self.lo <= value <= self.hi:
            raise InvalidBodyError(self.expected, value)


class _Type(_Shape):
    __slots__ = ("types",)

    def __init__(self, expected: str, *types: type):
        self.expected, self.types = expected, types

    def check(self, value: Any) -> None:
        if type(value) not in self.types:
            raise InvalidBodyError(self.expected, value)


class _Nullable(_Shape):
    __slots__ = ("inner",)

    def __init__(self, inner: _Shape):
        self.inner = inner
        self.expected = f"{inner.expected} or null"

    def check(self, value: Any) -> None:
        if value is not None:
            try:
                self.inner.check(value)
            except InvalidBodyError as e:
                if not e.where:  # the value itself is wrong: say null was allowed too
                    e.expected = self.expected
                raise


class _List(_Shape):
    __slots__ = ("item",)

    def __init__(self, item: _Shape):
        self.item = item
        self.expected = "an array"

    def check(self, value: Any) -> None:
        if type(value) is not list:
            raise InvalidBodyError(self.expected, value)
        check = self.item.check
        for i, item in enumerate(value):
            try:
                check(item)
            except InvalidBodyError as e:
                e.where.append(f"[{i}]")
                raise


class _Tuple(_Shape):
    """An array of named elements ([partition, offset, max_bytes]); the last `optional` of
    them may be left off (fields a newer client adds at the end, as Fetch's leader epochs)."""

    __slots__ = ("items", "required")

    def __init__(self, *items: tuple[str, _Shape], optional: int = 0):
        self.items = items
        self.required = len(items) - optional
        names = [name for name, _ in items]
        if optional:
            names[self.required :] = [f"({', '.join(names[self.required :])})"]
        self.expected = f"an array [{', '.join(names)}]"

    def check(self, value: Any) -> None:
        if type(value) is not list or not self.required <= len(value) <= len(self.items):
            raise InvalidBodyError(self.expected, value)
        for i, (name, shape) in enumerate(self.items[: len(value)]):
            try:
                shape.check(value[i])
            except InvalidBodyError as e:
                e.where.append(f"[{i}]")
                if not e.where[:-1]:  # this element itself: name it
                    e.name = name
                raise


class _Map(_Shape):
    """A map with string keys whose values all have one shape (a topic's config)."""

    __slots__ = ("value",)

    def __init__(self, value: _Shape):
        self.value = value
        self.expected = f"a map of strings to {value.expected}s"

    def check(self, value: Any) -> None:
        if type(value) is not dict:
            raise InvalidBodyError(self.expected, value)
        for k, v in value.items():
            if type(k) is not str:
                raise InvalidBodyError("a map with string keys", value)
            try:
                self.value.check(v)
            except InvalidBodyError as e:
                e.where.append(f"[{k!r}]")
                raise


class _Struct(_Shape):
    """A map of named fields: `required` must be present, `optional` may be absent."""

    __slots__ = ("fields", "required")

    def __init__(self, required: Mapping[str, _Shape] | None = None, **optional: _Shape):
        self.required = tuple(required or ())
        self.fields = {**(required or {}), **optional}
        self.expected = "a map"

    def check(self, value: Any) -> None:
        if type(value) is not dict:
            raise InvalidBodyError(self.expected, value)
        for name in self.required:
            if name not in value:
                e = InvalidBodyError(self.fields[name].expected, None, missing=True)
                e.where.append(f".{name}")
                raise e
        for name, shape in self.fields.items():
            if name in value:
                try:
                    shape.check(value[name])
                except InvalidBodyError as e:
                    e.where.append(f".{name}")
                    raise


class _ProduceBody(_Struct):
    """Produce's shape, with a fast path for well-formed bodies: a pipelining producer sends
    tens of thousands of these a second, and the generic walk costs several microseconds
    each (measured with bench.produce_path_bench). Anything the fast path does not accept
    goes through the generic walk, which finds and names the fault."""

    __slots__ = ()

    def check(self, value: Any) -> None:
        try:  # the producer always sends all three; without one, the generic walk decides
            acks = value["acks"]
            timeout_ms = value["timeout_ms"]
            topics = value["topics"]
        except KeyError:
            super().check(value)
            return
        if (
            type(acks) is int
            and type(timeout_ms) is int
            and INT64_MIN <= acks <= INT64_MAX
            and INT64_MIN <= timeout_ms <= INT64_MAX
            and type(topics) is list
        ):
            for t in topics:
                if type(t) is not list or len(t) != 2 or type(t[0]) is not str:
                    break
                parts = t[1]
                if type(parts) is not list:
                    break
                for p in parts:
                    if (
                        type(p) is not list
                        or len(p) != 2
                        or type(p[0]) is not int
                        or type(p[1]) is not int
                        or not INT64_MIN <= p[0] <= INT64_MAX
                        or not 0 <= p[1] <= INT64_MAX
                    ):
                        break
                else:
                    continue
                break
            else:
                return
        super().check(value)


_INT = _Int()
_SIZE = _Int(0)
_STR = _Type("a string", str)
_BOOL = _Type("a boolean", bool)
_STRS = _List(_STR)
_GROUP = {"group_id": _STR}
_PARTITIONS_OF = _List(_Tuple(("topic", _STR), ("partition", _INT)))

# One shape per API: what docs/PROTOCOL.md and the handlers (raftlog/broker/handlers/) read.
REQUEST_BODIES: dict[int, _Shape] = {
    ApiKey.API_VERSIONS: _Struct(),
    ApiKey.METADATA: _Struct(topics=_Nullable(_STRS), allow_auto_create=_BOOL),
    ApiKey.CREATE_TOPICS: _Struct(
        {
            "topics": _List(
                _Struct(
                    {"name": _STR},
                    partitions=_INT,
                    replication_factor=_INT,
                    config=_Nullable(_Map(_Nullable(_Type("a string or an integer", str, int)))),
                )
            )
        },
        validate_only=_BOOL,
    ),
    ApiKey.DELETE_TOPICS: _Struct({"topics": _STRS}),
    ApiKey.CREATE_PARTITIONS: _Struct(
        {
            "topics": _List(
                _Struct(
                    {"name": _STR, "count": _INT},
                    assignments=_Nullable(_List(_List(_INT))),
                )
            )
        },
        validate_only=_BOOL,
    ),
    ApiKey.ELECT_LEADERS: _Struct(partitions=_Nullable(_PARTITIONS_OF)),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _Struct(
        {
            "reassignments": _List(
                _Tuple(("topic", _STR), ("partition", _INT), ("replicas", _Nullable(_List(_INT))))
            )
        },
        throttle=_INT,
    ),
    ApiKey.ALTER_TOPIC_CONFIG: _Struct(
        {
            "topic": _STR,
            "changes": _Map(_Nullable(_Type("a string or an integer", str, int))),
        },
        validate_only=_BOOL,
    ),
    ApiKey.DESCRIBE_CONFIGS: _Struct(topics=_Nullable(_STRS)),
    ApiKey.DESCRIBE_REPLICAS: _Struct(topics=_Nullable(_STRS)),
    ApiKey.PRODUCE: _ProduceBody(
        {
            "topics": _List(
                _Tuple(
                    ("topic", _STR),
                    ("partitions", _List(_Tuple(("partition", _INT), ("nbytes", _SIZE)))),
                )
            )
        },
        acks=_INT,
        timeout_ms=_INT,
    ),
    ApiKey.FETCH: _Struct(
        {
            "topics": _List(
                _Tuple(
                    ("topic", _STR),
                    (
                        "partitions",
                        _List(
                            _Tuple(
                                ("partition", _INT),
                                ("fetch_offset", _INT),
                                ("partition_max_bytes", _INT),
                                ("current_leader_epoch", _INT),
                                ("last_fetched_epoch", _INT),
                                ("durable_offset", _INT),
                                optional=3,
                            )
                        ),
                    ),
                )
            )
        },
        replica_id=_INT,
        replica_epoch=_INT,
        max_wait_ms=_INT,
        min_bytes=_INT,
        max_bytes=_INT,
        # Incremental fetch sessions (replica fetches; raftlog/replication/fetch_session.py).
        session_id=_INT,
        session_epoch=_INT,
        forgotten=_List(_Tuple(("topic", _STR), ("partitions", _List(_INT)))),
    ),
    ApiKey.LIST_OFFSETS: _Struct(
        {
            "topics": _List(
                _Tuple(
                    ("topic", _STR),
                    ("partitions", _List(_Tuple(("partition", _INT), ("timestamp", _INT)))),
                )
            )
        }
    ),
    ApiKey.DESCRIBE_CLUSTER: _Struct(),
    ApiKey.FIND_COORDINATOR: _Struct(group_id=_Nullable(_STR)),
    ApiKey.JOIN_GROUP: _Struct(
        {**_GROUP, "session_timeout_ms": _INT, "topics": _STRS, "protocols": _STRS},
        member_id=_Nullable(_STR),
        client_id=_Nullable(_STR),
        instance_id=_Nullable(_STR),
        rebalance_timeout_ms=_INT,
    ),
    ApiKey.HEARTBEAT: _Struct({**_GROUP, "member_id": _STR, "generation": _INT}),
    ApiKey.LEAVE_GROUP: _Struct({**_GROUP, "member_ids": _STRS}),
    ApiKey.OFFSET_COMMIT: _Struct(
        {
            **_GROUP,
            "generation": _INT,
            "offsets": _List(
                _Tuple(
                    ("topic", _STR),
                    ("partition", _INT),
                    ("offset", _INT),
                    ("metadata", _Nullable(_STR)),
                )
            ),
        },
        member_id=_Nullable(_STR),
    ),
    ApiKey.OFFSET_FETCH: _Struct(_GROUP, partitions=_Nullable(_PARTITIONS_OF)),
    ApiKey.LIST_GROUPS: _Struct(),
    ApiKey.DESCRIBE_GROUPS: _Struct(_GROUP),
    ApiKey.DELETE_GROUPS: _Struct(_GROUP),
    ApiKey.INIT_PRODUCER_ID: _Struct(),
    ApiKey.RESET_OFFSETS: _Struct(
        {
            **_GROUP,
            "offsets": _List(_Tuple(("topic", _STR), ("partition", _INT), ("offset", _INT))),
        }
    ),
}
if set(REQUEST_BODIES) != set(SUPPORTED_VERSIONS):
    raise RuntimeError("every API needs a request body shape in protocol.REQUEST_BODIES")


def check_request_body(api_key: int, body: dict[str, Any]) -> None:
    """Raise InvalidBodyError (naming the API, the field and the value) unless `body` has the
    shape of `api_key`'s requests. An API without a shape is the caller's to refuse."""
    shape = REQUEST_BODIES.get(api_key)
    if shape is not None:
        shape.check(body)
