"""The compression codecs of Kafka's record batch v2: ids, names, compress and decompress.

Pure: bytes in, bytes out. The broker never calls this (it stores batches as sent); producers
compress a batch's record stream and consumers decompress it (records_v2.py).

Codec ids are Kafka's (the low 3 bits of a v2 batch's attributes), and so are the framings,
so that Kafka's clients read what we write and we read what they write:

    id name    framing
    0  none    the record stream as is
    1  gzip    a gzip stream (RFC 1952), as Java's GZIPOutputStream writes; several members
               are read one after the other
    2  snappy  written in xerial's framing, as Kafka's Java client and kafka-python write it:
               magic b"\\x82SNAPPY\\x00", int32 version (1), int32 compatible version (1), then
               blocks of int32 big-endian length + a raw snappy block. Read: that framing, or
               one raw snappy block (what librdkafka may send)
    3  lz4     an LZ4 frame (the LZ4 frame format, independent 64 KiB blocks)
    4  zstd    a zstd frame; frames without a content size (streamed) are read too

Rules:
- Bad compressed data raises CorruptRecordError naming the codec, never the codec library's
  own exception.
- Every decompression is bounded: output over `max_bytes` (default DECOMPRESSED_BYTES_MAX) is
  refused with CorruptRecordError before it is all produced, so a small "zip bomb" cannot take
  the reader's memory.
"""

from __future__ import annotations

import struct
import zlib
from typing import NoReturn

import cramjam
import lz4.frame
import zstandard

from raftlog.errors import CorruptRecordError
from raftlog.invariants import InvariantError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}

# The largest record stream a batch may decompress to. A batch is at most the broker's
# max_message_bytes (1 MiB by default) on the wire; 64 MiB allows a 64:1 ratio (repetitive
# JSON reaches ~20:1) while keeping a hostile batch's cost to one bounded buffer.
DECOMPRESSED_BYTES_MAX = 64 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_BYTES = 32 * 1024  # xerial's default block size
_INT32_BE = struct.Struct(">i")
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer, not zlib's


def codec_id(name: str) -> int:
    """The id of codec `name` (Kafka's `compression.type` values); ValueError if unknown."""
    try:
        return CODEC_IDS[name]
    except KeyError:
        raise ValueError(
            f"unknown compression type {name!r}: one of {', '.join(CODEC_IDS)}"
        ) from None


def compress(codec: int, data: bytes) -> bytes:
    """`data` compressed with `codec`, framed as Kafka's Java client frames it."""
    if codec == NONE:
        return data
    if codec == GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, _GZIP_WBITS)
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        parts = [_XERIAL_HEADER]
        for i in range(0, len(data), _XERIAL_BLOCK_BYTES):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK_BYTES]))
            parts += (_INT32_BE.pack(len(block)), block)
        return b"".join(parts)
    if codec == LZ4:
        return bytes(
            lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
        )
    if codec == ZSTD:
        return bytes(zstandard.ZstdCompressor().compress(data))
    raise InvariantError(f"compression codec {codec} is not one of {sorted(CODEC_NAMES)}")


def decompress(codec: int, data: bytes, max_bytes: int = DECOMPRESSED_BYTES_MAX) -> bytes:
    """`data` decompressed with `codec`. Raises CorruptRecordError for data the codec cannot
    read, an unknown codec, or output over `max_bytes`."""
    name = CODEC_NAMES.get(codec, str(codec))
    try:
        if codec == NONE:
            out = data
        elif codec == GZIP:
            out = _gunzip(data, max_bytes)
        elif codec == SNAPPY:
            out = _unsnappy(data, max_bytes)
        elif codec == LZ4:
            out = _unlz4(data, max_bytes)
        elif codec == ZSTD:
            out = _unzstd(data, max_bytes)
        else:
            raise CorruptRecordError(f"unknown compression codec {codec}")
    except (zlib.error, cramjam.DecompressionError, RuntimeError, zstandard.ZstdError) as e:
        raise CorruptRecordError(f"bad {name} data: {e}") from None
    if len(out) > max_bytes:
        raise CorruptRecordError(
            f"{name} data decompresses to more than {max_bytes} bytes: refused"
        )
    return bytes(out)


