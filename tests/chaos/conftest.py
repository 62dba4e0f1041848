"""Fixtures of the chaos tests: a Toxiproxy API to drive, and TCP upstreams to put behind it.

`toxiproxy` is chaos/toxiproxy_server.py run as its own process (the way the suite runs it),
unless TOXIPROXY_URL names a real Toxiproxy (http://HOST:PORT, on this host's network, since
the tests' upstreams listen on 127.0.0.1): then the same tests drive that one. `own_toxiproxy`
is always ours, for the checks that go beyond Toxiproxy (attribute validation). The client is
`toxiproxy-python`, whose API address is class-wide: each fixture points it at its server.
Teardown deletes the proxies a test made, stops our server with SIGTERM and fails the test if
the server exited non-zero or logged an error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from toxiproxy import Toxiproxy

from chaos.local_cluster import wait_or_kill
from tests.integration._support import wait_for

SERVER_START_TIMEOUT_S = 30.0
SERVER_STOP_TIMEOUT_S = 10.0


@contextmanager
def run_toxiproxy_server() -> Iterator[tuple[str, int]]:
    """`python -m chaos.toxiproxy_server --port 0` as a child; yields its API host and port."""
    # stderr goes to a file: a pipe nobody reads during the session could fill and stall it.
    with tempfile.TemporaryFile() as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "chaos.toxiproxy_server", "--host", "127.0.0.1", "--port", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err_file,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

        def stderr() -> str:
            err_file.seek(0)
            return err_file.read().decode(errors="replace")

        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().decode()  # the server writes its one line at once
            assert line.startswith("toxiproxy API listening on "), (
                f"no ready line (got {line!r}); stderr:\n{stderr()}"
            )
            host, _, port = line.split()[-1].rpartition(":")
            yield host, int(port)
        finally:
            if proc.poll() is None:
                proc.terminate()
            rc = wait_or_kill(proc, SERVER_STOP_TIMEOUT_S)
            if rc is None:
                pytest.fail(
                    f"the toxiproxy server did not exit within 10 s of SIGTERM:\n{stderr()}"
                )
            if rc != 0 or "Traceback" in stderr() or " ERROR " in stderr():
                pytest.fail(f"toxiproxy server exited {rc}; stderr:\n{stderr()}")


@contextmanager
def _client(address: tuple[str, int]) -> Iterator[Toxiproxy]:
    """The client pointed at `address`; the proxies made inside are deleted on exit."""
    host, port = address
    t = Toxiproxy()
    t.update_api_consumer(host, port)
    wait_for(t.running, SERVER_START_TIMEOUT_S, f"the Toxiproxy API on {host}:{port}")
    before = set(t.proxies())
    try:
        yield t
    finally:
        t.update_api_consumer(host, port)
        for name, proxy in t.proxies().items():
            if name not in before:
                proxy.destroy()


@pytest.fixture(scope="session")
def _own_toxiproxy_address() -> Iterator[tuple[str, int]]:
    with run_toxiproxy_server() as address:
        yield address


@pytest.fixture
def own_toxiproxy(_own_toxiproxy_address: tuple[str, int]) -> Iterator[Toxiproxy]:
    with _client(_own_toxiproxy_address) as t:
        yield t


@pytest.fixture
def toxiproxy(request: pytest.FixtureRequest) -> Iterator[Toxiproxy]:
    url = os.environ.get("TOXIPROXY_URL")
    if url:
        parts = urllib.parse.urlsplit(url if "//" in url else f"http://{url}")
        address = (parts.hostname or "127.0.0.1", parts.port or 8474)
    else:
        address = request.getfixturevalue("_own_toxiproxy_address")
    with _client(address) as t:
        yield t
