"""The replication throttle's token bucket (raftlog/replication/throttle.py), with a fake
clock: the bytes it lets through over time stay within the rate, a fetch may overdraw it and
then waits the debt out, and rate 0 throttles nothing."""

from __future__ import annotations

import pytest

from raftlog.replication.throttle import MIN_FETCH_BYTES, ReplicationThrottle


def test_off_throttles_nothing() -> None:
    t = ReplicationThrottle()
    t.record(10**9, 0)
    assert t.delay_ms(0) == 0 and t.fetch_bytes(1 << 20) == 1 << 20


def test_a_fetch_overdraws_and_waits_the_debt_out() -> None:
    t = ReplicationThrottle()
    assert t.set_rate(1_000_000, 0) and not t.set_rate(1_000_000, 0)
    assert t.delay_ms(0) == 0  # the first fetch goes at once
    t.record(500_000, 0)
    assert t.delay_ms(0) == 501  # half a second of debt
    assert t.delay_ms(250) == 251
    assert t.delay_ms(501) == 0


def test_the_bytes_let_through_stay_within_the_rate() -> None:
    """A fetcher that fetches whenever allowed, 100 KB at a time, for 20 s of fake time."""
    rate = 1_000_000
    t = ReplicationThrottle(rate)
    now, fetched = 0, 0
    while now < 20_000:
        wait = t.delay_ms(now)
        if wait:
            now += wait
            continue
        t.record(t.fetch_bytes(1 << 20), now)
        fetched += t.fetch_bytes(1 << 20)
        now += 1  # a fast network: one millisecond per fetch
    # The rate over 20 s, plus at most one second's burst and one fetch's overdraft.
    assert 20 * rate <= fetched <= 21 * rate + rate // 10, fetched


def test_fetch_size_is_a_tenth_of_a_second_and_the_burst_one_second() -> None:
    t = ReplicationThrottle(50_000)
    assert t.fetch_bytes(1 << 20) == MIN_FETCH_BYTES  # a tenth would be tiny
    t.set_rate(100_000_000, 0)
    assert t.fetch_bytes(1 << 20) == 1 << 20  # never more than unthrottled
    t.set_rate(1_000_000, 0)
    # A long idle stretch banks at most one second.
    assert t.delay_ms(60_000) == 0
    t.record(2_000_000, 60_000)
    assert t.delay_ms(60_000) == 1001
    t.set_rate(0, 60_000)
    assert t.delay_ms(60_000) == 0


def test_a_negative_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        ReplicationThrottle(-1)
    with pytest.raises(ValueError, match="must be >= 0"):
        ReplicationThrottle().set_rate(-5, 0)
