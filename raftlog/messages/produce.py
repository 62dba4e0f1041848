"""Produce (API 5): the request a producer sends with record batches, and the leader's answer.

Request body::

    {"acks": 0 | 1 | -1, "timeout_ms": int, "topics": [[topic, [[partition, nbytes], ...]], ...]}

and the payload: each partition's `nbytes` of whole record batches back to back, in body
order. Response body (none at all for acks=0)::

    {"topics": [[topic, [[partition, error, base_offset, log_start_offset, message], ...]], ...]}

The producer's one-batch requests do not go through `ProduceRequest`: their header is
pre-encoded once per partition (`protocol.ProduceTemplate`, the same layout with fixed-width
integers), since building it per request is the send path's largest cost.

Rules: see raftlog/messages/__init__.py. The broker decodes a request per Produce (tens of
thousands a second), so decoding builds the request and one tuple per partition, nothing
else, and a response body is its results as they are (`ProduceResponse.body_of`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from raftlog.topics import TopicPartition

# What a request that leaves them out gets (Kafka's defaults).
DEFAULT_ACKS = 1
DEFAULT_TIMEOUT_MS = 30_000


class ProducePartition(NamedTuple):
    """One partition of a Produce request: its `nbytes` of batches are in the payload.

    A NamedTuple, not a dataclass, as ProducePartitionResult is (see there)."""

    partition: int
    nbytes: int


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """A Produce request body; `topics` in payload order. `acks` and `timeout_ms` are as the
    client sent them: their ranges are the handler's to check."""

    topics: tuple[tuple[str, tuple[ProducePartition, ...]], ...]
    acks: int = DEFAULT_ACKS
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    def partitions(self) -> Iterator[tuple[str, ProducePartition]]:
        """(topic, partition entry) in body (and payload) order."""
        for topic, parts in self.topics:
            for p in parts:
                yield topic, p

    def topic_names(self) -> Iterator[str]:
        return (topic for topic, _ in self.topics)

    def sizes(self) -> list[int]:
        """Each partition's payload bytes, in payload order."""
        return [p.nbytes for _, parts in self.topics for p in parts]

    def to_body(self) -> dict[str, Any]:
        return {
            "acks": self.acks,
            "timeout_ms": self.timeout_ms,
            "topics": [[t, [[p.partition, p.nbytes] for p in ps]] for t, ps in self.topics],
        }

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> ProduceRequest:
        """A request from a body that passed `protocol.check_request_body`."""
        wire = body["topics"]
        # A checked entry is [partition, nbytes]: its tuple is made from it as it is.
        new, entry = _tuple_new, ProducePartition
        if len(wire) == 1 and len(wire[0][1]) == 1:  # the producer's usual request
            ((topic, (only,)),) = wire
            topics: tuple[tuple[str, tuple[ProducePartition, ...]], ...] = (
                (topic, (new(entry, only),)),
            )
        else:
            topics = tuple((topic, tuple([new(entry, p) for p in ps])) for topic, ps in wire)
        return cls(
            topics, body.get("acks", DEFAULT_ACKS), body.get("timeout_ms", DEFAULT_TIMEOUT_MS)
        )


class ProducePartitionResult(NamedTuple):
    """One partition's outcome: `base_offset` is the offset of its first record (-1 on an
    error, or for acks=0), `log_start_offset` the partition's log start after the append.

    A NamedTuple rather than a frozen dataclass (the one exception in raftlog/messages/, with
    ProducePartition): immutable all the same, but the broker makes one per partition of every
    Produce and the producer reads one per response, and a tuple is its own wire form (msgpack
    packs it as the array it is) where a dataclass costs a constructor three times as slow
    plus a list per entry (bench.produce_path_bench measured the difference)."""

    partition: int
    error: int = 0
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None

    @classmethod
    def appended(
        cls, partition: int, base_offset: int, log_start_offset: int
    ) -> ProducePartitionResult:
        """A success (what the broker makes per partition of every request): the same as
        `cls(partition, 0, base_offset, log_start_offset)`, at half the cost."""
        return _tuple_new(cls, (partition, 0, base_offset, log_start_offset, None))

    def to_wire(self) -> list[Any]:
        return list(self)

    @classmethod
    def from_wire(cls, entry: list[Any]) -> ProducePartitionResult:
        return _tuple_new(cls, entry if len(entry) == 5 else entry[:5])


_tuple_new = tuple.__new__


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    """A Produce response body: per topic, its partitions' results in request order."""

    topics: tuple[tuple[str, tuple[ProducePartitionResult, ...]], ...]

    def results(self) -> Iterator[tuple[TopicPartition, ProducePartitionResult]]:
        for topic, parts in self.topics:
            for r in parts:
                yield TopicPartition(topic, r.partition), r

    @staticmethod
    def body_of(topics: list[tuple[str, list[ProducePartitionResult]]]) -> dict[str, Any]:
        """The body of a response with these results, without building the response or
        copying them (the broker's per-request path): the (topic, results) pairs and the
        results are tuples, which msgpack packs as the arrays `to_body` writes (the same
        bytes). The body holds `topics` itself: not to be changed afterwards."""
        return {"topics": topics}

    def to_body(self) -> dict[str, Any]:
        return {"topics": [[t, [r.to_wire() for r in rs]] for t, rs in self.topics]}

    @staticmethod
    def only_result(body: dict[str, Any]) -> tuple[str, ProducePartitionResult]:
        """The topic and result of a response of one partition (the answer to a one-batch
        request), without building the response; ValueError if it has more or fewer."""
        ((topic, (entry,)),) = body["topics"]
        return topic, ProducePartitionResult.from_wire(entry)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> ProduceResponse:
        from_wire = ProducePartitionResult.from_wire
        return cls(
            tuple((topic, tuple([from_wire(r) for r in parts])) for topic, parts in body["topics"])
        )


__all__ = [
    "DEFAULT_ACKS",
    "DEFAULT_TIMEOUT_MS",
    "ProducePartition",
    "ProducePartitionResult",
    "ProduceRequest",
    "ProduceResponse",
]
