"""Fetch messages: round trips at every supported version, byte for byte what kafka-python's
hand-written classes write, and record parts passed through untouched."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.old.fetch import FetchRequest as KpFetchRequest
from kafka.protocol.old.fetch import FetchResponse as KpFetchResponse
from kafka_message_samples import (
    check_request_against,
    check_response_against,
    encoded,
    fetch_request,
    fetch_response,
    versions,
)

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.fetch import (
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
)

VERSIONS = versions(ApiKey.FETCH)


def kp_request(request: FetchRequest, version: int) -> Any:
    def partition(p: Any) -> tuple[Any, ...]:
        fields: tuple[Any, ...] = (p.partition,)
        if version >= 9:
            fields += (p.current_leader_epoch,)
        fields += (p.fetch_offset,)
        if version >= 5:
            fields += (p.log_start_offset,)
        return (*fields, p.partition_max_bytes)

    topics = [(name, [partition(p) for p in ps]) for name, ps in request.topics]
    head: tuple[Any, ...] = (
        request.replica_id,
        request.max_wait_ms,
        request.min_bytes,
        request.max_bytes,
        request.isolation_level,
    )
    if version >= 7:
        head += (request.session_id, request.session_epoch)
    fields: tuple[Any, ...] = (*head, topics)
    if version >= 7:
        fields += ([(name, list(ps)) for name, ps in request.forgotten_topics],)
    if version >= 11:
        fields += (request.rack_id,)
    return KpFetchRequest[version](*fields)


def kp_response(response: FetchResponse, version: int) -> Any:
    def partition(p: FetchPartitionResponse) -> tuple[Any, ...]:
        fields: tuple[Any, ...] = (p.partition, p.error_code, p.high_watermark)
        fields += (p.last_stable_offset,)
        if version >= 5:
            fields += (p.log_start_offset,)
        fields += (p.aborted_transactions,)
        if version >= 11:
            fields += (p.preferred_read_replica,)
        return (*fields, b"".join(p.records))  # type: ignore[arg-type]

    topics = [(name, [partition(p) for p in ps]) for name, ps in response.topics]
    head: tuple[Any, ...] = (response.throttle_time_ms,)
    if version >= 7:
        head += (response.error_code, response.session_id)
    return KpFetchResponse[version](*head, topics)


@pytest.mark.parametrize("version", VERSIONS)
def test_request_round_trips_and_matches_kafka_python(version: int) -> None:
    request = fetch_request(version)
    check_request_against(request, version, kp_request(request, version))


@pytest.mark.parametrize("version", VERSIONS)
def test_response_round_trips_and_matches_kafka_python(version: int) -> None:
    response = fetch_response(version)
    check_response_against(response, version, kp_response(response, version), KpFetchResponse)


def test_record_parts_pass_through_unread() -> None:
    class FileSlice:
        """Stands for the connection's sendfile part: any use but identity would fail."""

        def __len__(self) -> int:
            raise AssertionError("encode measured a records part")

    file_part, view = FileSlice(), memoryview(b"v" * 20)
    partitions = [
        FetchPartitionResponse(0, 0, 10, 10, 0, [file_part, view], 1000 + 20),
        FetchPartitionResponse(1, 0, 5, 5, 0, [], 0),
    ]
    parts, size = FetchResponse(0, 0, 0, [("t", partitions)]).encode_with_size(11)
    assert len(parts) == 4
    assert parts[1] is file_part and parts[2] is view
    head, tail = parts[0], parts[3]
    assert isinstance(head, bytes) and head.endswith((1020).to_bytes(4, "big"))
    # The empty partition's records field is present and 0 bytes long, not null.
    assert isinstance(tail, bytes) and tail.endswith(b"\x00\x00\x00\x00")
    assert size == len(head) + 1020 + len(tail)


def test_no_records_anywhere_is_one_part() -> None:
    response = FetchResponse(0, 0, 0, [("t", [FetchPartitionResponse(0, 1, -1, -1, -1, (), 0)])])
    parts, size = response.encode_with_size(4)
    assert len(parts) == 1 and size == len(parts[0])  # type: ignore[arg-type]
    assert FetchResponse.decode(parts[0], 4) == response  # type: ignore[arg-type]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_size_counts_every_byte(version: int) -> None:
    response = fetch_response(version)
    _, size = response.encode_with_size(version)
    assert size == len(encoded(response, version))
