"""Model test of log compaction: random writes, cleans, clock moves and reopens of a compacted
PartitionLog, checked after every step against what cleaner.py's rules say a reader must see.

The model keeps every record written (offset, key, value, headers, timestamp) and every clean
installed (its time and `res.end`, the offset it cleaned up to). From these alone, and the
rules of cleaner.py's docstring, it computes exactly which records a reader from the log start
sees, with E the highest `res.end` so far:
- every record at or above E (no clean has touched it), keyless ones included;
- below E, for each key only its last record below E (a clean drops a record whose key has a
  later one in the cleaned range; a keyless record is dropped);
- except a tombstone whose delete horizon has passed: the first clean that covers a tombstone
  keeps it and stamps its batch with a horizon (that clean's time + delete.retention.ms); a
  later clean at or after the horizon that covers it removes it.
Whatever the batches look like, the reader sees these records at their written offsets with
their written keys, values, headers and timestamps, offsets going up; cleans and reopens never
move the log end offset; a read at any offset starts at the first batch holding or following
it. The example tests below pin the rules the model does not reach: an idempotent producer's
emptied last batch, keyless records, and compressed batches keeping their codec.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from typing import NamedTuple

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from raftlog.invariants import InvariantError
from raftlog.records import (
    BatchHeader,
    Record,
    decode_records,
    encode_batch,
    iter_batches,
    read_header,
)
from raftlog.records_v2 import COMPRESSION_MASK, DELETE_HORIZON_BIT, MAGIC_V2, encode_batch_v2
from raftlog.storage import LogConfig, PartitionLog, cleaner, tools
from raftlog.storage.log import CLEAN_SHUTDOWN_FILE
from raftlog.storage.producer_state import SNAPSHOT_SUFFIX

from ._helpers import SLOW, FakeClock, examples, stamped

KEYS = [b"k%d" % i for i in range(8)]
CODECS = range(5)  # none, gzip, snappy, lz4, zstd (compression.py's ids)


def compact_config(segment_bytes: int, delete_retention_ms: int, **more: str) -> LogConfig:
    """A compacted log's config whose every clean is due (min.cleanable.dirty.ratio 0)."""
    return LogConfig.from_topic_config(
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(segment_bytes),
            "min.cleanable.dirty.ratio": "0",
            "delete.retention.ms": str(delete_retention_ms),
            **more,
        }
    )


def read_log(log: PartitionLog, max_bytes: int = 1 << 20) -> tuple[list[BatchHeader], list[Record]]:
    """Every batch header and record of the log from its start, read as a consumer does:
    advancing by each batch's next offset (a cleaned batch's last offsets may hold no record,
    and a batch may hold none at all). Checks the batches' offsets on the way."""
    headers: list[BatchHeader] = []
    records: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes)
        if not data:
            break  # the rest of the log is a gap (an empty active segment after a clean)
        for pos, h in iter_batches(data):
            # `offset` is always a batch's next offset: the read starts at a batch at or after it.
            assert h.base_offset >= offset, (h, offset)
            batch = decode_records(data, pos, h)
            assert all(h.base_offset <= r.offset < h.next_offset for r in batch), (h, batch)
            headers.append(h)
            records.extend(batch)
            offset = h.next_offset
    assert offset <= log.log_end_offset
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets)), offsets
    return headers, records


def check_reads_at_every_offset(log: PartitionLog, headers: list[BatchHeader]) -> None:
    """A read at any offset of the log starts at the first batch holding or following it
    (through the index, which a clean or a recovery rebuilt)."""
    i = 0
    for offset in range(log.log_start_offset, log.log_end_offset):
        while i < len(headers) and headers[i].next_offset <= offset:
            i += 1
        data = log.read(offset, 1)
        if i == len(headers):
            assert data == b"", offset
        else:
            (_, first), *_ = iter_batches(data)
            assert first == headers[i], (offset, first, headers[i])


