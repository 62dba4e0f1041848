"""CreateTopics (API key 19), versions 0-4, and DeleteTopics (API key 20), versions 0-3.

Byte by byte, big-endian (Kafka's CreateTopicsRequest.json, CreateTopicsResponse.json,
DeleteTopicsRequest.json, DeleteTopicsResponse.json). Fields a version lacks take their
defaults when decoded and are left out when encoded.

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
"""

from __future__ import annotations

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
                w.array_length(len(a.broker_ids))
                for broker_id in a.broker_ids:
                    w.int32(broker_id)
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


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    topics: tuple[CreatableTopicResult, ...]
    throttle_time_ms: int = 0  # sent from v2

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.CREATE_TOPICS, version)
        w = Writer()
        if version >= 2:
            w.int32(self.throttle_time_ms)
        w.array_length(len(self.topics))
        for t in self.topics:
            w.string(t.name)
            w.int16(t.error_code)
            if version >= 1:
                w.nullable_string(t.error_message)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> CreateTopicsResponse:
        check_decode_version(ApiKey.CREATE_TOPICS, version)
        reader = as_reader(source)
        throttle_time_ms = reader.int32("throttle_time_ms") if version >= 2 else 0

        def result(r: Reader) -> CreatableTopicResult:
            name, error_code = r.string("name"), r.int16("error_code")
            message = r.nullable_string("error_message") if version >= 1 else None
            return CreatableTopicResult(name, error_code, message)

        return cls(reader.array(result, "topics"), throttle_time_ms)


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
