"""Disk faults: a full disk, a torn or garbled unsynced tail after kill -9, a flipped byte.

- `SmallDisk(path, size_bytes)`: a tmpfs of `size_bytes` mounted over a replica's (empty) data
  directory before its node starts; `disk_full(disk)` then fills it (a filler file) so the
  node's next write fails with ENOSPC, and empties it again on exit. Needs root (mount).
- `damage_tail(segment, keep_bytes, mode, rng)`: what a power loss does to a file whose last
  bytes were written but not fsynced: the tail after a point chosen in [keep_bytes, size) is
  cut off ("cut") or replaced by random bytes ("garble"). `keep_bytes` is what the replica had
  fsynced; `position_after_offset` finds it from an offset (e.g. the acknowledged log end
  offset under the fsync durability setting, which must then lose nothing acknowledged).
  Apply it between a kill -9 and the restart (`torn_tail_crash` does the three steps).
- `flipped_byte(segment, rng)`: one byte of a batch's checksummed bytes (from the checksum
  field on) inverted, in an old segment of a follower: it must be detected, never served. On
  exit the byte is restored if it is still there (recovery may have cut or deleted the file).

Every damage is returned as data (file, byte position, before/after) for the history and the
report. Nothing here runs while a node writes the same file, except the full disk (a mount).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from chaos.faults import FaultError, FaultSpec, ProcessControl, heal_all
from raftlog.errors import RaftlogError
from raftlog.storage.tools import scan_segment, segment_files

log = logging.getLogger(__name__)

FILLER_NAME = ".chaos-disk-filler"
FILL_CHUNK_BYTES = 1 << 20
# The first byte of a batch that its checksum covers: the checksum field itself, after
# base_offset (8), batch_length (4), partition_leader_epoch (4) and magic (1); see records.py.
CHECKED_FROM = struct.calcsize("<qiib")
MOUNT_TIMEOUT_S = 10.0


def _mount_cmd(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=MOUNT_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise FaultError(f"`{' '.join(cmd)}` exited {proc.returncode}: {proc.stderr.strip()}")


def _is_mount_point(path: Path) -> bool:
    return os.path.ismount(path)


# -- a full disk -------------------------------------------------------------------------------


class SmallDisk:
    """A tmpfs of `size_bytes` over directory `path` (which must exist and be empty)."""

    def __init__(self, path: str | Path, size_bytes: int):
        if size_bytes < 4096:
            raise FaultError(f"SmallDisk {path}: size_bytes={size_bytes}, must be >= 4096")
        self.path = Path(path)
        self.size_bytes = size_bytes
        self.mounted = False

    @property
    def filler(self) -> Path:
        return self.path / FILLER_NAME

    def mount(self) -> None:
        if os.geteuid() != 0:
            raise FaultError(f"mounting a tmpfs on {self.path} needs root")
        if not self.path.is_dir():
            raise FaultError(f"{self.path}: not a directory")
        if any(self.path.iterdir()):
            # Mounting over files would hide them from the node: a silent loss, not a full disk.
            raise FaultError(f"{self.path}: not empty; mount the small disk before the node starts")
        _mount_cmd("mount", "-t", "tmpfs", "-o", f"size={self.size_bytes}", "tmpfs", str(self.path))
        self.mounted = True

    def unmount(self) -> None:
        """Unmount (the data on it is gone); lazily if a process still holds files there."""
        if not self.mounted:
            return
        try:
            _mount_cmd("umount", str(self.path))
        except FaultError as e:
            log.warning("%s busy (%s): unmounting lazily", self.path, e)
            _mount_cmd("umount", "-l", str(self.path))
        self.mounted = False

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave_bytes: int = 0) -> int:
        """Write a filler file until at most `leave_bytes` are free; return the filler size."""
        written = self.filler.stat().st_size if self.filler.exists() else 0
        # Unbuffered: the node writes to the same disk meanwhile, so a write may take fewer
        # bytes than were free a moment ago. A buffered file kept the rest and raised ENOSPC
        # again when it was closed (a CI failure); a raw write says what it took.
        with open(self.filler, "ab", buffering=0) as f:
            while (free := self.free_bytes()) > leave_bytes:
                n = min(FILL_CHUNK_BYTES, free - leave_bytes)
                try:
                    took = f.write(b"\0" * n)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
                if not took:
                    break
                written += took
        return written

    def drain(self) -> None:
        self.filler.unlink(missing_ok=True)

    def __enter__(self) -> SmallDisk:
        self.mount()
        return self

    def __exit__(self, *exc: object) -> None:
        self.unmount()


@contextlib.contextmanager
def disk_full(disk: SmallDisk, leave_bytes: int = 0) -> Iterator[SmallDisk]:
    """The disk is full inside the block; the filler is removed on exit, whatever happened."""
    try:
        disk.fill(leave_bytes)
        yield disk
    finally:
        disk.drain()


# -- segments ----------------------------------------------------------------------------------


def active_segment(partition_dir: str | Path) -> str:
    segments = segment_files(str(partition_dir))
    if not segments:
        raise FaultError(f"{partition_dir}: no segment files")
    return segments[-1][1]


def old_segment(partition_dir: str | Path) -> str:
    """The oldest segment that is not the active one (a follower's settled data)."""
    segments = segment_files(str(partition_dir))
    if len(segments) < 2:
        raise FaultError(f"{partition_dir}: {len(segments)} segment(s), no old one to damage")
    return segments[0][1]


def position_after_offset(segment_path: str, offset: int) -> int:
    """The byte position just past the batches holding offsets below `offset` (where a
    replica's data ends if its log end offset is `offset`); the file size if all do."""
    end = 0
    for b in scan_segment(segment_path):
        if b.error is not None:
            break
        base_offset, last_delta = b.header[0], b.header[6]
        if base_offset >= offset:
            break
        end = b.position + b.size
        if base_offset + last_delta + 1 >= offset:
            break
    return end


# -- a torn or garbled tail --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TailDamage:
    path: str
    mode: str  # "cut" | "garble" | "none" (nothing past keep_bytes)
    size_before: int
    position: int  # the first byte cut or garbled

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "mode": self.mode, "size_before": self.size_before,
                "position": self.position}  # fmt: skip


