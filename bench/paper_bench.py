"""The Kafka paper's experiment, end to end, with raftlog: figures side by side with Kafka's.

Run from the repository root::

    .venv/bin/python -m bench.paper_bench                      # full run (10,000,000 messages)
    .venv/bin/python -m bench.paper_bench --messages 2000000   # fewer messages
    .venv/bin/python -m bench.paper_bench --quick              # small and short (tests)
    .venv/bin/python -m bench.paper_bench --only single        # one phase (for profiling)
    .venv/bin/python -m bench.paper_bench --only batch50,linger --idempotence --max-seconds 10 \
        --producer-runs 5                                       # the cost of idempotence
    raftlog bench [same options]                               # the same, from the CLI

The broker runs in its own process (`raftlog dev` on a free port, with a fresh data directory
on the real disk, stopped with SIGTERM at the end), so client and broker each have a core; the
clients run in this process, except the end-to-end consumer, which runs in a child process.
One topic with one partition per phase. Values are 200 bytes, keys null, no headers.

Phases (`--only` picks some; the consumers need the data of the producer phase they read):

- `single`: one producer, acks=1, one message per request: linger_ms=0, batch_size=1 (every
  batch is full after one record) and max_request_size=1 (a request carries one batch), with
  up to 1000 requests outstanding (`--max-in-flight`; Kafka 2011's producer did not wait for
  acknowledgements, so a deep pipeline is the acks=1 equivalent). Kafka 2011: 50,000 msg/s.
- `batch50`: batches of 50: batch_size = header + 50 records, so the 50th record fills a batch;
  linger_ms=1000 so no batch leaves before it is full (the last one is flushed) and
  max_request_size = one batch, so each request carries exactly 50 messages; up to 1000
  requests outstanding. Kafka 2011: 400,000 msg/s.
- `linger`: tuned: linger_ms=5, batch_size=1,000,000, default max_request_size (1 MiB), 5
  requests in flight (Kafka's default).
  batch_size stays below the broker's max_message_bytes (1 MiB + 12): the producer closes a
  batch only once it reaches batch_size, so batch_size=1 MiB makes batches of 1 MiB + one record,
  which the broker refuses (RecordTooLargeError). Kafka 2014: 821,557 rec/s (100-byte records).
- `consumer` / `sendfile`: one consumer reads the messages of `--consume-from` (default the
  linger phase's topic) from offset 0 with fetches of `--fetch-bytes` (max_partition_fetch_bytes,
  default 200 KiB), decoding every record (the Consumer builds a ConsumerRecord for each and the
  loop reads its value); `consumer` against a broker started with --no-fetch-zero-copy
  (buffered pread + write), `sendfile` against one with --fetch-zero-copy (the default), on the
  same data. Kafka 2011: 22,000 msg/s; Kafka 2014: 940,521 rec/s.
- `e2e`: end-to-end latency at a fixed rate (`--e2e-rate`, default 10,000 msg/s, for
  `--e2e-seconds`): this process sends on a paced schedule (linger_ms=0, acks=1) and stamps
  `time.monotonic_ns()` into the first 8 bytes of each value just before `send()`. Pacing is
  Kafka's `ThroughputThrottler` (its producer performance tool's): sleep only once at least
  `--e2e-pacing-ms` (2 ms, its MIN_SLEEP_NS) ahead of schedule, then send every record whose
  time has come, so at 10,000 msg/s records go in bursts of ~20 every 2 ms; each is stamped
  when it is sent, so the pacing never hides a wait. `--e2e-pacing-ms 0` sleeps until each
  record's own time instead (one send every 0.1 ms: on this 2-core machine each tiny sleep
  and each one-record request costs a wakeup in every process, which the latency then
  measures: RF=3 acks=all p50 ~6.4 ms at 0, ~2.5 ms at 2, same code). A consumer in
  a child process long-polls (fetch_min_bytes=1, fetch_max_wait_ms=500) and records
  now - stamp when `poll` returns. CLOCK_MONOTONIC is system-wide, so the two processes share
  it. The first `--e2e-warmup` seconds are left out of the percentiles (not of the plot).
  Kafka 2014: 2 ms median.

`--idempotence` adds, in each producer run, the `batch50` and `linger` phases (those of them
that run) with acks=all and at most 5 requests in flight (what idempotence allows), once with
idempotence off and once on, in turns (the order alternates from run to run), on the same
broker: the cost of idempotence, in a table of its own with each run's load average (the
machine is shared: only figures of the same run compare).

Each producer phase sends `--messages` records or stops sending after `--max-seconds`, whichever
comes first (the report says when the time budget ended a phase and how many records were sent);
its time runs from the first send to the end of `flush()`, so a phase cut by the budget also
spends the time to deliver what the producer had buffered (up to its buffer_memory, 32 MiB:
about 20 s more for the one-message-per-request phase here). After a phase the log end offset
must equal the records sent (every record acknowledged and appended), and the average records
per batch is computed from the log's size. The consumer phases read the same number of records
(or stop at `--max-seconds`). MB = 10^6 bytes of record values (200 bytes each), as the paper
counts messages. Client CPU is this process's CPU time (all threads), broker CPU the broker
process's, both from the kernel's accounting, so the tables show where time goes.

Results: a markdown table on stdout and in bench/results/paper-<timestamp>.md, the same figures
in .json, and the plots paper-<timestamp>-throughput.png and paper-<timestamp>-latency.png
(skipped with a note when matplotlib is missing). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import select
import struct
import subprocess
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import common
from bench.common import REPO, report_head
from raftlog.launcher import (
    LaunchError,
    NodeProcess,
    bootstrap_of,
    dev_process,
    process_cpu_seconds,
)
from raftlog.records import HEADER_SIZE, RECORD_MIN_SIZE

DEFAULT_RESULTS_DIR = REPO / "bench" / "results"
MB = 1e6
KIB = 1024
# Bytes one record takes in a batch: its entry in the length table plus its body (null key,
# no headers): what the log-size arithmetic below needs.
RECORD_OVERHEAD = 4 + RECORD_MIN_SIZE

PHASES = ("single", "batch50", "linger", "consumer", "sendfile", "e2e")
# Requests in flight per phase (--max-in-flight overrides): Kafka 2011's producer did not
# wait for acknowledgements at all, so the phases that send many small requests get a deep
# pipeline, the nearest acks=1 equivalent; the others keep Kafka's default of 5.
PHASE_IN_FLIGHT = {"single": 1000, "batch50": 1000, "linger": 5, "e2e": 5}
PRODUCER_PHASES = ("single", "batch50", "linger")
# The producer phases that --idempotence also runs with acks=all, idempotence off and on (the
# issue's "batches of 50 and lingered batches"; one record per request at acks=all with 5 in
# flight measures the round trip, not idempotence).
IDEMPOTENCE_PHASES = ("batch50", "linger")

# The published figures (records of 200 bytes in 2011, 100 bytes in 2014).
PAPER_2011 = {"single": 50_000.0, "batch50": 400_000.0, "consumer": 22_000.0}
KAFKA_2014 = {"linger": 821_557.0, "consumer": 940_521.0, "e2e_p50_ms": 2.0}
# The targets: (minimum, stretch) in records/s; latency: maximum p50 in ms.
TARGETS: dict[str, tuple[float, float | None]] = {
    "single": (50_000.0, None),
    "batch50": (400_000.0, None),
    "linger": (400_000.0, 821_557.0),
    "consumer": (940_521.0, None),
    "sendfile": (940_521.0, None),
}
TARGET_E2E_P50_MS = 2.0
# Kafka's ThroughputThrottler (the producer performance tool's pacing) sleeps only once it is
# at least 2 ms ahead of schedule (MIN_SLEEP_NS).
E2E_PACING_MS = 2.0

DEFAULTS: dict[str, Any] = {
    "messages": 10_000_000,
    "max_seconds": 60.0,
    "e2e_rate": 10_000,
    "e2e_seconds": 15.0,
    "e2e_warmup": 1.0,
}
QUICK: dict[str, Any] = {
    "messages": 20_000,
    "max_seconds": 10.0,
    "e2e_rate": 2_000,
    "e2e_seconds": 2.0,
    "e2e_warmup": 0.0,
}


# -- options ------------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared with `raftlog bench`)."""
    p.add_argument(
        "--messages",
        type=int,
        help=f"records per producer phase (default {DEFAULTS['messages']:,}; quick "
        f"{QUICK['messages']:,})",
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        help="time budget of each producer and consumer phase: stop sending (reading) after "
        f"this long (default {DEFAULTS['max_seconds']:g}; quick {QUICK['max_seconds']:g})",
    )
    p.add_argument("--value-bytes", type=int, default=200, help="record value size (200)")
    p.add_argument(
        "--max-in-flight",
        type=int,
        help="max_in_flight_requests_per_connection of every producer phase (default per "
        "phase: "
        + ", ".join(f"{k} {v}" for k, v in PHASE_IN_FLIGHT.items())
        + "; see the module docstring)",
    )
    p.add_argument(
        "--fetch-bytes",
        type=int,
        default=200 * KIB,
        help="consumer max_partition_fetch_bytes (default 204800, the paper's 200 KB)",
    )
    p.add_argument(
        "--poll-records",
        type=int,
        default=500,
        help="max_records per consumer poll (default 500, Kafka's max.poll.records)",
    )
    p.add_argument(
        "--consume-from",
        choices=PRODUCER_PHASES,
        default="linger",
        help="whose topic the consumer phases read (default linger)",
    )
    p.add_argument(
        "--producer-runs",
        type=int,
        default=1,
        help="runs of each producer phase (the phases take turns, each run on a new topic); "
        "the table shows the median (default 1)",
    )
    p.add_argument(
        "--consumer-runs",
        type=int,
        default=1,
        help="runs of each consumer phase, alternating buffered and sendfile brokers; the "
        "table shows the median (default 1)",
    )
    p.add_argument(
        "--idempotence",
        action="store_true",
        help="also run the batch50 and linger phases with acks=all and 5 requests in flight, "
        "idempotence off and on in turns, each producer run: the cost of idempotence",
    )
    add_e2e_arguments(p)
    p.add_argument(
        "--only",
        default=",".join(PHASES),
        help=f"comma-separated phases to run, of {', '.join(PHASES)} (default all)",
    )
    add_run_arguments(p, "the broker")


