"""A partition log holds raftlog's batches (magic 1) and Kafka's record batch v2 (magic 2) side
by side, each stored as sent: leader and follower appends, stamping, recovery of a torn or
flipped v2 tail, index rebuild, idempotent producers, the scrubber and the offline tools.

v2 batches come from two sources: our encoder (records_v2.encode_batch_v2) and kafka-python's
DefaultRecordBatchBuilder, an independent implementation of Kafka's format."""

from __future__ import annotations

import io
import os
import shutil
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from raftlog.errors import (
    CorruptRecordError,
    InvalidRequestError,
    LogCorruptedError,
    OutOfOrderSequenceError,
)
from raftlog.records import Record, encode_batch, iter_batches, validate_batch
from raftlog.records_v2 import crc32c, encode_batch_v2
from raftlog.storage import LogConfig, PartitionLog, tools
from raftlog.storage.segment import segment_name

from ._helpers import FakeClock, captured_logs, stamped

CONFIG = LogConfig(segment_bytes=2000, index_interval_bytes=200)


def v1(n: int, ts: int = 1000, tag: bytes = b"a") -> bytes:
    return encode_batch([Record(None, tag * 30 + b"%d" % i, (), ts + i) for i in range(n)])


def v2(n: int, ts: int = 1000, tag: bytes = b"b", **kw: int) -> bytes:
    return encode_batch_v2([Record(None, tag * 30 + b"%d" % i, (), ts + i) for i in range(n)], **kw)


def kafka_python(n: int, ts: int = 1000, producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    """A v2 batch built by kafka-python: keys, values and a header, as its producer sends."""
    pid, epoch, seq = producer
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 20,
    )
    for i in range(n):
        b.append(i, timestamp=ts + i, key=b"k%d" % i, value=b"kp" * 20, headers=[("h", b"x")])
    return bytes(b.build())


def seg_path(root: str, base: int) -> str:
    return os.path.join(root, segment_name(base) + ".log")


def crash_after(path: str, flushed: bytes, tail: bytes) -> tuple[str, str, int]:
    """Append `flushed` and flush, append `tail`, then crash: the files as they are then are
    copied (the tail above the recovery point) and the log closed. Returns the copy's path,
    its last segment file and that file's size."""
    log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    log.append(flushed, 1)
    log.flush()
    log.append(tail, 1)
    copy = path + "-crashed"
    shutil.copytree(path, copy)
    last = seg_path(copy, log.segment_base_offsets[-1])
    log.close()
    return copy, last, os.path.getsize(last)


def flip(path: str, position: int, mask: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ mask]))


