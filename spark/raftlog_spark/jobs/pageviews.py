"""The page-view pipeline: views per page per one-minute window, distinct users per page.

Input: the `pageviews` topic as `raftlog demo` (scripts/run) writes it: JSON events
`{"user": "user-0042", "page": "/docs", "seq": 17, "ts": 1700000000123, "door": "kafka"}`
keyed by user (`door`, which producer wrote the event, is not read here: the job counts every
event whichever door it came through).
The minute of an event is its own `ts` (event time), truncated to the minute.

Output (Parquet, under `out_dir`):
- `views_per_minute/`: minute (timestamp, UTC), page, views
- `users_per_page/`: page, users (distinct users who viewed the page)

Batch (`run_batch`): one read of [startingOffsets, endingOffsets), the two aggregates written.

Streaming (`run_streaming`, checkpointed): each micro-batch writes one partial aggregate,
views per (minute, page, user), under `out_dir/partials/batch_id=<n>/`, replacing what an
earlier attempt of the same batch wrote; so a micro-batch replayed after a crash counts once,
and the query resumes from its checkpoint exactly where it stopped. (One aggregate and one
write per micro-batch: the per-batch cost is what bounds the job's latency.) `finalize`
merges the partials into the same two tables as the batch job: the same input gives the same
rows either way.

`run_pageview_report` is the batch job plus a printed report and a summary dict, for the end of
`raftlog demo` (which checks Spark's totals against its consumer's).

Command line: `python -m raftlog_spark.jobs.pageviews --bootstrap HOST:PORT --out DIR
[--streaming --checkpoint DIR] [--starting-offsets earliest|group:<id>|JSON]`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import time
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

EVENT_SCHEMA = StructType(
    [
        StructField("user", StringType()),
        StructField("page", StringType()),
        StructField("seq", LongType()),
        StructField("ts", LongType()),
    ]
)
VIEWS = "views_per_minute"
USERS = "users_per_page"
# run_batch's staging directory under out_dir, removed when the job ends.
EVENTS_STAGED = "_events"


def source_options(
    bootstrap: str, topic: str, starting_offsets: str | None = None, **extra: str
) -> dict[str, str]:
    opts = {"raftlog.bootstrap.servers": bootstrap, "subscribe": topic, **extra}
    if starting_offsets is not None:
        opts["startingOffsets"] = starting_offsets
    return opts


def events(raw: DataFrame) -> DataFrame:
    """Records of the topic -> (minute, page, user); records that are not events are dropped."""
    parsed = raw.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
    return parsed.where(F.col("e.page").isNotNull() & F.col("e.ts").isNotNull()).select(
        F.date_trunc("minute", F.timestamp_millis(F.col("e.ts"))).alias("minute"),
        F.col("e.page").alias("page"),
        F.col("e.user").alias("user"),
    )


def views_per_minute(ev: DataFrame) -> DataFrame:
    return ev.groupBy("minute", "page").agg(F.count(F.lit(1)).alias("views"))


def users_per_page(pairs: DataFrame) -> DataFrame:
    return pairs.groupBy("page").agg(F.countDistinct("user").alias("users"))


def read_log(
    spark: SparkSession, bootstrap: str, topic: str, starting_offsets: str, ending_offsets: str
) -> DataFrame:
    """The topic's records in [starting_offsets, ending_offsets) (committed records only)."""
    return (
        spark.read.format("raftlog")
        .options(**source_options(bootstrap, topic, starting_offsets))
        .option("endingOffsets", ending_offsets)
        .load()
    )


def run_batch(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    out_dir: str,
    starting_offsets: str = "earliest",
    ending_offsets: str = "latest",
) -> None:
    raw = read_log(spark, bootstrap, topic, starting_offsets, ending_offsets)
    # The events are read from the log once and staged as Parquet, which both aggregates read:
    # the job's memory stays flat whatever the range's size (a cache of a large range spills
    # anyway). An earlier note here blamed the cache for "Block rdd_N does not exist"; that was
    # the session being interrupted under a task (docs/SPARK.md), not the cache.
    staged = os.path.join(out_dir, EVENTS_STAGED)
    events(raw).write.mode("overwrite").parquet(staged)
    try:
        ev = spark.read.parquet(staged)
        views_per_minute(ev).write.mode("overwrite").parquet(os.path.join(out_dir, VIEWS))
        users_per_page(ev).write.mode("overwrite").parquet(os.path.join(out_dir, USERS))
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def activity(ev: DataFrame) -> DataFrame:
    """(minute, page, user, views): the one aggregate both tables can be merged from."""
    return ev.groupBy("minute", "page", "user").agg(F.count(F.lit(1)).alias("views"))


def write_partials(out_dir: str) -> Any:
    """The foreachBatch function: one aggregate and one Parquet write per micro-batch."""

    def write(batch: DataFrame, batch_id: int) -> None:
        path = os.path.join(out_dir, "partials", f"batch_id={batch_id}")
        activity(events(batch)).write.mode("overwrite").parquet(path)

    return write


def run_streaming(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    out_dir: str,
    checkpoint_dir: str,
    starting_offsets: str = "earliest",
    available_now: bool = True,
    **source_extra: str,
) -> Any:
    """Start the streaming job; returns the StreamingQuery (AvailableNow: it stops by itself
    once it has read what was committed when it started)."""
    raw = (
        spark.readStream.format("raftlog")
        .options(**source_options(bootstrap, topic, starting_offsets, **source_extra))
        .load()
    )
    writer = (
        raw.writeStream.foreachBatch(write_partials(out_dir))
        .option("checkpointLocation", checkpoint_dir)
        .queryName(f"pageviews-{os.path.basename(os.path.normpath(out_dir))}")
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime="1 second")
    )
    return writer.start()


