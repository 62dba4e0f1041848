"""CreateTopics (API key 19), versions 0-4, DeleteTopics (API key 20), versions 0-3, and
CreatePartitions (API key 37), versions 0-1.

Byte by byte, big-endian (Kafka's CreateTopicsRequest.json, CreateTopicsResponse.json,
DeleteTopicsRequest.json, DeleteTopicsResponse.json, CreatePartitionsRequest.json,
CreatePartitionsResponse.json). Fields a version lacks take their defaults when decoded and
are left out when encoded.

CreateTopics request (v0-v4 are the same on the wire; v4 only lets -1 partitions or
replication factor without assignments ask for the broker's default, KIP-464, which
raftlog's broker honours at every version):
  topics  array of:
    name                string
    num_partitions      int32   -1: the broker's default (or the assignments' count)
    replication_factor  int16   -1: the broker's default
    assignments         array of (empty: the broker places replicas):
      partition_index     int32
      broker_ids          array of int32
    configs             array of:
      name                string
      value               nullable_string
  timeout_ms     int32
  validate_only  boolean  v1+: check, create nothing

CreateTopics response:
  throttle_time_ms  int32  v2+
  topics            array of:
    name           string
    error_code     int16
    error_message  nullable_string  v1+

DeleteTopics request (v0-v3 are the same):
  topic_names  array of string
  timeout_ms   int32

DeleteTopics response:
  throttle_time_ms  int32  v1+
  responses         array of:
    name        string
    error_code  int16

CreatePartitions request (v0 and v1 are the same; v1 only lets a throttled answer come
before the throttling, KIP-219):
  topics  array of:
    name         string
    count        int32   the topic's new partition count, in total
    assignments  nullable array of (null: the broker places the new partitions):
      broker_ids   array of int32   one entry per new partition, in partition order
  timeout_ms     int32
  validate_only  boolean  check, grow nothing

CreatePartitions response (v0 and v1 are the same):
  throttle_time_ms  int32
  results           array of:
    name           string
    error_code     int16
    error_message  nullable_string
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.common import as_reader, check_decode_version, check_encode_version
from raftlog.kafka.wire import Reader, Writer

BROKER_DEFAULT = -1  # num_partitions / replication_factor: the broker's default
TIMEOUT_MS_DEFAULT = 60_000  # Kafka's default for timeout_ms


class CreatableReplicaAssignment(NamedTuple):
    partition_index: int
    broker_ids: tuple[int, ...]


class CreatableTopicConfig(NamedTuple):
    name: str
    value: str | None


class CreatableTopic(NamedTuple):
    name: str
    num_partitions: int = BROKER_DEFAULT
    replication_factor: int = BROKER_DEFAULT
    assignments: tuple[CreatableReplicaAssignment, ...] = ()
    configs: tuple[CreatableTopicConfig, ...] = ()


def _read_int32(r: Reader) -> int:
    return r.int32()


def _write_int32s(w: Writer, values: tuple[int, ...]) -> None:
    w.array_length(len(values))
    for value in values:
        w.int32(value)


def _read_string(r: Reader) -> str:
    return r.string()


def _read_assignment(r: Reader) -> CreatableReplicaAssignment:
    index = r.int32("partition_index")
    return CreatableReplicaAssignment(index, r.array(_read_int32, "broker_ids"))


def _read_config(r: Reader) -> CreatableTopicConfig:
    return CreatableTopicConfig(r.string("name"), r.nullable_string("value"))


def _read_creatable(r: Reader) -> CreatableTopic:
    name = r.string("name")
    partitions = r.int32("num_partitions")
    replication_factor = r.int16("replication_factor")
    assignments = r.array(_read_assignment, "assignments")
    configs = r.array(_read_config, "configs")
    return CreatableTopic(name, partitions, replication_factor, assignments, configs)


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest:
    topics: tuple[CreatableTopic, ...]
    timeout_ms: int = TIMEOUT_MS_DEFAULT
    validate_only: bool = False  # sent from v1

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> CreateTopicsRequest:
        check_decode_version(ApiKey.CREATE_TOPICS, version)
        reader = as_reader(source)
        topics = reader.array(_read_creatable, "topics")
        timeout_ms = reader.int32("timeout_ms")
        validate_only = reader.boolean("validate_only") if version >= 1 else False
        return cls(topics, timeout_ms, validate_only)

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.CREATE_TOPICS, version)
        w = Writer()
        w.array_length(len(self.topics))
        for t in self.topics:
            w.string(t.name)
            w.int32(t.num_partitions)
            w.int16(t.replication_factor)
            w.array_length(len(t.assignments))
            for a in t.assignments:
                w.int32(a.partition_index)
                _write_int32s(w, a.broker_ids)
            w.array_length(len(t.configs))
            for c in t.configs:
                w.string(c.name)
                w.nullable_string(c.value)
        w.int32(self.timeout_ms)
        if version >= 1:
            w.boolean(self.validate_only)
        return w.getvalue()


class CreatableTopicResult(NamedTuple):
    """One topic's outcome; `error_message` is null on success (and not sent before v1)."""

    name: str
    error_code: int = 0
    error_message: str | None = None


