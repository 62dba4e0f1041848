"""`raftlog demo`: the main job end to end on the local default.

Starts a local node as its own process, creates the `pageviews` topic, produces a stream of
page-view events keyed by user (acks=all), consumes the whole topic back, checks that every
record arrived once and in order per partition, prints what happened, and stops the node with
SIGTERM (a clean shutdown). Exit status 0 means the pipeline moved every event.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from raftlog.cli.client_cmd import positive_int
from raftlog.client import Admin, Consumer, Producer
from raftlog.errors import RaftlogError
from raftlog.launcher import (
    ExitedBeforeReadyError,
    LaunchError,
    NodeProcess,
    bootstrap_of,
    dev_process,
)
from raftlog.topics import TopicPartition

PAGES = ["/", "/pricing", "/docs", "/blog", "/signup", "/login", "/docs/install", "/careers"]
# A node is ready 1-3 s after it starts here; a loaded 2-core CI machine has taken 10 s.
READY_TIMEOUT_S = 60
# `raftlog dev` stops its nodes within its own 30 s; past this the demo kills the group.
STOP_TIMEOUT_S = 30


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the page-view pipeline on a local node and report")
    p.add_argument("--events", type=int, default=200_000, help="page views to produce")
    p.add_argument(
        "--partitions", type=positive_int, default=6, help="partitions of the demo topic (6)"
    )
    p.add_argument("--nodes", type=int, default=3, help="nodes in the local cluster")
    p.add_argument("--data-dir", help="keep the node's data here (default: a temp dir, removed)")
    p.set_defaults(func=_demo)


def _progress(label: str, done: int, total: int, started: float) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    rate = done / max(time.monotonic() - started, 1e-9)
    sys.stderr.write(
        f"\r  {label} [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} {rate:,.0f}/s"
    )
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def start_cluster(data_dir: str, nodes: int) -> tuple[NodeProcess, str]:
    """Start `raftlog dev` on free ports; returns (process, "host:port,...") once every node
    is ready. The cluster runs in its own process group, so stop_cluster (or a failure here)
    takes every node down with it. The nodes' stderr goes to ours.

    Readiness comes from each node's ready file (raftlog/readiness.py), never from parsing the
    nodes' output: they share one stdout, where lines from different processes can merge.
    """
    dev = dev_process(
        data_dir,
        ["--port", "0", "--log-level", "WARNING"],
        nodes,
        stdout=subprocess.DEVNULL,
        new_session=True,
    )
    try:
        return dev, bootstrap_of(dev.start(READY_TIMEOUT_S))
    except ExitedBeforeReadyError:
        raise  # `_demo` decides whether to retry on new ports or to report it
    except LaunchError as e:
        raise RaftlogError(str(e)) from None


def stop_cluster(dev: NodeProcess) -> int:
    """SIGTERM the cluster (a clean stop); SIGKILL its whole group if it hangs. Its status."""
    rc = dev.stop(STOP_TIMEOUT_S)
    if rc is None:
        return dev.proc.returncode if dev.proc is not None else -signal.SIGKILL
    return rc


def _demo(args: argparse.Namespace) -> int:
    if args.events < 1 or args.partitions < 1:
        raise ValueError("--events and --partitions must be >= 1")
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # keep lines in order with the progress bars
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="raftlog-demo-")
    with _SparkStarter() as spark:
        return _demo_with(args, data_dir, spark)


class _SparkStarter:
    """Starts the Spark session of step 6 in a thread while steps 1-5 run: a session takes
    7 s to start here with the class archive (11-13 s without), as long as steps 1-5, and the
    whole main job has a budget (`raftlog demo --events 2000` in under 25 s). Stops the
    session on exit, whatever happened. Starting it where Spark cannot run fails in the
    thread; step 6 checks the environment first and says what is missing."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spark-start")
        self._future = self._pool.submit(self._start)
        self.start_s = 0.0

    def _start(self) -> Any:
        from raftlog_spark import local_session
        from raftlog_spark.environment import SHORT_JOBS_CONF

        started = time.monotonic()
        spark = local_session("pageview-report", conf=SHORT_JOBS_CONF)
        self.start_s = time.monotonic() - started
        return spark

    def session(self) -> Any:
        """The session (waits for it); raises what starting it raised."""
        return self._future.result()

    def __enter__(self) -> _SparkStarter:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self._future.result().stop()
        self._pool.shutdown()


