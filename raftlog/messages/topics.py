"""Topic administration: CreateTopics (API 2), DeleteTopics (API 3), DescribeConfigs (API 4),
CreatePartitions (API 20).

CreateTopics: request ``{"topics": [{"name", "partitions", "config": {k: v},
"replication_factor"}, ...], "validate_only": bool}`` (a spec's fields other than `name` may be
left out: the broker's defaults; `validate_only` is sent only when set). DeleteTopics: request
``{"topics": [name, ...]}``. CreatePartitions (API 20): request ``{"topics": [{"name", "count",
"assignments": [[broker, ...], ...] | null}, ...], "validate_only": bool}`` (`count`: the new
total; `assignments`: one replica list per new partition, null or left out: the controller
places them). All three answer ``{"topics": [[name, error, message], ...]}``.

DescribeConfigs: request ``{"topics": [name, ...] | null}`` (null: every topic); response
``{"topics": [{"name", "error", "message", "topic_id", "config", "overrides", "partitions":
[[partition, log_start_offset, log_end_offset, high_watermark, size_bytes, segments,
{replica: log_end_offset}], ...]}, ...]}``; a topic with an error has only its first three
fields. The last partition field is the leader's view of each replica's log end (empty where
the broker does not lead; absent from older brokers).

Rules: see raftlog/messages/__init__.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class NewTopic:
    """One topic to create; None: the field is left out (the broker's default)."""

    name: str
    partitions: int | None = None
    config: dict[str, Any] | None = None
    replication_factor: int | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.partitions is not None:
            out["partitions"] = self.partitions
        if self.config is not None:
            out["config"] = self.config
        if self.replication_factor is not None:
            out["replication_factor"] = self.replication_factor
        return out

    @classmethod
    def from_wire(cls, w: dict[str, Any]) -> NewTopic:
        return cls(w["name"], w.get("partitions"), w.get("config"), w.get("replication_factor"))


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest:
    topics: tuple[NewTopic, ...]
    validate_only: bool = False  # check the specs, create nothing

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"topics": [t.to_wire() for t in self.topics]}
        if self.validate_only:
            body["validate_only"] = True
        return body

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CreateTopicsRequest:
        """A request from a body that passed `protocol.check_request_body`."""
        return cls(
            tuple(NewTopic.from_wire(t) for t in body["topics"]),
            bool(body.get("validate_only", False)),
        )


@dataclass(frozen=True, slots=True)
class TopicResult:
    """One topic's outcome of a CreateTopics or DeleteTopics request."""

    name: str
    error: int = 0
    message: str | None = None

    def to_wire(self) -> list[Any]:
        return [self.name, self.error, self.message]

    @classmethod
    def from_wire(cls, w: list[Any]) -> TopicResult:
        name, error, message = w[:3]
        return cls(name, error, message)


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    topics: tuple[TopicResult, ...]

    def to_body(self) -> dict[str, Any]:
        return {"topics": [t.to_wire() for t in self.topics]}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CreateTopicsResponse:
        return cls(tuple(TopicResult.from_wire(t) for t in body["topics"]))


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Grow topic `name` to `count` partitions; `assignments`: the new partitions' replicas."""

    name: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "count": self.count}
        if self.assignments is not None:
            out["assignments"] = [list(a) for a in self.assignments]
        return out

    @classmethod
    def from_wire(cls, w: dict[str, Any]) -> NewPartitions:
        assignments = w.get("assignments")
        return cls(
            w["name"],
            w["count"],
            None if assignments is None else tuple(tuple(a) for a in assignments),
        )


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    topics: tuple[NewPartitions, ...]
    validate_only: bool = False  # check, grow nothing

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"topics": [t.to_wire() for t in self.topics]}
        if self.validate_only:
            body["validate_only"] = True
        return body

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> CreatePartitionsRequest:
        """A request from a body that passed `protocol.check_request_body`."""
        return cls(
            tuple(NewPartitions.from_wire(t) for t in body["topics"]),
            bool(body.get("validate_only", False)),
        )


