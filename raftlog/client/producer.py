"""Producers: `AsyncProducer` for asyncio code and `Producer` for threads, with Kafka's options.

How it works: `send` picks a partition and appends the record to that partition's open batch
in the accumulator (client/accumulator.py), and returns a `RecordFuture` (client/futures.py).
A sender task (client/sender.py) drains batches that are full (`batch_size`), old enough
(`linger_ms`) or flushed, groups them by partition leader and sends one Produce request per
broker with every ready batch, keeping at most `max_in_flight_requests_per_connection` requests
outstanding per broker. One result object per batch completes all of its records' futures
(Kafka's ProduceRequestResult), so completing a 1000-record batch costs one call, not 1000.

Where each rule lives:
- the options and their checks: `ProducerConfig` (client/producer_config.py);
- records into batches, partition choice (a key's hash, xxhash or Kafka's murmur2, and KIP-794's
  sticky partitioner: client/partitioner.py), the batch format (raftlog's own, or compressed
  Kafka v2 with `compression_type`: client/compressed.py), batch_size, the
  buffer_memory bound, the checks of a record's fields before it is queued, and which batches
  are ready: the accumulator (client/accumulator.py);
- delivery (retries with KIP-580's backoff, delivery timeouts, the errors a batch fails
  with), metadata, connections: the sender (client/sender.py);
- idempotence (producer id, epoch, sequences, one batch in flight until a partition has
  acknowledged one, KIP-360's epoch bump, outcome-unknown batches): the pure
  `IdempotenceState` (client/idempotence.py), on by default with acks=all;
- futures, their completion and the bound on every wait: client/futures.py.

`Producer` runs the same sender on an event loop in a background thread; `send` from any
thread only touches the accumulator under a lock and wakes the sender when a batch becomes
ready. `AsyncProducer` runs it on the caller's loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any

from raftlog.client.accumulator import Headers, PartitionBeyondMetadataError
from raftlog.client.futures import (
    EXPIRY_GRACE_S,
    BatchResult,
    RecordFuture,
    RecordFutures,
    RecordMetadata,
    Span,
)
from raftlog.client.producer_config import ProducerConfig, default_partitioner, retry_backoff_s
from raftlog.client.sender import Sender
from raftlog.errors import RaftlogError, RaftlogTimeoutError
from raftlog.invariants import InvariantError

__all__ = [
    "EXPIRY_GRACE_S",
    "AsyncProducer",
    "BatchResult",
    "Producer",
    "ProducerConfig",
    "RecordFuture",
    "RecordFutures",
    "RecordMetadata",
    "Span",
    "default_partitioner",
    "retry_backoff_s",
]

# The sender's former name, which bench/produce_path_bench.py imports from here.
_ProducerCore = Sender

# The sync Producer's send() hands the GIL to the sender thread after this many one-record
# batches (see Producer.send). Measured with one record per request: 43-59k rec/s without,
# 64-75k with. Only one-record batches count: there the sender's work per record (a request
# each) exceeds send()'s and the sender is the thread that must not starve; with batches of
# 50, yielding every 8 batches cost 25% (354k vs 470-499k rec/s).
YIELD_EVERY_BATCHES = 64


class AsyncProducer:
    """asyncio producer: `await producer.start()`, `fut = await producer.send(...)`."""

    def __init__(self, **options: Any):
        self.config = ProducerConfig(**options)
        self._core = Sender(self.config)
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
        refreshed = False
        while True:
            try:
                fut = core.acc.append(topic, value, key, headers, partition, timestamp_ms, False)
            except PartitionBeyondMetadataError:
                if refreshed:
                    raise
                refreshed = True
                fut = None
            if fut is not None:
                return fut
            async with asyncio.timeout(self.config.max_block_ms / 1000):
                await core.topic_metadata(topic, refreshed)

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
        refreshed = False
        while True:
            try:
                i = core.acc.append_many(topic, values, i, partition, False, spans)
            except PartitionBeyondMetadataError:
                if refreshed:
                    raise
                refreshed = True
            if i == len(values):
                return RecordFutures(spans)
            async with asyncio.timeout(self.config.max_block_ms / 1000):
                await core.topic_metadata(topic, refreshed)

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
        self._core = Sender(self.config)
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
        acc = core.acc
        if acc.batches_since_yield >= YIELD_EVERY_BATCHES:
            # Let the sender thread send what we queued: a thread that never blocks keeps
            # the GIL until the interpreter's switch interval (5 ms) forces it out, and
            # meanwhile responses wait unread and the broker runs dry.
            acc.batches_since_yield = 0
            time.sleep(0)
        refreshed = False
        while True:
            try:
                fut = acc.append(topic, value, key, headers, partition, timestamp_ms, True)
            except PartitionBeyondMetadataError:
                if refreshed:
                    raise
                refreshed = True
                fut = None
            if fut is not None:
                return fut
            self._call(core.topic_metadata(topic, refreshed), self.config.max_block_ms / 1000)

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
        refreshed = False
        while True:
            try:
                i = self._core.acc.append_many(topic, values, i, partition, True, spans)
            except PartitionBeyondMetadataError:
                if refreshed:
                    raise
                refreshed = True
            if i == len(values):
                time.sleep(0)  # let the sender thread send what is queued (see send())
                return RecordFutures(spans)
            self._call(self._core.topic_metadata(topic, refreshed), self.config.max_block_ms / 1000)

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