def _write_results(w: Writer, results: tuple[CreatableTopicResult, ...], messages: bool) -> None:
    """CreateTopics' and CreatePartitions' per-topic results (`messages`: with error_message)."""
    w.array_length(len(results))
    for t in results:
        w.string(t.name)
        w.int16(t.error_code)
        if messages:
            w.nullable_string(t.error_message)


def _result_reader(messages: bool) -> Callable[[Reader], CreatableTopicResult]:
    """What `_write_results` writes, one result."""

    def read(r: Reader) -> CreatableTopicResult:
        name, error_code = r.string("name"), r.int16("error_code")
        message = r.nullable_string("error_message") if messages else None
        return CreatableTopicResult(name, error_code, message)

    return read


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    topics: tuple[CreatableTopicResult, ...]
    throttle_time_ms: int = 0  # sent from v2

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.CREATE_TOPICS, version)
        w = Writer()
        if version >= 2:
            w.int32(self.throttle_time_ms)
        _write_results(w, self.topics, messages=version >= 1)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> CreateTopicsResponse:
        check_decode_version(ApiKey.CREATE_TOPICS, version)
        reader = as_reader(source)
        throttle_time_ms = reader.int32("throttle_time_ms") if version >= 2 else 0
        return cls(reader.array(_result_reader(version >= 1), "topics"), throttle_time_ms)


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest:
    topic_names: tuple[str, ...]
    timeout_ms: int = TIMEOUT_MS_DEFAULT

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> DeleteTopicsRequest:
        check_decode_version(ApiKey.DELETE_TOPICS, version)
        reader = as_reader(source)
        names = reader.array(_read_string, "topic_names")
        return cls(names, reader.int32("timeout_ms"))

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.DELETE_TOPICS, version)
        w = Writer()
        w.array_length(len(self.topic_names))
        for name in self.topic_names:
            w.string(name)
        w.int32(self.timeout_ms)
        return w.getvalue()


class DeletableTopicResult(NamedTuple):
    name: str
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class DeleteTopicsResponse:
    responses: tuple[DeletableTopicResult, ...]
    throttle_time_ms: int = 0  # sent from v1

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.DELETE_TOPICS, version)
        w = Writer()
        if version >= 1:
            w.int32(self.throttle_time_ms)
        w.array_length(len(self.responses))
        for t in self.responses:
            w.string(t.name)
            w.int16(t.error_code)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> DeleteTopicsResponse:
        check_decode_version(ApiKey.DELETE_TOPICS, version)
        reader = as_reader(source)
        throttle_time_ms = reader.int32("throttle_time_ms") if version >= 1 else 0

        def result(r: Reader) -> DeletableTopicResult:
            return DeletableTopicResult(r.string("name"), r.int16("error_code"))

        return cls(reader.array(result, "responses"), throttle_time_ms)


class CreatePartitionsAssignment(NamedTuple):
    """The replicas (broker ids, the first the preferred leader) of one new partition."""

    broker_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopic:
    """A dataclass, not a NamedTuple: Kafka's field `count` would hide tuple.count."""

    name: str
    count: int  # the new total
    assignments: tuple[CreatePartitionsAssignment, ...] | None = None  # None: broker places


def _read_partitions_assignment(r: Reader) -> CreatePartitionsAssignment:
    return CreatePartitionsAssignment(r.array(_read_int32, "broker_ids"))


def _read_partitions_topic(r: Reader) -> CreatePartitionsTopic:
    name = r.string("name")
    count = r.int32("count")
    return CreatePartitionsTopic(
        name, count, r.nullable_array(_read_partitions_assignment, "assignments")
    )


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    topics: tuple[CreatePartitionsTopic, ...]
    timeout_ms: int = TIMEOUT_MS_DEFAULT
    validate_only: bool = False

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> CreatePartitionsRequest:
        check_decode_version(ApiKey.CREATE_PARTITIONS, version)
        reader = as_reader(source)
        topics = reader.array(_read_partitions_topic, "topics")
        timeout_ms = reader.int32("timeout_ms")
        return cls(topics, timeout_ms, reader.boolean("validate_only"))

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.CREATE_PARTITIONS, version)
        w = Writer()
        w.array_length(len(self.topics))
        for t in self.topics:
            w.string(t.name)
            w.int32(t.count)
            w.array_length(None if t.assignments is None else len(t.assignments))
            for a in t.assignments or ():
                _write_int32s(w, a.broker_ids)
        w.int32(self.timeout_ms)
        w.boolean(self.validate_only)
        return w.getvalue()


# One topic's outcome (Kafka's CreatePartitionsTopicResult has CreatableTopicResult's fields);
# `error_message` is null on success.
CreatePartitionsTopicResult = CreatableTopicResult


@dataclass(frozen=True, slots=True)
class CreatePartitionsResponse:
    results: tuple[CreatePartitionsTopicResult, ...]
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.CREATE_PARTITIONS, version)
        w = Writer()
        w.int32(self.throttle_time_ms)
        _write_results(w, self.results, messages=True)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> CreatePartitionsResponse:
        check_decode_version(ApiKey.CREATE_PARTITIONS, version)
        reader = as_reader(source)
        throttle_time_ms = reader.int32("throttle_time_ms")
        return cls(reader.array(_result_reader(True), "results"), throttle_time_ms)
