"""PartitionLog basics: rolling, sparse indices, reads and slices, timestamps, bad input, config."""

from __future__ import annotations

import os
import struct

import pytest
import xxhash

from raftlog.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidOffsetError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from raftlog.records import Record, encode_batch
from raftlog.storage import LogConfig, PartitionLog, tools
from raftlog.storage.checkpoint import OffsetCheckpoint
from raftlog.storage.log import IOV_MAX, LOG_START_FILE, RECOVERY_POINT_FILE
from raftlog.storage.segment import segment_name

from ._helpers import FakeClock, batch_of, batch_positions, stamped


def open_log(path: str, clock: FakeClock | None = None, **config: int | None) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**config), clock_ms=clock or FakeClock())  # type: ignore[arg-type]


def file_sizes(path: str) -> dict[str, int]:
    return {n: os.path.getsize(os.path.join(path, n)) for n in sorted(os.listdir(path))}


def all_records(log: PartitionLog) -> list[Record]:
    out: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        recs = log.read_records(offset, 1 << 20)
        out.extend(recs)
        offset = recs[-1].offset + 1
    return out


# -- rolling -------------------------------------------------------------------------------


def test_segments_roll_when_the_next_append_would_pass_segment_bytes(tmp_path: str) -> None:
    batch = batch_of(2, value_bytes=100)  # 2 records, 307 bytes
    size = len(batch)
    with open_log(str(tmp_path), segment_bytes=3 * size) as log:
        for _ in range(7):
            log.append(batch, 0)
        # Three batches fill a segment exactly; the fourth starts a new one.
        assert log.segment_base_offsets == [0, 6, 12]
        assert log.size_bytes == 7 * size
    names = sorted(n for n in os.listdir(tmp_path) if n.endswith(".log"))
    assert names == [segment_name(b) + ".log" for b in (0, 6, 12)]
    assert [os.path.getsize(os.path.join(tmp_path, n)) for n in names] == [
        3 * size,
        3 * size,
        size,
    ]


def test_an_append_larger_than_segment_bytes_is_split_between_batches(tmp_path: str) -> None:
    small, big = batch_of(1, 10), batch_of(3, 200)
    with open_log(str(tmp_path), segment_bytes=300) as log:
        log.append(small, 0)
        # 2 batches, each over 300 bytes: a segment each (a batch is never split), so every
        # segment holds at most segment_bytes or a single batch.
        log.append(big + big, 0)
        log.append(small, 0)
        assert log.segment_base_offsets == [0, 1, 4, 7]
        assert [r.value for r in all_records(log)] == [b"A" * 10] + [
            bytes([65 + i % 3]) * 200 for i in range(6)
        ] + [b"A" * 10]


def test_an_append_of_more_buffers_than_iov_max_is_written_whole(tmp_path: str) -> None:
    """The leader writes 2 buffers per batch with pwritev, IOV_MAX at a time."""
    count = IOV_MAX // 2 + 100
    batches = [encode_batch([Record(b"%d" % i, b"v%d" % i, (), i)]) for i in range(count)]
    with open_log(str(tmp_path)) as log:
        info = log.append(b"".join(batches), 2)
        assert (info.batch_count, info.last_offset) == (count, count - 1)
        assert log.read(0, 10**7) == b"".join(stamped(b, i, 2) for i, b in enumerate(batches))
    assert tools.verify(str(tmp_path)) == []


def test_segments_roll_by_segment_ms_on_batch_timestamps(tmp_path: str) -> None:
    clock = FakeClock(0)  # the wall clock plays no part: batch timestamps decide
    with open_log(str(tmp_path), clock, segment_ms=1000) as log:
        log.append(batch_of(1, timestamp=5000), 0)
        log.append(batch_of(1, timestamp=6000), 0)  # exactly segment_ms later: same segment
        log.append(batch_of(1, timestamp=5500), 0)
        assert log.segment_base_offsets == [0]
        log.append(batch_of(1, timestamp=6001), 0)  # more than segment_ms after the first batch
        assert log.segment_base_offsets == [0, 3]
        log.append(batch_of(1, timestamp=100), 0)  # an older timestamp never rolls
        log.append(batch_of(1, timestamp=7001), 0)
        assert log.segment_base_offsets == [0, 3]
        log.append(batch_of(1, timestamp=7002), 0)
        assert log.segment_base_offsets == [0, 3, 6]
    # The age survives a reopen: it comes from the first batch on disk.
    with open_log(str(tmp_path), clock, segment_ms=1000) as log:
        log.append(batch_of(1, timestamp=8002), 0)
        assert log.segment_base_offsets == [0, 3, 6]
        log.append(batch_of(1, timestamp=8003), 0)
        assert log.segment_base_offsets == [0, 3, 6, 8]


