"""Produce: append the batches of many partitions from one request, and of many requests at once.

Body: {"acks": 0|1|-1, "timeout_ms": int, "topics": [[topic, [[partition, nbytes], ...]], ...]};
the payload is the partitions' batch bytes back to back, in body order. The broker validates
each batch (checksum, lengths, count) without decoding records, stamps offsets and the leader
epoch, and appends. Response: {"topics": [[topic, [[partition, error, base_offset,
log_start_offset, message], ...]], ...]}. acks=0 gets no response.

Gathering (`ProduceGroup`): a client that pipelines many small Produce requests delivers dozens
of them in one socket read. The connection hands all the Produce requests of a read to one
group, which appends every partition's chunks with one `PartitionLog.append_chunks` (one
pwritev, one index update, one wake-up of long-polling fetches) instead of one append per
request. Each request keeps its own outcome: its own offsets, and its own error if its chunk is
corrupt or its partition is not led here. Rules: a request joins a group only if it can be
answered at once (no auto-creation pending); the group is finished before any other request of
the same read is handled, so a Fetch that follows a Produce on one connection sees its records;
responses still leave in request order.

Replication: each partition's chunks go to `ReplicaManager.append_as_leader` (one write at the
leader epoch; it wakes followers and registers the acks=all waits). acks=all is refused per
request before anything is appended when the ISR is below min.insync.replicas; otherwise the
request's answer waits (`CommitWait`) until every partition it wrote is committed (the high
watermark passed its last offset) or fails (the ISR fell below the minimum, its `timeout_ms`
passed, leadership moved). No task or future per request: the replication core completes a
callback, and the last one answers the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from raftlog.broker.response import Response
from raftlog.errors import InvalidRequestError, RaftlogError
from raftlog.protocol import split_payload
from raftlog.topics import TopicPartition

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource
    from raftlog.replication.partition import Partition

# Kafka's request.timeout.ms default for a produce that does not say; and the most a request
# may ask for (a waiting acks=all request holds its response slot and its callback).
DEFAULT_PRODUCE_TIMEOUT_MS = 30_000
PRODUCE_TIMEOUT_MS_MAX = 5 * 60 * 1000


class CommitWait:
    """An acks=all request's wait for its partitions' commits; `on_done` answers it."""

    __slots__ = ("on_done", "remaining")

    def __init__(self) -> None:
        self.remaining = 0
        self.on_done: Callable[[], None] | None = None

    def done_callback(self, entry: list[Any]) -> Callable[[RaftlogError | None], None]:
        self.remaining += 1

        def done(error: RaftlogError | None) -> None:
            if error is not None:
                entry[1:] = [error.code, -1, -1, str(error)]
            self.remaining -= 1
            if self.remaining == 0 and self.on_done is not None:
                self.on_done()

        return done

    def response(self, results: list[Any]) -> Response | Awaitable[Response]:
        """The response now if every partition is settled, else an awaitable of it."""
        if self.remaining == 0:
            return Response({"topics": results})
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

        def answer() -> None:
            if not fut.done():
                fut.set_result(Response({"topics": results}))

        self.on_done = answer
        return fut


def handle_produce(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response | Awaitable[Response | None] | None:
    """One Produce request on its own (the connection groups the common case instead)."""
    acks = ProduceGroup.acks_of(body)
    timeout_ms = ProduceGroup.timeout_of(body)
    topics = body["topics"]
    missing = broker.topics_to_auto_create(t for t, _ in topics)
    group = ProduceGroup(broker)
    if missing:
        # Create first (through the quorum), then append: the first produce to a new topic
        # succeeds, as with Kafka's auto-creation.
        async def create_then_produce() -> Response | None:
            errors = await broker.auto_create(missing)
            results, wait = group.add(acks, topics, payload, errors, timeout_ms)
            group.finish()
            if acks == 0:
                return None
            return await _settled(wait.response(results) if wait else Response({"topics": results}))

        return create_then_produce()
    results, wait = group.add(acks, topics, payload, None, timeout_ms)
    group.finish()
    if acks == 0:
        return None
    return wait.response(results) if wait is not None else Response({"topics": results})


async def _settled(response: Response | Awaitable[Response]) -> Response:
    return response if isinstance(response, Response) else await response


class _Pending:
    """One partition's chunks in a group, and the response entries their outcomes fill."""

    __slots__ = ("chunks", "entries", "partition", "waits")

    def __init__(self, partition: Partition):
        self.partition = partition
        self.chunks: list[memoryview] = []
        self.entries: list[list[Any]] = []
        # Per chunk: the acks=all request's wait and timeout, or None.
        self.waits: list[tuple[CommitWait, int] | None] = []


