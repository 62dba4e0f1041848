"""Fixtures of the storage tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

FS_BYTES = 256 * 1024


@pytest.fixture
def small_fs(tmp_path: str) -> Iterator[str]:
    """A 256 KiB tmpfs, unmounted afterwards whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root: run the storage tests as root (CI does)")
    mount_point = os.path.join(str(tmp_path), "small-fs")
    os.mkdir(mount_point)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", mount_point],
        capture_output=True,
        text=True,
    )
    assert mounted.returncode == 0, f"mount -t tmpfs failed as root: {mounted.stderr}"
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", mount_point], capture_output=True).returncode:
            subprocess.run(["umount", "-l", mount_point], check=True)
