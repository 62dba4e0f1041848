"""The `raftlog` data source: batch and streaming readers, in the Kafka source's image.

How a read works:
- `schema()` runs when `load()` is called: it checks every option and what the options need
  from the cluster (topics exist, JSON offsets name exactly the partitions read, a group has
  committed offsets), so a bad option fails before any job runs.
- Planning (driver): a `Planner` resolves the subscription and the offsets. The end of every
  range is at most the partition's high watermark at planning time (ListOffsets "latest"), so
  only committed records are read. One Spark partition per log partition, split into equal
  offset ranges when `minPartitions` asks for more (Kafka's rule: pieces in proportion to the
  range sizes).
- Reading (executors): `read()` opens its own `RangeReader` (the source objects are pickled;
  no client lives in them), fetches the range as whole checked batches and yields one Arrow
  record batch per fetch (arrow.py), never a Python object per record.
- Streaming: an offset is Kafka's JSON object `{"topic": {"partition": next offset}}`, kept
  in Spark's checkpoint: a restarted query goes on from the checkpoint, exactly where it
  stopped, whatever `startingOffsets` says. `latestOffset(start, limit)` honours
  `maxOffsetsPerTrigger` (Spark 4.2's admission control: ReadMaxRows) and
  Trigger.AvailableNow (the end is fixed when the query starts). Partitions that appear while
  the query runs (a grown topic, a new topic matching the pattern) are read from their start.
- `commitToGroup`: the end of each completed micro-batch is committed to the group (a
  standalone commit, as Kafka allows for consumers that assign partitions themselves), so
  `raftlog group describe` shows the job's lag. Spark calls `commit(end)` late: only when it
  plans the next batch, and never for the last batch before the query stops. So the source
  also commits the `start` it is given in `latestOffset`, which is the end of the last
  completed batch and is asked on every trigger, even when no new data came. The group is
  monitoring and a replay point; the checkpoint stays the source of truth for the query.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from raftlog.client.reader import RangeReader
from raftlog.errors import RaftlogError
from raftlog.topics import TopicPartition
from raftlog_spark.arrow import chunk_to_arrow
from raftlog_spark.offsets import Offsets, Planner, from_json, to_json
from raftlog_spark.options import (
    Group,
    PerPartition,
    RaftlogSparkOptionError,
    SourceOptions,
)

log = logging.getLogger(__name__)

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_FIELD = "headers array<struct<key: string, value: binary>>"


class RangePartition(InputPartition):
    """Offsets [start, end) of one log partition: one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"RangePartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


