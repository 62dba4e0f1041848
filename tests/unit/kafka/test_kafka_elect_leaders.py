"""ElectLeaders: the messages match kafka-python's codecs (generated and hand-written) byte for
byte at v0 and v1 and refuse broken bodies; the handler turns a request into one call of the
broker's elect_leaders and each raftlog outcome into its Kafka code with raftlog's message,
refuses unclean elections and unknown types, and puts a whole-request failure where each
version has room for it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.admin.topics import ElectLeadersRequest as KpRequest
from kafka.protocol.admin.topics import ElectLeadersResponse as KpResponse
from kafka.protocol.old import admin as old
from kp_oracle import (
    INT8,
    INT16,
    INT32,
    NULLABLE_TEXT,
    TEXT,
    assert_matches_kafka_python,
    small_tuples,
)

from raftlog.errors import (
    ElectionNotNeededError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    RaftlogError,
    RaftlogTimeoutError,
    UnknownTopicOrPartitionError,
)
from raftlog.invariants import InvariantError
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.handlers.elect_leaders import UNCLEAN_REFUSED, handle_elect_leaders
from raftlog.kafka.messages import decode_request
from raftlog.kafka.messages.elect_leaders import (
    ElectionType,
    ElectLeadersRequest,
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
    TopicPartitions,
)
from raftlog.kafka.wire import KafkaDecodeError

VERSIONS = (0, 1)


def _requests(version: int) -> st.SearchStrategy[ElectLeadersRequest]:
    topic = st.builds(TopicPartitions, TEXT, small_tuples(INT32))
    election_type = INT8 if version >= 1 else st.just(0)
    return st.builds(ElectLeadersRequest, st.none() | small_tuples(topic), INT32, election_type)


def _responses(version: int) -> st.SearchStrategy[ElectLeadersResponse]:
    partition = st.builds(PartitionResult, INT32, INT16, NULLABLE_TEXT)
    result = st.builds(ReplicaElectionResult, TEXT, small_tuples(partition))
    error_code = INT16 if version >= 1 else st.just(0)
    return st.builds(ElectLeadersResponse, small_tuples(result), error_code, INT32)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("messages", "kp_class", "old_name"),
    [
        (_requests, KpRequest, "ElectLeadersRequest"),
        (_responses, KpResponse, "ElectLeadersResponse"),
    ],
    ids=["request", "response"],
)
@given(data=st.data())
def test_messages_match_kafka_python(
    version: int, messages: Any, kp_class: Any, old_name: str, data: st.DataObject
) -> None:
    message = data.draw(messages(version))
    assert_matches_kafka_python(message, version, kp_class, old, old_name)


# Elect "t" partitions 0 and 2 and "u" partition 1; timeout 5 ms.
_REQUEST = ElectLeadersRequest(
    (TopicPartitions("t", (0, 2)), TopicPartitions("u", (1,))), 5, ElectionType.PREFERRED
)
_TOPICS_BYTES = (
    "00000002"  # topic_partitions
    "0001 74 00000002 00000000 00000002"  # "t", [0, 2]
    "0001 75 00000001 00000001"  # "u", [1]
    "00000005"  # timeout_ms
)
_REQUEST_BYTES = {0: bytes.fromhex(_TOPICS_BYTES), 1: bytes.fromhex("00" + _TOPICS_BYTES)}


@pytest.mark.parametrize("version", VERSIONS)
def test_request_bytes(version: int) -> None:
    data = _REQUEST_BYTES[version]
    assert _REQUEST.encode(version) == data
    hand_written = getattr(old, f"ElectLeadersRequest_v{version}")
    fields: dict[str, Any] = {"election_type": 0} if version >= 1 else {}
    kp = hand_written(topic_partitions=[("t", [0, 2]), ("u", [1])], timeout_ms=5, **fields)
    assert bytes(kp.encode()) == data
    assert ElectLeadersRequest.decode(data, version) == _REQUEST
    decoded = decode_request(ApiKey.ELECT_LEADERS, version, memoryview(b"head" + data), 4)
    assert decoded == _REQUEST


def test_request_v1_carries_the_election_type_and_null_topic_partitions() -> None:
    every = ElectLeadersRequest(None, 30_000, ElectionType.UNCLEAN)
    data = bytes.fromhex("01 ffffffff 00007530")
    assert every.encode(1) == data
    assert ElectLeadersRequest.decode(data, 1) == every
    # v0 has no election_type: it is left out (preferred when decoded).
    assert every.encode(0) == data[1:]
    assert ElectLeadersRequest.decode(data[1:], 0) == ElectLeadersRequest(None, 30_000)
    # An election type Kafka does not define still decodes: the handler refuses it.
    assert ElectLeadersRequest.decode(bytes.fromhex("80 00000000 00000001"), 1).election_type == (
        -128
    )


_RESPONSE = ElectLeadersResponse(
    (
        ReplicaElectionResult(
            "t", (PartitionResult(0), PartitionResult(2, ErrorCode.ELECTION_NOT_NEEDED, "no"))
        ),
    ),
    error_code=0,
    throttle_time_ms=1,
)
_RESULTS_BYTES = (
    "00000001 0001 74 00000002"  # one topic, "t", two partitions
    "00000000 0000 ffff"  # 0: elected, message null
    "00000002 0054 0002 6e6f"  # 2: ELECTION_NOT_NEEDED (84), "no"
)
_RESPONSE_BYTES = {
    0: bytes.fromhex("00000001" + _RESULTS_BYTES),
    1: bytes.fromhex("00000001 0000" + _RESULTS_BYTES),
}


@pytest.mark.parametrize("version", VERSIONS)
def test_response_bytes(version: int) -> None:
    data = _RESPONSE_BYTES[version]
    assert _RESPONSE.encode(version) == data
    hand_written = getattr(old, f"ElectLeadersResponse_v{version}")
    fields: dict[str, Any] = {"error_code": 0} if version >= 1 else {}
    kp = hand_written(
        throttle_time_ms=1,
        replica_election_results=[("t", [(0, 0, None), (2, 84, "no")])],
        **fields,
    )
    assert bytes(kp.encode()) == data
    assert ElectLeadersResponse.decode(data, version) == _RESPONSE


def test_the_top_level_error_code_is_v1s() -> None:
    refused = ElectLeadersResponse((), error_code=ErrorCode.REQUEST_TIMED_OUT)
    assert refused.encode(1) == bytes.fromhex("00000000 0007 00000000")
    assert refused.encode(0) == bytes.fromhex("00000000 00000000")
    assert ElectLeadersResponse.decode(refused.encode(0), 0).error_code == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_truncated_bodies_raise_the_decode_error(version: int) -> None:
    data = _REQUEST_BYTES[version]
    for cut in range(len(data)):
        with pytest.raises(KafkaDecodeError):
            ElectLeadersRequest.decode(data[:cut], version)
    data = _RESPONSE_BYTES[version]
    for cut in range(len(data)):
        with pytest.raises(KafkaDecodeError):
            ElectLeadersResponse.decode(data[:cut], version)


@pytest.mark.parametrize("version", VERSIONS)
def test_garbage_bodies_raise_the_decode_error(version: int) -> None:
    prefix = "00" if version >= 1 else ""

    def decode(body_hex: str) -> object:
        body = bytes.fromhex(prefix + body_hex)
        return decode_request(ApiKey.ELECT_LEADERS, version, memoryview(body), 0)

    with pytest.raises(KafkaDecodeError, match="the body"):
        decode(_TOPICS_BYTES + "00")
    # A null partitions array (only topic_partitions may be null).
    with pytest.raises(KafkaDecodeError, match=r"topic_partitions\[0\]\.partitions"):
        decode("00000001 0001 74 ffffffff 00000005")
    # A negative count other than -1.
    with pytest.raises(KafkaDecodeError, match="topic_partitions"):
        decode("fffffffe 00000005")
    # An array count far beyond the bytes that follow.
    with pytest.raises(KafkaDecodeError):
        decode("7fffffff 0001 74")
    with pytest.raises(KafkaDecodeError, match="partition_result"):
        ElectLeadersResponse.decode(
            bytes.fromhex("00000000" + ("0000" if version else "") + "00000001 0001 74 ffffffff"),
            version,
        )


def test_versions_outside_0_to_1() -> None:
    """v2 is flexible (compact arrays, tagged fields): not spoken."""
    with pytest.raises(KafkaDecodeError, match="not one we speak"):
        ElectLeadersRequest.decode(_REQUEST_BYTES[1], 2)
    with pytest.raises(KafkaDecodeError, match="version not spoken"):
        decode_request(ApiKey.ELECT_LEADERS, 2, memoryview(_REQUEST_BYTES[1]), 0)
    with pytest.raises(InvariantError):
        _REQUEST.encode(2)
    with pytest.raises(InvariantError):
        ElectLeadersResponse(()).encode(2)


class _Ctx:
    """What the handler uses of a HandlerContext: elect_leaders. It records each call and
    answers with `answer` (raftlog codes), or raises `failure`."""

    def __init__(
        self,
        answer: list[tuple[str, int, int, str | None]] | None = None,
        failure: RaftlogError | None = None,
    ):
        self.answer = answer or []
        self.failure = failure
        self.calls: list[list[tuple[str, int]] | None] = []

    async def elect_leaders(
        self, partitions: list[tuple[str, int]] | None
    ) -> list[tuple[str, int, int, str | None]]:
        self.calls.append(partitions)
        if self.failure is not None:
            raise self.failure
        return self.answer


def _handle(ctx: _Ctx, request: ElectLeadersRequest, version: int = 1) -> ElectLeadersResponse:
    return asyncio.run(handle_elect_leaders(ctx, request, version, None))  # type: ignore[arg-type]


def _flat(response: ElectLeadersResponse) -> list[tuple[str, int, int, str | None]]:
    return [
        (r.topic, p.partition_id, p.error_code, p.error_message)
        for r in response.replica_election_results
        for p in r.partition_result
    ]


def test_each_raftlog_outcome_is_its_kafka_code_with_raftlogs_message() -> None:
    ctx = _Ctx(
        [
            ("t", 0, 0, None),
            ("t", 2, ElectionNotNeededError.code, "t-2: its preferred leader 1 leads already"),
            ("u", 1, PreferredLeaderNotAvailableError.code, "u-1: ... (isr [3])"),
            ("t", 9, UnknownTopicOrPartitionError.code, "unknown partition t-9"),
            ("u", 2, 999, "a code this raftlog does not know"),
        ]
    )
    request = ElectLeadersRequest(
        (TopicPartitions("t", (0, 2, 0)), TopicPartitions("u", (1, 2)), TopicPartitions("t", (9,)))
    )
    answer = _handle(ctx, request)
    # Each partition asked for once, in the order first named.
    assert ctx.calls == [[("t", 0), ("t", 2), ("u", 1), ("u", 2), ("t", 9)]]
    assert answer.error_code == 0 and answer.throttle_time_ms == 0
    # Grouped by topic, in the order the topics first come.
    assert [r.topic for r in answer.replica_election_results] == ["t", "u"]
    assert _flat(answer) == [
        ("t", 0, 0, None),
        ("t", 2, ErrorCode.ELECTION_NOT_NEEDED, "t-2: its preferred leader 1 leads already"),
        ("t", 9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown partition t-9"),
        ("u", 1, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, "u-1: ... (isr [3])"),
        ("u", 2, ErrorCode.UNKNOWN_SERVER_ERROR, "a code this raftlog does not know"),
    ]
    # v0 answers the same partitions (it has no top-level code to differ by).
    assert _handle(_Ctx(ctx.answer), request, 0) == answer


def test_null_topic_partitions_is_every_partition_and_empty_is_none() -> None:
    ctx = _Ctx([("t", 1, 0, None)])
    answer = _handle(ctx, ElectLeadersRequest(None))
    assert ctx.calls == [None]
    assert answer == ElectLeadersResponse((ReplicaElectionResult("t", (PartitionResult(1),)),))
    ctx = _Ctx()
    assert _handle(ctx, ElectLeadersRequest(())) == ElectLeadersResponse(())
    assert _handle(ctx, ElectLeadersRequest((TopicPartitions("t", ()),))) == ElectLeadersResponse(
        ()
    )
    assert ctx.calls == []


def test_unclean_elections_are_refused_per_partition() -> None:
    ctx = _Ctx()
    request = ElectLeadersRequest(
        (TopicPartitions("t", (0, 1)), TopicPartitions("u", (0,))),
        election_type=ElectionType.UNCLEAN,
    )
    answer = _handle(ctx, request)
    assert ctx.calls == []
    assert answer.error_code == 0
    assert _flat(answer) == [
        ("t", 0, ErrorCode.INVALID_REQUEST, UNCLEAN_REFUSED),
        ("t", 1, ErrorCode.INVALID_REQUEST, UNCLEAN_REFUSED),
        ("u", 0, ErrorCode.INVALID_REQUEST, UNCLEAN_REFUSED),
    ]
    assert "unclean.leader.election.enable" in UNCLEAN_REFUSED
    # Unclean for every partition: nothing to answer per partition, so the request is refused.
    answer = _handle(ctx, ElectLeadersRequest(None, election_type=ElectionType.UNCLEAN))
    assert ctx.calls == []
    assert answer == ElectLeadersResponse((), error_code=ErrorCode.INVALID_REQUEST)


@pytest.mark.parametrize("election_type", [2, 127, -1])
def test_an_unknown_election_type_refuses_the_request(election_type: int) -> None:
    ctx = _Ctx()
    request = ElectLeadersRequest((TopicPartitions("t", (0,)),), election_type=election_type)
    answer = _handle(ctx, request)
    assert ctx.calls == []
    assert answer.error_code == ErrorCode.INVALID_REQUEST
    message = f"unknown election type {election_type} (0: preferred, 1: unclean)"
    assert _flat(answer) == [("t", 0, ErrorCode.INVALID_REQUEST, message)]


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (RaftlogTimeoutError("metadata command elect_leaders not committed"), 7),
        (NotControllerError("this node's Raft thread failed"), 41),
    ],
)
def test_a_whole_request_failure_is_v1s_top_level_code_and_v0s_partitions(
    failure: RaftlogError, code: int
) -> None:
    request = ElectLeadersRequest((TopicPartitions("t", (0, 1)), TopicPartitions("u", (3,))))
    answer = _handle(_Ctx(failure=failure), request, 1)
    assert answer.error_code == code
    partitions = [("t", 0, code, str(failure)), ("t", 1, code, str(failure))]
    partitions.append(("u", 3, code, str(failure)))
    assert _flat(answer) == partitions
    # At v0 the partitions carry it alone: the top-level code is not on the wire.
    v0 = ElectLeadersResponse.decode(_handle(_Ctx(failure=failure), request, 0).encode(0), 0)
    assert v0.error_code == 0 and _flat(v0) == partitions
    # Every partition, refused: nothing named, so only v1's top-level code says it.
    answer = _handle(_Ctx(failure=failure), ElectLeadersRequest(None), 1)
    assert answer == ElectLeadersResponse((), error_code=code)
