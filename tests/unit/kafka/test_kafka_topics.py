"""CreateTopics, DeleteTopics and CreatePartitions: the messages match kafka-python's codecs
byte for byte at every version raftlog speaks; the handlers turn each topic into one call of
the broker's operation and each refusal into that topic's Kafka error, with its message where
it fits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.admin.topics import CreatePartitionsRequest as KpPartitionsRequest
from kafka.protocol.admin.topics import CreatePartitionsResponse as KpPartitionsResponse
from kafka.protocol.admin.topics import CreateTopicsRequest as KpCreateRequest
from kafka.protocol.admin.topics import CreateTopicsResponse as KpCreateResponse
from kafka.protocol.admin.topics import DeleteTopicsRequest as KpDeleteRequest
from kafka.protocol.admin.topics import DeleteTopicsResponse as KpDeleteResponse
from kafka.protocol.old import admin as old
from kp_oracle import (
    INT16,
    INT32,
    NULLABLE_TEXT,
    TEXT,
    assert_matches_kafka_python,
    small_tuples,
)

from raftlog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    RaftlogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raftlog.invariants import InvariantError
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.handlers.topics import (
    creation_args,
    duplicated,
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
)
from raftlog.kafka.messages import decode_request
from raftlog.kafka.messages.topics import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreatableTopicResult,
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from raftlog.kafka.wire import KafkaDecodeError

CREATE_VERSIONS = (0, 1, 2, 3, 4)
DELETE_VERSIONS = (0, 1, 2, 3)
PARTITIONS_VERSIONS = (0, 1)

_assignment = st.builds(CreatableReplicaAssignment, INT32, small_tuples(INT32))
_config = st.builds(CreatableTopicConfig, TEXT, NULLABLE_TEXT)
_creatable = st.builds(
    CreatableTopic, TEXT, INT32, INT16, small_tuples(_assignment), small_tuples(_config)
)


def _create_requests(version: int) -> st.SearchStrategy[CreateTopicsRequest]:
    validate = st.booleans() if version >= 1 else st.just(False)
    return st.builds(CreateTopicsRequest, small_tuples(_creatable), INT32, validate)


def _create_responses(version: int) -> st.SearchStrategy[CreateTopicsResponse]:
    message = NULLABLE_TEXT if version >= 1 else st.none()
    throttle = INT32 if version >= 2 else st.just(0)
    result = st.builds(CreatableTopicResult, TEXT, INT16, message)
    return st.builds(CreateTopicsResponse, small_tuples(result), throttle)


_partitions_topic = st.builds(
    CreatePartitionsTopic,
    TEXT,
    INT32,
    st.none() | small_tuples(st.builds(CreatePartitionsAssignment, small_tuples(INT32))),
)
_partitions_requests = st.builds(
    CreatePartitionsRequest, small_tuples(_partitions_topic), INT32, st.booleans()
)
_partitions_responses = st.builds(
    CreatePartitionsResponse,
    small_tuples(st.builds(CreatePartitionsTopicResult, TEXT, INT16, NULLABLE_TEXT)),
    INT32,
)


def _delete_responses(version: int) -> st.SearchStrategy[DeleteTopicsResponse]:
    throttle = INT32 if version >= 1 else st.just(0)
    result = st.builds(DeletableTopicResult, TEXT, INT16)
    return st.builds(DeleteTopicsResponse, small_tuples(result), throttle)


@pytest.mark.parametrize("version", CREATE_VERSIONS)
@given(data=st.data())
def test_create_request_matches_kafka_python(version: int, data: st.DataObject) -> None:
    request = data.draw(_create_requests(version))
    # kafka-python's hand-written classes stop at v3.
    assert_matches_kafka_python(request, version, KpCreateRequest, old, "CreateTopicsRequest")


@pytest.mark.parametrize("version", CREATE_VERSIONS)
@given(data=st.data())
def test_create_response_matches_kafka_python(version: int, data: st.DataObject) -> None:
    response = data.draw(_create_responses(version))
    assert_matches_kafka_python(response, version, KpCreateResponse, old, "CreateTopicsResponse")


@pytest.mark.parametrize("version", DELETE_VERSIONS)
@given(request=st.builds(DeleteTopicsRequest, small_tuples(TEXT), INT32))
def test_delete_request_matches_kafka_python(version: int, request: DeleteTopicsRequest) -> None:
    assert_matches_kafka_python(request, version, KpDeleteRequest, old, "DeleteTopicsRequest")


@pytest.mark.parametrize("version", DELETE_VERSIONS)
@given(data=st.data())
def test_delete_response_matches_kafka_python(version: int, data: st.DataObject) -> None:
    response = data.draw(_delete_responses(version))
    assert_matches_kafka_python(response, version, KpDeleteResponse, old, "DeleteTopicsResponse")


@pytest.mark.parametrize("version", PARTITIONS_VERSIONS)
@given(request=_partitions_requests)
def test_partitions_request_matches_kafka_python(
    version: int, request: CreatePartitionsRequest
) -> None:
    # kafka-python's hand-written classes name the fields otherwise (new_partitions.count,
    # assignment): the fixed bytes below compare with them.
    assert_matches_kafka_python(request, version, KpPartitionsRequest)


@pytest.mark.parametrize("version", PARTITIONS_VERSIONS)
@given(response=_partitions_responses)
def test_partitions_response_matches_kafka_python(
    version: int, response: CreatePartitionsResponse
) -> None:
    assert_matches_kafka_python(response, version, KpPartitionsResponse)


# A request growing "t" to 3 (null assignments: the broker places) and "u" to 4 with two new
# partitions on brokers [1, 2] and [3]; timeout 5 ms, validate only. kafka-python's
# hand-written CreatePartitionsRequest_v0 encodes these same bytes.
_PARTITIONS_REQUEST = CreatePartitionsRequest(
    (
        CreatePartitionsTopic("t", 3),
        CreatePartitionsTopic(
            "u", 4, (CreatePartitionsAssignment((1, 2)), CreatePartitionsAssignment((3,)))
        ),
    ),
    5,
    validate_only=True,
)
_PARTITIONS_REQUEST_BYTES = bytes.fromhex(
    "00000002"  # topics
    "0001 74 00000003 ffffffff"  # "t", count 3, assignments null
    "0001 75 00000004 00000002"  # "u", count 4, 2 assignments
    "00000002 00000001 00000002"  # [1, 2]
    "00000001 00000003"  # [3]
    "00000005 01"  # timeout_ms, validate_only
)


@pytest.mark.parametrize("version", PARTITIONS_VERSIONS)
def test_partitions_request_bytes(version: int) -> None:
    assert _PARTITIONS_REQUEST.encode(version) == _PARTITIONS_REQUEST_BYTES
    old_class = getattr(old, f"CreatePartitionsRequest_v{version}")
    hand_written = old_class(
        topics=[("t", (3, None)), ("u", (4, [[1, 2], [3]]))], timeout_ms=5, validate_only=True
    )
    assert bytes(hand_written.encode()) == _PARTITIONS_REQUEST_BYTES
    assert CreatePartitionsRequest.decode(_PARTITIONS_REQUEST_BYTES, version) == _PARTITIONS_REQUEST
    decoded = decode_request(
        ApiKey.CREATE_PARTITIONS, version, memoryview(b"head" + _PARTITIONS_REQUEST_BYTES), 4
    )
    assert decoded == _PARTITIONS_REQUEST


@pytest.mark.parametrize("version", PARTITIONS_VERSIONS)
def test_partitions_response_bytes(version: int) -> None:
    response = CreatePartitionsResponse(
        (
            CreatePartitionsTopicResult("t", ErrorCode.INVALID_PARTITIONS, "no"),
            CreatePartitionsTopicResult("u"),
        ),
        throttle_time_ms=1,
    )
    data = bytes.fromhex("00000001 00000002 0001 74 0025 0002 6e6f 0001 75 0000 ffff")
    assert response.encode(version) == data
    old_class = getattr(old, f"CreatePartitionsResponse_v{version}")
    hand_written = old_class(throttle_time_ms=1, results=[("t", 37, "no"), ("u", 0, None)])
    assert bytes(hand_written.encode()) == data
    assert CreatePartitionsResponse.decode(data, version) == response


@pytest.mark.parametrize("version", PARTITIONS_VERSIONS)
def test_truncated_partitions_bodies_raise_the_decode_error(version: int) -> None:
    for cut in range(len(_PARTITIONS_REQUEST_BYTES)):
        with pytest.raises(KafkaDecodeError):
            CreatePartitionsRequest.decode(_PARTITIONS_REQUEST_BYTES[:cut], version)
    response = CreatePartitionsResponse((CreatePartitionsTopicResult("t", 37, "no"),)).encode(0)
    for cut in range(len(response)):
        with pytest.raises(KafkaDecodeError):
            CreatePartitionsResponse.decode(response[:cut], version)


@pytest.mark.parametrize("version", PARTITIONS_VERSIONS)
def test_garbage_partitions_bodies_raise_the_decode_error(version: int) -> None:
    def decode(body: bytes) -> object:
        return decode_request(ApiKey.CREATE_PARTITIONS, version, memoryview(body), 0)

    with pytest.raises(KafkaDecodeError, match="the body"):
        decode(_PARTITIONS_REQUEST_BYTES + b"\x00")
    # A null broker_ids array (only assignments may be null).
    null_ids = bytes.fromhex("00000001 0001 74 00000002 00000001 ffffffff 00000005 00")
    with pytest.raises(KafkaDecodeError, match=r"assignments\[0\]\.broker_ids"):
        decode(null_ids)
    # A negative topics count other than -1, and a null topics array.
    for topics in ("fffffffe", "ffffffff"):
        with pytest.raises(KafkaDecodeError, match="topics"):
            decode(bytes.fromhex(topics + "00000005 00"))
    # An array count far beyond the bytes that follow.
    with pytest.raises(KafkaDecodeError):
        decode(bytes.fromhex("7fffffff 0001 74"))


def test_partitions_versions_outside_0_to_1() -> None:
    """v2 is flexible (compact arrays, tagged fields): not spoken."""
    with pytest.raises(KafkaDecodeError, match="not one we speak"):
        CreatePartitionsRequest.decode(_PARTITIONS_REQUEST_BYTES, 2)
    with pytest.raises(KafkaDecodeError, match="version not spoken"):
        decode_request(ApiKey.CREATE_PARTITIONS, 2, memoryview(_PARTITIONS_REQUEST_BYTES), 0)
    with pytest.raises(InvariantError):
        _PARTITIONS_REQUEST.encode(2)
    with pytest.raises(InvariantError):
        CreatePartitionsResponse(()).encode(2)


def test_create_request_v0_has_no_validate_only_and_decodes_it_false() -> None:
    request = CreateTopicsRequest((CreatableTopic("t", 3, 1),), 1000, validate_only=True)
    v0 = request.encode(0)
    assert v0 == bytes.fromhex("00000001 0001 74 00000003 0001 00000000 00000000 000003e8")
    assert request.encode(1) == v0 + b"\x01"
    assert CreateTopicsRequest.decode(v0, 0).validate_only is False


# -- the handlers' translation ------------------------------------------------------------------


def test_minus_one_asks_for_the_broker_defaults() -> None:
    spec = CreatableTopic("t", -1, -1, (), (CreatableTopicConfig("retention.ms", "1000"),))
    assert creation_args(spec, 6, 3) == (6, 3, {"retention.ms": "1000"})
    # Anything else goes to the broker as given: its checks refuse 0 or -2.
    assert creation_args(CreatableTopic("t", 0, -2), 6, 3) == (0, -2, {})


def test_explicit_assignments_are_refused_with_a_reason() -> None:
    spec = CreatableTopic("t", -1, -1, (CreatableReplicaAssignment(0, (1, 2)),))
    with pytest.raises(InvalidRequestError, match="explicit replica assignments"):
        creation_args(spec, 1, 1)


def test_a_null_or_repeated_config_is_invalid_config() -> None:
    null = CreatableTopic("t", 1, 1, (), (CreatableTopicConfig("retention.ms", None),))
    with pytest.raises(InvalidConfigError, match="null value"):
        creation_args(null, 1, 1)
    twice = CreatableTopic(
        "t", 1, 1, (), (CreatableTopicConfig("a.b", "1"), CreatableTopicConfig("a.b", "2"))
    )
    with pytest.raises(InvalidConfigError, match="given twice"):
        creation_args(twice, 1, 1)


def test_duplicated_names() -> None:
    assert duplicated(["a", "b", "a", "c", "c", "c"]) == {"a", "c"}
    assert duplicated([]) == set()


class _BrokerConfig:
    default_partitions = 2
    default_replication_factor = 1


class _Ctx:
    """What the topic handlers use of a HandlerContext: config, create_topic, delete_topic.
    It records each call and refuses what `refuse` names."""

    config = _BrokerConfig()

    def __init__(self, refuse: dict[str, RaftlogError]):
        self.refuse = refuse
        self.calls: list[tuple[Any, ...]] = []

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        config: dict[str, Any],
        validate_only: bool = False,
    ) -> None:
        self.calls.append((name, partitions, replication_factor, config, validate_only))
        if name in self.refuse:
            raise self.refuse[name]

    async def delete_topic(self, name: str) -> None:
        self.calls.append((name,))
        if name in self.refuse:
            raise self.refuse[name]

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None = None,
        validate_only: bool = False,
    ) -> None:
        self.calls.append((name, count, assignments, validate_only))
        if name in self.refuse:
            raise self.refuse[name]


def test_create_topics_answers_each_topic_in_order() -> None:
    ctx = _Ctx({"old": TopicAlreadyExistsError("topic 'old' already exists")})
    request = CreateTopicsRequest(
        (
            CreatableTopic("new", -1, -1, (), (CreatableTopicConfig("retention.ms", "5"),)),
            CreatableTopic("old", 1, 1),
            CreatableTopic("twice", 1, 1),
            CreatableTopic("placed", -1, -1, (CreatableReplicaAssignment(0, (1,)),)),
            CreatableTopic("twice", 2, 1),
        ),
        validate_only=True,
    )
    answer = asyncio.run(handle_create_topics(ctx, request, 4, None))  # type: ignore[arg-type]
    codes = [(t.name, t.error_code) for t in answer.topics]
    assert codes == [
        ("new", 0),
        ("old", ErrorCode.TOPIC_ALREADY_EXISTS),
        ("twice", ErrorCode.INVALID_REQUEST),
        ("placed", ErrorCode.INVALID_REQUEST),
        ("twice", ErrorCode.INVALID_REQUEST),
    ]
    assert answer.topics[0].error_message is None
    assert answer.topics[1].error_message == "topic 'old' already exists"
    assert "more than once" in (answer.topics[2].error_message or "")
    # Only the topics that passed the request's own checks reached the broker.
    assert ctx.calls == [
        ("new", 2, 1, {"retention.ms": "5"}, True),
        ("old", 1, 1, {}, True),
    ]


def test_delete_topics_answers_each_name() -> None:
    ctx = _Ctx({"nope": UnknownTopicOrPartitionError("unknown topic 'nope'")})
    request = DeleteTopicsRequest(("a", "nope", "b", "b"))
    answer = asyncio.run(handle_delete_topics(ctx, request, 3, None))  # type: ignore[arg-type]
    assert answer == DeleteTopicsResponse(
        (
            DeletableTopicResult("a"),
            DeletableTopicResult("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            DeletableTopicResult("b", ErrorCode.INVALID_REQUEST),
            DeletableTopicResult("b", ErrorCode.INVALID_REQUEST),
        )
    )
    assert ctx.calls == [("a",), ("nope",)]


def test_create_partitions_answers_each_topic_in_order() -> None:
    ctx = _Ctx(
        {
            "nope": UnknownTopicOrPartitionError("unknown topic 'nope'"),
            "shrink": InvalidPartitionsError("topic 'shrink' has 4 partitions: ..."),
            "placed": InvalidReplicaAssignmentError("topic 'placed' partition 2: ..."),
        }
    )
    request = CreatePartitionsRequest(
        (
            CreatePartitionsTopic("grow", 5),
            CreatePartitionsTopic("twice", 3),
            CreatePartitionsTopic("nope", 2),
            CreatePartitionsTopic("shrink", 1),
            CreatePartitionsTopic(
                "placed", 4, (CreatePartitionsAssignment((1, 2)), CreatePartitionsAssignment(()))
            ),
            CreatePartitionsTopic("twice", 4),
            CreatePartitionsTopic("empty", 2, ()),
        ),
    )
    answer = asyncio.run(handle_create_partitions(ctx, request, 1, None))  # type: ignore[arg-type]
    assert [(t.name, t.error_code) for t in answer.results] == [
        ("grow", 0),
        ("twice", ErrorCode.INVALID_REQUEST),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("shrink", ErrorCode.INVALID_PARTITIONS),
        ("placed", ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ("twice", ErrorCode.INVALID_REQUEST),
        ("empty", 0),
    ]
    messages = [t.error_message for t in answer.results]
    assert messages[0] is None and messages[-1] is None
    twice = "topic 'twice' is named more than once in one CreatePartitions request"
    assert messages[1] == messages[5] == twice
    assert messages[2] == "unknown topic 'nope'"
    assert messages[3] == "topic 'shrink' has 4 partitions: ..."
    assert messages[4] == "topic 'placed' partition 2: ..."
    assert answer.throttle_time_ms == 0
    # Null assignments reach the broker as None, an array (even empty) as lists; the topic
    # named twice never does.
    assert ctx.calls == [
        ("grow", 5, None, False),
        ("nope", 2, None, False),
        ("shrink", 1, None, False),
        ("placed", 4, [[1, 2], []], False),
        ("empty", 2, [], False),
    ]


def test_create_partitions_passes_validate_only_on() -> None:
    ctx = _Ctx({})
    request = CreatePartitionsRequest(
        (CreatePartitionsTopic("t", 3, (CreatePartitionsAssignment((2, 1, 3)),)),),
        validate_only=True,
    )
    answer = asyncio.run(handle_create_partitions(ctx, request, 0, None))  # type: ignore[arg-type]
    assert answer == CreatePartitionsResponse((CreatePartitionsTopicResult("t"),))
    assert ctx.calls == [("t", 3, [[2, 1, 3]], True)]
