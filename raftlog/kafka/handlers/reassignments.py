"""AlterPartitionReassignments and ListPartitionReassignments: Kafka's admin clients and
kafka-reassign-partitions move replicas between brokers (KIP-455) with raftlog's own moves
(`ctx.alter_partition_reassignments`, the native handler's operation; PartitionState.reassign).

Rules, AlterPartitionReassignments:
- One `ctx.alter_partition_reassignments` call, one metadata quorum proposal, for the whole
  request: each partition with replicas starts a move to them (the first the preferred leader;
  a move under way is replaced, counted from its original replicas); null replicas cancel the
  move under way (back to the original replicas). The answer does not wait for the move:
  joining replicas catch up and the move completes in the ISR change that puts the last one
  in the ISR (ListPartitionReassignments and Metadata show it), as Kafka's controller answers
  once the move is recorded.
- The answer has the request's shape, as Kafka's controller answers: a topic per request
  topic, a partition per request partition, in request order (a partition named twice is
  moved and answered twice, in order). Each raftlog outcome is Kafka's code with raftlog's
  message: 0 (started, or done at once: a reorder, or replicas only leaving);
  UNKNOWN_TOPIC_OR_PARTITION; NO_REASSIGNMENT_IN_PROGRESS for a cancel with no move under way;
  INVALID_REPLICA_ASSIGNMENT for a broker id that is not registered, and for every replica set
  the partition refuses (raftlog's InvalidRequestError there: empty, a broker named twice,
  fewer than min.insync.replicas, a replaced move or a cancel that would leave no in-sync
  replica), Kafka's code for a replica set its controller will not take (its INVALID_REQUEST
  means a request it cannot read).
- v1's allow_replication_factor_change false (KIP-860): a target whose length differs from
  the partition's replication factor (the number of its original replicas while a move is
  under way: what a new move replaces) is INVALID_REPLICATION_FACTOR ("the replication factor
  is changed from 3 to 2") and is not proposed. It is checked against the answering broker's
  copy of the metadata just before the proposal, not inside it: a move that another request
  starts or that completes in between is not seen. The v1 answer echoes the flag.
- A whole request refused (the quorum cannot take it: a timeout, no leader, a command too
  large) is the top-level error_code and error_message and every partition's error, as Kafka's
  broker answers (AlterPartitionReassignmentsRequest.getErrorResponse). An empty topics array
  proposes nothing.
- timeout_ms is not used: the proposal is bounded by the quorum's own timeout (5 s).

Rules, ListPartitionReassignments:
- A `noop` proposal first (the read barrier, as OffsetFetch's): the answer includes every move
  started or cancelled by a request acknowledged before this one, on any broker. Then this
  broker's copy of the metadata (`describe_cluster`, one pass over every partition). A failed
  barrier is the top-level error_code and error_message, with each named partition and empty
  replica lists (Kafka's getErrorResponse).
- topics null: every partition with a move under way, by topic and partition; named: those of
  the named partitions with a move under way, in request order. As Kafka's controller, a
  partition without a move, an unknown topic or partition, and a topic left with none are
  left out. An empty topics array answers nothing, without a barrier.
- Each: replicas (every current replica: the target first, then the leaving ones, as Kafka's
  "current replica set"), adding_replicas, removing_replicas.
- timeout_ms is not used (the barrier is bounded as any proposal).

Any broker answers both (the proposal reaches the quorum leader from any node), so a client
that sends them to the Metadata response's controller_id is answered there too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from raftlog.errors import (
    InvalidReplicationFactorError,
    InvalidRequestError,
    NoReassignmentInProgressError,
    RaftlogError,
    error_from_code,
)
from raftlog.invariants import require
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode, kafka_code
from raftlog.kafka.messages.reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource

# (partition, Kafka code, message) per request partition, in request order.
Outcome = tuple[int, int, str | None]


def _partition_outcome(cancel: bool, code: int, message: str | None) -> tuple[int, str | None]:
    """One partition's raftlog (code, message) as Kafka's (the module rules)."""
    if code == 0:
        return 0, None
    if code == NoReassignmentInProgressError.code:
        return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, message
    if code == InvalidRequestError.code:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, message
    return kafka_code(error_from_code(code, message or "")), message


def _answer(
    request: AlterPartitionReassignmentsRequest, outcomes: Iterable[Outcome], **top: Any
) -> AlterPartitionReassignmentsResponse:
    """The response in the request's shape, partition by partition from `outcomes`."""
    each = iter(outcomes)
    responses = tuple(
        ReassignableTopicResponse(
            topic.name,
            tuple(ReassignablePartitionResponse(*next(each)) for _ in topic.partitions),
        )
        for topic in request.topics
    )
    return AlterPartitionReassignmentsResponse(
        responses,
        allow_replication_factor_change=request.allow_replication_factor_change,
        **top,
    )