def add_e2e_arguments(p: argparse.ArgumentParser) -> None:
    """The latency phase's options (this benchmark's and the replication benchmark's)."""
    p.add_argument("--e2e-rate", type=int, help="messages/s of the latency phase (10000)")
    p.add_argument("--e2e-seconds", type=float, help="duration of the latency phase (15)")
    p.add_argument(
        "--e2e-warmup",
        type=float,
        help="seconds at the start of the latency phase left out of the percentiles (1)",
    )
    p.add_argument(
        "--e2e-pacing-ms",
        type=float,
        default=E2E_PACING_MS,
        help="the latency phase sleeps only when at least this far ahead of schedule, as "
        f"Kafka's ThroughputThrottler does ({E2E_PACING_MS:g}); 0: until each record's time",
    )


def add_run_arguments(p: argparse.ArgumentParser, whose: str) -> None:
    """--quick, where the data and the results go, plots, a note: `whose` data ("the broker")."""
    p.add_argument("--quick", action="store_true", help="small N and short phases (for tests)")
    p.add_argument(
        "--data-dir",
        help=f"parent of {whose}'s temporary data directory (default /var/tmp if it is a "
        "real disk, else the system temp dir)",
    )
    p.add_argument("--keep-data", action="store_true", help=f"keep {whose}'s data directory")
    p.add_argument(
        "--results-dir",
        default=str(DEFAULT_RESULTS_DIR),
        help="where the .md, .json and .png files go (default bench/results)",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--note", default="", help="a line of context to put in the report")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.paper_bench",
        description="The Kafka paper's producer/consumer/latency experiment against raftlog.",
    )
    add_arguments(p)
    return p


@dataclass
class Settings:
    messages: int
    max_seconds: float
    value_bytes: int
    max_in_flight: int | None  # None: PHASE_IN_FLIGHT
    fetch_bytes: int
    poll_records: int
    consume_from: str
    consumer_runs: int
    producer_runs: int
    e2e_rate: int
    e2e_seconds: float
    e2e_warmup: float
    phases: list[str]
    quick: bool
    e2e_pacing_ms: float = E2E_PACING_MS
    # None: the paper's setup (acks=1, deep pipelines, no idempotence). True / False: acks=all
    # with at most 5 requests in flight, with / without idempotence (run_idempotence_pair).
    idempotence: bool | None = None
    # --idempotence: each producer run also runs IDEMPOTENCE_PHASES with idempotence off and on.
    idempotence_rows: bool = False


def option_picker(
    args: argparse.Namespace, defaults: dict[str, Any], quick: dict[str, Any]
) -> Callable[[str], Any]:
    """pick(name): the option's value if given, else its --quick or normal default."""
    base = quick if args.quick else defaults

    def pick(name: str) -> Any:
        value = getattr(args, name)
        return base[name] if value is None else value

    return pick


