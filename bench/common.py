"""Helpers every benchmark shares: where to put data (a real disk, not tmpfs), the machine
facts printed beside each result, so a figure always says what produced it, and a run's
scaffolding: the command line it names, its work directory (made after the disk check, kept or
removed at the end) and its result files, `<results dir>/<name>-<stamp>.md` and `.json`."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


def load_average() -> str:
    """The 1, 5 and 15-minute load averages, two decimals each, separated by spaces."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


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
        "load_average_at_start": load_average(),
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


# -- a run's scaffolding ------------------------------------------------------------------------


def command_line(module: str, argv: Sequence[str] | None = None, given: str | None = None) -> str:
    """The command a report names: `given` where a wrapper set one (`raftlog bench` sets
    args.command_line), else `<interpreter file name> -m <module>` and `argv`, or the process's
    own arguments where `argv` is None or empty; quoted as a shell would need it."""
    if given:
        return given
    return shlex.join([Path(sys.executable).name, "-m", module, *(argv or sys.argv[1:])])


@dataclass(frozen=True, slots=True)
class WorkDir:
    """A run's own new directory, the machine facts taken there and the MB (2^20 bytes) that
    were free on its filesystem before it was made."""

    path: str
    facts: dict[str, Any]
    free_mb: float


def prepare_work_dir(
    data_dir: str | None,
    prefix: str,
    *,
    need_mb: float = 0.0,
    parser: argparse.ArgumentParser | None = None,
    needed_by: str = "this run needs",
) -> WorkDir:
    """A new directory named `<prefix><random>` in `data_dir` (default_base_dir() where it is
    None; made with its parents where missing), and the machine facts about it. Where fewer
    than `need_mb` MB are free there, nothing is made, so that a run too big for the disk stops
    before it writes: parser.error exits 2 with
    `<base> has <free> MB free; <needed_by> ~<need_mb>`."""
    if need_mb > 0 and parser is None:
        raise AssertionError(
            f"{prefix}: a disk check of {need_mb} MB needs the parser to report it"
        )
    base = data_dir or default_base_dir()
    os.makedirs(base, exist_ok=True)
    free_mb = shutil.disk_usage(base).free / (1 << 20)
    if parser is not None and free_mb < need_mb:
        parser.error(f"{base} has {free_mb:,.0f} MB free; {needed_by} ~{need_mb:,.0f}")
    path = tempfile.mkdtemp(prefix=prefix, dir=base)
    return WorkDir(path, machine_facts(path), free_mb)


def keep_or_remove(
    work: str, keep: bool, say: Callable[[str], None], what: str = "the data"
) -> None:
    """At a run's end: removes `work` and all in it, or where `keep` leaves it and says
    `kept <what> in <work>`."""
    if keep:
        say(f"kept {what} in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


def run_stamp(utc: bool = True) -> str:
    """`YYYYmmdd-HHMMSS` of now in UTC, or in the machine's local time where `utc` is False: the
    part of a result file's name that orders the runs."""
    now = datetime.datetime.now(datetime.UTC) if utc else datetime.datetime.now()
    return now.strftime("%Y%m%d-%H%M%S")


def results_prefix(results_dir: str, name: str, stamp: str) -> Path:
    """`<results_dir>/<name>-<stamp>`, the path of a run's result files less their suffix (.md,
    .json, .png); `results_dir` is made with its parents where missing."""
    out = Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    return out / f"{name}-{stamp}"


def write_results(
    prefix: Path,
    text: str,
    payload: dict[str, Any],
    say: Callable[[str], None],
    also: Sequence[str] = (),
) -> None:
    """`<prefix>.md` holds the report `text` and `<prefix>.json` the `payload` (indent 1, a
    newline at the end); then the report goes to stdout as it is and `results: <the files>`
    through `say`, `also` (plots written beside them) named after the two."""
    Path(f"{prefix}.md").write_text(text)
    Path(f"{prefix}.json").write_text(json.dumps(payload, indent=1) + "\n")
    print(text, end="")
    say(f"results: {prefix}.md, {prefix}.json" + "".join(f", {p}" for p in also))
