"""Kafka's classic group membership: JoinGroup (v0-5), SyncGroup (v0-3), Heartbeat (v0-3),
LeaveGroup (v0-3), on the group coordinator raftlog's own groups use.

Every group operation goes to the active controller's GroupCoordinator
(raftlog/metadata/coordinator.py: `kafka_join`, `sync`, `heartbeat`, `leave`); any other
node answers NOT_COORDINATOR, and clients find the coordinator again (FindCoordinator names
the active controller). Group state and rules are groups.py's.

Rules kept here (Kafka's, GroupMetadataManager.java):
- JoinGroup v4+ without a member id (and without an instance id) is answered
  MEMBER_ID_REQUIRED with a member id the coordinator handed out (KIP-394); the client joins
  again with it. v0-3 clients get their member id in the join's answer.
- A JoinGroup answer waits until the rebalance it takes part in completes (the barrier); the
  leader's lists every member with the metadata of the chosen protocol, the others' lists
  none. v0 has no rebalance timeout: the session timeout is used, as Kafka does. A session
  timeout outside the coordinator's bounds is INVALID_SESSION_TIMEOUT.
- The subscription inside a "consumer" member's metadata (Kafka's ConsumerProtocol) is
  decoded for the registry (describe, lag, commits' partitions); metadata that does not decode
  (another protocol type, or a client's own format) joins with no topics: the bytes are
  passed on untouched whatever they hold. The same for the leader's assignments.
- SyncGroup of the leader carries the assignments; every member's answer is its assignment
  once the leader's has arrived. Heartbeat answers ILLEGAL_GENERATION for another generation
  than the group's, REBALANCE_IN_PROGRESS while the group prepares a rebalance.
- LeaveGroup v3 names members by member id or by instance id (static members); each gets
  its own error code (UNKNOWN_MEMBER_ID for one that is not in the group).
- Errors are answered in the response's error code (raftlog/kafka/errors.py's
  `group_error_code`: the coordinator's own failures, a lost role or a Raft timeout, are
  NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE, which clients retry); nothing here closes the
  connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from raftlog.errors import NotCoordinatorError, RaftlogError, UnknownMemberIdError
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode, group_error_code
from raftlog.kafka.messages.consumer_protocol import (
    PROTOCOL_TYPE,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from raftlog.kafka.messages.groups import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from raftlog.kafka.wire import KafkaDecodeError

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource
    from raftlog.metadata.coordinator import GroupCoordinator

# JoinGroup's first version with KIP-394's MEMBER_ID_REQUIRED round.
MEMBER_ID_REQUIRED_SINCE = 4


def coordinator_of(ctx: HandlerContext, group_id: str) -> GroupCoordinator:
    """This node's coordinator if it is the active one, else NotCoordinatorError."""
    c = ctx.coordinator
    if c is None or not c.is_active:
        raise NotCoordinatorError(
            f"node {ctx.config.node_id} is not the coordinator of group {group_id!r}; the "
            f"active controller is node {ctx.metadata.controller_id}"
        )
    return c


def subscribed_topics(protocol_type: str, metadata: bytes) -> list[str]:
    """The topics a consumer member's metadata subscribes to ([] if it is not Kafka's
    consumer protocol or does not decode)."""
    if protocol_type != PROTOCOL_TYPE:
        return []
    try:
        return sorted(set(ConsumerProtocolSubscription.decode(metadata).topics))
    except KafkaDecodeError:
        return []


def assigned_partitions(assignment: bytes) -> list[tuple[str, int]]:
    """The partitions a leader's assignment bytes name ([] if they do not decode)."""
    try:
        decoded = ConsumerProtocolAssignment.decode(assignment)
    except KafkaDecodeError:
        return []
    return [(tp.topic, p) for tp in decoded.assigned_partitions for p in tp.partitions]


