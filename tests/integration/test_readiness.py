"""Readiness that does not depend on parsing output several processes share.

The main job failed about one start in ten: the three nodes of `raftlog dev` share one stdout
pipe, `print` (unbuffered, as with PYTHONUNBUFFERED=1) writes a line's text and its newline as
two writes, two "ready on" lines merged into one, and the demo counted two nodes. Now each node
writes `<data_dir>/node.ready` (atomic rename) when it serves and removes it when it stops, and
every line a node writes to a shared stream is one write.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from raftlog import protocol
from raftlog.readiness import READY_FILE, read_ready_file
from tests.integration._support import (
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    RawClient,
    _child_env,
    cli_command,
    wait_for,
)

READY_LINE = re.compile(r"raftlog broker (\d) ready on 127\.0\.0\.1:(\d+)")
LINES_PER_WRITER = 3000


def test_lines_written_by_processes_sharing_a_pipe_never_merge() -> None:
    """Four processes write ready lines to one pipe with write_line, unbuffered: every line
    arrives whole (print(..., flush=True) broke ~1,600 of 12,000 lines here)."""
    code = (
        "import sys\n"
        "from raftlog.readiness import write_line\n"
        f"for i in range({LINES_PER_WRITER}):\n"
        "    write_line(sys.stdout, f'raftlog broker {sys.argv[1]} ready on 127.0.0.1:{i}')\n"
    )
    env = dict(_child_env(), PYTHONUNBUFFERED="1")
    read_end, write_end = os.pipe()
    writers = [
        subprocess.Popen([sys.executable, "-c", code, str(n)], stdout=write_end, env=env)
        for n in range(1, 5)
    ]
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        out = pipe.read().decode()
    assert all(w.wait(STOP_TIMEOUT_S) == 0 for w in writers)
    lines = out.splitlines()
    broken = [line for line in lines if not READY_LINE.fullmatch(line)]
    assert not broken, f"{len(broken)} merged or broken lines, e.g. {broken[:3]}"
    assert len(lines) == 4 * LINES_PER_WRITER


def _parent_pid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_dev_cluster_nodes_write_ready_files_and_remove_them_on_stop(tmp_path: Path) -> None:
    data = tmp_path / "dev"
    out_path = tmp_path / "dev.out"
    with open(out_path, "wb") as out:
        dev = subprocess.Popen(
            cli_command("dev", "--nodes", "3", "--port", "0", "--data-dir", str(data)),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_child_env(),
            start_new_session=True,
        )
    dirs = [data / f"node-{i}" for i in (1, 2, 3)]
    try:

        def all_ready() -> list[dict[str, object]] | None:
            assert dev.poll() is None, out_path.read_text()
            infos = [read_ready_file(str(d)) for d in dirs]
            return infos if all(infos) else None  # type: ignore[return-value]

        infos = wait_for(all_ready, START_TIMEOUT_S, "3 ready files")
        for i, info in enumerate(infos, start=1):
            assert sorted(info) == [
                "client_address",
                "kafka_address",
                "metrics_url",
                "node_id",
                "pid",
            ], info
            assert info["node_id"] == i
            assert _parent_pid(int(str(info["pid"]))) == dev.pid  # this start's node
            host, _, port = str(info["client_address"]).rpartition(":")
            with RawClient(host, int(port)) as raw:
                body, _ = raw.request(protocol.ApiKey.API_VERSIONS, {})
            assert body["node_id"] == i
        # One line, from one process, once every node is ready.
        bootstrap = ",".join(str(info["client_address"]) for info in infos)
        kafka = ",".join(str(info["kafka_address"]) for info in infos)
        metrics = " ".join(str(info["metrics_url"]) for info in infos)
        wait_for(
            lambda: (
                f"raftlog dev: 3 nodes ready; bootstrap servers {bootstrap}; Kafka protocol "
                f"bootstrap servers {kafka}; metrics at {metrics}\n" in out_path.read_text()
            ),
            START_TIMEOUT_S,
            "raftlog dev's ready line",
        )
        os.killpg(dev.pid, signal.SIGTERM)
        assert dev.wait(STOP_TIMEOUT_S + 15) == 0, out_path.read_text()
        assert not [d for d in dirs if (d / READY_FILE).exists()], "ready files left behind"
    finally:
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()
    assert "Traceback" not in out_path.read_text()
