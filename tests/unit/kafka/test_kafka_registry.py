"""The Kafka listener serves exactly the APIs ApiVersions advertises: every supported API has a
handler (a missing one would be advertised and then close connections), and no handler serves
an API outside the supported ranges. The codec also decodes the APIs of GROUP_VERSIONS, whose
handlers have not landed (none now)."""

from __future__ import annotations

from raftlog.kafka.api import GROUP_VERSIONS, SUPPORTED_VERSIONS, ApiKey
from raftlog.kafka.handlers.registry import HANDLERS
from raftlog.kafka.messages import REQUEST_TYPES


def test_every_supported_api_has_a_handler_and_a_request_type() -> None:
    assert set(HANDLERS) | {ApiKey.API_VERSIONS} == set(SUPPORTED_VERSIONS)
    assert set(REQUEST_TYPES) == set(SUPPORTED_VERSIONS) | set(GROUP_VERSIONS)
