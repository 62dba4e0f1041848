"""Smoke test of the scale benchmark: `--quick` (200 partitions) runs every phase against a real
three-node `raftlog dev` cluster (a kill -9 and a restart included) and writes its report. No
timing is asserted: what is checked is that every figure was measured (the write pauses too: the
bench waits for its pinger's first acknowledgement before it measures them), that no broker was
fenced while the topic was created, and that the figures agree with each other."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench._run import run_bench


def test_quick_run_measures_every_figure(tmp_path: Path) -> None:
    options = ["--quick", "--base-dir", str(tmp_path), "--results-dir", str(tmp_path / "results")]
    proc = run_bench("bench.scale_bench", *options, timeout_s=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== 200 partitions: kill -9 of node 3" in proc.stderr  # progress on stderr
    (js,) = (tmp_path / "results").glob("scale-*.json")
    (result,) = json.loads(js.read_text())["results"]
    assert result["partitions"] == 200
    figures = ("create_s", "ready_s", "pause_s", "burst_pause_s", "baseline_pause_s")
    for key in (*figures, "failover_s", "rejoin_s", "status_s"):
        assert isinstance(result[key], float) and result[key] >= 0, (key, result)
    assert result["fenced"] == 0, result
    assert result["create_s"] <= result["ready_s"]
    assert sorted(result["idle_cpu_percent"]) == ["1", "2", "3"]
    assert all(fds >= 200 for fds in result["fds"].values())  # every partition has its log
    (md,) = (tmp_path / "results").glob("scale-*.md")
    assert "| 200 |" in md.read_text()
    assert list((tmp_path / "results").glob("scale-*-scale.png"))