# -- the sparse indices ----------------------------------------------------------------------


def expected_index(
    sizes: list[int], max_ts: list[int], interval: int
) -> list[tuple[int, int, int]]:
    """(relative offset, position, max timestamp before) per index.py's rule, one record a batch."""
    out, since, pos, running = [], 0, 0, -1
    for i, size in enumerate(sizes):
        if i > 0 and since >= interval:
            out.append((i, pos, running))
            since = 0
        since += size
        pos += size
        running = max(running, max_ts[i])
    return out


@pytest.mark.parametrize("interval", [0, 1, 150, 400, 10_000])
def test_index_entries_every_index_interval_bytes(tmp_path: str, interval: int) -> None:
    values = [10, 200, 30, 30, 30, 300, 5, 5, 5, 5, 5, 90, 400, 1]
    timestamps = [50, 10, 70, 20, 90, 90, 5, 100, 1, 2, 3, 4, 200, 150]
    batches = [
        encode_batch([Record(b"k", b"v" * n, (), ts)])
        for n, ts in zip(values, timestamps, strict=True)
    ]
    with open_log(str(tmp_path), index_interval_bytes=interval) as log:
        for b in batches:
            log.append(b, 0)
    expected = expected_index([len(b) for b in batches], timestamps, interval)
    stem = os.path.join(str(tmp_path), segment_name(0))
    with open(stem + ".index", "rb") as f:
        assert list(struct.iter_unpack("<ii", f.read())) == [(r, p) for r, p, _ in expected]
    with open(stem + ".timeindex", "rb") as f:
        assert list(struct.iter_unpack("<qi", f.read())) == [(t, r) for r, _, t in expected]
    if interval == 0:
        assert len(expected) == len(batches) - 1  # every batch but the first (position 0)
    if interval == 10_000:
        assert expected == []
    assert tools.verify(str(tmp_path)) == []
    # The index is used for reads: every offset still reads back its own record.
    with open_log(str(tmp_path), index_interval_bytes=interval) as log:
        for i, n in enumerate(values):
            assert log.read_records(i, 1) == [Record(b"k", b"v" * n, (), timestamps[i], i)]


# -- reads ---------------------------------------------------------------------------------


def test_read_returns_whole_batches_from_the_one_holding_the_offset(tmp_path: str) -> None:
    batches = [batch_of(n, 50) for n in (3, 1, 4, 2)]  # offsets 0-2, 3, 4-7, 8-9
    data = [stamped(b, base, 0) for b, base in zip(batches, (0, 3, 4, 8), strict=True)]
    with open_log(str(tmp_path)) as log:
        for b in batches:
            log.append(b, 0)
        assert log.read(5, 1) == data[2]  # mid-batch: the whole batch, even over max_bytes
        assert log.read(5, len(data[2])) == data[2]
        assert log.read(5, len(data[2]) + len(data[3]) - 1) == data[2]
        assert log.read(5, len(data[2]) + len(data[3])) == data[2] + data[3]
        assert log.read(0, 10**6) == b"".join(data)
        assert log.read(0, 0) == data[0]  # at least one batch, so a reader progresses
        assert log.read(10, 100) == b""  # the log end
        # max_offset: only batches whose last offset is below it.
        assert log.read(0, 10**6, max_offset=4) == data[0] + data[1]
        assert log.read(0, 10**6, max_offset=7) == data[0] + data[1]
        assert log.read(0, 10**6, max_offset=8) == data[0] + data[1] + data[2]
        assert log.read(5, 10**6, max_offset=6) == b""  # the batch of 5 ends at 7
        assert log.read(5, 10**6, max_offset=5) == b""
        assert log.read(1, 10**6, max_offset=0) == b""
        assert [r.offset for r in log.read_records(5)] == [5, 6, 7, 8, 9]
        for offset, max_bytes in [(0, 1), (4, 400), (2, 10**6), (9, 1), (10, 5)]:
            s = log.read_slice(offset, max_bytes)
            assert s.read() == log.read(offset, max_bytes)
            if s.size:
                assert os.pread(s.fd, s.size, s.position) == log.read(offset, max_bytes)
                assert s.path == os.path.join(str(tmp_path), segment_name(0) + ".log")