def damage_tail(segment_path: str, keep_bytes: int, mode: str, rng: random.Random) -> TailDamage:
    """Cut or garble the file from a random point at or after `keep_bytes`."""
    if mode not in ("cut", "garble"):
        raise FaultError(f"tail damage mode {mode!r}: must be cut or garble")
    size = os.path.getsize(segment_path)
    if keep_bytes < 0:
        raise FaultError(f"{segment_path}: keep_bytes={keep_bytes} must be >= 0")
    if keep_bytes >= size:
        return TailDamage(segment_path, "none", size, size)
    position = rng.randrange(keep_bytes, size)
    with open(segment_path, "r+b") as f:
        if mode == "cut":
            f.truncate(position)
        else:
            f.seek(position)
            f.write(rng.randbytes(size - position))
        f.flush()
        os.fsync(f.fileno())
    log.info("%s: %s the tail from byte %d of %d", segment_path, mode, position, size)
    return TailDamage(segment_path, mode, size, position)


@contextlib.contextmanager
def torn_tail_crash(
    cluster: ProcessControl,
    node_id: int,
    partition_dir: str | Path,
    keep_bytes: int,
    mode: str,
    rng: random.Random,
) -> Iterator[TailDamage]:
    """kill -9 the node, damage its active segment's unsynced tail; restart it on exit."""
    cluster.kill9(node_id)
    try:
        yield damage_tail(active_segment(partition_dir), keep_bytes, mode, rng)
    finally:
        cluster.start(node_id)


# -- a flipped byte ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ByteFlip:
    path: str
    position: int
    before: int
    after: int

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "position": self.position, "before": self.before,
                "after": self.after}  # fmt: skip


def flip_byte(segment_path: str, rng: random.Random, position: int | None = None) -> ByteFlip:
    """Invert one byte: at `position`, or at a random checksummed byte of a random valid batch."""
    if position is None:
        batches = [b for b in scan_segment(segment_path) if b.error is None]
        if not batches:
            raise FaultError(f"{segment_path}: no valid batch to flip a byte in")
        b = rng.choice(batches)
        position = rng.randrange(b.position + CHECKED_FROM, b.position + b.size)
    with open(segment_path, "r+b") as f:
        f.seek(position)
        old = f.read(1)
        if len(old) != 1:
            raise FaultError(f"{segment_path}: no byte at position {position}")
        new = old[0] ^ 0xFF
        f.seek(position)
        f.write(bytes([new]))
        f.flush()
        os.fsync(f.fileno())
    log.info("%s: flipped byte %d (%#04x -> %#04x)", segment_path, position, old[0], new)
    return ByteFlip(segment_path, position, old[0], new)


