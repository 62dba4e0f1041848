"""AlterPartitionReassignments and ListPartitionReassignments: the messages (flexible from v0)
match kafka-python's codecs (generated and hand-written) byte for byte, skip the tagged fields
a client sends and refuse broken bodies; the handlers, over a real metadata state machine
(MetadataState behind ClusterMetadata, its proposals applied at once), start, replace and cancel
moves with one proposal per request and answer each partition with Kafka's code and raftlog's
message, refuse a replication-factor change when v1 asks them to, list the moves under way as
Kafka's controller does, and put a whole-request failure where Kafka's clients read it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.admin.topics import AlterPartitionReassignmentsRequest as KpAlterRequest
from kafka.protocol.admin.topics import AlterPartitionReassignmentsResponse as KpAlterResponse
from kafka.protocol.admin.topics import ListPartitionReassignmentsRequest as KpListRequest
from kafka.protocol.admin.topics import ListPartitionReassignmentsResponse as KpListResponse
from kafka.protocol.old import admin as old
from kp_oracle import INT16, INT32, NULLABLE_TEXT, TEXT, assert_matches_kafka_python, small_tuples

from raftlog.errors import (
    InvalidRequestError,
    NoReassignmentInProgressError,
    NotControllerError,
    RaftlogError,
    RaftlogTimeoutError,
    error_from_code,
)
from raftlog.invariants import InvariantError
from raftlog.kafka.api import ApiKey, decode_request_header
from raftlog.kafka.errors import ErrorCode, kafka_code
from raftlog.kafka.handlers.reassignments import (
    handle_alter_partition_reassignments,
    handle_list_partition_reassignments,
)
from raftlog.kafka.messages import decode_request
from raftlog.kafka.messages.reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListPartitionReassignmentsTopics,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
    ReassignablePartition,
    ReassignablePartitionResponse,
    ReassignableTopic,
    ReassignableTopicResponse,
)
from raftlog.kafka.wire import KafkaDecodeError
from raftlog.metadata.cluster import ClusterMetadata
from raftlog.metadata.partition_state import PartitionState, TopicRules
from raftlog.metadata.quorum import QuorumStatus
from raftlog.metadata.state import MetadataState

# -- the messages --------------------------------------------------------------------------------

INT32S = small_tuples(INT32)


def _alter_requests(version: int) -> st.SearchStrategy[AlterPartitionReassignmentsRequest]:
    partition = st.builds(ReassignablePartition, INT32, st.none() | INT32S)
    topic = st.builds(ReassignableTopic, TEXT, small_tuples(partition))
    allow = st.booleans() if version >= 1 else st.just(True)
    return st.builds(AlterPartitionReassignmentsRequest, small_tuples(topic), INT32, allow)


def _alter_responses(version: int) -> st.SearchStrategy[AlterPartitionReassignmentsResponse]:
    partition = st.builds(ReassignablePartitionResponse, INT32, INT16, NULLABLE_TEXT)
    topic = st.builds(ReassignableTopicResponse, TEXT, small_tuples(partition))
    allow = st.booleans() if version >= 1 else st.just(True)
    return st.builds(
        AlterPartitionReassignmentsResponse,
        small_tuples(topic),
        INT16,
        NULLABLE_TEXT,
        allow,
        INT32,
    )


def _list_requests(version: int) -> st.SearchStrategy[ListPartitionReassignmentsRequest]:
    topic = st.builds(ListPartitionReassignmentsTopics, TEXT, INT32S)
    return st.builds(ListPartitionReassignmentsRequest, st.none() | small_tuples(topic), INT32)


def _list_responses(version: int) -> st.SearchStrategy[ListPartitionReassignmentsResponse]:
    partition = st.builds(OngoingPartitionReassignment, INT32, INT32S, INT32S, INT32S)
    topic = st.builds(OngoingTopicReassignment, TEXT, small_tuples(partition))
    return st.builds(
        ListPartitionReassignmentsResponse, small_tuples(topic), INT16, NULLABLE_TEXT, INT32
    )


@pytest.mark.parametrize(
    ("messages", "kp_class", "version"),
    [
        (_alter_requests, KpAlterRequest, 0),
        (_alter_requests, KpAlterRequest, 1),
        (_alter_responses, KpAlterResponse, 0),
        (_alter_responses, KpAlterResponse, 1),
        (_list_requests, KpListRequest, 0),
        (_list_responses, KpListResponse, 0),
    ],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
@given(data=st.data())
def test_messages_match_kafka_pythons_generated_codec(
    messages: Any, kp_class: Any, version: int, data: st.DataObject
) -> None:
    message = data.draw(messages(version))
    assert_matches_kafka_python(message, version, kp_class)


# Move "t" partition 0 to [1, 2] and cancel partition 1's move; timeout 5 ms.
_ALTER = AlterPartitionReassignmentsRequest(
    (ReassignableTopic("t", (ReassignablePartition(0, (1, 2)), ReassignablePartition(1))),), 5
)
_ALTER_TOPICS_HEX = (
    "02"  # topics: one (compact: count + 1)
    "02 74"  # "t"
    "03"  # partitions: two
    "00000000 03 00000001 00000002 00"  # 0: replicas [1, 2], no tagged fields
    "00000001 00 00"  # 1: replicas null (cancel)
    "00"  # the topic's tagged fields
    "00"  # the body's tagged fields
)
_ALTER_BYTES = {
    0: bytes.fromhex("00000005" + _ALTER_TOPICS_HEX),
    1: bytes.fromhex("00000005 01" + _ALTER_TOPICS_HEX),
}


@pytest.mark.parametrize("version", [0, 1])
def test_alter_request_bytes(version: int) -> None:
    data = _ALTER_BYTES[version]
    assert _ALTER.encode(version) == data
    assert AlterPartitionReassignmentsRequest.decode(data, version) == _ALTER
    decoded = decode_request(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, memoryview(b"head" + data), 4
    )
    assert decoded == _ALTER
    # kafka-python's hand-written class (v0 only), tagged fields as empty dicts.
    hand_written = old.AlterPartitionReassignmentsRequest_v0(
        timeout_ms=5, topics=[("t", [(0, [1, 2], {}), (1, None, {})], {})], tags={}
    )
    assert bytes(hand_written.encode()) == _ALTER_BYTES[0]


def test_alter_v1_carries_allow_replication_factor_change() -> None:
    refusing = AlterPartitionReassignmentsRequest((), 5, allow_replication_factor_change=False)
    assert refusing.encode(1) == bytes.fromhex("00000005 00 01 00")
    assert AlterPartitionReassignmentsRequest.decode(refusing.encode(1), 1) == refusing
    # v0 has no such field: it is left out, and decodes as Kafka's default (true).
    assert refusing.encode(0) == bytes.fromhex("00000005 01 00")
    assert AlterPartitionReassignmentsRequest.decode(
        refusing.encode(0), 0
    ).allow_replication_factor_change


_ALTER_RESPONSE = AlterPartitionReassignmentsResponse(
    (
        ReassignableTopicResponse(
            "t",
            (
                ReassignablePartitionResponse(0),
                ReassignablePartitionResponse(1, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "no"),
            ),
        ),
    ),
    throttle_time_ms=1,
)
_ALTER_RESPONSE_TAIL = (
    "0000 00"  # error_code 0, error_message null
    "02 02 74 03"  # one topic, "t", two partitions
    "00000000 0000 00 00"  # 0: no error, message null
    "00000001 0055 03 6e6f 00"  # 1: NO_REASSIGNMENT_IN_PROGRESS (85), "no"
    "00 00"
)
_ALTER_RESPONSE_BYTES = {
    0: bytes.fromhex("00000001" + _ALTER_RESPONSE_TAIL),
    1: bytes.fromhex("00000001 01" + _ALTER_RESPONSE_TAIL),
}


@pytest.mark.parametrize("version", [0, 1])
def test_alter_response_bytes(version: int) -> None:
    data = _ALTER_RESPONSE_BYTES[version]
    assert _ALTER_RESPONSE.encode(version) == data
    assert AlterPartitionReassignmentsResponse.decode(data, version) == _ALTER_RESPONSE
    hand_written = old.AlterPartitionReassignmentsResponse_v0(
        throttle_time_ms=1,
        error_code=0,
        error_message=None,
        responses=[("t", [(0, 0, None, {}), (1, 85, "no", {})], {})],
        tags={},
    )
    assert bytes(hand_written.encode()) == _ALTER_RESPONSE_BYTES[0]


_LIST = ListPartitionReassignmentsRequest((ListPartitionReassignmentsTopics("t", (0, 3)),), 7)
_LIST_BYTES = bytes.fromhex("00000007 02 0274 03 00000000 00000003 00 00")
_LIST_RESPONSE = ListPartitionReassignmentsResponse(
    (OngoingTopicReassignment("t", (OngoingPartitionReassignment(3, (4, 2, 1), (4,), (1,)),)),)
)
_LIST_RESPONSE_BYTES = bytes.fromhex(
    "00000000 0000 00"  # throttle, error_code, error_message null
    "02 0274 02"  # one topic "t", one partition
    "00000003 04 00000004 00000002 00000001 02 00000004 02 00000001 00"  # 3: [4,2,1] +[4] -[1]
    "00 00"
)


def test_list_bytes() -> None:
    assert _LIST.encode(0) == _LIST_BYTES
    assert ListPartitionReassignmentsRequest.decode(_LIST_BYTES, 0) == _LIST
    hand_written = old.ListPartitionReassignmentsRequest_v0(
        timeout_ms=7, topics=[("t", [0, 3], {})], tags={}
    )
    assert bytes(hand_written.encode()) == _LIST_BYTES
    every = ListPartitionReassignmentsRequest(None, 7)
    assert every.encode(0) == bytes.fromhex("00000007 00 00")  # null topics: every partition
    assert ListPartitionReassignmentsRequest.decode(every.encode(0), 0) == every
    assert _LIST_RESPONSE.encode(0) == _LIST_RESPONSE_BYTES
    assert ListPartitionReassignmentsResponse.decode(_LIST_RESPONSE_BYTES, 0) == _LIST_RESPONSE
    hand_written_response = old.ListPartitionReassignmentsResponse_v0(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        topics=[("t", [(3, [4, 2, 1], [4], [1], {})], {})],
        tags={},
    )
    assert bytes(hand_written_response.encode()) == _LIST_RESPONSE_BYTES


def test_a_flexible_request_header_and_a_clients_tagged_fields_are_skipped() -> None:
    # Header v2 (tagged fields after client_id), as kafka-python writes it.
    request = old.AlterPartitionReassignmentsRequest_v0(
        timeout_ms=5, topics=[("t", [(0, [1, 2], {}), (1, None, {})], {})], tags={}
    )
    request.with_header(correlation_id=9, client_id="c")
    frame = memoryview(bytes(request.encode(header=True)))
    header, body_at = decode_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (45, 0, 9)
    assert decode_request(header.api_key, 0, frame, body_at) == _ALTER
    # Tagged fields we do not know (tag 7, two bytes) in a partition and at the body's end.
    tagged = bytes.fromhex("00000005 02 0274 02 00000000 00 01 07 02 abcd 00 01 00 01 ff")
    decoded = AlterPartitionReassignmentsRequest.decode(tagged, 0)
    assert decoded == AlterPartitionReassignmentsRequest(
        (ReassignableTopic("t", (ReassignablePartition(0),)),), 5
    )
    assert decoded.encode(0) == bytes.fromhex("00000005 02 0274 02 00000000 00 00 00 00")


_BODIES: list[tuple[Any, int, bytes]] = [
    (AlterPartitionReassignmentsRequest, 0, _ALTER_BYTES[0]),
    (AlterPartitionReassignmentsRequest, 1, _ALTER_BYTES[1]),
    (AlterPartitionReassignmentsResponse, 0, _ALTER_RESPONSE_BYTES[0]),
    (AlterPartitionReassignmentsResponse, 1, _ALTER_RESPONSE_BYTES[1]),
    (ListPartitionReassignmentsRequest, 0, _LIST_BYTES),
    (ListPartitionReassignmentsResponse, 0, _LIST_RESPONSE_BYTES),
]


@pytest.mark.parametrize(
    ("cls", "version", "data"), _BODIES, ids=lambda x: getattr(x, "__name__", "")
)
def test_truncated_bodies_raise_the_decode_error(cls: Any, version: int, data: bytes) -> None:
    for cut in range(len(data)):
        with pytest.raises(KafkaDecodeError):
            cls.decode(data[:cut], version)


def test_broken_bodies_raise_the_decode_error_naming_the_field() -> None:
    def alter(body_hex: str) -> object:
        body = memoryview(bytes.fromhex(body_hex))
        return decode_request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body, 0)

    def list_(body_hex: str) -> object:
        body = memoryview(bytes.fromhex(body_hex))
        return decode_request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, body, 0)

    with pytest.raises(KafkaDecodeError, match="the body"):
        alter(_ALTER_BYTES[0].hex() + "00")
    # Alter's topics and partitions may not be null (only replicas may).
    with pytest.raises(KafkaDecodeError, match="topics: null where an array is required"):
        alter("00000005 00 00")
    with pytest.raises(KafkaDecodeError, match=r"topics\[0\]\.partitions"):
        alter("00000005 02 0274 00 00 00")
    # A partition count far beyond the bytes that follow.
    with pytest.raises(KafkaDecodeError, match=r"topics\[0\]\.partitions"):
        alter("00000005 02 0274 ffffff7f")
    # A uvarint longer than five bytes.
    with pytest.raises(KafkaDecodeError, match="varint longer"):
        alter("00000005 ffffffffff7f")
    # A string that is not UTF-8, and tagged fields announcing more than is left.
    with pytest.raises(KafkaDecodeError, match=r"topics\[0\]\.name: not UTF-8"):
        alter("00000005 02 02ff 01 00 00")
    with pytest.raises(KafkaDecodeError, match="_tagged_fields"):
        alter("00000005 01 05")
    with pytest.raises(KafkaDecodeError, match=r"topics\[0\]\.partition_indexes"):
        list_("00000007 02 0274 00 00 00")
    with pytest.raises(KafkaDecodeError, match="adding_replicas"):
        ListPartitionReassignmentsResponse.decode(
            bytes.fromhex("00000000 0000 00 02 0274 02 00000003 01 00 00 00 00 00"), 0
        )


def test_versions_outside_the_supported_ranges() -> None:
    with pytest.raises(KafkaDecodeError, match="not one we speak"):
        AlterPartitionReassignmentsRequest.decode(_ALTER_BYTES[1], 2)
    with pytest.raises(KafkaDecodeError, match="version not spoken"):
        decode_request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 1, memoryview(_LIST_BYTES), 0)
    with pytest.raises(InvariantError):
        _ALTER.encode(2)
    with pytest.raises(InvariantError):
        _LIST_RESPONSE.encode(1)


# -- the handlers, over a real metadata state machine ----------------------------------------------


class StateQuorum:
    """The parts of MetadataQuorum that ClusterMetadata and the handlers use, over one
    MetadataState whose commands apply at once; `failure` refuses every proposal."""

    def __init__(self, state: MetadataState):
        self.state = state
        self.lock = threading.Lock()
        self.failure: RaftlogError | None = None
        self.proposed: list[str] = []

    def read(self, fn: Callable[[MetadataState], Any]) -> Any:
        with self.lock:
            return fn(self.state)

    def status(self) -> QuorumStatus:
        return QuorumStatus(True, "127.0.0.1:19001", 3, 40, 40, True, {})

    async def propose(self, name: str, /, timeout_s: float = 5.0, **args: Any) -> Any:
        self.proposed.append(name)
        if self.failure is not None:
            raise self.failure
        with self.lock:
            result = self.state.apply((name, args))
        if result[0] == "ok":
            return result[1]
        raise error_from_code(result[1], result[2])


class Cluster:
    """Four registered brokers and a topic "t" (3 partitions, RF 3, min.insync.replicas 2);
    `ctx` is what the handlers use of a broker (the broker's alter_partition_reassignments is
    ClusterMetadata's plus a reconcile)."""

    def __init__(self) -> None:
        self.state = MetadataState()
        self.quorum = StateQuorum(self.state)
        for node in (1, 2, 3, 4):
            self.apply(
                "register_broker",
                node_id=node,
                host="127.0.0.1",
                port=9000 + node,
                rack=None,
                incarnation=f"inc-{node}",
                now_ms=0,
            )
        config = {"min.insync.replicas": "2"}
        self.apply(
            "create_topic",
            name="t",
            topic_id="id",
            partitions=3,
            replication_factor=3,
            config=config,
        )
        self.metadata = ClusterMetadata(self.quorum, {1: "127.0.0.1:19001"})  # type: ignore[arg-type]
        self.ctx = SimpleNamespace(
            metadata=self.metadata,
            alter_partition_reassignments=self.metadata.alter_partition_reassignments,
        )

    def apply(self, name: str, /, **args: Any) -> Any:
        result = self.state.apply((name, args))
        assert result[0] == "ok", result
        return result[1]

    def partition(self, index: int) -> PartitionState:
        p: PartitionState = self.state.topics["t"]["partitions"][index]
        return p

    def spare(self, index: int) -> int:
        """The broker that holds no replica of t-`index`."""
        return next(b for b in (1, 2, 3, 4) if b not in self.partition(index).replicas)

    def alter(
        self,
        topics: list[tuple[str, list[tuple[int, list[int] | None]]]],
        version: int = 0,
        **kw: Any,
    ) -> AlterPartitionReassignmentsResponse:
        request = AlterPartitionReassignmentsRequest(
            tuple(
                ReassignableTopic(
                    name,
                    tuple(
                        ReassignablePartition(i, None if r is None else tuple(r)) for i, r in parts
                    ),
                )
                for name, parts in topics
            ),
            **kw,
        )
        # Through the codec, as the broker gets and sends them.
        request = AlterPartitionReassignmentsRequest.decode(request.encode(version), version)
        answer = asyncio.run(handle_alter_partition_reassignments(self.ctx, request, version, None))  # type: ignore[arg-type]
        return AlterPartitionReassignmentsResponse.decode(answer.encode(version), version)

    def list(
        self, topics: list[tuple[str, list[int]]] | None
    ) -> ListPartitionReassignmentsResponse:
        request = ListPartitionReassignmentsRequest(
            None
            if topics is None
            else tuple(ListPartitionReassignmentsTopics(n, tuple(p)) for n, p in topics)
        )
        answer = asyncio.run(handle_list_partition_reassignments(self.ctx, request, 0, None))  # type: ignore[arg-type]
        return ListPartitionReassignmentsResponse.decode(answer.encode(0), 0)


def _flat(response: AlterPartitionReassignmentsResponse) -> list[tuple[str, int, int]]:
    return [
        (t.name, p.partition_index, p.error_code) for t in response.responses for p in t.partitions
    ]


def test_alter_starts_moves_and_each_refusal_is_kafkas_code_with_raftlogs_message() -> None:
    c = Cluster()
    spare0 = c.spare(0)
    original0 = list(c.partition(0).replicas)
    target0 = [spare0, *original0[1:]]  # the first replica makes way for the spare broker
    before = list(c.quorum.proposed)
    answer = c.alter(
        [
            ("t", [(0, target0), (1, None), (9, [1, 2, 3])]),
            ("no-such-topic", [(0, [1, 2, 3])]),
            ("t", [(2, [1, 1, 2]), (2, [1, 2, 7]), (2, []), (2, [1])]),
        ]
    )
    # One proposal for the whole request.
    assert c.quorum.proposed == [*before, "alter_partition_reassignments"]
    assert answer.error_code == 0 and answer.error_message is None
    # The request's shape: "t" twice, in order.
    assert [t.name for t in answer.responses] == ["t", "no-such-topic", "t"]
    assert _flat(answer) == [
        ("t", 0, 0),
        ("t", 1, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS),
        ("t", 9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("no-such-topic", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("t", 2, ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # a broker named twice
        ("t", 2, ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # broker 7 is not registered
        ("t", 2, ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # no replicas
        ("t", 2, ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # fewer than min.insync.replicas
    ]
    messages = [p.error_message for t in answer.responses for p in t.partitions]
    assert messages[0] is None
    assert messages[1] == "t-1: no reassignment is under way"
    assert messages[2] == "unknown partition t-9"
    assert "unknown brokers [7]" in str(messages[5])
    assert "min.insync.replicas=2" in str(messages[7])
    # The move is under way: the spare broker joins, the first original replica leaves.
    p0 = c.partition(0)
    assert p0.adding == [spare0] and p0.removing == [original0[0]]
    assert p0.replicas == [*target0, original0[0]]
    assert not c.partition(2).reassigning


def test_nothing_to_cancel_has_its_own_error_and_a_stuck_cancel_does_not() -> None:
    """NO_REASSIGNMENT_IN_PROGRESS comes from NoReassignmentInProgressError (raftlog's code
    66); a cancel refused because it cannot be undone now stays an InvalidRequestError."""
    rules = TopicRules(min_insync_replicas=1)
    idle = PartitionState.new("t", 0, [1, 2, 3], rules)
    with pytest.raises(NoReassignmentInProgressError, match="no reassignment is under way"):
        idle.cancel_reassignment(rules, lambda r: True)
    assert kafka_code(NoReassignmentInProgressError("")) == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    # A move to [4] whose only in-sync replica is the joining one: it cannot be undone.
    moved = PartitionState("t", 0, [4, 1], 4, 1, [4], [], 1, adding=[4], removing=[1])
    with pytest.raises(InvalidRequestError) as stuck:
        moved.cancel_reassignment(rules, lambda r: True)
    assert not isinstance(stuck.value, NoReassignmentInProgressError)
    assert "cannot be cancelled now" in str(stuck.value)


def test_a_move_is_listed_replaced_and_cancelled() -> None:
    c = Cluster()
    spare = c.spare(1)
    original = list(c.partition(1).replicas)
    target = [spare, *original[1:]]
    assert c.list(None) == ListPartitionReassignmentsResponse(())
    assert _flat(c.alter([("t", [(1, target)])])) == [("t", 1, 0)]
    ongoing = OngoingPartitionReassignment(1, (*target, original[0]), (spare,), (original[0],))
    expected = ListPartitionReassignmentsResponse((OngoingTopicReassignment("t", (ongoing,)),))
    # Every move, and the named partitions with one (the others, unknown topics and
    # partitions, and topics left with none are left out).
    assert c.list(None) == expected
    assert c.list([("t", [0, 1, 2, 1, 99]), ("no-such-topic", [0]), ("t", [2])]) == (
        ListPartitionReassignmentsResponse((OngoingTopicReassignment("t", (ongoing, ongoing)),))
    )
    assert c.list([("t", [0])]) == ListPartitionReassignmentsResponse(())
    # Each List starts with the read barrier.
    assert c.quorum.proposed.count("noop") == 4
    # Replaced by a move that keeps the first replica and moves the last instead.
    replaced = [*original[:2], spare]
    assert _flat(c.alter([("t", [(1, replaced)])])) == [("t", 1, 0)]
    (topic,) = c.list(None).topics
    assert topic.partitions == (
        OngoingPartitionReassignment(1, (*replaced, original[2]), (spare,), (original[2],)),
    )
    # Cancelled: back to the original replicas, nothing listed, and a second cancel has
    # nothing to cancel.
    assert _flat(c.alter([("t", [(1, None)])])) == [("t", 1, 0)]
    assert c.partition(1).replicas == original and not c.partition(1).reassigning
    assert c.list(None) == ListPartitionReassignmentsResponse(())
    assert _flat(c.alter([("t", [(1, None)])])) == [("t", 1, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)]


def test_a_reorder_completes_at_once_and_lists_nothing() -> None:
    c = Cluster()
    original = list(c.partition(0).replicas)
    reordered = original[::-1]
    assert _flat(c.alter([("t", [(0, reordered)])])) == [("t", 0, 0)]
    assert c.partition(0).replicas == reordered and not c.partition(0).reassigning
    assert c.list(None) == ListPartitionReassignmentsResponse(())


def test_v1_refuses_a_replication_factor_change_when_asked() -> None:
    c = Cluster()
    spare0, spare2 = c.spare(0), c.spare(2)
    original0, original2 = list(c.partition(0).replicas), list(c.partition(2).replicas)
    # t-2 is moving already: its replication factor is its original replicas' count (3), not
    # the 4 replicas it has during the move.
    assert _flat(c.alter([("t", [(2, [spare2, *original2[1:]])])])) == [("t", 2, 0)]
    assert len(c.partition(2).replicas) == 4
    proposals = c.quorum.proposed.count("alter_partition_reassignments")
    answer = c.alter(
        [
            ("t", [(0, [*original0, spare0]), (1, list(c.partition(1).replicas)[:2])]),
            ("t", [(2, [*original2[:2], spare2]), (0, [spare0, *original0[1:]]), (99, [1])]),
        ],
        version=1,
        allow_replication_factor_change=False,
    )
    assert answer.allow_replication_factor_change is False and answer.error_code == 0
    assert _flat(answer) == [
        ("t", 0, ErrorCode.INVALID_REPLICATION_FACTOR),  # 3 -> 4
        ("t", 1, ErrorCode.INVALID_REPLICATION_FACTOR),  # 3 -> 2
        ("t", 2, 0),  # 3 -> 3, replacing the move under way
        ("t", 0, 0),  # 3 -> 3
        ("t", 99, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),  # the proposal says so
    ]
    first = answer.responses[0].partitions[0].error_message
    assert first == (
        "t-0: the replication factor is changed from 3 to 4, and "
        "allow_replication_factor_change is false"
    )
    assert c.quorum.proposed.count("alter_partition_reassignments") == proposals + 1
    assert len(c.partition(1).replicas) == 3
    # Every entry refused: nothing is proposed.
    answer = c.alter([("t", [(1, [1])])], version=1, allow_replication_factor_change=False)
    assert _flat(answer) == [("t", 1, ErrorCode.INVALID_REPLICATION_FACTOR)]
    assert c.quorum.proposed.count("alter_partition_reassignments") == proposals + 1
    # Allowed (v1's default, and v0's only behaviour): the replication factor may change.
    answer = c.alter([("t", [(1, [1, 2, 3, 4])])], version=1)
    assert answer.allow_replication_factor_change is True
    assert _flat(answer) == [("t", 1, 0)]


def test_empty_requests_propose_nothing() -> None:
    c = Cluster()
    before = list(c.quorum.proposed)
    assert c.alter([]) == AlterPartitionReassignmentsResponse(())
    assert c.list([]) == ListPartitionReassignmentsResponse(())
    assert c.quorum.proposed == before


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (RaftlogTimeoutError("metadata command not committed within 5.0 s"), 7),
        (NotControllerError("this node's Raft thread failed"), 41),
    ],
)
def test_a_whole_request_failure_is_the_top_level_error_and_every_partitions(
    failure: RaftlogError, code: int
) -> None:
    c = Cluster()
    c.quorum.failure = failure
    for version in (0, 1):
        answer = c.alter([("t", [(0, [1, 2, 3]), (1, None)]), ("u", [(0, [1, 2, 3])])], version)
        assert (answer.error_code, answer.error_message) == (code, str(failure))
        assert _flat(answer) == [("t", 0, code), ("t", 1, code), ("u", 0, code)]
        assert {p.error_message for t in answer.responses for p in t.partitions} == {str(failure)}
    answer_list = c.list([("t", [0, 2])])
    assert (answer_list.error_code, answer_list.error_message) == (code, str(failure))
    assert answer_list.topics == (
        OngoingTopicReassignment(
            "t", (OngoingPartitionReassignment(0), OngoingPartitionReassignment(2))
        ),
    )
    every = c.list(None)
    assert (every.error_code, every.topics) == (code, ())
