"""Crash tests: damage what the disk held at a crash, reopen, and check recovery.

A crash is simulated by copying the partition directory while the log is open (`copytree` reads
exactly what the kernel holds for the files, which is what a power cut after the last write
leaves at best), then closing the original. The copy is then damaged the ways a crash or a disk
damages files: a torn tail, flipped bits in unflushed data, lost or torn index files, bad
checkpoints. What recovery must produce is computed here, independently of the code under
test, from the batch bytes the test wrote: the longest prefix of whole batches before the first
damaged byte.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import struct
import tempfile
from dataclasses import dataclass, field
from typing import TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog.records import Record, encode_batch
from raftlog.records_v2 import encode_batch_v2
from raftlog.storage import LogConfig, PartitionLog, tools
from raftlog.storage.checkpoint import OffsetCheckpoint
from raftlog.storage.log import EPOCH_CACHE_FILE, LOG_START_FILE, RECOVERY_POINT_FILE
from raftlog.storage.segment import segment_name

from ._helpers import FakeClock, captured_logs, examples, stamped

# Small segments so that a log of a few dozen batches has several; an index entry every ~200
# bytes so that indices have entries to lose; the recovery point checkpoint written on every
# flush so that the test knows where it is.
CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=200, recovery_point_checkpoint_ms=0)
T = TypeVar("T")
EPOCH_BYTES = range(12, 16)  # partition_leader_epoch: outside the checksum, see records.py


@dataclass
class Written:
    base: int
    records: list[Record]
    epoch: int
    data: bytes
    segment: int | None = None  # base offset of the segment file holding it (None: deleted)
    position: int = -1

    @property
    def next(self) -> int:
        return self.base + len(self.records)

    @property
    def end(self) -> int:
        return self.position + len(self.data)


@dataclass
class Crash:
    """A crashed copy of a partition and what the test knows about its bytes."""

    path: str
    batches: list[Written]
    segments: dict[int, list[Written]] = field(default_factory=dict)  # base -> its batches
    recovery_point: int = 0
    log_start: int = 0
    # Whether the copy has a leader-epoch file: a new epoch lives in memory until the recovery
    # point passes it, so a log that was never flushed has none.
    epoch_file: bool = True

    def seg_path(self, base: int) -> str:
        return os.path.join(self.path, segment_name(base) + ".log")

    def in_files(self) -> list[Written]:
        return [b for b in self.batches if b.segment is not None]

    def unflushed(self) -> list[Written]:
        return [b for b in self.in_files() if b.base >= self.recovery_point]

    def retained(self, segment: int, position: int) -> list[Written]:
        """The batches before the first damaged byte (`position` in segment `segment`)."""
        return [
            b
            for b in self.in_files()
            if b.segment is not None
            and (b.segment < segment or (b.segment == segment and b.end <= position))
        ]  # (segment is never None here: in_files; the check narrows the type)


def make_records(rnd: random.Random, count: int, ts: int) -> list[Record]:
    out = []
    for _ in range(count):
        key = None if rnd.random() < 0.2 else rnd.randbytes(rnd.randint(0, 12))
        value = None if rnd.random() < 0.1 else rnd.randbytes(rnd.choice([0, 5, 40, 250]))
        headers = (("h", rnd.randbytes(3)),) if rnd.random() < 0.3 else ()
        out.append(Record(key, value, headers, ts + rnd.randint(0, 50)))
    return out


def crash(
    root: str, seed: int, batch_count: int, flushed: int, delete_fraction: float = 0.0
) -> Crash:
    """Append `batch_count` batches, flush after the first `flushed`, crash; return the copy."""
    rnd = random.Random(seed)
    # Which batches are Kafka's v2 rather than raftlog's own: a log holds both side by side.
    # A generator of its own, so the other draws (and so each seed's scenario) stay the same.
    formats = random.Random(seed ^ 0x2B)
    live = os.path.join(root, "live", "topic-0")
    clock = FakeClock()
    log = PartitionLog.open(live, CONFIG, clock_ms=clock)
    written: list[Written] = []
    epoch = 1
    done = 0
    while done < batch_count:
        group = min(rnd.randint(1, 3), batch_count - done)
        if rnd.random() < 0.2:
            epoch += 1
        encoded = []
        for _ in range(group):
            recs = make_records(rnd, rnd.randint(1, 4), clock.now_ms)
            v2 = formats.random() < 0.4
            encoded.append((recs, encode_batch_v2(recs) if v2 else encode_batch(recs)))
        info = log.append(b"".join(raw for _, raw in encoded), epoch)
        base = info.base_offset
        for recs, raw in encoded:
            written.append(
                Written(
                    base,
                    [r._replace(offset=base + i) for i, r in enumerate(recs)],
                    epoch,
                    stamped(raw, base, epoch),
                )
            )
            base += len(recs)
        done += group
        clock.now_ms += 10
        # Flush once the first `flushed` batches are in; the last append stays unflushed
        # unless every batch is to be flushed.
        if done - group < flushed <= done and (done < batch_count or flushed == batch_count):
            log.flush()
    if delete_fraction:
        log.delete_records_before(int(log.recovery_point * delete_fraction))
    copy = os.path.join(root, "crashed", "topic-0")
    shutil.copytree(live, copy)
    log.close()

    result = Crash(copy, written, epoch_file=os.path.exists(os.path.join(copy, EPOCH_CACHE_FILE)))
    # A new log writes no checkpoint until one differs from its default (0): no file is 0.
    rp = OffsetCheckpoint(os.path.join(copy, RECOVERY_POINT_FILE)).read() or 0
    start = OffsetCheckpoint(os.path.join(copy, LOG_START_FILE)).read() or 0
    result.recovery_point, result.log_start = rp, start
    # Where each batch lies: every segment file must be exactly its batches, back to back.
    by_base = {b.base: b for b in written}
    for name in sorted(os.listdir(copy)):
        if not name.endswith(".log"):
            continue
        seg_base = int(name[:-4])
        with open(os.path.join(copy, name), "rb") as f:
            data = f.read()
        pos, offset, batches = 0, seg_base, []
        while pos < len(data):
            b = by_base[offset]
            assert data[pos : pos + len(b.data)] == b.data, f"{name} at byte {pos}"
            b.segment, b.position = seg_base, pos
            batches.append(b)
            pos += len(b.data)
            offset = b.next
        result.segments[seg_base] = batches
    return result


def expected_epochs(c: Crash, log_start: int, log_end: int) -> list[tuple[int, int]]:
    """The leader-epoch cache a log holding offsets up to `log_end` must have.

    Each epoch starts at the first batch written in it (the leader path assigns an epoch just
    before its first batch), counting batches since deleted below the log start; the first entry
    then starts at the log start. An empty log keeps the epoch that starts at its end, if the
    crashed log's epoch file held it; without a file the epochs come from the batches alone,
    and an empty log has none (the epoch described no record: nothing is lost with it).
    """
    if log_start == log_end and not c.epoch_file:
        return []
    limit = log_end + 1 if log_start == log_end else log_end
    entries: list[tuple[int, int]] = []
    for b in c.batches:
        if b.base >= limit:
            break
        if not entries or b.epoch > entries[-1][0]:
            entries.append((b.epoch, b.base))
    covering = [e for e in entries if e[1] <= log_start]
    if covering:
        entries = [(covering[-1][0], log_start)] + [e for e in entries if e[1] > log_start]
    return entries


def check_recovered(
    c: Crash,
    log: PartitionLog,
    retained: list[Written],
    log_start: int,
    end_if_empty: int,
    epoch_start: int,
) -> None:
    """The reopened log holds exactly `retained`, readable at every offset."""
    log_end = retained[-1].next if retained else end_if_empty
    assert (log.log_start_offset, log.log_end_offset) == (log_start, log_end)
    on_disk = bytes_on_disk(c, retained)
    for b in retained:
        for offset in range(max(b.base, log_start), b.next):
            assert log.read(offset, 1) == on_disk[b.base]
            assert log.read_records(offset, 1) == [r for r in b.records if r.offset >= offset]
    assert log.read(log_end, 10_000) == b""
    assert log.epoch_cache.entries() == expected_epochs(c, epoch_start, log_end)


def bytes_on_disk(c: Crash, retained: list[Written]) -> dict[int, bytes]:
    """The bytes each retained batch has in the copy; its written bytes, or recovery is wrong."""
    out = {}
    for b in retained:
        assert b.segment is not None
        with open(c.seg_path(b.segment), "rb") as f:
            f.seek(b.position)
            out[b.base] = f.read(len(b.data))
        assert out[b.base] == b.data
    return out


def reopen_and_check(
    c: Crash,
    retained: list[Written],
    log_start: int | None = None,
    end_if_empty: int | None = None,
) -> None:
    log = PartitionLog.open(c.path, CONFIG, clock_ms=FakeClock())
    try:
        start = c.log_start if log_start is None else log_start
        empty_end = end_if_empty if end_if_empty is not None else start
        # The epoch cache was cut at the log start the log had before the crash.
        check_recovered(c, log, retained, start, empty_end, epoch_start=max(start, c.log_start))
        # The log goes on: a new batch lands at the end and reads back.
        end = log.log_end_offset
        info = log.append(encode_batch([(b"after", b"crash")], timestamp=7), log.latest_epoch)
        assert info.base_offset == end
        assert [(r.key, r.value, r.offset) for r in log.read_records(end)] == [
            (b"after", b"crash", end)
        ]
    finally:
        log.close()
    assert tools.verify(c.path) == []


def unflushed_positions(c: Crash, skip_epoch: bool = False) -> list[tuple[int, int]]:
    """(segment base, byte position) of every byte of a batch at or after the recovery point."""
    out = []
    for b in c.unflushed():
        assert b.segment is not None
        for i in range(len(b.data)):
            if skip_epoch and i in EPOCH_BYTES:
                continue
            out.append((b.segment, b.position + i))
    return out


def first_damaged(c: Crash, segment: int, position: int) -> Written:
    return next(b for b in c.segments[segment] if b.position <= position < b.position + len(b.data))


def pick(data: st.DataObject, choices: list[T], label: str) -> T:
    """One of `choices`, always drawing one integer: how many segments a crash leaves can depend
    on when the background roll fsync finished, and sampled_from draws nothing from a list of
    one, which makes hypothesis's replays draw differently (FlakyStrategyDefinition)."""
    return choices[data.draw(st.integers(0, 2**16), label=label) % len(choices)]


