"""Every reader moves through the gaps a compacted log has (offsets without records).

The three kinds, all in one log (LOG): whole batches removed (offsets 3-9 and 27-29), a
cleaned v2 batch with holes (10-19 keeps 10, 13, 15: its trailing offsets are gone too; 30-32
keeps only 31), and v2 batches without records (20-24, and 33-34 at the log's end). A reader
must hand out each kept record once, and end at the log's end offset (35), not refetch a gap.

The consumer's fetch buffer (fetched.FetchBuffer, what AsyncConsumer polls from) and the
range reader (reader.AsyncRangeReader, what the Spark source reads with) are driven on their
real code paths; only the broker is a stand-in: `fetch` answers from LOG as the leader's
read does (the batches that end past the fetch offset, whole, up to a byte limit, the last
one maybe cut off by it).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator

import crc32c
import pytest

from raftlog.client.fetched import ConsumerRecord, FetchBuffer, Fetched, cut_off, decode_fetch
from raftlog.client.reader import AsyncRangeReader, DataLossError, RangeChunk, plan_step
from raftlog.errors import CorruptRecordError
from raftlog.records import Record, encode_batch, iter_batches, read_header
from raftlog.records_v2 import CONTROL_BIT, CRC_FROM, KeptOffsets, encode_batch_v2
from raftlog.topics import TopicPartition

TP = TopicPartition("compacted", 0)
TS = 1_764_000_000_000


def own(base: int, count: int) -> bytes:
    """A raftlog (magic 1) batch of `count` records from `base`: never gapped inside."""
    return encode_batch([(b"k%d" % (base + i), b"v%d" % (base + i)) for i in range(count)], base)


def cleaned(base: int, last_offset_delta: int, kept: list[int]) -> bytes:
    """A v2 batch the cleaner rewrote: offsets [base, base + delta], records at `kept` only."""
    records = [Record(b"k%d" % o, b"v%d" % o, (), TS + o, o) for o in kept]
    return encode_batch_v2(
        records, base_offset=base, kept=KeptOffsets(last_offset_delta, TS, TS + 100)
    )


LOG = [
    own(0, 3),  # 0-2; then 3-9 removed whole
    cleaned(10, 9, [10, 13, 15]),  # 10-19: holes, trailing ones included
    cleaned(20, 4, []),  # 20-24: no records
    own(25, 2),  # 25-26; then 27-29 removed whole
    cleaned(30, 2, [31]),  # 30-32: a leading and a trailing hole
    cleaned(33, 1, []),  # 33-34: no records, at the log's end
]
KEPT = [0, 1, 2, 10, 13, 15, 25, 26, 31]
LOG_END = 35
NEXT_OFFSETS = [read_header(b).next_offset for b in LOG]


def fetch(offset: int, max_bytes: int = 1 << 20, log: list[bytes] = LOG) -> bytes:
    """The leader's answer to a fetch at `offset`: the batches ending past it, the first one
    whole whatever `max_bytes` says, the rest up to `max_bytes` (the last one maybe cut)."""
    out = b""
    for batch in log:
        if read_header(batch).next_offset <= offset:
            continue
        if out and len(out) + len(batch) > max_bytes:
            return out + batch[: max_bytes - len(out)]
        out += batch
    return out


def offsets(records: list[ConsumerRecord]) -> list[int]:
    return [r.offset for r in records]


# -- decode_fetch -------------------------------------------------------------------------------


def test_runs_carry_the_position_past_compacted_offsets() -> None:
    runs = list(decode_fetch(TP, fetch(0), 0))
    # The empty batches fold into the run before them: B's run ends at 25, E's at 35.
    assert [(offsets(r.records), r.next_offset) for r in runs] == [
        ([0, 1, 2], 3),
        ([10, 13, 15], 25),
        ([25, 26], 27),
        ([31], 35),
    ]
    assert [r.value for run in runs for r in run.records] == [b"v%d" % o for o in KEPT]


def test_a_fetch_inside_a_batch_with_holes_drops_by_offset_not_by_index() -> None:
    # From 12: 10 is dropped, 13 and 15 kept (an index-based cut would keep only 15).
    (first, *_) = decode_fetch(TP, fetch(12), 12)
    assert first == Fetched(first.records, 25) and offsets(first.records) == [13, 15]
    (first, *_) = decode_fetch(TP, fetch(14), 14)
    assert offsets(first.records) == [15]


@pytest.mark.parametrize(
    ("start", "chunk", "position"),
    [
        (16, LOG[1] + LOG[2], 25),  # past B's last record: B's trailing holes, then C
        (20, LOG[2], 25),  # an empty batch alone
        (33, LOG[5], 35),  # the empty batch at the log's end (61 bytes: not a cut-off)
        (32, LOG[4] + LOG[5], 35),  # past E's only record
    ],
)
def test_a_fetch_without_records_still_moves_the_position(
    start: int, chunk: bytes, position: int
) -> None:
    assert list(decode_fetch(TP, chunk, start)) == [Fetched([], position)]
    assert FetchBuffer().add(TP, chunk, start) == position


def test_a_bare_v2_header_is_a_whole_batch_and_one_byte_less_a_cut_off_one() -> None:
    empty = LOG[5]
    assert len(empty) == 61
    assert not cut_off(empty, 0, 61)
    assert cut_off(empty[:60], 0, 60)
    assert list(decode_fetch(TP, empty[:60], 33)) == []  # the next fetch brings it whole


def test_a_control_batch_at_the_end_is_passed_too() -> None:
    marker = bytearray(cleaned(35, 0, [35]))
    marker[21:23] = CONTROL_BIT.to_bytes(2, "big")
    marker[17:21] = crc32c.crc32c(bytes(marker[CRC_FROM:])).to_bytes(4, "big")
    assert list(decode_fetch(TP, bytes(marker), 35)) == [Fetched([], 36)]
    runs = list(decode_fetch(TP, LOG[4] + bytes(marker), 30))
    assert [(offsets(r.records), r.next_offset) for r in runs] == [([31], 36)]


def test_record_offsets_that_go_back_in_a_cleaned_batch_are_corrupt() -> None:
    bad = encode_batch_v2(
        [Record(None, b"a", (), TS, 14), Record(None, b"b", (), TS, 12)],
        base_offset=10,
        kept=KeptOffsets(9, TS, TS),
    )
    runs = decode_fetch(TP, LOG[0] + bad, 0)
    assert next(runs) == Fetched(next(decode_fetch(TP, LOG[0], 0)).records, 3)
    with pytest.raises(CorruptRecordError, match=r"compacted-0.*offset 3.*record offset 12"):
        next(runs)


# -- the consumer's buffer: a consumer's loop, position by position -----------------------------


def consume(max_bytes: int, limit: int) -> tuple[list[int], list[int]]:
    """A consumer's fetch-and-poll loop over LOG: (offsets handed out, positions after each
    fetch or poll), as AsyncConsumer runs it: fetch only while nothing is buffered."""
    buffer = FetchBuffer()
    position = 0
    handed: list[int] = []
    positions: list[int] = []
    for _ in range(100):
        if position == LOG_END:
            return handed, positions
        if not buffer:
            skip_to = buffer.add(TP, fetch(position, max_bytes), position)
            if skip_to is not None:
                assert skip_to > position
                position = skip_to
                positions.append(position)
                continue
        out, moved = buffer.take(limit)
        assert set(out) == set(moved) == {TP}
        handed += offsets(out[TP])
        assert moved[TP] > handed[-1]
        position = moved[TP]
        positions.append(position)
    raise AssertionError(f"stuck at position {position}")


@pytest.mark.parametrize("max_bytes", [1, 100, 200, 1 << 20])
@pytest.mark.parametrize("limit", [1, 2, 500])
def test_a_consumer_hands_out_every_kept_record_once_and_ends_at_the_log_end(
    max_bytes: int, limit: int
) -> None:
    handed, positions = consume(max_bytes, limit)
    assert handed == KEPT
    assert positions[-1] == LOG_END
    assert positions == sorted(positions)
    # Whole runs end at their batches' next offsets (past the holes and empty batches).
    if limit == 500 and max_bytes == 1 << 20:
        assert positions == [LOG_END]  # one fetch, one poll: the last run's next offset
    if limit == 500 and max_bytes == 1:
        assert positions == [3, 20, 25, 27, 33, 35]  # a fetch per batch, as it ends
    if limit == 1 and max_bytes == 1:
        # One batch and one record at a time: a record cut from its run moves the position
        # just past it; B's last record moves it to B's next offset (past its trailing
        # holes), E's likewise; the empty batches C and F alone move it at once.
        assert positions == [1, 2, 3, 11, 14, 20, 25, 26, 27, 33, 35]


def test_a_cut_run_resumes_after_its_last_record_handed_out() -> None:
    buffer = FetchBuffer()
    assert buffer.add(TP, fetch(10), 10) is None
    out, moved = buffer.take(2)
    assert offsets(out[TP]) == [10, 13] and moved == {TP: 14}
    out, moved = buffer.take(1)
    assert offsets(out[TP]) == [15] and moved == {TP: 25}
    buffer.drop(lambda tp: tp == TP)
    assert not buffer


# -- the range reader ----------------------------------------------------------------------------


class StandInReader(AsyncRangeReader):
    """The range reader with LOG as its leader (only the network calls are replaced)."""

    def __init__(
        self, log: list[bytes], log_start: int, high_watermark: int, fetch_bytes: int
    ) -> None:
        super().__init__("127.0.0.1:1", request_timeout_ms=1000, partition_fetch_bytes=fetch_bytes)
        self.log, self.log_start, self.hw = log, log_start, high_watermark
        self.reported_log_start = log_start
        self.asked_log_start = 0

    async def _fetch_once(
        self, tp: TopicPartition, offset: int, max_wait_ms: int
    ) -> tuple[memoryview, int, int]:
        data = fetch(offset, self.partition_fetch_bytes, self.log)
        return memoryview(data), self.hw, self.reported_log_start

    async def _log_start(self, tp: TopicPartition) -> int:
        self.asked_log_start += 1
        return self.log_start


def read(
    start: int,
    end: int,
    fail: bool = True,
    log: list[bytes] = LOG,
    log_start: int = 0,
    hw: int = LOG_END,
    fetch_bytes: int = 1 << 20,
    reader: StandInReader | None = None,
) -> list[RangeChunk]:
    async def go() -> list[RangeChunk]:
        r = reader or StandInReader(log, log_start, hw, fetch_bytes)
        try:
            chunks: AsyncIterator[RangeChunk] = r.read_range(TP, start, end, fail)
            return [c async for c in chunks]
        finally:
            await r.close()

    return asyncio.run(go())


def records_of(chunks: list[RangeChunk]) -> list[int]:
    return [r.offset for c in chunks for r in c.records()]


@pytest.mark.parametrize("fetch_bytes", [1, 150, 1 << 20])
def test_a_range_reads_every_kept_record_and_no_gap_is_data_loss(fetch_bytes: int) -> None:
    chunks = read(0, LOG_END, fetch_bytes=fetch_bytes)
    assert records_of(chunks) == KEPT
    # The chunks cover the range without overlap: each begins where the one before ended
    # (in a gap, maybe), the last ends at the range's end.
    assert chunks[0].start == 0 and chunks[-1].end == LOG_END
    for a, b in itertools.pairwise(chunks):
        assert b.start == a.end


@pytest.mark.parametrize(
    ("start", "end", "kept"),
    [
        (3, 8, []),  # inside the removed batches
        (0, 5, [0, 1, 2]),  # ends in that gap
        (16, 25, []),  # B's trailing holes and the empty C: a chunk without records
        (11, 14, [13]),  # no record at either end
        (14, 31, [15, 25, 26]),  # ends on a hole
        (27, 33, [31]),
        (33, LOG_END, []),  # the empty batch at the end
        (0, 1, [0]),
    ],
)
def test_ranges_that_start_or_end_in_a_gap_complete(start: int, end: int, kept: list[int]) -> None:
    for fetch_bytes in (1, 1 << 20):
        chunks = read(start, end, fetch_bytes=fetch_bytes)
        assert records_of(chunks) == kept
        assert all(start <= c.start < c.end <= end for c in chunks)


def test_a_gap_below_the_log_start_is_data_loss_and_above_it_compaction(
    caplog: pytest.LogCaptureFixture,
) -> None:
    retained = LOG[1:]  # retention deleted offsets 0-9; the log starts at 5 (say, DeleteRecords)
    with pytest.raises(DataLossError) as lost:
        read(0, LOG_END, log=retained, log_start=5)
    assert (lost.value.missing_start, lost.value.missing_end) == (0, 5)
    with caplog.at_level(logging.WARNING, "raftlog.client.reader"):
        chunks = read(0, LOG_END, fail=False, log=retained, log_start=5)
    assert records_of(chunks) == KEPT[3:]
    assert [r.getMessage() for r in caplog.records] == [
        "data loss in compacted-0: skipping offsets [0, 5) that are no longer available "
        "(the log start moved to 5)"
    ]
    # From the log start on, the same gap is compaction: no loss.
    assert records_of(read(5, LOG_END, log=retained, log_start=5)) == KEPT[3:]


def test_a_response_without_the_log_start_asks_for_it_only_at_a_gap() -> None:
    reader = StandInReader(LOG, 0, LOG_END, 1 << 20)
    reader.reported_log_start = -1
    assert records_of(read(0, LOG_END, reader=reader)) == KEPT
    assert reader.asked_log_start == 0  # every fetch began with a batch holding its offset
    reader = StandInReader(LOG, 0, LOG_END, 1 << 20)
    reader.reported_log_start = -1
    assert records_of(read(3, LOG_END, reader=reader)) == KEPT[3:]
    assert reader.asked_log_start == 1


def test_a_compacted_tail_below_the_high_watermark_ends_the_range() -> None:
    # Offsets 35-39 were committed, then compacted away (tombstones removed): no batch there.
    chunks = read(33, 40, hw=40)
    assert [(c.start, c.end) for c in chunks] == [(33, 35)] and records_of(chunks) == []
    assert read(35, 40, hw=40) == []


def test_overlapping_batches_are_corrupt_not_a_gap() -> None:
    overlapping = [own(0, 3), own(2, 3)]
    data = overlapping[0] + overlapping[1]
    with pytest.raises(CorruptRecordError, match="batch at offset 2 overlaps the one ending at 3"):
        plan_step(TP, data, list(iter_batches(data)), 0, 10, 10, 0)
    with pytest.raises(CorruptRecordError, match="overlaps"):
        read(0, 5, log=overlapping)


def test_plan_step_splits_a_gap_at_the_log_start() -> None:
    data = LOG[3]  # 25-26
    batches = list(iter_batches(data))
    step = plan_step(TP, data, batches, 10, 40, 40, 20)
    assert step.lost == (10, 20)
    assert step.chunk is not None and (step.chunk.start, step.chunk.end) == (10, 27)
    assert step.next_offset == 27
    assert plan_step(TP, data, batches, 10, 22, 40, 20).lost == (10, 20)
    assert plan_step(TP, data, batches, 10, 22, 40, 20).chunk is None  # ends in the gap
    assert plan_step(TP, data, batches, 21, 40, 40, 20).lost is None
    # Nothing fetched: below the log start is loss, above it a compacted tail or a wait.
    assert plan_step(TP, b"", [], 10, 40, 40, 20).lost == (10, 20)
    assert plan_step(TP, b"", [], 30, 40, 40, 20).next_offset == 40
    assert plan_step(TP, b"", [], 30, 40, 35, 20).wait
