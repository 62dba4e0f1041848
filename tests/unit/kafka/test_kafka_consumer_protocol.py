"""The consumer protocol's subscription and assignment bytes: at v0-3 they match kafka-python
3.0's generated ConsumerProtocolSubscription and ConsumerProtocolAssignment (and its
hand-written v0 classes) byte for byte, both ways; a newer version's extra trailing fields are
ignored, as Kafka's ConsumerProtocol does; garbage raises KafkaDecodeError naming the
structure, its version and the field, and nothing else escapes."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription
from kafka.protocol.old import consumer_protocol as old
from kp_oracle import INT32, NULLABLE_TEXT, TEXT, new_encode, old_encode, plain, small_tuples
from test_kafka_cold_fuzz import mutate

from raftlog.invariants import InvariantError
from raftlog.kafka.messages.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    TopicPartitions,
)
from raftlog.kafka.wire import KafkaDecodeError

VERSIONS = (0, 1, 2, 3)
NULLABLE_BYTES = st.none() | st.binary(max_size=12)
PARTITIONS = small_tuples(st.builds(TopicPartitions, TEXT, small_tuples(INT32)))


def subscriptions(version: int) -> st.SearchStrategy[ConsumerProtocolSubscription]:
    return st.builds(
        ConsumerProtocolSubscription,
        small_tuples(TEXT),
        NULLABLE_BYTES,
        PARTITIONS if version >= 1 else st.just(()),
        INT32 if version >= 2 else st.just(-1),
        NULLABLE_TEXT if version >= 3 else st.just(None),
    )


ASSIGNMENTS = st.builds(ConsumerProtocolAssignment, PARTITIONS, NULLABLE_BYTES)


def check(message: Any, version: int, kp_class: Any) -> None:
    """Ours encodes to kafka-python's bytes, decodes them back, and kafka-python reads ours."""
    encoded = message.encode(version)
    assert encoded == new_encode(kp_class, message, version)
    assert type(message).decode(encoded) == message
    parsed = kp_class.decode(encoded)
    assert parsed.version == version
    assert bytes(parsed.encode()) == encoded


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_subscription_matches_kafka_python(version: int, data: st.DataObject) -> None:
    subscription = data.draw(subscriptions(version))
    check(subscription, version, KpSubscription)
    if version == 0:
        # kafka-python's hand-written v0 writes the version as a field of its own.
        fields = {"version": 0, **plain(subscription)}
        assert subscription.encode(0) == old_encode(old.ConsumerProtocolMemberMetadata_v0, fields)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(assignment=ASSIGNMENTS)
def test_assignment_matches_kafka_python(
    version: int, assignment: ConsumerProtocolAssignment
) -> None:
    check(assignment, version, KpAssignment)
    if version == 0:
        fields = {"version": 0, **plain(assignment)}
        assert assignment.encode(0) == old_encode(old.ConsumerProtocolMemberAssignment_v0, fields)


def test_the_layout_byte_by_byte() -> None:
    subscription = ConsumerProtocolSubscription(("t",), None, (("t", (1,)),), 5, "r")
    v0 = bytes.fromhex("0000 00000001 0001 74 ffffffff")
    assert subscription.encode(0) == v0
    owned = bytes.fromhex("00000001 0001 74 00000001 00000001")
    assert subscription.encode(1) == b"\x00\x01" + v0[2:] + owned
    assert subscription.encode(3) == b"\x00\x03" + v0[2:] + owned + bytes.fromhex(
        "00000005 0001 72"
    )
    assignment = ConsumerProtocolAssignment((("t", (0, 2)),), b"u")
    assert assignment.encode(1) == bytes.fromhex(
        "0001 00000001 0001 74 00000002 00000000 00000002 00000001 75"
    )


def test_a_newer_version_is_read_as_v3_and_its_extra_fields_ignored() -> None:
    subscription = ConsumerProtocolSubscription(("t",), b"x", (("t", (0,)),), 9, "rack")
    v7 = b"\x00\x07" + subscription.encode(3)[2:] + b"\x00\x00\x00\x2a new fields"
    assert ConsumerProtocolSubscription.decode(v7) == subscription
    assignment = ConsumerProtocolAssignment((("t", (0,)),), None)
    assert ConsumerProtocolAssignment.decode(b"\x00\x04" + assignment.encode(0)[2:] + b"\x01") == (
        assignment
    )
    # An older version leaves the newer fields at their defaults.
    assert ConsumerProtocolSubscription.decode(subscription.encode(1)) == (
        ConsumerProtocolSubscription(("t",), b"x", (("t", (0,)),))
    )


def test_garbage_names_the_structure_version_and_field() -> None:
    with pytest.raises(KafkaDecodeError, match=r"^ConsumerProtocolSubscription: version: needs"):
        ConsumerProtocolSubscription.decode(b"\x00")
    with pytest.raises(KafkaDecodeError, match="ConsumerProtocolAssignment: version: negative"):
        ConsumerProtocolAssignment.decode(b"\xff\xff" + bytes(8))
    truncated = ConsumerProtocolSubscription(("t",), None, (("t", (1,)),)).encode(1)[:-2]
    with pytest.raises(
        KafkaDecodeError,
        match=r"^ConsumerProtocolSubscription v1: owned_partitions\[0\]\.partitions\[0\]: needs",
    ):
        ConsumerProtocolSubscription.decode(truncated)
    with pytest.raises(KafkaDecodeError, match=r"v9 \(read as v3\): topics: 1000 items"):
        ConsumerProtocolSubscription.decode(b"\x00\x09\x00\x00\x03\xe8")


def test_encoding_an_unknown_version_is_ours() -> None:
    for version in (-1, 4):
        with pytest.raises(InvariantError):
            ConsumerProtocolSubscription(()).encode(version)
        with pytest.raises(InvariantError):
            ConsumerProtocolAssignment(()).encode(version)


@pytest.mark.parametrize("cls", [ConsumerProtocolSubscription, ConsumerProtocolAssignment])
def test_mutated_bytes_raise_only_kafka_decode_errors(cls: Any) -> None:
    rng = random.Random(cls.__name__)
    seeds = [
        ConsumerProtocolSubscription(("a", "bé"), b"ud", (("a", (0, 1)),), 3, "r").encode(3),
        ConsumerProtocolAssignment((("a", (0, 1)), ("b", ())), b"ud").encode(0),
    ]
    refused = 0
    for i in range(2000):
        data = mutate(rng.choice(seeds), rng)
        try:
            message = cls.decode(data)
        except KafkaDecodeError as e:
            assert e.detail and e.context.startswith(cls.__name__), str(e)
            refused += 1
            continue
        except Exception as e:  # pragma: no cover - what the test exists to catch
            raise AssertionError(f"mutation {i} of {cls.__name__}: {data.hex()}") from e
        message.encode(3)  # whatever decodes encodes again
    assert refused > 200
