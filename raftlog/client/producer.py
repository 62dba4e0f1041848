"""Producers: `AsyncProducer` for asyncio code and `Producer` for threads, with Kafka's options.

How it works: `send` picks a partition (the given one; else the key's xxhash; else the topic's
sticky partition, which moves on after about `batch_size` bytes, at a batch boundary, however
its batches left: KIP-794's uniform sticky partitioner, client/partitioner.py), appends the
record to that partition's open batch in the accumulator, and returns a `RecordFuture`. A
sender task drains batches that are full (`batch_size`), old enough (`linger_ms`) or flushed,
groups them by partition leader and sends one Produce request per broker with every ready
batch, keeping at most `max_in_flight_requests_per_connection` requests outstanding per broker.
One result object per batch completes all of its records' futures (Kafka's
ProduceRequestResult), so completing a 1000-record batch costs one call, not 1000.

Delivery: a retriable error (leader moved, lost connection, timeout, a broker's full disk)
refreshes metadata and re-queues the batch at the head of its partition (logged at WARNING once
per partition per RETRY_WARNING_INTERVAL_S), until `retries` or `delivery_timeout_ms` runs
out; then the error reaches every future of the batch. A batch that expires says how many
attempts it had and the last error they met, so a broker's StorageError reaches the
application as itself, not as a bare timeout. Every future completes by its delivery timeout
plus EXPIRY_GRACE_S, whatever the broker or the sender does.

`send` checks every field of a record before it is queued (TypeError or ValueError naming
the field and the topic): bytes-like value and key, (str, bytes) headers, an int timestamp
in 0..2^63-1. A record the sender cannot encode would otherwise fail far from its caller.

Idempotence (`enable_idempotence`, on by default with acks=all, as in Kafka 3.0): the producer
gets a producer id and epoch (InitProducerId) before its first send, and stamps each batch, when
it is first sent, with them and its partition's next sequence number; the partition leader
appends each sequence once (storage/producer_state.py), so a retry after a lost response, a
timeout or a leader change never duplicates a record. Order per partition, with up to 5 requests
in flight: a request carries at most one batch per partition; a partition whose batch failed
sends nothing more until its batches in flight are answered, then resends in sequence order
(`_Batch.order`). Until a partition has acknowledged a batch of the current epoch, it has one
batch in flight: a partition that knows nothing of the producer appends its first batch at any
sequence (storage/producer_state.py), so a second batch sent beside a first that is refused (the
leader did not host the partition yet) would be appended ahead of it, and the first could then
never be appended under its sequence. OutOfOrderSequenceError for a batch that an earlier
unanswered batch of its partition precedes is retried like any retriable error. When the
sequence space of a partition gets a hole (a batch with a sequence failed or expired, or the
leader answers OutOfOrderSequence for the first unacknowledged batch: it lost the producer's
state, or for a batch behind one it acknowledged: it started the producer's sequences after that
batch), the producer bumps its epoch (Kafka's KIP-360): it stops sending, waits for every batch
in flight, then starts epoch + 1 (a new producer id past int16) with every queued batch
restamped from sequence 0, except a batch whose outcome is unknown: one of its sends was written
and no answer proved it was not appended (a lost connection, a timeout, NotLeaderOrFollower or
NotEnoughReplicasAfterAppend after an acks=all wait, a storage error: anything but
REFUSED_BEFORE_APPEND). It may be in the log under its old sequence, and restamped it would be
appended again: it fails with OutOfOrderSequenceError saying its outcome is unknown (Kafka never
changes the sequence of a batch that was sent, for this reason). InvalidProducerEpochError fails
the batch. DuplicateSequenceError (Kafka's client counts it as delivered) is never trusted: a
raftlog broker does not answer it, since a batch behind the window a partition keeps may never
have been appended; it fails the batch like any other non-retriable error. Configuration: acks
other than all, or more than 5 requests in flight, with `enable_idempotence=True` is an
InvalidConfigError; with idempotence left to its default they turn it off with a warning.

Without idempotence, with retries and more than one request in flight, a retried batch may land
after a later one, or twice (at-least-once, as in Kafka without idempotence).

`Producer` runs the same core on an event loop in a background thread; `send` from any thread
only touches the accumulator under a lock and wakes the sender when a batch becomes ready.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import concurrent.futures
import contextlib
import functools
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

import xxhash

from raftlog import protocol
from raftlog.client.cluster import ClusterClient
from raftlog.client.connection import BrokerConnection
from raftlog.client.partitioner import Stint, UniformStickyPartitioner
from raftlog.errors import (
    BrokerNotAvailableError,
    CorruptRecordError,
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidRequestError,
    NotEnoughReplicasError,
    OutOfOrderSequenceError,
    RaftlogError,
    RaftlogTimeoutError,
    RecordTooLargeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    error_from_code,
)
from raftlog.invariants import InvariantError
from raftlog.metadata.model import TopicInfo
from raftlog.records import HEADER_SIZE, BatchBuilder, with_producer
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes | None]]

_time_ns = time.time_ns
# A sender pass writes its requests in writes of this many: the broker starts on the first
# ones while the rest are being built, instead of the two taking turns at idling.
REQUESTS_PER_WRITE = 64
# The sync Producer's send() hands the GIL to the sender thread after this many one-record
# batches (see Producer.send). Measured with one record per request: 43-59k rec/s without,
# 64-75k with. Only one-record batches count: there the sender's work per record (a request
# each) exceeds send()'s and the sender is the thread that must not starve; with batches of
# 50, yielding every 8 batches cost 25% (354k vs 470-499k rec/s).
YIELD_EVERY_BATCHES = 64
# A batch's sender expires it at its delivery timeout; a waiter (result(), await) still
# waiting this long after it expires the batch itself: a stuck or dead sender must not block
# the application forever. Long enough that a busy but healthy sender always comes first.
EXPIRY_GRACE_S = 1.0
# A topic's retries are logged at WARNING at most once per this interval (DEBUG otherwise),
# with the count of the retries since the last line: per partition, a 10,000-partition topic
# whose leaders were not ready yet logged 10,000 lines.
RETRY_WARNING_INTERVAL_S = 10.0


# Idempotence: Kafka's bound on requests in flight per connection that still keeps order (the
# broker keeps the last 5 batches of each producer per partition: NUM_BATCHES_TO_RETAIN).
IDEMPOTENT_IN_FLIGHT_MAX = 5
SEQUENCE_MODULUS = 2**31  # sequences are int32 >= 0, wrapping to 0
PRODUCER_EPOCH_MAX = 2**15 - 1  # int16: past it the producer asks for a new producer id


def _seq_behind(seq: int, other: int) -> bool:
    """`seq` comes before `other` in the wrapping sequence space (within half of it)."""
    return 0 < (other - seq) % SEQUENCE_MODULUS < SEQUENCE_MODULUS // 2


# A broker answers these to a Produce only for a batch it did not append. Any other error of a
# written request (a lost connection, a timeout, NotLeaderOrFollower or
# NotEnoughReplicasAfterAppend after an acks=all wait, a storage error) leaves the outcome
# unknown: the records may be in the log.
REFUSED_BEFORE_APPEND: tuple[type[RaftlogError], ...] = (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRequestError,
    NotEnoughReplicasError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,  # the broker hosts no such partition: nothing to append to
)

# Room left for a Produce request's header when several batches are grouped under a broker's
# request_bytes_max: the header lists each partition with its topic (249 bytes at most) and
# two integers, so this holds about 250 partitions of the longest names.
REQUEST_HEADER_BYTES_ROOM = 64 * 1024
# A record's encoded size must fit the batch's 32-bit length fields (with the batch header).
RECORD_BYTES_MAX = 2**31 - 1 - HEADER_SIZE
# Record timestamps are int64 milliseconds since the epoch, never negative (as in Kafka).
TIMESTAMP_MS_MAX = 2**63 - 1


def _checked_bytes(v: Any, what: str, topic: str) -> bytes | None:
    if v is None or type(v) is bytes:
        return v
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v)  # a copy: later changes to the caller's buffer cannot reach the batch
    raise TypeError(
        f"the {what} of a record for topic {topic!r} must be bytes (or bytearray, memoryview) "
        f"or None, not {type(v).__name__}"
    )


def _checked_record(
    topic: Any,
    value: Any,
    key: Any,
    headers: Any,
    partition: Any,
    timestamp_ms: Any,
) -> tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]:
    """Check a record's fields before it enters a batch (TypeError / ValueError naming the
    field and the topic); returns value, key and headers as the batch encodes them. A field
    the batch cannot encode would otherwise fail on the sender, long after send() returned."""
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, not {type(topic).__name__}")
    value = _checked_bytes(value, "value", topic)
    key = _checked_bytes(key, "key", topic)
    if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
        raise TypeError(
            f"partition of a record for topic {topic!r} must be an int or None, "
            f"not {type(partition).__name__}"
        )
    if timestamp_ms is not None:
        if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool):
            raise TypeError(
                f"timestamp_ms of a record for topic {topic!r} must be an int (ms since the "
                f"epoch) or None, not {type(timestamp_ms).__name__}"
            )
        if not 0 <= timestamp_ms <= TIMESTAMP_MS_MAX:
            raise ValueError(
                f"timestamp_ms={timestamp_ms} of a record for topic {topic!r} is out of range: "
                f"it must be in 0..{TIMESTAMP_MS_MAX} (ms since the epoch)"
            )
    if not headers:
        return value, key, ()
    if not isinstance(headers, list | tuple):
        raise TypeError(
            f"headers of a record for topic {topic!r} must be a list of (str, bytes | None) "
            f"pairs, not {type(headers).__name__}"
        )
    checked = []
    for item in headers:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise TypeError(
                f"headers of a record for topic {topic!r} must be (str, bytes | None) pairs, "
                f"not {item!r}"
            )
        hkey, hvalue = item
        if not isinstance(hkey, str):
            raise TypeError(
                f"a header key of a record for topic {topic!r} must be a str, "
                f"not {type(hkey).__name__}"
            )
        try:
            hkey.encode()
        except UnicodeEncodeError as e:
            raise ValueError(
                f"header key {hkey!r} of a record for topic {topic!r} is not valid UTF-8: {e}"
            ) from None
        checked.append((hkey, _checked_bytes(hvalue, f"header {hkey!r} value", topic)))
    return value, key, tuple(checked)


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


def default_partitioner(key: bytes, partitions: int) -> int:
    """Kafka hashes keys with murmur2; we use xxhash (xxh3_64), the project's one hash."""
    return xxhash.xxh3_64_intdigest(key) % partitions


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092"
    client_id: str = "raftlog-producer"
    # "all"/-1: the broker answers when the batch is committed; 1: after the leader's append;
    # 0: no answer at all (fire and forget; offsets are -1).
    acks: int | str = "all"
    # Wait up to this long for more records before sending a non-full batch.
    linger_ms: int = 5
    # Target batch size in bytes (Kafka's default is 16 KiB; bigger batches cost a little
    # latency and buy a lot of throughput here).
    batch_size: int = 64 * 1024
    # Largest Produce request (Kafka's max.request.size is 1 MiB).
    max_request_size: int = 1024 * 1024
    compression_type: str | None = None
    # None: on, unless acks or max_in_flight_requests_per_connection rule it out (then off,
    # with a warning); True: on, and those settings are refused; False: off.
    enable_idempotence: bool | None = None
    retries: int = 2**31 - 1
    # Between tries of a batch: retry_backoff_ms, doubling per failed try up to
    # retry_backoff_max_ms, with 20% of jitter (Kafka's KIP-580): clients retrying against a
    # broker that is still opening 10,000 new partitions must not keep it busy refusing them.
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    max_in_flight_requests_per_connection: int = 5
    # How long send() may block (metadata, a full buffer) before raising.
    max_block_ms: int = 60_000
    # Records buffered across all partitions before send() blocks (bounds client memory).
    buffer_memory: int = 32 * 1024 * 1024
    partitioner: Callable[[bytes, int], int] = default_partitioner

    def __post_init__(self) -> None:
        if self.acks not in ("all", -1, 0, 1, "0", "1", "-1"):
            raise InvalidConfigError(f"acks={self.acks!r}: must be 'all', -1, 0 or 1")
        if self.compression_type not in (None, "none"):
            raise InvalidConfigError(
                f"compression_type={self.compression_type!r}: only 'none' is supported so far"
            )
        for name in ("linger_ms", "retry_backoff_ms", "retry_backoff_max_ms"):
            if getattr(self, name) < 0:
                raise InvalidConfigError(f"{name}={getattr(self, name)}: must be >= 0")
        for name in (
            "batch_size",
            "max_request_size",
            "delivery_timeout_ms",
            "request_timeout_ms",
            "max_in_flight_requests_per_connection",
            "buffer_memory",
        ):
            if getattr(self, name) < 1:
                raise InvalidConfigError(f"{name}={getattr(self, name)}: must be >= 1")
        conflicts = []
        if self.acks_code != -1:
            conflicts.append(f"acks={self.acks!r} (it needs acks='all')")
        if self.max_in_flight_requests_per_connection > IDEMPOTENT_IN_FLIGHT_MAX:
            conflicts.append(
                f"max_in_flight_requests_per_connection="
                f"{self.max_in_flight_requests_per_connection} (it needs at most "
                f"{IDEMPOTENT_IN_FLIGHT_MAX})"
            )
        if self.enable_idempotence is None:
            if conflicts:
                log.warning(
                    "idempotence is off for this producer because of %s; set "
                    "enable_idempotence=False to say so, or change them",
                    " and ".join(conflicts),
                )
            object.__setattr__(self, "enable_idempotence", not conflicts)
        elif self.enable_idempotence and conflicts:
            raise InvalidConfigError(
                "enable_idempotence=True conflicts with " + " and ".join(conflicts)
            )

    @property
    def acks_code(self) -> int:
        return -1 if self.acks in ("all", -1, "-1") else int(self.acks)


