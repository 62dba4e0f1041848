"""Storage benchmark: append and read throughput of `PartitionLog`, next to the machine's `dd`.

Run from the repository root::

    .venv/bin/python -m bench.storage_bench                 # full run, 5 runs per case
    .venv/bin/python -m bench.storage_bench --quick         # one short run per case (tests)
    .venv/bin/python -m bench.storage_bench --profile append-b1000-pagecache

What it measures (200-byte record values, null keys, no headers; batches of 1, 50 and 1000):

- `dd` baselines, measured in the same run on the same file system: sequential 1 MiB writes to
  the page cache, the same with `conv=fdatasync`, 1 MiB reads of a cached file, and one
  synchronous write (`oflag=dsync`) of exactly one batch's size per write, which is what an
  fsync per append asks of the disk.
- Producer-side encoding (`BatchBuilder`), reported on its own rows: the broker never encodes,
  it appends the bytes it received, so the append cases use batches encoded once beforehand.
- `PartitionLog.append` of the pre-encoded batch, with no fsync (page cache) and with an fsync
  per append (`flush_messages=1`), each run in a fresh log directory for `--duration` seconds or
  until `--max-bytes` were appended, whichever comes first.
- Sustained appends of 1000-record batches: `--sustained-bytes` (default 4 GiB, more than this
  VM's dirty-page background threshold, and several segments) timed until the data is on disk
  (the final fsync included), next to `dd conv=fdatasync` writing as much. Page-cache appends
  measure the CPU; sustained ones meet the kernel's dirty-page writeback and the disk.
- Reading back the whole log written by the page-cache append case of the same run, 1 MiB per
  call, with `read()` (bytes returned) and with `read_slice()` (locating the batches only; the
  broker hands that slice to `sendfile`), in whole passes for at least `--duration` seconds.

Every case is repeated `--runs` times, in sweeps (run 1 of every case, then run 2, ...), so that
slow drifts of the machine spread over all cases alike; the table shows the median and the
min-max over runs, and the ratio to its `dd` baseline of the same sweep (median and min-max of
the per-sweep ratios). MB = 10^6 bytes, as `dd` reports. Append and read MB/s count the log
bytes (batch headers included), which is what the page cache and the disk receive.

On a shared machine the wall-clock rates move with the other processes' load. So every run also
records the CPU time of the thread that did the work (for `dd`, the child's CPU time) and how
long that thread waited for a CPU (`/proc/thread-self/schedstat`): "MB per CPU-s" is what the
code costs whatever the load, and "waited for CPU" says how busy the machine was during the run.

Results go to stdout (a markdown table), to bench/results/storage-<timestamp>.{md,json,png}
and, with `--out FILE`, to FILE. Progress goes to stderr. Without matplotlib the plot is
skipped with a note; everything else still works.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import json
import os
import platform
import pstats
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import common
from raftlog.records import HEADER, BatchBuilder, encode_batch
from raftlog.storage import LogConfig, PartitionLog

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS_DIR = REPO / "bench" / "results"

VALUE_BYTES = 200
BATCH_SIZES = (1, 50, 1000)
READ_MAX_BYTES = 1 << 20
MIB = 1 << 20
MB = 1e6
# dd is interrupted (SIGINT makes GNU dd print its statistics and exit) after the case's
# duration, but never before this: a SIGINT that arrives before dd installed its handler kills
# it without statistics.
DD_MIN_SECONDS = 0.3
MEMORY_FS = {"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"}

DEFAULTS = {"runs": 5, "duration": 2.0, "max_bytes": 1 << 30, "sustained_bytes": 4 << 30}
QUICK = {"runs": 1, "duration": 0.25, "max_bytes": 64 * MIB, "sustained_bytes": 64 * MIB}
# How often (in appended bytes) a timed loop samples /proc/meminfo's Dirty: rare enough to cost
# nothing measurable, often enough to see the peak of a run.
DIRTY_SAMPLE_BYTES = 64 * MIB


# -- what a case is ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    text: str
    min_records_per_s: float | None = None
    min_mb_per_s: float | None = None

    def met(self, records_per_s: float, mb_per_s: float) -> bool:
        if self.min_records_per_s is not None and records_per_s < self.min_records_per_s:
            return False
        return self.min_mb_per_s is None or mb_per_s >= self.min_mb_per_s


@dataclass
class Sample:
    """One run of one case."""

    seconds: float
    nbytes: int
    records: int = 0
    ops: int = 0  # appends, reads, dd writes, batches built
    # CPU seconds of the thread that did the work (dd: the child process), and its seconds
    # waiting for a CPU (run queue); None where unknown.
    cpu_seconds: float | None = None
    cpu_wait_seconds: float | None = None
    dirty_max_bytes: int | None = None  # the most /proc/meminfo Dirty seen during the run

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / self.seconds / MB if self.seconds > 0 else 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_cpu_s(self) -> float | None:
        if not self.cpu_seconds:
            return None
        return self.nbytes / self.cpu_seconds / MB

    @property
    def cpu_wait_share(self) -> float | None:
        if self.cpu_wait_seconds is None or self.seconds <= 0:
            return None
        return self.cpu_wait_seconds / self.seconds


@dataclass
class Case:
    key: str  # stable id, used by --profile and in the JSON
    label: str  # the table's first column
    kind: str  # "baseline", "encode", "append" or "read"
    batch: int | None = None
    fsync: bool = False
    mode: str = ""  # reads: "read" or "slice"
    baseline: str | None = None  # key of the dd case this one is compared with
    target: Target | None = None
    note: str = ""
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    sustained: bool = False

    def median(self, metric: str) -> float:
        values = [v for s in self.samples if (v := getattr(s, metric)) is not None]
        return statistics.median(values) if values else 0.0

    def span(self, metric: str) -> tuple[float, float]:
        values = [v for s in self.samples if (v := getattr(s, metric)) is not None]
        return (min(values), max(values)) if values else (0.0, 0.0)

    def has(self, metric: str) -> bool:
        return any(getattr(s, metric) is not None for s in self.samples)


def build_cases(batch_bytes: dict[int, int]) -> list[Case]:
    """Every case, in the order one sweep runs them (reads need the page-cache appends)."""
    cases = [
        Case("dd-write", "dd write bs=1M, page cache", "baseline"),
        Case("dd-fdatasync", "dd write bs=1M conv=fdatasync", "baseline"),
        Case(
            "dd-fdatasync-sustained",
            "dd write bs=1M conv=fdatasync, sustained",
            "baseline",
            sustained=True,
        ),
        Case("dd-read", "dd read bs=1M, page cache", "baseline"),
    ]
    for n in BATCH_SIZES:
        cases.append(
            Case(
                f"dd-dsync-b{n}",
                f"dd write bs={batch_bytes[n]} oflag=dsync",
                "baseline",
                batch=n,
                note=f"one synchronous write of a b={n} batch's size",
            )
        )
    for n in BATCH_SIZES:
        cases.append(
            Case(
                f"encode-b{n}",
                f"encode b={n} (producer side, BatchBuilder)",
                "encode",
                batch=n,
            )
        )
    for n in BATCH_SIZES:
        target = None
        if n == 1000:
            target = Target(">= 4 M rec/s and >= 800 MB/s", 4e6, 800)
        elif n == 1:
            target = Target(">= 100 k appends/s", 1e5)
        cases.append(
            Case(
                f"append-b{n}-pagecache",
                f"append b={n}, page cache",
                "append",
                batch=n,
                baseline="dd-write",
                target=target,
            )
        )
    cases.append(
        Case(
            "append-b1000-sustained",
            "append b=1000, sustained, until on disk",
            "append",
            batch=1000,
            baseline="dd-fdatasync-sustained",
            sustained=True,
            note="timed until the final fsync returns",
        )
    )
    for n in BATCH_SIZES:
        cases.append(
            Case(
                f"append-b{n}-fsync",
                f"append b={n}, fsync per append",
                "append",
                batch=n,
                fsync=True,
                baseline=f"dd-dsync-b{n}",
            )
        )
    for n in reversed(BATCH_SIZES):
        cases.append(
            Case(
                f"read-b{n}",
                f"read() 1 MiB, log of b={n}",
                "read",
                batch=n,
                mode="read",
                baseline="dd-read",
                target=Target(">= 1.5 GB/s", None, 1500),
            )
        )
        cases.append(
            Case(
                f"slice-b{n}",
                f"read_slice() 1 MiB, locate only, log of b={n}",
                "read",
                batch=n,
                mode="slice",
                note="no bytes are copied: not comparable with dd",
            )
        )
    return cases


# -- machine facts and file systems -----------------------------------------------------------


def fs_of(path: str) -> tuple[str, str, str]:
    """(file system type, device, mount point) holding `path`, from /proc/self/mounts."""
    real = os.path.realpath(path)
    best = ("unknown", "unknown", "")
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                device, mount, fstype = parts[0], parts[1].replace("\\040", " "), parts[2]
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best[2]):
                    best = (fstype, device, mount)
    except OSError:
        pass
    return best


def default_base_dir() -> tuple[str, bool]:
    """A directory on a real disk for the logs: /var/tmp, else <repo>/.bench-tmp.

    Returns (path, created): a created .bench-tmp is removed again at the end if empty.
    """
    if os.path.isdir("/var/tmp") and fs_of("/var/tmp")[0] not in MEMORY_FS:
        return "/var/tmp", False
    path = REPO / ".bench-tmp"
    created = not path.exists()
    path.mkdir(exist_ok=True)
    return str(path), created


def thread_sched() -> tuple[int, int] | None:
    """(ns on a CPU, ns waiting for one) of the calling thread, or None without schedstat."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            on_cpu, waiting = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(on_cpu), int(waiting)


