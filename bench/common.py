"""Helpers every benchmark shares: where to put data (a real disk, not tmpfs) and the machine
facts printed beside each result, so a figure always says what produced it."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import subprocess
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MEMORY_FS = {"tmpfs", "ramfs", "devtmpfs", "hugetlbfs", "overlay"}


def fs_of(path: str) -> str:
    """'<fstype> on <device> (<mount>)' of the filesystem holding `path`."""
    real, best, best_mount = os.path.realpath(path), "unknown", ""
    with contextlib.suppress(OSError), open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 3:
                continue
            mount = parts[1].replace("\\040", " ")
            inside = real == mount or real.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best_mount):
                best, best_mount = f"{parts[2]} on {parts[0]} ({mount})", mount
    return best


def default_base_dir() -> str:
    """/var/tmp when it is on a real disk, else the system temp dir."""
    if os.path.isdir("/var/tmp") and fs_of("/var/tmp").split()[0] not in MEMORY_FS:
        return "/var/tmp"
    return tempfile.gettempdir()


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=10, cwd=REPO, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def machine_facts(data_dir: str) -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": platform.release(),
        "load_average_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "data_dir": data_dir,
        "data_fs": fs_of(data_dir),
        "git_commit": commit + (" (uncommitted changes)" if dirty else ""),
    }


def report_head(title: str, command: str, note: str, facts: dict[str, Any]) -> list[str]:
    """The first lines of a benchmark's markdown report: its title, the command that produced
    it, the user's note (if any) and the machine facts, each followed by a blank line."""
    return [
        f"# {title}",
        "",
        f"Command: `{command}`",
        "",
        *([f"Note: {note}", ""] if note else []),
        "Machine: "
        + ", ".join(f"{k}={v}" for k, v in facts.items() if k != "date")
        + f", date={facts['date']}",
        "",
    ]