def test_read_slice_can_be_sent_with_sendfile(tmp_path: str) -> None:
    with open_log(str(tmp_path / "log"), segment_bytes=1000) as log:
        for i in range(12):
            log.append(batch_of(2, 60, key=b"%d-" % i), 0)
        assert len(log.segment_base_offsets) > 2
        for offset in range(0, 24, 5):
            s = log.read_slice(offset, 500)
            out_path = str(tmp_path / f"out-{offset}")
            with open(out_path, "wb") as out:
                sent = os.sendfile(out.fileno(), s.fd, s.position, s.size)
            assert sent == s.size
            with open(out_path, "rb") as f:
                assert f.read() == log.read(offset, 500)
            assert batch_positions(log.read(offset, 500))  # whole, valid batches


def test_a_read_stays_within_one_segment(tmp_path: str) -> None:
    batch = batch_of(1, 100)
    with open_log(str(tmp_path), segment_bytes=2 * len(batch)) as log:
        for _ in range(6):
            log.append(batch, 0)
        assert log.segment_base_offsets == [0, 2, 4]
        assert len(batch_positions(log.read(1, 10**6))) == 1
        assert len(batch_positions(log.read(2, 10**6))) == 2


def test_reads_outside_the_log_raise_offset_out_of_range_naming_the_range(tmp_path: str) -> None:
    batch = batch_of(5, 10)
    with open_log(str(tmp_path), segment_bytes=len(batch)) as log:
        for _ in range(4):
            log.append(batch, 0)
        assert log.delete_records_before(7) == 7
        for offset in (6, 0, 21, -1):
            with pytest.raises(OffsetOutOfRangeError, match=r"valid offsets are \[7, 20\]") as e:
                log.read(offset, 100)
            assert (e.value.log_start_offset, e.value.log_end_offset) == (7, 20)
            assert f"offset {offset} is out of range" in str(e.value)
        assert [r.offset for r in log.read_records(7, 1)] == [7, 8, 9]


def test_offset_for_timestamp_across_segments(tmp_path: str) -> None:
    # Timestamps out of order within and across batches, over several segments.
    stamps = [[100, 90], [300], [150, 160, 170], [50], [400, 390], [200], [500], [450, 460]]
    records: list[Record] = []
    with open_log(str(tmp_path), segment_bytes=250, index_interval_bytes=0) as log:
        for group in stamps:
            recs = [Record(b"k", b"v" * 40, (), ts) for ts in group]
            log.append(encode_batch(recs), 0)
            base = len(records)
            records.extend(r._replace(offset=base + i) for i, r in enumerate(recs))
        assert len(log.segment_base_offsets) >= 4

        def brute(ts: int, start: int) -> tuple[int, int] | None:
            for r in records:
                if r.offset >= start and r.timestamp >= ts:
                    return r.offset, r.timestamp
            return None

        probes = sorted({t + d for group in stamps for t in group for d in (-1, 0, 1)} | {0, 999})
        for ts in probes:
            assert log.offset_for_timestamp(ts) == brute(ts, 0), ts
        log.delete_records_before(5)
        for ts in probes:
            assert log.offset_for_timestamp(ts) == brute(ts, 5), ts
        assert log.offset_for_timestamp(0) == (5, 170)
        assert log.offset_for_timestamp(501) is None


# -- bad input -----------------------------------------------------------------------------


def rehash(raw: bytearray) -> bytes:
    struct.pack_into("<Q", raw, 17, xxhash.xxh3_64_intdigest(bytes(raw[25:])))
    return bytes(raw)


