"""Multi-node mode: three combined controller+broker processes on the Raft metadata quorum.

What these tests hold the cluster to, with real processes killed by SIGKILL:
- the controller (Raft leader) fails over within seconds and the metadata survives it, and a
  full crash of every node;
- a silent broker is fenced after its session timeout, its leaderships move to another ISR
  member (never outside the ISR) or the partition goes offline, and a restarted broker comes
  back with a strictly larger broker epoch and leads again at a higher leader epoch;
- clients route by metadata across the brokers and follow a leader change without user code;
- `raftlog cluster status` and `raftlog dev --nodes 3` behave as documented.

Data replication itself (acks=all under kill -9 and SIGSTOP, truncation of a deposed leader)
is held to its promises in test_replication.py; here it is only what a failover relies on.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog.client import Admin, Producer
from raftlog.metadata.cluster import PARTITION_VIEW_KEYS
from raftlog.readiness import read_ready_file
from tests.integration._cluster import Cluster, Describe, NodeProcess, started_cluster
from tests.integration._support import (
    _child_env,
    cli_command,
    consume_exactly,
    run_cli,
    wait_for,
)

SESSION_TIMEOUT_MS = 1500
# The broker's heartbeat interval (NodeConfig's default; the configs here do not set it).
HEARTBEAT_INTERVAL_MS = 500
# Generous for a loaded 2-core machine; a healthy cluster meets each with a wide margin.
FAILOVER_MAX_S = 10.0
FENCE_DEADLINE_S = 15.0
SETTLE_DEADLINE_S = 30.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, 3, SESSION_TIMEOUT_MS, SETTLE_DEADLINE_S) as c:
        yield c


# -- reading describe_cluster -----------------------------------------------------------------


def partition_map(d: Describe) -> dict[tuple[str, int], dict[str, Any]]:
    return {
        (p["topic"], p["partition"]): {
            "leader": p["leader"],
            "epoch": p["leader_epoch"],
            "replicas": p["replicas"],
            "isr": p["isr"],
        }
        for p in d["partitions"]
    }


def layout(d: Describe) -> dict[tuple[str, int], list[int]]:
    """What must never change without a reassignment: each partition's replica list."""
    return {tp: p["replicas"] for tp, p in partition_map(d).items()}


def brokers(d: Describe) -> dict[int, dict[str, Any]]:
    return {
        b["node_id"]: {
            "address": f"{b['host']}:{b['port']}",
            "epoch": b["broker_epoch"],
            "fenced": b["fenced"],
        }
        for b in d["brokers"]
    }


def is_fenced(d: Describe, node: int) -> bool:
    return bool(brokers(d)[node]["fenced"])


def create_topic(c: Cluster, name: str, partitions: int, replication_factor: int) -> None:
    with Admin(c.bootstrap) as admin:
        admin.create_topic(name, partitions, replication_factor)
    # Committed on the quorum; the followers' copies (which clients may ask) apply it soon after.
    c.wait_every_view(
        lambda d: sum(1 for p in d["partitions"] if p["topic"] == name) == partitions,
        SETTLE_DEADLINE_S,
        f"topic {name} in every live node's metadata",
    )


def topic_ids_of(c: Cluster) -> dict[str, str]:
    with Admin(c.bootstrap) as admin:
        return {name: t.topic_id for name, t in admin.list_topics().items()}


def produce(bootstrap: str, topic: str, partition: int, n: int, tag: str) -> list[int]:
    """n records to one partition, every one acknowledged; their offsets."""
    with Producer(bootstrap_servers=bootstrap, delivery_timeout_ms=30_000) as producer:
        futures = [
            producer.send(topic, f"{tag}-{i}".encode(), partition=partition) for i in range(n)
        ]
        producer.flush(30)
        return [f.result(0).offset for f in futures]


# -- 1. controller failover, then every node crashes -------------------------------------------


