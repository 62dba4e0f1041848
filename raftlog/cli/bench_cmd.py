"""`raftlog bench`: the Kafka-paper benchmark (bench/paper_bench.py) from the command line.

The benchmark lives in the source tree, not in the installed package: this command finds it
when `bench` is importable, or when the `raftlog` package in use sits in a checkout next to
`bench/paper_bench.py` (an editable install run from anywhere). Elsewhere it says so and exits 1.
The options are the benchmark's own (`raftlog bench --help` lists them).
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import raftlog


def _load() -> ModuleType | None:
    try:
        return importlib.import_module("bench.paper_bench")
    except ImportError:
        pass
    root = Path(raftlog.__file__).resolve().parents[1]
    if not (root / "bench" / "paper_bench.py").is_file():
        return None
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module("bench.paper_bench")
    except ImportError:
        sys.path.remove(str(root))
        return None


def register(sub: Any) -> None:
    module = _load()
    p = sub.add_parser(
        "bench",
        help="run the Kafka-paper benchmark (producer, consumer, latency) against a local broker",
        description="The Kafka paper's experiment against a `raftlog dev` broker in its own "
        "process; results go to bench/results/paper-<timestamp>.{md,json,png}.",
    )
    if module is None:
        p.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        p.set_defaults(func=_unavailable)
        return
    module.add_arguments(p)
    p.set_defaults(func=lambda args: _run(module, p, args))


def _run(module: ModuleType, parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    args.command_line = shlex.join(["raftlog", *sys.argv[1:]])
    return int(module.run(args, parser))


def _unavailable(args: argparse.Namespace) -> int:
    print(
        "raftlog: error: the benchmark is not installed with the package: run `raftlog bench` "
        "from a source checkout (it needs bench/paper_bench.py)",
        file=sys.stderr,
    )
    return 1
