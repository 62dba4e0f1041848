"""The Raft journal of the metadata quorum: pysyncobj's format, written so that a full disk
is survivable.

pysyncobj's own `FileJournal` (pysyncobj/journal.py) grows its file with `mmap.resize`, which
extends it sparsely, and writes entries through the mapping: on a full disk the first store to a
new page cannot get a block, the kernel sends SIGBUS, and the whole process dies ("Fatal Python
error: Bus error" at journal.py:126, measured on a 2 MB tmpfs). Its `journal.meta` (term, vote,
commit index) is written with open/write, and ENOSPC there raised out of the Raft tick and
ended the node's Raft thread. `MetadataQuorum` hands pysyncobj this journal instead.

On-disk format: pysyncobj's, byte for byte, so a data directory written by either opens with
the other. All integers little-endian.

    header (40 bytes): b"PYSYNCOBJ" NUL-padded to 24 bytes | pysyncobj version, NUL-padded to
        8 | format version u32 (1) | end of the last record u32 (a byte position)
    record: size u32 (= 16 + len(command)) | index u64 | term u64 | command | size u32 again
        (so the previous record is found from the end of the next)

The bytes after the last record's end are reserved space (zeros or old records), never read.
`<journal>.meta` holds pysyncobj's pickled dict {"currentTerm", "votedForNodeId",
"raftCommitIndex"}, replaced atomically (temp file, rename).

Rules:
- Space before bytes: the file grows with `posix_fallocate` (doubling, at least what the record
  needs) before a record is written into the new part, so a write never needs a new block, and
  `os.pwrite` (not a mapping) reports any error as an exception instead of a signal.
- A full disk (ENOSPC, EDQUOT) raises `JournalFullError` and leaves the journal as it was: a
  record is in the list only once its bytes and the header are written. pysyncobj calls the
  journal inside a Raft tick; the exception ends that tick's work, which Raft treats as a lost
  message (the leader sends the entries again, a candidate campaigns again). `MetadataQuorum`
  catches it around each tick, reports it, and refuses proposals while `full` is set; the next
  write that succeeds clears it, so the node recovers by itself when space returns.
- The term and vote are stored before pysyncobj sends anything that reflects them (Raft's rule):
  `setCurrentTerm` raises JournalFullError if it cannot store them, and pysyncobj then sends
  nothing. The commit index is stored at most once a second and may lag (a restarted node
  re-learns it from the leader): a failed store is retried a second later, not raised.
- Any other OSError (EIO, ...) propagates: what is on disk is then unknown, and the Raft thread
  stops the node loudly.
- A record that does not fit the file or whose two sizes differ ends the journal where it
  starts (a torn tail after a power loss), with a WARNING naming the file and byte: the node
  then has fewer entries, as a lagging follower does, and catches up from the leader.
- No fsync per entry (pysyncobj's choice, kept): entries survive kill -9 of the process, not a
  power loss of a majority of the voters.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import pickle
import struct
import threading
import time
from typing import Any, NoReturn

from pysyncobj import pickle as syncobj_pickle
from pysyncobj.journal import Journal
from pysyncobj.version import VERSION

from raftlog.errors import StorageError

log = logging.getLogger(__name__)

_NAME = b"PYSYNCOBJ".ljust(24, b"\0")
_VERSION = VERSION.encode()[:7].ljust(8, b"\0")
_FORMAT_VERSION = 1
HEADER_BYTES = 40
_END_AT = 36  # where the header keeps the end of the last record
_SIZE = struct.Struct("<I")
_INDEX_TERM = struct.Struct("<QQ")
# A record's bytes beyond its command: two sizes, index and term.
RECORD_OVERHEAD_BYTES = 2 * _SIZE.size + _INDEX_TERM.size
# The header stores positions as u32: the journal cannot grow past 4 GiB. MetadataQuorum
# compacts it long before (see JOURNAL_BYTES_COMPACT in quorum.py).
JOURNAL_BYTES_MAX = 2**32 - 1
# Growth: double the file, but by at most 64 MiB at once and at least 64 KiB.
_GROW_BYTES_MIN = 64 * 1024
_GROW_BYTES_MAX = 64 * 1024 * 1024
# A full disk is logged at WARNING at most this often: every tick may hit it again.
FULL_LOG_INTERVAL_S = 10.0
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class JournalFullError(Exception):
    """The journal could not get the disk space for a record or for the term and vote.

    Not a RaftlogError: it stays between pysyncobj and MetadataQuorum, which answers
    proposers with StorageError."""


class RaftJournal(Journal):  # type: ignore[misc]
    """pysyncobj's `Journal` interface over one file, growing by `posix_fallocate`."""

    def __init__(self, path: str):
        self.path = path
        self._meta_path = path + ".meta"
        # Taken by every method that reserves or writes: pysyncobj calls from its tick thread,
        # `reserve` comes from the event loop's thread.
        self._lock = threading.Lock()
        # (command, index, term) per record, and each record's first byte in the file.
        self._entries: list[tuple[bytes, int, int]] = []
        self._positions: list[int] = []
        # What failed for lack of space, and since when: "records" (growing the file) and
        # "meta" (storing term, vote or commit index). A success of the same kind clears it.
        self._full: dict[str, tuple[str, float]] = {}
        self._full_logged = -FULL_LOG_INTERVAL_S
        # time.monotonic() of the open or of the last compaction (deleteEntriesTo, clear).
        self.compacted_at = time.monotonic()
        exists = os.path.exists(path)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._allocated = os.fstat(self._fd).st_size
            if not exists or self._allocated < HEADER_BYTES:
                self._allocate(_GROW_BYTES_MIN)
                header = _NAME + _VERSION + _SIZE.pack(_FORMAT_VERSION) + _SIZE.pack(HEADER_BYTES)
                self._write(0, header)
                self._end = HEADER_BYTES
            else:
                self._end = self._read_records()
            self._meta: dict[str, Any] = self._read_meta()
        except BaseException:
            os.close(self._fd)
            raise
        self._meta_saved = True

    # -- reading ---------------------------------------------------------------------------

    def _read_records(self) -> int:
        header = os.pread(self._fd, HEADER_BYTES, 0)
        if header[:24] != _NAME:
            raise StorageError(f"{self.path} is not a pysyncobj journal (header {header[:24]!r})")
        (end,) = _SIZE.unpack_from(header, _END_AT)
        if end > self._allocated:
            log.warning(
                "Raft journal %s: the header says the records end at byte %d, the file has %d "
                "bytes; reading what is there",
                self.path,
                end,
                self._allocated,
            )
            end = self._allocated
        data = os.pread(self._fd, end, 0)
        position = HEADER_BYTES
        while position < end:
            valid = position + RECORD_OVERHEAD_BYTES <= end
            if valid:
                (record,) = _SIZE.unpack_from(data, position)
                valid = _INDEX_TERM.size <= record and position + record + 8 <= end
                valid = valid and _SIZE.unpack_from(data, position + 4 + record)[0] == record
            if not valid:
                log.warning(
                    "Raft journal %s: the record at byte %d is torn or corrupt; the journal "
                    "ends there (%d bytes after it are ignored; the leader sends the missing "
                    "entries again)",
                    self.path,
                    position,
                    end - position,
                )
                break
            index, term = _INDEX_TERM.unpack_from(data, position + 4)
            command = data[position + 4 + _INDEX_TERM.size : position + 4 + record]
            self._entries.append((command, index, term))
            self._positions.append(position)
            position += record + 8
        return position

    def _read_meta(self) -> dict[str, Any]:
        try:
            with open(self._meta_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return {}
        try:
            meta = syncobj_pickle.loads(raw) if raw else {}
        except (pickle.UnpicklingError, EOFError, ValueError) as e:
            raise StorageError(f"{self._meta_path}: unreadable Raft term and vote ({e})") from e
        if not isinstance(meta, dict):
            raise StorageError(f"{self._meta_path}: not a Raft journal meta file: {meta!r:.100}")
        return meta

    # -- space -----------------------------------------------------------------------------

    @property
    def full(self) -> str | None:
        """Why metadata writes fail for lack of disk space, while they do; else None."""
        if not self._full:
            return None
        now = time.monotonic()
        return "; ".join(f"{why} ({now - since:.0f} s ago)" for why, since in self._full.values())

    @property
    def size_bytes(self) -> int:
        """Bytes of records in the journal (what compaction removes)."""
        return self._end - HEADER_BYTES

    def reserve(self, nbytes: int) -> None:
        """Make sure a record of `nbytes` of command fits without new blocks, or raise
        JournalFullError. Proposers call it so that a full disk refuses them at once."""
        with self._lock:
            self._ensure(self._end + nbytes + RECORD_OVERHEAD_BYTES)

    def _ensure(self, needed: int) -> None:
        if needed <= self._allocated:
            return
        if needed > JOURNAL_BYTES_MAX:
            raise JournalFullError(
                f"Raft journal {self.path}: {needed} bytes would pass the format's limit of "
                f"{JOURNAL_BYTES_MAX}; it must be compacted first"
            )
        grow = min(max(self._allocated, _GROW_BYTES_MIN), _GROW_BYTES_MAX)
        ahead = min(max(needed, self._allocated + grow), JOURNAL_BYTES_MAX)
        try:
            os.posix_fallocate(self._fd, self._allocated, ahead - self._allocated)
            self._allocated = ahead
        except OSError as e:
            if e.errno not in _FULL_ERRNOS:
                raise
            self._allocate(needed)  # the disk may still have room for this record alone
        self._full.pop("records", None)

    def _allocate(self, size: int) -> None:
        try:
            os.posix_fallocate(self._fd, self._allocated, size - self._allocated)
        except OSError as e:
            self._raise_full(e, "records", f"reserving {size - self._allocated} bytes in")
        self._allocated = size

    def _write(self, position: int, data: bytes) -> None:
        try:
            written = os.pwrite(self._fd, data, position)
        except OSError as e:
            self._raise_full(e, "records", f"writing {len(data)} bytes at byte {position} of")
        if written != len(data):
            raise StorageError(
                f"Raft journal {self.path}: short write of {written} of {len(data)} bytes at "
                f"byte {position}"
            )

    def _raise_full(self, e: OSError, kind: str, what: str, path: str | None = None) -> NoReturn:
        """Re-raise `e`: as JournalFullError (remembered, logged now and then) if the disk is
        full, unchanged otherwise."""
        if e.errno not in _FULL_ERRNOS:
            raise e
        message = f"{what} {path or self.path} failed: {e.strerror}"
        since = self._full.get(kind, (message, time.monotonic()))[1]
        self._full[kind] = (message, since)
        now = time.monotonic()
        if now - self._full_logged >= FULL_LOG_INTERVAL_S:
            self._full_logged = now
            log.warning("metadata journal: %s; metadata writes wait for disk space", message)
        raise JournalFullError(
            f"metadata journal: {message}; metadata writes are refused until space is freed"
        ) from e

    def _recovered(self, kind: str) -> None:
        failed = self._full.pop(kind, None)
        if failed is not None:
            log.warning(
                "metadata journal: disk space is back after %.0f s (%s); metadata writes resume",
                time.monotonic() - failed[1],
                failed[0],
            )

    # -- pysyncobj's Journal interface (its method names) ----------------------------------

    def add(self, command: bytes, idx: int, term: int) -> None:
        command = syncobj_pickle.to_bytes(command)
        record = _SIZE.pack(len(command) + _INDEX_TERM.size)
        data = b"".join((record, _INDEX_TERM.pack(idx, term), command, record))
        with self._lock:
            position = self._end
            self._ensure(position + len(data))
            self._write(position, data)
            self._write(_END_AT, _SIZE.pack(position + len(data)))
            self._end = position + len(data)
            self._entries.append((command, idx, term))
            self._positions.append(position)
            self._recovered("records")

    def clear(self) -> None:
        with self._lock:
            self._write(_END_AT, _SIZE.pack(HEADER_BYTES))
            self._entries, self._positions, self._end = [], [], HEADER_BYTES
            self.compacted_at = time.monotonic()

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        with self._lock:
            if entryFrom >= len(self._entries):
                return
            end = self._positions[entryFrom]
            self._write(_END_AT, _SIZE.pack(end))
            del self._entries[entryFrom:], self._positions[entryFrom:]
            self._end = end

    def deleteEntriesTo(self, entryTo: int) -> None:
        """Drop the first `entryTo` entries (after a snapshot): the rest move to the front,
        into space the file already has, as pysyncobj's own journal does (the header says
        "empty" while they move)."""
        with self._lock:
            if entryTo <= 0:
                return
            self.compacted_at = time.monotonic()
            if entryTo >= len(self._entries):
                self._write(_END_AT, _SIZE.pack(HEADER_BYTES))
                self._entries, self._positions, self._end = [], [], HEADER_BYTES
                return
            start = self._positions[entryTo]
            tail = os.pread(self._fd, self._end - start, start)
            if len(tail) != self._end - start:
                raise StorageError(
                    f"Raft journal {self.path}: read {len(tail)} of {self._end - start} bytes "
                    f"at byte {start} while compacting"
                )
            try:
                self._write(_END_AT, _SIZE.pack(HEADER_BYTES))
                self._write(HEADER_BYTES, tail)
                self._write(_END_AT, _SIZE.pack(HEADER_BYTES + len(tail)))
            except JournalFullError as e:
                # Only a copy-on-write file system needs blocks to overwrite: the file and
                # this list now disagree, so this is not a wait-for-space case.
                raise StorageError(f"compacting {self.path} failed midway: {e}") from e
            shift = start - HEADER_BYTES
            self._entries = self._entries[entryTo:]
            self._positions = [p - shift for p in self._positions[entryTo:]]
            self._end -= shift

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        self._meta["raftCommitIndex"] = raftCommitIndex
        self._meta_saved = False

    def getRaftCommitIndex(self) -> int:
        return int(self._meta.get("raftCommitIndex", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        self._meta["currentTerm"] = term
        self._meta["votedForNodeId"] = votedForNodeId
        self._store_meta()

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("currentTerm", 0))

    def getVotedForNodeId(self) -> Any:
        return self._meta.get("votedForNodeId")

    def onOneSecondTimer(self) -> None:
        if self._meta_saved:
            return
        # The commit index may lag on disk: a failed store is logged by _raise_full and
        # tried again a second later.
        with contextlib.suppress(JournalFullError):
            self._store_meta()

    def _store_meta(self) -> None:
        data = syncobj_pickle.dumps(self._meta)
        tmp = self._meta_path + ".tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, self._meta_path)
        except OSError as e:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            self._raise_full(e, "meta", "storing the Raft term and vote in", self._meta_path)
        self._meta_saved = True
        self._recovered("meta")
