"""Fetch (key 1), versions 4-11: read record batches from partitions' logs.

Versions (Kafka's FetchRequest.json and FetchResponse.json): v4 adds isolation_level to the
request, last_stable_offset and aborted_transactions to the response, and needs record batch
v2; the first version raftlog speaks. v5 adds log_start_offset on both sides. v6 is v5
(KAFKA_STORAGE_ERROR allowed). v7 adds incremental fetch sessions (KIP-227): session_id,
session_epoch and forgotten_topics in the request, error_code and session_id at the top of
the response. v8 is v7 (throttling answered first). v9 adds current_leader_epoch to each
requested partition (KIP-320). v10 is v9 (zstd allowed, KIP-110). v11 adds rack_id to the
request and preferred_read_replica to each partition's response (KIP-392). v12 would be
flexible and v13 uses topic ids: not spoken.

Body layouts (big-endian; see raftlog.kafka.wire for the primitives):
- Request: int32 replica_id, int32 max_wait_ms, int32 min_bytes, int32 max_bytes, int8
  isolation_level, v7+: int32 session_id, int32 session_epoch; array of topics (string
  topic, array of partitions (int32 partition, v9+: int32 current_leader_epoch, int64
  fetch_offset, v5+: int64 log_start_offset, int32 partition_max_bytes)); v7+: array of
  forgotten_topics (string topic, int32 array partitions); v11+: string rack_id.
- Response: int32 throttle_time_ms, v7+: int16 error_code, int32 session_id; array of topics
  (string topic, array of partitions (int32 partition, int16 error_code, int64
  high_watermark, int64 last_stable_offset, v5+: int64 log_start_offset, nullable array of
  aborted_transactions (int64 producer_id, int64 first_offset), v11+: int32
  preferred_read_replica, int32 records size then the records (nullable bytes; raftlog always
  sends a non-null field, 0 bytes when it has none))).

Hot path: `FetchResponse.encode` packs each partition's fixed fields with one precompiled
struct and passes each partition's `records` parts through untouched (bytes, memoryview, or
the connection's file slices for sendfile): it never reads or measures them, `records_size`
says how many bytes they hold.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.common import (
    as_reader,
    check_decode_version,
    check_encode_version,
    read_topic_lists,
    read_topics,
    write_topics,
)
from raftlog.kafka.wire import INT32, Reader, Writer

# A partition's response up to its aborted transactions: partition, error_code,
# high_watermark, last_stable_offset, and from v5 log_start_offset.
_PARTITION_V4 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset
_NULL_ARRAY = INT32.pack(-1)
_TOP_V7 = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_COUNT = INT32


class FetchPartition(NamedTuple):
    """One partition to read. Fields a version lacks are -1."""

    partition: int
    current_leader_epoch: int
    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int


FetchTopics = tuple[tuple[str, tuple[FetchPartition, ...]], ...]
ForgottenTopics = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A Fetch request. Below v7 there are no sessions (session_id 0, session_epoch -1, no
    forgotten topics); below v11 rack_id is ""."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: FetchTopics
    forgotten_topics: ForgottenTopics = ()
    rack_id: str = ""

    @classmethod
    def decode(cls, source: Reader | bytes | memoryview, version: int) -> FetchRequest:
        check_decode_version(ApiKey.FETCH, version)
        reader = as_reader(source)
        replica_id = reader.int32("replica_id")
        max_wait_ms = reader.int32("max_wait_ms")
        min_bytes = reader.int32("min_bytes")
        max_bytes = reader.int32("max_bytes")
        isolation_level = reader.int8("isolation_level")
        session_id, session_epoch = 0, -1
        if version >= 7:
            session_id = reader.int32("session_id")
            session_epoch = reader.int32("session_epoch")

        def partition(r: Reader) -> FetchPartition:
            index = r.int32("partition")
            leader_epoch = r.int32("current_leader_epoch") if version >= 9 else -1
            fetch_offset = r.int64("fetch_offset")
            log_start_offset = r.int64("log_start_offset") if version >= 5 else -1
            return FetchPartition(
                index, leader_epoch, fetch_offset, log_start_offset, r.int32("partition_max_bytes")
            )

        def forgotten(r: Reader) -> tuple[str, tuple[int, ...]]:
            return r.string("topic"), r.array(Reader.int32, "partitions")

        topics = read_topics(reader, partition, "topic")
        forgotten_topics: ForgottenTopics = ()
        if version >= 7:
            forgotten_topics = reader.array(forgotten, "forgotten_topics")
        rack_id = reader.string("rack_id") if version >= 11 else ""
        return cls(
            replica_id,
            max_wait_ms,
            min_bytes,
            max_bytes,
            isolation_level,
            session_id,
            session_epoch,
            topics,
            forgotten_topics,
            rack_id,
        )

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.FETCH, version)
        w = Writer()
        w.int32(self.replica_id)
        w.int32(self.max_wait_ms)
        w.int32(self.min_bytes)
        w.int32(self.max_bytes)
        w.int8(self.isolation_level)
        if version >= 7:
            w.int32(self.session_id)
            w.int32(self.session_epoch)

        def partition(w: Writer, p: FetchPartition) -> None:
            w.int32(p.partition)
            if version >= 9:
                w.int32(p.current_leader_epoch)
            w.int64(p.fetch_offset)
            if version >= 5:
                w.int64(p.log_start_offset)
            w.int32(p.partition_max_bytes)

        write_topics(w, self.topics, partition)
        if version >= 7:
            write_topics(w, self.forgotten_topics, Writer.int32)
        if version >= 11:
            w.string(self.rack_id)
        return w.getvalue()


class FetchPartitionResponse(NamedTuple):
    """One partition's answer. `records` are the parts that make up its record batches,
    `records_size` bytes in all (the caller's count: encode never measures the parts).
    `aborted_transactions` holds (producer_id, first_offset) or is None."""

    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: Sequence[object]
    records_size: int
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """A Fetch response. Below v7, error_code and session_id are not sent (decoded as 0)."""

    throttle_time_ms: int
    error_code: int
    session_id: int
    topics: list[tuple[str, list[FetchPartitionResponse]]]

    def encode(self, version: int) -> list[object]:
        """The body as parts: encoded bytes (adjacent fields joined) with each partition's
        records parts between them, as given."""
        return self.encode_with_size(version)[0]

    def encode_with_size(self, version: int) -> tuple[list[object], int]:
        """`encode`'s parts and the body's size in bytes (the encoded bytes plus each
        partition's records_size), so that the connection can write the frame's size without
        measuring the records parts."""
        check_encode_version(ApiKey.FETCH, version)
        parts: list[object] = []
        size = 0
        out = bytearray()
        if version >= 7:
            out += _TOP_V7.pack(self.throttle_time_ms, self.error_code, self.session_id)
        else:
            out += INT32.pack(self.throttle_time_ms)
        out += _COUNT.pack(len(self.topics))
        for name, partitions in self.topics:
            encoded_name = name.encode()
            out += len(encoded_name).to_bytes(2, "big")
            out += encoded_name
            out += _COUNT.pack(len(partitions))
            for p in partitions:
                if version >= 5:
                    out += _PARTITION_V5.pack(
                        p.partition,
                        p.error_code,
                        p.high_watermark,
                        p.last_stable_offset,
                        p.log_start_offset,
                    )
                else:
                    out += _PARTITION_V4.pack(
                        p.partition, p.error_code, p.high_watermark, p.last_stable_offset
                    )
                aborted = p.aborted_transactions
                if aborted is None:
                    out += _NULL_ARRAY
                else:
                    out += _COUNT.pack(len(aborted))
                    for producer_id, first_offset in aborted:
                        out += _ABORTED.pack(producer_id, first_offset)
                if version >= 11:
                    out += _COUNT.pack(p.preferred_read_replica)
                out += _COUNT.pack(p.records_size)
                size += p.records_size
                if p.records:
                    size += len(out)
                    parts.append(bytes(out))
                    out = bytearray()
                    parts.extend(p.records)
        if out:
            size += len(out)
            parts.append(bytes(out))
        return parts, size

    @classmethod
    def decode(cls, source: Reader | bytes | memoryview, version: int) -> FetchResponse:
        """Decode a response (tests and tools): each partition's records come back as one bytes
        part, or no part when the field was empty or null."""
        check_decode_version(ApiKey.FETCH, version)
        reader = as_reader(source)
        throttle_time_ms = reader.int32("throttle_time_ms")
        error_code, session_id = 0, 0
        if version >= 7:
            error_code = reader.int16("error_code")
            session_id = reader.int32("session_id")

        def aborted(r: Reader) -> tuple[int, int]:
            return r.int64("producer_id"), r.int64("first_offset")

        def partition(r: Reader) -> FetchPartitionResponse:
            index, error = r.int32("partition"), r.int16("error_code")
            high_watermark = r.int64("high_watermark")
            last_stable_offset = r.int64("last_stable_offset")
            log_start_offset = r.int64("log_start_offset") if version >= 5 else -1
            aborted_list = r.nullable_array(aborted, "aborted_transactions")
            preferred = r.int32("preferred_read_replica") if version >= 11 else -1
            data = r.nullable_bytes("records")
            records = (bytes(data),) if data else ()
            return FetchPartitionResponse(
                index,
                error,
                high_watermark,
                last_stable_offset,
                log_start_offset,
                records,
                len(data) if data is not None else 0,
                None if aborted_list is None else list(aborted_list),
                preferred,
            )

        topics = read_topic_lists(reader, partition, "topic")
        return cls(throttle_time_ms, error_code, session_id, topics)
