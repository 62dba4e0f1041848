"""`Consumer`: the synchronous consumer, an `AsyncConsumer` (consumer.py, which has the rules
of consuming) on an event loop in a background thread.

The thread also keeps group heartbeats going while the application works between polls;
`for record in consumer:` blocks for new data and never ends. Its `close` is bounded, so a
broker that stops answering cannot hang the caller. Rebalance listener callbacks run in the
thread that called poll (or close), not on the loop.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from raftlog.client.consumer import AsyncConsumer, Listener
from raftlog.client.fetched import ConsumerRecord
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

# Consumer._stop_loop waits this long for the loop's tasks to end, and for its thread.
STOP_TIMEOUT_S = 10.0


def _settle(reply: asyncio.Future[None], error: BaseException | None) -> None:
    if reply.done():
        return
    if error is None:
        reply.set_result(None)
    else:
        reply.set_exception(error)


async def _cancel_pending() -> None:
    """Cancel every other task of this loop and wait for them: nothing is left pending (and
    later destroyed with a warning) when the loop stops."""
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class Consumer:
    """Synchronous consumer: the AsyncConsumer on an event loop in a background thread.

    The thread keeps group heartbeats going while the application processes records between
    polls (as Kafka's heartbeat thread does); every call runs on that loop and waits for it.
    Rebalance listener callbacks run in the thread that called poll (or close), not on the
    loop: the loop hands them over and waits, so a callback may call this consumer (commit
    in on_partitions_revoked, seek in on_partitions_assigned), as Kafka's listener may.
    """

    def __init__(self, *topics: str, **options: Any):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="raftlog-consumer", daemon=True
        )
        # Listener calls handed over by the loop, run by the thread waiting in `_wait`.
        # Invariant: only while a call of this consumer runs on the loop (a poll or close
        # waits for its listener), so at most one at a time.
        self._listener_calls: collections.deque[
            tuple[Listener, set[TopicPartition], asyncio.Future[None]]
        ] = collections.deque()
        self._waiting = threading.Condition()
        self._thread.start()
        try:
            self._async = AsyncConsumer(*topics, **options)
            self._async._run_listener = self._run_listener_in_caller
            self.config = self._async.config
            self._run(self._async.start())
        except BaseException:
            self._stop_loop()
            raise

    def _run(self, coro: Any) -> Any:
        return self._wait(asyncio.run_coroutine_threadsafe(coro, self._loop), None)

    def _wait(self, fut: concurrent.futures.Future[Any], timeout_s: float | None) -> Any:
        """Wait for `fut` (a call on the loop), running the listener callbacks it hands over
        meanwhile; TimeoutError after `timeout_s` (None: no bound)."""
        fut.add_done_callback(self._notify)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while True:
                with self._waiting:
                    while not fut.done() and not self._listener_calls:
                        remaining = None if deadline is None else deadline - time.monotonic()
                        if remaining is not None and remaining <= 0:
                            raise TimeoutError(f"consumer call not done in {timeout_s} s")
                        self._waiting.wait(remaining)
                    if fut.done():
                        return fut.result()
                    callback, tps, reply = self._listener_calls.popleft()
                self._call_listener(callback, tps, reply)
        except BaseException:
            # A KeyboardInterrupt in the caller's thread must not leave the call running on
            # the loop (to race close(), or be destroyed pending when the loop stops).
            fut.cancel()
            raise

    def _notify(self, _: object = None) -> None:
        with self._waiting:
            self._waiting.notify_all()

    async def _run_listener_in_caller(self, callback: Listener, tps: set[TopicPartition]) -> None:
        """On the loop: hand `callback(tps)` to the thread waiting in `_wait`; its outcome."""
        reply: asyncio.Future[None] = self._loop.create_future()
        entry = (callback, tps, reply)
        with self._waiting:
            self._listener_calls.append(entry)
            self._waiting.notify_all()
        try:
            await reply
        finally:
            with self._waiting, contextlib.suppress(ValueError):
                self._listener_calls.remove(entry)  # not run yet: the poll was cancelled

    def _call_listener(
        self, callback: Listener, tps: set[TopicPartition], reply: asyncio.Future[None]
    ) -> None:
        try:
            callback(tps)
        except BaseException as e:
            self._loop.call_soon_threadsafe(_settle, reply, e)
            if not isinstance(e, Exception):
                raise  # KeyboardInterrupt: the caller's thread gets it too
            return
        self._loop.call_soon_threadsafe(_settle, reply, None)

    def _stop_loop(self) -> None:
        """Cancel what still runs on the loop (and wait for it, bounded), then stop it."""
        if self._thread.is_alive() and not self._loop.is_closed():
            done = asyncio.run_coroutine_threadsafe(_cancel_pending(), self._loop)
            try:
                done.result(STOP_TIMEOUT_S)
            except concurrent.futures.TimeoutError:
                log.warning("consumer tasks still running after %.0f s; stopping", STOP_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def subscribe(self, topics: Sequence[str]) -> None:
        self._run(self._async.subscribe(topics))

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        self._async.assign(partitions)

    def assignment(self) -> set[TopicPartition]:
        return self._async.assignment()

    def subscription(self) -> list[str]:
        return self._async.subscription()

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        if self._async._buffer and not self._async._group_work_due():
            # Records are already buffered: poll would return them without awaiting anything,
            # so take them without a trip through the event loop (most polls of a busy consumer).
            return self._async._take(max_records or self.config.max_poll_records)
        return self._run(self._async.poll(timeout_ms, max_records))  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while True:
            for records in self.poll(self.config.fetch_max_wait_ms).values():
                yield from records

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        self._async.seek(tp, offset)

    def seek_to_beginning(self, *tps: TopicPartition | tuple[str, int]) -> None:
        self._run(self._async.seek_to_beginning(*tps))

    def seek_to_end(self, *tps: TopicPartition | tuple[str, int]) -> None:
        self._run(self._async.seek_to_end(*tps))

    def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        return self._run(self._async.position(tp))  # type: ignore[no-any-return]

    def pause(self, *tps: TopicPartition | tuple[str, int]) -> None:
        self._async.pause(*tps)

    def resume(self, *tps: TopicPartition | tuple[str, int]) -> None:
        self._async.resume(*tps)

    def paused(self) -> set[TopicPartition]:
        return self._async.paused()

    def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._run(self._async.beginning_offsets(tps))  # type: ignore[no-any-return]

    def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._run(self._async.end_offsets(tps))  # type: ignore[no-any-return]

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        res = self._run(
            self._async.list_offsets({TopicPartition(*tp): ts for tp, ts in timestamps.items()})
        )
        return {tp: (o, ts) if o >= 0 else None for tp, (o, ts) in res.items()}

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        self._run(self._async.commit(offsets))

    def commit_async(
        self,
        offsets: dict[TopicPartition, int] | None = None,
        callback: Callable[[dict[TopicPartition, int], BaseException | None], Any] | None = None,
    ) -> None:
        """Commit without waiting; `callback(offsets, error)` runs on the consumer's thread."""

        async def start() -> None:
            self._async.commit_async(offsets, callback)

        self._run(start())

    def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._run(self._async.committed(tps))  # type: ignore[no-any-return]

    def close(self) -> None:
        """Commit, leave the group and close, within a bound: the final commit and the leave
        each give up after request_timeout_ms, so a close that takes longer than both (plus
        a margin) is stopped with a warning instead of hanging the caller."""
        if not self._loop.is_closed() and self._thread.is_alive():
            timeout_s = 2 * self.config.request_timeout_ms / 1000 + 5
            fut = asyncio.run_coroutine_threadsafe(self._async.close(), self._loop)
            try:
                self._wait(fut, timeout_s)
            except TimeoutError:
                log.warning("consumer close did not finish in %.0f s; stopped it", timeout_s)
            finally:
                self._stop_loop()