def test_controller_failover_and_full_crash_restart(cluster: Cluster) -> None:
    create_topic(cluster, "alpha", partitions=6, replication_factor=1)
    create_topic(cluster, "beta", partitions=3, replication_factor=3)
    for p in range(6):
        assert produce(cluster.bootstrap, "alpha", p, 20, "before") == list(range(20))
    controller = cluster.wait_controller(FAILOVER_MAX_S)
    before = cluster.describe(controller)
    topic_ids = topic_ids_of(cluster)

    t0 = time.monotonic()
    cluster.kill9(controller)
    new_controller = cluster.wait_controller(FAILOVER_MAX_S, exclude=controller)
    failover_s = time.monotonic() - t0
    print(
        f"\ncontroller failover: node {controller} -> node {new_controller} in {failover_s:.3f} s"
    )
    assert new_controller != controller
    assert failover_s < FAILOVER_MAX_S

    after = cluster.describe(new_controller)
    assert layout(after) == layout(before), "topics or partitions changed in the failover"
    assert after["quorum"]["term"] > before["quorum"]["term"]
    assert after["quorum"]["commit_index"] >= before["quorum"]["commit_index"]
    # The survivors' registrations are untouched; the dead one is still registered.
    assert brokers(after).keys() == brokers(before).keys()
    for node in brokers(before):
        if node != controller:
            assert brokers(after)[node] == brokers(before)[node], node

    # The new controller serves metadata changes...
    create_topic(cluster, "gamma", partitions=2, replication_factor=1)
    gamma_id = topic_ids_of(cluster)["gamma"]
    # ...and fences the dead node once its session times out (counted from the failover: the
    # new controller gives every broker a full session of grace); its RF-1 partitions go
    # offline, keeping their last ISR member.
    fenced = cluster.wait_view(
        lambda d: is_fenced(d, controller),
        FENCE_DEADLINE_S,
        f"node {controller} fenced",
        via=new_controller,
    )
    fence_s = time.monotonic() - t0
    print(f"old controller's broker fenced {fence_s:.3f} s after its kill -9")
    # The survivors' heartbeats reach the new controller: nobody else is fenced.
    assert [n for n, b in brokers(fenced).items() if b["fenced"]] == [controller]
    for (t, p), part in partition_map(fenced).items():
        if part["replicas"] == [controller]:
            assert part["leader"] == -1 and part["isr"] == [controller], (t, p, part)
        else:
            assert part["leader"] != controller and part["leader"] in part["isr"], (t, p, part)
    final = layout(fenced)

    # Every node crashes at once; the cluster comes back from the Raft journals and logs.
    cluster.kill9(*(n.node_id for n in cluster.live()))
    cluster.start()
    restarted = cluster.wait_view(
        lambda d: (
            d["quorum"]["this_node_leads"]
            and all(
                not b["fenced"] and b["epoch"] > brokers(fenced)[node]["epoch"]
                for node, b in brokers(d).items()
            )
            and all(p["leader"] >= 0 for p in partition_map(d).values())
        ),
        SETTLE_DEADLINE_S,
        "every broker re-registered and unfenced, every partition led",
    )
    assert layout(restarted) == final, "topics or partitions changed across the full restart"
    assert sorted(brokers(restarted)) == [1, 2, 3]
    # Clients may ask any node: every one must have caught up before they do. (Not to the
    # view above: followers rejoin ISRs after it, and every node must then agree on that.)
    agreed = cluster.wait_views_agree(
        lambda d: layout(d) == final and all(not b["fenced"] for b in brokers(d).values()),
        SETTLE_DEADLINE_S,
        "every node's metadata caught up after the full restart",
    )
    for (t, p), part in partition_map(agreed).items():
        assert part["leader"] in part["isr"], (t, p, part)
        if len(part["replicas"]) == 1:
            assert part["leader"] == part["replicas"][0], (t, p, part)
    # The same topics, not look-alikes: a re-created topic would have a new id.
    assert topic_ids_of(cluster) == {**topic_ids, "gamma": gamma_id}
    # Each RF-1 partition's leader serves what it acknowledged before the crashes.
    consume_exactly(cluster.nodes[1].bootstrap, "alpha", {p: 20 for p in range(6)})


