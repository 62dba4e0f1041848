"""Kafka consumer groups with Kafka's own clients, on a 3-node cluster (RF=3, 6 partitions).

Each member is a process of its own (tests/kafka/group_worker.py), so it can be killed with
-9. For confluent-kafka, kafka-python and aiokafka: three members split the partitions; one is
killed with -9 while records arrive and another starts; every record is processed at least
once, the group's committed offsets never go back, and a clean close (LeaveGroup) hands the
member's partitions on long before its session timeout would have. Then confluent-kafka's
cooperative-sticky members keep their partitions while another joins, and kcat's balanced
consumer (-G) reads a topic as a group. The group is watched through raftlog's own Admin
(`raftlog group describe`'s source): one registry for both kinds of groups.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog.client import Admin
from raftlog.errors import GroupIdNotFoundError
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._support import wait_for
from tests.kafka import group_worker
from tests.kafka.tools import need_kcat

REPO = Path(__file__).resolve().parents[2]
TOPIC, PARTITIONS, RECORDS = "orders", 6, 3000
# Generous for a loaded 2-core machine; a healthy group meets each with a wide margin.
SETTLE_S = 90.0
CK, COOPERATIVE = "confluent-kafka", "cooperative-sticky"
CLIENTS = [CK, "kafka-python", "aiokafka"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started_cluster(tmp_path_factory.mktemp("kgroups"), 3) as c:
        yield c


def worker_env() -> dict[str, str]:
    """This environment with the repository first on the worker's import path."""
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


class Worker:
    """One group member process writing what it processed to `path`."""

    def __init__(
        self, client: str, cluster: Cluster, group: str, topic: str, path: Path, **kw: Any
    ):
        self.path = path
        self.ended = False  # by the test: kill9 or close
        assignor = kw.get("assignor", "range")
        instance = [kw["instance"]] if kw.get("instance") else []
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.kafka.group_worker",
                client,
                cluster.kafka_bootstrap,
                group,
                topic,
                str(path),
                assignor,
                *instance,
            ],
            cwd=REPO,
            env=worker_env(),
            stdout=subprocess.DEVNULL,
            stderr=open(str(path) + ".err", "wb"),  # noqa: SIM115 (the process owns it)
        )

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []

    def values(self) -> set[str]:
        return {
            line.split()[2] for line in self.lines() if not line.startswith(("assigned", "revoked"))
        }

    def tail(self, n: int = 25) -> list[str]:
        """The last lines of the member's stderr and of its record log."""
        err = Path(str(self.path) + ".err")
        errs = err.read_text(errors="replace").splitlines()[-n:] if err.exists() else []
        return errs + self.lines()[-3:]

    def kill9(self) -> None:
        self.ended = True
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def close(self) -> None:
        self.ended = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def produce(cluster: Cluster, topic: str, prefix: str, n: int) -> set[str]:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all", "linger.ms": 5}
    )
    values = [f"{prefix}-{i:06d}" for i in range(n)]
    for i, v in enumerate(values):
        producer.produce(topic, v.encode(), key=str(i % 97).encode())
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "records left unacknowledged"
    return set(values)


# The last description `stable` saw per group, for the message of a wait that timed out.
LAST_SEEN: dict[str, dict[str, Any]] = {}


def stable(admin: Admin, group: str, members: int) -> dict[str, Any] | None:
    """The group's description once Stable with `members` members owning every partition."""
    try:
        d = admin.describe_group(group)
    except GroupIdNotFoundError:  # no member has joined yet
        return None
    LAST_SEEN[group] = d
    owned = [tp for m in d.get("members", []) for tp in m.get("assignment", [])]
    if (
        d.get("state") == "Stable"
        and len(d.get("members", [])) == members
        and len(owned) == PARTITIONS
    ):
        return d
    return None


def settle(
    admin: Admin, group: str, members: int, what: str, workers: list[Worker]
) -> dict[str, Any]:
    """Wait for `stable`; fail at once if a member process ended by itself, and at the
    deadline with the group's last state and each member's log tail, so a group that never
    settles says why."""

    def settled() -> dict[str, Any] | None:
        for w in workers:
            if w.proc.poll() is not None and not w.ended:
                raise AssertionError(
                    f"{what}: member {w.path.name} exited by itself ({w.proc.returncode}): "
                    f"{w.tail()}"
                )
        return stable(admin, group, members)

    try:
        return wait_for(settled, SETTLE_S, what)
    except AssertionError as e:
        if "exited by itself" in str(e):
            raise
        d = LAST_SEEN.get(group, {})
        seen = {k: v for k, v in d.items() if k not in ("members", "partitions")}
        members_seen = [(m.get("member_id"), m.get("assignment")) for m in d.get("members", [])]
        tails = {w.path.name: w.tail() for w in workers}
        raise AssertionError(f"{e}; last seen {seen} members {members_seen}; logs {tails}") from e


