"""Smoke test of the Kafka-paper benchmark: `--quick` with a tiny N runs every phase against a
real broker process and writes its report. No timing is asserted: this machine's speed is not
the code's correctness."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from tests.bench._run import run_bench

# The first column of the comparison table, one row per measurement: keep in step with
# bench/paper_bench.py (LABELS, with the default 200 KB fetches).
EXPECTED_ROWS = [
    "producer, 1 msg/request",
    "producer, batches of 50",
    "producer, linger 5 ms, 1 MB batches",
    "consumer, 200 KB fetches, buffered",
    "consumer, 200 KB fetches, sendfile",
    "end-to-end latency p50",
    "end-to-end latency p99",
    "end-to-end latency p99.9",
]


def comparison_rows(text: str) -> list[str]:
    """First-column cells of the table that starts with `| measurement |`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| measurement |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip())
    return rows


def run_quick(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`python -m bench.paper_bench --quick <options>` with its data and results in tmp_path;
    it must succeed."""
    options += ("--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "results"))
    proc = run_bench("bench.paper_bench", "--quick", *options)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_quick_run_reports_every_row(tmp_path: Path) -> None:
    proc = run_quick(tmp_path, "--messages", "2000", "--e2e-rate", "500", "--e2e-seconds", "1")
    assert comparison_rows(proc.stdout) == EXPECTED_ROWS
    (md,) = (tmp_path / "results").glob("paper-*.md")
    text = md.read_text()
    assert comparison_rows(text) == EXPECTED_ROWS
    assert "bench.paper_bench --quick" in text and "nproc=" in text and "python=" in text
    (js,) = (tmp_path / "results").glob("paper-*.json")
    data = json.loads(js.read_text())
    assert [r["measurement"] for r in data["rows"]] == EXPECTED_ROWS
    # Every row was measured (met or missed, never failed or skipped).
    assert [r["status"] for r in data["rows"] if r["status"] in ("failed", "not run")] == []
    # Every record sent in each producer phase was read back by both consumer runs.
    phases = data["phases"]
    assert {p: phases[p]["records"] for p in phases} == dict.fromkeys(
        ["single", "batch50", "linger", "consumer", "sendfile"], 2000
    )
    assert data["e2e"]["received"] == data["e2e"]["sent"] == 500
    pngs = sorted(p.name.rsplit("-", 1)[1] for p in (tmp_path / "results").glob("paper-*.png"))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert pngs == []
    else:
        assert pngs == ["latency.png", "throughput.png"]
    # The broker was stopped and its temporary data directory removed.
    assert list((tmp_path / "data").iterdir()) == []


@pytest.mark.parametrize("bad", [["--messages", "0"], ["--only", "nonsense"]])
def test_rejects_nonsense_options(bad: list[str]) -> None:
    proc = run_bench("bench.paper_bench", *bad, timeout_s=60)
    assert proc.returncode == 2, proc.stderr


def test_cli_command_takes_the_same_options() -> None:
    from raftlog.cli import bench_cmd

    parser = argparse.ArgumentParser(prog="raftlog")
    bench_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", "--quick", "--messages", "10", "--only", "single"])
    assert (args.quick, args.messages, args.only) == (True, 10, "single")
    assert callable(args.func)


def test_idempotence_rows_off_and_on_in_the_same_run(tmp_path: Path) -> None:
    proc = run_quick(
        tmp_path,
        *("--messages", "1000", "--only", "batch50,linger", "--idempotence"),
        *("--producer-runs", "2", "--no-plots"),
    )
    lines = proc.stdout.splitlines()
    start = lines.index("## The cost of idempotence")
    table = [line for line in lines[start:] if line.startswith("| producer,")]
    assert [row.split("|")[1].strip() for row in table] == EXPECTED_ROWS[1:3]
    (js,) = (tmp_path / "results").glob("paper-*.json")
    runs = json.loads(js.read_text())["idempotence"]
    # Two runs of each phase, off and on, the order alternating between runs.
    assert [(r["phase"], r["idempotence"]) for r in runs] == [
        ("batch50", False),
        ("batch50", True),
        ("linger", False),
        ("linger", True),
        ("batch50", True),
        ("batch50", False),
        ("linger", True),
        ("linger", False),
    ]
    assert all(r["records_per_s"] > 0 for r in runs)
