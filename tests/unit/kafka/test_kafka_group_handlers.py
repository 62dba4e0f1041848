"""The Kafka listener's group offset and admin handlers (FindCoordinator, OffsetCommit,
OffsetFetch, ListGroups, DescribeGroups, DeleteGroups) against a fake coordinator: the error
codes Kafka's clients act on, per partition and per group, and the bytes Kafka's tools read."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from raftlog import errors as e
from raftlog.kafka.errors import ErrorCode, group_error_code
from raftlog.kafka.handlers.group_admin import (
    handle_delete_groups,
    handle_describe_groups,
    handle_list_groups,
    listed_protocol_type,
    native_member_bytes,
)
from raftlog.kafka.handlers.group_offsets import (
    fetch_error_response,
    fetch_response,
    handle_find_coordinator,
    handle_offset_commit,
    handle_offset_fetch,
)
from raftlog.kafka.messages.commits import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from raftlog.kafka.messages.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    TopicPartitions,
)
from raftlog.kafka.messages.group_admin import (
    DeleteGroupsRequest,
    DescribedGroupMember,
    DescribeGroupsRequest,
    ListedGroup,
    ListGroupsRequest,
)
from raftlog.kafka.messages.groups import FindCoordinatorRequest
from raftlog.metadata.model import BrokerInfo

METADATA_MAX = 16


class FakeCoordinator:
    def __init__(self, active: bool = True, commit_error: Exception | None = None):
        self.is_active = active
        self.config = SimpleNamespace(offset_metadata_bytes_max=METADATA_MAX)
        self.commit_error = commit_error
        self.commits: list[tuple[Any, ...]] = []
        self.offsets: dict[tuple[str, int], tuple[int, str]] = {("t", 0): (5, "m")}
        self.groups: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []

    async def commit(self, group_id: str, member_id: str, generation: int, offsets: Any) -> None:
        if self.commit_error is not None:
            raise self.commit_error
        self.commits.append((group_id, member_id, generation, offsets))

    def fetch_offsets(self, group_id: str, partitions: Any) -> dict[tuple[str, int], Any]:
        found = self.offsets if group_id == "g" else {}
        return found if partitions is None else {tp: found[tp] for tp in partitions if tp in found}

    def list_groups(self) -> list[dict[str, Any]]:
        return [
            {"group_id": g, "protocol_type": v["protocol_type"], "members": len(v["members"])}
            for g, v in sorted(self.groups.items())
        ]

    def describe_members(self, group_id: str) -> dict[str, Any] | None:
        return self.groups.get(group_id)

    async def delete_group(self, group_id: str) -> None:
        if group_id not in self.groups:
            raise e.GroupIdNotFoundError(f"unknown group {group_id!r}")
        if self.groups[group_id]["members"]:
            raise e.GroupNotEmptyError(f"group {group_id!r} has members")
        self.deleted.append(group_id)


class FakeQuorum:
    def __init__(self, error: Exception | None = None):
        self.error = error
        self.proposed: list[str] = []

    async def propose(self, name: str, **args: Any) -> None:
        self.proposed.append(name)
        if self.error is not None:
            raise self.error


def context(coordinator: FakeCoordinator | None, controller_id: int = 1, **kw: Any) -> Any:
    brokers = {
        False: [BrokerInfo(1, "in-1", 9092), BrokerInfo(2, "in-2", 9092)],
        True: [BrokerInfo(1, "ex-1", 19092), BrokerInfo(2, "ex-2", 19092)],
    }
    metadata = SimpleNamespace(
        controller_id=controller_id,
        stale=kw.get("stale", False),
        kafka_brokers=lambda external=False: brokers[external],
        quorum=kw.get("quorum", FakeQuorum()),
    )
    return SimpleNamespace(
        coordinator=coordinator, metadata=metadata, config=SimpleNamespace(node_id=2)
    )


SOURCE = SimpleNamespace(external=False)


def run(result: Any) -> Any:
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


# -- error codes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (e.NotCoordinatorError("x"), ErrorCode.NOT_COORDINATOR),
        (e.NotControllerError("x"), ErrorCode.NOT_COORDINATOR),
        (e.StorageError("x"), ErrorCode.NOT_COORDINATOR),
        (e.RaftlogTimeoutError("x"), ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (e.RequestTimedOutError("x"), ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (e.IllegalGenerationError("x"), ErrorCode.ILLEGAL_GENERATION),
        (e.UnknownMemberIdError("x"), ErrorCode.UNKNOWN_MEMBER_ID),
        (e.RebalanceInProgressError("x"), ErrorCode.REBALANCE_IN_PROGRESS),
        (e.CommitFailedError("x"), ErrorCode.ILLEGAL_GENERATION),
        (e.UnknownTopicOrPartitionError("x"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (e.GroupNotEmptyError("x"), ErrorCode.NON_EMPTY_GROUP),
        (e.GroupIdNotFoundError("x"), ErrorCode.GROUP_ID_NOT_FOUND),
        (e.InconsistentGroupProtocolError("x"), ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        (ValueError("a bug"), ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_group_error_codes(error: Exception, code: ErrorCode) -> None:
    assert group_error_code(error) == code


# -- FindCoordinator -----------------------------------------------------------------------------


def test_find_coordinator_names_the_active_controllers_kafka_listener() -> None:
    ctx = context(None, controller_id=1)
    answer = handle_find_coordinator(ctx, FindCoordinatorRequest("g"), 2, SOURCE)
    assert (answer.error_code, answer.node_id, answer.host, answer.port) == (0, 1, "in-1", 9092)
    external = handle_find_coordinator(
        ctx, FindCoordinatorRequest("g"), 2, SimpleNamespace(external=True)
    )
    assert (external.host, external.port) == ("ex-1", 19092)


@pytest.mark.parametrize("controller_id", [-1, 3])
def test_find_coordinator_without_a_live_controller_is_retriable(controller_id: int) -> None:
    answer = handle_find_coordinator(
        context(None, controller_id), FindCoordinatorRequest("g"), 1, SOURCE
    )
    assert answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert answer.node_id == -1 and answer.error_message


def test_find_coordinator_from_a_broker_cut_off_from_the_quorum_is_retriable() -> None:
    answer = handle_find_coordinator(
        context(None, 1, stale=True), FindCoordinatorRequest("g"), 1, SOURCE
    )
    assert answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert "cut off" in str(answer.error_message)


def test_find_coordinator_of_a_transaction_says_there_are_none() -> None:
    answer = handle_find_coordinator(context(None), FindCoordinatorRequest("tx", 1), 1, SOURCE)
    assert answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert "does not support transactions" in (answer.error_message or "")
    odd = handle_find_coordinator(context(None), FindCoordinatorRequest("x", 7), 1, SOURCE)
    assert odd.error_code == ErrorCode.INVALID_REQUEST


# -- OffsetCommit --------------------------------------------------------------------------------


def commit_request(*partitions: OffsetCommitRequestPartition, group: str = "g") -> Any:
    return OffsetCommitRequest(group, -1, "", (OffsetCommitRequestTopic("t", partitions),))


def codes(response: Any) -> list[tuple[str, int, int]]:
    return [
        (t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions
    ]


def test_commit_stores_and_answers_every_partition() -> None:
    c = FakeCoordinator()
    request = commit_request(
        OffsetCommitRequestPartition(0, 10, None), OffsetCommitRequestPartition(1, 11, "meta")
    )
    answer = run(handle_offset_commit(context(c), request, 7, SOURCE))
    assert codes(answer) == [("t", 0, 0), ("t", 1, 0)]
    assert c.commits == [("g", "", -1, [["t", 0, 10, ""], ["t", 1, 11, "meta"]])]


def test_too_large_metadata_is_refused_on_its_own_partition() -> None:
    c = FakeCoordinator()
    request = commit_request(
        OffsetCommitRequestPartition(0, 10, "x" * (METADATA_MAX + 1)),
        OffsetCommitRequestPartition(1, 11, "ok"),
    )
    answer = run(handle_offset_commit(context(c), request, 2, SOURCE))
    assert codes(answer) == [("t", 0, ErrorCode.OFFSET_METADATA_TOO_LARGE), ("t", 1, 0)]
    assert c.commits == [("g", "", -1, [["t", 1, 11, "ok"]])]


@pytest.mark.parametrize(
    ("coordinator", "code"),
    [
        (None, ErrorCode.NOT_COORDINATOR),
        (FakeCoordinator(active=False), ErrorCode.NOT_COORDINATOR),
        (
            FakeCoordinator(commit_error=e.UnknownTopicOrPartitionError("no t-1")),
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ),
        (
            FakeCoordinator(commit_error=e.IllegalGenerationError("old")),
            ErrorCode.ILLEGAL_GENERATION,
        ),
        (FakeCoordinator(commit_error=e.NotControllerError("lost")), ErrorCode.NOT_COORDINATOR),
    ],
)
def test_a_refused_commit_answers_every_partition(
    coordinator: FakeCoordinator | None, code: ErrorCode
) -> None:
    request = commit_request(OffsetCommitRequestPartition(0, 1), OffsetCommitRequestPartition(1, 2))
    answer = run(handle_offset_commit(context(coordinator), request, 7, SOURCE))
    assert codes(answer) == [("t", 0, code), ("t", 1, code)]


def test_an_empty_group_id_is_invalid() -> None:
    c = FakeCoordinator()
    request = commit_request(OffsetCommitRequestPartition(0, 1), group="")
    answer = run(handle_offset_commit(context(c), request, 7, SOURCE))
    assert codes(answer) == [("t", 0, ErrorCode.INVALID_GROUP_ID)] and c.commits == []


# -- OffsetFetch ---------------------------------------------------------------------------------


def test_fetch_answers_unknown_partitions_with_minus_one_in_request_order() -> None:
    found = {("t", 0): (5, "m")}
    answer = fetch_response([("u", 3), ("t", 1), ("t", 0)], found)
    assert answer.topics == (
        OffsetFetchResponseTopic("u", (OffsetFetchResponsePartition(3, -1, ""),)),
        OffsetFetchResponseTopic(
            "t", (OffsetFetchResponsePartition(1, -1, ""), OffsetFetchResponsePartition(0, 5, "m"))
        ),
    )
    assert fetch_response(None, {("b", 1): (1, ""), ("a", 0): (2, "")}).topics == (
        OffsetFetchResponseTopic("a", (OffsetFetchResponsePartition(0, 2, ""),)),
        OffsetFetchResponseTopic("b", (OffsetFetchResponsePartition(1, 1, ""),)),
    )


def test_fetch_reads_after_a_barrier() -> None:
    quorum = FakeQuorum()
    request = OffsetFetchRequest("g", (OffsetFetchRequestTopic("t", (0, 1)),))
    answer = run(handle_offset_fetch(context(FakeCoordinator(), quorum=quorum), request, 5, SOURCE))
    assert quorum.proposed == ["noop"]
    assert [(p.partition_index, p.committed_offset) for p in answer.topics[0].partitions] == [
        (0, 5),
        (1, -1),
    ]
    unknown = run(
        handle_offset_fetch(context(FakeCoordinator()), OffsetFetchRequest("x", None), 5, SOURCE)
    )
    assert unknown.topics == () and unknown.error_code == 0


def test_fetch_errors_go_where_the_version_puts_them() -> None:
    request = OffsetFetchRequest("g", (OffsetFetchRequestTopic("t", (0, 1)),))
    v1 = fetch_error_response(request, 1, 16)
    assert [
        (p.partition_index, p.committed_offset, p.error_code) for p in v1.topics[0].partitions
    ] == [
        (0, -1, 16),
        (1, -1, 16),
    ]
    assert fetch_error_response(request, 2, 16) == fetch_error_response(request, 5, 16)
    assert fetch_error_response(request, 2, 16).topics == ()
    lost = context(FakeCoordinator(), quorum=FakeQuorum(e.NotControllerError("lost")))
    answer = run(handle_offset_fetch(lost, request, 3, SOURCE))
    assert answer.error_code == ErrorCode.NOT_COORDINATOR


# -- ListGroups, DescribeGroups, DeleteGroups ---------------------------------------------------


def test_protocol_types_shown() -> None:
    assert listed_protocol_type("consumer", 0) == "consumer"
    assert listed_protocol_type("consumer", 2) == "consumer"
    assert listed_protocol_type("raftlog", 2) == "raftlog"
    assert listed_protocol_type("raftlog", 0) == ""  # offsets only: Kafka's tools list it


def test_a_raftlog_member_is_shown_in_the_consumer_protocol() -> None:
    metadata, assignment = native_member_bytes(["b", "a"], [["b", 1], ["a", 2], ["b", 0]])
    assert ConsumerProtocolSubscription.decode(metadata).topics == ("b", "a")
    assert ConsumerProtocolAssignment.decode(assignment).assigned_partitions == (
        TopicPartitions("a", (2,)),
        TopicPartitions("b", (0, 1)),
    )


def member(mid: str, **kw: Any) -> dict[str, Any]:
    return {
        "member_id": mid,
        "instance_id": None,
        "client_id": "c",
        "topics": ["t"],
        "assignment": [["t", 0]],
        "metadata": None,
        "assignment_bytes": None,
    } | kw


def test_list_and_describe_groups() -> None:
    c = FakeCoordinator()
    c.groups = {
        "k": {
            "state": "Stable",
            "protocol_type": "consumer",
            "protocol": "range",
            "members": [member("m1", metadata=b"sub", assignment_bytes=b"asg")],
        },
        "n": {
            "state": "Stable",
            "protocol_type": "raftlog",
            "protocol": "range",
            "members": [member("m2")],
        },
        "o": {"state": "Empty", "protocol_type": "raftlog", "protocol": None, "members": []},
        "p": {
            "state": "PreparingRebalance",
            "protocol_type": "consumer",
            "protocol": "range",
            "members": [member("m3", metadata=b"sub", assignment_bytes=b"asg")],
        },
    }
    listed = handle_list_groups(context(c), ListGroupsRequest(), 2, SOURCE)
    assert listed.groups == (
        ListedGroup("k", "consumer"),
        ListedGroup("n", "raftlog"),
        ListedGroup("o", ""),
        ListedGroup("p", "consumer"),
    )
    # Another node coordinates nothing: an empty list, not an error (clients ask every broker).
    assert (
        handle_list_groups(
            context(FakeCoordinator(active=False)), ListGroupsRequest(), 2, SOURCE
        ).groups
        == ()
    )
    assert handle_list_groups(context(None), ListGroupsRequest(), 2, SOURCE).error_code == 0

    described = handle_describe_groups(
        context(c), DescribeGroupsRequest(("k", "n", "o", "p", "zz")), 4, SOURCE
    ).groups
    k, n, o, p, zz = described
    assert (k.group_state, k.protocol_type, k.protocol_data) == ("Stable", "consumer", "range")
    assert k.members == (DescribedGroupMember("m1", "c", "", b"sub", b"asg"),)
    assert n.members[0].member_metadata == native_member_bytes(["t"], [["t", 0]])[0]
    assert n.members[0].member_assignment == native_member_bytes(["t"], [["t", 0]])[1]
    assert (o.group_state, o.protocol_type, o.members) == ("Empty", "", ())
    # Not Stable: no protocol and no bytes (Kafka's describeNoMetadata).
    assert p.protocol_data == "" and p.members == (DescribedGroupMember("m3", "c", ""),)
    assert (zz.error_code, zz.group_state) == (0, "Dead")
    elsewhere = handle_describe_groups(
        context(FakeCoordinator(active=False)), DescribeGroupsRequest(("k",)), 0, SOURCE
    )
    assert elsewhere.groups[0].error_code == ErrorCode.NOT_COORDINATOR


def test_delete_groups_one_by_one() -> None:
    c = FakeCoordinator()
    c.groups = {
        "empty": {"members": []},
        "busy": {"members": [member("m")]},
    }
    answer = run(
        handle_delete_groups(
            context(c), DeleteGroupsRequest(("empty", "busy", "nope", "")), 1, SOURCE
        )
    )
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        ("empty", 0),
        ("busy", ErrorCode.NON_EMPTY_GROUP),
        ("nope", ErrorCode.GROUP_ID_NOT_FOUND),
        ("", ErrorCode.INVALID_GROUP_ID),
    ]
    assert c.deleted == ["empty"]
    elsewhere = run(handle_delete_groups(context(None), DeleteGroupsRequest(("empty",)), 0, SOURCE))
    assert elsewhere.results[0].error_code == ErrorCode.NOT_COORDINATOR
