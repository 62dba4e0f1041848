"""ListOffsets (API 7): a partition's offset at a point in time (earliest, latest, a timestamp).

Request body ``{"topics": [[topic, [[partition, timestamp], ...]], ...]}``: `timestamp` is -2
(earliest: the log start offset), -1 (latest: the high watermark) or a time in ms (the first
offset whose record timestamp is at or after it). Response body
``{"topics": [[topic, [[partition, error, timestamp, offset, message], ...]], ...]}``; `offset`
-1 means no record is that recent.

Rules: see raftlog/messages/__init__.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from raftlog.topics import TopicPartition


@dataclass(frozen=True, slots=True)
class ListOffsetsPartition:
    """One partition asked about, and the point in time (-2, -1 or ms) asked for."""

    partition: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    topics: tuple[tuple[str, tuple[ListOffsetsPartition, ...]], ...]

    @classmethod
    def of(cls, timestamps: Mapping[TopicPartition, int]) -> ListOffsetsRequest:
        """A request for these partitions, grouped by topic (first appearance order)."""
        by_topic: dict[str, list[ListOffsetsPartition]] = {}
        for tp, ts in timestamps.items():
            by_topic.setdefault(tp.topic, []).append(ListOffsetsPartition(tp.partition, ts))
        return cls(tuple((t, tuple(ps)) for t, ps in by_topic.items()))

    def partitions(self) -> Iterator[tuple[TopicPartition, ListOffsetsPartition]]:
        for topic, parts in self.topics:
            for p in parts:
                yield TopicPartition(topic, p.partition), p

    def to_body(self) -> dict[str, Any]:
        return {"topics": [[t, [[p.partition, p.timestamp] for p in ps]] for t, ps in self.topics]}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> ListOffsetsRequest:
        """A request from a body that passed `protocol.check_request_body`."""
        return cls(
            tuple(
                (topic, tuple(ListOffsetsPartition(p, ts) for p, ts in parts))
                for topic, parts in body["topics"]
            )
        )


@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionResult:
    """One partition's answer: the offset found (-1: none), the timestamp of its record when
    a time was asked for (else -1), or an error."""

    partition: int
    error: int = 0
    timestamp: int = -1
    offset: int = -1
    message: str | None = None

    def to_wire(self) -> list[Any]:
        return [self.partition, self.error, self.timestamp, self.offset, self.message]

    @classmethod
    def from_wire(cls, entry: list[Any]) -> ListOffsetsPartitionResult:
        partition, error, timestamp, offset, message = entry[:5]
        return cls(partition, error, timestamp, offset, message)


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    topics: tuple[tuple[str, tuple[ListOffsetsPartitionResult, ...]], ...]

    def results(self) -> Iterator[tuple[TopicPartition, ListOffsetsPartitionResult]]:
        for topic, parts in self.topics:
            for r in parts:
                yield TopicPartition(topic, r.partition), r

    def to_body(self) -> dict[str, Any]:
        return {"topics": [[t, [r.to_wire() for r in rs]] for t, rs in self.topics]}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> ListOffsetsResponse:
        from_wire = ListOffsetsPartitionResult.from_wire
        return cls(
            tuple((topic, tuple(from_wire(r) for r in parts)) for topic, parts in body["topics"])
        )


__all__ = [
    "ListOffsetsPartition",
    "ListOffsetsPartitionResult",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
]
