"""Fixtures of the storage tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests._tmpfs import tmpfs

FS_BYTES = 256 * 1024


@pytest.fixture
def small_fs(tmp_path: str) -> Iterator[str]:
    """A 256 KiB tmpfs, unmounted afterwards whatever happens."""
    mount_point = os.path.join(str(tmp_path), "small-fs")
    os.mkdir(mount_point)
    with tmpfs(mount_point, FS_BYTES):
        yield mount_point
