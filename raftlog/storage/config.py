"""`LogConfig`: a partition log's settings, snake_case mirrors of Kafka's topic configs.

`LogConfig.from_topic_config({"segment.bytes": "1048576", ...})` accepts Kafka's dotted names,
so that a topic's config map (the metadata issue stores them) turns into a LogConfig in one place.
Every value is validated on construction; an invalid one raises InvalidConfigError naming it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raftlog.errors import InvalidConfigError

INT32_MAX = 2**31 - 1
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

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, rule: str) -> None:
            if not ok:
                raise InvalidConfigError(f"{name}={getattr(self, name)!r}: must be {rule}")

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

    @classmethod
    def from_topic_config(cls, config: Mapping[str, Any]) -> LogConfig:
        """Build from Kafka-style dotted keys ("segment.bytes") or our snake_case keys."""
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in config.items():
            name = key.replace(".", "_")
            if name not in defaults:
                continue  # a topic config that is not the log's (e.g. cleanup.policy)
            if (value is None or value == "") and defaults[name] is None:
                kwargs[name] = None  # unset: only the optional settings (flush_*) may be
                continue
            try:
                kwargs[name] = int(value)
            except (TypeError, ValueError):
                raise InvalidConfigError(f"{key}={value!r}: must be an integer") from None
        return cls(**kwargs)
