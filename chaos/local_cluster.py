"""The chaos suite's LOCAL backend: n `raftlog node` processes, each killable, pausable and
restartable on its own, on 127.0.0.1 or each in its own network namespace (chaos/netns.py).

This is the ProcessControl the fault injectors drive (chaos/faults.py). Each node is a
combined controller+broker from a config written like `raftlog dev --nodes n` writes them; in
namespaces every node listens on its namespace address with the same ports (each namespace has
its own port space, so there is no free-port race), and the voters list names those addresses.

Every wait polls observable state (the node's ready line, its pid file, `describe_cluster`)
against a deadline. Each incarnation of a node logs to its own files under ROOT/logs, so the
logs of a killed incarnation survive its restart. `close()` stops every node (SIGCONT first, in
case a pause fault was cut short, then SIGTERM, SIGKILL after a deadline) and returns what went
wrong (exits the suite did not cause, non-zero exits on SIGTERM, tracebacks in the logs).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from chaos.faults import FaultError
from chaos.netns import NetnsNetwork
from raftlog.client import Admin, Consumer
from raftlog.errors import RaftlogError
from raftlog.launcher import free_ports, write_node_config
from raftlog.topics import TopicPartition

T = TypeVar("T")

LOOPBACK = "127.0.0.1"
# Ports inside a namespace: Kafka's client port and the Raft and replication ports `raftlog
# dev` would use.
NETNS_CLIENT_PORT = 9092
NETNS_RAFT_PORT = 9192
NETNS_REPLICATION_PORT = 9292
# A 2-core machine shared with other work starts Python slowly; a healthy node starts in 1-3 s.
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 0.05
DESCRIBE_TIMEOUT_MS = 3000
READY = re.compile(rb"raftlog broker (\d+) ready on (\S+):(\d+)")


def wait_until(predicate: Callable[[], T | None], timeout_s: float, what: str) -> T:
    """Poll `predicate` until it returns something truthy; FaultError naming `what` if not."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise FaultError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(POLL_INTERVAL_S)


def wait_or_kill(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """Wait for `proc` to exit; SIGKILL it at the deadline. Its status, or None if killed."""
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


class Node:
    """One node's process across its incarnations."""

    def __init__(self, node_id: int, config_path: Path, client_address: str, log_dir: Path,
                 exec_prefix: Sequence[str]):  # fmt: skip
        self.node_id = node_id
        self.config_path = config_path
        self.client_address = client_address
        self.log_dir = log_dir
        self.exec_prefix = list(exec_prefix)
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnation = 0
        self.expected_exit = True
        self.problems: list[str] = []
        self.err_paths: list[Path] = []
        self._out_path: Path | None = None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> None:
        if self.running():
            return
        self.incarnation += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        out = self.log_dir / f"node-{self.node_id}-{self.incarnation}.out"
        err = self.log_dir / f"node-{self.node_id}-{self.incarnation}.err"
        self._out_path = out
        self.err_paths.append(err)
        cmd = [*self.exec_prefix, sys.executable, "-m", "raftlog.cli", "node", "--config",
               str(self.config_path)]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(out, "ab") as o, open(err, "ab") as e:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=o, stderr=e, env=env)
        self.expected_exit = False

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        proc, out = self.proc, self._out_path
        assert proc is not None and out is not None

        def ready() -> bool:
            if proc.poll() is not None:
                raise FaultError(
                    f"node {self.node_id} exited with status {proc.returncode} before it was "
                    f"ready:\n{self.log_tail()}"
                )
            return READY.search(out.read_bytes()) is not None

        wait_until(ready, timeout_s, f"node {self.node_id}'s ready line in {out}")

    def check_alive(self) -> None:
        if self.proc is not None and not self.expected_exit and self.proc.poll() is not None:
            self.expected_exit = True
            self.problems.append(
                f"node {self.node_id} incarnation {self.incarnation} died unexpectedly with "
                f"status {self.proc.returncode}"
            )

    def signal(self, sig: signal.Signals) -> None:
        if not self.running():
            raise FaultError(f"node {self.node_id} is not running: cannot send {sig.name}")
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill9(self) -> None:
        self.check_alive()
        self.expected_exit = True
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(STOP_TIMEOUT_S)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait; SIGKILL (and a problem noted) if it does not exit in time."""
        self.begin_stop()
        return self.finish_stop(timeout_s)

    def begin_stop(self) -> None:
        self.check_alive()
        if self.running():
            assert self.proc is not None
            self.expected_exit = True
            self.proc.send_signal(signal.SIGCONT)  # a paused node cannot act on SIGTERM
            self.proc.terminate()

    def finish_stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Wait for the exit `begin_stop` asked for; note a slow or non-zero exit."""
        if self.proc is None:
            return 0
        if self.proc.returncode is not None:
            return self.proc.returncode
        rc = wait_or_kill(self.proc, timeout_s)
        if rc is None:
            self.problems.append(
                f"node {self.node_id} did not exit within {timeout_s} s of SIGTERM"
            )
            return -9
        if rc != 0:
            self.problems.append(f"node {self.node_id} exited with status {rc} on SIGTERM")
        return rc

    def tracebacks(self) -> list[str]:
        found = []
        for path in self.err_paths:
            text = path.read_text(errors="replace") if path.exists() else ""
            at = text.find("Traceback")
            if at >= 0:
                found.append(f"node {self.node_id} logged a traceback in {path}:\n"
                             f"{text[max(at - 300, 0) : at + 3000]}")  # fmt: skip
        return found

    def log_tail(self, nbytes: int = 4000) -> str:
        if not self.err_paths or not self.err_paths[-1].exists():
            return "(no log)"
        data = self.err_paths[-1].read_bytes()[-nbytes:]
        return f"--- {self.err_paths[-1]} (tail) ---\n" + data.decode(errors="replace")


