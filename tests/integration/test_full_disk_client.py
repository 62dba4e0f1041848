"""A broker whose disk is full: its storage error reaches the producer and the CLI as itself.

The broker's partition logs live on a 1 MiB tmpfs (mounted at `<data_dir>/logs` before the
broker starts; the metadata journal stays on the real disk). The append the disk refuses takes
the partition's log offline, and the broker answers LogOfflineError naming the full disk
(retriable: the log is reopened when space comes back, and with replication another replica
would lead; here it is the only one); the producer retries until delivery_timeout_ms and must
then report the broker's error, not a bare "expired"; the CLI producer must say so as it
happens and exit non-zero.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin, Producer
from raftlog.errors import RaftlogTimeoutError
from tests._tmpfs import tmpfs
from tests.integration._support import BrokerProcess, _child_env, cli_command

FS_BYTES = 1024 * 1024
TOPIC = "fill"
VALUE = b"x" * 1000
# Three times what the file system holds.
RECORDS = 3 * FS_BYTES // len(VALUE)
# The CLI producer must name the full disk this soon, long before its delivery timeout (120 s).
STDERR_DEADLINE_S = 20.0


@pytest.fixture
def full_disk_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    data = tmp_path / "data"
    logs = data / "logs"
    logs.mkdir(parents=True)
    with tmpfs(logs, FS_BYTES):
        broker = BrokerProcess(data, tmp_path / "broker-logs")
        try:
            broker.start()
            with Admin(broker.bootstrap) as admin:
                admin.create_topic(TOPIC, 1)
            yield broker
        finally:
            # Space comes back before the broker stops: this test is about what the client
            # sees; what a broker does when it must stop on a full disk (its close writes
            # checkpoints) is the storage tests' subject.
            subprocess.run(["mount", "-o", "remount,size=16m", str(logs)], check=True)
            problems = broker.shutdown_and_check()
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


def names_the_full_disk(text: str) -> bool:
    return f"{TOPIC}-0" in text and ("No space left on device" in text or "ENOSPC" in text)


def test_an_expired_record_reports_the_brokers_storage_error(
    full_disk_broker: BrokerProcess,
) -> None:
    with Producer(
        bootstrap_servers=full_disk_broker.bootstrap,
        acks=1,
        delivery_timeout_ms=3000,
        request_timeout_ms=1000,
        retry_backoff_ms=100,
    ) as producer:
        futures = [producer.send(TOPIC, VALUE) for _ in range(RECORDS)]
        errors = [f.exception(30) for f in futures]
    delivered = sum(e is None for e in errors)
    assert 0 < delivered < RECORDS, delivered
    failed = [e for e in errors if e is not None]
    assert all(isinstance(e, RaftlogTimeoutError) for e in failed), {type(e) for e in failed}
    text = str(failed[0])
    assert "expired after" in text and "attempt(s)" in text, text
    assert "last error: LogOfflineError: " in text and names_the_full_disk(text), text


def test_the_cli_producer_reports_the_full_disk_at_once_and_exits_non_zero(
    full_disk_broker: BrokerProcess,
) -> None:
    lines = b"".join(VALUE + b"\n" for _ in range(RECORDS))
    # With the default delivery timeout (120 s) the first retry already says why, on stderr.
    proc = subprocess.Popen(
        cli_command("produce", TOPIC, "-b", full_disk_broker.bootstrap),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_child_env(),
    )
    assert proc.stdin is not None and proc.stderr is not None
    try:
        started = time.monotonic()
        proc.stdin.write(lines)
        proc.stdin.close()
        seen = b""
        fd = proc.stderr.fileno()
        while not names_the_full_disk(seen.decode(errors="replace")):
            remaining = started + STDERR_DEADLINE_S - time.monotonic()
            assert remaining > 0, (
                f"stderr named no full disk within {STDERR_DEADLINE_S} s: {seen!r}"
            )
            if select.select([fd], [], [], remaining)[0]:
                chunk = os.read(fd, 65536)
                assert chunk, f"stderr ended without naming the full disk: {seen!r}"
                seen += chunk
        assert b"LogOfflineError" in seen, seen
    finally:
        proc.kill()
        proc.wait()

    # With a short delivery timeout: every failure counted, the first printed, exit 1.
    res = subprocess.run(
        cli_command(
            "produce", TOPIC, "-b", full_disk_broker.bootstrap, "--delivery-timeout-ms", "2000"
        ),
        input=lines,
        capture_output=True,
        timeout=60,
        env=_child_env(),
    )
    err = res.stderr.decode()
    assert res.returncode == 1, err
    assert "Traceback" not in err, err
    first = next(line for line in err.splitlines() if line.startswith("raftlog: error: "))
    assert "not delivered" in first and "LogOfflineError" in first
    assert names_the_full_disk(first), first
    summary = err.strip().splitlines()[-1]
    assert summary.startswith("raftlog: error: ") and f"of {RECORDS} record(s)" in summary, err
