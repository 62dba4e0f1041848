"""Event counters a broker keeps for its metrics: plain ints on the event loop.

The hot paths (a connection answering a request, a produce group's append, a fetch response
going out) count here with a few integer additions per request or per append, never per
record: an `AppendInfo` already says how many records and bytes an append took, a fetch
response how many bytes of each topic it carries. prometheus_client's own Counter and
Histogram take a lock and walk their buckets in Python on every call (0.8 us an `observe()`,
2.0 us with its `labels(...)` lookup, measured here; `RequestStats.observe` 0.2 us), against a
produce request's ~11 us of broker CPU, so
they are not called there; the collectors (collectors.py) turn these ints into Prometheus
counter and histogram families at scrape time, on the same loop, so nothing is shared between
threads and nothing needs a lock.

Rules: only the event loop that owns the broker touches these objects; every label value comes
from a bounded set (API names of a fixed table, listener names, topics that exist).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Any

# Request latency buckets (seconds, upper bounds; +Inf is implied). Kafka's TotalTimeMs spans
# tens of microseconds (a produce answered from the page cache) to a long poll's max_wait_ms
# (500 ms by default) and a produce's timeout (30 s): a bucket per 2-2.5x step.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
# The label value of an API key no table names (a client sending garbage): one series for all.
UNKNOWN_API = "unknown"


class RequestStats:
    """One API on one listener: requests answered, those answered with an error, and their
    time from arrival to answer (Kafka's RequestsPerSec, ErrorsPerSec, TotalTimeMs).

    Invariant: sum(buckets) == count; errors <= count."""

    __slots__ = ("buckets", "count", "errors", "sum_s")

    def __init__(self) -> None:
        self.count = 0
        self.errors = 0
        self.sum_s = 0.0
        # buckets[i]: answers that took at most LATENCY_BUCKETS_S[i] (not cumulative); the
        # last one counts those above every bound.
        self.buckets = [0] * (len(LATENCY_BUCKETS_S) + 1)

    def observe(self, seconds: float, error: bool) -> None:
        self.count += 1
        self.sum_s += seconds
        self.buckets[bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        if error:
            self.errors += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, count) pairs as a Prometheus histogram states them, +Inf last."""
        out = []
        total = 0
        for bound, n in zip((*LATENCY_BUCKETS_S, float("inf")), self.buckets, strict=True):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), total))
        return out


class RequestTable(dict[int, RequestStats]):
    """A listener's RequestStats by API key, made on first use. A key `name_of` does not
    know shares one entry (UNKNOWN_API) that is never stored under the key: a client sending
    random API keys cannot grow the table."""

    def __init__(self, name_of: Callable[[int], str | None]):
        super().__init__()
        self.name_of = name_of
        self.names: dict[int, str] = {}
        self.unknown = RequestStats()

    def __missing__(self, api_key: int) -> RequestStats:
        name = self.name_of(api_key)
        if name is None:
            return self.unknown
        stats = self[api_key] = RequestStats()
        self.names[api_key] = name
        return stats

    def by_name(self) -> Iterable[tuple[str, RequestStats]]:
        for key, stats in self.items():
            yield self.names[key], stats
        if self.unknown.count:
            yield UNKNOWN_API, self.unknown


class TopicTraffic:
    """Bytes and records appended as leader, and bytes sent to consumers, per topic (Kafka's
    BrokerTopicMetrics BytesInPerSec, MessagesInPerSec, BytesOutPerSec); bytes sent to
    followers in all (ReplicationBytesOutPerSec). Topics are those this broker appended to or
    read from as leader, so they existed; `forget` drops deleted ones."""

    __slots__ = ("bytes_in", "bytes_out", "records_in", "replication_bytes_out")

    def __init__(self) -> None:
        self.bytes_in: dict[str, int] = {}
        self.records_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        self.replication_bytes_out = 0

    def appended(self, topic: str, size_bytes: int, records: int) -> None:
        """One partition's append of a produce group (any number of requests)."""
        bytes_in = self.bytes_in
        bytes_in[topic] = bytes_in.get(topic, 0) + size_bytes
        records_in = self.records_in
        records_in[topic] = records_in.get(topic, 0) + records

    def sent(self, fetched: tuple[bool, list[tuple[str, int]]]) -> None:
        """A fetch response went out: (to a follower, [(topic, bytes), ...])."""
        replica, parts = fetched
        if replica:
            self.replication_bytes_out += sum(n for _, n in parts)
            return
        out = self.bytes_out
        for topic, n in parts:
            out[topic] = out.get(topic, 0) + n

    def forget(self, keep: Callable[[str], bool]) -> None:
        """Drop the counters of topics `keep` refuses (deleted ones)."""
        for table in (self.bytes_in, self.records_in, self.bytes_out):
            for topic in [t for t in table if not keep(t)]:
                del table[topic]


class BrokerStats:
    """Every event counter of one broker. `enabled` False (no metrics listener, or a
    benchmark's baseline): the hot paths skip their counting altogether."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.traffic = TopicTraffic()
        # Listener name -> its requests; made by `requests`.
        self.listeners: dict[str, RequestTable] = {}
        # ISR changes this broker's leaders made (Kafka's IsrShrinksPerSec, IsrExpandsPerSec).
        self.isr_shrinks = 0
        self.isr_expands = 0
        # The scrubber's bytes checked; the cleaner's cleans and their bytes and records.
        self.scrubbed_bytes = 0
        self.cleans = 0
        self.clean_failures = 0
        self.cleaned_bytes_read = 0
        self.cleaned_bytes_written = 0
        self.cleaned_records_read = 0
        self.cleaned_records_kept = 0
        self.last_clean_s = 0.0
        self.last_clean_end_unix_s = 0.0

    def requests(self, listener: str, name_of: Callable[[int], str | None]) -> RequestTable:
        """The request table of `listener` (one per listener name, whatever its protocol)."""
        table = self.listeners.get(listener)
        if table is None:
            table = self.listeners[listener] = RequestTable(name_of)
        return table

    def cleaned(self, result: Any, now_unix_s: float) -> None:
        """A clean was installed (`result`: storage/cleaner.py's CleanResult)."""
        self.cleans += 1
        self.cleaned_bytes_read += result.bytes_read
        self.cleaned_bytes_written += result.bytes_written
        self.cleaned_records_read += result.records_read
        self.cleaned_records_kept += result.records_kept
        self.last_clean_s = result.seconds
        self.last_clean_end_unix_s = now_unix_s

    def isr_changed(self, before: int, after: int) -> None:
        if after < before:
            self.isr_shrinks += 1
        elif after > before:
            self.isr_expands += 1


def camel_case(name: str) -> str:
    """An API enum name as Kafka spells its request names: LIST_OFFSETS -> ListOffsets."""
    return "".join(word.capitalize() for word in name.split("_"))
