"""Kafka's API keys, the versions raftlog speaks, and the request and response headers.

Rules this module keeps:
- Pure, as the rest of raftlog.kafka.
- `SUPPORTED_VERSIONS` is what ApiVersions advertises and the only versions the broker
  decodes: every range ends below its API's first flexible version, so the bodies need no
  tagged fields (docs: DESIGN.md, "The Kafka wire protocol"), except ApiVersions v3 and the
  reassignment APIs (AlterPartitionReassignments, ListPartitionReassignments), which Kafka
  defined flexible from v0: their codecs write and skip tagged fields themselves.
- `FIRST_FLEXIBLE` comes from each API's "flexibleVersions" in Kafka's message definitions
  (clients/src/main/resources/common/message/*Request.json); it decides the header versions.

Framing, byte by byte (all big-endian):
- A request frame: int32 size (of what follows), then the request header, then the body.
- Request header v1: int16 api_key, int16 api_version, int32 correlation_id, nullable_string
  client_id (int16 length, -1 for null). v2 (an API's flexible versions): v1 then tagged
  fields (uvarint count and the fields; we skip them). Note that client_id stays an int16
  string in v2, not a compact one.
- A response frame: int32 size, then the response header, then the body.
- Response header v0: int32 correlation_id. v1 (flexible versions): v0 then tagged fields (one
  0 byte: none). ApiVersions answers with header v0 at every version, so that a client that
  sent a version the broker does not know can still read the answer.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

from raftlog.kafka.wire import INT32, KafkaDecodeError, Reader


class ApiKey(IntEnum):
    """Kafka's API keys (its ApiKeys.java numbering), 0 through DescribeCluster (60)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60


def api_name(api_key: int) -> str:
    """Kafka's name for an API ("ListOffsets"), or "api key N" for a key we do not know."""
    try:
        key = ApiKey(api_key)
    except ValueError:
        return f"api key {api_key}"
    return "".join(word.capitalize() for word in key.name.split("_"))


# What ApiVersions advertises (min, max inclusive). Each range is the overlap the four test
# clients need (kcat 1.7.1/librdkafka 2.0.2, confluent-kafka 2.16, kafka-python 3.0, aiokafka
# 0.14): Produce from 3 (record batch v2), Fetch to 11 (12 is flexible, 13 uses topic ids).
SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 8),
    ApiKey.FETCH: (4, 11),
    ApiKey.LIST_OFFSETS: (1, 5),
    ApiKey.METADATA: (0, 8),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (0, 4),
    ApiKey.DELETE_TOPICS: (0, 3),
    ApiKey.CREATE_PARTITIONS: (0, 1),
    ApiKey.ELECT_LEADERS: (0, 1),
    # AlterConfigs v2 and IncrementalAlterConfigs v1 are flexible; every client here speaks
    # the versions below them too (librdkafka and the Java client both APIs from v0,
    # kafka-python both, aiokafka AlterConfigs v0-1).
    ApiKey.ALTER_CONFIGS: (0, 1),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 0),
    # Flexible from v0 (there is no other form); Alter v1 adds allow_replication_factor_change
    # (KIP-860), which kafka-python 3.0 sends when a broker offers it.
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.INIT_PRODUCER_ID: (0, 1),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 3),
    ApiKey.DESCRIBE_CONFIGS: (0, 2),
    # Consumer groups (issue #24), each range below its first flexible version: OffsetCommit
    # from 2 (Kafka deprecates 0-1, and v1's per-partition commit timestamp is gone from v2),
    # OffsetFetch from 1 (v0 read ZooKeeper), LeaveGroup to 3 (batch leave, KIP-345).
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 3),
    ApiKey.FIND_COORDINATOR: (0, 2),
    ApiKey.OFFSET_COMMIT: (2, 7),
    ApiKey.OFFSET_FETCH: (1, 5),
    ApiKey.LIST_GROUPS: (0, 2),
    ApiKey.DESCRIBE_GROUPS: (0, 4),
    ApiKey.DELETE_GROUPS: (0, 1),
}

