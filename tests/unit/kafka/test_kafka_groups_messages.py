"""The consumer-group messages (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups) against kafka-python 3.0,
request and response, at every version the codec speaks: hypothesis-generated messages encode
to the bytes both of kafka-python's codecs write (its generated classes and, where it has
them, its hand-written ones), decode back to themselves, and kafka-python's generated classes
read our bytes and write them again unchanged. Plus the layouts byte by byte where a version
changes a field's presence, and `decode_request` keeping the broker's APIs as they were."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import groups as kp_admin
from kafka.protocol.consumer import group as kp_group
from kafka.protocol.metadata import find_coordinator as kp_find
from kafka.protocol.old import admin as old_admin
from kafka.protocol.old import commit as old_commit
from kafka.protocol.old import find_coordinator as old_find
from kafka.protocol.old import group as old_group
from kafka_group_samples import GROUP_SAMPLES
from kafka_message_samples import versions
from kp_oracle import (
    INT8,
    INT16,
    INT32,
    INT64,
    NULLABLE_TEXT,
    TEXT,
    assert_matches_kafka_python,
    bits,
    new_encode,
    old_encode,
    plain,
    small_tuples,
)

from raftlog.invariants import InvariantError
from raftlog.kafka.api import (
    FIRST_FLEXIBLE,
    SUPPORTED_VERSIONS,
    ApiKey,
    api_name,
)
from raftlog.kafka.messages import REQUEST_TYPES, decode_request
from raftlog.kafka.messages.commits import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
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
from raftlog.kafka.wire import KafkaDecodeError

BYTES = st.binary(max_size=12)
Strategy = st.SearchStrategy[Any]


def since(version: int, first: int, values: Strategy, default: Any) -> Strategy:
    """`values` from version `first`, the field's default before it."""
    return values if version >= first else st.just(default)


def find_coordinator(v: int) -> tuple[Strategy, Strategy]:
    request = st.builds(FindCoordinatorRequest, TEXT, since(v, 1, INT8, 0))
    response = st.builds(
        FindCoordinatorResponse,
        INT16,
        INT32,
        TEXT,
        INT32,
        since(v, 1, NULLABLE_TEXT, None),
        since(v, 1, INT32, 0),
    )
    return request, response


def join_group(v: int) -> tuple[Strategy, Strategy]:
    protocols = small_tuples(st.builds(JoinGroupRequestProtocol, TEXT, BYTES))
    request = st.builds(
        JoinGroupRequest,
        TEXT,
        INT32,
        TEXT,
        TEXT,
        protocols,
        since(v, 1, INT32, -1),
        since(v, 5, NULLABLE_TEXT, None),
    )
    member = st.builds(JoinGroupResponseMember, TEXT, BYTES, since(v, 5, NULLABLE_TEXT, None))
    response = st.builds(
        JoinGroupResponse,
        INT16,
        INT32,
        TEXT,
        TEXT,
        TEXT,
        small_tuples(member),
        since(v, 2, INT32, 0),
    )
    return request, response


def heartbeat(v: int) -> tuple[Strategy, Strategy]:
    request = st.builds(HeartbeatRequest, TEXT, INT32, TEXT, since(v, 3, NULLABLE_TEXT, None))
    return request, st.builds(HeartbeatResponse, INT16, since(v, 1, INT32, 0))


def leave_group(v: int) -> tuple[Strategy, Strategy]:
    if v < 3:
        request = st.builds(LeaveGroupRequest, TEXT, TEXT)
    else:
        identity = st.builds(MemberIdentity, TEXT, NULLABLE_TEXT)
        request = st.builds(LeaveGroupRequest, TEXT, st.just(""), small_tuples(identity))
    member = st.builds(MemberResponse, TEXT, NULLABLE_TEXT, INT16)
    response = st.builds(
        LeaveGroupResponse, INT16, since(v, 3, small_tuples(member), ()), since(v, 1, INT32, 0)
    )
    return request, response


def sync_group(v: int) -> tuple[Strategy, Strategy]:
    assignment = st.builds(SyncGroupRequestAssignment, TEXT, BYTES)
    request = st.builds(
        SyncGroupRequest,
        TEXT,
        INT32,
        TEXT,
        small_tuples(assignment),
        since(v, 3, NULLABLE_TEXT, None),
    )
    return request, st.builds(SyncGroupResponse, INT16, BYTES, since(v, 1, INT32, 0))


def topics(topic_type: Any, partition: Strategy) -> Strategy:
    return small_tuples(st.builds(topic_type, TEXT, small_tuples(partition)))


