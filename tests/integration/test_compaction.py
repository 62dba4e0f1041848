"""Log compaction on a real 3-node cluster (RF 3, acks=all): every broker's cleaner compacts its
own replica, and readers move through the gaps.

- A compacted topic under keyed writes (20 rounds over 40 keys, some deletes): every replica
  cleans (its cleaner checkpoint moves up); a consumer from the earliest offset reads, for
  every key, its last value at the offset its send was acknowledged with, and fewer records
  than were written; offsets only go up.
- A consumer group commits in the middle, the log is cleaned under it, and a new member of
  the group resumes from the committed offset, through the gaps, to the end.
- Each node in turn is killed (SIGKILL) in the middle of a clean while writes go on, and
  restarted; then every replica cleans its whole log and all three hold exactly the same
  records: each key's last acknowledged one.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin, Consumer, Producer
from raftlog.records import BatchHeader, Record, decode_records, read_header
from raftlog.storage import LogConfig, PartitionLog
from raftlog.storage.checkpoint import OffsetCheckpoint
from raftlog.storage.cleaner import CLEANER_CHECKPOINT_FILE
from raftlog.topics import TopicPartition
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._support import run_cli, wait_for

TOPIC = "table"
TP = TopicPartition(TOPIC, 0)
WAIT_S = 60.0
KEYS = [b"user-%02d" % i for i in range(40)]
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "600000",
    "min.insync.replicas": "2",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, 3, log_cleaner_backoff_ms=100) as c:
        yield c


def cleaned_to(cluster: Cluster, node: int) -> int:
    """Where node `node`'s last clean of the partition ended (0: none yet)."""
    path = cluster.nodes[node].data_dir / "logs" / f"{TOPIC}-0" / CLEANER_CHECKPOINT_FILE
    return OffsetCheckpoint(str(path)).read() or 0 if path.exists() else 0


def write_rounds(
    cluster: Cluster, rounds: range, last: dict[bytes, tuple[int, bytes | None]]
) -> None:
    """Each round writes every key once (every 7th a delete); `last` gets each key's last
    (offset, value) as the acknowledgements say."""
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=2) as p:
        for r in rounds:
            sent = []
            for i, key in enumerate(KEYS):
                value = None if (r * len(KEYS) + i) % 7 == 0 else b"%s=%d" % (key, r)
                sent.append((key, value, p.send(TOPIC, value, key=key, partition=0)))
            for key, value, future in sent:
                last[key] = (future.result(WAIT_S).offset, value)


def read_all(
    cluster: Cluster, start: int, end: int
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from `start` until the position reaches `end`."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    with Consumer(bootstrap_servers=cluster.bootstrap, fetch_max_wait_ms=100) as c:
        c.assign([TP])
        c.seek(TP, start)
        deadline = time.monotonic() + WAIT_S
        while c.position(TP) < end:
            assert time.monotonic() < deadline, f"position {c.position(TP)} short of {end}"
            for records in c.poll(timeout_ms=500).values():
                out += [(r.offset, r.key, r.value) for r in records]
    return out


def test_every_replica_keeps_the_last_value_of_every_key(cluster: Cluster) -> None:
    last: dict[bytes, tuple[int, bytes | None]] = {}
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, 1, 3, COMPACTED)
    write_rounds(cluster, range(20), last)
    written = 20 * len(KEYS)
    wait_for(
        lambda: all(cleaned_to(cluster, n) > 0 for n in cluster.nodes),
        WAIT_S,
        "every replica's cleaner compacting the partition",
    )
    records = read_all(cluster, 0, written)
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets))
    assert len(records) < written, "nothing was compacted away"
    seen = {key: (offset, value) for offset, key, value in records}
    for key, (offset, value) in last.items():
        assert seen.get(key) == (offset, value), key
    # `raftlog consume` reads across the gaps too (the cleaners may have removed more since).
    run = run_cli(
        "consume", TOPIC, "--from-beginning", "--format", "json", "--timeout-ms", "3000",
        "-b", cluster.bootstrap,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    shown = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["offset"] for r in shown] == sorted({r["offset"] for r in shown})
    table = {r["key"]: (r["offset"], r["value"]) for r in shown}
    assert table == {
        key.decode(): (offset, None if value is None else value.decode())
        for key, (offset, value) in last.items()
    }


