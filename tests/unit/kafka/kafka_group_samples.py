"""Sample consumer-group messages for the codec tests (as kafka_message_samples.py for the
broker's APIs): for each group API, a request and a response per version the codec speaks
(SUPPORTED_VERSIONS), every field set to a value that version carries (fields a version lacks hold
the default decode gives back, so that round trips compare equal)."""

from __future__ import annotations

from typing import Any

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.commits import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
)
from raftlog.kafka.messages.common import AUTHORIZED_OPERATIONS_OMITTED
from raftlog.kafka.messages.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
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
from raftlog.kafka.messages.groups import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    MemberResponse,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)

SUBSCRIPTION = ConsumerProtocolSubscription(
    ("pageviews", "clicks"), b"sticky", (("pageviews", (0, 2)),), 4, "rack-a"
).encode(3)
ASSIGNMENT = ConsumerProtocolAssignment((("pageviews", (0, 2)), ("clicks", (1,))), None).encode(1)


def _since(version: int, first: int, value: Any, default: Any) -> Any:
    """`value` from version `first`, `default` before."""
    return value if version >= first else default


def find_coordinator_request(version: int) -> FindCoordinatorRequest:
    return FindCoordinatorRequest("orders-group", _since(version, 1, 1, 0))


def find_coordinator_response(version: int) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(
        0, 2, "broker-2.local", 19092, _since(version, 1, "fine", None), _since(version, 1, 3, 0)
    )


def join_group_request(version: int) -> JoinGroupRequest:
    return JoinGroupRequest(
        "orders-group",
        10000,
        "member-1",
        "consumer",
        (
            JoinGroupRequestProtocol("cooperative-sticky", SUBSCRIPTION),
            JoinGroupRequestProtocol("range", b""),
        ),
        _since(version, 1, 300000, -1),
        _since(version, 5, "instance-é", None),
    )


def join_group_response(version: int) -> JoinGroupResponse:
    members = (
        JoinGroupResponseMember("member-1", SUBSCRIPTION, _since(version, 5, "instance-1", None)),
        JoinGroupResponseMember("member-2", b"\x00\x00", None),
    )
    throttle_time_ms = _since(version, 2, 5, 0)
    return JoinGroupResponse(0, 7, "range", "member-1", "member-1", members, throttle_time_ms)


def heartbeat_request(version: int) -> HeartbeatRequest:
    return HeartbeatRequest("orders-group", 7, "member-1", _since(version, 3, "instance-1", None))


def heartbeat_response(version: int) -> HeartbeatResponse:
    return HeartbeatResponse(27, _since(version, 1, 100, 0))


def leave_group_request(version: int) -> LeaveGroupRequest:
    if version < 3:
        return LeaveGroupRequest("orders-group", "member-1")
    return LeaveGroupRequest(
        "orders-group", members=(MemberIdentity("member-1"), MemberIdentity("m-2", "instance-2"))
    )


def leave_group_response(version: int) -> LeaveGroupResponse:
    members = (MemberResponse("member-1"), MemberResponse("m-2", "instance-2", 25))
    return LeaveGroupResponse(0, _since(version, 3, members, ()), _since(version, 1, 9, 0))


def sync_group_request(version: int) -> SyncGroupRequest:
    assignments = (
        SyncGroupRequestAssignment("member-1", ASSIGNMENT),
        SyncGroupRequestAssignment("member-2", b""),
    )
    instance = _since(version, 3, "instance-1", None)
    return SyncGroupRequest("orders-group", 7, "member-1", assignments, instance)


def sync_group_response(version: int) -> SyncGroupResponse:
    return SyncGroupResponse(0, ASSIGNMENT, _since(version, 1, 2, 0))


