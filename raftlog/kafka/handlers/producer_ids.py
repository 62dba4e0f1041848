"""InitProducerId: an idempotent Kafka producer gets a new producer id at epoch 0.

Rules:
- The id comes from `ctx.producer_ids.next_id()`, the native handler's operation (blocks of
  ids from the metadata quorum, unique across brokers and restarts), so a producer id means
  the same through either door and the partitions' sequence checks are shared.
- Every request gets a new id at epoch 0. Versions 0-1 cannot carry an existing producer's
  id and epoch (v3 adds them for KIP-360's epoch bump, a version raftlog does not advertise),
  so there is nothing to bump here: a producer whose sequences must start afresh bumps its
  epoch itself (librdkafka does; the partitions accept a higher epoch, as the native path's)
  or asks again and gets a new id (Kafka's Java client against a pre-KIP-360 broker).
- A transactional id is refused with UNSUPPORTED_VERSION: raftlog has no transactions (no
  transaction coordinator, no markers). It is what Redpanda answers with transactions
  disabled; Kafka's Java client and kafka-python fail the producer at once on it (an
  unexpected InitProducerId error is fatal to them), where an authorization error would send
  the user looking at ACLs. v0-1 have no error_message, so the broker logs the reason.
- An id that cannot be had now (no metadata leader, a proposal that timed out: retriable
  raftlog errors) is COORDINATOR_LOAD_IN_PROGRESS, the code Kafka's own broker gives when its
  id block runs out, because every client retries it; older clients treat REQUEST_TIMED_OUT
  or NOT_CONTROLLER from InitProducerId as fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from raftlog.errors import RaftlogError
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode, kafka_code
from raftlog.kafka.messages.producer_ids import InitProducerIdRequest, InitProducerIdResponse

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource

log = logging.getLogger(__name__)

FIRST_EPOCH = 0


def handle_init_producer_id(
    ctx: HandlerContext, request: InitProducerIdRequest, version: int, source: RequestSource
) -> InitProducerIdResponse | Awaitable[InitProducerIdResponse]:
    if request.transactional_id is not None:
        log.info(
            "refused InitProducerId for transactional id %r: raftlog does not support "
            "transactions (an idempotent producer without transactional.id works)",
            request.transactional_id,
        )
        return InitProducerIdResponse(int(ErrorCode.UNSUPPORTED_VERSION))
    return _new_id(ctx)


async def _new_id(ctx: HandlerContext) -> InitProducerIdResponse:
    try:
        producer_id = await ctx.producer_ids.next_id()
    except RaftlogError as e:
        log.info("InitProducerId: no producer id now: %s", e)
        return InitProducerIdResponse(id_error_code(e))
    return InitProducerIdResponse(0, producer_id, FIRST_EPOCH)


def id_error_code(error: RaftlogError) -> int:
    """The Kafka code for a failure to get a producer id (see the module rules)."""
    if error.retriable:
        return int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    return kafka_code(error)


HANDLERS: dict[int, Callable[..., Any]] = {ApiKey.INIT_PRODUCER_ID: handle_init_producer_id}
