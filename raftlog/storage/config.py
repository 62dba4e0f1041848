"""`LogConfig`: a partition log's settings, snake_case mirrors of Kafka's topic configs.

`LogConfig.from_topic_config({"segment.bytes": "1048576", ...})` takes a topic's config map
(Kafka's dotted names, as the metadata stores them) and turns it into a LogConfig in one place.

Rules:
- A topic config key must be one of `TOPIC_CONFIG_KEYS`: the log's settings plus the topic
  settings other layers read (`unclean.leader.election.enable`, `min.insync.replicas`,
  `durability.policy`, `compression.type`). `cleanup.policy` is Kafka's list (`delete`,
  `compact`, both) and the compaction settings keep Kafka's names and defaults.
  Anything else, a typo like `retention.msx` or a snake_case `retention_ms`, raises
  InvalidConfigError naming the key; creating a topic, `validate_only` and the broker's
  `[log]` defaults all go through here.
- Every value is validated; an invalid one raises InvalidConfigError naming it by its dotted
  name and value (`retention.ms=-5: must be >= -1 ...`), also when a LogConfig is built directly.
- `strict=False` (opening the logs of existing topics) ignores unknown keys with a warning, so
  that a topic created before they were refused still opens; values are still checked.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raftlog.errors import InvalidConfigError

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class LogConfig:
    # 1 GiB, Kafka's default: large segments keep the file count low; retention works per segment.
    segment_bytes: int = 1024 * 1024 * 1024
    # Roll after 7 days even when a segment is not full, so time retention can delete it.
    segment_ms: int = 7 * DAY_MS
    # One index entry per 4 KiB of log: a lookup scans at most ~4 KiB of batch headers.
    index_interval_bytes: int = 4096
    # Keep 7 days of data, no size limit: Kafka's defaults.
    retention_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    # None = never fsync on a count/timer, only on roll and close (Kafka's default: durability
    # comes from replication). Set flush_messages=1 for an fsync per append.
    flush_messages: int | None = None
    flush_ms: int | None = None
    # Largest batch a producer may append: Kafka's 1 MiB + its 12-byte log overhead.
    max_message_bytes: int = 1024 * 1024 + 12
    # How often (at most) a flush also rewrites the recovery-point checkpoint file. The
    # checkpoint may lag the fsynced data safely: recovery just checks more batches.
    recovery_point_checkpoint_ms: int = 1000
    # Idempotent producers (producer_state.py): an idle producer's state is dropped after a
    # day, Kafka's producer.id.expiration.ms; at most this many producers per partition (about
    # 250 bytes each), beyond which the least recently appended one is evicted.
    producer_id_expiration_ms: int = DAY_MS
    producer_ids_max: int = 10_000
    # Kafka's cleanup.policy: "delete" (retention removes old segments), "compact" (the log
    # cleaner keeps the last record of every key; retention removes nothing) or
    # "compact,delete" (both). Normalised: the policies sorted, comma-joined.
    cleanup_policy: str = "delete"
    # Compaction (cleaner.py), Kafka's names and defaults: a log is cleaned once its dirty
    # part (written since the last clean) is at least this share of its cleanable bytes...
    min_cleanable_dirty_ratio: float = 0.5
    # ...never a record younger than min.compaction.lag.ms (KIP-58), and a record is compacted
    # at the latest max.compaction.lag.ms after it was written, whatever the ratio (KIP-354).
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX
    # A tombstone (a key with a null value) stays readable this long after the clean that
    # first kept it, so a consumer that reads the log in less time sees the delete.
    delete_retention_ms: int = DAY_MS

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, rule: str) -> None:
            if not ok:
                raise InvalidConfigError(
                    f"{config_key(name)}={getattr(self, name)!r}: must be {rule}"
                )

        need(
            100 <= self.segment_bytes <= INT32_MAX, "segment_bytes", f"between 100 and {INT32_MAX}"
        )
        need(self.segment_ms >= 1, "segment_ms", ">= 1")
        need(0 <= self.index_interval_bytes <= INT32_MAX, "index_interval_bytes", ">= 0")
        need(self.retention_ms >= -1, "retention_ms", ">= -1 (-1 = keep forever)")
        need(self.retention_bytes >= -1, "retention_bytes", ">= -1 (-1 = no limit)")
        need(
            self.flush_messages is None or self.flush_messages >= 1,
            "flush_messages",
            ">= 1 or None",
        )
        need(self.flush_ms is None or self.flush_ms >= 0, "flush_ms", ">= 0 or None")
        need(
            0 < self.max_message_bytes <= INT32_MAX,
            "max_message_bytes",
            f"between 1 and {INT32_MAX}",
        )
        need(self.recovery_point_checkpoint_ms >= 0, "recovery_point_checkpoint_ms", ">= 0")
        need(self.producer_id_expiration_ms >= 1, "producer_id_expiration_ms", ">= 1")
        need(self.producer_ids_max >= 1, "producer_ids_max", ">= 1")
        need(
            self.cleanup_policy in CLEANUP_POLICIES,
            "cleanup_policy",
            "delete, compact or compact,delete",
        )
        need(
            0.0 <= self.min_cleanable_dirty_ratio <= 1.0,
            "min_cleanable_dirty_ratio",
            "between 0 and 1",
        )
        need(self.min_compaction_lag_ms >= 0, "min_compaction_lag_ms", ">= 0")
        need(self.max_compaction_lag_ms >= 1, "max_compaction_lag_ms", ">= 1")
        need(self.delete_retention_ms >= 0, "delete_retention_ms", ">= 0")

    @property
    def compact(self) -> bool:
        """The log cleaner compacts this log."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """Time and size retention delete this log's old segments."""
        return "delete" in self.cleanup_policy.split(",")

    @classmethod
    def from_topic_config(cls, config: Mapping[str, Any], strict: bool = True) -> LogConfig:
        """Build from a topic's config map (Kafka's dotted keys: "segment.bytes").

        Checks every key (see the module rules) and value; the keys that are not the log's
        (`cleanup.policy`, `min.insync.replicas`, ...) are checked and left out.
        """
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in config.items():
            key = str(key)
            if key not in TOPIC_CONFIG_KEYS:
                if strict:
                    raise InvalidConfigError(unknown_key_message(key))
                log.warning("ignoring %s", unknown_key_message(key))
                continue
            check = _OTHER_KEYS.get(key)
            if check is not None:
                check(key, value)
                continue
            name = field_name(key)
            if (value is None or value == "") and defaults[name] is None:
                kwargs[name] = None  # unset: only the optional settings (flush.*) may be
                continue
            parse = _PARSERS.get(key, _parse_int)
            kwargs[name] = parse(key, value)
        return cls(**kwargs)


