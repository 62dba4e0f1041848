"""The log cleaner's pure rules (storage/cleaner.py): what is cleanable, when a log is due, the
dirty ratio, how segments group, the offset map's bound, the I/O budget; and the rolls a
compacted log makes so that quiet data becomes cleanable."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

import raftlog.storage.cleaner as cleaner
from raftlog.invariants import InvariantError
from raftlog.records import Record, encode_batch
from raftlog.storage import LogConfig, PartitionLog
from raftlog.storage.cleaner import (
    OffsetMap,
    SegmentView,
    Throttle,
    dirty_ratio,
    groups_of,
    uncleanable_from,
)

NOW = 1_000_000


def test_the_range_stops_at_the_active_segment_the_high_watermark_and_the_lag() -> None:
    closed = [(0, 10, 100), (10, 20, 200), (20, 30, 300)]
    assert uncleanable_from(closed, 30, 30, NOW, 0) == 30  # every closed segment
    assert uncleanable_from(closed, 30, 25, NOW, 0) == 20  # the last ends past the HW
    assert uncleanable_from(closed, 30, 10, NOW, 0) == 10
    assert uncleanable_from(closed, 30, 5, NOW, 0) == 0  # nothing is committed
    # min.compaction.lag.ms: segment 10 holds a record younger than NOW - lag.
    assert uncleanable_from(closed, 30, 30, NOW, NOW - 150) == 10
    assert uncleanable_from(closed, 30, 30, NOW, NOW - 350) == 30
    assert uncleanable_from([], 0, 100, NOW, 0) == 0  # only an active segment


def test_the_dirty_ratio_is_the_dirty_share_of_the_range() -> None:
    sizes = [(0, 100), (10, 100), (20, 200)]
    assert dirty_ratio(sizes, 0) == 1.0
    assert dirty_ratio(sizes, 10) == 0.75
    assert dirty_ratio(sizes, 20) == 0.5
    assert dirty_ratio(sizes, 30) == 0.0
    assert dirty_ratio([], 0) == 0.0


def view(base: int, end: int, size: int) -> SegmentView:
    return SegmentView(base, end, size, -1, 0)


def test_segments_group_while_their_old_sizes_fit_one_segment() -> None:
    segs = [view(0, 10, 400), view(10, 20, 300), view(20, 30, 400), view(30, 40, 900)]
    assert [[s.base for s in g] for g in groups_of(segs, 40, 1000)] == [[0, 10], [20], [30]]
    assert [[s.base for s in g] for g in groups_of(segs, 20, 1000)] == [[0, 10]]
    assert [[s.base for s in g] for g in groups_of(segs, 40, 100)] == [[0], [10], [20], [30]]
    # Never a group spanning 2^31 offsets (the index's relative offsets are int32).
    wide = [view(0, 2**31 - 1, 10), view(2**31 - 1, 2**31 + 5, 10)]
    assert [[s.base for s in g] for g in groups_of(wide, 2**31 + 5, 1000)] == [[0], [2**31 - 1]]


def test_the_offset_map_holds_at_most_its_keys_and_keeps_the_last_offset() -> None:
    m = OffsetMap(3)
    for offset, key in enumerate([b"a", b"b", b"a"]):
        m.put(key, offset)
    assert (m.latest(b"a"), m.latest(b"b"), m.latest(b"c")) == (2, 1, -1)
    assert m.new_keys([b"a", b"c", b"c", b"d"]) == 2
    assert m.room_for(1) and not m.room_for(2)
    with pytest.raises(InvariantError):
        OffsetMap(0)


def test_the_throttle_keeps_bytes_under_its_rate() -> None:
    throttle = Throttle(1_000_000)
    start = time.monotonic()
    for _ in range(10):
        throttle.spend(20_000)  # 200 kB at 1 MB/s: at least 0.2 s
    assert time.monotonic() - start >= 0.19
    free = Throttle(0)
    start = time.monotonic()
    free.spend(10**12)
    assert time.monotonic() - start < 0.1


def compacted_log(path: Path, clock: list[int], **config: str) -> PartitionLog:
    cfg = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0", **config}
    return PartitionLog.open(str(path), LogConfig.from_topic_config(cfg), lambda: clock[0])


def test_a_quiet_compacted_log_rolls_by_segment_ms_and_becomes_cleanable(tmp_path: Path) -> None:
    clock = [NOW]
    log = compacted_log(tmp_path / "t-0", clock, **{"segment.ms": "1000"})
    try:
        log.append(encode_batch([Record(b"k", b"v1", (), NOW), Record(b"k", b"v2", (), NOW)]), 0)
        assert log.plan_clean(log.log_end_offset) is None  # all of it in the active segment
        assert log.segment_count == 1
        clock[0] += 1001
        plan = log.plan_clean(log.log_end_offset)
        assert log.segment_count == 2 and plan is not None
        assert [s.base for s in plan.segments] == [0] and plan.end == 2
        plan.close()
    finally:
        log.close()


def test_max_compaction_lag_rolls_and_forces_a_clean_below_the_dirty_ratio(
    tmp_path: Path,
) -> None:
    clock = [NOW]
    config = {"min.cleanable.dirty.ratio": "0.99", "max.compaction.lag.ms": "5000"}
    log = compacted_log(tmp_path / "t-0", clock, **config)
    try:
        for i in range(3):
            log.append(encode_batch([Record(b"k", b"%d" % i, (), NOW)]), 0)
        clock[0] += 5001
        plan = log.plan_clean(log.log_end_offset)  # rolled by the lag, due by the lag
        assert plan is not None and plan.end == 3
        plan.close()
    finally:
        log.close()


def test_min_compaction_lag_keeps_young_records_out_of_the_clean(tmp_path: Path) -> None:
    clock = [NOW]
    config = {"min.compaction.lag.ms": "10000", "segment.bytes": "100"}
    log = compacted_log(tmp_path / "t-0", clock, **config)
    try:
        for i in range(4):
            log.append(encode_batch([Record(b"k", b"value %d" % i, (), NOW)]), 0)
        assert log.segment_count >= 3
        assert log.plan_clean(log.log_end_offset) is None  # every record is younger
        clock[0] += 10_001
        plan = log.plan_clean(log.log_end_offset)
        assert plan is not None and plan.end == log.segment_base_offsets[-1]
        plan.close()
    finally:
        log.close()


def test_a_delete_policy_log_is_never_planned(tmp_path: Path) -> None:
    log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=100))
    try:
        for i in range(4):
            log.append(encode_batch([Record(b"k", b"value %d" % i, (), NOW)]), 0)
        assert log.segment_count >= 3 and log.plan_clean(log.log_end_offset) is None
    finally:
        log.close()


def test_the_scrubber_starts_a_swapped_segment_from_its_first_byte(tmp_path: Path) -> None:
    """The scrubber remembers (segment base, byte position); a clean swaps a new file in under
    the same base, so a position in the old file would land mid-batch in the new one and take
    the log offline as damaged (found by bench/cleaner_bench.py)."""
    clock = [NOW]
    log = compacted_log(tmp_path / "t-0", clock, **{"segment.bytes": "400000"})
    rng = random.Random(1)
    try:
        for _ in range(1500):
            keys = [b"k%d" % rng.randrange(10_000) for _ in range(10)]
            log.append(encode_batch([Record(k, b"v" * 100, (), NOW) for k in keys]), 0)
        assert log.segment_count > 3
        # One chunk (SCRUB_CHUNK_BYTES): the scrubber stops part-way into the first segment,
        # at a byte the cleaned segment (most keys kept) still reaches.
        assert 0 < log.scrub(1) < 150_000
        plan = log.plan_clean(log.log_end_offset)
        assert plan is not None
        assert log.install_clean(cleaner.run(plan, 100_000, 0))
        log.scrub(10**9)  # raised LogCorruptedError ("unknown magic") before the fix
        assert log.offline_error is None
    finally:
        log.close()