class ClientViews:
    """What a cluster answers the host through each node's client address (both backends):
    a subclass says which nodes there are and where the host reaches each."""

    def node_ids(self) -> list[int]:
        raise NotImplementedError

    def address(self, node_id: int) -> str:
        """HOST:PORT where the host reaches node `node_id`'s client listener."""
        raise NotImplementedError

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(i) for i in self.node_ids())

    def describe(self, node_id: int) -> dict[str, Any]:
        """`describe_cluster()` as node `node_id` sees it, asked from the host."""
        with Admin(self.address(node_id), request_timeout_ms=DESCRIBE_TIMEOUT_MS) as a:
            d: dict[str, Any] = a.describe_cluster()
        return d

    def wait_view(
        self, node_id: int, predicate: Callable[[dict[str, Any]], bool], timeout_s: float,
        what: str,
    ) -> dict[str, Any]:  # fmt: skip
        """Poll node `node_id`'s view until `predicate` holds; return that view."""
        last: list[Any] = [None]

        def check() -> dict[str, Any] | None:
            try:
                view = self.describe(node_id)
            except RaftlogError as e:
                last[0] = e
                return None
            last[0] = view
            return view if predicate(view) else None

        try:
            return wait_until(check, timeout_s, what)
        except FaultError as e:
            raise FaultError(f"{e}; last view of node {node_id}: {last[0]}") from None

    def high_watermarks(self, tps: list[str], without: int = 0) -> dict[str, int]:
        """Each partition's high watermark ("<topic>-<partition>" -> offset), asked of the
        nodes other than `without` (a node the caller has just killed)."""
        bootstrap = ",".join(self.address(i) for i in self.node_ids() if i != without)
        parts = [TopicPartition(tp.rpartition("-")[0], int(tp.rpartition("-")[2])) for tp in tps]
        with Consumer(bootstrap_servers=bootstrap, request_timeout_ms=DESCRIBE_TIMEOUT_MS) as c:
            ends = c.end_offsets(parts)
        return {f"{tp.topic}-{tp.partition}": int(ends[tp]) for tp in parts}


