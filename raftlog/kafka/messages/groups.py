"""The classic group membership APIs: FindCoordinator (API key 10) v0-2, JoinGroup (11) v0-5,
Heartbeat (12) v0-3, LeaveGroup (13) v0-3 and SyncGroup (14) v0-3.

How a consumer group forms (Kafka's classic protocol): each member asks FindCoordinator which
broker coordinates its group, joins it (JoinGroup, naming the assignors it supports with their
metadata), and the coordinator answers once every member has joined: the group leader gets
every member's metadata, computes the assignment, and hands it to the coordinator in
SyncGroup, whose answer carries each member's own assignment. Heartbeats keep a member in the
group; LeaveGroup takes members out. The metadata and assignment bytes are opaque here (for
consumers they are raftlog.kafka.messages.consumer_protocol's).

Byte by byte, big-endian (Kafka's FindCoordinatorRequest.json, JoinGroupRequest.json,
HeartbeatRequest.json, LeaveGroupRequest.json, SyncGroupRequest.json and their responses).
Fields a version lacks take their defaults when decoded and are left out when encoded.

FindCoordinator request (v2 is v1; v1 adds key_type):
  key       string  the group id (or a transactional id, key_type 1)
  key_type  int8    v1+; 0 a group, 1 a transaction
FindCoordinator response (v1 adds throttle_time_ms and error_message; v2 is v1):
  throttle_time_ms  int32            v1+
  error_code        int16
  error_message     nullable_string  v1+
  node_id           int32            the coordinator (-1 with an error)
  host              string
  port              int32

JoinGroup request (v1 adds rebalance_timeout_ms; v2 and v3 are v1; v4 is v1 but the
coordinator may answer MEMBER_ID_REQUIRED with a member id to join again with; v5 adds
group_instance_id, static membership, KIP-345):
  group_id              string
  session_timeout_ms    int32
  rebalance_timeout_ms  int32            v1+; before v1 the session timeout serves (-1)
  member_id             string           empty on a first join
  group_instance_id     nullable_string  v5+
  protocol_type         string           "consumer" for consumers
  protocols             array of:
    name      string  the assignor ("range", "roundrobin", "cooperative-sticky"...)
    metadata  bytes   the member's subscription for that assignor
JoinGroup response (v1 is v0; v2 adds throttle_time_ms; v3, v4 are v2; v5 adds the members'
group_instance_id):
  throttle_time_ms  int32  v2+
  error_code        int16
  generation_id     int32
  protocol_name     string  the assignor chosen
  leader            string  the leader's member id
  member_id         string  this member's id
  members           array of (filled only in the leader's answer):
    member_id          string
    group_instance_id  nullable_string  v5+
    metadata           bytes

Heartbeat request (v1, v2 are v0; v3 adds group_instance_id):
  group_id           string
  generation_id      int32
  member_id          string
  group_instance_id  nullable_string  v3+
Heartbeat response (v1 adds throttle_time_ms; v2, v3 are v1):
  throttle_time_ms  int32  v1+
  error_code        int16

LeaveGroup request (v1, v2 are v0; v3 replaces member_id with a batch of members, KIP-345):
  group_id  string
  member_id string  v0-v2
  members   array of (v3+):
    member_id          string
    group_instance_id  nullable_string
LeaveGroup response (v1 adds throttle_time_ms; v2 is v1; v3 adds each member's outcome):
  throttle_time_ms  int32  v1+
  error_code        int16
  members           array of (v3+):
    member_id          string
    group_instance_id  nullable_string
    error_code         int16

SyncGroup request (v1, v2 are v0; v3 adds group_instance_id):
  group_id           string
  generation_id      int32
  member_id          string
  group_instance_id  nullable_string  v3+
  assignments        array of (only the leader's request fills it):
    member_id   string
    assignment  bytes
SyncGroup response (v1 adds throttle_time_ms; v2, v3 are v1):
  throttle_time_ms  int32  v1+
  error_code        int16
  assignment        bytes  this member's assignment

Bytes fields decode to bytes (copies): a coordinator keeps members' metadata and assignments
past the request frame they came in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.common import (
    as_reader,
    check_decode_version,
    check_encode_version,
    read_throttle_time,
)
from raftlog.kafka.wire import Reader, Writer

COORDINATOR_KEY_GROUP = 0  # FindCoordinator's key_type for a consumer group
COORDINATOR_KEY_TRANSACTION = 1
NO_REBALANCE_TIMEOUT = -1  # JoinGroup before v1: the session timeout serves as both
UNKNOWN_MEMBER_ID = ""  # a member's first JoinGroup
NO_GENERATION = -1  # JoinGroup's generation_id with an error


# -- FindCoordinator -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    key: str
    key_type: int = COORDINATOR_KEY_GROUP  # sent from v1

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> FindCoordinatorRequest:
        check_decode_version(ApiKey.FIND_COORDINATOR, version)
        reader = as_reader(source)
        key = reader.string("key")
        key_type = reader.int8("key_type") if version >= 1 else COORDINATOR_KEY_GROUP
        return cls(key, key_type)

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.FIND_COORDINATOR, version)
        w = Writer()
        w.string(self.key)
        if version >= 1:
            w.int8(self.key_type)
        return w.getvalue()


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse:
    error_code: int = 0
    node_id: int = -1
    host: str = ""
    port: int = -1
    error_message: str | None = None  # sent from v1
    throttle_time_ms: int = 0  # sent from v1

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.FIND_COORDINATOR, version)
        w = Writer()
        if version >= 1:
            w.int32(self.throttle_time_ms)
        w.int16(self.error_code)
        if version >= 1:
            w.nullable_string(self.error_message)
        w.int32(self.node_id)
        w.string(self.host)
        w.int32(self.port)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> FindCoordinatorResponse:
        check_decode_version(ApiKey.FIND_COORDINATOR, version)
        reader = as_reader(source)
        throttle_time_ms = read_throttle_time(reader, version, 1)
        error_code = reader.int16("error_code")
        message = reader.nullable_string("error_message") if version >= 1 else None
        node_id, host = reader.int32("node_id"), reader.string("host")
        return cls(error_code, node_id, host, reader.int32("port"), message, throttle_time_ms)


# -- JoinGroup -----------------------------------------------------------------------------------


class JoinGroupRequestProtocol(NamedTuple):
    """One assignor the member supports, with its metadata for it."""

    name: str
    metadata: bytes


def _read_protocol(r: Reader) -> JoinGroupRequestProtocol:
    return JoinGroupRequestProtocol(r.string("name"), bytes(r.bytes_("metadata")))


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout_ms: int
    member_id: str
    protocol_type: str
    protocols: tuple[JoinGroupRequestProtocol, ...]
    rebalance_timeout_ms: int = NO_REBALANCE_TIMEOUT  # sent from v1
    group_instance_id: str | None = None  # sent from v5

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> JoinGroupRequest:
        check_decode_version(ApiKey.JOIN_GROUP, version)
        reader = as_reader(source)
        group_id = reader.string("group_id")
        session_timeout_ms = reader.int32("session_timeout_ms")
        rebalance_timeout_ms = (
            reader.int32("rebalance_timeout_ms") if version >= 1 else NO_REBALANCE_TIMEOUT
        )
        member_id = reader.string("member_id")
        instance_id = reader.nullable_string("group_instance_id") if version >= 5 else None
        protocol_type = reader.string("protocol_type")
        protocols = reader.array(_read_protocol, "protocols")
        return cls(
            group_id,
            session_timeout_ms,
            member_id,
            protocol_type,
            protocols,
            rebalance_timeout_ms,
            instance_id,
        )

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.JOIN_GROUP, version)
        w = Writer()
        w.string(self.group_id)
        w.int32(self.session_timeout_ms)
        if version >= 1:
            w.int32(self.rebalance_timeout_ms)
        w.string(self.member_id)
        if version >= 5:
            w.nullable_string(self.group_instance_id)
        w.string(self.protocol_type)
        w.array_length(len(self.protocols))
        for p in self.protocols:
            w.string(p.name)
            w.bytes_(p.metadata)
        return w.getvalue()


class JoinGroupResponseMember(NamedTuple):
    """A member and its metadata for the chosen assignor (the leader's answer only)."""

    member_id: str
    metadata: bytes
    group_instance_id: str | None = None  # sent from v5


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error_code: int = 0
    generation_id: int = NO_GENERATION
    protocol_name: str = ""
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinGroupResponseMember, ...] = ()
    throttle_time_ms: int = 0  # sent from v2

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.JOIN_GROUP, version)
        w = Writer()
        if version >= 2:
            w.int32(self.throttle_time_ms)
        w.int16(self.error_code)
        w.int32(self.generation_id)
        w.string(self.protocol_name)
        w.string(self.leader)
        w.string(self.member_id)
        w.array_length(len(self.members))
        for m in self.members:
            w.string(m.member_id)
            if version >= 5:
                w.nullable_string(m.group_instance_id)
            w.bytes_(m.metadata)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> JoinGroupResponse:
        check_decode_version(ApiKey.JOIN_GROUP, version)
        reader = as_reader(source)
        throttle_time_ms = read_throttle_time(reader, version, 2)
        error_code, generation_id = reader.int16("error_code"), reader.int32("generation_id")
        protocol_name, leader = reader.string("protocol_name"), reader.string("leader")
        member_id = reader.string("member_id")

        def member(r: Reader) -> JoinGroupResponseMember:
            member_id = r.string("member_id")
            instance_id = r.nullable_string("group_instance_id") if version >= 5 else None
            return JoinGroupResponseMember(member_id, bytes(r.bytes_("metadata")), instance_id)

        members = reader.array(member, "members")
        return cls(
            error_code, generation_id, protocol_name, leader, member_id, members, throttle_time_ms
        )


