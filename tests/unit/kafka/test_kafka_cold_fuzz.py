"""The cold APIs' decoders (InitProducerId, OffsetForLeaderEpoch, CreateTopics, DeleteTopics,
CreatePartitions, ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments
(flexible: compact lengths and tagged fields), DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, and the consumer-group APIs
(SUPPORTED_VERSIONS), whose samples come from kafka_group_samples.py) under mutated bodies:
thousands per message type and version, from a seeded random generator, read as
`decode_request` reads a body (from a Reader placed in the frame, then every byte consumed). A
body either decodes to a message that encodes again or raises KafkaDecodeError naming the
field; nothing else (IndexError, struct.error, UnicodeDecodeError, MemoryError) escapes."""

from __future__ import annotations

import random
from typing import Any

import pytest
from kafka_group_samples import GROUP_SAMPLES
from kafka_message_samples import versions as codec_versions

from raftlog.invariants import InvariantError
from raftlog.kafka.messages.alter_configs import (
    AlterableConfig,
    AlterConfigsRequest,
    AlterConfigsResource,
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
    IncrementalAlterableConfig,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResource,
    IncrementalAlterConfigsResponse,
)
from raftlog.kafka.messages.configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)
from raftlog.kafka.messages.elect_leaders import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
    TopicPartitions,
)
from raftlog.kafka.messages.offsets_for_leader_epoch import (
    EpochEndOffset,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderPartition,
)
from raftlog.kafka.messages.producer_ids import InitProducerIdRequest, InitProducerIdResponse
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
from raftlog.kafka.wire import KafkaDecodeError, Reader

MUTATIONS_PER_CASE = 2000

