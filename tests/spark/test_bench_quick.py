"""Smoke test of bench/spark_bench.py: `--quick` runs every phase (produce, Consumer, Spark
batch read, the streaming job under load) against a real node in the shared Spark session,
and renders the report. No timing is asserted: this machine's speed is not the code's
correctness; the byte totals of both readers are checked inside the benchmark."""

from __future__ import annotations

import math
from typing import Any

from bench import spark_bench


def test_quick_run_measures_every_phase(spark: Any, tmp_path: Any) -> None:
    args = spark_bench.build_parser().parse_args(["--quick", "--base-dir", str(tmp_path)])
    report = spark_bench.run(args, spark=spark)
    assert report["consumer_median"] > 0 and report["spark_median"] > 0
    e2e = report["e2e"]
    assert e2e["events_sent"] > 0 and e2e["events_measured"] > 0
    assert not math.isnan(e2e["p50_ms"])
    text = spark_bench.render(report)
    assert "Spark / Consumer" in text and "end-to-end latency" in text
