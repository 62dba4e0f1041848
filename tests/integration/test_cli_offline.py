"""An offline partition (its only replica's broker is dead: no leader) shows "unknown" in the
CLI, never offsets of 0 or -1, and does not make `offsets` or `group describe` fail for the
partitions that are fine. Three real nodes; one is killed with SIGKILL and fenced."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin, Consumer, Producer
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._support import run_cli

TOPIC = "half-offline"
GROUP = "offline-readers"
FAILOVER_MAX_S = 10.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, 3, 1500) as c:
        yield c


def ok(*args: str) -> str:
    res = run_cli(*args)
    assert res.returncode == 0, f"{args}: exit {res.returncode}\n{res.stdout}{res.stderr}"
    assert "Traceback" not in res.stderr
    return res.stdout


def test_an_offline_partition_shows_unknown(cluster: Cluster) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, 3, 1)  # one partition per node
        leaders = {p.partition: p.leader for p in admin.list_topics()[TOPIC].partitions}
    with Producer(bootstrap_servers=cluster.bootstrap, acks=1) as producer:
        for p in range(3):
            for i in range(5):
                producer.send(TOPIC, b"%d-%d" % (p, i), partition=p)
        producer.flush(20)
    with Consumer(
        TOPIC, bootstrap_servers=cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest"
    ) as consumer:
        got = 0
        while got < 15:
            got += sum(len(rs) for rs in consumer.poll(500).values())
        consumer.commit()

    controller = cluster.wait_controller(FAILOVER_MAX_S)
    victim = next(n for n in cluster.nodes if n != controller)
    [dead] = [p for p, node in leaders.items() if node == victim]
    cluster.kill9(victim)
    cluster.wait_view(
        lambda d: any(
            p["topic"] == TOPIC and p["partition"] == dead and p["leader"] < 0
            for p in d["partitions"]
        ),
        15,
        f"{TOPIC}-{dead} offline",
        via=controller,
    )
    b = ("-b", cluster.nodes[controller].bootstrap)

    lines = ok("topic", "describe", TOPIC, *b).splitlines()[1:]
    offline = lines[dead]
    assert "Leader: none" in offline, offline
    for field in ("LogStart", "LogEnd", "HighWatermark", "Size", "Segments"):
        assert f"{field}: unknown" in offline, offline
    assert all("LogEnd: 5" in line for p, line in enumerate(lines) if p != dead), lines
    [desc] = json.loads(ok("topic", "describe", TOPIC, "--json", *b))
    part = desc["partitions"][dead]
    assert part["leader"] == -1 and part["log_end_offset"] is None, part

    text = ok("offsets", TOPIC, *b).splitlines()
    assert text[dead] == f"{TOPIC}:{dead}  earliest unknown  latest unknown", text
    rows = json.loads(ok("offsets", TOPIC, "--json", *b))
    assert rows[dead] == {"partition": dead, "earliest": None, "latest": None}, rows
    assert all(r["latest"] == 5 for r in rows if r["partition"] != dead), rows

    group = json.loads(ok("group", "describe", GROUP, "--json", *b))
    by_partition = {p["partition"]: p for p in group["partitions"]}
    assert by_partition[dead]["log_end_offset"] is None and by_partition[dead]["lag"] is None
    assert all(by_partition[p]["lag"] == 0 for p in by_partition if p != dead), by_partition
    text = ok("group", "describe", GROUP, *b)
    [row] = [ln for ln in text.splitlines() if ln.split()[:2] == [TOPIC, str(dead)]]
    assert row.split()[2:5] == ["5", "unknown", "unknown"], row
