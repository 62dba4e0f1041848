"""Smoke test of `raftlog bench kafka` (bench/kafka_bench.py): `--quick --no-tansu` with few
records runs every raftlog row (confluent-kafka and raftlog's own client) against a real
`raftlog dev` broker and a real three-node cluster, and writes its report. No timing is
asserted: this machine's speed is not the code's correctness; what is checked is that every
row was measured, with its CPU figures, and that the Tansu rows say why they are empty."""

from __future__ import annotations

import json
from pathlib import Path

from bench import kafka_bench
from tests.bench._run import run_bench

RECORDS = 5_000
TANSU_ROWS = {"tansu-produce", "tansu-consume"}


def test_quick_run_measures_every_raftlog_row(tmp_path: Path) -> None:
    proc = run_bench(
        "raftlog.cli", "bench", "kafka", "--quick", "--no-tansu",
        "--records", str(RECORDS), "--data-dir", str(tmp_path / "data"),
        "--results-dir", str(tmp_path / "results"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # A progress line per run of each row, on stderr.
    for broker, measurement in (kafka_bench.ROWS[k] for k in kafka_bench.ROWS):
        if broker != kafka_bench.TANSU:
            assert f"run 1/1 {broker}: {measurement}: " in proc.stderr, proc.stderr
    (js,) = (tmp_path / "results").glob("kafka-*.json")
    data = json.loads(js.read_text())
    assert data["command"].startswith("raftlog bench kafka --quick")
    rows = {r["key"]: r for r in data["rows"]}
    assert list(rows) == list(kafka_bench.ROWS)
    for key, row in rows.items():
        if key in TANSU_ROWS:
            assert row["runs"] == [] and row["note"] == "not run (--no-tansu)"
            continue
        (run,) = row["runs"]
        assert run["records"] == RECORDS and run["value_bytes"] == 200, row
        assert row["median_records_per_s"] == run["records_per_s"] > 0
        assert row["broker_cpu_us_per_record"] is not None  # the broker's pids were measured
        # The idle baseline was measured too, and it is a part of the whole.
        assert 0 <= run["broker_idle_cpu_s"] <= run["broker_cpu_s"] + 0.05, run
        assert row["broker_work_cpu_us_per_record"] is not None
    assert {t["status"] for t in data["targets"][:1]} == {"not measured"}  # no Tansu figure
    (md,) = (tmp_path / "results").glob("kafka-*.md")
    text = md.read_text()
    assert "| raftlog, 3 nodes RF=3 | confluent-kafka produce acks=all |" in text
    assert "| Tansu 0.6 (memory) | confluent-kafka consume | — | not run (--no-tansu) |" in text
    assert "## Targets" in text and "nproc=" in text
    assert list((tmp_path / "results").glob("kafka-*.png"))
