"""Metadata (key 3), versions 0-8: the brokers, the controller and the topics' partitions.

Versions: v0 base. v1 makes the request's topic array nullable (null: all topics; at v0 an
empty array meant all topics, and there is no way to ask for none) and adds the brokers' rack,
the controller id and each topic's is_internal. v2 adds cluster_id. v3 adds
throttle_time_ms. v4 adds allow_auto_topic_creation to the request. v5 adds each partition's
offline_replicas. v6 is v5. v7 adds each partition's leader_epoch. v8 adds the authorized
operations: two booleans in the request, an int32 per topic and one for the cluster in the
response (INT32_MIN when not requested). v9 would be flexible: not spoken.

Body layouts (big-endian; see raftlog.kafka.wire for the primitives):
- Request: array of (string name) topics (nullable from v1); v4+: boolean
  allow_auto_topic_creation; v8+: boolean include_cluster_authorized_operations, boolean
  include_topic_authorized_operations.
- Response: v3+: int32 throttle_time_ms; array of brokers (int32 node_id, string host, int32
  port, v1+: nullable_string rack); v2+: nullable_string cluster_id; v1+: int32 controller_id;
  array of topics (int16 error_code, string name, v1+: boolean is_internal, array of
  partitions (int16 error_code, int32 partition, int32 leader, v7+: int32 leader_epoch, int32
  array replicas, int32 array isr, v5+: int32 array offline_replicas), v8+: int32
  topic_authorized_operations); v8+: int32 cluster_authorized_operations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.common import (
    AUTHORIZED_OPERATIONS_OMITTED,
    as_reader,
    check_decode_version,
    check_encode_version,
)
from raftlog.kafka.wire import Reader, Writer


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    """A Metadata request. `topics` None asks for every topic (an empty array at v0 decodes as
    None, and None encodes as the empty array there)."""

    topics: tuple[str, ...] | None
    allow_auto_topic_creation: bool = True
    include_cluster_authorized_operations: bool = False
    include_topic_authorized_operations: bool = False

    @classmethod
    def decode(cls, source: Reader | bytes | memoryview, version: int) -> MetadataRequest:
        check_decode_version(ApiKey.METADATA, version)
        reader = as_reader(source)
        if version == 0:  # not nullable; empty means all topics
            topics = reader.array(_read_topic_name, "topics") or None
        else:
            topics = reader.nullable_array(_read_topic_name, "topics")
        allow = reader.boolean("allow_auto_topic_creation") if version >= 4 else True
        cluster_ops = topic_ops = False
        if version >= 8:
            cluster_ops = reader.boolean("include_cluster_authorized_operations")
            topic_ops = reader.boolean("include_topic_authorized_operations")
        return cls(topics, allow, cluster_ops, topic_ops)

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.METADATA, version)
        w = Writer()
        topics = self.topics
        if topics is None and version == 0:
            topics = ()
        w.array_length(None if topics is None else len(topics))
        for name in topics or ():
            w.string(name)
        if version >= 4:
            w.boolean(self.allow_auto_topic_creation)
        if version >= 8:
            w.boolean(self.include_cluster_authorized_operations)
            w.boolean(self.include_topic_authorized_operations)
        return w.getvalue()


def _read_topic_name(reader: Reader) -> str:
    return reader.string("name")


class MetadataBroker(NamedTuple):
    """A broker's Kafka listener; `rack` is sent from v1."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


class MetadataPartition(NamedTuple):
    """A partition's leader, replicas and in-sync replicas (broker ids); leader -1: none."""

    error_code: int
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]


class MetadataTopic(NamedTuple):
    """A topic and its partitions (none when error_code is set, e.g.
    UNKNOWN_TOPIC_OR_PARTITION); `is_internal` is sent from v1."""

    error_code: int
    name: str
    is_internal: bool
    partitions: list[MetadataPartition]
    topic_authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    """A Metadata response. Fields a version lacks are left out when encoding and take their
    defaults (Kafka's) when decoding."""

    throttle_time_ms: int
    brokers: list[MetadataBroker]
    cluster_id: str | None
    controller_id: int
    topics: list[MetadataTopic]
    cluster_authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.METADATA, version)
        w = Writer()
        if version >= 3:
            w.int32(self.throttle_time_ms)
        w.array_length(len(self.brokers))
        for broker in self.brokers:
            w.int32(broker.node_id)
            w.string(broker.host)
            w.int32(broker.port)
            if version >= 1:
                w.nullable_string(broker.rack)
        if version >= 2:
            w.nullable_string(self.cluster_id)
        if version >= 1:
            w.int32(self.controller_id)
        w.array_length(len(self.topics))
        for topic in self.topics:
            w.int16(topic.error_code)
            w.string(topic.name)
            if version >= 1:
                w.boolean(topic.is_internal)
            w.array_length(len(topic.partitions))
            for p in topic.partitions:
                w.int16(p.error_code)
                w.int32(p.partition)
                w.int32(p.leader)
                if version >= 7:
                    w.int32(p.leader_epoch)
                _write_int32s(w, p.replicas)
                _write_int32s(w, p.isr)
                if version >= 5:
                    _write_int32s(w, p.offline_replicas)
            if version >= 8:
                w.int32(topic.topic_authorized_operations)
        if version >= 8:
            w.int32(self.cluster_authorized_operations)
        return w.getvalue()

    @classmethod
    def decode(cls, source: Reader | bytes | memoryview, version: int) -> MetadataResponse:
        check_decode_version(ApiKey.METADATA, version)
        reader = as_reader(source)

        def broker(r: Reader) -> MetadataBroker:
            node_id, host, port = r.int32("node_id"), r.string("host"), r.int32("port")
            rack = r.nullable_string("rack") if version >= 1 else None
            return MetadataBroker(node_id, host, port, rack)

        def partition(r: Reader) -> MetadataPartition:
            error_code, index = r.int16("error_code"), r.int32("partition")
            leader = r.int32("leader")
            leader_epoch = r.int32("leader_epoch") if version >= 7 else -1
            replicas = list(r.array(Reader.int32, "replicas"))
            isr = list(r.array(Reader.int32, "isr"))
            offline = list(r.array(Reader.int32, "offline_replicas")) if version >= 5 else []
            return MetadataPartition(
                error_code, index, leader, leader_epoch, replicas, isr, offline
            )

        def topic(r: Reader) -> MetadataTopic:
            error_code, name = r.int16("error_code"), r.string("name")
            is_internal = r.boolean("is_internal") if version >= 1 else False
            partitions = list(r.array(partition, "partitions"))
            operations = AUTHORIZED_OPERATIONS_OMITTED
            if version >= 8:
                operations = r.int32("topic_authorized_operations")
            return MetadataTopic(error_code, name, is_internal, partitions, operations)

        throttle_time_ms = reader.int32("throttle_time_ms") if version >= 3 else 0
        brokers = list(reader.array(broker, "brokers"))
        cluster_id = reader.nullable_string("cluster_id") if version >= 2 else None
        controller_id = reader.int32("controller_id") if version >= 1 else -1
        topics = list(reader.array(topic, "topics"))
        cluster_operations = AUTHORIZED_OPERATIONS_OMITTED
        if version >= 8:
            cluster_operations = reader.int32("cluster_authorized_operations")
        return cls(throttle_time_ms, brokers, cluster_id, controller_id, topics, cluster_operations)


def _write_int32s(w: Writer, values: list[int]) -> None:
    w.array_length(len(values))
    for value in values:
        w.int32(value)
