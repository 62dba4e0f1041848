"""Partition reassignment (KIP-455) on a real 4-node cluster (3 voters, node 4 broker-only),
through `raftlog partitions reassign` and the Admin API: a partition's replicas move under a
steady acks=all load (the joining replica catches up and enters the ISR, then the leaving one
goes and its log is deleted; every acknowledged record is read back once); a move whose target
broker is down waits, survives a controller kill and completes when the broker returns; a move
cancelled midway goes back to the original replicas."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin, Consumer, Producer, RecordFuture
from raftlog.topics import TopicPartition
from tests.integration._cluster import Cluster, Describe, started_cluster
from tests.integration._support import run_cli, wait_for

TOPIC = "moving"
WAIT_S = 60.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, 4, controllers=3) as c:
        yield c


def _partition(d: Describe) -> dict[str, object]:
    return next(p for p in d["partitions"] if p["topic"] == TOPIC)


def _topic_in_sync(cluster: Cluster) -> tuple[Describe, list[int], int]:
    """The topic (one partition, RF 3, min ISR 2) fully in sync: the view, its replicas, and
    the one broker that holds none."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
    d = cluster.wait_view(
        lambda d: any(p["topic"] == TOPIC and len(p["isr"]) == 3 for p in d["partitions"]),
        WAIT_S,
        "the partition fully in sync",
    )
    replicas = list(_partition(d)["replicas"])  # type: ignore[call-overload]
    return d, replicas, next(b for b in (1, 2, 3, 4) if b not in replicas)


class Production:
    def __init__(self, bootstrap: str):
        self.stopped = threading.Event()
        self.futures: list[tuple[bytes, RecordFuture]] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(bootstrap,), daemon=True)
        self.thread.start()

    def _run(self, bootstrap: str) -> None:
        try:
            with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=2) as p:
                i = 0
                while not self.stopped.wait(0.002):
                    value = b"v%d" % i
                    self.futures.append((value, p.send(TOPIC, value, partition=0)))
                    i += 1
                p.flush(30)
        except BaseException as e:
            self.error = e

    def stop(self) -> list[bytes]:
        self.stopped.set()
        self.thread.join(60)
        assert not self.thread.is_alive() and self.error is None, self.error
        return [v for v, f in self.futures if f.exception(30) is None]


def test_replicas_move_to_another_broker_under_load_and_nothing_acknowledged_is_lost(
    cluster: Cluster,
) -> None:
    _, replicas, spare = _topic_in_sync(cluster)
    with Admin(cluster.bootstrap) as admin:
        leaving = replicas[-1]
        target = [spare, *replicas[:-1]]
        production = Production(cluster.bootstrap)
        try:
            wait_for(lambda: len(production.futures) > 500, WAIT_S, "records flowing")
            result = admin.alter_partition_reassignments({TopicPartition(TOPIC, 0): target})
            assert result == {TopicPartition(TOPIC, 0): None}, result
            d = cluster.wait_view(
                lambda d: _partition(d)["replicas"] == target and not _partition(d)["adding"],
                WAIT_S,
                f"replicas moved to {target}",
            )
            assert sorted(_partition(d)["isr"]) == sorted(target), d  # type: ignore[call-overload]
            gone = cluster.nodes[leaving].config.data_dir
            wait_for(
                lambda: not (Path(gone) / "logs" / f"{TOPIC}-0").exists(),
                WAIT_S,
                f"node {leaving}'s log of {TOPIC}-0 deleted",
            )
            wait_for(lambda: len(production.futures) > 1500, WAIT_S, "records after the move")
        finally:
            acked = production.stop()

    _read_back_once(cluster, acked)


def test_a_decommissioned_leader_is_emptied_under_load_then_killed_and_nothing_is_lost(
    cluster: Cluster,
) -> None:
    """`raftlog broker decommission` on the partition's leader under a steady acks=all load:
    its replica moves to the spare broker, leadership moves off it, it holds nothing and can
    be killed with every partition fully in sync; every acknowledged record is read back."""
    d, _, spare = _topic_in_sync(cluster)
    leader = int(_partition(d)["leader"])  # type: ignore[call-overload]
    production = Production(cluster.bootstrap)
    try:
        wait_for(lambda: len(production.futures) > 500, WAIT_S, "records flowing")
        out = run_cli(
            "broker", "decommission", str(leader), "--timeout", "60", "-b", cluster.bootstrap
        )
        text = out.stdout + out.stderr
        assert out.returncode == 0, text
        assert f"Broker {leader} holds no replica: it can be stopped." in text, text
        d = cluster.wait_view(
            lambda d: not _partition(d)["adding"] and len(_partition(d)["isr"]) == 3,  # type: ignore[arg-type]
            WAIT_S,
            "the partition fully in sync without the leaving broker",
        )
        p = _partition(d)
        assert leader not in p["replicas"] and spare in p["replicas"], p  # type: ignore[operator]
        assert p["leader"] != leader, p
        cluster.kill9(leader)
        n = len(production.futures)
        wait_for(lambda: len(production.futures) > n + 500, WAIT_S, "records after the kill")
    finally:
        acked = production.stop()
    _read_back_once(cluster, acked)
    # Nothing left to move: the plan is empty and the command says so at once.
    out = run_cli("broker", "decommission", str(leader), "--dry-run", "-b", cluster.bootstrap)
    assert out.returncode == 0 and json.loads(out.stdout)["partitions"] == [], out.stdout