# -- 2. a broker dies: fenced, partitions reported, comes back ---------------------------------


def test_dead_broker_is_fenced_and_returns_with_new_epoch(cluster: Cluster) -> None:
    create_topic(cluster, "solo", partitions=3, replication_factor=1)
    create_topic(cluster, "triple", partitions=3, replication_factor=3)
    controller = cluster.wait_controller(FAILOVER_MAX_S)
    victim = next(n for n in sorted(cluster.nodes) if n != controller)
    before = cluster.describe(controller)
    victim_solo = [
        p
        for (t, p), part in partition_map(before).items()
        if t == "solo" and part["replicas"] == [victim]
    ]
    assert victim_solo, f"node {victim} hosts no RF-1 partition: {before['partitions']}"
    acked = produce(cluster.bootstrap, "solo", victim_solo[0], 10, "before")
    assert acked == list(range(10))

    t0 = time.monotonic()
    cluster.kill9(victim)
    fenced = cluster.wait_view(
        lambda d: is_fenced(d, victim),
        FENCE_DEADLINE_S,
        f"node {victim} fenced",
        via=controller,
    )
    fence_s = time.monotonic() - t0
    print(
        f"\nbroker {victim} fenced {fence_s:.3f} s after kill -9 (session {SESSION_TIMEOUT_MS} ms)"
    )
    # Not before its session could have run out: the last heartbeat came at most one interval
    # before the kill.
    assert fence_s > (SESSION_TIMEOUT_MS - 2 * HEARTBEAT_INTERVAL_MS) / 1000
    assert brokers(fenced)[victim]["epoch"] == brokers(before)[victim]["epoch"]

    # Every partition, as the controller reports it after the one fence_broker command.
    for tp, was in partition_map(before).items():
        now = partition_map(fenced)[tp]
        assert now["replicas"] == was["replicas"], tp
        if was["replicas"] == [victim]:
            assert (now["leader"], now["isr"]) == (-1, [victim]), (tp, now)
            assert now["epoch"] == was["epoch"] + 1, (tp, now)
        elif was["leader"] == victim:
            assert now["leader"] in [r for r in was["isr"] if r != victim], (tp, now)
            assert now["isr"] == [r for r in was["isr"] if r != victim], (tp, now)
            assert now["epoch"] == was["epoch"] + 1, (tp, now)
        else:
            assert (now["leader"], now["epoch"]) == (was["leader"], was["epoch"]), (tp, now)
            assert now["isr"] == [r for r in was["isr"] if r != victim], (tp, now)
    # Clients see the same: the fenced broker is gone from Metadata, its partition leaderless.
    # (A client may ask any broker, so first every one must have applied the fence.)
    cluster.wait_every_view(
        lambda d: is_fenced(d, victim), FENCE_DEADLINE_S, f"node {victim} fenced on every node"
    )
    with Admin(cluster.bootstrap) as admin:
        assert sorted(b.node_id for b in admin.brokers()) == sorted(set(cluster.nodes) - {victim})
        solo = admin.list_topics()["solo"]
        assert solo.partitions[victim_solo[0]].leader == -1

    cluster.nodes[victim].start()
    back = cluster.wait_view(
        lambda d: not is_fenced(d, victim),
        SETTLE_DEADLINE_S,
        f"node {victim} unfenced after its restart",
        via=controller,
    )
    epoch_before = brokers(before)[victim]["epoch"]
    epoch_after = brokers(back)[victim]["epoch"]
    assert epoch_after > epoch_before
    assert epoch_after > max(b["epoch"] for n, b in brokers(back).items() if n != victim)
    for p in victim_solo:
        now = partition_map(back)[("solo", p)]
        offline = partition_map(fenced)[("solo", p)]
        assert now["leader"] == victim and now["epoch"] > offline["epoch"], now
    for tp, part in partition_map(back).items():
        assert part["leader"] in part["isr"], (tp, part)
    # It leads its partition again, on its own log: appends continue after what it had.
    assert produce(cluster.bootstrap, "solo", victim_solo[0], 5, "after") == list(range(10, 15))


