"""Consumer groups: FindCoordinator (API 9) and the group coordinator's APIs (10-18).

Bodies (all maps; docs/PROTOCOL.md, "Consumer groups"):

- FindCoordinator ``{group_id}`` -> ``{node_id, host, port}``
- JoinGroup ``{group_id, member_id, client_id, instance_id, session_timeout_ms,
  rebalance_timeout_ms, topics, protocols}`` -> ``{member_id, generation, state, protocol,
  assignment: [[topic, partition], ...]}``
- Heartbeat ``{group_id, member_id, generation}`` -> ``{generation}``
- LeaveGroup ``{group_id, member_ids}`` -> ``{left}``
- OffsetCommit ``{group_id, member_id, generation, offsets: [[topic, partition, offset,
  metadata], ...]}`` -> ``{}``
- OffsetFetch ``{group_id, partitions: [[topic, partition], ...] | null}`` ->
  ``{offsets: [[topic, partition, offset, metadata], ...]}``
- ListGroups ``{}`` -> ``{groups: [{group_id, state, generation, protocol, protocol_type,
  members}, ...]}``
- DescribeGroups ``{group_id}`` -> ``{group_id, state, generation, protocol, protocol_type,
  rebalance_deadline_ms, members: [{member_id, client_id, instance_id, session_timeout_ms,
  topics, assignment: [[topic, partition], ...], rejoined}, ...], offsets: [[topic, partition,
  offset, metadata, commit_ms], ...]}``
- DeleteGroups ``{group_id}`` -> ``{}``
- ResetOffsets ``{group_id, offsets: [[topic, partition, offset], ...]}`` -> ``{reset}``

The coordinator (raftlog/metadata/coordinator.py) takes offset entries in their wire form
(`to_wire`) and answers joins and descriptions with maps of the response layouts, which the
responses here read (`from_body`).

protocol_type is "raftlog" for raftlog's own groups, or a Kafka classic group's ("consumer"),
which Kafka clients join through the Kafka listener; brokers of older code do not send it.

Rules: see raftlog/messages/__init__.py. Named records that are maps on the wire (a group of
ListGroups) stay maps here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from raftlog.messages.empty import EmptyBody
from raftlog.topics import TopicPartition

NATIVE_PROTOCOL_TYPE = "raftlog"  # raftlog's own groups (raftlog/metadata/groups.py)


def _tps_to_wire(tps: Iterable[TopicPartition]) -> list[list[Any]]:
    return [[tp.topic, tp.partition] for tp in tps]


def _tps_from_wire(entries: Iterable[list[Any]]) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(t, p) for t, p in entries)


@dataclass(frozen=True, slots=True)
class GroupOffset:
    """A committed offset: an OffsetCommit entry and an OffsetFetch answer carry the first
    four fields, a DescribeGroups answer also `commit_ms` (when it was committed)."""

    topic: str
    partition: int
    offset: int
    metadata: str | None = ""
    commit_ms: int | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def to_wire(self) -> list[Any]:
        out = [self.topic, self.partition, self.offset, self.metadata]
        if self.commit_ms is not None:
            out.append(self.commit_ms)
        return out

    @classmethod
    def from_wire(cls, w: list[Any]) -> GroupOffset:
        return cls(w[0], w[1], w[2], w[3], w[4] if len(w) > 4 else None)


@dataclass(frozen=True, slots=True)
class ResetOffset:
    """A ResetOffsets entry: the offset the group resumes `topic`-`partition` at."""

    topic: str
    partition: int
    offset: int

    def to_wire(self) -> list[Any]:
        return [self.topic, self.partition, self.offset]

    @classmethod
    def from_wire(cls, w: list[Any]) -> ResetOffset:
        return cls(w[0], w[1], w[2])


# -- FindCoordinator -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    group_id: str | None = None

    def to_body(self) -> dict[str, Any]:
        return {"group_id": self.group_id}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> FindCoordinatorRequest:
        return cls(body.get("group_id"))


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse:
    """The coordinator's broker, as addressed on the listener the request came in through."""

    node_id: int
    host: str
    port: int

    def to_body(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "host": self.host, "port": self.port}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> FindCoordinatorResponse:
        return cls(int(body["node_id"]), str(body["host"]), int(body["port"]))


