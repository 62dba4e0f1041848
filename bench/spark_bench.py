"""Spark benchmark: the raftlog data source against the raw Consumer, and the streaming job.

    python -m bench.spark_bench [--records 10000000] [--value-bytes 200] [--partitions 2]
                                [--runs 3] [--e2e-rate 10000] [--e2e-seconds 30] [--quick]

Phases, in one run against one local node (`raftlog dev`, a child process):
1. produce `--records` records of `--value-bytes` (null key) into a topic of `--partitions`;
2. read them all with the raw `Consumer` (one process, every partition assigned), `--runs`
   times, median;
3. start a local Spark session (its start time is reported on its own) and read them all with
   `spark.read.format("raftlog")`, `--runs` times, median. The action sums the value lengths,
   so every value really crosses from the Python reader into Spark; both readers' byte totals
   are checked;
4. the page-view streaming job (raftlog_spark.jobs.pageviews, checkpointed) while a producer
   sends `--e2e-rate` page-view events per second: the end-to-end latency of each event is
   the time from its send (its record timestamp) to the end of the micro-batch that wrote it,
   for the events sent after a warm-up (`E2E_WARMUP_S`).

Spark runs local[`--cores`] (default: every core of this machine), so it reads partitions in
parallel where the Consumer is one thread: the report states both.

Results: a markdown report on stdout, and `--json PATH` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from bench.common import default_base_dir, machine_facts
from bench.paper_bench import BrokerProcess, percentile

DEFAULTS = {"records": 10_000_000, "runs": 3, "e2e_rate": 10_000, "e2e_seconds": 30.0}
QUICK = {"records": 20_000, "runs": 1, "e2e_rate": 500, "e2e_seconds": 8.0}
# The producer runs this long before the measured seconds, so the micro-batch size settles.
E2E_WARMUP_S = 10.0
E2E_WARMUP_S_QUICK = 1.0
# Resolution of the latency measurement.
BUCKET_MS = 10


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def produce(bootstrap: str, topic: str, records: int, value_bytes: int, partitions: int) -> float:
    from raftlog.client import Admin, Producer

    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions)
    value = os.urandom(value_bytes)
    started = time.perf_counter()
    with Producer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=1024 * 1024
    ) as producer:
        for i in range(records):
            producer.send(topic, value, partition=i % partitions)
        producer.flush()
    return time.perf_counter() - started


def consumer_read(bootstrap: str, topic: str, partitions: int, records: int) -> tuple[float, int]:
    """(seconds, value bytes) of reading every record with the raw Consumer."""
    from raftlog.client import Consumer, TopicPartition

    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = Consumer(bootstrap_servers=bootstrap, max_partition_fetch_bytes=4 * 1024 * 1024)
    try:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        got = nbytes = 0
        started = time.perf_counter()
        while got < records:
            for recs in consumer.poll(1000, 100_000).values():
                got += len(recs)
                for r in recs:
                    nbytes += len(r.value)  # type: ignore[arg-type]
        return time.perf_counter() - started, nbytes
    finally:
        consumer.close()


def spark_read(spark: Any, bootstrap: str, topic: str) -> tuple[float, int, int]:
    """(seconds, records, value bytes) of a Spark batch read of the whole topic."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    row = (
        spark.read.format("raftlog")
        .option("raftlog.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("bytes"))
        .collect()[0]
    )
    return time.perf_counter() - started, int(row["n"]), int(row["bytes"] or 0)


