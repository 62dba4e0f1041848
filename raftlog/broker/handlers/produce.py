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

Seam for replication: acks=all will wait for the high watermark to pass the batch; on a single
node the ISR is this node alone, so the local append is the commit.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from raftlog.broker.connection import Response
from raftlog.errors import InvalidRequestError, RaftlogError
from raftlog.protocol import split_payload
from raftlog.storage import AppendInfo, PartitionLog
from raftlog.topics import TopicPartition

if TYPE_CHECKING:
    from raftlog.broker.connection import Connection
    from raftlog.broker.server import Broker


def handle_produce(
    broker: Broker, body: dict[str, Any], payload: memoryview, conn: Connection
) -> Response | Awaitable[Response | None] | None:
    """One Produce request on its own (the connection groups the common case instead)."""
    acks = ProduceGroup.acks_of(body)
    topics = body["topics"]
    missing = broker.topics_to_auto_create(t for t, _ in topics)
    group = ProduceGroup(broker)
    if missing:
        # Create first (through the quorum), then append: the first produce to a new topic
        # succeeds, as with Kafka's auto-creation.
        async def create_then_produce() -> Response | None:
            errors = await broker.auto_create(missing)
            results = group.add(acks, topics, payload, errors)
            group.finish()
            return None if acks == 0 else Response({"topics": results})

        return create_then_produce()
    results = group.add(acks, topics, payload)
    group.finish()
    return None if acks == 0 else Response({"topics": results})


class _Pending:
    """One partition's chunks in a group, and the response entries their outcomes fill."""

    __slots__ = ("chunks", "entries", "epoch", "plog")

    def __init__(self, plog: PartitionLog, epoch: int):
        self.plog = plog
        self.epoch = epoch
        self.chunks: list[memoryview] = []
        self.entries: list[list[Any]] = []


class ProduceGroup:
    """The Produce requests of one socket read: `add` each, then `finish` once.

    `add` checks a request and returns its response's `topics` list, whose per-partition
    entries `finish` completes with offsets or errors. Between the two, nothing is appended:
    the caller must not answer the requests before `finish`.
    """

    __slots__ = ("_broker", "_pending", "_requests")

    def __init__(self, broker: Broker):
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

    def add(
        self,
        acks: int,
        topics: list[Any],
        payload: memoryview,
        topic_errors: dict[str, RaftlogError] | None = None,
    ) -> list[Any]:
        """Take one request (acks already checked). Raises for a request that is malformed
        as a whole (then nothing of it is kept); partition-level errors go in its entries."""
        sizes = [int(p[1]) for _, parts in topics for p in parts]
        chunks = split_payload(payload, sizes)
        self._requests += 1
        results: list[Any] = []
        pending = self._pending
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
                        plog, epoch = self._broker.leader_log_and_epoch(
                            TopicPartition(topic, partition)
                        )
                        p = _Pending(plog, epoch)
                    except RaftlogError as e:
                        p = e
                    pending[key] = p
                if isinstance(p, RaftlogError):
                    out.append([partition, p.code, -1, -1, str(p)])
                    continue
                entry = [partition, 0, -1, -1, None]
                p.chunks.append(chunk)
                p.entries.append(entry)
                out.append(entry)
            results.append([topic, out])
        return results

    def finish(self) -> None:
        """Append every partition's chunks (one write per partition) and fill the entries."""
        logs = self._broker.logs
        for (topic, partition), p in self._pending.items():
            if isinstance(p, RaftlogError):
                continue
            outcomes: list[AppendInfo | RaftlogError]
            try:
                outcomes = p.plog.append_chunks(p.chunks, p.epoch)
            except RaftlogError as e:
                outcomes = [e] * len(p.chunks)
            appended = False
            for entry, outcome in zip(p.entries, outcomes, strict=True):
                if isinstance(outcome, RaftlogError):
                    entry[1:] = [outcome.code, -1, -1, str(outcome)]
                else:
                    entry[2] = outcome.base_offset
                    entry[3] = outcome.log_start_offset
                    appended = True
            if appended:
                logs.notify(TopicPartition(topic, partition))
        self._pending.clear()
        self._requests = 0
