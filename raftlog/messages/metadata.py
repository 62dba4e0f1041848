"""Cluster metadata: ApiVersions (API 0), Metadata (API 1) and DescribeCluster (API 8).

ApiVersions: request ``{}``; response ``{"apis": [[api_key, min_version, max_version], ...],
"server_version": str, "node_id": int, "request_bytes_max": int}`` (`request_bytes_max` is
absent from brokers older than it: then nothing is refused client-side).

Metadata: request ``{"topics": [name, ...] | null, "allow_auto_create": bool}`` (null: every
topic); response ``{"brokers": [[node_id, host, port, rack], ...], "controller_id": int,
"topics": [{"name", "error", "message", "topic_id", "partitions": [[partition, leader,
leader_epoch, [replicas], [isr], partition_epoch, [elr]], ...], "config": {k: v}}, ...]}``.
Brokers and partitions are the metadata records of raftlog/metadata/model.py, whose wire
forms are built once and shared.

DescribeCluster: request ``{}``; response: the answering node's view of the quorum, every field
named (docs/PROTOCOL.md); its records are maps, kept here as the maps they are.

Rules: see raftlog/messages/__init__.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from raftlog.messages.empty import EmptyBody
from raftlog.metadata.model import BrokerInfo, TopicInfo


@dataclass(frozen=True, slots=True)
class ApiVersionsRequest(EmptyBody):
    """An ApiVersions request: it has no fields."""


@dataclass(frozen=True, slots=True)
class ApiVersion:
    api_key: int
    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class ApiVersionsResponse:
    """The APIs a broker speaks, and the largest frame_length its listener reads (None: not
    stated, a broker older than the field)."""

    apis: tuple[ApiVersion, ...]
    server_version: str
    node_id: int
    request_bytes_max: int | None = None

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apis": [[a.api_key, a.min_version, a.max_version] for a in self.apis],
            "server_version": self.server_version,
            "node_id": self.node_id,
        }
        if self.request_bytes_max is not None:
            body["request_bytes_max"] = self.request_bytes_max
        return body

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> ApiVersionsResponse:
        """Lenient: a field a broker left out reads as unknown (the client then refuses
        nothing), and a limit that is not a positive integer as not stated."""
        limit = body.get("request_bytes_max")
        return cls(
            tuple(ApiVersion(*a[:3]) for a in body.get("apis") or ()),
            str(body.get("server_version", "")),
            int(body.get("node_id", -1)),
            limit if type(limit) is int and limit > 0 else None,
        )


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    """Metadata of these topics (None: every topic); `allow_auto_create` asks the broker to
    create the unknown ones (if it runs with auto_create_topics)."""

    topics: tuple[str, ...] | None = None
    allow_auto_create: bool = False

    def to_body(self) -> dict[str, Any]:
        return {
            "topics": None if self.topics is None else list(self.topics),
            "allow_auto_create": self.allow_auto_create,
        }

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> MetadataRequest:
        """A request from a body that passed `protocol.check_request_body`."""
        names = body.get("topics")
        return cls(
            None if names is None else tuple(names), bool(body.get("allow_auto_create", False))
        )


@dataclass(frozen=True, slots=True)
class MetadataTopic:
    """One topic of a Metadata response: its metadata, or (error != 0) why there is none."""

    name: str
    error: int = 0
    message: str | None = None
    info: TopicInfo | None = None  # None exactly when error != 0

    def to_wire(self) -> dict[str, Any]:
        head = {"name": self.name, "error": self.error, "message": self.message}
        if self.info is None:
            return {**head, "topic_id": None, "partitions": [], "config": {}}
        return {**head, **self.info.to_wire()}

    @classmethod
    def from_wire(cls, w: dict[str, Any]) -> MetadataTopic:
        if w["error"]:
            return cls(w["name"], w["error"], w.get("message"))
        return cls(w["name"], 0, w.get("message"), TopicInfo.from_wire(w))


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    """The brokers (as addressed on the listener asked), the active controller, the topics."""

    brokers: tuple[BrokerInfo, ...]
    controller_id: int
    topics: tuple[MetadataTopic, ...]

    def to_body(self) -> dict[str, Any]:
        return {
            "brokers": [b.to_wire() for b in self.brokers],
            "controller_id": self.controller_id,
            "topics": [t.to_wire() for t in self.topics],
        }

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> MetadataResponse:
        return cls(
            tuple(BrokerInfo.from_wire(b) for b in body["brokers"]),
            body["controller_id"],
            tuple(MetadataTopic.from_wire(t) for t in body["topics"]),
        )


@dataclass(frozen=True, slots=True)
class DescribeClusterRequest(EmptyBody):
    """A DescribeCluster request: it has no fields."""


@dataclass(frozen=True, slots=True)
class DescribeClusterResponse:
    """A node's view of the cluster (raftlog/metadata/cluster.py's `describe_cluster`); the
    records are maps with the fields docs/PROTOCOL.md names."""

    node_id: int
    controller_id: int
    quorum: dict[str, Any]
    voters: tuple[dict[str, Any], ...] = ()
    brokers: tuple[dict[str, Any], ...] = ()
    partitions: tuple[dict[str, Any], ...] = ()
    offline_logs: tuple[dict[str, Any], ...] = ()
    metadata_version: int = 0
    # Fields a newer node adds, kept so that the body reads back whole.
    extra: dict[str, Any] = field(default_factory=dict)

    _FIELDS = (
        "node_id",
        "controller_id",
        "quorum",
        "voters",
        "brokers",
        "partitions",
        "offline_logs",
        "metadata_version",
    )

    @classmethod
    def of(cls, node_id: int, view: dict[str, Any]) -> DescribeClusterResponse:
        """The response of node `node_id` with this view of the cluster."""
        return cls.from_body({"node_id": node_id, **view})

    def to_body(self) -> dict[str, Any]:
        # The order the broker always wrote: the node, then the view as the metadata made it.
        return {
            "node_id": self.node_id,
            "brokers": list(self.brokers),
            "partitions": list(self.partitions),
            "offline_logs": list(self.offline_logs),
            "metadata_version": self.metadata_version,
            "voters": list(self.voters),
            "controller_id": self.controller_id,
            "quorum": self.quorum,
            **self.extra,
        }

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> DescribeClusterResponse:
        return cls(
            body["node_id"],
            body["controller_id"],
            body["quorum"],
            _tuple(body.get("voters")),
            _tuple(body.get("brokers")),
            _tuple(body.get("partitions")),
            _tuple(body.get("offline_logs")),
            body.get("metadata_version", 0),
            {k: v for k, v in body.items() if k not in cls._FIELDS},
        )


def _tuple(items: Iterable[Any] | None) -> tuple[Any, ...]:
    return () if items is None else tuple(items)


__all__ = [
    "ApiVersion",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "DescribeClusterRequest",
    "DescribeClusterResponse",
    "MetadataRequest",
    "MetadataResponse",
    "MetadataTopic",
]