def finalize(spark: SparkSession, out_dir: str) -> None:
    """Merge the streaming job's partials into the batch job's two tables."""
    # Read twice from their files (no block-manager cache: see run_batch).
    partials = spark.read.parquet(os.path.join(out_dir, "partials"))
    partials.groupBy("minute", "page").agg(F.sum("views").alias("views")).write.mode(
        "overwrite"
    ).parquet(os.path.join(out_dir, VIEWS))
    users_per_page(partials).write.mode("overwrite").parquet(os.path.join(out_dir, USERS))


def read_results(spark: SparkSession, out_dir: str) -> tuple[list[Any], list[Any]]:
    """Both tables as sorted lists of Rows (views: by minute and page; users: by page)."""
    views = spark.read.parquet(os.path.join(out_dir, VIEWS)).orderBy("minute", "page")
    users = spark.read.parquet(os.path.join(out_dir, USERS)).orderBy("page")
    return views.collect(), users.collect()


def _views_and_users(activity_rows: list[Any]) -> tuple[list[Any], dict[str, int]]:
    """The two tables' rows from `activity`'s: views by (minute, page), sorted as
    read_results sorts them, and distinct users per page."""
    views: dict[tuple[Any, str], int] = collections.Counter()
    users: dict[str, set[str]] = collections.defaultdict(set)
    for row in activity_rows:
        views[row.minute, row.page] += row.views
        users[row.page].add(row.user)
    view_rows = [Row(minute=m, page=p, views=n) for (m, p), n in sorted(views.items())]
    return view_rows, {page: len(u) for page, u in users.items()}


def run_pageview_report(
    bootstrap: str,
    topic: str,
    out_dir: str | None,
    starting_offsets: str = "earliest",
    ending_offsets: str = "latest",
    spark: SparkSession | None = None,
    top: int = 5,
) -> dict[str, Any]:
    """Run the batch job, print top pages and per-minute counts, return the totals:
    {"events", "pages" {page: views}, "users_per_page" {page: users},
     "per_minute" {ISO minute: views}, "session_start_s", "job_s"}.
    With `out_dir`, the two tables are written there as Parquet (run_batch) and the totals
    read back from them; without, nothing is written: one aggregate of (minute, page, user)
    is collected and the totals summed from it (the main job's step 6, which has a time
    budget and no use for files it would delete)."""
    started = time.monotonic()
    own = spark is None
    if spark is None:
        from raftlog_spark import local_session

        spark = local_session("pageview-report")
    session_s = time.monotonic() - started
    try:
        started = time.monotonic()
        if out_dir is not None:
            run_batch(spark, bootstrap, topic, out_dir, starting_offsets, ending_offsets)
            views, users = read_results(spark, out_dir)
            users_per_page = {row.page: row.users for row in users}
        else:
            raw = read_log(spark, bootstrap, topic, starting_offsets, ending_offsets)
            rows = activity(events(raw)).collect()
            views, users_per_page = _views_and_users(rows)
        job_s = time.monotonic() - started
    finally:
        if own:
            spark.stop()
    pages: dict[str, int] = {}
    per_minute: dict[str, int] = {}
    for row in views:
        pages[row.page] = pages.get(row.page, 0) + row.views
        minute = row.minute.strftime("%Y-%m-%dT%H:%MZ")
        per_minute[minute] = per_minute.get(minute, 0) + row.views
    summary = {
        "events": sum(pages.values()),
        "pages": pages,
        "users_per_page": users_per_page,
        "per_minute": per_minute,
        "session_start_s": session_s,
        "job_s": job_s,
    }
    print(
        f"   Spark read {summary['events']:,} page views in {job_s:.1f} s "
        f"(session start {session_s:.1f} s)" + (f"; Parquet in {out_dir}" if out_dir else "")
    )
    ranked = sorted(pages.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    print(
        "   top pages: "
        + ", ".join(f"{p} {n:,} views / {users_per_page.get(p, 0):,} users" for p, n in ranked)
    )
    print("   views per minute: " + ", ".join(f"{m[11:16]} {n:,}" for m, n in per_minute.items()))
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m raftlog_spark.jobs.pageviews")
    p.add_argument("--bootstrap", default=os.environ.get("RAFTLOG_BOOTSTRAP", "127.0.0.1:9092"))
    p.add_argument("--topic", default="pageviews")
    p.add_argument("--out", required=True, help="output directory (Parquet)")
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--ending-offsets", default="latest", help="batch only")
    p.add_argument("--streaming", action="store_true", help="checkpointed streaming job")
    p.add_argument("--checkpoint", help="checkpoint directory (streaming)")
    p.add_argument(
        "--continuous", action="store_true", help="streaming: run until stopped (Ctrl-C)"
    )
    args = p.parse_args(argv)
    if not args.streaming:
        summary = run_pageview_report(
            args.bootstrap, args.topic, args.out, args.starting_offsets, args.ending_offsets
        )
        print(json.dumps({k: v for k, v in summary.items() if k != "per_minute"}, indent=2))
        return 0
    if not args.checkpoint:
        p.error("--streaming needs --checkpoint")
    from raftlog_spark import local_session

    spark = local_session("pageviews-streaming")
    try:
        query = run_streaming(
            spark,
            args.bootstrap,
            args.topic,
            args.out,
            args.checkpoint,
            args.starting_offsets,
            available_now=not args.continuous,
        )
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
        finalize(spark, args.out)
        views, users = read_results(spark, args.out)
        print(f"{sum(r.views for r in views):,} views, {len(users)} pages; Parquet in {args.out}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
