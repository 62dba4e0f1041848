"""ListOffsets (key 2), versions 1-5: the offset for a timestamp (or the earliest, -2, or the
latest, -1) in each partition.

Versions (Kafka's ListOffsetsRequest.json): v1 drops v0's max_num_offsets (one offset per
partition, with its timestamp); the first version raftlog speaks. v2 adds isolation_level to
the request and throttle_time_ms to the response. v3 is v2. v4 adds current_leader_epoch to
each requested partition and leader_epoch to each answer (KIP-320). v5 is v4 (may answer
OFFSET_NOT_AVAILABLE). v6 would be flexible: not spoken.

Body layouts (big-endian; see raftlog.kafka.wire for the primitives):
- Request: int32 replica_id, v2+: int8 isolation_level, array of topics (string name, array
  of partitions (int32 partition, v4+: int32 current_leader_epoch, int64 timestamp)).
- Response: v2+: int32 throttle_time_ms, array of topics (string name, array of partitions
  (int32 partition, int16 error_code, int64 timestamp, int64 offset, v4+: int32
  leader_epoch)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.common import (
    as_reader,
    check_decode_version,
    check_encode_version,
    read_topic_lists,
    read_topics,
    write_topics,
)
from raftlog.kafka.wire import Reader, Writer

EARLIEST_TIMESTAMP = -2  # the log start offset
LATEST_TIMESTAMP = -1  # the high watermark (or last stable offset for read_committed)


class ListOffsetsPartition(NamedTuple):
    """One partition to look up: `timestamp` is a time in ms, or EARLIEST_TIMESTAMP or
    LATEST_TIMESTAMP."""

    partition: int
    current_leader_epoch: int  # -1 below v4, or when the client does not know it
    timestamp: int


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    """A ListOffsets request; isolation_level is 0 (read_uncommitted) below v2."""

    replica_id: int
    isolation_level: int
    topics: tuple[tuple[str, tuple[ListOffsetsPartition, ...]], ...]

    @classmethod
    def decode(cls, source: Reader | bytes | memoryview, version: int) -> ListOffsetsRequest:
        check_decode_version(ApiKey.LIST_OFFSETS, version)
        reader = as_reader(source)
        replica_id = reader.int32("replica_id")
        isolation_level = reader.int8("isolation_level") if version >= 2 else 0

        def partition(r: Reader) -> ListOffsetsPartition:
            index = r.int32("partition")
            leader_epoch = r.int32("current_leader_epoch") if version >= 4 else -1
            return ListOffsetsPartition(index, leader_epoch, r.int64("timestamp"))

        return cls(replica_id, isolation_level, read_topics(reader, partition))

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.LIST_OFFSETS, version)
        w = Writer()
        w.int32(self.replica_id)
        if version >= 2:
            w.int8(self.isolation_level)

        def partition(w: Writer, p: ListOffsetsPartition) -> None:
            w.int32(p.partition)
            if version >= 4:
                w.int32(p.current_leader_epoch)
            w.int64(p.timestamp)

        write_topics(w, self.topics, partition)
        return w.getvalue()


class ListOffsetsPartitionResponse(NamedTuple):
    """One partition's answer: the first `offset` whose record has a timestamp at or after the
    one asked (with that record's `timestamp`, -1 for EARLIEST/LATEST), or -1 on error."""

    partition: int
    error_code: int
    timestamp: int
    offset: int
    leader_epoch: int = -1  # sent from v4


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    """A ListOffsets response; throttle_time_ms is sent from v2 (decoded as 0 below)."""

    throttle_time_ms: int
    topics: list[tuple[str, list[ListOffsetsPartitionResponse]]]

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.LIST_OFFSETS, version)
        w = Writer()
        if version >= 2:
            w.int32(self.throttle_time_ms)

        def partition(w: Writer, p: ListOffsetsPartitionResponse) -> None:
            w.int32(p.partition)
            w.int16(p.error_code)
            w.int64(p.timestamp)
            w.int64(p.offset)
            if version >= 4:
                w.int32(p.leader_epoch)

        write_topics(w, self.topics, partition)
        return w.getvalue()

    @classmethod
    def decode(cls, source: Reader | bytes | memoryview, version: int) -> ListOffsetsResponse:
        check_decode_version(ApiKey.LIST_OFFSETS, version)
        reader = as_reader(source)

        def partition(r: Reader) -> ListOffsetsPartitionResponse:
            index, error_code = r.int32("partition"), r.int16("error_code")
            timestamp, offset = r.int64("timestamp"), r.int64("offset")
            leader_epoch = r.int32("leader_epoch") if version >= 4 else -1
            return ListOffsetsPartitionResponse(index, error_code, timestamp, offset, leader_epoch)

        throttle_time_ms = reader.int32("throttle_time_ms") if version >= 2 else 0
        return cls(throttle_time_ms, read_topic_lists(reader, partition))
