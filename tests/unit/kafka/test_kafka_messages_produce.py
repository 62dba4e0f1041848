"""Produce messages: round trips at every supported version, byte for byte what kafka-python's
hand-written classes write, records as views of the frame."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.old.produce import ProduceRequest as KpProduceRequest
from kafka.protocol.old.produce import ProduceResponse as KpProduceResponse
from kafka_message_samples import (
    BATCH_A,
    check_request_against,
    check_response_against,
    produce_request,
    produce_response,
    versions,
)

from raftlog.invariants import InvariantError
from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages import decode_request
from raftlog.kafka.messages.produce import ProduceRequest, ProduceResponse
from raftlog.kafka.wire import KafkaDecodeError

VERSIONS = versions(ApiKey.PRODUCE)


def kp_request(request: ProduceRequest, version: int) -> Any:
    topics = [
        (name, [(index, None if records is None else bytes(records)) for index, records in ps])
        for name, ps in request.topics
    ]
    return KpProduceRequest[version](
        request.transactional_id, request.acks, request.timeout_ms, topics
    )


def kp_response(response: ProduceResponse, version: int) -> Any:
    def partition(p: Any) -> tuple[Any, ...]:
        fields: tuple[Any, ...] = (p.partition, p.error_code, p.base_offset, p.log_append_time_ms)
        if version >= 5:
            fields += (p.log_start_offset,)
        if version >= 8:
            fields += ([], p.error_message)
        return fields

    topics = [(name, [partition(p) for p in ps]) for name, ps in response.topics]
    return KpProduceResponse[version](topics, response.throttle_time_ms)


@pytest.mark.parametrize("version", VERSIONS)
def test_request_round_trips_and_matches_kafka_python(version: int) -> None:
    request = produce_request(version)
    check_request_against(request, version, kp_request(request, version))


@pytest.mark.parametrize("version", VERSIONS)
def test_response_round_trips_and_matches_kafka_python(version: int) -> None:
    response = produce_response(version)
    check_response_against(response, version, kp_response(response, version), KpProduceResponse)


def test_records_are_views_of_the_frame() -> None:
    frame = bytearray(b"\x00" * 10) + produce_request(7).encode(7)
    request = decode_request(ApiKey.PRODUCE, 7, memoryview(frame), 10)
    records = request.topics[0][1][0][1]
    assert isinstance(records, memoryview) and records.obj is frame
    assert bytes(records) == BATCH_A
    assert request.topics[1][1][0] == (1, None)


def test_unsupported_versions_are_refused() -> None:
    with pytest.raises(KafkaDecodeError, match="Produce v2: version 2 is not one we speak"):
        ProduceRequest.decode(b"", 2)
    with pytest.raises(KafkaDecodeError, match=r"Produce v9: version not spoken \(3-8\)"):
        decode_request(ApiKey.PRODUCE, 9, memoryview(b""), 0)
    with pytest.raises(InvariantError):
        produce_response(9).encode(9)


def test_a_cut_records_field_names_its_path() -> None:
    data = produce_request(7).encode(7)
    with pytest.raises(KafkaDecodeError) as info:
        decode_request(ApiKey.PRODUCE, 7, memoryview(data[:60]), 0)
    assert str(info.value).startswith("Produce v7: topics[0].partitions[0].records: ")
    assert "75 bytes announced" in str(info.value)
    with pytest.raises(KafkaDecodeError, match="Produce v7: 1 bytes left over after the body"):
        decode_request(ApiKey.PRODUCE, 7, memoryview(data + b"\x00"), 0)
