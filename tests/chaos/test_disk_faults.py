"""Disk fault injectors on real files: segments written by raftlog's own storage, then damaged
the way a crash, a bad sector or a full disk would, then read back by recovery and `verify`."""

from __future__ import annotations

import errno
import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.disk_faults import (
    CHECKED_FROM,
    SmallDisk,
    active_segment,
    damage_tail,
    disk_full,
    flipped_byte,
    flipped_follower,
    old_segment,
    position_after_offset,
    torn_tail_crash,
)
from chaos.faults import FaultError, FaultSpec
from raftlog.errors import StorageError
from raftlog.records import encode_batch
from raftlog.storage.config import LogConfig
from raftlog.storage.log import PartitionLog
from raftlog.storage.tools import scan_segment, verify

RECORDS_PER_BATCH = 3


def write_log(path: Path, batches: int, config: LogConfig | None = None) -> None:
    with PartitionLog.open(str(path), config or LogConfig(flush_messages=1)) as log:
        for b in range(batches):
            records = [(b"k", b"value-%d-%d" % (b, i)) for i in range(RECORDS_PER_BATCH)]
            log.append(encode_batch(records), leader_epoch=1)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    write_log(tmp_path / "t-0", 12)
    return tmp_path / "t-0"


def test_position_after_offset_is_a_batch_boundary(log_dir: Path) -> None:
    seg = active_segment(log_dir)
    ends = [b.position + b.size for b in scan_segment(seg)]
    assert position_after_offset(seg, 0) == 0
    assert position_after_offset(seg, 3) == ends[0]
    assert position_after_offset(seg, 4) == ends[1]  # offset 3 is in the second batch
    assert position_after_offset(seg, 36) == ends[-1] == os.path.getsize(seg)


def crashed_copy(root: Path, batches: int, synced_batches: int) -> Path:
    """The partition as a crash leaves it: `batches` appended, the first `synced_batches`
    fsynced (and the recovery point checkpointed there), the rest only written. The crash is a
    copy of the files taken while the log is open, as tests/unit/storage's crash tests do."""
    live, copy = root / "live" / "t-0", root / "crashed" / "t-0"
    with PartitionLog.open(str(live), LogConfig(recovery_point_checkpoint_ms=0)) as log:
        for b in range(batches):
            records = [(b"k", b"value-%d-%d" % (b, i)) for i in range(RECORDS_PER_BATCH)]
            log.append(encode_batch(records), leader_epoch=1)
            if b + 1 == synced_batches:
                log.flush()
        shutil.copytree(live, copy)
    return copy


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 12), st.sampled_from(["cut", "garble"]), st.integers(0, 2**32))
def test_damaged_unsynced_tail_keeps_the_synced_prefix(
    tmp_path_factory: pytest.TempPathFactory, synced_batches: int, mode: str, seed: int
) -> None:
    """What was fsynced (the first `synced_batches`) survives the damage and recovery intact."""
    path = crashed_copy(tmp_path_factory.mktemp("tail"), 12, synced_batches)
    seg = active_segment(path)
    synced_offset = synced_batches * RECORDS_PER_BATCH
    keep = position_after_offset(seg, synced_offset)
    before = Path(seg).read_bytes()
    damage = damage_tail(seg, keep, mode, random.Random(seed))
    if synced_batches == 12:
        assert damage.mode == "none"
    else:
        assert damage.mode == mode and keep <= damage.position < len(before)
        assert Path(seg).read_bytes() != before
    with PartitionLog.open(str(path)) as log:
        assert log.log_end_offset >= synced_offset
    assert Path(seg).read_bytes()[:keep] == before[:keep]
    assert verify(str(path)) == []


def test_bad_tail_arguments(log_dir: Path) -> None:
    seg = active_segment(log_dir)
    with pytest.raises(FaultError, match="must be cut or garble"):
        damage_tail(seg, 0, "shred", random.Random(1))
    with pytest.raises(FaultError, match="no old one"):
        old_segment(log_dir)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def node_ids(self) -> list[int]:
        return [1, 2, 3]

    def pid(self, node_id: int) -> int | None:
        return None

    def kill9(self, node_id: int) -> None:
        self.calls.append(f"kill9 {node_id}")

    def stop(self, node_id: int) -> None:
        self.calls.append(f"stop {node_id}")

    def start(self, *node_ids: int) -> None:
        self.calls.append(f"start {node_ids}")


def test_torn_tail_crash_kills_damages_and_restarts(log_dir: Path) -> None:
    cluster = Recorder()
    size = os.path.getsize(active_segment(log_dir))
    with (
        pytest.raises(RuntimeError),
        torn_tail_crash(cluster, 2, log_dir, 100, "cut", random.Random(3)) as damage,
    ):
        assert cluster.calls == ["kill9 2"]
        assert 100 <= damage.position < size == damage.size_before
        assert os.path.getsize(active_segment(log_dir)) == damage.position
        raise RuntimeError("the check failed")
    assert cluster.calls == ["kill9 2", "start (2,)"]


