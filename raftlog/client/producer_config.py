"""The producer's configuration: `ProducerConfig`, with Kafka's option names, validated when made.

Rules: every option is checked on construction (InvalidConfigError naming it); defaults carry a
comment saying why. Idempotence (client/idempotence.py) is on by default with acks=all, as in
Kafka 3.0: acks other than all, or more than IDEMPOTENT_IN_FLIGHT_MAX requests in flight, with
`enable_idempotence=True` is an InvalidConfigError; with idempotence left to its default they
turn it off with a warning.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import xxhash

from raftlog.client.idempotence import IDEMPOTENT_IN_FLIGHT_MAX
from raftlog.errors import InvalidConfigError

log = logging.getLogger(__name__)


def default_partitioner(key: bytes, partitions: int) -> int:
    """Kafka hashes keys with murmur2; we use xxhash (xxh3_64), the project's one hash."""
    return xxhash.xxh3_64_intdigest(key) % partitions


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
    # Records buffered across all partitions before send() blocks (bounds client memory).
    buffer_memory: int = 32 * 1024 * 1024
    partitioner: Callable[[bytes, int], int] = default_partitioner

    def __post_init__(self) -> None:
        if self.acks not in ("all", -1, 0, 1, "0", "1", "-1"):
            raise InvalidConfigError(f"acks={self.acks!r}: must be 'all', -1, 0 or 1")
        if self.compression_type not in (None, "none"):
            raise InvalidConfigError(
                f"compression_type={self.compression_type!r}: only 'none' is supported so far"
            )
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


def retry_backoff_s(config: ProducerConfig, attempts: int) -> float:
    """The wait before a batch's next try after `attempts` failed ones: retry_backoff_ms
    doubling up to retry_backoff_max_ms, then +-20% (KIP-580), so that many clients that
    failed together do not retry together."""
    base = config.retry_backoff_ms * (1 << min(max(attempts - 1, 0), 30))
    ms = min(base, max(config.retry_backoff_max_ms, config.retry_backoff_ms))
    return ms * random.uniform(0.8, 1.2) / 1000
