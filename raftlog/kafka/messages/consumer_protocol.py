"""Kafka's consumer protocol: what consumers put in a group's opaque bytes, JoinGroup's
protocol metadata (a ConsumerProtocolSubscription) and SyncGroup's assignment (a
ConsumerProtocolAssignment), versions 0-3.

The coordinator never needs these to run a group (the group leader, a client, computes the
assignment); raftlog reads them to show a Kafka group's members, subscriptions and assignment.

Byte by byte, big-endian (Kafka's ConsumerProtocolSubscription.json and
ConsumerProtocolAssignment.json; never flexible). Each starts with its own version:

Subscription (v1 adds owned_partitions, KIP-429's cooperative rebalance; v2 adds
generation_id; v3 adds rack_id, KIP-881):
  version           int16
  topics            array of string
  user_data         nullable_bytes   the assignor's own data (the sticky assignors' state)
  owned_partitions  array of (v1+):
    topic       string
    partitions  array of int32
  generation_id     int32            v2+; -1 unknown
  rack_id           nullable_string  v3+

Assignment (v1-v3 are v0 on the wire; the versions follow the subscription's):
  version              int16
  assigned_partitions  array of:
    topic       string
    partitions  array of int32
  user_data            nullable_bytes

Kafka's rule for newer versions (ConsumerProtocol.java): a version may only add fields at the
end, so a version above 3 is read as v3 and what follows v3's fields is ignored; as Kafka's
reader, bytes after the fields of the version read are ignored at every version. A negative
version, or bytes that do not hold the fields, raise KafkaDecodeError naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from raftlog.invariants import require
from raftlog.kafka.messages.common import (
    as_reader,
    read_int32,
    read_string,
    read_topics,
    write_strings,
    write_topics,
)
from raftlog.kafka.wire import KafkaDecodeError, Reader, Writer

PROTOCOL_TYPE = "consumer"  # JoinGroup's protocol_type for consumers
VERSION_MAX = 3  # the newest version we know of either structure
NO_GENERATION = -1


class TopicPartitions(NamedTuple):
    """Kafka's TopicPartition of the consumer protocol: a topic and some of its partitions."""

    topic: str
    partitions: tuple[int, ...]


def _read_version(reader: Reader, name: str) -> int:
    """The structure's version, refused when negative. A version above VERSION_MAX is returned
    as it is: every field is read from the version that added it, so such a version reads as
    VERSION_MAX and what it added after our fields is left unread."""
    try:
        version = reader.int16("version")
    except KafkaDecodeError as exc:
        exc.set_context(name)
        raise
    if version < 0:
        raise KafkaDecodeError(f"negative version {version}", "version", name)
    return version


def _context(name: str, version: int) -> str:
    if version > VERSION_MAX:
        return f"{name} v{version} (read as v{VERSION_MAX})"
    return f"{name} v{version}"


def _read_partitions(reader: Reader, field: str) -> tuple[TopicPartitions, ...]:
    return tuple(TopicPartitions(*t) for t in read_topics(reader, read_int32, "topic", field))


@dataclass(frozen=True, slots=True)
class ConsumerProtocolSubscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartitions, ...] = ()  # sent from v1
    generation_id: int = NO_GENERATION  # sent from v2
    rack_id: str | None = None  # sent from v3

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview
    ) -> ConsumerProtocolSubscription:
        """The subscription in `source` (JoinGroup's protocol metadata) at whatever version
        it says."""
        reader = as_reader(source)
        version = _read_version(reader, "ConsumerProtocolSubscription")
        try:
            topics = reader.array(read_string, "topics")
            user_data = reader.nullable_bytes("user_data")
            owned = _read_partitions(reader, "owned_partitions") if version >= 1 else ()
            generation_id = reader.int32("generation_id") if version >= 2 else NO_GENERATION
            rack_id = reader.nullable_string("rack_id") if version >= 3 else None
        except KafkaDecodeError as exc:
            exc.set_context(_context("ConsumerProtocolSubscription", version))
            raise
        data = None if user_data is None else bytes(user_data)
        return cls(topics, data, owned, generation_id, rack_id)

    def encode(self, version: int) -> bytes:
        require(0 <= version <= VERSION_MAX, f"ConsumerProtocolSubscription v{version}")
        w = Writer()
        w.int16(version)
        write_strings(w, self.topics)
        w.nullable_bytes(self.user_data)
        if version >= 1:
            write_topics(w, self.owned_partitions, Writer.int32)
        if version >= 2:
            w.int32(self.generation_id)
        if version >= 3:
            w.nullable_string(self.rack_id)
        return w.getvalue()


@dataclass(frozen=True, slots=True)
class ConsumerProtocolAssignment:
    assigned_partitions: tuple[TopicPartitions, ...]
    user_data: bytes | None = None

    @classmethod
    def decode(cls, source: Reader | bytes | bytearray | memoryview) -> ConsumerProtocolAssignment:
        """The assignment in `source` (SyncGroup's assignment) at whatever version it says."""
        reader = as_reader(source)
        version = _read_version(reader, "ConsumerProtocolAssignment")
        try:
            assigned = _read_partitions(reader, "assigned_partitions")
            user_data = reader.nullable_bytes("user_data")
        except KafkaDecodeError as exc:
            exc.set_context(_context("ConsumerProtocolAssignment", version))
            raise
        return cls(assigned, None if user_data is None else bytes(user_data))

    def encode(self, version: int) -> bytes:
        require(0 <= version <= VERSION_MAX, f"ConsumerProtocolAssignment v{version}")
        w = Writer()
        w.int16(version)
        write_topics(w, self.assigned_partitions, Writer.int32)
        w.nullable_bytes(self.user_data)
        return w.getvalue()
