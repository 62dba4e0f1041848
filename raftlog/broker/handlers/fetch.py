"""Fetch: read many partitions in one request, long-polling until enough data arrives.

Consumers and followers use the same request. Body: {"replica_id": -1 (a consumer) or the
follower's node id, "replica_epoch": the follower's broker epoch, "max_wait_ms": int,
"min_bytes": int, "max_bytes": int, "topics": [[topic, [[partition, offset,
partition_max_bytes, current_leader_epoch, last_fetched_epoch, durable_offset], ...]], ...]};
the last three partition fields are optional (-1: not stated; followers state all three).

Response: {"topics": [[topic, [[partition, error, high_watermark, log_start_offset, nbytes,
message, diverging], ...]], ...]} and the payload: each partition's whole batches back to back,
in body order. `diverging` is null, or [epoch, end_offset] when a follower's log diverges from
the leader's (it must truncate, and gets no data). An OffsetOutOfRange error carries the
leader's log start offset. The first partition with data returns at least one whole batch even
when it exceeds the limits (so readers always progress); later ones stay within the remaining
`max_bytes`.

Rules:
- Consumers read only below the high watermark; followers up to the log end. A stated
  `current_leader_epoch` older than the leader's is FencedLeaderEpochError, newer
  UnknownLeaderEpochError (KIP-320).
- A follower's fetch is its progress report: it is given to the replication core once, when
  the request arrives (moving the high watermark, maybe the ISR); a long-poll then re-reads
  only data. Followers wait for appends, consumers for the high watermark to move.
- A long-poll waits from its read on: its waiter is registered before the handler returns,
  in the same step as the read that found too little. The wait itself runs later (a task), and
  an append in between (a Produce in the same socket read, or from another connection first
  in the event loop's queue) must wake it, not leave it to sit out max_wait_ms; a follower's
  missed wake-up stalls every acks=all produce on the partition for its 500 ms wait.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raftlog.broker.connection import Response
from raftlog.errors import InvalidRequestError, OffsetOutOfRangeError, RaftlogError
from raftlog.replication.core import UNDEFINED_EPOCH, FollowerFetch
from raftlog.storage import FileSlice
from raftlog.topics import TopicPartition

if TYPE_CHECKING:
    from raftlog.broker.connection import Connection
    from raftlog.broker.server import Broker

MAX_WAIT_MS_LIMIT = 5 * 60 * 1000


@dataclass(slots=True)
class _Want:
    tp: TopicPartition
    offset: int
    max_bytes: int
    leader_epoch: int
    # Followers: settled when the request arrived.
    error: RaftlogError | None = None
    diverging: tuple[int, int] | None = None


def handle_fetch(
    broker: Broker, body: dict[str, Any], payload: memoryview, conn: Connection
) -> Response | asyncio.Future[Response] | Any:
    max_wait_ms = min(max(int(body.get("max_wait_ms", 500)), 0), MAX_WAIT_MS_LIMIT)
    min_bytes = max(int(body.get("min_bytes", 1)), 0)
    max_bytes = max(int(body.get("max_bytes", 50 * 1024 * 1024)), 1)
    replica_id = int(body.get("replica_id", -1))
    wanted: list[_Want] = []
    for topic, parts in body["topics"]:
        for p in parts:
            if len(p) < 3:
                raise InvalidRequestError(f"fetch of {topic}: a partition entry needs 3 fields")
            wanted.append(
                _Want(
                    TopicPartition(str(topic), int(p[0])),
                    int(p[1]),
                    max(int(p[2]), 1),
                    int(p[3]) if len(p) > 3 else -1,
                )
            )
            if replica_id >= 0:
                _check_follower(broker, replica_id, body, p, wanted[-1])
    follower = replica_id >= 0
    response, total, urgent = _read(broker, wanted, max_bytes, follower)
    if total >= min_bytes or max_wait_ms == 0 or urgent:
        return response
    # Waiting starts now, not when the coroutine first runs (see the module rules).
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    woken: asyncio.Future[None] = loop.create_future()
    broker.replicas.add_waiter([w.tp for w in wanted], woken, follower)
    return _wait_and_read(broker, wanted, max_bytes, min_bytes, deadline, follower, woken)


def _check_follower(
    broker: Broker, replica_id: int, body: dict[str, Any], p: list[Any], want: _Want
) -> None:
    """Give a follower's fetch to the replication core (once): progress, HW, divergence."""
    spec = FollowerFetch(
        fetch_offset=want.offset,
        last_fetched_epoch=int(p[4]) if len(p) > 4 else UNDEFINED_EPOCH,
        current_leader_epoch=want.leader_epoch,
        durable_offset=int(p[5]) if len(p) > 5 else want.offset,
    )
    try:
        _, answer = broker.replicas.follower_fetch(
            want.tp, replica_id, int(body.get("replica_epoch", -1)), spec
        )
    except RaftlogError as e:
        want.error = e
        return
    want.diverging = answer.diverging


