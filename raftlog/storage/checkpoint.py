"""Small checkpoint files written atomically: a partition's recovery point, log start offset and
leader-epoch cache, and a broker's high watermarks (`PartitionOffsets`, one file for all).

File format (text, so an operator can read it)::

    line 1   version, "0"
    line 2   number of entries, n
    n lines  the entries, integers separated by one space (PartitionOffsets: a topic name,
             then integers and a topic id)

A write goes to `<name>.tmp`, is fsynced, renamed over `<name>`, and the directory is fsynced:
after a crash the file holds either the old or the new content, never a mix. A reader that
finds a malformed file raises `CheckpointError` naming the file and line; the owner decides
whether the value can be rebuilt (the epoch cache, the recovery point) or not.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import cast

VERSION = 0


class CheckpointError(ValueError):
    """A checkpoint file exists but cannot be parsed."""


def fsync_dir(path: str) -> None:
    """Make a directory's entries (created, renamed, deleted files) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# fsyncs of many small files at once (`fsync_paths`): fsync releases the GIL, and the disk
# serves several at a time far faster than one after another.
_SYNC_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="raftlog-fsync")


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_paths(paths: Iterable[str]) -> None:
    """fsync every file and directory of `paths`, several at a time; raises the first
    OSError (the others are still tried)."""
    for _ in _SYNC_POOL.map(_fsync_path, list(dict.fromkeys(paths))):
        pass


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return cast(Callable[[int], int], fn)


_SYNCFS = _load_syncfs()


def sync_many(paths: Sequence[str], root: str) -> None:
    """Make `paths` (files and directories on the filesystem of `root`) durable: one
    syncfs(2) of that filesystem where Linux has it, else an fsync of each. Thousands of
    small new files fsynced one by one forced one journal commit each (20,000 per broker for
    10,000 new partitions), and the journal, busy with them, slowed every other metadata
    operation on the disk: creating 10,000 logs took 25-60 s instead of 6-9. Raises OSError."""
    if _SYNCFS is None:
        fsync_paths([*paths, root])
        return
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _SYNCFS(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs of {root}: {os.strerror(err)}")
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, fsync: bool = True) -> None:
    """Replace the file at `path` with `data`: write a temp file, fsync, rename, fsync dir.

    `fsync=False` keeps the rename (a reader never sees a mix) but not the durability: for
    files whose loss after a power failure costs nothing (derived data, an empty log's)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def write_entries(path: str, entries: Sequence[Sequence[int]], fsync: bool = True) -> None:
    lines = [str(VERSION), str(len(entries))]
    lines.extend(" ".join(str(v) for v in entry) for entry in entries)
    atomic_write(path, ("\n".join(lines) + "\n").encode(), fsync)


def _read_lines(path: str) -> list[str] | None:
    """The entry lines of the checkpoint at `path` (version and count checked), or None when
    there is no such file."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        lines = raw.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: not an ASCII text file") from None
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2 or lines[0] != str(VERSION):
        raise CheckpointError(f"{path}: line 1 must be version {VERSION}, got {lines[:1]}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"{path}: line 2 must be an entry count, got {lines[1]!r}") from None
    if count != len(lines) - 2:
        raise CheckpointError(f"{path}: says {count} entries, holds {len(lines) - 2}")
    return lines[2:]


def read_entries(path: str, width: int) -> list[tuple[int, ...]] | None:
    """The entries of the checkpoint at `path`, or None when there is no such file."""
    lines = _read_lines(path)
    if lines is None:
        return None
    entries = []
    for lineno, line in enumerate(lines, start=3):
        parts = line.split(" ")
        try:
            values = tuple(int(p) for p in parts)
        except ValueError:
            raise CheckpointError(f"{path}: line {lineno} is not integers: {line!r}") from None
        if len(values) != width:
            raise CheckpointError(f"{path}: line {lineno} needs {width} integers: {line!r}")
        entries.append(values)
    return entries


class PartitionOffsets:
    """One offset per partition, for every partition of a broker, in one checkpoint file
    (Kafka's replication-offset-checkpoint, which holds a broker's high watermarks).

    An entry is "topic partition topic_id offset": the topic id tells a partition from an
    earlier topic of the same name (deleted while the broker was down, then created again),
    whose offset must not be taken for the new one's. One file per broker, not one per
    partition: checkpointing 10,000 partitions is one write and two fsyncs, not 20,000 fsyncs
    (they blocked a broker's event loop for six seconds every interval)."""

    def __init__(self, path: str):
        self.path = path

    def read(self) -> dict[tuple[str, int], tuple[str, int]]:
        """(topic, partition) -> (topic id, offset); {} when there is no file. Raises
        CheckpointError when the file is malformed."""
        lines = _read_lines(self.path)
        out: dict[tuple[str, int], tuple[str, int]] = {}
        for lineno, line in enumerate(lines or (), start=3):
            parts = line.split(" ")
            try:
                if len(parts) != 4:
                    raise ValueError
                topic, partition, topic_id, offset = (
                    parts[0],
                    int(parts[1]),
                    parts[2],
                    int(parts[3]),
                )
            except ValueError:
                raise CheckpointError(
                    f"{self.path}: line {lineno} is not 'topic partition topic_id offset': {line!r}"
                ) from None
            out[(topic, partition)] = (topic_id, offset)
        return out

    def write(self, entries: Sequence[tuple[str, int, str, int]]) -> None:
        """Replace the file with `entries`, durably (raises OSError)."""
        lines = [str(VERSION), str(len(entries))]
        lines.extend(f"{t} {p} {tid} {off}" for t, p, tid, off in entries)
        atomic_write(self.path, ("\n".join(lines) + "\n").encode())


class OffsetCheckpoint:
    """One offset kept in its own checkpoint file.

    It remembers the value it last read or wrote, and `write` of that same value again does
    nothing: a broker with 10,000 idle partitions opens, checkpoints and closes them without
    one fsync each (two, with the directory's) for values that are already on disk."""

    def __init__(self, path: str):
        self.path = path
        # The value the file holds, as far as this object knows (None: unknown or no file).
        self._on_disk: int | None = None

    def write(self, offset: int) -> None:
        if offset == self._on_disk:
            return
        self._on_disk = None  # a failed write leaves the file unknown
        write_entries(self.path, [(offset,)])
        self._on_disk = offset

    def remove(self) -> None:
        """Delete the file (no error if there is none); the caller fsyncs the directory."""
        self._on_disk = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def read(self) -> int | None:
        self._on_disk = None
        entries = read_entries(self.path, 1)
        if entries is None:
            return None
        if len(entries) != 1:
            raise CheckpointError(f"{self.path}: expected one entry, found {len(entries)}")
        self._on_disk = entries[0][0]
        return entries[0][0]
