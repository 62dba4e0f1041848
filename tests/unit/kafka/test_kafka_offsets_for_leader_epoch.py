"""OffsetForLeaderEpoch: the messages match kafka-python's codecs byte for byte at v0-3, the
fields a version lacks decode to their defaults, and the handler answers per partition from
the leader's epoch lookup or with the error of that partition alone."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.offsets import OffsetForLeaderEpochRequest as KpRequest
from kafka.protocol.consumer.offsets import OffsetForLeaderEpochResponse as KpResponse
from kafka.protocol.old import offset_for_leader_epoch as old
from kp_oracle import (
    INT16,
    INT32,
    INT64,
    TEXT,
    assert_matches_kafka_python,
    small_tuples,
)

from raftlog.errors import NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.handlers.offsets_for_leader_epoch import handle_offset_for_leader_epoch
from raftlog.kafka.messages.offsets_for_leader_epoch import (
    EpochEndOffset,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderPartition,
)
from raftlog.replication.core import PartitionConfig, PartitionCore
from raftlog.replication.manager import ReplicaManager
from raftlog.storage.epoch_cache import LeaderEpochCache
from raftlog.topics import TopicPartition

VERSIONS = (0, 1, 2, 3)


def _requests(version: int) -> st.SearchStrategy[OffsetForLeaderEpochRequest]:
    """Requests whose fields absent at `version` hold their defaults (so they round-trip)."""
    current = INT32 if version >= 2 else st.just(-1)
    replica = INT32 if version >= 3 else st.just(-2)
    partition = st.builds(OffsetForLeaderPartition, INT32, INT32, current)
    topic = st.tuples(TEXT, small_tuples(partition))
    return st.builds(OffsetForLeaderEpochRequest, small_tuples(topic), replica)


def _responses(version: int) -> st.SearchStrategy[OffsetForLeaderEpochResponse]:
    epoch = INT32 if version >= 1 else st.just(-1)
    throttle = INT32 if version >= 2 else st.just(0)
    partition = st.builds(EpochEndOffset, INT32, INT16, epoch, INT64)
    topic = st.tuples(TEXT, small_tuples(partition))
    return st.builds(OffsetForLeaderEpochResponse, small_tuples(topic), throttle)


@pytest.mark.parametrize("version", VERSIONS)
@given(data=st.data())
def test_request_matches_kafka_python(version: int, data: st.DataObject) -> None:
    request = data.draw(_requests(version))
    assert_matches_kafka_python(request, version, KpRequest, old, "OffsetForLeaderEpochRequest")


@pytest.mark.parametrize("version", VERSIONS)
@given(data=st.data())
def test_response_matches_kafka_python(version: int, data: st.DataObject) -> None:
    response = data.draw(_responses(version))
    assert_matches_kafka_python(response, version, KpResponse, old, "OffsetForLeaderEpochResponse")


def test_fields_a_version_lacks_are_left_out_and_decode_to_defaults() -> None:
    request = OffsetForLeaderEpochRequest(
        (("t", (OffsetForLeaderPartition(0, 5, 7),)),), replica_id=-1
    )
    v0 = request.encode(0)
    assert v0 == bytes.fromhex("00000001 0001 74 00000001 00000000 00000005")
    decoded = OffsetForLeaderEpochRequest.decode(v0, 0)
    assert decoded.replica_id == -2
    assert decoded.topics == (("t", (OffsetForLeaderPartition(0, 5, -1),)),)
    assert request.encode(3) == bytes.fromhex(
        "ffffffff 00000001 0001 74 00000001 00000000 00000007 00000005"
    )


class _Log:
    """A leader's log as the core and the handler see it, over a real epoch cache: epoch 1
    from offset 0, 2 from 50, 4 from 80; the log ends at 120."""

    log_start_offset = 0
    log_end_offset = 120

    def __init__(self) -> None:
        self.cache = LeaderEpochCache("unused", [(1, 0), (2, 50), (4, 80)])

    @property
    def latest_epoch(self) -> int:
        return self.cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.cache.end_offset_for_epoch(epoch, self.log_end_offset)


class _Leader:
    """A partition led here at leader epoch 4, with the real replication core."""

    def __init__(self) -> None:
        self.log = _Log()
        self.core = PartitionCore(1, "t-0", self.log)
        self.core.become_leader(4, 0, [1], [1], {}, PartitionConfig(), 0)


class _Ctx:
    """What the handler uses of a HandlerContext: leader_partition and replicas (whose
    consumer_fetch is the ReplicaManager's own, a static method)."""

    replicas = ReplicaManager

    def leader_partition(self, tp: TopicPartition) -> Any:
        if tp.topic == "gone":
            raise UnknownTopicOrPartitionError("unknown")
        if tp.partition == 1:
            raise NotLeaderOrFollowerError("not here")
        return _Leader()


def test_each_partition_gets_its_epoch_end_or_its_own_error() -> None:
    request = OffsetForLeaderEpochRequest(
        (
            (
                "t",
                (
                    OffsetForLeaderPartition(0, 4, 4),  # the latest epoch: the log end
                    OffsetForLeaderPartition(1, 4, 4),  # led elsewhere
                    OffsetForLeaderPartition(2, 3, -1),  # no epoch 3: epoch 2, to 80; unfenced
                    OffsetForLeaderPartition(3, 2, 3),  # stale metadata
                    OffsetForLeaderPartition(4, 2, 5),  # metadata ahead of this leader
                    OffsetForLeaderPartition(5, 0, 4),  # older than every epoch
                    OffsetForLeaderPartition(6, 1, 4),  # epoch 1 ends where 2 starts
                ),
            ),
            ("gone", (OffsetForLeaderPartition(0, 1, -1),)),
        ),
        replica_id=-1,
    )
    answer = handle_offset_for_leader_epoch(_Ctx(), request, 3, None)  # type: ignore[arg-type]
    assert answer == OffsetForLeaderEpochResponse(
        (
            (
                "t",
                (
                    EpochEndOffset(0, 0, 4, 120),
                    EpochEndOffset(1, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1),
                    EpochEndOffset(2, 0, 2, 80),
                    EpochEndOffset(3, ErrorCode.FENCED_LEADER_EPOCH, -1, -1),
                    EpochEndOffset(4, ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1),
                    EpochEndOffset(5, 0, -1, -1),
                    EpochEndOffset(6, 0, 1, 50),
                ),
            ),
            ("gone", (EpochEndOffset(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),)),
        )
    )
