"""Smoke test of the produce-path benchmark: `--quick` measures every row, checks that every
request was appended and answered, and writes its report. No timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

EXPECTED_ROWS = [
    "broker, 100 requests per read (appended together)",
    "broker, 1 request per read (appended alone: baseline)",
    "client, send()",
    "client, drain + dispatch",
    "client, responses",
    "client, total",
]


def test_quick_run_reports_every_row(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.produce_path_bench",
            "--quick",
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
    rows = [line.split("|")[1:3] for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert [name.strip() for name, _ in rows[1:]] == EXPECTED_ROWS
    assert all(float(us) > 0 for _, us in rows[1:])
    (report,) = tmp_path.glob("produce-path-*.md")
    assert "bench.produce_path_bench --quick" in report.read_text()
    assert "run 1 of 1" in proc.stderr  # progress


def test_bad_arguments_are_refused() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.produce_path_bench", "--requests", "5"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "--requests must be >= 100" in proc.stderr