# -- 2b. a paused broker: fenced, then unfenced by its own heartbeats -------------------------


@contextlib.contextmanager
def paused(node: NodeProcess) -> Iterator[None]:
    """SIGSTOP the node (a long GC pause, a frozen VM); SIGCONT on the way out, always."""
    assert node.proc is not None
    node.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        node.proc.send_signal(signal.SIGCONT)


def test_paused_broker_is_fenced_then_unfenced_by_its_heartbeats(cluster: Cluster) -> None:
    create_topic(cluster, "solo", partitions=3, replication_factor=1)
    controller = cluster.wait_controller(FAILOVER_MAX_S)
    victim = next(n for n in sorted(cluster.nodes) if n != controller)
    before = cluster.describe(controller)
    (tp,) = [tp for tp, part in partition_map(before).items() if part["replicas"] == [victim]]
    assert produce(cluster.bootstrap, *tp, 10, "before") == list(range(10))

    with paused(cluster.nodes[victim]):
        fenced = cluster.wait_view(
            lambda d: is_fenced(d, victim),
            FENCE_DEADLINE_S,
            f"paused node {victim} fenced",
            via=controller,  # the paused node cannot answer
        )
        offline = partition_map(fenced)[tp]
        assert (offline["leader"], offline["isr"]) == (-1, [victim]), offline
    back = cluster.wait_view(
        lambda d: not is_fenced(d, victim),
        SETTLE_DEADLINE_S,
        f"node {victim} unfenced after SIGCONT",
        via=controller,
    )
    # The same incarnation heard again: unfenced under its old epoch, not re-registered.
    assert brokers(back)[victim] == brokers(before)[victim]
    now = partition_map(back)[tp]
    assert (now["leader"], now["epoch"]) == (victim, offline["epoch"] + 1), now
    assert produce(cluster.bootstrap, *tp, 5, "after") == list(range(10, 15))


# -- 3. the leader of an RF-3 partition dies: a new leader from the ISR -------------------------


def test_leader_failover_elects_from_isr_and_producer_follows(cluster: Cluster) -> None:
    create_topic(cluster, "rf3", partitions=3, replication_factor=3)
    controller = cluster.wait_controller(FAILOVER_MAX_S)
    before = partition_map(cluster.describe(controller))
    # A partition the controller does not lead: killing its leader keeps the quorum's leader.
    (tp, part), *_ = [(tp, part) for tp, part in before.items() if part["leader"] != controller]
    leader = part["leader"]
    assert part["isr"] == part["replicas"], part

    with Producer(
        bootstrap_servers=cluster.bootstrap,
        acks="all",
        delivery_timeout_ms=60_000,
        retry_backoff_ms=50,
    ) as producer:
        first = [producer.send(tp[0], b"before-%d" % i, partition=tp[1]) for i in range(50)]
        producer.flush(30)
        assert [f.result(0).offset for f in first] == list(range(50))

        t0 = time.monotonic()
        cluster.kill9(leader)
        # Sent while the leader is dead: the producer must find the new one by itself.
        second = [producer.send(tp[0], b"after-%d" % i, partition=tp[1]) for i in range(50)]
        producer.flush(60)
        produce_s = time.monotonic() - t0
        offsets = [f.result(0).offset for f in second]
    print(f"\nproduce to {tp[0]}-{tp[1]} resumed on a new leader {produce_s:.3f} s after kill -9")
    # The new leader was in the ISR, so it has every acknowledged record: offsets go on.
    assert offsets == list(range(50, 100)), offsets

    after = cluster.wait_view(
        lambda d: is_fenced(d, leader),
        FENCE_DEADLINE_S,
        f"node {leader} fenced",
        via=controller,
    )
    now = partition_map(after)[tp]
    assert now["leader"] in part["isr"] and now["leader"] != leader, now
    assert leader not in now["isr"] and now["epoch"] > part["epoch"], now
    assert now["replicas"] == part["replicas"]
    for other_tp, p in partition_map(after).items():
        assert p["leader"] in p["isr"] and leader not in p["isr"], (other_tp, p)

    # The old leader returns, catches up from the new one and rejoins the ISR.
    cluster.nodes[leader].start()
    cluster.wait_view(
        lambda d: sorted(partition_map(d)[tp]["isr"]) == sorted(part["replicas"]),
        SETTLE_DEADLINE_S,
        f"node {leader} back in the ISR of {tp}",
        via=controller,
    )
    ends = {p: 100 if p == tp[1] else 0 for p in range(3)}
    records = consume_exactly(cluster.bootstrap, tp[0], ends)[tp[1]]
    expected = [b"before-%d" % i for i in range(50)] + [b"after-%d" % i for i in range(50)]
    assert [r.value for r in records] == expected


