"""OffsetForLeaderEpoch: where a leader epoch ended, per partition, from the leader's log.

A Kafka consumer asks after a leader change whether the records it read are still in the log
(KIP-320): it names the epoch of the last record it read, the leader answers with the largest
epoch it knows at or below that one and the offset where that epoch ends, and a consumer
whose position is past that end offset has read records the log no longer has (truncation).

Rules, per partition:
- Only the leader answers (`ctx.leader_partition`): NOT_LEADER_OR_FOLLOWER elsewhere,
  UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist, KAFKA_STORAGE_ERROR for an
  offline log.
- `current_leader_epoch` is checked by the same KIP-320 rule a fetch's is (the replication
  core's, through `ReplicaManager.consumer_fetch`): older than the leader's is
  FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, -1 skips the check.
- The answer is the log's `end_offset_for_epoch`, the lookup the leader uses for a follower's
  fetch (raftlog/replication/core.py): for the latest epoch or a later one, that epoch and the
  log end offset; for an earlier one, the largest epoch at or below it and the start of the
  next; for an epoch older than every epoch the log has, -1 and -1. (Kafka answers -1 and -1
  for an epoch newer than its latest; no consumer can name one here, since fencing holds it to
  the leader's current epoch, whose start the epoch cache records when the leader takes over.)
- `replica_id` (v3) is not used: followers fetch through raftlog's own protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raftlog.errors import RaftlogError
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import kafka_code
from raftlog.kafka.messages.offsets_for_leader_epoch import (
    EpochEndOffset,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderPartition,
)
from raftlog.topics import TopicPartition

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource


def handle_offset_for_leader_epoch(
    ctx: HandlerContext, request: OffsetForLeaderEpochRequest, version: int, source: RequestSource
) -> OffsetForLeaderEpochResponse:
    return OffsetForLeaderEpochResponse(
        tuple(
            (topic, tuple(_end_of(ctx, topic, p) for p in partitions))
            for topic, partitions in request.topics
        )
    )


def _end_of(ctx: HandlerContext, topic: str, p: OffsetForLeaderPartition) -> EpochEndOffset:
    try:
        leader = ctx.leader_partition(TopicPartition(topic, p.partition))
        # KIP-320's check of current_leader_epoch, the one a consumer's fetch passes (raises
        # the error to answer); the offset it returns (the high watermark) is not needed here.
        ctx.replicas.consumer_fetch(leader, p.current_leader_epoch)
        epoch, end_offset = leader.log.end_offset_for_epoch(p.leader_epoch)
    except RaftlogError as e:
        return EpochEndOffset(p.partition, kafka_code(e))
    return EpochEndOffset(p.partition, 0, epoch, end_offset)


HANDLERS: dict[int, Callable[..., Any]] = {
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch
}