class BatchResult:
    """The outcome of one batch, shared by the futures of its records. Thread-safe.

    The first completion wins: a batch expired by its delivery timeout (by the sender, or by a
    waiter when the sender is stuck) keeps that outcome when a late answer arrives.

    The threading.Event that blocking waiters sleep on is made by the first `wait` that has to
    block: most batches complete before anyone waits (or nobody ever waits), and an Event
    costs more to build than the rest of a one-record batch.
    """

    __slots__ = (
        "_callbacks",
        "_done",
        "_event",
        "base_offset",
        "deadline",
        "error",
        "topic_partition",
    )

    def __init__(self, tp: TopicPartition):
        self.topic_partition = tp
        self.base_offset = -1
        self.error: BaseException | None = None
        # time.monotonic() by which the batch must be complete (_Batch: its delivery timeout).
        self.deadline = math.inf
        self._done = False
        self._event: threading.Event | None = None
        self._callbacks: list[Callable[[], None]] | None = None  # made by the first add

    def done(self) -> bool:
        return self._done

    def complete(self, base_offset: int, error: BaseException | None = None) -> bool:
        """Set the outcome, wake the waiters, run the callbacks; False (and nothing done) if
        the batch was already complete."""
        # `_done` is set under the lock before `_event` is read, and `wait` stores `_event`
        # under it before it reads `_done`: whichever runs second sees the other's write, so
        # no waiter sleeps forever; and of two completions only the first gets past it.
        with _EVENT_LOCK:
            if self._done:
                return False
            self.base_offset = base_offset
            self.error = error
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
        event = self._event
        if event is not None:
            event.set()
        if callbacks:
            for cb in callbacks:
                try:
                    cb()
                except Exception:
                    # The application's callback: its failure is its own, and must not stop
                    # the sender (which runs it) or the other records' callbacks.
                    log.exception("a callback of a record sent to %s raised", self.topic_partition)
        return True

    def expire(self, error: RaftlogError) -> bool:
        """Complete with `error` unless complete already (from any thread)."""
        return BatchResult.complete(self, -1, error)

    def overdue_error(self) -> RaftlogError:
        """The error of a batch still not complete `EXPIRY_GRACE_S` after its deadline."""
        return RaftlogTimeoutError(f"record batch for {self.topic_partition} was not completed")

    def add_callback(self, cb: Callable[[], None]) -> None:
        # complete() sets `_done` and takes the list under the same lock: a callback is
        # either in the list it takes or sees `_done` and runs here; never both.
        with _EVENT_LOCK:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(cb)
                return
        cb()

    def wait(self, timeout: float | None) -> bool:
        if self._done:
            return True
        with _EVENT_LOCK:
            event = self._event
            if event is None:
                event = self._event = threading.Event()
        if self._done:
            return True
        return event.wait(timeout)

    def wait_bounded(self, timeout: float | None) -> bool:
        """`wait`, but never past the deadline plus EXPIRY_GRACE_S: a batch still not complete
        then is expired here, so a stuck or dead sender cannot block a waiter forever."""
        if self._done:
            return True
        bound = self.deadline + EXPIRY_GRACE_S - time.monotonic()
        if timeout is not None and timeout < bound:
            return self.wait(timeout)
        if not self.wait(max(bound, 0.0)):
            self.expire(self.overdue_error())
        return True


# Guards BatchResult's lazily made event and callback list (cheap: once per batch at most).
_EVENT_LOCK = threading.Lock()


class RecordFuture:
    """The future of one sent record: `result()` / `get()`, `await`, callbacks.

    Every wait ends by the batch's delivery timeout plus EXPIRY_GRACE_S, with or without a
    `timeout`: the sender expires a batch at its deadline, and a waiter expires it itself if
    the sender has not by then (a stuck or dead sender).
    """

    __slots__ = ("_batch", "_index", "_timestamp")

    def __init__(self, batch: BatchResult, index: int, timestamp: int):
        self._batch, self._index, self._timestamp = batch, index, timestamp

    def done(self) -> bool:
        return self._batch.done()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        if not self._batch.wait_bounded(timeout):
            raise RaftlogTimeoutError(f"record not acknowledged within {timeout} s")
        if self._batch.error is not None:
            raise self._batch.error
        tp = self._batch.topic_partition
        base = self._batch.base_offset
        return RecordMetadata(
            tp.topic, tp.partition, base + self._index if base >= 0 else -1, self._timestamp
        )

    get = result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._batch.wait_bounded(timeout):
            raise RaftlogTimeoutError(f"record not acknowledged within {timeout} s")
        return self._batch.error

    def add_done_callback(self, fn: Callable[[RecordFuture], Any]) -> None:
        self._batch.add_callback(lambda: fn(self))

    def __await__(self) -> Any:
        batch = self._batch
        if not batch.done():
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[None] = loop.create_future()

            def wake() -> None:
                if not loop.is_closed():
                    loop.call_soon_threadsafe(_resolve, waiter)

            batch.add_callback(wake)
            bound = batch.deadline + EXPIRY_GRACE_S - time.monotonic()
            timer = None if bound == math.inf else loop.call_later(bound, _resolve, waiter)
            try:
                yield from waiter.__await__()
            finally:
                if timer is not None:
                    timer.cancel()
            if not batch.done():
                batch.expire(batch.overdue_error())
        return self.result(0)


# Records of one batch queued by one call: (batch, index of the first, how many, timestamp).
Span = tuple["BatchResult", int, int, int]


