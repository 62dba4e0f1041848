"""Checkpoint files: the text format, atomic replacement, and errors that name file and line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from raftlog.storage import LogConfig, PartitionLog
from raftlog.storage.checkpoint import (
    CheckpointError,
    OffsetCheckpoint,
    read_entries,
    write_entries,
)
from raftlog.storage.log import RECOVERY_POINT_FILE

from ._helpers import FakeClock, batch_of


def test_entries_round_trip_as_text(tmp_path: str) -> None:
    path = os.path.join(str(tmp_path), "cp")
    write_entries(path, [(1, 2), (3, -4)])
    with open(path) as f:
        assert f.read() == "0\n2\n1 2\n3 -4\n"
    assert read_entries(path, 2) == [(1, 2), (3, -4)]
    assert read_entries(os.path.join(str(tmp_path), "missing"), 2) is None
    assert not os.path.exists(path + ".tmp")


def test_offset_checkpoint(tmp_path: str) -> None:
    cp = OffsetCheckpoint(os.path.join(str(tmp_path), "offset"))
    assert cp.read() is None
    cp.write(42)
    assert cp.read() == 42
    cp.write(7)
    assert cp.read() == 7
    write_entries(cp.path, [(1,), (2,)])
    with pytest.raises(CheckpointError, match="expected one entry, found 2"):
        cp.read()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "line 1 must be version 0"),
        (b"0\n", "line 1 must be version 0"),
        (b"1\n1\n5\n", "line 1 must be version 0, got ['1']"),
        (b"0\nx\n", "line 2 must be an entry count, got 'x'"),
        (b"0\n2\n5\n", "says 2 entries, holds 1"),
        (b"0\n2\n5\n6 7\n", "line 4 needs 1 integers: '6 7'"),
        (b"0\n1\n-\n", "line 3 is not integers: '-'"),
        (b"0\n1\n5 \n", "line 3 is not integers: '5 '"),
        (b"\xff\x00", "not an ASCII text file"),
    ],
)
def test_a_malformed_file_raises_checkpoint_error_naming_file_and_line(
    tmp_path: str, content: bytes, message: str
) -> None:
    path = os.path.join(str(tmp_path), "cp")
    with open(path, "wb") as f:
        f.write(content)
    with pytest.raises(CheckpointError) as e:
        read_entries(path, 1)
    assert str(e.value).startswith(f"{path}: ")
    assert message in str(e.value)


def test_an_interrupted_write_leaves_the_old_content(tmp_path: str) -> None:
    """A write that fails halfway (here: RLIMIT_FSIZE, a real EFBIG) never touches the file:
    it dies in `<name>.tmp`, and the log removes that leftover on open."""
    log_path = os.path.join(str(tmp_path), "topic-0")
    with PartitionLog.open(log_path, LogConfig(), clock_ms=FakeClock()) as log:
        log.append(batch_of(3), 0)
    cp_path = os.path.join(log_path, RECOVERY_POINT_FILE)
    with open(cp_path, "rb") as f:
        old = f.read()
    assert old == b"0\n1\n3\n"
    child = textwrap.dedent(
        """
        import json, resource, signal, sys
        from raftlog.storage.checkpoint import write_entries
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))
        try:
            write_entries(sys.argv[1], [(10**15,), (2,)])
        except OSError as e:
            print(json.dumps({"errno": e.errno}))
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", child, cp_path], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {"errno": 27}  # EFBIG
    with open(cp_path, "rb") as f:
        assert f.read() == old
    with open(cp_path + ".tmp", "rb") as f:
        assert f.read() == b"0\n2\n100000000000"  # the torn new content: 16 bytes
    with PartitionLog.open(log_path, LogConfig(), clock_ms=FakeClock()) as log:
        assert log.log_end_offset == 3
        assert not os.path.exists(cp_path + ".tmp")


def test_a_write_replaces_the_file_in_one_rename(tmp_path: str) -> None:
    """A reader holding the old file keeps reading the old content: the new one is a new inode."""
    path = os.path.join(str(tmp_path), "cp")
    write_entries(path, [(1,)])
    with open(path, "rb") as old:
        inode = os.fstat(old.fileno()).st_ino
        write_entries(path, [(2,)])
        assert old.read() == b"0\n1\n1\n"
    assert os.stat(path).st_ino != inode
    assert read_entries(path, 1) == [(2,)]


def test_sync_many_syncs_the_filesystem_once_or_each_path_without_syncfs(
    tmp_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raftlog.storage import checkpoint

    paths = []
    for i in range(3):
        d = os.path.join(str(tmp_path), f"p-{i}")
        os.mkdir(d)
        with open(os.path.join(d, "topic-id"), "w") as f:
            f.write("id")
        paths += [os.path.join(d, "topic-id"), d]
    assert checkpoint._SYNCFS is not None  # Linux: one syncfs(2)
    checkpoint.sync_many(paths, str(tmp_path))
    # Without syncfs: every path and the root, each fsynced.
    synced: list[str] = []
    monkeypatch.setattr(checkpoint, "_SYNCFS", None)
    monkeypatch.setattr(checkpoint, "fsync_paths", lambda ps: synced.extend(ps))
    checkpoint.sync_many(paths, str(tmp_path))
    assert synced == [*paths, str(tmp_path)]
    # A failure names the filesystem's root.
    monkeypatch.undo()
    with pytest.raises(OSError, match="no-such-dir"):
        checkpoint.sync_many(paths, os.path.join(str(tmp_path), "no-such-dir"))
