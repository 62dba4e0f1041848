"""`LogManager`: the partition logs a broker hosts, under `<data_dir>/logs/<topic>-<partition>`.

It opens every hosted partition at start (running storage recovery), creates and deletes them
with topics, and runs the retention and flush timers (long-polling fetches wait on the replica
manager's partitions, raftlog/replication/manager.py). Storage calls are synchronous and run
on the event loop thread: appends are page-cache writes of microseconds, and one thread keeps
the "one writer per log" rule without locks. fsyncs of rolled segments already run on the
storage layer's own thread.

Offline logs (rules):
- A hosted partition whose log cannot be opened (a full disk, damaged data below the recovery
  point: LogCorruptedError) or that went offline while serving (any write it could not make: a
  full or failing disk; a failed fsync; damage found by a read) is kept in an offline table with
  its error; produce, fetch and list-offsets for it get that LogOfflineError. Only that log goes
  offline, not every log of the data directory (docs/ARCHITECTURE.md, "Durability and
  recovery", says why). It never stops the other partitions: every per-partition error is
  caught here, logged at most once per `ERROR_LOG_INTERVAL_S` per partition and kind, and the
  loop goes on.
- A log that goes offline while serving calls `on_went_offline` (at once, from inside the
  failed call), so that the broker moves it out and reports it without waiting for its
  housekeeping tick: that report is what moves the partition's leadership.
- Offline partitions are reopened with a bounded exponential backoff
  (`OPEN_RETRY_BACKOFF_MS_MIN` doubling to `OPEN_RETRY_BACKOFF_MS_MAX`), so a partition comes
  back by itself when space returns or an operator repairs or moves its directory. A reopen
  after damage found by a read checks the damaged segment batch by batch. A log that went
  offline because its disk was full (ENOSPC) is reopened only once the data directory has
  `DISK_FREE_BYTES_MIN` free again (less on a tiny file system; one statvfs per round, however
  many logs wait): while the disk stays full no reopen is tried and none is counted, so the
  backoff does not grow, and the log is back within a round (`flush_check_interval_ms`) of
  space returning. A reopen costs a recovery (the segments above the recovery point are
  checked), and a log that reopened on a still-full disk would only go offline again at its
  next write: two metadata commands each.
- `offline_report()` is what the broker reports to the metadata (cluster status shows it);
  `on_offline_change` is called whenever it changes. `offline()` is the table itself, for
  metrics: per partition its error (the reason), `since_s`, `attempts` and `retry_at_s`.
- `set_aside_damaged(tp)` heals a damaged replica that another broker leads: its directory is
  renamed into `<data_dir>/damaged/` (kept for the operator: nothing is deleted) and an empty
  log takes its place, which the follower refetches from the leader. The broker calls it only
  once the metadata has taken the replica out of the ISR and ELR (so an empty log is never
  counted as in sync, never elected).
- `close()` closes every log, even if some fail.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import shutil
import time
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from raftlog.errors import (
    LogCorruptedError,
    LogOfflineError,
    RaftlogError,
    UnknownTopicOrPartitionError,
)
from raftlog.metadata.model import TopicInfo
from raftlog.storage import LogConfig, PartitionLog
from raftlog.storage.checkpoint import sync_many
from raftlog.storage.cleaner import CleanPlan
from raftlog.storage.log import os_error_text
from raftlog.storage.segment import parse_segment_name
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

TOPIC_ID_FILE = "topic-id"
# First reopen half a second after a failure, then doubling: a transient failure costs little.
OPEN_RETRY_BACKOFF_MS_MIN = 500
# At most every 30 s: an operator's repair (or freed space) is picked up within that, and a
# partition that stays broken costs one open attempt (its indices and last headers) per 30 s.
OPEN_RETRY_BACKOFF_MS_MAX = 30_000
# A log offline for want of space is reopened once the data directory has this much free:
# enough for recovery's checkpoints and a follower's first fetches (a reopen that finds a few
# pages would go offline again at its next append), small next to any real disk; on a file
# system under 16 MiB (a test's tmpfs), a sixteenth of it.
DISK_FREE_BYTES_MIN = 1 << 20
# A partition's repeated error of one kind is logged at most once a minute (with the count of
# the lines left out): a full disk must not flood the log with one line per partition per tick.
ERROR_LOG_INTERVAL_S = 60.0
# What the metadata keeps per offline replica: the reason's first characters (the broker's log
# has it whole), and at most this many replicas per broker, so one report stays a small command.
OFFLINE_REASON_CHARS_MAX = 300
OFFLINE_REPORT_ENTRIES_MAX = 1000
# The scrubber lists the logs it has to check at most this often (a pass over every log).
SCRUB_LIST_INTERVAL_S = 1.0
# Logs closed at a time when the broker stops (LogManager.close).
CLOSE_THREADS = 8


def partition_dir_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def _read_topic_id(path: str) -> str | None:
    try:
        with open(os.path.join(path, TOPIC_ID_FILE), "rb") as f:
            # Empty: a write that failed (a full disk) or was torn; as good as no file.
            return f.read().decode("ascii", "replace").strip() or None
    except FileNotFoundError:
        return None


def parse_partition_dir(name: str) -> TopicPartition | None:
    topic, dash, part = name.rpartition("-")
    if not dash or not topic or not part.isdigit():
        return None
    return TopicPartition(topic, int(part))


class RateLimitedLog:
    """At most one line per key every `interval_s`; the next one says how many were left out."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic):
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[Hashable, tuple[float, int]] = {}  # key -> (logged at, left out since)

    def log(self, level: int, key: Hashable, msg: str, *args: object) -> bool:
        now = self._clock()
        at, left_out = self._last.get(key, (None, 0))
        if at is not None and now - at < self.interval_s:
            self._last[key] = (at, left_out + 1)
            return False
        if left_out:
            msg += " (%d similar lines in the last %.0f s left out)"
            args = (*args, left_out, self.interval_s)
        log.log(level, msg, *args)
        self._last[key] = (now, 0)
        return True

    def forget(self, prefix: Hashable) -> None:
        """Drop the keys of one partition (tuples starting with `prefix`)."""
        for key in [k for k in self._last if isinstance(k, tuple) and k[:1] == (prefix,)]:
            del self._last[key]


