"""Helpers of the Spark tests: producing records, reading them back raw, Spark reads as tuples."""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from raftlog.client import Admin, Consumer, Producer
from raftlog.topics import TopicPartition

# (partition, offset, timestamp ms, key, value, headers): one record, comparable across readers.
Rec = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def create_topic(bootstrap: str, topic: str, partitions: int, **config: str) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions, config=config or None)


def produce(
    bootstrap: str, topic: str, records: list[tuple[Any, ...]], **producer_options: Any
) -> None:
    """records: (key, value) or (key, value, headers) or (key, value, headers, timestamp_ms)."""
    with Producer(bootstrap_servers=bootstrap, acks="all", **producer_options) as p:
        futures = []
        for r in records:
            key, value = r[0], r[1]
            headers = r[2] if len(r) > 2 else None
            ts = r[3] if len(r) > 3 else None
            futures.append(p.send(topic, value, key=key, headers=headers, timestamp_ms=ts))
        p.flush(60)
        for f in futures:
            f.result(10)


def latest(bootstrap: str, topic: str) -> dict[int, int]:
    with Admin(bootstrap) as admin:
        n = len(admin.describe_topics([topic])[0].partitions)
        res = admin.list_offsets({TopicPartition(topic, p): -1 for p in range(n)})
    return {tp.partition: o for tp, (o, _) in res.items()}


def consume_range(
    bootstrap: str, topic: str, starts: dict[int, int], ends: dict[int, int], timeout_s: float = 60
) -> list[Rec]:
    """Every record of [starts, ends) per partition with the raw Consumer, sorted."""
    out: list[Rec] = []
    want = sum(ends[p] - starts.get(p, 0) for p in ends)
    with Consumer(bootstrap_servers=bootstrap) as c:
        c.assign([TopicPartition(topic, p) for p in ends])
        for p in ends:
            c.seek(TopicPartition(topic, p), starts.get(p, 0))
        deadline = time.monotonic() + timeout_s
        while len(out) < want:
            assert time.monotonic() < deadline, f"consumed {len(out)} of {want}"
            for tp, records in c.poll(500).items():
                for r in records:
                    if r.offset < ends[tp.partition]:
                        out.append((r.partition, r.offset, r.timestamp, r.key, r.value, r.headers))
                if records and records[-1].offset + 1 >= ends[tp.partition]:
                    c.pause(tp)
    return sorted(out)


def reader(spark: SparkSession, bootstrap: str, stream: bool = False, **options: str) -> Any:
    r = spark.readStream if stream else spark.read
    r = r.format("raftlog").option("raftlog.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def as_recs(df: DataFrame, headers: bool = True) -> list[Rec]:
    """A raftlog DataFrame (or its Parquet copy) as sorted Recs."""
    cols = [
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("ts"),
        "key",
        "value",
    ]
    if headers:
        cols.append("headers")
    rows = df.select(*cols).collect()
    out: list[Rec] = []
    for r in rows:
        hs = tuple((h["key"], h["value"]) for h in r["headers"]) if headers else ()
        key = bytes(r["key"]) if r["key"] is not None else None
        value = bytes(r["value"]) if r["value"] is not None else None
        out.append((r["partition"], r["offset"], r["ts"], key, value, hs))
    return sorted(out)