def parse_only(only: str, known: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """The phases --only names, in the order of `known`; a usage error for unknown ones."""
    phases = [x.strip() for x in only.split(",") if x.strip()]
    unknown = [x for x in phases if x not in known]
    if unknown or not phases:
        parser.error(f"--only: unknown phase(s) {', '.join(unknown) or '(none)'}; of {known}")
    return [x for x in known if x in phases]


def settings_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Settings:
    pick = option_picker(args, DEFAULTS, QUICK)
    phases = parse_only(args.only, PHASES, parser)
    s = Settings(
        messages=pick("messages"),
        max_seconds=pick("max_seconds"),
        value_bytes=args.value_bytes,
        max_in_flight=args.max_in_flight,
        fetch_bytes=args.fetch_bytes,
        poll_records=args.poll_records,
        consume_from=args.consume_from,
        consumer_runs=args.consumer_runs,
        producer_runs=args.producer_runs,
        e2e_rate=pick("e2e_rate"),
        e2e_seconds=pick("e2e_seconds"),
        e2e_warmup=pick("e2e_warmup"),
        e2e_pacing_ms=args.e2e_pacing_ms,
        phases=phases,
        quick=args.quick,
        idempotence_rows=bool(getattr(args, "idempotence", False)),
    )
    for name in (
        "messages",
        "max_in_flight",
        "fetch_bytes",
        "poll_records",
        "consumer_runs",
        "producer_runs",
    ):
        if getattr(s, name) is not None and getattr(s, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if s.value_bytes < 8:
        parser.error("--value-bytes must be >= 8 (the latency phase stamps 8 bytes)")
    if s.max_seconds <= 0 or s.e2e_seconds <= 0 or s.e2e_rate < 1:
        parser.error("--max-seconds, --e2e-seconds and --e2e-rate must be > 0")
    if s.e2e_pacing_ms < 0:
        parser.error("--e2e-pacing-ms must be >= 0")
    if s.e2e_warmup < 0 or s.e2e_warmup >= s.e2e_seconds:
        parser.error("--e2e-warmup must be >= 0 and shorter than --e2e-seconds")
    # A consumer phase reads what a producer phase wrote.
    if ("consumer" in s.phases or "sendfile" in s.phases) and s.consume_from not in s.phases:
        s.phases = [x for x in PHASES if x in s.phases or x == s.consume_from]
    return s


# -- the producer modes -------------------------------------------------------------------------


def batch_bytes(records: int, value_bytes: int) -> int:
    """Size of a batch of `records` records with null keys and `value_bytes` values."""
    return HEADER_SIZE + records * (RECORD_OVERHEAD + value_bytes)


def producer_options(phase: str, s: Settings) -> dict[str, Any]:
    in_flight = s.max_in_flight or PHASE_IN_FLIGHT[phase]
    common: dict[str, Any] = {
        "acks": 1,
        "max_in_flight_requests_per_connection": in_flight,
        "enable_idempotence": False,
    }
    if s.idempotence is not None:
        common = {
            "acks": "all",
            "max_in_flight_requests_per_connection": min(in_flight, 5),
            "enable_idempotence": s.idempotence,
        }
    if phase == "single":
        return {**common, "linger_ms": 0, "batch_size": 1, "max_request_size": 1}
    if phase == "batch50":
        size = batch_bytes(50, s.value_bytes)
        return {**common, "linger_ms": 1000, "batch_size": size, "max_request_size": size}
    if phase == "linger":
        return {**common, "linger_ms": 5, "batch_size": 1_000_000}
    raise ValueError(phase)


LABELS = {
    "single": "producer, 1 msg/request",
    "batch50": "producer, batches of 50",
    "linger": "producer, linger 5 ms, 1 MB batches",
    "consumer": "consumer, {kb} KB fetches, buffered",
    "sendfile": "consumer, {kb} KB fetches, sendfile",
    "e2e_p50": "end-to-end latency p50",
    "e2e_p99": "end-to-end latency p99",
    "e2e_p999": "end-to-end latency p99.9",
}


def label(key: str, s: Settings) -> str:
    return LABELS[key].format(kb=f"{s.fetch_bytes / KIB:g}")


# -- progress -----------------------------------------------------------------------------------


class Progress:
    """A one-line text progress bar on stderr, redrawn a few times per second by a thread.

    The measured loop only stores a number (`update`); drawing happens elsewhere. When stderr
    is not a terminal a plain line is printed every few seconds instead.
    """

    def __init__(self, stream: Any = None):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = 0.25 if self.tty else 5.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.title = ""
        self.total = 1
        self.budget: float | None = None
        self.done = 0
        self.started = 0.0

    def start(self, title: str, total: int, budget: float | None = None) -> None:
        self.title, self.total, self.budget = title, max(total, 1), budget
        self.done = 0
        self.started = time.perf_counter()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._thread.start()

    def update(self, done: int) -> None:
        self.done = done

    def finish(self, note: str = "") -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._draw(final=True, note=note)

    def message(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._draw()

    def _draw(self, final: bool = False, note: str = "") -> None:
        elapsed = time.perf_counter() - self.started
        done = self.done
        frac = done / self.total
        if self.budget and not final:
            frac = max(frac, elapsed / self.budget)
        frac = min(frac, 1.0)
        width = 30
        filled = int(frac * width)
        bar = "#" * filled + "-" * (width - filled)
        rate = done / elapsed if elapsed > 0 else 0.0
        line = (
            f"{self.title:<38} [{bar}] {frac * 100:5.1f}% {done:>11,}/{self.total:,} "
            f"{rate:>10,.0f}/s {elapsed:6.1f}s"
        )
        if note:
            line += f"  {note}"
        if self.tty:
            end = "\n" if final else ""
            self.stream.write("\r\x1b[K" + line + end)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


# -- the broker process -------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc (0.0 where there is no /proc)."""
    return process_cpu_seconds(pid) or 0.0


class BrokerProcess:
    """`raftlog dev` in a child process on a free port, started by the launcher
    (raftlog/launcher.py): ready once its ready file names it; `stop()` sends SIGTERM."""

    def __init__(self, data_dir: str, log_path: str, zero_copy: bool, metrics: bool = True):
        self.data_dir, self.log_path, self.zero_copy = data_dir, log_path, zero_copy
        self.metrics = metrics  # raftlog dev --metrics (its default) / --no-metrics
        self.dev: NodeProcess | None = None
        self.bootstrap = ""
        self.metrics_url: str | None = None  # from the ready file, with --metrics

    def start(self, timeout_s: float = 60.0) -> None:
        args = ["--port", "0", "--log-level", "WARNING"]
        args.append("--fetch-zero-copy" if self.zero_copy else "--no-fetch-zero-copy")
        args.append("--metrics" if self.metrics else "--no-metrics")
        with open(self.log_path, "ab") as log:
            self.dev = dev_process(
                self.data_dir, args, stdout=subprocess.DEVNULL, stderr=log, cwd=REPO
            )
            self.dev.launch()
        try:
            infos = self.dev.wait_ready(timeout_s)
        except LaunchError as e:
            self.stop()
            raise RuntimeError(f"{e}: {self.log_tail()}") from None
        self.bootstrap = bootstrap_of(infos)
        self.metrics_url = infos[0].get("metrics_url")

    @property
    def pid(self) -> int:
        pid = self.dev.pid if self.dev is not None else None
        if pid is None:
            raise RuntimeError("the broker is not running")
        return pid

    def cpu_seconds(self) -> float:
        return _cpu_seconds(self.pid)

    def log_tail(self, lines: int = 10) -> str:
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-lines:]).strip() or "(no output)"
        except OSError:
            return "(no log)"

    def stop(self, timeout_s: float = 60.0) -> None:
        if self.dev is not None:
            self.dev.stop(timeout_s)


# -- measurements -------------------------------------------------------------------------------


@dataclass
class PhaseResult:
    phase: str
    label: str
    records: int = 0
    target_records: int = 0
    seconds: float = 0.0
    client_cpu_s: float = 0.0
    broker_cpu_s: float = 0.0
    budget_hit: bool = False
    records_per_batch: float | None = None
    options: dict[str, Any] = field(default_factory=dict)
    runs: list[float] = field(default_factory=list)  # records/s of each run of the phase
    error: str | None = None

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def mb_per_s(self, value_bytes: int) -> float:
        return self.records_per_s * value_bytes / MB


@contextlib.contextmanager
def measured(result: PhaseResult, broker: BrokerProcess) -> Iterator[None]:
    cpu0, bcpu0, t0 = time.process_time(), broker.cpu_seconds(), time.perf_counter()
    try:
        yield
    finally:
        result.seconds = time.perf_counter() - t0
        result.client_cpu_s = time.process_time() - cpu0
        result.broker_cpu_s = broker.cpu_seconds() - bcpu0


def create_topic(bootstrap: str, topic: str) -> None:
    from raftlog.client import Admin

    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions=1)


