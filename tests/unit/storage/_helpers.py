"""Shared pieces of the storage tests: example counts, record strategies, batch building.

Example counts: the storage suite must finish in about a minute on a 2-core machine, so the
defaults are modest; `RAFTLOG_SLOW=1` selects the "storage-slow" hypothesis profile, which runs
many more examples (for a nightly or a pre-release run).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from raftlog.records import LOG_OVERHEAD, Record, encode_batch, stamp, validate_batch

SLOW = os.environ.get("RAFTLOG_SLOW") == "1"

# deadline=None: file-system calls make per-example times noisy, and a deadline would turn a
# slow disk into a flaky failure. too_slow: a stateful example does real fsyncs.
settings.register_profile(
    "storage",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "storage-slow",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile("storage-slow" if SLOW else "storage")


def examples(fast: int, slow: int | None = None, **kwargs: object) -> settings:
    """Hypothesis settings: `fast` examples by default, `slow` (default 20x) with RAFTLOG_SLOW=1."""
    count = (slow if slow is not None else fast * 20) if SLOW else fast
    return settings(PROFILE, max_examples=count, **kwargs)  # type: ignore[arg-type]


blobs = st.one_of(st.none(), st.binary(max_size=24))
values = st.one_of(st.none(), st.binary(max_size=24), st.binary(min_size=100, max_size=400))
header_lists = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=2
).map(tuple)


def records_at(timestamps: st.SearchStrategy[int]) -> st.SearchStrategy[Record]:
    return st.builds(Record, key=blobs, value=values, headers=header_lists, timestamp=timestamps)


class FakeClock:
    """The clock a test injects with `PartitionLog.open(..., clock_ms=clock)`."""

    def __init__(self, now_ms: int = 1_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def stamped(raw: bytes, base_offset: int, epoch: int) -> bytes:
    """The bytes a leader writes for `raw` (either format) at `base_offset` in `epoch` (see
    records.stamp)."""
    magic = raw[16]
    (batch_length,) = struct.unpack_from("<i" if magic == 1 else ">i", raw, 8)
    return stamp(base_offset, batch_length, epoch, magic) + raw[16:]


def batch_of(n: int, value_bytes: int = 20, timestamp: int = 0, key: bytes = b"k") -> bytes:
    """A batch of `n` records with distinct values, all at `timestamp`."""
    return encode_batch(
        [
            Record(key + b"%d" % i, bytes([65 + i % 26]) * value_bytes, (), timestamp)
            for i in range(n)
        ]
    )


def batch_positions(data: bytes) -> list[tuple[int, int]]:
    """(position, size) of each whole, valid batch in `data`."""
    out, pos = [], 0
    while pos < len(data):
        h = validate_batch(data, pos)
        out.append((pos, h.batch_length + LOG_OVERHEAD))
        pos += h.batch_length + LOG_OVERHEAD
    return out


def fill_until_enospc(path: str) -> None:
    """Write zeros to the file at `path` until the file system is full (ENOSPC)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)


def open_fds() -> set[tuple[str, str]]:
    """(fd, what it points at) for each open file descriptor of this process."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        # The descriptor of the listing itself is closed by now: skip it.
        with contextlib.suppress(FileNotFoundError):
            out.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
    return out


@contextmanager
def captured_logs(level: int = logging.INFO) -> Iterator[list[str]]:
    """The messages raftlog logs inside the block (caplog is per test, not per example)."""
    lines: list[str] = []

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Handler(level)
    logger = logging.getLogger("raftlog")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