# -- 4. clients route by metadata across the three brokers --------------------------------------


def test_keyed_produce_and_consume_route_across_brokers(cluster: Cluster) -> None:
    create_topic(cluster, "routed", partitions=6, replication_factor=1)
    d = cluster.describe(cluster.wait_controller(FAILOVER_MAX_S))
    leaders = {p: part["leader"] for (t, p), part in partition_map(d).items() if t == "routed"}
    assert set(leaders.values()) == {1, 2, 3}, leaders

    n = 3000
    sent: dict[int, list[bytes]] = {p: [] for p in range(6)}
    key_partition: dict[bytes, int] = {}
    # Bootstrapped from node 2 only: the partitions it does not lead are reached by metadata.
    with Producer(bootstrap_servers=cluster.nodes[2].bootstrap, linger_ms=2) as producer:
        futures = []
        for i in range(n):
            key = b"key-%d" % (i % 97)
            value = b"%s:%d" % (key, i)
            futures.append((key, value, producer.send("routed", value, key=key)))
        producer.flush(60)
        for key, value, fut in futures:
            md = fut.result(0)
            assert key_partition.setdefault(key, md.partition) == md.partition, key
            assert md.offset == len(sent[md.partition]), (md, "offsets must be consecutive")
            sent[md.partition].append(value)
    assert sum(len(v) for v in sent.values()) == n
    assert all(sent.values()), {p: len(v) for p, v in sent.items()}

    # Consumed back through node 3 only: each partition from its own leader, in order.
    got = consume_exactly(
        cluster.nodes[3].bootstrap, "routed", {p: len(v) for p, v in sent.items()}
    )
    for p, records in got.items():
        assert [r.value for r in records] == sent[p], f"routed-{p} out of order"
        assert all(key_partition[r.key] == p for r in records if r.key is not None)
    # Every broker's own log holds exactly its partitions' records.
    with Admin(cluster.nodes[1].bootstrap) as admin:
        (desc,) = admin.describe_topics(["routed"])
    for part in desc.partitions:
        assert part.leader == leaders[part.partition]
        assert part.log_end_offset == len(sent[part.partition]), part


# -- 4b. a topic just created is usable through every broker ------------------------------------


def test_topic_is_usable_through_a_follower_right_after_creation(cluster: Cluster) -> None:
    controller = cluster.wait_controller(FAILOVER_MAX_S)
    follower = next(n for n in sorted(cluster.nodes) if n != controller)
    # Created through the Raft leader (which answers first), used through a follower. Five
    # rounds, so that a lucky scheduling cannot hide the race.
    with (
        Admin(cluster.nodes[controller].bootstrap) as admin,
        Producer(bootstrap_servers=cluster.nodes[follower].bootstrap) as producer,
    ):
        for i in range(5):
            admin.create_topic(f"fresh-{i}", partitions=1, replication_factor=1)
            assert producer.send(f"fresh-{i}", b"x").result(30).offset == 0


# -- 5. the command line: cluster status, and `raftlog dev --nodes 3` ---------------------------