def malformed(base_offset: int = 0) -> dict[str, bytes]:
    """Bad payloads; the good batches in them start at `base_offset` (for the follower path)."""
    good = encode_batch([(b"k", b"value"), (None, b"w")], base_offset=base_offset, timestamp=7)
    bad_checksum = bytearray(good)
    bad_checksum[-1] ^= 1
    too_long = bytearray(good)
    struct.pack_into("<i", too_long, 8, 10**6)
    too_short = bytearray(good)
    struct.pack_into("<i", too_short, 8, 20)
    count = bytearray(good)
    struct.pack_into("<i", count, 61, 3)  # record_count 3, last_offset_delta still 1
    count_and_delta = bytearray(good)
    struct.pack_into("<i", count_and_delta, 61, 3)
    struct.pack_into("<i", count_and_delta, 27, 2)
    magic = bytearray(good)
    magic[16] = 2
    compressed = bytearray(good)
    struct.pack_into("<h", compressed, 25, 1)
    return {
        "bad checksum": bytes(bad_checksum),
        "impossible length (too long)": bytes(too_long),
        "impossible length (too short)": bytes(too_short),
        "record count mismatch": bytes(count),
        "record count mismatch, re-hashed": rehash(count_and_delta),
        "unknown magic": bytes(magic),
        "compressed": rehash(compressed),
        "garbage": os.urandom(200),
        "empty": b"",
        "a header only": good[:65],
        "truncated": good[:-3],
        "good batch then a bad one": good + bytes(bad_checksum),
        "good batch then garbage": good + b"\x01\x02\x03",
    }


@pytest.mark.parametrize("kind", list(malformed()))
@pytest.mark.parametrize("path", ["leader", "follower"])
def test_a_malformed_batch_is_refused_and_nothing_is_appended(
    tmp_path: str, kind: str, path: str
) -> None:
    raw = malformed(base_offset=10)[kind]
    with open_log(str(tmp_path), segment_bytes=1000, index_interval_bytes=0) as log:
        for _ in range(5):
            log.append(batch_of(2, 60), 3)
        assert log.segment_base_offsets == [0, 8]
        log.flush()  # waits for the background fsync of the rolled segment and its index
        before = (log.log_end_offset, log.size_bytes, log.epoch_cache.entries())
        files = file_sizes(str(tmp_path))
        with pytest.raises(CorruptRecordError, match=r"nothing appended|empty append"):
            if path == "leader":
                log.append(raw, 4)  # a newer epoch: must not be assigned either
            else:
                log.append_as_follower(raw)
        assert (log.log_end_offset, log.size_bytes, log.epoch_cache.entries()) == before
        assert file_sizes(str(tmp_path)) == files
        info = log.append(batch_of(1, 5), 4)
        assert info.base_offset == 10
        assert log.epoch_cache.entries() == [(3, 0), (4, 10)]
    assert tools.verify(str(tmp_path)) == []


def test_corrupt_error_names_the_partition_and_the_byte(tmp_path: str) -> None:
    good = encode_batch([(b"k", b"v")])
    bad = bytearray(good)
    bad[-1] ^= 1
    with open_log(str(tmp_path / "orders-3")) as log, pytest.raises(CorruptRecordError) as e:
        log.append(good + good + bytes(bad), 0)
    assert str(e.value).startswith("orders-3: ")
    assert f"checksum mismatch in batch at byte {2 * len(good)}" in str(e.value)


