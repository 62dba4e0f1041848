"""Smoke test of the storage benchmark: `--quick` with a tiny duration runs every case and
writes its report. No timing is asserted: this machine's speed is not the code's correctness."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.bench._run import REPO, run_bench

# The table's first column, one row per case: keep in step with bench/storage_bench.py.
EXPECTED_ROWS = [
    "dd write bs=1M, page cache",
    "dd write bs=1M conv=fdatasync",
    "dd write bs=1M conv=fdatasync, sustained",
    "dd read bs=1M, page cache",
    "dd write bs=290 oflag=dsync",
    "dd write bs=11315 oflag=dsync",
    "dd write bs=225065 oflag=dsync",
    "encode b=1 (producer side, BatchBuilder)",
    "encode b=50 (producer side, BatchBuilder)",
    "encode b=1000 (producer side, BatchBuilder)",
    "append b=1, page cache",
    "append b=50, page cache",
    "append b=1000, page cache",
    "append b=1000, sustained, until on disk",
    "append b=1, fsync per append",
    "append b=50, fsync per append",
    "append b=1000, fsync per append",
    "read() 1 MiB, log of b=1000",
    "read_slice() 1 MiB, locate only, log of b=1000",
    "read() 1 MiB, log of b=50",
    "read_slice() 1 MiB, locate only, log of b=50",
    "read() 1 MiB, log of b=1",
    "read_slice() 1 MiB, locate only, log of b=1",
]


def run_quick(
    tmp_path: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    options = [
        "--quick",
        "--duration",
        "0.02",
        "--max-bytes",
        str(4 << 20),
        "--sustained-bytes",
        str(4 << 20),
        "--dir",
        str(tmp_path / "work"),
        "--results-dir",
        str(tmp_path / "results"),
        "--out",
        str(tmp_path / "table.md"),
    ]
    return run_bench("bench.storage_bench", *options, env=env)


def table_rows(text: str) -> list[str]:
    return [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")]


def check_report(tmp_path: Path, proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr
    rows = table_rows(proc.stdout)
    assert rows[0] == "case"
    assert "| data per run |" in proc.stdout and "| waited for CPU |" in proc.stdout
    assert rows[1:] == EXPECTED_ROWS
    assert "failed" not in proc.stdout, proc.stdout
    # The same table in the --out file and in the results directory, with the JSON beside it.
    assert table_rows((tmp_path / "table.md").read_text())[1:] == EXPECTED_ROWS
    (md,) = (tmp_path / "results").glob("storage-*.md")
    assert "bench.storage_bench --quick" in md.read_text()
    (js,) = (tmp_path / "results").glob("storage-*.json")
    data = json.loads(js.read_text())
    assert [c["label"] for c in data["cases"]] == EXPECTED_ROWS
    assert all(len(c["runs"]) == 1 and not c["errors"] for c in data["cases"])
    # Data size, CPU time and CPU wait are recorded, so that a reader can tell a busy machine
    # from slow code; the ratio to dd is taken within the sweep.
    by_key = {c["key"]: c for c in data["cases"]}
    sustained = by_key["append-b1000-sustained"]
    assert sustained["runs"][0]["bytes"] >= (4 << 20) - 300_000
    assert sustained["baseline"] == "dd-fdatasync-sustained"
    assert len(sustained["vs_dd_same_sweep"]) == 1
    for key in ("append-b1000-pagecache", "read-b1000", "dd-write"):
        run = by_key[key]["runs"][0]
        assert run["cpu_seconds"] is not None and run["cpu_seconds"] >= 0, (key, run)
    assert by_key["append-b1000-pagecache"]["runs"][0]["cpu_wait_seconds"] is not None
    assert "dirty_background_ratio=" in data["machine"]["dirty_pages"]
    # Every temporary log was deleted.
    assert list((tmp_path / "work").iterdir()) == []


def test_quick_run_reports_every_case(tmp_path: Path) -> None:
    proc = run_quick(tmp_path)
    check_report(tmp_path, proc)
    pngs = list((tmp_path / "results").glob("storage-*.png"))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "skipped the plot" in proc.stdout
        assert pngs == []
    else:
        assert len(pngs) == 1


def test_quick_run_without_matplotlib(tmp_path: Path) -> None:
    # A `matplotlib` package that fails to import stands in for a machine without it.
    fake = tmp_path / "fake"
    (fake / "matplotlib").mkdir(parents=True)
    (fake / "matplotlib" / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(fake), str(REPO)]))}
    proc = run_quick(tmp_path, env)
    check_report(tmp_path, proc)
    assert "skipped the plot" in proc.stdout
    assert list((tmp_path / "results").glob("storage-*.png")) == []


@pytest.mark.parametrize("bad", [["--runs", "0"], ["--duration", "0"]])
def test_rejects_nonsense_options(bad: list[str]) -> None:
    proc = run_bench("bench.storage_bench", *bad, timeout_s=60)
    assert proc.returncode == 2