def test_flipped_byte_in_an_old_segment_is_detected_then_restored(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    write_log(path, 40, LogConfig(segment_bytes=1000, flush_messages=1))
    seg = old_segment(path)
    assert seg != active_segment(path)
    assert verify(str(path)) == []
    starts = [b.position for b in scan_segment(seg) if b.error is None]
    with flipped_byte(seg, random.Random(5)) as flip:
        batch = max(p for p in starts if p <= flip.position)
        assert flip.position - batch >= CHECKED_FROM, "the flip is in the checksummed bytes"
        problems = verify(str(path))
        # The first problem names the damaged batch; what follows are its consequences (the
        # next segment no longer starts where this one's valid batches end).
        assert problems and problems[0].startswith(f"{seg}: byte {batch}:"), problems
    assert verify(str(path)) == []


class _GatheredLeadership:
    """The cluster the bitflip fault sees after earlier leader kills gathered leadership on
    node 1: it leads both partitions of topic t, nodes 2 and 3 follow them (`replicas` says
    which nodes hold each). Only the cluster is a stand-in: the segments are real files."""

    def __init__(self, root: Path, replicas: list[int]):
        self.root = root
        self.replicas = replicas
        self.down: set[int] = set()
        self.actions: list[tuple[str, int]] = []
        for n in replicas:
            for p in (0, 1):
                write_log(self.partition_dir(n, f"t-{p}"), 40, LogConfig(segment_bytes=1000))

    def node_ids(self) -> list[int]:
        return [1, 2, 3]

    def pid(self, node_id: int) -> int | None:
        return None if node_id in self.down else 1000 + node_id

    def kill9(self, node_id: int) -> None:
        self.down.add(node_id)
        self.actions.append(("kill9", node_id))

    def start(self, *node_ids: int) -> None:
        for n in node_ids:
            self.down.discard(n)
            self.actions.append(("start", n))

    def partition_dir(self, node_id: int, tp: str) -> Path:
        return self.root / f"node-{node_id}" / tp

    def describe(self, node_id: int) -> dict[str, Any]:
        assert node_id not in self.down
        return {
            "partitions": [
                {"topic": "t", "partition": p, "leader": 1, "replicas": self.replicas}
                for p in (0, 1)
            ]
        }

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the bitflip fault must not call {name}")


def test_bitflip_on_a_node_that_leads_everything_damages_another_nodes_replica(
    tmp_path: Path,
) -> None:
    cluster = _GatheredLeadership(tmp_path, [1, 2, 3])
    originals = {p: p.read_bytes() for p in tmp_path.rglob("*.log")}
    reads: list[str] = []
    windows = iter([False, True])
    fault = flipped_follower(
        FaultSpec("bitflip", targets=(1,)),
        cluster,  # type: ignore[arg-type]
        "t",
        random.Random(3),
        reads.append,
        lambda _wait: next(windows),
    )
    with fault as result:
        assert result["node"] in (2, 3) and result["leader"] == 1
        assert cluster.actions == [("kill9", 1)] and reads == [result["tp"]]
        damaged = [p for p, data in originals.items() if p.read_bytes() != data]
        assert damaged == [Path(old_segment(cluster.partition_dir(result["node"], result["tp"])))]
    assert cluster.actions == [("kill9", 1), ("start", 1)]
    assert all(p.read_bytes() == data for p, data in originals.items())
    assert result["detected"] is False  # nobody reported or healed it: the flip was undone


def test_bitflip_with_no_follower_anywhere_says_so(tmp_path: Path) -> None:
    cluster = _GatheredLeadership(tmp_path, [1])
    with (
        pytest.raises(FaultError, match="no node follows a partition of t"),
        flipped_follower(
            FaultSpec("bitflip", targets=(1,)),
            cluster,  # type: ignore[arg-type]
            "t",
            random.Random(3),
            lambda _tp: None,
            lambda _wait: True,
        ),
    ):
        pass
    assert cluster.actions == []


# -- a full disk (needs root to mount a tmpfs) ----------------------------------------------------

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="mounting a tmpfs for the full-disk fault needs root"
)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    d = tmp_path / "node-data"
    d.mkdir()
    with SmallDisk(d, 256 * 1024) as disk:
        yield disk
    assert not os.path.ismount(d) and list(d.iterdir()) == []


@needs_root
def test_full_disk_fails_writes_with_enospc_until_healed(small_disk: SmallDisk) -> None:
    path = small_disk.path / "t-0"
    write_log(path, 2)
    # Opened before the disk fills: recovery itself writes (indices, checkpoints).
    with PartitionLog.open(str(path), LogConfig(flush_messages=1)) as log, disk_full(small_disk):
        assert small_disk.free_bytes() == 0
        with pytest.raises(OSError) as e:
            (small_disk.path / "more").write_bytes(b"x" * 8192)
        assert e.value.errno == errno.ENOSPC
        with pytest.raises(StorageError, match="No space left"):
            for _ in range(100):
                log.append(encode_batch([(b"k", b"v" * 4000)]), leader_epoch=1)
    assert small_disk.free_bytes() > 100 * 1024
    with PartitionLog.open(str(path), LogConfig(flush_messages=1)) as log:
        end = log.log_end_offset
        log.append(encode_batch([(b"k", b"after")]), leader_epoch=1)
        assert log.log_end_offset == end + 1
    assert verify(str(path)) == []


@needs_root
def test_filling_a_disk_another_writer_shrinks_meanwhile_ends_full(
    small_disk: SmallDisk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node writes to its disk while the filler fills it, so a write can find less room
    than statvfs said a moment before. (A buffered filler kept the rest and raised ENOSPC when
    it was closed.) Here statvfs overstates the room by 3,000 bytes every time."""
    real = SmallDisk.free_bytes
    monkeypatch.setattr(SmallDisk, "free_bytes", lambda self: real(self) + 3000)
    with disk_full(small_disk):
        assert real(small_disk) == 0
        assert small_disk.filler.stat().st_size > 128 * 1024
    assert not small_disk.filler.exists()


@needs_root
def test_small_disk_refuses_to_hide_existing_files(tmp_path: Path) -> None:
    d = tmp_path / "busy"
    d.mkdir()
    (d / "data").write_text("x")
    with pytest.raises(FaultError, match="not empty"):
        SmallDisk(d, 65536).mount()
    assert not os.path.ismount(d)
