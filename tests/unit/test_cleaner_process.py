"""The log cleaner's child process (broker/cleaner_process.py): a clean run there installs as
one run in the broker would; the broker's own plan comes back; a failure in the child is a
CleanFailedError naming it, and the next clean works; a stopped one refuses; a clean told to stop
(its broker gone) stops at its next read."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.broker.cleaner_process import CleanerProcess
from raftlog.errors import CleanFailedError
from raftlog.records import Record, encode_batch
from raftlog.storage import LogConfig, PartitionLog, cleaner

CONFIG = {"cleanup.policy": "compact", "segment.bytes": "500", "min.cleanable.dirty.ratio": "0"}


@pytest.fixture
def log(tmp_path: Path) -> Iterator[PartitionLog]:
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig.from_topic_config(CONFIG))
    for i in range(60):
        plog.append(encode_batch([Record(b"k%d" % (i % 4), b"value %d" % i, (), 1000)]), 0)
    try:
        yield plog
    finally:
        plog.close()


@pytest.fixture
def process() -> Iterator[CleanerProcess]:
    p = CleanerProcess("raftlog-cleaner-test")
    try:
        yield p
    finally:
        p.stop()


def test_a_clean_in_the_child_installs_and_keeps_each_key_once(
    log: PartitionLog, process: CleanerProcess
) -> None:
    plan = log.plan_clean(log.log_end_offset)
    assert plan is not None
    result = process.run(plan, 1000, 0)
    assert result.plan is plan  # the broker's plan, whose fds the install closes
    assert log.install_clean(result)
    keys = [r.key for r in log.read_records(0, 1 << 20) if r.offset < result.end]
    assert len(keys) == len(set(keys)) and result.records_kept < result.records_read


def test_a_failure_in_the_child_is_named_and_the_next_clean_works(
    log: PartitionLog, process: CleanerProcess
) -> None:
    plan = log.plan_clean(log.log_end_offset)
    assert plan is not None
    gone = dataclasses.replace(plan.segments[0], path=str(Path(log.path) / "missing.log"))
    broken = dataclasses.replace(plan, segments=[gone, *plan.segments[1:]])
    with pytest.raises(CleanFailedError, match="FileNotFoundError"):
        process.run(broken, 1000, 0)
    assert log.install_clean(process.run(plan, 1000, 0))


def test_a_stopped_process_refuses_to_clean(log: PartitionLog, process: CleanerProcess) -> None:
    plan = log.plan_clean(log.log_end_offset)
    assert plan is not None
    process.stop()
    with pytest.raises(CleanFailedError, match="stopped"):
        process.run(plan, 1000, 0)
    plan.close()


def test_a_clean_told_to_stop_stops_at_its_next_read(log: PartitionLog) -> None:
    plan = log.plan_clean(log.log_end_offset)
    assert plan is not None
    try:
        with pytest.raises(CleanFailedError):
            cleaner.run(plan, 1000, 0, cancelled=lambda: True)
        assert not [p for p in Path(log.path).iterdir() if p.name.endswith(".cleaned")]
    finally:
        plan.close()