def _demo_with(args: argparse.Namespace, data_dir: str, spark: _SparkStarter) -> int:
    print(f"1. starting a local raftlog cluster of {args.nodes} node(s) (data in {data_dir})")
    t0 = time.monotonic()
    try:
        try:
            dev, bootstrap = start_cluster(data_dir, args.nodes)
        except ExitedBeforeReadyError as e:
            if args.data_dir is not None:
                # Its configs fix the ports: the user must free them.
                raise RaftlogError(str(e)) from None
            # The ports a fresh cluster picks (outside the kernel's ephemeral range) can
            # still be taken by another program before the nodes bind them: a new directory
            # picks new ones.
            print(f"   {e}; retrying once on new ports")
            shutil.rmtree(data_dir, ignore_errors=True)
            data_dir = tempfile.mkdtemp(prefix="raftlog-demo-")
            try:
                dev, bootstrap = start_cluster(data_dir, args.nodes)
            except ExitedBeforeReadyError as again:
                raise RaftlogError(str(again)) from None
    except BaseException:
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
        raise
    print(f"   brokers ready on {bootstrap} in {time.monotonic() - t0:.1f} s")
    try:
        return _pipeline(bootstrap, args.events, args.partitions, spark)
    finally:
        status = stop_cluster(dev)
        print(f"7. stopped the cluster cleanly (exit status {status})")
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


def _pipeline(bootstrap: str, events: int, partitions: int, spark: _SparkStarter) -> int:
    topic = "pageviews"
    with Admin(bootstrap) as admin:
        if topic not in admin.list_topics():
            admin.create_topic(topic, partitions, config={"retention.ms": str(7 * 86400000)})
        partitions = len(admin.describe_topics([topic])[0].partitions)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        start = {
            tp: offset for tp, (offset, _) in admin.list_offsets({tp: -1 for tp in tps}).items()
        }
    print(
        f"2. topic {topic!r} has {partitions} partitions; new events start at offsets "
        + ", ".join(f"{tp.partition}:{o}" for tp, o in sorted(start.items()))
    )

    print(f"3. producing {events:,} page-view events keyed by user (acks=all)")
    rng = random.Random(7)
    sent_per_user: dict[str, int] = collections.Counter()
    started = time.monotonic()
    last_shown = 0.0
    with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as producer:
        futures = []
        for i in range(events):
            user = f"user-{rng.randrange(1000):04d}"
            event = {
                "user": user,
                "page": rng.choice(PAGES),
                "seq": sent_per_user[user],
                "ts": int(time.time() * 1000),
            }
            sent_per_user[user] += 1
            futures.append(producer.send(topic, json.dumps(event).encode(), key=user.encode()))
            if time.monotonic() - last_shown > 0.25:
                _progress("produce", i + 1, events, started)
                last_shown = time.monotonic()
        producer.flush()
        for f in futures:
            f.result()
    _progress("produce", events, events, started)
    produce_s = time.monotonic() - started

    print("4. consuming the new events back as consumer group 'pageview-report'")
    started = time.monotonic()
    pages: collections.Counter[str] = collections.Counter()
    per_partition: collections.Counter[int] = collections.Counter()
    next_seq: dict[str, int] = collections.defaultdict(int)
    last_offset: dict[int, int] = {}
    problems = 0
    seen = 0
    with Admin(bootstrap) as admin:
        # The group starts where this run's events start (a re-run on the same data dir
        # replays nothing old): the reset-offsets replay primitive.
        if "pageview-report" in {g["group_id"] for g in admin.list_groups()}:
            admin.delete_group("pageview-report")
        admin.reset_offsets("pageview-report", start)
    consumer = Consumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id="pageview-report",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        while seen < events:
            batch = consumer.poll(5000)
            if not batch:
                print(f"\n   no records for 5 s after {seen:,} of {events:,}")
                problems += 1
                break
            for tp, records in batch.items():
                for r in records:
                    e = json.loads(r.value or b"{}")
                    if last_offset.get(tp.partition, r.offset - 1) != r.offset - 1:
                        problems += 1
                    last_offset[tp.partition] = r.offset
                    if e["seq"] != next_seq[e["user"]]:
                        problems += 1  # per-key order broken
                    next_seq[e["user"]] = e["seq"] + 1
                    pages[e["page"]] += 1
                    per_partition[tp.partition] += 1
                    seen += 1
            if seen % 20_000 < 500 or seen >= events:
                _progress("consume", min(seen, events), events, started)
        ends = consumer.end_offsets(tps)
        consumer.commit()
    finally:
        consumer.close()
    with Admin(bootstrap) as admin:
        report = admin.describe_group("pageview-report")
        cluster = admin.describe_cluster()
        described = {p.partition: p for p in admin.describe_topics([topic])[0].partitions}
    lag = sum(p["lag"] or 0 for p in report["partitions"])
    print(f"5. group 'pageview-report' committed its offsets: total lag {lag}")
    consume_s = time.monotonic() - started

    spark_ok, spark_line = _spark_report(bootstrap, topic, start, pages, spark)

    print("\nWhat happened:")
    print(
        f"  produced  {events:>10,} events in {produce_s:6.2f} s "
        f"({events / produce_s:,.0f} events/s, every one acknowledged)"
    )
    print(
        f"  consumed  {seen:>10,} events in {consume_s:6.2f} s "
        f"({seen / max(consume_s, 1e-9):,.0f} events/s)"
    )
    for p in range(partitions):
        d = described[p]
        log_ends = ", ".join(f"{n}: {o:,}" for n, o in sorted((d.log_end_offsets or {}).items()))
        print(
            f"  partition {p}: {per_partition[p]:,} events, high watermark "
            f"{ends[TopicPartition(topic, p)]:,}, leader {d.leader}, ISR {list(d.isr)}"
            + (f", replica log ends {{{log_ends}}}" if log_ends else "")
        )
    leaders = collections.Counter(p["leader"] for p in cluster["partitions"] if p["topic"] == topic)
    print(
        f"  cluster: controller node {cluster['controller_id']}, Raft term "
        f"{cluster['quorum']['term']}, partition leaders per broker "
        + ", ".join(f"{n}: {c}" for n, c in sorted(leaders.items()))
    )
    print("  top pages: " + ", ".join(f"{page} {n:,}" for page, n in pages.most_common(4)))
    print(f"  spark: {spark_line}")
    ok = (
        seen == events
        and problems == 0
        and lag == 0
        and sum(ends[tp] - start[tp] for tp in tps) == events
    )
    print(
        f"  check: {'every event arrived once, in order per user' if ok else 'FAILED'}"
        + ("" if ok else f" ({problems} order problems, {seen:,}/{events:,} seen)")
        + ("; Spark counted the same" if spark_ok else "; Spark's counts DIFFER")
    )
    return 0 if ok and spark_ok else 1