# -- JoinGroup -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    """A join: an empty `member_id` asks for a new one. Values (timeouts in range, names) are
    the coordinator's to check."""

    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    topics: tuple[str, ...]
    protocols: tuple[str, ...]
    member_id: str = ""
    client_id: str = ""
    instance_id: str | None = None

    def to_body(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "client_id": self.client_id,
            "instance_id": self.instance_id,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "topics": list(self.topics),
            "protocols": list(self.protocols),
        }

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> JoinGroupRequest:
        """A request from a body that passed `protocol.check_request_body`; an absent
        rebalance timeout is the session timeout."""
        session_timeout_ms = body["session_timeout_ms"]
        return cls(
            body["group_id"],
            session_timeout_ms,
            body.get("rebalance_timeout_ms", session_timeout_ms),
            tuple(body["topics"]),
            tuple(body["protocols"]),
            body.get("member_id") or "",
            body.get("client_id") or "",
            body.get("instance_id"),
        )


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    """The member's id, the generation its join completed in, the group's state and
    assignor, and the member's partitions in that generation."""

    member_id: str
    generation: int
    state: str
    protocol: str | None
    assignment: tuple[TopicPartition, ...]

    def to_body(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "generation": self.generation,
            "state": self.state,
            "protocol": self.protocol,
            "assignment": _tps_to_wire(self.assignment),
        }

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> JoinGroupResponse:
        """From a response body, or the coordinator's view of the join (the same map)."""
        return cls(
            body["member_id"],
            body["generation"],
            body["state"],
            body["protocol"],
            _tps_from_wire(body["assignment"]),
        )


# -- Heartbeat, LeaveGroup -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    generation: int

    def to_body(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "generation": self.generation,
        }

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> HeartbeatRequest:
        return cls(body["group_id"], body["member_id"], body["generation"])


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    generation: int  # the group's: other than the member's means "join again"

    def to_body(self) -> dict[str, Any]:
        return {"generation": self.generation}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> HeartbeatResponse:
        return cls(body["generation"])


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    member_ids: tuple[str, ...]

    def to_body(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "member_ids": list(self.member_ids)}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> LeaveGroupRequest:
        return cls(body["group_id"], tuple(body["member_ids"]))


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    left: int  # how many of the ids were members

    def to_body(self) -> dict[str, Any]:
        return {"left": self.left}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> LeaveGroupResponse:
        return cls(body["left"])


# -- offsets ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    """A member's commit (its id and generation), or a standalone one (`member_id` "" and
    generation -1: accepted only while the group has no members)."""

    group_id: str
    offsets: tuple[GroupOffset, ...]
    member_id: str = ""
    generation: int = -1

    @classmethod
    def of(
        cls, group_id: str, offsets: dict[TopicPartition, int], member_id: str = "",
        generation: int = -1,
    ) -> OffsetCommitRequest:  # fmt: skip
        """A commit of these offsets (no metadata), in partition order."""
        entries = tuple(GroupOffset(tp.topic, tp.partition, o) for tp, o in sorted(offsets.items()))
        return cls(group_id, entries, member_id, generation)

    def to_body(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "generation": self.generation,
            "offsets": [o.to_wire() for o in self.offsets],
        }

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> OffsetCommitRequest:
        """A request from a body that passed `protocol.check_request_body`."""
        return cls(
            body["group_id"],
            tuple(GroupOffset(t, p, o, m) for t, p, o, m in body["offsets"]),
            body.get("member_id") or "",
            body["generation"],
        )


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse(EmptyBody):
    """An OffsetCommit's answer: empty (a refusal is an error response)."""


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    group_id: str
    partitions: tuple[TopicPartition, ...] | None = None  # None: every committed offset

    def to_body(self) -> dict[str, Any]:
        wire = None if self.partitions is None else _tps_to_wire(self.partitions)
        return {"group_id": self.group_id, "partitions": wire}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> OffsetFetchRequest:
        parts = body.get("partitions")
        return cls(body["group_id"], None if parts is None else _tps_from_wire(parts))


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    offsets: tuple[GroupOffset, ...]  # the partitions asked for that have a committed offset

    def committed(self) -> dict[TopicPartition, int]:
        return {o.tp: o.offset for o in self.offsets}

    def to_body(self) -> dict[str, Any]:
        return {"offsets": [o.to_wire() for o in self.offsets]}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> OffsetFetchResponse:
        return cls(tuple(GroupOffset.from_wire(o) for o in body["offsets"]))


