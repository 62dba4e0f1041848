"""Storage faults on a real broker process: a corrupt segment and a full disk.

- Damage below a partition's recovery point (here: 4 bytes of a batch length in a middle
  segment of a cleanly stopped log) must take that partition offline on the broker, naming
  file and byte, delete nothing, keep the other partitions serving, and show in
  `raftlog cluster status` (human and --json). Produce, fetch and list-offsets for it answer
  LogOfflineError. Moving the damaged directory away (the operator's repair without
  replication) brings the partition back, empty, without a restart.
- A full disk (a tmpfs mounted on the broker's `logs` directory, so that only the partition
  logs fill up): the append it refuses takes the partition's log offline, and produce answers
  LogOfflineError naming the partition and ENOSPC (this broker holds the only replica, so it
  keeps leading); a topic created while the disk is full is offline too (not "opening"
  forever); both open by themselves once space returns.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog import protocol
from raftlog.client import Admin, Producer
from raftlog.errors import LogOfflineError
from raftlog.records import HEADER, LOG_OVERHEAD, encode_batch
from raftlog.topics import TopicPartition
from tests._tmpfs import tmpfs
from tests.integration._support import (
    BrokerProcess,
    RawClient,
    fetch_body,
    list_offsets_body,
    produce_body,
    run_cli,
    wait_for,
)
from tests.integration.conftest import MakeBroker
from tests.unit.storage._helpers import fill_until_enospc

SMALL_SEGMENTS = {"segment.bytes": "16384", "index.interval.bytes": "4096"}
# The broker retries an offline partition with a backoff that grows to 30 s
# (OPEN_RETRY_BACKOFF_MS_MAX); a repair is seen within that, plus slack for a loaded machine.
REPAIR_DEADLINE_S = 60.0
OFFLINE = LogOfflineError.code


def status_json(broker: BrokerProcess) -> dict[str, Any]:
    run = run_cli("cluster", "status", "--json", "--bootstrap-server", broker.bootstrap)
    assert run.returncode == 0, run.stderr
    st: dict[str, Any] = json.loads(run.stdout)
    return st


def offline_logs(broker: BrokerProcess) -> list[dict[str, Any]]:
    with Admin(broker.bootstrap) as admin:
        return list(admin.describe_cluster()["offline_logs"])


def snapshot(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def last_batch_after_the_last_index_entry(seg: Path) -> tuple[int, int]:
    """(position, base offset) of the last batch of a segment file: the open of a cleanly
    closed log walks the headers after each segment's last index entry, so it finds this."""
    data = seg.read_bytes()
    pos, last = 0, (0, 0)
    while pos < len(data):
        h = HEADER.unpack_from(data, pos)
        last = (pos, h[0])
        pos += h[1] + LOG_OVERHEAD
    return last


def produce_raw(client: RawClient, topic: str, partition: int) -> list[Any]:
    batch = encode_batch([(b"k", b"after")], timestamp=1_700_000_000_000)
    body, _ = client.request(
        protocol.ApiKey.PRODUCE, produce_body(topic, {partition: len(batch)}), [batch]
    )
    return list(body["topics"][0][1][0])