# -- Heartbeat -----------------------------------------------------------------------------------


def _read_member_fields(
    reader: Reader, version: int, instance_since: int
) -> tuple[str, int, str, str | None]:
    """group_id, generation_id, member_id, group_instance_id (from `instance_since`): how
    Heartbeat and SyncGroup requests start."""
    group_id, generation_id = reader.string("group_id"), reader.int32("generation_id")
    member_id = reader.string("member_id")
    instance_id = reader.nullable_string("group_instance_id") if version >= instance_since else None
    return group_id, generation_id, member_id, instance_id


def _write_member_fields(
    w: Writer,
    version: int,
    instance_since: int,
    fields: tuple[str, int, str, str | None],
) -> None:
    group_id, generation_id, member_id, instance_id = fields
    w.string(group_id)
    w.int32(generation_id)
    w.string(member_id)
    if version >= instance_since:
        w.nullable_string(instance_id)


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None  # sent from v3

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> HeartbeatRequest:
        check_decode_version(ApiKey.HEARTBEAT, version)
        return cls(*_read_member_fields(as_reader(source), version, 3))

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.HEARTBEAT, version)
        w = Writer()
        fields = (self.group_id, self.generation_id, self.member_id, self.group_instance_id)
        _write_member_fields(w, version, 3, fields)
        return w.getvalue()


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: int = 0
    throttle_time_ms: int = 0  # sent from v1

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.HEARTBEAT, version)
        w = Writer()
        if version >= 1:
            w.int32(self.throttle_time_ms)
        w.int16(self.error_code)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> HeartbeatResponse:
        check_decode_version(ApiKey.HEARTBEAT, version)
        reader = as_reader(source)
        throttle_time_ms = read_throttle_time(reader, version, 1)
        return cls(reader.int16("error_code"), throttle_time_ms)


