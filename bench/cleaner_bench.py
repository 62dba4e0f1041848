"""Log cleaner benchmark: how fast the cleaner compacts a log, what its offset map costs per
key, and what a running cleaner does to a producer's latency on the same broker.

Run from the repository root::

    .venv/bin/python -m bench.cleaner_bench                   # 200 MB logs x 3 runs; 3 rounds
    .venv/bin/python -m bench.cleaner_bench --quick           # tiny sizes, seconds (tests)
    .venv/bin/python -m bench.cleaner_bench --skip-node       # the storage part only
    .venv/bin/python -m bench.cleaner_bench --size-mb 500 --runs 5 --phase-s 30 --rounds 2

MB is 2^20 bytes throughout (log sizes, rates, the cleaner's budget).

Part 1, the cleaner alone (storage level, no broker, no network). A compacted `PartitionLog`
of `--size-mb` of log bytes (16 MiB segments, or 1/8 of a smaller log; the last, active one
holds a single batch, so nearly all of it is cleanable) is built once per case from keyed
records (16-byte keys, 80-180-byte text values from a seeded pool: 146 bytes of key and value
on average), in batches of 100 records:

- `90% superseded`: raftlog batches, key ids 0..K-1 repeated and shuffled with K = records /
  10, so that about 90% of the records have a later record of their key (the share dropped
  is measured and reported);
- `10% superseded`: the same with K = 0.9 x records (a 200 MB log then has more distinct keys
  than the offset map's 1,000,000: the clean ends where the map filled, as a broker's would);
- `90% superseded, lz4`: Kafka v2 batches compressed with lz4 (records_v2.encode_batch_v2),
  as a Kafka client with compression.type=lz4 writes them; `--size-mb` of compressed bytes.

Each of `--runs` runs copies the case's log to a fresh directory, opens it and times
`plan_clean` + `cleaner.run(plan, keys_max, bytes_per_s=0)` (unthrottled) +
`install_clean`, in sweeps (run 1 of every case, then run 2, ...) so that a drift of the
machine spreads over all cases. Reported: MB/s of log read (`result.bytes_read` / seconds: the
bytes of the segments cleaned) and records/s (`result.records_read` / seconds), median and
min-max. Each run is checked: the records kept are exactly the distinct keys below the
clean's end, and (first run of each case) reading the cleaned range back finds every key
once. The log was just written or copied, so it is read from the page cache.

Then two checks of the cleaner's own claims:
- memory per key of `OffsetMap`: a map of `--map-keys` keys (1,000,000: the broker's
  log_cleaner_keys_max) in a child process, its resident-set growth and tracemalloc's count,
  per key; and at 699,051 keys, just past the dict's last resize, the worst case per key;
- the I/O budget: one clean at `--budget-mb` MB/s of a `--budget-log-mb` log; the I/O the
  throttle counts (at least: the dirty part mapped, every segment read again, the output
  written) / seconds must not exceed the budget.

Part 2, produce latency with the cleaner running vs not (skipped with `--skip-node`). One real
node (raftlog/launcher.py, `raftlog node`, data on the real disk, bench/common.py's
default_base_dir), a topic `compacted` (1 partition, RF 1, cleanup.policy=compact,
segment.bytes 1 MiB, min.cleanable.dirty.ratio 0.01: every closed segment makes the log due).
For each of `--rounds` rounds, three phases, each `--phase-s` seconds of a steady producer
(raftlog Producer, acks=all, linger_ms 1, `--rate` keyed records/s of the same sizes, paced
per record) on a node just started with:

- (a) `log_cleaner_enable = false`: the baseline;
- (b) the cleaner at its default budget (`log_cleaner_io_bytes_per_s` 16 MiB/s);
- (c) the cleaner unthrottled (`log_cleaner_io_bytes_per_s = 0`).

A cleaner phase, (b) or (c), measures a running cleaner, so it does not end before a clean
has: its producer goes on past `--phase-s` until the node has logged a clean that ended in
the phase, for at most CLEAN_WAIT_S_MAX in all (the cleaner runs at niceness 10, and on a
loaded machine its first clean can take longer than a short phase). Each phase reports how
long it ran (`ran_s`; its figures are per second or per send, so a longer phase compares), and
one that reached the cap says so (`clean_wait_capped`, a line in the report and on stderr).

A node's cleaner settings are node settings, read at start: so the node is stopped and started
again (same data directory, a clean shutdown) between phases with its node.toml rewritten; each
stop is timed and reported (a broker stopped in the middle of a clean waits for it to end).
Before (a) and again before the second cleaner phase, the node (cleaner off) takes a backlog of
`--fill-mb` of keyed records (key space records / 10: 90% superseded), so that each cleaner
phase starts with about the same dirty part; (b) and (c) alternate their order by round.
Every send's latency is the time from `send()` to its future completing (the callback, on the
producer's thread); reported per phase: p50, p99, p99.9, max, and the p99 ratio to (a) of the
same round (medians over rounds), plus the p99 of the sends made while a clean ran. The cleans
come from the node's log ("cleaned offsets [a, b) in S s: ... R -> W bytes" at INFO, so the
node logs at INFO): each is a window ending at its line's time and S long; the bytes cleaned in
a phase are the R of the cleans that ended in it. The partition's cleaner-offset-checkpoint is
read at each phase's start and end (it moves only if a clean was installed). The node's log
also says when the partition went offline (its first ERROR for the partition) and came back
("is back online after S s offline"), and what the scrubber reported as damage: each phase
reports its offline windows, and beside the latency of all sends the latency of those no window
delayed (`hit_by`: left out are the sends outstanding at some moment from a window's start
until the last send made before its end was acknowledged).

Results: a markdown report on stdout and in <out>/cleaner-<timestamp>.md, everything (every
run, every phase's 0.5 s buckets) in .json, and a plot in .png (latency over time per phase
with the clean windows shaded orange and the partition's offline windows red; cleaner MB/s
and per-phase latency as bars; skipped with a note
without matplotlib). Progress goes to stderr; the node's logs to <data dir>/logs (removed with
the data unless `--keep-data`).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import common
from bench.common import REPO, report_head
from raftlog import launcher
from raftlog.client import Admin, Producer, RecordFuture
from raftlog.compression import LZ4
from raftlog.errors import RaftlogError
from raftlog.launcher import LaunchError, PortPlan
from raftlog.record_types import Record
from raftlog.records import decode_records, encode_batch, iter_batches
from raftlog.records_v2 import encode_batch_v2
from raftlog.storage import LogConfig, PartitionLog, cleaner
from raftlog.storage.checkpoint import CheckpointError, OffsetCheckpoint

MB = 1 << 20
SEED = 20261127

# -- the records (both parts) -----------------------------------------------------------------

KEY_FORMAT = b"key-%012d"  # 16 bytes
VALUE_BYTES_MIN, VALUE_BYTES_MAX = 80, 180
VALUE_POOL = 4096  # distinct values, picked at random: no batch repeats itself much
# Values are words from a small vocabulary, so that lz4 has something to find (as in JSON or
# log lines), unlike random bytes.
VOCABULARY = 2000
BATCH_RECORDS = 100

# -- part 1 -----------------------------------------------------------------------------------

STORAGE_SEGMENT_BYTES = 16 * MB
KEYS_MAX = cleaner.OFFSET_MAP_KEYS_DEFAULT
# (name, share of records superseded, v2 codec or None for raftlog batches)
CASES = (
    ("90% superseded", 0.9, None),
    ("10% superseded", 0.1, None),
    ("90% superseded, lz4", 0.9, LZ4),
)
# Just past a dict resize (2^20 slots hold 699,050 keys): the most memory per key.
MAP_KEYS_WORST = 699_051

# -- part 2 -----------------------------------------------------------------------------------

TOPIC = "compacted"
HOST = launcher.LOOPBACK
NODE_SEGMENT_BYTES = 1 * MB
DEFAULT_BUDGET = 16 * MB  # broker/config.py's log_cleaner_io_bytes_per_s
PHASES = ("a", "b", "c")
PHASE_NAMES = {
    "a": "(a) cleaner disabled",
    "b": "(b) cleaner at 16 MiB/s (default)",
    "c": "(c) cleaner unthrottled",
}
PHASE_SETTINGS: dict[str, dict[str, Any]] = {
    "a": {"log_cleaner_enable": False},
    "b": {"log_cleaner_enable": True, "log_cleaner_io_bytes_per_s": DEFAULT_BUDGET},
    "c": {"log_cleaner_enable": True, "log_cleaner_io_bytes_per_s": 0},
}
FILL_SETTINGS = PHASE_SETTINGS["a"]
FILL_BATCH_BYTES = 1_000_000
BUCKET_S = 0.5  # latency over time, for the plot and the json
POLL_S = 0.05
SETTLE_TIMEOUT_S = 60.0
ADMIN_TIMEOUT_MS = 10_000
NODE_STOP_TIMEOUT_S = 300.0
SLOW_STOP_S = 5.0  # a stop slower than this is reported as it happens
# A send not acknowledged this long after its phase ended is a failure of the bench.
FLUSH_TIMEOUT_S = 60.0
# A cleaner phase runs on until a clean has ended in it, for at most this long in all: a 4 MB
# backlog takes well under a second to clean here, and tens of seconds at a load average of 10.
CLEAN_WAIT_S_MAX = 60.0
UNTIL_POLL_S = 0.25  # how often a phase past its length asks whether a clean has ended
# The node's INFO line for an installed clean (raftlog/broker/server.py `_clean`), after
# logging's "%(asctime)s %(levelname)s %(name)s: " (raftlog/cli/__init__.py).
CLEAN_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO \S+: (\S+): cleaned offsets \[(\d+), (\d+)\) "
    r"in ([\d.]+) s: (\d+) of (\d+) records kept, (\d+) tombstones removed, (\d+) -> (\d+) bytes"
)

# ... and its lines for a partition offline and back (raftlog/broker/logs.py), and the
# scrubber's damage reports (raftlog/storage/scrub.py).
BACK_ONLINE_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO \S+: (\S+) is back online after ([\d.]+) s "
    r"offline"
)
DAMAGE_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ERROR raftlog\.storage\.log: (\S+): damaged data "
    r"below the recovery point \d+: (\S+): byte (\d+): (.*?) \(found by the scrubber\)"
)
OFFLINE_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ERROR raftlog\.storage\.log: (\S+): "
)

_T0 = time.perf_counter()
_WALL0 = time.time()


def now() -> float:
    """Seconds since the bench started (every time in the results is on this clock)."""
    return time.perf_counter() - _T0


def progress(message: str) -> None:
    print(f"[cleaner-bench {now():6.1f} s] {message}", file=sys.stderr, flush=True)


class Records:
    """Keys and values of the workload, from a seeded generator."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        words = [
            "".join(self.rng.choice(letters) for _ in range(self.rng.randint(3, 9)))
            for _ in range(VOCABULARY)
        ]
        self.values: list[bytes] = []
        for _ in range(VALUE_POOL):
            size = self.rng.randint(VALUE_BYTES_MIN, VALUE_BYTES_MAX)
            text = ""
            while len(text) < size:
                text += self.rng.choice(words) + " "
            self.values.append(text[:size].encode())

    def value(self) -> bytes:
        return self.values[self.rng.randrange(VALUE_POOL)]

    def key_ids(self, n: int, superseded: float) -> list[int]:
        """`n` key ids in which exactly round(n x superseded) records have a later record of
        their key: ids 0..K-1 repeated (K = n - that), shuffled."""
        k = max(1, n - round(n * superseded))
        ids = [i % k for i in range(n)]
        self.rng.shuffle(ids)
        return ids


