"""Producers: `AsyncProducer` for asyncio code and `Producer` for threads, with Kafka's options.

How it works: `send` picks a partition (the given one; else the key's xxhash; else a sticky
partition that changes when its batch is sent), appends the record to that partition's open
batch in the accumulator, and returns a `RecordFuture`. A sender task drains batches that are
full (`batch_size`), old enough (`linger_ms`) or flushed, groups them by partition leader and
sends one Produce request per broker with every ready batch, keeping at most
`max_in_flight_requests_per_connection` requests outstanding per broker. One result object per
batch completes all of its records' futures (Kafka's ProduceRequestResult), so completing a
1000-record batch costs one call, not 1000.

Delivery: a retriable error (leader moved, lost connection, timeout) refreshes metadata and
re-queues the batch at the head of its partition, until `retries` or `delivery_timeout_ms` runs
out; then the error reaches every future of the batch. With retries and more than one request
in flight a retried batch may land after a later one (as in Kafka without idempotence);
`enable_idempotence` (sequence numbers, later) removes that.

`Producer` runs the same core on an event loop in a background thread; `send` from any thread
only touches the accumulator under a lock and wakes the sender when a batch becomes ready.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import xxhash

from raftlog import protocol
from raftlog.client.cluster import ClusterClient
from raftlog.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    RaftlogError,
    RaftlogTimeoutError,
    error_from_code,
)
from raftlog.metadata.model import TopicInfo
from raftlog.records import HEADER_SIZE, BatchBuilder
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes | None]]


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
    enable_idempotence: bool = False
    retries: int = 2**31 - 1
    retry_backoff_ms: int = 100
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
        for name in ("linger_ms", "retry_backoff_ms"):
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

    @property
    def acks_code(self) -> int:
        return -1 if self.acks in ("all", -1, "-1") else int(self.acks)


class BatchResult:
    """The outcome of one batch, shared by the futures of its records. Thread-safe.

    The threading.Event that blocking waiters sleep on is made by the first `wait` that has to
    block: most batches complete before anyone waits (or nobody ever waits), and an Event
    costs more to build than the rest of a one-record batch.
    """

    __slots__ = ("_callbacks", "_done", "_event", "base_offset", "error", "topic_partition")

    def __init__(self, tp: TopicPartition):
        self.topic_partition = tp
        self.base_offset = -1
        self.error: BaseException | None = None
        self._done = False
        self._event: threading.Event | None = None
        self._callbacks: list[Callable[[], None]] = []

    def done(self) -> bool:
        return self._done

    def complete(self, base_offset: int, error: BaseException | None = None) -> None:
        self.base_offset = base_offset
        self.error = error
        # `_done` is set before `_event` is read, and `wait` stores `_event` before it reads
        # `_done`: whichever runs second sees the other's write, so no waiter sleeps forever.
        self._done = True
        event = self._event
        if event is not None:
            event.set()
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb()

    def add_callback(self, cb: Callable[[], None]) -> None:
        # Appending then re-checking closes the race with complete() on another thread.
        self._callbacks.append(cb)
        if self._done and cb in self._callbacks:
            self._callbacks.remove(cb)
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


# Guards the lazy creation of BatchResult events (rare: only waits that must block take it).
_EVENT_LOCK = threading.Lock()


class RecordFuture:
    """The future of one sent record: `result()` / `get()`, `await`, callbacks."""

    __slots__ = ("_batch", "_index", "_timestamp")

    def __init__(self, batch: BatchResult, index: int, timestamp: int):
        self._batch, self._index, self._timestamp = batch, index, timestamp

    def done(self) -> bool:
        return self._batch.done()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        if not self._batch.wait(timeout):
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
        if not self._batch.wait(timeout):
            raise RaftlogTimeoutError(f"record not acknowledged within {timeout} s")
        return self._batch.error

    def add_done_callback(self, fn: Callable[[RecordFuture], Any]) -> None:
        self._batch.add_callback(lambda: fn(self))

    def __await__(self) -> Any:
        if not self.done():
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[None] = loop.create_future()

            def wake() -> None:
                loop.call_soon_threadsafe(_resolve, waiter)

            self._batch.add_callback(wake)
            yield from waiter.__await__()
        return self.result(0)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class _Batch:
    __slots__ = ("attempts", "builder", "created", "deadline", "result", "tp")

    def __init__(self, tp: TopicPartition, now: float, delivery_timeout_s: float):
        self.tp = tp
        self.builder = BatchBuilder()
        self.result = BatchResult(tp)
        self.created = now
        self.deadline = now + delivery_timeout_s
        self.attempts = 0


class _Accumulator:
    """Per-partition queues of batches; thread-safe (the sync producer's send runs anywhere)."""

    def __init__(self, config: ProducerConfig):
        self.config = config
        self.lock = threading.Lock()
        self.queues: dict[TopicPartition, collections.deque[_Batch]] = {}
        self.buffered_bytes = 0
        self.space = threading.Condition(self.lock)
        self.flushing = 0

    def append(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        now: float,
    ) -> tuple[RecordFuture, bool, bool]:
        """Add a record; returns (future, a batch is now complete, it started the only batch)."""
        config = self.config
        q = self.queues.get(tp)
        if q is None:
            q = self.queues[tp] = collections.deque()
        batch_size = config.batch_size
        before = q[-1].builder.size_bytes if q else batch_size
        # Close the open batch before this record would take it past batch_size (a batch
        # holds at least one record): batches then never outgrow what was configured, so a
        # batch_size near the broker's max_message_bytes cannot produce refused batches.
        # 25 = the record's fixed part plus its entry in the length table.
        record_bytes = 25 + (len(key) if key else 0) + (len(value) if value else 0)
        if headers:
            record_bytes += sum(8 + len(k.encode()) + len(v or b"") for k, v in headers)
        new_batch = before >= batch_size or (
            before > HEADER_SIZE and before + record_bytes > batch_size
        )
        closed = new_batch and bool(q)  # the previous batch is complete: send it
        if new_batch:
            q.append(_Batch(tp, now, config.delivery_timeout_ms / 1000))
            before = 0
        batch = q[-1]
        builder = batch.builder
        index = builder.append(key, value, timestamp, headers)
        size = builder.size_bytes
        self.buffered_bytes += size - before
        return (
            RecordFuture(batch.result, index, timestamp),
            closed or size >= batch_size,
            new_batch and len(q) == 1,
        )

    def drain(
        self,
        now: float,
        node_of: Callable[[TopicPartition], int | None],
        blocked: Callable[[int], bool],
        closing: bool,
    ) -> tuple[dict[int, list[_Batch]], float | None]:
        """Take the ready batches, grouped by leader; also the next time one becomes ready."""
        linger = self.config.linger_ms / 1000
        max_request = self.config.max_request_size
        ready: dict[int, list[_Batch]] = {}
        sizes: dict[int, int] = {}
        next_ready: float | None = None
        for tp, q in self.queues.items():
            if not q:
                continue
            first = q[0]
            is_ready = (
                len(q) > 1
                or first.builder.size_bytes >= self.config.batch_size
                or now - first.created >= linger
                or self.flushing
                or closing
            )
            if not is_ready:
                t = first.created + linger
                next_ready = t if next_ready is None else min(next_ready, t)
                continue
            node = node_of(tp)
            if node is None or blocked(node):
                continue
            while q:
                b = q[0]
                size = b.builder.size_bytes
                if ready.get(node) and sizes[node] + size > max_request:
                    break
                if b is q[-1] and not (
                    size >= self.config.batch_size
                    or now - b.created >= linger
                    or self.flushing
                    or closing
                ):
                    break
                q.popleft()
                ready.setdefault(node, []).append(b)
                sizes[node] = sizes.get(node, 0) + size
        return ready, next_ready

    def requeue(self, batch: _Batch) -> None:
        with self.lock:
            q = self.queues.setdefault(batch.tp, collections.deque())
            q.appendleft(batch)

    def release(self, nbytes: int) -> None:
        with self.lock:
            self.buffered_bytes -= nbytes
            self.space.notify_all()

    def pending(self) -> int:
        return sum(len(q) for q in self.queues.values())


class _ProducerCore:
    """The sender and accumulator shared by Producer and AsyncProducer; lives on one loop."""

    def __init__(self, config: ProducerConfig):
        self.config = config
        self.client = ClusterClient(
            config.bootstrap_servers, config.client_id, config.request_timeout_ms
        )
        self.acc = _Accumulator(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.wakeup: asyncio.Event | None = None
        self._wake_scheduled = False
        self._in_flight: dict[int, int] = collections.defaultdict(int)
        self._inflight_batches = 0
        self._sticky: dict[str, int] = {}
        # One TopicPartition per partition, reused: building a NamedTuple per record costs
        # more than looking it up.
        self._tps: dict[tuple[str, int], TopicPartition] = {}
        self._refreshing: set[str] = set()
        self._sender: asyncio.Task[None] | None = None
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle: asyncio.Event | None = None
        self.space: asyncio.Event | None = None

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.wakeup = asyncio.Event()
        self.space = asyncio.Event()
        self._idle = asyncio.Event()
        self._sender = asyncio.create_task(self._run())

    async def topic_metadata(self, topic: str) -> TopicInfo:
        """The topic's metadata for send(). A broker that cannot be reached (restarting, or
        the cached metadata was dropped after a failed batch) is retried until max_block_ms, as
        send() promises; an unknown topic fails at once, unless the broker auto-creates topics
        (a producer asks it to, as Kafka's does; the broker's setting decides)."""
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while True:
            try:
                return await self.client.topic(topic, allow_auto_create=True)
            except BrokerNotAvailableError:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    # -- called from any thread ----------------------------------------------------------------

    def choose_partition(
        self, topic: str, key: bytes | None, partition: int | None, partitions: int
    ) -> int:
        if partition is not None:
            if not 0 <= partition < partitions:
                raise RaftlogError(
                    f"partition {partition} of topic {topic!r} does not exist (it has {partitions})"
                )
            return partition
        if key is not None:
            return self.config.partitioner(key, partitions)
        p = self._sticky.get(topic)
        if p is None or p >= partitions:
            p = self._sticky[topic] = random.randrange(partitions)
        return p

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None,
        headers: Headers | None,
        partitions: int,
        block: bool = True,
    ) -> RecordFuture:
        ts = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        tp = self._tps.get((topic, partition))
        if tp is None:
            tp = self._tps[(topic, partition)] = TopicPartition(topic, partition)
        with self.acc.lock:
            # Only the thread-based producer blocks here; the asyncio one awaited space.
            if (
                block
                and self.acc.buffered_bytes >= self.config.buffer_memory
                and not self.acc.space.wait_for(
                    lambda: self.acc.buffered_bytes < self.config.buffer_memory,
                    self.config.max_block_ms / 1000,
                )
            ):
                raise RaftlogTimeoutError(
                    f"buffer_memory={self.config.buffer_memory} bytes stayed full for "
                    f"max_block_ms={self.config.max_block_ms}"
                )
            fut, full, first = self.acc.append(tp, key, value, ts, headers or (), time.monotonic())
            if full and key is None and self._sticky.get(topic) == partition and partitions > 1:
                # Sticky partitioning: the batch is full, the next records go elsewhere.
                self._sticky[topic] = (partition + random.randrange(1, partitions)) % partitions
            wake = full or first
            if wake and not self._wake_scheduled:
                self._wake_scheduled = True
            else:
                wake = False
        if wake:
            self._wake()
        return fut

    def _wake(self) -> None:
        loop = self.loop
        assert loop is not None and self.wakeup is not None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.wakeup.set()
        else:
            loop.call_soon_threadsafe(self.wakeup.set)

    def begin_flush(self) -> None:
        with self.acc.lock:
            self.acc.flushing += 1
        self._wake()

    def end_flush(self) -> None:
        with self.acc.lock:
            self.acc.flushing -= 1

    # -- the sender (on the loop) --------------------------------------------------------------

    async def _run(self) -> None:
        assert self.wakeup is not None and self._idle is not None
        max_in_flight = self.config.max_in_flight_requests_per_connection
        while True:
            now = time.monotonic()
            with self.acc.lock:
                self._wake_scheduled = False
                ready, next_ready = self.acc.drain(
                    now, self._node_of, lambda n: self._in_flight[n] >= max_in_flight, self._closing
                )
                pending = self.acc.pending()
            for node, batches in ready.items():
                self._in_flight[node] += 1
                self._inflight_batches += len(batches)
                task = asyncio.create_task(self._send(node, batches))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            if pending == 0 and self._inflight_batches == 0:
                self._idle.set()
                if self._closing:
                    return
            else:
                self._idle.clear()
            if ready and pending:
                # More batches wait and a request just left: drain again at once (after the
                # new send tasks ran), so that every free in-flight slot is used, rather than
                # waiting for a wake-up that may only come with a response.
                await asyncio.sleep(0)
                continue
            timeout = None if next_ready is None else max(next_ready - time.monotonic(), 0)
            if pending and not ready and next_ready is None:
                # Batches wait for metadata or a free in-flight slot: poll again soon.
                timeout = self.config.retry_backoff_ms / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wakeup.wait(), timeout)
            self.wakeup.clear()

    def _node_of(self, tp: TopicPartition) -> int | None:
        try:
            return self.client.leader_for(tp)
        except RaftlogError:
            self._schedule_refresh(tp.topic)
            return None

    def _schedule_refresh(self, topic: str) -> None:
        if topic in self._refreshing:
            return
        self._refreshing.add(topic)
        task = asyncio.ensure_future(self._refresh(topic))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _refresh(self, topic: str) -> None:
        try:
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            await self.client.refresh_metadata([topic])
        except RaftlogError as e:
            log.debug("metadata refresh for %s failed: %s", topic, e)
        finally:
            self._refreshing.discard(topic)
        self._wake()

    async def _send(self, node: int, batches: list[_Batch]) -> None:
        acks = self.config.acks_code
        built = [(b, b.builder.build()) for b in batches]
        by_topic: dict[str, list[list[int]]] = {}
        payload: list[bytes] = []
        # Consecutive batches of one partition go as one chunk: one append, one answer.
        groups: list[tuple[TopicPartition, list[tuple[_Batch, bytes]]]] = []
        for b, raw in built:
            if groups and groups[-1][0] == b.tp:
                groups[-1][1].append((b, raw))
            else:
                groups.append((b.tp, [(b, raw)]))
        merged: dict[TopicPartition, list[tuple[_Batch, bytes]]] = {}
        for tp, items in groups:
            merged.setdefault(tp, []).extend(items)
        for tp, items in merged.items():
            size = sum(len(raw) for _, raw in items)
            by_topic.setdefault(tp.topic, []).append([tp.partition, size])
            payload.extend(raw for _, raw in items)
        body = {
            "acks": acks,
            "timeout_ms": self.config.request_timeout_ms,
            "topics": [[t, ps] for t, ps in by_topic.items()],
        }
        nbytes = sum(len(p) for p in payload)
        try:
            conn = await self.client.connection(node)
            await conn.wait_writable()
            if acks == 0:
                conn.send(protocol.ApiKey.PRODUCE, body, payload, expect_response=False)
                for b in batches:
                    b.result.complete(-1)
                return
            resp, _ = await conn.request(
                protocol.ApiKey.PRODUCE, body, payload, self.config.request_timeout_ms / 1000
            )
        except RaftlogError as e:
            for b in batches:
                self._retry_or_fail(b, e)
            return
        finally:
            self._in_flight[node] -= 1
            self._inflight_batches -= len(batches)
            self.acc.release(nbytes)
            if self.space is not None:
                self.space.set()
            self._wake()
        results = {(t, p[0]): p for t, ps in resp["topics"] for p in ps}
        for tp, items in merged.items():
            r = results.get((tp.topic, tp.partition))
            if r is None:
                err: RaftlogError | None = RaftlogError(f"no result for {tp} in the response")
            elif r[1]:
                err = error_from_code(r[1], r[4] or "")
            else:
                err = None
            if err is not None:
                for b, _ in items:
                    self._retry_or_fail(b, err)
                continue
            offset = r[2]
            for b, _ in items:
                b.result.complete(offset)
                offset += len(b.builder)

    def _retry_or_fail(self, batch: _Batch, error: RaftlogError) -> None:
        batch.attempts += 1
        if (
            error.retriable
            and batch.attempts <= self.config.retries
            and time.monotonic() < batch.deadline
        ):
            log.debug("retrying batch for %s after %s", batch.tp, error)
            self.client.invalidate(batch.tp.topic)
            with self.acc.lock:
                self.acc.buffered_bytes += batch.builder.size_bytes
            self.acc.requeue(batch)
            self._schedule_refresh(batch.tp.topic)
            return
        batch.result.complete(-1, error)

    async def wait_idle(self) -> None:
        assert self._idle is not None and self.wakeup is not None
        # `_idle` is only updated when the sender runs: records appended since its last pass
        # (an AsyncProducer's sends do not yield to it) must not find it still set.
        with self.acc.lock:
            busy = self.acc.pending() > 0 or self._inflight_batches > 0
        if busy:
            self._idle.clear()
        self.wakeup.set()
        await self._idle.wait()

    async def close(self, timeout_s: float | None) -> None:
        self._closing = True
        self._wake()
        if self._sender is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._sender), timeout_s)
            except TimeoutError:
                self._sender.cancel()
                with self.acc.lock:
                    leftovers = [b for q in self.acc.queues.values() for b in q]
                    self.acc.queues.clear()
                for b in leftovers:
                    b.result.complete(
                        -1, RaftlogTimeoutError("producer closed before the record was sent")
                    )
        for t in list(self._tasks):
            t.cancel()
        await self.client.close()


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
        info = self._core.client.topics.get(topic)
        if info is None:
            info = await asyncio.wait_for(
                self._core.topic_metadata(topic), self.config.max_block_ms / 1000
            )
        n = len(info.partitions)
        p = self._core.choose_partition(topic, key, partition, n)
        core = self._core
        if core.acc.buffered_bytes >= self.config.buffer_memory:
            await self._wait_for_space()
        return core.append(topic, p, key, value, timestamp_ms, headers, n, block=False)

    async def _wait_for_space(self) -> None:
        core = self._core
        assert core.space is not None
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while core.acc.buffered_bytes >= self.config.buffer_memory:
            core.space.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RaftlogTimeoutError(
                    f"buffer_memory={self.config.buffer_memory} bytes stayed full for "
                    f"max_block_ms={self.config.max_block_ms}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(core.space.wait(), remaining)

    async def send_and_wait(
        self, topic: str, value: bytes | None = None, **kw: Any
    ) -> RecordMetadata:
        return await (await self.send(topic, value, **kw))

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
        info = self._core.client.topics.get(topic)
        n = len(info.partitions) if info is not None else self.partitions_for(topic)
        p = self._core.choose_partition(topic, key, partition, n)
        return self._core.append(topic, p, key, value, timestamp_ms, headers, n)

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