# Each API's first flexible version ("flexibleVersions": "N+"); SaslHandshake and OffsetDelete
# have none ("none") and are absent.
FIRST_FLEXIBLE: dict[ApiKey, int] = {
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 9,
    ApiKey.LEADER_AND_ISR: 4,
    ApiKey.STOP_REPLICA: 2,
    ApiKey.UPDATE_METADATA: 6,
    ApiKey.CONTROLLED_SHUTDOWN: 3,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 6,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 6,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 4,
    ApiKey.SYNC_GROUP: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 3,
    ApiKey.API_VERSIONS: 3,
    ApiKey.CREATE_TOPICS: 5,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.DELETE_RECORDS: 2,
    ApiKey.INIT_PRODUCER_ID: 2,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.END_TXN: 3,
    ApiKey.WRITE_TXN_MARKERS: 1,
    ApiKey.TXN_OFFSET_COMMIT: 3,
    ApiKey.DESCRIBE_ACLS: 2,
    ApiKey.CREATE_ACLS: 2,
    ApiKey.DELETE_ACLS: 2,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.ALTER_REPLICA_LOG_DIRS: 2,
    ApiKey.DESCRIBE_LOG_DIRS: 2,
    ApiKey.SASL_AUTHENTICATE: 2,
    ApiKey.CREATE_PARTITIONS: 2,
    ApiKey.CREATE_DELEGATION_TOKEN: 2,
    ApiKey.RENEW_DELEGATION_TOKEN: 2,
    ApiKey.EXPIRE_DELEGATION_TOKEN: 2,
    ApiKey.DESCRIBE_DELEGATION_TOKEN: 2,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.ELECT_LEADERS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: 1,
    ApiKey.ALTER_CLIENT_QUOTAS: 1,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.VOTE: 0,
    ApiKey.BEGIN_QUORUM_EPOCH: 1,
    ApiKey.END_QUORUM_EPOCH: 1,
    ApiKey.DESCRIBE_QUORUM: 0,
    ApiKey.ALTER_PARTITION: 0,
    ApiKey.UPDATE_FEATURES: 0,
    ApiKey.ENVELOPE: 0,
    ApiKey.FETCH_SNAPSHOT: 0,
    ApiKey.DESCRIBE_CLUSTER: 0,
}


def is_supported(api_key: int, version: int) -> bool:
    """Whether raftlog speaks `version` of `api_key`."""
    span = SUPPORTED_VERSIONS.get(api_key)  # type: ignore[call-overload]
    return span is not None and span[0] <= version <= span[1]


def is_flexible(api_key: int, version: int) -> bool:
    """Whether `version` of `api_key` is one of its flexible versions (compact types and tagged
    fields in the body, header v2/v1)."""
    first = FIRST_FLEXIBLE.get(api_key)  # type: ignore[call-overload]
    return first is not None and version >= first


def request_header_version(api_key: int, version: int) -> int:
    """2 for an API's flexible versions, else 1 (also for a key we do not know: Kafka's
    clients send v1 or v2, and v1 is the prefix of v2 that holds the correlation id)."""
    return 2 if is_flexible(api_key, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    """1 for an API's flexible versions, else 0; ApiVersions always 0."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, version) else 0


class RequestHeader(NamedTuple):
    """A request's header. `api_key` is an int, not always an ApiKey: a client may send a key
    we do not know, and the broker still answers it by correlation id."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def decode_request_header(buf: memoryview) -> tuple[RequestHeader, int]:
    """The header at the start of `buf` (a frame without its size prefix) and the position
    where the body starts. Header v2 for an API's flexible versions, else v1."""
    reader = Reader(buf)
    try:
        api_key = reader.int16("api_key")
        api_version = reader.int16("api_version")
        correlation_id = reader.int32("correlation_id")
        client_id = reader.nullable_string("client_id")
        if request_header_version(api_key, api_version) == 2:
            reader.tagged_fields()
    except KafkaDecodeError as exc:
        exc.set_context("request header")
        raise
    return RequestHeader(api_key, api_version, correlation_id, client_id), reader.pos


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    """Response header v0 (the correlation id) or v1 (with empty tagged fields)."""
    if header_version == 0:
        return INT32.pack(correlation_id)
    return INT32.pack(correlation_id) + b"\x00"
