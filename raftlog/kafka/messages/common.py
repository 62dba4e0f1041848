"""What every Kafka message module shares: version checks, turning a buffer into a Reader, the
per-topic array most messages carry, and arrays of int32 and string.

Rules: pure, as the rest of raftlog.kafka. Decoding at a version outside the codec's range
(raftlog.kafka.api.SUPPORTED_VERSIONS) is the
peer's fault (KafkaDecodeError); encoding at one is ours (InvariantError).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from raftlog.invariants import require
from raftlog.kafka.api import SUPPORTED_VERSIONS, ApiKey, api_name
from raftlog.kafka.wire import KafkaDecodeError, Reader, Writer

T = TypeVar("T")

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)  # Kafka's INT32_MIN: "not requested"


def as_reader(source: Reader | bytes | bytearray | memoryview) -> Reader:
    """`source` itself when it is a Reader (a body inside a frame), else a Reader over all of
    it."""
    return source if isinstance(source, Reader) else Reader(source)


def check_decode_version(api_key: ApiKey, version: int) -> None:
    low, high = SUPPORTED_VERSIONS[api_key]
    if not low <= version <= high:
        raise KafkaDecodeError(
            f"version {version} is not one we speak ({low}-{high})",
            context=f"{api_name(api_key)} v{version}",
        )


def check_encode_version(api_key: ApiKey, version: int) -> None:
    low, high = SUPPORTED_VERSIONS[api_key]
    require(low <= version <= high, f"{api_name(api_key)} v{version} is not in {low}-{high}")


def write_topics(
    w: Writer, topics: Sequence[tuple[str, Sequence[T]]], write_item: Callable[[Writer, T], None]
) -> None:
    """The array of (string name, array of items) that most messages carry per topic."""
    w.array_length(len(topics))
    for name, items in topics:
        w.string(name)
        w.array_length(len(items))
        for item in items:
            write_item(w, item)


def read_topics(
    reader: Reader,
    read_item: Callable[[Reader], T],
    name_field: str = "name",
    field: str = "topics",
    items_field: str = "partitions",
) -> tuple[tuple[str, tuple[T, ...]], ...]:
    """Read what `write_topics` writes: `<field>[i].<name_field>` and
    `<field>[i].<items_field>`."""

    def topic(r: Reader) -> tuple[str, tuple[T, ...]]:
        return r.string(name_field), r.array(read_item, items_field)

    return reader.array(topic, field)


def read_topic_lists(
    reader: Reader, read_item: Callable[[Reader], T], name_field: str = "name"
) -> list[tuple[str, list[T]]]:
    """`read_topics` as lists, the shape response types hold."""
    return [(name, list(items)) for name, items in read_topics(reader, read_item, name_field)]


def read_int32(r: Reader) -> int:
    """An int32 array item (`Reader.array(read_int32, ...)`)."""
    return r.int32()


def read_string(r: Reader) -> str:
    """A string array item."""
    return r.string()


def write_strings(w: Writer, values: Sequence[str]) -> None:
    """An array of string."""
    w.array_length(len(values))
    for value in values:
        w.string(value)


def read_throttle_time(reader: Reader, version: int, since: int) -> int:
    """A response's throttle_time_ms, sent from version `since` (0 before)."""
    return reader.int32("throttle_time_ms") if version >= since else 0