def dirty_bytes() -> int | None:
    """/proc/meminfo's Dirty: page-cache bytes not yet written back."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("Dirty:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


class Meter:
    """CPU time, run-queue wait and peak Dirty of one timed run on this thread."""

    def __init__(self) -> None:
        self.sched0 = thread_sched()
        self.dirty_max = dirty_bytes()

    def sample_dirty(self) -> None:
        d = dirty_bytes()
        if d is not None and (self.dirty_max is None or d > self.dirty_max):
            self.dirty_max = d

    def sample(self, seconds: float, nbytes: int, records: int = 0, ops: int = 0) -> Sample:
        self.sample_dirty()
        sched1 = thread_sched()
        cpu = wait = None
        if self.sched0 is not None and sched1 is not None:
            cpu = (sched1[0] - self.sched0[0]) / 1e9
            wait = (sched1[1] - self.sched0[1]) / 1e9
        return Sample(seconds, nbytes, records, ops, cpu, wait, self.dirty_max)


def dirty_limits() -> str:
    """The kernel's dirty-page settings and what they mean on this machine, in one line."""

    def read(name: str) -> int:
        with open(f"/proc/sys/vm/{name}") as f:
            return int(f.read())

    try:
        bg_ratio, ratio = read("dirty_background_ratio"), read("dirty_ratio")
        bg_bytes, limit_bytes = read("dirty_background_bytes"), read("dirty_bytes")
        with open("/proc/meminfo") as f:
            avail = next(int(x.split()[1]) * 1024 for x in f if x.startswith("MemAvailable:"))
    except (OSError, ValueError, StopIteration):
        return "unknown"
    bg = bg_bytes or avail * bg_ratio // 100
    limit = limit_bytes or avail * ratio // 100
    return (
        f"dirty_background_ratio={bg_ratio}, dirty_ratio={ratio} (bytes: {bg_bytes}, "
        f"{limit_bytes}), MemAvailable {avail / 1e9:.1f} GB: background writeback from about "
        f"{bg / 1e9:.1f} GB dirty, writers throttled from about {(bg + limit) / 2e9:.1f} GB"
    )


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=REPO)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else "unknown"