def all_bytes(log: PartitionLog) -> bytes:
    """Every batch of `log`: reads return one segment's batches at a time."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 30)
        out.append(data)
        *_, (_, last) = iter_batches(data)
        offset = last.next_offset
    return b"".join(out)


def mixed_log(path: str) -> tuple[PartitionLog, list[bytes]]:
    """A log of alternating v1, our v2 and kafka-python's v2 batches over several segments;
    returns it (open) and the stamped bytes of every batch, in order."""
    log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    written = []
    for i in range(24):
        raw = (v1, v2, kafka_python)[i % 3](1 + i % 4, 1000 + 10 * i)
        epoch = 1 + i // 8
        info = log.append(raw, epoch)
        written.append(stamped(raw, info.base_offset, epoch))
    return log, written


def test_mixed_batches_are_stored_as_sent_and_stamped_in_their_own_byte_order(
    tmp_path: str,
) -> None:
    path = str(tmp_path / "t-0")
    log, written = mixed_log(path)
    assert len(log.segment_base_offsets) > 2
    data = all_bytes(log)
    assert data == b"".join(written)
    offset = 0
    for pos, h in iter_batches(data):  # validates every batch: CRC and checksum intact
        assert h.base_offset == offset
        offset = h.next_offset
        if h.magic == 2:
            # Kafka's own reader agrees on the stamped offset and epoch, and the CRC.
            kb = DefaultRecordBatch(data[pos : pos + h.size])
            assert kb.validate_crc()
            assert kb.base_offset == h.base_offset
            assert [r.offset for r in kb] == list(range(h.base_offset, h.next_offset))
    assert offset == log.log_end_offset
    assert [e[0] for e in log.epoch_cache.entries()] == [1, 2, 3]
    log.close()
    # Reopened (a clean shutdown: trusted, headers walked) and with every index deleted
    # (rebuilt from the batch headers of both formats).
    with PartitionLog.open(path, CONFIG, clock_ms=FakeClock()) as log:
        assert all_bytes(log) == b"".join(written)
        for b in log.segment_base_offsets:
            os.unlink(seg_path(path, b)[: -len(".log")] + ".index")
    with PartitionLog.open(path, CONFIG, clock_ms=FakeClock()) as log:
        assert all_bytes(log) == b"".join(written)
        # Every batch can be found by its offsets through the rebuilt index.
        offset = 0
        for raw in written:
            h = validate_batch(raw)
            assert log.read(h.last_offset, 1) == raw
            offset = h.next_offset
    assert tools.verify(path) == []


def test_a_follower_appends_the_leaders_mixed_batches(tmp_path: str) -> None:
    leader, written = mixed_log(str(tmp_path / "leader"))
    with PartitionLog.open(str(tmp_path / "follower"), CONFIG, clock_ms=FakeClock()) as follower:
        while follower.log_end_offset < leader.log_end_offset:
            follower.append_as_follower(leader.read(follower.log_end_offset, 700))
        assert all_bytes(follower) == b"".join(written)
        assert follower.epoch_cache.entries() == leader.epoch_cache.entries()
    leader.close()


def test_a_torn_v2_tail_is_cut_at_the_batch_start(tmp_path: str) -> None:
    # A crash: the unflushed v2 batch is torn in its records.
    path, last, size = crash_after(str(tmp_path / "t-0"), v1(2), v2(3))
    v2_start = size - len(v2(3))
    os.truncate(last, v2_start + 70)
    with captured_logs() as logged:
        log = PartitionLog.open(path, CONFIG, clock_ms=FakeClock())
    assert any("recovery truncated" in line and f"at byte {v2_start}" in line for line in logged)
    assert log.log_end_offset == 2
    info = log.append(v2(1), 1)  # the log goes on
    assert info.base_offset == 2
    log.close()
    assert tools.verify(path) == []


def test_a_flipped_bit_in_a_v2_batch_is_caught_by_its_crc(tmp_path: str) -> None:
    raw = bytearray(stamped(v2(3), 0, 0))
    raw[-5] ^= 0x04
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        validate_batch(raw)
    # In a log: recovery cuts the damaged tail at that batch; verify names it first.
    path, last, size = crash_after(str(tmp_path / "t-0"), v1(2), kafka_python(3))
    flip(last, size - 3, 0x10)
    problems = tools.verify(path)
    assert len(problems) == 1 and "CRC-32C" in problems[0], problems
    with PartitionLog.open(path, CONFIG, clock_ms=FakeClock()) as log:
        assert log.log_end_offset == 2


def test_the_scrubber_finds_a_flipped_byte_in_a_closed_v2_batch(tmp_path: str) -> None:
    path = str(tmp_path / "t-0")
    log, _ = mixed_log(path)
    bases = log.segment_base_offsets
    with open(seg_path(path, bases[0]), "rb") as f:
        data = f.read()
    positions = [(p, h) for p, h in iter_batches(data) if h.magic == 2]
    pos, h = positions[-1]
    flip(seg_path(path, bases[0]), pos + h.size - 2, 0xFF)
    with pytest.raises(LogCorruptedError) as raised:
        for _ in range(100):
            log.scrub(4096)
    assert f"byte {pos}" in str(raised.value) and "CRC-32C" in str(raised.value)
    log.close()


def test_an_unknown_magic_is_damage_the_tools_and_recovery_name(tmp_path: str) -> None:
    path, last, size = crash_after(str(tmp_path / "t-0"), v2(2), v1(2))
    flip(last, size - len(v1(2)) + 16, 0x06)  # magic 1 -> 7
    problems = tools.verify(path)
    assert len(problems) == 1 and "unknown magic 7" in problems[0], problems
    with PartitionLog.open(path, CONFIG, clock_ms=FakeClock()) as log:
        assert log.log_end_offset == 2


@pytest.mark.parametrize("source", ["ours", "kafka-python"])
def test_idempotent_v2_batches_are_deduplicated(tmp_path: str, source: str) -> None:
    def idem(seq: int, n: int = 2, epoch: int = 0) -> bytes:
        if source == "ours":
            return v2(n, producer_id=7, producer_epoch=epoch, base_sequence=seq)
        return kafka_python(n, producer=(7, epoch, seq))

    with PartitionLog.open(str(tmp_path), CONFIG, clock_ms=FakeClock()) as log:
        infos = [log.append_chunks([memoryview(idem(s))], 0)[0] for s in (0, 2)]
        assert [i.base_offset for i in infos] == [0, 2]  # type: ignore[union-attr]
        (again,) = log.append_chunks([memoryview(idem(0))], 0)  # a retry: its offsets
        assert (again.base_offset, again.last_offset) == (0, 1)  # type: ignore[union-attr]
        (gap,) = log.append_chunks([memoryview(idem(9))], 0)
        assert isinstance(gap, OutOfOrderSequenceError)
        assert log.log_end_offset == 4


def test_dump_shows_both_formats(tmp_path: str) -> None:
    path = str(tmp_path / "t-0")
    log, _ = mixed_log(path)
    end = log.log_end_offset
    log.append(v2(2, 5000, b"z", compression=3), 3)  # lz4
    log.close()
    out = io.StringIO()
    assert tools.dump(path, out) == 0
    text = out.getvalue()
    assert "magic: 1" in text and "magic: 2" in text
    (line,) = [x for x in text.splitlines() if "baseOffset: 1 " in x]  # the first v2 batch
    (crc,) = struct.unpack_from(">I", v2(2, 1010), 17)
    assert "magic: 2" in line and f"checksum: {crc:#010x}" in line
    out = io.StringIO()
    assert tools.dump(path, out, records=True) == 0
    z = "z" * 30
    assert f"| offset: {end + 1} timestamp: 5001 key: null value: {z}1\n" in out.getvalue()


def test_lookups_by_time_read_both_formats(tmp_path: str) -> None:
    """The time index takes each batch's max timestamp from its header; the lookup then
    decodes the batch's records, of either format (v2 ones by their timestamp deltas)."""
    with PartitionLog.open(str(tmp_path), CONFIG, clock_ms=FakeClock()) as log:
        for i in range(30):
            raw = (v1, v2, kafka_python)[i % 3](3, 1000 + 10 * i)
            log.append(raw, 1)
        for i in range(30):
            for j in range(3):
                assert log.offset_for_timestamp(1000 + 10 * i + j) == (3 * i + j, 1000 + 10 * i + j)
            if i < 29:  # between two batches: the next batch's first record
                assert log.offset_for_timestamp(1000 + 10 * i + 3) == (3 * i + 3, 1010 + 10 * i)
        assert log.offset_for_timestamp(2000) is None
        assert [r.offset for r in log.read_records(0, 1 << 20)][:9] == list(range(9))


@pytest.mark.parametrize("bit", [0x10, 0x20], ids=["transactional", "control"])
def test_a_leader_refuses_transactional_and_control_batches(tmp_path: str, bit: int) -> None:
    raw = bytearray(v2(2))
    raw[22] |= bit  # the low byte of the attributes
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    with PartitionLog.open(str(tmp_path), CONFIG, clock_ms=FakeClock()) as log:
        (refused, fine) = log.append_chunks([memoryview(raw), memoryview(v2(1))], 0)
        assert isinstance(refused, InvalidRequestError)
        assert "no transactions" in str(refused)
        assert fine.base_offset == 0  # type: ignore[union-attr]
        assert log.log_end_offset == 1
