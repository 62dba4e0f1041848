"""Kafka's Produce (v3-8): the native produce path, with Kafka's request and response.

A Kafka client's record batches (v2: magic 2, CRC-32C) go to the same
`ProduceGroup.add_chunks` as the native listener's batches (raftlog/broker/handlers/
produce.py): the same leader check, acks=all refusal below min.insync.replicas, one append per
partition through `ReplicaManager.append_as_leader` (validation without decoding records,
offsets and leader epoch stamped, idempotent producers' sequence checks), and the same
commit waits. Nothing about replication, acks or idempotence is written here.

Kafka's rules kept here: acks is 0, 1 or -1 (else INVALID_REQUIRED_ACKS for every partition,
as Kafka answers); acks=0 is never answered; a transactional produce is refused
(transactions are not supported: UNSUPPORTED_VERSION, as InitProducerId answers a transactional
id, handlers/producer_ids.py says why; clients report it as fatal); a partition without
records is CORRUPT_MESSAGE. Error codes are Kafka's (raftlog/kafka/errors.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from raftlog.broker.handlers.produce import (
    PRODUCE_TIMEOUT_MS_MAX,
    CommitWait,
    ProduceGroup,
    Results,
)
from raftlog.errors import error_class
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode, kafka_code
from raftlog.kafka.messages.produce import (
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
)

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource

_NO_RECORDS = memoryview(b"")


def handle_produce(
    ctx: HandlerContext, request: ProduceRequest, version: int, source: RequestSource
) -> ProduceResponse | Awaitable[ProduceResponse | None] | None:
    acks = request.acks
    if acks not in (0, 1, -1) or request.transactional_id is not None:
        if acks == 0:
            return None
        code = (
            ErrorCode.INVALID_REQUIRED_ACKS
            if acks not in (1, -1)
            else ErrorCode.UNSUPPORTED_VERSION
        )
        message = (
            f"acks must be 0, 1 or -1 (all), got {acks}"
            if code is ErrorCode.INVALID_REQUIRED_ACKS
            else "transactions are not supported by raftlog (transactional_id "
            f"{request.transactional_id!r}); an idempotent producer needs none"
        )
        return ProduceResponse(
            [
                (
                    t,
                    [
                        ProducePartitionResponse(p, int(code), -1, error_message=message)
                        for p, _ in ps
                    ],
                )
                for t, ps in request.topics
            ]
        )
    timeout_ms = min(max(request.timeout_ms, 0), PRODUCE_TIMEOUT_MS_MAX)
    topics = [
        (t, [(p, _NO_RECORDS if r is None else r) for p, r in ps]) for t, ps in request.topics
    ]
    missing = ctx.topics_to_auto_create(t for t, _ in topics)
    group = ProduceGroup(ctx)
    if missing:

        async def create_then_produce() -> ProduceResponse | None:
            errors = await ctx.auto_create(missing)
            results, wait = group.add_chunks(acks, topics, errors, timeout_ms)
            group.finish()
            if acks == 0:
                return None
            if wait is not None and wait.remaining:
                await _settled(wait)
            return _response(results)

        return create_then_produce()
    results, wait = group.add_chunks(acks, topics, None, timeout_ms)
    group.finish()
    if acks == 0:
        return None
    if wait is not None and wait.remaining:
        # Watched from now, not from when the connection's task first runs the coroutine
        # below: a commit (or a lost leadership) that lands in between would call no one, and
        # the request would hang until the client gave up (measured: a stopping leader's
        # handed-over requests held librdkafka's partition for its 5 s request timeout).
        settled = _settled(wait)

        async def committed() -> ProduceResponse:
            await settled
            return _response(results)

        return committed()
    return _response(results)


def _settled(wait: CommitWait) -> asyncio.Future[None]:
    """Done once every partition of an acks=all request is committed or failed: `wait` calls
    it from the moment this returns (await it from anywhere later)."""
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done() -> None:
        if not fut.done():
            fut.set_result(None)

    wait.on_done = done
    if wait.remaining == 0:
        done()
    return fut


# raftlog's error codes (results of the native path) as Kafka's, filled in as met.
_KAFKA_CODES: dict[int, int] = {0: 0}


def _kafka(native_code: int) -> int:
    code = _KAFKA_CODES.get(native_code)
    if code is None:
        code = _KAFKA_CODES[native_code] = kafka_code(error_class(native_code)(""))
    return code


def _response(results: Results) -> ProduceResponse:
    return ProduceResponse(
        [
            (
                topic,
                [
                    ProducePartitionResponse(
                        r.partition,
                        _kafka(r.error),
                        r.base_offset,
                        -1,
                        r.log_start_offset,
                        r.message or None,
                    )
                    for r in rs
                ],
            )
            for topic, rs in results
        ]
    )


HANDLERS: dict[int, Callable[..., Any]] = {ApiKey.PRODUCE: handle_produce}