def _read_back_once(cluster: Cluster, acked: list[bytes]) -> None:
    """Every acknowledged value is in the partition exactly once."""
    tp = TopicPartition(TOPIC, 0)
    with Admin(cluster.bootstrap) as admin:
        end = admin.list_offsets({tp: -1})[tp][0]
    values: list[bytes] = []
    with Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])

        def done() -> bool:
            values.extend(r.value for r in c.poll(200).get(tp, []))
            return len(values) >= end

        wait_for(done, WAIT_S, "every record read back")
    counts = Counter(values)
    lost = [v for v in acked if counts[v] == 0]
    twice = [v for v, n in counts.items() if n > 1]
    assert not lost and not twice, (len(acked), lost[:5], twice[:5])


def _plan(path: Path, target: list[int]) -> Path:
    doc = {"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": target}]}
    path.write_text(json.dumps(doc))
    return path


def _reassign(cluster: Cluster, *args: str) -> tuple[int, str]:
    out = run_cli("partitions", "reassign", *args, "-b", cluster.bootstrap)
    return out.returncode, out.stdout + out.stderr


def test_a_move_to_a_broker_that_is_down_waits_survives_a_controller_kill_and_completes(
    cluster: Cluster, tmp_path: Path
) -> None:
    d, replicas, spare = _topic_in_sync(cluster)
    target = [spare, *replicas[:-1]]
    plan = _plan(tmp_path / "plan.json", target)

    code, out = _reassign(cluster, "--generate", "--topics", TOPIC, "--brokers", "1,2,3,4")
    assert code == 0 and "Proposed partition reassignment configuration" in out, out
    proposed = json.loads(out.strip().splitlines()[-1])
    assert len(proposed["partitions"][0]["replicas"]) == 3, proposed

    cluster.kill9(spare)
    code, out = _reassign(cluster, "--plan", str(plan), "--execute")
    assert code == 0 and f"started reassignment of partitions {TOPIC}-0" in out, out
    code, out = _reassign(cluster, "--plan", str(plan), "--verify")
    assert code == 1 and "still in progress" in out and f"waiting for [{spare}]" in out, out

    # The controller goes; the move is metadata, so it is still under way afterwards.
    controller = int(d["controller_id"])
    if controller != spare:
        cluster.kill9(controller)
        cluster.nodes[controller].start()
    cluster.nodes[spare].start()
    wait_for(
        lambda: _reassign(cluster, "--plan", str(plan), "--verify")[0] == 0,
        WAIT_S,
        f"the move to {target} completed once node {spare} was back",
    )


def test_a_move_cancelled_midway_goes_back_to_the_original_replicas(
    cluster: Cluster, tmp_path: Path
) -> None:
    _, replicas, spare = _topic_in_sync(cluster)
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as p:
        for i in range(100):
            p.send(TOPIC, b"%d" % i, partition=0)
        p.flush(30)
    plan = _plan(tmp_path / "plan.json", [spare, *replicas[1:]])
    cluster.kill9(spare)  # it cannot catch up: the move stays under way
    assert _reassign(cluster, "--plan", str(plan), "--execute")[0] == 0
    d = cluster.wait_view(lambda d: bool(_partition(d)["adding"]), WAIT_S, "a move under way")
    code, out = _reassign(cluster, "--plan", str(plan), "--cancel")
    assert code == 0 and f"cancelled reassignment of partitions {TOPIC}-0" in out, out
    # The original replicas again (as in Kafka, in the order the move listed them: the
    # leaving ones last).
    d = cluster.wait_view(
        lambda d: (
            sorted(_partition(d)["replicas"]) == sorted(replicas)  # type: ignore[call-overload]
            and not _partition(d)["adding"]
        ),
        WAIT_S,
        f"the replicas back to {sorted(replicas)}",
    )
    assert spare not in _partition(d)["isr"], d  # type: ignore[operator]
    code, out = _reassign(cluster, "--plan", str(plan), "--verify")
    assert code == 1 and "no move is under way" in out, out
    code, out = _reassign(cluster, "--plan", str(plan), "--cancel")
    assert code == 1 and "no reassignment is under way" in out, out
    with Admin(cluster.bootstrap) as admin:
        tp = TopicPartition(TOPIC, 0)
        assert admin.list_offsets({tp: -1})[tp][0] == 100