class RecordFutures(Sequence[RecordFuture]):
    """The futures of one `send_many` call, in send order, made only when asked for.

    A sequence of RecordFuture (index it, iterate it) plus whole-call waits: `result()` gives
    every record's RecordMetadata or raises the first failed batch's error, and awaiting it
    does the same. It holds one (batch, first index, count) span per batch the records went
    to, not an object per record: the per-record future was most of send_many's CPU.
    """

    __slots__ = ("_spans", "_starts")

    def __init__(self, spans: list[Span]):
        self._spans = spans
        starts, total = [], 0
        for _, _, count, _ in spans:
            starts.append(total)
            total += count
        starts.append(total)
        self._starts = starts

    def __len__(self) -> int:
        return self._starts[-1]

    @overload
    def __getitem__(self, i: int) -> RecordFuture: ...
    @overload
    def __getitem__(self, i: slice) -> list[RecordFuture]: ...
    def __getitem__(self, i: int | slice) -> RecordFuture | list[RecordFuture]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"record {i} of {n}")
        span = bisect.bisect_right(self._starts, i) - 1
        batch, first, _, ts = self._spans[span]
        return RecordFuture(batch, first + i - self._starts[span], ts)

    def done(self) -> bool:
        return all(batch.done() for batch, _, _, _ in self._spans)

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        """Every record's metadata, in send order; the first failed batch's error otherwise.
        `timeout` bounds the whole wait (None: until each batch's delivery timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out: list[RecordMetadata] = []
        for batch, first, count, ts in self._spans:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            head = RecordFuture(batch, first, ts).result(left)
            base = head.offset - first if head.offset >= 0 else None
            out += [
                head._replace(offset=base + k if base is not None else -1)
                for k in range(first, first + count)
            ]
        return out

    def __await__(self) -> Any:
        for batch, first, _, ts in self._spans:
            yield from RecordFuture(batch, first, ts).__await__()
        return self.result(0)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def retry_backoff_s(config: ProducerConfig, attempts: int) -> float:
    """The wait before a batch's next try after `attempts` failed ones: retry_backoff_ms
    doubling up to retry_backoff_max_ms, then +-20% (KIP-580), so that many clients that
    failed together do not retry together."""
    base = config.retry_backoff_ms * (1 << min(max(attempts - 1, 0), 30))
    ms = min(base, max(config.retry_backoff_max_ms, config.retry_backoff_ms))
    return ms * random.uniform(0.8, 1.2) / 1000


class _Batch(BatchResult):
    """A batch in the accumulator and in flight; it is also the BatchResult its records'
    futures share (one object per batch, not two: batches live long enough to cost the
    garbage collector per object). Completing it drops the builder, so a future kept after
    its record was sent does not keep the record's bytes alive."""

    __slots__ = (
        "attempts",
        "builder",
        "created",
        "in_flight",
        "last_error",
        "order",
        "outcome_unknown",
        "producer_epoch",
        "retry_at",
        "sealed",
        "sequence",
        "sticky_bytes",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        now: float,
        delivery_timeout_s: float,
        builder: BatchBuilder | None = None,
    ):
        BatchResult.__init__(self, tp)
        self.tp = tp
        self.builder = BatchBuilder() if builder is None else builder
        self.created = now
        self.deadline = now + delivery_timeout_s
        self.attempts = 0  # sends that failed (and were retried, or failed the batch)
        self.last_error: BaseException | None = None  # of the last failed send
        self.in_flight = False  # a request holding it is on a connection
        self.sealed = False  # full, drained or expired: it takes no more records
        self.retry_at = 0.0  # a retried batch is not sent again before this (its backoff)
        # Bytes send()'s fast path appended to it as its topic's open sticky batch and that
        # the topic's stint has not counted yet (a slot is cheaper there than the stint's dict).
        self.sticky_bytes = 0
        # Idempotence: the base sequence and epoch it was stamped with at its first send (-1:
        # not yet, or reset by an epoch bump), and its place in the partition's send order.
        self.sequence = -1
        self.producer_epoch = -1
        self.order = -1
        # A send of it was written and no answer proved it was not appended (see
        # REFUSED_BEFORE_APPEND): it may be in the log under its sequence, which therefore
        # must not change (an epoch bump fails it instead of restamping it).
        self.outcome_unknown = False

    def complete(self, base_offset: int, error: BaseException | None = None) -> bool:
        """On the sender's thread only (it drops the builder, which the sender reads); a
        batch already expired keeps its outcome and loses its builder here."""
        won = BatchResult.complete(self, base_offset, error)
        self.sealed = True
        self.builder = _COMPLETED_BUILDER
        return won

    def expire(self, error: RaftlogError) -> bool:
        # From any thread: the builder stays (the sender may be reading it); no more records.
        self.sealed = True
        return BatchResult.complete(self, -1, error)

    def expiry_error(self, what: str, after: str = "") -> RaftlogTimeoutError:
        """The error of a batch past its delivery timeout: how many sends it had, what did
        not happen in time, and what the last send met (a full disk reaches the producer as
        the broker's StorageError, not as a bare timeout)."""
        ms = round((self.deadline - self.created) * 1000)
        sends = self.attempts + (1 if self.in_flight else 0)
        text = (
            f"record batch for {self.tp} expired after {sends} attempt(s): {what} within "
            f"delivery_timeout_ms={ms}{after}"
        )
        if self.last_error is not None:
            text += f"; last error: {type(self.last_error).__name__}: {self.last_error}"
        error = RaftlogTimeoutError(text)
        error.__cause__ = self.last_error  # for code that wants the broker's error itself
        return error

    def overdue_error(self) -> RaftlogError:
        return self.expiry_error(
            "not completed", f" + {EXPIRY_GRACE_S:g} s (is the producer's sender stuck?)"
        )

    def seal(self) -> None:
        """Full: it takes no more records, and it is encoded now (BatchBuilder.seal)."""
        self.sealed = True
        self.builder.seal()


# What a completed batch keeps instead of its builder: sealed, empty, shared.
_COMPLETED_BUILDER = BatchBuilder()
_COMPLETED_BUILDER.append(None, b"", 0)
_COMPLETED_BUILDER.seal()


class _OneBatchRequest:
    """A one-batch Produce request in flight; the connection calls it with the outcome. One
    object per request (not a partial over a dict and a list): requests in flight are
    long-lived enough that every object they hold costs garbage-collector time."""

    __slots__ = ("batch", "core", "nbytes", "node")

    def __init__(self, core: _ProducerCore, node: int, batch: _Batch, nbytes: int):
        self.core, self.node, self.batch, self.nbytes = core, node, batch, nbytes

    def __call__(
        self, body: dict[str, Any] | None, _payload: memoryview | None, error: RaftlogError | None
    ) -> None:
        self.core._on_one_response(self.node, self.batch, self.nbytes, body, error)


class _Accumulator:
    """Per-partition queues of batches; thread-safe (the sync producer's send runs anywhere).

    The last batch of a queue is the partition's open batch, the one `send` appends to, unless
    it is a batch being retried (those take no new records). Batches leave a queue only through
    `drain`, under the lock, so a record is never appended to a batch that is being sent.
    """

    def __init__(self, config: ProducerConfig):
        self.config = config
        self.lock = threading.Lock()
        self.queues: dict[TopicPartition, collections.deque[_Batch]] = {}
        # topic -> the queues (and TopicPartitions) of its partitions, by partition number:
        # what send() looks up, one dict access per record.
        self.by_topic: dict[str, tuple[list[collections.deque[_Batch]], list[TopicPartition]]] = {}
        # Bytes buffered = added (by send, under the lock) - released (by the sender thread
        # alone, without the lock: a response must not wait for a busy send()).
        self.added_bytes = 0
        self.released_bytes = 0
        self.space = threading.Condition(self.lock)
        self.space_waiters = 0
        # A send() blocked on a full buffer resumes once it drains to here, not at the first
        # freed byte: waking a blocked thread for every response (one record each, when
        # records go one per request) costs more than the record.
        self.resume_below = config.buffer_memory - config.buffer_memory // 8
        self.flushing = 0
        self.slot_bound = False
        # The earliest delivery deadline of a queued batch, as of the last drain: the sender
        # runs a pass then, so a batch expires on time even when nothing else wakes it.
        self.next_deadline = math.inf

    def topic_queues(
        self, topic: str, partitions: int
    ) -> tuple[list[collections.deque[_Batch]], list[TopicPartition]]:
        """The topic's per-partition queues, grown to `partitions` (call with the lock held)."""
        entry = self.by_topic.get(topic)
        if entry is None:
            entry = self.by_topic[topic] = ([], [])
        queues, tps = entry
        while len(queues) < partitions:
            tp = TopicPartition(topic, len(queues))
            q = self.queues.setdefault(tp, collections.deque())
            queues.append(q)
            tps.append(tp)
        return entry

    def drain(
        self,
        now: float,
        node_of: Callable[[TopicPartition], int | None],
        free_slots: Callable[[int], int],
        closing: bool,
        room_of: Callable[[TopicPartition], int] | None = None,
        max_request_of: Callable[[int], int] | None = None,
    ) -> tuple[dict[int, list[list[_Batch]]], float | None, list[_Batch]]:
        """Take the ready batches as requests per leader (at most `free_slots(node)` requests
        of at most max_request_size each, or `max_request_of(node)`: less when the broker reads
        less). Also returns the next time a lingering batch becomes ready, and the batches
        whose delivery timeout ran out before they could be sent. A batch larger than that
        bound still goes alone in a request (the sender refuses it if the broker cannot read
        it). `self.slot_bound` tells whether ready batches stayed for want of an in-flight slot.

        `room_of` (idempotence): how many batches a partition may send now (0: a retry waits
        for its batches in flight; 1: none of its batches was acknowledged yet); with it, a
        request takes at most one batch per partition, so a duplicate's answer (its original
        offsets) is that of one batch."""
        config = self.config
        linger = config.linger_ms / 1000
        batch_size = config.batch_size
        flush = bool(self.flushing) or closing
        requests: dict[int, list[list[_Batch]]] = {}
        last_size: dict[int, int] = {}
        slots: dict[int, int] = {}
        request_caps: dict[int, int] = {}
        next_ready: float | None = None
        expired: list[_Batch] = []
        self.slot_bound = False
        next_deadline = math.inf
        for tp, q in self.queues.items():
            if not q:
                continue
            while q and q[0].deadline <= now:
                b = q.popleft()
                b.sealed = True  # it may still be a topic's open batch: no more records
                expired.append(b)
            if not q:
                continue
            first = q[0]
            if first.deadline < next_deadline:
                next_deadline = first.deadline  # a retried batch goes first: the oldest
            if first.retry_at > now:
                # Backing off; the partition waits behind it (its order is kept).
                next_ready = (
                    first.retry_at if next_ready is None else min(next_ready, first.retry_at)
                )
                continue
            if not (
                len(q) > 1
                or first.builder.size_bytes >= batch_size
                or now - first.created >= linger
                or flush
            ):
                t = first.created + linger
                next_ready = t if next_ready is None else min(next_ready, t)
                continue
            node = node_of(tp)
            room = -1 if room_of is None else room_of(tp)  # -1: no bound
            if node is None or room == 0:
                continue
            took: list[_Batch] | None = None  # the request that took this partition's last
            free = slots.get(node)
            if free is None:
                free = slots[node] = free_slots(node)
                if max_request_of is not None:
                    request_caps[node] = max_request_of(node)
            max_request = request_caps.get(node, config.max_request_size)
            while q and room != 0:
                b = q[0]
                size = b.builder.size_bytes
                if b is q[-1] and not (
                    size >= batch_size or now - b.created >= linger or flush or b.attempts
                ):
                    break
                node_requests = requests.get(node)
                if (
                    node_requests
                    and last_size[node] + size <= max_request
                    and (room_of is None or node_requests[-1] is not took)
                ):
                    node_requests[-1].append(b)
                    last_size[node] += size
                    took = node_requests[-1]
                elif free > 0:
                    free -= 1
                    took = [b]
                    requests.setdefault(node, []).append(took)
                    last_size[node] = size
                else:
                    self.slot_bound = True
                    break
                q.popleft()
                b.sealed = True
                room -= 1
            slots[node] = free
        self.next_deadline = next_deadline
        freed = sum(b.builder.size_bytes for b in expired)
        if freed:
            self.released_bytes += freed
            if self.space_waiters and self.buffered_bytes <= self.resume_below:
                self.space.notify_all()  # drain runs with the lock held
        return requests, next_ready, expired

    def requeue(self, batch: _Batch) -> None:
        """Put a batch to retry back at the head of its partition's queue; a batch that was
        stamped with a sequence goes after those sent before it (send order), so that the
        partition resends them in sequence order whatever order their answers came in."""
        with self.lock:
            self.added_bytes += batch.builder.size_bytes
            q = self.queues.setdefault(batch.tp, collections.deque())
            i = 0
            if batch.order >= 0:
                while i < len(q) and 0 <= q[i].order < batch.order:
                    i += 1
            q.insert(i, batch)

    @property
    def buffered_bytes(self) -> int:
        return self.added_bytes - self.released_bytes

    def release(self, nbytes: int) -> None:
        """Bytes sent (called on the sender's loop only). A blocked send() counts itself in
        space_waiters before it checks for space, so reading the count after the release
        cannot miss it."""
        self.released_bytes += nbytes
        if self.space_waiters and self.added_bytes - self.released_bytes <= self.resume_below:
            with self.lock:
                self.space.notify_all()

    def pending(self) -> int:
        return sum(len(q) for q in self.queues.values())


