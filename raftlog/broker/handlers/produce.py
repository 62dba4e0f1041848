"""Produce: append the batches of many partitions from one request, and of many requests at once.

Messages: `ProduceRequest` and `ProduceResponse` (raftlog/messages/produce.py); the payload is
the partitions' batch bytes back to back, in body order. The broker validates each batch
(checksum, lengths, count) without decoding records, stamps offsets and the leader epoch, and
appends. acks=0 gets no response.

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
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from raftlog.broker.response import Response
from raftlog.errors import InvalidRequestError, RaftlogError
from raftlog.messages.produce import ProducePartitionResult, ProduceRequest, ProduceResponse
from raftlog.protocol import split_payload
from raftlog.topics import TopicPartition

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource
    from raftlog.replication.partition import Partition

# A request's answer as `ProduceGroup.add` builds it: per topic, its partitions' results, which
# `finish` (and acks=all's commits) replace in place until the response is written.
Results = list[tuple[str, list[ProducePartitionResult]]]

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

    def done_callback(
        self, out: list[ProducePartitionResult], i: int, partition: int
    ) -> Callable[[RaftlogError | None], None]:
        """The callback of `out[i]`'s commit: an error replaces that result."""
        self.remaining += 1

        def done(error: RaftlogError | None) -> None:
            if error is not None:
                out[i] = _failed(partition, error)
            self.remaining -= 1
            if self.remaining == 0 and self.on_done is not None:
                self.on_done()

        return done

    def response(self, results: Results) -> Response | Awaitable[Response]:
        """The response now if every partition is settled, else an awaitable of it."""
        if self.remaining == 0:
            return response_of(results)
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

        def answer() -> None:
            if not fut.done():
                fut.set_result(response_of(results))

        self.on_done = answer
        return fut


def response_of(results: Results) -> Response:
    return Response(ProduceResponse.body_of(results))


def _failed(partition: int, e: RaftlogError) -> ProducePartitionResult:
    return ProducePartitionResult(partition, e.code, -1, -1, str(e))


# The result of a chunk not appended yet (`finish` replaces it), shared: one object less per
# partition on the per-request path.
_UNSET = ProducePartitionResult(-1)