def offset_commit(v: int) -> tuple[Strategy, Strategy]:
    partition = st.builds(
        OffsetCommitRequestPartition, INT32, INT64, NULLABLE_TEXT, since(v, 6, INT32, -1)
    )
    request = st.builds(
        OffsetCommitRequest,
        TEXT,
        INT32,
        TEXT,
        topics(OffsetCommitRequestTopic, partition),
        INT64 if v <= 4 else st.just(-1),
        since(v, 7, NULLABLE_TEXT, None),
    )
    result = st.builds(OffsetCommitResponsePartition, INT32, INT16)
    response_topics = topics(OffsetCommitResponseTopic, result)
    return request, st.builds(OffsetCommitResponse, response_topics, since(v, 3, INT32, 0))


def offset_fetch(v: int) -> tuple[Strategy, Strategy]:
    wanted = topics(OffsetFetchRequestTopic, INT32)
    request = st.builds(OffsetFetchRequest, TEXT, st.none() | wanted if v >= 2 else wanted)
    partition = st.builds(
        OffsetFetchResponsePartition, INT32, INT64, NULLABLE_TEXT, INT16, since(v, 5, INT32, -1)
    )
    response = st.builds(
        OffsetFetchResponse,
        topics(OffsetFetchResponseTopic, partition),
        since(v, 2, INT16, 0),
        since(v, 3, INT32, 0),
    )
    return request, response


def list_groups(v: int) -> tuple[Strategy, Strategy]:
    group = st.builds(ListedGroup, TEXT, TEXT)
    response = st.builds(ListGroupsResponse, small_tuples(group), INT16, since(v, 1, INT32, 0))
    return st.just(ListGroupsRequest()), response


def describe_groups(v: int) -> tuple[Strategy, Strategy]:
    include = since(v, 3, st.booleans(), False)
    request = st.builds(DescribeGroupsRequest, small_tuples(TEXT), include)
    member = st.builds(
        DescribedGroupMember, TEXT, TEXT, TEXT, BYTES, BYTES, since(v, 4, NULLABLE_TEXT, None)
    )
    group = st.builds(
        DescribedGroup,
        TEXT,
        INT16,
        TEXT,
        TEXT,
        TEXT,
        small_tuples(member),
        since(v, 3, INT32, -(2**31)),
    )
    return request, st.builds(DescribeGroupsResponse, small_tuples(group), since(v, 1, INT32, 0))


def delete_groups(v: int) -> tuple[Strategy, Strategy]:
    result = st.builds(DeletableGroupResult, TEXT, INT16)
    request = st.builds(DeleteGroupsRequest, small_tuples(TEXT))
    return request, st.builds(DeleteGroupsResponse, small_tuples(result), INT32)


# Per API: the strategies, kafka-python's generated request and response classes, and the
# module and name prefix of its hand-written ones.
ORACLES: dict[ApiKey, tuple[Any, Any, str, Any]] = {
    ApiKey.FIND_COORDINATOR: (find_coordinator, kp_find, "FindCoordinator", old_find),
    ApiKey.JOIN_GROUP: (join_group, kp_group, "JoinGroup", old_group),
    ApiKey.HEARTBEAT: (heartbeat, kp_group, "Heartbeat", old_group),
    ApiKey.LEAVE_GROUP: (leave_group, kp_group, "LeaveGroup", old_group),
    ApiKey.SYNC_GROUP: (sync_group, kp_group, "SyncGroup", old_group),
    ApiKey.OFFSET_COMMIT: (offset_commit, kp_group, "OffsetCommit", old_commit),
    ApiKey.OFFSET_FETCH: (offset_fetch, kp_group, "OffsetFetch", old_commit),
    ApiKey.LIST_GROUPS: (list_groups, kp_admin, "ListGroups", old_admin),
    ApiKey.DESCRIBE_GROUPS: (describe_groups, kp_admin, "DescribeGroups", old_admin),
    ApiKey.DELETE_GROUPS: (delete_groups, kp_admin, "DeleteGroups", old_admin),
}

CASES = [
    (key, version, kind)
    for key in GROUP_SAMPLES
    for version in versions(key)
    for kind in ("Request", "Response")
]


def kafka_python_reads(kp_class: Any, data: bytes, version: int) -> None:
    """kafka-python's generated class parses `data` and writes the same bytes again."""
    parsed = kp_class.decode(data, version=version)
    assert bytes(parsed.encode()) == data, (kp_class.__name__, version)


