"""Fetch: read many partitions in one request, long-polling until enough data arrives.

Body: {"replica_id": -1, "max_wait_ms": int, "min_bytes": int, "max_bytes": int,
"topics": [[topic, [[partition, offset, partition_max_bytes], ...]], ...]}.
Response: {"topics": [[topic, [[partition, error, high_watermark, log_start_offset, nbytes,
message], ...]], ...]} and the payload: each partition's whole batches back to back, in body
order. The first partition with data returns at least one whole batch even when it exceeds the
limits (so consumers always progress); later ones stay within the remaining `max_bytes`.

Consumers read only below the high watermark; on a single node it is the log end offset.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from raftlog.broker.connection import Response
from raftlog.errors import RaftlogError
from raftlog.storage import FileSlice
from raftlog.topics import TopicPartition

if TYPE_CHECKING:
    from raftlog.broker.connection import Connection
    from raftlog.broker.server import Broker

MAX_WAIT_MS_LIMIT = 5 * 60 * 1000


def handle_fetch(
    broker: Broker, body: dict[str, Any], payload: memoryview, conn: Connection
) -> Response | asyncio.Future[Response] | Any:
    max_wait_ms = min(max(int(body.get("max_wait_ms", 500)), 0), MAX_WAIT_MS_LIMIT)
    min_bytes = max(int(body.get("min_bytes", 1)), 0)
    max_bytes = max(int(body.get("max_bytes", 50 * 1024 * 1024)), 1)
    wanted = [
        (TopicPartition(str(topic), int(p[0])), int(p[1]), max(int(p[2]), 1))
        for topic, parts in body["topics"]
        for p in parts
    ]
    response, total, errors = _read(broker, wanted, max_bytes)
    if total >= min_bytes or max_wait_ms == 0 or errors:
        return response
    return _wait_and_read(broker, wanted, max_bytes, min_bytes, max_wait_ms)


async def _wait_and_read(
    broker: Broker,
    wanted: list[tuple[TopicPartition, int, int]],
    max_bytes: int,
    min_bytes: int,
    max_wait_ms: int,
) -> Response:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    tps = [tp for tp, _, _ in wanted]
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0 or broker.stopping:
            break
        fut: asyncio.Future[None] = loop.create_future()
        broker.logs.add_waiter(tps, fut)
        try:
            await asyncio.wait_for(fut, remaining)
        except TimeoutError:
            pass
        finally:
            broker.logs.remove_waiter(tps, fut)
        response, total, errors = _read(broker, wanted, max_bytes)
        if total >= min_bytes or errors:
            return response
    return _read(broker, wanted, max_bytes)[0]


def _read(
    broker: Broker, wanted: list[tuple[TopicPartition, int, int]], max_bytes: int
) -> tuple[Response, int, int]:
    zero_copy = broker.config.fetch_zero_copy
    by_topic: dict[str, list[list[Any]]] = {}
    parts: list[bytes | memoryview | FileSlice] = []
    remaining = max_bytes
    total = errors = 0
    for tp, offset, partition_max in wanted:
        out = by_topic.setdefault(tp.topic, [])
        try:
            plog = broker.leader_log(tp)
            hw = broker.high_watermark(tp, plog)
            if total and remaining <= 0:
                out.append([tp.partition, 0, hw, plog.log_start_offset, 0, None])
                continue
            # read_slice returns at least one whole batch, however small the limit: that is
            # the progress guarantee, and only the response's first batch may use it.
            sl = plog.read_slice(offset, min(partition_max, remaining), max_offset=hw)
        except RaftlogError as e:
            out.append([tp.partition, e.code, -1, -1, 0, str(e)])
            errors += 1
            continue
        if total and sl.size > remaining:
            out.append([tp.partition, 0, hw, plog.log_start_offset, 0, None])
            continue
        if sl.size:
            parts.append(sl if zero_copy else sl.read())
        out.append([tp.partition, 0, hw, plog.log_start_offset, sl.size, None])
        total += sl.size
        remaining -= sl.size
    body = {"topics": [[t, ps] for t, ps in by_topic.items()]}
    return Response(body, parts), total, errors