class CommitWatch:
    """Samples the group's committed offsets in a thread; `regressions` lists any that went
    back (a committed offset must never move backwards)."""

    def __init__(self, bootstrap: str, group: str):
        self.group, self.bootstrap = group, bootstrap
        self.regressions: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seen: dict[tuple[str, int], int] = {}
        with Admin(self.bootstrap) as admin:
            while not self._stop.wait(0.2):
                try:
                    partitions = admin.describe_group(self.group).get("partitions", [])
                except Exception:  # a coordinator moving: sample again
                    continue
                for p in partitions:
                    key, offset = (p["topic"], p["partition"]), p["committed"]
                    if offset is None:
                        continue
                    if offset < seen.get(key, -1):
                        self.regressions.append(f"{key}: {seen[key]} -> {offset}")
                    seen[key] = max(offset, seen.get(key, -1))

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(10)
        return self.regressions


@pytest.mark.parametrize("client", CLIENTS)
def test_a_group_splits_partitions_survives_a_kill9_and_a_clean_leave(
    cluster: Cluster, tmp_path: Path, client: str
) -> None:
    group, topic = f"g-{client}", f"{TOPIC}-{client}"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
        workers = [Worker(client, cluster, group, topic, tmp_path / f"w{i}") for i in range(3)]
        watch = CommitWatch(cluster.bootstrap, group)
        try:
            d = settle(admin, group, 3, f"3 {client} members sharing the partitions", workers)
            assert d["protocol_type"] == "consumer" and all(m["assignment"] for m in d["members"])
            sent = produce(cluster, topic, "a", RECORDS)
            wait_for(
                lambda: len(set().union(*(w.values() for w in workers))) > RECORDS // 3,
                SETTLE_S,
                "a third processed",
            )
            workers[0].kill9()
            workers.append(Worker(client, cluster, group, topic, tmp_path / "w3"))
            sent |= produce(cluster, topic, "b", RECORDS)
            wait_for(
                lambda: set().union(*(w.values() for w in workers)) >= sent,
                SETTLE_S,
                "every record processed after the kill -9",
            )
            settle(admin, group, 3, "the group stable again without the killed member", workers)
            # A clean close leaves at once: the rest own everything long before the member's
            # session timeout would have expired it.
            started = time.monotonic()
            workers[1].close()
            settle(admin, group, 2, "the group stable after a clean leave", workers)
            handed_on_s = time.monotonic() - started
            print(f"{client}: a clean leave handed its partitions on in {handed_on_s:.2f} s")
            assert handed_on_s < group_worker.SESSION_TIMEOUT_MS / 1000, handed_on_s
        finally:
            for w in workers:
                w.close()
            regressions = watch.stop()
    assert not regressions, regressions


def owned(admin: Admin, group: str) -> dict[str, set[int]]:
    """member id -> the partitions it owns now, from the group's registry."""
    d = admin.describe_group(group)
    return {m["member_id"]: {p for _, p in m["assignment"]} for m in d.get("members", [])}


def test_cooperative_sticky_members_keep_their_partitions_while_another_joins(
    cluster: Cluster, tmp_path: Path
) -> None:
    group, topic = "g-cooperative", f"{TOPIC}-cooperative"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS, 3)
        workers = [
            Worker(CK, cluster, group, topic, tmp_path / f"w{i}", assignor=COOPERATIVE)
            for i in range(2)
        ]
        try:
            settle(admin, group, 2, "2 cooperative members stable", workers)
            before = owned(admin, group)
            workers.append(Worker(CK, cluster, group, topic, tmp_path / "w2", assignor=COOPERATIVE))
            wait_for(
                lambda: stable(admin, group, 3) and all(owned(admin, group).values()),
                SETTLE_S,
                "3 cooperative members, each owning partitions",
            )
            after = owned(admin, group)
        finally:
            for w in workers:
                w.close()
    for member, partitions in before.items():
        # Sticky: what a member still owns it owned before; incremental: it never gave up
        # everything, since librdkafka revokes only the partitions that move.
        assert after[member] and after[member] <= partitions, (member, partitions, after)
    for w in workers[:2]:
        revoked = [line for line in w.lines() if line.startswith("revoked")]
        assert all(
            set(line.split()[1].split(",")) != {str(p) for p in range(PARTITIONS)}
            for line in revoked
            if len(line.split()) > 1
        ), revoked


