"""Spark reads a compacted topic across its gaps with failOnDataLoss=true (its default): a gap
the cleaner left above the log start is compaction, not loss, as in Spark's Kafka source.

A real node whose cleaner compacts a keyed topic; then a batch query and a streaming query
(availableNow) from the earliest offsets read exactly the records the log still holds (the
same ones raftlog's Consumer reads), fewer than were written, without failing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raftlog.client import Consumer
from raftlog.storage.checkpoint import OffsetCheckpoint
from raftlog.storage.cleaner import CLEANER_CHECKPOINT_FILE
from raftlog.topics import TopicPartition
from tests.integration._support import wait_for
from tests.integration.conftest import MakeBroker
from tests.spark._support import as_recs, create_topic, latest, produce, reader

TOPIC = "profiles"
KEYS = 25
ROUNDS = 16


def _held(bootstrap: str, end: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record the partition still holds below `end`."""
    tp = TopicPartition(TOPIC, 0)
    out: list[tuple[int, bytes | None, bytes | None]] = []
    with Consumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=100) as c:
        c.assign([tp])
        c.seek(tp, 0)
        while c.position(tp) < end:
            for records in c.poll(500).values():
                out += [(r.offset, r.key, r.value) for r in records if r.offset < end]
    return out


def test_spark_reads_a_compacted_topic_without_reporting_data_loss(
    spark: Any, make_broker: MakeBroker, tmp_path: Path
) -> None:
    broker = make_broker()
    boot = broker.bootstrap
    create_topic(
        boot,
        TOPIC,
        1,
        **{
            "cleanup.policy": "compact",
            "segment.bytes": "2048",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    records = [
        (b"user-%02d" % k, b"round %d of user %02d" % (r, k))
        for r in range(ROUNDS)
        for k in range(KEYS)
    ]
    for r in range(ROUNDS):  # a batch per round: several segments, all but one cleanable
        produce(boot, TOPIC, records[r * KEYS : (r + 1) * KEYS])
    end = latest(boot, TOPIC)[0]
    assert end == len(records)
    checkpoint = broker.data_dir / "logs" / f"{TOPIC}-0" / CLEANER_CHECKPOINT_FILE
    wait_for(
        lambda: checkpoint.exists() and (OffsetCheckpoint(str(checkpoint)).read() or 0) > end // 2,
        60,
        "the cleaner compacting over half the log",
    )
    held = _held(boot, end)
    assert KEYS <= len(held) < len(records)

    batch = reader(spark, boot, subscribe=TOPIC, failOnDataLoss="true").load()
    got = [(r[1], r[3], r[4]) for r in as_recs(batch, headers=False)]
    assert got == held

    query = (
        reader(spark, boot, stream=True, subscribe=TOPIC, startingOffsets="earliest")
        .load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300) and query.exception() is None
    streamed = [
        (r[1], r[3], r[4])
        for r in as_recs(spark.read.parquet(str(tmp_path / "out")), headers=False)
    ]
    assert streamed == held