@dataclass(frozen=True, slots=True)
class ResetOffsetsRequest:
    """Committed offsets set by hand (the group must have no members)."""

    group_id: str
    offsets: tuple[ResetOffset, ...]

    @classmethod
    def of(cls, group_id: str, offsets: dict[TopicPartition, int]) -> ResetOffsetsRequest:
        """A reset to these offsets, in partition order."""
        entries = tuple(ResetOffset(tp.topic, tp.partition, o) for tp, o in sorted(offsets.items()))
        return cls(group_id, entries)

    def to_body(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "offsets": [o.to_wire() for o in self.offsets]}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> ResetOffsetsRequest:
        return cls(body["group_id"], tuple(ResetOffset(t, p, o) for t, p, o in body["offsets"]))


@dataclass(frozen=True, slots=True)
class ResetOffsetsResponse:
    reset: int  # offsets set

    def to_body(self) -> dict[str, Any]:
        return {"reset": self.reset}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> ResetOffsetsResponse:
        return cls(int(body["reset"]))


# -- ListGroups, DescribeGroups, DeleteGroups ------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListGroupsRequest(EmptyBody):
    """No fields: the body is {}."""


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    """Every group: {group_id, state, generation, protocol, protocol_type (brokers of older
    code do not send it), members (a count)}."""

    groups: tuple[dict[str, Any], ...]

    def to_body(self) -> dict[str, Any]:
        return {"groups": list(self.groups)}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> ListGroupsResponse:
        return cls(tuple(body["groups"]))


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    group_id: str

    def to_body(self) -> dict[str, Any]:
        return {"group_id": self.group_id}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> DescribeGroupsRequest:
        return cls(body["group_id"])


@dataclass(frozen=True, slots=True)
class GroupMemberDescription:
    """A member: its client, subscription, partitions in the current generation, and whether
    it rejoined the rebalance under way."""

    member_id: str
    client_id: str
    instance_id: str | None
    session_timeout_ms: int
    topics: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]
    rejoined: bool

    def to_wire(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "client_id": self.client_id,
            "instance_id": self.instance_id,
            "session_timeout_ms": self.session_timeout_ms,
            "topics": list(self.topics),
            "assignment": _tps_to_wire(self.assignment),
            "rejoined": self.rejoined,
        }

    @classmethod
    def from_wire(cls, w: dict[str, Any]) -> GroupMemberDescription:
        return cls(
            w["member_id"],
            w["client_id"],
            w["instance_id"],
            w["session_timeout_ms"],
            tuple(w["topics"]),
            _tps_from_wire(w["assignment"]),
            w["rejoined"],
        )


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    """One group (the coordinator's `describe_group`): its members, generation, assignor,
    state, rebalance deadline (while preparing one) and committed offsets (with commit_ms)."""

    group_id: str
    state: str
    generation: int
    protocol: str | None
    rebalance_deadline_ms: int | None
    members: tuple[GroupMemberDescription, ...]
    offsets: tuple[GroupOffset, ...]
    # "raftlog", or a Kafka group's ("consumer"); brokers of older code do not send it.
    protocol_type: str = NATIVE_PROTOCOL_TYPE

    def to_body(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "state": self.state,
            "generation": self.generation,
            "protocol": self.protocol,
            "protocol_type": self.protocol_type,
            "rebalance_deadline_ms": self.rebalance_deadline_ms,
            "members": [m.to_wire() for m in self.members],
            "offsets": [o.to_wire() for o in self.offsets],
        }

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> DescribeGroupsResponse:
        """From a response body, or the coordinator's description (the same map)."""
        return cls(
            body["group_id"],
            body["state"],
            body["generation"],
            body["protocol"],
            body.get("rebalance_deadline_ms"),
            tuple(GroupMemberDescription.from_wire(m) for m in body["members"]),
            tuple(GroupOffset.from_wire(o) for o in body["offsets"]),
            body.get("protocol_type", NATIVE_PROTOCOL_TYPE),
        )


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    group_id: str

    def to_body(self) -> dict[str, Any]:
        return {"group_id": self.group_id}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> DeleteGroupsRequest:
        return cls(body["group_id"])


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse(EmptyBody):
    """A DeleteGroups answer: empty (a refusal is an error response)."""


__all__ = [
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "GroupMemberDescription",
    "GroupOffset",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "ResetOffset",
    "ResetOffsetsRequest",
    "ResetOffsetsResponse",
]
