"""The cost of idempotence: the paper bench's producer phases with acks=all, idempotence on and
off, alternating on one broker in one run (so both see the same machine load).

Run from the repository root::

    .venv/bin/python -m bench.idempotence_bench                   # 1,000,000 messages, 3 runs
    .venv/bin/python -m bench.idempotence_bench --messages 200000 --runs 2

Each row is the median records/s of `--runs` runs; the last column is on / off - 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
from collections.abc import Sequence

from bench.common import default_base_dir
from bench.paper_bench import BrokerProcess, Progress, build_parser, run_producer, settings_from


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--phases", default="batch50,linger")
    args = p.parse_args(argv)
    parser = build_parser()
    base = settings_from(parser.parse_args(["--messages", str(args.messages)]), parser)
    work = tempfile.mkdtemp(prefix="raftlog-idem-", dir=default_base_dir())
    broker = BrokerProcess(os.path.join(work, "data"), os.path.join(work, "broker.log"), True)
    broker.start()
    progress = Progress()
    rates: dict[tuple[str, bool], list[float]] = {}
    try:
        for run in range(args.runs):
            for phase in args.phases.split(","):
                for idem in (False, True):
                    s = dataclasses.replace(base, idempotence=idem)
                    topic = f"idem-{phase}-{int(idem)}-{run}"
                    res = run_producer(phase, topic, broker, s, progress)
                    if res.error:
                        raise SystemExit(f"{phase} idempotence={idem}: {res.error}")
                    rates.setdefault((phase, idem), []).append(res.records_per_s)
    finally:
        broker.stop()
    print("| phase (acks=all, 5 in flight) | idempotence off rec/s | on rec/s | cost |")
    print("|---|---:|---:|---:|")
    for phase in args.phases.split(","):
        off = statistics.median(rates[(phase, False)])
        on = statistics.median(rates[(phase, True)])
        print(f"| {phase} | {off:,.0f} | {on:,.0f} | {(on / off - 1) * 100:+.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
