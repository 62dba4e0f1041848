"""Consumer-group APIs, served by the group coordinator on the active controller's node.

FindCoordinator (any node) answers with the broker endpoint of the active controller. The
others go to that node's GroupCoordinator (raftlog/metadata/coordinator.py); on any other node
they get NotCoordinatorError (retriable: the client finds the coordinator again).

Messages: raftlog/messages/groups.py (every body's layout). JoinGroup's answer waits until the
rebalance the join takes part in has completed (Kafka's JoinGroup barrier; bounded by the
group's rebalance deadline): a client sends it on a connection of its own, since responses
leave a connection in request order. Heartbeat answers RebalanceInProgressError while the
group prepares a rebalance (commit, give up the partitions, join again).

Refusals beyond the group protocol's own (the coordinator's rules, coordinator.py): ids over
`id_bytes_max` (1 KiB) and commit metadata over `offset_metadata_bytes_max` (4 KiB, Kafka's
offset.metadata.max.bytes) get PolicyViolationError; a commit or reset naming a partition that
does not exist gets UnknownTopicOrPartitionError and stores nothing (Kafka's answer); a full disk
under the metadata journal gets StorageError (retriable) at once. A commit or reset too large for
one Raft command is split, not refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftlog.broker.response import Response
from raftlog.errors import NotCoordinatorError
from raftlog.messages.groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorResponse,
    GroupOffset,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    ResetOffsetsRequest,
    ResetOffsetsResponse,
)
from raftlog.metadata.coordinator import GroupCoordinator

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource


def _coordinator(broker: HandlerContext, body: dict[str, Any]) -> GroupCoordinator:
    c = broker.coordinator
    if c is None or not c.is_active:
        raise NotCoordinatorError(
            f"node {broker.config.node_id} is not the coordinator of group "
            f"{body.get('group_id')!r}; the active controller is node "
            f"{broker.metadata.controller_id}"
        )
    return c


def handle_find_coordinator(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    node = broker.metadata.controller_id
    for b in broker.metadata.brokers(conn.external):
        if b.node_id == node:
            return Response(FindCoordinatorResponse(b.node_id, b.host, b.port).to_body())
    raise NotCoordinatorError(
        f"no coordinator available: the active controller is node {node}, which has no live "
        "broker listener"
    )


async def handle_join_group(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    coordinator = _coordinator(broker, body)
    r = JoinGroupRequest.from_body(body)
    view = await coordinator.join(
        r.group_id,
        r.member_id,
        r.client_id,
        r.instance_id,
        r.session_timeout_ms,
        r.rebalance_timeout_ms,
        r.topics,
        r.protocols,
    )
    return Response(JoinGroupResponse.from_body(view).to_body())


def handle_heartbeat(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    coordinator = _coordinator(broker, body)
    r = HeartbeatRequest.from_body(body)
    generation = coordinator.heartbeat(r.group_id, r.member_id, r.generation)
    return Response(HeartbeatResponse(generation).to_body())


async def handle_leave_group(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    coordinator = _coordinator(broker, body)
    r = LeaveGroupRequest.from_body(body)
    left = await coordinator.leave(r.group_id, r.member_ids)
    return Response(LeaveGroupResponse(left).to_body())


async def handle_offset_commit(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    coordinator = _coordinator(broker, body)
    r = OffsetCommitRequest.from_body(body)
    # The coordinator takes (and checks) the entries in their wire form.
    offsets = [o.to_wire() for o in r.offsets]
    await coordinator.commit(r.group_id, r.member_id, r.generation, offsets)
    return Response(OffsetCommitResponse().to_body())


async def handle_offset_fetch(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    r = OffsetFetchRequest.from_body(body)
    coordinator = _coordinator(broker, body)
    # A read barrier: a deposed leader may still think it leads for a moment, and its state
    # may lack the latest commits or resets. A no-op committed through Raft first proves this
    # node leads now and has applied everything before it, so a consumer never starts from
    # an offset older than the group's last committed one.
    await broker.metadata.quorum.propose("noop")
    found = coordinator.fetch_offsets(r.group_id, r.partitions)
    offsets = tuple(GroupOffset(t, p, o, m) for (t, p), (o, m) in sorted(found.items()))
    return Response(OffsetFetchResponse(offsets).to_body())


def handle_list_groups(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    groups = _coordinator(broker, body).list_groups()
    return Response(ListGroupsResponse(tuple(groups)).to_body())


def handle_describe_groups(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    coordinator = _coordinator(broker, body)
    view = coordinator.describe_group(DescribeGroupsRequest.from_body(body).group_id)
    return Response(DescribeGroupsResponse.from_body(view).to_body())


async def handle_delete_groups(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    coordinator = _coordinator(broker, body)
    await coordinator.delete_group(DeleteGroupsRequest.from_body(body).group_id)
    return Response(DeleteGroupsResponse().to_body())


async def handle_reset_offsets(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    coordinator = _coordinator(broker, body)
    r = ResetOffsetsRequest.from_body(body)
    n = await coordinator.reset_offsets(r.group_id, [o.to_wire() for o in r.offsets])
    return Response(ResetOffsetsResponse(n).to_body())