def split_ranges(
    ranges: dict[TopicPartition, tuple[int, int]], min_partitions: int | None
) -> list[RangePartition]:
    """One RangePartition per non-empty range; with `min_partitions` above that count, each
    range is cut into pieces in proportion to its share of all offsets (at least one), and
    the pieces add up to at least `min_partitions` (largest remainders get the extra ones;
    Kafka's source rounds each share and may end up below the minimum)."""
    live = {tp: r for tp, r in sorted(ranges.items()) if r[1] > r[0]}
    total = sum(end - start for start, end in live.values())
    counts = dict.fromkeys(live, 1)
    if min_partitions is not None and min_partitions > len(live):
        shares = {tp: (end - start) / total * min_partitions for tp, (start, end) in live.items()}
        counts = {tp: max(int(share), 1) for tp, share in shares.items()}
        by_remainder = sorted(live, key=lambda tp: (counts[tp] - shares[tp], tp))
        for tp in by_remainder[: max(min_partitions - sum(counts.values()), 0)]:
            counts[tp] += 1
    out = []
    for tp, (start, end) in live.items():
        pieces = min(counts[tp], end - start)
        size = end - start
        cuts = [start + size * i // pieces for i in range(pieces)] + [end]
        for a, b in itertools.pairwise(cuts):
            if b > a:
                out.append(RangePartition(tp.topic, tp.partition, a, b))
    return out


def read_partition(options: SourceOptions, part: InputPartition) -> Iterator[pa.RecordBatch]:
    """The records of one range as Arrow record batches (runs on an executor)."""
    if not isinstance(part, RangePartition):
        # When the plan has no partition, Spark still runs one task with an empty one.
        if part.value is not None:
            raise TypeError(f"the raftlog source cannot read {part!r}")
        return
    tp = TopicPartition(part.topic, part.partition)
    with RangeReader(
        options.bootstrap_servers,
        client_id="raftlog-spark-reader",
        request_timeout_ms=options.request_timeout_ms,
        partition_fetch_bytes=options.partition_fetch_bytes,
    ) as reader:
        for chunk in reader.read_range(tp, part.start, part.end, options.fail_on_data_loss):
            yield chunk_to_arrow(chunk, options.include_headers)


class RaftlogDataSource(DataSource):
    """`spark.read.format("raftlog")`, `readStream`, `write` and `writeStream`."""

    @classmethod
    def name(cls) -> str:
        return "raftlog"

    def schema(self) -> str:
        """Checks the options (both ways: this does not know yet whether the query is batch
        or streaming) and the cluster state they need, then returns the Kafka schema."""
        try:
            options = SourceOptions.parse(self.options, streaming=False)
        except RaftlogSparkOptionError as batch_error:
            try:
                options = SourceOptions.parse(self.options, streaming=True)
            except RaftlogSparkOptionError:
                raise batch_error from None
        planner = Planner(options)
        try:
            tps = planner.partitions()
            for role, spec in (
                ("startingOffsets", options.starting),
                ("endingOffsets", options.ending),
            ):
                if isinstance(spec, Group | PerPartition):
                    planner.resolve(spec, tps, role)
        finally:
            planner.close()
        return SCHEMA + (", " + HEADERS_FIELD if options.include_headers else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return RaftlogBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RaftlogStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from raftlog_spark.sink import RaftlogWriter

        return RaftlogWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from raftlog_spark.sink import RaftlogStreamWriter

        return RaftlogStreamWriter(self.options, schema)


class RaftlogBatchReader(DataSourceReader):
    """Plans [startingOffsets, endingOffsets) per partition when Spark plans the query."""

    def __init__(self, options: SourceOptions):
        self.options = options
        planner = Planner(options)
        try:
            self.ranges = self._plan(planner)
        finally:
            planner.close()

    def _plan(self, planner: Planner) -> dict[TopicPartition, tuple[int, int]]:
        options = self.options
        tps = planner.partitions()
        if not tps:
            raise RaftlogSparkOptionError(f"{options.subscription.describe()} matches no partition")
        starts = planner.resolve(options.starting, tps, "startingOffsets")
        ends = planner.resolve(options.ending, tps, "endingOffsets")
        committed = planner.latest(tps)
        for tp in tps:
            if ends[tp] > committed[tp]:
                raise RaftlogSparkOptionError(
                    f"endingOffsets: {tp} ends at {ends[tp]}, but its committed records end at "
                    f"{committed[tp]} (the high watermark); a batch query reads committed "
                    "records only"
                )
            if starts[tp] > ends[tp]:
                raise RaftlogSparkOptionError(
                    f"{tp}: the starting offset {starts[tp]} is after the ending offset {ends[tp]}"
                )
        starts = planner.check_available(starts, ends)
        return {tp: (min(starts[tp], ends[tp]), ends[tp]) for tp in tps}

    def partitions(self) -> Sequence[InputPartition]:
        return split_ranges(self.ranges, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_partition(self.options, partition)


class RaftlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions):
        self.options = options
        self._planner: Planner | None = None
        # Trigger.AvailableNow: the offsets that were latest when the query started.
        self._target: Offsets | None = None
        self._group_committed: Offsets | None = None

    # The planner holds a network client: it is made on first use on the driver and never
    # pickled (executors only need `options`).
    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_planner": None, "_target": None,
                "_group_committed": None}  # fmt: skip

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options)
        return self._planner

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.planner.latest(self.planner.partitions())

    def initialOffset(self) -> dict[str, Any]:
        planner = self.planner
        tps = planner.partitions()
        starts = planner.resolve(self.options.starting, tps, "startingOffsets")
        starts = planner.check_available(starts)
        return to_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        planner = self.planner
        begin = from_json(start)
        # `start` is the end of the last completed micro-batch (or the initial offset).
        self._commit_to_group(begin)
        tps = planner.partitions()
        gone = set(begin) - set(tps)
        if gone:
            names = ", ".join(map(str, sorted(gone)))
            if self.options.fail_on_data_loss:
                raise RaftlogSparkOptionError(
                    f"partitions {names} were being read and no longer exist (topic "
                    "deleted?); set failOnDataLoss=false to go on without them"
                )
            log.warning("partitions %s no longer exist; the query goes on without them", names)
        new = [tp for tp in tps if tp not in begin]
        begin = {tp: o for tp, o in begin.items() if tp in set(tps)}
        begin.update(planner.earliest(new))
        latest = planner.latest(tps)
        # Never go back: after a leader change the new leader's high watermark may lag for a
        # moment; the range simply waits for it.
        ends = {tp: max(latest[tp], begin[tp]) for tp in tps}
        if self._target is not None:
            ends = {
                tp: max(min(ends[tp], self._target[tp]), begin[tp])
                for tp in tps
                if tp in self._target
            }
        if isinstance(limit, ReadMaxRows):
            ends = rate_limit(begin, ends, limit.max_rows)
        return to_json(ends)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        tps = self.planner.partitions()
        return to_json(self.planner.latest(tps)) if tps else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, ends = from_json(start), from_json(end)
        new = [tp for tp in ends if tp not in begin]
        if new:
            begin.update(self.planner.earliest(new))
        ranges = {tp: (begin[tp], o) for tp, o in ends.items()}
        return split_ranges(ranges, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_partition(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_to_group(from_json(end))

    def _commit_to_group(self, offsets: Offsets) -> None:
        group = self.options.commit_to_group
        if group is None or not offsets or offsets == self._group_committed:
            return
        try:
            self.planner.commit(group, offsets)
        except RaftlogError as e:
            # The group is for monitoring and replay; the checkpoint keeps the query right.
            log.warning("commitToGroup %s: commit of %s failed: %s", group, to_json(offsets), e)
            return
        self._group_committed = dict(offsets)

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


def rate_limit(begin: Offsets, ends: Offsets, max_rows: int) -> Offsets:
    """Ends that admit at most `max_rows` records in all, shared in proportion to each
    partition's backlog (Kafka's maxOffsetsPerTrigger), and at least one record while any is
    waiting, so a query always progresses."""
    backlog = {tp: ends[tp] - begin[tp] for tp in ends}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(ends)
    out = {tp: begin[tp] + backlog[tp] * max_rows // total for tp in ends}
    left = max_rows - sum(out[tp] - begin[tp] for tp in ends)
    # Hand out what rounding down left, largest remaining backlog first.
    for tp in sorted(ends, key=lambda t: (out[t] - ends[t], t)):
        if left <= 0:
            break
        if out[tp] < ends[tp]:
            out[tp] += 1
            left -= 1
    return out