# (versions, message type, valid messages to mutate): requests and responses.
CASES: list[tuple[range, Any, list[Any]]] = [
    (range(2), InitProducerIdRequest, [InitProducerIdRequest("tx-é", 60000)]),
    (range(2), InitProducerIdResponse, [InitProducerIdResponse(0, 99, 0)]),
    (
        range(4),
        OffsetForLeaderEpochRequest,
        [
            OffsetForLeaderEpochRequest(
                (
                    (
                        "orders",
                        (OffsetForLeaderPartition(0, 3, 4), OffsetForLeaderPartition(7, 1)),
                    ),
                    ("x", ()),
                ),
                -1,
            )
        ],
    ),
    (
        range(4),
        OffsetForLeaderEpochResponse,
        [OffsetForLeaderEpochResponse((("orders", (EpochEndOffset(0, 0, 3, 1200),)),), 0)],
    ),
    (
        range(5),
        CreateTopicsRequest,
        [
            CreateTopicsRequest(
                (
                    CreatableTopic(
                        "a",
                        3,
                        2,
                        (CreatableReplicaAssignment(0, (1, 2)),),
                        (
                            CreatableTopicConfig("retention.ms", "1000"),
                            CreatableTopicConfig("k", None),
                        ),
                    ),
                    CreatableTopic("b"),
                ),
                30000,
                True,
            )
        ],
    ),
    (
        range(5),
        CreateTopicsResponse,
        [
            CreateTopicsResponse(
                (CreatableTopicResult("a", 36, "exists"), CreatableTopicResult("b"))
            )
        ],
    ),
    (range(4), DeleteTopicsRequest, [DeleteTopicsRequest(("a", "bb", ""), 5000)]),
    (
        range(4),
        DeleteTopicsResponse,
        [DeleteTopicsResponse((DeletableTopicResult("a"), DeletableTopicResult("b", 3)), 0)],
    ),
    (
        range(2),
        CreatePartitionsRequest,
        [
            CreatePartitionsRequest(
                (
                    CreatePartitionsTopic("a", 3),
                    CreatePartitionsTopic(
                        "b-é",
                        4,
                        (CreatePartitionsAssignment((1, 2)), CreatePartitionsAssignment((3, 1))),
                    ),
                    CreatePartitionsTopic("c", 2, ()),
                ),
                30000,
                True,
            )
        ],
    ),
    (
        range(2),
        CreatePartitionsResponse,
        [
            CreatePartitionsResponse(
                (
                    CreatePartitionsTopicResult("a", 37, "never shrinks"),
                    CreatePartitionsTopicResult("b"),
                ),
                5,
            )
        ],
    ),
    (
        range(2),
        ElectLeadersRequest,
        [
            ElectLeadersRequest(
                (
                    TopicPartitions("a", (0, 2)),
                    TopicPartitions("b-é", ()),
                    TopicPartitions("c", (7,)),
                ),
                60000,
                1,
            ),
            ElectLeadersRequest(None, 5),
        ],
    ),
    (
        range(2),
        ElectLeadersResponse,
        [
            ElectLeadersResponse(
                (
                    ReplicaElectionResult(
                        "a", (PartitionResult(0), PartitionResult(2, 84, "leads already"))
                    ),
                    ReplicaElectionResult("b", ()),
                ),
                0,
                5,
            )
        ],
    ),
    (
        range(2),
        AlterPartitionReassignmentsRequest,
        [
            AlterPartitionReassignmentsRequest(
                (
                    ReassignableTopic(
                        "a", (ReassignablePartition(0, (4, 2, 3)), ReassignablePartition(2))
                    ),
                    ReassignableTopic("b-é", ()),
                    ReassignableTopic("c", (ReassignablePartition(7, ()),)),
                ),
                60000,
                False,
            ),
            AlterPartitionReassignmentsRequest((), 5),
        ],
    ),
    (
        range(2),
        AlterPartitionReassignmentsResponse,
        [
            AlterPartitionReassignmentsResponse(
                (
                    ReassignableTopicResponse(
                        "a",
                        (
                            ReassignablePartitionResponse(0),
                            ReassignablePartitionResponse(2, 85, "t-2: nothing to cancel"),
                        ),
                    ),
                    ReassignableTopicResponse("b", ()),
                ),
                0,
                None,
                False,
                5,
            ),
            AlterPartitionReassignmentsResponse((), 7, "not committed", True),
        ],
    ),
    (
        range(1),
        ListPartitionReassignmentsRequest,
        [
            ListPartitionReassignmentsRequest(
                (
                    ListPartitionReassignmentsTopics("a", (0, 2)),
                    ListPartitionReassignmentsTopics("b-é", ()),
                ),
                60000,
            ),
            ListPartitionReassignmentsRequest(None, 5),
        ],
    ),
    (
        range(1),
        ListPartitionReassignmentsResponse,
        [
            ListPartitionReassignmentsResponse(
                (
                    OngoingTopicReassignment(
                        "a",
                        (
                            OngoingPartitionReassignment(0, (4, 2, 3, 1), (4,), (1,)),
                            OngoingPartitionReassignment(3, (1, 2), (), (3,)),
                        ),
                    ),
                    OngoingTopicReassignment("b", ()),
                ),
                0,
                None,
                3,
            ),
            ListPartitionReassignmentsResponse((), 41, "not the controller"),
        ],
    ),
    (
        range(3),
        DescribeConfigsRequest,
        [
            DescribeConfigsRequest(
                (
                    DescribeConfigsResource(2, "orders", ("retention.ms", "segment.bytes")),
                    DescribeConfigsResource(4, "1", None),
                ),
                True,
            )
        ],
    ),
    (
        range(3),
        DescribeConfigsResponse,
        [
            DescribeConfigsResponse(
                (
                    DescribeConfigsResult(
                        2,
                        "orders",
                        (
                            DescribeConfigsResourceResult(
                                "retention.ms",
                                "1000",
                                True,
                                1,
                                False,
                                (DescribeConfigsSynonym("log.retention.ms", None, 5),),
                            ),
                        ),
                    ),
                    DescribeConfigsResult(3, "g", (), 42, "not supported"),
                )
            )
        ],
    ),
    (
        range(2),
        AlterConfigsRequest,
        [
            AlterConfigsRequest(
                (
                    AlterConfigsResource(
                        2,
                        "orders",
                        (AlterableConfig("retention.ms", "1000"), AlterableConfig("k", None)),
                    ),
                    AlterConfigsResource(4, "1-é", ()),
                ),
                True,
            )
        ],
    ),
    (
        range(2),
        AlterConfigsResponse,
        [
            AlterConfigsResponse(
                (
                    AlterConfigsResourceResponse(2, "orders"),
                    AlterConfigsResourceResponse(4, "1", 42, "no dynamic broker configs"),
                ),
                5,
            )
        ],
    ),
    (
        range(1),
        IncrementalAlterConfigsRequest,
        [
            IncrementalAlterConfigsRequest(
                (
                    IncrementalAlterConfigsResource(
                        2,
                        "orders",
                        (
                            IncrementalAlterableConfig("retention.ms", 0, "1000"),
                            IncrementalAlterableConfig("segment.ms", 1, None),
                            IncrementalAlterableConfig("cleanup.policy", 2, "delete"),
                        ),
                    ),
                    IncrementalAlterConfigsResource(8, "é", ()),
                ),
                False,
            )
        ],
    ),
    (
        range(1),
        IncrementalAlterConfigsResponse,
        [
            IncrementalAlterConfigsResponse(
                (
                    AlterConfigsResourceResponse(2, "orders", 40, "retention.ms='x'"),
                    AlterConfigsResourceResponse(2, "b"),
                ),
            )
        ],
    ),
]

_INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFF)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to three random edits: a flipped bit, an interesting byte, a big or negative int32
    length, a cut, an insertion, a deletion, or garbage appended."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(7)
        pos = rng.randrange(len(out) + 1)
        if kind == 0 and out:
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
        elif kind == 1 and out:
            out[rng.randrange(len(out))] = rng.choice(_INTERESTING)
        elif kind == 2:
            value = rng.choice((-2, -1, 0x7FFFFFFF, 0x10000, 2**31 - 2))
            out[pos : pos + 4] = value.to_bytes(4, "big", signed=value < 0)
        elif kind == 3:
            del out[pos:]
        elif kind == 4:
            out[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif kind == 5 and out:
            del out[pos : pos + rng.randint(1, 4)]
        else:
            out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return bytes(out)


def decode_body(cls: Any, frame: bytes, version: int) -> Any:
    """`frame` decoded as the body of a request frame: after a header, read to its end."""
    header = b"\x00" * 7
    reader = Reader(header + frame, len(header))
    message = cls.decode(reader, version)
    reader.expect_end("the body")
    return message


# The group APIs: each version's sample request and response (kafka_group_samples.py).
GROUP_CASES: list[tuple[int, Any, list[Any]]] = [
    (v, type(message), [message])
    for api_key, makers in GROUP_SAMPLES.items()
    for v in codec_versions(api_key)
    for message in (make(v) for make in makers)
]


def _cases() -> list[tuple[int, Any, list[Any]]]:
    return [(v, cls, seeds) for versions, cls, seeds in CASES for v in versions] + GROUP_CASES


@pytest.mark.parametrize(
    ("version", "cls", "seeds"),
    _cases(),
    ids=[f"{cls.__name__}-v{v}" for v, cls, _ in _cases()],
)
def test_mutated_frames_raise_only_kafka_decode_errors(
    version: int, cls: Any, seeds: list[Any]
) -> None:
    rng = random.Random(f"{cls.__name__}-{version}")
    frames = [seed.encode(version) for seed in seeds]
    for frame in frames:
        assert decode_body(cls, frame, version).encode(version) == frame  # the seeds are valid
    refused = 0
    for i in range(MUTATIONS_PER_CASE):
        frame = mutate(rng.choice(frames), rng)
        try:
            message = decode_body(cls, frame, version)
        except KafkaDecodeError as e:
            assert e.detail, str(e)
            refused += 1
            continue
        except Exception as e:  # pragma: no cover - what the test exists to catch
            raise AssertionError(f"mutation {i} of {cls.__name__} v{version}: {frame.hex()}") from e
        # Whatever decodes is a message that encodes again.
        message.encode(version)
    assert refused > MUTATIONS_PER_CASE // 4  # the mutations do break frames


@pytest.mark.parametrize("cls", [c[1] for c in CASES], ids=lambda c: c.__name__)
def test_random_bytes_and_a_shared_reader(cls: Any) -> None:
    rng = random.Random(cls.__name__)
    versions = next(v for v, c, _ in CASES if c is cls)
    for _ in range(500):
        frame = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
        for version in versions:
            try:
                cls.decode(frame, version)
                cls.decode(Reader(frame), version)
            except KafkaDecodeError:
                pass


@pytest.mark.parametrize(
    ("versions", "cls", "seeds"), CASES, ids=lambda c: getattr(c, "__name__", "")
)
def test_versions_outside_the_supported_range(versions: range, cls: Any, seeds: list[Any]) -> None:
    """Decoding one is the peer's fault, encoding one ours."""
    frame = seeds[0].encode(versions[0])
    for version in (versions[0] - 1, versions[-1] + 1):
        with pytest.raises(KafkaDecodeError, match="not one we speak"):
            cls.decode(frame, version)
        with pytest.raises(InvariantError):
            seeds[0].encode(version)