def test_append_chunks_isolates_bad_chunks_and_writes_the_rest_as_one(tmp_path: str) -> None:
    """The broker's gathered appends: each chunk stands or falls alone, the good ones get
    consecutive offsets in list order, one write holds them all."""
    good1, good3 = batch_of(1, 50), batch_of(3, 50) + batch_of(2, 10)
    corrupt = bytearray(batch_of(2, 50))
    corrupt[-1] ^= 1
    too_big = batch_of(1, 900)
    chunks = [good1, bytes(corrupt), good3, b"", too_big, good1]
    with open_log(str(tmp_path / "t-0"), max_message_bytes=800) as log:
        log.append(batch_of(2, 5), 0)
        out = log.append_chunks([memoryview(c) for c in chunks], 1)
        assert [type(o).__name__ for o in out] == [
            "AppendInfo",
            "CorruptRecordError",
            "AppendInfo",
            "CorruptRecordError",
            "RecordTooLargeError",
            "AppendInfo",
        ]
        assert [
            (o.base_offset, o.last_offset, o.record_count, o.batch_count)
            for o in out
            if not isinstance(o, Exception)
        ] == [(2, 2, 1, 1), (3, 7, 5, 2), (8, 8, 1, 1)]
        assert "t-0: checksum mismatch" in str(out[1]) and "nothing appended" in str(out[1])
        assert "max_message_bytes=800" in str(out[4])
        assert log.log_end_offset == 9
        assert log.size_bytes == len(batch_of(2, 5)) + 2 * len(good1) + len(good3)
        assert log.epoch_cache.entries() == [(0, 0), (1, 2)]
        values = [(r.offset, r.value) for r in all_records(log)]
        assert [o for o, _ in values] == list(range(9))
        # Every chunk was refused: nothing written, no epoch assigned.
        assert all(
            isinstance(o, CorruptRecordError)
            for o in log.append_chunks([memoryview(bytes(corrupt)), memoryview(b"")], 2)
        )
        assert log.log_end_offset == 9 and log.epoch_cache.entries() == [(0, 0), (1, 2)]
        with pytest.raises(FencedLeaderEpochError):
            log.append_chunks([memoryview(good1)], 0)
    assert tools.verify(str(tmp_path / "t-0")) == []


def test_append_chunks_spanning_segments_are_split_between_batches(tmp_path: str) -> None:
    batch = batch_of(2, 100)
    with open_log(str(tmp_path), segment_bytes=3 * len(batch)) as log:
        out = log.append_chunks([memoryview(batch)] * 7, 0)
        assert [o.base_offset for o in out] == [0, 2, 4, 6, 8, 10, 12]  # type: ignore[union-attr]
        assert log.segment_base_offsets == [0, 6, 12]
    assert tools.verify(str(tmp_path)) == []


def test_a_batch_over_max_message_bytes_is_refused(tmp_path: str) -> None:
    small, big = batch_of(1, 100), batch_of(1, 500)
    assert len(small) <= 300 < len(big)
    with open_log(str(tmp_path), max_message_bytes=300) as log:
        log.append(small, 0)
        for payload in (big, small + big):
            with pytest.raises(RecordTooLargeError, match="max_message_bytes=300") as e:
                log.append(payload, 0)
            assert f"batch of {len(big)} bytes" in str(e.value)
            assert "nothing appended" in str(e.value)
            assert log.log_end_offset == 1
        assert log.append(small + small, 0).last_offset == 2


def test_a_follower_batch_must_continue_the_log(tmp_path: str) -> None:
    def at(base: int) -> bytes:
        return encode_batch(
            [(None, b"x"), (None, b"y")], base_offset=base, partition_leader_epoch=1
        )

    with open_log(str(tmp_path)) as log:
        log.append_as_follower(at(0))
        for payload, where in [(at(3), 0), (at(1), 0), (at(2) + at(5), len(at(2)))]:
            with pytest.raises(InvalidOffsetError, match="the log continues at") as e:
                log.append_as_follower(payload)
            assert f"at byte {where} has base offset" in str(e.value)
            assert log.log_end_offset == 2
        info = log.append_as_follower(at(2) + at(4))
        assert (info.base_offset, info.last_offset, info.batch_count) == (2, 5, 2)
        # The follower keeps the leader's epochs and assigns them in the cache.
        log.append_as_follower(
            encode_batch([(None, b"z")], base_offset=6, partition_leader_epoch=4)
        )
        assert log.epoch_cache.entries() == [(1, 0), (4, 6)]


def test_a_leader_append_with_an_older_epoch_is_fenced(tmp_path: str) -> None:
    with open_log(str(tmp_path)) as log:
        log.append(batch_of(1), 5)
        with pytest.raises(FencedLeaderEpochError, match="leader epoch 4, log is at epoch 5"):
            log.append(batch_of(1), 4)
        assert log.log_end_offset == 1
        log.append(batch_of(1), 5)
        log.append(batch_of(1), 7)
        assert log.epoch_cache.entries() == [(5, 0), (7, 2)]
        # The epoch is stamped into every batch the leader writes.
        assert struct.unpack_from("<qii", log.read(2, 1)) == (2, len(batch_of(1)) - 12, 7)


