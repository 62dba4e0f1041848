"""The broker fixture's own checks can fail: a harness that cannot fail would hide bugs."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from raftlog.launcher import KAFKA_PORT_OFFSET
from tests.integration._support import BrokerProcess


def test_an_unexpected_death_is_reported(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", tmp_path / "logs")
    b.start()
    assert b.proc is not None
    os.kill(b.proc.pid, signal.SIGKILL)  # not through kill9(): nobody expected this
    b.proc.wait()
    with pytest.raises(AssertionError, match="died unexpectedly"):
        b.check_alive()
    assert any("died unexpectedly with status -9" in p for p in b.shutdown_and_check())


def test_a_traceback_in_the_log_is_reported(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", tmp_path / "logs")
    b.start()
    with open(b.stderr_path, "a") as f:  # as asyncio would log a failed callback
        f.write("Traceback (most recent call last):\n  ...\nValueError: boom\n")
    problems = b.shutdown_and_check()
    assert any("traceback" in p and "ValueError: boom" in p for p in problems), problems


def test_restart_and_clean_stop_report_nothing(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", tmp_path / "logs")
    b.start()
    port = b.port
    b.restart()
    b.crash_restart()
    assert b.port == port and b.incarnation == 3
    assert b.shutdown_and_check() == []


def test_a_picked_port_keeps_its_kafka_port_below_the_ephemeral_range(tmp_path: Path) -> None:
    """`--port 0` picks PORT with PORT+300 (the Kafka listener) free, both below the ephemeral
    range, so a restart on PORT binds the same Kafka port (a port bound at 0 put PORT+300 in
    that range, where an outgoing connection held it at a restart in CI)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_min = int(f.read().split()[0])
    b = BrokerProcess(tmp_path / "data", tmp_path / "logs")
    b.start()
    kafka = b.kafka_bootstrap
    assert kafka == f"{b.host}:{b.port + KAFKA_PORT_OFFSET}"
    assert b.port + KAFKA_PORT_OFFSET < ephemeral_min
    b.restart()
    assert b.kafka_bootstrap == kafka
    assert b.shutdown_and_check() == []


def test_a_broker_that_cannot_start_fails_with_its_log(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        b = BrokerProcess(tmp_path / "data", tmp_path / "logs")
        b.port = taken.getsockname()[1]
        with pytest.raises(AssertionError, match=r"(?s)before it was ready.*cannot start"):
            b.start()
    assert b.proc is not None and b.proc.returncode == 1
