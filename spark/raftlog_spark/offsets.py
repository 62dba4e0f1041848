"""Resolving subscriptions and offset specs on the cluster, on Spark's driver.

`Planner` turns a `Subscription` into topic-partitions and an `OffsetSpec` into an offset per
partition, with the checks that need the cluster: topics and partitions exist, JSON offsets name
exactly the partitions read, a group has a committed offset for every one of them. "latest"
is the high watermark (ListOffsets), so a planned range holds committed records only.

Offsets travel through Spark (its checkpoint, the partitions it plans) as Kafka's source writes
them: `{"topic": {"0": 23, "1": 45}}`, JSON-friendly and readable in the checkpoint files.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable
from typing import Any

from raftlog import protocol
from raftlog.client.cluster import ClusterClient
from raftlog.client.reader import DataLossError, commit_offsets, committed_offsets
from raftlog.errors import UnknownTopicOrPartitionError
from raftlog.topics import TopicPartition
from raftlog_spark.options import (
    EARLIEST,
    LATEST,
    ByTimestamp,
    Earliest,
    Group,
    Latest,
    OffsetSpec,
    PerPartition,
    RaftlogSparkOptionError,
    SourceOptions,
)

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, int]


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """{tp: offset} -> Kafka's offset JSON object (sorted, so equal offsets compare equal)."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def from_json(obj: dict[str, Any]) -> Offsets:
    return {TopicPartition(t, int(p)): int(o) for t, parts in obj.items() for p, o in parts.items()}


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(map(str, sorted(tps)))