class Written(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def as_written(r: Record) -> Written:
    return Written(r.offset, r.key, r.value, r.headers, r.timestamp)


@dataclass(frozen=True, slots=True)
class Clean:
    now_ms: int
    end: int  # res.end: the clean covered every offset below it


def expected_records(
    written: list[Written], cleans: list[Clean], delete_retention_ms: int
) -> list[Written]:
    """What a reader from the log start sees (the module docstring's rules)."""
    cleaned_to = max((c.end for c in cleans), default=0)
    last_below: dict[bytes, int] = {}
    for w in written:
        if w.offset < cleaned_to and w.key is not None:
            last_below[w.key] = w.offset

    def tombstone_removed(offset: int) -> bool:
        covering = [c for c in cleans if c.end > offset]
        if not covering:
            return False
        horizon = covering[0].now_ms + delete_retention_ms
        return any(c.now_ms >= horizon for c in covering[1:])

    def kept(w: Written) -> bool:
        if w.offset >= cleaned_to:
            return True  # no clean has covered it
        if w.key is None or last_below[w.key] != w.offset:
            return False  # keyless, or superseded in the cleaned range
        return w.value is not None or not tombstone_removed(w.offset)

    return [w for w in written if kept(w)]


record_specs = st.lists(
    st.tuples(
        st.sampled_from([*KEYS, None]),
        st.one_of(st.none(), st.binary(max_size=24), st.binary(min_size=1, max_size=24)),
        st.sampled_from([(), (("h", b"x"),), (("h", None), ("i", b""))]),
    ),
    min_size=1,
    max_size=5,
)


class CleanerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="raftlog-cleaner-model-")
        self.path = os.path.join(self.root, "t-0")
        self.log: PartitionLog | None = None
        self.written: list[Written] = []
        self.cleans: list[Clean] = []

    @initialize(
        segment_bytes=st.integers(200, 1000),
        delete_retention_ms=st.integers(0, 50),
        index_interval_bytes=st.sampled_from([64, 256, 4096]),
        max_bytes=st.sampled_from([1, 600, 1 << 20]),
    )
    def open_log(
        self,
        segment_bytes: int,
        delete_retention_ms: int,
        index_interval_bytes: int,
        max_bytes: int,
    ) -> None:
        self.config = compact_config(
            segment_bytes,
            delete_retention_ms,
            **{"index.interval.bytes": str(index_interval_bytes)},
        )
        self.max_bytes = max_bytes
        self.clock = FakeClock()
        self.log = PartitionLog.open(self.path, self.config, clock_ms=self.clock)

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.root)

    @property
    def cleaned_to(self) -> int:
        return max((c.end for c in self.cleans), default=0)

    @rule(specs=record_specs, v2=st.booleans(), codec=st.sampled_from(CODECS))
    def write(
        self,
        specs: list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]],
        v2: bool,
        codec: int,
    ) -> None:
        assert self.log is not None
        now = self.clock.now_ms
        records = [Record(k, v, h, now + i) for i, (k, v, h) in enumerate(specs)]
        raw = encode_batch_v2(records, compression=codec) if v2 else encode_batch(records)
        base = len(self.written)
        if any(k is None for k, _, _ in specs):
            # A compacted topic's leader refuses keyless records; a follower takes what its
            # leader wrote (before the topic became compacted, say): they reach the cleaner so.
            info = self.log.append_as_follower(stamped(raw, base, 0))
        else:
            info = self.log.append(raw, leader_epoch=0)
        assert (info.base_offset, info.last_offset) == (base, base + len(records) - 1)
        self.written += [Written(base + i, *r[:4]) for i, r in enumerate(records)]

    @rule(ms=st.integers(0, 20))
    def advance_clock(self, ms: int) -> None:
        self.clock.now_ms += ms

    @rule(ms=st.integers(0, 10), keys_max=st.sampled_from([5, 1000]))
    def clean(self, ms: int, keys_max: int) -> None:
        self.clock.now_ms += ms
        self._clean(keys_max)

    @rule(pick=st.integers(0, 3))
    def clean_at_a_horizon(self, pick: int) -> None:
        """A clean exactly at a delete horizon an earlier clean stamped (the horizon itself is
        the first time its tombstones may go): random clock steps rarely land on one."""
        horizons = self.horizons_ahead()
        if horizons:
            self.clock.now_ms = horizons[pick % len(horizons)]
        self._clean(1000)

    def horizons_ahead(self) -> list[int]:
        horizons = {c.now_ms + self.config.delete_retention_ms for c in self.cleans}
        return sorted(h for h in horizons if h >= self.clock.now_ms)

    def _clean(self, keys_max: int) -> None:
        assert self.log is not None
        end_before = self.log.log_end_offset
        bases = self.log.segment_base_offsets
        plan = self.log.plan_clean(end_before)
        # Dirty ratio 0 and no compaction lag: due exactly when a closed segment lies at or
        # above where the last clean ended.
        assert (plan is not None) == any(b >= self.cleaned_to for b in bases[:-1]), bases
        if plan is None:
            return
        assert (plan.first_dirty, plan.end, plan.now_ms) == (
            self.cleaned_to,
            bases[-1],
            self.clock.now_ms,
        )
        try:
            res = cleaner.run(plan, keys_max=keys_max, bytes_per_s=0)
        except InvariantError as e:
            # The offset map's documented limit: one dirty segment with more keys than it holds.
            plan.close()
            assert keys_max < len(KEYS) and "alone holds more keys" in str(e), e
            return
        assert self.cleaned_to < res.end <= plan.end
        assert keys_max < len(KEYS) or res.end == plan.end
        assert self.log.install_clean(res)
        assert self.log.log_end_offset == end_before
        assert not [e for e in os.listdir(self.path) if e.endswith((".cleaned", ".swap"))]
        self.cleans.append(Clean(plan.now_ms, res.end))
        headers, records = read_log(self.log, self.max_bytes)
        # No record below the clean's end has a later record of its key below it; none is keyless.
        below = [r.key for r in records if r.offset < res.end]
        assert None not in below and len(below) == len(set(below)), below
        check_reads_at_every_offset(self.log, headers)

    @rule()
    def reopen(self) -> None:
        assert self.log is not None
        end_before = self.log.log_end_offset
        self.log.close()
        self.log = PartitionLog.open(self.path, self.config, clock_ms=self.clock)
        assert self.log.log_end_offset == end_before
        headers, _ = read_log(self.log, self.max_bytes)
        check_reads_at_every_offset(self.log, headers)

    @invariant()
    def reader_sees_the_model(self) -> None:
        if self.log is None:
            return
        assert self.log.log_end_offset == len(self.written)
        _, records = read_log(self.log, self.max_bytes)
        expected = expected_records(self.written, self.cleans, self.config.delete_retention_ms)
        assert [as_written(r) for r in records] == expected