def describe_partition(bootstrap: str, topic: str) -> tuple[int, int]:
    """(log end offset, log size in bytes) of partition 0."""
    from raftlog.client import Admin

    with Admin(bootstrap) as admin:
        (desc,) = admin.describe_topics([topic])
    p = desc.partitions[0]
    return p.log_end_offset, p.size_bytes


def run_producer(
    phase: str, topic: str, broker: BrokerProcess, s: Settings, progress: Progress
) -> PhaseResult:
    from raftlog.client import Producer

    options = producer_options(phase, s)
    res = PhaseResult(phase, label(phase, s), target_records=s.messages, options=options)
    create_topic(broker.bootstrap, topic)
    value = bytes(range(256)) * (s.value_bytes // 256 + 1)
    value = value[: s.value_bytes]
    producer = Producer(bootstrap_servers=broker.bootstrap, client_id=f"bench-{phase}", **options)
    progress.start(res.label, s.messages, s.max_seconds)
    try:
        with measured(res, broker):
            sent, res.budget_hit, last = send_all(producer, topic, value, s, progress)
    finally:
        progress.finish("(time budget reached)" if res.budget_hit else "")
        producer.close()
    if last is not None and last.exception(0) is not None:
        res.error = f"last record failed: {last.exception(0)!r}"
    end, size = describe_partition(broker.bootstrap, topic)
    res.records = end
    if end != sent:
        res.error = f"{sent:,} records sent but the log ends at offset {end:,}"
    if end:
        batches = (size - end * (RECORD_OVERHEAD + s.value_bytes)) / HEADER_SIZE
        res.records_per_batch = end / batches if batches > 0 else None
    return res


def send_all(
    producer: Any, topic: str, value: bytes, s: Any, progress: Progress
) -> tuple[int, bool, Any]:
    """Send `value` to `topic` `s.messages` times or until `s.max_seconds` have passed, then
    flush: (records sent, whether the time budget ended it, the last record's future)."""
    n, chunk = s.messages, 1000
    sent = 0
    last = None
    budget_hit = False
    send = producer.send
    deadline = time.perf_counter() + s.max_seconds
    while sent < n:
        k = min(chunk, n - sent)
        for _ in range(k):
            last = send(topic, value)
        sent += k
        progress.update(sent)
        if time.perf_counter() >= deadline:
            budget_hit = sent < n
            break
    producer.flush()
    return sent, budget_hit, last


@dataclass
class IdempotenceRun:
    """One run of a phase with acks=all, idempotence off or on."""

    phase: str
    idempotence: bool
    records_per_s: float
    seconds: float
    load_average: float  # the 1-minute load average when the run started


def run_idempotence_pair(
    run_index: int,
    phases: Sequence[str],
    broker: BrokerProcess,
    s: Settings,
    progress: Progress,
    runs: list[IdempotenceRun],
) -> None:
    """Each of `phases` with acks=all, idempotence off then on (on then off in odd runs), each
    on a topic of its own; appends to `runs`. A phase that fails raises SystemExit."""
    order = (False, True) if run_index % 2 == 0 else (True, False)
    for phase in phases:
        for idem in order:
            load = os.getloadavg()[0]
            topic = f"paper-{phase}-idempotence-{'on' if idem else 'off'}-{run_index}"
            settings = dataclasses.replace(s, idempotence=idem)
            r = run_producer(phase, topic, broker, settings, progress)
            if r.error:
                raise SystemExit(f"{phase} acks=all idempotence={idem}: {r.error}")
            runs.append(IdempotenceRun(phase, idem, r.records_per_s, r.seconds, load))


def render_idempotence(runs: Sequence[IdempotenceRun]) -> str:
    """The cost of idempotence per phase: medians of the runs off and on, and every run's
    records/s with the load average it started at."""
    head = (
        "| phase (acks=all, 5 in flight) | idempotence off rec/s | on rec/s | cost "
        "| cost, median of the runs' on / off "
        "| runs off (rec/s @ load) | runs on (rec/s @ load) |\n|---|---:|---:|---:|---:|---|---|\n"
    )
    lines = []
    for phase in dict.fromkeys(r.phase for r in runs):
        off = [r for r in runs if r.phase == phase and not r.idempotence]
        on = [r for r in runs if r.phase == phase and r.idempotence]
        m_off = _median([r.records_per_s for r in off])
        m_on = _median([r.records_per_s for r in on])

        def each(rs: list[IdempotenceRun]) -> str:
            return ", ".join(f"{r.records_per_s:,.0f} @ {r.load_average:.2f}" for r in rs)

        # Each run's pair ran back to back: the load they saw is closer than across runs.
        paired = _median([b.records_per_s / a.records_per_s for a, b in zip(off, on, strict=True)])
        lines.append(
            f"| {LABELS[phase]} | {m_off:,.0f} | {m_on:,.0f} | {(m_on / m_off - 1) * 100:+.1f}% "
            f"| {(paired - 1) * 100:+.1f}% | {each(off)} | {each(on)} |"
        )
    return head + "\n".join(lines) + "\n"


def run_consumer(
    phase: str, topic: str, records: int, broker: BrokerProcess, s: Settings, progress: Progress
) -> PhaseResult:
    from raftlog.client import Consumer, TopicPartition

    options = {
        "max_partition_fetch_bytes": s.fetch_bytes,
        "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": 500,
    }
    res = PhaseResult(phase, label(phase, s), target_records=records, options=options)
    tp = TopicPartition(topic, 0)
    consumer = Consumer(bootstrap_servers=broker.bootstrap, client_id=f"bench-{phase}", **options)
    got = nbytes = 0
    progress.start(res.label, records, s.max_seconds)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        poll, limit = consumer.poll, s.poll_records
        with measured(res, broker):
            deadline = time.perf_counter() + s.max_seconds
            while got < records:
                for recs in poll(1000, limit).values():
                    if recs[0].offset != got:
                        raise RuntimeError(f"expected offset {got}, got {recs[0].offset}")
                    for r in recs:
                        nbytes += len(r.value)  # type: ignore[arg-type]
                    got += len(recs)
                progress.update(got)
                if time.perf_counter() >= deadline:
                    res.budget_hit = got < records
                    break
    finally:
        progress.finish("(time budget reached)" if res.budget_hit else "")
        consumer.close()
    res.records = got
    if nbytes != got * s.value_bytes:
        res.error = f"read {nbytes:,} value bytes for {got:,} records"
    return res


def e2e_consumer(
    bootstrap: str, topic: str, expected: int, timeout_s: float, out_path: str
) -> None:  # pragma: no cover - runs in a child process
    """Long-poll `topic`; write (send stamps, latencies) in ns to `out_path` as two int64 arrays.

    Prints "ready" once its position is set, so the producer starts only then."""
    from raftlog.client import Consumer, TopicPartition

    tp = TopicPartition(topic, 0)
    stamps, lat = array("q"), array("q")
    unpack = struct.Struct("<q").unpack_from
    with Consumer(
        bootstrap_servers=bootstrap,
        client_id="bench-e2e-consumer",
        auto_offset_reset="earliest",
        fetch_min_bytes=1,
        fetch_max_wait_ms=500,
    ) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        consumer.poll(0)
        print("ready", flush=True)
        deadline = time.monotonic() + timeout_s
        got = 0
        while got < expected and time.monotonic() < deadline:
            batch = consumer.poll(500, 10_000)
            now = time.monotonic_ns()
            for recs in batch.values():
                for r in recs:
                    (sent,) = unpack(r.value)  # type: ignore[arg-type]
                    stamps.append(sent)
                    lat.append(now - sent)
                got += len(recs)
    with open(out_path, "wb") as f:
        f.write(struct.pack("<q", len(stamps)))
        f.write(stamps.tobytes())
        f.write(lat.tobytes())


# The child process of the latency phase: a fresh interpreter that imports this module (the
# installed `bench` package, or the repository's: the child runs in it, and `-c` puts the
# current directory first on the path), whatever started the benchmark.
_E2E_CHILD = (
    "import sys; from bench.paper_bench import e2e_consumer; "
    "e2e_consumer(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])"
)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted sequence."""
    if not sorted_values:
        return math.nan
    rank = max(math.ceil(q / 100 * len(sorted_values)), 1)
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


@dataclass
class E2EResult:
    rate: int
    seconds: float
    warmup: float
    sent: int = 0
    received: int = 0
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    p999_ms: float = math.nan
    max_ms: float = math.nan
    achieved_rate: float = 0.0
    pacing_ms: float = E2E_PACING_MS
    per_second: list[dict[str, float]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def pacing_note(e2e: E2EResult) -> str:
    if e2e.pacing_ms > 0:
        return f"paced in bursts, sleeping when >= {e2e.pacing_ms:g} ms ahead"
    return "paced record by record"


def run_e2e(
    topic: str,
    bootstrap: str,
    s: Settings,
    progress: Progress,
    work_dir: str,
    acks: int | str = 1,
    create: bool = True,
) -> E2EResult:
    """The latency phase against `bootstrap` (the replication benchmark runs it too, with
    acks="all" on a topic it created itself: create=False)."""
    from raftlog.client import Producer

    total = int(s.e2e_rate * s.e2e_seconds)
    options = {
        "acks": acks,
        "linger_ms": 0,
        "max_in_flight_requests_per_connection": s.max_in_flight or PHASE_IN_FLIGHT["e2e"],
    }
    res = E2EResult(
        s.e2e_rate, s.e2e_seconds, s.e2e_warmup, pacing_ms=s.e2e_pacing_ms, options=options
    )
    if create:
        create_topic(bootstrap, topic)
    out_path = os.path.join(work_dir, "e2e-latencies.bin")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _E2E_CHILD,
            bootstrap,
            topic,
            str(total),
            str(s.e2e_seconds + 30),
            out_path,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    producer = Producer(bootstrap_servers=bootstrap, client_id="bench-e2e", **options)
    try:
        started = select.select([proc.stdout], [], [], 60)[0]
        if not started or proc.stdout.readline().strip() != "ready":
            proc.kill()
            raise RuntimeError(f"the latency consumer did not start (exit code {proc.wait()})")
        pad = bytes(s.value_bytes - 8)
        pack = struct.Struct("<q").pack
        send, monotonic_ns = producer.send, time.monotonic_ns
        interval = 1e9 / s.e2e_rate
        min_sleep = s.e2e_pacing_ms / 1000
        progress.start(f"end-to-end latency at {s.e2e_rate:,} msg/s", total)
        start = monotonic_ns()
        i = 0
        try:
            while i < total:
                now = monotonic_ns()
                due = min(int((now - start) / interval) + 1, total)
                while i < due:  # every message whose time has come, each stamped as it goes
                    send(topic, pack(monotonic_ns()) + pad)
                    i += 1
                progress.update(i)
                wait = (start + i * interval - monotonic_ns()) / 1e9
                if wait > 0:
                    time.sleep(max(wait, min_sleep))
            res.achieved_rate = total / ((monotonic_ns() - start) / 1e9)
            producer.flush()
            res.sent = total
        finally:
            progress.finish()
        code = proc.wait(s.e2e_seconds + 60)
        if code != 0:
            raise RuntimeError(f"the latency consumer exited with {code}")
        with open(out_path, "rb") as f:
            (count,) = struct.unpack("<q", f.read(8))
            stamps, lat = array("q"), array("q")
            stamps.frombytes(f.read(8 * count))
            lat.frombytes(f.read(8 * count))
    finally:
        producer.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    res.received = len(lat)
    if res.received != total:
        res.error = f"{total:,} sent, {res.received:,} received"
    warm = start + s.e2e_warmup * 1e9
    steady = sorted(v / 1e6 for t, v in zip(stamps, lat, strict=True) if t >= warm)
    if steady:
        res.p50_ms = percentile(steady, 50)
        res.p99_ms = percentile(steady, 99)
        res.p999_ms = percentile(steady, 99.9)
        res.max_ms = steady[-1]
    buckets: dict[int, list[float]] = {}
    last = max(math.ceil(s.e2e_seconds) - 1, 0)  # a late send counts in the last second
    for t, v in zip(stamps, lat, strict=True):
        buckets.setdefault(min(int((t - start) // 1_000_000_000), last), []).append(v / 1e6)
    for sec in sorted(buckets):
        vals = sorted(buckets[sec])
        res.per_second.append(
            {
                "second": sec,
                "count": len(vals),
                "p50_ms": percentile(vals, 50),
                "p99_ms": percentile(vals, 99),
                "max_ms": vals[-1],
            }
        )
    return res


# -- the report ---------------------------------------------------------------------------------


def _status(value: float, target: tuple[float, float | None]) -> str:
    low, stretch = target
    if value < low:
        return "missed"
    if stretch is None:
        return "met"
    return "met, stretch met" if value >= stretch else "met, stretch missed"


def python_floor(value_bytes: int, records: int = 200_000, runs: int = 5) -> float:
    """Records/s of the least Python work a producer does per record, median of `runs`: read
    the clock, encode the record's fixed part, keep its pieces (no lock, no future, no
    batches, no I/O). Measured at the start and the end of the run, it is this run's baseline:
    it shows how fast the (shared, noisy) machine was, and the producers' figures are quoted
    as a share of it."""
    fixed = struct.Struct("<bqii").pack
    value = bytes(value_bytes)
    trailer = bytes(4)
    rates = []
    for _ in range(runs):
        parts: list[bytes] = []
        t = time.perf_counter()
        for _ in range(records):
            parts += (fixed(0, time.time_ns() // 1_000_000, -1, value_bytes), value, trailer)
        rates.append(records / (time.perf_counter() - t))
    return _median(rates)


def settle_before_reading(
    bootstrap: str, data_dir: str, produced: list[str], keep: str, progress: Progress
) -> None:
    """Delete the producer phases' topics the consumers do not read and flush dirty pages, so
    that the consumer phases measure reads, not the kernel writing back gigabytes of earlier
    phases meanwhile (with --producer-runs 3 the producers write ~18 GB; the consumer measured
    767k rec/s right after that and 974k in a run where writeback was done)."""
    from raftlog.client import Admin

    others = [t for t in produced if t != keep]
    if others:
        with Admin(bootstrap) as admin:
            admin.delete_topics(others)
        # The broker removes the partition directories after the deletion commits; the
        # consumers must not run while it unlinks gigabytes.
        logs = Path(data_dir) / "logs"
        doomed = set(others)

        def left() -> bool:  # a partition directory is <topic>-<partition>
            return any(d.name.rpartition("-")[0] in doomed for d in logs.iterdir())

        deadline = time.monotonic() + 120
        while left() and time.monotonic() < deadline:
            time.sleep(0.2)
    progress.message(f"deleted {len(others)} topics the consumers do not read; syncing")
    os.sync()


def merge_run(results: dict[str, PhaseResult], phase: str, r: PhaseResult) -> None:
    """Record one more run of a phase: `runs` collects every run's rate (the table shows their
    median), the other fields are the latest run's, and an error of any run is kept."""
    prev = results.get(phase)
    r.runs = [*(prev.runs if prev else []), r.records_per_s]
    if prev is not None and prev.error and not r.error:
        r.error = prev.error
    results[phase] = r


