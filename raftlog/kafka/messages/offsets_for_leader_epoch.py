"""OffsetForLeaderEpoch (API key 23), versions 0-3: where did a leader epoch end?

A consumer validating its position after a leader change (KIP-320) names, per partition, the
epoch of the last record it read; the leader answers with the largest epoch it knows at or
below it and the offset where that epoch ended (its log end offset for its latest epoch).

Byte by byte, big-endian (Kafka's OffsetForLeaderEpochRequest.json and ...Response.json):

Request:
  replica_id  int32  v3+; -1 a consumer, -2 (the default before v3) a debugging tool,
                     >= 0 a follower
  topics      array of:
    topic       string
    partitions  array of:
      partition             int32
      current_leader_epoch  int32  v2+; -1 (the default) skips fencing (KIP-320)
      leader_epoch          int32  the epoch to look up

Response:
  throttle_time_ms  int32  v2+
  topics            array of:
    topic       string
    partitions  array of:
      error_code    int16
      partition     int32
      leader_epoch  int32  v1+; -1 when unknown
      end_offset    int64  -1 when unknown

Fields a version lacks take their defaults when decoded and are left out when encoded. The
topics are (topic, partitions) pairs, as in the other messages (common.read_topics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.common import (
    as_reader,
    check_decode_version,
    check_encode_version,
    read_topics,
    write_topics,
)
from raftlog.kafka.wire import Reader, Writer

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH

CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2  # replica_id's default, before v3
NO_EPOCH = -1  # current_leader_epoch: do not fence; an answer's leader_epoch: unknown
UNDEFINED_OFFSET = -1


class OffsetForLeaderPartition(NamedTuple):
    """One partition to look up: where did `leader_epoch` end?"""

    partition: int
    leader_epoch: int
    current_leader_epoch: int = NO_EPOCH  # sent from v2


@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpochRequest:
    topics: tuple[tuple[str, tuple[OffsetForLeaderPartition, ...]], ...]
    replica_id: int = DEBUGGING_REPLICA_ID  # sent from v3

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> OffsetForLeaderEpochRequest:
        check_decode_version(API_KEY, version)
        reader = as_reader(source)
        replica_id = reader.int32("replica_id") if version >= 3 else DEBUGGING_REPLICA_ID

        def partition(r: Reader) -> OffsetForLeaderPartition:
            index = r.int32("partition")
            current = r.int32("current_leader_epoch") if version >= 2 else NO_EPOCH
            return OffsetForLeaderPartition(index, r.int32("leader_epoch"), current)

        return cls(read_topics(reader, partition, "topic"), replica_id)

    def encode(self, version: int) -> bytes:
        check_encode_version(API_KEY, version)
        w = Writer()
        if version >= 3:
            w.int32(self.replica_id)

        def partition(w: Writer, p: OffsetForLeaderPartition) -> None:
            w.int32(p.partition)
            if version >= 2:
                w.int32(p.current_leader_epoch)
            w.int32(p.leader_epoch)

        write_topics(w, self.topics, partition)
        return w.getvalue()


class EpochEndOffset(NamedTuple):
    """One partition's answer. As the broker sends it, an error comes with leader_epoch and
    end_offset -1, and so does an epoch older than every epoch the leader's log has."""

    partition: int
    error_code: int = 0
    leader_epoch: int = NO_EPOCH  # sent from v1
    end_offset: int = UNDEFINED_OFFSET


@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpochResponse:
    topics: tuple[tuple[str, tuple[EpochEndOffset, ...]], ...]
    throttle_time_ms: int = 0  # sent from v2

    def encode(self, version: int) -> bytes:
        check_encode_version(API_KEY, version)
        w = Writer()
        if version >= 2:
            w.int32(self.throttle_time_ms)

        def partition(w: Writer, p: EpochEndOffset) -> None:
            w.int16(p.error_code)
            w.int32(p.partition)
            if version >= 1:
                w.int32(p.leader_epoch)
            w.int64(p.end_offset)

        write_topics(w, self.topics, partition)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> OffsetForLeaderEpochResponse:
        check_decode_version(API_KEY, version)
        reader = as_reader(source)
        throttle_time_ms = reader.int32("throttle_time_ms") if version >= 2 else 0

        def partition(r: Reader) -> EpochEndOffset:
            error_code, index = r.int16("error_code"), r.int32("partition")
            epoch = r.int32("leader_epoch") if version >= 1 else NO_EPOCH
            return EpochEndOffset(index, error_code, epoch, r.int64("end_offset"))

        return cls(read_topics(reader, partition, "topic"), throttle_time_ms)