crash_params = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**32),
        "batch_count": st.integers(4, 30),
        "flushed_fraction": st.floats(0, 0.95),
        "delete_fraction": st.sampled_from([0.0, 0.0, 0.5, 1.0]),
    }
)


def crash_from(root: str, params: dict[str, float]) -> Crash:
    count = int(params["batch_count"])
    return crash(
        root,
        int(params["seed"]),
        count,
        int(count * params["flushed_fraction"]),
        params["delete_fraction"],
    )


# -- (a) a torn tail -------------------------------------------------------------------------


@examples(30, 500)
@given(params=crash_params, data=st.data())
def test_cut_anywhere_after_the_recovery_point_keeps_the_longest_valid_prefix(
    params: dict[str, float], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as root:
        c = crash_from(root, params)
        segment, position = pick(data, unflushed_positions(c), "cut at")
        os.truncate(c.seg_path(segment), position)
        damaged = first_damaged(c, segment, position)
        inside = position > damaged.position  # the cut tears a batch, not between two
        if inside:
            assert any(
                p.startswith(f"{c.seg_path(segment)}: byte {damaged.position}: ")
                for p in tools.verify(c.path)
            ), tools.verify(c.path)
        with captured_logs(logging.WARNING) as logged:
            reopen_and_check(c, c.retained(segment, position), end_if_empty=segment)
        lines = [line for line in logged if "recovery truncated" in line]
        if inside:
            assert lines, logged
            assert (
                f"recovery truncated {c.seg_path(segment)} at byte {damaged.position}, "
                f"removing {position - damaged.position} bytes" in lines[0]
            )
        else:
            assert lines == []


def test_cut_inside_a_closed_segment_above_the_recovery_point_deletes_every_later_segment(
    tmp_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka's recovery: from the recovery point on, the first invalid byte ends the log.
    (Below the recovery point the log goes offline instead: test_corruption_offline.py.)"""
    c = crash(str(tmp_path), seed=7, batch_count=40, flushed=0)
    bases = sorted(c.segments)
    assert len(bases) >= 4, bases
    # The checkpoint may lag the fsynced data (it is written at most every
    # recovery_point_checkpoint_ms): here it still says the second segment's start.
    OffsetCheckpoint(os.path.join(c.path, RECOVERY_POINT_FILE)).write(bases[1])
    c.recovery_point = bases[1]
    victim = c.segments[bases[1]][1]  # the second batch of the second segment
    os.truncate(c.seg_path(bases[1]), victim.position + 30)
    with caplog.at_level(logging.WARNING, logger="raftlog.storage.log"):
        reopen_and_check(c, c.retained(bases[1], victim.position + 30))
    assert f"deleting {len(bases) - 2} later segments (from offset {bases[2]})" in caplog.text
    assert sorted(n for n in os.listdir(c.path) if n.endswith(".log")) == [
        segment_name(b) + ".log" for b in bases[:2]
    ]


# -- (b) flipped bits in the unflushed tail ------------------------------------------------------


@examples(30, 500)
@given(params=crash_params, data=st.data())
def test_bit_flips_after_the_recovery_point_keep_the_batches_before_them(
    params: dict[str, float], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as root:
        c = crash_from(root, params)
        candidates = unflushed_positions(c, skip_epoch=True)
        flips = data.draw(
            st.lists(
                st.tuples(st.sampled_from(candidates), st.integers(0, 7)),
                min_size=1,
                max_size=3,
                unique_by=lambda flip: flip[0],  # the same bit flipped twice is no damage
            ),
            label="flips",
        )
        for (segment, position), bit in flips:
            with open(c.seg_path(segment), "r+b") as f:
                f.seek(position)
                byte = f.read(1)[0]
                f.seek(position)
                f.write(bytes([byte ^ (1 << bit)]))
        segment, position = min(((s, p) for (s, p), _ in flips), key=lambda sp: (sp[0], sp[1]))
        damaged = first_damaged(c, segment, position)
        problems = tools.verify(c.path)
        assert any(
            p.startswith(f"{c.seg_path(segment)}: byte {damaged.position}: ") for p in problems
        ), problems
        size = os.path.getsize(c.seg_path(segment))
        with captured_logs(logging.WARNING) as logged:
            reopen_and_check(c, c.retained(segment, position), end_if_empty=segment)
        lines = [line for line in logged if "recovery truncated" in line]
        assert lines, logged
        assert (
            f"recovery truncated {c.seg_path(segment)} at byte {damaged.position}, "
            f"removing {size - damaged.position} bytes" in lines[0]
        )


def test_a_negative_last_offset_delta_in_the_tail_is_not_trusted(tmp_path: str) -> None:
    """One flipped bit must not make a damaged tail look like it ends below the recovery point.

    The segment holding the recovery point is loaded from its headers and checked in full only
    if it goes past the recovery point; a last batch whose offsets go backwards must count as
    damage (this once recovered to log start = log end = -2147483642).
    """
    c = crash(str(tmp_path), seed=5, batch_count=6, flushed=3)
    tail = c.unflushed()[-1]
    # The damaged batch shares its segment with the recovery point: that segment is loaded from
    # its headers, not checked batch by batch, unless it reaches past the recovery point.
    assert tail.segment is not None and tail.segment < c.recovery_point <= tail.base
    with open(c.seg_path(tail.segment), "r+b") as f:
        f.seek(tail.position + 30)  # the high byte of last_offset_delta (bytes 27..30)
        byte = f.read(1)[0]
        f.seek(tail.position + 30)
        f.write(bytes([byte ^ 0x80]))
    reopen_and_check(c, c.retained(tail.segment, tail.position))


def test_a_flipped_epoch_is_not_detected_and_keeps_the_records(tmp_path: str) -> None:
    """The leader epoch is stamped outside the checksum (records.py): a flip there changes the
    batch's epoch but no record, and recovery keeps the batch. This pins that documented limit.
    """
    c = crash(str(tmp_path), seed=11, batch_count=8, flushed=2)
    tail = c.unflushed()[-1]
    assert tail.segment is not None
    with open(c.seg_path(tail.segment), "r+b") as f:
        f.seek(tail.position + 12)
        (epoch,) = struct.unpack("<i", f.read(4))
        f.seek(tail.position + 12)
        f.write(struct.pack("<i", epoch + 100))
    log = PartitionLog.open(c.path, CONFIG, clock_ms=FakeClock())
    try:
        assert log.log_end_offset == c.batches[-1].next
        assert log.read_records(tail.base, 1) == tail.records
        assert struct.unpack_from("<i", log.read(tail.base, 1), 12) == (epoch + 100,)
    finally:
        log.close()


# -- (c) lost or damaged indices -------------------------------------------------------------


def damage_index(stem: str, kind: str) -> None:
    index, timeindex = stem + ".index", stem + ".timeindex"
    if kind == "delete index":
        os.unlink(index)
    elif kind == "delete timeindex":
        os.unlink(timeindex)
    elif kind == "torn index":
        with open(index, "ab") as f:
            f.write(b"\x07\x00\x00")
    elif kind == "torn timeindex":
        size = os.path.getsize(timeindex)
        if size >= 12:
            os.truncate(timeindex, size - 5)
        else:
            with open(timeindex, "ab") as f:
                f.write(b"x")
    elif kind == "zeroed":
        for p in (index, timeindex):
            size = os.path.getsize(p)
            with open(p, "r+b") as f:
                f.write(b"\0" * size)
    elif kind == "entry past the end":
        with open(stem + ".log", "rb") as f:
            size = len(f.read())
        with open(index, "ab") as f:
            f.write(struct.pack("<ii", 1_000_000, size + 100))
        with open(timeindex, "ab") as f:
            f.write(struct.pack("<qi", 2**40, 1_000_000))
    elif kind == "last entry moved":
        size = os.path.getsize(index)
        if size >= 8:
            with open(index, "r+b") as f:
                f.seek(size - 4)
                (pos,) = struct.unpack("<i", f.read(4))
                f.seek(size - 4)
                f.write(struct.pack("<i", pos + 1))
    else:
        raise AssertionError(kind)


INDEX_DAMAGE = [
    "delete index",
    "delete timeindex",
    "torn index",
    "torn timeindex",
    "zeroed",
    "entry past the end",
    "last entry moved",
]


@examples(25, 400)
@given(
    params=crash_params,
    kinds=st.lists(st.sampled_from(INDEX_DAMAGE), min_size=1, max_size=6),
    data=st.data(),
)
def test_damaged_indices_are_rebuilt(
    params: dict[str, float], kinds: list[str], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as root:
        c = crash_from(root, params)
        bases = sorted(c.segments)
        done = set()
        for kind in kinds:
            base = pick(data, bases, "segment")
            stem = c.seg_path(base)[: -len(".log")]
            # Each kind once per segment: some repeated (tearing twice) could add up to
            # whole entries, which is no longer "detectable damage".
            if (base, kind) in done:
                continue
            done.add((base, kind))
            if os.path.exists(stem + ".index") and os.path.exists(stem + ".timeindex"):
                damage_index(stem, kind)
        with_cut = data.draw(st.booleans(), label="also cut the tail")
        if with_cut:
            segment, position = pick(data, unflushed_positions(c), "cut")
            os.truncate(c.seg_path(segment), position)
            reopen_and_check(c, c.retained(segment, position), end_if_empty=segment)
        else:
            reopen_and_check(c, c.in_files())


def test_closed_log_with_every_index_deleted_rebuilds_them(tmp_path: str) -> None:
    c = crash(str(tmp_path), seed=5, batch_count=30, flushed=30)
    # A clean open and close first, so every segment is below the recovery point and trusted.
    PartitionLog.open(c.path, CONFIG, clock_ms=FakeClock()).close()
    assert len(c.segments) >= 3
    for name in os.listdir(c.path):
        if name.endswith((".index", ".timeindex")):
            os.unlink(os.path.join(c.path, name))
    found = tools.examine(c.path)
    assert found.problems == () and any("missing" in n for n in found.notes), found
    reopen_and_check(c, c.in_files())


# -- (d) damaged checkpoints -----------------------------------------------------------------

BAD_CHECKPOINTS = [
    b"",
    b"garbage",
    b"0\n",
    b"1\n1\n5\n",
    b"0\n2\n5\n",
    b"0\n1\nfive\n",
    b"\xff\xfe",
]


@pytest.mark.parametrize("content", BAD_CHECKPOINTS)
def test_bad_recovery_point_checkpoint_checks_every_segment(
    tmp_path: str, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """With no recovery point, every batch is checked: damage in flushed data is found too."""
    c = crash(str(tmp_path), seed=21, batch_count=30, flushed=30)
    with open(os.path.join(c.path, RECOVERY_POINT_FILE), "wb") as f:
        f.write(content)
    bases = sorted(c.segments)
    victim = c.segments[bases[1]][0]
    with open(c.seg_path(bases[1]), "r+b") as f:
        f.seek(victim.position + 40)
        byte = f.read(1)[0]
        f.seek(victim.position + 40)
        f.write(bytes([byte ^ 1]))
    with caplog.at_level(logging.WARNING, logger="raftlog.storage.log"):
        reopen_and_check(c, c.retained(bases[1], victim.position))
    assert f"ignoring {os.path.join(c.path, RECOVERY_POINT_FILE)}" in caplog.text


@pytest.mark.parametrize("content", BAD_CHECKPOINTS)
def test_bad_log_start_checkpoint_falls_back_to_the_first_segment(
    tmp_path: str, content: bytes
) -> None:
    """A lost log start offset reverts to the first segment's base: records that were deleted
    but still in that segment become readable again, nothing is lost (as Kafka does)."""
    c = crash(str(tmp_path), seed=22, batch_count=30, flushed=30, delete_fraction=0.5)
    assert c.log_start > min(c.segments)
    with open(os.path.join(c.path, LOG_START_FILE), "wb") as f:
        f.write(content)
    reopen_and_check(c, c.in_files(), log_start=min(c.segments))


@pytest.mark.parametrize(
    "content", [*BAD_CHECKPOINTS, b"0\n2\n5 10\n3 20\n", b"0\n2\n3 20\n4 10\n", None]
)
def test_bad_or_missing_epoch_checkpoint_is_rebuilt_from_the_batches(
    tmp_path: str, content: bytes | None, caplog: pytest.LogCaptureFixture
) -> None:
    c = crash(str(tmp_path), seed=23, batch_count=30, flushed=10, delete_fraction=0.5)
    epochs = sorted({b.epoch for b in c.batches})
    assert len(epochs) >= 3, epochs  # the seed gives several epochs
    path = os.path.join(c.path, EPOCH_CACHE_FILE)
    if content is None:
        os.unlink(path)
    else:
        with open(path, "wb") as f:
            f.write(content)
    with caplog.at_level(logging.WARNING, logger="raftlog.storage.log"):
        reopen_and_check(c, c.in_files())
    if content is not None:
        assert "rebuilding leader epoch cache" in caplog.text


def test_leftover_checkpoint_tmp_files_are_removed_on_open(tmp_path: str) -> None:
    c = crash(str(tmp_path), seed=24, batch_count=10, flushed=5)
    for name in (RECOVERY_POINT_FILE, LOG_START_FILE, EPOCH_CACHE_FILE):
        with open(os.path.join(c.path, name + ".tmp"), "wb") as f:
            f.write(b"0\n1\n99999\n")  # a write that never got renamed: must not be used
    reopen_and_check(c, c.in_files())
    assert not [n for n in os.listdir(c.path) if n.endswith(".tmp")]


def test_orphan_index_files_are_removed_on_open(tmp_path: str) -> None:
    c = crash(str(tmp_path), seed=25, batch_count=10, flushed=10)
    stem = os.path.join(c.path, segment_name(10**6))
    for suffix in (".index", ".timeindex"):
        with open(stem + suffix, "wb") as f:
            f.write(b"\0" * 24)
    reopen_and_check(c, c.in_files())
    assert not os.path.exists(stem + ".index")
    assert not os.path.exists(stem + ".timeindex")