def e2e(
    spark: Any, bootstrap: str, rate: int, seconds: float, warmup_s: float, work_dir: str
) -> dict[str, Any]:
    """The page-view streaming job under `rate` events/s: latency from send to batch end."""
    from pyspark.sql import functions as F
    from raftlog_spark.jobs import pageviews

    from raftlog.client import Admin, Producer

    topic = "pageviews-e2e"
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, 2)
    # Latencies in buckets of BUCKET_MS of send time: (bucket, events) pairs are computed in
    # Spark, so measuring does not drag every timestamp through the driver's Python.
    latency_counts: dict[float, int] = {}
    batch_sizes: list[int] = []
    write = pageviews.write_partials(os.path.join(work_dir, "e2e-out"))
    producing_from = [math.inf]

    def on_batch(batch: Any, batch_id: int) -> None:
        batch = batch.cache()
        try:
            write(batch, batch_id)
            buckets = (
                batch.select(F.floor(F.unix_millis("timestamp") / BUCKET_MS).alias("b"))
                .groupBy("b")
                .count()
                .collect()
            )
        finally:
            batch.unpersist()
        done_ms = time.time() * 1000
        measured_from_ms = (producing_from[0] + warmup_s) * 1000
        kept = 0
        for row in buckets:
            sent_ms = (row["b"] + 0.5) * BUCKET_MS
            if sent_ms >= measured_from_ms:
                latency = done_ms - sent_ms
                latency_counts[latency] = latency_counts.get(latency, 0) + row["count"]
                kept += row["count"]
        if kept:
            batch_sizes.append(sum(row["count"] for row in buckets))

    query = (
        spark.readStream.format("raftlog")
        .option("raftlog.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", os.path.join(work_dir, "e2e-checkpoint"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    # Spark's first micro-batch (code generation, Python workers starting) takes tens of
    # seconds: it runs on a few warm-up events before the measured stream starts, so it does
    # not leave a backlog behind.
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for n in range(100):
            warm = {"user": "user-warmup", "page": "/", "seq": n, "ts": int(time.time() * 1000)}
            producer.send(topic, json.dumps(warm).encode(), key=b"user-warmup")
        producer.flush()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not any(p["numInputRows"] for p in query.recentProgress):
        time.sleep(0.2)
    sent = [0]
    stop = threading.Event()

    def send() -> None:
        pages = ["/", "/pricing", "/docs", "/blog", "/signup"]
        with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=1) as producer:
            start = time.time()
            producing_from[0] = start
            n = 0
            while not stop.is_set() and time.time() - start < warmup_s + seconds:
                due = int((time.time() - start) * rate)
                while n < due:
                    event = {"user": f"user-{n % 1000:04d}", "page": pages[n % 5], "seq": n,
                             "ts": int(time.time() * 1000)}  # fmt: skip
                    producer.send(topic, json.dumps(event).encode(), key=event["user"].encode())
                    n += 1
                time.sleep(0.001)
            producer.flush()
            sent[0] = n

    sender = threading.Thread(target=send, name="e2e-producer")
    sender.start()
    sender.join()
    # Let the last events through, then stop.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        progress = query.lastProgress
        if progress and progress["sources"][0]["endOffset"] == progress["sources"][0].get(
            "latestOffset"
        ):
            break
        time.sleep(0.5)
    query.stop()
    stop.set()
    lat = [lat_ms for lat_ms, n in sorted(latency_counts.items()) for _ in range(n)]
    return {
        "rate_per_s": rate,
        "seconds": seconds,
        "events_sent": sent[0],
        "events_measured": len(lat),
        "batches_measured": len(batch_sizes),
        "events_per_batch_median": _median(batch_sizes) if batch_sizes else math.nan,
        "p50_ms": percentile(lat, 50),
        "p90_ms": percentile(lat, 90),
        "p99_ms": percentile(lat, 99),
        "max_ms": lat[-1] if lat else math.nan,
    }


def run(args: argparse.Namespace, spark: Any = None) -> dict[str, Any]:
    picked = {**DEFAULTS, **(QUICK if args.quick else {})}
    records = args.records or picked["records"]
    runs = args.runs or picked["runs"]
    rate = args.e2e_rate or picked["e2e_rate"]
    e2e_seconds = args.e2e_seconds or picked["e2e_seconds"]
    base = tempfile.mkdtemp(prefix="raftlog-spark-bench-", dir=args.base_dir or default_base_dir())
    broker = BrokerProcess(os.path.join(base, "data"), os.path.join(base, "broker.log"), True)
    report: dict[str, Any] = {
        "machine": machine_facts(base),
        "records": records,
        "value_bytes": args.value_bytes,
        "partitions": args.partitions,
        "runs": runs,
    }
    broker.start()
    own_spark = spark is None
    try:
        topic = "spark-bench"
        say(f"producing {records:,} records of {args.value_bytes} bytes")
        report["produce_s"] = produce(
            broker.bootstrap, topic, records, args.value_bytes, args.partitions
        )
        consumer_rates = []
        for i in range(runs):
            secs, nbytes = consumer_read(broker.bootstrap, topic, args.partitions, records)
            if nbytes != records * args.value_bytes:
                raise RuntimeError(f"consumer read {nbytes:,} value bytes")
            consumer_rates.append(records / secs)
            say(f"consumer run {i + 1}: {records / secs:,.0f} records/s")
        if own_spark:
            from raftlog_spark import local_session

            started = time.perf_counter()
            spark = local_session("spark-bench", cores=args.cores or os.cpu_count() or 2)
            report["spark_session_start_s"] = time.perf_counter() - started
            say(f"Spark session started in {report['spark_session_start_s']:.1f} s")
        report["spark_cores"] = int(spark.sparkContext.defaultParallelism)
        spark_rates = []
        for i in range(runs + 1):
            secs, n, nbytes = spark_read(spark, broker.bootstrap, topic)
            if (n, nbytes) != (records, records * args.value_bytes):
                raise RuntimeError(f"Spark read {n:,} records, {nbytes:,} value bytes")
            if i == 0:
                report["spark_first_read_s"] = secs  # JIT and worker start: not counted
                say(f"Spark warm-up read: {records / secs:,.0f} records/s (not counted)")
                continue
            spark_rates.append(records / secs)
            say(f"Spark run {i}: {records / secs:,.0f} records/s")
        report["consumer_records_per_s"] = consumer_rates
        report["spark_records_per_s"] = spark_rates
        report["consumer_median"] = _median(consumer_rates)
        report["spark_median"] = _median(spark_rates)
        report["spark_vs_consumer"] = report["spark_median"] / report["consumer_median"]
        say(f"streaming job at {rate:,} events/s for {e2e_seconds:g} s")
        warmup = E2E_WARMUP_S_QUICK if args.quick else E2E_WARMUP_S
        report["e2e"] = e2e(spark, broker.bootstrap, rate, e2e_seconds, warmup, base)
    finally:
        if own_spark and spark is not None:
            spark.stop()
        broker.stop()
        if not args.keep_data:
            shutil.rmtree(base, ignore_errors=True)
    return report


def render(r: dict[str, Any]) -> str:
    mb = r["value_bytes"] / 1e6
    e = r["e2e"]
    lines = [
        f"# Spark benchmark ({r['machine']['date']})",
        "",
        f"{r['records']:,} records of {r['value_bytes']} bytes in {r['partitions']} partitions; "
        f"median of {r['runs']} run(s); Spark local[{r['spark_cores']}], the Consumer one "
        f"thread; load average at start {r['machine']['load_average_at_start']}.",
        "",
        "| reader | records/s (median) | MB/s | runs |",
        "|---|---:|---:|---|",
        f"| raw Consumer | {r['consumer_median']:,.0f} | {r['consumer_median'] * mb:,.1f} | "
        + ", ".join(f"{x:,.0f}" for x in r["consumer_records_per_s"])
        + " |",
        f'| Spark `format("raftlog")` | {r["spark_median"]:,.0f} | '
        f"{r['spark_median'] * mb:,.1f} | "
        + ", ".join(f"{x:,.0f}" for x in r["spark_records_per_s"])
        + " |",
        "",
        f"Spark / Consumer: {r['spark_vs_consumer']:.2f} (target: at least 0.5).",
        f"Spark session start: {r.get('spark_session_start_s', math.nan):.1f} s; first "
        f"(warm-up) read {r['spark_first_read_s']:.1f} s, not counted.",
        "",
        f"Streaming page-view job at {e['rate_per_s']:,} events/s for {e['seconds']:g} s: "
        f"{e['events_measured']:,} events in {e['batches_measured']} micro-batches measured "
        f"(median {e['events_per_batch_median']:,.0f} events per batch); end-to-end latency "
        f"(send to end of its micro-batch) p50 {e['p50_ms']:,.0f} ms, p90 {e['p90_ms']:,.0f} ms, "
        f"p99 {e['p99_ms']:,.0f} ms, max {e['max_ms']:,.0f} ms.",
    ]
    return "\n".join(lines)


def say(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.spark_bench", description=__doc__)
    p.add_argument("--records", type=int, help="records to read (10,000,000)")
    p.add_argument("--value-bytes", type=int, default=200)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--runs", type=int, help="reads per reader; the median is reported (3)")
    p.add_argument("--cores", type=int, help="Spark local[N] (default: all cores)")
    p.add_argument("--e2e-rate", type=int, help="events/s of the streaming phase (10,000)")
    p.add_argument("--e2e-seconds", type=float, help="length of the streaming phase (30)")
    p.add_argument("--base-dir", help="where the broker keeps its data (a real disk)")
    p.add_argument("--keep-data", action="store_true")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--quick", action="store_true", help="tiny sizes (for tests)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    report = run(args)
    print(render(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
