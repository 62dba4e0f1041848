"""CreateTopics and DeleteTopics: the messages match kafka-python's codecs byte for byte at
every version raftlog speaks; the handlers turn each topic into one call of the broker's
operation and each refusal into that topic's Kafka error, with its message where it fits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
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
    InvalidRequestError,
    RaftlogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.handlers.topics import (
    creation_args,
    duplicated,
    handle_create_topics,
    handle_delete_topics,
)
from raftlog.kafka.messages.topics import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

CREATE_VERSIONS = (0, 1, 2, 3, 4)
DELETE_VERSIONS = (0, 1, 2, 3)

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
