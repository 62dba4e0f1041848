"""A node that cannot work fails at once and loudly, naming why (issue 9).

Real `raftlog node` and `raftlog dev` processes on 127.0.0.1:
- a taken port (the Raft TCP listener, its UDP heartbeat sibling, the client listener) ends
  the start within seconds with "Address already in use" and the address, exit status 1;
  pysyncobj used to retry its bind forever at 100% CPU, ignoring SIGTERM;
- `raftlog dev` names the node that failed and stops the others;
- a Raft thread that fails (here: a peer sends pysyncobj a message it cannot handle) stops the
  node with exit status 1 and a message, instead of leaving a node that looks alive and whose
  metadata never changes again.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import struct
import subprocess
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin
from raftlog.errors import RaftlogError
from raftlog.launcher import (
    RAFT_PORT_OFFSET,
    REPLICATION_PORT_OFFSET,
    free_ports,
    write_node_config,
)
from tests.integration._support import (
    CLI_TIMEOUT_S,
    HOST,
    START_TIMEOUT_S,
    _child_env,
    cli_command,
    wait_for,
)

# A node that cannot bind a port must say so within this long (it used to spin forever).
FAIL_FAST_S = 15.0


def node_config(root: Path) -> tuple[Path, str, str]:
    """A one-node (controller + broker) config on free ports: (path, client, raft address)."""
    client_port, raft_port = free_ports(2, HOST)
    client, raft = f"{HOST}:{client_port}", f"{HOST}:{raft_port}"
    path = root / "node.toml"
    root.mkdir(parents=True, exist_ok=True)
    write_node_config(
        str(path),
        {
            "node_id": 1,
            "roles": ["controller", "broker"],
            "data_dir": str(root),
            "client_listener": client,
            "controller_voters": [f"1@{raft}"],
        },
    )
    return path, client, raft


def run_until_exit(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run `cmd`; kill it (and its children) and fail if it has not exited within `timeout_s`."""
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=_child_env(), text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{cmd} still running after {timeout_s} s:\n{err[-3000:]}", pytrace=False)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def occupy(address: str, kind: socket.SocketKind) -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.socket(socket.AF_INET, kind)
    sock.bind((host, int(port)))
    if kind == socket.SOCK_STREAM:
        sock.listen()  # an HTTP server, say
    return sock


@pytest.mark.parametrize("which", ["raft", "heartbeat", "client"])
def test_a_taken_port_fails_the_node_at_once_naming_it(tmp_path: Path, which: str) -> None:
    path, client, raft = node_config(tmp_path / "node")
    address, kind = {
        "raft": (raft, socket.SOCK_STREAM),
        "heartbeat": (raft, socket.SOCK_DGRAM),
        "client": (client, socket.SOCK_STREAM),
    }[which]
    with occupy(address, kind):
        t0 = time.monotonic()
        done = run_until_exit(cli_command("node", "--config", str(path)), FAIL_FAST_S)
        took_s = time.monotonic() - t0
    assert done.returncode == 1, done.stderr[-3000:]
    why = [line for line in done.stderr.splitlines() if line.startswith("raftlog: node 1 ")]
    assert len(why) == 1, done.stderr[-3000:]
    assert "already in use" in why[0].lower() and address.rpartition(":")[2] in why[0], why
    assert "Traceback" not in done.stderr, done.stderr
    assert took_s < FAIL_FAST_S


def contiguous_ports(n: int) -> int:
    """A base port with the n client, Raft and replication ports `raftlog dev --port base`
    takes (base.., base+100.., base+200..) free right now."""
    for _ in range(50):
        base = free_ports(1, HOST)[0]
        if base + REPLICATION_PORT_OFFSET + n > 65535:
            continue
        offsets = (0, RAFT_PORT_OFFSET, REPLICATION_PORT_OFFSET)
        ports = [base + offset + i for offset in offsets for i in range(n)]
        socks = []
        try:
            for p in ports:
                s = socket.socket()
                socks.append(s)
                s.bind((HOST, p))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return base
    raise AssertionError("no run of free ports found")


def test_dev_names_the_node_that_failed_and_stops_the_others(tmp_path: Path) -> None:
    base = contiguous_ports(3)
    taken = f"{HOST}:{base + RAFT_PORT_OFFSET + 1}"  # node 2's Raft port
    with occupy(taken, socket.SOCK_STREAM):
        cmd = cli_command(
            "dev", "--nodes", "3", "--port", str(base), "--data-dir", str(tmp_path / "dev")
        )
        done = run_until_exit(cmd, CLI_TIMEOUT_S)
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"node 2 cannot start: [Errno 98] Raft listener {taken}" in done.stderr, done.stderr
    assert "node 2 failed (exit status 1); stopping the others" in done.stderr, done.stderr
    # The others are gone: their client ports are free again.
    for port in (base, base + 2):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((HOST, port))


def pysyncobj_frame(message: object) -> bytes:
    """One message as pysyncobj's TcpConnection frames it: int32 length, zlib(pickle)."""
    data = zlib.compress(pickle.dumps(message, 2), 3)
    return struct.pack("i", len(data)) + data


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, str, str]]:
    path, client, raft = node_config(tmp_path / "node")
    err_path = tmp_path / "node.err"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            cli_command("node", "--config", str(path)),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=_child_env(),
        )  # fmt: skip
    try:
        yield proc, err_path, client, raft
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_failed_raft_thread_stops_the_node_loudly(node) -> None:  # type: ignore[no-untyped-def]
    proc, err_path, client, raft = node

    def ready() -> bool:
        assert proc.poll() is None, err_path.read_text()
        try:
            with Admin(client, request_timeout_ms=2000) as a:
                return bool(a.describe_cluster()["quorum"]["this_node_leads"])
        except RaftlogError:
            return False  # not listening yet

    wait_for(ready, START_TIMEOUT_S, "the node to lead its one-voter quorum", interval_s=0.1)
    # A peer that pysyncobj accepts ("readonly" needs no password) and then sends a message it
    # cannot handle: its Raft thread raises, as it did on a truncated pickle.
    host, _, port = raft.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as peer:
        peer.sendall(pysyncobj_frame("readonly") + pysyncobj_frame({"type": "request_vote"}))
        wait_for(lambda: proc.poll() is not None, 10.0, "the node to exit: its Raft thread failed")
    rc = proc.returncode
    err = err_path.read_text()
    assert rc == 1, err[-3000:]
    assert "the metadata quorum's Raft thread failed (KeyError: 'term')" in err, err[-3000:]
    assert "CRITICAL" in err and "the Raft thread failed and stops" in err, err[-3000:]
