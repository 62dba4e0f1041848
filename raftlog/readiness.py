"""How a node tells that it is ready, without anyone parsing output that processes share.

Rules:
- A node writes `<data_dir>/node.ready` once it serves: a JSON object {"node_id",
  "client_address" ("host:port", null without the broker role), "pid"}, written to a temporary
  file and renamed over, so a reader sees no file or the whole file. It removes the file first
  thing when it stops, and a stale one (left by a node killed with -9) when it starts.
- Whoever waits for nodes (`raftlog dev`, `raftlog demo`, the tests) reads those files and
  checks that the pid in them is alive and is the process it started. The nodes of
  `raftlog dev --nodes N` share one stdout pipe, where lines of different processes can merge.
- Every line a process writes to a stream it may share is one write(2) (`write_line`):
  `print` writes the text and the newline separately when the stream is unbuffered
  (PYTHONUNBUFFERED=1), and another process's line can land in between.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import IO, Any

READY_FILE = "node.ready"


def write_line(stream: IO[str], text: str) -> None:
    """Write `text` and a newline to `stream` with one write(2): processes that share a pipe
    (a `raftlog dev` cluster's nodes) then never merge their lines, which `print` (text and
    newline as two writes when unbuffered) does."""
    stream.flush()
    data = (text + "\n").encode()
    fd = stream.fileno()
    while data:
        data = data[os.write(fd, data) :]


def ready_file(data_dir: str) -> str:
    return os.path.join(data_dir, READY_FILE)


def read_ready_file(data_dir: str) -> dict[str, Any] | None:
    """The ready file of the node whose data is in `data_dir`, if it exists and its process is
    alive (a node killed with -9 cannot remove its file)."""
    try:
        with open(ready_file(data_dir)) as f:
            info: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        return None
    try:
        os.kill(int(info["pid"]), 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, under another user
    return info


def write_ready_file(data_dir: str, info: dict[str, Any]) -> None:
    path = ready_file(data_dir)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, path)  # atomic: a reader sees no file or the whole file


def remove_ready_file(data_dir: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(ready_file(data_dir))
