"""The README's main job, end to end: `raftlog demo` on a real three-node local cluster."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from raftlog.node import NodeConfig
from raftlog.readiness import READY_FILE
from tests.integration._cluster import write_cluster_configs

DEMO = [sys.executable, "-m", "raftlog.cli", "demo"]
EVENTS = 3000
# The report's line per door: "door kafka:  1,509 events produced with ..., 1,509 consumed".
DOOR_LINE = re.compile(r"door (kafka|raftlog): +([\d,]+) events produced .*, ([\d,]+) consumed")


def run_demo(data: Path) -> subprocess.CompletedProcess[str]:
    """Run the demo in its own process group, so a timeout kills its cluster too."""
    proc = subprocess.Popen(
        [*DEMO, "--events", str(EVENTS), "--data-dir", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def door_counts(out: str) -> dict[str, tuple[int, int]]:
    """{door: (produced, consumed)} from the demo's report."""
    return {
        door: (int(produced.replace(",", "")), int(consumed.replace(",", "")))
        for door, produced, consumed in DOOR_LINE.findall(out)
    }


def check_demo_output(proc: subprocess.CompletedProcess[str], run: int) -> None:
    assert proc.returncode == 0, f"run {run}:\n{proc.stdout}\n{proc.stderr}"
    assert "every event arrived once, in order per user" in proc.stdout
    # Both doors carried part of the events (confluent-kafka to the Kafka listeners, raftlog's
    # Producer to its own), each consumed whole, and Spark counted the sum of both.
    doors = door_counts(proc.stdout)
    assert sorted(doors) == ["kafka", "raftlog"], proc.stdout
    kafka, raftlog = doors["kafka"][0], doors["raftlog"][0]
    assert kafka > EVENTS // 4 and raftlog > EVENTS // 4 and kafka + raftlog == EVENTS
    assert all(produced == consumed for produced, consumed in doors.values()), doors
    assert f"spark: {EVENTS:,} events over" in proc.stdout
    assert f"(both doors: {kafka:,} + {raftlog:,})" in proc.stdout
    assert "Spark counted the same" in proc.stdout
    assert "total lag 0" in proc.stdout
    assert "stopped the cluster cleanly (exit status 0)" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_demo_moves_every_event_through_a_three_node_cluster(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    for run in (1, 2):  # the second run reuses the cluster's data dir and replays nothing old
        check_demo_output(run_demo(data), run)
    assert sorted(p.name for p in data.iterdir() if p.name.startswith("node-")) == [
        "node-1",
        "node-2",
        "node-3",
    ]


def test_demo_ignores_ready_files_left_by_an_earlier_start(tmp_path: Path) -> None:
    """Nodes killed with -9 leave their ready files; a live pid in them (here this test's)
    must not make the demo use their stale addresses."""
    data = tmp_path / "demo"
    for i in (1, 2, 3):
        (data / f"node-{i}").mkdir(parents=True)
        (data / f"node-{i}" / READY_FILE).write_text(
            json.dumps({"node_id": i, "client_address": "127.0.0.1:1", "pid": os.getpid()})
        )
    check_demo_output(run_demo(data), 1)


def test_demo_fails_at_once_when_a_node_cannot_start(tmp_path: Path) -> None:
    """A data dir whose configs name a port that is taken: the demo reports the failed start
    in one line within seconds (it used to wait out its ready timeout, then print a
    traceback)."""
    data = tmp_path / "demo"
    paths = write_cluster_configs(data, 3, 3000)
    taken = NodeConfig.load(str(paths[1])).client_listener.rpartition(":")[2]
    with socket.create_server(("127.0.0.1", int(taken))):
        started = time.monotonic()
        proc = run_demo(data)
    assert proc.returncode == 1, proc
    assert time.monotonic() - started < 60
    assert "raftlog: error: the cluster exited with status 1 before it was ready" in proc.stderr
    assert "node 2 failed (exit status 1); stopping the others" in proc.stderr
    assert f"client listener 127.0.0.1:{taken}: Address already in use" in proc.stderr
    assert "Traceback" not in proc.stderr
