"""Kafka's classic group membership on a live broker, request by request (JoinGroup with
KIP-394's MEMBER_ID_REQUIRED round, the JoinGroup barrier, the leader's SyncGroup, Heartbeat,
LeaveGroup v3), with a raw Kafka socket per member: the exact answers Kafka's clients build
on. The clients themselves are tested in test_kafka_groups.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.messages.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    TopicPartitions,
)
from raftlog.kafka.messages.groups import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._support import wait_for
from tests.kafka._raw import KafkaRawClient

JOIN_V, SYNC_V, HEARTBEAT_V, LEAVE_V = 5, 3, 3, 3
SUBSCRIPTION = ConsumerProtocolSubscription(("t",)).encode(1)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, 1) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topic("t", 4)
        yield c


def join_request(member_id: str = "") -> JoinGroupRequest:
    return JoinGroupRequest(
        "g",
        10_000,
        member_id,
        "consumer",
        (JoinGroupRequestProtocol("range", SUBSCRIPTION),),
        rebalance_timeout_ms=10_000,
    )


def join(client: KafkaRawClient, member_id: str = "") -> JoinGroupResponse:
    body = client.request(ApiKey.JOIN_GROUP, JOIN_V, join_request(member_id))
    return JoinGroupResponse.decode(body, JOIN_V)


def first_join(client: KafkaRawClient) -> str:
    """The MEMBER_ID_REQUIRED round: the member id to join with. NOT_COORDINATOR (the
    coordinator becomes active a moment after the node starts) is retried, as clients do."""
    answer = wait_for(
        lambda: (r := join(client)).error_code != ErrorCode.NOT_COORDINATOR and r,
        10.0,
        "the group coordinator to be active",
    )
    assert answer.error_code == ErrorCode.MEMBER_ID_REQUIRED and answer.member_id, answer
    return answer.member_id


def heartbeat(client: KafkaRawClient, member_id: str, generation: int) -> int:
    body = client.request(
        ApiKey.HEARTBEAT, HEARTBEAT_V, HeartbeatRequest("g", generation, member_id)
    )
    return HeartbeatResponse.decode(body, HEARTBEAT_V).error_code


def assignment(*partitions: int) -> bytes:
    return ConsumerProtocolAssignment((TopicPartitions("t", partitions),)).encode(1)


def test_two_members_join_the_leader_assigns_and_one_leaves(cluster: Cluster) -> None:
    address = cluster.kafka_bootstrap.split(",")[0]
    with KafkaRawClient(address) as a_conn, KafkaRawClient(address) as b_conn:
        a = first_join(a_conn)
        alone = join(a_conn, a)
        assert (alone.error_code, alone.leader, alone.member_id) == (0, a, a)
        assert [m.member_id for m in alone.members] == [a] and alone.protocol_name == "range"
        assert alone.members[0].metadata == SUBSCRIPTION  # the leader sees what was offered
        generation = alone.generation_id

        # b joins: the group prepares a rebalance; b's JoinGroup waits in the barrier.
        b = first_join(b_conn)
        waiting = b_conn.send(ApiKey.JOIN_GROUP, JOIN_V, join_request(b).encode(JOIN_V))
        # a learns of it from its heartbeat, once b's join is applied.
        wait_for(
            lambda: heartbeat(a_conn, a, generation) == ErrorCode.REBALANCE_IN_PROGRESS,
            10.0,
            "a's heartbeat to answer REBALANCE_IN_PROGRESS",
        )
        rejoined = join(a_conn, a)  # the last member it waited for: the rebalance completes
        got = b_conn.recv()
        assert got is not None and got[0] == waiting
        b_view = JoinGroupResponse.decode(got[1], JOIN_V)
        assert rejoined.generation_id == b_view.generation_id == generation + 1
        assert rejoined.leader == b_view.leader == a
        assert sorted(m.member_id for m in rejoined.members) == sorted([a, b])
        assert b_view.members == ()  # only the leader is shown the members
        generation = rejoined.generation_id

        # b's SyncGroup waits for the leader's; the leader's brings every assignment.
        b_sync = b_conn.send(
            ApiKey.SYNC_GROUP, SYNC_V, SyncGroupRequest("g", generation, b).encode(SYNC_V)
        )
        leader_sync = SyncGroupRequest(
            "g",
            generation,
            a,
            (
                SyncGroupRequestAssignment(a, assignment(0, 1)),
                SyncGroupRequestAssignment(b, assignment(2, 3)),
            ),
        )
        a_answer = SyncGroupResponse.decode(
            a_conn.request(ApiKey.SYNC_GROUP, SYNC_V, leader_sync), SYNC_V
        )
        assert (a_answer.error_code, a_answer.assignment) == (0, assignment(0, 1))
        got = b_conn.recv()
        assert got is not None and got[0] == b_sync
        assert SyncGroupResponse.decode(got[1], SYNC_V).assignment == assignment(2, 3)

        assert heartbeat(b_conn, b, generation) == 0
        assert heartbeat(b_conn, b, generation - 1) == ErrorCode.ILLEGAL_GENERATION
        assert heartbeat(b_conn, "stranger", generation) == ErrorCode.UNKNOWN_MEMBER_ID

        leave = LeaveGroupRequest("g", members=(MemberIdentity(b), MemberIdentity("stranger")))
        answer = LeaveGroupResponse.decode(
            b_conn.request(ApiKey.LEAVE_GROUP, LEAVE_V, leave), LEAVE_V
        )
        assert [(m.member_id, m.error_code) for m in answer.members] == [
            (b, 0),
            ("stranger", ErrorCode.UNKNOWN_MEMBER_ID),
        ]
        assert heartbeat(a_conn, a, generation) == ErrorCode.REBALANCE_IN_PROGRESS
        again = join(a_conn, a)
        assert (again.generation_id, [m.member_id for m in again.members]) == (
            generation + 1,
            [a],
        )


def test_a_raftlog_group_refuses_a_kafka_member(cluster: Cluster) -> None:
    from raftlog.client import Consumer

    with Consumer(bootstrap_servers=cluster.bootstrap, group_id="g") as native:
        native.subscribe(["t"])
        native.poll(timeout_ms=2000)  # joins
        address = cluster.kafka_bootstrap.split(",")[0]
        with KafkaRawClient(address) as conn:
            member_id = first_join(conn)
            assert join(conn, member_id).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_a_session_timeout_out_of_bounds_is_refused_as_kafka_does(cluster: Cluster) -> None:
    address = cluster.kafka_bootstrap.split(",")[0]
    with KafkaRawClient(address) as conn:
        member_id = first_join(conn)
        request = JoinGroupRequest(
            "g",
            10,  # ms: below the coordinator's minimum (100)
            member_id,
            "consumer",
            (JoinGroupRequestProtocol("range", SUBSCRIPTION),),
            rebalance_timeout_ms=10_000,
        )
        body = conn.request(ApiKey.JOIN_GROUP, JOIN_V, request)
        assert (
            JoinGroupResponse.decode(body, JOIN_V).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        )