# -- truncation, flushing -----------------------------------------------------------------


def test_truncate_to_removes_the_whole_batch_holding_the_offset(tmp_path: str) -> None:
    with open_log(str(tmp_path), segment_bytes=400, recovery_point_checkpoint_ms=0) as log:
        for epoch in (1, 1, 2, 2, 3, 3):
            log.append(batch_of(3, 30), epoch)
        log.flush()
        assert log.recovery_point == 18
        assert log.truncate_to(13) == 12
        assert log.log_end_offset == 12
        assert log.epoch_cache.entries() == [(1, 0), (2, 6)]
        rp = OffsetCheckpoint(os.path.join(str(tmp_path), RECOVERY_POINT_FILE)).read()
        assert log.recovery_point == rp == 12  # truncation below it rewrites the checkpoint at once
        assert log.truncate_to(50) == 12
        log.append(batch_of(1, 7, key=b"new"), 4)
        assert [r.key for r in log.read_records(12)] == [b"new0"]
    assert tools.verify(str(tmp_path)) == []


def test_truncate_below_the_log_start_empties_the_log_there(tmp_path: str) -> None:
    with open_log(str(tmp_path), segment_bytes=400) as log:
        for _ in range(6):
            log.append(batch_of(3, 30), 1)
        log.delete_records_before(10)
        assert log.truncate_to(8) == 8
        assert (log.log_start_offset, log.log_end_offset) == (8, 8)
        assert log.segment_base_offsets == [8]
        assert log.epoch_cache.entries() == []
        log.append(batch_of(1), 2)
        assert [r.offset for r in log.read_records(8)] == [8]


def test_truncate_to_a_batch_that_begins_below_the_log_start(tmp_path: str) -> None:
    """The log start lies inside the batch being removed: the log is left empty at that batch's
    base (once left log start 5 > log end 3, and every later read out of range)."""
    with open_log(str(tmp_path)) as log:
        log.append(batch_of(3), 0)  # offsets 0-2
        log.append(batch_of(6), 0)  # offsets 3-8
        log.delete_records_before(5)
        assert log.truncate_to(6) == 3
        assert (log.log_start_offset, log.log_end_offset) == (3, 3)
        assert log.read(3, 100) == b""
        log.append(batch_of(1, key=b"x"), 0)
        assert [(r.key, r.offset) for r in log.read_records(3)] == [(b"x0", 3)]
    assert OffsetCheckpoint(os.path.join(str(tmp_path), LOG_START_FILE)).read() == 3
    with open_log(str(tmp_path)) as log:
        assert (log.log_start_offset, log.log_end_offset) == (3, 4)


def test_flush_messages_and_flush_ms_advance_the_recovery_point(tmp_path: str) -> None:
    clock = FakeClock(10_000)
    with open_log(str(tmp_path / "a"), clock, flush_messages=3) as log:
        log.append(batch_of(2), 0)
        assert log.recovery_point == 0
        log.append(batch_of(1), 0)
        assert log.recovery_point == 3
    with open_log(str(tmp_path / "b"), clock, flush_ms=500) as log:
        log.append(batch_of(2), 0)
        assert log.recovery_point == 0
        assert log.maybe_flush() is False
        clock.now_ms += 499
        assert log.maybe_flush() is False
        clock.now_ms += 1
        assert log.maybe_flush() is True
        assert log.recovery_point == 2
        assert log.maybe_flush() is False  # nothing new to flush


def test_recovery_point_checkpoint_is_written_at_most_every_interval(tmp_path: str) -> None:
    clock = FakeClock(10_000)
    path = os.path.join(str(tmp_path), RECOVERY_POINT_FILE)
    with open_log(str(tmp_path), clock, recovery_point_checkpoint_ms=1000) as log:
        log.append(batch_of(1), 0)
        log.flush()
        assert OffsetCheckpoint(path).read() == 1
        log.append(batch_of(1), 0)
        clock.now_ms += 999
        log.flush()
        assert log.recovery_point == 2
        assert OffsetCheckpoint(path).read() == 1  # lags, safely: recovery checks more
        clock.now_ms += 1
        log.flush()
        assert OffsetCheckpoint(path).read() == 2


