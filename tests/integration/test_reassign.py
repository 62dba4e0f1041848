"""Partition reassignment (KIP-455) on a real 4-node cluster (3 voters, node 4 broker-only),
through `raftlog partitions reassign` and the Admin API: a partition's replicas move under a
steady acks=all load (the joining replica catches up and enters the ISR, then the leaving one
goes and its log is deleted; every acknowledged record is read back once); a move whose target
broker is down waits, survives a controller kill and completes when the broker returns; a move
cancelled midway goes back to the original replicas."""

from __future__ import annotations

import json
import threading
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
