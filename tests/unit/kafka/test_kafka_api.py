"""Kafka's API keys, versions and headers: the numbers are Kafka's, the header versions follow
each API's first flexible version, and headers decode as kafka-python writes them."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.old.admin import ListPartitionReassignmentsRequest_v0 as KpListReassignments
from kafka.protocol.old.api_versions import ApiVersionsRequest as KpApiVersionsRequest
from kafka.protocol.old.metadata import MetadataRequest as KpMetadataRequest

from raftlog.kafka.api import (
    FIRST_FLEXIBLE,
    SUPPORTED_VERSIONS,
    ApiKey,
    RequestHeader,
    api_name,
    decode_request_header,
    encode_response_header,
    is_supported,
    request_header_version,
    response_header_version,
)
from raftlog.kafka.wire import KafkaDecodeError


def test_api_keys_are_kafkas_numbers() -> None:
    assert ApiKey.PRODUCE == 0 and ApiKey.FETCH == 1 and ApiKey.LIST_OFFSETS == 2
    assert ApiKey.METADATA == 3 and ApiKey.OFFSET_COMMIT == 8 and ApiKey.OFFSET_FETCH == 9
    assert ApiKey.FIND_COORDINATOR == 10 and ApiKey.JOIN_GROUP == 11 and ApiKey.HEARTBEAT == 12
    assert ApiKey.LEAVE_GROUP == 13 and ApiKey.SYNC_GROUP == 14 and ApiKey.DESCRIBE_GROUPS == 15
    assert ApiKey.LIST_GROUPS == 16 and ApiKey.API_VERSIONS == 18
    assert ApiKey.CREATE_TOPICS == 19 and ApiKey.DELETE_TOPICS == 20
    assert ApiKey.INIT_PRODUCER_ID == 22 and ApiKey.OFFSET_FOR_LEADER_EPOCH == 23
    assert ApiKey.DESCRIBE_CONFIGS == 32 and ApiKey.ALTER_CONFIGS == 33
    assert ApiKey.CREATE_PARTITIONS == 37 and ApiKey.INCREMENTAL_ALTER_CONFIGS == 44
    assert ApiKey.DELETE_GROUPS == 42 and ApiKey.ELECT_LEADERS == 43
    assert ApiKey.ALTER_PARTITION_REASSIGNMENTS == 45
    assert ApiKey.LIST_PARTITION_REASSIGNMENTS == 46
    assert ApiKey.DESCRIBE_CLUSTER == 60
    assert api_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert api_name(1000) == "api key 1000"


def test_supported_versions_are_below_the_first_flexible_except_three_apis() -> None:
    """ApiVersions v3 and the reassignment APIs (flexible from v0) are the exceptions."""
    assert SUPPORTED_VERSIONS == {
        ApiKey.API_VERSIONS: (0, 3),
        ApiKey.METADATA: (0, 8),
        ApiKey.PRODUCE: (3, 8),
        ApiKey.FETCH: (4, 11),
        ApiKey.LIST_OFFSETS: (1, 5),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 3),
        ApiKey.INIT_PRODUCER_ID: (0, 1),
        ApiKey.CREATE_TOPICS: (0, 4),
        ApiKey.DELETE_TOPICS: (0, 3),
        ApiKey.CREATE_PARTITIONS: (0, 1),
        ApiKey.ELECT_LEADERS: (0, 1),
        ApiKey.ALTER_CONFIGS: (0, 1),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 0),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
        ApiKey.DESCRIBE_CONFIGS: (0, 2),
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
    flexible = {
        ApiKey.API_VERSIONS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
    }
    for key, (_, top) in SUPPORTED_VERSIONS.items():
        if key not in flexible:
            assert top < FIRST_FLEXIBLE[key], key
    assert FIRST_FLEXIBLE[ApiKey.API_VERSIONS] == 3
    assert FIRST_FLEXIBLE[ApiKey.ALTER_PARTITION_REASSIGNMENTS] == 0
    assert FIRST_FLEXIBLE[ApiKey.LIST_PARTITION_REASSIGNMENTS] == 0
    assert FIRST_FLEXIBLE[ApiKey.ALTER_CONFIGS] == 2
    assert FIRST_FLEXIBLE[ApiKey.INCREMENTAL_ALTER_CONFIGS] == 1
    assert is_supported(ApiKey.PRODUCE, 3) and not is_supported(ApiKey.PRODUCE, 2)
    assert not is_supported(1000, 0)


@pytest.mark.parametrize(
    ("api_key", "version", "request_v", "response_v"),
    [
        (ApiKey.PRODUCE, 8, 1, 0),
        (ApiKey.PRODUCE, 9, 2, 1),
        (ApiKey.FETCH, 12, 2, 1),
        (ApiKey.API_VERSIONS, 2, 1, 0),
        (ApiKey.API_VERSIONS, 3, 2, 0),
        (ApiKey.API_VERSIONS, 4, 2, 0),
        (ApiKey.SASL_HANDSHAKE, 1, 1, 0),
        (ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 2, 1),
        (ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 2, 1),
        (ApiKey.ALTER_CONFIGS, 1, 1, 0),
        (ApiKey.ALTER_CONFIGS, 2, 2, 1),
        (ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, 0),
        (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, 2, 1),
        (1000, 5, 1, 0),
    ],
)
def test_header_versions(api_key: int, version: int, request_v: int, response_v: int) -> None:
    assert request_header_version(api_key, version) == request_v
    assert response_header_version(api_key, version) == response_v


@pytest.mark.parametrize(
    ("request_", "client_id"),
    [
        (KpMetadataRequest[1](topics=["a"]), "client-1"),
        (KpMetadataRequest[0](topics=[]), None),
        (KpApiVersionsRequest[3](client_software_name="n", client_software_version="v"), "c"),
        (KpListReassignments(timeout_ms=5, topics=None, tags={}), "c"),
    ],
)
def test_headers_decode_as_kafka_python_writes_them(request_: Any, client_id: str | None) -> None:
    # kafka-python's hand-written classes: header v1, and v2 (tagged fields) for ApiVersions v3
    # and ListPartitionReassignments v0.
    request_.with_header(correlation_id=77, client_id=client_id)
    data = request_.encode(header=True)
    header, pos = decode_request_header(memoryview(data))
    assert header == RequestHeader(request_.API_KEY, request_.API_VERSION, 77, client_id)
    assert data[pos:] == request_.encode()


def test_a_short_header_is_a_decode_error() -> None:
    with pytest.raises(KafkaDecodeError, match="request header: client_id"):
        decode_request_header(memoryview(b"\x00\x03\x00\x01\x00\x00\x00\x07\x00\x09ab"))
    with pytest.raises(KafkaDecodeError, match="request header: correlation_id"):
        decode_request_header(memoryview(b"\x00\x03\x00\x01\x00"))


def test_response_headers() -> None:
    assert encode_response_header(5, 0) == b"\x00\x00\x00\x05"
    assert encode_response_header(-2, 1) == b"\xff\xff\xff\xfe\x00"
