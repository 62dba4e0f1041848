"""Produce's typed messages: the bodies they write are the wire layout docs/PROTOCOL.md gives
(and `protocol.ProduceTemplate` writes for one partition), and decoding a body gives back the
message."""

from __future__ import annotations

import msgpack
import pytest

from raftlog import protocol
from raftlog.messages.produce import (
    ProducePartition,
    ProducePartitionResult,
    ProduceRequest,
    ProduceResponse,
)
from raftlog.topics import TopicPartition


def test_a_request_is_the_documented_layout_and_round_trips() -> None:
    req = ProduceRequest(
        (
            ("a", (ProducePartition(0, 100), ProducePartition(2, 7))),
            ("b", (ProducePartition(1, 0),)),
        ),
        acks=-1,
        timeout_ms=1500,
    )
    body = req.to_body()
    assert body == {
        "acks": -1,
        "timeout_ms": 1500,
        "topics": [["a", [[0, 100], [2, 7]]], ["b", [[1, 0]]]],
    }
    assert list(body) == ["acks", "timeout_ms", "topics"]
    protocol.check_request_body(protocol.ApiKey.PRODUCE, body)
    again = ProduceRequest.from_body(msgpack.unpackb(msgpack.packb(body)))
    assert again == req
    assert again.sizes() == [100, 7, 0]
    assert list(again.topic_names()) == ["a", "b"]
    assert [(t, p.partition) for t, p in again.partitions()] == [("a", 0), ("a", 2), ("b", 1)]


def test_a_request_is_what_the_producers_template_encodes() -> None:
    template = protocol.ProduceTemplate("me", 1, 30_000, "t", 3)
    prefix = template.frame_prefix(42, 9)
    header = msgpack.unpackb(prefix[8:])
    body = header[4]
    protocol.check_request_body(protocol.ApiKey.PRODUCE, body)
    assert ProduceRequest.from_body(body) == ProduceRequest(
        (("t", (ProducePartition(3, 9),)),), acks=1, timeout_ms=30_000
    )


def test_a_request_without_acks_or_timeout_gets_the_defaults() -> None:
    req = ProduceRequest.from_body({"topics": [["t", [[0, 5]]]]})
    assert (req.acks, req.timeout_ms) == (1, 30_000)


def test_a_response_is_the_documented_layout_and_round_trips() -> None:
    resp = ProduceResponse(
        (
            (
                "t",
                (
                    ProducePartitionResult(0, 0, 10, 0),
                    ProducePartitionResult(1, 17, -1, -1, "not the leader"),
                ),
            ),
        )
    )
    body = resp.to_body()
    assert body == {"topics": [["t", [[0, 0, 10, 0, None], [1, 17, -1, -1, "not the leader"]]]]}
    # The broker's per-request body holds the results themselves: the same bytes.
    fast = ProduceResponse.body_of([("t", list(resp.topics[0][1]))])
    assert msgpack.packb(fast) == msgpack.packb(body)
    assert ProducePartitionResult.appended(0, 10, 0) == ProducePartitionResult(0, 0, 10, 0)
    one = {"topics": [["t", [[0, 0, 10, 0, None]]]]}
    assert ProduceResponse.only_result(one) == ("t", ProducePartitionResult(0, 0, 10, 0))
    with pytest.raises(ValueError):
        ProduceResponse.only_result(body)  # two partitions
    again = ProduceResponse.from_body(msgpack.unpackb(msgpack.packb(body)))
    assert again == resp
    assert [tp for tp, _ in again.results()] == [TopicPartition("t", 0), TopicPartition("t", 1)]
