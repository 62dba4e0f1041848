"""ListGroups (v0-2), DescribeGroups (v0-4) and DeleteGroups (v0-1): Kafka's admin tools look at
and remove groups, raftlog's own groups and Kafka's alike (one registry).

Rules (Kafka's GroupMetadataManager and KafkaApis):
- A broker lists the groups it coordinates: the active controller's node every group, any other
  node none (error 0). Kafka's admin clients send ListGroups to every broker and merge the
  answers, so a NOT_COORDINATOR here would fail the whole listing.
- DescribeGroups and DeleteGroups go to the active controller's GroupCoordinator; every other
  node answers each group NOT_COORDINATOR (retriable: the client finds the coordinator again).
- The protocol type shown (`listed_protocol_type`): a Kafka group's own ("consumer" for
  consumers); a raftlog group with members "raftlog" (Kafka's tools list and describe only
  "consumer" and "" groups, so they leave these out instead of failing on bytes they cannot
  read); a raftlog group without members "" (a group of committed offsets only: a consumer
  using assign(), a reset, Spark), which is what Kafka answers for such a group, so that
  Kafka's tools list it and show its offsets.
- DescribeGroups, as Kafka: an unknown group is state "Dead" with error 0; members' metadata
  and assignment bytes, and the protocol (protocol_data), only for a Stable group (Kafka's
  describeNoMetadata otherwise). A Kafka member's bytes are those it sent (its metadata for
  the chosen protocol, the assignment its leader sent); a raftlog member's are its
  subscription and assignment in Kafka's consumer protocol (v0), so that Kafka's tools can read
  them (`native_member_bytes`). client_host is "": raftlog does not record it.
- DeleteGroups, each group on its own: a group with members NON_EMPTY_GROUP, an unknown one
  GROUP_ID_NOT_FOUND, an empty id INVALID_GROUP_ID; deleting a group deletes its offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raftlog.errors import RaftlogError
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode, group_error_code
from raftlog.kafka.handlers.groups import coordinator_of
from raftlog.kafka.messages.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    TopicPartitions,
)
from raftlog.kafka.messages.group_admin import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)
from raftlog.metadata.groups import NATIVE_PROTOCOL_TYPE, GroupPhase

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource

log = logging.getLogger(__name__)

# Kafka's protocol type of a group that only holds committed offsets (no member ever joined
# through the group protocol): Kafka's tools list such groups with the "consumer" ones.
NO_PROTOCOL_TYPE = ""
CONSUMER_PROTOCOL_VERSION = 0  # the consumer protocol version raftlog members are shown in


def listed_protocol_type(protocol_type: str, members: int) -> str:
    """The protocol type Kafka's clients are shown for a group (the module rules)."""
    if protocol_type == NATIVE_PROTOCOL_TYPE and members == 0:
        return NO_PROTOCOL_TYPE
    return protocol_type


def native_member_bytes(topics: list[str], assignment: list[list[Any]]) -> tuple[bytes, bytes]:
    """A raftlog member's subscription and assignment in Kafka's consumer protocol (v0)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(assignment):
        by_topic.setdefault(topic, []).append(partition)
    subscription = ConsumerProtocolSubscription(tuple(topics))
    owned = tuple(TopicPartitions(t, tuple(ps)) for t, ps in by_topic.items())
    return (
        subscription.encode(CONSUMER_PROTOCOL_VERSION),
        ConsumerProtocolAssignment(owned).encode(CONSUMER_PROTOCOL_VERSION),
    )


def handle_list_groups(
    ctx: HandlerContext, request: ListGroupsRequest, version: int, source: RequestSource
) -> ListGroupsResponse:
    c = ctx.coordinator
    if c is None or not c.is_active:
        return ListGroupsResponse(())  # this node coordinates no group (the module rules)
    return ListGroupsResponse(
        tuple(
            ListedGroup(g["group_id"], listed_protocol_type(g["protocol_type"], g["members"]))
            for g in c.list_groups()
        )
    )


def handle_describe_groups(
    ctx: HandlerContext, request: DescribeGroupsRequest, version: int, source: RequestSource
) -> DescribeGroupsResponse:
    return DescribeGroupsResponse(tuple(_describe(ctx, group_id) for group_id in request.groups))


def _describe(ctx: HandlerContext, group_id: str) -> DescribedGroup:
    try:
        view = coordinator_of(ctx, group_id).describe_members(group_id)
    except RaftlogError as e:
        return DescribedGroup(group_id, group_error_code(e))
    if view is None:
        return DescribedGroup(group_id, 0, GroupPhase.DEAD.value)
    stable = view["state"] == GroupPhase.STABLE.value
    members = []
    for m in view["members"]:
        metadata, assignment = b"", b""
        if stable:
            if m["metadata"] is None:
                metadata, assignment = native_member_bytes(m["topics"], m["assignment"])
            else:
                metadata, assignment = m["metadata"], m["assignment_bytes"] or b""
        members.append(
            DescribedGroupMember(
                m["member_id"], m["client_id"], "", metadata, assignment, m["instance_id"]
            )
        )
    return DescribedGroup(
        group_id,
        0,
        view["state"],
        listed_protocol_type(view["protocol_type"], len(members)),
        (view["protocol"] or "") if stable else "",
        tuple(members),
    )


async def handle_delete_groups(
    ctx: HandlerContext, request: DeleteGroupsRequest, version: int, source: RequestSource
) -> DeleteGroupsResponse:
    results = []
    for group_id in request.groups_names:
        if not group_id:
            results.append(DeletableGroupResult(group_id, int(ErrorCode.INVALID_GROUP_ID)))
            continue
        try:
            await coordinator_of(ctx, group_id).delete_group(group_id)
        except RaftlogError as e:
            log.debug("DeleteGroups: group %r not deleted: %s", group_id, e)
            results.append(DeletableGroupResult(group_id, group_error_code(e)))
            continue
        results.append(DeletableGroupResult(group_id))
    return DeleteGroupsResponse(tuple(results))


HANDLERS: dict[int, Callable[..., Any]] = {
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
}
