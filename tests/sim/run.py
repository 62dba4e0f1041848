"""Run the replication simulation from the command line: one seed with a trace, or many.

python -m tests.sim.run --seed 17 --trace       # replay one seed, printing every event
python -m tests.sim.run --seeds 0:2000          # a range of seeds, a summary line each
"""

from __future__ import annotations

import argparse
import sys

from tests.sim.model import InvariantViolation, SimConfig, Simulation


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, help="one seed")
    ap.add_argument("--seeds", help="a range START:END of seeds")
    ap.add_argument("--trace", action="store_true", help="print every event of the run")
    args = ap.parse_args(argv)
    if args.seed is not None:
        seeds = [args.seed]
    elif args.seeds:
        start, _, end = args.seeds.partition(":")
        seeds = list(range(int(start), int(end)))
    else:
        ap.error("give --seed N or --seeds START:END")
    failed = 0
    for seed in seeds:
        config = SimConfig.random(seed)
        sim = Simulation(config, trace=print if args.trace else None)
        try:
            result = sim.run()
            print(f"ok   {config}\n     {result}" if args.trace else f"ok   seed {seed} {result}")
        except InvariantViolation as e:
            failed += 1
            print(f"FAIL {e}\n     {config}")
    print(f"{len(seeds) - failed}/{len(seeds)} seeds passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
