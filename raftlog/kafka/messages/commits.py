"""A consumer group's committed offsets: OffsetCommit (API key 8) v2-7 and OffsetFetch (9) v1-5.

Byte by byte, big-endian (Kafka's OffsetCommitRequest.json, OffsetFetchRequest.json and their
responses). Fields a version lacks take their defaults when decoded and are left out when
encoded. Topics are (name, partitions) pairs, as in the other messages (common.read_topics),
named with Kafka's field names (kafka-python's OffsetCommit topics, for one, have a topic_id
field from v10, so a plain pair would not say which field it fills).

OffsetCommit request (v0-v1 are deprecated and not spoken; v3, v4 are v2; v5 drops
retention_time_ms, then a broker setting; v6 adds committed_leader_epoch; v7 adds
group_instance_id):
  group_id                       string
  generation_id_or_member_epoch  int32   -1: a commit from outside the group (an admin tool)
  member_id                      string  "" with generation -1
  group_instance_id              nullable_string  v7+
  retention_time_ms              int64   v2-v4; -1: the broker's retention
  topics                         array of:
    name        string
    partitions  array of:
      partition_index         int32
      committed_offset        int64
      committed_leader_epoch  int32            v6+; -1 unknown
      committed_metadata      nullable_string
OffsetCommit response (v3 adds throttle_time_ms; v4-v7 are v3):
  throttle_time_ms  int32  v3+
  topics            array of:
    name        string
    partitions  array of:
      partition_index  int32
      error_code       int16

OffsetFetch request (v0 read ZooKeeper and is not spoken; v2 lets topics be null, "every
partition the group committed"; v3-v5 are v2):
  group_id  string
  topics    array of (nullable from v2):
    name               string
    partition_indexes  array of int32
OffsetFetch response (v2 adds the top-level error_code; v3 adds throttle_time_ms; v4 is v3;
v5 adds committed_leader_epoch):
  throttle_time_ms  int32  v3+
  topics            array of:
    name        string
    partitions  array of:
      partition_index         int32
      committed_offset        int64            -1: nothing committed
      committed_leader_epoch  int32            v5+; -1 unknown
      metadata                nullable_string
      error_code              int16
  error_code        int16  v2+; a group-level error (before v2 it goes in every partition)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from raftlog.invariants import require
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

NO_GENERATION = -1  # generation_id_or_member_epoch: a commit from outside the group
NO_RETENTION_TIME = -1  # retention_time_ms: the broker's retention
NO_LEADER_EPOCH = -1
NO_OFFSET = -1  # OffsetFetch's committed_offset: nothing committed

# -- OffsetCommit --------------------------------------------------------------------------------


class OffsetCommitRequestPartition(NamedTuple):
    partition_index: int
    committed_offset: int
    committed_metadata: str | None = None
    committed_leader_epoch: int = NO_LEADER_EPOCH  # sent from v6


class OffsetCommitRequestTopic(NamedTuple):
    name: str
    partitions: tuple[OffsetCommitRequestPartition, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id_or_member_epoch: int
    member_id: str
    topics: tuple[OffsetCommitRequestTopic, ...]
    retention_time_ms: int = NO_RETENTION_TIME  # sent in v2-v4
    group_instance_id: str | None = None  # sent from v7

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> OffsetCommitRequest:
        check_decode_version(ApiKey.OFFSET_COMMIT, version)
        reader = as_reader(source)
        group_id = reader.string("group_id")
        generation = reader.int32("generation_id_or_member_epoch")
        member_id = reader.string("member_id")
        instance_id = reader.nullable_string("group_instance_id") if version >= 7 else None
        retention_time_ms = reader.int64("retention_time_ms") if version <= 4 else NO_RETENTION_TIME

        def partition(r: Reader) -> OffsetCommitRequestPartition:
            index, offset = r.int32("partition_index"), r.int64("committed_offset")
            epoch = r.int32("committed_leader_epoch") if version >= 6 else NO_LEADER_EPOCH
            metadata = r.nullable_string("committed_metadata")
            return OffsetCommitRequestPartition(index, offset, metadata, epoch)

        topics = tuple(OffsetCommitRequestTopic(*t) for t in read_topics(reader, partition))
        return cls(group_id, generation, member_id, topics, retention_time_ms, instance_id)

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.OFFSET_COMMIT, version)
        w = Writer()
        w.string(self.group_id)
        w.int32(self.generation_id_or_member_epoch)
        w.string(self.member_id)
        if version >= 7:
            w.nullable_string(self.group_instance_id)
        if version <= 4:
            w.int64(self.retention_time_ms)

        def partition(w: Writer, p: OffsetCommitRequestPartition) -> None:
            w.int32(p.partition_index)
            w.int64(p.committed_offset)
            if version >= 6:
                w.int32(p.committed_leader_epoch)
            w.nullable_string(p.committed_metadata)

        write_topics(w, self.topics, partition)
        return w.getvalue()


class OffsetCommitResponsePartition(NamedTuple):
    partition_index: int
    error_code: int = 0


def _read_commit_result(r: Reader) -> OffsetCommitResponsePartition:
    return OffsetCommitResponsePartition(r.int32("partition_index"), r.int16("error_code"))


def _write_commit_result(w: Writer, p: OffsetCommitResponsePartition) -> None:
    w.int32(p.partition_index)
    w.int16(p.error_code)


class OffsetCommitResponseTopic(NamedTuple):
    name: str
    partitions: tuple[OffsetCommitResponsePartition, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    topics: tuple[OffsetCommitResponseTopic, ...]
    throttle_time_ms: int = 0  # sent from v3

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.OFFSET_COMMIT, version)
        w = Writer()
        if version >= 3:
            w.int32(self.throttle_time_ms)
        write_topics(w, self.topics, _write_commit_result)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> OffsetCommitResponse:
        check_decode_version(ApiKey.OFFSET_COMMIT, version)
        reader = as_reader(source)
        throttle_time_ms = read_throttle_time(reader, version, 3)
        topics = read_topics(reader, _read_commit_result)
        return cls(tuple(OffsetCommitResponseTopic(*t) for t in topics), throttle_time_ms)


# -- OffsetFetch ---------------------------------------------------------------------------------


class OffsetFetchRequestTopic(NamedTuple):
    name: str
    partition_indexes: tuple[int, ...]


def _read_fetch_topic(r: Reader) -> OffsetFetchRequestTopic:
    return OffsetFetchRequestTopic(r.string("name"), r.array(read_int32, "partition_indexes"))


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    """`topics` None (v2+): every partition the group has committed."""

    group_id: str
    topics: tuple[OffsetFetchRequestTopic, ...] | None

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> OffsetFetchRequest:
        check_decode_version(ApiKey.OFFSET_FETCH, version)
        reader = as_reader(source)
        group_id = reader.string("group_id")
        if version >= 2:
            return cls(group_id, reader.nullable_array(_read_fetch_topic, "topics"))
        return cls(group_id, reader.array(_read_fetch_topic, "topics"))

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.OFFSET_FETCH, version)
        require(
            self.topics is not None or version >= 2,
            f"OffsetFetch v{version} cannot ask for all topics (null topics came in v2)",
        )
        w = Writer()
        w.string(self.group_id)
        if self.topics is None:
            w.array_length(None)
        else:
            write_topics(w, self.topics, Writer.int32)
        return w.getvalue()


class OffsetFetchResponsePartition(NamedTuple):
    partition_index: int
    committed_offset: int = NO_OFFSET
    metadata: str | None = None
    error_code: int = 0
    committed_leader_epoch: int = NO_LEADER_EPOCH  # sent from v5


class OffsetFetchResponseTopic(NamedTuple):
    name: str
    partitions: tuple[OffsetFetchResponsePartition, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    topics: tuple[OffsetFetchResponseTopic, ...]
    error_code: int = 0  # sent from v2
    throttle_time_ms: int = 0  # sent from v3

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.OFFSET_FETCH, version)
        w = Writer()
        if version >= 3:
            w.int32(self.throttle_time_ms)

        def partition(w: Writer, p: OffsetFetchResponsePartition) -> None:
            w.int32(p.partition_index)
            w.int64(p.committed_offset)
            if version >= 5:
                w.int32(p.committed_leader_epoch)
            w.nullable_string(p.metadata)
            w.int16(p.error_code)

        write_topics(w, self.topics, partition)
        if version >= 2:
            w.int16(self.error_code)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> OffsetFetchResponse:
        check_decode_version(ApiKey.OFFSET_FETCH, version)
        reader = as_reader(source)
        throttle_time_ms = read_throttle_time(reader, version, 3)

        def partition(r: Reader) -> OffsetFetchResponsePartition:
            index, offset = r.int32("partition_index"), r.int64("committed_offset")
            epoch = r.int32("committed_leader_epoch") if version >= 5 else NO_LEADER_EPOCH
            metadata = r.nullable_string("metadata")
            return OffsetFetchResponsePartition(
                index, offset, metadata, r.int16("error_code"), epoch
            )

        topics = tuple(OffsetFetchResponseTopic(*t) for t in read_topics(reader, partition))
        error_code = reader.int16("error_code") if version >= 2 else 0
        return cls(topics, error_code, throttle_time_ms)
