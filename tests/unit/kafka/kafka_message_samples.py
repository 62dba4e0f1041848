"""Sample Kafka messages for the codec tests: for each API, a request and a response per
supported version, with every field set to a value that version carries (fields a version
lacks hold the default decode gives back, so that round trips compare equal)."""

from __future__ import annotations

from typing import Any

from raftlog.kafka.api import SUPPORTED_VERSIONS, ApiKey
from raftlog.kafka.messages.api_versions import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    supported_api_keys,
)
from raftlog.kafka.messages.common import AUTHORIZED_OPERATIONS_OMITTED
from raftlog.kafka.messages.fetch import (
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
)
from raftlog.kafka.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from raftlog.kafka.messages.metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
)
from raftlog.kafka.messages.produce import (
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
)


def versions(api_key: ApiKey) -> list[int]:
    """Every version the codec speaks of `api_key` (the broker's and the group APIs')."""
    low, high = SUPPORTED_VERSIONS[api_key]
    return list(range(low, high + 1))


def api_versions_request(version: int) -> ApiVersionsRequest:
    if version < 3:
        return ApiVersionsRequest()
    return ApiVersionsRequest("librdkafka", "2.0.2")


def api_versions_response(version: int) -> ApiVersionsResponse:
    return ApiVersionsResponse(0, supported_api_keys(), 25 if version >= 1 else 0)


def metadata_request(version: int) -> MetadataRequest:
    return MetadataRequest(
        ("pageviews", "clicks-ünïcode") if version % 2 == 0 else None,
        allow_auto_topic_creation=version < 4 or version % 2 == 1,
        include_cluster_authorized_operations=version >= 8,
        include_topic_authorized_operations=False,
    )


def metadata_response(version: int) -> MetadataResponse:
    brokers = [
        MetadataBroker(1, "127.0.0.1", 9092, "rack-a" if version >= 1 else None),
        MetadataBroker(2, "localhost", 19092, None),
    ]
    partitions = [
        MetadataPartition(
            0,
            0,
            1,
            7 if version >= 7 else -1,
            [1, 2, 3],
            [1, 2],
            [3] if version >= 5 else [],
        ),
        MetadataPartition(6, 1, -1, -1, [2], [], []),
    ]
    operations = 0b1011 if version >= 8 else AUTHORIZED_OPERATIONS_OMITTED
    topics = [
        MetadataTopic(0, "pageviews", False, partitions, operations),
        MetadataTopic(3, "missing", version >= 1, [], operations),
    ]
    return MetadataResponse(
        12 if version >= 3 else 0,
        brokers,
        "cluster-xyz" if version >= 2 else None,
        2 if version >= 1 else -1,
        topics,
        0b110 if version >= 8 else AUTHORIZED_OPERATIONS_OMITTED,
    )


BATCH_A = b"\x00" * 61 + b"record batch a"
BATCH_B = b"\x01" * 70


def produce_request(version: int) -> ProduceRequest:
    return ProduceRequest(
        "txn-1" if version % 2 else None,
        -1,
        30000,
        (
            ("pageviews", ((0, memoryview(BATCH_A)), (3, memoryview(BATCH_B)))),
            ("clicks", ((1, None),)),
            ("empty", ()),
        ),
    )


def produce_response(version: int) -> ProduceResponse:
    def result(partition: int, error_code: int, base_offset: int) -> ProducePartitionResponse:
        return ProducePartitionResponse(
            partition,
            error_code,
            base_offset,
            1_700_000_000_000 if partition == 0 else -1,
            42 if version >= 5 else -1,
            "not the leader" if version >= 8 and error_code else None,
        )

    return ProduceResponse(
        [("pageviews", [result(0, 0, 1000), result(3, 6, -1)]), ("clicks", [])],
        throttle_time_ms=5,
    )


def fetch_request(version: int) -> FetchRequest:
    def partition(index: int, offset: int) -> FetchPartition:
        return FetchPartition(
            index,
            4 if version >= 9 else -1,
            offset,
            10 if version >= 5 else -1,
            1048576,
        )

    return FetchRequest(
        -1,
        500,
        1,
        52428800,
        1,
        77 if version >= 7 else 0,
        3 if version >= 7 else -1,
        (("pageviews", (partition(0, 100), partition(2, 0))), ("clicks", ())),
        (("old-topic", (0, 5)),) if version >= 7 else (),
        "rack-a" if version >= 11 else "",
    )


def fetch_response(version: int) -> FetchResponse:
    partitions = [
        FetchPartitionResponse(
            0,
            0,
            1200,
            1150,
            10 if version >= 5 else -1,
            (BATCH_A + BATCH_B,),
            len(BATCH_A) + len(BATCH_B),
            None,
            2 if version >= 11 else -1,
        ),
        FetchPartitionResponse(
            2, 1, -1, -1, 0 if version >= 5 else -1, (), 0, [(9001, 120), (9002, 130)]
        ),
    ]
    return FetchResponse(
        7,
        0,  # error_code: sent from v7
        77 if version >= 7 else 0,
        [("pageviews", partitions), ("clicks", [])],
    )


def list_offsets_request(version: int) -> ListOffsetsRequest:
    return ListOffsetsRequest(
        -1,
        1 if version >= 2 else 0,
        (
            (
                "pageviews",
                (
                    ListOffsetsPartition(0, 4 if version >= 4 else -1, -1),
                    ListOffsetsPartition(1, -1, -2),
                    ListOffsetsPartition(2, -1, 1_700_000_000_000),
                ),
            ),
        ),
    )


def list_offsets_response(version: int) -> ListOffsetsResponse:
    return ListOffsetsResponse(
        3 if version >= 2 else 0,
        [
            (
                "pageviews",
                [
                    ListOffsetsPartitionResponse(0, 0, -1, 1200, 4 if version >= 4 else -1),
                    ListOffsetsPartitionResponse(1, 75, -1, -1, -1),
                ],
            )
        ],
    )


SAMPLES: dict[ApiKey, tuple[Any, Any]] = {
    ApiKey.API_VERSIONS: (api_versions_request, api_versions_response),
    ApiKey.METADATA: (metadata_request, metadata_response),
    ApiKey.PRODUCE: (produce_request, produce_response),
    ApiKey.FETCH: (fetch_request, fetch_response),
    ApiKey.LIST_OFFSETS: (list_offsets_request, list_offsets_response),
}


def encoded(message: Any, version: int) -> bytes:
    """`message.encode(version)` as one bytes (Fetch responses encode to parts)."""
    data = message.encode(version)
    return data if isinstance(data, bytes) else b"".join(bytes(part) for part in data)


def check_request_against(request: Any, version: int, kp_request: Any) -> None:
    """Our encoding is kafka-python's byte for byte, and decodes back to `request`."""
    data = encoded(request, version)
    assert data == kp_request.encode()
    assert type(request).decode(data, version) == request


def check_response_against(response: Any, version: int, kp_response: Any, kp_type: Any) -> None:
    """Our encoding is kafka-python's byte for byte, kafka-python decodes it to the same
    values, and ours decodes back to `response`."""
    data = encoded(response, version)
    assert data == kp_response.encode()
    assert kp_type[version].decode(data) == kp_response
    assert type(response).decode(data, version) == response
