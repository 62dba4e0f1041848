"""Smoke test of the fetch-path metrics benchmark: `--quick` writes the records, reads them
with metrics on (scraped) and off, and reports both rows. No timing is asserted."""

from __future__ import annotations

from pathlib import Path

from tests.bench._run import run_bench


def test_quick_run_reports_on_and_off(tmp_path: Path) -> None:
    options = ["--quick", "--scrape-s", "0.1", "--results-dir", str(tmp_path)]
    proc = run_bench("bench.fetch_metrics_bench", *options)
    assert proc.returncode == 0, proc.stderr
    rows = [
        line.split("|")[1].strip() for line in proc.stdout.splitlines() if line.startswith("| ")
    ]
    assert rows[1:] == ["on", "off"]
    assert "on / off:" in proc.stdout
    assert list(tmp_path.glob("fetch-metrics-*.md"))
