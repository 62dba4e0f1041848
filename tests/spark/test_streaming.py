"""Streaming reads against a real node: a query stopped mid-way and restarted from its
checkpoint writes every record once; maxOffsetsPerTrigger bounds each micro-batch."""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import functions as F

from tests.integration._support import BrokerProcess, wait_for
from tests.spark._support import consume_range, create_topic, latest, produce, reader

TOPIC = "clicks"
PER_TRIGGER = 200


def _start(spark: Any, boot: str, out: str, checkpoint: str, available_now: bool) -> Any:
    writer = (
        reader(
            spark,
            boot,
            stream=True,
            subscribe=TOPIC,
            startingOffsets="earliest",
            maxOffsetsPerTrigger=str(PER_TRIGGER),
        )
        .load()
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
    )
    return writer.trigger(availableNow=True).start() if available_now else writer.start()


def test_a_query_stopped_and_restarted_from_its_checkpoint_writes_every_record_once(
    spark: Any, module_broker: BrokerProcess, tmp_path: Any
) -> None:
    boot = module_broker.bootstrap
    create_topic(boot, TOPIC, 2)
    produce(boot, TOPIC, [(b"k%d" % (i % 7), b"first-%d" % i) for i in range(3000)])
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    query = _start(spark, boot, out, checkpoint, available_now=False)
    try:
        wait_for(
            lambda: len([p for p in query.recentProgress if p["numInputRows"] > 0]) >= 2,
            300,
            "two micro-batches with data",
            interval_s=0.1,
        )
    finally:
        query.stop()
    assert query.exception() is None
    first_rows = spark.read.parquet(out).count()
    assert 0 < first_rows < 3000, f"the query was not stopped mid-way ({first_rows} rows)"

    # More records while the query is down; the restart takes everything from its checkpoint.
    produce(boot, TOPIC, [(b"k%d" % (i % 7), b"second-%d" % i) for i in range(1000)])
    started = time.monotonic()
    query = _start(spark, boot, out, checkpoint, available_now=True)
    assert query.awaitTermination(300), "the restarted query did not finish"
    assert query.exception() is None
    batches = [p["numInputRows"] for p in query.recentProgress]
    assert max(batches) <= PER_TRIGGER, batches
    ends = latest(boot, TOPIC)
    got = sorted(
        (r.partition, r.offset, bytes(r.key), bytes(r.value))
        for r in spark.read.parquet(out).select("partition", "offset", "key", "value").collect()
    )
    expected = sorted((r[0], r[1], r[3], r[4]) for r in consume_range(boot, TOPIC, {}, ends))
    assert len(expected) == 4000
    assert got == expected, (
        f"{len(got)} rows, {len(set(got))} distinct, {len(expected)} expected "
        f"(restart took {time.monotonic() - started:.1f} s)"
    )
    # Output rows are what Spark's file sink committed: no duplicate made it through.
    dupes = spark.read.parquet(out).groupBy("partition", "offset").count().where(F.col("count") > 1)
    assert dupes.count() == 0