class LocalCluster(ClientViews):
    """Nodes 1..n under ROOT (ROOT/data/node-<id>, ROOT/logs), optionally in namespaces."""

    def __init__(
        self,
        root: Path,
        n: int = 3,
        network: NetnsNetwork | None = None,
        session_timeout_ms: int = 1500,
        settings: dict[str, Any] | None = None,
        advertise: Callable[[int, str], str] | None = None,
    ):
        """`advertise(node_id, address)`, if given, returns the address the node advertises
        instead of its own, for its client and for its replication listener (a link-fault
        proxy in front of each: chaos/link_faults.py); the suite itself keeps dialling the
        client address."""
        self.root = root
        self.network = network
        ids = list(range(1, n + 1))
        if network is not None:
            if network.node_ids() != ids:
                raise FaultError(f"network nodes {network.node_ids()} but cluster nodes {ids}")
            hosts = {i: network.address(i) for i in ids}
            client = dict.fromkeys(ids, NETNS_CLIENT_PORT)
            raft = dict.fromkeys(ids, NETNS_RAFT_PORT)
            replication = dict.fromkeys(ids, NETNS_REPLICATION_PORT)
        else:
            hosts = dict.fromkeys(ids, LOOPBACK)
            ports = free_ports(3 * n, LOOPBACK)
            client = dict(zip(ids, ports[:n], strict=True))
            raft = dict(zip(ids, ports[n : 2 * n], strict=True))
            replication = dict(zip(ids, ports[2 * n :], strict=True))
        voters = [f"{i}@{hosts[i]}:{raft[i]}" for i in ids]
        self.nodes: dict[int, Node] = {}
        for i in ids:
            path = root / "data" / f"node-{i}" / "node.toml"
            path.parent.mkdir(parents=True, exist_ok=True)
            address = f"{hosts[i]}:{client[i]}"
            replication_address = f"{hosts[i]}:{replication[i]}"
            advertised = (
                {
                    "advertised_listener": advertise(i, address),
                    "replication_advertised_listener": advertise(i, replication_address),
                }
                if advertise
                else {}
            )
            write_node_config(
                str(path),
                {
                    "node_id": i,
                    "roles": ["controller", "broker"],
                    "data_dir": str(path.parent),
                    "client_listener": address,
                    "replication_listener": replication_address,
                    "controller_voters": voters,
                    "broker_session_timeout_ms": session_timeout_ms,
                    **advertised,
                    **(settings or {}),
                },
            )
            prefix = network.exec_prefix(i) if network is not None else []
            self.nodes[i] = Node(i, path, address, root / "logs", prefix)

    # -- ProcessControl ----------------------------------------------------------------------

    def node_ids(self) -> list[int]:
        return sorted(self.nodes)

    def pid(self, node_id: int) -> int | None:
        node = self.nodes[node_id]
        return node.proc.pid if node.proc is not None and node.running() else None

    def kill9(self, node_id: int) -> None:
        self.nodes[node_id].kill9()

    def stop(self, node_id: int) -> None:
        self.nodes[node_id].stop()

    def pause(self, node_id: int) -> None:
        self.nodes[node_id].signal(signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self.nodes[node_id].signal(signal.SIGCONT)

    def start(self, *node_ids: int) -> None:
        """Start the given nodes (all if none) that are not running, together, and wait until
        each is ready (a node waits for a metadata quorum, so they must start together)."""
        ids = [i for i in (node_ids or self.node_ids()) if not self.nodes[i].running()]
        for i in ids:
            self.nodes[i].launch()
        for i in ids:
            self.nodes[i].wait_ready()

    # -- observing ---------------------------------------------------------------------------

    def address(self, node_id: int) -> str:
        return self.nodes[node_id].client_address

    def status_from(self, node_id: int) -> dict[str, Any]:
        """`raftlog cluster status --json` run where the node runs (its namespace), asking it."""
        node = self.nodes[node_id]
        cmd = [*node.exec_prefix, sys.executable, "-m", "raftlog.cli", "cluster", "status",
               "--json", "--bootstrap-server", node.client_address]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        if proc.returncode != 0:
            raise FaultError(f"cluster status via node {node_id} failed: {proc.stderr.strip()}")
        status: dict[str, Any] = json.loads(proc.stdout)
        return status

    def partition_dir(self, node_id: int, tp: str) -> Path:
        """Where node `node_id` keeps partition `tp`'s log ("<topic>-<partition>")."""
        return self.nodes[node_id].config_path.parent / "logs" / tp

    # -- teardown ----------------------------------------------------------------------------

    def close(self) -> list[str]:
        """Stop every node; the list of what went wrong during the cluster's life."""
        # Signal all first: a node waiting for its peers to stop must not serialise the others.
        for node in self.nodes.values():
            node.begin_stop()
        problems: list[str] = []
        for node in self.nodes.values():
            node.finish_stop()
            problems.extend(node.problems)
            problems.extend(node.tracebacks())
        if problems:
            problems.extend(node.log_tail() for node in self.nodes.values())
        return problems