# -- LeaveGroup ----------------------------------------------------------------------------------


class MemberIdentity(NamedTuple):
    """A member leaving (LeaveGroup v3+)."""

    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    """v0-v2 name one member in `member_id`; v3 names a batch in `members`. Each version
    encodes only its own field: the other keeps its default when decoded."""

    group_id: str
    member_id: str = UNKNOWN_MEMBER_ID  # v0-v2
    members: tuple[MemberIdentity, ...] = ()  # v3+

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> LeaveGroupRequest:
        check_decode_version(ApiKey.LEAVE_GROUP, version)
        reader = as_reader(source)
        group_id = reader.string("group_id")
        if version < 3:
            return cls(group_id, reader.string("member_id"))

        def member(r: Reader) -> MemberIdentity:
            return MemberIdentity(r.string("member_id"), r.nullable_string("group_instance_id"))

        return cls(group_id, members=reader.array(member, "members"))

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.LEAVE_GROUP, version)
        w = Writer()
        w.string(self.group_id)
        if version < 3:
            w.string(self.member_id)
            return w.getvalue()
        w.array_length(len(self.members))
        for m in self.members:
            w.string(m.member_id)
            w.nullable_string(m.group_instance_id)
        return w.getvalue()


class MemberResponse(NamedTuple):
    """One leaving member's outcome (LeaveGroup v3+)."""

    member_id: str
    group_instance_id: str | None = None
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error_code: int = 0
    members: tuple[MemberResponse, ...] = ()  # sent from v3
    throttle_time_ms: int = 0  # sent from v1

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.LEAVE_GROUP, version)
        w = Writer()
        if version >= 1:
            w.int32(self.throttle_time_ms)
        w.int16(self.error_code)
        if version >= 3:
            w.array_length(len(self.members))
            for m in self.members:
                w.string(m.member_id)
                w.nullable_string(m.group_instance_id)
                w.int16(m.error_code)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> LeaveGroupResponse:
        check_decode_version(ApiKey.LEAVE_GROUP, version)
        reader = as_reader(source)
        throttle_time_ms = read_throttle_time(reader, version, 1)
        error_code = reader.int16("error_code")

        def member(r: Reader) -> MemberResponse:
            member_id, instance_id = r.string("member_id"), r.nullable_string("group_instance_id")
            return MemberResponse(member_id, instance_id, r.int16("error_code"))

        members = reader.array(member, "members") if version >= 3 else ()
        return cls(error_code, members, throttle_time_ms)


