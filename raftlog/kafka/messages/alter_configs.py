"""AlterConfigs (API key 33), versions 0-1, and IncrementalAlterConfigs (API key 44), version 0:
an admin client changes a resource's configs (kafka-configs --alter, AdminClient.alterConfigs /
incrementalAlterConfigs; KIP-339 for the incremental one).

Byte by byte, big-endian (Kafka's AlterConfigsRequest.json, AlterConfigsResponse.json,
IncrementalAlterConfigsRequest.json and IncrementalAlterConfigsResponse.json). AlterConfigs v1
is v0 on the wire (it only lets a throttled answer come before the throttling, KIP-219).
AlterConfigs v2 and IncrementalAlterConfigs v1 are the first flexible versions: not spoken
(every client here negotiates down to these).

AlterConfigs request (v0 and v1):
  resources  array of:
    resource_type  int8    ResourceType (messages/configs.py): 2 a topic, 4 a broker
    resource_name  string  the topic's name, or the broker's id in decimal
    configs        array of (the resource's whole config set):
      name   string
      value  nullable_string
  validate_only  boolean  check, change nothing

IncrementalAlterConfigs request (v0): the same, with each config's operation:
  resources  array of:
    resource_type  int8
    resource_name  string
    configs        array of (the changes):
      name              string
      config_operation  int8  0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT (Kafka's AlterConfigOp)
      value             nullable_string  null for DELETE
  validate_only  boolean

Response (both APIs, every version spoken):
  throttle_time_ms  int32
  responses  array of:
    error_code     int16
    error_message  nullable_string  null without an error
    resource_type  int8
    resource_name  string

config_operation is kept as the int8 sent, known or not, and a null value wherever it comes:
refusing them is the handler's rule (as ElectLeaders' election_type).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.common import as_reader, check_decode_version, check_encode_version
from raftlog.kafka.wire import Reader, Writer

ALTER_API_KEY = ApiKey.ALTER_CONFIGS
INCREMENTAL_API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS


class ConfigOperation(IntEnum):
    """config_operation's values (Kafka's AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# -- AlterConfigs ---------------------------------------------------------------------------


class AlterableConfig(NamedTuple):
    name: str
    value: str | None


class AlterConfigsResource(NamedTuple):
    """One resource's whole config set."""

    resource_type: int
    resource_name: str
    configs: tuple[AlterableConfig, ...] = ()


def _read_alterable(r: Reader) -> AlterableConfig:
    return AlterableConfig(r.string("name"), r.nullable_string("value"))


def _read_resource(r: Reader) -> AlterConfigsResource:
    kind, name = r.int8("resource_type"), r.string("resource_name")
    return AlterConfigsResource(kind, name, r.array(_read_alterable, "configs"))


@dataclass(frozen=True, slots=True)
class AlterConfigsRequest:
    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool = False

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> AlterConfigsRequest:
        check_decode_version(ALTER_API_KEY, version)
        reader = as_reader(source)
        resources = reader.array(_read_resource, "resources")
        return cls(resources, reader.boolean("validate_only"))

    def encode(self, version: int) -> bytes:
        check_encode_version(ALTER_API_KEY, version)
        w = Writer()
        w.array_length(len(self.resources))
        for res in self.resources:
            w.int8(res.resource_type)
            w.string(res.resource_name)
            w.array_length(len(res.configs))
            for c in res.configs:
                w.string(c.name)
                w.nullable_string(c.value)
        w.boolean(self.validate_only)
        return w.getvalue()


# -- IncrementalAlterConfigs ----------------------------------------------------------------


class IncrementalAlterableConfig(NamedTuple):
    name: str
    config_operation: int  # ConfigOperation, or whatever int8 the client sent
    value: str | None = None


class IncrementalAlterConfigsResource(NamedTuple):
    """One resource's changes."""

    resource_type: int
    resource_name: str
    configs: tuple[IncrementalAlterableConfig, ...] = ()


def _read_incremental(r: Reader) -> IncrementalAlterableConfig:
    name, operation = r.string("name"), r.int8("config_operation")
    return IncrementalAlterableConfig(name, operation, r.nullable_string("value"))


def _read_incremental_resource(r: Reader) -> IncrementalAlterConfigsResource:
    kind, name = r.int8("resource_type"), r.string("resource_name")
    return IncrementalAlterConfigsResource(kind, name, r.array(_read_incremental, "configs"))


@dataclass(frozen=True, slots=True)
class IncrementalAlterConfigsRequest:
    resources: tuple[IncrementalAlterConfigsResource, ...]
    validate_only: bool = False

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> IncrementalAlterConfigsRequest:
        check_decode_version(INCREMENTAL_API_KEY, version)
        reader = as_reader(source)
        resources = reader.array(_read_incremental_resource, "resources")
        return cls(resources, reader.boolean("validate_only"))

    def encode(self, version: int) -> bytes:
        check_encode_version(INCREMENTAL_API_KEY, version)
        w = Writer()
        w.array_length(len(self.resources))
        for res in self.resources:
            w.int8(res.resource_type)
            w.string(res.resource_name)
            w.array_length(len(res.configs))
            for c in res.configs:
                w.string(c.name)
                w.int8(c.config_operation)
                w.nullable_string(c.value)
        w.boolean(self.validate_only)
        return w.getvalue()


# -- the responses (one layout) -------------------------------------------------------------


class AlterConfigsResourceResponse(NamedTuple):
    """One resource's outcome: error_code 0 with a null message, or its error."""

    resource_type: int
    resource_name: str
    error_code: int = 0
    error_message: str | None = None


def _write_responses(
    w: Writer, throttle_time_ms: int, responses: tuple[AlterConfigsResourceResponse, ...]
) -> None:
    w.int32(throttle_time_ms)
    w.array_length(len(responses))
    for res in responses:
        w.int16(res.error_code)
        w.nullable_string(res.error_message)
        w.int8(res.resource_type)
        w.string(res.resource_name)


def _read_response(r: Reader) -> AlterConfigsResourceResponse:
    code, message = r.int16("error_code"), r.nullable_string("error_message")
    kind, name = r.int8("resource_type"), r.string("resource_name")
    return AlterConfigsResourceResponse(kind, name, code, message)


def _read_responses(reader: Reader) -> tuple[int, tuple[AlterConfigsResourceResponse, ...]]:
    throttle_time_ms = reader.int32("throttle_time_ms")
    return throttle_time_ms, reader.array(_read_response, "responses")


@dataclass(frozen=True, slots=True)
class AlterConfigsResponse:
    responses: tuple[AlterConfigsResourceResponse, ...]
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        check_encode_version(ALTER_API_KEY, version)
        w = Writer()
        _write_responses(w, self.throttle_time_ms, self.responses)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> AlterConfigsResponse:
        check_decode_version(ALTER_API_KEY, version)
        throttle_time_ms, responses = _read_responses(as_reader(source))
        return cls(responses, throttle_time_ms)


@dataclass(frozen=True, slots=True)
class IncrementalAlterConfigsResponse:
    responses: tuple[AlterConfigsResourceResponse, ...]
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        check_encode_version(INCREMENTAL_API_KEY, version)
        w = Writer()
        _write_responses(w, self.throttle_time_ms, self.responses)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> IncrementalAlterConfigsResponse:
        check_decode_version(INCREMENTAL_API_KEY, version)
        throttle_time_ms, responses = _read_responses(as_reader(source))
        return cls(responses, throttle_time_ms)