def check_describe_groups_response(message: DescribeGroupsResponse, version: int) -> None:
    """As assert_matches_kafka_python, with authorized_operations as kafka-python's bit set."""
    data = plain(message)
    for group in data["groups"]:
        group["authorized_operations"] = bits(group["authorized_operations"])
    encoded = message.encode(version)
    assert encoded == new_encode(kp_admin.DescribeGroupsResponse, data, version)
    old_class = getattr(old_admin, f"DescribeGroupsResponse_v{version}", None)
    if old_class is not None:
        assert encoded == old_encode(old_class, data)
    assert DescribeGroupsResponse.decode(encoded, version) == message


@pytest.mark.parametrize(("api_key", "version", "kind"), CASES, ids=lambda c: str(c))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_matches_kafka_python(api_key: ApiKey, version: int, kind: str, data: Any) -> None:
    strategies, kp_module, name, old_module = ORACLES[api_key]
    request_strategy, response_strategy = strategies(version)
    message = data.draw(request_strategy if kind == "Request" else response_strategy)
    kp_class = getattr(kp_module, f"{name}{kind}")
    if isinstance(message, DescribeGroupsResponse):
        check_describe_groups_response(message, version)
    else:
        assert_matches_kafka_python(message, version, kp_class, old_module, f"{name}{kind}")
    encoded = message.encode(version)
    kafka_python_reads(kp_class, encoded, version)
    if kind == "Request":
        assert decode_request(api_key, version, memoryview(encoded), 0) == message


@pytest.mark.parametrize("api_key", list(GROUP_SAMPLES), ids=lambda key: key.name)
def test_the_samples_round_trip_at_every_version(api_key: ApiKey) -> None:
    make_request, make_response = GROUP_SAMPLES[api_key]
    for version in versions(api_key):
        for message in (make_request(version), make_response(version)):
            assert type(message).decode(message.encode(version), version) == message


# -- versions, byte by byte ----------------------------------------------------------------------


def test_find_coordinator_key_type_comes_in_v1() -> None:
    request = FindCoordinatorRequest("g", 1)
    assert request.encode(0) == bytes.fromhex("0001 67")
    assert request.encode(1) == bytes.fromhex("0001 67 01")
    assert FindCoordinatorRequest.decode(request.encode(0), 0) == FindCoordinatorRequest("g")
    response = FindCoordinatorResponse(0, 2, "h", 9092, None, 5)
    assert response.encode(0) == bytes.fromhex("0000 00000002 0001 68 00002384")
    assert response.encode(1) == bytes.fromhex("00000005 0000 ffff 00000002 0001 68 00002384")


def test_join_group_rebalance_timeout_from_v1_and_instance_id_from_v5() -> None:
    request = JoinGroupRequest("g", 10, "", "consumer", (), 20, "i")
    v0 = bytes.fromhex("0001 67 0000000a 0000 0008") + b"consumer" + bytes(4)
    assert request.encode(0) == v0
    v1_to_v4 = bytes.fromhex("0001 67 0000000a 00000014 0000 0008") + b"consumer" + bytes(4)
    assert request.encode(1) == request.encode(4) == v1_to_v4
    v5 = bytes.fromhex("0001 67 0000000a 00000014 0000 0001 69 0008") + b"consumer" + bytes(4)
    assert request.encode(5) == v5
    decoded = JoinGroupRequest.decode(v0, 0)
    assert (decoded.rebalance_timeout_ms, decoded.group_instance_id) == (-1, None)


def test_leave_group_v3_is_a_batch_of_members() -> None:
    request = LeaveGroupRequest("g", "m", (MemberIdentity("a", None),))
    assert request.encode(2) == bytes.fromhex("0001 67 0001 6d")
    assert request.encode(3) == bytes.fromhex("0001 67 00000001 0001 61 ffff")
    assert LeaveGroupRequest.decode(request.encode(3), 3) == LeaveGroupRequest(
        "g", members=(MemberIdentity("a"),)
    )


def test_offset_commit_retention_time_only_in_v2_to_v4() -> None:
    topic = OffsetCommitRequestTopic("t", (OffsetCommitRequestPartition(0, 5),))
    request = OffsetCommitRequest("g", 3, "m", (topic,), 60)
    head = bytes.fromhex("0001 67 00000003 0001 6d")
    partition = bytes.fromhex("00000001 0001 74 00000001 00000000 0000000000000005")
    assert request.encode(4) == head + (60).to_bytes(8, "big") + partition + b"\xff\xff"
    assert request.encode(5) == head + partition + b"\xff\xff"
    # v6 puts the leader epoch between the offset and the metadata; v7 adds the instance id.
    assert request.encode(6) == head + partition + b"\xff\xff\xff\xff" + b"\xff\xff"
    assert request.encode(7) == head + b"\xff\xff" + partition + b"\xff\xff\xff\xff\xff\xff"
    assert OffsetCommitRequest.decode(request.encode(5), 5).retention_time_ms == -1


