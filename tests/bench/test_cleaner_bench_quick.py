"""Smoke test of the log cleaner benchmark: `--quick` builds three 4 MB compacted logs and
cleans each once, measures the offset map's memory, runs one clean under a budget, then starts
a real node and runs the three 4 s producer phases (cleaner off, default budget, unthrottled;
a cleaner phase goes on until a clean has ended in it, for at most 60 s, so a loaded machine
makes it longer, not empty), and writes its report.

Nothing here depends on how fast the machine is, except one upper bound that the code decides:
a clean under an I/O budget cannot spend more than the budget per second (its Throttle sleeps
after each chunk until the bytes counted so far fit the rate, and it counts at least the bytes
the bench adds up), so a slow machine only makes it lower."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench._run import run_bench

MB = 1 << 20
# Leeway on the rate for the clocks: the clean's own monotonic time against its Throttle's.
RATE_SLACK = 1.02


def test_quick_run_cleans_every_case_and_measures_the_three_phases(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_bench(
        "bench.cleaner_bench", "--quick", "--data-dir", str(tmp_path / "data"), "--out", str(out)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows] == [
        "| log", "| 90% superseded, raftlog batches", "| 10% superseded, raftlog batches",
        "| 90% superseded, Kafka v2 batches, lz4",
        "| phase", "| (a) cleaner disabled", "| (b) cleaner at 16 MiB/s (default)",
        "| (c) cleaner unthrottled",
    ], rows  # fmt: skip
    [report] = out.glob("cleaner-*.json")
    data = json.loads(report.read_text())

    storage = data["storage"]
    assert [c["case"] for c in storage["cases"]] == [
        "90% superseded", "10% superseded", "90% superseded, lz4",
    ]  # fmt: skip
    for c in storage["cases"]:
        assert c["log_bytes"] >= 3.5 * MB and c["segments"] >= 8, c  # segments end short
    assert len(storage["runs"]) == 3
    for r in storage["runs"]:
        # Everything but the one-batch active segment was cleaned; the bench itself checked
        # that exactly the distinct keys survived and read them back once each.
        assert r["bytes_read"] >= 0.95 * r["log_bytes"], r
        assert r["records_kept"] == r["keys_expected"] > 0, r
        assert r["read_back_checked"], r
        assert r["mb_per_s"] > 0 and r["records_per_s"] > 0, r
        want = 0.1 if r["case"].startswith("10%") else 0.9
        assert abs(r["superseded_measured"] - want) < 0.03, r
        assert r["bytes_written"] < r["bytes_read"], r
    [memory] = storage["memory"]
    assert memory["keys"] == 100_000
    # A key is a 128-bit int (48 bytes), its offset an int (32) and a dict entry: more than
    # 80 bytes, and nowhere near a kilobyte.
    assert 80 < memory["rss_bytes_per_key"] < 1000, memory
    assert 80 < memory["traced_bytes_per_key"] < 1000, memory
    budget = storage["budget"]
    assert budget["io_bytes_min"] > budget["log_bytes"], budget
    assert budget["io_bytes_per_s"] <= budget["budget_bytes_per_s"] * RATE_SLACK, budget

    node = data["node"]
    assert node["shutdown_problems"] == []
    phases = {p["phase"]: p for p in node["phases"]}
    assert sorted(phases) == ["a", "b", "c"]
    for p in phases.values():
        assert p["ran_s"] >= 4 - 0.01, p["ran_s"]  # --phase-s, less at most one send's pacing
        lat = p["latency"]
        assert p["failed"] == 0 and p["sends"] == p["acknowledged"] == lat["n"] > 0, p
        assert 0 < lat["p50_ms"] <= lat["p99_ms"] <= lat["p999_ms"] <= lat["max_ms"], lat
    assert phases["a"]["settings"] == {"log_cleaner_enable": False}
    assert phases["b"]["settings"]["log_cleaner_io_bytes_per_s"] == 16 * MB
    assert phases["c"]["settings"]["log_cleaner_io_bytes_per_s"] == 0
    # Without the cleaner nothing was cleaned; with it, each phase cleaned its backlog (the
    # 4 MB fill, less the active segment: at most 1 MiB) and its checkpoint moved.
    assert phases["a"]["cleans"] == [] and phases["a"]["cleaned_bytes"] == 0
    for name in ("b", "c"):
        p = phases[name]
        assert not p["clean_wait_capped"], p
        assert p["cleans"] and p["cleaned_bytes"] >= 3 * MB, p["cleans"]
        assert (p["checkpoint_after"] or 0) > (p["checkpoint_before"] or 0), p
        assert p["p99_over_a"] > 0, p
    [png] = out.glob("cleaner-*.png")
    assert png.stat().st_size > 0