def machine_facts(work_dir: str) -> dict[str, Any]:
    cpu_model = "unknown"
    mem_total = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_total = f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
                    break
    except OSError:
        pass
    fstype, device, mount = fs_of(work_dir)
    commit = _first_line(["git", "rev-parse", "--short", "HEAD"])
    dirty = _first_line(["git", "status", "--porcelain"]) != "unknown"
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "nproc": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu": cpu_model,
        "memory": mem_total,
        "kernel": platform.release(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "dd": _first_line(["dd", "--version"]) if shutil.which("dd") else "not found",
        "work_dir": work_dir,
        "work_fs": f"{fstype} on {device} (mounted at {mount})",
        "dirty_pages": dirty_limits(),
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "git_commit": commit + (" (uncommitted changes)" if dirty else ""),
    }


# -- dd -------------------------------------------------------------------------------------------

_DD_STATS = re.compile(r"^(\d+) bytes\b.*?copied, ([0-9.]+(?:e[-+]?\d+)?) s", re.MULTILINE)


class DdError(RuntimeError):
    pass


def run_dd(args: list[str], max_seconds: float | None = None) -> tuple[int, float, str]:
    """Run dd; (bytes, seconds, dd's own summary line). Interrupted after `max_seconds`."""
    if shutil.which("dd") is None:
        raise DdError("dd not found")
    env = {**os.environ, "LC_ALL": "C"}
    proc = subprocess.Popen(
        ["dd", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        if max_seconds is None:
            _, err = proc.communicate()
        else:
            try:
                _, err = proc.communicate(timeout=max(max_seconds, DD_MIN_SECONDS))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)  # GNU dd prints its statistics, then exits
                _, err = proc.communicate()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    m = _DD_STATS.search(err)
    if m is None:
        raise DdError(f"dd {' '.join(args)}: no statistics in its output: {err.strip()!r}")
    if proc.returncode not in (0, -signal.SIGINT):
        raise DdError(f"dd {' '.join(args)} exited with {proc.returncode}: {err.strip()!r}")
    return int(m.group(1)), float(m.group(2)), m.group(0).strip()


# -- the runner -----------------------------------------------------------------------------------


@dataclass
class Settings:
    runs: int
    duration: float
    max_bytes: int
    segment_bytes: int | None
    sustained_bytes: int = DEFAULTS["sustained_bytes"]


class Bench:
    def __init__(self, settings: Settings, root: str):
        self.s = settings
        self.root = root
        value = os.urandom(VALUE_BYTES)
        self.value = value
        now_ms = int(time.time() * 1000)
        self.timestamp = now_ms
        # Encoded once per size: the broker appends the bytes a producer sent.
        self.batches = {n: encode_batch([(None, value)] * n, timestamp=now_ms) for n in BATCH_SIZES}
        # Log directories written by this sweep's page-cache appends, read by its read cases.
        self.kept: dict[int, str] = {}
        self.open_logs: dict[int, PartitionLog] = {}

    def config(self, fsync: bool) -> LogConfig:
        kwargs: dict[str, Any] = {"flush_messages": 1 if fsync else None}
        if self.s.segment_bytes is not None:
            kwargs["segment_bytes"] = self.s.segment_bytes
        return LogConfig(**kwargs)

    def run(self, case: Case) -> Sample:
        if case.kind == "baseline":
            return self.run_dd(case)
        if case.kind == "encode":
            assert case.batch is not None
            return self.run_encode(case.batch)
        if case.kind == "append":
            assert case.batch is not None
            if case.sustained:
                return self.run_sustained(case.batch)
            return self.run_append(case.batch, case.fsync)
        assert case.batch is not None
        return self.run_read(case.batch, case.mode)

    # dd

    def run_dd(self, case: Case) -> Sample:
        path = os.path.join(self.root, f"{case.key}.dd")
        count = max(1, self.s.max_bytes // MIB)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            if case.key == "dd-write":
                nbytes, secs, line = run_dd(
                    ["if=/dev/zero", f"of={path}", "bs=1M", f"count={count}"]
                )
            elif case.key in ("dd-fdatasync", "dd-fdatasync-sustained"):
                if case.sustained:
                    count = max(1, self.s.sustained_bytes // MIB)
                nbytes, secs, line = run_dd(
                    ["if=/dev/zero", f"of={path}", "bs=1M", f"count={count}", "conv=fdatasync"]
                )
            elif case.key == "dd-read":
                run_dd(["if=/dev/zero", f"of={path}", "bs=1M", f"count={count}"])
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                nbytes, secs, line = run_dd([f"if={path}", "of=/dev/null", "bs=1M"])
            else:
                assert case.batch is not None
                bs = len(self.batches[case.batch])
                nbytes, secs, line = run_dd(
                    [
                        "if=/dev/zero",
                        f"of={path}",
                        f"bs={bs}",
                        f"count={max(1, self.s.max_bytes // bs)}",
                        "oflag=dsync",
                    ],
                    max_seconds=self.s.duration,
                )
        finally:
            if os.path.exists(path):
                os.unlink(path)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        case.extra.setdefault("dd_output", []).append(line)
        ops = nbytes // len(self.batches[case.batch]) if case.batch else nbytes // MIB
        return Sample(secs, nbytes, 0, ops, cpu_seconds=cpu)

    # producer side

    def run_encode(self, n: int) -> Sample:
        value, ts = self.value, self.timestamp
        chunk = max(1, 1000 // n)
        built = nbytes = 0
        meter = Meter()
        t0 = time.perf_counter()
        deadline = t0 + self.s.duration
        while True:
            for _ in range(chunk):
                builder = BatchBuilder()
                for _ in range(n):
                    builder.append(None, value, ts)
                nbytes += len(builder.build())
            built += chunk
            if time.perf_counter() >= deadline:
                break
        secs = time.perf_counter() - t0
        return meter.sample(secs, nbytes, built * n, built)

    # broker side: append

    def run_append(self, n: int, fsync: bool) -> Sample:
        batch = self.batches[n]
        size = len(batch)
        limit = max(1, self.s.max_bytes // size)
        # Check the clock about every 256 KiB (page cache) or after every append (fsync).
        chunk = 1 if fsync else max(1, (256 * 1024) // size)
        path = tempfile.mkdtemp(prefix=f"append-b{n}-", dir=self.root)
        log = PartitionLog.open(path, self.config(fsync))
        keep = False
        try:
            append = log.append
            done = 0
            sample_every = max(1, DIRTY_SAMPLE_BYTES // (chunk * size))
            meter = Meter()
            t0 = time.perf_counter()
            deadline = t0 + self.s.duration
            rounds = 0
            while done < limit:
                k = min(chunk, limit - done)
                for _ in range(k):
                    append(batch, 0)
                done += k
                rounds += 1
                if rounds % sample_every == 0:
                    meter.sample_dirty()
                if time.perf_counter() >= deadline:
                    break
            secs = time.perf_counter() - t0
            sample = meter.sample(secs, done * size, done * n, done)
            assert log.log_end_offset == done * n
            keep = not fsync
        finally:
            # Untimed: close() fsyncs, so the next run does not compete with this one's
            # writeback; the page-cache log stays cached for this sweep's reads.
            log.close()
            if keep:
                old = self.kept.pop(n, None)
                if old:
                    shutil.rmtree(old, ignore_errors=True)
                self.kept[n] = path
            else:
                shutil.rmtree(path, ignore_errors=True)
        return sample

    def run_sustained(self, n: int) -> Sample:
        """Append `sustained_bytes` (no time limit) and close: timed until the final fsync
        returns, as `dd conv=fdatasync` is. CPU time counts the appending thread only (the
        background fsyncs of rolled segments run on the storage layer's thread)."""
        batch = self.batches[n]
        size = len(batch)
        count = max(1, self.s.sustained_bytes // size)
        sample_every = max(1, DIRTY_SAMPLE_BYTES // size)
        path = tempfile.mkdtemp(prefix=f"sustained-b{n}-", dir=self.root)
        try:
            log = PartitionLog.open(path, self.config(False))
            append = log.append
            meter = Meter()
            t0 = time.perf_counter()
            try:
                for i in range(count):
                    append(batch, 0)
                    if i % sample_every == 0:
                        meter.sample_dirty()
            finally:
                log.close()  # fsyncs everything: part of the timed work
            secs = time.perf_counter() - t0
            return meter.sample(secs, count * size, count * n, count)
        finally:
            shutil.rmtree(path, ignore_errors=True)

    # broker side: read

    def log_for_read(self, n: int) -> PartitionLog:
        log = self.open_logs.get(n)
        if log is None:
            path = self.kept.get(n)
            if path is None:
                raise RuntimeError(f"no log written by append-b{n}-pagecache in this sweep")
            log = PartitionLog.open(path, self.config(False))
            self.open_logs[n] = log
        return log

    def run_read(self, n: int, mode: str) -> Sample:
        log = self.log_for_read(n)
        size = len(self.batches[n])
        start, end = log.log_start_offset, log.log_end_offset
        read, read_slice = log.read, log.read_slice
        unpack_header = HEADER.unpack_from
        nbytes = records = calls = 0
        meter = Meter()
        t0 = time.perf_counter()
        deadline = t0 + self.s.duration
        while True:
            offset = start
            if mode == "read":
                while offset < end:
                    data = read(offset, READ_MAX_BYTES)
                    got = len(data)
                    batches = got // size
                    # Every batch has the same size, so the last one starts `size` bytes from
                    # the end: one header unpack per call checks we got what we asked for.
                    if (
                        not got
                        or got % size
                        or unpack_header(data, got - size)[0] != offset + (batches - 1) * n
                    ):
                        raise RuntimeError(f"read at offset {offset} returned unexpected bytes")
                    offset += batches * n
                    nbytes += got
                    calls += 1
            else:
                while offset < end:
                    got = read_slice(offset, READ_MAX_BYTES).size
                    if not got or got % size:
                        raise RuntimeError(f"read_slice at offset {offset}: size {got}")
                    offset += got // size * n
                    nbytes += got
                    calls += 1
            records += end - start
            if time.perf_counter() >= deadline:
                break
        secs = time.perf_counter() - t0
        return meter.sample(secs, nbytes, records, calls)

    def end_sweep(self) -> None:
        for log in self.open_logs.values():
            log.close()
        self.open_logs.clear()
        for path in self.kept.values():
            shutil.rmtree(path, ignore_errors=True)
        self.kept.clear()


# -- formatting -----------------------------------------------------------------------------------


def fmt_count(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


def fmt_mb(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def verdict(case: Case) -> tuple[str, str]:
    """(target text, met?) for the table."""
    if case.target is None:
        return "—", "—"
    if not case.samples:
        return case.target.text, "n/a"
    ok = case.target.met(case.median("records_per_s"), case.median("mb_per_s"))
    return case.target.text, "yes" if ok else "**NO**"


def ratios(case: Case, by_key: dict[str, Case], metric: str) -> list[float]:
    """The case's `metric` over its dd baseline's, sweep by sweep (run i with run i)."""
    if case.baseline is None:
        return []
    base = by_key[case.baseline]
    out = []
    for mine, theirs in zip(case.samples, base.samples, strict=False):
        a, b = getattr(mine, metric), getattr(theirs, metric)
        if a is not None and b:
            out.append(a / b)
    return out


def fmt_ratio(values: list[float]) -> str:
    if not values:
        return "—"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.2f}x"
    return f"{med:.2f}x ({min(values):.2f}-{max(values):.2f})"


def fmt_bytes(n: float) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.0f} MiB"
    return f"{n / 1024:.0f} KiB"


def table(cases: list[Case]) -> str:
    by_key = {c.key: c for c in cases}
    lines = [
        "| case | data per run | records/s | MB/s | MB/s min-max | vs dd, same sweep "
        "| MB per CPU-s | vs dd per CPU-s | waited for CPU | target | met? |",
        "|---|---:|---:|---:|---:|---|---:|---|---:|---|---|",
    ]
    for c in cases:
        if c.samples:
            recs = fmt_count(c.median("records_per_s")) if c.kind != "baseline" else "—"
            lo, hi = c.span("mb_per_s")
            mb, span = fmt_mb(c.median("mb_per_s")), f"{fmt_mb(lo)}-{fmt_mb(hi)}"
            data = fmt_bytes(c.median("nbytes"))
            per_cpu = fmt_mb(c.median("mb_per_cpu_s")) if c.has("mb_per_cpu_s") else "—"
            waited = f"{c.median('cpu_wait_share'):.0%}" if c.has("cpu_wait_share") else "—"
        else:
            recs, mb, span, data, per_cpu, waited = "failed", "—", "—", "—", "—", "—"
        target, met = verdict(c)
        lines.append(
            f"| {c.label} | {data} | {recs} | {mb} | {span} "
            f"| {fmt_ratio(ratios(c, by_key, 'mb_per_s'))} | {per_cpu} "
            f"| {fmt_ratio(ratios(c, by_key, 'mb_per_cpu_s'))} | {waited} | {target} | {met} |"
        )
    return "\n".join(lines)


def notes(settings: Settings, batch_bytes: dict[int, int], cases: list[Case]) -> str:
    sizes = ", ".join(f"b={n}: {batch_bytes[n]:,} B" for n in BATCH_SIZES)
    out = [
        f"- Median of {settings.runs} run(s) per case; min-max over the runs. MB = 10^6 bytes.",
        f"- Records: {VALUE_BYTES}-byte value, null key, no headers (225 B each in a batch, "
        f"plus a 65 B batch header). Batch sizes: {sizes}. Append and read MB/s count these "
        "log bytes; payload MB/s (200 B x records/s) is in the JSON.",
        f"- Each append/encode run lasts {settings.duration:g} s or "
        f"{settings.max_bytes / MIB:,.0f} MiB, whichever comes first, in a fresh log "
        f"directory (segment_bytes={settings.segment_bytes or LogConfig().segment_bytes:,}). "
        "Batches are encoded once beforehand (the broker appends received bytes); the encode "
        "rows are the producer's cost. 'data per run' is the median bytes one run wrote/read.",
        f"- The sustained rows write {fmt_bytes(settings.sustained_bytes)} per run, timed until "
        "the final fsync returns: past the kernel's dirty-page background threshold (see "
        "dirty_pages above) the page cache no longer absorbs the writes, and rolled segments "
        "are fsynced while later ones are written, so these rows show the disk, not the CPU.",
        "- 'vs dd, same sweep': the case's MB/s over its dd baseline's in the same sweep, "
        "median (min-max) over sweeps. 'MB per CPU-s': bytes over the CPU time of the thread "
        "that did the work (dd: the dd process), so it does not move with the machine's load; "
        "'waited for CPU': the share of the run that thread spent runnable but not running "
        "(other processes had the CPUs). A high share explains a low wall-clock rate.",
        "- Page-cache appends are compared with `dd bs=1M` to the page cache; fsync-per-append "
        "rows with `dd oflag=dsync` writing one batch's size per synchronous write "
        "(`dd conv=fdatasync` is the disk's bandwidth, for reference); reads with `dd` reading "
        "a cached file with bs=1M.",
        "- Reads walk the whole log written by the same run's page-cache append case, 1 MiB "
        f"per call, in whole passes for at least {settings.duration:g} s. `read_slice()` only "
        "locates the batches (the broker passes the slice to sendfile): no bytes are copied.",
    ]
    failed = [c for c in cases if c.errors]
    for c in failed:
        out.append(f"- {c.key}: {len(c.errors)} failed run(s): {c.errors[0]}")
    return "\n".join(out)


def report_markdown(
    command: str, facts: dict[str, Any], tbl: str, note_text: str, plot_name: str | None
) -> str:
    fact_lines = "\n".join(f"- {k}: {v}" for k, v in facts.items())
    parts = [
        "# raftlog storage benchmark",
        "",
        "Command (from the repository root):",
        "",
        "```",
        command,
        "```",
        "",
        "Machine:",
        "",
        fact_lines,
        "",
        tbl,
        "",
        note_text,
    ]
    if plot_name:
        parts += ["", f"![throughput per case]({plot_name})"]
    return "\n".join(parts) + "\n"


def results_json(
    command: str, facts: dict[str, Any], settings: Settings, cases: list[Case], batch_bytes: dict
) -> dict[str, Any]:
    by_key = {c.key: c for c in cases}
    out_cases = []
    for c in cases:
        target_text, met = verdict(c)
        out_cases.append(
            {
                "key": c.key,
                "label": c.label,
                "kind": c.kind,
                "batch": c.batch,
                "fsync": c.fsync,
                "baseline": c.baseline,
                "median": {
                    "records_per_s": c.median("records_per_s"),
                    "mb_per_s": c.median("mb_per_s"),
                    "payload_mb_per_s": c.median("records_per_s") * VALUE_BYTES / MB,
                    "ops_per_s": c.median("ops_per_s"),
                },
                "min_mb_per_s": c.span("mb_per_s")[0],
                "max_mb_per_s": c.span("mb_per_s")[1],
                "mb_per_cpu_s": c.median("mb_per_cpu_s") if c.has("mb_per_cpu_s") else None,
                "cpu_wait_share": (c.median("cpu_wait_share") if c.has("cpu_wait_share") else None),
                "vs_dd_same_sweep": ratios(c, by_key, "mb_per_s"),
                "vs_dd_per_cpu_s": ratios(c, by_key, "mb_per_cpu_s"),
                "target": target_text if c.target else None,
                "met": None if c.target is None else met == "yes",
                "runs": [
                    {
                        "seconds": s.seconds,
                        "bytes": s.nbytes,
                        "records": s.records,
                        "ops": s.ops,
                        "records_per_s": s.records_per_s,
                        "mb_per_s": s.mb_per_s,
                        "cpu_seconds": s.cpu_seconds,
                        "cpu_wait_seconds": s.cpu_wait_seconds,
                        "dirty_max_bytes": s.dirty_max_bytes,
                    }
                    for s in c.samples
                ],
                "errors": c.errors,
                **c.extra,
            }
        )
    return {
        "command": command,
        "machine": facts,
        "settings": {
            "runs": settings.runs,
            "duration_s": settings.duration,
            "max_bytes": settings.max_bytes,
            "sustained_bytes": settings.sustained_bytes,
            "segment_bytes": settings.segment_bytes or LogConfig().segment_bytes,
            "value_bytes": VALUE_BYTES,
            "read_max_bytes": READ_MAX_BYTES,
            "batch_bytes": {str(k): v for k, v in batch_bytes.items()},
        },
        "cases": out_cases,
    }


def plot(cases: list[Case], facts: dict[str, Any], path: Path) -> str | None:
    """Bar chart of MB/s per case with the dd baselines as lines; None if it was drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: skipped the plot (pip install matplotlib)"
    by_key = {c.key: c for c in cases}
    shown = [c for c in cases if c.kind != "baseline" and c.samples]
    colors = {"encode": "#8c8c8c", "append": "#1f77b4", "read": "#2ca02c"}
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(shown) + 2.2))
    ys = list(range(len(shown)))[::-1]
    meds = [c.median("mb_per_s") for c in shown]
    lows = [m - c.span("mb_per_s")[0] for m, c in zip(meds, shown, strict=True)]
    highs = [c.span("mb_per_s")[1] - m for m, c in zip(meds, shown, strict=True)]
    bar_colors = ["#ff7f0e" if c.kind == "append" and c.fsync else colors[c.kind] for c in shown]
    ax.barh(ys, meds, xerr=[lows, highs], color=bar_colors, capsize=2)
    for y, c, m in zip(ys, shown, meds, strict=True):
        ax.text(
            max(m, c.span("mb_per_s")[1]) * 1.15,  # right of the whisker
            y,
            f"{fmt_mb(m)} MB/s, {fmt_count(c.median('records_per_s'))} rec/s",
            va="center",
            fontsize=7,
        )
    ax.set_yticks(ys, [c.label for c in shown], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("MB/s (10^6 bytes/s, median; whiskers min-max); log scale")
    styles = {
        "dd-write": "--",
        "dd-fdatasync": ":",
        "dd-fdatasync-sustained": (0, (1, 4)),
        "dd-read": "-.",
    }
    for key, style in styles.items():
        base = by_key.get(key)
        if base is not None and base.samples and base.median("mb_per_s") > 0:
            ax.axvline(
                base.median("mb_per_s"),
                color="black",
                linestyle=style,
                linewidth=1,
                label=f"{base.label}: {fmt_mb(base.median('mb_per_s'))} MB/s",
            )
    ax.legend(loc="upper right", fontsize=7)
    ax.set_title(
        f"raftlog storage, {VALUE_BYTES}-byte records — {facts['date']}, "
        f"{facts['nproc']} CPUs, {facts['python']}",
        fontsize=9,
    )
    xmax = max([*meds, 1.0])
    ax.set_xlim(right=xmax * 40)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return None


# -- main -----------------------------------------------------------------------------------------


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.storage_bench",
        description="Append/read throughput of raftlog's PartitionLog next to dd.",
    )
    p.add_argument("--runs", type=int, help=f"runs per case (default {DEFAULTS['runs']})")
    p.add_argument(
        "--duration",
        type=float,
        help=f"seconds per append/encode/read run (default {DEFAULTS['duration']})",
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        help=f"byte budget per append run and dd file size (default {DEFAULTS['max_bytes']})",
    )
    p.add_argument(
        "--sustained-bytes",
        type=int,
        help="bytes per sustained append run and its dd "
        f"(default {DEFAULTS['sustained_bytes'] >> 30} GiB)",
    )
    p.add_argument("--segment-bytes", type=int, help="LogConfig.segment_bytes (default 1 GiB)")
    p.add_argument(
        "--dir",
        help="where the temporary logs go; must be a real disk, not tmpfs "
        "(default: a temp dir under /var/tmp, or ./.bench-tmp if that is tmpfs)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"short version: runs={QUICK['runs']}, duration={QUICK['duration']} s, "
        f"max-bytes={QUICK['max_bytes'] // MIB} MiB, sustained-bytes="
        f"{QUICK['sustained_bytes'] // MIB} MiB (explicit options still win)",
    )
    p.add_argument("--out", help="also write the markdown report to this file")
    p.add_argument(
        "--results-dir",
        default=str(DEFAULT_RESULTS_DIR),
        help="where storage-<timestamp>.{md,json,png} go (default bench/results)",
    )
    p.add_argument(
        "--profile",
        metavar="CASE",
        help="run one case once under cProfile and print where the time goes "
        "(e.g. append-b1000-pagecache, read-b1)",
    )
    args = p.parse_args(argv)
    base = QUICK if args.quick else DEFAULTS
    for name in ("runs", "duration", "max_bytes", "sustained_bytes"):
        if getattr(args, name) is None:
            setattr(args, name, base[name])
    if args.runs < 1 or args.duration <= 0 or args.max_bytes < 1 or args.sustained_bytes < 1:
        p.error("--runs, --duration, --max-bytes and --sustained-bytes must be positive")
    return args


def profile_case(bench: Bench, cases: list[Case], key: str) -> int:
    by_key = {c.key: c for c in cases}
    case = by_key.get(key)
    if case is None:
        progress(f"unknown case {key!r}; cases: {', '.join(by_key)}")
        return 2
    if case.kind == "read":
        progress(f"writing the log to read: append-b{case.batch}-pagecache (not profiled)")
        bench.run(by_key[f"append-b{case.batch}-pagecache"])
        bench.log_for_read(case.batch or 0)
    profiler = cProfile.Profile()
    profiler.enable()
    sample = bench.run(case)
    profiler.disable()
    print(
        f"{case.label}: {fmt_count(sample.records_per_s)} rec/s, {fmt_mb(sample.mb_per_s)} MB/s "
        f"over {sample.seconds:.2f} s (under cProfile, so slower than unprofiled)"
    )
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.strip_dirs().sort_stats("tottime").print_stats(25)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings(
        args.runs, args.duration, args.max_bytes, args.segment_bytes, args.sustained_bytes
    )
    if args.segment_bytes is not None:
        LogConfig(segment_bytes=args.segment_bytes)  # validates, with a readable error
    given = sys.argv[1:] if argv is None else argv
    command = shlex.join([sys.executable, "-m", "bench.storage_bench", *given])

    created_base = False
    if args.dir:
        base_dir = args.dir
        os.makedirs(base_dir, exist_ok=True)
    else:
        base_dir, created_base = default_base_dir()
    fstype = fs_of(base_dir)[0]
    if fstype in MEMORY_FS:
        progress(f"warning: {base_dir} is on {fstype}, not a disk: fsync and dd figures are moot")
    root = tempfile.mkdtemp(prefix="raftlog-storage-bench-", dir=base_dir)
    try:
        bench = Bench(settings, root)
        batch_bytes = {n: len(b) for n, b in bench.batches.items()}
        cases = build_cases(batch_bytes)
        if args.profile:
            return profile_case(bench, cases, args.profile)
        facts = machine_facts(base_dir)
        progress(
            f"raftlog storage bench: {len(cases)} cases x {settings.runs} runs, "
            f"{settings.duration:g} s / {settings.max_bytes / MIB:,.0f} MiB per run, "
            f"logs in {root} ({facts['work_fs']})"
        )
        total, step = len(cases) * settings.runs, 0
        for run in range(settings.runs):
            try:
                for case in cases:
                    step += 1
                    head = f"[{step}/{total}] {case.label} run {run + 1}/{settings.runs}"
                    try:
                        sample = bench.run(case)
                    except (OSError, RuntimeError, AssertionError) as e:
                        case.errors.append(f"{type(e).__name__}: {e}")
                        progress(f"{head} ... FAILED: {e}")
                        continue
                    case.samples.append(sample)
                    recs = (
                        f"{fmt_count(sample.records_per_s)} rec/s, "
                        if case.kind != "baseline"
                        else ""
                    )
                    progress(
                        f"{head} ... {recs}{fmt_mb(sample.mb_per_s)} MB/s ({sample.seconds:.2f} s)"
                    )
            finally:
                bench.end_sweep()

        tbl = table(cases)
        note_text = notes(settings, batch_bytes, cases)
        print(tbl)
        print()
        print(note_text)

        stem = common.results_prefix(args.results_dir, "storage", common.run_stamp(utc=False))
        png = stem.with_suffix(".png")
        skipped = plot(cases, facts, png)
        if skipped:
            print(f"\nnote: {skipped}")
        md = report_markdown(command, facts, tbl, note_text, None if skipped else png.name)
        stem.with_suffix(".md").write_text(md)
        stem.with_suffix(".json").write_text(
            json.dumps(results_json(command, facts, settings, cases, batch_bytes), indent=2) + "\n"
        )
        written = [str(stem.with_suffix(".md")), str(stem.with_suffix(".json"))]
        if not skipped:
            written.append(str(png))
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(md)
            written.append(args.out)
        progress("wrote " + ", ".join(written))
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if created_base:
            with contextlib.suppress(OSError):
                os.rmdir(base_dir)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        progress("interrupted; temporary logs removed")
        sys.exit(130)
