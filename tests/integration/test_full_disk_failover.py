"""A leader whose disk fills hands its partitions to in-sync replicas (issue 27).

Three real nodes, each with its partition logs on a small tmpfs mounted at `<data_dir>/logs`
before it starts (the Raft journal and the high-watermark checkpoint stay on the real disk, as
in the chaos suite's disk-full fault). While an acks=all producer (idempotent, the default)
writes to three partitions, the disk of partition 0's leader is filled with a ballast file:
- its next append fails with ENOSPC, the log goes offline and the broker reports it; another
  in-sync replica leads partition 0 well within the deadline (the time is printed), and the
  full node's replicas of the other partitions go offline and leave their ISRs the same way;
- the producer delivers every record with no error surfaced: its in-flight requests got the
  retriable LogOfflineError and went to the new leader;
- once the ballast is gone, the replicas reopen (the broker's retry), truncate as followers
  and rejoin every ISR;
- every acknowledged record is read back exactly once, at its acknowledged offset, and the
  replicas are byte-identical below the high watermark.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._tmpfs import fill, tmpfs
from tests.integration._cluster import Cluster, Describe, started_cluster
from tests.integration.test_replication import (
    CHANGE_S,
    REPLICA_LAG_MS,
    SESSION_TIMEOUT_MS,
    SETTLE_S,
    Sender,
    check_acked,
    check_replicas_identical,
    create,
    leader_of,
    partition,
    read_everything,
)

TOPIC = "disk"
PARTITIONS = 3
RECORDS = 6000
# Each node's log directory: room for the run many times over until the ballast comes.
LOGS_FS = "16m"
# The broker reopens an offline log with a backoff doubling to 30 s; a full disk of a few
# seconds is retried within a few seconds of the space coming back, plus slack for a loaded
# machine.
REJOIN_S = 60.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """`started_cluster`, with every node's `logs` directory on a tmpfs of its own (unmounted
    after the nodes stopped: they hold files there)."""
    with contextlib.ExitStack() as mounts:

        def mount_logs(c: Cluster) -> None:
            for node in c.nodes.values():
                logs = node.data_dir / "logs"
                logs.mkdir(parents=True)
                mounts.enter_context(tmpfs(logs, LOGS_FS))

        with started_cluster(
            tmp_path,
            3,
            SESSION_TIMEOUT_MS,
            SETTLE_S,
            prepare=mount_logs,
            replica_lag_time_max_ms=REPLICA_LAG_MS,
        ) as c:
            yield c


def in_sync(d: Describe) -> bool:
    """No offline log left, every partition led with all three replicas in its ISR."""
    parts = [partition(d, TOPIC, p) for p in range(PARTITIONS)]
    return not d["offline_logs"] and all(
        p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"]) for p in parts
    )


def test_a_leader_whose_disk_fills_hands_over_and_its_replicas_rejoin_after(
    cluster: Cluster,
) -> None:
    create(cluster, TOPIC, partitions=PARTITIONS)
    victim = leader_of(cluster, TOPIC, 0)
    ballast = cluster.nodes[victim].data_dir / "logs" / "ballast"
    with Sender(cluster.bootstrap, TOPIC, RECORDS, partitions=PARTITIONS) as sender:
        sender.wait_acked(1500)
        t0 = time.monotonic()
        fill(ballast)  # the node's next write to any of its logs fails with ENOSPC

        def moved(d: Describe) -> bool:
            p0 = partition(d, TOPIC, 0)
            return p0["leader"] not in (victim, -1) and victim in p0.get("offline_replicas", [])

        d = cluster.wait_view(moved, CHANGE_S, f"{TOPIC}-0 led by another node than {victim}")
        print(
            f"\nnode {victim}'s disk full: {TOPIC}-0 led by node "
            f"{partition(d, TOPIC, 0)['leader']} {time.monotonic() - t0:.2f} s later"
        )
        assert victim not in partition(d, TOPIC, 0)["isr"], d
        reasons = [
            o["reason"] for o in d["offline_logs"] if (o["node_id"], o["topic"]) == (victim, TOPIC)
        ]
        assert reasons and all("No space left on device" in r for r in reasons), reasons
        sender.wait_acked(len(sender.acked) + 300)  # acks flow again, through the new leader

        ballast.unlink()
        t1 = time.monotonic()
        cluster.wait_every_view(in_sync, REJOIN_S, f"node {victim}'s replicas back in every ISR")
        print(f"node {victim}'s replicas back in every ISR {time.monotonic() - t1:.2f} s later")
        sender.done()
    assert not sender.failed, sender.failed[:3]
    assert len(sender.acked) == RECORDS
    read = read_everything(cluster.bootstrap, TOPIC, PARTITIONS)
    check_acked(sender, read)
    copies = Counter(v for records in read.values() for v in records.values())
    assert not [v for v, n in copies.items() if n > 1], "records written twice"
    assert sum(copies.values()) == RECORDS, "records nobody acknowledged"
    for p in range(PARTITIONS):
        check_replicas_identical(cluster, TOPIC, p)
