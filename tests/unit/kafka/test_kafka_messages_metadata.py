"""Metadata messages: round trips at every supported version, byte for byte what
kafka-python's hand-written classes write; v0's "empty means all topics"."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.old.metadata import MetadataRequest as KpMetadataRequest
from kafka.protocol.old.metadata import MetadataResponse as KpMetadataResponse
from kafka_message_samples import (
    check_request_against,
    check_response_against,
    metadata_request,
    metadata_response,
    versions,
)
from kp_oracle import bits

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.metadata import MetadataRequest, MetadataResponse
from raftlog.kafka.wire import KafkaDecodeError

VERSIONS = versions(ApiKey.METADATA)


def kp_request(request: MetadataRequest, version: int) -> Any:
    topics = None if request.topics is None else list(request.topics)
    if version == 0:
        return KpMetadataRequest[0](topics or [])
    fields: tuple[Any, ...] = (topics,)
    if version >= 4:
        fields += (request.allow_auto_topic_creation,)
    if version >= 8:
        fields += (
            request.include_cluster_authorized_operations,
            request.include_topic_authorized_operations,
        )
    return KpMetadataRequest[version](*fields)


def kp_response(response: MetadataResponse, version: int) -> Any:
    def broker(b: Any) -> tuple[Any, ...]:
        return (b.node_id, b.host, b.port, b.rack) if version >= 1 else (b.node_id, b.host, b.port)

    def partition(p: Any) -> tuple[Any, ...]:
        fields: tuple[Any, ...] = (p.error_code, p.partition, p.leader)
        if version >= 7:
            fields += (p.leader_epoch,)
        fields += (p.replicas, p.isr)
        if version >= 5:
            fields += (p.offline_replicas,)
        return fields

    def topic(t: Any) -> tuple[Any, ...]:
        fields: tuple[Any, ...] = (t.error_code, t.name)
        if version >= 1:
            fields += (t.is_internal,)
        fields += ([partition(p) for p in t.partitions],)
        if version >= 8:
            fields += (bits(t.topic_authorized_operations),)
        return fields

    fields: tuple[Any, ...] = ()
    if version >= 3:
        fields += (response.throttle_time_ms,)
    fields += ([broker(b) for b in response.brokers],)
    if version >= 2:
        fields += (response.cluster_id,)
    if version >= 1:
        fields += (response.controller_id,)
    fields += ([topic(t) for t in response.topics],)
    if version >= 8:
        fields += (bits(response.cluster_authorized_operations),)
    return KpMetadataResponse[version](*fields)


@pytest.mark.parametrize("version", VERSIONS)
def test_request_round_trips_and_matches_kafka_python(version: int) -> None:
    request = metadata_request(version)
    check_request_against(request, version, kp_request(request, version))


@pytest.mark.parametrize("version", VERSIONS)
def test_response_round_trips_and_matches_kafka_python(version: int) -> None:
    response = metadata_response(version)
    check_response_against(response, version, kp_response(response, version), KpMetadataResponse)


def test_all_topics_is_empty_at_v0_and_null_after() -> None:
    everything = MetadataRequest(None)
    assert everything.encode(0) == b"\x00\x00\x00\x00"
    assert MetadataRequest.decode(b"\x00\x00\x00\x00", 0) == everything
    assert everything.encode(1) == b"\xff\xff\xff\xff"
    assert MetadataRequest.decode(b"\x00\x00\x00\x00", 1) == MetadataRequest(())
    with pytest.raises(KafkaDecodeError, match="topics: null where an array is required"):
        MetadataRequest.decode(b"\xff\xff\xff\xff", 0)