def test_kcat_balanced_consumer_reads_a_topic_as_a_group_and_commits(
    cluster: Cluster, tmp_path: Path
) -> None:
    need_kcat()
    from tests.kafka.tools import KCAT

    group, topic = "g-kcat", f"{TOPIC}-kcat"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, 3, 3)
        sent = produce(cluster, topic, "k", 600)
        proc = subprocess.run(
            [
                KCAT,
                "-b",
                cluster.kafka_bootstrap,
                "-G",
                group,
                topic,
                "-o",
                "beginning",
                "-e",
                "-q",
                "-f",
                "%p %o %s\n",
                "-X",
                "auto.commit.interval.ms=100",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        got = {line.split()[2] for line in proc.stdout.splitlines()}
        assert got == sent
        d = admin.describe_group(group)
        assert d["protocol_type"] == "consumer" and d["state"] == "Empty"
        assert sum(p["committed"] or 0 for p in d["partitions"]) == len(sent)


def test_a_static_member_restarted_in_its_session_gets_its_partitions_back_without_a_rebalance(
    cluster: Cluster, tmp_path: Path
) -> None:
    """group.instance.id (KIP-345): a member killed with -9 and started again within its
    session timeout keeps its member id and partitions; the group does not rebalance."""
    group, topic = "g-static", f"{TOPIC}-static"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS, 3)
        leader = Worker(CK, cluster, group, topic, tmp_path / "i0", instance="i0")
        settle(admin, group, 1, "the first static member", [leader])
        other = Worker(CK, cluster, group, topic, tmp_path / "i1", instance="i1")
        workers = [leader, other]
        try:
            before = settle(admin, group, 2, "2 static members", workers)
            mine = {m["instance_id"]: m for m in before["members"]}["i1"]
            other.kill9()
            workers.append(Worker(CK, cluster, group, topic, tmp_path / "i1-again", instance="i1"))
            wait_for(
                lambda: any(x.startswith("assigned") for x in workers[-1].lines()),
                SETTLE_S,
                "the restarted static member's assignment",
            )
            after = admin.describe_group(group)
        finally:
            for w in workers:
                w.close()
    again = {m["instance_id"]: m for m in after["members"]}["i1"]
    assert after["generation"] == before["generation"], (before, after)
    assert (again["member_id"], again["assignment"]) == (mine["member_id"], mine["assignment"])


def test_the_coordinators_node_killed_during_a_rebalance(tmp_path: Path) -> None:
    """The group coordinator is the active controller's node: kill -9 it while a member joins.
    A new controller takes the group where Raft left it; the members find it (FindCoordinator),
    the rebalance completes, every record is processed and no commit goes back."""
    group, topic = "g-failover", f"{TOPIC}-failover"
    with started_cluster(tmp_path / "cluster", 3) as c, Admin(c.bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
        workers = [Worker(CK, c, group, topic, tmp_path / f"w{i}") for i in range(2)]
        watch = CommitWatch(c.bootstrap, group)
        try:
            settle(admin, group, 2, "2 members stable", workers)
            sent = produce(c, topic, "a", 1000)
            controller = int(admin.describe_cluster()["controller_id"])
            workers.append(Worker(CK, c, group, topic, tmp_path / "w2"))
            # Its join is applied: the group rebalances (its members rejoin) when the node goes.
            rebalancing = wait_for(
                lambda: (
                    (d := admin.describe_group(group))["state"] != "Stable"
                    and len(d["members"]) == 3
                    and d
                ),
                SETTLE_S,
                "the third member's join under way",
            )
            c.kill9(controller)
            c.nodes[controller].start()
            settle(admin, group, 3, "3 members under a new coordinator", workers)
            sent |= produce(c, topic, "b", 1000)
            wait_for(
                lambda: set().union(*(w.values() for w in workers)) >= sent,
                SETTLE_S,
                "every record processed across the failover",
            )
        finally:
            for w in workers:
                w.close()
            regressions = watch.stop()
    assert not regressions, regressions
    assert rebalancing["state"] in ("PreparingRebalance", "CompletingRebalance"), rebalancing
