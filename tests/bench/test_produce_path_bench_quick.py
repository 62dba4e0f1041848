"""Smoke test of the produce-path benchmark: `--quick` measures every row, checks that every
request was appended and answered, and writes its report. No timing is asserted."""

from __future__ import annotations

from pathlib import Path

from tests.bench._run import run_bench

EXPECTED_ROWS = [
    "broker, 100 requests per read (appended together)",
    "broker, 1 request per read (appended alone: baseline)",
    "client, send()",
    "client, drain + dispatch",
    "client, responses",
    "client, total",
]


def test_quick_run_reports_every_row(tmp_path: Path) -> None:
    proc = run_bench("bench.produce_path_bench", "--quick", "--results-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("|")[1:3] for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert [name.strip() for name, _ in rows[1:]] == EXPECTED_ROWS
    assert all(float(us) > 0 for _, us in rows[1:])
    (report,) = tmp_path.glob("produce-path-*.md")
    assert "bench.produce_path_bench --quick" in report.read_text()
    assert "run 1 of 1" in proc.stderr  # progress


def test_bad_arguments_are_refused() -> None:
    proc = run_bench("bench.produce_path_bench", "--requests", "5", timeout_s=60)
    assert proc.returncode == 2 and "--requests must be >= 100" in proc.stderr
