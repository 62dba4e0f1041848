"""Each broker's own replicas (DescribeReplicas, API 24) on a real 3-node cluster: every broker's
cleaner compacts its own replica, and `Admin.describe_replicas`, `raftlog topic describe` and
`raftlog cluster status` (human and --json) show the dirty ratio and the last clean of a
compacted partition, and none for a delete-policy one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin, Producer
from raftlog.topics import TopicPartition
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._support import run_cli, wait_for
from tests.integration.test_compaction import COMPACTED, KEYS, WAIT_S

TABLE, EVENTS = "table", "events"
CLEANING = re.compile(
    r"dirty (\d\.\d\d), last clean [\d,]+ s ago \(([\d,]+) of ([\d,]+) records kept\)"
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, 3, log_cleaner_backoff_ms=100) as c:
        yield c


def _cli(cluster: Cluster, *args: str) -> str:
    out = run_cli(*args, "-b", cluster.bootstrap)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_every_replica_reports_its_dirty_ratio_and_last_clean(cluster: Cluster) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TABLE, 1, 3, COMPACTED)
        admin.create_topic(EVENTS, 1, 3, {"segment.bytes": "4096"})
        with Producer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=2) as p:
            for r in range(20):
                futures = [p.send(TABLE, b"%s=%d" % (k, r), key=k, partition=0) for k in KEYS]
                futures.append(p.send(EVENTS, b"event %d" % r, partition=0))
                for f in futures:
                    f.result(30)

        def every_replica_cleaned() -> bool:
            states = admin.describe_replicas([TABLE])
            cleaned = {r.node_id for r in states.replicas if r.last_clean is not None}
            return cleaned == set(cluster.nodes)

        wait_for(every_replica_cleaned, WAIT_S, "a clean of the table on every replica")
        states = admin.describe_replicas()
        assert states.unanswered == {}
        tables = [r for r in states.replicas if r.tp == TopicPartition(TABLE, 0)]
        assert sorted(r.node_id for r in tables) == sorted(cluster.nodes)
        for r in tables:
            assert r.cleanup_policy == "compact" and not r.offline, r
            assert r.dirty_ratio is not None and 0.0 <= r.dirty_ratio <= 1.0, r
            assert r.last_clean is not None and r.last_clean_ms > 0, r
            assert r.last_clean.records_kept <= r.last_clean.records_read, r
            assert r.log_end_offset == 20 * len(KEYS) and r.high_watermark is not None, r
        events = [r for r in states.replicas if r.tp == TopicPartition(EVENTS, 0)]
        assert sorted(r.node_id for r in events) == sorted(cluster.nodes)
        for r in events:
            assert r.cleanup_policy == "delete", r
            assert r.dirty_ratio is None and r.last_clean is None and r.last_clean_ms == -1, r
            assert r.log_end_offset == 20, r
        leader = admin.describe_topics([TABLE])[0].partitions[0].leader

    # topic describe: the leader replica's cleaning, for the compacted topic only.
    text = _cli(cluster, "topic", "describe", TABLE, EVENTS)
    table_line = next(
        line for line in text.splitlines() if f"Partition: 0  Leader: {leader}" in line
    )
    match = CLEANING.search(table_line)
    assert match, text
    assert int(match[2].replace(",", "")) <= int(match[3].replace(",", ""))
    assert text.count("Cleaning:") == 1, text
    described = {t["name"]: t for t in json.loads(_cli(cluster, "topic", "describe", "--json"))}
    cleaning = described[TABLE]["partitions"][0]["cleaning"]
    assert cleaning["node_id"] == leader and cleaning["error"] is None, cleaning
    assert isinstance(cleaning["dirty_ratio"], float) and cleaning["last_clean_ms"] > 0
    assert cleaning["last_clean"]["records_kept"] <= cleaning["last_clean"]["records_read"]
    assert described[EVENTS]["partitions"][0]["cleaning"] is None

    # cluster status: the same, in both forms.
    text = _cli(cluster, "cluster", "status")
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")}
    assert CLEANING.search(lines[f"{TABLE}-0"]), text
    assert "cleaning" not in lines[f"{EVENTS}-0"], text
    assert "did not answer" not in text, text
    status = json.loads(_cli(cluster, "cluster", "status", "--json"))
    parts = {(p["topic"], p["partition"]): p for p in status["partitions"]}
    cleaning = parts[TABLE, 0]["cleaning"]
    assert isinstance(cleaning["dirty_ratio"], float) and cleaning["last_clean"] is not None
    assert cleaning["last_clean_ms"] > 0 and cleaning["error"] is None
    assert parts[EVENTS, 0]["cleaning"] is None
    assert status["replica_states_unanswered"] == []
