"""Partition leadership: ElectLeaders (API 21).

ElectLeaders: request ``{"partitions": [[topic, partition], ...] | null}`` (null: every
partition whose preferred leader does not lead); response ``{"partitions": [[topic,
partition, error, message], ...]}``, one per partition asked for (or tried, for null): error 0
when its preferred leader (its first replica) leads now, ElectionNotNeededError (63) when it
led already, PreferredLeaderNotAvailableError (64) when it is not a live in-sync replica,
UnknownTopicOrPartitionError (9).

Rules: see raftlog/messages/__init__.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raftlog.topics import TopicPartition


@dataclass(frozen=True, slots=True)
class ElectLeadersRequest:
    partitions: tuple[TopicPartition, ...] | None = None  # None: every partition

    def to_body(self) -> dict[str, Any]:
        parts = self.partitions
        return {"partitions": None if parts is None else [[tp.topic, tp.partition] for tp in parts]}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> ElectLeadersRequest:
        """A request from a body that passed `protocol.check_request_body`."""
        parts = body.get("partitions")
        return cls(None if parts is None else tuple(TopicPartition(t, p) for t, p in parts))


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """One partition's outcome: error 0 when its preferred leader leads now."""

    tp: TopicPartition
    error: int = 0
    message: str | None = None

    def to_wire(self) -> list[Any]:
        return [self.tp.topic, self.tp.partition, self.error, self.message]

    @classmethod
    def from_wire(cls, w: list[Any]) -> ElectionResult:
        topic, partition, error, message = w[:4]
        return cls(TopicPartition(topic, partition), error, message)


@dataclass(frozen=True, slots=True)
class ElectLeadersResponse:
    partitions: tuple[ElectionResult, ...]

    def to_body(self) -> dict[str, Any]:
        return {"partitions": [r.to_wire() for r in self.partitions]}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> ElectLeadersResponse:
        return cls(tuple(ElectionResult.from_wire(r) for r in body["partitions"]))
