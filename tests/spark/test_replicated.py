"""Spark against a replicated three-node cluster (RF 3, min.insync.replicas 2), real processes.

- Only committed records are read: with both followers stopped (SIGSTOP) the leader appends
  acks=1 records that no follower has, so its high watermark stays below its log end; a batch
  read sees exactly the records below the HW, none of the rest.
- A partition leader killed (kill -9) during a streaming query: the query goes on after the
  failover (the reader follows the new leader by itself) and its output holds every record
  acknowledged with acks=all exactly once.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from raftlog.client import Admin, Producer
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._support import wait_for
from tests.spark._support import reader

CHANGE_S = 60.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path / "cluster", 3, 1500, replica_lag_time_max_ms=2000) as c:
        yield c


def create(c: Cluster, topic: str, partitions: int) -> None:
    with Admin(c.bootstrap) as admin:
        admin.create_topic(topic, partitions, 3, {"min.insync.replicas": "2"})

    def whole(d: dict[str, Any]) -> bool:
        parts = [p for p in d["partitions"] if p["topic"] == topic]
        return len(parts) == partitions and all(
            p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"]) for p in parts
        )

    c.wait_every_view(whole, CHANGE_S, f"{topic} led with its whole ISR on every node")


def leader_of(c: Cluster, topic: str, partition: int) -> int:
    d = c.wait_view(
        lambda d: any(
            p["topic"] == topic and p["partition"] == partition and p["leader"] >= 0
            for p in d["partitions"]
        ),
        CHANGE_S,
        f"{topic}-{partition} led",
    )
    return int(
        next(
            p["leader"]
            for p in d["partitions"]
            if p["topic"] == topic and p["partition"] == partition
        )
    )


def test_a_batch_read_sees_only_records_below_the_high_watermark(
    spark: Any, cluster: Cluster
) -> None:
    topic = "committed"
    create(cluster, topic, 1)
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as producer:
        for i in range(100):
            producer.send(topic, b"committed-%d" % i, partition=0)
        producer.flush(30)
    leader = leader_of(cluster, topic, 0)
    boot = cluster.nodes[leader].bootstrap  # the paused nodes cannot answer anything
    followers = [n for n in cluster.nodes if n != leader]
    for n in followers:
        cluster.nodes[n].proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        # Two of three controllers are paused: no ISR change can commit, so the HW stays
        # where the followers left it while the leader's log grows.
        with Producer(bootstrap_servers=boot, acks=1, enable_idempotence=False) as producer:
            for i in range(50):
                producer.send(topic, b"uncommitted-%d" % i, partition=0)
            producer.flush(30)
        with Admin(boot) as admin:
            (desc,) = admin.describe_topics([topic])
        p = desc.partitions[0]
        assert (p.high_watermark, p.log_end_offset) == (100, 150), p
        rows = (
            reader(spark, boot, subscribe=topic, startingOffsets="earliest")
            .load()
            .select("offset", "value")
            .collect()
        )
    finally:
        for n in followers:
            cluster.nodes[n].proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    assert sorted((r.offset, bytes(r.value)) for r in rows) == [
        (i, b"committed-%d" % i) for i in range(100)
    ]


def test_a_streaming_query_goes_on_after_its_partition_leader_is_killed(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    topic = "failover"
    create(cluster, topic, 2)
    acked: dict[bytes, tuple[int, int]] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def send() -> None:
        with Producer(
            bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=2, delivery_timeout_ms=60_000
        ) as producer:
            i = 0
            while not stop.is_set():
                value = b"v-%06d" % i
                fut = producer.send(topic, value, partition=i % 2)

                def done(f: Any, v: bytes = value) -> None:
                    if f.exception(0) is None:
                        md = f.result(0)
                        with lock:
                            acked[v] = (md.partition, md.offset)

                fut.add_done_callback(done)
                i += 1
                time.sleep(0.002)
            producer.flush(60)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (
        reader(spark, cluster.bootstrap, stream=True, subscribe=topic, startingOffsets="earliest")
        .load()
        .select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: len(acked) >= 1000 or None, CHANGE_S, "1000 acknowledged sends")
        wait_for(
            lambda: any(p["numInputRows"] > 0 for p in query.recentProgress) or None,
            300,
            "a micro-batch with data",
            interval_s=0.2,
        )
        victim = leader_of(cluster, topic, 0)
        cluster.kill9(victim)
        before = len(acked)
        wait_for(lambda: len(acked) >= before + 1000 or None, CHANGE_S, "acks after the kill")
        stop.set()
        sender.join(90)
        assert not sender.is_alive()
        with lock:
            expected = dict(acked)
        # The query catches up with every acknowledged record, through the new leaders.
        want = {(p, o) for p, o in expected.values()}

        def caught_up() -> bool:
            if query.exception() is not None:
                raise AssertionError(f"the query failed: {query.exception()}")
            if not out.exists() or not any(out.glob("*.parquet")):
                return False
            got = {(r.partition, r.offset) for r in spark.read.parquet(str(out)).collect()}
            return want <= got

        wait_for(lambda: caught_up() or None, 300, "every acknowledged record in the output")
    finally:
        query.stop()
    df = spark.read.parquet(str(out))
    assert df.groupBy("partition", "offset").count().where(F.col("count") > 1).count() == 0
    rows = {(r.partition, r.offset): bytes(r.value) for r in df.collect()}
    wrong = [(v, po) for v, po in expected.items() if rows.get(po) != v]
    assert not wrong, f"{len(wrong)} acknowledged records missing or moved, e.g. {wrong[:5]}"
    assert len({v for v in rows.values()}) == len(rows), "a value appears at two offsets"
