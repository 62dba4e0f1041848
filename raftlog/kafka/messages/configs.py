"""DescribeConfigs (API key 32), versions 0-2: the configs of topics and brokers.

Byte by byte, big-endian (Kafka's DescribeConfigsRequest.json and ...Response.json). Fields
a version lacks take their defaults when decoded and are left out when encoded.

Request (v2 is v1):
  resources  array of:
    resource_type       int8    ResourceType: 2 a topic, 4 a broker
    resource_name       string  the topic's name, or the broker's id in decimal
    configuration_keys  nullable array of string  null: every config
  include_synonyms  boolean  v1+

Response (v2 is v1; v2 only says the broker answers before it throttles):
  throttle_time_ms  int32
  results  array of:
    error_code     int16
    error_message  nullable_string
    resource_type  int8
    resource_name  string
    configs        array of:
      name           string
      value          nullable_string
      read_only      boolean
      is_default     boolean  v0 only
      config_source  int8     v1+: ConfigSource
      is_sensitive   boolean
      synonyms       array of (v1+; empty unless include_synonyms):
        name    string
        value   nullable_string
        source  int8  ConfigSource

`is_default` and `config_source` say the same thing in two eras: an entry's `is_default` is
what v0 carries, and decoding v1+ derives it (source DEFAULT_CONFIG), as Kafka's clients do.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.common import as_reader, check_decode_version, check_encode_version
from raftlog.kafka.wire import Reader, Writer

API_KEY = ApiKey.DESCRIBE_CONFIGS


class ResourceType(IntEnum):
    """Kafka's ConfigResource.Type codes."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(IntEnum):
    """Where a config's value comes from (Kafka's DescribeConfigsResponse.ConfigSource)."""

    UNKNOWN = -1  # what v0 entries decode to: v0 carries only is_default
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class DescribeConfigsResource(NamedTuple):
    resource_type: int
    resource_name: str
    configuration_keys: tuple[str, ...] | None = None  # None: every config


def _read_string(r: Reader) -> str:
    return r.string()


def _read_resource(r: Reader) -> DescribeConfigsResource:
    kind = r.int8("resource_type")
    name = r.string("resource_name")
    return DescribeConfigsResource(kind, name, r.nullable_array(_read_string, "configuration_keys"))


@dataclass(frozen=True, slots=True)
class DescribeConfigsRequest:
    resources: tuple[DescribeConfigsResource, ...]
    include_synonyms: bool = False  # sent from v1

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> DescribeConfigsRequest:
        check_decode_version(API_KEY, version)
        reader = as_reader(source)
        resources = reader.array(_read_resource, "resources")
        synonyms = reader.boolean("include_synonyms") if version >= 1 else False
        return cls(resources, synonyms)

    def encode(self, version: int) -> bytes:
        check_encode_version(API_KEY, version)
        w = Writer()
        w.array_length(len(self.resources))
        for res in self.resources:
            w.int8(res.resource_type)
            w.string(res.resource_name)
            keys = res.configuration_keys
            w.array_length(None if keys is None else len(keys))
            for key in keys or ():
                w.string(key)
        if version >= 1:
            w.boolean(self.include_synonyms)
        return w.getvalue()


class DescribeConfigsSynonym(NamedTuple):
    name: str
    value: str | None
    source: int  # ConfigSource


class DescribeConfigsResourceResult(NamedTuple):
    """One config entry. As the broker builds it, is_default is config_source ==
    DEFAULT_CONFIG (v0 sends the one, v1+ the other)."""

    name: str
    value: str | None
    read_only: bool = True
    config_source: int = ConfigSource.UNKNOWN  # sent from v1
    is_sensitive: bool = False
    synonyms: tuple[DescribeConfigsSynonym, ...] = ()  # sent from v1
    is_default: bool = False  # sent in v0 only


def _read_synonym(r: Reader) -> DescribeConfigsSynonym:
    name = r.string("name")
    return DescribeConfigsSynonym(name, r.nullable_string("value"), r.int8("source"))


class DescribeConfigsResult(NamedTuple):
    """One resource's configs, or its error (then no configs)."""

    resource_type: int
    resource_name: str
    configs: tuple[DescribeConfigsResourceResult, ...] = ()
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribeConfigsResponse:
    results: tuple[DescribeConfigsResult, ...]
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        check_encode_version(API_KEY, version)
        w = Writer()
        w.int32(self.throttle_time_ms)
        w.array_length(len(self.results))
        for res in self.results:
            w.int16(res.error_code)
            w.nullable_string(res.error_message)
            w.int8(res.resource_type)
            w.string(res.resource_name)
            w.array_length(len(res.configs))
            for c in res.configs:
                w.string(c.name)
                w.nullable_string(c.value)
                w.boolean(c.read_only)
                if version == 0:
                    w.boolean(c.is_default)
                else:
                    w.int8(c.config_source)
                w.boolean(c.is_sensitive)
                if version >= 1:
                    w.array_length(len(c.synonyms))
                    for s in c.synonyms:
                        w.string(s.name)
                        w.nullable_string(s.value)
                        w.int8(s.source)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> DescribeConfigsResponse:
        check_decode_version(API_KEY, version)
        reader = as_reader(source)

        def entry(r: Reader) -> DescribeConfigsResourceResult:
            name, value = r.string("name"), r.nullable_string("value")
            read_only = r.boolean("read_only")
            if version == 0:
                is_default = r.boolean("is_default")
                config_source = int(ConfigSource.UNKNOWN)
            else:
                config_source = r.int8("config_source")
                is_default = config_source == ConfigSource.DEFAULT_CONFIG
            sensitive = r.boolean("is_sensitive")
            synonyms = r.array(_read_synonym, "synonyms") if version >= 1 else ()
            return DescribeConfigsResourceResult(
                name, value, read_only, config_source, sensitive, synonyms, is_default
            )

        def result(r: Reader) -> DescribeConfigsResult:
            error_code, message = r.int16("error_code"), r.nullable_string("error_message")
            kind, name = r.int8("resource_type"), r.string("resource_name")
            return DescribeConfigsResult(kind, name, r.array(entry, "configs"), error_code, message)

        throttle_time_ms = reader.int32("throttle_time_ms")
        return cls(reader.array(result, "results"), throttle_time_ms)