class _ProducerCore:
    """The sender and accumulator shared by Producer and AsyncProducer; lives on one loop.

    The sender is one coroutine. Each pass drains every ready batch, builds the Produce
    requests for each leader (as many as its free in-flight slots allow) and writes them with
    one write per connection; each response completes its batches from a callback run by the
    connection. The sender sleeps on a future that `send` (a batch filled up, or a partition's
    first batch opened), a response, or the linger timer resolves.

    Delivery timeouts: a pass expires queued batches past their deadline (drain), and batches
    in flight past theirs (`_expire_in_flight`, as Kafka does: the late answer is ignored); it
    sleeps no later than the earliest deadline. Nothing one batch holds can stop the sender: a
    batch that fails to build fails alone (`_unbuildable`), application callbacks run guarded
    (BatchResult.complete), and if the sender task ends with an error anyway (a bug), every
    batch fails with it and later sends raise it (`_sender_stopped`) instead of hanging.
    """

    def __init__(self, config: ProducerConfig, rng: random.Random | None = None):
        """`rng`: the keyless partition choice's randomness (tests pass a seeded one)."""
        self.config = config
        self.client = ClusterClient(
            config.bootstrap_servers, config.client_id, config.request_timeout_ms
        )
        self.acc = _Accumulator(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._wake_scheduled = False
        self._kicked = False
        # One-record batches made since the sync Producer last yielded the GIL (send()).
        self.batches_since_yield = 0
        self._waiter: asyncio.Future[None] | None = None
        self._in_flight: dict[int, int] = collections.defaultdict(int)
        self._inflight_batches = 0
        # node -> the batches sent to it, in send order (acks != 0): the connection answers in
        # order, so answered ones leave from the front; `_expire_in_flight` looks at the rest.
        self._sent: dict[int, collections.deque[_Batch]] = {}
        # When `_expire_in_flight` must next look: the earliest deadline in flight.
        self._inflight_check_at = math.inf
        # Set if the sender task ever ends with an error: what every later send() raises.
        self.dead: RaftlogError | None = None
        # partition -> until when its retries are logged at DEBUG only (see _retry_or_fail).
        # topic -> (no WARNING before this time, retries logged at DEBUG since the last one)
        self._retry_warned_until: dict[str, tuple[float, int]] = {}
        # Where keyless records go (KIP-794's uniform sticky partitioning). The fast path
        # counts its bytes on the open batch; `_sticky_stint` adds them to the topic's stint.
        self.sticky = UniformStickyPartitioner(config.batch_size, rng)
        # topic -> the open batch of its sticky partition (the fast path's target).
        self._open: dict[str, _Batch] = {}
        # Pre-encoded Produce headers of one-batch requests, per partition.
        self._templates: dict[TopicPartition, protocol.ProduceTemplate] = {}
        self._refreshing: set[str] = set()
        self._connecting: set[int] = set()
        self._sender: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle: asyncio.Event | None = None
        self.space: asyncio.Event | None = None
        self._acks = config.acks_code
        self._topics = self.client.topics  # the client's dict, updated in place
        self._batch_size = config.batch_size
        self._buffer_memory = config.buffer_memory
        self._partitioner = config.partitioner
        self._timeout_s = config.request_timeout_ms / 1000
        self._timeout_ms = config.request_timeout_ms
        self._delivery_timeout_s = config.delivery_timeout_ms / 1000
        # Idempotence (module docstring). Invariant: _producer_id >= 0 whenever a batch is
        # stamped; nothing is sent while it is -1 or an epoch bump is pending.
        self._idempotent = bool(config.enable_idempotence)
        self._producer_id = -1
        self._producer_epoch = -1
        self._initializing = False
        self._bump_pending = False
        self._next_seq: dict[TopicPartition, int] = {}  # next sequence to stamp
        self._acked_next: dict[TopicPartition, int] = {}  # after the last acknowledged batch
        self._tp_in_flight: dict[TopicPartition, int] = collections.defaultdict(int)
        self._send_order = 0
        self._room_of = self._room if self._idempotent else None

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.space = asyncio.Event()
        self._idle = asyncio.Event()
        self._sender = asyncio.create_task(self._run())
        self._sender.add_done_callback(self._sender_stopped)

    def _sender_stopped(self, task: asyncio.Task[None]) -> None:
        """The sender ended: normal at close; with an error it is a bug, and then no batch
        may wait for it: fail them all with the error and make later sends raise it."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        log.critical("the producer's sender stopped with an error", exc_info=exc)
        self.dead = RaftlogError(f"the producer's sender stopped: {exc!r}")
        with self.acc.lock:
            queued = [b for q in self.acc.queues.values() for b in q]
            self.acc.queues.clear()
            self.acc.by_topic.clear()
            self.acc.released_bytes = self.acc.added_bytes
            self.acc.space.notify_all()
        in_flight = [b for q in self._sent.values() for b in q]
        self._sent.clear()
        for b in queued + in_flight:
            b.expire(self.dead)
        if self._idle is not None:
            self._idle.set()  # a flush() waiting for the sender returns

    async def topic_metadata(self, topic: str) -> TopicInfo:
        """The topic's metadata for send(). A broker that cannot be reached (restarting, or
        the cached metadata was dropped after a failed batch, a metadata request that timed
        out) is retried until max_block_ms, as send() promises; an unknown topic fails at
        once, unless the broker auto-creates topics (a producer asks it to, as Kafka's does;
        the broker's setting decides)."""
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while True:
            try:
                return await self.client.topic(topic, allow_auto_create=True)
            except UnknownTopicOrPartitionError:
                raise
            except RaftlogError as e:
                # A broker down or slow (a metadata request timing out while a node restarts):
                # ask again, another broker if need be, until max_block_ms.
                if not e.retriable or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    # -- called from any thread ----------------------------------------------------------------

    def append(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp_ms: int | None,
        block: bool,
    ) -> RecordFuture | None:
        """Add a record to its partition's open batch; None if the topic's metadata is not
        known yet (the caller fetches it and calls again).

        The per-record hot path: a record with a `bytes` value and no key, partition,
        timestamp or headers that fits the topic's sticky open batch takes one dict lookup, one
        lock, one builder call and one future; anything else takes `_append`, which checks
        every field first (`_checked_record`): a record that cannot be encoded is refused
        here, in the caller's thread, and never reaches the sender. The open batch is used
        even if the topic's metadata was dropped meanwhile (after an error): its partition is
        known, and the sender refreshes the metadata before it sends it.
        """
        if (
            type(value) is bytes
            and key is None
            and partition is None
            and timestamp_ms is None
            and not headers
            and value
        ):
            batch = self._open.get(topic)
            n = 25 + len(value)
            # The size is checked again under the lock; this first look spares the lock when
            # the record cannot fit (one record per batch: every record).
            if batch is not None and batch.builder.size_bytes + n <= self._batch_size:
                ts = _time_ns() // 1_000_000
                acc = self.acc
                lock = acc.lock
                lock.acquire()
                builder = batch.builder
                size = builder.size_bytes + n
                if (
                    size <= self._batch_size
                    and not batch.sealed
                    and acc.added_bytes - acc.released_bytes < self._buffer_memory
                ):
                    index = builder.append_value(value, ts)
                    acc.added_bytes += n
                    batch.sticky_bytes += n
                    if size < self._batch_size:
                        lock.release()
                        return RecordFuture(batch, index, ts)
                    # This record filled the batch: wake the sender. (The next record moves
                    # the sticky partition on, if its stint is long enough.)
                    batch.seal()
                    wake = self._batch_ready()
                    lock.release()
                    if wake:
                        self._wake()
                    return RecordFuture(batch, index, ts)
                lock.release()
        return self._append(topic, value, key, headers, partition, timestamp_ms, block)

    def _append(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp_ms: int | None,
        block: bool,
    ) -> RecordFuture | None:
        if not (
            type(value) is bytes
            and (key is None or type(key) is bytes)
            and (partition is None or type(partition) is int)
            and timestamp_ms is None
            and not headers
            and type(topic) is str
        ):
            # Only what the common shapes above leave open (they are valid as they are).
            value, key, headers = _checked_record(
                topic, value, key, headers, partition, timestamp_ms
            )
        if self.dead is not None:
            raise self.dead
        sticky = False
        info = self._topics.get(topic)
        if info is None:
            return None
        partitions = len(info.partitions)
        if partition is None:
            if key is None:
                sticky = True  # the partition is the sticky one when the lock is held
            else:
                partition = self._partitioner(key, partitions)
        elif not 0 <= partition < partitions:
            raise RaftlogError(
                f"partition {partition} of topic {topic!r} does not exist (it has {partitions})"
            )
        ts = _time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        # Bytes the record adds to a batch: its fixed part, its entry in the length table, key,
        # value and headers.
        if key is None and not headers:
            record_bytes = 25 + len(value) if value else 25
        else:
            record_bytes = 25 + (len(key) if key else 0) + (len(value) if value else 0)
            if headers:
                record_bytes += sum(8 + len(k.encode()) + len(v or b"") for k, v in headers)
        if record_bytes > RECORD_BYTES_MAX:
            raise RecordTooLargeError(
                f"a record of {record_bytes} bytes for topic {topic!r}: a record must be below "
                f"{RECORD_BYTES_MAX} bytes (its lengths are 32-bit)"
            )
        acc = self.acc
        batch_size = self._batch_size
        lock = acc.lock
        lock.acquire()
        try:
            if block and acc.buffered_bytes >= self._buffer_memory:
                self._wait_for_space_locked()
            if sticky:
                # _sticky_stint, inlined: a call here costs 3% of a one-record batch's send().
                stint = self.sticky.stint(topic, partitions)
                open_ = self._open.get(topic)
                if open_ is not None and open_.sticky_bytes:
                    stint.nbytes += open_.sticky_bytes
                    open_.sticky_bytes = 0
                partition = stint.partition
            if partition is None:
                raise InvariantError("partition is None")
            entry = acc.by_topic.get(topic)
            if entry is None or len(entry[0]) <= partition:
                entry = acc.topic_queues(topic, partitions)
            q = entry[0][partition]
            # Close the open batch before this record would take it past batch_size (a batch
            # holds at least one record): batches then never outgrow what was configured, so a
            # batch_size near the broker's max_message_bytes cannot produce refused batches.
            new_batch = self._needs_new_batch(q, record_bytes)
            sealed_wake = False
            if new_batch and sticky:
                # The sticky partition's open batch can take no more records (it filled, left
                # by linger or flush, or this record does not fit): the stint may end here.
                if q and not q[-1].sealed:
                    # It does not fit: the batch is closed for appends, as Kafka's accumulator
                    # closes one that a record did not fit, and goes with the next sender pass,
                    # not after linger_ms.
                    q[-1].seal()
                    sealed_wake = self._batch_ready()
                if partitions > 1 and self.sticky.maybe_move(stint, record_bytes):
                    # The record opens the next partition's stint (Kafka's abortOnNewBatch),
                    # not a batch of its own on the old one.
                    partition = stint.partition
                    q = entry[0][partition]
                    new_batch = self._needs_new_batch(q, record_bytes)
            if q:
                batch = q[-1]
                builder = batch.builder
                before = builder.size_bytes
            if new_batch and HEADER_SIZE + record_bytes >= batch_size:
                # The record fills a batch on its own (one message per request): encode it
                # at once, with no builder lists to fill and drop.
                batch = _Batch(
                    entry[1][partition],
                    time.monotonic(),
                    self._delivery_timeout_s,
                    BatchBuilder.sealed_one(key, value, ts, headers or ()),
                )
                batch.sealed = True
                q.append(batch)
                self.batches_since_yield += 1
                index = 0
                size = batch.builder.size_bytes
                added = size
            else:
                if new_batch:
                    batch = _Batch(entry[1][partition], time.monotonic(), self._delivery_timeout_s)
                    builder = batch.builder
                    q.append(batch)
                    before = 0
                index = builder.append(key, value, ts, headers or ())
                size = builder.size_bytes
                added = size - before
                if size >= batch_size:
                    batch.seal()
            acc.added_bytes += added
            if sticky:
                self._open[topic] = batch
                stint.nbytes += added
            # Wake the sender when a batch is ready, or a partition's first batch starts its
            # linger clock; once per sender pass.
            wake = self._batch_ready() if size >= batch_size or new_batch else False
        finally:
            lock.release()
        if wake or sealed_wake:
            self._wake()
        return RecordFuture(batch, index, ts)

    def _needs_new_batch(self, q: collections.deque[_Batch], record_bytes: int) -> bool:
        """Whether a record of `record_bytes` must open a new batch in partition queue `q`."""
        if not q:
            return True
        batch = q[-1]
        before = batch.builder.size_bytes
        return batch.sealed or (before + record_bytes > self._batch_size and before > HEADER_SIZE)

    def append_many(
        self,
        topic: str,
        values: Sequence[bytes],
        start: int,
        partition: int | None,
        block: bool,
        spans: list[Span],
    ) -> int:
        """Add records with `values[start:]` (no key, no headers, the current time) in this
        order, adding where they went to `spans`; returns the index of the first value not
        queued: `len(values)`, or less when the topic's metadata is not known (yet, or any
        more: dropped after an error). The caller then fetches it and goes on from there, so
        no record is queued twice.

        The batch hot path: the lock is taken once, and each batch is filled by one builder
        call (`BatchBuilder.append_values`). Records go to `partition`, or to the sticky
        partition, which moves on exactly as it would for the same records sent one by one.
        Values other than non-empty `bytes` take `append` one by one (checked there)."""
        ts = _time_ns() // 1_000_000
        end = len(values)
        if not all(type(v) is bytes and v for v in values[start:]):
            for i in range(start, end):
                fut = self.append(topic, values[i], None, None, partition, ts, block)
                if fut is None:
                    return i
                spans.append((fut._batch, fut._index, 1, ts))
            return end
        if type(topic) is not str or (partition is not None and type(partition) is not int):
            _checked_record(topic, b"x", None, None, partition, None)  # raises, naming which
        if self.dead is not None:
            raise self.dead
        info = self._topics.get(topic)
        if info is None:
            return start
        partitions = len(info.partitions)
        if partition is not None and not 0 <= partition < partitions:
            raise RaftlogError(
                f"partition {partition} of topic {topic!r} does not exist (it has {partitions})"
            )
        acc = self.acc
        batch_size = self._batch_size
        sticky = partition is None
        wake = False
        i = start
        with acc.lock:
            while i < end:
                if block and acc.buffered_bytes >= self._buffer_memory:
                    self._wait_for_space_locked()
                if partition is None:
                    stint = self._sticky_stint(topic, partitions)
                    p = stint.partition
                else:
                    p = partition
                entry = acc.by_topic.get(topic)
                if entry is None or len(entry[0]) <= p:
                    entry = acc.topic_queues(topic, partitions)
                q = entry[0][p]
                record_bytes = 25 + len(values[i])
                new_batch = self._needs_new_batch(q, record_bytes)
                if new_batch:
                    # The open batch can take no more: closed if the next value does not fit
                    # it, and a sticky partition's stint may end here (as in _append).
                    if q and not q[-1].sealed:
                        q[-1].seal()
                        wake = self._batch_ready() or wake
                    if sticky and partitions > 1 and self.sticky.maybe_move(stint, record_bytes):
                        p = stint.partition
                        q = entry[0][p]
                        new_batch = self._needs_new_batch(q, record_bytes)
                if new_batch:
                    batch = _Batch(entry[1][p], time.monotonic(), self._delivery_timeout_s)
                    q.append(batch)
                else:
                    batch = q[-1]
                builder = batch.builder
                before = 0 if new_batch else builder.size_bytes  # a new batch adds its header
                first = len(builder)
                i_next = builder.append_values(values, ts, i, batch_size)
                added = builder.size_bytes - before
                acc.added_bytes += added
                spans.append((batch, first, i_next - i, ts))
                i = i_next
                # Stopped before the end: the next record did not fit, so this batch is done.
                full = i < end or builder.size_bytes >= batch_size
                if full:
                    batch.seal()
                if sticky:
                    self._open[topic] = batch
                    stint.nbytes += added
                if full or new_batch:
                    wake = self._batch_ready() or wake
        if wake:
            self._wake()
        return end

    def _sticky_stint(self, topic: str, partitions: int) -> Stint:
        """The topic's stint, with the lock held, having counted what the fast path appended
        since the last call (`_append` does the same inline)."""
        stint = self.sticky.stint(topic, partitions)
        batch = self._open.get(topic)
        if batch is not None and batch.sticky_bytes:
            stint.nbytes += batch.sticky_bytes
            batch.sticky_bytes = 0
        return stint

    def _batch_ready(self) -> bool:
        """A batch is ready (or a partition's first batch opened): with the lock held, say
        whether send() must wake the sender (once per sender pass)."""
        wake = not self._wake_scheduled
        self._wake_scheduled = True
        return wake

    def _wait_for_space_locked(self) -> None:
        acc = self.acc
        acc.space_waiters += 1
        try:
            if not acc.space.wait_for(
                lambda: acc.buffered_bytes <= acc.resume_below,
                self.config.max_block_ms / 1000,
            ):
                raise RaftlogTimeoutError(
                    f"buffer_memory={self.config.buffer_memory} bytes stayed full for "
                    f"max_block_ms={self.config.max_block_ms}"
                )
        finally:
            acc.space_waiters -= 1

    def _wake(self) -> None:
        """Make the sender run a pass soon; from any thread."""
        loop = self.loop
        if loop is None:
            raise InvariantError("loop is None")
        if threading.get_ident() == self._loop_thread:
            self._kick()
        else:
            loop.call_soon_threadsafe(self._kick)

    def begin_flush(self) -> None:
        with self.acc.lock:
            self.acc.flushing += 1
        self._wake()

    def end_flush(self) -> None:
        with self.acc.lock:
            self.acc.flushing -= 1

    # -- the sender (on the loop) --------------------------------------------------------------

    def _kick(self) -> None:
        self._kicked = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _sleep(self, timeout: float | None) -> None:
        loop = self.loop
        if loop is None:
            raise InvariantError("loop is None")
        waiter = self._waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, _resolve, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    async def _run(self) -> None:
        if self._idle is None:
            raise InvariantError("self._idle is None")
        while True:
            self._kicked = False
            now = time.monotonic()
            if self._bump_pending and self._inflight_batches == 0:
                self._bump_epoch()
            with self.acc.lock:
                self._wake_scheduled = False
                requests, next_ready, expired = self.acc.drain(
                    now,
                    self._node_of,
                    self._free_slots,
                    self._closing,
                    self._room_of,
                    self._max_request,
                )
                pending = self.acc.pending()
            for b in expired:
                b.complete(-1, b.expiry_error("not sent"))
                if b.sequence >= 0:
                    self._sequence_lost(b)
            if expired:
                self._space_freed()
            for node, node_requests in requests.items():
                self._dispatch(node, node_requests)
            for q in self._sent.values():
                while q and not q[0].in_flight:
                    q.popleft()
            if now >= self._inflight_check_at:
                self._expire_in_flight(now)
            if pending == 0 and self._inflight_batches == 0:
                self._idle.set()
                if self._closing:
                    return
            else:
                self._idle.clear()
            if self._kicked:
                continue
            if self.acc.slot_bound:
                # Every free in-flight slot is used and ready batches wait: a response will
                # wake the sender, so send() need not (a wake-up costs two system calls).
                self._wake_scheduled = True
            wake_at = min(
                math.inf if next_ready is None else next_ready,
                self.acc.next_deadline,
                self._inflight_check_at,
            )
            timeout = None if wake_at == math.inf else max(wake_at - time.monotonic(), 0)
            if pending and not requests and next_ready is None:
                # Batches wait for metadata, a connection or a free in-flight slot; responses
                # and connections wake the sender, this is the fallback.
                backoff = self.config.retry_backoff_ms / 1000
                timeout = backoff if timeout is None else min(timeout, backoff)
            await self._sleep(timeout)

    def _expire_in_flight(self, now: float) -> None:
        """Fail the batches in flight past their delivery timeout (Kafka expires them too);
        their requests stay on the connection, and a late answer finds them complete. The
        builder stays with the request, which still counts its records."""
        check_at = math.inf
        for q in self._sent.values():
            for b in q:
                if not b.in_flight or b._done:
                    continue
                if b.deadline <= now:
                    b.expire(b.expiry_error("no answer"))
                    if b.sequence >= 0:
                        self._sequence_lost(b)
                elif b.deadline < check_at:
                    check_at = b.deadline
        self._inflight_check_at = check_at

    def _sent_to(self, node: int, batches: Sequence[_Batch]) -> None:
        """Batches now in flight to `node` (a request that expects an answer)."""
        q = self._sent.get(node)
        if q is None:
            q = self._sent[node] = collections.deque()
        check_at = self._inflight_check_at
        for b in batches:
            b.in_flight = True
            q.append(b)
            if b.deadline < check_at:
                check_at = b.deadline
        self._inflight_check_at = check_at

    def _node_of(self, tp: TopicPartition) -> int | None:
        try:
            return self.client.leader_for(tp)
        except RaftlogError:
            self._schedule_refresh(tp.topic)
            return None

    def _free_slots(self, node: int) -> int:
        if self._idempotent and (self._producer_id < 0 or self._bump_pending):
            if self._producer_id < 0 and not self._initializing:
                self._initializing = True
                self._spawn(self._init_producer_id())
            return 0  # a response or the id's arrival wakes the sender
        conn = self.client.ready_connection(node)
        if conn is None or not conn.limits_learned:
            self._schedule_connect(node)
            return 0
        if not conn.writable:
            return 0  # resume_writing wakes the sender
        return self.config.max_in_flight_requests_per_connection - self._in_flight[node]

    def _max_request(self, node: int) -> int:
        """The bound of a request of several batches to `node`: max_request_size, or less
        when the broker reads less (with room for the request's header)."""
        max_request = self.config.max_request_size
        conn = self.client.ready_connection(node)
        limit = conn.request_bytes_max if conn is not None else None
        if limit is not None:
            max_request = min(max_request, limit - REQUEST_HEADER_BYTES_ROOM)
        return max_request

    # -- idempotence ---------------------------------------------------------------------------

    async def _init_producer_id(self) -> None:
        try:
            body, _ = await self.client.request(None, protocol.ApiKey.INIT_PRODUCER_ID, {})
            if body.get("error"):
                raise error_from_code(body["error"], body.get("message") or "")
            self._producer_id = int(body["producer_id"])
            self._producer_epoch = int(body["producer_epoch"])
            self._next_seq.clear()
            self._acked_next.clear()
            log.info(
                "idempotent producer %s has producer id %d, epoch %d",
                self.config.client_id,
                self._producer_id,
                self._producer_epoch,
            )
        except RaftlogError as e:
            # Batches wait (and expire by their delivery timeout); the next pass asks again.
            log.warning("InitProducerId failed, retrying: %s: %s", type(e).__name__, e)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._initializing = False
        self._kick()

    def _room(self, tp: TopicPartition) -> int:
        """How many batches the partition may send now (-1: no bound). One retrying a batch
        sends nothing until its batches in flight are answered; one that has acknowledged no
        batch of this epoch has one in flight at most (see the module's docstring). Drain
        calls this with the accumulator's lock held; the queue is not empty."""
        in_flight = self._tp_in_flight[tp]
        if tp not in self._acked_next:
            return 0 if in_flight else 1
        if in_flight and self.acc.queues[tp][0].attempts > 0:
            return 0
        return -1

    def _stamp(self, b: _Batch, head: bytes, tail: bytes) -> tuple[bytes, bytes]:
        """The batch's bytes with the producer id, epoch and its sequence, assigned at its
        first send (and again after an epoch bump), in the partition's send order."""
        if b.sequence < 0:
            tp = b.tp
            seq = self._next_seq.get(tp, 0)
            b.sequence, b.producer_epoch = seq, self._producer_epoch
            self._next_seq[tp] = (seq + len(b.builder)) % SEQUENCE_MODULUS
            if b.order < 0:
                self._send_order += 1
                b.order = self._send_order
        return with_producer(head, tail, self._producer_id, b.producer_epoch, b.sequence)

    def _acked(self, b: _Batch) -> None:
        if b.sequence >= 0:
            self._acked_next[b.tp] = (b.sequence + len(b.builder)) % SEQUENCE_MODULUS

    def _sequence_lost(self, b: _Batch) -> None:
        """A stamped batch failed: its partition's sequences have a hole that the broker will
        never fill; the next epoch starts every partition at 0 again (KIP-360)."""
        if not self._bump_pending:
            log.warning(
                "a record batch for %s with sequence %d failed; producer %d will bump its "
                "epoch %d once its requests in flight are answered",
                b.tp,
                b.sequence,
                self._producer_id,
                self._producer_epoch,
            )
        self._bump_pending = True

    def _bump_epoch(self) -> None:
        """Nothing is in flight: start the next epoch (a new producer id past int16), every
        queued batch restamped from sequence 0 in its send order, except the batches whose
        outcome is unknown: they fail (see `_unknown_outcome_error`)."""
        self._bump_pending = False
        old_id, old_epoch = self._producer_id, self._producer_epoch
        if self._producer_epoch >= PRODUCER_EPOCH_MAX:
            self._producer_id = self._producer_epoch = -1  # the next pass asks for a new id
        else:
            self._producer_epoch += 1
        self._next_seq.clear()
        self._acked_next.clear()
        unknown: list[_Batch] = []
        with self.acc.lock:
            for q in self.acc.queues.values():
                if any(b.outcome_unknown and b.sequence >= 0 for b in q):
                    unknown += (b for b in q if b.outcome_unknown and b.sequence >= 0)
                    kept = [b for b in q if not (b.outcome_unknown and b.sequence >= 0)]
                    q.clear()
                    q.extend(kept)
                for b in q:
                    b.sequence = -1
            self.acc.released_bytes += sum(b.builder.size_bytes for b in unknown)
        log.warning(
            "producer %d bumped its epoch to %d (a partition lost sequences)%s",
            self._producer_id,
            self._producer_epoch,
            f"; {len(unknown)} batch(es) of unknown outcome fail" if unknown else "",
        )
        for b in unknown:
            b.complete(-1, self._unknown_outcome_error(b, old_id, old_epoch))
        if unknown:
            self._space_freed()

    def _unknown_outcome_error(
        self, b: _Batch, producer_id: int, epoch: int
    ) -> OutOfOrderSequenceError:
        """The error of a queued batch that an epoch bump cannot restamp: a send of it may have
        been appended under its old epoch and sequence, and the new epoch starts the
        partition's sequences at 0 again, so the broker would append it a second time. Kafka
        never changes the sequence of a batch that was sent, for this reason (KIP-360)."""
        error = OutOfOrderSequenceError(
            f"record batch for {b.tp} (producer {producer_id}, epoch {epoch}, sequence "
            f"{b.sequence}, {len(b.builder)} record(s)) failed after {b.attempts} attempt(s): "
            "its outcome is unknown, it may or may not be in the log; the producer bumped its "
            "epoch after another batch left a hole in its sequences, and resending this one "
            "under the new epoch could append it twice"
            + (
                f"; last error: {type(b.last_error).__name__}: {b.last_error}"
                if b.last_error is not None
                else ""
            )
        )
        error.__cause__ = b.last_error
        return error

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _schedule_connect(self, node: int) -> None:
        if node not in self._connecting:
            self._connecting.add(node)
            self._spawn(self._connect(node))

    async def _connect(self, node: int) -> None:
        conn = None
        try:
            conn = await self.client.connection(node)
            conn.on_writable = self._kick
            if not conn.limits_learned:
                # The broker's frame limit, before the first Produce: a batch it could not
                # read fails here at once (RecordTooLargeError), not by a closed connection.
                await conn.learn_limits(self.config.request_timeout_ms / 1000)
        except RaftlogError as e:
            if conn is not None and not conn.limits_learned:
                conn.close()  # no answer to ApiVersions: try a new connection next time
            # The leader may have moved: refresh the metadata of every topic waiting on it.
            log.debug("cannot connect to broker %d: %s", node, e)
            with self.acc.lock:
                topics = {tp.topic for tp, q in self.acc.queues.items() if q}
            for topic in topics:
                self._schedule_refresh(topic)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._connecting.discard(node)
        self._kick()

    def _schedule_refresh(self, topic: str) -> None:
        if topic not in self._refreshing:
            self._refreshing.add(topic)
            self._spawn(self._refresh(topic))

    async def _refresh(self, topic: str) -> None:
        try:
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            await self.client.refresh_metadata([topic])
        except RaftlogError as e:
            log.debug("metadata refresh for %s failed: %s", topic, e)
        finally:
            self._refreshing.discard(topic)
        self._kick()

    def _dispatch(self, node: int, node_requests: list[list[_Batch]]) -> None:
        """Build and write the requests for one leader: one write for all of them."""
        conn = self.client.ready_connection(node)
        for i, batches in enumerate(node_requests, 1):
            self._send_request(conn, node, batches)
            if conn is not None and not i % REQUESTS_PER_WRITE:
                conn.flush()
        if conn is not None:
            conn.flush()

    def _send_request(
        self, conn: BrokerConnection | None, node: int, batches: list[_Batch]
    ) -> None:
        if len(batches) == 1:
            self._send_one(conn, node, batches[0])
            return
        # Batches of one partition travel as one chunk: one append on the broker, one answer.
        merged: dict[TopicPartition, list[_Batch]] = {}
        pieces: dict[TopicPartition, list[bytes]] = {}
        count = 0
        for b in batches:
            try:
                head, tail = b.builder.build_parts()
            except Exception as e:  # any cause: see _unbuildable
                self._unbuildable(b, e)
                continue
            if self._idempotent:
                head, tail = self._stamp(b, head, tail)
            count += 1
            group = merged.get(b.tp)
            if group is None:
                merged[b.tp] = [b]
                pieces[b.tp] = [head, tail]
            else:
                group.append(b)
                pieces[b.tp] += (head, tail)
        if not count:
            return
        payload: list[bytes] = []
        by_topic: dict[str, list[list[int]]] = {}
        nbytes = 0
        for tp, tp_pieces in pieces.items():
            size = sum(map(len, tp_pieces))
            payload += tp_pieces
            parts = by_topic.get(tp.topic)
            if parts is None:
                by_topic[tp.topic] = [[tp.partition, size]]
            else:
                parts.append([tp.partition, size])
            nbytes += size
        topics = [[t, ps] for t, ps in by_topic.items()]
        body = {"acks": self._acks, "timeout_ms": self._timeout_ms, "topics": topics}
        self._in_flight[node] += 1
        self._inflight_batches += count
        if self._idempotent:
            for tp in merged:
                self._tp_in_flight[tp] += 1  # one batch each
        done = functools.partial(self._on_response, node, merged, count, nbytes)
        try:
            if conn is None:
                raise BrokerNotAvailableError(f"no connection to broker {node}")
            conn.queue_request(
                protocol.ApiKey.PRODUCE,
                body,
                payload,
                done if self._acks else None,
                self._timeout_s,
            )
        except RaftlogError as e:
            done(None, None, e)
            return
        if not self._acks:
            done(None, None, None)  # acks=0: delivered once written; offsets unknown (-1)
        else:
            for group in merged.values():
                self._sent_to(node, group)

    def _unbuildable(self, b: _Batch, error: Exception) -> None:
        """A batch whose bytes cannot be made: whatever the cause (send() checks every field,
        so it is a bug), it fails that batch's records with the error, logged with its
        traceback, and the sender goes on with the other batches."""
        log.error("cannot build the record batch for %s; failing its records", b.tp, exc_info=error)
        self.acc.release(b.builder.size_bytes)  # never sent: its bytes leave the buffer now
        self._space_freed()
        b.complete(-1, error)

    def _refused(self, b: _Batch, error: RaftlogError) -> None:
        """A batch refused before it was sent (it is over the broker's request limit): its
        records fail with the error, at once (not retriable)."""
        self.acc.release(b.builder.size_bytes)  # never sent: its bytes leave the buffer now
        self._space_freed()
        b.attempts += 1
        b.last_error = error
        b.complete(-1, error)
        if b.sequence >= 0:
            self._sequence_lost(b)

    def _send_one(self, conn: BrokerConnection | None, node: int, b: _Batch) -> None:
        """`_send_request` for a request of one batch, the common case: its header comes from
        the partition's pre-encoded template instead of msgpack."""
        tp = b.tp
        template = self._templates.get(tp)
        if template is None:
            template = self._templates[tp] = protocol.ProduceTemplate(
                self.config.client_id, self._acks, self._timeout_ms, tp.topic, tp.partition
            )
        limit = conn.request_bytes_max if conn is not None else None
        if limit is not None and template.frame_length(b.builder.size_bytes) > limit:
            # Before the batch is built (a copy of it) or its sequence stamped (a hole).
            if conn is None:
                raise InvariantError("conn is None")
            size = b.builder.size_bytes
            try:
                conn.check_size(
                    protocol.ApiKey.PRODUCE,
                    template.frame_length(size),
                    f" (a record batch of {size} bytes for {tp})",
                )
            except RecordTooLargeError as e:
                self._refused(b, e)
                return
        try:
            head, tail = b.builder.build_parts()
        except Exception as e:  # any cause: see _unbuildable
            self._unbuildable(b, e)
            return
        nbytes = len(head) + len(tail)
        if self._idempotent:
            head, tail = self._stamp(b, head, tail)
            self._tp_in_flight[tp] += 1
        self._in_flight[node] += 1
        self._inflight_batches += 1
        done = _OneBatchRequest(self, node, b, nbytes)
        try:
            if conn is None:
                raise BrokerNotAvailableError(f"no connection to broker {node}")
            conn.queue_produce(
                template, (head, tail), nbytes, done if self._acks else None, self._timeout_s
            )
        except RaftlogError as e:
            done(None, None, e)
            return
        if not self._acks:
            done(None, None, None)  # acks=0: delivered once written; offsets unknown (-1)
            return
        # In flight: _sent_to for one batch, inlined (this runs once per request).
        b.in_flight = True
        q = self._sent.get(node)
        if q is None:
            q = self._sent[node] = collections.deque()
        q.append(b)
        if b.deadline < self._inflight_check_at:
            self._inflight_check_at = b.deadline

    def _on_response(
        self,
        node: int,
        merged: dict[TopicPartition, list[_Batch]],
        count: int,
        nbytes: int,
        body: dict[str, Any] | None,
        _payload: memoryview | None,
        error: RaftlogError | None,
    ) -> None:
        self._in_flight[node] -= 1
        self._inflight_batches -= count
        self.acc.release(nbytes)
        self._space_freed()
        written = False  # in flight once queued on a connection (_sent_to)
        for group in merged.values():
            for b in group:
                written = written or b.in_flight
                b.in_flight = False
        if self._idempotent:
            for tp in merged:
                self._tp_in_flight[tp] -= 1
        try:
            if error is not None:
                for group in merged.values():
                    for b in group:
                        self._retry_or_fail(b, error, written)
            elif body is None:
                for group in merged.values():
                    for b in group:
                        b.complete(-1)
            else:
                self._complete(node, merged, body)
        finally:
            self._kick()

    def _on_one_response(
        self,
        node: int,
        b: _Batch,
        nbytes: int,
        body: dict[str, Any] | None,
        error: RaftlogError | None,
    ) -> None:
        """`_on_response` for a one-batch request, with the success case kept short."""
        self._in_flight[node] -= 1
        self._inflight_batches -= 1
        written = b.in_flight  # set once queued on a connection (_send_one)
        b.in_flight = False
        if self._idempotent:
            self._tp_in_flight[b.tp] -= 1
        self.acc.release(nbytes)
        self._space_freed()
        try:
            if error is not None:
                self._retry_or_fail(b, error, written)
            elif body is None:
                b.complete(-1)
            else:
                try:
                    ((topic, (r,)),) = body["topics"]
                    if topic != b.tp.topic or r[0] != b.tp.partition:
                        r = None
                except (KeyError, TypeError, IndexError, ValueError) as e:
                    log.warning("malformed Produce response %r: %s", body, e)
                    r = None
                if r is not None and not r[1]:
                    b.complete(r[2])
                    if self._idempotent:
                        self._acked(b)
                else:
                    self._complete_partition(node, b.tp, (b,), r)
        finally:
            self._kick()

    def _complete(
        self, node: int, merged: dict[TopicPartition, list[_Batch]], body: dict[str, Any]
    ) -> None:
        try:
            results = {(t, p[0]): p for t, ps in body["topics"] for p in ps}
        except (KeyError, TypeError, IndexError, ValueError) as e:
            results = {}
            log.warning("malformed Produce response %r: %s", body, e)
        for tp, group in merged.items():
            self._complete_partition(node, tp, group, results.get((tp.topic, tp.partition)))

    def _complete_partition(
        self, node: int, tp: TopicPartition, group: Sequence[_Batch], r: list[Any] | None
    ) -> None:
        """Complete (or retry) one partition's batches from leader `node`'s response entry
        `r`: [partition, error, base_offset, log_start_offset, message]; None if missing."""
        if r is None:
            err: RaftlogError | None = RaftlogError(f"no result for {tp} in the response")
        elif r[1]:
            err = error_from_code(r[1], r[4] or "")
        else:
            err = None
        if err is not None:
            if isinstance(err, RequestTimedOutError):
                # Not committed in time: the leader may be cut off from its followers and the
                # controller, and its metadata stale; ask another broker for the next.
                self.client.suspect(node)
            for b in group:
                self._retry_or_fail(b, err)
            return
        offset = r[2]  # type: ignore[index]
        for b in group:
            count = len(b.builder)
            if self._idempotent:
                self._acked(b)
            b.complete(offset)
            offset += count

    def _space_freed(self) -> None:
        """Wake blocked AsyncProducer.send() calls once the buffer has drained enough."""
        if self.space is not None and self.acc.buffered_bytes <= self.acc.resume_below:
            self.space.set()

    def _retry_or_fail(self, batch: _Batch, error: RaftlogError, written: bool = True) -> None:
        """A send of `batch` failed with `error`; `written`: its request reached a connection
        (else the broker cannot have seen it)."""
        batch.attempts += 1
        batch.last_error = error
        retriable = error.retriable
        if self._idempotent and batch.sequence >= 0:
            if written and not isinstance(error, REFUSED_BEFORE_APPEND):
                batch.outcome_unknown = True
            if isinstance(error, OutOfOrderSequenceError):
                # An earlier batch of the partition is unanswered or being retried: resend in
                # order. Else the leader lost this producer's state, or started it after this
                # batch (a later one was acknowledged): a new epoch (KIP-360).
                retriable = True
                acked = self._acked_next.get(batch.tp, 0)
                if batch.sequence == acked or _seq_behind(batch.sequence, acked):
                    self._sequence_lost(batch)
        if retriable and not self._closed and time.monotonic() >= batch.deadline:
            # Out of delivery time: the same error as a batch that expires waiting, naming
            # this attempt's error as the last one.
            batch.complete(-1, batch.expiry_error("not delivered"))
            if batch.sequence >= 0:
                self._sequence_lost(batch)
            return
        if retriable and not self._closed and batch.attempts <= self.config.retries:
            now = time.monotonic()
            topic = batch.tp.topic
            until, quiet = self._retry_warned_until.get(topic, (0.0, 0))
            if now >= until:
                # Kafka's producer warns at every retry; once per topic per interval is
                # enough to make a full disk or a lost leader visible without a flood.
                self._retry_warned_until[topic] = (now + RETRY_WARNING_INTERVAL_S, 0)
                log.warning(
                    "retrying a record batch for %s (attempt %d, %.0f ms before its "
                    "delivery_timeout_ms) after %s: %s%s",
                    batch.tp,
                    batch.attempts,
                    (batch.deadline - now) * 1000,
                    type(error).__name__,
                    error,
                    f" ({quiet} more retries of {topic} since the last line)" if quiet else "",
                )
            else:
                self._retry_warned_until[topic] = (until, quiet + 1)
                log.debug("retrying batch for %s after %s", batch.tp, error)
            self.client.invalidate(batch.tp.topic)
            batch.retry_at = now + retry_backoff_s(self.config, batch.attempts)
            self.acc.requeue(batch)
            self._schedule_refresh(batch.tp.topic)
            return
        batch.complete(-1, error)
        if batch.sequence >= 0:
            self._sequence_lost(batch)

    async def wait_idle(self) -> None:
        if self._idle is None:
            raise InvariantError("self._idle is None")
        if self.dead is not None:
            return  # nothing will happen any more: every batch has failed with the error
        # `_idle` is only updated when the sender runs: records appended since its last pass
        # (an AsyncProducer's sends do not yield to it) must not find it still set.
        with self.acc.lock:
            busy = self.acc.pending() > 0 or self._inflight_batches > 0
        if busy:
            self._idle.clear()
        self._kick()
        await self._idle.wait()

    async def close(self, timeout_s: float | None) -> None:
        self._closing = True
        self._kick()
        if self._sender is not None:
            # asyncio.wait, not wait_for: a sender that died with an error (a bug, already
            # logged by _sender_stopped) must not make close() raise it.
            finished, _ = await asyncio.wait({self._sender}, timeout=timeout_s)
            if not finished:
                self._sender.cancel()
        for t in list(self._tasks):
            t.cancel()
        # From here a failed batch fails instead of waiting for a retry that will not come:
        # closing the connections fails the requests still in flight.
        self._closed = True
        await self.client.close()
        with self.acc.lock:
            leftovers = [b for q in self.acc.queues.values() for b in q]
            self.acc.queues.clear()
            self.acc.by_topic.clear()
        for b in leftovers:
            b.complete(-1, RaftlogTimeoutError("producer closed before the record was sent"))


class AsyncProducer:
    """asyncio producer: `await producer.start()`, `fut = await producer.send(...)`."""

    def __init__(self, **options: Any):
        self.config = ProducerConfig(**options)
        self._core = _ProducerCore(self.config)
        self._started = False

    async def start(self) -> None:
        self._core.start()
        try:
            await self._core.client.any_connection()
        except BaseException:
            await self._core.close(None)  # the sender task must not outlive a failed start
            raise
        self._started = True

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def partitions_for(self, topic: str) -> int:
        info = await self._core.topic_metadata(topic)
        return len(info.partitions)

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordFuture:
        """Queue a record; returns its future (await it for the RecordMetadata)."""
        if not self._started:
            raise RaftlogError("AsyncProducer.start() must be awaited before send()")
        core = self._core
        if core.acc.buffered_bytes >= self.config.buffer_memory:
            await self._wait_for_space()
        while True:
            fut = core.append(topic, value, key, headers, partition, timestamp_ms, False)
            if fut is not None:
                return fut
            async with asyncio.timeout(self.config.max_block_ms / 1000):
                await core.topic_metadata(topic)

    async def send_many(
        self, topic: str, values: Sequence[bytes], partition: int | None = None
    ) -> RecordFutures:
        """Queue records with these values (no key, no headers, the current time), in order;
        returns their futures. The same records and guarantees as `send` for each value, at
        a fraction of the CPU per record: the way to move many small records from Python."""
        if not self._started:
            raise RaftlogError("AsyncProducer.start() must be awaited before send_many()")
        core = self._core
        if core.acc.buffered_bytes >= self.config.buffer_memory:
            await self._wait_for_space()
        spans: list[Span] = []
        i = 0
        while True:
            i = core.append_many(topic, values, i, partition, False, spans)
            if i == len(values):
                return RecordFutures(spans)
            async with asyncio.timeout(self.config.max_block_ms / 1000):
                await core.topic_metadata(topic)

    async def _wait_for_space(self) -> None:
        core = self._core
        if core.space is None:
            raise InvariantError("core.space is None")
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while core.acc.buffered_bytes > core.acc.resume_below:
            core.space.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RaftlogTimeoutError(
                    f"buffer_memory={self.config.buffer_memory} bytes stayed full for "
                    f"max_block_ms={self.config.max_block_ms}"
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await core.space.wait()

    async def send_and_wait(
        self, topic: str, value: bytes | None = None, **kw: Any
    ) -> RecordMetadata:
        result: RecordMetadata = await (await self.send(topic, value, **kw))
        return result

    async def flush(self) -> None:
        self._core.begin_flush()
        try:
            await self._core.wait_idle()
        finally:
            self._core.end_flush()

    async def close(self, timeout_s: float | None = None) -> None:
        if self._started:
            await self._core.close(timeout_s)
            self._started = False


class Producer:
    """Thread-based producer: `send()` returns a RecordFuture; a background thread sends."""

    def __init__(self, **options: Any):
        self.config = ProducerConfig(**options)
        self._core = _ProducerCore(self.config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="raftlog-producer", daemon=True
        )
        self._thread.start()
        self._closed = False
        try:
            self._call(self._start(), self.config.max_block_ms / 1000)
        except BaseException:
            self._stop_loop()
            raise

    async def _start(self) -> None:
        self._core.start()
        try:
            await self._core.client.any_connection()
        except BaseException:
            await self._core.close(None)  # the sender task must not outlive a failed start
            raise

    def _call(self, coro: Any, timeout: float | None) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise RaftlogTimeoutError(f"no answer within {timeout} s") from None

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions_for(self, topic: str) -> int:
        info = self._core.client.topics.get(topic)
        if info is None:
            info = self._call(self._core.topic_metadata(topic), self.config.max_block_ms / 1000)
        return len(info.partitions)

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordFuture:
        if self._closed:
            raise RaftlogError("send() on a closed producer")
        core = self._core
        if core.batches_since_yield >= YIELD_EVERY_BATCHES:
            # Let the sender thread send what we queued: a thread that never blocks keeps
            # the GIL until the interpreter's switch interval (5 ms) forces it out, and
            # meanwhile responses wait unread and the broker runs dry.
            core.batches_since_yield = 0
            time.sleep(0)
        while True:
            fut = core.append(topic, value, key, headers, partition, timestamp_ms, True)
            if fut is not None:
                return fut
            self._call(self._core.topic_metadata(topic), self.config.max_block_ms / 1000)

    def send_many(
        self, topic: str, values: Sequence[bytes], partition: int | None = None
    ) -> RecordFutures:
        """Queue records with these values (no key, no headers, the current time), in order;
        returns their futures. The same records and guarantees as `send` for each value, at
        a fraction of the CPU per record: the way to move many small records from Python.
        Blocks while buffer_memory is full, as `send` does."""
        if self._closed:
            raise RaftlogError("send_many() on a closed producer")
        spans: list[Span] = []
        i = 0
        while True:
            i = self._core.append_many(topic, values, i, partition, True, spans)
            if i == len(values):
                time.sleep(0)  # let the sender thread send what is queued (see send())
                return RecordFutures(spans)
            self._call(self._core.topic_metadata(topic), self.config.max_block_ms / 1000)

    def flush(self, timeout: float | None = None) -> None:
        self._core.begin_flush()
        try:
            self._call(self._core.wait_idle(), timeout)
        finally:
            self._core.end_flush()

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self._core.close(timeout), None if timeout is None else timeout + 5)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
