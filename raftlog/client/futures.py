"""What a producer's `send` returns: `RecordFuture`, `RecordFutures`, `RecordMetadata`.

One `BatchResult` per batch is shared by the futures of its records (Kafka's
ProduceRequestResult), so completing a 1000-record batch costs one call, not 1000; a record's
future is its batch's result plus the record's index in it.

Rules:
- the first completion wins: a batch expired at its delivery timeout (by the sender, or by a
  waiter when the sender is stuck) keeps that outcome when a late answer arrives;
- every wait ends by the batch's delivery timeout plus EXPIRY_GRACE_S, with or without a
  timeout: a waiter still waiting then expires the batch itself, so a stuck or dead sender
  never blocks the application forever;
- thread-safe: the sync producer's futures are completed on its sender thread and waited on
  anywhere; application callbacks run guarded (one that raises is logged, and stops nothing).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, overload

from raftlog.errors import RaftlogError, RaftlogTimeoutError
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

# A batch's sender expires it at its delivery timeout; a waiter (result(), await) still
# waiting this long after it expires the batch itself: a stuck or dead sender must not block
# the application forever. Long enough that a busy but healthy sender always comes first.
EXPIRY_GRACE_S = 1.0


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


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
        # time.monotonic() by which the batch must be complete (a batch: its delivery timeout).
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
                    loop.call_soon_threadsafe(resolve, waiter)

            batch.add_callback(wake)
            bound = batch.deadline + EXPIRY_GRACE_S - time.monotonic()
            timer = None if bound == math.inf else loop.call_later(bound, resolve, waiter)
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


def resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
