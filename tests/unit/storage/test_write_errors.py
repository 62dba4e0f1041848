"""Write errors from the real kernel: a full file system (tmpfs) and a file size limit (EFBIG).

No mocks: the log runs on a 256 KiB tmpfs until the kernel says ENOSPC, or in a subprocess
whose RLIMIT_FSIZE makes a write fail with EFBIG partway. Each test checks that the failed
append is rolled back and takes the log offline (LogOfflineError naming the file, the byte and
the OS error: Kafka's rule, so that the broker hands the partition to an in-sync replica),
that every acknowledged append survives the reopen once space is back (read back, `verify`
clean) and that nothing else does.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from raftlog.errors import LogOfflineError, StorageError
from raftlog.records import encode_batch
from raftlog.storage import LogConfig, PartitionLog, tools
from raftlog.storage.log import EPOCH_CACHE_FILE
from raftlog.storage.segment import segment_name

from ._helpers import FakeClock, fill_until_enospc, open_fds

BALLAST_BYTES = 64 * 1024


def record_batch(i: int, value_bytes: int = 1500) -> bytes:
    return encode_batch([(b"key-%04d" % i, bytes([i % 251]) * value_bytes)], timestamp=1000 + i)


def check_acked(log: PartitionLog, acked: int) -> None:
    """The log holds offsets [0, acked), each the record that was acknowledged, nothing else."""
    assert log.log_end_offset == acked
    offset = 0
    while offset < acked:
        records = log.read_records(offset, 64 * 1024)
        assert records, offset
        for r in records:
            assert (r.key, r.value, r.offset) == (
                b"key-%04d" % r.offset,
                record_value(r.offset),
                r.offset,
            )
        offset = records[-1].offset + 1
    assert offset == acked


def record_value(i: int) -> bytes:
    return bytes([i % 251]) * 1500


def fill(log: PartitionLog, epoch: int = 0, start: int = 0) -> tuple[int, StorageError]:
    """Append one-record batches until the disk refuses one; (offsets acknowledged, error)."""
    i = start
    while True:
        assert i < start + 1000, "a 256 KiB file system never filled up"
        try:
            info = log.append(record_batch(i), epoch)
        except StorageError as e:
            return i, e
        assert info.base_offset == i
        i += 1


def reopen_check_verify(path: str, config: LogConfig, acked: int) -> None:
    log = PartitionLog.open(path, config, clock_ms=FakeClock())
    try:
        check_acked(log, acked)
    finally:
        log.close()
    assert tools.verify(path) == []


# One segment for the whole file system: no background roll flush, so the first failure is
# deterministically the data write.
ONE_SEGMENT = LogConfig(
    segment_bytes=1 << 20, index_interval_bytes=1024, recovery_point_checkpoint_ms=0
)


def test_full_disk_rolls_back_the_append_and_takes_the_log_offline_until_reopened(
    small_fs: str,
) -> None:
    ballast = os.path.join(small_fs, "ballast")
    with open(ballast, "wb") as f:
        f.write(b"\0" * BALLAST_BYTES)
    path = os.path.join(small_fs, "topic-0")
    seg_path = os.path.join(path, segment_name(0) + ".log")
    fds_before = open_fds()
    log = PartitionLog.open(path, ONE_SEGMENT, clock_ms=FakeClock())
    told: list[None] = []
    log.on_offline = lambda: told.append(None)
    acked, error = fill(log)

    # The failed append: named, retriable, caused by ENOSPC, rolled back, and the log offline
    # (its owner told once), so that a broker moves the partition's leadership elsewhere.
    assert type(error) is LogOfflineError and error.retriable
    assert isinstance(error.__cause__, OSError) and error.__cause__.errno == errno.ENOSPC
    size = os.path.getsize(seg_path)
    assert f"{seg_path} failed" in str(error) and f"at byte {size} " in str(error)
    assert "No space left on device" in str(error) and "rolled back, nothing appended" in str(error)
    assert acked > 50
    assert told == [None] and str(log.offline_error) == str(error)

    # Offline: every call refuses with the same reason, nothing changes on disk.
    for attempt in (
        lambda: log.append(record_batch(acked), 0),
        lambda: log.append(record_batch(acked), 1),
        lambda: log.read(0, 4096),
        log.flush,
    ):
        with pytest.raises(LogOfflineError, match="No space left on device"):
            attempt()
    assert os.path.getsize(seg_path) == size
    assert told == [None]
    try:
        log.close()  # every file closed, though the indices may not be written
    except StorageError as e:
        assert "No space left on device" in str(e)
    assert open_fds() == fds_before

    # Space comes back: the reopen (the broker's retry) holds exactly what was acknowledged,
    # and appends again, at a new epoch too.
    os.unlink(ballast)
    log = PartitionLog.open(path, ONE_SEGMENT, clock_ms=FakeClock())
    check_acked(log, acked)
    info = log.append(record_batch(acked), 1)
    assert info.base_offset == acked
    assert log.epoch_cache.entries() == [(0, 0), (1, acked)]
    acked += 1
    log.flush()
    log.close()
    reopen_check_verify(path, ONE_SEGMENT, acked)
    with open(os.path.join(path, EPOCH_CACHE_FILE)) as f:
        assert f.read().split("\n")[2:4] == ["0 0", f"1 {acked - 1}"]


def test_a_flush_the_disk_refuses_takes_the_log_offline(small_fs: str) -> None:
    """flush: the data may reach the disk, but its epoch cache or checkpoint cannot be written.
    A disk that refuses a small file refuses the next append too: offline now, nothing lost."""
    path = os.path.join(small_fs, "topic-0")
    log = PartitionLog.open(path, ONE_SEGMENT, clock_ms=FakeClock())
    for i in range(10):
        log.append(record_batch(i), 0)
    ballast = os.path.join(small_fs, "ballast")
    fill_until_enospc(ballast)
    with pytest.raises(LogOfflineError, match="No space left on device"):
        log.flush()
    with pytest.raises(LogOfflineError):
        log.append(record_batch(10), 0)
    try:
        log.close()
    except StorageError as e:
        assert "No space left on device" in str(e)
    os.unlink(ballast)
    reopen_check_verify(path, ONE_SEGMENT, 10)


def test_flush_and_close_on_a_full_disk_fail_cleanly_and_lose_nothing(small_fs: str) -> None:
    ballast = os.path.join(small_fs, "ballast")
    with open(ballast, "wb") as f:
        f.write(b"\0" * BALLAST_BYTES)
    path = os.path.join(small_fs, "topic-0")
    fds_before = open_fds()
    log = PartitionLog.open(path, ONE_SEGMENT, clock_ms=FakeClock())
    acked, _ = fill(log)

    # The failed append took the log offline: flush refuses, naming the full disk.
    with pytest.raises(LogOfflineError, match="No space left on device"):
        log.flush()
    # close: every file is closed even though the indices cannot be written.
    try:
        log.close()
    except StorageError as e:
        assert "No space left on device" in str(e)
    assert open_fds() == fds_before
    with pytest.raises(LogOfflineError, match="closed"):
        log.append(record_batch(acked), 0)

    # Opening while the disk is still full may fail, but only with StorageError and no leak.
    try:
        PartitionLog.open(path, ONE_SEGMENT, clock_ms=FakeClock()).close()
    except StorageError as e:
        assert "No space left on device" in str(e)
    assert open_fds() == fds_before

    os.unlink(ballast)
    reopen_check_verify(path, ONE_SEGMENT, acked)


def test_full_disk_across_segment_rolls_keeps_every_acknowledged_append(small_fs: str) -> None:
    """With rolls, the first failure may be the background fsync of a rolled segment's index
    (the log then goes offline) or the data write; either way nothing acknowledged is lost."""
    ballast = os.path.join(small_fs, "ballast")
    with open(ballast, "wb") as f:
        f.write(b"\0" * BALLAST_BYTES)
    path = os.path.join(small_fs, "topic-0")
    config = LogConfig(segment_bytes=24 * 1024, index_interval_bytes=512)
    fds_before = open_fds()
    log = PartitionLog.open(path, config, clock_ms=FakeClock())
    acked, error = fill(log)
    assert acked > 50
    assert isinstance(error.__cause__, OSError)
    assert error.__cause__.errno == errno.ENOSPC, error
    assert log.log_end_offset == acked
    try:
        log.close()
    except StorageError as e:
        assert "No space left on device" in str(e) or isinstance(e, LogOfflineError), e
    assert open_fds() == fds_before
    os.unlink(ballast)
    reopen_check_verify(path, config, acked)


# -- RLIMIT_FSIZE: a write fails with EFBIG partway -----------------------------------------

CHILD = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    from raftlog.errors import StorageError
    from raftlog.records import encode_batch
    from raftlog.storage import LogConfig, PartitionLog

    path, limit = sys.argv[1], int(sys.argv[2])
    seg = os.path.join(path, "0" * 20 + ".log")

    def batch(i):
        return encode_batch([(b"key-%04d" % i, bytes([i % 251]) * 1500)], timestamp=1000 + i)

    log = PartitionLog.open(path, LogConfig(recovery_point_checkpoint_ms=0), clock_ms=lambda: 5)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so the write returns EFBIG, not a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    out = {"acked": 0, "attempts": []}
    for i in range(1000):
        before = os.path.getsize(seg)
        try:
            log.append(batch(i), 0)
        except StorageError as e:
            out["attempts"].append({
                "error": type(e).__name__,
                "message": str(e),
                "errno": getattr(e.__cause__, "errno", None),
                "size_before": before,
                "size_after": os.path.getsize(seg),
                "log_end": log.log_end_offset,
            })
            if len(out["attempts"]) == 2:
                break
            continue
        out["acked"] = i + 1
    log.close()  # offline: the failed write took it (the broker reopens it the same way)
    log = PartitionLog.open(path, LogConfig(recovery_point_checkpoint_ms=0), clock_ms=lambda: 5)
    out["values_ok"] = all(
        r.value == bytes([r.offset % 251]) * 1500 and r.key == b"key-%04d" % r.offset
        for r in log.read_records(0, 1 << 20)
    )
    out["read_count"] = len(log.read_records(0, 1 << 20))
    log.close()
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize("where", ["inside a batch", "at a batch boundary"])
def test_file_size_limit_fails_the_write_with_efbig_and_rolls_it_back(
    tmp_path: str, where: str
) -> None:
    path = os.path.join(str(tmp_path), "topic-0")
    batch_bytes = len(record_batch(0))
    limit = 20 * batch_bytes + (batch_bytes // 2 if where == "inside a batch" else 0)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, path, str(limit)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    out = json.loads(child.stdout)
    assert out["acked"] == 20
    seg_path = os.path.join(path, segment_name(0) + ".log")
    for i, attempt in enumerate(out["attempts"]):
        # The failed write took the log offline; the second attempt is refused with its reason.
        assert attempt["error"] == "LogOfflineError", attempt
        assert attempt["errno"] == (errno.EFBIG if i == 0 else None), attempt
        assert "File too large" in attempt["message"]
        assert f"at byte {20 * batch_bytes} of {seg_path}" in attempt["message"]
        assert attempt["size_before"] == attempt["size_after"] == 20 * batch_bytes
        assert attempt["log_end"] == 20
    assert len(out["attempts"]) == 2
    assert out["values_ok"] and out["read_count"] == 20
    # Without the limit the log reopens with exactly the acknowledged records, and goes on.
    reopen_check_verify(path, LogConfig(), 20)
    with PartitionLog.open(path, LogConfig(), clock_ms=FakeClock()) as log:
        assert log.append(record_batch(20), 0).base_offset == 20
        check_acked(log, 21)


def test_gathered_appends_fail_together_on_a_full_disk(small_fs: str) -> None:
    """append_chunks writes many producers' chunks as one unit: ENOSPC fails all of them and
    leaves the log as it was (offline); once space is back the reopened log takes them all, in
    order."""
    path = os.path.join(small_fs, "topic-0")
    log = PartitionLog.open(path, ONE_SEGMENT, clock_ms=FakeClock())
    acked = 20
    for i in range(acked):
        log.append(record_batch(i), 0)
    ballast = os.path.join(small_fs, "ballast")
    fill_until_enospc(ballast)
    seg_path = os.path.join(path, segment_name(0) + ".log")
    size = os.path.getsize(seg_path)
    chunks = [memoryview(record_batch(acked + i)) for i in range(3)]
    with pytest.raises(LogOfflineError, match="nothing appended"):
        log.append_chunks(chunks, 0)
    assert os.path.getsize(seg_path) == size
    try:
        log.close()
    except StorageError as e:
        assert "No space left on device" in str(e)
    os.unlink(ballast)
    log = PartitionLog.open(path, ONE_SEGMENT, clock_ms=FakeClock())
    check_acked(log, acked)
    out = log.append_chunks(chunks, 0)
    assert [o.base_offset for o in out] == [acked, acked + 1, acked + 2]  # type: ignore[union-attr]
    log.flush()
    log.close()
    reopen_check_verify(path, ONE_SEGMENT, acked + 3)