def _gunzip(data: bytes, max_bytes: int) -> bytes:
    """Every gzip member of `data`, stopping past `max_bytes` of output."""
    out = bytearray()
    rest = data
    while True:
        d = zlib.decompressobj(_GZIP_WBITS)
        out += d.decompress(rest, max_bytes + 1 - len(out))
        if len(out) > max_bytes:
            return bytes(out)
        if not d.eof:
            raise CorruptRecordError("gzip data ends inside its stream")
        rest = d.unused_data
        if not rest:
            return bytes(out)


# Output taken from the lz4 decompressor at a time: it allocates its `max_length` up front
# (64 MiB at once costs ~0.4 ms, more than decompressing a batch).
_LZ4_STEP_BYTES = 1024 * 1024


def _unlz4(data: bytes, max_bytes: int) -> bytes:
    """The LZ4 frame `data` (one frame, as Kafka's clients write), stopping past `max_bytes`
    of output."""
    d = lz4.frame.LZ4FrameDecompressor()
    parts = []
    total = 0
    rest = data
    while True:
        part = d.decompress(rest, max_length=min(_LZ4_STEP_BYTES, max_bytes + 1 - total))
        rest = b""
        parts.append(part)
        total += len(part)
        if total > max_bytes or d.eof:
            break
        if d.needs_input:
            raise CorruptRecordError("lz4 data ends inside its frame")
    if d.unused_data:
        raise CorruptRecordError(f"{len(d.unused_data)} bytes after the lz4 frame")
    return b"".join(parts)


# A zstd block holds at most 128 KiB and takes at least 4 bytes: one input byte may become up
# to 32 KiB of output.
_ZSTD_RATIO_MAX = 32 * 1024


def _unzstd(data: bytes, max_bytes: int) -> bytes:
    """Every zstd frame of `data` (with or without a content size in its header), stopping
    past `max_bytes` of output. zstandard's one-shot and streaming readers either take no
    bound or end quietly on a cut frame, so the input is fed in steps small enough that one
    step cannot overshoot what is left of the bound by more than itself, and each frame must
    end (`eof`)."""
    out = bytearray()
    mv = memoryview(data)
    at = 0
    while at < len(data):
        d = zstandard.ZstdDecompressor().decompressobj()
        try:
            declared = zstandard.frame_content_size(mv[at:])
        except zstandard.ZstdError:
            declared = -1  # no frame header there: the decompressor names the damage
        while not d.eof:
            if at >= len(data):
                raise CorruptRecordError("zstd data ends inside a frame")
            if 0 <= declared <= max_bytes - len(out):
                step = len(data)  # the frame says how much it makes, and that fits: all at once
            else:
                step = max(1024, (max_bytes - len(out)) // _ZSTD_RATIO_MAX)
            out += d.decompress(mv[at : at + step])
            at += step
            if len(out) > max_bytes:
                return bytes(out)
        at -= len(d.unused_data)
    if not data:
        raise CorruptRecordError("zstd data is empty: no frame")
    return bytes(out)


def _raw_snappy_length(block: bytes | memoryview) -> int:
    """The uncompressed length a raw snappy block declares (its leading varint)."""
    n = shift = 0
    for i in range(min(5, len(block))):
        byte = block[i]
        n |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return n
        shift += 7
    raise CorruptRecordError("bad snappy data: no length at the start of a block")


def _unsnappy(data: bytes, max_bytes: int) -> bytes:
    """A raw snappy block, or xerial's framing of several (see the module docstring). Each
    block's declared length is checked against what is left of `max_bytes` before it is
    decompressed."""
    if not data.startswith(XERIAL_MAGIC):
        if _raw_snappy_length(data) > max_bytes:
            _refuse_snappy(max_bytes)
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    mv = memoryview(data)
    pos = len(_XERIAL_HEADER)
    if len(data) < pos:
        raise CorruptRecordError("bad snappy data: a torn xerial header")
    while pos < len(data):
        if len(data) - pos < 4:
            raise CorruptRecordError(f"bad snappy data: a torn block length at byte {pos}")
        (n,) = _INT32_BE.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError(
                f"bad snappy data: block of {n} bytes at byte {pos - 4} runs past the end"
            )
        block = mv[pos : pos + n]
        if len(out) + _raw_snappy_length(block) > max_bytes:
            _refuse_snappy(max_bytes)
        out += cramjam.snappy.decompress_raw(bytes(block))
        pos += n
    return bytes(out)


def _refuse_snappy(max_bytes: int) -> NoReturn:
    raise CorruptRecordError(f"snappy data decompresses to more than {max_bytes} bytes: refused")