def unflip(flip: ByteFlip) -> bool:
    """Restore the byte if the file still has the flipped value there; True if restored."""
    try:
        with open(flip.path, "r+b") as f:
            f.seek(flip.position)
            cur = f.read(1)
            if len(cur) != 1 or cur[0] != flip.after:
                return False
            f.seek(flip.position)
            f.write(bytes([flip.before]))
            f.flush()
            os.fsync(f.fileno())
    except FileNotFoundError:
        return False
    return True


@contextlib.contextmanager
def flipped_byte(
    segment_path: str, rng: random.Random, position: int | None = None
) -> Iterator[ByteFlip]:
    flip = flip_byte(segment_path, rng, position)
    try:
        yield flip
    finally:
        unflip(flip)


# -- the runner's disk faults ------------------------------------------------------------------


class DiskCluster(ProcessControl, Protocol):
    """What the disk fault injectors need from a cluster (chaos/local_cluster.py has it)."""

    def partition_dir(self, node_id: int, tp: str) -> Path: ...

    def describe(self, node_id: int) -> dict[str, Any]: ...

    def high_watermarks(self, tps: list[str], without: int) -> dict[str, int]: ...


# After kill -9 a broker is fenced after its session timeout and then leaves every ISR; a
# healthy cluster does this in 1.5-3 s here, a loaded 2-core machine in several more.
OUT_OF_ISR_TIMEOUT_S = 30.0
POLL_S = 0.1


