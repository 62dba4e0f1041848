"""Smoke test of the replication benchmark: `--quick` runs every phase against a real three-node
`raftlog dev` cluster (kill -9 and restart of leaders included) and writes its report. No
timing is asserted: this machine's speed is not the code's correctness; what is checked is that
every figure was measured and that the figures agree with each other."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from tests.bench._run import run_bench
from tests.bench.test_paper_bench_quick import comparison_rows

# The first column of the results table: keep in step with bench/replication_bench.py (LABELS).
EXPECTED_ROWS = [
    "RF=1 acks=1, linger 5 ms, 1 MB batches (baseline)",
    "RF=3 acks=all, linger 5 ms, 1 MB batches",
    "RF=3 acks=all, send_many (1,000 values a call), linger 5 ms, 1 MB batches",
    "RF=3 acks=all, fsync policy, linger 5 ms, 1 MB batches",
    "end-to-end latency p50, RF=1 acks=1 (baseline)",
    "end-to-end latency p50, RF=3 acks=all",
    "end-to-end latency p99, RF=3 acks=all",
    "end-to-end latency p99.9, RF=3 acks=all",
    "unavailability after kill -9 of the leader, median",
    "unavailability after kill -9 of the leader, max",
]
MESSAGES = 20_000
REPS = 2


def run_quick(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`python -m bench.replication_bench --quick OPTIONS` with its data and results under
    tmp_path; asserts that it exited 0."""
    options += ("--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "results"))
    proc = run_bench("bench.replication_bench", "--quick", *options, timeout_s=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_quick_run_reports_every_row(tmp_path: Path) -> None:
    proc = run_quick(tmp_path, "--messages", str(MESSAGES), "--failover-reps", str(REPS))
    assert "rep 2/2: killed node" in proc.stderr  # progress on stderr
    # A measurement table (the header is `| measurement |`) on stdout and in the report.
    assert comparison_rows(proc.stdout) == EXPECTED_ROWS
    (md,) = (tmp_path / "results").glob("replication-*.md")
    text = md.read_text()
    assert comparison_rows(text) == EXPECTED_ROWS
    assert "bench.replication_bench --quick" in text and "nproc=" in text
    assert "## Where the CPU goes" in text and "## Failover" in text
    (js,) = (tmp_path / "results").glob("replication-*.json")
    data = json.loads(js.read_text())
    rows = {r["key"]: r for r in data["rows"]}
    assert [r["measurement"] for r in data["rows"]] == EXPECTED_ROWS
    assert data["failure"] is None
    # Every row was measured (met, missed or informative; never failed or skipped).
    assert [k for k, r in rows.items() if r["status"] in ("failed", "not run")] == []

    phases = data["phases"]
    assert set(phases) == {"rf1-acks1", "rf3-all", "rf3-all-many", "rf3-all-fsync"}
    for name, p in phases.items():
        # One run each, every record sent (the high watermark was checked against it).
        assert p["records"] == [MESSAGES], name
        assert p["errors"] == [], name
        assert rows[name]["value"] == p["median"] == p["runs"][0] > 0
        roles = sorted(p["roles"].values())
        expected = (
            ["-", "-", "leader"] if name == "rf1-acks1" else ["follower", "follower", "leader"]
        )
        assert roles == expected, name
        # The node CPU was read from /proc for the three nodes.
        assert sorted(p["cpu"]["nodes_s"]) == ["1", "2", "3"], name
        assert p["cpu"]["wall_s"] > 0 and p["cpu"]["client_s"] >= 0
    assert topic_config(phases, "rf3-all-fsync") == {
        "min.insync.replicas": "2",
        "durability.policy": "fsync",
    }
    assert topic_config(phases, "rf1-acks1")["min.insync.replicas"] == "1"
    # The ratio is the replicated median over the baseline median of this run.
    for name in ("rf3-all", "rf3-all-many", "rf3-all-fsync"):
        ratio = phases[name]["median"] / phases["rf1-acks1"]["median"]
        assert rows[name]["ratio"] == pytest.approx(ratio)

    assert set(data["e2e"]) == {"e2e-rf1-acks1", "e2e-rf3-all"}
    for name, acks in (("e2e-rf1-acks1", 1), ("e2e-rf3-all", "all")):
        e2e = data["e2e"][name]
        assert e2e["options"]["acks"] == acks
        assert e2e["received"] == e2e["sent"] == e2e["rate"] * e2e["seconds"]
        assert e2e["p50_ms"] <= e2e["p99_ms"] <= e2e["p999_ms"] <= e2e["max_ms"]
    assert rows["e2e_base_p50"]["value"] == data["e2e"]["e2e-rf1-acks1"]["p50_ms"]
    assert rows["e2e_p50"]["ratio"] == pytest.approx(
        data["e2e"]["e2e-rf3-all"]["p50_ms"] / data["e2e"]["e2e-rf1-acks1"]["p50_ms"]
    )

    f = data["failover"]
    assert len(f["reps"]) == REPS
    assert f["errors"] == [] and f["failed"] == 0
    assert f["acked"] == f["sent"] > 0  # every record acknowledged through the kills
    waits = [r["unavailable_s"] for r in f["reps"]]
    assert all(w is not None and w > 0 for w in waits)
    assert rows["failover_max"]["value"] == max(waits)
    for r in f["reps"]:
        assert r["new_leader"] not in (None, r["killed_node"])
        assert r["back_in_isr_s"] is not None
    assert len(f["ack_times_s"]) == f["acked"]

    pngs = sorted(p.name.rsplit("-", 1)[1] for p in (tmp_path / "results").glob("*.png"))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert pngs == []
    else:
        assert pngs == ["failover.png", "latency.png", "throughput.png"]
    # The cluster was stopped and its temporary data directory removed.
    assert list((tmp_path / "data").iterdir()) == []


def test_profile_adds_each_nodes_top_functions(tmp_path: Path) -> None:
    options = ["--only", "rf3-all", "--messages", "5000", "--profile", "--no-plots"]
    proc = run_quick(tmp_path, *options)
    assert "## Node profiles (--profile)" in proc.stdout
    (js,) = (tmp_path / "results").glob("replication-*.json")
    profiles = json.loads(js.read_text())["profiles"]
    # Every node wrote its profile when it stopped; the rf3-all leader appended the records.
    assert sorted(profiles) == ["1", "2", "3"]
    assert all(len(rows) == 15 for rows in profiles.values())
    assert all(own >= 0 and cum >= own for rows in profiles.values() for _, _, own, cum in rows)
    assert list((tmp_path / "data").iterdir()) == []


def topic_config(phases: dict[str, dict[str, object]], name: str) -> dict[str, str]:
    config = phases[name]["topic_config"]
    assert isinstance(config, dict)
    return config


@pytest.mark.parametrize(
    "bad", [["--messages", "0"], ["--only", "nonsense"], ["--session-timeout-ms", "10"]]
)
def test_rejects_nonsense_options(bad: list[str]) -> None:
    proc = run_bench("bench.replication_bench", *bad, timeout_s=60)
    assert proc.returncode == 2, proc.stderr


def test_cli_command_takes_the_replication_options() -> None:
    from raftlog.cli import bench_cmd

    parser = argparse.ArgumentParser(prog="raftlog")
    bench_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        ["bench", "replication", "--quick", "--runs", "2", "--only", "rf3-all"]
    )
    assert (args.suite, args.quick, args.runs, args.only) == ("replication", True, 2, "rf3-all")
    assert callable(args.func)
    # `raftlog bench` without a suite is still the paper benchmark.
    args = parser.parse_args(["bench", "--only", "single"])
    assert (args.suite, args.only) == (None, "single")
