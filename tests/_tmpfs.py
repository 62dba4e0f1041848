"""Small file systems for the full-disk tests: a tmpfs of a given size, and filling one up.

Mounting needs root; a test that is not root is skipped with that reason (CI runs as root).
The mount is undone whatever the test did, lazily if a process still holds a file there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(mount_point: str | Path, size: int | str) -> Iterator[Path]:
    """A tmpfs of `size` (bytes, or mount's own form such as "2m") over the existing
    directory `mount_point`, for the duration of the block."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root: run the tests as root (CI does)")
    path = Path(mount_point)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    assert mounted.returncode == 0, f"mount -t tmpfs failed as root: {mounted.stderr}"
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(path)], check=True)


def fill(path: str | Path) -> None:
    """Write a ballast file at `path` until its file system refuses another byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 16, 1 << 12, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
    finally:
        os.close(fd)
