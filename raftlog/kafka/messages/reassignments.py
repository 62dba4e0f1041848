"""AlterPartitionReassignments (API key 45), versions 0-1, and ListPartitionReassignments (46),
version 0: an admin client moves a partition's replicas to other brokers and lists the moves
under way (KIP-455: kafka-reassign-partitions, AdminClient.alterPartitionReassignments /
listPartitionReassignments).

Both are flexible from v0 (Kafka never defined another form): compact strings and arrays
(uvarint length + 1, 0 for null) and tagged fields (a uvarint count, then per field a uvarint
tag, a uvarint size and the bytes) after every structure and at the end of the body. We write
no tagged fields (one 0 byte each) and skip any a client sends (raftlog/kafka/wire.py).

Byte by byte, big-endian (Kafka's AlterPartitionReassignmentsRequest.json and
AlterPartitionReassignmentsResponse.json, ListPartitionReassignmentsRequest.json and
ListPartitionReassignmentsResponse.json):

AlterPartitionReassignments request:
  timeout_ms                         int32  how long the broker may take (default 60000)
  allow_replication_factor_change    bool   v1+ (KIP-860); false: a move that changes a
                                            partition's replica count is refused
  topics                             compact array of:
    name          compact_string
    partitions    compact array of:
      partition_index  int32
      replicas         compact nullable array of int32  the target replicas, the first the
                       preferred leader; null: cancel the move under way
      tagged fields
    tagged fields
  tagged fields

AlterPartitionReassignments response:
  throttle_time_ms                   int32
  allow_replication_factor_change    bool   v1+; the request's, echoed
  error_code                         int16  the whole request's error (0: see each partition)
  error_message                      compact_nullable_string
  responses                          compact array of:
    name          compact_string
    partitions    compact array of:
      partition_index  int32
      error_code       int16
      error_message    compact_nullable_string  null without an error
      tagged fields
    tagged fields
  tagged fields

ListPartitionReassignments request:
  timeout_ms    int32
  topics        compact nullable array of (null: every partition):
    name               compact_string
    partition_indexes  compact array of int32
    tagged fields
  tagged fields

ListPartitionReassignments response:
  throttle_time_ms  int32
  error_code        int16
  error_message     compact_nullable_string
  topics            compact array of:
    name          compact_string
    partitions    compact array of:
      partition_index    int32
      replicas           compact array of int32  every current replica (joining and leaving)
      adding_replicas    compact array of int32
      removing_replicas  compact array of int32
      tagged fields
    tagged fields
  tagged fields

Fields a version lacks take their defaults when decoded and are left out when encoded (an
allow_replication_factor_change of false encoded at v0 is dropped: Kafka's own client refuses
to send that, so a raftlog caller must not rely on it either).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.common import (
    as_reader,
    check_decode_version,
    check_encode_version,
    read_int32,
)
from raftlog.kafka.wire import Reader, Writer

ALTER_API_KEY = ApiKey.ALTER_PARTITION_REASSIGNMENTS
LIST_API_KEY = ApiKey.LIST_PARTITION_REASSIGNMENTS
TIMEOUT_MS_DEFAULT = 60_000  # Kafka's default for timeout_ms


def _write_int32s(w: Writer, values: Sequence[int]) -> None:
    w.compact_array_length(len(values))
    for value in values:
        w.int32(value)


def _write_nullable_int32s(w: Writer, values: Sequence[int] | None) -> None:
    if values is None:
        w.compact_array_length(None)
    else:
        _write_int32s(w, values)


# -- AlterPartitionReassignments -------------------------------------------------------------


class ReassignablePartition(NamedTuple):
    """One partition to move (replicas: the target) or whose move to cancel (None)."""

    partition_index: int
    replicas: tuple[int, ...] | None = None


class ReassignableTopic(NamedTuple):
    name: str
    partitions: tuple[ReassignablePartition, ...]


def _read_reassignable_partition(r: Reader) -> ReassignablePartition:
    index = r.int32("partition_index")
    replicas = r.compact_nullable_array(read_int32, "replicas")
    r.tagged_fields()
    return ReassignablePartition(index, replicas)


def _read_reassignable_topic(r: Reader) -> ReassignableTopic:
    name = r.compact_string("name")
    partitions = r.compact_array(_read_reassignable_partition, "partitions")
    r.tagged_fields()
    return ReassignableTopic(name, partitions)


@dataclass(frozen=True, slots=True)
class AlterPartitionReassignmentsRequest:
    topics: tuple[ReassignableTopic, ...]
    timeout_ms: int = TIMEOUT_MS_DEFAULT
    allow_replication_factor_change: bool = True  # sent from v1

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> AlterPartitionReassignmentsRequest:
        check_decode_version(ALTER_API_KEY, version)
        reader = as_reader(source)
        timeout_ms = reader.int32("timeout_ms")
        allow = reader.boolean("allow_replication_factor_change") if version >= 1 else True
        topics = reader.compact_array(_read_reassignable_topic, "topics")
        reader.tagged_fields()
        return cls(topics, timeout_ms, allow)

    def encode(self, version: int) -> bytes:
        check_encode_version(ALTER_API_KEY, version)
        w = Writer()
        w.int32(self.timeout_ms)
        if version >= 1:
            w.boolean(self.allow_replication_factor_change)
        w.compact_array_length(len(self.topics))
        for topic in self.topics:
            w.compact_string(topic.name)
            w.compact_array_length(len(topic.partitions))
            for p in topic.partitions:
                w.int32(p.partition_index)
                _write_nullable_int32s(w, p.replicas)
                w.empty_tagged_fields()
            w.empty_tagged_fields()
        w.empty_tagged_fields()
        return w.getvalue()


class ReassignablePartitionResponse(NamedTuple):
    """One partition's outcome: error_code 0 (the move started, or the cancel was done) with a
    null message, or an error."""

    partition_index: int
    error_code: int = 0
    error_message: str | None = None


class ReassignableTopicResponse(NamedTuple):
    name: str
    partitions: tuple[ReassignablePartitionResponse, ...]


def _read_partition_response(r: Reader) -> ReassignablePartitionResponse:
    index, code = r.int32("partition_index"), r.int16("error_code")
    message = r.compact_nullable_string("error_message")
    r.tagged_fields()
    return ReassignablePartitionResponse(index, code, message)


def _read_topic_response(r: Reader) -> ReassignableTopicResponse:
    name = r.compact_string("name")
    partitions = r.compact_array(_read_partition_response, "partitions")
    r.tagged_fields()
    return ReassignableTopicResponse(name, partitions)


@dataclass(frozen=True, slots=True)
class AlterPartitionReassignmentsResponse:
    responses: tuple[ReassignableTopicResponse, ...]
    error_code: int = 0
    error_message: str | None = None
    allow_replication_factor_change: bool = True  # sent from v1
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        check_encode_version(ALTER_API_KEY, version)
        w = Writer()
        w.int32(self.throttle_time_ms)
        if version >= 1:
            w.boolean(self.allow_replication_factor_change)
        w.int16(self.error_code)
        w.compact_nullable_string(self.error_message)
        w.compact_array_length(len(self.responses))
        for topic in self.responses:
            w.compact_string(topic.name)
            w.compact_array_length(len(topic.partitions))
            for p in topic.partitions:
                w.int32(p.partition_index)
                w.int16(p.error_code)
                w.compact_nullable_string(p.error_message)
                w.empty_tagged_fields()
            w.empty_tagged_fields()
        w.empty_tagged_fields()
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> AlterPartitionReassignmentsResponse:
        check_decode_version(ALTER_API_KEY, version)
        reader = as_reader(source)
        throttle_time_ms = reader.int32("throttle_time_ms")
        allow = reader.boolean("allow_replication_factor_change") if version >= 1 else True
        error_code = reader.int16("error_code")
        error_message = reader.compact_nullable_string("error_message")
        responses = reader.compact_array(_read_topic_response, "responses")
        reader.tagged_fields()
        return cls(responses, error_code, error_message, allow, throttle_time_ms)


# -- ListPartitionReassignments --------------------------------------------------------------


class ListPartitionReassignmentsTopics(NamedTuple):
    """The partitions of one topic whose moves to list."""

    name: str
    partition_indexes: tuple[int, ...]


def _read_list_topic(r: Reader) -> ListPartitionReassignmentsTopics:
    name = r.compact_string("name")
    indexes = r.compact_array(read_int32, "partition_indexes")
    r.tagged_fields()
    return ListPartitionReassignmentsTopics(name, indexes)


@dataclass(frozen=True, slots=True)
class ListPartitionReassignmentsRequest:
    topics: tuple[ListPartitionReassignmentsTopics, ...] | None  # None: every partition
    timeout_ms: int = TIMEOUT_MS_DEFAULT

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> ListPartitionReassignmentsRequest:
        check_decode_version(LIST_API_KEY, version)
        reader = as_reader(source)
        timeout_ms = reader.int32("timeout_ms")
        topics = reader.compact_nullable_array(_read_list_topic, "topics")
        reader.tagged_fields()
        return cls(topics, timeout_ms)

    def encode(self, version: int) -> bytes:
        check_encode_version(LIST_API_KEY, version)
        w = Writer()
        w.int32(self.timeout_ms)
        if self.topics is None:
            w.compact_array_length(None)
        else:
            w.compact_array_length(len(self.topics))
            for topic in self.topics:
                w.compact_string(topic.name)
                _write_int32s(w, topic.partition_indexes)
                w.empty_tagged_fields()
        w.empty_tagged_fields()
        return w.getvalue()


class OngoingPartitionReassignment(NamedTuple):
    """A partition with a move under way: every current replica (the target first, then the
    leaving ones), the joining ones and the leaving ones."""

    partition_index: int
    replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


class OngoingTopicReassignment(NamedTuple):
    name: str
    partitions: tuple[OngoingPartitionReassignment, ...]


def _read_ongoing_partition(r: Reader) -> OngoingPartitionReassignment:
    index = r.int32("partition_index")
    replicas = r.compact_array(read_int32, "replicas")
    adding = r.compact_array(read_int32, "adding_replicas")
    removing = r.compact_array(read_int32, "removing_replicas")
    r.tagged_fields()
    return OngoingPartitionReassignment(index, replicas, adding, removing)


def _read_ongoing_topic(r: Reader) -> OngoingTopicReassignment:
    name = r.compact_string("name")
    partitions = r.compact_array(_read_ongoing_partition, "partitions")
    r.tagged_fields()
    return OngoingTopicReassignment(name, partitions)


@dataclass(frozen=True, slots=True)
class ListPartitionReassignmentsResponse:
    topics: tuple[OngoingTopicReassignment, ...]
    error_code: int = 0
    error_message: str | None = None
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        check_encode_version(LIST_API_KEY, version)
        w = Writer()
        w.int32(self.throttle_time_ms)
        w.int16(self.error_code)
        w.compact_nullable_string(self.error_message)
        w.compact_array_length(len(self.topics))
        for topic in self.topics:
            w.compact_string(topic.name)
            w.compact_array_length(len(topic.partitions))
            for p in topic.partitions:
                w.int32(p.partition_index)
                _write_int32s(w, p.replicas)
                _write_int32s(w, p.adding_replicas)
                _write_int32s(w, p.removing_replicas)
                w.empty_tagged_fields()
            w.empty_tagged_fields()
        w.empty_tagged_fields()
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> ListPartitionReassignmentsResponse:
        check_decode_version(LIST_API_KEY, version)
        reader = as_reader(source)
        throttle_time_ms = reader.int32("throttle_time_ms")
        error_code = reader.int16("error_code")
        error_message = reader.compact_nullable_string("error_message")
        topics = reader.compact_array(_read_ongoing_topic, "topics")
        reader.tagged_fields()
        return cls(topics, error_code, error_message, throttle_time_ms)
