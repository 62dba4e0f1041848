"""Produce: append the batches of many partitions from one request.

Body: {"acks": 0|1|-1, "timeout_ms": int, "topics": [[topic, [[partition, nbytes], ...]], ...]};
the payload is the partitions' batch bytes back to back, in body order. The broker validates
each batch (checksum, lengths, count) without decoding records, stamps offsets and the leader
epoch, and appends. Response: {"topics": [[topic, [[partition, error, base_offset,
log_start_offset, message], ...]], ...]}. acks=0 gets no response.

Seam for replication: acks=all will wait for the high watermark to pass the batch; on a single
node the ISR is this node alone, so the local append is the commit.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from raftlog.broker.connection import Response
from raftlog.errors import InvalidRequestError, RaftlogError
from raftlog.protocol import split_payload
from raftlog.topics import TopicPartition

if TYPE_CHECKING:
    from raftlog.broker.connection import Connection
    from raftlog.broker.server import Broker


def handle_produce(
    broker: Broker, body: dict[str, Any], payload: memoryview, conn: Connection
) -> Response | Awaitable[Response | None] | None:
    acks = body.get("acks", 1)
    if acks not in (0, 1, -1):
        raise InvalidRequestError(f"acks must be 0, 1 or -1 (all), got {acks!r}")
    topics = body["topics"]
    sizes = [int(p[1]) for _, parts in topics for p in parts]
    chunks = split_payload(payload, sizes)
    missing = broker.topics_to_auto_create(t for t, _ in topics)
    if missing:
        # Create first (through the quorum), then append: the first produce to a new topic
        # succeeds, as with Kafka's auto-creation.
        async def create_then_produce() -> Response | None:
            errors = await broker.auto_create(missing)
            return _produce(broker, acks, topics, chunks, errors)

        return create_then_produce()
    return _produce(broker, acks, topics, chunks, {})


def _produce(
    broker: Broker,
    acks: int,
    topics: list[Any],
    chunks: list[memoryview],
    topic_errors: dict[str, RaftlogError],
) -> Response | None:
    results = []
    logs = broker.logs
    pieces = iter(chunks)
    for topic, parts in topics:
        out = []
        for partition, _nbytes in parts:
            chunk = next(pieces)
            tp = TopicPartition(topic, partition)
            try:
                if topic_errors and topic in topic_errors:
                    raise topic_errors[topic]
                plog, epoch = broker.leader_log_and_epoch(tp)
                info = plog.append(chunk, epoch)
            except RaftlogError as e:
                out.append([partition, e.code, -1, -1, str(e)])
                continue
            logs.notify(tp)
            out.append([partition, 0, info.base_offset, info.log_start_offset, None])
        results.append([topic, out])
    if acks == 0:
        return None
    return Response({"topics": results})