TestCleanerModel = CleanerMachine.TestCase
TestCleanerModel.settings = examples(120, 2000, stateful_step_count=80 if SLOW else 40)


# -- examples --------------------------------------------------------------------------------


def roll_past(log: PartitionLog, clock: FakeClock, key: bytes = b"filler") -> None:
    """Append until the active segment rolls, so that everything before is cleanable."""
    segments = log.segment_count
    while log.segment_count == segments:
        log.append(encode_batch([Record(key, b"f" * 50, (), clock.now_ms)]), 0)


def clean(log: PartitionLog) -> cleaner.CleanResult:
    plan = log.plan_clean(log.log_end_offset)
    assert plan is not None
    res = cleaner.run(plan, keys_max=1000, bytes_per_s=0)
    assert log.install_clean(res)
    return res


def batches(log: PartitionLog) -> list[tuple[BatchHeader, list[Record]]]:
    out, offset = [], log.log_start_offset
    while data := log.read(offset, 1 << 20):
        for pos, h in iter_batches(data):
            out.append((h, decode_records(data, pos, h)))
            offset = h.next_offset
    return out


def idem(seq: int, keys: list[bytes], ts: int) -> bytes:
    return encode_batch(
        [Record(k, b"p%d" % (seq + i), (), ts) for i, k in enumerate(keys)],
        producer_id=7,
        producer_epoch=0,
        base_sequence=seq,
    )


