"""Smoke test of the rebalance benchmark: `--quick` starts a real three-node cluster, runs a
join and a leave for groups of 1 and 3 members and writes its report. No timing is asserted:
this machine's speed is not the code's correctness."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench._run import run_bench


def test_quick_run_reports_a_join_and_a_leave_per_size(tmp_path: Path) -> None:
    results = tmp_path / "results"
    options = ["--quick", "--data-dir", str(tmp_path / "data"), "--results-dir", str(results)]
    proc = run_bench("bench.rebalance_bench", *options, timeout_s=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert rows[0] == "| members after | a member joins | a member leaves |"
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| 1", "| 3"]
    [report] = results.glob("rebalance-*.json")
    data = json.loads(report.read_text())
    rounds = data["rounds"]
    assert sorted((r["size"], r["kind"]) for r in rounds) == [
        (1, "join"), (1, "leave"), (3, "join"), (3, "leave"),
    ]  # fmt: skip
    for r in rounds:
        # Every rebalance moved the generation on by exactly one and took some time.
        assert r["generation_after"] == r["generation_before"] + 1, r
        assert r["total_ms"] > 0, r
