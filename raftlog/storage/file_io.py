"""File helpers of the partition log: vectored writes, read slices, side files, OS error text.

Rules this module keeps:
- No state and no log of its own: every function takes the file descriptors and segments it
  works on, and errors are raised, never logged, so that the owning log decides what a
  failure means (a rollback, going offline).
- A short `pwritev` is continued rather than taken as the error: the kernel writes what fits
  and then reports why the rest does not (ENOSPC, EFBIG, EIO) as an OSError on the next call.
- A side file (a small file of the log owner's) is written atomically, except into a new,
  empty log, where a torn one can only describe an empty log (see `write_side_file`).
- A `FileSlice` is whole batches of an open segment file; its fd belongs to the log (see the
  class).
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass

from raftlog.errors import StorageError
from raftlog.storage.checkpoint import atomic_write, fsync_dir
from raftlog.storage.segment import LogSegment

IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def os_error_text(e: OSError) -> str:
    """ "ENOSPC: No space left on device": the errno's name, so that an operator can grep it."""
    name = errno.errorcode.get(e.errno) if e.errno is not None else None
    if name and e.strerror:
        return f"{name}: {e.strerror}"
    return str(e)


@dataclass(frozen=True, slots=True)
class FileSlice:
    """Whole batches at [position, position + size) of an open segment file, for sendfile.

    The fd belongs to the log: use the slice before the log deletes or truncates that segment
    (on the same thread, that means before the next log call), or `os.dup` it.
    """

    fd: int
    path: str
    position: int
    size: int

    def read(self) -> bytes:
        if not self.size:
            return b""
        data = os.pread(self.fd, self.size, self.position)
        if len(data) != self.size:
            raise StorageError(
                f"{self.path}: read {len(data)} of {self.size} bytes at byte {self.position}"
            )
        return data


EMPTY_SLICE = FileSlice(-1, "", 0, 0)


def slice_of(seg: LogSegment, offset: int, max_bytes: int, max_offset: int | None) -> FileSlice:
    """The whole batches of `seg` to return for a read at `offset` (see PartitionLog.read).
    Raises SegmentDamage where the index or the headers do not lead to a batch."""
    start = seg.position_of(offset)
    limit = seg.size
    if max_offset is not None and max_offset < seg.next_offset:
        limit = seg.position_of(max_offset)
        if limit <= start:
            return EMPTY_SLICE
    want = start + max(max_bytes, 1)
    end = limit if want >= limit else min(seg.boundary_at_or_before(start, want), limit)
    return FileSlice(seg.fd, seg.log_path, start, end - start)


def close_all(segments: list[LogSegment]) -> OSError | None:
    """Close every segment's file, even if writing some indices fails; the first failure."""
    failure = None
    for seg in segments:
        try:
            seg.close()
        except OSError as e:
            failure = failure or e
    return failure


def pwritev_all(fd: int, iov: list[bytes | memoryview], position: int) -> int:
    """pwritev all of `iov` (at most IOV_MAX buffers per call); returns the bytes written.

    A short write is continued rather than taken as the error: the kernel writes what fits and
    then reports why the rest does not (ENOSPC, EFBIG, EIO) as an OSError on the next call.
    """
    total = sum(len(b) for b in iov)
    if len(iov) <= IOV_MAX:
        written = os.pwritev(fd, iov, position)
        if written == total:
            return written
    else:
        written = 0
    views = [memoryview(b) for b in iov]
    skip = written
    while views and skip >= len(views[0]):
        skip -= len(views.pop(0))
    if skip:
        views[0] = views[0][skip:]
    while views:
        n = os.pwritev(fd, views[:IOV_MAX], position + written)
        if n == 0:
            break
        written += n
        while views and n >= len(views[0]):
            n -= len(views.pop(0))
        if n:
            views[0] = views[0][n:]
    return written


def write_side_file(log_dir: str, name: str, data: bytes, sync: bool, in_place: bool) -> str:
    """Write the file `name` of `log_dir`; returns its path. `in_place` (only for a new, empty
    log: torn, the file can only describe an empty log, and the owner then drops the
    directory) writes it directly, two calls instead of a temporary file and a rename; else
    it is written atomically. `sync=False` leaves the fsync to the caller. Raises OSError."""
    path = os.path.join(log_dir, name)
    if not in_place:
        atomic_write(path, data, sync)
        return path
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(errno.ENOSPC, f"short write to {path}")
        if sync:
            os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)  # no half-written file left behind
        raise
    finally:
        os.close(fd)
    if sync:
        fsync_dir(log_dir)
    return path
