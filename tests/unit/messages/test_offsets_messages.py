"""ListOffsets' typed messages: the documented layout (docs/PROTOCOL.md), and back."""

from __future__ import annotations

import msgpack

from raftlog import protocol
from raftlog.messages.offsets import (
    ListOffsetsPartition,
    ListOffsetsPartitionResult,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from raftlog.topics import TopicPartition


def test_a_request_groups_partitions_by_topic_in_the_documented_layout() -> None:
    req = ListOffsetsRequest.of(
        {TopicPartition("a", 1): -1, TopicPartition("b", 0): -2, TopicPartition("a", 0): 1700}
    )
    body = req.to_body()
    assert body == {"topics": [["a", [[1, -1], [0, 1700]]], ["b", [[0, -2]]]]}
    protocol.check_request_body(protocol.ApiKey.LIST_OFFSETS, body)
    again = ListOffsetsRequest.from_body(msgpack.unpackb(msgpack.packb(body)))
    assert again == req
    assert list(again.partitions()) == [
        (TopicPartition("a", 1), ListOffsetsPartition(1, -1)),
        (TopicPartition("a", 0), ListOffsetsPartition(0, 1700)),
        (TopicPartition("b", 0), ListOffsetsPartition(0, -2)),
    ]


def test_a_response_is_the_documented_layout_and_round_trips() -> None:
    resp = ListOffsetsResponse(
        (
            (
                "a",
                (
                    ListOffsetsPartitionResult(1, offset=42),
                    ListOffsetsPartitionResult(0, 0, 1700, 7),
                    ListOffsetsPartitionResult(2, 10, message="unknown"),
                ),
            ),
        )
    )
    body = resp.to_body()
    assert body == {
        "topics": [["a", [[1, 0, -1, 42, None], [0, 0, 1700, 7, None], [2, 10, -1, -1, "unknown"]]]]
    }
    again = ListOffsetsResponse.from_body(msgpack.unpackb(msgpack.packb(body)))
    assert again == resp
    assert [tp for tp, _ in again.results()] == [TopicPartition("a", i) for i in (1, 0, 2)]