def _median(xs: Sequence[float]) -> float:
    ys = sorted(xs)
    mid = len(ys) // 2
    return ys[mid] if len(ys) % 2 else (ys[mid - 1] + ys[mid]) / 2


def build_rows(
    s: Settings, results: dict[str, PhaseResult], e2e: E2EResult | None
) -> list[dict[str, Any]]:
    """One row per measurement, every row present even when its phase did not run."""
    rows: list[dict[str, Any]] = []
    for phase in ("single", "batch50", "linger", "consumer", "sendfile"):
        r = results.get(phase)
        target = TARGETS[phase]
        row: dict[str, Any] = {
            "key": phase,
            "measurement": label(phase, s),
            "paper_2011": PAPER_2011.get(phase if phase != "sendfile" else "consumer"),
            "kafka_2014": KAFKA_2014.get(phase if phase != "sendfile" else "consumer"),
            "target": f">= {target[0]:,.0f}"
            + (f" (stretch >= {target[1]:,.0f})" if target[1] else ""),
            "unit": "rec/s",
        }
        if r is None:
            row.update(value=None, mb_s=None, status="not run", notes="")
        else:
            rate = _median(r.runs) if r.runs else r.records_per_s
            notes = []
            if phase in PRODUCER_PHASES:
                notes.append(f"max_in_flight={r.options['max_in_flight_requests_per_connection']}")
                if r.records_per_batch:
                    notes.append(f"{r.records_per_batch:,.1f} rec/batch")
            if len(r.runs) > 1:
                notes.append(
                    f"median of {len(r.runs)} runs ({min(r.runs):,.0f}-{max(r.runs):,.0f})"
                )
            if r.budget_hit:
                notes.append(
                    f"time budget: {r.records:,} of {r.target_records:,} records "
                    f"in {r.seconds:.1f} s"
                )
            if r.error:
                notes.append(f"ERROR: {r.error}")
            row.update(
                value=rate,
                mb_s=rate * s.value_bytes / MB,
                status="failed" if r.error else _status(rate, target),
                notes="; ".join(notes),
            )
        rows.append(row)
    for key, attr, paper, tgt in (
        ("e2e_p50", "p50_ms", KAFKA_2014["e2e_p50_ms"], TARGET_E2E_P50_MS),
        ("e2e_p99", "p99_ms", None, None),
        ("e2e_p999", "p999_ms", None, None),
    ):
        row = {
            "key": key,
            "measurement": label(key, s),
            "paper_2011": None,
            "kafka_2014": paper,
            "target": f"<= {tgt:g} ms at 10,000 msg/s" if tgt is not None else "—",
            "unit": "ms",
            "mb_s": None,
        }
        if e2e is None:
            row.update(value=None, status="not run", notes="")
        else:
            value = getattr(e2e, attr)
            notes = [
                f"{e2e.rate:,} msg/s for {e2e.seconds:g} s (achieved {e2e.achieved_rate:,.0f}), "
                f"{pacing_note(e2e)}, first {e2e.warmup:g} s left out"
            ]
            if e2e.error:
                notes.append(f"ERROR: {e2e.error}")
            if e2e.error or math.isnan(value):
                status = "failed"
            elif tgt is None:
                status = "—"
            else:
                status = "met" if value <= tgt and e2e.rate >= 10_000 else "missed"
                if value <= tgt and e2e.rate < 10_000:
                    status = f"met at {e2e.rate:,} msg/s only"
            row.update(value=value, status=status, notes="; ".join(notes))
        rows.append(row)
    return rows


