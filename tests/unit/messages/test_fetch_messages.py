"""Fetch's typed messages: the bodies they write are the wire layout docs/PROTOCOL.md gives
(the layout every raftlog broker and client of earlier commits speaks), and decoding a body
gives back the message."""

from __future__ import annotations

import msgpack

from raftlog import protocol
from raftlog.messages.fetch import (
    FetchPartition,
    FetchPartitionResult,
    FetchRequest,
    FetchResponse,
)
from raftlog.topics import TopicPartition


def test_a_consumers_request_is_the_documented_layout_and_round_trips() -> None:
    req = FetchRequest.of(
        {
            TopicPartition("a", 0): FetchPartition(0, 10, 1024, 3),
            TopicPartition("b", 1): FetchPartition(1, 0, 2048),
            TopicPartition("a", 2): FetchPartition(2, 7, 1024, 3),
        },
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=4096,
    )
    body = req.to_body()
    assert body == {
        "replica_id": -1,
        "max_wait_ms": 100,
        "min_bytes": 1,
        "max_bytes": 4096,
        "topics": [["a", [[0, 10, 1024, 3], [2, 7, 1024, 3]]], ["b", [[1, 0, 2048]]]],
    }
    assert list(body) == ["replica_id", "max_wait_ms", "min_bytes", "max_bytes", "topics"]
    protocol.check_request_body(protocol.ApiKey.FETCH, body)
    again = FetchRequest.from_body(msgpack.unpackb(msgpack.packb(body)))
    assert again == req
    assert [tp for tp, _ in again.partitions()] == [
        TopicPartition("a", 0),
        TopicPartition("a", 2),
        TopicPartition("b", 1),
    ]
    p = again.topics[1][1][0]
    assert (p.leader_epoch_or_default, p.last_fetched_epoch_or_default) == (-1, -1)
    assert p.durable_offset_or_default == 0 and not p.fully_stated


def test_a_followers_session_request_states_every_field() -> None:
    req = FetchRequest.of(
        {TopicPartition("t", 0): FetchPartition(0, 5, 1 << 20, 2, 1, 4)},
        replica_id=3,
        replica_epoch=17,
        max_wait_ms=500,
        max_bytes=10 << 20,
        session_id=9,
        session_epoch=4,
        forgotten=(("u", (1, 2)),),
    )
    body = req.to_body()
    assert body == {
        "replica_id": 3,
        "replica_epoch": 17,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 10 << 20,
        "topics": [["t", [[0, 5, 1 << 20, 2, 1, 4]]]],
        "session_id": 9,
        "session_epoch": 4,
        "forgotten": [["u", [1, 2]]],
    }
    protocol.check_request_body(protocol.ApiKey.FETCH, body)
    again = FetchRequest.from_body(body)
    assert again == req and again.is_follower
    assert list(again.forgotten_partitions()) == [TopicPartition("u", 1), TopicPartition("u", 2)]
    ((_, p),) = again.partitions()
    assert p.fully_stated and p.durable_offset_or_default == 4


def test_a_partition_entry_keeps_what_was_stated() -> None:
    # Only an epoch stated: four fields on the wire, the rest absent again after decoding.
    assert FetchPartition(0, 1, 2, 5).to_wire() == [0, 1, 2, 5]
    assert FetchPartition.from_wire([0, 1, 2, 5]) == FetchPartition(0, 1, 2, 5)
    # A later field stated fills the ones before it with "not stated" (-1).
    assert FetchPartition(0, 1, 2, None, None, 8).to_wire() == [0, 1, 2, -1, -1, 8]


def test_a_response_is_the_documented_layout_and_round_trips() -> None:
    resp = FetchResponse(
        (
            (
                "t",
                (
                    FetchPartitionResult(0, 0, 10, 0, 300),
                    FetchPartitionResult(1, 1, -1, 4, 0, "offset out of range"),
                    FetchPartitionResult(2, 0, 9, 0, diverging=(3, 7)),
                ),
            ),
        ),
        session_id=12,
    )
    body = resp.to_body()
    assert body == {
        "topics": [
            [
                "t",
                [
                    [0, 0, 10, 0, 300, None, None],
                    [1, 1, -1, 4, 0, "offset out of range", None],
                    [2, 0, 9, 0, 0, None, [3, 7]],
                ],
            ]
        ],
        "session_id": 12,
    }
    again = FetchResponse.from_body(msgpack.unpackb(msgpack.packb(body)))
    assert again == resp
    assert [tp for tp, _ in again.results()] == [TopicPartition("t", i) for i in range(3)]
    # A consumer's answer has no session id; a shorter entry (no divergence field) decodes.
    plain = FetchResponse.from_body({"topics": [["t", [[0, 0, 5, 0, 0, None]]]]})
    assert plain.session_id is None and plain.topics[0][1][0].diverging is None