class ProduceGroup:
    """The Produce requests of one socket read: `add` each, then `finish` once.

    `add` checks a request and returns its response's `topics` list, whose per-partition
    entries `finish` completes with offsets or errors. Between the two, nothing is appended:
    the caller must not answer the requests before `finish`.
    """

    __slots__ = ("_broker", "_pending", "_requests")

    def __init__(self, broker: HandlerContext):
        self._broker = broker
        # Partitions in first-seen order; a key maps to its chunks, or to the error every
        # chunk for it gets (unknown partition, not the leader).
        self._pending: dict[tuple[str, int], _Pending | RaftlogError] = {}
        self._requests = 0

    def __len__(self) -> int:
        """Requests added since the last `finish`."""
        return self._requests

    @staticmethod
    def acks_of(body: dict[str, Any]) -> int:
        acks = body.get("acks", 1)
        if acks not in (0, 1, -1):
            raise InvalidRequestError(f"acks must be 0, 1 or -1 (all), got {acks!r}")
        return int(acks)

    @staticmethod
    def timeout_of(body: dict[str, Any]) -> int:
        timeout_ms = body.get("timeout_ms", DEFAULT_PRODUCE_TIMEOUT_MS)
        if type(timeout_ms) is not int or timeout_ms < 0:
            raise InvalidRequestError(f"timeout_ms must be an integer >= 0, got {timeout_ms!r}")
        return min(timeout_ms, PRODUCE_TIMEOUT_MS_MAX)

    def add(
        self,
        acks: int,
        topics: list[Any],
        payload: memoryview,
        topic_errors: dict[str, RaftlogError] | None = None,
        timeout_ms: int = DEFAULT_PRODUCE_TIMEOUT_MS,
    ) -> tuple[list[Any], CommitWait | None]:
        """Take one request (acks already checked). Raises for a request that is malformed
        as a whole (then nothing of it is kept); partition-level errors go in its entries.
        Returns its response's topics list and, for acks=all, its wait for commits."""
        sizes = [int(p[1]) for _, parts in topics for p in parts]
        chunks = split_payload(payload, sizes)
        self._requests += 1
        results: list[Any] = []
        pending = self._pending
        wait = CommitWait() if acks == -1 else None
        i = 0
        for topic, parts in topics:
            out: list[Any] = []
            for part in parts:
                partition = part[0]
                chunk = chunks[i]
                i += 1
                if topic_errors and topic in topic_errors:
                    e = topic_errors[topic]
                    out.append([partition, e.code, -1, -1, str(e)])
                    continue
                key = (topic, partition)
                p = pending.get(key)
                if p is None:
                    try:
                        p = _Pending(
                            self._broker.leader_partition(TopicPartition(topic, partition))
                        )
                    except RaftlogError as e:
                        p = e
                    pending[key] = p
                if isinstance(p, RaftlogError):
                    out.append([partition, p.code, -1, -1, str(p)])
                    continue
                if wait is not None:
                    refused = p.partition.core.check_produce(acks)
                    if refused is not None:
                        out.append([partition, refused.code, -1, -1, str(refused)])
                        continue
                entry = [partition, 0, -1, -1, None]
                p.chunks.append(chunk)
                p.entries.append(entry)
                p.waits.append(None if wait is None else (wait, timeout_ms))
                out.append(entry)
            results.append([topic, out])
        return results, wait

    def finish(self) -> None:
        """Append every partition's chunks (one write per partition), fill the entries, and
        start the acks=all waits."""
        replicas = self._broker.replicas
        for p in self._pending.values():
            if isinstance(p, RaftlogError) or not p.chunks:
                continue
            waits = [
                None if w is None else (w[1], w[0].done_callback(entry))
                for entry, w in zip(p.entries, p.waits, strict=True)
            ]
            outcomes = replicas.append_as_leader(p.partition, p.chunks, waits)
            for entry, outcome in zip(p.entries, outcomes, strict=True):
                if isinstance(outcome, RaftlogError):
                    entry[1:] = [outcome.code, -1, -1, str(outcome)]
                else:
                    entry[2] = outcome.base_offset
                    entry[3] = outcome.log_start_offset
        self._pending.clear()
        self._requests = 0