def key(i: int) -> bytes:
    return KEY_FORMAT % i


# -- part 1: the cleaner alone ----------------------------------------------------------------


@dataclass
class Built:
    case: str
    superseded: float
    codec: str
    path: str
    records: int
    log_bytes: int
    segments: int
    segment_bytes: int
    build_s: float
    # Record i of the log has key id key_ids[i] (offsets are 0, 1, ... in append order).
    key_ids: list[int] = field(repr=False)


def storage_config(segment_bytes: int) -> LogConfig:
    # Ratio 0: due whenever a closed segment is dirty.
    return LogConfig(
        segment_bytes=segment_bytes, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0
    )


def segment_bytes_for(size_bytes: int) -> int:
    """STORAGE_SEGMENT_BYTES, or smaller for a small log so that it still has 8 segments."""
    return max(64 * 1024, min(STORAGE_SEGMENT_BYTES, size_bytes // 8))


def encoded(keys: Sequence[int], recs: Records, codec: int | None, now_ms: int) -> bytes:
    if codec is None:
        return encode_batch([(key(k), recs.value()) for k in keys], timestamp=now_ms)
    return encode_batch_v2(
        [Record(key(k), recs.value(), (), now_ms) for k in keys], compression=codec
    )


def build_log(
    path: str, case: str, superseded: float, codec: int | None, size_bytes: int, recs: Records
) -> Built:
    """A compacted log of about `size_bytes` in `path`, ending just after a roll (its active
    segment holds one batch), closed. The key ids are drawn for the records a sample of
    batches says the size takes (2% more), so the share superseded comes out close to
    `superseded` (the report gives the measured one)."""
    segment_bytes = segment_bytes_for(size_bytes)
    config = storage_config(segment_bytes)
    segments_wanted = max(1, -(-size_bytes // segment_bytes))
    now_ms = int(time.time() * 1000)
    sample = [encoded(range(BATCH_RECORDS), recs, codec, now_ms) for _ in range(20)]
    per_record = sum(len(b) for b in sample) / (len(sample) * BATCH_RECORDS)
    estimate = int(segments_wanted * segment_bytes / per_record * 1.02) + 2 * BATCH_RECORDS
    ids = recs.key_ids(estimate, superseded)
    started = time.perf_counter()
    log = PartitionLog.open(path, config)
    now_ms = int(time.time() * 1000)
    n = 0
    try:
        while log.segment_count <= segments_wanted:
            if n + BATCH_RECORDS > len(ids):
                raise RuntimeError(f"{case}: estimated {estimate} records were not enough")
            chunk = ids[n : n + BATCH_RECORDS]
            log.append(encoded(chunk, recs, codec, now_ms), 0)
            n += len(chunk)
            if n % 200_000 < BATCH_RECORDS:
                progress(f"  {case}: {n:,} records, {log.size_bytes / MB:.0f} MB")
        log_bytes, segments = log.size_bytes, log.segment_count
        log.flush()
    finally:
        log.close()
    return Built(
        case=case,
        superseded=superseded,
        codec="Kafka v2 batches, lz4" if codec == LZ4 else "raftlog batches",
        path=path,
        records=n,
        log_bytes=log_bytes,
        segments=segments,
        segment_bytes=segment_bytes,
        build_s=time.perf_counter() - started,
        key_ids=ids[:n],
    )


@dataclass
class StorageRun:
    case: str
    run: int
    log_bytes: int  # the whole log
    cleaned_end: int  # the clean's end offset
    plan_s: float
    run_s: float  # cleaner.run: map + rewrite (result.seconds)
    install_s: float
    seconds: float  # plan + run + install
    bytes_read: int  # result.bytes_read: the segments below the clean's end
    dirty_bytes: int  # the part the offset map read
    bytes_written: int
    records_read: int
    records_kept: int
    mb_per_s: float  # bytes_read / seconds
    records_per_s: float  # records_read / seconds
    superseded_measured: float  # 1 - kept / read
    keys_expected: int  # distinct keys below the clean's end
    read_back_checked: bool


def clean_once(built: Built, work: str, run: int, read_back: bool) -> StorageRun:
    path = os.path.join(work, f"run-{run}", os.path.basename(built.path))
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    shutil.copytree(built.path, path)
    log = PartitionLog.open(path, storage_config(built.segment_bytes))
    try:
        t0 = time.perf_counter()
        plan = log.plan_clean(log.log_end_offset)
        t1 = time.perf_counter()
        if plan is None:
            raise RuntimeError(f"{built.case}: nothing to clean in {path}")
        dirty = plan.dirty_bytes
        try:
            result = cleaner.run(plan, KEYS_MAX, 0)
        except BaseException:
            plan.close()
            raise
        t2 = time.perf_counter()
        if not log.install_clean(result):
            raise RuntimeError(f"{built.case}: install_clean refused the clean of {path}")
        t3 = time.perf_counter()
        expected = len(set(built.key_ids[: result.end]))
        if result.records_kept != expected:
            raise RuntimeError(
                f"CLEANER BUG? {built.case} run {run}: kept {result.records_kept} records below "
                f"offset {result.end}, expected {expected} (the distinct keys there)"
            )
        if read_back:
            check_read_back(log, built, result.end)
    finally:
        log.close()
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    seconds = t3 - t0
    return StorageRun(
        case=built.case,
        run=run,
        log_bytes=built.log_bytes,
        cleaned_end=result.end,
        plan_s=t1 - t0,
        run_s=result.seconds,
        install_s=t3 - t2,
        seconds=seconds,
        bytes_read=result.bytes_read,
        dirty_bytes=dirty,
        bytes_written=result.bytes_written,
        records_read=result.records_read,
        records_kept=result.records_kept,
        mb_per_s=result.bytes_read / MB / seconds,
        records_per_s=result.records_read / seconds,
        superseded_measured=1 - result.records_kept / result.records_read,
        keys_expected=expected,
        read_back_checked=read_back,
    )


def check_read_back(log: PartitionLog, built: Built, end: int) -> None:
    """Every key below `end` is read back exactly once, at the offset of its last record
    below `end`, with a key the log was written with."""
    last: dict[int, int] = {}
    for offset, k in enumerate(built.key_ids[:end]):
        last[k] = offset
    want = {key(k): o for k, o in last.items()}
    seen: dict[bytes, int] = {}
    offset = log.log_start_offset
    while offset < end:
        data = log.read(offset, 4 * MB)
        if not data:
            break
        for pos, header in iter_batches(data):
            for r in decode_records(data, pos, header):
                if r.offset >= end:
                    break
                assert r.key is not None
                if r.key in seen:
                    raise RuntimeError(
                        f"CLEANER BUG? {built.case}: key {r.key!r} at offsets {seen[r.key]} and "
                        f"{r.offset} below the clean's end {end}"
                    )
                seen[r.key] = r.offset
            offset = header.next_offset
    if seen != want:
        wrong = [k for k in want if seen.get(k) != want[k]][:3]
        raise RuntimeError(
            f"CLEANER BUG? {built.case}: {len(seen)} keys read back below {end}, "
            f"{len(want)} expected; e.g. {[(k, seen.get(k), want[k]) for k in wrong]}"
        )


def budget_check(built: Built, work: str, budget_bytes_per_s: int) -> dict[str, Any]:
    """One clean of `built` at `budget_bytes_per_s`: the I/O it must have spent at least
    (dirty part mapped + the segments read again + written) per second."""
    path = os.path.join(work, "budget", os.path.basename(built.path))
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    shutil.copytree(built.path, path)
    log = PartitionLog.open(path, storage_config(built.segment_bytes))
    try:
        plan = log.plan_clean(log.log_end_offset)
        assert plan is not None, path
        dirty = plan.dirty_bytes
        try:
            result = cleaner.run(plan, KEYS_MAX, budget_bytes_per_s)
        except BaseException:
            plan.close()
            raise
        assert log.install_clean(result), path
    finally:
        log.close()
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    io_bytes = dirty + result.bytes_read + result.bytes_written
    return {
        "log_bytes": built.log_bytes,
        "budget_bytes_per_s": budget_bytes_per_s,
        "dirty_bytes": dirty,
        "bytes_read": result.bytes_read,
        "bytes_written": result.bytes_written,
        "io_bytes_min": io_bytes,
        "seconds": result.seconds,
        "io_bytes_per_s": io_bytes / result.seconds,
        "io_over_budget": io_bytes / result.seconds / budget_bytes_per_s,
    }


MEMORY_PROBE = """
import gc, os, sys, tracemalloc
from raftlog.storage.cleaner import OffsetMap

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

n = int(sys.argv[1])
keys = [b"key-%012d" % i for i in range(n)]
gc.collect()
before = rss()
m = OffsetMap(n)
for i, k in enumerate(keys):
    m.put(k, 100_000_000 + i)
after = rss()
del m
gc.collect()
tracemalloc.start()
m = OffsetMap(n)
for i, k in enumerate(keys):
    m.put(k, 100_000_000 + i)
current, peak = tracemalloc.get_traced_memory()
print(after - before, current, peak, sys.getsizeof(m._map))
"""


def memory_per_key(keys: int) -> dict[str, Any]:
    """An OffsetMap of `keys` keys (offsets around 10^8, as in a long log), in a child process
    so that nothing else this process allocated or freed blurs its resident-set growth."""
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(keys)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    rss, current, peak, table = (int(x) for x in out.stdout.split())
    return {
        "keys": keys,
        "rss_bytes_per_key": rss / keys,
        "traced_bytes_per_key": current / keys,
        "traced_peak_bytes_per_key": peak / keys,
        "dict_table_bytes_per_key": table / keys,
    }


def run_storage(s: Settings, work: str) -> dict[str, Any]:
    recs = Records(SEED)
    built: list[Built] = []
    for i, (case, superseded, codec) in enumerate(CASES):
        progress(f"building {case} ({s.size_mb} MB)")
        b = build_log(
            os.path.join(work, f"case-{i}", "clean-0"),
            case,
            superseded,
            codec,
            s.size_mb * MB,
            recs,
        )
        built.append(b)
        progress(
            f"built {case}: {b.records:,} records, {b.log_bytes / MB:.0f} MB in {b.segments} "
            f"segments, {b.build_s:.1f} s"
        )
    runs: list[StorageRun] = []
    for r in range(1, s.runs + 1):
        for b in built:
            one = clean_once(b, work, r, read_back=r == 1)
            runs.append(one)
            progress(
                f"run {r}/{s.runs} {b.case}: {one.bytes_read / MB:.0f} MB, "
                f"{one.records_read:,} records in {one.seconds:.2f} s: {one.mb_per_s:.1f} MB/s, "
                f"{one.records_per_s:,.0f} records/s, {one.superseded_measured:.1%} dropped"
            )
    budget_src = built[0]
    if s.budget_log_mb < s.size_mb:
        progress(f"building a {s.budget_log_mb} MB log for the budget check")
        budget_src = build_log(
            os.path.join(work, "budget-src", "clean-0"),
            CASES[0][0],
            CASES[0][1],
            CASES[0][2],
            s.budget_log_mb * MB,
            recs,
        )
    progress(f"budget check: a clean at {s.budget_mb:g} MB/s of {budget_src.log_bytes / MB:.0f} MB")
    budget = budget_check(budget_src, work, int(s.budget_mb * MB))
    progress(
        f"budget check: {budget['io_bytes_min'] / MB:.0f} MB of I/O in {budget['seconds']:.1f} s "
        f"= {budget['io_bytes_per_s'] / MB:.2f} MB/s ({budget['io_over_budget']:.3f} of the budget)"
    )
    memory = []
    for n in sorted({s.map_keys, min(MAP_KEYS_WORST, s.map_keys)}, reverse=True):
        progress(f"offset map memory: {n:,} keys")
        memory.append(memory_per_key(n))
        m = memory[-1]
        progress(
            f"  {m['rss_bytes_per_key']:.1f} B/key resident, {m['traced_bytes_per_key']:.1f} "
            f"traced (peak {m['traced_peak_bytes_per_key']:.1f})"
        )
    for b in built:
        shutil.rmtree(os.path.dirname(b.path), ignore_errors=True)
    return {
        "cases": [{k: v for k, v in asdict(b).items() if k != "key_ids"} for b in built],
        "runs": [asdict(r) for r in runs],
        "budget": budget,
        "memory": memory,
    }


# -- part 2: the node -------------------------------------------------------------------------


class Node:
    """One node (controller+broker) on 127.0.0.1, `raftlog node --config`, started by the
    launcher in its own session, logging at INFO to DIR/logs/node-1-<k>.err; restarted with
    other settings by rewriting its node.toml."""

    def __init__(self, work: str):
        ports = PortPlan.picked(1, HOST)
        [self.base] = launcher.cluster_settings(
            work, ports, settings={"auto_create_topics": False}, controllers=1
        )
        self.config_path = launcher.node_dir(work, 1) / "node.toml"
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        self.write_config(FILL_SETTINGS)
        self.local = launcher.LocalCluster(
            [self.config_path],
            [f"{HOST}:{ports.client[0]}"],
            log_dir=os.path.join(work, "logs"),
            log_level="INFO",
            cwd=REPO,
            new_session=True,
        )
        self.settings: dict[str, Any] = {}
        self.label = "start"  # what the node is doing: for `stops`
        self.stops: list[dict[str, Any]] = []

    @property
    def bootstrap(self) -> str:
        return self.local.bootstrap

    @property
    def partition_dir(self) -> Path:
        return Path(self.base["data_dir"]) / "logs" / f"{TOPIC}-0"

    def write_config(self, settings: dict[str, Any]) -> None:
        launcher.write_node_config(self.config_path, {**self.base, **settings})

    def stop(self) -> None:
        """A clean stop (SIGTERM), timed and recorded in `stops` under `label`: a broker
        stopping in the middle of a clean has been seen to take longer than the launcher's
        30 s, so it gets NODE_STOP_TIMEOUT_S here and the time is reported."""
        if not self.local.nodes[1].running():
            return
        started = time.perf_counter()
        problems = self.local.stop(1, NODE_STOP_TIMEOUT_S)
        took = time.perf_counter() - started
        self.stops.append({"after": self.label, "seconds": took})
        if took > SLOW_STOP_S:
            progress(f"stopping the node after {self.label} took {took:.1f} s")
        if problems:
            raise RuntimeError(f"stopping the node after {self.label}: {problems}")

    def restart(self, settings: dict[str, Any]) -> None:
        """Stop the node (if running: a clean stop) and start it with `settings`."""
        self.stop()
        self.write_config(settings)
        self.settings = dict(settings)
        try:
            self.local.start(1)
        except LaunchError as e:
            raise RuntimeError(
                f"{e}; the log ends with:\n{self.local.nodes[1].log_tail()}"
            ) from None

    def err_paths(self) -> list[Path]:
        return list(self.local.nodes[1].err_paths)

    def cleaner_checkpoint(self) -> int | None:
        path = self.partition_dir / cleaner.CLEANER_CHECKPOINT_FILE
        try:
            return OffsetCheckpoint(str(path)).read()
        except (CheckpointError, OSError):
            return None

    def close(self) -> list[str]:
        return self.local.close(20.0)


def wait_until(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise RuntimeError(f"not reached after {timeout_s:.0f} s: {what}")
        time.sleep(POLL_S)


def wait_leader(bootstrap: str) -> None:
    with Admin(bootstrap, request_timeout_ms=ADMIN_TIMEOUT_MS) as admin:

        def led() -> bool:
            try:
                d = admin.describe_cluster()
            except RaftlogError:
                return False
            p = next((p for p in d["partitions"] if p["topic"] == TOPIC), None)
            return p is not None and p["leader"] >= 0

        wait_until(led, SETTLE_TIMEOUT_S, f"{TOPIC}-0 has a leader")


@dataclass
class Clean:
    """One installed clean, from the node's log, on the bench's clock."""

    start_s: float
    end_s: float
    first: int
    end_offset: int
    seconds: float
    records_kept: int
    records_read: int
    bytes_read: int
    bytes_written: int


def bench_time(stamp: str) -> float:
    """A node log line's time (logging's asctime: local time, ms) on the bench's clock."""
    day, ms = stamp.split(",")
    return time.mktime(time.strptime(day, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000 - _WALL0


def node_lines(paths: Sequence[Path]) -> list[str]:
    out: list[str] = []
    for path in paths:
        try:
            out += path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            continue
    return out


def parse_offline(lines: Sequence[str]) -> tuple[list[tuple[float, float]], list[dict[str, Any]]]:
    """(The partition's offline windows, the scrubber's damage reports) in the node's log. A
    window starts at the log's first ERROR for the partition (the damage found; the broker
    notices the log offline a moment later and counts "S s offline" from then) and ends when
    the partition is back online."""
    windows, damage = [], []
    began: float | None = None
    for line in lines:
        m = BACK_ONLINE_LINE.match(line)
        if m is not None and m.group(2) == f"{TOPIC}-0":
            end = bench_time(m.group(1))
            windows.append((min(began or end, end - float(m.group(3))), end))
            began = None
            continue
        m = OFFLINE_LINE.match(line)
        if m is not None and m.group(2) == f"{TOPIC}-0" and began is None:
            began = bench_time(m.group(1))
        m = DAMAGE_LINE.match(line)
        if m is not None and m.group(2) == f"{TOPIC}-0":
            damage.append(
                {
                    "at_s": bench_time(m.group(1)),
                    "file": os.path.basename(m.group(3)),
                    "byte": int(m.group(4)),
                    "why": m.group(5),
                }
            )
    return sorted(windows), damage


def hit_by(
    sent_at: Sequence[float], latency_s: Sequence[float], windows: Sequence[tuple[float, float]]
) -> list[bool]:
    """For each send, whether an offline window (a, b) delayed it: it was outstanding at some
    moment from a until the last send made before b was acknowledged (the sends queued behind
    the producer's retries of the failed batch)."""
    hit = [False] * len(sent_at)
    for a, b in windows:
        drain = max(
            (
                t + lat
                for t, lat in zip(sent_at, latency_s, strict=True)
                if t <= b and not math.isnan(lat)
            ),
            default=b,
        )
        for i, (t, lat) in enumerate(zip(sent_at, latency_s, strict=True)):
            if not math.isnan(lat) and t <= drain and t + lat >= a:
                hit[i] = True
    return hit


def parse_cleans(paths: Sequence[Path]) -> list[Clean]:
    out = []
    for line in node_lines(paths):
        m = CLEAN_LINE.match(line)
        if m is None or m.group(2) != f"{TOPIC}-0":
            continue
        end = bench_time(m.group(1))
        seconds = float(m.group(5))
        out.append(
            Clean(
                start_s=end - seconds,
                end_s=end,
                first=int(m.group(3)),
                end_offset=int(m.group(4)),
                seconds=seconds,
                records_kept=int(m.group(6)),
                records_read=int(m.group(7)),
                bytes_read=int(m.group(9)),
                bytes_written=int(m.group(10)),
            )
        )
    return sorted(out, key=lambda c: c.end_s)


class Load:
    """A producer of `rate` keyed records/s for `seconds`, paced per record from the calling
    thread; each send's (time sent, latency) recorded by its future's callback."""

    def __init__(self, bootstrap: str, rate: float, key_space: int, recs: Records):
        self.bootstrap = bootstrap
        self.rate = rate
        self.key_space = key_space
        self.recs = recs
        self.sent_at: list[float] = []
        self.latency_s: list[float] = []  # NaN until acknowledged
        self.failed = 0
        self._lock = threading.Lock()

    def run(
        self,
        seconds: float,
        until: Callable[[float], bool] | None = None,
        seconds_max: float = 0.0,
    ) -> tuple[float, float]:
        """Send for `seconds`, then, given `until`, on while `until(start)` is false (asked
        every UNTIL_POLL_S) for at most `seconds_max` in all; wait for every acknowledgement.
        (start, end) of the sending."""
        with Producer(
            bootstrap_servers=self.bootstrap,
            client_id="cleaner-bench-load",
            acks="all",
            linger_ms=1,
        ) as p:
            rng = self.recs.rng
            values = self.recs.values
            start = now()
            end = start + seconds
            cap = start + max(seconds, seconds_max)
            i = 0
            last: RecordFuture | None = None
            while True:
                due = start + i / self.rate
                t = now()
                if due >= end:
                    if until is None or due >= cap or until(start):
                        break
                    end = min(cap, max(due, t) + UNTIL_POLL_S)
                if due > t:
                    time.sleep(due - t)
                k = key(rng.randrange(self.key_space))
                v = values[rng.randrange(VALUE_POOL)]
                sent = now()
                with self._lock:
                    self.sent_at.append(sent)
                    self.latency_s.append(math.nan)
                last = p.send(TOPIC, v, key=k, partition=0)
                last.add_done_callback(self._callback(i, sent))
                i += 1
            stopped = now()
            p.flush(FLUSH_TIMEOUT_S)
            if last is not None:
                last.exception(FLUSH_TIMEOUT_S)
        return start, stopped

    def _callback(self, i: int, sent: float) -> Callable[[RecordFuture], None]:
        def done(future: RecordFuture) -> None:
            # Runs on the producer's thread: cheap, and never raises.
            at = now()
            if future.exception(0) is None:
                self.latency_s[i] = at - sent
            else:
                self.failed += 1

        return done


def fill(bootstrap: str, size_bytes: int, key_space: int, recs: Records) -> dict[str, Any]:
    """About `size_bytes` of keyed records (key and value bytes) into the topic, acks=all, as
    fast as it goes."""
    mean = len(key(0)) + (VALUE_BYTES_MIN + VALUE_BYTES_MAX) / 2
    records = int(size_bytes / mean)
    rng, values = recs.rng, recs.values
    started = time.perf_counter()
    with Producer(
        bootstrap_servers=bootstrap,
        client_id="cleaner-bench-fill",
        acks="all",
        linger_ms=5,
        batch_size=FILL_BATCH_BYTES,
    ) as p:
        last = None
        for i in range(records):
            last = p.send(
                TOPIC,
                values[rng.randrange(VALUE_POOL)],
                key=key(rng.randrange(key_space)),
                partition=0,
            )
            if i % 200_000 == 199_999:
                progress(f"  filled {i + 1:,} of {records:,} records")
        p.flush(600)
        assert last is not None
        last.result(60)
    took = time.perf_counter() - started
    return {"records": records, "seconds": took, "mb_per_s": records * mean / MB / took}


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank q-quantile (0 < q <= 1) of a sorted, non-empty sequence."""
    i = max(0, math.ceil(q * len(sorted_values)) - 1)
    return sorted_values[i]


def latency_stats(values: Sequence[float]) -> dict[str, float | int | None]:
    v = sorted(values)
    if not v:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "p999_ms": None, "max_ms": None}
    return {
        "n": len(v),
        "p50_ms": percentile(v, 0.5) * 1000,
        "p99_ms": percentile(v, 0.99) * 1000,
        "p999_ms": percentile(v, 0.999) * 1000,
        "max_ms": v[-1] * 1000,
    }


def merge(windows: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(windows):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


@dataclass
class Phase:
    round: int
    phase: str
    settings: dict[str, Any]
    start_s: float
    end_s: float
    ran_s: float  # end_s - start_s: --phase-s, or longer for a cleaner phase (CLEAN_WAIT_S_MAX)
    clean_wait_capped: bool  # a cleaner phase reached CLEAN_WAIT_S_MAX with no clean ended
    sends: int
    acknowledged: int
    failed: int
    records_per_s: float  # sends / the phase's sending time
    latency: dict[str, Any]  # latency_stats of every acknowledged send
    latency_in_cleans: dict[str, Any]  # ... of the sends made while a clean ran
    cleans: list[dict[str, Any]]  # the cleans that overlap the phase (parse_cleans)
    cleaned_bytes: int  # bytes_read of the cleans that ended in the phase
    cleaned_records: int
    clean_s: float  # time the phase spent with a clean running (merged windows)
    clean_io_bytes_per_s: float | None  # (read + written) / run time, of those cleans
    checkpoint_before: int | None
    checkpoint_after: int | None
    # The partition offline (the node's log): windows on the bench's clock, the scrubber's
    # damage reports, and the latency of the sends no offline window delayed (hit_by).
    offline: list[tuple[float, float]]
    offline_s: float
    damage: list[dict[str, Any]]
    latency_outside_offline: dict[str, Any]
    p99_over_a: float | None = None
    p99_outside_offline_over_a: float | None = None
    buckets: list[dict[str, Any]] = field(default_factory=list)
    # (s since the phase started, latency ms), every send: for the plot only, not the json
    points: list[tuple[float, float]] = field(default_factory=list, repr=False)


def one_phase(
    node: Node, round_: int, phase: str, s: Settings, key_space: int, recs: Records
) -> Phase:
    node.restart(PHASE_SETTINGS[phase])
    wait_leader(node.bootstrap)
    before = node.cleaner_checkpoint()
    load = Load(node.bootstrap, s.rate, key_space, recs)
    cleaning = PHASE_SETTINGS[phase]["log_cleaner_enable"]

    def clean_ended(since: float) -> bool:
        return any(c.end_s >= since for c in parse_cleans(node.err_paths()))

    if cleaning:
        start, end = load.run(s.phase_s, clean_ended, CLEAN_WAIT_S_MAX)
        capped = not clean_ended(start)
    else:
        start, end = load.run(s.phase_s)
        capped = False
    # The last cleans' lines are written when they are installed: a moment after they end.
    time.sleep(0.2)
    after = node.cleaner_checkpoint()
    cleans = [
        c for c in parse_cleans(node.err_paths()) if c.end_s > start and c.start_s < end + 0.2
    ]
    ended_in = [c for c in cleans if start <= c.end_s <= end + 0.2]
    windows = merge([(max(c.start_s, start), min(c.end_s, end)) for c in cleans])
    lines = node_lines(node.err_paths())
    offline_all, damage_all = parse_offline(lines)
    offline = [(a, b) for a, b in offline_all if b > start and a < end + 0.2]
    damage = [d for d in damage_all if start <= d["at_s"] <= end + 0.2]
    hit = hit_by(load.sent_at, load.latency_s, offline)
    outside = [
        lat for lat, h in zip(load.latency_s, hit, strict=True) if not h and not math.isnan(lat)
    ]
    latencies = [x for x in load.latency_s if not math.isnan(x)]
    in_clean = [
        lat
        for t, lat in zip(load.sent_at, load.latency_s, strict=True)
        if not math.isnan(lat) and any(a <= t <= b for a, b in windows)
    ]
    run_s = sum(c.seconds for c in ended_in)
    io = sum(c.bytes_read + c.bytes_written for c in ended_in)
    buckets = []
    n_buckets = math.ceil((end - start) / BUCKET_S)
    per: list[list[float]] = [[] for _ in range(n_buckets)]
    for t, lat in zip(load.sent_at, load.latency_s, strict=True):
        if not math.isnan(lat):
            per[min(int((t - start) / BUCKET_S), n_buckets - 1)].append(lat)
    for i, lats in enumerate(per):
        st = latency_stats(lats)
        buckets.append({"t_s": round(i * BUCKET_S, 3), **st})
    return Phase(
        round=round_,
        phase=phase,
        settings=PHASE_SETTINGS[phase],
        start_s=start,
        end_s=end,
        ran_s=end - start,
        clean_wait_capped=capped,
        sends=len(load.sent_at),
        acknowledged=len(latencies),
        failed=load.failed,
        records_per_s=len(load.sent_at) / (end - start),
        latency=latency_stats(latencies),
        latency_in_cleans=latency_stats(in_clean),
        cleans=[asdict(c) for c in cleans],
        cleaned_bytes=sum(c.bytes_read for c in ended_in),
        cleaned_records=sum(c.records_read for c in ended_in),
        clean_s=sum(b - a for a, b in windows),
        clean_io_bytes_per_s=io / run_s if run_s > 0 else None,
        checkpoint_before=before,
        checkpoint_after=after,
        offline=offline,
        offline_s=sum(min(b, end) - max(a, start) for a, b in offline),
        damage=damage,
        latency_outside_offline=latency_stats(outside),
        buckets=buckets,
        points=[
            (t - start, lat * 1000)
            for t, lat in zip(load.sent_at, load.latency_s, strict=True)
            if not math.isnan(lat)
        ],
    )


def run_node(s: Settings, work: str) -> dict[str, Any]:
    recs = Records(SEED + 1)
    mean = len(key(0)) + (VALUE_BYTES_MIN + VALUE_BYTES_MAX) / 2
    key_space = max(1, int(s.fill_mb * MB / mean / 10))
    node = Node(work)
    phases: list[Phase] = []
    fills: list[dict[str, Any]] = []
    problems: list[str] = []
    try:
        node.restart(FILL_SETTINGS)
        with Admin(node.bootstrap, request_timeout_ms=ADMIN_TIMEOUT_MS) as admin:
            admin.create_topic(
                TOPIC,
                1,
                1,
                {
                    "cleanup.policy": "compact",
                    "segment.bytes": str(NODE_SEGMENT_BYTES),
                    "min.cleanable.dirty.ratio": "0.01",
                },
            )
        wait_leader(node.bootstrap)

        def backlog(round_: int) -> None:
            if node.settings != FILL_SETTINGS:
                node.restart(FILL_SETTINGS)
                wait_leader(node.bootstrap)
            node.label = f"round {round_} fill"
            progress(f"round {round_}: filling {s.fill_mb} MB (cleaner off), {key_space:,} keys")
            f = fill(node.bootstrap, s.fill_mb * MB, key_space, recs)
            fills.append({"round": round_, **f})
            progress(
                f"round {round_}: filled {f['records']:,} records in {f['seconds']:.1f} s "
                f"({f['mb_per_s']:.1f} MB/s)"
            )

        for r in range(1, s.rounds + 1):
            order = ("a", "b", "c") if r % 2 else ("a", "c", "b")
            for i, phase in enumerate(order):
                if i != 1:  # before (a), and before the second cleaner phase
                    backlog(r)
                progress(f"round {r}: phase {PHASE_NAMES[phase]}, {s.phase_s:g} s")
                ph = one_phase(node, r, phase, s, key_space, recs)
                node.label = f"round {r} {PHASE_NAMES[phase]}"
                phases.append(ph)
                if ph.clean_wait_capped:
                    progress(
                        f"round {r}: {PHASE_NAMES[phase]}: no clean ended within "
                        f"{CLEAN_WAIT_S_MAX:g} s of load"
                    )
                lat = ph.latency
                progress(
                    f"round {r}: {PHASE_NAMES[phase]}: {ph.sends:,} sends in {ph.ran_s:.1f} s "
                    f"({ph.records_per_s:,.0f}/s), p50 {lat['p50_ms']:.1f} ms, p99 "
                    f"{lat['p99_ms']:.1f} ms, max {lat['max_ms']:.0f} ms; {len(ph.cleans)} "
                    f"cleans, {ph.cleaned_bytes / MB:.1f} MB cleaned, checkpoint "
                    f"{ph.checkpoint_before} -> {ph.checkpoint_after}"
                )
                if ph.offline:
                    progress(
                        f"round {r}: {PHASE_NAMES[phase]}: the partition went offline "
                        f"{len(ph.offline)} time(s), {ph.offline_s:.1f} s in all; the scrubber "
                        f"reported damage {len(ph.damage)} time(s); p99 outside those windows "
                        f"{ph.latency_outside_offline['p99_ms']:.1f} ms"
                    )
    finally:
        try:
            node.stop()
        finally:
            problems = node.close()
        for p in problems:
            progress(p)
    base = {p.round: p.latency["p99_ms"] for p in phases if p.phase == "a"}
    for p in phases:
        a = base.get(p.round)
        if a and p.latency["p99_ms"] is not None:
            p.p99_over_a = p.latency["p99_ms"] / a
        if a and p.latency_outside_offline["p99_ms"] is not None:
            p.p99_outside_offline_over_a = p.latency_outside_offline["p99_ms"] / a
    return {
        "key_space": key_space,
        "stops": node.stops,
        "fills": fills,
        "phases": phases,
        "shutdown_problems": problems,
    }


# -- the report -------------------------------------------------------------------------------


def stats(values: Sequence[float | None]) -> dict[str, float | int | None]:
    v = sorted(x for x in values if x is not None and not math.isnan(x))
    if not v:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "n": len(v)}


def cell(st: dict[str, Any], fmt: str) -> str:
    if st["median"] is None:
        return "-"
    if st["n"] == 1:
        return f"{st['median']:{fmt}}"
    return f"{st['median']:{fmt}} ({st['min']:{fmt}}-{st['max']:{fmt}})"


def storage_summary(storage: dict[str, Any]) -> dict[str, Any]:
    rows = {}
    for case, _, _ in CASES:
        rs = [r for r in storage["runs"] if r["case"] == case]
        rows[case] = {
            k: stats([r[k] for r in rs])
            for k in ("mb_per_s", "records_per_s", "seconds", "superseded_measured", "bytes_read")
        }
    base = rows[CASES[0][0]]["mb_per_s"]["median"]
    for case in rows:
        m = rows[case]["mb_per_s"]["median"]
        rows[case]["mb_per_s_over_90"] = m / base if base and m else None
    return rows


def node_summary(phases: Sequence[Phase]) -> dict[str, Any]:
    rows = {}
    for phase in PHASES:
        ps = [p for p in phases if p.phase == phase]
        rows[phase] = {
            "p50_ms": stats([p.latency["p50_ms"] for p in ps]),
            "p99_ms": stats([p.latency["p99_ms"] for p in ps]),
            "p999_ms": stats([p.latency["p999_ms"] for p in ps]),
            "max_ms": stats([p.latency["max_ms"] for p in ps]),
            "p99_over_a": stats([p.p99_over_a for p in ps]),
            "p99_in_cleans_ms": stats([p.latency_in_cleans["p99_ms"] for p in ps]),
            "records_per_s": stats([p.records_per_s for p in ps]),
            "cleaned_mb": stats([p.cleaned_bytes / MB for p in ps]),
            "clean_share": stats([p.clean_s / (p.end_s - p.start_s) for p in ps]),
            "clean_io_mb_per_s": stats(
                [p.clean_io_bytes_per_s / MB if p.clean_io_bytes_per_s else None for p in ps]
            ),
            "cleans": stats([len(p.cleans) for p in ps]),
            "offline_times": stats([len(p.offline) for p in ps]),
            "offline_s": stats([p.offline_s for p in ps]),
            "p99_outside_offline_ms": stats([p.latency_outside_offline["p99_ms"] for p in ps]),
            "p99_outside_offline_over_a": stats([p.p99_outside_offline_over_a for p in ps]),
        }
    return rows


def markdown(
    command: str,
    note: str,
    facts: dict[str, Any],
    s: Settings,
    storage: dict[str, Any] | None,
    node: dict[str, Any] | None,
    plot_note: str,
) -> str:
    lines = [*report_head("raftlog log cleaner bench", command, note, facts)]
    lines.append(
        f"One 2-core machine shared with other work (load average "
        f"{facts['load_average_at_start']} at the start, {facts.get('load_average_at_end')} at "
        "the end). MB = 2^20 bytes. Median (min-max)."
    )
    lines.append("")
    if storage is not None:
        summ = storage_summary(storage)
        lines += [
            f"### The cleaner alone: `plan_clean` + `cleaner.run` (unthrottled) + "
            f"`install_clean`, {s.runs} run(s)",
            "",
            "| log | records | log MB | cleaned MB/s (of log read) | records/s | s | "
            "records dropped | vs 90% raftlog |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in storage["cases"]:
            row = summ[c["case"]]
            ratio = row["mb_per_s_over_90"]
            lines.append(
                f"| {c['case'].split(',')[0]}, {c['codec']} | {c['records']:,} | "
                f"{c['log_bytes'] / MB:,.0f} | "
                f"{cell(row['mb_per_s'], '.1f')} | {cell(row['records_per_s'], ',.0f')} | "
                f"{cell(row['seconds'], '.2f')} | "
                f"{row['superseded_measured']['median']:.1%} | "
                f"{'-' if ratio is None else f'{ratio:.2f}x'} |"
            )
        b = storage["budget"]
        lines += [
            "",
            f"Budget check: a clean of a {b['log_bytes'] / MB:.0f} MB log (90% superseded) at "
            f"{b['budget_bytes_per_s'] / MB:g} MB/s spent at least {b['io_bytes_min'] / MB:.1f} "
            f"MB of I/O (mapped {b['dirty_bytes'] / MB:.1f}, read {b['bytes_read'] / MB:.1f}, "
            f"wrote {b['bytes_written'] / MB:.1f}) in {b['seconds']:.2f} s: "
            f"{b['io_bytes_per_s'] / MB:.2f} MB/s, {b['io_over_budget']:.3f} of the budget.",
            "",
        ]
        for m in storage["memory"]:
            lines.append(
                f"- OffsetMap of {m['keys']:,} keys: {m['rss_bytes_per_key']:.0f} bytes per key "
                f"resident ({m['traced_bytes_per_key']:.0f} traced by tracemalloc, peak "
                f"{m['traced_peak_bytes_per_key']:.0f}; the dict's table "
                f"{m['dict_table_bytes_per_key']:.0f} of them)."
            )
        lines.append("")
    if node is not None:
        summ = node_summary(node["phases"])
        fills = node["fills"]
        fill_rate = stats([f["mb_per_s"] for f in fills])
        lines += [
            f"### Produce latency, cleaner off / default budget / unthrottled, {s.rounds} "
            f"round(s) of {s.phase_s:g} s phases ((b), (c): until a clean ended)",
            "",
            f"One node, topic `{TOPIC}` (RF 1, compact, segment.bytes 1 MiB, "
            f"min.cleanable.dirty.ratio 0.01), a backlog of {s.fill_mb} MB "
            f"({node['key_space']:,} keys: 90% superseded; filled at "
            f"{cell(fill_rate, '.1f')} MB/s) before (a) and before the second cleaner phase; "
            f"the producer: {s.rate:g} keyed records/s, acks=all, linger_ms 1; the node "
            "restarted with the phase's settings before each phase. Latency: send() to the "
            "future completing.",
            "",
            "| phase | records/s | p50 ms | p99 ms | p99.9 ms | max ms | p99 / (a) | "
            "p99 while cleaning, ms | partition offline: times, s | p99 outside offline, ms "
            "(/ (a)) | cleans | MB cleaned | time cleaning | cleaner I/O MB/s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for phase in PHASES:
            row = summ[phase]
            share = row["clean_share"]
            share_text = "-" if share["median"] is None else f"{share['median']:.0%}"
            ratio = row["p99_over_a"]
            ratio_out = row["p99_outside_offline_over_a"]
            lines.append(
                f"| {PHASE_NAMES[phase]} | {cell(row['records_per_s'], ',.0f')} | "
                f"{cell(row['p50_ms'], '.1f')} | {cell(row['p99_ms'], '.1f')} | "
                f"{cell(row['p999_ms'], '.1f')} | {cell(row['max_ms'], '.0f')} | "
                f"{'-' if ratio['median'] is None else cell(ratio, '.2f') + 'x'} | "
                f"{cell(row['p99_in_cleans_ms'], '.1f')} | "
                f"{cell(row['offline_times'], '.0f')}, {cell(row['offline_s'], '.1f')} | "
                f"{cell(row['p99_outside_offline_ms'], '.1f')} "
                f"({'-' if ratio_out['median'] is None else cell(ratio_out, '.2f') + 'x'}) | "
                f"{cell(row['cleans'], '.0f')} | "
                f"{cell(row['cleaned_mb'], '.1f')} | {share_text} | "
                f"{cell(row['clean_io_mb_per_s'], '.1f')} |"
            )
        lines += [
            "",
            'Cleans: the node\'s "cleaned offsets" lines whose clean overlapped the phase; MB '
            "cleaned: the segments read by the cleans that ended in it (result.bytes_read); "
            "cleaner I/O: (read + written) / run time of those cleans, a lower bound of what "
            "the budget counts (the offset map's read of the dirty part comes on top). The "
            "cleaner-offset-checkpoint per phase (before -> after): "
            + "; ".join(
                f"r{p.round} {p.phase} {p.checkpoint_before} -> {p.checkpoint_after}"
                for p in node["phases"]
            )
            + ".",
            "",
            f"Phases (b) and (c) run past {s.phase_s:g} s until a clean has ended in them (at "
            f"most {CLEAN_WAIT_S_MAX:g} s); each ran: "
            + "; ".join(f"r{p.round} {p.phase} {p.ran_s:.1f} s" for p in node["phases"])
            + ".",
        ]
        capped = [p for p in node["phases"] if p.clean_wait_capped]
        if capped:
            lines += [
                "",
                f"**No clean ended within {CLEAN_WAIT_S_MAX:g} s** in "
                + ", ".join(f"round {p.round} {PHASE_NAMES[p.phase]}" for p in capped)
                + ": those phases measured no clean.",
            ]
        slow = [x for x in node["stops"] if x["seconds"] > SLOW_STOP_S]
        lines += [
            "",
            f"Stopping the node (SIGTERM, a clean stop) after each fill and phase took "
            f"{cell(stats([x['seconds'] for x in node['stops']]), '.1f')} s"
            + (
                "; over 5 s: " + ", ".join(f"after {x['after']} {x['seconds']:.1f} s" for x in slow)
                if slow
                else ""
            )
            + ".",
        ]
        damage = [d for p in node["phases"] for d in p.damage]
        offline = [w for p in node["phases"] for w in p.offline]
        if damage or offline:
            lines += [
                "",
                f"**The partition went offline {len(offline)} time(s)** "
                f"({sum(p.offline_s for p in node['phases']):.1f} s in all) and the scrubber "
                f"reported damage {len(damage)} time(s) during the phases, e.g. "
                + "; ".join(f"{d['file']} byte {d['byte']}: {d['why']}" for d in damage[:3])
                + ". p99 outside offline: the sends an offline window delayed left out (those "
                "outstanding at some moment from its start until the last send made before its "
                "end was acknowledged).",
            ]
        failed = sum(p.failed for p in node["phases"])
        if failed:
            lines += ["", f"**{failed} sends failed** (not in the latencies)."]
        lines.append("")
    if plot_note:
        lines += [plot_note]
    return "\n".join(lines) + "\n"


def plot(
    storage: dict[str, Any] | None, node: dict[str, Any] | None, path: Path, title: str
) -> str | None:
    """Latency over time per phase (clean windows shaded), cleaner MB/s and p99 bars."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"skipped the plot: matplotlib is not importable ({e})"
    phases: list[Phase] = node["phases"] if node else []
    rounds = sorted({p.round for p in phases})
    rows = len(rounds) + 1
    fig = plt.figure(figsize=(13, 3.2 * rows))
    grid = fig.add_gridspec(rows, len(PHASES))
    colors = {"a": "#2ca02c", "b": "#1f77b4", "c": "#d62728"}
    for ri, r in enumerate(rounds):
        for pi, phase in enumerate(PHASES):
            ax = fig.add_subplot(grid[ri, pi])
            ps = [p for p in phases if p.round == r and p.phase == phase]
            if not ps:
                ax.set_visible(False)
                continue
            p = ps[0]
            if p.points:
                ax.scatter(
                    [t for t, _ in p.points],
                    [v for _, v in p.points],
                    s=1,
                    color=colors[phase],
                    alpha=0.25,
                    rasterized=True,
                    label="each send",
                )
            ts = [b["t_s"] + BUCKET_S / 2 for b in p.buckets if b["p99_ms"] is not None]
            ax.plot(
                ts,
                [b["p99_ms"] for b in p.buckets if b["p99_ms"] is not None],
                color="black",
                lw=1,
                label=f"p99 per {BUCKET_S:g} s",
            )
            ax.plot(
                ts,
                [b["p50_ms"] for b in p.buckets if b["p50_ms"] is not None],
                color="grey",
                lw=1,
                label=f"p50 per {BUCKET_S:g} s",
            )
            shaded = False
            for c in p.cleans:
                a, b = max(c["start_s"], p.start_s), min(c["end_s"], p.end_s)
                ax.axvspan(
                    a - p.start_s,
                    b - p.start_s,
                    color="orange",
                    alpha=0.3,
                    label=None if shaded else "a clean running",
                )
                shaded = True
            marked = False
            for a, b in p.offline:
                ax.axvspan(
                    max(a, p.start_s) - p.start_s,
                    min(b, p.end_s) - p.start_s,
                    color="red",
                    alpha=0.25,
                    label=None if marked else "partition offline",
                )
                marked = True
            ax.set_yscale("log")
            ax.set_xlim(0, p.end_s - p.start_s)
            ax.set_title(
                f"round {r}: {PHASE_NAMES[phase]}; p99 {p.latency['p99_ms']:.1f} ms, "
                f"{p.cleaned_bytes / MB:.0f} MB cleaned",
                fontsize=8,
            )
            ax.set_xlabel("s since the phase started", fontsize=7)
            if pi == 0:
                ax.set_ylabel("send -> acknowledged, ms", fontsize=7)
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=6, loc="upper right")
    bars_left = fig.add_subplot(grid[rows - 1, 0])
    if storage is not None:
        summ = storage_summary(storage)
        names = [c for c, _, _ in CASES]
        med = [summ[c]["mb_per_s"]["median"] for c in names]
        lo = [m - summ[c]["mb_per_s"]["min"] for m, c in zip(med, names, strict=True)]
        hi = [summ[c]["mb_per_s"]["max"] - m for m, c in zip(med, names, strict=True)]
        bars_left.bar(range(len(names)), med, yerr=[lo, hi], color="#9467bd", capsize=3)
        bars_left.set_xticks(range(len(names)), [n.replace(", ", "\n") for n in names])
        bars_left.set_ylabel("MB of log cleaned per s", fontsize=7)
        bars_left.set_title("the cleaner alone, unthrottled (median, min-max)", fontsize=8)
        bars_left.tick_params(labelsize=7)
    else:
        bars_left.set_visible(False)
    bars_right = fig.add_subplot(grid[rows - 1, 1:])
    if phases:
        ns = node_summary(phases)
        x = range(len(PHASES))
        metrics = (
            ("p50_ms", "p50"),
            ("p99_ms", "p99"),
            ("p99_in_cleans_ms", "p99 while cleaning"),
            ("p99_outside_offline_ms", "p99 outside offline windows"),
        )
        for off, (metric, label) in enumerate(metrics):
            vals = [ns[ph][metric]["median"] or 0 for ph in PHASES]
            bars_right.bar([i + (off - 1.5) * 0.2 for i in x], vals, width=0.2, label=label)
        bars_right.set_yscale("log")
        bars_right.set_xticks(list(x), [PHASE_NAMES[ph] for ph in PHASES])
        bars_right.set_ylabel("ms (median over rounds)", fontsize=7)
        bars_right.set_title("produce latency per phase", fontsize=8)
        bars_right.tick_params(labelsize=7)
        bars_right.legend(fontsize=7)
    else:
        bars_right.set_visible(False)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


# -- main -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settings:
    size_mb: int
    runs: int
    map_keys: int
    budget_mb: float
    budget_log_mb: int
    fill_mb: int
    phase_s: float
    rate: float
    rounds: int


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.cleaner_bench",
        description="Log cleaner throughput and its cost to produce latency (see the module "
        "docstring).",
    )
    p.add_argument("--size-mb", type=int, default=None, help="each storage case's log (200)")
    p.add_argument("--runs", type=int, default=None, help="cleans per storage case (3)")
    p.add_argument("--map-keys", type=int, default=None, help="offset map keys (1,000,000)")
    p.add_argument("--budget-mb", type=float, default=None, help="budget check MB/s (16)")
    p.add_argument("--budget-log-mb", type=int, default=None, help="budget check log (48)")
    p.add_argument("--fill-mb", type=int, default=None, help="node backlog per fill (64)")
    p.add_argument("--phase-s", type=float, default=None, help="each latency phase (25)")
    p.add_argument("--rate", type=float, default=None, help="producer records/s (2000)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of the three phases (3)")
    p.add_argument("--skip-storage", action="store_true", help="only the node part")
    p.add_argument("--skip-node", action="store_true", help="only the storage part")
    p.add_argument("--quick", action="store_true", help="tiny sizes, 1 run, 4 s phases (tests)")
    p.add_argument("--data-dir", help="where the logs and the node's data go (a real disk)")
    p.add_argument("--out", default=str(REPO / "bench" / "results"), help="results directory")
    p.add_argument("--note", default="", help="a line for the report (e.g. what else ran)")
    p.add_argument("--keep-data", action="store_true", help="keep the data and node logs")
    p.add_argument("--no-plots", action="store_true")
    return p


def settings_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Settings:
    def pick(value: Any, quick: Any, full: Any) -> Any:
        return value if value is not None else (quick if args.quick else full)

    s = Settings(
        size_mb=pick(args.size_mb, 4, 200),
        runs=pick(args.runs, 1, 3),
        map_keys=pick(args.map_keys, 100_000, 1_000_000),
        budget_mb=pick(args.budget_mb, 16.0, 16.0),
        budget_log_mb=pick(args.budget_log_mb, 4, 48),
        fill_mb=pick(args.fill_mb, 4, 64),
        phase_s=pick(args.phase_s, 4.0, 25.0),
        rate=pick(args.rate, 500.0, 2000.0),
        rounds=pick(args.rounds, 1, 3),
    )
    positive = (s.size_mb, s.runs, s.map_keys, s.budget_mb, s.budget_log_mb, s.fill_mb)
    if min(positive) <= 0 or s.phase_s <= 0 or s.rate <= 0 or s.rounds < 1:
        parser.error("sizes, --runs, --rounds, --phase-s and --rate must be positive")
    if args.skip_storage and args.skip_node:
        parser.error("--skip-storage and --skip-node leave nothing to run")
    return s


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    s = settings_from(args, parser)
    command = common.command_line("bench.cleaner_bench", argv)
    # Three storage logs and a copy, and the node's log before its cleans, with room to spare.
    need_mb = 5 * s.size_mb + 4 * s.fill_mb + 1024
    wd = common.prepare_work_dir(
        args.data_dir,
        "raftlog-cleaner-",
        need_mb=need_mb,
        parser=parser,
        needed_by="these sizes need",
    )
    work, facts = wd.path, wd.facts
    stamp = common.run_stamp()
    progress(f"data in {work} ({wd.free_mb:,.0f} MB free); {s}")
    storage = node = None
    try:
        if not args.skip_storage:
            storage = run_storage(s, os.path.join(work, "storage"))
        if not args.skip_node:
            node = run_node(s, os.path.join(work, "node"))
    finally:
        common.keep_or_remove(work, args.keep_data, progress, "the data and logs")
    facts["load_average_at_end"] = common.load_average()
    prefix = common.results_prefix(args.out, "cleaner", stamp)
    title = f"raftlog log cleaner, {facts['date']}"
    plot_note = "plot skipped (--no-plots)"
    if not args.no_plots:
        plot_note = plot(storage, node, Path(f"{prefix}.png"), title) or f"Plot: {prefix}.png"
    text = markdown(command, args.note, facts, s, storage, node, plot_note)
    payload: dict[str, Any] = {
        "command": command,
        "machine": facts,
        "settings": {**asdict(s), "mb": MB},
        "storage": storage,
        "storage_summary": storage_summary(storage) if storage else None,
    }
    if node is not None:
        payload["node"] = {
            **{k: v for k, v in node.items() if k != "phases"},
            "phases": [
                {k: v for k, v in asdict(p).items() if k != "points"} for p in node["phases"]
            ],
            "summary": node_summary(node["phases"]),
        }
    common.write_results(prefix, text, payload, progress)
    problems = node["shutdown_problems"] if node else []
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