def test_offset_fetch_all_topics_is_null_from_v2() -> None:
    everything = OffsetFetchRequest("g", None)
    assert everything.encode(2) == bytes.fromhex("0001 67 ffffffff")
    assert OffsetFetchRequest.decode(everything.encode(2), 2) == everything
    with pytest.raises(InvariantError, match="null topics came in v2"):
        everything.encode(1)
    with pytest.raises(KafkaDecodeError, match="topics: null where an array is required"):
        OffsetFetchRequest.decode(bytes.fromhex("0001 67 ffffffff"), 1)


def test_offset_fetch_response_error_code_last_from_v2() -> None:
    response = OffsetFetchResponse((), 16, 0)
    assert response.encode(1) == bytes(4)
    assert response.encode(2) == bytes(4) + bytes.fromhex("0010")
    assert response.encode(3) == bytes(8) + bytes.fromhex("0010")


def test_describe_groups_operations_and_instance_ids() -> None:
    member = DescribedGroupMember("m", "c", "h", b"", b"", "i")
    response = DescribeGroupsResponse((DescribedGroup("g", 0, "Stable", "", "", (member,), 8),))
    v2_member = bytes.fromhex("0001 6d 0001 63 0001 68 00000000 00000000")
    head = bytes.fromhex("00000000 00000001 0000 0001 67 0006") + b"Stable" + bytes(4)
    assert response.encode(2) == head + bytes.fromhex("00000001") + v2_member
    v3 = head + bytes.fromhex("00000001") + v2_member + bytes.fromhex("00000008")
    assert response.encode(3) == v3
    v4_member = bytes.fromhex("0001 6d 0001 69 0001 63 0001 68 00000000 00000000")
    assert response.encode(4) == head + bytes.fromhex("00000001") + v4_member + b"\x00\x00\x00\x08"
    decoded = DescribeGroupsResponse.decode(response.encode(2), 2)
    assert decoded.groups[0].authorized_operations == -(2**31)
    assert decoded.groups[0].members[0].group_instance_id is None


def test_list_groups_request_is_empty_and_strict_through_decode_request() -> None:
    assert ListGroupsRequest().encode(2) == b""
    assert decode_request(ApiKey.LIST_GROUPS, 2, memoryview(b""), 0) == (ListGroupsRequest())
    with pytest.raises(KafkaDecodeError, match="ListGroups v2: 1 bytes left over"):
        decode_request(ApiKey.LIST_GROUPS, 2, memoryview(b"\x00"), 0)


# -- what the broker decodes -------------------------------------------------------------------


def test_group_versions_are_below_the_first_flexible_and_advertised() -> None:
    """Every group API has a handler, so it is advertised (SUPPORTED_VERSIONS)."""
    for key in GROUP_SAMPLES:
        low, high = SUPPORTED_VERSIONS[key]
        assert 0 <= low <= high < FIRST_FLEXIBLE[key], key
        assert REQUEST_TYPES[key].__name__ == f"{api_name(key)}Request"


@pytest.mark.parametrize("api_key", list(GROUP_SAMPLES), ids=lambda key: key.name)
def test_versions_outside_the_range(api_key: ApiKey) -> None:
    """Decoding one is the peer's fault, encoding one ours."""
    make_request, make_response = GROUP_SAMPLES[api_key]
    low, high = SUPPORTED_VERSIONS[api_key]
    for message in (make_request(low), make_response(low)):
        for version in (low - 1, high + 1):
            with pytest.raises(KafkaDecodeError, match="not one we speak"):
                type(message).decode(message.encode(low), version)
            with pytest.raises(InvariantError):
                message.encode(version)


def test_errors_name_the_api_version_and_field() -> None:
    body = JoinGroupRequest("g", 1, "m", "consumer", (JoinGroupRequestProtocol("range", b"x"),))
    data = body.encode(5)[:-1]
    with pytest.raises(KafkaDecodeError) as caught:
        decode_request(ApiKey.JOIN_GROUP, 5, memoryview(data), 0)
    assert str(caught.value) == ("JoinGroup v5: protocols[0].metadata: 1 bytes announced, 0 left")