CONTROLLER_LINE = re.compile(r"^  controller (\d+)  (\S+)  (leader|follower)$", re.M)
BROKER_LINE = re.compile(
    r"^  broker (\d+)  (\S+)  replication (\S+)  kafka (\S+)  metrics (\S+)  rack=\S+  "
    r"epoch=(\d+)  (alive|FENCED)$",
    re.M,
)


def cluster_status(bootstrap: str) -> tuple[str, Describe]:
    text = run_cli("cluster", "status", "--bootstrap-server", bootstrap)
    assert text.returncode == 0, text.stderr
    as_json = run_cli("cluster", "status", "--json", "--bootstrap-server", bootstrap)
    assert as_json.returncode == 0, as_json.stderr
    return text.stdout, json.loads(as_json.stdout)


def test_cluster_status_cli(cluster: Cluster) -> None:
    create_topic(cluster, "shown", partitions=3, replication_factor=1)
    controller = cluster.wait_controller(FAILOVER_MAX_S)
    text, st = cluster_status(cluster.bootstrap)

    controllers = CONTROLLER_LINE.findall(text)
    assert sorted(int(c[0]) for c in controllers) == [1, 2, 3], text
    assert [int(c[0]) for c in controllers if c[2] == "leader"] == [controller], text
    assert {int(c[0]): c[1] for c in controllers} == {
        i: n.raft_address for i, n in cluster.nodes.items()
    }
    assert f"leader node {controller}," in text
    assert [(int(b[0]), b[2], b[3], b[4], b[6]) for b in BROKER_LINE.findall(text)] == [
        (
            i,
            n.config.replication_listener,
            n.config.kafka_listener,
            f"http://{n.config.metrics_listener}/metrics",
            "alive",
        )
        for i, n in sorted(cluster.nodes.items())
    ], text
    assert "Partitions: 3, offline: 0" in text, text
    assert len(re.findall(r"^  shown-\d  leader \d", text, re.M)) == 3, text

    assert st["controller_id"] == controller
    assert st["voters"] == [
        {"node_id": i, "address": n.raft_address} for i, n in sorted(cluster.nodes.items())
    ]
    assert st["quorum"]["ready"] is True and st["quorum"]["term"] >= 1
    assert [(b["node_id"], f"{b['host']}:{b['port']}", b["fenced"]) for b in st["brokers"]] == [
        (i, n.bootstrap, False) for i, n in sorted(cluster.nodes.items())
    ]
    # Where followers fetch from each broker: its replication listener.
    assert ["{}:{}".format(*b["replication"]) for b in st["brokers"]] == [
        n.config.replication_listener for _, n in sorted(cluster.nodes.items())
    ]
    # ... and its Kafka listener (clients of Kafka's protocol), under keys that name kafka.
    assert ["{}:{}".format(*b["kafka"]) for b in st["brokers"]] == [
        n.config.kafka_listener for _, n in sorted(cluster.nodes.items())
    ]
    assert all(
        set(b)
        == {
            "node_id",
            "host",
            "port",
            "external",
            "replication",
            "kafka",
            "kafka_external",
            "metrics",
            "rack",
            "broker_epoch",
            "fenced",
            "shutting_down",
        }
        for b in st["brokers"]
    )
    # ... and its metrics address (Prometheus' target), under a key that names metrics.
    assert ["{}:{}".format(*b["metrics"]) for b in st["brokers"]] == [
        n.config.metrics_listener for _, n in sorted(cluster.nodes.items())
    ]
    assert sorted((p["topic"], p["partition"]) for p in st["partitions"]) == [
        ("shown", p) for p in range(3)
    ]
    # `cleaning`: the leader replica's dirty ratio and last clean, null for a delete-policy
    # topic (describe_replicas, added by the CLI).
    assert all(
        set(p) == PARTITION_VIEW_KEYS | {"cleaning"}
        and p["offline_replicas"] == []
        and p["cleaning"] is None
        for p in st["partitions"]
    )
    assert st["offline_logs"] == []

    victim = next(n for n in sorted(cluster.nodes) if n != controller)
    cluster.kill9(victim)
    cluster.wait_every_view(
        lambda d: is_fenced(d, victim), FENCE_DEADLINE_S, f"node {victim} fenced on every node"
    )
    # The dead node's address stays in the bootstrap list: the CLI must get past it.
    text, st = cluster_status(cluster.bootstrap)
    states = {int(b[0]): b[6] for b in BROKER_LINE.findall(text)}
    assert states == {n: "FENCED" if n == victim else "alive" for n in cluster.nodes}, text
    assert "Partitions: 3, offline: 1" in text, text
    assert len(re.findall(r"^  shown-\d  OFFLINE ", text, re.M)) == 1, text
    assert [b["node_id"] for b in st["brokers"] if b["fenced"]] == [victim]
    assert [(p["topic"], p["leader"]) for p in st["partitions"] if p["leader"] < 0] == [
        ("shown", -1)
    ]


