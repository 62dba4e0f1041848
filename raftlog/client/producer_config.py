"""The producer's configuration: `ProducerConfig`, with Kafka's option names, validated when made.

Rules: every option is checked on construction (InvalidConfigError naming it; for an option
with a fixed set of choices, `compression_type` and `partitioner`, an InvalidConfigValueError,
also a ValueError, naming the value and the choices); defaults carry a comment saying why.
Idempotence (client/idempotence.py) is on by default with acks=all, as in Kafka 3.0: acks other
than all, or more than IDEMPOTENT_IN_FLIGHT_MAX requests in flight, with
`enable_idempotence=True` is an InvalidConfigError; with idempotence left to its default they
turn it off with a warning.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass

from raftlog.client.idempotence import IDEMPOTENT_IN_FLIGHT_MAX
from raftlog.client.partitioner import PARTITIONERS, KeyPartitioner, default_partitioner
from raftlog.compression import CODEC_IDS
from raftlog.errors import InvalidConfigError

__all__ = [
    "COMPRESSION_TYPES",
    "InvalidConfigValueError",
    "ProducerConfig",
    "default_partitioner",
    "retry_backoff_s",
]

log = logging.getLogger(__name__)

# compression_type's values (kafka-python's names, Kafka's `compression.type` values) -> the
# codec id in a batch's attributes (none 0, gzip 1, snappy 2, lz4 3, zstd 4). None is "none".
COMPRESSION_TYPES: dict[str, int] = CODEC_IDS


class InvalidConfigValueError(InvalidConfigError, ValueError):
    """An option set to a value outside its choices: an InvalidConfigError like every other
    config error, and a ValueError, as Python code (and kafka-python) expects of a bad value.

    Raised by the client, never sent on the wire; its code only has to be unique (codes from
    100 up are client-side errors), so that code 7 still decodes as InvalidConfigError."""

    code = 102


def _choice_error(name: str, value: object, choices: str) -> InvalidConfigValueError:
    return InvalidConfigValueError(f"{name}={value!r}: must be one of {choices}")


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092"
    client_id: str = "raftlog-producer"
    # "all"/-1: the broker answers when the batch is committed; 1: after the leader's append;
    # 0: no answer at all (fire and forget; offsets are -1).
    acks: int | str = "all"
    # Wait up to this long for more records before sending a non-full batch.
    linger_ms: int = 5
    # Target batch size in bytes (Kafka's default is 16 KiB; bigger batches cost a little
    # latency and buy a lot of throughput here).
    batch_size: int = 64 * 1024
    # Largest Produce request (Kafka's max.request.size is 1 MiB).
    max_request_size: int = 1024 * 1024
    # None/"none": raftlog's own batches (magic 1), as before; a codec: Kafka record batches
    # v2 compressed with it, which Kafka's clients read as they are (see accumulator.py).
    compression_type: str | None = None
    # None: on, unless acks or max_in_flight_requests_per_connection rule it out (then off,
    # with a warning); True: on, and those settings are refused; False: off.
    enable_idempotence: bool | None = None
    retries: int = 2**31 - 1
    # Between tries of a batch: retry_backoff_ms, doubling per failed try up to
    # retry_backoff_max_ms, with 20% of jitter (Kafka's KIP-580): clients retrying against a
    # broker that is still opening 10,000 new partitions must not keep it busy refusing them.
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    max_in_flight_requests_per_connection: int = 5
    # How long send() may block (metadata, a full buffer) before raising.
    max_block_ms: int = 60_000
    # The metadata of the topics sent to is refreshed at least this often, also without
    # errors, so that a grown topic's new partitions get records (Kafka's
    # metadata.max.age.ms).
    metadata_max_age_ms: int = 300_000
    # Records buffered across all partitions before send() blocks (bounds client memory).
    buffer_memory: int = 32 * 1024 * 1024
    # Where a keyed record goes: "default" (xxhash), "murmur2" (Kafka's Java client's, so
    # keys land where Java, kafka-python and aiokafka producers put them) or a callable
    # (key, partitions) -> partition. A name is replaced by its function on construction.
    partitioner: KeyPartitioner | str = default_partitioner

    def __post_init__(self) -> None:
        if self.acks not in ("all", -1, 0, 1, "0", "1", "-1"):
            raise InvalidConfigError(f"acks={self.acks!r}: must be 'all', -1, 0 or 1")
        if self.compression_type is not None and (
            not isinstance(self.compression_type, str)
            or self.compression_type not in COMPRESSION_TYPES
        ):
            raise _choice_error(
                "compression_type",
                self.compression_type,
                "None, " + ", ".join(map(repr, COMPRESSION_TYPES)),
            )
        if isinstance(self.partitioner, str) or not callable(self.partitioner):
            found = (
                PARTITIONERS.get(self.partitioner) if isinstance(self.partitioner, str) else None
            )
            if found is None:
                raise _choice_error(
                    "partitioner",
                    self.partitioner,
                    ", ".join(map(repr, PARTITIONERS))
                    + " or a callable (key: bytes, partitions: int) -> int",
                )
            object.__setattr__(self, "partitioner", found)
        for name in ("linger_ms", "retry_backoff_ms", "retry_backoff_max_ms"):
            if getattr(self, name) < 0:
                raise InvalidConfigError(f"{name}={getattr(self, name)}: must be >= 0")
        for name in (
            "batch_size",
            "max_request_size",
            "delivery_timeout_ms",
            "request_timeout_ms",
            "max_in_flight_requests_per_connection",
            "buffer_memory",
            "metadata_max_age_ms",
        ):
            if getattr(self, name) < 1:
                raise InvalidConfigError(f"{name}={getattr(self, name)}: must be >= 1")
        conflicts = []
        if self.acks_code != -1:
            conflicts.append(f"acks={self.acks!r} (it needs acks='all')")
        if self.max_in_flight_requests_per_connection > IDEMPOTENT_IN_FLIGHT_MAX:
            conflicts.append(
                f"max_in_flight_requests_per_connection="
                f"{self.max_in_flight_requests_per_connection} (it needs at most "
                f"{IDEMPOTENT_IN_FLIGHT_MAX})"
            )
        if self.enable_idempotence is None:
            if conflicts:
                log.warning(
                    "idempotence is off for this producer because of %s; set "
                    "enable_idempotence=False to say so, or change them",
                    " and ".join(conflicts),
                )
            object.__setattr__(self, "enable_idempotence", not conflicts)
        elif self.enable_idempotence and conflicts:
            raise InvalidConfigError(
                "enable_idempotence=True conflicts with " + " and ".join(conflicts)
            )

    @property
    def acks_code(self) -> int:
        return -1 if self.acks in ("all", -1, "-1") else int(self.acks)

    @property
    def compression_codec(self) -> int:
        """The codec id of `compression_type` (0: none, raftlog's own batches)."""
        return COMPRESSION_TYPES[self.compression_type or "none"]

    @property
    def key_partitioner(self) -> KeyPartitioner:
        """`partitioner` as the function it is once constructed (a name was resolved)."""
        partitioner = self.partitioner
        if isinstance(partitioner, str):
            raise InvalidConfigError(f"partitioner={partitioner!r} was not resolved")
        return partitioner


def retry_backoff_s(config: ProducerConfig, attempts: int) -> float:
    """The wait before a batch's next try after `attempts` failed ones: retry_backoff_ms
    doubling up to retry_backoff_max_ms, then +-20% (KIP-580), so that many clients that
    failed together do not retry together."""
    base = config.retry_backoff_ms * (1 << min(max(attempts - 1, 0), 30))
    ms = min(base, max(config.retry_backoff_max_ms, config.retry_backoff_ms))
    return ms * random.uniform(0.8, 1.2) / 1000