@pytest.mark.parametrize("rebuild", [False, True], ids=["snapshot", "rebuilt-from-log"])
def test_producers_superseded_last_batch_stays_empty_and_its_retry_is_a_duplicate(
    tmp_path: str, rebuild: bool
) -> None:
    path = str(tmp_path / "t-0")  # type: ignore[operator]
    clock = FakeClock()
    config = compact_config(400, 50)
    log = PartitionLog.open(path, config, clock_ms=clock)
    log.append(idem(0, [b"a"], clock.now_ms), 0)  # offset 0: the producer's first batch
    log.append(idem(1, [b"b", b"c"], clock.now_ms), 0)  # offsets 1-2: its last
    log.append(encode_batch([Record(k, b"new", (), clock.now_ms) for k in (b"a", b"b", b"c")]), 0)
    roll_past(log, clock)
    end = log.log_end_offset
    clean(log)
    assert log.log_end_offset == end
    (h, records), *rest = batches(log)
    # The first batch is gone whole; the last is kept, empty, with its producer's fields.
    assert (h.base_offset, h.last_offset_delta, h.record_count, records) == (1, 1, 0, [])
    assert (h.magic, h.producer_id, h.producer_epoch, h.base_sequence) == (MAGIC_V2, 7, 0, 1)
    assert [(r.offset, r.key, r.value) for r in rest[0][1]] == [
        (3, b"a", b"new"),
        (4, b"b", b"new"),
        (5, b"c", b"new"),
    ]
    log.close()
    if rebuild:
        # No snapshot and no clean-shutdown marker: the producer state is rebuilt from the
        # batches, the emptied one included.
        for entry in os.listdir(path):
            if entry.endswith(SNAPSHOT_SUFFIX) or entry == CLEAN_SHUTDOWN_FILE:
                os.unlink(os.path.join(path, entry))
    with PartitionLog.open(path, config, clock_ms=clock) as log:
        (retry,) = log.append_chunks([memoryview(idem(1, [b"b", b"c"], clock.now_ms))], 0)
        assert (retry.base_offset, retry.last_offset) == (1, 2)  # type: ignore[union-attr]
        assert log.log_end_offset == end
        (following,) = log.append_chunks([memoryview(idem(3, [b"d"], clock.now_ms))], 0)
        assert following.base_offset == end  # type: ignore[union-attr]


def test_keyless_records_are_dropped_by_a_clean(tmp_path: str) -> None:
    """Written while the topic's policy was delete, then compacted."""
    clock = FakeClock()
    config = compact_config(400, 50)
    with PartitionLog.open(
        str(tmp_path), replace(config, cleanup_policy="delete"), clock_ms=clock
    ) as log:
        log.append(encode_batch([Record(None, b"x", (), 5), Record(b"a", b"1", (), 5)]), 0)
        log.append(encode_batch_v2([Record(None, b"y", (), 6)], compression=3), 0)
        log.append(encode_batch([Record(None, b"z", (), 7)]), 0)
        roll_past(log, clock)
        log.config = config
        end = log.log_end_offset
        clean(log)
        kept = [(r.offset, r.key, r.value) for _, rs in batches(log) for r in rs]
        assert kept[0] == (1, b"a", b"1")
        assert all(k is not None for _, k, _ in kept)
        assert log.log_end_offset == end


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_compressed_batch_keeps_its_codec(tmp_path: str, codec: int) -> None:
    clock = FakeClock()
    with PartitionLog.open(str(tmp_path), compact_config(600, 50), clock_ms=clock) as log:
        records = [
            Record(k, k * 40, (("h", b"1"),), 100 + i)
            for i, k in enumerate([b"a", b"b", b"c", b"d"])
        ]
        log.append(encode_batch_v2(records, compression=codec), 0)
        log.append(encode_batch([Record(b"b", b"new-b", (), 200), Record(b"d", None, (), 200)]), 0)
        roll_past(log, clock)
        clean(log)
        (h, kept), (h2, after), *_ = batches(log)
        assert h.attributes & COMPRESSION_MASK == codec
        assert not h.attributes & DELETE_HORIZON_BIT  # no tombstone in it
        assert (h.base_offset, h.last_offset_delta, h.record_count) == (0, 3, 2)
        assert [as_written(r) for r in kept] == [
            as_written(records[0]._replace(offset=0)),
            as_written(records[2]._replace(offset=2)),
        ]
        # The other batch kept both its records, the tombstone stamped with its horizon.
        assert h2.attributes & DELETE_HORIZON_BIT and h2.first_timestamp == clock.now_ms + 50
        assert [(r.offset, r.key, r.value, r.timestamp) for r in after] == [
            (4, b"b", b"new-b", 200),
            (5, b"d", None, 200),
        ]


