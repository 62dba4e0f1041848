"""ApiVersions (key 18), versions 0-3: which APIs and versions the broker speaks.

Versions: v0 request empty, response error_code and api_keys. v1 adds throttle_time_ms to the
response. v2 is v1. v3 is the first flexible version: the request carries the client's
software name and version, both sides use compact arrays and strings and tagged fields (we
send none of the response's tagged fields: SupportedFeatures, FinalizedFeatures...).

Body layouts (big-endian; see raftlog.kafka.wire for the primitives):
- Request v0-2: empty. v3: compact_string client_software_name, compact_string
  client_software_version, tagged fields.
- Response v0: int16 error_code, array of (int16 api_key, int16 min_version, int16
  max_version). v1-2: then int32 throttle_time_ms. v3: int16 error_code, compact array of
  (int16 api_key, int16 min_version, int16 max_version, tagged fields), int32
  throttle_time_ms, tagged fields.

ApiVersions' response header is v0 at every version (raftlog.kafka.api), and a request at a
version the broker does not know gets `unsupported_version_response()`: a v0 body with
UNSUPPORTED_VERSION and the supported ranges, from which the client picks a version it shares.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from raftlog.kafka.api import SUPPORTED_VERSIONS, ApiKey
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.messages.common import as_reader, check_decode_version, check_encode_version
from raftlog.kafka.wire import Reader, Writer

_API_RANGE = struct.Struct(">hhh")


@dataclass(frozen=True, slots=True)
class ApiVersionsRequest:
    """An ApiVersions request; the client's software name and version come from v3 (None
    below it; encoding None at v3 writes an empty string, as the field is not nullable)."""

    client_software_name: str | None = None
    client_software_version: str | None = None

    @classmethod
    def decode(cls, source: Reader | bytes | memoryview, version: int) -> ApiVersionsRequest:
        check_decode_version(ApiKey.API_VERSIONS, version)
        reader = as_reader(source)
        if version < 3:
            return cls()
        name = reader.compact_string("client_software_name")
        software_version = reader.compact_string("client_software_version")
        reader.tagged_fields()
        return cls(name, software_version)

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.API_VERSIONS, version)
        if version < 3:
            return b""
        w = Writer()
        w.compact_string(self.client_software_name or "")
        w.compact_string(self.client_software_version or "")
        w.empty_tagged_fields()
        return w.getvalue()


def supported_api_keys() -> list[tuple[int, int, int]]:
    """(api_key, min_version, max_version) for every API the broker speaks, by key."""
    return [(int(key), low, high) for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())]


@dataclass(frozen=True, slots=True)
class ApiVersionsResponse:
    """An ApiVersions response: `api_keys` holds (api_key, min_version, max_version)."""

    error_code: int
    api_keys: list[tuple[int, int, int]]
    throttle_time_ms: int = 0

    @classmethod
    def supported(cls) -> ApiVersionsResponse:
        """The broker's answer: no error and every API it speaks."""
        return cls(ErrorCode.NONE, supported_api_keys())

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.API_VERSIONS, version)
        w = Writer()
        w.int16(self.error_code)
        flexible = version >= 3
        if flexible:
            w.compact_array_length(len(self.api_keys))
        else:
            w.array_length(len(self.api_keys))
        for key, low, high in self.api_keys:
            w.raw_bytes(_API_RANGE.pack(key, low, high))
            if flexible:
                w.empty_tagged_fields()
        if version >= 1:
            w.int32(self.throttle_time_ms)
        if flexible:
            w.empty_tagged_fields()
        return w.getvalue()

    @classmethod
    def decode(cls, source: Reader | bytes | memoryview, version: int) -> ApiVersionsResponse:
        check_decode_version(ApiKey.API_VERSIONS, version)
        reader = as_reader(source)
        flexible = version >= 3

        def api_range(r: Reader) -> tuple[int, int, int]:
            key, low, high = r.int16("api_key"), r.int16("min_version"), r.int16("max_version")
            if flexible:
                r.tagged_fields()
            return key, low, high

        error_code = reader.int16("error_code")
        if flexible:
            api_keys = reader.compact_array(api_range, "api_keys")
        else:
            api_keys = reader.array(api_range, "api_keys")
        throttle_time_ms = reader.int32("throttle_time_ms") if version >= 1 else 0
        if flexible:
            reader.tagged_fields()
        return cls(error_code, list(api_keys), throttle_time_ms)


def unsupported_version_response() -> bytes:
    """The body that answers an ApiVersions request at a version we do not speak: v0 (every
    client can read it) with UNSUPPORTED_VERSION and the ranges we do speak, so that the client
    retries at a version both sides know (KIP-511)."""
    return ApiVersionsResponse(ErrorCode.UNSUPPORTED_VERSION, supported_api_keys()).encode(0)
