"""One broker's own replicas: DescribeReplicas (API 24; Kafka's DescribeLogDirs).

Each broker compacts, rolls and deletes its own replica's segments, so a replica's size, dirty
ratio and last clean are that broker's local state: the metadata quorum does not hold them,
and a client asks every broker for its own.

DescribeReplicas: request ``{"topics": [name, ...] | null}`` (null: every topic); response
``{"node_id": int, "replicas": [replica, ...]}``, one map per partition the broker hosts
(open or offline), sorted by topic and partition::

    {"topic": str, "partition": int, "offline": bool, "offline_reason": str | null,
     "cleanup_policy": str, "size_bytes": int | null, "log_start_offset": int | null,
     "log_end_offset": int | null, "high_watermark": int | null, "segments": int | null,
     "dirty_ratio": float | null, "last_clean_ms": int, "last_clean": clean | null}
    clean = {"records_read": int, "records_kept": int, "tombstones_removed": int,
             "bytes_read": int, "bytes_written": int, "seconds": float}

The figures are null where the log is offline; `high_watermark` is null where the broker has
no replica state for it; `dirty_ratio` is null unless the log is compacted; `last_clean_ms` is
-1 and `last_clean` null until this broker's cleaner has cleaned it (since it started).

Rules: see raftlog/messages/__init__.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raftlog.topics import TopicPartition


@dataclass(frozen=True, slots=True)
class DescribeReplicasRequest:
    topics: tuple[str, ...] | None = None  # None: every topic

    def to_body(self) -> dict[str, Any]:
        return {"topics": None if self.topics is None else list(self.topics)}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> DescribeReplicasRequest:
        """A request from a body that passed `protocol.check_request_body`."""
        topics = body.get("topics")
        return cls(None if topics is None else tuple(topics))


@dataclass(frozen=True, slots=True)
class CleanSummary:
    """What a replica's last clean did (storage/cleaner.py's CleanResult, in figures)."""

    records_read: int
    records_kept: int
    tombstones_removed: int
    bytes_read: int
    bytes_written: int
    seconds: float

    def to_wire(self) -> dict[str, Any]:
        return {
            "records_read": self.records_read,
            "records_kept": self.records_kept,
            "tombstones_removed": self.tombstones_removed,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "seconds": self.seconds,
        }

    @classmethod
    def from_wire(cls, w: dict[str, Any]) -> CleanSummary:
        return cls(
            int(w["records_read"]),
            int(w["records_kept"]),
            int(w["tombstones_removed"]),
            int(w["bytes_read"]),
            int(w["bytes_written"]),
            float(w["seconds"]),
        )


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One replica as the broker hosting it (`node_id`) sees it."""

    node_id: int
    tp: TopicPartition
    cleanup_policy: str
    size_bytes: int | None = None
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    high_watermark: int | None = None
    segments: int | None = None
    # Dirty bytes / cleanable bytes below the high watermark; None: the log is not compacted.
    dirty_ratio: float | None = None
    last_clean_ms: int = -1  # wall-clock ms of the last clean; -1: none since the broker started
    last_clean: CleanSummary | None = None
    offline_reason: str | None = None  # set: the log is offline on this broker

    @property
    def offline(self) -> bool:
        return self.offline_reason is not None

    def to_wire(self) -> dict[str, Any]:
        return {
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "offline": self.offline,
            "offline_reason": self.offline_reason,
            "cleanup_policy": self.cleanup_policy,
            "size_bytes": self.size_bytes,
            "log_start_offset": self.log_start_offset,
            "log_end_offset": self.log_end_offset,
            "high_watermark": self.high_watermark,
            "segments": self.segments,
            "dirty_ratio": self.dirty_ratio,
            "last_clean_ms": self.last_clean_ms,
            "last_clean": None if self.last_clean is None else self.last_clean.to_wire(),
        }

    @classmethod
    def from_wire(cls, node_id: int, w: dict[str, Any]) -> ReplicaState:
        clean = w.get("last_clean")
        return cls(
            node_id,
            TopicPartition(w["topic"], w["partition"]),
            w["cleanup_policy"],
            w.get("size_bytes"),
            w.get("log_start_offset"),
            w.get("log_end_offset"),
            w.get("high_watermark"),
            w.get("segments"),
            w.get("dirty_ratio"),
            w.get("last_clean_ms", -1),
            None if clean is None else CleanSummary.from_wire(clean),
            w.get("offline_reason") if w.get("offline") else None,
        )


@dataclass(frozen=True, slots=True)
class DescribeReplicasResponse:
    node_id: int
    replicas: tuple[ReplicaState, ...]

    def to_body(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "replicas": [r.to_wire() for r in self.replicas]}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> DescribeReplicasResponse:
        node = int(body["node_id"])
        return cls(node, tuple(ReplicaState.from_wire(node, r) for r in body["replicas"]))