def test_a_tombstone_goes_at_the_first_clean_at_or_after_its_horizon(tmp_path: str) -> None:
    """The first clean that keeps a tombstone sets its horizon; later cleans before it keep
    that horizon (even one that rewrites the batch), and the first at it removes the
    tombstone."""
    clock = FakeClock()
    with PartitionLog.open(str(tmp_path), compact_config(400, 30), clock_ms=clock) as log:
        log.append(encode_batch([Record(b"a", b"1", (), 1)]), 0)
        log.append(encode_batch([Record(b"a", None, (), 2), Record(b"b", b"1", (), 2)]), 0)
        roll_past(log, clock, key=b"f1")
        horizon = clock.now_ms + 30
        assert clean(log).tombstones_removed == 0

        def batch_of_a() -> tuple[BatchHeader, list[tuple[int, bytes | None, bytes | None]]]:
            ((h, records),) = [(h, rs) for h, rs in batches(log) if h.base_offset == 1]
            return h, [(r.offset, r.key, r.value) for r in records]

        h, records = batch_of_a()
        assert h.attributes & DELETE_HORIZON_BIT and h.first_timestamp == horizon
        assert records == [(1, b"a", None), (2, b"b", b"1")]
        log.append(encode_batch([Record(b"b", b"2", (), 3)]), 0)
        roll_past(log, clock, key=b"f2")
        clock.now_ms = horizon - 1
        assert clean(log).tombstones_removed == 0  # rewrites the batch: b's record goes
        h, records = batch_of_a()
        assert h.attributes & DELETE_HORIZON_BIT and h.first_timestamp == horizon
        assert records == [(1, b"a", None)]
        roll_past(log, clock, key=b"f3")
        clock.now_ms = horizon
        assert clean(log).tombstones_removed == 1
        assert [r for _, rs in batches(log) for r in rs if r.key == b"a"] == []


def test_a_batch_with_a_delete_horizon_keeps_its_max_timestamp(tmp_path: str) -> None:
    """Kafka's KIP-534: the horizon takes the base timestamp's place; the max timestamp stays
    the records' (the time index, retention and lookups by time read it)."""
    clock = FakeClock()
    config = compact_config(300, 24 * 60 * 60 * 1000, **{"index.interval.bytes": "1"})
    with PartitionLog.open(str(tmp_path), config, clock_ms=clock) as log:
        log.append(encode_batch([Record(b"a", None, (), 100)]), 0)
        log.append(encode_batch([Record(b"b", b"1", (), 100)]), 0)
        roll_past(log, clock)
        clean(log)
        h = read_header(log.read(0, 1))
        assert (
            h.attributes & DELETE_HORIZON_BIT
            and h.first_timestamp == clock.now_ms + config.delete_retention_ms
        )
        assert h.max_timestamp == 100
    assert tools.verify(str(tmp_path)) == []