def handle_join_group(
    ctx: HandlerContext, request: JoinGroupRequest, version: int, source: RequestSource
) -> JoinGroupResponse | Awaitable[JoinGroupResponse]:
    try:
        coordinator = coordinator_of(ctx, request.group_id)
        if (
            version >= MEMBER_ID_REQUIRED_SINCE
            and not request.member_id
            and request.group_instance_id is None
        ):
            member_id = coordinator.pending_member_id(request.group_id, source.client_id)
            return JoinGroupResponse(int(ErrorCode.MEMBER_ID_REQUIRED), member_id=member_id)
    except RaftlogError as e:
        return _join_error(request, e)
    lo, hi = coordinator.config.session_timeout_ms_min, coordinator.config.session_timeout_ms_max
    if not lo <= request.session_timeout_ms <= hi:
        # Kafka's answer (group.min/max.session.timeout.ms): clients report it as a config error.
        return JoinGroupResponse(
            int(ErrorCode.INVALID_SESSION_TIMEOUT), member_id=request.member_id
        )
    protocols = [(p.name, p.metadata) for p in request.protocols]
    topics = subscribed_topics(request.protocol_type, protocols[0][1]) if protocols else []
    rebalance_timeout_ms = request.rebalance_timeout_ms
    if rebalance_timeout_ms < 0:  # v0: none sent
        rebalance_timeout_ms = request.session_timeout_ms

    async def joined() -> JoinGroupResponse:
        try:
            view = await coordinator.kafka_join(
                request.group_id,
                request.member_id,
                source.client_id,
                request.group_instance_id,
                request.session_timeout_ms,
                rebalance_timeout_ms,
                request.protocol_type,
                protocols,
                topics,
            )
        except RaftlogError as e:
            return _join_error(request, e)
        return JoinGroupResponse(
            0,
            view["generation"],
            view["protocol"] or "",
            view["leader"] or "",
            view["member_id"],
            tuple(JoinGroupResponseMember(m, meta, inst) for m, inst, meta in view["members"]),
        )

    return joined()


def _join_error(request: JoinGroupRequest, error: RaftlogError) -> JoinGroupResponse:
    member_id = "" if isinstance(error, UnknownMemberIdError) else request.member_id
    return JoinGroupResponse(group_error_code(error), member_id=member_id)


def handle_sync_group(
    ctx: HandlerContext, request: SyncGroupRequest, version: int, source: RequestSource
) -> SyncGroupResponse | Awaitable[SyncGroupResponse]:
    try:
        coordinator = coordinator_of(ctx, request.group_id)
    except RaftlogError as e:
        return SyncGroupResponse(group_error_code(e))
    assignments = None
    if request.assignments:
        assignments = [
            (a.member_id, a.assignment, assigned_partitions(a.assignment))
            for a in request.assignments
        ]

    async def synced() -> SyncGroupResponse:
        try:
            assignment = await coordinator.sync(
                request.group_id, request.member_id, request.generation_id, assignments
            )
        except RaftlogError as e:
            return SyncGroupResponse(group_error_code(e))
        return SyncGroupResponse(0, assignment)

    return synced()


def handle_heartbeat(
    ctx: HandlerContext, request: HeartbeatRequest, version: int, source: RequestSource
) -> HeartbeatResponse:
    try:
        coordinator = coordinator_of(ctx, request.group_id)
        generation = coordinator.heartbeat(
            request.group_id, request.member_id, request.generation_id
        )
    except RaftlogError as e:
        return HeartbeatResponse(group_error_code(e))
    if generation != request.generation_id:
        return HeartbeatResponse(int(ErrorCode.ILLEGAL_GENERATION))
    return HeartbeatResponse(0)


def handle_leave_group(
    ctx: HandlerContext, request: LeaveGroupRequest, version: int, source: RequestSource
) -> LeaveGroupResponse | Awaitable[LeaveGroupResponse]:
    try:
        coordinator = coordinator_of(ctx, request.group_id)
    except RaftlogError as e:
        return LeaveGroupResponse(group_error_code(e))
    named = request.members or ((request.member_id, None),)

    async def left() -> LeaveGroupResponse:
        results: list[MemberResponse] = []
        try:
            for member_id, instance_id in named:
                results.append(
                    await _leave_one(coordinator, request.group_id, member_id, instance_id)
                )
        except RaftlogError as e:
            return LeaveGroupResponse(group_error_code(e))
        if not request.members:  # v0-2: one member, its error is the response's
            return LeaveGroupResponse(results[0].error_code)
        return LeaveGroupResponse(0, tuple(results))

    return left()


async def _leave_one(
    coordinator: GroupCoordinator, group_id: str, member_id: str, instance_id: str | None
) -> MemberResponse:
    """One member leaves: named by its id, or (v3) by its instance id alone."""
    if not member_id and instance_id is not None:
        member_id = coordinator.member_of_instance(group_id, instance_id) or ""
    gone = await coordinator.leave(group_id, [member_id]) if member_id else 0
    code = 0 if gone else int(ErrorCode.UNKNOWN_MEMBER_ID)
    return MemberResponse(member_id, instance_id, code)


HANDLERS: dict[int, Callable[..., Any]] = {
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
}