# CreatePartitions answers as CreateTopics does: each topic's name, error and message.
CreatePartitionsResponse = CreateTopicsResponse


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest:
    topics: tuple[str, ...]

    def to_body(self) -> dict[str, Any]:
        return {"topics": list(self.topics)}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> DeleteTopicsRequest:
        """A request from a body that passed `protocol.check_request_body`."""
        return cls(tuple(body["topics"]))


@dataclass(frozen=True, slots=True)
class DeleteTopicsResponse:
    topics: tuple[TopicResult, ...]

    def to_body(self) -> dict[str, Any]:
        return {"topics": [t.to_wire() for t in self.topics]}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> DeleteTopicsResponse:
        return cls(tuple(TopicResult.from_wire(t) for t in body["topics"]))


@dataclass(frozen=True, slots=True)
class DescribeConfigsRequest:
    topics: tuple[str, ...] | None = None  # None: every topic

    def to_body(self) -> dict[str, Any]:
        return {"topics": None if self.topics is None else list(self.topics)}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> DescribeConfigsRequest:
        """A request from a body that passed `protocol.check_request_body`."""
        names = body.get("topics")
        return cls(None if names is None else tuple(names))


@dataclass(frozen=True, slots=True)
class PartitionFigures:
    """A partition's log as the answering broker holds it (-1 and 0: it holds none)."""

    partition: int
    log_start_offset: int = -1
    log_end_offset: int = -1
    high_watermark: int = -1
    size_bytes: int = 0
    segments: int = 0
    # Where the broker leads: each replica's log end offset as it knows it ({} elsewhere;
    # None: not stated, an older broker).
    replica_log_end_offsets: dict[int, int] | None = field(default_factory=dict)

    def to_wire(self) -> list[Any]:
        out: list[Any] = [
            self.partition,
            self.log_start_offset,
            self.log_end_offset,
            self.high_watermark,
            self.size_bytes,
            self.segments,
        ]
        if self.replica_log_end_offsets is not None:
            out.append(self.replica_log_end_offsets)
        return out

    @classmethod
    def from_wire(cls, w: list[Any]) -> PartitionFigures:
        leos = {int(n): int(o) for n, o in w[6].items()} if len(w) > 6 else None
        return cls(w[0], w[1], w[2], w[3], w[4], w[5], leos)


@dataclass(frozen=True, slots=True)
class DescribedTopic:
    """One topic of a DescribeConfigs response: its configs and partitions, or (error != 0)
    why there are none."""

    name: str
    error: int = 0
    message: str | None = None
    topic_id: str | None = None
    config: dict[str, Any] = field(default_factory=dict)  # the effective log config
    overrides: dict[str, Any] = field(default_factory=dict)  # the topic's own settings
    partitions: tuple[PartitionFigures, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        if self.error:
            return {"name": self.name, "error": self.error, "message": self.message}
        return {
            "name": self.name,
            "error": self.error,
            "message": self.message,
            "topic_id": self.topic_id,
            "config": self.config,
            "overrides": self.overrides,
            "partitions": [p.to_wire() for p in self.partitions],
        }

    @classmethod
    def from_wire(cls, w: dict[str, Any]) -> DescribedTopic:
        return cls(
            w["name"],
            w["error"],
            w.get("message"),
            w.get("topic_id"),
            w.get("config") or {},
            w.get("overrides") or {},
            tuple(PartitionFigures.from_wire(p) for p in w.get("partitions") or ()),
        )


@dataclass(frozen=True, slots=True)
class DescribeConfigsResponse:
    topics: tuple[DescribedTopic, ...]

    def to_body(self) -> dict[str, Any]:
        return {"topics": [t.to_wire() for t in self.topics]}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> DescribeConfigsResponse:
        return cls(tuple(DescribedTopic.from_wire(t) for t in body["topics"]))


__all__ = [
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResponse",
    "DescribedTopic",
    "NewTopic",
    "PartitionFigures",
    "TopicResult",
]
