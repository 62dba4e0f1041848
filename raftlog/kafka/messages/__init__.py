"""Kafka's request and response bodies as typed, frozen messages: one module per API.

Rules this package keeps:
- Pure, as the rest of raftlog.kafka. Each module documents its API's body layout byte by byte
  and what changed at each version it speaks.
- Every request type has `decode(source, version)` (a classmethod; `source` a Reader placed at
  the body, or a buffer holding just the body) and `encode(version) -> bytes`; every response
  type `encode(version)` and `decode(source, version)`, at every version in
  raftlog.kafka.api.SUPPORTED_VERSIONS. Fetch's response encodes to a list of parts so that
  record data passes through untouched.
- Decoding a body the peer broke raises KafkaDecodeError naming the API, version and field.

`decode_request` is how the broker decodes a request body: it checks the API and version are
spoken and that the body is consumed exactly.

The consumer-group modules: `groups` (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup), `commits` (OffsetCommit, OffsetFetch), `group_admin` (ListGroups, DescribeGroups,
DeleteGroups) and `consumer_protocol` (the subscription and assignment bytes consumers put in
JoinGroup and SyncGroup). `reassignments` (AlterPartitionReassignments,
ListPartitionReassignments) is flexible at every version it speaks: compact types and tagged
fields. `alter_configs` (AlterConfigs, IncrementalAlterConfigs) shares ResourceType with
`configs` (DescribeConfigs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from raftlog.kafka.api import SUPPORTED_VERSIONS, ApiKey, api_name
from raftlog.kafka.messages.alter_configs import (
    AlterConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from raftlog.kafka.messages.api_versions import ApiVersionsRequest
from raftlog.kafka.messages.commits import OffsetCommitRequest, OffsetFetchRequest
from raftlog.kafka.messages.configs import DescribeConfigsRequest
from raftlog.kafka.messages.elect_leaders import ElectLeadersRequest
from raftlog.kafka.messages.fetch import FetchRequest
from raftlog.kafka.messages.group_admin import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
)
from raftlog.kafka.messages.groups import (
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)
from raftlog.kafka.messages.list_offsets import ListOffsetsRequest
from raftlog.kafka.messages.metadata import MetadataRequest
from raftlog.kafka.messages.offsets_for_leader_epoch import OffsetForLeaderEpochRequest
from raftlog.kafka.messages.produce import ProduceRequest
from raftlog.kafka.messages.producer_ids import InitProducerIdRequest
from raftlog.kafka.messages.reassignments import (
    AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequest,
)
from raftlog.kafka.messages.topics import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)
from raftlog.kafka.wire import KafkaDecodeError, Reader


class KafkaRequest(Protocol):
    """What every request type offers."""

    @classmethod
    def decode(cls, source: Reader, version: int) -> Any: ...

    def encode(self, version: int) -> bytes: ...


# The request type of each API the codec decodes: every API in SUPPORTED_VERSIONS.
REQUEST_TYPES: dict[ApiKey, type[KafkaRequest]] = {
    ApiKey.API_VERSIONS: ApiVersionsRequest,
    ApiKey.METADATA: MetadataRequest,
    ApiKey.PRODUCE: ProduceRequest,
    ApiKey.FETCH: FetchRequest,
    ApiKey.LIST_OFFSETS: ListOffsetsRequest,
    ApiKey.INIT_PRODUCER_ID: InitProducerIdRequest,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: OffsetForLeaderEpochRequest,
    ApiKey.CREATE_TOPICS: CreateTopicsRequest,
    ApiKey.DELETE_TOPICS: DeleteTopicsRequest,
    ApiKey.CREATE_PARTITIONS: CreatePartitionsRequest,
    ApiKey.ELECT_LEADERS: ElectLeadersRequest,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: AlterPartitionReassignmentsRequest,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: ListPartitionReassignmentsRequest,
    ApiKey.DESCRIBE_CONFIGS: DescribeConfigsRequest,
    ApiKey.ALTER_CONFIGS: AlterConfigsRequest,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsRequest,
    ApiKey.FIND_COORDINATOR: FindCoordinatorRequest,
    ApiKey.JOIN_GROUP: JoinGroupRequest,
    ApiKey.SYNC_GROUP: SyncGroupRequest,
    ApiKey.HEARTBEAT: HeartbeatRequest,
    ApiKey.LEAVE_GROUP: LeaveGroupRequest,
    ApiKey.OFFSET_COMMIT: OffsetCommitRequest,
    ApiKey.OFFSET_FETCH: OffsetFetchRequest,
    ApiKey.LIST_GROUPS: ListGroupsRequest,
    ApiKey.DESCRIBE_GROUPS: DescribeGroupsRequest,
    ApiKey.DELETE_GROUPS: DeleteGroupsRequest,
}


def decode_request(
    api_key: int,
    version: int,
    buf: memoryview,
    pos: int,
    versions: Mapping[ApiKey, tuple[int, int]] = SUPPORTED_VERSIONS,
) -> Any:
    """Decode the request body `buf[pos:]` (the frame after its header) of `api_key` at
    `version`. Raises KafkaDecodeError, naming the API and version, for a key or version we do
    not speak, a body that breaks its layout, or bytes left over after it.

    `versions` are the APIs and versions accepted: the broker's (SUPPORTED_VERSIONS) unless
    the caller narrows them.

    An ApiVersions request at a version we do not speak is not an error for Kafka: the caller
    answers it with `api_versions.unsupported_version_response()` without decoding its body.
    """
    context = f"{api_name(api_key)} v{version}"
    span = versions.get(api_key)  # type: ignore[call-overload]
    request_type = REQUEST_TYPES.get(api_key)  # type: ignore[call-overload]
    if span is None or request_type is None:
        raise KafkaDecodeError("API not spoken by this broker", context=context)
    if not span[0] <= version <= span[1]:
        raise KafkaDecodeError(f"version not spoken ({span[0]}-{span[1]})", context=context)
    reader = Reader(buf, pos)
    try:
        request = request_type.decode(reader, version)
        reader.expect_end("the body")
    except KafkaDecodeError as exc:
        exc.set_context(context)
        raise
    return request
