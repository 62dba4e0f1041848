"""A three-node raftlog cluster of real processes, each node started and killed on its own.

Each node is a combined controller+broker run as `raftlog node --config DIR/node-<id>/node.toml`,
the same configs `raftlog dev --nodes 3` writes (by the same function, raftlog/launcher.py), so
a test can kill -9 or restart one node while the others keep running. Every wait polls
observable state (`Admin.describe_cluster()` asked of a live node, a node's ready file, a
process status) with a deadline. Teardown stops every node (SIGTERM, SIGKILL after a
deadline) and reports a node that died unexpectedly, did not exit 0 on SIGTERM, or logged a
Python traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog import launcher
from raftlog.client import Admin
from raftlog.errors import RaftlogError
from raftlog.launcher import PortPlan, close_all, node_command
from raftlog.node import NodeConfig
from tests.integration._support import (
    HOST,
    BrokerProcess,
    wait_for,
)

# Describe requests go to one node at a time; a killed node must not hold a poll for long.
DESCRIBE_TIMEOUT_MS = 3000
# describe_cluster polls cost each node a request; 50 ms keeps them cheap on 2 cores and still
# resolves a failover time to well under a tenth of a second.
POLL_INTERVAL_S = 0.05
# Every node stops within this of the SIGTERM sent to all at once.
STOP_ALL_TIMEOUT_S = 20.0

Describe = dict[str, Any]


def write_cluster_configs(
    root: Path, n: int, session_timeout_ms: int, controllers: int | None = None, **settings: Any
) -> list[Path]:
    """`raftlog dev --nodes n --port 0`'s configs: DIR/node-<id>/node.toml on free ports,
    plus any other node settings (e.g. connection_idle_ms_max=1000); nodes after the first
    `controllers` (None: none) are broker-only."""
    return launcher.write_cluster_configs(
        root,
        PortPlan.picked(n, HOST),
        [HOST] * n,
        {"broker_session_timeout_ms": session_timeout_ms, **settings},
        controllers=controllers,
    )


class NodeProcess(BrokerProcess):
    """One `raftlog node --config PATH` process; restartable from the same config.

    Reuses BrokerProcess's stop, kill9, health and log checks; only the command line and the
    ready check differ (the client address is fixed by the config, and the ready file must name
    this node and that address).
    """

    def __init__(self, config_path: Path, log_dir: Path):
        self.config_path = config_path
        self.config = NodeConfig.load(str(config_path))
        self.node_id = self.config.node_id
        super().__init__(Path(self.config.data_dir), log_dir, name=f"node {self.node_id}")
        self.log_stem = f"node-{self.node_id}"
        host, _, port = self.config.client_listener.rpartition(":")
        self.host, self.port = host, int(port)

    @property
    def raft_address(self) -> str:
        return self.config.voters[self.node_id]

    def command_line(self) -> list[str]:
        return node_command(self.config_path)

    def check_ready(self, info: dict[str, Any]) -> None:
        got = (info["node_id"], info["client_address"])
        assert got == (self.node_id, self.bootstrap), (
            f"ready file says {info}, expected node {self.node_id} on {self.bootstrap}"
        )
        self.kafka_address = info.get("kafka_address")
        # The node writes its pid where `raftlog dev` users (and scripts) look for it.
        pid = int((self.data_dir / "node.pid").read_text())
        assert self.proc is not None and pid == self.proc.pid, (
            f"node.pid says {pid}, the process is {self.proc and self.proc.pid}"
        )


class Cluster:
    """Nodes 1..n of one cluster under `root`; `nodes[i]` is node i."""

    def __init__(
        self,
        root: Path,
        n: int = 3,
        session_timeout_ms: int = 1500,
        controllers: int | None = None,
        **settings: Any,
    ):
        self.root = root
        self.session_timeout_ms = session_timeout_ms
        paths = write_cluster_configs(root / "data", n, session_timeout_ms, controllers, **settings)
        self.nodes = {
            i + 1: NodeProcess(path, root / "logs" / f"node-{i + 1}")
            for i, path in enumerate(paths)
        }

    @property
    def bootstrap(self) -> str:
        """Every node's client address: what a client that survives any one failure uses."""
        return ",".join(node.bootstrap for node in self.nodes.values())

    @property
    def kafka_bootstrap(self) -> str:
        """Every node's Kafka listener address (from its config): Kafka's clients' bootstrap."""
        return ",".join(str(node.config.kafka_listener) for node in self.nodes.values())

    def start(self, *node_ids: int) -> None:
        """Start the given nodes (all if none) together: each waits for a quorum to form."""
        ids = node_ids or tuple(self.nodes)
        for i in ids:
            self.nodes[i].launch()
        for i in ids:
            self.nodes[i].wait_started()

    def live(self) -> list[NodeProcess]:
        return [n for n in self.nodes.values() if n.running()]

    def kill9(self, *node_ids: int) -> None:
        for i in node_ids:
            self.nodes[i].kill9()

    # -- observing the cluster ---------------------------------------------------------------

    def describe(self, node_id: int) -> Describe:
        """`describe_cluster()` as node `node_id` sees it (its own local metadata copy)."""
        with Admin(self.nodes[node_id].bootstrap, request_timeout_ms=DESCRIBE_TIMEOUT_MS) as a:
            d = a.describe_cluster()
        assert d["node_id"] == node_id, d
        return d

    def _views(self, via: int | None = None) -> Iterator[Describe]:
        for node in self.live() if via is None else [self.nodes[via]]:
            try:
                yield self.describe(node.node_id)
            except RaftlogError:
                continue  # a node between its kill and its process exit; asked again next poll

    def wait_view(
        self,
        predicate: Callable[[Describe], bool],
        timeout_s: float,
        what: str,
        via: int | None = None,
    ) -> Describe:
        """Poll the live nodes (or only node `via`) until one's view satisfies `predicate`;
        return that view."""
        last: list[Describe] = []

        def check() -> Describe | None:
            for d in self._views(via):
                last[:] = [d]
                if predicate(d):
                    return d
            return None

        try:
            return wait_for(check, timeout_s, what, interval_s=POLL_INTERVAL_S)
        except AssertionError as e:
            raise AssertionError(f"{e}; last view: {last[0] if last else None}") from None

    def wait_every_view(
        self, predicate: Callable[[Describe], bool], timeout_s: float, what: str
    ) -> list[Describe]:
        """Poll until every live node's own view satisfies `predicate` (followers may lag)."""
        last: list[Describe] = []

        def check() -> list[Describe] | None:
            views = list(self._views())
            last[:] = views
            ok = len(views) == len(self.live()) and all(predicate(d) for d in views)
            return views if ok else None

        try:
            return wait_for(check, timeout_s, what, interval_s=POLL_INTERVAL_S)
        except AssertionError as e:
            raise AssertionError(f"{e}; last views: {last}") from None

    def wait_views_agree(
        self, predicate: Callable[[Describe], bool], timeout_s: float, what: str
    ) -> Describe:
        """Poll until every live node's view satisfies `predicate` and all of them hold the
        same brokers and partitions (the metadata may still move meanwhile: a follower
        rejoining an ISR, a broker re-registering; they must agree on where it is now)."""

        def same(d: Describe) -> tuple[object, object]:
            return d["brokers"], d["partitions"]

        def check(d: Describe) -> bool:
            return predicate(d) and same(d) == same(views[0])

        views: list[Describe] = []

        def agree() -> Describe | None:
            views[:] = list(self._views())
            ok = len(views) == len(self.live()) and all(check(d) for d in views)
            return views[0] if ok else None

        try:
            return wait_for(agree, timeout_s, what, interval_s=POLL_INTERVAL_S)
        except AssertionError as e:
            raise AssertionError(f"{e}; last views: {views}") from None

    def wait_leader(self, topic: str, partition: int = 0, timeout_s: float = 30.0) -> int:
        """The leader of `topic`-`partition` as a live node sees it, once it has one."""

        def found() -> int | None:
            d = self.describe(self.live()[0].node_id)
            for p in d["partitions"]:
                if p["topic"] == topic and p["partition"] == partition and p["leader"] > 0:
                    return int(p["leader"])
            return None

        return wait_for(found, timeout_s, f"a leader of {topic}-{partition}")

    def wait_controller(self, timeout_s: float, exclude: int | None = None) -> int:
        """The node every live node names as controller, once it says it leads; polls."""

        def agreed() -> int | None:
            views = list(self._views())
            if len(views) != len(self.live()) or not views:
                return None
            ids = {d["controller_id"] for d in views}
            if len(ids) != 1:
                return None
            cid = ids.pop()
            if cid < 0 or cid == exclude:
                return None
            leader_view = next((d for d in views if d["node_id"] == cid), None)
            if leader_view is None or not leader_view["quorum"]["this_node_leads"]:
                return None
            return int(cid)

        return wait_for(
            agreed,
            timeout_s,
            f"one controller all live nodes agree on (not {exclude})",
            interval_s=POLL_INTERVAL_S,
        )

    def wait_brokers_settled(self, timeout_s: float) -> Describe:
        """All n brokers registered and unfenced, as the controller sees it."""
        n = len(self.nodes)

        def settled(d: Describe) -> bool:
            return (
                d["quorum"]["this_node_leads"]
                and len(d["brokers"]) == n
                and not any(b["fenced"] for b in d["brokers"])
            )

        return self.wait_view(settled, timeout_s, f"{n} registered, unfenced brokers")

    # -- teardown ----------------------------------------------------------------------------

    def shutdown_and_check(self) -> list[str]:
        """Stop every running node (SIGTERM, all at once, then wait) and list the problems."""
        return close_all(list(self.nodes.values()), STOP_ALL_TIMEOUT_S)


@contextlib.contextmanager
def started_cluster(
    root: Path,
    n: int = 3,
    session_timeout_ms: int = 1500,
    settle_s: float = 30.0,
    prepare: Callable[[Cluster], object] | None = None,
    **settings: Any,
) -> Iterator[Cluster]:
    """A fixture's body: n nodes started and settled (all registered and unfenced); at the
    end every node is stopped and the test fails on any problem shutdown_and_check finds.
    `prepare` runs before the nodes start (e.g. mounts their log directories); `settings` are
    other node settings (e.g. connection_idle_ms_max=1000)."""
    c = Cluster(root, n=n, session_timeout_ms=session_timeout_ms, **settings)
    if prepare is not None:
        prepare(c)
    try:
        c.start()
        c.wait_brokers_settled(settle_s)
        yield c
    finally:
        problems = c.shutdown_and_check()
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)
