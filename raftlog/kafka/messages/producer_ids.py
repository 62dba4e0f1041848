"""InitProducerId (API key 22), versions 0-1: a producer asks for its producer id and epoch.

Byte by byte, big-endian (Kafka's InitProducerIdRequest.json and InitProducerIdResponse.json);
v0 and v1 are the same on the wire (v1 only says the broker answers before it throttles):

Request:
  transactional_id        nullable_string  null: an idempotent producer, not a transactional one
  transaction_timeout_ms  int32            only meaningful with a transactional id

Response:
  throttle_time_ms  int32
  error_code        int16
  producer_id       int64  -1 with an error
  producer_epoch    int16  -1 with an error

The producer id and epoch of an existing producer (KIP-360's epoch bump) come in v3, a version
raftlog does not speak: every request here asks for a new id.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.common import as_reader, check_decode_version, check_encode_version
from raftlog.kafka.wire import Reader, Writer

API_KEY = ApiKey.INIT_PRODUCER_ID


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    """What a producer asks; a transactional id is the handler's to refuse."""

    transactional_id: str | None = None
    transaction_timeout_ms: int = -1

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> InitProducerIdRequest:
        check_decode_version(API_KEY, version)
        reader = as_reader(source)
        transactional_id = reader.nullable_string("transactional_id")
        return cls(transactional_id, reader.int32("transaction_timeout_ms"))

    def encode(self, version: int) -> bytes:
        check_encode_version(API_KEY, version)
        w = Writer()
        w.nullable_string(self.transactional_id)
        w.int32(self.transaction_timeout_ms)
        return w.getvalue()


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    """As the broker sends it: error_code 0 with the new id and its epoch, or an error code
    with -1 and -1."""

    error_code: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    throttle_time_ms: int = 0

    def encode(self, version: int) -> bytes:
        check_encode_version(API_KEY, version)
        w = Writer()
        w.int32(self.throttle_time_ms)
        w.int16(self.error_code)
        w.int64(self.producer_id)
        w.int16(self.producer_epoch)
        return w.getvalue()

    @classmethod
    def decode(
        cls, source: Reader | bytes | bytearray | memoryview, version: int
    ) -> InitProducerIdResponse:
        check_decode_version(API_KEY, version)
        reader = as_reader(source)
        throttle_time_ms = reader.int32("throttle_time_ms")
        error_code = reader.int16("error_code")
        producer_id, epoch = reader.int64("producer_id"), reader.int16("producer_epoch")
        return cls(error_code, producer_id, epoch, throttle_time_ms)
