"""Smoke test of the metadata benchmark: `--quick` starts a real three-node cluster, runs every
phase (topic creates, offset commits, a rebalance, two controller failovers) and writes its
report. No timing is asserted: this machine's speed is not the code's correctness."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.bench._run import run_bench

# The first column of the results table, one row per metric: keep in step with
# bench/metadata_bench.py (ROWS).
EXPECTED_ROWS = [
    "topic creates/s, sequential",
    "topic creates/s, concurrent",
    "offset commits/s, sustained",
    "offset commit latency p50",
    "offset commit latency p99",
    "offset commits/s, pipelined",
    "controller failover, median",
    "controller failover, min",
    "controller failover, max",
    "new controller reported, median",
    "rebalance after a clean leave, median",
]


def table_rows(text: str) -> list[list[str]]:
    """Cells of the table that starts with `| metric |`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| metric |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def test_quick_run_reports_every_metric(tmp_path: Path) -> None:
    options = ["--quick", "--data-dir", str(tmp_path / "data")]
    options += ["--results-dir", str(tmp_path / "results")]
    proc = run_bench("bench.metadata_bench", *options, timeout_s=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = table_rows(proc.stdout)
    assert [r[0] for r in rows] == EXPECTED_ROWS
    # Every metric was measured: a value, and no phase failed or was skipped.
    assert [r[0] for r in rows if r[1] == "—" or r[3] in ("failed", "not run")] == []
    (md,) = (tmp_path / "results").glob("metadata-*.md")
    text = md.read_text()
    assert [r[0] for r in table_rows(text)] == EXPECTED_ROWS
    assert "bench.metadata_bench --quick" in text
    assert "nproc=" in text and "python=" in text and "date=" in text
    (js,) = (tmp_path / "results").glob("metadata-*.json")
    data = json.loads(js.read_text())
    assert [r["metric"] for r in data["rows"]] == EXPECTED_ROWS
    assert data["errors"] == {}
    assert len(data["failover"]) == 2 and len(data["rebalance"]) == 1
    assert [c["inflight"] for c in data["commits"]] == [1, 10]
    pngs = [p.name for p in (tmp_path / "results").glob("metadata-*.png")]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert pngs == []
    else:
        assert len(pngs) == 1
    # Every node was stopped and the temporary data directory removed.
    (pids,) = re.findall(r"nodes stopped \(pids ([\d, ]+)\)", proc.stderr)
    for pid in map(int, pids.split(", ")):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert list((tmp_path / "data").iterdir()) == []


@pytest.mark.parametrize("bad", [["--only", "nonsense"], ["--members", "0"], ["--group-size", "1"]])
def test_rejects_nonsense_options(bad: list[str]) -> None:
    proc = run_bench("bench.metadata_bench", *bad, timeout_s=60)
    assert proc.returncode == 2, proc.stderr