def config_key(field: str) -> str:
    """A LogConfig field's topic config name: retention_ms -> retention.ms."""
    return field.replace("_", ".")


def field_name(key: str) -> str:
    return key.replace(".", "_")


CLEANUP_POLICIES = ("delete", "compact", "compact,delete")


def _parse_int(key: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{key}={value!r}: must be an integer") from None


def _parse_ratio(key: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{key}={value!r}: must be a number between 0 and 1") from None


def _parse_cleanup_policy(key: str, value: Any) -> str:
    """Kafka's list: "delete", "compact", "compact,delete" in either order, spaces allowed."""
    parts = sorted({p.strip() for p in str(value).split(",")})
    policy = ",".join(parts)
    if policy not in CLEANUP_POLICIES:
        raise InvalidConfigError(
            f"{key}={value!r}: must be delete, compact or compact,delete (Kafka's policies)"
        )
    return policy


_PARSERS = {
    "cleanup.policy": _parse_cleanup_policy,
    "min.cleanable.dirty.ratio": _parse_ratio,
}


def _check_bool(key: str, value: Any) -> None:
    # Exactly these two: the metadata state compares the stored string with "true".
    if value not in ("true", "false"):
        raise InvalidConfigError(f"{key}={value!r}: must be true or false (lower case)")


def _check_durability_policy(key: str, value: Any) -> None:
    if value not in ("replication", "fsync"):
        raise InvalidConfigError(
            f"{key}={value!r}: must be 'replication' (committed = in every ISR member's log, "
            "Kafka's default) or 'fsync' (committed = fsynced on every ISR member)"
        )


def _check_min_insync(key: str, value: Any) -> None:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{key}={value!r}: must be an integer") from None
    if n < 1:
        raise InvalidConfigError(f"{key}={n}: must be >= 1")


# Topic configs that are not the log's: their checks. Replication and the metadata's
# elections read the last three.
# Kafka's compression.type values. `producer` (Kafka's default) keeps each batch as its
# producer compressed it, which is all the broker does: re-compressing on the broker would
# be per-record work on the produce path. The others are Kafka's, and refused by name.
COMPRESSION_TYPE_DEFAULT = "producer"
_KAFKA_COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")


def _check_compression_type(key: str, value: Any) -> None:
    if value == COMPRESSION_TYPE_DEFAULT:
        return
    if value in _KAFKA_COMPRESSION_TYPES:
        raise InvalidConfigError(
            f"{key}={value!r}: not supported; only 'producer' is (batches are stored as their "
            "producer compressed them: set compression_type on the producer instead)"
        )
    raise InvalidConfigError(
        f"{key}={value!r}: must be one of Kafka's {', '.join(_KAFKA_COMPRESSION_TYPES)} "
        "(raftlog supports 'producer')"
    )


_OTHER_KEYS = {
    "compression.type": _check_compression_type,
    "unclean.leader.election.enable": _check_bool,
    "min.insync.replicas": _check_min_insync,
    "durability.policy": _check_durability_policy,
}
# Every topic config key raftlog knows (Kafka's names; recovery.point.checkpoint.ms is ours).
TOPIC_CONFIG_KEYS = frozenset(
    [config_key(f.name) for f in dataclasses.fields(LogConfig)] + list(_OTHER_KEYS)
)


def unknown_key_message(key: str) -> str:
    close = difflib.get_close_matches(field_name(key).replace("_", "."), TOPIC_CONFIG_KEYS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown topic config {key!r}{hint}; the known ones are " + ", ".join(
        sorted(TOPIC_CONFIG_KEYS)
    )