def test_a_corrupt_segment_takes_only_its_partition_offline_and_deletes_nothing(
    broker: BrokerProcess,
) -> None:
    topic = "damaged"
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(topic, 2, config=SMALL_SEGMENTS)
    with Producer(bootstrap_servers=broker.bootstrap, batch_size=4096) as producer:
        for i in range(6000):
            producer.send(topic, b"value-%06d" % i, partition=i % 2)
        producer.flush(timeout=30)
    rc = broker.stop()
    assert rc == 0
    part = broker.data_dir / "logs" / f"{topic}-0"
    segments = sorted(part.glob("*.log"))
    assert len(segments) >= 5, segments
    victim = segments[len(segments) // 2]
    pos, _ = last_batch_after_the_last_index_entry(victim)
    with open(victim, "r+b") as f:
        f.seek(pos + 8)
        f.write(struct.pack("<i", 0x7FFFFFF0))
    before = snapshot(part)

    broker.start()
    reported = wait_for(
        lambda: offline_logs(broker), 30, "the damaged partition in the cluster status"
    )
    assert [(o["node_id"], o["topic"], o["partition"]) for o in reported] == [(1, topic, 0)]
    assert str(victim) in reported[0]["reason"] and f"byte {pos}" in reported[0]["reason"]

    st = status_json(broker)
    parts = {(p["topic"], p["partition"]): p for p in st["partitions"]}
    assert parts[(topic, 0)]["offline_replicas"] == [1]
    assert parts[(topic, 1)]["offline_replicas"] == []
    assert st["brokers"][0]["node_id"] == 1 and st["voters"][0]["node_id"] == 1
    human = run_cli("cluster", "status", "--bootstrap-server", broker.bootstrap)
    assert human.returncode == 0, human.stderr
    assert "with offline replicas: 1" in human.stdout
    assert f"{topic}-0 on broker 1: " in human.stdout and str(victim) in human.stdout

    with RawClient(broker.host, broker.port) as client:
        entry = produce_raw(client, topic, 0)
        assert entry[1] == OFFLINE and str(victim) in entry[4], entry
        ok = produce_raw(client, topic, 1)
        assert ok[1] == 0 and ok[2] == 3000, ok
        body, _ = client.request(
            protocol.ApiKey.FETCH,
            fetch_body({TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 0}),
        )
        (p0, p1) = body["topics"][0][1]
        assert p0[1] == OFFLINE and p1[1] == 0 and p1[4] > 0, body
        body, _ = client.request(
            protocol.ApiKey.LIST_OFFSETS,
            list_offsets_body({TopicPartition(topic, 0): -1, TopicPartition(topic, 1): -1}),
        )
        (l0, l1) = body["topics"][0][1]
        assert l0[1] == OFFLINE and (l1[1], l1[3]) == (0, 3001), body
    assert snapshot(part) == before, "the offline partition's files changed"
    verify = run_cli("storage", "verify", str(part))
    assert verify.returncode == 1
    assert verify.stdout.count("\n") == 1, verify.stdout
    assert (
        f"{victim}: byte {pos}: " in verify.stdout and "below the recovery point" in verify.stdout
    )

    # The repair without replication: move the damaged directory away; the broker's next
    # reopen starts the partition empty.
    shutil.move(str(part), str(broker.data_dir / f"{topic}-0.damaged"))
    wait_for(lambda: not offline_logs(broker), REPAIR_DEADLINE_S, "the partition back online")
    with RawClient(broker.host, broker.port) as client:
        entry = produce_raw(client, topic, 0)
        assert entry[1] == 0 and entry[2] == 0, entry


@pytest.fixture
def full_disk_broker(make_broker: MakeBroker, tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker whose `logs` directory is a 2 MiB tmpfs (its Raft journal is not on it)."""
    logs = tmp_path / "node1-data" / "logs"
    logs.mkdir(parents=True)
    with tmpfs(logs, "2m"):
        yield make_broker()


def test_a_full_disk_refuses_produce_naming_enospc_and_recovers_by_itself(
    full_disk_broker: BrokerProcess,
) -> None:
    broker = full_disk_broker
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("full", 1)
    ballast = broker.data_dir / "logs" / "ballast"
    fill_until_enospc(str(ballast))
    with RawClient(broker.host, broker.port) as client:
        entry = produce_raw(client, "full", 0)
        assert entry[1] == OFFLINE, entry
        assert "full-0" in entry[4] and "ENOSPC" in entry[4], entry
        reported = wait_for(
            lambda: [o for o in offline_logs(broker) if o["topic"] == "full"],
            30,
            "the partition whose append the full disk refused reported offline",
        )
        assert "ENOSPC" in reported[0]["reason"], reported

        # Created while the disk is full: offline with the reason, not "opening" forever.
        with Admin(broker.bootstrap) as admin:
            admin.create_topic("late", 1)
        reported = wait_for(
            lambda: [o for o in offline_logs(broker) if o["topic"] == "late"],
            30,
            "the topic created on a full disk reported offline",
        )
        assert "ENOSPC" in reported[0]["reason"], reported
        entry = produce_raw(client, "late", 0)
        assert entry[1] == OFFLINE and "ENOSPC" in entry[4], entry

        ballast.unlink()
        wait_for(lambda: not offline_logs(broker), REPAIR_DEADLINE_S, "late-0 opened")
        assert produce_raw(client, "late", 0)[1:3] == [0, 0]
        assert produce_raw(client, "full", 0)[1] == 0