def _spark_diagnostics() -> str:
    """One line about what Spark ran on, for a failed Spark step."""
    from raftlog_spark.environment import java_major_version

    tmp = tempfile.gettempdir()
    free = shutil.disk_usage(tmp).free
    memory = "?"
    with contextlib.suppress(OSError), open("/sys/fs/cgroup/memory.max") as f:
        memory = f.read().strip()
    return (
        f"Spark ran with Java {java_major_version() or '?'}, PYSPARK_PYTHON="
        f"{os.environ.get('PYSPARK_PYTHON', '?')}, {free / 2**30:.1f} GiB free in {tmp}, "
        f"cgroup memory.max {memory}"
    )


def _spark_report(
    bootstrap: str,
    topic: str,
    start: dict[TopicPartition, int],
    pages: collections.Counter[str],
    spark: _SparkStarter,
) -> tuple[bool, str]:
    """Step 6: the Spark page-view job over exactly this run's events: from the offsets the run
    started at to the offsets group 'pageview-report' committed (replay from committed
    offsets). (ok, one summary line): ok if Spark's per-page counts equal the consumer's."""
    print("6. Spark reads the same events: this run's start offsets to the group's commits")
    from raftlog_spark import check_environment
    from raftlog_spark.jobs.pageviews import run_pageview_report

    problems = check_environment()
    if problems:
        raise RaftlogError("Spark cannot run here: " + "; ".join(problems))
    starting = json.dumps({topic: {str(tp.partition): o for tp, o in sorted(start.items())}})
    waited = time.monotonic()
    try:
        summary = run_pageview_report(
            bootstrap, topic, None, starting, "group:pageview-report", spark.session()
        )
    except Exception as e:  # Spark's (Py4J, PySpark) errors have no common base here
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        print(f"   the Spark job failed: {first}")
        print(f"   {_spark_diagnostics()}")
        raise
    summary["session_start_s"] = spark.start_s
    summary["session_wait_s"] = time.monotonic() - waited - summary["job_s"]
    ok = summary["pages"] == dict(pages)
    line = (
        f"{summary['events']:,} events over {len(summary['pages'])} pages in "
        f"{summary['job_s']:.1f} s (session start {summary['session_start_s']:.1f} s, "
        f"of which step 6 waited {summary['session_wait_s']:.1f} s), "
        + ("the same per-page counts as the consumer" if ok else "per-page counts DIFFER")
    )
    return ok, line
