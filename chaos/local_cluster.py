"""The chaos suite's LOCAL backend: n `raftlog node` processes, each killable, pausable and
restartable on its own, on 127.0.0.1 or each in its own network namespace (chaos/netns.py).

This is the ProcessControl the fault injectors drive (chaos/faults.py): the launcher's
LocalCluster (raftlog/launcher.py: configs, ports, readiness, signals, clean stop) with the
suite's error type and its views of the cluster. Each node is a combined controller+broker
configured as `raftlog dev --nodes n` configures them; in namespaces every node listens on its
namespace address with the same ports (each namespace has its own port space, so there is no
free-port race), and the voters list names those addresses.

Every wait polls observable state (the node's ready file, `describe_cluster`) against a
deadline; the launcher's errors become FaultError here. Each incarnation of a node logs to its
own files under ROOT/logs, so the logs of a killed incarnation survive its restart. `close()`
stops every node (SIGCONT first, in case a pause fault was cut short, then SIGTERM, SIGKILL
after a deadline) and returns what went wrong (exits the suite did not cause, non-zero exits
on SIGTERM, tracebacks in the logs).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from chaos.faults import FaultError
from chaos.netns import NetnsNetwork
from raftlog import launcher
from raftlog.client import Admin
from raftlog.errors import RaftlogError
from raftlog.launcher import LaunchError, PortPlan

T = TypeVar("T")

# Ports inside a namespace: Kafka's client port and the Raft and replication ports `raftlog
# dev` would use.
NETNS_CLIENT_PORT = 9092
NETNS_RAFT_PORT = 9192
NETNS_REPLICATION_PORT = 9292
NETNS_KAFKA_PORT = 9392
# A 2-core machine shared with other work starts Python slowly; a healthy node starts in 1-3 s.
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 0.05
DESCRIBE_TIMEOUT_MS = 3000


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


@contextlib.contextmanager
def _as_fault() -> Iterator[None]:
    """The launcher's errors as the suite's (a fault that cannot be injected, a failed start)."""
    try:
        yield
    except LaunchError as e:
        raise FaultError(str(e)) from None


class ClientViews:
    """What a cluster answers the host through each node's client address (both backends):
    a subclass says which nodes there are and where the host reaches each."""

    def node_ids(self) -> list[int]:
        raise NotImplementedError

    def address(self, node_id: int) -> str:
        """HOST:PORT where the host reaches node `node_id`'s client listener."""
        raise NotImplementedError

    def kafka_address(self, node_id: int) -> str:
        """HOST:PORT where the host reaches node `node_id`'s Kafka listener."""
        raise NotImplementedError

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(i) for i in self.node_ids())

    @property
    def kafka_bootstrap(self) -> str:
        """Every node's Kafka listener: Kafka clients' bootstrap.servers (--client kafka)."""
        return ",".join(self.kafka_address(i) for i in self.node_ids())

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
        """Each partition's high watermark ("<topic>-<partition>" -> offset) as its leader
        holds it, asked of the nodes other than `without` (a node the caller has just killed).

        The leader's own figure (DescribeConfigs), not ListOffsets': a leader that has just
        taken over answers ListOffsets only once its followers have moved its high watermark
        past the start of its epoch (KIP-207), and by then it counts records the killed node
        held as leader and may never have fsynced; a torn tail past that point found nothing to
        damage. Its own figure is at most the high watermark of the killed node's time."""
        bootstrap = ",".join(self.address(i) for i in self.node_ids() if i != without)
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            topic, _, partition = tp.rpartition("-")
            by_topic.setdefault(topic, []).append(int(partition))
        deadline = time.monotonic() + DESCRIBE_TIMEOUT_MS / 1000 * 10
        while True:
            with Admin(bootstrap, request_timeout_ms=DESCRIBE_TIMEOUT_MS) as admin:
                found = {
                    f"{t.name}-{p.partition}": p.high_watermark
                    for t in admin.describe_topics(sorted(by_topic))
                    for p in t.partitions
                }
            hws = {tp: found.get(tp) for tp in tps}
            if all(hw is not None for hw in hws.values()):
                return {tp: int(hw) for tp, hw in hws.items() if hw is not None}
            if time.monotonic() >= deadline:
                missing = sorted(tp for tp, hw in hws.items() if hw is None)
                raise FaultError(f"no leader told the high watermark of {missing}")
            time.sleep(0.1)


