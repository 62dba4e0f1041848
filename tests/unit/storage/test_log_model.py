"""Model test: random operations on a PartitionLog, checked after every step against a plain list.

The model keeps every batch (its records, its epoch and the exact bytes the log must hold), the
segments those batches fall into (rolled by the documented rules: `segment_bytes` and
`segment_ms`), the log start offset and the leader-epoch cache entries. After every step the
invariants compare the real log with it: offsets, segment layout, every record of every offset
in range (bytes and decoded), out-of-range errors, `offset_for_timestamp`, and the epoch cache.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from bisect import bisect_right
from dataclasses import dataclass, field

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from raftlog.errors import FencedLeaderEpochError, InvalidOffsetError, OffsetOutOfRangeError
from raftlog.records import Record, encode_batch
from raftlog.storage import LogConfig, PartitionLog

from ._helpers import SLOW, FakeClock, examples, records_at, stamped


@dataclass
class MBatch:
    base: int
    records: list[Record]  # offsets filled in
    epoch: int
    data: bytes  # exactly what the log must hold for this batch

    @property
    def last(self) -> int:
        return self.base + len(self.records) - 1

    @property
    def next(self) -> int:
        return self.base + len(self.records)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def max_ts(self) -> int:
        return max(r.timestamp for r in self.records)


@dataclass
class MSegment:
    base: int
    batches: list[MBatch] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(b.size for b in self.batches)

    @property
    def next(self) -> int:
        return self.batches[-1].next if self.batches else self.base

    @property
    def max_ts(self) -> int:
        return max((b.max_ts for b in self.batches), default=-1)

    @property
    def first_ts(self) -> int:
        # The segment's age for segment_ms is the max timestamp of its first batch (as Kafka).
        return self.batches[0].max_ts if self.batches else -1


class Model:
    """What the log should be, written as simply as possible."""

    def __init__(self, config: LogConfig):
        self.config = config
        self.segments = [MSegment(0)]
        self.log_start = 0
        self.epochs: list[tuple[int, int]] = []  # (epoch, start offset), the KIP-101 cache

    # -- state -----------------------------------------------------------------------------

    @property
    def log_end(self) -> int:
        return self.segments[-1].next

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else -1

    def batches(self) -> list[MBatch]:
        return [b for s in self.segments for b in s.batches]

    def visible_batches(self) -> list[MBatch]:
        return [b for b in self.batches() if b.last >= self.log_start]

    def visible_records(self) -> list[Record]:
        return [r for b in self.visible_batches() for r in b.records if r.offset >= self.log_start]

    # -- the epoch cache rules (epoch_cache.py docstrings) ------------------------------------

    def assign(self, epoch: int, start: int) -> None:
        if epoch <= self.latest_epoch:
            return
        while self.epochs and self.epochs[-1][1] >= start:
            self.epochs.pop()
        self.epochs.append((epoch, start))

    def epochs_truncate_from_end(self, end: int) -> None:
        while self.epochs and self.epochs[-1][1] >= end:
            self.epochs.pop()

    def epochs_truncate_from_start(self, start: int) -> None:
        kept = [(e, s) for e, s in self.epochs if s <= start]
        if not kept:
            return
        self.epochs = [(kept[-1][0], start)] + [(e, s) for e, s in self.epochs if s > start]

    # -- operations ----------------------------------------------------------------------------

    def append(self, batches: list[MBatch]) -> None:
        seg = self.segments[-1]
        nbytes = sum(b.size for b in batches)
        max_ts = max(b.max_ts for b in batches)
        limit = self.config.segment_bytes
        if seg.batches and (
            seg.size + nbytes > limit
            or (seg.first_ts >= 0 and max_ts - seg.first_ts > self.config.segment_ms)
        ):
            seg = MSegment(self.log_end)
            self.segments.append(seg)
        if len(batches) == 1 or seg.size + nbytes <= limit:
            seg.batches.extend(batches)
            return
        # Several batches that overflow the segment: split between batches, rolling by the
        # same rules for each group's first batch; a group holds at least one batch.
        i = 0
        while i < len(batches):
            b = batches[i]
            if (
                i
                and seg.batches
                and (
                    seg.size + b.size > limit
                    or (seg.first_ts >= 0 and b.max_ts - seg.first_ts > self.config.segment_ms)
                )
            ):
                seg = MSegment(b.base)
                self.segments.append(seg)
            j, total = i, 0
            while j < len(batches) and (j == i or seg.size + total + batches[j].size <= limit):
                total += batches[j].size
                j += 1
            seg.batches.extend(batches[i:j])
            i = j

    def truncate_to(self, offset: int) -> None:
        if offset >= self.log_end:
            # No record goes, but epochs starting at or after `offset` do (the log's
            # truncate_to): in an empty log, that includes the entry covering its start.
            self.epochs_truncate_from_end(offset)
            return
        if offset <= self.segments[0].base or offset < self.log_start:
            self.segments = [MSegment(offset)]
            self.log_start = offset
            self.epochs = []
            return
        i = bisect_right([s.base for s in self.segments], offset) - 1
        del self.segments[i + 1 :]
        seg = self.segments[i]
        seg.batches = [b for b in seg.batches if b.last < offset]
        self.epochs_truncate_from_end(self.log_end)
        # The whole batch holding `offset` goes, which may end the log below its old start:
        # the log is then empty, starting at its new end.
        self.log_start = min(self.log_start, self.log_end)

    def reopened(self) -> None:
        # Recovery deletes closed segments wholly below the log start (left there when the
        # log start passed a segment while it was still the active one).
        while len(self.segments) > 1 and self.segments[0].next <= self.log_start:
            self.segments.pop(0)

    def advance_log_start(self, offset: int) -> None:
        self.log_start = offset
        while len(self.segments) > 1 and self.segments[0].next <= offset:
            self.segments.pop(0)
        self.epochs_truncate_from_start(offset)

    def enforce_retention(self, now_ms: int) -> int:
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        total = sum(s.size for s in self.segments)
        count = 0
        for seg in self.segments[:-1]:
            below_start = seg.next <= self.log_start
            expired = retention_ms >= 0 and now_ms - seg.max_ts > retention_ms
            oversize = retention_bytes >= 0 and total - seg.size >= retention_bytes
            if not (below_start or expired or oversize):
                break
            total -= seg.size
            count += 1
        if count:
            self.advance_log_start(max(self.log_start, self.segments[count].base))
        return count

    def read(self, offset: int, max_bytes: int, max_offset: int | None) -> bytes:
        if offset == self.log_end or (max_offset is not None and max_offset <= offset):
            return b""
        seg = self.segments[bisect_right([s.base for s in self.segments], offset) - 1]
        out: list[MBatch] = []
        total = 0
        for b in seg.batches:
            if b.last < offset:
                continue
            if max_offset is not None and b.last >= max_offset:
                break
            if out and total + b.size > max(max_bytes, 1):
                break
            out.append(b)
            total += b.size
        return b"".join(b.data for b in out)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        for r in self.visible_records():
            if r.timestamp >= timestamp:
                return r.offset, r.timestamp
        return None


configs = st.builds(
    LogConfig,
    segment_bytes=st.integers(300, 2000),
    segment_ms=st.one_of(st.just(7 * 24 * 3600 * 1000), st.integers(20, 300)),
    index_interval_bytes=st.one_of(st.just(0), st.integers(1, 400)),
    retention_ms=st.one_of(st.just(-1), st.integers(0, 600)),
    retention_bytes=st.one_of(st.just(-1), st.integers(0, 4000)),
    flush_messages=st.one_of(st.none(), st.integers(1, 6)),
    recovery_point_checkpoint_ms=st.sampled_from([0, 1000]),
)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="raftlog-model-")
        self.generation = 0
        self.log: PartitionLog | None = None

    # -- setup ---------------------------------------------------------------------------------

    @initialize(config=configs)
    def open_log(self, config: LogConfig) -> None:
        self.config = config
        self.clock = FakeClock()
        self.path = os.path.join(self.root, "crash-0", "topic-0")
        self.log = PartitionLog.open(self.path, config, clock_ms=self.clock)
        self.model = Model(config)

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.root)

    def draw_offset(self, data: st.DataObject, low: int, high: int, label: str) -> int:
        """An offset in [low, high], half the time next to a batch boundary or the log ends:
        where the edge cases are (a log start inside a batch, a cut at its first record)."""
        m = self.model
        edges = {m.log_start, m.log_end} | {b.base for b in m.batches()}
        near = sorted({e + d for e in edges for d in (-1, 0, 1)} & set(range(low, high + 1)))
        if near and data.draw(st.booleans(), label=f"{label} near an edge"):
            return data.draw(st.sampled_from(near), label=label)
        return data.draw(st.integers(low, high), label=label)

    def draw_records(self, data: st.DataObject) -> list[Record]:
        now = self.clock.now_ms
        return data.draw(
            st.lists(records_at(st.integers(now - 100, now + 100)), min_size=1, max_size=4)
        )

    # -- appends -------------------------------------------------------------------------------

    @rule(data=st.data(), batch_count=st.integers(1, 3))
    def append_as_leader(self, data: st.DataObject, batch_count: int) -> None:
        assert self.log is not None
        m = self.model
        latest = m.latest_epoch
        epoch = data.draw(st.integers(max(latest - 1, 0), max(latest, 0) + 2), label="epoch")
        encoded = []
        for _ in range(batch_count):
            recs = self.draw_records(data)
            encoded.append((recs, encode_batch(recs)))
        payload = b"".join(raw for _, raw in encoded)
        if epoch < latest:
            with pytest.raises(FencedLeaderEpochError, match=f"epoch {epoch}"):
                self.log.append(payload, epoch)
            return
        info = self.log.append(payload, epoch)
        start = base = m.log_end
        batches = []
        for recs, raw in encoded:
            batches.append(
                MBatch(
                    base,
                    [r._replace(offset=base + i) for i, r in enumerate(recs)],
                    epoch,
                    stamped(raw, base, epoch),
                )
            )
            base += len(recs)
        m.assign(epoch, start)
        m.append(batches)
        assert (info.base_offset, info.last_offset) == (start, base - 1)
        assert (info.record_count, info.batch_count) == (base - start, batch_count)
        assert info.size_bytes == len(payload)
        assert info.max_timestamp == max(b.max_ts for b in batches)
        assert info.log_start_offset == m.log_start

    @rule(data=st.data(), batch_count=st.integers(1, 3))
    def append_as_follower(self, data: st.DataObject, batch_count: int) -> None:
        assert self.log is not None
        m = self.model
        epoch = max(m.latest_epoch, 0)
        base = m.log_end
        batches = []
        for _ in range(batch_count):
            epoch += data.draw(st.integers(0, 2), label="epoch step")
            recs = self.draw_records(data)
            raw = encode_batch(recs, base_offset=base, partition_leader_epoch=epoch)
            batches.append(
                MBatch(base, [r._replace(offset=base + i) for i, r in enumerate(recs)], epoch, raw)
            )
            base += len(recs)
        info = self.log.append_as_follower(b"".join(b.data for b in batches))
        for b in batches:
            m.assign(b.epoch, b.base)
        m.append(batches)
        assert (info.base_offset, info.last_offset) == (batches[0].base, base - 1)

    @rule(data=st.data(), shift=st.sampled_from([-2, -1, 1, 5]))
    def append_as_follower_at_wrong_offset(self, data: st.DataObject, shift: int) -> None:
        assert self.log is not None
        base = self.model.log_end + shift
        if base < 0:
            return
        raw = encode_batch(self.draw_records(data), base_offset=base, partition_leader_epoch=0)
        with pytest.raises(InvalidOffsetError, match=f"continues at {self.model.log_end}"):
            self.log.append_as_follower(raw)

    # -- removing ------------------------------------------------------------------------------

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        assert self.log is not None
        m = self.model
        offset = self.draw_offset(data, max(m.log_start - 3, 0), m.log_end + 2, "offset")
        m.truncate_to(offset)
        assert self.log.truncate_to(offset) == m.log_end

    @rule(data=st.data())
    def delete_records_before(self, data: st.DataObject) -> None:
        assert self.log is not None
        m = self.model
        offset = self.draw_offset(data, max(m.log_start - 2, 0), m.log_end + 2, "offset")
        if offset > m.log_end:
            with pytest.raises(OffsetOutOfRangeError, match=f"beyond the log end {m.log_end}"):
                self.log.delete_records_before(offset)
            return
        if offset > m.log_start:
            m.advance_log_start(offset)
        assert self.log.delete_records_before(offset) == m.log_start

    @rule(explicit_now=st.booleans())
    def enforce_retention(self, explicit_now: bool) -> None:
        assert self.log is not None
        expected = self.model.enforce_retention(self.clock.now_ms)
        if explicit_now:
            assert self.log.enforce_retention(self.clock.now_ms) == expected
        else:
            assert self.log.enforce_retention() == expected

    @rule(ms=st.integers(0, 400))
    def advance_clock(self, ms: int) -> None:
        self.clock.now_ms += ms

    # -- durability ----------------------------------------------------------------------------

    @rule()
    def flush(self) -> None:
        assert self.log is not None
        self.log.flush()
        assert self.log.recovery_point == self.model.log_end

    @rule()
    def close_and_reopen(self) -> None:
        assert self.log is not None
        self.log.close()
        self.log = PartitionLog.open(self.path, self.config, clock_ms=self.clock)
        self.model.reopened()

    @rule()
    def crash_and_reopen(self) -> None:
        """Reopen a copy taken while the log was open: what the disk held at a crash."""
        assert self.log is not None
        self.generation += 1
        copy = os.path.join(self.root, f"crash-{self.generation}", "topic-0")
        shutil.copytree(self.path, copy)
        self.log.close()
        shutil.rmtree(os.path.dirname(self.path))
        self.path = copy
        self.log = PartitionLog.open(self.path, self.config, clock_ms=self.clock)
        self.model.reopened()

    # -- reads ---------------------------------------------------------------------------------

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        assert self.log is not None
        m = self.model
        offset = self.draw_offset(data, m.log_start, m.log_end, "offset")
        max_bytes = data.draw(st.integers(0, 3000), label="max_bytes")
        max_offset = data.draw(
            st.one_of(st.none(), st.integers(max(offset - 2, 0), m.log_end + 2)),
            label="max_offset",
        )
        expected = m.read(offset, max_bytes, max_offset)
        got = self.log.read(offset, max_bytes, max_offset)
        assert got == expected
        if offset < m.log_end and (max_offset is None or m.read(offset, 0, max_offset)):
            assert got, "a read where data exists returns at least one batch"
        file_slice = self.log.read_slice(offset, max_bytes, max_offset)
        assert file_slice.size == len(expected)
        assert file_slice.read() == expected

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def offsets_and_layout_match(self) -> None:
        if self.log is None:
            return
        m = self.model
        assert self.log.log_start_offset == m.log_start
        assert self.log.log_end_offset == m.log_end
        assert self.log.segment_base_offsets == [s.base for s in m.segments]
        assert self.log.size_bytes == sum(s.size for s in m.segments)
        assert self.log.recovery_point <= m.log_end

    @invariant()
    def every_offset_reads_back(self) -> None:
        if self.log is None:
            return
        m = self.model
        for b in m.visible_batches():
            for offset in range(max(b.base, m.log_start), b.next):
                # max_bytes=1: exactly the batch holding `offset`, whole.
                assert self.log.read(offset, 1) == b.data
                assert self.log.read_records(offset, 1) == [
                    r for r in b.records if r.offset >= offset
                ]
        assert self.log.read(m.log_end, 1000) == b""

    @invariant()
    def out_of_range_reads_name_the_range(self) -> None:
        if self.log is None:
            return
        m = self.model
        bad = [m.log_end + 1] + ([m.log_start - 1] if m.log_start > 0 else [])
        for offset in bad:
            with pytest.raises(OffsetOutOfRangeError) as raised:
                self.log.read(offset, 100)
            assert f"[{m.log_start}, {m.log_end}]" in str(raised.value)
            assert (raised.value.log_start_offset, raised.value.log_end_offset) == (
                m.log_start,
                m.log_end,
            )

    @invariant()
    def offset_for_timestamp_matches(self) -> None:
        if self.log is None:
            return
        m = self.model
        stamps = sorted({r.timestamp for r in m.visible_records()})
        probes = {0, self.clock.now_ms + 1000}
        for ts in stamps:
            probes.update((ts - 1, ts, ts + 1))
        for ts in sorted(probes):
            assert self.log.offset_for_timestamp(ts) == m.offset_for_timestamp(ts), ts

    @invariant()
    def epoch_cache_matches(self) -> None:
        if self.log is None:
            return
        m = self.model
        assert self.log.epoch_cache.entries() == m.epochs
        assert self.log.latest_epoch == m.latest_epoch
        for b in m.visible_batches():
            assert self.log.epoch_cache.epoch_for_offset(max(b.base, m.log_start)) == b.epoch
        if m.epochs:
            assert self.log.end_offset_for_epoch(m.latest_epoch) == (m.latest_epoch, m.log_end)


TestLogModel = LogMachine.TestCase
TestLogModel.settings = examples(40, 600, stateful_step_count=80 if SLOW else 40)