def render_table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| measurement | raftlog | MB/s | Kafka 2011 paper | Kafka 2014 benchmark | target "
        "| status | notes |\n|---|---:|---:|---:|---:|---|---|---|\n"
    )
    lines = []
    for r in rows:
        if r["unit"] == "ms":
            ours = "—" if r["value"] is None else f"{r['value']:.2f} ms"
            paper14 = "—" if r["kafka_2014"] is None else f"{r['kafka_2014']:g} ms (median)"
            paper11 = "—"
            mb = "—"
        else:
            ours = "—" if r["value"] is None else f"{r['value']:,.0f} rec/s"
            mb = "—" if r["mb_s"] is None else f"{r['mb_s']:.1f}"
            paper11 = "—" if r["paper_2011"] is None else f"{r['paper_2011']:,.0f} msg/s"
            paper14 = "—" if r["kafka_2014"] is None else f"{r['kafka_2014']:,.0f} rec/s"
        lines.append(
            f"| {r['measurement']} | {ours} | {mb} | {paper11} | {paper14} | {r['target']} "
            f"| {r['status']} | {r['notes']} |"
        )
    return head + "\n".join(lines) + "\n"


def _share(cpu_s: float, wall_s: float) -> str:
    return "—" if math.isnan(wall_s) else f"{cpu_s / wall_s * 100:.0f}%"