class LocalCluster(launcher.LocalCluster, ClientViews):
    """Nodes 1..n under ROOT (ROOT/data/node-<id>, ROOT/logs), optionally in namespaces; nodes
    1-3 are Raft voters, any more are brokers only."""

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
            hosts = [network.address(i) for i in ids]
            ports = PortPlan.same(
                n, NETNS_CLIENT_PORT, NETNS_RAFT_PORT, NETNS_REPLICATION_PORT, NETNS_KAFKA_PORT
            )
        else:
            hosts = [launcher.LOOPBACK] * n
            ports = PortPlan.picked(n)
        self._kafka = [f"{hosts[i]}:{ports.kafka[i]}" for i in range(n)]
        paths = launcher.write_cluster_configs(
            root / "data",
            ports,
            hosts,
            {"broker_session_timeout_ms": session_timeout_ms, **(settings or {})},
            advertise,
            controllers=min(n, 3),  # as `raftlog dev`: three voters, the rest brokers only
        )
        super().__init__(
            paths,
            [f"{hosts[i]}:{ports.client[i]}" for i in range(n)],
            exec_prefix=network.exec_prefix if network is not None else None,
            log_dir=root / "logs",
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def kafka_address(self, node_id: int) -> str:
        return self._kafka[node_id - 1]

    # -- ProcessControl: the launcher's, with the suite's errors -------------------------------

    def kill9(self, node_id: int) -> None:
        with _as_fault():
            super().kill9(node_id)

    def stop(self, node_id: int, timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
        """SIGTERM and wait; SIGKILL (and a problem noted for `close`) if it does not exit in
        time, or exits non-zero."""
        problems = super().stop(node_id, timeout_s)
        self.nodes[node_id].problems.extend(problems)
        return problems

    def pause(self, node_id: int) -> None:
        with _as_fault():
            super().pause(node_id)

    def resume(self, node_id: int) -> None:
        with _as_fault():
            super().resume(node_id)

    def start(self, *node_ids: int, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the given nodes (all if none) that are not running, together, and wait until
        each is ready (a node waits for a metadata quorum, so they must start together)."""
        try:
            super().start(*node_ids, timeout_s=timeout_s)
        except LaunchError as e:
            tails = "\n".join(self.nodes[i].log_tail() for i in node_ids or self.node_ids())
            raise FaultError(f"{e}:\n{tails}") from None

    # -- observing ---------------------------------------------------------------------------

    def address(self, node_id: int) -> str:
        return self.nodes[node_id].client_address

    def status_from(self, node_id: int) -> dict[str, Any]:
        """`raftlog cluster status --json` run where the node runs (its namespace), asking it."""
        node = self.nodes[node_id]
        cmd = [*node.exec_prefix, *launcher.cli_command(
            "cluster", "status", "--json", "--bootstrap-server", node.client_address
        )]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        if proc.returncode != 0:
            raise FaultError(f"cluster status via node {node_id} failed: {proc.stderr.strip()}")
        status: dict[str, Any] = json.loads(proc.stdout)
        return status

    def partition_dir(self, node_id: int, tp: str) -> Path:
        """Where node `node_id` keeps partition `tp`'s log ("<topic>-<partition>")."""
        return self.nodes[node_id].config_path.parent / "logs" / tp

    # -- teardown ----------------------------------------------------------------------------

    def close(self, timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
        """Stop every node; the list of what went wrong during the cluster's life."""
        return super().close(timeout_s)
