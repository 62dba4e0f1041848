"""Looking at and removing groups: DescribeGroups (API key 15) v0-4, ListGroups (16) v0-2 and
DeleteGroups (42) v0-1.

Byte by byte, big-endian (Kafka's DescribeGroupsRequest.json, ListGroupsRequest.json,
DeleteGroupsRequest.json and their responses). Fields a version lacks take their defaults
when decoded and are left out when encoded.

DescribeGroups request (v1, v2 are v0; v3 adds include_authorized_operations; v4 is v3, its
answer adds the members' group_instance_id):
  groups                         array of string  the group ids
  include_authorized_operations  boolean          v3+
DescribeGroups response (v1 adds throttle_time_ms; v2 is v1; v3 adds authorized_operations;
v4 adds group_instance_id):
  throttle_time_ms  int32  v1+
  groups            array of:
    error_code     int16
    group_id       string
    group_state    string  "Stable", "PreparingRebalance", "CompletingRebalance", "Empty",
                           "Dead"
    protocol_type  string  "consumer", or "" for a group with no members
    protocol_data  string  the chosen assignor (Stable groups), or ""
    members        array of:
      member_id          string
      group_instance_id  nullable_string  v4+
      client_id          string
      client_host        string
      member_metadata    bytes  the member's metadata for the chosen assignor
      member_assignment  bytes  the member's assignment (Stable groups)
    authorized_operations  int32  v3+; a bit per ACL operation, INT32_MIN: not asked for

ListGroups request (v0-v2): an empty body.
ListGroups response (v1 adds throttle_time_ms; v2 is v1):
  throttle_time_ms  int32  v1+
  error_code        int16
  groups            array of:
    group_id       string
    protocol_type  string

DeleteGroups request (v1 is v0):
  groups_names  array of string
DeleteGroups response (v1 is v0; throttle_time_ms is there from v0):
  throttle_time_ms  int32
  results           array of:
    group_id    string
    error_code  int16
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.common import (
    AUTHORIZED_OPERATIONS_OMITTED,
    as_reader,
    check_decode_version,
    check_encode_version,
    read_string,
    read_throttle_time,
    write_strings,
)
from raftlog.kafka.wire import Reader, Writer

# -- DescribeGroups ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    groups: tuple[str, ...]
    include_authorized_operations: bool = False  # sent from v3

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> DescribeGroupsRequest:
        check_decode_version(ApiKey.DESCRIBE_GROUPS, version)
        reader = as_reader(source)
        groups = reader.array(read_string, "groups")
        include = reader.boolean("include_authorized_operations") if version >= 3 else False
        return cls(groups, include)

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.DESCRIBE_GROUPS, version)
        w = Writer()
        write_strings(w, self.groups)
        if version >= 3:
            w.boolean(self.include_authorized_operations)
        return w.getvalue()


class DescribedGroupMember(NamedTuple):
    member_id: str
    client_id: str
    client_host: str
    member_metadata: bytes = b""
    member_assignment: bytes = b""
    group_instance_id: str | None = None  # sent from v4


class DescribedGroup(NamedTuple):
    group_id: str
    error_code: int = 0
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedGroupMember, ...] = ()
    authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED  # sent from v3


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...]
    throttle_time_ms: int = 0  # sent from v1

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.DESCRIBE_GROUPS, version)
        w = Writer()
        if version >= 1:
            w.int32(self.throttle_time_ms)
        w.array_length(len(self.groups))
        for g in self.groups:
            w.int16(g.error_code)
            w.string(g.group_id)
            w.string(g.group_state)
            w.string(g.protocol_type)
            w.string(g.protocol_data)
            w.array_length(len(g.members))
            for m in g.members:
                w.string(m.member_id)
                if version >= 4:
                    w.nullable_string(m.group_instance_id)
                w.string(m.client_id)
                w.string(m.client_host)
                w.bytes_(m.member_metadata)
                w.bytes_(m.member_assignment)
            if version >= 3:
                w.int32(g.authorized_operations)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> DescribeGroupsResponse:
        check_decode_version(ApiKey.DESCRIBE_GROUPS, version)
        reader = as_reader(source)
        throttle_time_ms = read_throttle_time(reader, version, 1)

        def member(r: Reader) -> DescribedGroupMember:
            member_id = r.string("member_id")
            instance_id = r.nullable_string("group_instance_id") if version >= 4 else None
            client_id, client_host = r.string("client_id"), r.string("client_host")
            metadata = bytes(r.bytes_("member_metadata"))
            assignment = bytes(r.bytes_("member_assignment"))
            return DescribedGroupMember(
                member_id, client_id, client_host, metadata, assignment, instance_id
            )

        def group(r: Reader) -> DescribedGroup:
            error_code, group_id = r.int16("error_code"), r.string("group_id")
            state, protocol_type = r.string("group_state"), r.string("protocol_type")
            protocol_data = r.string("protocol_data")
            members = r.array(member, "members")
            operations = (
                r.int32("authorized_operations") if version >= 3 else AUTHORIZED_OPERATIONS_OMITTED
            )
            return DescribedGroup(
                group_id, error_code, state, protocol_type, protocol_data, members, operations
            )

        return cls(reader.array(group, "groups"), throttle_time_ms)


# -- ListGroups ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    """No fields before v4 (v4 adds a states filter, flexible, not spoken)."""

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> ListGroupsRequest:
        check_decode_version(ApiKey.LIST_GROUPS, version)
        del source  # nothing to read: decode_request checks that the body is empty
        return cls()

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.LIST_GROUPS, version)
        return b""


class ListedGroup(NamedTuple):
    group_id: str
    protocol_type: str = ""


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    groups: tuple[ListedGroup, ...]
    error_code: int = 0
    throttle_time_ms: int = 0  # sent from v1

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.LIST_GROUPS, version)
        w = Writer()
        if version >= 1:
            w.int32(self.throttle_time_ms)
        w.int16(self.error_code)
        w.array_length(len(self.groups))
        for g in self.groups:
            w.string(g.group_id)
            w.string(g.protocol_type)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> ListGroupsResponse:
        check_decode_version(ApiKey.LIST_GROUPS, version)
        reader = as_reader(source)
        throttle_time_ms = read_throttle_time(reader, version, 1)
        error_code = reader.int16("error_code")

        def group(r: Reader) -> ListedGroup:
            return ListedGroup(r.string("group_id"), r.string("protocol_type"))

        return cls(reader.array(group, "groups"), error_code, throttle_time_ms)


# -- DeleteGroups --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    groups_names: tuple[str, ...]

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> DeleteGroupsRequest:
        check_decode_version(ApiKey.DELETE_GROUPS, version)
        return cls(as_reader(source).array(read_string, "groups_names"))

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.DELETE_GROUPS, version)
        w = Writer()
        write_strings(w, self.groups_names)
        return w.getvalue()


class DeletableGroupResult(NamedTuple):
    group_id: str
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[DeletableGroupResult, ...]
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.DELETE_GROUPS, version)
        w = Writer()
        w.int32(self.throttle_time_ms)
        w.array_length(len(self.results))
        for r in self.results:
            w.string(r.group_id)
            w.int16(r.error_code)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> DeleteGroupsResponse:
        check_decode_version(ApiKey.DELETE_GROUPS, version)
        reader = as_reader(source)
        throttle_time_ms = reader.int32("throttle_time_ms")

        def result(r: Reader) -> DeletableGroupResult:
            return DeletableGroupResult(r.string("group_id"), r.int16("error_code"))

        return cls(reader.array(result, "results"), throttle_time_ms)
