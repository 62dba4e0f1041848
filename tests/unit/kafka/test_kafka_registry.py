"""The Kafka listener serves exactly the APIs ApiVersions advertises: every supported API has a
handler (a missing one would be advertised and then close connections), and no handler serves
an API outside the supported ranges, whose request types the codec decodes."""

from __future__ import annotations

from raftlog.kafka.api import SUPPORTED_VERSIONS, ApiKey
from raftlog.kafka.handlers.registry import HANDLERS
from raftlog.kafka.messages import REQUEST_TYPES


def test_every_supported_api_has_a_handler_and_a_request_type() -> None:
    assert set(HANDLERS) | {ApiKey.API_VERSIONS} == set(SUPPORTED_VERSIONS)
    assert set(REQUEST_TYPES) == set(SUPPORTED_VERSIONS)
