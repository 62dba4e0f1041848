"""Smoke test of the rebalance benchmark: `--quick` starts a real three-node cluster, runs a
join and a leave for groups of 1 and 3 members and writes its report. No timing is asserted:
this machine's speed is not the code's correctness."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_a_join_and_a_leave_per_size(tmp_path: Path) -> None:
    results = tmp_path / "results"
    cmd = [
        sys.executable, "-m", "bench.rebalance_bench", "--quick",
        "--data-dir", str(tmp_path / "data"), "--results-dir", str(results),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
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
