"""The cost of idempotence: the paper bench's producer phases with acks=all, idempotence on and
off, in turns on one broker in one run (so both see the same machine load).

Run from the repository root::

    .venv/bin/python -m bench.idempotence_bench                     # 5 runs of up to 10 s each
    .venv/bin/python -m bench.idempotence_bench --max-seconds 3 --runs 2

Each phase run sends `--messages` records or stops after `--max-seconds` (then flushes). The
table gives the median records/s of `--runs` runs off and on, the cost (on / off - 1), and
every run with the 1-minute load average at its start. The same rows come from
`python -m bench.paper_bench --idempotence` (bench/paper_bench.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Sequence

from bench.common import default_base_dir
from bench.paper_bench import (
    IDEMPOTENCE_PHASES,
    BrokerProcess,
    IdempotenceRun,
    Progress,
    build_parser,
    render_idempotence,
    run_idempotence_pair,
    settings_from,
)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=10_000_000)
    p.add_argument("--max-seconds", type=float, default=10.0)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--phases", default=",".join(IDEMPOTENCE_PHASES))
    args = p.parse_args(argv)
    parser = build_parser()
    base = settings_from(
        parser.parse_args(
            ["--messages", str(args.messages), "--max-seconds", str(args.max_seconds)]
        ),
        parser,
    )
    phases = [x for x in args.phases.split(",") if x]
    unknown = [x for x in phases if x not in IDEMPOTENCE_PHASES]
    if unknown:
        p.error(f"--phases: unknown {unknown}; of {IDEMPOTENCE_PHASES}")
    work = tempfile.mkdtemp(prefix="raftlog-idem-", dir=default_base_dir())
    broker = BrokerProcess(os.path.join(work, "data"), os.path.join(work, "broker.log"), True)
    broker.start()
    runs: list[IdempotenceRun] = []
    try:
        for run in range(args.runs):
            run_idempotence_pair(run, phases, broker, base, Progress(), runs)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(render_idempotence(runs), end="")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