def handle_produce(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response | Awaitable[Response | None] | None:
    """One Produce request on its own (the connection groups the common case instead)."""
    request = ProduceRequest.from_body(body)
    acks = ProduceGroup.acks_of(request)
    timeout_ms = ProduceGroup.timeout_of(request)
    missing = broker.topics_to_auto_create(request.topic_names())
    group = ProduceGroup(broker)
    if missing:
        # Create first (through the quorum), then append: the first produce to a new topic
        # succeeds, as with Kafka's auto-creation.
        async def create_then_produce() -> Response | None:
            errors = await broker.auto_create(missing)
            results, wait = group.add(acks, request, payload, errors, timeout_ms)
            group.finish()
            if acks == 0:
                return None
            return await _settled(wait.response(results) if wait else response_of(results))

        return create_then_produce()
    results, wait = group.add(acks, request, payload, None, timeout_ms)
    group.finish()
    if acks == 0:
        return None
    return wait.response(results) if wait is not None else response_of(results)


async def _settled(response: Response | Awaitable[Response]) -> Response:
    return response if isinstance(response, Response) else await response


class _Pending:
    """One partition's chunks in a group, and where in the answers their outcomes go."""

    __slots__ = ("chunks", "entries", "number", "partition", "waits")

    def __init__(self, partition: Partition, number: int):
        self.partition = partition
        self.number = number  # the partition's number in its topic
        self.chunks: list[memoryview] = []
        # Per chunk: its request's results of this topic, and its place in them.
        self.entries: list[tuple[list[ProducePartitionResult], int]] = []
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
    def acks_of(request: ProduceRequest) -> int:
        acks = request.acks
        if acks not in (0, 1, -1):
            raise InvalidRequestError(f"acks must be 0, 1 or -1 (all), got {acks!r}")
        return acks

    @staticmethod
    def timeout_of(request: ProduceRequest) -> int:
        timeout_ms = request.timeout_ms
        if timeout_ms < 0:
            raise InvalidRequestError(f"timeout_ms must be an integer >= 0, got {timeout_ms!r}")
        return min(timeout_ms, PRODUCE_TIMEOUT_MS_MAX)

    def add(
        self,
        acks: int,
        request: ProduceRequest,
        payload: memoryview,
        topic_errors: dict[str, RaftlogError] | None = None,
        timeout_ms: int = DEFAULT_PRODUCE_TIMEOUT_MS,
    ) -> tuple[Results, CommitWait | None]:
        """Take one request (acks already checked). Raises for a request that is malformed
        as a whole (then nothing of it is kept); partition-level errors go in its results.
        Returns its response's results and, for acks=all, its wait for commits."""
        chunks = iter(split_payload(payload, request.sizes()))
        return self.add_chunks(
            acks,
            [
                (topic, [(p.partition, next(chunks)) for p in parts])
                for topic, parts in request.topics
            ],
            topic_errors,
            timeout_ms,
        )

    def add_chunks(
        self,
        acks: int,
        topics: Iterable[tuple[str, Iterable[tuple[int, memoryview]]]],
        topic_errors: dict[str, RaftlogError] | None = None,
        timeout_ms: int = DEFAULT_PRODUCE_TIMEOUT_MS,
    ) -> tuple[Results, CommitWait | None]:
        """`add` for a request already split into its partitions' chunks (the Kafka
        listener's Produce: raftlog/kafka/handlers/produce.py), in request order."""
        self._requests += 1
        results: Results = []
        pending = self._pending
        wait = CommitWait() if acks == -1 else None
        for topic, parts in topics:
            out: list[ProducePartitionResult] = []
            for partition, chunk in parts:
                if topic_errors and topic in topic_errors:
                    out.append(_failed(partition, topic_errors[topic]))
                    continue
                key = (topic, partition)
                p = pending.get(key)
                if p is None:
                    try:
                        p = _Pending(
                            self._broker.writable_partition(TopicPartition(topic, partition)),
                            partition,
                        )
                    except RaftlogError as e:
                        p = e
                    pending[key] = p
                if isinstance(p, RaftlogError):
                    out.append(_failed(partition, p))
                    continue
                if wait is not None:
                    refused = p.partition.core.check_produce(acks)
                    if refused is not None:
                        out.append(_failed(partition, refused))
                        continue
                p.chunks.append(chunk)
                p.entries.append((out, len(out)))
                p.waits.append(None if wait is None else (wait, timeout_ms))
                out.append(_UNSET)  # filled in by `finish`
            results.append((topic, out))
        return results, wait

    def finish(self) -> None:
        """Append every partition's chunks (one write per partition), fill in the results,
        and start the acks=all waits."""
        replicas = self._broker.replicas
        stats = self._broker.stats
        traffic = stats.traffic if stats.enabled else None
        for (topic, _), p in self._pending.items():
            if isinstance(p, RaftlogError) or not p.chunks:
                continue
            waits = [
                None if w is None else (w[1], w[0].done_callback(out, i, p.number))
                for (out, i), w in zip(p.entries, p.waits, strict=True)
            ]
            outcomes = replicas.append_as_leader(p.partition, p.chunks, waits)
            number = p.number
            appended_bytes = appended_records = 0
            for (out, i), outcome in zip(p.entries, outcomes, strict=True):
                if isinstance(outcome, RaftlogError):
                    out[i] = _failed(number, outcome)
                    continue
                appended_bytes += outcome.size_bytes
                appended_records += outcome.record_count
                r = out[i]
                base_offset, log_start = outcome.base_offset, outcome.log_start_offset
                if r is _UNSET:
                    out[i] = ProducePartitionResult.appended(number, base_offset, log_start)
                else:
                    # An acks=all wait that failed during the append keeps its error, with
                    # the append's offsets (as the answer always had it).
                    out[i] = ProducePartitionResult(
                        number, r.error, base_offset, log_start, r.message
                    )
            if traffic is not None and appended_records:
                # The metrics: once per partition of the group, from the appends' own counts.
                traffic.appended(topic, appended_bytes, appended_records)
        self._pending.clear()
        self._requests = 0
