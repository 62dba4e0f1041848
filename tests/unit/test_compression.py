"""compression.py: Kafka's codecs round trip, read what Kafka's clients write (xerial snappy
and raw snappy, several gzip members, zstd frames without a content size), refuse bad data
with CorruptRecordError and refuse to decompress past a bound."""

from __future__ import annotations

import gzip
import io
import struct

import cramjam
import lz4.frame  # type: ignore[import-untyped]
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog import compression
from raftlog.compression import CODEC_NAMES, XERIAL_MAGIC, codec_id, compress, decompress
from raftlog.errors import CorruptRecordError

CODECS = sorted(CODEC_NAMES)


@pytest.mark.parametrize("codec", CODECS)
@given(data=st.one_of(st.binary(max_size=2000), st.binary(max_size=50).map(lambda b: b * 3000)))
@settings(max_examples=30)
def test_round_trip(codec: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


def test_names_are_kafkas() -> None:
    assert [codec_id(n) for n in ("none", "gzip", "snappy", "lz4", "zstd")] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="brotli"):
        codec_id("brotli")


def test_snappy_is_written_in_xerial_framing_and_read_in_both() -> None:
    data = bytes(range(256)) * 400  # more than one 32 KiB xerial block
    framed = compress(compression.SNAPPY, data)
    assert framed.startswith(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    assert decompress(compression.SNAPPY, framed) == data
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(compression.SNAPPY, raw) == data


def test_other_writers_framings_are_read() -> None:
    data = b"kafka " * 5000
    two_members = gzip.compress(data[:100]) + gzip.compress(data[100:])
    assert decompress(compression.GZIP, two_members) == data
    # A streamed zstd frame has no content size in its header.
    out = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(out, closefd=False) as w:
        w.write(data)
    streamed = out.getvalue()
    assert zstandard.get_frame_parameters(streamed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(compression.ZSTD, streamed) == data
    linked = lz4.frame.compress(data, block_linked=True, content_checksum=True)
    assert decompress(compression.LZ4, linked) == data


@pytest.mark.parametrize("codec", [c for c in CODECS if c])
@pytest.mark.parametrize(
    "damage", ["garbage", "truncated", "empty"], ids=["garbage", "truncated", "empty"]
)
def test_bad_data_is_a_corrupt_record_error(codec: int, damage: str) -> None:
    good = compress(codec, b"some records " * 500)
    bad = {"garbage": b"\x00\x01garbage" * 10, "truncated": good[: len(good) // 2], "empty": b""}
    with pytest.raises(CorruptRecordError, match=CODEC_NAMES[codec]):
        decompress(codec, bad[damage])


@pytest.mark.parametrize("codec", [c for c in CODECS if c])
def test_output_over_the_bound_is_refused(codec: int) -> None:
    bomb = compress(codec, b"\0" * 1_000_000)
    assert len(bomb) < 60_000
    assert decompress(codec, bomb, max_bytes=1_000_000) == b"\0" * 1_000_000
    with pytest.raises(CorruptRecordError, match="more than 999999 bytes"):
        decompress(codec, bomb, max_bytes=999_999)


def test_an_unknown_codec_is_a_corrupt_record_error() -> None:
    with pytest.raises(CorruptRecordError, match="unknown compression codec 6"):
        decompress(6, b"x")
