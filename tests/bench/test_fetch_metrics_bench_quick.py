"""Smoke test of the fetch-path metrics benchmark: `--quick` writes the records, reads them
with metrics on (scraped) and off, and reports both rows. No timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_on_and_off(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.fetch_metrics_bench",
            "--quick",
            "--scrape-s",
            "0.1",
            "--results-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [
        line.split("|")[1].strip() for line in proc.stdout.splitlines() if line.startswith("| ")
    ]
    assert rows[1:] == ["on", "off"]
    assert "on / off:" in proc.stdout
    assert list(tmp_path.glob("fetch-metrics-*.md"))