def test_a_throttled_move_copies_at_most_the_throttle_and_verify_removes_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    """6 MB to copy at 1 MB/s: the joining replica cannot be in sync in under 4 s (a lower
    bound: a slow machine only makes the move longer), whatever an unthrottled copy takes."""
    _, replicas, spare = _topic_in_sync(cluster)
    value = b"x" * 10_000
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5) as p:
        for _ in range(600):
            p.send(TOPIC, value, partition=0)
        p.flush(60)
    plan = _plan(tmp_path / "plan.json", [spare, *replicas[:-1]])
    started = time.monotonic()
    code, out = _reassign(cluster, "--plan", str(plan), "--execute", "--throttle", "1000000")
    assert code == 0 and "throttle is 1000000 bytes/s" in out, out
    cluster.wait_every_view(
        lambda d: d["replication_throttle"] == 1_000_000, WAIT_S, "the throttle everywhere"
    )
    verified: list[str] = []

    def verify() -> bool:
        code, out = _reassign(cluster, "--plan", str(plan), "--verify")
        verified.append(out)
        return code == 0

    wait_for(verify, WAIT_S, "the throttled move completed")
    took = time.monotonic() - started
    assert took >= 4.0, f"6 MB moved in {took:.1f} s at a 1 MB/s throttle"
    # The move is done and no other is under way: --verify removed the throttle.
    assert "Throttle was removed." in verified[-1], verified[-1]
    cluster.wait_every_view(
        lambda d: d["replication_throttle"] == 0, WAIT_S, "the throttle removed everywhere"
    )
    # --throttle belongs to --execute only.
    code, out = _reassign(cluster, "--plan", str(plan), "--verify", "--throttle", "5")
    assert code != 0 and "--throttle goes with --execute" in out, out


def test_under_load_a_throttled_move_survives_the_controller_and_target_killed_then_a_cancel(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A steady acks=all load throughout: a throttled move is under way when the controller
    and the joining broker are killed; both come back and the move completes. A second move
    is cancelled midway and the replicas go back. Every acknowledged record is read back once."""
    d, replicas, spare = _topic_in_sync(cluster)
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5) as p:
        for i in range(300):  # 3 MB to copy: seconds at the throttle
            p.send(TOPIC, b"fill%d-" % i + b"x" * 10_000, partition=0)
        p.flush(60)
    target = [spare, *replicas[:-1]]
    plan = _plan(tmp_path / "plan.json", target)
    production = Production(cluster.bootstrap)
    try:
        wait_for(lambda: len(production.futures) > 300, WAIT_S, "records flowing")
        code, out = _reassign(cluster, "--plan", str(plan), "--execute", "--throttle", "500000")
        assert code == 0, out
        d = cluster.wait_view(lambda d: bool(_partition(d)["adding"]), WAIT_S, "the move under way")
        controller = int(d["controller_id"])
        killed = sorted({controller, spare})
        cluster.kill9(*killed)
        n = len(production.futures)
        wait_for(lambda: len(production.futures) > n + 300, WAIT_S, "records with them down")
        for node in killed:
            cluster.nodes[node].start()
        wait_for(
            lambda: _reassign(cluster, "--plan", str(plan), "--verify")[0] == 0,
            WAIT_S,
            f"the move to {target} completed once nodes {killed} were back",
        )

        # A second move, cancelled while its joining replica is still catching up.
        back = _plan(tmp_path / "back.json", replicas)
        code, out = _reassign(cluster, "--plan", str(back), "--execute", "--throttle", "100000")
        assert code == 0, out
        cluster.wait_view(lambda d: bool(_partition(d)["adding"]), WAIT_S, "the second move")
        code, out = _reassign(cluster, "--plan", str(back), "--cancel")
        assert code == 0 and "cancelled" in out, out
        cluster.wait_view(
            lambda d: (
                sorted(_partition(d)["replicas"]) == sorted(target)  # type: ignore[call-overload]
                and not _partition(d)["adding"]
            ),
            WAIT_S,
            f"the replicas back to {sorted(target)}",
        )
        n = len(production.futures)
        wait_for(lambda: len(production.futures) > n + 300, WAIT_S, "records after the cancel")
    finally:
        acked = production.stop()
    _read_back_once(cluster, acked)
