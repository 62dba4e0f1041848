"""Fetch (API 6): the request consumers and followers send, and the leader's answer.

Request body::

    {"replica_id": -1 (a consumer) or the follower's node id, "replica_epoch": int,
     "max_wait_ms": int, "min_bytes": int, "max_bytes": int,
     "topics": [[topic, [[partition, fetch_offset, partition_max_bytes,
                          current_leader_epoch, last_fetched_epoch, durable_offset], ...]], ...],
     "session_id": int, "session_epoch": int, "forgotten": [[topic, [partition, ...]], ...]}

A partition entry's last three fields are optional (absent: not stated; followers state all
three); `replica_epoch` and the session fields are a follower's (raftlog/replication/
fetch_session.py), `forgotten` only when it has partitions to drop from its session.

Response body ``{"topics": [[topic, [[partition, error, high_watermark, log_start_offset,
nbytes, message, diverging], ...]], ...], "session_id": int}`` (the session id only in a
session) and the payload: each partition's whole batches back to back, in body order.
`diverging` is null or [epoch, end_offset].

Rules: see raftlog/messages/__init__.py. `FetchPartition` keeps the optional fields as None
when not stated, so a body re-encodes to the bytes it came from; the `*_or_default`
accessors give what an absent field means.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from raftlog.topics import TopicPartition

NOT_STATED = -1  # an epoch or offset field that was absent on the wire means -1
DEFAULT_MAX_WAIT_MS = 500
DEFAULT_MIN_BYTES = 1
DEFAULT_MAX_BYTES = 50 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """One partition of a Fetch request."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int | None = None  # KIP-320: the leader epoch the fetcher knows
    last_fetched_epoch: int | None = None  # a follower's: the epoch of its last record
    durable_offset: int | None = None  # a follower's: its log end on disk (fsync policy)

    @property
    def leader_epoch_or_default(self) -> int:
        e = self.current_leader_epoch
        return NOT_STATED if e is None else e

    @property
    def last_fetched_epoch_or_default(self) -> int:
        e = self.last_fetched_epoch
        return NOT_STATED if e is None else e

    @property
    def durable_offset_or_default(self) -> int:
        """Absent: everything fetched so far counts as durable."""
        d = self.durable_offset
        return self.fetch_offset if d is None else d

    @property
    def fully_stated(self) -> bool:
        """All six fields were given (a follower's entry in a fetch session must be)."""
        return self.durable_offset is not None

    def to_wire(self) -> list[int]:
        out = [self.partition, self.fetch_offset, self.partition_max_bytes]
        optional = (self.current_leader_epoch, self.last_fetched_epoch, self.durable_offset)
        stated = 3
        while stated and optional[stated - 1] is None:
            stated -= 1
        out.extend(NOT_STATED if v is None else v for v in optional[:stated])
        return out

    @classmethod
    def from_wire(cls, entry: list[int]) -> FetchPartition:
        return cls(*entry[:6])


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A Fetch request: `topics` in the order the fetcher wants them answered."""

    topics: tuple[tuple[str, tuple[FetchPartition, ...]], ...]
    replica_id: int = -1
    replica_epoch: int | None = None
    max_wait_ms: int = DEFAULT_MAX_WAIT_MS
    min_bytes: int = DEFAULT_MIN_BYTES
    max_bytes: int = DEFAULT_MAX_BYTES
    session_id: int | None = None
    session_epoch: int | None = None
    forgotten: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @classmethod
    def of(
        cls, partitions: dict[TopicPartition, FetchPartition] | list[tuple[str, FetchPartition]],
        **fields: Any,
    ) -> FetchRequest:  # fmt: skip
        """A request of these partitions grouped by topic (first appearance order)."""
        items = (
            ((tp.topic, p) for tp, p in partitions.items())
            if isinstance(partitions, dict)
            else iter(partitions)
        )
        by_topic: dict[str, list[FetchPartition]] = {}
        for topic, p in items:
            by_topic.setdefault(topic, []).append(p)
        return cls(tuple((t, tuple(ps)) for t, ps in by_topic.items()), **fields)

    @property
    def is_follower(self) -> bool:
        return self.replica_id >= 0

    def partitions(self) -> Iterator[tuple[TopicPartition, FetchPartition]]:
        for topic, parts in self.topics:
            for p in parts:
                yield TopicPartition(topic, p.partition), p

    def forgotten_partitions(self) -> Iterator[TopicPartition]:
        for topic, partitions in self.forgotten:
            for partition in partitions:
                yield TopicPartition(topic, partition)

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"replica_id": self.replica_id}
        if self.replica_epoch is not None:
            body["replica_epoch"] = self.replica_epoch
        body["max_wait_ms"] = self.max_wait_ms
        body["min_bytes"] = self.min_bytes
        body["max_bytes"] = self.max_bytes
        body["topics"] = [[t, [p.to_wire() for p in ps]] for t, ps in self.topics]
        if self.session_epoch is not None:
            body["session_id"] = self.session_id if self.session_id is not None else 0
            body["session_epoch"] = self.session_epoch
        if self.forgotten:
            body["forgotten"] = [[t, list(ps)] for t, ps in self.forgotten]
        return body

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> FetchRequest:
        """A request from a body that passed `protocol.check_request_body`."""
        from_wire = FetchPartition.from_wire
        return cls(
            topics=tuple(
                (topic, tuple(from_wire(p) for p in parts)) for topic, parts in body["topics"]
            ),
            replica_id=body.get("replica_id", -1),
            replica_epoch=body.get("replica_epoch"),
            max_wait_ms=body.get("max_wait_ms", DEFAULT_MAX_WAIT_MS),
            min_bytes=body.get("min_bytes", DEFAULT_MIN_BYTES),
            max_bytes=body.get("max_bytes", DEFAULT_MAX_BYTES),
            session_id=body.get("session_id"),
            session_epoch=body.get("session_epoch"),
            forgotten=tuple((t, tuple(ps)) for t, ps in body.get("forgotten", ())),
        )


@dataclass(frozen=True, slots=True)
class FetchPartitionResult:
    """One partition of a Fetch response; its `nbytes` of batches are in the payload."""

    partition: int
    error: int = 0
    high_watermark: int = -1
    log_start_offset: int = -1
    nbytes: int = 0
    message: str | None = None
    diverging: tuple[int, int] | None = None  # (epoch, end_offset): the follower must truncate

    def to_wire(self) -> list[Any]:
        d = self.diverging
        return [
            self.partition,
            self.error,
            self.high_watermark,
            self.log_start_offset,
            self.nbytes,
            self.message,
            None if d is None else list(d),
        ]

    @classmethod
    def from_wire(cls, entry: list[Any]) -> FetchPartitionResult:
        partition, error, hw, log_start, nbytes, message = entry[:6]
        d = entry[6] if len(entry) > 6 else None
        diverging = None if not d else (d[0], d[1])
        return cls(partition, error, hw, log_start, nbytes, message, diverging)


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """A Fetch response body; its payload holds each partition's `nbytes` in body order."""

    topics: tuple[tuple[str, tuple[FetchPartitionResult, ...]], ...]
    session_id: int | None = None

    def results(self) -> Iterator[tuple[TopicPartition, FetchPartitionResult]]:
        """Every partition's result in body (and payload) order."""
        for topic, parts in self.topics:
            for r in parts:
                yield TopicPartition(topic, r.partition), r

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"topics": [[t, [r.to_wire() for r in rs]] for t, rs in self.topics]}
        if self.session_id is not None:
            body["session_id"] = self.session_id
        return body

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> FetchResponse:
        from_wire = FetchPartitionResult.from_wire
        return cls(
            tuple((topic, tuple(from_wire(r) for r in parts)) for topic, parts in body["topics"]),
            body.get("session_id"),
        )


__all__ = [
    "FetchPartition",
    "FetchPartitionResult",
    "FetchRequest",
    "FetchResponse",
]
