"""Crash tests of a clean's install: the log directory as a crash leaves it at every step of
`install_clean`, reopened.

The steps (cleaner.py): `cleaner.run` writes a `.cleaned` file per group (and `.cleaned`
indices); then `commit_groups` renames each group's `.cleaned` file to its `.swap` name (the
group's commit point), deletes the old segments' files, renames each `.swap` to its group's
`.log` and the cleaned indices into place; then the log writes the cleaner checkpoint. A crash
is simulated by copying the directory (`copytree` reads what the kernel holds, as in
test_recovery_crash.py)
after `run` and after every rename and unlink the cleaner makes during the install; the
uncrashed install goes on and gives the references: the records before the clean and after.

Each copy, opened, must read back per group either exactly the group's old records (the crash
came before the group's commit point) or exactly its cleaned records (after it): the groups
before the crashed one cleaned, the ones after it old, none of them a mix; no `.cleaned` or
`.swap` file left; the same log end offset; a read at every offset starting at the right
batch; `tools.verify` content; and a later clean working.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

from raftlog.errors import LogOfflineError
from raftlog.records import Record, encode_batch
from raftlog.records_v2 import encode_batch_v2
from raftlog.storage import PartitionLog, cleaner, tools

from ._helpers import FakeClock
from .test_cleaner_model import check_reads_at_every_offset, compact_config, read_log

# Tombstones stay (a day's delete retention): the references need not follow horizons.
CONFIG = compact_config(450, 24 * 60 * 60 * 1000, **{"index.interval.bytes": "100"})
KEYS = [b"key-%d" % i for i in range(6)]

Triple = tuple[int, bytes | None, bytes | None]


def triples(log: PartitionLog) -> list[Triple]:
    _, records = read_log(log)
    return [(r.offset, r.key, r.value) for r in records]


def write_some(log: PartitionLog, rng: random.Random, clock: FakeClock, batches: int) -> None:
    """Keyed batches of 1-4 records, raftlog's and v2 (some compressed), some tombstones."""
    for _ in range(batches):
        clock.now_ms += rng.randrange(5)
        records = [
            Record(
                rng.choice(KEYS),
                None if rng.random() < 0.15 else rng.randbytes(rng.randrange(1, 30)),
                (),
                clock.now_ms,
            )
            for _ in range(rng.randrange(1, 5))
        ]
        if rng.random() < 0.5:
            raw = encode_batch_v2(records, compression=rng.randrange(5))
        else:
            raw = encode_batch(records)
        log.append(raw, 0)


def write_until_roll(log: PartitionLog, rng: random.Random, clock: FakeClock) -> None:
    segments = log.segment_count
    while log.segment_count == segments:
        write_some(log, rng, clock, 1)


def compacted(written: list[Triple], end: int) -> list[Triple]:
    """`written` after a clean up to `end` with nothing removed by a horizon: below `end` the
    last record of each key, from `end` on everything."""
    last = {key: offset for offset, key, _ in written if offset < end}
    return [t for t in written if t[0] >= end or last[t[1]] == t[0]]


def leftovers(path: str) -> list[str]:
    suffixes = (cleaner.CLEANED_SUFFIX, cleaner.SWAP_SUFFIX)
    return [e for e in os.listdir(path) if e.endswith(suffixes)]


def verify(path: str) -> list[str]:
    """`tools.verify`'s problems."""
    return tools.verify(path)


@dataclass(frozen=True, slots=True)
class Snapshot:
    label: str
    path: str
    committed: int  # groups whose `.cleaned` file had been renamed to `.swap` by then


class CrashPoints:
    """Copies the log directory at each step of an install (`os` of cleaner.py, wrapped)."""

    def __init__(self, log_dir: str, out_dir: str):
        self.log_dir = log_dir
        self.out_dir = out_dir
        self.committed = 0
        self.snapshots: list[Snapshot] = []

    def copy(self, label: str) -> None:
        path = os.path.join(self.out_dir, f"{len(self.snapshots):03d}")
        shutil.copytree(self.log_dir, path)
        self.snapshots.append(Snapshot(label, path, self.committed))

    def os_module(self) -> Any:
        points = self

        class WrappedOs(ModuleType):
            def __getattr__(self, name: str) -> Any:
                return getattr(os, name)

            @staticmethod
            def rename(src: str, dst: str) -> None:
                os.rename(src, dst)
                if dst.endswith(cleaner.SWAP_SUFFIX):
                    points.committed += 1
                points.copy(f"renamed {os.path.basename(src)} to {os.path.basename(dst)}")

            @staticmethod
            def unlink(path: str) -> None:
                os.unlink(path)
                points.copy(f"deleted {os.path.basename(path)}")

        return WrappedOs("os")


@dataclass
class Scenario:
    clock: FakeClock
    old: list[Triple]  # what the log read before the crashed clean
    cleaned: list[Triple]  # and after it, uncrashed
    groups: list[tuple[int, int]]  # the crashed clean's groups: [base, end)
    end: int  # log end offset
    snapshots: list[Snapshot]


