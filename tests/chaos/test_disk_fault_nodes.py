"""Disk faults on real nodes (chaos/disk_faults.py): three `raftlog node` processes, node 3's log
directory on a small tmpfs.

- A follower whose disk is full cannot append what it fetches. It must back off (the failed
  append is logged on the first failure and then once per doubling backoff), not refetch the
  same bytes at once: it did, about a thousand fetches a second, each logging two lines, for as
  long as the disk stayed full (found by the chaos runner's disk-full fault: 21,164 lines in
  25 s). Once the disk has room again it catches up and rejoins the ISR.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.disk_faults import SmallDisk, disk_full
from chaos.local_cluster import LocalCluster
from raftlog.client import Admin, Producer
from tests.integration._support import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a tmpfs mount needs root")

NODES = 3
FULL = 3  # the node whose disk fills
TOPIC = "disk"
CONVERGE_TIMEOUT_S = 60.0
# How long the disk stays full while records keep coming.
FULL_S = 4.0
# Failed appends logged in FULL_S: the first, then one per backoff (0.2, 0.4, 0.8, 1.6, 3.2 s
# ...) per partition; a spinning follower logs thousands.
FAILED_APPEND_LINES_MAX = 3 * 8
SMALL_DISK_BYTES = 16 << 20


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, SmallDisk]]:
    c = LocalCluster(tmp_path, NODES, settings={"replica_lag_time_max_ms": 3000})
    logs = c.nodes[FULL].config_path.parent / "logs"
    logs.mkdir(parents=True)
    with SmallDisk(logs, SMALL_DISK_BYTES) as disk:
        try:
            c.start()
            with Admin(c.bootstrap) as admin:
                admin.create_topic(TOPIC, 3, 3, {"min.insync.replicas": "2"})
            wait_for(lambda: whole(c), CONVERGE_TIMEOUT_S, f"{TOPIC} led with full ISRs")
            # A new topic's ISRs are full from its creation on, before any broker has created
            # its logs: the disk must not fill until node FULL's logs exist (it did, 1 run in
            # 6, and the logs went offline at creation instead of failing appends).
            wait_for(lambda: logs_created(c), CONVERGE_TIMEOUT_S, f"{TOPIC}'s logs on every node")
            yield c, disk
        finally:
            problems = c.close()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def logs_created(c: LocalCluster) -> bool:
    return all(
        (node.config_path.parent / "logs" / f"{TOPIC}-{p}" / "topic-id").exists()
        for node in c.nodes.values()
        for p in range(3)
    )


def whole(c: LocalCluster) -> bool:
    parts = [p for p in c.describe(1)["partitions"] if p["topic"] == TOPIC]
    return bool(parts) and all(
        p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"]) for p in parts
    )


def failed_appends(c: LocalCluster) -> int:
    return sum(
        path.read_text(errors="replace").count("appending fetched data failed")
        for path in c.nodes[FULL].err_paths
        if path.exists()
    )


def produce_until(c: LocalCluster, stop: threading.Event) -> None:
    with Producer(bootstrap_servers=c.bootstrap, acks=1, linger_ms=1) as producer:
        n = 0
        while not stop.is_set():
            producer.send(TOPIC, f"v{n}".encode(), partition=n % 3)
            n += 1
            time.sleep(0.002)
        producer.flush(30)


def test_a_follower_with_a_full_disk_backs_off_and_rejoins_once_there_is_room(
    cluster: tuple[LocalCluster, SmallDisk],
) -> None:
    c, disk = cluster
    stop = threading.Event()
    writer = threading.Thread(target=produce_until, args=(c, stop), daemon=True)
    writer.start()
    try:
        with disk_full(disk):
            wait_for(lambda: failed_appends(c) > 0, 30, f"node {FULL}'s first failed append")
            before = failed_appends(c)
            time.sleep(FULL_S)  # the fault's window: how often it retries in that time
            during = failed_appends(c) - before
    finally:
        stop.set()
        writer.join(60)
    assert during <= FAILED_APPEND_LINES_MAX, (
        f"node {FULL} logged {during} failed appends in {FULL_S} s of a full disk"
    )
    wait_for(lambda: whole(c), CONVERGE_TIMEOUT_S, f"node {FULL} back in every ISR")