def test_a_group_resumes_across_a_compaction_gap(cluster: Cluster) -> None:
    last: dict[bytes, tuple[int, bytes | None]] = {}
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, 1, 3, COMPACTED)
    write_rounds(cluster, range(5), last)
    group = {"group_id": "readers", "auto_offset_reset": "earliest"}
    with Consumer(TOPIC, bootstrap_servers=cluster.bootstrap, fetch_max_wait_ms=100, **group) as c:
        deadline = time.monotonic() + WAIT_S
        while not c.assignment() or c.position(TP) < 100:
            assert time.monotonic() < deadline, "the group member did not read 100 offsets"
            c.poll(timeout_ms=500)
        committed = 100
        c.commit({TP: committed})
    before = min(cleaned_to(cluster, n) for n in cluster.nodes)
    write_rounds(cluster, range(5, 20), last)
    wait_for(
        lambda: all(cleaned_to(cluster, n) > max(before, committed) for n in cluster.nodes),
        WAIT_S,
        "every replica cleaning past the committed offset",
    )
    resumed: list[tuple[int, bytes | None, bytes | None]] = []
    with Consumer(TOPIC, bootstrap_servers=cluster.bootstrap, fetch_max_wait_ms=100, **group) as c:
        deadline = time.monotonic() + WAIT_S
        while not c.assignment() or c.position(TP) < 20 * len(KEYS):
            assert time.monotonic() < deadline, "the group member did not reach the end"
            for records in c.poll(timeout_ms=500).values():
                resumed += [(r.offset, r.key, r.value) for r in records]
    assert resumed and resumed[0][0] >= committed
    seen = {key: (offset, value) for offset, key, value in resumed}
    for key, (offset, value) in last.items():
        if offset >= committed:
            assert seen.get(key) == (offset, value), key


@pytest.fixture
def slow_cleaner(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster whose cleaners move 30 kB/s: a clean of a few dozen small segments takes
    seconds, long enough to kill a node in the middle of one."""
    # A killed follower leaves the ISR within replica_lag_time_max_ms: acks=all writes wait
    # that long (30 s by default) for it.
    with started_cluster(
        tmp_path,
        3,
        log_cleaner_backoff_ms=100,
        log_cleaner_io_bytes_per_s=30_000,
        replica_lag_time_max_ms=3000,
    ) as c:
        yield c


def replica_records(
    cluster: Cluster, node: int, copy_to: Path
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of node `node`'s replica, read from a copy of its
    log directory (the node is stopped)."""
    source = cluster.nodes[node].data_dir / "logs" / f"{TOPIC}-0"
    shutil.copytree(source, copy_to)
    log = PartitionLog.open(str(copy_to), LogConfig.from_topic_config(COMPACTED))
    try:
        out = []
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read(offset, 1 << 20)
            if not data:
                break
            for header, records in batches_of(data):
                out += [(r.offset, r.key, r.value) for r in records if r.offset >= offset]
                offset = header.next_offset
        return out
    finally:
        log.close()


def batches_of(data: bytes) -> Iterator[tuple[BatchHeader, list[Record]]]:
    pos = 0
    while pos < len(data):
        header = read_header(data, pos)
        yield header, decode_records(data, pos, header)
        pos += header.size


def test_replicas_killed_while_cleaning_converge_to_the_same_records(
    slow_cleaner: Cluster, tmp_path: Path
) -> None:
    """Writes go on while node after node is killed (SIGKILL) in the middle of a clean (a
    `.cleaned` file in its partition directory) and restarted. Afterwards every replica rolls
    (segment.ms) and cleans its whole log: each then holds, for every key, exactly its last
    acknowledged record, and nothing else."""
    cluster = slow_cleaner
    last: dict[bytes, tuple[int, bytes | None]] = {}
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, 1, 3, COMPACTED)
    killed = []
    for victim in cluster.nodes:
        write_rounds(cluster, range(8 * victim, 8 * victim + 8), last)
        partition_dir = cluster.nodes[victim].data_dir / "logs" / f"{TOPIC}-0"
        wait_for(
            lambda d=partition_dir: any(d.glob("*.cleaned")),
            WAIT_S,
            f"node {victim} in the middle of a clean",
        )
        cluster.kill9(victim)
        killed.append(victim)
        write_rounds(cluster, range(100 + victim, 101 + victim), last)
        cluster.start(victim)
        cluster.wait_brokers_settled(WAIT_S)
    assert killed == list(cluster.nodes)
    with Admin(cluster.bootstrap) as admin:
        admin.alter_topic_config(TOPIC, {"segment.ms": "500"})
    end = max(offset for offset, _ in last.values()) + 1
    wait_for(
        lambda: all(cleaned_to(cluster, n) >= end for n in cluster.nodes),
        3 * WAIT_S,
        f"every replica cleaning its whole log (to offset {end})",
    )
    cluster.kill9(*cluster.nodes)
    expected = sorted((offset, key, value) for key, (offset, value) in last.items())
    for node in cluster.nodes:
        assert replica_records(cluster, node, tmp_path / f"copy-{node}") == expected, node
    cluster.start()
    cluster.wait_brokers_settled(WAIT_S)
