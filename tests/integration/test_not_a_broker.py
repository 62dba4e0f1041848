"""A client pointed at a port that is not a raftlog broker fails at once, and says so.

The peer is a real `python3 -m http.server` process: it answers a request only once a line
ends, then sends an HTML error page. Before the fix the client read the page's first 4 bytes
as a frame length of 1.3 GB and waited 30 s for a response that could never come.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin
from raftlog.errors import NotABrokerError
from tests.integration._support import HOST, START_TIMEOUT_S, run_cli, wait_for

# Generous for a loaded machine, far below the 30 s request timeout the bug waited out.
FAIL_FAST_S = 5.0


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[int]:
    """An HTTP server on a port it picks itself; yields the port."""
    out = tmp_path / "http.out"
    with open(out, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "http.server", "0", "--bind", HOST],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:

        def port() -> int | None:
            assert proc.poll() is None, out.read_text()
            m = re.search(rb"Serving HTTP on \S+ port (\d+)", out.read_bytes())
            return int(m.group(1)) if m else None

        yield wait_for(port, START_TIMEOUT_S, "the HTTP server's port")
    finally:
        proc.terminate()
        proc.wait(10)


def test_admin_fails_at_once_against_an_http_server(http_server: int) -> None:
    started = time.monotonic()
    with pytest.raises(NotABrokerError) as caught, Admin(f"{HOST}:{http_server}") as admin:
        admin.list_topics()
    assert time.monotonic() - started < FAIL_FAST_S
    assert f"not a raftlog broker at {HOST}:{http_server}" in str(caught.value)


def test_cli_fails_at_once_against_an_http_server(http_server: int) -> None:
    started = time.monotonic()
    proc = run_cli("topic", "list", "--bootstrap-server", f"{HOST}:{http_server}")
    assert time.monotonic() - started < FAIL_FAST_S + 5  # plus the interpreter's start
    assert proc.returncode == 1, proc
    assert f"not a raftlog broker at {HOST}:{http_server}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