def _partitions(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{p['topic']}-{p['partition']}": p for p in view["partitions"]}


def _live_view(cluster: DiskCluster, without: int) -> dict[str, Any]:
    for n in cluster.node_ids():
        if n == without or cluster.pid(n) is None:
            continue
        try:
            return cluster.describe(n)
        except RaftlogError:
            continue
    raise FaultError(f"no live node other than {without} answers describe_cluster")


def _reported_offline(cluster: DiskCluster, without: int, node_id: int, tp: str) -> bool:
    """Whether the metadata lists node `node_id`'s replica of `tp` as offline (its broker found
    the damage and reported it), asked of a live node other than `without`."""
    try:
        p = _partitions(_live_view(cluster, without)).get(tp)
    except FaultError:
        return False
    return p is not None and node_id in p.get("offline_replicas", [])


def wait_out_of_isr(cluster: DiskCluster, node_id: int, timeout_s: float) -> dict[str, Any]:
    """Poll the other nodes until node `node_id` is in no partition's ISR; their view."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            view = _live_view(cluster, node_id)
            if not any(node_id in p["isr"] for p in view["partitions"]):
                return view
        except FaultError:
            if time.monotonic() >= deadline:
                raise
        if time.monotonic() >= deadline:
            raise FaultError(f"node {node_id} still in an ISR {timeout_s:g} s after kill -9")
        time.sleep(POLL_S)


@contextlib.contextmanager
def torn_tails(
    spec: FaultSpec, cluster: DiskCluster, topic: str, rng: random.Random
) -> Iterator[list[dict[str, Any]]]:
    """kill -9 each target, then cut or garble (spec.options["mode"]) the active segment of
    each of its replicas of `topic` from a random point past the high watermark it is no longer
    counted for; heal: start it again. Yields the damage done, as data.

    Why past that point: the fault models a power loss, which loses only what the replica had
    not fsynced, and under the fsync policy everything below the high watermark was fsynced by
    every ISR member. The other nodes are asked for the high watermark only once the target is
    out of every ISR, so it cannot grow on the target's old word any more; anything past it
    may be gone from the target after a power loss, and must not be missed."""
    mode = spec.options.get("mode", "cut")
    damage: list[dict[str, Any]] = []
    killed: list[int] = []
    try:
        for n in spec.targets:
            killed.append(n)
            cluster.kill9(n)
            view = wait_out_of_isr(cluster, n, OUT_OF_ISR_TIMEOUT_S)
            tps = sorted(tp for tp, p in _partitions(view).items()
                         if tp.startswith(f"{topic}-") and n in p["replicas"])  # fmt: skip
            hws = cluster.high_watermarks(tps, without=n)
            for tp in tps:
                path = cluster.partition_dir(n, tp)
                if not path.is_dir() or not segment_files(str(path)):
                    continue
                segment = active_segment(path)
                keep = position_after_offset(segment, hws[tp])
                d = damage_tail(segment, keep, mode, rng).to_json()
                damage.append({"node": n, "tp": tp, "high_watermark": hws[tp], **d})
        yield damage
    finally:
        heal_all([(f"start nodes {killed}", lambda: cluster.start(*killed))] if killed else [])


@contextlib.contextmanager
def full_disks(spec: FaultSpec, disks: dict[int, SmallDisk]) -> Iterator[list[dict[str, Any]]]:
    """Each target's small disk filled (ENOSPC on its next write); emptied on exit, always."""
    filled: list[int] = []
    done: list[dict[str, Any]] = []
    try:
        for n in spec.targets:
            if n not in disks:
                raise FaultError(f"fault disk-full: node {n} has no small disk (mount it first)")
            filled.append(n)
            done.append({"node": n, "filler_bytes": disks[n].fill(), "path": str(disks[n].path)})
        yield done
    finally:
        heal_all([(f"empty the disk of node {n}", disks[n].drain) for n in filled])


@contextlib.contextmanager
def flipped_follower(
    spec: FaultSpec,
    cluster: DiskCluster,
    topic: str,
    rng: random.Random,
    read: Callable[[str], None],
    stop: Callable[[float], bool],
) -> Iterator[dict[str, Any]]:
    """A byte flipped in an old segment of a partition that the target follows; that
    partition's leader killed (so the damaged follower may be elected) and the partition read
    from offset 0 (`read(tp)`) until `stop(wait_s)` says the window is over. On exit the leader
    is started again and the byte restored if it is still there (nobody set the log aside).
    Yields {node, tp, leader, flip, reported, detected}; `reported` turns True once the
    metadata lists the damaged replica offline (its broker found the damage and said so);
    `detected` is filled in on exit: True when it was reported, or when the damaged file was
    set aside or rewritten (the broker found the damage and healed), False otherwise."""
    (n,) = spec.targets
    view = _live_view(cluster, -1)

    def followed_by(node: int) -> list[str]:
        return sorted(tp for tp, p in _partitions(view).items()
                      if tp.startswith(f"{topic}-") and node in p["replicas"]
                      and p["leader"] not in (node, -1))  # fmt: skip

    followed = followed_by(n)
    if not followed:
        # The target leads every partition: leadership gathers on one node after the leader
        # kills of earlier faults (a 10-minute run: 4 of 26 faults found no follower). Damage
        # another node's replica, drawn by the fault's seeded rng; `node` says which.
        others = [m for m in cluster.node_ids() if m != n and followed_by(m)]
        if not others:
            raise FaultError(f"fault bitflip: no node follows a partition of {topic} now")
        n = rng.choice(others)
        followed = followed_by(n)
    # A replica set aside and refetched after an earlier flip holds one segment until it rolls
    # again (seconds at the workload's rate; longer on a loaded machine): damage one that has
    # an old segment (CI, under load: "chaos-1: 1 segment(s), no old one to damage").
    settled = [tp for tp in followed if len(segment_files(str(cluster.partition_dir(n, tp)))) > 1]
    tp = rng.choice(settled or followed)  # none settled: old_segment() says why
    leader = int(_partitions(view)[tp]["leader"])
    flip = flip_byte(old_segment(cluster.partition_dir(n, tp)), rng)
    result: dict[str, Any] = {
        "node": n, "tp": tp, "leader": leader, "flip": flip.to_json(), "reported": False
    }  # fmt: skip
    killed = False
    try:
        cluster.kill9(leader)
        killed = True
        while not stop(0.5):
            read(tp)
            if not result["reported"]:
                result["reported"] = _reported_offline(cluster, leader, n, tp)
        yield result
    finally:
        actions: list[tuple[str, Callable[[], object]]] = []
        if killed:
            actions.append((f"start node {leader}", lambda: cluster.start(leader)))

        def restore() -> None:
            result["detected"] = not unflip(flip) or result["reported"]

        actions.append(("restore the flipped byte", restore))
        heal_all(actions)
