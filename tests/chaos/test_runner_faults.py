"""The chaos runner with the link and disk fault kinds, short runs (real processes).

Each run is one fault kind alone on the local backend, with the safety on (acks=all,
idempotent producers, min.insync.replicas 2, clean elections only), and must come out valid:
nothing acknowledged lost, nothing duplicated, offsets never reused, replicas identical; every
scheduled fault was applied and healed (none ended in an error). Per kind:

- link: toxics on the proxy in front of one node, on every client and replica-fetch
  connection to it; the seed's six faults cover the six toxics (latency with jitter,
  bandwidth, slicer, reset_peer, timeout 0 as a black hole, limit_data).
- disk-full: a node's log directory (a small tmpfs) filled: its writes fail with ENOSPC, its
  replicas go offline, the others go on; emptied, it recovers.
- torn-tail: kill -9 of a node whose unsynced tails are then cut or garbled, with the fsync
  durability policy: nothing acknowledged may be lost.
- bitflip: a byte flipped in an old segment of a follower whose partition's leader is then
  killed, the partition read from offset 0 throughout: the damage must never be served.

The long runs are `python -m chaos.matrix --kinds link,disk-full,torn-tail,bitflip`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from chaos.faults import LINK_TOXICS
from chaos.runner import RunConfig, run

SHORT: dict[str, Any] = {
    "duration_s": 50.0,
    "steady_s": 4.0,
    "fault_s": (3.0, 5.0),
    "quiet_s": (2.0, 3.0),
    "recovery_s": 5.0,
    "progress": False,
}

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a tmpfs mount needs root")


def check(report: dict[str, Any], cfg: RunConfig) -> list[dict[str, Any]]:
    assert report["valid"], json.dumps({k: v for k, v in report.items() if k != "config"})[:4000]
    assert report["acknowledged"] > 1000 and report["final_read"]
    assert report["lost"] == report["duplicated"] == report["inconsistent_offsets"] == 0
    # Every scheduled fault was applied, also on a loaded machine where applying them takes
    # longer than the schedule planned (the workload then outlasts the run's duration).
    assert report["faults_skipped"] == 0, report["faults"]
    faults: list[dict[str, Any]] = report["faults"]
    assert [f["kind"] for f in faults] == [s.kind for s in cfg.schedule()]
    assert all(f["healed_s"] is not None and "error" not in f for f in faults), faults
    return faults


def test_a_short_run_with_link_faults_is_valid(tmp_path: Path) -> None:
    cfg = RunConfig(out=tmp_path / "run", seed=0, faults=("link",), **SHORT)
    faults = check(run(cfg), cfg)
    assert sorted(f["options"]["toxic"] for f in faults) == sorted(LINK_TOXICS)


@needs_root
def test_a_short_run_with_full_disks_is_valid(tmp_path: Path) -> None:
    cfg = RunConfig(out=tmp_path / "run", seed=1, faults=("disk-full",), **SHORT)
    faults = check(run(cfg), cfg)
    assert all(f["result"][0]["filler_bytes"] > 0 for f in faults), faults


def test_a_short_run_with_torn_tails_under_the_fsync_policy_is_valid(tmp_path: Path) -> None:
    cfg = RunConfig(
        out=tmp_path / "run", seed=1, faults=("torn-tail",), durability="fsync", **SHORT
    )
    faults = check(run(cfg), cfg)
    damage = [d for f in faults for d in f["result"]]
    assert {d["mode"] for d in damage} >= {"cut", "garble"}, damage


def test_a_short_run_with_flipped_bytes_on_followers_is_valid(tmp_path: Path) -> None:
    cfg = RunConfig(
        out=tmp_path / "run", seed=1, faults=("bitflip",), **{**SHORT, "fault_s": (4.0, 6.0)}
    )
    faults = check(run(cfg), cfg)
    assert all(f["result"]["flip"]["before"] != f["result"]["flip"]["after"] for f in faults)
    # Found by the damaged broker itself (its scrubber set the log aside), not left to be
    # served: the byte is no longer where it was flipped.
    assert all(f["result"]["detected"] for f in faults), [f["result"] for f in faults]
