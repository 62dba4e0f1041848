"""Smoke test of the reassignment benchmark: `--quick` starts a real four-node cluster (3
voters, 1 broker-only), fills a 20 MB partition, moves one follower to broker 4 and back,
unthrottled and throttled at 5 MB/s, and writes its report.

The one figure asserted is an upper bound that the code, not the machine's speed, decides: a
throttled copy cannot be faster than the throttle plus its burst. A slow machine only makes a
copy slower, so it cannot make this fail; a throttle that does not act (20 MB in well under 3
s) does."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench._run import run_bench

MB = 1 << 20
THROTTLE_BYTES_PER_S = 5 * MB  # --quick's
# ReplicationThrottle's bucket holds one second of the rate, and a fetch may overdraw it by
# what it returns: at least one whole record batch (the fill's are up to 1,000,000 bytes), so
# two batches' worth covers the first fetch and the one that ends the copy.
BURST_BYTES = THROTTLE_BYTES_PER_S + 2 * 1_000_000
# Leeway on the rate itself, for the clocks: the move's time is measured by polls 50 ms apart.
RATE_SLACK = 1.2


def test_quick_run_moves_a_replica_out_and_back_and_the_throttle_bounds_the_copy(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    options = ["--quick", "--data-dir", str(tmp_path / "data"), "--results-dir", str(results)]
    proc = run_bench("bench.reassign_bench", *options)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| mode | move | time to move, s | copy MB/s |"), rows
    assert [r.split(" | ")[:2] for r in rows[1:]] == [
        ["| unthrottled", "to broker 4"], ["| throttled 5 MB/s", "to broker 4"],
        ["| unthrottled", "back"], ["| throttled 5 MB/s", "back"],
    ]  # fmt: skip
    [report] = results.glob("reassign-*.json")
    data = json.loads(report.read_text())
    assert data["settings"]["throttle_bytes_per_s"] == THROTTLE_BYTES_PER_S
    assert data["shutdown_problems"] == [], data["shutdown_problems"]
    moves = data["moves"]
    assert sorted((m["mode"], m["direction"]) for m in moves) == [
        ("throttled", "back"), ("throttled", "out"),
        ("unthrottled", "back"), ("unthrottled", "out"),
    ]  # fmt: skip
    for m in moves:
        # Both moves completed: one follower (not the leader) replaced, the joining replica
        # holds every byte of the partition, the throttle the mode asked for was in force.
        assert m["leader"] in m["target"] and m["leaving"] != m["leader"], m
        if m["direction"] == "out":
            assert m["joining"] == 4 and 4 not in m["replicas_before"], m
        else:
            assert m["leaving"] == 4 and 4 not in m["target"], m
        assert m["partition_bytes"] >= 20 * MB, m["partition_bytes"]
        assert m["copied_bytes"] == m["partition_bytes"], m
        assert m["samples"][-1][1] == m["partition_bytes"], m["samples"][-1]
        throttle = THROTTLE_BYTES_PER_S if m["mode"] == "throttled" else 0
        assert m["throttle_bytes_per_s"] == m["replication_throttle_seen"] == throttle, m
        # The producer ran before and during every move.
        assert m["baseline_records_per_s"] > 0, m
        assert m["move_s"] > 0, m
        if m["mode"] == "throttled":
            bound = THROTTLE_BYTES_PER_S * RATE_SLACK + BURST_BYTES / m["move_s"]
            rate = m["partition_bytes"] / m["move_s"]
            assert rate <= bound, (
                f"{m['direction']}: {rate / MB:.1f} MB/s copied at a 5 MB/s throttle (bound "
                f"{bound / MB:.1f} MB/s): {m['move_s']:.2f} s for {m['partition_bytes']} bytes"
            )
    # The back moves restored the shape: the last move ends where the first began.
    assert moves[-1]["target"] == moves[0]["replicas_before"], (moves[0], moves[-1])
    [png] = results.glob("reassign-*.png")
    assert png.stat().st_size > 0