def build(tmp_path: str, seed: int, monkeypatch: pytest.MonkeyPatch) -> Scenario:
    """A compacted log cleaned once, written on, then cleaned again with a copy of its
    directory at every step of the second install. The second clean's groups merge segments
    the first one shrank, so that an install deletes several old segments per group."""
    rng = random.Random(seed)
    clock = FakeClock()
    path = os.path.join(tmp_path, "t-0")
    log = PartitionLog.open(path, CONFIG, clock_ms=clock)
    write_some(log, rng, clock, 16)
    plan = log.plan_clean(log.log_end_offset)
    assert plan is not None
    assert log.install_clean(cleaner.run(plan, keys_max=1000, bytes_per_s=0))
    write_some(log, rng, clock, 10)
    write_until_roll(log, rng, clock)
    old = triples(log)
    end = log.log_end_offset
    clock.now_ms += 10
    plan = log.plan_clean(end)
    assert plan is not None
    res = cleaner.run(plan, keys_max=1000, bytes_per_s=0)
    groups = [(g.base, g.end) for g in res.groups]
    # The scenario this test needs: several groups, some of several old segments.
    assert len(groups) >= 2 and any(len(g.old_bases) > 1 for g in res.groups), res.groups
    points = CrashPoints(path, os.path.join(tmp_path, "crashes"))
    points.copy("cleaned files written, not installed")
    with monkeypatch.context() as m:
        m.setattr(cleaner, "os", points.os_module())
        assert log.install_clean(res)
    points.copy("installed: indices rebuilt, checkpoint written")
    assert log.log_end_offset == end
    cleaned = triples(log)
    log.close()
    assert cleaned == compacted(old, res.end) and cleaned != old
    return Scenario(clock, old, cleaned, groups, end, points.snapshots)


def expected_at(s: Scenario, snapshot: Snapshot) -> list[Triple]:
    """Groups up to the last committed one cleaned, the rest old."""
    bound = s.groups[snapshot.committed - 1][1] if snapshot.committed else s.groups[0][0]
    return [t for t in s.cleaned if t[0] < bound] + [t for t in s.old if t[0] >= bound]


@pytest.mark.parametrize("seed", range(3))
def test_a_crash_at_any_step_of_an_install_leaves_old_or_cleaned_groups(
    tmp_path: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = build(str(tmp_path), seed, monkeypatch)
    labels = [p.label for p in s.snapshots]
    # Every kind of step was copied: before the commit point, at it, mid-deletion, after the
    # swap became the `.log` and before the next group, and after the whole install.
    assert any(".cleaned to " in x and x.endswith(".swap") for x in labels), labels
    assert any(x.startswith("deleted ") and x.endswith(".log") for x in labels), labels
    assert any(x.startswith("renamed ") and x.endswith(".log") for x in labels), labels
    committed = {p.committed for p in s.snapshots}
    assert committed == set(range(len(s.groups) + 1)), committed
    for snapshot in s.snapshots:
        where = f"crash after: {snapshot.label} ({snapshot.committed} groups committed)"
        clock = FakeClock(s.clock.now_ms)
        log = PartitionLog.open(snapshot.path, CONFIG, clock_ms=clock)
        try:
            assert leftovers(snapshot.path) == [], where
            assert log.log_end_offset == s.end, where
            headers, _ = read_log(log)
            assert triples(log) == expected_at(s, snapshot), where
            check_reads_at_every_offset(log, headers)
            # A later clean works, and compacts the log as if nothing had happened.
            write_until_roll(log, random.Random(snapshot.label), clock)
            before = triples(log)
            clock.now_ms += 10
            plan = log.plan_clean(log.log_end_offset)
            assert plan is not None, where
            res = cleaner.run(plan, keys_max=1000, bytes_per_s=0)
            assert log.install_clean(res), where
            assert triples(log) == compacted(before, res.end), where
            headers, _ = read_log(log)
            check_reads_at_every_offset(log, headers)
        finally:
            log.close()
        assert verify(snapshot.path) == [], where


@contextmanager
def failing_after(calls: int, name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """cleaner.py's os.`name` fails with EIO from its call number `calls` on (as a disk
    that went away); yields the count of calls made."""
    made = [0]

    class WrappedOs(ModuleType):
        def __getattr__(self, attr: str) -> Any:
            return getattr(os, attr)

    def failing(*args: Any) -> Any:
        made[0] += 1
        if made[0] > calls:
            raise OSError(errno.EIO, "injected I/O error", args[0])
        return getattr(os, name)(*args)

    wrapped = WrappedOs("os")
    setattr(wrapped, name, failing)
    with monkeypatch.context() as m:
        m.setattr(cleaner, "os", wrapped)
        yield made


@pytest.mark.parametrize(
    ("name", "calls"),
    [("rename", 0), ("rename", 1), ("rename", 3)] + [("unlink", n) for n in (0, 1, 4, 9)],
)
def test_a_failed_install_goes_offline_and_the_reopened_log_is_old_or_cleaned(
    tmp_path: str, name: str, calls: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The install fails in the middle (an I/O error): the log goes offline, and reopened
    (the same directory, no copy) finishes what committed and drops what did not."""
    rng = random.Random(calls)
    clock = FakeClock()
    path = os.path.join(str(tmp_path), "t-0")
    log = PartitionLog.open(path, CONFIG, clock_ms=clock)
    write_some(log, rng, clock, 20)
    write_until_roll(log, rng, clock)
    old, end = triples(log), log.log_end_offset
    plan = log.plan_clean(end)
    assert plan is not None
    res = cleaner.run(plan, keys_max=1000, bytes_per_s=0)
    assert len(res.groups) >= 2
    with failing_after(calls, name, monkeypatch) as made, pytest.raises(LogOfflineError):
        log.install_clean(res)
    assert made[0] == calls + 1  # it failed where it was told to
    log.close()
    with PartitionLog.open(path, CONFIG, clock_ms=clock) as log:
        assert leftovers(path) == []
        assert log.log_end_offset == end
        got = triples(log)
        # Some prefix of the groups is cleaned, the rest old: find where, then check it all.
        cleaned = compacted(old, res.end)
        matches = [
            b
            for b in [res.groups[0].base] + [g.end for g in res.groups]
            if got == [t for t in cleaned if t[0] < b] + [t for t in old if t[0] >= b]
        ]
        assert matches, (name, calls, got)
        headers, _ = read_log(log)
        check_reads_at_every_offset(log, headers)
    assert verify(path) == []