def render_phases(s: Settings, results: dict[str, PhaseResult]) -> str:
    head = (
        "| phase | records | seconds | rec/s | MB/s | client CPU s (% of wall) "
        "| broker CPU s (% of wall) | options |\n|---|---:|---:|---:|---:|---:|---:|---|\n"
    )
    lines = []
    for phase in PHASES:
        r = results.get(phase)
        if r is None:
            continue
        # CPU times come in 10 ms ticks: a share of a phase shorter than a second means little.
        wall = r.seconds if r.seconds >= 1.0 else math.nan
        opts = ", ".join(f"{k}={v}" for k, v in r.options.items())
        if len(r.runs) > 1:
            opts = f"last of {len(r.runs)} runs (the table above has the median); {opts}"
        lines.append(
            f"| {r.label} | {r.records:,} | {r.seconds:.2f} | {r.records_per_s:,.0f} "
            f"| {r.mb_per_s(s.value_bytes):.1f} "
            f"| {r.client_cpu_s:.1f} ({_share(r.client_cpu_s, wall)}) "
            f"| {r.broker_cpu_s:.1f} ({_share(r.broker_cpu_s, wall)}) | {opts} |"
        )
    return head + "\n".join(lines) + "\n"


def render_e2e(e2e: E2EResult) -> str:
    lines = [
        f"Sent {e2e.sent:,}, received {e2e.received:,} at {e2e.rate:,} msg/s "
        f"(achieved {e2e.achieved_rate:,.0f}, {pacing_note(e2e)}); producer {e2e.options}.",
        f"Latency after the first {e2e.warmup:g} s: p50 {e2e.p50_ms:.2f} ms, "
        f"p99 {e2e.p99_ms:.2f} ms, p99.9 {e2e.p999_ms:.2f} ms, max {e2e.max_ms:.2f} ms.",
        "",
        "| second | messages | p50 ms | p99 ms | max ms |",
        "|---:|---:|---:|---:|---:|",
    ]
    for b in e2e.per_second:
        lines.append(
            f"| {b['second']:.0f} | {b['count']:,} | {b['p50_ms']:.2f} | {b['p99_ms']:.2f} "
            f"| {b['max_ms']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def plot(
    s: Settings,
    rows: list[dict[str, Any]],
    e2e: E2EResult | None,
    prefix: Path,
) -> tuple[list[str], str | None]:
    """Write the PNGs; returns (paths, a note when plotting was skipped)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return [], f"skipped the plots: matplotlib is not importable ({e})"
    paths = []
    thr = [r for r in rows if r["unit"] == "rec/s"]
    fig, ax = plt.subplots(figsize=(10, 5.5))
    ys = list(range(len(thr)))
    h = 0.27
    ours = [r["value"] or 0 for r in thr]
    p11 = [r["paper_2011"] or 0 for r in thr]
    p14 = [r["kafka_2014"] or 0 for r in thr]
    series = (
        (-h, ours, "raftlog (this machine)", "#1f77b4"),
        (0.0, p11, "Kafka paper 2011 (200 B msgs)", "#ff7f0e"),
        (h, p14, "Kafka 2014 benchmark (100 B records)", "#2ca02c"),
    )
    for dy, values, name, color in series:
        ax.barh([y + dy for y in ys], values, h, label=name, color=color)
        for y, v in zip(ys, values, strict=True):
            if v:
                ax.text(v, y + dy, f" {v:,.0f}", va="center", fontsize=7)
    for r, y in zip(thr, ys, strict=True):
        low = TARGETS[r["key"]][0]
        ax.plot([low, low], [y - 0.45, y + 0.45], color="red", lw=1.2, ls="--")
    ax.plot([], [], color="red", lw=1.2, ls="--", label="target")
    ax.set_yticks(ys, [r["measurement"] for r in thr])
    ax.invert_yaxis()
    ax.set_xscale("log")
    top = max([*ours, *p11, *p14, 1.0])
    ax.set_xlim(left=1_000, right=top * 3)
    ax.set_xlabel("records/s (log scale)")
    ax.set_title(
        f"raftlog vs the Kafka paper: {s.value_bytes}-byte messages, one producer / consumer"
    )
    fig.legend(loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path = Path(f"{prefix}-throughput.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(str(path))
    if e2e is not None and e2e.per_second:
        path = Path(f"{prefix}-latency.png")
        title = f"End-to-end latency at {e2e.rate:,} msg/s (acks=1, linger_ms=0)"
        plot_latency(plt, e2e, path, title, (KAFKA_2014["e2e_p50_ms"], "Kafka 2014 median"))
        paths.append(str(path))
    return paths, None


def plot_latency(
    plt: Any, e2e: E2EResult, path: Path, title: str, reference: tuple[float, str]
) -> None:
    """The latency phase's p50 and p99 per second, with a reference line (ms, label)."""
    fig, ax = plt.subplots(figsize=(10, 4.5))
    secs = [b["second"] for b in e2e.per_second]
    ax.plot(secs, [b["p50_ms"] for b in e2e.per_second], marker="o", label="p50")
    ax.plot(secs, [b["p99_ms"] for b in e2e.per_second], marker="s", label="p99")
    ax.axhline(reference[0], color="green", ls="--", label=reference[1])
    if e2e.warmup:
        ax.axvspan(-0.5, e2e.warmup - 0.5, color="grey", alpha=0.15, label="warm-up")
    ax.set_xlabel("second of the run (by send time)")
    ax.set_ylabel("end-to-end latency, ms")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- machine facts ------------------------------------------------------------------------------


