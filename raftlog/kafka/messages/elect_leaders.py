"""ElectLeaders (API key 43), versions 0-1: an admin client asks for leader elections
(kafka-leader-election, AdminClient.electLeaders / elect_leaders).

Byte by byte, big-endian (Kafka's ElectLeadersRequest.json and ElectLeadersResponse.json; v2 is
the first flexible version):

Request:
  election_type     int8  v1+; 0 preferred (the default before v1), 1 unclean (KIP-460)
  topic_partitions  nullable array of (null: every partition):
    topic       string
    partitions  array of int32
  timeout_ms        int32  how long the broker may wait for the elections (default 60000)

Response:
  throttle_time_ms          int32
  error_code                int16  v1+; the whole request's error (0: see each partition)
  replica_election_results  array of:
    topic             string
    partition_result  array of:
      partition_id   int32
      error_code     int16
      error_message  nullable_string  null without an error

Fields a version lacks take their defaults when decoded and are left out when encoded (an
unclean election_type or a top-level error_code encoded at v0 is dropped). election_type is
kept as the int8 sent, known or not: refusing an unknown type is the handler's rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.common import (
    as_reader,
    check_decode_version,
    check_encode_version,
    read_int32,
    read_throttle_time,
    read_topics,
    write_topics,
)
from raftlog.kafka.wire import Reader, Writer

API_KEY = ApiKey.ELECT_LEADERS
TIMEOUT_MS_DEFAULT = 60_000  # Kafka's default for timeout_ms


class ElectionType(IntEnum):
    """election_type's values (Kafka's ElectionType)."""

    PREFERRED = 0
    UNCLEAN = 1


class TopicPartitions(NamedTuple):
    """The partitions of one topic to elect leaders for."""

    topic: str
    partitions: tuple[int, ...]


def _read_topic_partitions(r: Reader) -> TopicPartitions:
    return TopicPartitions(r.string("topic"), r.array(read_int32, "partitions"))


@dataclass(frozen=True, slots=True)
class ElectLeadersRequest:
    topic_partitions: tuple[TopicPartitions, ...] | None  # None: every partition
    timeout_ms: int = TIMEOUT_MS_DEFAULT
    election_type: int = ElectionType.PREFERRED  # sent from v1

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> ElectLeadersRequest:
        check_decode_version(API_KEY, version)
        reader = as_reader(source)
        election_type = reader.int8("election_type") if version >= 1 else ElectionType.PREFERRED
        topics = reader.nullable_array(_read_topic_partitions, "topic_partitions")
        return cls(topics, reader.int32("timeout_ms"), election_type)

    def encode(self, version: int) -> bytes:
        check_encode_version(API_KEY, version)
        w = Writer()
        if version >= 1:
            w.int8(self.election_type)
        if self.topic_partitions is None:
            w.array_length(None)
        else:
            write_topics(w, self.topic_partitions, Writer.int32)
        w.int32(self.timeout_ms)
        return w.getvalue()


class PartitionResult(NamedTuple):
    """One partition's outcome: error_code 0 (elected) with a null message, or an error."""

    partition_id: int
    error_code: int = 0
    error_message: str | None = None


class ReplicaElectionResult(NamedTuple):
    topic: str
    partition_result: tuple[PartitionResult, ...]


def _write_partition_result(w: Writer, p: PartitionResult) -> None:
    w.int32(p.partition_id)
    w.int16(p.error_code)
    w.nullable_string(p.error_message)


def _read_partition_result(r: Reader) -> PartitionResult:
    partition_id, error_code = r.int32("partition_id"), r.int16("error_code")
    return PartitionResult(partition_id, error_code, r.nullable_string("error_message"))


@dataclass(frozen=True, slots=True)
class ElectLeadersResponse:
    replica_election_results: tuple[ReplicaElectionResult, ...]
    error_code: int = 0  # sent from v1
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        check_encode_version(API_KEY, version)
        w = Writer()
        w.int32(self.throttle_time_ms)
        if version >= 1:
            w.int16(self.error_code)
        write_topics(w, self.replica_election_results, _write_partition_result)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> ElectLeadersResponse:
        check_decode_version(API_KEY, version)
        reader = as_reader(source)
        throttle_time_ms = read_throttle_time(reader, version, 0)
        error_code = reader.int16("error_code") if version >= 1 else 0
        results = read_topics(
            reader,
            _read_partition_result,
            name_field="topic",
            field="replica_election_results",
            items_field="partition_result",
        )
        return cls(
            tuple(ReplicaElectionResult(topic, parts) for topic, parts in results),
            error_code,
            throttle_time_ms,
        )
