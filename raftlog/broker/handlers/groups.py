"""Consumer-group APIs, served by the group coordinator on the active controller's node.

FindCoordinator (any node) answers with the broker endpoint of the active controller. The
others go to that node's GroupCoordinator (raftlog/metadata/coordinator.py); on any other node
they get NotCoordinatorError (retriable: the client finds the coordinator again).

Bodies (all maps):
- FindCoordinator {group_id} -> {node_id, host, port}
- JoinGroup {group_id, member_id, client_id, instance_id, session_timeout_ms,
  rebalance_timeout_ms, topics, protocols} -> {member_id, generation, state, protocol,
  assignment}. The answer waits until the rebalance the join takes part in has completed
  (Kafka's JoinGroup barrier; bounded by the group's rebalance deadline): a client sends it on
  a connection of its own, since responses leave a connection in request order.
- Heartbeat {group_id, member_id, generation} -> {generation}; RebalanceInProgressError while
  the group prepares a rebalance (commit, give up the partitions, join again).
- LeaveGroup {group_id, member_ids} -> {left}
- OffsetCommit {group_id, member_id, generation, offsets: [[topic, partition, offset,
  metadata]]} -> {}
- OffsetFetch {group_id, partitions: [[topic, partition]] | null} ->
  {offsets: [[topic, partition, offset, metadata]]}
- ListGroups {} -> {groups: [...]}; DescribeGroups {group_id} -> the group;
  DeleteGroups {group_id} -> {}; ResetOffsets {group_id, offsets: [[topic, partition,
  offset]]} -> {reset}

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
            return Response({"node_id": b.node_id, "host": b.host, "port": b.port})
    raise NotCoordinatorError(
        f"no coordinator available: the active controller is node {node}, which has no live "
        "broker listener"
    )


async def handle_join_group(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    view = await _coordinator(broker, body).join(
        body["group_id"],
        body.get("member_id") or "",
        body.get("client_id") or "",
        body.get("instance_id"),
        body["session_timeout_ms"],
        body.get("rebalance_timeout_ms", body["session_timeout_ms"]),
        body["topics"],
        body["protocols"],
    )
    return Response(view)


def handle_heartbeat(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    generation = _coordinator(broker, body).heartbeat(
        body["group_id"], body["member_id"], body["generation"]
    )
    return Response({"generation": generation})


async def handle_leave_group(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    left = await _coordinator(broker, body).leave(body["group_id"], body["member_ids"])
    return Response({"left": left})


async def handle_offset_commit(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    await _coordinator(broker, body).commit(
        body["group_id"], body.get("member_id") or "", body["generation"], body["offsets"]
    )
    return Response({})


async def handle_offset_fetch(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    parts = body.get("partitions")
    coordinator = _coordinator(broker, body)
    # A read barrier: a deposed leader may still think it leads for a moment, and its state
    # may lack the latest commits or resets. A no-op committed through Raft first proves this
    # node leads now and has applied everything before it, so a consumer never starts from
    # an offset older than the group's last committed one.
    await broker.metadata.quorum.propose("noop")
    found = coordinator.fetch_offsets(
        body["group_id"], None if parts is None else [(t, p) for t, p in parts]
    )
    return Response({"offsets": [[t, p, o, m] for (t, p), (o, m) in sorted(found.items())]})


def handle_list_groups(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    return Response({"groups": _coordinator(broker, body).list_groups()})


def handle_describe_groups(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    return Response(_coordinator(broker, body).describe_group(body["group_id"]))


async def handle_delete_groups(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    await _coordinator(broker, body).delete_group(body["group_id"])
    return Response({})


async def handle_reset_offsets(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    n = await _coordinator(broker, body).reset_offsets(body["group_id"], body["offsets"])
    return Response({"reset": n})
