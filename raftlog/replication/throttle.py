"""`ReplicationThrottle`: the bytes per second a broker may fetch for the replicas it is adding.

A reassignment (KIP-455) copies whole partitions onto their new brokers. Unbounded, that copy
competes with producers and in-sync followers for the leaders' disks and the network, as in
Kafka, where `kafka-reassign-partitions --throttle` caps it. Here the cap is one rate for the
cluster, kept in the metadata with the reassignments (`raftlog partitions reassign --execute
--throttle`), applied by each broker to its fetches of the partitions it is adding: a joining
replica fetches only while this bucket is not in debt. The in-sync followers are never slowed.

Rules:
- A token bucket in bytes that refills at `rate` per second and holds at most one second of
  it. A fetch may overdraw it (a fetch's size is known only once answered); the throttled
  partitions then wait `delay_ms`, the time the debt takes to repay, so over any stretch
  longer than a second the bytes fetched stay within the rate, plus one fetch.
- Each throttled partition asks for at most a tenth of a second's worth per fetch
  (`fetch_bytes`, at least `MIN_FETCH_BYTES`), so one fetch never overdraws by much.
- `rate` 0 turns it off: nothing is throttled and nothing is counted.
- Pure: the caller passes the clock.
"""

from __future__ import annotations

# The least a throttled partition asks for per fetch: a record batch larger than this is still
# fetched whole (a fetch always returns at least one batch), this only keeps fetches of a very
# low rate from being tiny.
MIN_FETCH_BYTES = 16 * 1024


class ReplicationThrottle:
    __slots__ = ("_at_ms", "_balance", "rate")

    def __init__(self, rate: int = 0) -> None:
        if rate < 0:
            raise ValueError(f"replication throttle {rate}: bytes per second must be >= 0")
        self.rate = rate
        self._balance = 0.0
        self._at_ms = 0

    def set_rate(self, rate: int, now_ms: int) -> bool:
        """Change the rate (0: off); True if it changed."""
        if rate < 0:
            raise ValueError(f"replication throttle {rate}: bytes per second must be >= 0")
        if rate == self.rate:
            return False
        self._refill(now_ms)
        self.rate = rate
        self._balance = min(self._balance, float(rate))
        if rate == 0:
            self._balance = 0.0
        return True

    def _refill(self, now_ms: int) -> None:
        if self.rate and now_ms > self._at_ms:
            self._balance = min(
                self._balance + self.rate * (now_ms - self._at_ms) / 1000, float(self.rate)
            )
        self._at_ms = max(self._at_ms, now_ms)

    def record(self, nbytes: int, now_ms: int) -> None:
        """`nbytes` of throttled partitions were fetched."""
        if not self.rate or nbytes <= 0:
            return
        self._refill(now_ms)
        self._balance -= nbytes

    def delay_ms(self, now_ms: int) -> int:
        """How long throttled partitions must wait before their next fetch (0: go now)."""
        if not self.rate:
            return 0
        self._refill(now_ms)
        if self._balance >= 0:
            return 0
        return int(-self._balance * 1000 // self.rate) + 1

    def fetch_bytes(self, max_bytes: int) -> int:
        """What a throttled partition asks for per fetch, given the unthrottled `max_bytes`."""
        if not self.rate:
            return max_bytes
        return min(max_bytes, max(self.rate // 10, MIN_FETCH_BYTES))