@dataclass(slots=True)
class OfflineLog:
    """A hosted partition whose log does not serve: why, and when the next reopen is due."""

    topic: TopicInfo
    error: LogOfflineError
    since_s: float  # monotonic
    attempts: int  # failed opens in a row
    retry_at_s: float  # monotonic
    # Segments (base offsets) the next open checks batch by batch: where a read found damage.
    check_segments: tuple[int, ...] = ()
    # Offline for want of space (ENOSPC): reopened only once the disk has room again.
    disk_full: bool = False


def _disk_full(error: BaseException) -> bool:
    """Whether ENOSPC is somewhere in `error`'s chain of causes."""
    seen: BaseException | None = error
    for _ in range(8):  # a chain is a few links; bounded whatever it holds
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _backoff_s(attempts: int) -> float:
    ms: int = OPEN_RETRY_BACKOFF_MS_MIN << min(max(attempts - 1, 0), 32)
    return min(ms, OPEN_RETRY_BACKOFF_MS_MAX) / 1000


class LogManager:
    def __init__(
        self,
        data_dir: str,
        defaults: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.root = os.path.join(data_dir, "logs")
        os.makedirs(self.root, exist_ok=True)
        # Deleted partitions wait here until `purge_deleted` removes them.
        self.trash = os.path.join(data_dir, "logs-deleted")
        self.defaults = dict(defaults or {})
        # The broker-wide defaults (node TOML [log]) are checked like a topic's config, at start.
        LogConfig.from_topic_config(self.defaults)
        self._clock = clock
        self._logs: dict[TopicPartition, PartitionLog] = {}
        # The topic each open log was opened for (its id and config, for a reopen).
        self._topics: dict[TopicPartition, TopicInfo] = {}
        self._offline: dict[TopicPartition, OfflineLog] = {}
        # The scrubber's turn: it goes on with the partition after this one; the logs it
        # checks (those with a closed segment), listed at most every SCRUB_LIST_INTERVAL_S.
        self._scrub_last = TopicPartition("", -1)
        self._clean_last = TopicPartition("", -1)  # the log plan_clean looked at last
        self._scrub_logs: list[tuple[TopicPartition, PartitionLog]] = []
        self._scrub_keys: list[TopicPartition] = []
        self._scrub_listed_at = -SCRUB_LIST_INTERVAL_S
        # Logs that went offline while serving (moved out by check_offline), and the logs
        # whose topic sets flush.ms (maybe_flush): housekeeping looks at these, not at every
        # one of 10,000 logs a second.
        self._went_offline_while_serving: set[TopicPartition] = set()
        self._flushed_by_time: set[TopicPartition] = set()
        self.errors = RateLimitedLog(ERROR_LOG_INTERVAL_S, clock)
        # Called (on the event loop) whenever offline_report() may have changed.
        self.on_offline_change: Callable[[], None] = lambda: None
        # Called when a serving log goes offline, from inside the call that failed (on any
        # thread): it must only schedule `check_offline`, never run it.
        self.on_went_offline: Callable[[], object] = lambda: None

    def topic_id(self, tp: TopicPartition) -> str:
        """The id of the topic whose log of `tp` is open here ("" if none is)."""
        topic = self._topics.get(tp)
        return "" if topic is None else topic.topic_id

    def config_for(self, topic_config: dict[str, str]) -> LogConfig:
        # Not strict about unknown keys: topics created before they were refused must open.
        return LogConfig.from_topic_config({**self.defaults, **topic_config}, strict=False)

    def reconcile(self, topics: Iterable[TopicInfo], node_id: int) -> None:
        """Make the hosted logs match the metadata: open partitions whose replicas include
        `node_id`; close and delete the others, and any whose topic was deleted and re-created
        (a different topic id, kept in each partition directory's `topic-id` file).

        A partition that fails to open goes to the offline table (retried later); the others
        are opened regardless. All on the calling thread: the broker uses `plan`, then opens
        the partitions in slices on a worker thread (`open_detached`) and `adopt`s them."""
        for tp, info in self.plan(topics, node_id):
            self.adopt(tp, info, self.open_detached(tp, info))

    def plan(
        self, topics: Iterable[TopicInfo], node_id: int, sweep: bool = True
    ) -> list[tuple[TopicPartition, TopicInfo]]:
        """The first half of `reconcile`, on the event loop: drop what is no longer hosted
        here and return the hosted partitions still to open. `sweep`: also look for
        directories of partitions not hosted (left by a topic deleted while this broker was
        down), which lists the whole logs directory."""
        wanted: dict[TopicPartition, TopicInfo] = {}
        for t in topics:
            for p in t.partitions:
                if node_id in p.replicas:
                    wanted[TopicPartition(t.name, p.partition)] = t
        for tp in list(self._logs):
            still = wanted.get(tp)
            opened_for = self._topics.get(tp)
            if still is None or opened_for is None or opened_for.topic_id != still.topic_id:
                self._drop(tp, "its topic was deleted or it moved away")
        changed = False
        for tp, off in list(self._offline.items()):
            now_wanted = wanted.get(tp)
            if now_wanted is None or now_wanted.topic_id != off.topic.topic_id:
                # Its directory goes below, with the other partitions not hosted here.
                del self._offline[tp]
                self.errors.forget(tp)
                changed = True
                log.info("%s is no longer hosted here: forgetting that its log is offline", tp)
        if sweep:
            for name in sorted(os.listdir(self.root)):
                path = os.path.join(self.root, name)
                parsed = parse_partition_dir(name)
                hosted = wanted.get(parsed) if parsed is not None else None
                if parsed in self._logs:
                    continue
                if hosted is None or _read_topic_id(path) not in (None, hosted.topic_id):
                    log.warning("deleting %s: not a partition this node hosts", path)
                    self._delete_dir(path)
        if changed:
            self.on_offline_change()
        return [
            (tp, info)
            for tp, info in wanted.items()
            if tp not in self._logs and tp not in self._offline
        ]

    def open_many(
        self, chunk: list[tuple[TopicPartition, TopicInfo]]
    ) -> tuple[list[tuple[TopicPartition, TopicInfo, PartitionLog | LogOfflineError]], list[str]]:
        """`open_detached` for many partitions (on the broker's worker thread); also returns
        the new topic-id files and directories, for `sync_new` to fsync afterwards: an fsync
        of a directory waits for the filesystem's journal, which under write load took
        seconds here, and a new partition must not wait that long to serve (its followers
        would leave the ISR meanwhile)."""
        opened: list[tuple[TopicPartition, TopicInfo, PartitionLog | LogOfflineError]] = []
        unsynced: list[str] = []
        for tp, info in chunk:
            opened.append((tp, info, self.open_detached(tp, info, sync=False, unsynced=unsynced)))
        return opened, unsynced

    def sync_new(self, paths: list[str]) -> None:
        """fsync what `open_many` created (thread-safe: it only fsyncs paths). Until then a
        power failure could lose a new partition's topic-id file, which matters only if its
        topic is also deleted and re-created while this broker is down. A failure is logged
        (the logs serve on; the next open rewrites a lost file)."""
        if not paths:
            return
        try:
            sync_many(paths, self.root)
        except OSError as e:
            log.error(
                "making %d new partition directories durable failed (%s); a power failure "
                "now could lose their topic-id files",
                len(paths) // 2,
                os_error_text(e),
            )

    def open_detached(
        self,
        tp: TopicPartition,
        topic: TopicInfo,
        check_segments: tuple[int, ...] = (),
        sync: bool = True,
        unsynced: list[str] | None = None,
    ) -> PartitionLog | LogOfflineError:
        """Open a hosted partition's log (creating it if new), without registering it: the
        opened log, or why it is offline. Touches nothing of this object's but its settings,
        so the broker runs it on a worker thread (file creation is slow: a directory and a
        file cost ~0.3 ms here, and 10,000 new partitions would stall the event loop for
        seconds) and hands the result to `adopt` on the loop. Nothing else can see the log
        until then, so the one-writer rule holds. `sync=False`: a new topic-id file and its
        directory are appended to `unsynced`, for the caller to fsync (`open_many`)."""
        path = os.path.join(self.root, partition_dir_name(tp))
        try:
            plog = PartitionLog.open(
                path, self.config_for(topic.config), check_segments=check_segments
            )
        except LogOfflineError as e:  # LogCorruptedError: damage below the recovery point
            return e
        except RaftlogError as e:  # StorageError (a full disk), InvalidConfigError
            offline = LogOfflineError(f"{e}; the log of {tp} is offline on this broker")
            offline.__cause__ = e  # the OS error in it says whether the disk is full
            return offline
        try:
            if _read_topic_id(path) is None:
                written = plog.write_side_file(TOPIC_ID_FILE, topic.topic_id.encode(), sync)
                if not sync and unsynced is not None:
                    unsynced += (written, path)
        except OSError as e:
            self._close_quietly(tp, plog)
            offline = LogOfflineError(
                f"{tp}: writing its {TOPIC_ID_FILE} file failed ({os_error_text(e)})"
            )
            offline.__cause__ = e
            return offline
        return plog

    def adopt(
        self, tp: TopicPartition, topic: TopicInfo, opened: PartitionLog | LogOfflineError
    ) -> PartitionLog | None:
        """Register what `open_detached` returned: the log, or the partition as offline
        (retried later)."""
        if isinstance(opened, LogOfflineError):
            self._went_offline(tp, topic, opened)
            return None
        plog = opened
        self._logs[tp] = plog
        self._topics[tp] = topic
        plog.on_offline = lambda: self._log_went_offline(tp)
        if plog.config.flush_ms is not None:
            self._flushed_by_time.add(tp)
        was = self._offline.pop(tp, None)
        if was is not None:
            log.info(
                "%s is back online after %.1f s offline (log end %d)",
                tp,
                self._clock() - was.since_s,
                plog.log_end_offset,
            )
            self.errors.forget(tp)
            self.on_offline_change()
        return plog

    def _log_went_offline(self, tp: TopicPartition) -> None:
        self._went_offline_while_serving.add(tp)
        self.on_went_offline()

    def _went_offline(self, tp: TopicPartition, topic: TopicInfo, error: LogOfflineError) -> None:
        now = self._clock()
        old = self._offline.get(tp)
        attempts = 1 if old is None else old.attempts + 1
        check: tuple[int, ...] = () if old is None else old.check_segments
        if isinstance(error, LogCorruptedError) and error.log_path:
            base = parse_segment_name(os.path.basename(error.log_path))
            if base is not None and base not in check:
                check = (*check, base)
        self._offline[tp] = OfflineLog(
            topic,
            error,
            now if old is None else old.since_s,
            attempts,
            now + _backoff_s(attempts),
            check,
            _disk_full(error),
        )
        if old is None or str(old.error) != str(error):
            self.errors.forget(tp)
            self.on_offline_change()
        self.errors.log(
            logging.ERROR,
            (tp, "offline"),
            "%s is offline on this broker (attempt %d, next in %.1f s): %s",
            tp,
            attempts,
            _backoff_s(attempts),
            error,
        )

    def _open(
        self, tp: TopicPartition, topic: TopicInfo, check_segments: tuple[int, ...] = ()
    ) -> PartitionLog | None:
        """Open and register a hosted partition's log, on this thread; on failure it goes to
        the offline table and None is returned (the caller goes on with the others)."""
        return self.adopt(tp, topic, self.open_detached(tp, topic, check_segments))

    def _drop(self, tp: TopicPartition, why: str) -> None:
        plog = self._logs.pop(tp)
        self._topics.pop(tp, None)
        self._close_quietly(tp, plog)
        self._delete_dir(plog.path)
        self.errors.forget(tp)
        log.debug("deleted partition %s: %s", tp, why)

    def _delete_dir(self, path: str) -> None:
        """Delete a partition directory: renamed out of the logs directory at once (a topic
        re-created under the same name gets a new one), removed by `purge_deleted` later, off
        the event loop (deleting a 10,000-partition topic removes 10,000 directories)."""
        os.makedirs(self.trash, exist_ok=True)
        target = os.path.join(self.trash, f"{os.path.basename(path)}.{time.time_ns()}")
        try:
            os.rename(path, target)
        except FileNotFoundError:
            return
        except OSError as e:
            log.warning("moving %s out of the way failed (%s); deleting it here", path, e)
            shutil.rmtree(path, ignore_errors=True)

    def purge_deleted(self) -> int:
        """Remove what `_delete_dir` moved aside; thread-safe (the broker runs it on a worker
        thread). Returns how many directories went."""
        try:
            names = os.listdir(self.trash)
        except FileNotFoundError:
            return 0
        for name in names:
            shutil.rmtree(os.path.join(self.trash, name), ignore_errors=True)
        return len(names)

    def _close_quietly(self, tp: TopicPartition, plog: PartitionLog) -> None:
        try:
            plog.close()
        except RaftlogError as e:
            log.error("closing %s failed: %s (recovery will check it at the next open)", tp, e)

    def hosted(self, tp: TopicPartition) -> PartitionLog | None:
        """The open log of `tp`, if any (no error for an offline or unknown one)."""
        return self._logs.get(tp)

    def get(self, tp: TopicPartition) -> PartitionLog:
        try:
            return self._logs[tp]
        except KeyError:
            off = self._offline.get(tp)
            if off is not None:
                raise LogOfflineError(str(off.error)) from None
            raise UnknownTopicOrPartitionError(
                f"this broker does not host partition {tp}"
            ) from None

    def find(self, tp: TopicPartition) -> PartitionLog | None:
        return self._logs.get(tp)

    def offline_error(self, tp: TopicPartition) -> LogOfflineError | None:
        """Why a hosted partition's log is offline here, or None."""
        off = self._offline.get(tp)
        return None if off is None else off.error

    def partitions(self) -> list[TopicPartition]:
        return list(self._logs)

    @property
    def count(self) -> int:
        """How many logs are open."""
        return len(self._logs)

    def offline(self) -> dict[TopicPartition, OfflineLog]:
        return dict(self._offline)

    def offline_report(self) -> list[list[Any]]:
        """[[topic, partition, reason], ...] sorted, bounded: what the metadata should hold."""
        out: list[list[Any]] = []
        for tp in sorted(self._offline)[:OFFLINE_REPORT_ENTRIES_MAX]:
            reason = str(self._offline[tp].error)
            if len(reason) > OFFLINE_REASON_CHARS_MAX:
                reason = reason[: OFFLINE_REASON_CHARS_MAX - 3] + "..."
            out.append([tp.topic, tp.partition, reason])
        return out

    # -- housekeeping --------------------------------------------------------------------------

    def check_offline(self) -> int:
        """Move logs that went offline while serving to the offline table; returns how many.
        Only the ones that said so are looked at (`on_offline`), not every log."""
        moved = 0
        went, self._went_offline_while_serving = self._went_offline_while_serving, set()
        for tp in went:
            plog = self._logs.get(tp)
            error = None if plog is None else plog.offline_error
            if plog is None or error is None:
                continue
            del self._logs[tp]
            topic = self._topics.pop(tp)
            self._close_quietly(tp, plog)
            self._went_offline(tp, topic, error)
            moved += 1
        return moved

    def damaged(self) -> list[TopicPartition]:
        """Offline partitions whose log holds damaged data (not a full disk or a failed open)."""
        return [tp for tp, off in self._offline.items() if isinstance(off.error, LogCorruptedError)]

    def set_aside_damaged(self, tp: TopicPartition) -> str | None:
        """Move offline `tp`'s damaged directory to `<root>/../damaged/<name>.<time>` and open an
        empty log in its place; the path the damaged files now have, or None if the move
        failed (the partition stays offline, the error is logged)."""
        off = self._offline.get(tp)
        if off is None:
            return None
        path = os.path.join(self.root, partition_dir_name(tp))
        aside_root = os.path.join(os.path.dirname(self.root), "damaged")
        aside = os.path.join(aside_root, f"{partition_dir_name(tp)}.{int(time.time() * 1000)}")
        try:
            os.makedirs(aside_root, exist_ok=True)
            os.rename(path, aside)
        except OSError as e:
            self.errors.log(
                logging.ERROR,
                (tp, "set aside"),
                "could not move the damaged log of %s aside to %s: %s",
                tp,
                aside,
                os_error_text(e),
            )
            return None
        log.warning(
            "%s: damaged log moved to %s (kept for inspection); refetching it from the leader",
            tp,
            aside,
        )
        self._open(tp, off.topic)
        return aside

    def retry_offline(self) -> int:
        """Reopen the offline partitions whose backoff has passed; returns how many came back."""
        now = self._clock()
        room: bool | None = None  # probed once, when a log waits for space
        back = 0
        for tp, off in list(self._offline.items()):
            if now < off.retry_at_s:
                continue
            if off.disk_full:
                if room is None:
                    room = self._has_room()
                if not room:
                    continue  # no attempt: it would fail alike, after a recovery's reads
            if self._open(tp, off.topic, off.check_segments):
                back += 1
        return back

    def _has_room(self) -> bool:
        """The data directory has DISK_FREE_BYTES_MIN free, or a sixteenth of a smaller file
        system (True if it cannot be asked: the reopen then finds out itself)."""
        try:
            st = os.statvfs(self.root)
        except OSError:
            return True
        need = min(DISK_FREE_BYTES_MIN, st.f_blocks * st.f_frsize // 16)
        return st.f_bavail * st.f_frsize >= need

    def enforce_retention(self, high_watermarks: dict[TopicPartition, int] | None = None) -> int:
        """Retention on every open log, never past a partition's high watermark (a partition
        with none given, e.g. one this broker follows, is bounded by its log end); and the
        expiry of idle idempotent producers' state."""
        deleted = 0
        for tp, plog in list(self._logs.items()):
            try:
                hw = (high_watermarks or {}).get(tp)
                deleted += plog.enforce_retention(max_offset=hw)
                plog.expire_producers()
            except RaftlogError as e:
                self.errors.log(
                    logging.ERROR, (tp, "retention"), "retention on %s failed: %s", tp, e
                )
        return deleted

    def plan_clean(
        self, high_watermarks: dict[TopicPartition, int]
    ) -> tuple[TopicPartition, PartitionLog, CleanPlan] | None:
        """The next compacted log due for a clean (PartitionLog.plan_clean), the logs taking
        turns; never past a partition's high watermark (its log end where none is given)."""
        compacted = sorted(tp for tp, plog in self._logs.items() if plog.config.compact)
        if not compacted:
            return None
        start = bisect.bisect_right(compacted, self._clean_last)
        for tp in compacted[start:] + compacted[:start]:
            plog = self._logs[tp]
            self._clean_last = tp
            try:
                plan = plog.plan_clean(high_watermarks.get(tp, plog.log_end_offset))
            except RaftlogError as e:
                self.errors.log(logging.ERROR, (tp, "clean"), "planning a clean of %s: %s", tp, e)
                continue
            if plan is not None:
                return tp, plog, plan
        return None

    def scrub(self, budget_bytes: int, budget_s: float) -> int:
        """Check about `budget_bytes` of closed segments' checksums, and for at most about
        `budget_s` seconds, the logs taking turns from where the last call stopped
        (PartitionLog.scrub); returns the bytes checked. A log found damaged goes offline
        (`check_offline` moves it)."""
        now = self._clock()
        if now >= self._scrub_listed_at + SCRUB_LIST_INTERVAL_S:
            # Only logs with a closed segment have anything to check; listing them costs a
            # pass over every log, so it is done once a second, not on every 100 ms slice.
            self._scrub_listed_at = now
            self._scrub_logs = sorted(
                (tp, plog) for tp, plog in self._logs.items() if plog.segment_count > 1
            )
            self._scrub_keys = [tp for tp, _ in self._scrub_logs]
        logs = self._scrub_logs
        if not logs:
            return 0
        start = bisect.bisect_right(self._scrub_keys, self._scrub_last)
        checked = 0
        deadline = time.monotonic() + budget_s
        for tp, plog in logs[start:] + logs[:start]:
            if checked >= budget_bytes or time.monotonic() >= deadline:
                break
            self._scrub_last = tp
            if self._logs.get(tp) is not plog:
                continue  # dropped or taken offline since the list was made
            try:
                checked += plog.scrub(budget_bytes - checked, deadline)
            except RaftlogError as e:
                self.errors.log(logging.ERROR, (tp, "scrub"), "checking %s failed: %s", tp, e)
        return checked

    def maybe_flush(self) -> None:
        """Flush by `flush.ms`: only the logs whose topic sets it."""
        for tp in list(self._flushed_by_time):
            plog = self._logs.get(tp)
            if plog is None:
                self._flushed_by_time.discard(tp)
                continue
            try:
                plog.maybe_flush()
            except RaftlogError as e:
                self.errors.log(logging.ERROR, (tp, "flush"), "flushing %s failed: %s", tp, e)

    def close(self) -> None:
        """Close every log (each flushes and writes its clean-shutdown marker); a failing one
        is logged and the others still close.

        CLOSE_THREADS logs at a time: a written log's close is a handful of fsyncs (segments,
        index, checkpoints, producer snapshot), and one log after another a broker of 2,000
        partitions took 12.5 s to stop on a busy machine (over 20 s at a load of 5: the
        cluster tests' bound). fsyncs of different files overlap in the disk's queue and the
        filesystem's journal. Each log is closed by one thread; nothing else uses the logs by
        then (the broker stops serving first)."""
        logs = list(self._logs.items())
        self._logs.clear()
        if len(logs) <= 1:
            for tp, plog in logs:
                self._close_quietly(tp, plog)
            return
        with ThreadPoolExecutor(CLOSE_THREADS, thread_name_prefix="raftlog-log-close") as pool:
            for _ in pool.map(lambda item: self._close_quietly(*item), logs):
                pass
