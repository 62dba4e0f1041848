"""retention.expired_segments on its own: which prefix of closed segments goes."""

from __future__ import annotations

from dataclasses import dataclass

from raftlog.storage.retention import expired_segments


@dataclass
class Seg:
    size: int
    next_offset: int
    max_timestamp: int


# Four segments of 100 bytes, 10 offsets each, newest record at 1000, 2000, 3000, 4000.
SEGS = [Seg(100, 10 * (i + 1), 1000 * (i + 1)) for i in range(4)]


def test_nothing_goes_without_limits_and_never_the_active_segment() -> None:
    assert expired_segments(SEGS, 0, 10_000, -1, -1, None) == 0
    assert expired_segments(SEGS, 0, 10**9, 0, 0, None) == 3


def test_time_and_size_limits_take_a_prefix() -> None:
    assert expired_segments(SEGS, 0, 3500, 2000, -1, None) == 1  # 1000 is older than 2000 ms
    assert expired_segments(SEGS, 0, 0, -1, 250, None) == 1  # 300 bytes are left, >= 250
    assert expired_segments(SEGS, 0, 0, -1, 200, None) == 2
    old_middle = [SEGS[0], Seg(100, 20, 0), *SEGS[2:]]
    assert expired_segments(old_middle, 0, 1500, 1000, -1, None) == 0  # the first one stays


def test_below_the_log_start_goes_and_the_high_watermark_holds_back() -> None:
    assert expired_segments(SEGS, 20, 0, -1, -1, None) == 2
    assert expired_segments(SEGS, 0, 10**9, 0, -1, 20) == 2
    assert expired_segments(SEGS, 0, 10**9, 0, -1, 19) == 1
