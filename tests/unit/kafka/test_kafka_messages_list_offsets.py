"""ListOffsets messages: round trips at every supported version, byte for byte what
kafka-python's hand-written classes write."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.old.list_offsets import ListOffsetsRequest as KpListOffsetsRequest
from kafka.protocol.old.list_offsets import ListOffsetsResponse as KpListOffsetsResponse
from kafka_message_samples import (
    check_request_against,
    check_response_against,
    list_offsets_request,
    list_offsets_response,
    versions,
)

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse

VERSIONS = versions(ApiKey.LIST_OFFSETS)


def kp_request(request: ListOffsetsRequest, version: int) -> Any:
    def partition(p: Any) -> tuple[Any, ...]:
        if version >= 4:
            return (p.partition, p.current_leader_epoch, p.timestamp)
        return (p.partition, p.timestamp)

    topics = [(name, [partition(p) for p in ps]) for name, ps in request.topics]
    if version >= 2:
        return KpListOffsetsRequest[version](request.replica_id, request.isolation_level, topics)
    return KpListOffsetsRequest[version](request.replica_id, topics)


def kp_response(response: ListOffsetsResponse, version: int) -> Any:
    def partition(p: Any) -> tuple[Any, ...]:
        fields = (p.partition, p.error_code, p.timestamp, p.offset)
        return (*fields, p.leader_epoch) if version >= 4 else fields

    topics = [(name, [partition(p) for p in ps]) for name, ps in response.topics]
    if version >= 2:
        return KpListOffsetsResponse[version](response.throttle_time_ms, topics)
    return KpListOffsetsResponse[version](topics)


@pytest.mark.parametrize("version", VERSIONS)
def test_request_round_trips_and_matches_kafka_python(version: int) -> None:
    request = list_offsets_request(version)
    check_request_against(request, version, kp_request(request, version))


@pytest.mark.parametrize("version", VERSIONS)
def test_response_round_trips_and_matches_kafka_python(version: int) -> None:
    response = list_offsets_response(version)
    check_response_against(response, version, kp_response(response, version), KpListOffsetsResponse)
