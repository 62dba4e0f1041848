"""Where keyed records go: Kafka's murmur2 against Kafka's own test vectors and kafka-python's
implementation (an independent oracle, used only here), and the `partitioner` option."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from raftlog.client.accumulator import Accumulator
from raftlog.client.partitioner import default_partitioner, murmur2, murmur2_partitioner
from raftlog.client.producer_config import InvalidConfigValueError, ProducerConfig
from raftlog.errors import InvalidConfigError
from raftlog.metadata.model import PartitionInfo, TopicInfo

# Kafka's clients/src/test/.../common/utils/UtilsTest.java, testMurmur2: Utils.murmur2 of these
# bytes is this (signed) Java int.
KAFKA_UTILS_TEST_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("key, expected", KAFKA_UTILS_TEST_VECTORS.items())
def test_murmur2_gives_what_kafkas_java_client_gives(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_murmur2_of_every_length_and_byte_agrees_with_kafka_python() -> None:
    rng = random.Random(23)
    keys = [bytes(rng.randrange(256) for _ in range(n)) for n in range(70) for _ in range(20)]
    keys += [b"", b"\xff" * 4, b"\x80" * 7, b"\x00" * 5]  # sign bits, zero bytes, the empty key
    for key in keys:
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key), key


@given(key=st.binary(max_size=200), partitions=st.integers(1, 10_000))
@settings(max_examples=500, deadline=None)
def test_murmur2_partitioner_places_keys_as_kafka_python_does(key: bytes, partitions: int) -> None:
    # kafka.partitioner.default.DefaultPartitioner.partition, without its cluster object.
    expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions
    assert murmur2_partitioner(key, partitions) == expected


def test_murmur2_partitioner_is_non_negative_by_mask_not_abs() -> None:
    # b"21" hashes to a negative int: Kafka masks the sign bit (toPositive), which differs from
    # abs(); a partitioner that took abs() would put this key elsewhere.
    h = KAFKA_UTILS_TEST_VECTORS[b"21"]
    assert murmur2_partitioner(b"21", 1000) == (h & 0x7FFFFFFF) % 1000 != abs(h) % 1000


def test_partitioner_option_takes_a_name_or_a_callable() -> None:
    assert ProducerConfig().partitioner is default_partitioner
    assert ProducerConfig(partitioner="default").partitioner is default_partitioner
    assert ProducerConfig(partitioner="murmur2").partitioner is murmur2_partitioner

    def last(key: bytes, partitions: int) -> int:
        return partitions - 1

    assert ProducerConfig(partitioner=last).key_partitioner is last


@pytest.mark.parametrize("value", ["murmur3", "consistent_random", "", 7, None])
def test_an_unknown_partitioner_is_refused_naming_the_value_and_the_choices(value: object) -> None:
    with pytest.raises(InvalidConfigValueError) as info:
        ProducerConfig(partitioner=value)  # type: ignore[arg-type]
    text = str(info.value)
    assert f"partitioner={value!r}" in text
    assert "'default'" in text and "'murmur2'" in text and "callable" in text
    assert isinstance(info.value, ValueError) and isinstance(info.value, InvalidConfigError)


def test_the_producer_places_keyed_records_with_the_named_partitioner() -> None:
    partitions = tuple(PartitionInfo(p, 0, 0, (0,), (0,)) for p in range(12))
    topics = {"t": TopicInfo("t", "id", partitions)}
    acc = Accumulator(ProducerConfig(partitioner="murmur2"), topics, lambda: None)
    for i in range(200):
        key = f"user-{i}".encode()
        fut = acc.append("t", b"v", key, None, None, None, False)
        assert fut is not None
        assert fut._batch.tp.partition == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 12
