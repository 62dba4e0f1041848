"""Kafka's primitive types on the wire: a bounds-checked Reader and an appending Writer.

Rules this module keeps:
- Pure: bytes in, values out, values in, bytes out. No I/O.
- Every read is bounds-checked against the Reader's `end`: a short buffer, a negative length
  where none is allowed, or a length beyond what is left raises `KafkaDecodeError` naming the
  field, never IndexError or struct.error, and never allocates what a length merely announces.
- `bytes_` and its variants return memoryview slices of the input (zero copy): a Produce
  request's record batches stay views of the request frame.
- The Writer never looks inside a part given to `raw`: record data (bytes, memoryview, or a
  file slice the connection sends with sendfile) passes through as the caller gave it, and the
  caller writes its length.

The primitives, all big-endian (Kafka's protocol guide, "Protocol Primitive Types"):
- int8, int16, int32, int64: two's complement, 1, 2, 4 and 8 bytes; uint32: 4 bytes unsigned;
  boolean: one byte, 0 false, anything else true.
- uvarint: unsigned LEB128, 7 bits a byte, low group first, high bit set on every byte but
  the last; at most 5 bytes (32-bit values). varint and varlong: zigzag ((n << 1) ^ (n >> 31)
  or >> 63) then LEB128; varlong at most 10 bytes.
- string: int16 length N then N bytes of UTF-8; nullable_string: N = -1 is null.
- bytes: int32 length N then N bytes; nullable_bytes: N = -1 is null.
- compact_string, compact_bytes (flexible versions): uvarint N+1 then N bytes; 0 is null.
- array: int32 count N then N items; N = -1 is a null array. compact_array: uvarint N+1.
- tagged fields (flexible versions): uvarint count, then per field uvarint tag, uvarint size,
  size bytes. We send none; we skip whatever a client sends.
- uuid: 16 bytes.

Errors name where they happened: the Reader raises with the field's name; `array` prefixes
the item's index ("partitions[2].records") and `decode_request` the API and version, giving
"Produce v7: topics[0].partitions[2].records: 4000 bytes announced, 12 left".
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import TypeVar

from raftlog.invariants import require
from raftlog.protocol import RemoteProtocolError

T = TypeVar("T")

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT32 = struct.Struct(">I")

_INT8_UNPACK = INT8.unpack_from
_INT16_UNPACK = INT16.unpack_from
_INT32_UNPACK = INT32.unpack_from
_INT64_UNPACK = INT64.unpack_from
_UINT32_UNPACK = UINT32.unpack_from

UVARINT_BYTES_MAX = 5  # a 32-bit value in 7-bit groups
VARLONG_BYTES_MAX = 10  # a 64-bit value in 7-bit groups


class KafkaDecodeError(RemoteProtocolError):
    """A Kafka frame that cannot be decoded: the peer broke the protocol (fatal by default:
    the connection cannot know where the next frame starts once a body is not understood).

    `context` names the API and version ("Produce v7"), `path` the field
    ("topics[0].partitions[2].records"), `detail` what was wrong.
    """

    def __init__(self, detail: str, path: str = "", context: str = "", fatal: bool = True):
        self.detail = detail
        self.path = path
        self.context = context
        super().__init__(self._text(), fatal)

    def _text(self) -> str:
        return ": ".join(part for part in (self.context, self.path, self.detail) if part)

    def add_path_prefix(self, prefix: str) -> None:
        """Put `prefix` (an enclosing field, e.g. "topics[0]") before the path."""
        self.path = f"{prefix}.{self.path}" if self.path else prefix
        self.args = (self._text(),)

    def set_context(self, context: str) -> None:
        """Name the API and version the error happened in."""
        self.context = context
        self.args = (self._text(),)


class Reader:
    """A read position over a buffer: `buf[pos:end]` is what is left to read.

    Invariant: 0 <= pos <= end <= len(buf). Every method moves `pos` past what it read or
    raises KafkaDecodeError with `pos` unspecified (the caller gives up on the frame).
    """

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None):
        view = buf if isinstance(buf, memoryview) else memoryview(buf)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self.buf = view
        self.pos = pos
        self.end = len(view) if end is None else end
        require(
            0 <= pos <= self.end <= len(view), f"Reader bounds {pos}..{self.end} of {len(view)}"
        )

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _short(self, needed: int, field: str) -> KafkaDecodeError:
        return KafkaDecodeError(f"needs {needed} bytes, {self.end - self.pos} left", field)

    def expect_end(self, what: str) -> None:
        """Raise unless everything was read: a body must be consumed exactly."""
        if self.pos != self.end:
            raise KafkaDecodeError(f"{self.end - self.pos} bytes left over after {what}")

    def skip(self, size: int, field: str = "") -> None:
        if size < 0 or size > self.end - self.pos:
            raise KafkaDecodeError(f"{size} bytes announced, {self.end - self.pos} left", field)
        self.pos += size

    # Fixed-width integers.

    def int8(self, field: str = "") -> int:
        pos = self.pos
        if self.end - pos < 1:
            raise self._short(1, field)
        self.pos = pos + 1
        value: int = _INT8_UNPACK(self.buf, pos)[0]
        return value

    def boolean(self, field: str = "") -> bool:
        return self.int8(field) != 0

    def int16(self, field: str = "") -> int:
        pos = self.pos
        if self.end - pos < 2:
            raise self._short(2, field)
        self.pos = pos + 2
        value: int = _INT16_UNPACK(self.buf, pos)[0]
        return value

    def int32(self, field: str = "") -> int:
        pos = self.pos
        if self.end - pos < 4:
            raise self._short(4, field)
        self.pos = pos + 4
        value: int = _INT32_UNPACK(self.buf, pos)[0]
        return value

    def uint32(self, field: str = "") -> int:
        pos = self.pos
        if self.end - pos < 4:
            raise self._short(4, field)
        self.pos = pos + 4
        value: int = _UINT32_UNPACK(self.buf, pos)[0]
        return value

    def int64(self, field: str = "") -> int:
        pos = self.pos
        if self.end - pos < 8:
            raise self._short(8, field)
        self.pos = pos + 8
        value: int = _INT64_UNPACK(self.buf, pos)[0]
        return value

    def uuid(self, field: str = "") -> uuid.UUID:
        pos = self.pos
        if self.end - pos < 16:
            raise self._short(16, field)
        self.pos = pos + 16
        return uuid.UUID(bytes=bytes(self.buf[pos : pos + 16]))

    # Variable-length integers.

    def _leb128(self, bytes_max: int, field: str) -> int:
        buf, pos, end = self.buf, self.pos, self.end
        value = 0
        shift = 0
        for _ in range(bytes_max):
            if pos >= end:
                raise KafkaDecodeError("varint cut short", field)
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos
                return value
            shift += 7
        raise KafkaDecodeError(f"varint longer than {bytes_max} bytes", field)

    def uvarint(self, field: str = "") -> int:
        return self._leb128(UVARINT_BYTES_MAX, field)

    def varint(self, field: str = "") -> int:
        raw = self._leb128(UVARINT_BYTES_MAX, field) & 0xFFFFFFFF
        return (raw >> 1) ^ -(raw & 1)

    def varlong(self, field: str = "") -> int:
        raw = self._leb128(VARLONG_BYTES_MAX, field) & 0xFFFFFFFFFFFFFFFF
        return (raw >> 1) ^ -(raw & 1)

    # Strings and bytes. `_length` is the size read from the wire, -1 for null.

    def _slice(self, size: int, field: str) -> memoryview:
        pos = self.pos
        if size > self.end - pos:
            raise KafkaDecodeError(f"{size} bytes announced, {self.end - pos} left", field)
        self.pos = pos + size
        return self.buf[pos : pos + size]

    def _text(self, size: int, field: str) -> str:
        data = self._slice(size, field)
        try:
            return str(data, "utf-8")
        except UnicodeDecodeError as exc:
            raise KafkaDecodeError(f"not UTF-8 ({exc.reason})", field) from None

    def nullable_string(self, field: str = "") -> str | None:
        size = self.int16(field)
        if size < 0:
            if size == -1:
                return None
            raise KafkaDecodeError(f"string length {size}", field)
        return self._text(size, field)

    def string(self, field: str = "") -> str:
        text = self.nullable_string(field)
        if text is None:
            raise KafkaDecodeError("null where a string is required", field)
        return text

    def nullable_bytes(self, field: str = "") -> memoryview | None:
        size = self.int32(field)
        if size < 0:
            if size == -1:
                return None
            raise KafkaDecodeError(f"bytes length {size}", field)
        return self._slice(size, field)

    def bytes_(self, field: str = "") -> memoryview:
        data = self.nullable_bytes(field)
        if data is None:
            raise KafkaDecodeError("null where bytes are required", field)
        return data

    def compact_nullable_string(self, field: str = "") -> str | None:
        size = self.uvarint(field) - 1
        if size < 0:
            return None
        return self._text(size, field)

    def compact_string(self, field: str = "") -> str:
        text = self.compact_nullable_string(field)
        if text is None:
            raise KafkaDecodeError("null where a string is required", field)
        return text

    def compact_nullable_bytes(self, field: str = "") -> memoryview | None:
        size = self.uvarint(field) - 1
        if size < 0:
            return None
        return self._slice(size, field)

    def compact_bytes(self, field: str = "") -> memoryview:
        data = self.compact_nullable_bytes(field)
        if data is None:
            raise KafkaDecodeError("null where bytes are required", field)
        return data

    # Arrays. Every item takes at least one byte in every message we decode, so a count
    # beyond the bytes left is refused before any item is read or any list grows.

    def _items(self, count: int, read_item: Callable[[Reader], T], field: str) -> tuple[T, ...]:
        if count > self.end - self.pos:
            raise KafkaDecodeError(
                f"{count} items announced, {self.end - self.pos} bytes left", field
            )
        items = []
        try:
            for _ in range(count):
                items.append(read_item(self))
        except KafkaDecodeError as exc:
            exc.add_path_prefix(f"{field}[{len(items)}]")
            raise
        return tuple(items)

    def nullable_array(
        self, read_item: Callable[[Reader], T], field: str = ""
    ) -> tuple[T, ...] | None:
        count = self.int32(field)
        if count < 0:
            if count == -1:
                return None
            raise KafkaDecodeError(f"array length {count}", field)
        return self._items(count, read_item, field)

    def array(self, read_item: Callable[[Reader], T], field: str = "") -> tuple[T, ...]:
        items = self.nullable_array(read_item, field)
        if items is None:
            raise KafkaDecodeError("null where an array is required", field)
        return items

    def compact_nullable_array(
        self, read_item: Callable[[Reader], T], field: str = ""
    ) -> tuple[T, ...] | None:
        count = self.uvarint(field) - 1
        if count < 0:
            return None
        return self._items(count, read_item, field)

    def compact_array(self, read_item: Callable[[Reader], T], field: str = "") -> tuple[T, ...]:
        items = self.compact_nullable_array(read_item, field)
        if items is None:
            raise KafkaDecodeError("null where an array is required", field)
        return items

    def tagged_fields(self, field: str = "_tagged_fields") -> None:
        """Read and skip a flexible version's tagged fields: we know none of them."""
        count = self.uvarint(field)
        if count > self.end - self.pos:
            raise KafkaDecodeError(f"{count} tagged fields announced, {self.remaining} left", field)
        for _ in range(count):
            self.uvarint(field)  # the tag
            self.skip(self.uvarint(field), field)


