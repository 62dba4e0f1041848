"""The README's main job, end to end: `raftlog demo` on a real three-node local cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def run_demo(data: Path) -> subprocess.CompletedProcess[str]:
    """Run the demo in its own process group, so a timeout kills its cluster too."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "raftlog.cli", "demo", "--events", "3000", "--data-dir", str(data)],
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


def test_demo_moves_every_event_through_a_three_node_cluster(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    for run in (1, 2):  # the second run reuses the cluster's data dir and replays nothing old
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "raftlog.cli",
                "demo",
                "--events",
                "3000",
                "--data-dir",
                str(data),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert proc.returncode == 0, f"run {run}:\n{proc.stdout}\n{proc.stderr}"
        assert "every event arrived once, in order per user" in proc.stdout
        assert "total lag 0" in proc.stdout
        assert "stopped the cluster cleanly (exit status 0)" in proc.stdout
        assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in data.iterdir() if p.name.startswith("node-")) == [
        "node-1",
        "node-2",
        "node-3",
    ]
