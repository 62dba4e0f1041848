"""InitProducerId: give an idempotent producer its producer id and epoch.

Messages: `InitProducerIdRequest` (no fields) and `InitProducerIdResponse` (raftlog/messages/
producer_ids.py). Ids come from the metadata
quorum in blocks (`allocate_producer_ids`, PRODUCER_ID_BLOCK ids per command, as Kafka's
controller hands brokers blocks of 1000): a broker proposes one command per block, not per
producer, and ids stay unique across brokers and restarts (a block is never handed out twice;
ids of a block a broker did not use before it restarted are skipped, never reused). One
block request at a time per broker (a lock); a failed proposal is the request's error
(NotControllerError, RaftlogTimeoutError: retriable). Every new id starts at epoch 0: the
producer bumps its epoch itself after a partition lost its state (KIP-360), and asks for a new
id when the epoch would pass int16.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from raftlog.broker.response import Response
from raftlog.messages.producer_ids import InitProducerIdResponse
from raftlog.metadata.state import PRODUCER_ID_BLOCK

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource
    from raftlog.metadata.cluster import ClusterMetadata


class ProducerIdManager:
    """This broker's current block of producer ids."""

    def __init__(self, metadata: ClusterMetadata, block_size: int = PRODUCER_ID_BLOCK):
        self._metadata = metadata
        self._block_size = block_size
        # Invariant: next_id <= end; ids in [next_id, end) are this broker's to give.
        self._next_id = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next_id >= self._end:
                start = await self._metadata.allocate_producer_ids(self._block_size)
                self._next_id, self._end = start, start + self._block_size
            pid = self._next_id
            self._next_id += 1
            return pid


async def handle_init_producer_id(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    pid = await broker.producer_ids.next_id()
    return Response(InitProducerIdResponse(pid, 0).to_body())