# -- SyncGroup -----------------------------------------------------------------------------------


class SyncGroupRequestAssignment(NamedTuple):
    """The leader's assignment for one member."""

    member_id: str
    assignment: bytes


def _read_assignment(r: Reader) -> SyncGroupRequestAssignment:
    return SyncGroupRequestAssignment(r.string("member_id"), bytes(r.bytes_("assignment")))


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    assignments: tuple[SyncGroupRequestAssignment, ...] = ()  # the leader's only
    group_instance_id: str | None = None  # sent from v3

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> SyncGroupRequest:
        check_decode_version(ApiKey.SYNC_GROUP, version)
        reader = as_reader(source)
        group_id, generation_id, member_id, instance_id = _read_member_fields(reader, version, 3)
        assignments = reader.array(_read_assignment, "assignments")
        return cls(group_id, generation_id, member_id, assignments, instance_id)

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.SYNC_GROUP, version)
        w = Writer()
        fields = (self.group_id, self.generation_id, self.member_id, self.group_instance_id)
        _write_member_fields(w, version, 3, fields)
        w.array_length(len(self.assignments))
        for a in self.assignments:
            w.string(a.member_id)
            w.bytes_(a.assignment)
        return w.getvalue()


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: int = 0
    assignment: bytes = b""
    throttle_time_ms: int = 0  # sent from v1

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.SYNC_GROUP, version)
        w = Writer()
        if version >= 1:
            w.int32(self.throttle_time_ms)
        w.int16(self.error_code)
        w.bytes_(self.assignment)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> SyncGroupResponse:
        check_decode_version(ApiKey.SYNC_GROUP, version)
        reader = as_reader(source)
        throttle_time_ms = read_throttle_time(reader, version, 1)
        error_code = reader.int16("error_code")
        return cls(error_code, bytes(reader.bytes_("assignment")), throttle_time_ms)