async def _wait_and_read(
    broker: Broker,
    wanted: list[_Want],
    max_bytes: int,
    min_bytes: int,
    deadline: float,
    follower: bool,
    woken: asyncio.Future[None],
) -> Response:
    """Wait on `woken` (registered by the caller) until `deadline` (loop time), re-reading
    after each wake-up; a new waiter is registered in the same step as each re-read."""
    loop = asyncio.get_running_loop()
    tps = [w.tp for w in wanted]
    replicas = broker.replicas
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0 or broker.stopping:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await woken
            replicas.remove_waiter(tps, woken, follower)
            response, total, urgent = _read(broker, wanted, max_bytes, follower)
            if total >= min_bytes or urgent:
                return response
            woken = loop.create_future()
            replicas.add_waiter(tps, woken, follower)
    finally:
        replicas.remove_waiter(tps, woken, follower)
    return _read(broker, wanted, max_bytes, follower)[0]


def _read(
    broker: Broker, wanted: list[_Want], max_bytes: int, follower: bool
) -> tuple[Response, int, bool]:
    """(the response, its data bytes, whether it must go now: an error or a divergence)."""
    zero_copy = broker.config.fetch_zero_copy
    zero_copy_min = broker.config.fetch_zero_copy_min_bytes
    replicas = broker.replicas
    by_topic: dict[str, list[list[Any]]] = {}
    parts: list[bytes | memoryview | FileSlice] = []
    remaining = max_bytes
    total = 0
    urgent = False
    for w in wanted:
        tp = w.tp
        out = by_topic.setdefault(tp.topic, [])
        try:
            if w.error is not None:
                raise w.error
            if follower:
                part = broker.leader_partition(tp)
                limit = part.log.log_end_offset
            else:
                broker.leader_partition(tp)  # the clearest error if not led here
                part, limit = replicas.consumer_fetch(tp, w.leader_epoch)
            hw, log_start = part.high_watermark, part.log.log_start_offset
            if w.diverging is not None:
                out.append([tp.partition, 0, hw, log_start, 0, None, list(w.diverging)])
                urgent = True
                continue
            if total and remaining <= 0:
                out.append([tp.partition, 0, hw, log_start, 0, None, None])
                continue
            # read_slice returns at least one whole batch, however small the limit: that is
            # the progress guarantee, and only the response's first batch may use it.
            sl = part.log.read_slice(w.offset, min(w.max_bytes, remaining), max_offset=limit)
        except RaftlogError as e:
            start = e.log_start_offset if isinstance(e, OffsetOutOfRangeError) else -1
            out.append([tp.partition, e.code, -1, start, 0, str(e), None])
            urgent = True
            continue
        if total and sl.size > remaining:
            out.append([tp.partition, 0, hw, log_start, 0, None, None])
            continue
        if sl.size:
            if zero_copy and sl.size >= zero_copy_min:
                parts.append(sl)
            else:
                try:
                    parts.append(sl.read())
                except RaftlogError as e:
                    out.append([tp.partition, e.code, -1, -1, 0, str(e), None])
                    urgent = True
                    continue
        out.append([tp.partition, 0, hw, log_start, sl.size, None, None])
        total += sl.size
        remaining -= sl.size
    body = {"topics": [[t, ps] for t, ps in by_topic.items()]}
    return Response(body, parts), total, urgent