def alter_refused(
    request: AlterPartitionReassignmentsRequest, error: RaftlogError
) -> AlterPartitionReassignmentsResponse:
    """The whole request refused with `error` (the module rules)."""
    code, message = kafka_code(error), str(error)
    outcomes = ((p.partition_index, code, message) for t in request.topics for p in t.partitions)
    return _answer(request, outcomes, error_code=code, error_message=message)


def _replication_factor_refusals(
    ctx: HandlerContext, entries: list[tuple[str, int, list[int] | None]]
) -> dict[int, InvalidReplicationFactorError]:
    """The entries (by index) whose target would change their partition's replication factor,
    from this broker's copy of the metadata (the module rules)."""
    moves = [(i, t, p, r) for i, (t, p, r) in enumerate(entries) if r is not None]
    if not moves:
        return {}
    partitions = {
        (p["topic"], p["partition"]): p for p in ctx.metadata.describe_cluster()["partitions"]
    }
    refusals = {}
    for i, topic, index, target in moves:
        found = partitions.get((topic, index))
        if found is None:
            continue  # unknown: the proposal answers UNKNOWN_TOPIC_OR_PARTITION
        factor = sum(1 for r in found["replicas"] if r not in found["adding"])
        if len(target) != factor:
            refusals[i] = InvalidReplicationFactorError(
                f"{topic}-{index}: the replication factor is changed from {factor} to "
                f"{len(target)}, and allow_replication_factor_change is false"
            )
    return refusals


async def handle_alter_partition_reassignments(
    ctx: HandlerContext,
    request: AlterPartitionReassignmentsRequest,
    version: int,
    source: RequestSource,
) -> AlterPartitionReassignmentsResponse:
    entries = [
        (t.name, p.partition_index, None if p.replicas is None else list(p.replicas))
        for t in request.topics
        for p in t.partitions
    ]
    if not entries:
        return _answer(request, ())
    refusals: dict[int, InvalidReplicationFactorError] = {}
    if not request.allow_replication_factor_change:
        refusals = _replication_factor_refusals(ctx, entries)
    proposed = [(i, entry) for i, entry in enumerate(entries) if i not in refusals]
    results: list[tuple[str, int, int, str | None]] = []
    if proposed:
        try:
            results = await ctx.alter_partition_reassignments([entry for _, entry in proposed])
        except RaftlogError as e:
            return alter_refused(request, e)
    require(
        [(t, p) for t, p, _, _ in results] == [(t, p) for _, (t, p, _) in proposed],
        f"alter_partition_reassignments answered {len(results)} entries for "
        f"{len(proposed)}, or not in their order",
    )
    outcomes: dict[int, Outcome] = {}
    for i, error in refusals.items():
        outcomes[i] = (entries[i][1], kafka_code(error), str(error))
    for (i, (_, _, replicas)), (_, partition, code, message) in zip(proposed, results, strict=True):
        outcomes[i] = (partition, *_partition_outcome(replicas is None, code, message))
    return _answer(request, (outcomes[i] for i in range(len(entries))))


def list_refused(
    request: ListPartitionReassignmentsRequest, error: RaftlogError
) -> ListPartitionReassignmentsResponse:
    """The whole request refused with `error` (the module rules)."""
    topics = tuple(
        OngoingTopicReassignment(
            t.name, tuple(OngoingPartitionReassignment(i) for i in t.partition_indexes)
        )
        for t in request.topics or ()
    )
    return ListPartitionReassignmentsResponse(topics, kafka_code(error), str(error))


def _ongoing(p: dict[str, Any]) -> OngoingPartitionReassignment:
    return OngoingPartitionReassignment(
        int(p["partition"]), tuple(p["replicas"]), tuple(p["adding"]), tuple(p["removing"])
    )


async def handle_list_partition_reassignments(
    ctx: HandlerContext,
    request: ListPartitionReassignmentsRequest,
    version: int,
    source: RequestSource,
) -> ListPartitionReassignmentsResponse:
    if request.topics == ():
        return ListPartitionReassignmentsResponse(())
    try:
        await ctx.metadata.quorum.propose("noop")  # the read barrier (module rules)
    except RaftlogError as e:
        return list_refused(request, e)
    moving = {
        (p["topic"], p["partition"]): p
        for p in ctx.metadata.describe_cluster()["partitions"]
        if p["adding"] or p["removing"]
    }
    topics: list[OngoingTopicReassignment] = []
    if request.topics is None:
        by_topic: dict[str, list[OngoingPartitionReassignment]] = {}
        for (name, _), p in sorted(moving.items()):
            by_topic.setdefault(name, []).append(_ongoing(p))
        topics = [OngoingTopicReassignment(n, tuple(parts)) for n, parts in by_topic.items()]
    else:
        for t in request.topics:
            found = [moving[(t.name, i)] for i in t.partition_indexes if (t.name, i) in moving]
            if found:
                topics.append(OngoingTopicReassignment(t.name, tuple(map(_ongoing, found))))
    return ListPartitionReassignmentsResponse(tuple(topics))


HANDLERS: dict[int, Callable[..., Any]] = {
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
}