class Planner:
    """The driver's view of the cluster for one query; closes its client on `close()`."""

    def __init__(self, options: SourceOptions):
        self.options = options
        self._loop = asyncio.new_event_loop()
        self.client = ClusterClient(
            options.bootstrap_servers, "raftlog-spark-driver", options.request_timeout_ms
        )

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self.client.close())
            self._loop.close()

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    # -- what is read ------------------------------------------------------------------------

    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers now (a pattern may match more later)."""
        return self._run(self._partitions())  # type: ignore[no-any-return]

    async def _partitions(self) -> list[TopicPartition]:
        sub = self.options.subscription
        client = self.client
        if sub.pattern is not None:
            await client.refresh_metadata(None)
            pattern = re.compile(sub.pattern)
            return sorted(
                TopicPartition(name, p.partition)
                for name, info in client.topics.items()
                if pattern.fullmatch(name)
                for p in info.partitions
            )
        out: list[TopicPartition] = []
        client.invalidate()  # a topic's partition count may have grown since the last call
        for topic in dict.fromkeys([*sub.topics, *(tp.topic for tp in sub.partitions)]):
            try:
                info = await client.topic(topic)
            except UnknownTopicOrPartitionError:
                raise RaftlogSparkOptionError(
                    f"unknown topic {topic!r} ({sub.describe()}): create it first, e.g. "
                    f"raftlog topic create {topic}"
                ) from None
            out.extend(TopicPartition(topic, p.partition) for p in info.partitions)
        if sub.partitions:
            missing = set(sub.partitions) - set(out)
            if missing:
                raise RaftlogSparkOptionError(
                    f"assign names partitions that do not exist: {_names(missing)}"
                )
            return sorted(sub.partitions)
        return sorted(out)

    # -- offsets -----------------------------------------------------------------------------

    def list_offsets(self, tps: Iterable[TopicPartition], spec: int) -> Offsets:
        """-2 earliest (log start), -1 latest (high watermark), or a timestamp in ms (-1 in
        the answer: no record that recent)."""
        wanted = list(tps)
        if not wanted:
            return {}
        res = self._run(self.client.list_offsets({tp: spec for tp in wanted}))
        return {tp: o for tp, (o, _ts) in res.items()}

    def earliest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self.list_offsets(tps, protocol.EARLIEST_TIMESTAMP)

    def latest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self.list_offsets(tps, protocol.LATEST_TIMESTAMP)

    def committed(self, group_id: str, tps: Iterable[TopicPartition]) -> Offsets:
        return self._run(committed_offsets(self.client, group_id, list(tps)))  # type: ignore[no-any-return]

    def commit(self, group_id: str, offsets: Offsets) -> None:
        self._run(commit_offsets(self.client, group_id, offsets))

    def resolve(self, spec: OffsetSpec, tps: list[TopicPartition], role: str) -> Offsets:
        """The offset per partition that `spec` (the `role` option: startingOffsets or
        endingOffsets) means now."""
        if isinstance(spec, Earliest):
            return self.earliest(tps)
        if isinstance(spec, Latest):
            return self.latest(tps)
        if isinstance(spec, PerPartition):
            _same_partitions(spec.offsets, tps, role)
            out = dict(spec.offsets)
            special = {tp: o for tp, o in out.items() if o in (EARLIEST, LATEST)}
            for code in (EARLIEST, LATEST):
                wanted = [tp for tp, o in special.items() if o == code]
                out.update(self.list_offsets(wanted, code))
            return out
        if isinstance(spec, Group):
            committed = self.committed(spec.group_id, tps)
            missing = [tp for tp in tps if tp not in committed]
            if len(missing) == len(tps):
                raise RaftlogSparkOptionError(
                    f"{role}=group:{spec.group_id}: the group has no committed offsets for "
                    f"{_names(tps)}; commit or reset them first "
                    f"(raftlog group reset-offsets {spec.group_id} ...)"
                )
            if missing:
                raise RaftlogSparkOptionError(
                    f"{role}=group:{spec.group_id}: the group has no committed offset for "
                    f"{_names(missing)}"
                )
            return {tp: committed[tp] for tp in tps}
        if isinstance(spec, ByTimestamp):
            return self._by_timestamp(spec, tps, role)
        raise AssertionError(f"unknown offset spec {spec!r}")

    def _by_timestamp(self, spec: ByTimestamp, tps: list[TopicPartition], role: str) -> Offsets:
        if spec.all_ms is None:
            _same_partitions(spec.per_partition, tps, role)
            wanted = dict(spec.per_partition)
        else:
            wanted = {tp: spec.all_ms for tp in tps}
        found = (
            {tp: o for tp, (o, _) in self._run(self.client.list_offsets(wanted)).items()}
            if wanted
            else {}
        )
        none = [tp for tp, o in found.items() if o < 0]
        if none:
            starting = role.startswith("starting")
            if starting and self.options.starting_by_timestamp_strategy == "error":
                raise RaftlogSparkOptionError(
                    f"{role}: no record at or after the given timestamp in {_names(none)} "
                    "(set startingOffsetsByTimestampStrategy=latest to start at the end there)"
                )
            found.update(self.latest(none))  # Kafka's rule for endings, and the strategy
        return found

    def check_available(self, starts: Offsets, ends: Offsets | None = None) -> Offsets:
        """Starting offsets below the log start are lost records: DataLossError with
        failOnDataLoss, else a warning and the log start instead."""
        earliest = self.earliest(starts)
        out = dict(starts)
        for tp, start in starts.items():
            log_start = earliest[tp]
            if start < log_start:
                end = log_start if ends is None else min(log_start, ends.get(tp, log_start))
                why = f"retention moved the log start to {log_start}"
                if self.options.fail_on_data_loss:
                    raise DataLossError(tp, start, end, why)
                log.warning("data loss in %s: skipping [%d, %d) (%s)", tp, start, end, why)
                out[tp] = log_start
        return out


def _same_partitions(
    given: dict[TopicPartition, int], tps: list[TopicPartition], role: str
) -> None:
    """JSON offsets must name exactly the partitions read (Kafka's rule): a partition left out
    would otherwise be read from a default nobody chose."""
    missing = set(tps) - set(given)
    extra = set(given) - set(tps)
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {_names(missing)}")
        if extra:
            parts.append(f"not read by this query {_names(extra)}")
        raise RaftlogSparkOptionError(
            f"{role} must give an offset for every partition read, and only those: "
            + "; ".join(parts)
            + " (use -2 for earliest, -1 for latest)"
        )