def _parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class DevProcess:
    """`raftlog dev --nodes 3` in its own session, as a terminal would run it."""

    def __init__(self, data_dir: Path, log_path: Path):
        self.data_dir = data_dir
        self.log_path = log_path
        with open(log_path, "ab") as log:
            # A terminal sends Ctrl-C to the whole foreground process group: its own session
            # lets the test do the same without signalling itself.
            self.proc = subprocess.Popen(
                cli_command(
                    "dev",
                    "--nodes",
                    "3",
                    "--data-dir",
                    str(data_dir),
                    "--port",
                    "0",
                    "--session-timeout-ms",
                    str(SESSION_TIMEOUT_MS),
                ),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_child_env(),
                start_new_session=True,
            )

    def wait_ready(self) -> dict[int, str]:
        """Every node's client address from its ready file, once all three wrote one (never
        from the output the three nodes share, where lines from processes can merge)."""

        def all_ready() -> dict[int, str] | None:
            assert self.proc.poll() is None, f"raftlog dev exited:\n{self.log()}"
            found = {}
            for i in (1, 2, 3):
                info = read_ready_file(str(self.data_dir / f"node-{i}"))
                if info is None or _parent_pid(info["pid"]) != self.proc.pid:
                    return None  # not ready, or a file from an earlier start
                assert info["node_id"] == i, info
                found[i] = info["client_address"]
            return found

        return wait_for(all_ready, SETTLE_DEADLINE_S, "3 ready files", interval_s=0.05)

    def node_pids(self) -> dict[int, int]:
        return {i: int((self.data_dir / f"node-{i}" / "node.pid").read_text()) for i in (1, 2, 3)}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def interrupt(self) -> int:
        """Ctrl-C: SIGINT to the process group."""
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"raftlog dev ignored Ctrl-C for 30 s:\n{self.log()}") from None

    def kill_all(self) -> None:
        """Teardown: whatever is left of the group goes (SIGTERM, then SIGKILL)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # A node that outlived its parent: only a process whose command line names this data
        # directory is ours (a pid may have been reused).
        for i in (1, 2, 3):
            pid_file = self.data_dir / f"node-{i}" / "node.pid"
            if not pid_file.exists():
                continue
            pid = int(pid_file.read_text())
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except FileNotFoundError:
                continue
            if str(self.data_dir).encode() in cmdline:
                os.kill(pid, signal.SIGKILL)


def test_dev_three_nodes_ctrl_c_and_restart(tmp_path: Path) -> None:
    data = tmp_path / "dev"
    runs: list[DevProcess] = []
    try:
        dev = DevProcess(data, tmp_path / "dev-1.log")
        runs.append(dev)
        addresses = dev.wait_ready()
        for i, addr in addresses.items():
            assert f'client_listener = "{addr}"' in (data / f"node-{i}" / "node.toml").read_text()
        pids = dev.node_pids()
        with Admin(",".join(addresses.values())) as admin:
            admin.create_topic("kept", partitions=3, replication_factor=1)
            admin.create_topic("kept3", partitions=1, replication_factor=3)

        assert dev.interrupt() == 0, dev.log()
        assert not [pid for pid in pids.values() if _pid_alive(pid)], "nodes outlived raftlog dev"

        dev = DevProcess(data, tmp_path / "dev-2.log")
        runs.append(dev)
        assert dev.wait_ready() == addresses, "a restart must reuse the written configs"
        with Admin(addresses[2]) as admin:
            # Node 2's own copy, once it has caught up with the quorum after the restart.
            st = wait_for(
                lambda: (
                    (s := admin.describe_cluster())["controller_id"] > 0
                    and len(s["brokers"]) == 3
                    and not any(b["fenced"] for b in s["brokers"])
                    and all(p["leader"] >= 0 for p in s["partitions"])
                    and s
                ),
                SETTLE_DEADLINE_S,
                "3 unfenced brokers and every partition led after the restart",
                interval_s=0.05,
            )
            topics = admin.list_topics()
        assert sorted(topics) == ["kept", "kept3"]
        assert [len(topics[t].partitions) for t in ("kept", "kept3")] == [3, 1]
        assert sorted((p["topic"], p["partition"]) for p in st["partitions"]) == [
            ("kept", 0),
            ("kept", 1),
            ("kept", 2),
            ("kept3", 0),
        ]
        pids = dev.node_pids()
        # SIGTERM to `raftlog dev` alone (a service manager): it stops its nodes itself.
        dev.proc.terminate()
        assert dev.proc.wait(30) == 0, dev.log()
        assert not [pid for pid in pids.values() if _pid_alive(pid)], "nodes outlived raftlog dev"
    finally:
        for run in reversed(runs):
            run.kill_all()
    for run in runs:
        assert "Traceback" not in run.log(), run.log()


# -- 6. a broker restarted right after kill -9 ---------------------------------------------------


def test_restart_after_kill9_gets_strictly_larger_epoch(cluster: Cluster) -> None:
    controller = cluster.wait_controller(FAILOVER_MAX_S)
    victim = next(n for n in sorted(cluster.nodes) if n != controller)
    before = brokers(cluster.describe(controller))
    cluster.kill9(victim)
    # At once, most likely inside its old session: the old registration is not fenced yet.
    cluster.nodes[victim].start()
    d = cluster.wait_view(
        lambda d: (
            brokers(d)[victim]["epoch"] != before[victim]["epoch"] and not is_fenced(d, victim)
        ),
        SETTLE_DEADLINE_S,
        f"node {victim} registered again",
        via=controller,
    )
    after = brokers(d)
    assert after[victim]["epoch"] > before[victim]["epoch"]
    assert after[victim]["epoch"] > max(b["epoch"] for b in before.values())
    for node in set(before) - {victim}:
        assert after[node] == before[node], node
    # The new incarnation heartbeats with its new epoch: it is never fenced over the next two
    # session timeouts (the old epoch's silence must not fence it). A negative property, so
    # the test watches the whole window rather than waiting for a change.
    deadline = time.monotonic() + 2 * SESSION_TIMEOUT_MS / 1000
    while time.monotonic() < deadline:
        d = cluster.describe(controller)
        assert brokers(d)[victim] == after[victim], brokers(d)
        time.sleep(0.05)


def test_deleting_a_topic_removes_its_data_on_every_broker(cluster: Cluster) -> None:
    create_topic(cluster, "doomed", partitions=6, replication_factor=2)
    with Producer(bootstrap_servers=cluster.bootstrap, linger_ms=2) as producer:
        for i in range(60):
            producer.send("doomed", b"%d" % i)
        producer.flush(30)

    def dirs() -> list[Path]:
        return [d for n in cluster.nodes.values() for d in (n.data_dir / "logs").glob("doomed-*")]

    assert len(dirs()) == 12  # 6 partitions x 2 replicas, spread over the three brokers
    assert {d.parent.parent for d in dirs()} == {n.data_dir for n in cluster.nodes.values()}
    with Admin(cluster.bootstrap) as admin:
        admin.delete_topics(["doomed"])
    wait_for(lambda: not dirs(), SETTLE_DEADLINE_S, "every replica directory deleted")
