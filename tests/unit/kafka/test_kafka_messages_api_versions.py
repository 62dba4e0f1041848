"""ApiVersions messages: round trips at every supported version, byte for byte what
kafka-python's hand-written classes write, and the answer to a version we do not know."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.old.api_versions import ApiVersionsRequest as KpApiVersionsRequest
from kafka.protocol.old.api_versions import ApiVersionsResponse as KpApiVersionsResponse
from kafka_message_samples import (
    api_versions_request,
    api_versions_response,
    check_request_against,
    versions,
)

from raftlog.kafka.api import SUPPORTED_VERSIONS, ApiKey
from raftlog.kafka.messages import decode_request
from raftlog.kafka.messages.api_versions import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    unsupported_version_response,
)

VERSIONS = versions(ApiKey.API_VERSIONS)


def kp_request(request: ApiVersionsRequest, version: int) -> Any:
    if version >= 3:
        return KpApiVersionsRequest[version](
            request.client_software_name, request.client_software_version, {}
        )
    return KpApiVersionsRequest[version]()


def kp_response(response: ApiVersionsResponse, version: int) -> Any:
    if version >= 3:
        keys = [(*key, {}) for key in response.api_keys]
        return KpApiVersionsResponse[version](
            response.error_code, keys, response.throttle_time_ms, {}
        )
    keys = [tuple(key) for key in response.api_keys]
    if version >= 1:
        return KpApiVersionsResponse[version](response.error_code, keys, response.throttle_time_ms)
    return KpApiVersionsResponse[version](response.error_code, keys)


@pytest.mark.parametrize("version", VERSIONS)
def test_request_round_trips_and_matches_kafka_python(version: int) -> None:
    request = api_versions_request(version)
    check_request_against(request, version, kp_request(request, version))


@pytest.mark.parametrize("version", VERSIONS)
def test_response_round_trips_and_matches_kafka_python(version: int) -> None:
    response = api_versions_response(version)
    data = response.encode(version)
    expected = kp_response(response, version)
    assert data == expected.encode()
    decoded = KpApiVersionsResponse[version].decode(data)
    # kafka-python's own decoder drops the items' (empty) tagged fields at v3.
    assert decoded.error_code == response.error_code
    assert [tuple(key)[:3] for key in decoded.api_keys] == response.api_keys
    assert ApiVersionsResponse.decode(data, version) == response


def test_a_v3_request_with_tagged_fields_decodes() -> None:
    body = b"\x05kcat\x061.7.1" + b"\x01\x07\x02hi"
    assert decode_request(ApiKey.API_VERSIONS, 3, memoryview(body), 0) == ApiVersionsRequest(
        "kcat", "1.7.1"
    )


def test_the_answer_to_an_unknown_version_is_v0_with_unsupported_version() -> None:
    decoded = KpApiVersionsResponse[0].decode(unsupported_version_response())
    assert decoded.error_code == 35
    advertised = {key: (low, high) for key, low, high in decoded.api_keys}
    assert advertised == {int(key): span for key, span in SUPPORTED_VERSIONS.items()}
    assert ApiVersionsResponse.supported().error_code == 0