def encode_uvarint(value: int) -> bytes:
    """`value` (0 <= value < 2**64) as unsigned LEB128."""
    require(value >= 0, f"uvarint of negative {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """A signed 32-bit `value`, zigzag then LEB128."""
    return encode_uvarint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """A signed 64-bit `value`, zigzag then LEB128."""
    return encode_uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


_SMALL_UVARINTS = tuple(encode_uvarint(n) for n in range(128))
_INT8_PACK = INT8.pack
_INT16_PACK = INT16.pack
_INT32_PACK = INT32.pack
_INT64_PACK = INT64.pack
_UINT32_PACK = UINT32.pack
_NULL_INT16 = _INT16_PACK(-1)
_NULL_INT32 = _INT32_PACK(-1)


class Writer:
    """Builds an encoded message as a list of parts.

    Fixed and small fields accumulate in one bytearray; `raw(part)` closes it as a bytes part
    and appends `part` as it is, so record data is never copied or read. `parts()` returns the
    list, `getvalue()` the joined bytes when every raw part is bytes-like.
    """

    __slots__ = ("_buf", "_parts")

    def __init__(self) -> None:
        self._parts: list[object] = []
        self._buf = bytearray()

    def int8(self, value: int) -> None:
        self._buf += _INT8_PACK(value)

    def boolean(self, value: bool) -> None:
        self._buf.append(1 if value else 0)

    def int16(self, value: int) -> None:
        self._buf += _INT16_PACK(value)

    def int32(self, value: int) -> None:
        self._buf += _INT32_PACK(value)

    def uint32(self, value: int) -> None:
        self._buf += _UINT32_PACK(value)

    def int64(self, value: int) -> None:
        self._buf += _INT64_PACK(value)

    def uuid(self, value: uuid.UUID) -> None:
        self._buf += value.bytes

    def uvarint(self, value: int) -> None:
        self._buf += _SMALL_UVARINTS[value] if 0 <= value < 128 else encode_uvarint(value)

    def varint(self, value: int) -> None:
        self._buf += encode_varint(value)

    def varlong(self, value: int) -> None:
        self._buf += encode_varlong(value)

    def string(self, value: str) -> None:
        data = value.encode()
        self._buf += _INT16_PACK(len(data))
        self._buf += data

    def nullable_string(self, value: str | None) -> None:
        if value is None:
            self._buf += _NULL_INT16
        else:
            self.string(value)

    def bytes_(self, value: bytes | bytearray | memoryview) -> None:
        self._buf += _INT32_PACK(len(value))
        self._buf += value

    def nullable_bytes(self, value: bytes | bytearray | memoryview | None) -> None:
        if value is None:
            self._buf += _NULL_INT32
        else:
            self.bytes_(value)

    def compact_string(self, value: str) -> None:
        data = value.encode()
        self.uvarint(len(data) + 1)
        self._buf += data

    def compact_nullable_string(self, value: str | None) -> None:
        if value is None:
            self._buf.append(0)
        else:
            self.compact_string(value)

    def compact_bytes(self, value: bytes | bytearray | memoryview) -> None:
        self.uvarint(len(value) + 1)
        self._buf += value

    def compact_nullable_bytes(self, value: bytes | bytearray | memoryview | None) -> None:
        if value is None:
            self._buf.append(0)
        else:
            self.compact_bytes(value)

    def array_length(self, count: int | None) -> None:
        """An array's int32 count (None: a null array); the caller writes the items."""
        self._buf += _NULL_INT32 if count is None else _INT32_PACK(count)

    def compact_array_length(self, count: int | None) -> None:
        """A compact array's uvarint count + 1 (None: a null array, 0)."""
        self.uvarint(0 if count is None else count + 1)

    def empty_tagged_fields(self) -> None:
        self._buf.append(0)

    def raw(self, part: object) -> None:
        """Append `part` untouched (bytes, memoryview, a file slice): the caller has written
        its length and knows its size."""
        if self._buf:
            self._parts.append(bytes(self._buf))
            self._buf = bytearray()
        self._parts.append(part)

    def raw_bytes(self, data: bytes | bytearray | memoryview) -> None:
        """Copy `data` into the current part (small byte strings the caller already encoded)."""
        self._buf += data

    def parts(self) -> list[object]:
        """The parts written so far, adjacent encoded fields joined; the Writer is left empty."""
        if self._buf:
            self._parts.append(bytes(self._buf))
            self._buf = bytearray()
        parts, self._parts = self._parts, []
        return parts

    def getvalue(self) -> bytes:
        """Everything written, as one bytes (every raw part must be bytes-like)."""
        return b"".join(self.parts())  # type: ignore[arg-type]
