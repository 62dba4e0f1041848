"""The cost of the Prometheus metrics on the fetch path: the paper bench's consumer phase against
a broker with metrics on and off, alternating, on the same data.

Run from the repository root::

    .venv/bin/python -m bench.fetch_metrics_bench                 # 5,000,000 records, 4 runs each
    .venv/bin/python -m bench.fetch_metrics_bench --quick         # small (tests)

One `raftlog dev` broker (bench/paper_bench.py's BrokerProcess, sendfile fetches, the default)
takes the paper bench's `linger` producer phase (`--messages` 200-byte records, one
partition); then, `--runs` times, the paper bench's consumer phase reads them all from offset 0
(200 KiB fetches, every record decoded) against the broker restarted on the same data with
`--metrics` (a metrics listener; a thread here GETs its /metrics every `--scrape-s` seconds
during the read, as Prometheus would) and with `--no-metrics` (no listener: the node counts
nothing), the order alternating from run to run. Reported: records/s of each read, the
medians, on / off, the median of each run's on / off, broker CPU per record, and the load
average at each read's start. The report goes to stdout and bench/results/fetch-metrics-*.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import common
from bench.common import REPO, default_base_dir
from bench.paper_bench import (
    BrokerProcess,
    Progress,
    Settings,
    _median,
    run_consumer,
    run_producer,
)


@dataclass
class Read:
    metrics: bool
    records_per_s: float
    broker_cpu_us_per_record: float
    load_average: float
    scrapes: int


def scrape_loop(url: str, every_s: float, stop: threading.Event, count: list[int]) -> None:
    """GET `url` every `every_s` seconds until `stop` is set; counts the scrapes answered."""
    while not stop.wait(every_s):
        with urllib.request.urlopen(url, timeout=5) as r:
            r.read()
        count[0] += 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.fetch_metrics_bench", description=(__doc__ or "").split("\n\n")[0]
    )
    p.add_argument("--messages", type=int, default=5_000_000, help="records read (5,000,000)")
    p.add_argument("--runs", type=int, default=4, help="reads with metrics on, and off (4)")
    p.add_argument("--scrape-s", type=float, default=1.0, help="scrape interval (1 s)")
    p.add_argument("--max-seconds", type=float, default=60.0, help="budget of each phase (60)")
    p.add_argument("--quick", action="store_true", help="20,000 records, 1 run each")
    p.add_argument("--data-dir", help="parent of the broker's data directory")
    p.add_argument("--results-dir", default=str(REPO / "bench" / "results"))
    p.add_argument("--note", default="")
    args = p.parse_args(argv)
    if args.quick:
        args.messages, args.runs = 20_000, 1
    s = Settings(
        messages=args.messages,
        max_seconds=args.max_seconds,
        value_bytes=200,
        max_in_flight=None,
        fetch_bytes=200 * 1024,
        poll_records=500,
        consume_from="linger",
        consumer_runs=args.runs,
        producer_runs=1,
        e2e_rate=1,
        e2e_seconds=1.0,
        e2e_warmup=0.0,
        phases=["linger", "sendfile"],
        quick=args.quick,
    )
    base = args.data_dir or default_base_dir()
    os.makedirs(base, exist_ok=True)
    work = tempfile.mkdtemp(prefix="raftlog-fetch-metrics-", dir=base)
    data_dir, log_path = os.path.join(work, "data"), os.path.join(work, "broker.log")
    progress = Progress()
    reads: list[Read] = []
    broker = BrokerProcess(data_dir, log_path, zero_copy=True, metrics=False)
    try:
        broker.start()
        produced = run_producer("linger", "fetch-metrics", broker, s, progress)
        if produced.error:
            raise SystemExit(f"producer: {produced.error}")
        os.sync()
        for i in range(args.runs):
            for metrics in (True, False) if i % 2 == 0 else (False, True):
                broker.stop()
                broker = BrokerProcess(data_dir, log_path, zero_copy=True, metrics=metrics)
                broker.start()
                stop, count = threading.Event(), [0]
                scraper = None
                if metrics:
                    if not broker.metrics_url:
                        raise SystemExit("the broker started with --metrics names no metrics_url")
                    scraper = threading.Thread(
                        target=scrape_loop, args=(broker.metrics_url, args.scrape_s, stop, count)
                    )
                    scraper.start()
                load = os.getloadavg()[0]
                try:
                    n = produced.records
                    r = run_consumer("sendfile", "fetch-metrics", n, broker, s, progress)
                finally:
                    stop.set()
                    if scraper is not None:
                        scraper.join()
                if r.error or r.records != produced.records:
                    raise SystemExit(f"read {r.records:,} of {produced.records:,}: {r.error}")
                reads.append(
                    Read(metrics, r.records_per_s, r.broker_cpu_s / r.records * 1e6, load, count[0])
                )
                progress.message(
                    f"run {i + 1} metrics {'on' if metrics else 'off'}: "
                    f"{r.records_per_s:,.0f} rec/s, load {load:.2f}, {count[0]} scrapes"
                )
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)

    on = [r for r in reads if r.metrics]
    off = [r for r in reads if not r.metrics]
    m_on = _median([r.records_per_s for r in on])
    m_off = _median([r.records_per_s for r in off])
    paired = _median([a.records_per_s / b.records_per_s for a, b in zip(on, off, strict=True)])

    def each(rs: list[Read]) -> str:
        return ", ".join(f"{r.records_per_s:,.0f} @ {r.load_average:.2f}" for r in rs)

    command = [Path(sys.executable).name, "-m", "bench.fetch_metrics_bench", *sys.argv[1:]]
    md = [
        f"# Metrics on the fetch path ({datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"`{' '.join(command)}`",
        *([args.note, ""] if args.note else [""]),
        f"{produced.records:,} records of 200 B (linger producer: {produced.records_per_s:,.0f} "
        f"rec/s), read {args.runs} times with metrics on (scraped every {args.scrape_s:g} s) "
        "and off, alternating; rec/s @ the 1-minute load average at the read's start.",
        "",
        "| metrics | median rec/s | broker CPU µs/record (median) | runs |",
        "|---|---:|---:|---|",
        f"| on | {m_on:,.0f} | {_median([r.broker_cpu_us_per_record for r in on]):.2f} | "
        f"{each(on)} |",
        f"| off | {m_off:,.0f} | {_median([r.broker_cpu_us_per_record for r in off]):.2f} | "
        f"{each(off)} |",
        "",
        f"on / off: {m_on / m_off:.3f} (medians); {paired:.3f} (median of each run's pair); "
        f"scrapes per read with metrics on: {', '.join(str(r.scrapes) for r in on)}.",
        "",
    ]
    text = "\n".join(md)
    prefix = common.results_prefix(args.results_dir, "fetch-metrics", common.run_stamp(utc=False))
    path = Path(f"{prefix}.md")
    path.write_text(text)
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