def offset_commit_request(version: int) -> OffsetCommitRequest:
    epoch = _since(version, 6, 4, -1)
    partitions = (
        OffsetCommitRequestPartition(0, 1200, None, epoch),
        OffsetCommitRequestPartition(2, 0, "metadata-ü", -1),
    )
    return OffsetCommitRequest(
        "orders-group",
        7,
        "member-1",
        (("pageviews", partitions), ("empty", ())),
        -1 if version >= 5 else 86400000,
        _since(version, 7, "instance-1", None),
    )


def offset_commit_response(version: int) -> OffsetCommitResponse:
    results = (OffsetCommitResponsePartition(0), OffsetCommitResponsePartition(2, 22))
    return OffsetCommitResponse((("pageviews", results),), _since(version, 3, 1, 0))


def offset_fetch_request(version: int) -> OffsetFetchRequest:
    if version >= 2 and version % 2:
        return OffsetFetchRequest("orders-group", None)
    return OffsetFetchRequest("orders-group", (("pageviews", (0, 1, 2)), ("clicks", ())))


def offset_fetch_response(version: int) -> OffsetFetchResponse:
    partitions = (
        OffsetFetchResponsePartition(0, 1200, "m", 0, _since(version, 5, 4, -1)),
        OffsetFetchResponsePartition(1, -1, None, 0),
        OffsetFetchResponsePartition(2, -1, "", 3),
    )
    return OffsetFetchResponse(
        (("pageviews", partitions),), _since(version, 2, 16, 0), _since(version, 3, 8, 0)
    )


def list_groups_request(version: int) -> ListGroupsRequest:
    return ListGroupsRequest()


def list_groups_response(version: int) -> ListGroupsResponse:
    groups = (ListedGroup("orders-group", "consumer"), ListedGroup("connect", ""))
    return ListGroupsResponse(groups, 0, _since(version, 1, 4, 0))


def describe_groups_request(version: int) -> DescribeGroupsRequest:
    return DescribeGroupsRequest(("orders-group", "other"), _since(version, 3, True, False))


def describe_groups_response(version: int) -> DescribeGroupsResponse:
    member = DescribedGroupMember(
        "member-1",
        "rdkafka",
        "/127.0.0.1",
        SUBSCRIPTION,
        ASSIGNMENT,
        _since(version, 4, "instance-1", None),
    )
    stable = DescribedGroup(
        "orders-group",
        0,
        "Stable",
        "consumer",
        "range",
        (member,),
        _since(version, 3, 0b1010, AUTHORIZED_OPERATIONS_OMITTED),
    )
    groups = (stable, DescribedGroup("gone", 69, "Dead"))
    return DescribeGroupsResponse(groups, _since(version, 1, 6, 0))


def delete_groups_request(version: int) -> DeleteGroupsRequest:
    return DeleteGroupsRequest(("orders-group", "", "other"))


def delete_groups_response(version: int) -> DeleteGroupsResponse:
    results = (DeletableGroupResult("orders-group"), DeletableGroupResult("other", 68))
    return DeleteGroupsResponse(results, 7)


GROUP_SAMPLES: dict[ApiKey, tuple[Any, Any]] = {
    ApiKey.FIND_COORDINATOR: (find_coordinator_request, find_coordinator_response),
    ApiKey.JOIN_GROUP: (join_group_request, join_group_response),
    ApiKey.HEARTBEAT: (heartbeat_request, heartbeat_response),
    ApiKey.LEAVE_GROUP: (leave_group_request, leave_group_response),
    ApiKey.SYNC_GROUP: (sync_group_request, sync_group_response),
    ApiKey.OFFSET_COMMIT: (offset_commit_request, offset_commit_response),
    ApiKey.OFFSET_FETCH: (offset_fetch_request, offset_fetch_response),
    ApiKey.LIST_GROUPS: (list_groups_request, list_groups_response),
    ApiKey.DESCRIBE_GROUPS: (describe_groups_request, describe_groups_response),
    ApiKey.DELETE_GROUPS: (delete_groups_request, delete_groups_response),
}
