"""The chaos runner end to end, the short version CI runs (`raftlog chaos run`, real processes).

- A run with kill -9, SIGSTOP and network isolation, with the safety on (acks=all, idempotent
  producers, min.insync.replicas 2, clean elections only), must be valid: nothing acknowledged
  lost, nothing duplicated, offsets never reused, replicas identical; every scheduled fault was
  applied and healed, and the run wrote its history, report and plot.
- The same run through Kafka's own client (`--client kafka`: confluent-kafka's idempotent
  producers and a Kafka consumer group) must be valid too.
- `reassign` faults (replicas moved, the topic grown, a node killed meanwhile) on four nodes
  must be valid, and the workload must reach the grown partitions.
- A compacted topic under kill -9 (`compact`: keyed records and tombstones, 16 KiB segments,
  cleaners every 150 ms at 64 KiB/s) must be valid under the checker's per-key rules, and its
  cleaners must have compacted records away on every node.
- The control run, the same faults with the safety off (acks=1, min.insync.replicas 1, unclean
  election), must be reported invalid with lost writes: it proves the checker catches loss.
  Isolating a node that leads a partition while clients still reach it makes its acks=1 writes
  vanish when the majority elects another leader, so the control run loses data every time.

The long runs (ten minutes each, every fault kind) are `python -m chaos.matrix`; not in CI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos import netns
from chaos.runner import RunConfig, run

pytestmark = pytest.mark.skipif(
    netns.available() is not None, reason=f"network namespaces: {netns.available()}"
)

SHORT = {
    "duration_s": 40.0,
    "faults": ("kill", "pause", "isolate"),
    "steady_s": 4.0,
    "fault_s": (4.0, 7.0),
    "quiet_s": (3.0, 5.0),
    "recovery_s": 6.0,
    "progress": False,
}


def test_a_short_run_with_kill_pause_and_isolation_is_valid(tmp_path: Path) -> None:
    cfg = RunConfig(out=tmp_path / "run", seed=3, **SHORT)  # type: ignore[arg-type]
    report = run(cfg)
    assert report["valid"], json.dumps({k: v for k, v in report.items() if k != "config"})[:3000]
    assert report["acknowledged"] > 1000 and report["final_read"]
    assert report["lost"] == report["duplicated"] == report["inconsistent_offsets"] == 0
    faults = report["faults"]
    assert [f["kind"] for f in faults] == [s.kind for s in cfg.schedule()]
    assert all(f["healed_s"] is not None and "error" not in f for f in faults), faults
    for name in ("history.jsonl", "report.json", "report.png"):
        assert (cfg.out / name).stat().st_size > 0, name
    assert json.loads((cfg.out / "report.json").read_text())["valid"] is True


def test_a_short_run_through_kafkas_own_client_is_valid(tmp_path: Path) -> None:
    """`--client kafka`: confluent-kafka's idempotent producers and its consumer group through
    the Kafka listeners, under the same faults and checker."""
    cfg = RunConfig(out=tmp_path / "kafka", seed=4, client="kafka", **SHORT)  # type: ignore[arg-type]
    report = run(cfg)
    assert report["valid"], json.dumps({k: v for k, v in report.items() if k != "config"})[:3000]
    assert report["acknowledged"] > 1000 and report["final_read"]
    assert report["lost"] == report["duplicated"] == report["committed_offset_regressions"] == 0
    ops = [json.loads(line) for line in (cfg.out / "history.jsonl").read_text().splitlines()]
    commits = [o for o in ops if o["f"] == "commit" and o["type"] == "ok"]
    assert len(commits) > 10, len(commits)  # the Kafka group's members committed all along
    assert (cfg.out / "librdkafka.log").exists()


def test_a_short_run_of_reassignments_and_growth_under_kills_is_valid(tmp_path: Path) -> None:
    """`reassign` faults on four nodes (three voters, one broker only): replicas move, some
    throttled, the topic grows, and a node is killed during each; the workload follows the
    new partitions and nothing acknowledged is lost."""
    cfg = RunConfig(
        out=tmp_path / "reassign", seed=1, nodes=4, **{**SHORT, "faults": ("reassign",)}
    )  # type: ignore[arg-type]
    report = run(cfg)
    assert report["valid"], json.dumps({k: v for k, v in report.items() if k != "config"})[:3000]
    assert report["lost"] == report["duplicated"] == 0 and report["final_read"]
    faults = report["faults"]
    assert faults and all("error" not in f and f["healed_s"] is not None for f in faults), faults
    moved = [f["result"]["moves"] for f in faults]
    assert all(moved), faults
    grown = max(f["result"].get("grown_to", 0) for f in faults)
    assert grown > 3, faults  # the topic grew, and the grown partitions were written to:
    assert f"chaos-{grown - 1}" in report["partition_unavailability_s"], report


def test_a_short_run_on_a_compacted_topic_under_kills_is_valid(tmp_path: Path) -> None:
    cfg = RunConfig(
        out=tmp_path / "compact",
        seed=1,
        compact=True,
        **{**SHORT, "duration_s": 30.0, "faults": ("kill",)},  # type: ignore[arg-type]
    )
    report = run(cfg)
    assert report["valid"], json.dumps({k: v for k, v in report.items() if k != "config"})[:3000]
    assert report["mode"] == "compacted" and report["final_read"]
    assert report["lost"] == report["vanished"] == report["replica_divergence"] == 0
    c = report["compaction"]
    assert c["compacted_away"] > 1000 and c["tombstones_acknowledged"] > 0, c
    assert {r["node"] for r in c["cleaning"] if r["cleans"]} == {1, 2, 3}, c["cleaning"]


def test_the_control_run_without_the_safety_loses_writes(tmp_path: Path) -> None:
    cfg = RunConfig(
        out=tmp_path / "control",
        seed=3,
        acks="1",
        min_insync=1,
        unclean=True,
        **{**SHORT, "faults": ("isolate",)},  # type: ignore[arg-type]
    )
    report = run(cfg)
    assert not report["valid"]
    assert report["lost"] > 0, {k: report[k] for k in ("acknowledged", "lost", "invalid_because")}