def run(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    s = settings_from(args, parser or build_parser())
    command = common.command_line("bench.paper_bench", given=getattr(args, "command_line", None))
    wd = common.prepare_work_dir(args.data_dir, "raftlog-paper-")
    work, facts = wd.path, wd.facts
    data_dir = os.path.join(work, "data")
    floor_start = python_floor(s.value_bytes)
    facts["python_floor_at_start"] = f"{floor_start:,.0f} rec/s"
    progress = Progress()
    progress.message(
        f"paper bench: {', '.join(s.phases)}; {s.messages:,} messages of {s.value_bytes} B; "
        f"data in {data_dir}"
    )
    results: dict[str, PhaseResult] = {}
    e2e: E2EResult | None = None
    brokers: list[BrokerProcess] = []

    def broker(zero_copy: bool) -> BrokerProcess:
        """The running broker in the wanted fetch mode (restarting it on the same data)."""
        if brokers and brokers[-1].zero_copy == zero_copy:
            return brokers[-1]
        if brokers:
            brokers[-1].stop()
        b = BrokerProcess(data_dir, os.path.join(work, "broker.log"), zero_copy)
        b.start()
        progress.message(
            f"broker pid {b.pid} ready on {b.bootstrap} "
            f"({'sendfile' if zero_copy else 'buffered'} fetches)"
        )
        brokers.append(b)
        return b

    stamp = common.run_stamp(utc=False)
    idempotence_runs: list[IdempotenceRun] = []
    idempotence_phases = [p for p in IDEMPOTENCE_PHASES if p in s.phases]
    try:
        produced: list[str] = []
        for i in range(s.producer_runs):
            for phase in PRODUCER_PHASES:
                if phase in s.phases:
                    topic = f"paper-{phase}" + (f"-{i}" if i else "")
                    produced.append(topic)
                    r = run_producer(phase, topic, broker(False), s, progress)
                    merge_run(results, phase, r)
                    if r.error:
                        progress.message(f"  {phase}: {r.error}")
            if s.idempotence_rows:
                run_idempotence_pair(
                    i, idempotence_phases, broker(False), s, progress, idempotence_runs
                )
        source = results.get(s.consume_from)
        consumer_phases = [p for p in ("consumer", "sendfile") if p in s.phases]
        if consumer_phases and source is not None:
            # The last run's topic (its results are what `source` holds).
            i = s.producer_runs - 1
            consume_topic = f"paper-{s.consume_from}" + (f"-{i}" if i else "")
            n = source.records
            settle_before_reading(
                broker(False).bootstrap, data_dir, produced, consume_topic, progress
            )
            for i in range(s.consumer_runs):
                order = consumer_phases if i % 2 == 0 else consumer_phases[::-1]
                for phase in order:
                    b = broker(phase == "sendfile")
                    r = run_consumer(phase, consume_topic, n, b, s, progress)
                    merge_run(results, phase, r)
        if "e2e" in s.phases:
            e2e = run_e2e("paper-e2e", broker(False).bootstrap, s, progress, work)
    finally:
        for b in brokers:
            b.stop()
        common.keep_or_remove(work, args.keep_data, progress.message)

    rows = build_rows(s, results, e2e)
    floor_end = python_floor(s.value_bytes)
    facts["python_floor_at_end"] = f"{floor_end:,.0f} rec/s"
    floor = (floor_start + floor_end) / 2
    for row in rows:
        if row["key"] in PRODUCER_PHASES and row["value"]:
            row["notes"] = f"{row['value'] / floor:.0%} of the Python floor; " + row["notes"]
    table = render_table(rows)
    prefix = common.results_prefix(args.results_dir, "paper", stamp)
    pngs: list[str] = []
    plot_note = "plots skipped (--no-plots)"
    if not args.no_plots:
        pngs, plot_note_or_none = plot(s, rows, e2e, prefix)
        plot_note = plot_note_or_none or ""
    facts["load_average_at_end"] = common.load_average()

    md = [
        *report_head(f"raftlog vs the Kafka paper ({facts['date']})", command, args.note, facts),
        table,
        targets_line(rows),
        "",
        "Kafka figures: the 2011 paper (Kreps, Narkhede, Rao: NetDB'11; 200-byte messages, the "
        "producer did not wait for acknowledgements then) and the 2014 benchmark "
        "(100-byte records, three machines). raftlog: one broker process and one client on this "
        "machine, acks=1, 200-byte values. MB/s = 10^6 bytes of values per second.",
        "",
        "The Python floor (in Machine) is this run's baseline: records/s of a loop that does "
        "only a producer's least per-record work (clock, encode the fixed part, keep the "
        "pieces), median of 5, at the start and the end. The machine is shared and its speed "
        "drifts by up to 2x within minutes; the producer rows give their share of the floor.",
        "",
        "## Phases: where the time goes",
        "",
        render_phases(s, results),
    ]
    if "consumer" in results and "sendfile" in results:
        buf, zc = results["consumer"], results["sendfile"]
        rb = _median(buf.runs) if buf.runs else buf.records_per_s
        rz = _median(zc.runs) if zc.runs else zc.records_per_s
        faster = "buffered (pread + write)" if rb >= rz else "sendfile"
        md += [
            "## sendfile vs buffered fetches",
            "",
            f"buffered: {rb:,.0f} rec/s ({rb * s.value_bytes / MB:.1f} MB/s); "
            f"sendfile: {rz:,.0f} rec/s ({rz * s.value_bytes / MB:.1f} MB/s); "
            f"faster here: {faster} ({abs(rb - rz) / max(min(rb, rz), 1) * 100:.1f}% apart).",
            "",
        ]
    if idempotence_runs:
        md += [
            "## The cost of idempotence",
            "",
            f"Each producer run ({s.producer_runs}) ran these phases with acks=all and at most "
            "5 requests in flight, idempotence off and on in turns (alternating which goes "
            "first); medians, and every run with the 1-minute load average at its start.",
            "",
            render_idempotence(idempotence_runs),
        ]
    if e2e is not None:
        md += ["## End-to-end latency", "", render_e2e(e2e)]
    if pngs:
        md += ["## Plots", "", *(f"- {p}" for p in pngs), ""]
    elif plot_note:
        md += [plot_note, ""]
    data = {
        "command": command,
        "machine": facts,
        "settings": asdict(s),
        "rows": rows,
        "phases": {k: {**asdict(v), "records_per_s": v.records_per_s} for k, v in results.items()},
        "e2e": asdict(e2e) if e2e is not None else None,
        "idempotence": [asdict(r) for r in idempotence_runs],
        "plots": pngs,
    }
    write_report(prefix, "\n".join(md), data, plot_note)
    failed = [r for r in rows if r["status"] == "failed"]
    return 1 if failed else 0


def targets_line(rows: list[dict[str, Any]]) -> str:
    """'Targets met: N (...). Missed: M (...).' from the rows' statuses."""
    met = [r["measurement"] for r in rows if r["status"].startswith("met")]
    missed = [r["measurement"] for r in rows if r["status"].startswith("missed")]
    failed = [r["measurement"] for r in rows if r["status"] == "failed"]
    return (
        f"Targets met: {len(met)}"
        + (f" ({'; '.join(met)})" if met else "")
        + f". Missed: {len(missed)}"
        + (f" ({'; '.join(missed)})" if missed else "")
        + (f". FAILED: {'; '.join(failed)}" if failed else "")
        + "."
    )


def write_report(prefix: Path, text: str, data: dict[str, Any], plot_note: str) -> None:
    """<prefix>.md and <prefix>.json; the report on stdout, then what was written."""
    md_path = Path(f"{prefix}.md")
    md_path.write_text(text)
    Path(f"{prefix}.json").write_text(json.dumps(data, indent=2, default=str))
    print(text)
    print(f"wrote {md_path}, {prefix}.json" + "".join(f", {p}" for p in data["plots"]))
    if plot_note:
        print(plot_note)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return run(args, parser)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