# -- LogConfig -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("segment_bytes", 99),
        ("segment_bytes", 2**31),
        ("segment_ms", 0),
        ("index_interval_bytes", -1),
        ("retention_ms", -2),
        ("retention_bytes", -2),
        ("flush_messages", 0),
        ("flush_ms", -1),
        ("max_message_bytes", 0),
        ("max_message_bytes", 2**31),
        ("recovery_point_checkpoint_ms", -1),
    ],
)
def test_log_config_refuses_bad_values_naming_the_field(field: str, value: int) -> None:
    """By its topic config name (Kafka's dotted one), the name a user typed."""
    key = field.replace("_", ".")
    with pytest.raises(InvalidConfigError, match=f"^{key}={value}: must be"):
        LogConfig(**{field: value})  # type: ignore[arg-type]


def test_log_config_from_topic_config_accepts_kafka_names() -> None:
    config = LogConfig.from_topic_config(
        {
            "segment.bytes": "1048576",
            "segment.ms": 60000,
            "index.interval.bytes": "0",
            "retention.ms": "-1",
            "retention.bytes": "1073741824",
            "flush.messages": "1",
            "flush.ms": None,
            "max.message.bytes": "2000000",
            "recovery.point.checkpoint.ms": "10",
            # Not the log's: checked, then left out.
            "cleanup.policy": "delete",
            "compression.type": "producer",
            "unclean.leader.election.enable": "false",
            "min.insync.replicas": "2",
            "durability.policy": "fsync",
        }
    )
    assert config == LogConfig(
        segment_bytes=1048576,
        segment_ms=60000,
        index_interval_bytes=0,
        retention_ms=-1,
        retention_bytes=1073741824,
        flush_messages=1,
        flush_ms=None,
        max_message_bytes=2000000,
        recovery_point_checkpoint_ms=10,
    )
    assert LogConfig.from_topic_config({}) == LogConfig()
    assert LogConfig.from_topic_config({"flush.ms": ""}).flush_ms is None


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"segment.bytes": "big"}, "segment.bytes='big': must be an integer"),
        ({"retention.ms": "1.5"}, "retention.ms='1.5': must be an integer"),
        ({"segment.bytes": "50"}, "segment.bytes=50: must be between 100"),
        ({"retention.ms": "-5"}, "retention.ms=-5: must be >= -1"),
        ({"foo": "bar"}, "unknown topic config 'foo'; the known ones are cleanup.policy, "),
        ({"retention.msx": "1"}, "unknown topic config 'retention.msx' (did you mean "),
        ({"retention_ms": "1"}, "unknown topic config 'retention_ms' (did you mean 'retention"),
        ({"cleanup.policy": "compact,"}, "cleanup.policy='compact,': must be delete, compact or"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio=1.5: must be between"),
        ({"min.cleanable.dirty.ratio": "half"}, "min.cleanable.dirty.ratio='half': must be a num"),
        ({"compression.type": "zstd"}, "compression.type='zstd': not supported; only 'producer'"),
        ({"compression.type": "brotli"}, "compression.type='brotli': must be one of Kafka's"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas=0: must be >= 1"),
        ({"min.insync.replicas": "two"}, "min.insync.replicas='two': must be an integer"),
        ({"durability.policy": "always"}, "durability.policy='always': must be 'replication'"),
        (
            {"unclean.leader.election.enable": "yes"},
            "unclean.leader.election.enable='yes': must be true or false",
        ),
        ({"segment.bytes": ""}, "segment.bytes='': must be an integer"),
        ({"retention.ms": None}, "retention.ms=None: must be an integer"),
    ],
)
def test_log_config_from_topic_config_refuses_bad_values(
    config: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidConfigError) as e:
        LogConfig.from_topic_config(config)
    assert str(e.value).startswith(message)


def test_log_config_not_strict_ignores_unknown_keys_but_checks_values() -> None:
    """Opening the log of a topic created before unknown keys were refused."""
    assert LogConfig.from_topic_config({"foo": "bar"}, strict=False) == LogConfig()
    with pytest.raises(InvalidConfigError, match=r"^retention\.ms=-5"):
        LogConfig.from_topic_config({"foo": "bar", "retention.ms": "-5"}, strict=False)
