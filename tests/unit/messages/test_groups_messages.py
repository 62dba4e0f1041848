"""The group APIs' typed messages: the documented layouts (docs/PROTOCOL.md and
raftlog/messages/groups.py), and back."""

from __future__ import annotations

from typing import Any

import msgpack

from raftlog import protocol
from raftlog.messages.groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    GroupMemberDescription,
    GroupOffset,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    ResetOffset,
    ResetOffsetsRequest,
    ResetOffsetsResponse,
)
from raftlog.topics import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def _wire(body: dict[str, Any]) -> dict[str, Any]:
    return msgpack.unpackb(msgpack.packb(body))  # type: ignore[no-any-return]


def _request(api: protocol.ApiKey, req: Any, body: dict[str, Any]) -> None:
    """`req` writes `body` (keys in that order), the broker's check accepts it, and it reads
    back as `req`."""
    assert req.to_body() == body and list(req.to_body()) == list(body)
    protocol.check_request_body(api, body)
    assert type(req).from_body(_wire(body)) == req


def _response(resp: Any, body: dict[str, Any]) -> None:
    assert resp.to_body() == body and list(resp.to_body()) == list(body)
    assert type(resp).from_body(_wire(body)) == resp


def test_find_coordinator() -> None:
    _request(protocol.ApiKey.FIND_COORDINATOR, FindCoordinatorRequest("g"), {"group_id": "g"})
    _response(FindCoordinatorResponse(1, "h", 9092), {"node_id": 1, "host": "h", "port": 9092})


def test_join_group() -> None:
    req = JoinGroupRequest("g", 10_000, 60_000, ("a", "b"), ("range",), "m-1", "c", None)
    _request(
        protocol.ApiKey.JOIN_GROUP,
        req,
        {
            "group_id": "g",
            "member_id": "m-1",
            "client_id": "c",
            "instance_id": None,
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 60_000,
            "topics": ["a", "b"],
            "protocols": ["range"],
        },
    )
    # Left out: a new member, and a rebalance timeout that is the session timeout.
    minimal = {"group_id": "g", "session_timeout_ms": 6000, "topics": [], "protocols": []}
    protocol.check_request_body(protocol.ApiKey.JOIN_GROUP, minimal)
    assert JoinGroupRequest.from_body(minimal) == JoinGroupRequest("g", 6000, 6000, (), ())
    _response(
        JoinGroupResponse("m-1", 3, "Stable", "range", (A0, B0)),
        {
            "member_id": "m-1",
            "generation": 3,
            "state": "Stable",
            "protocol": "range",
            "assignment": [["a", 0], ["b", 0]],
        },
    )


def test_heartbeat_and_leave() -> None:
    _request(
        protocol.ApiKey.HEARTBEAT,
        HeartbeatRequest("g", "m", 2),
        {"group_id": "g", "member_id": "m", "generation": 2},
    )
    _response(HeartbeatResponse(2), {"generation": 2})
    _request(
        protocol.ApiKey.LEAVE_GROUP,
        LeaveGroupRequest("g", ("m", "n")),
        {"group_id": "g", "member_ids": ["m", "n"]},
    )
    _response(LeaveGroupResponse(1), {"left": 1})


def test_offset_commit_and_fetch() -> None:
    req = OffsetCommitRequest.of("g", {A1: 7, A0: 5}, "m", 3)
    _request(
        protocol.ApiKey.OFFSET_COMMIT,
        req,
        {
            "group_id": "g",
            "member_id": "m",
            "generation": 3,
            "offsets": [["a", 0, 5, ""], ["a", 1, 7, ""]],
        },
    )
    standalone = OffsetCommitRequest.of("g", {B0: 1})
    assert (standalone.member_id, standalone.generation) == ("", -1)
    _response(OffsetCommitResponse(), {})
    _request(
        protocol.ApiKey.OFFSET_FETCH,
        OffsetFetchRequest("g", (A0, B0)),
        {"group_id": "g", "partitions": [["a", 0], ["b", 0]]},
    )
    _request(
        protocol.ApiKey.OFFSET_FETCH, OffsetFetchRequest("g"), {"group_id": "g", "partitions": None}
    )
    resp = OffsetFetchResponse((GroupOffset("a", 0, 5, ""), GroupOffset("b", 0, 9, "x")))
    _response(resp, {"offsets": [["a", 0, 5, ""], ["b", 0, 9, "x"]]})
    assert resp.committed() == {A0: 5, B0: 9}


def test_reset_list_describe_delete() -> None:
    req = ResetOffsetsRequest.of("g", {B0: 2, A0: 0})
    assert req.offsets == (ResetOffset("a", 0, 0), ResetOffset("b", 0, 2))
    _request(
        protocol.ApiKey.RESET_OFFSETS,
        req,
        {"group_id": "g", "offsets": [["a", 0, 0], ["b", 0, 2]]},
    )
    _response(ResetOffsetsResponse(2), {"reset": 2})
    _request(protocol.ApiKey.LIST_GROUPS, ListGroupsRequest(), {})
    group = {"group_id": "g", "state": "Empty", "generation": 0, "protocol": None, "members": 0}
    _response(ListGroupsResponse((group,)), {"groups": [group]})
    _request(protocol.ApiKey.DESCRIBE_GROUPS, DescribeGroupsRequest("g"), {"group_id": "g"})
    member = GroupMemberDescription("m", "c", None, 10_000, ("a",), (A0, A1), True)
    _response(
        DescribeGroupsResponse(
            "g", "Stable", 2, "range", None, (member,), (GroupOffset("a", 0, 5, "", 1700),)
        ),
        {
            "group_id": "g",
            "state": "Stable",
            "generation": 2,
            "protocol": "range",
            "protocol_type": "raftlog",
            "rebalance_deadline_ms": None,
            "members": [
                {
                    "member_id": "m",
                    "client_id": "c",
                    "instance_id": None,
                    "session_timeout_ms": 10_000,
                    "topics": ["a"],
                    "assignment": [["a", 0], ["a", 1]],
                    "rejoined": True,
                }
            ],
            "offsets": [["a", 0, 5, "", 1700]],
        },
    )
    _request(protocol.ApiKey.DELETE_GROUPS, DeleteGroupsRequest("g"), {"group_id": "g"})
    _response(DeleteGroupsResponse(), {})
