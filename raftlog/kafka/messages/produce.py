"""Produce (key 0), versions 3-8: record batches in, each partition's base offset out.

Versions (Kafka's ProduceRequest.json): v3 adds transactional_id and Kafka's record batch v2
(magic 2), the first version raftlog speaks. v4 is v3, with KAFKA_STORAGE_ERROR allowed in the
response. v5 adds log_start_offset to the response. v6 is v5 (throttling answered first). v7 is
v6 (zstd allowed in the batches, KIP-110). v8 adds record_errors and error_message to each
partition's response (KIP-467; raftlog sends record_errors empty). v9 would be flexible: not
spoken.

Body layouts (big-endian; see raftlog.kafka.wire for the primitives):
- Request: nullable_string transactional_id, int16 acks, int32 timeout_ms, array of topics
  (string name, array of partitions (int32 partition, nullable bytes records)).
- Response: array of topics (string name, array of partitions (int32 partition, int16
  error_code, int64 base_offset, int64 log_append_time_ms, v5+: int64 log_start_offset, v8+:
  array of record_errors (int32 batch_index, nullable_string message), v8+: nullable_string
  error_message)), int32 throttle_time_ms.

Hot path: a request's records come back as memoryview slices of the frame (no copy, no look at
the batches: raftlog.records and the partition validate them); each partition costs one
precompiled struct read. A response packs each partition with one precompiled struct.
"""

from __future__ import annotations

import struct
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
from raftlog.kafka.wire import KafkaDecodeError, Reader, Writer

_PARTITION_HEAD = struct.Struct(">ii")  # partition, records size (-1: null)
_unpack_partition_head = _PARTITION_HEAD.unpack_from

# A partition's response, fixed part: partition, error_code, base_offset, log_append_time_ms
# and from v5 log_start_offset.
_RESPONSE_V3 = struct.Struct(">ihqq")
_RESPONSE_V5 = struct.Struct(">ihqqq")
_EMPTY_RECORD_ERRORS = b"\x00\x00\x00\x00"

ProduceTopics = tuple[tuple[str, tuple[tuple[int, memoryview | None], ...]], ...]


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """A Produce request. `topics` holds (name, ((partition, records), ...)); each records is a
    memoryview slice of the request frame (valid while the frame is) or None if sent null."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: ProduceTopics

    @classmethod
    def decode(cls, source: Reader | bytes | memoryview, version: int) -> ProduceRequest:
        check_decode_version(ApiKey.PRODUCE, version)
        reader = as_reader(source)
        transactional_id = reader.nullable_string("transactional_id")
        acks = reader.int16("acks")
        timeout_ms = reader.int32("timeout_ms")
        topics = read_topics(reader, _read_partition)
        return cls(transactional_id, acks, timeout_ms, topics)

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.PRODUCE, version)
        w = Writer()
        w.nullable_string(self.transactional_id)
        w.int16(self.acks)
        w.int32(self.timeout_ms)
        write_topics(w, self.topics, _write_partition)
        return w.getvalue()


def _write_partition(w: Writer, partition: tuple[int, memoryview | None]) -> None:
    w.int32(partition[0])
    w.nullable_bytes(partition[1])


def _read_partition(reader: Reader) -> tuple[int, memoryview | None]:
    pos, end = reader.pos, reader.end
    if end - pos < 8:
        raise KafkaDecodeError(f"needs 8 bytes, {end - pos} left", "partition")
    partition, size = _unpack_partition_head(reader.buf, pos)
    pos += 8
    if size < 0:
        if size != -1:
            raise KafkaDecodeError(f"bytes length {size}", "records")
        reader.pos = pos
        return partition, None
    if size > end - pos:
        raise KafkaDecodeError(f"{size} bytes announced, {end - pos} left", "records")
    reader.pos = pos + size
    return partition, reader.buf[pos : pos + size]


class ProducePartitionResponse(NamedTuple):
    """One partition's result: `base_offset` of the first appended record (-1 on error);
    `log_append_time_ms` -1 unless the topic stamps LogAppendTime."""

    partition: int
    error_code: int
    base_offset: int
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    """A Produce response (none is sent for acks=0): each partition's result, by topic."""

    topics: list[tuple[str, list[ProducePartitionResponse]]]
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        check_encode_version(ApiKey.PRODUCE, version)
        w = Writer()

        def partition(w: Writer, p: ProducePartitionResponse) -> None:
            if version >= 5:
                w.raw_bytes(
                    _RESPONSE_V5.pack(
                        p.partition,
                        p.error_code,
                        p.base_offset,
                        p.log_append_time_ms,
                        p.log_start_offset,
                    )
                )
            else:
                w.raw_bytes(
                    _RESPONSE_V3.pack(
                        p.partition, p.error_code, p.base_offset, p.log_append_time_ms
                    )
                )
            if version >= 8:
                w.raw_bytes(_EMPTY_RECORD_ERRORS)
                w.nullable_string(p.error_message)

        write_topics(w, self.topics, partition)
        w.int32(self.throttle_time_ms)
        return w.getvalue()

    @classmethod
    def decode(cls, source: Reader | bytes | memoryview, version: int) -> ProduceResponse:
        check_decode_version(ApiKey.PRODUCE, version)
        reader = as_reader(source)

        def record_error(r: Reader) -> None:
            r.int32("batch_index")
            r.nullable_string("batch_index_error_message")

        def partition(r: Reader) -> ProducePartitionResponse:
            index, error_code = r.int32("partition"), r.int16("error_code")
            base_offset, append_time = r.int64("base_offset"), r.int64("log_append_time_ms")
            log_start_offset = r.int64("log_start_offset") if version >= 5 else -1
            message = None
            if version >= 8:
                r.array(record_error, "record_errors")
                message = r.nullable_string("error_message")
            return ProducePartitionResponse(
                index, error_code, base_offset, append_time, log_start_offset, message
            )

        topics = read_topic_lists(reader, partition)
        return cls(topics, reader.int32("throttle_time_ms"))
