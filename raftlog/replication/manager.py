"""`ReplicaManager`: the asyncio driver of the replication cores of one broker.

It owns one `Partition` (replication/partition.py: a PartitionLog plus its PartitionCore) per
hosted partition, and:
- follows the metadata: after every change of the partitions' state it calls `become_leader`,
  `become_follower`, `go_offline` or `update_isr` on the cores whose partition changed;
- performs the cores' actions on the logs (append, truncate, assign an epoch, move the log
  start), sends their ISR proposals to the metadata quorum, answers waiting acks=all produce
  requests through their callbacks, and wakes long-polling fetches: followers when a leader's
  log grows, consumers when its high watermark moves;
- appends records to a leader's log (`append_as_leader`, the one way in, for produce handlers
  of any protocol) and applies what a follower fetched (`on_fetch_answer`);
- runs one `ReplicaFetcher` (replication/fetcher.py) per broker it follows; a partition whose
  fetched data could not be appended (a full disk) or was rejected is left out of the fetches
  for a backoff that doubles per failure in a row (`replica_fetch_backoff_ms` up to
  `replica_append_backoff_ms_max`), so a broken disk neither spins the loop nor floods the log;
- with the fsync policy, fsyncs appended data on a background thread (one fsync covers every
  append made before it: group commit) and tells the cores what is durable;
- ticks the cores (ISR shrink, expired produce requests) and checkpoints every hosted
  partition's high watermark in one file (`HIGH_WATERMARKS_FILE`, Kafka's
  replication-offset-checkpoint) every `high_watermark_checkpoint_interval_ms`, written and
  fsynced on a thread: a checkpoint of 10,000 partitions is one file, not 10,000.

Rules: storage calls run on the event loop thread (one writer per log, as elsewhere in the
broker); only fsyncs go to a thread, on duplicated file descriptors, and the high-watermark
checkpoint, whose entries are taken on the loop. A high watermark read back is a lower bound
(the core caps it at the log end): a lost or older checkpoint only makes it start lower.
Background loops run in a TaskGroup owned by the broker: a loop that crashes stops the node
instead of leaving it half alive. Every action is performed before the next event reaches
the core, so the core's view of the log is never stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from raftlog.errors import (
    CorruptRecordError,
    InvalidOffsetError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RaftlogError,
    StaleBrokerEpochError,
    StorageError,
)
from raftlog.invariants import InvariantError
from raftlog.metadata.model import PartitionInfo, TopicInfo
from raftlog.replication.core import (
    LOG_ACTIONS,
    Append,
    CompleteProduce,
    FetchAnswer,
    FollowerFetch,
    HighWatermarkChanged,
    ProposeIsr,
    Role,
    Truncate,
    TruncateFully,
    perform_on_log,
)
from raftlog.replication.fetch_session import (
    LeaderSession,
    LeaderSessions,
)
from raftlog.replication.fetcher import ReplicaFetcher
from raftlog.replication.partition import (
    CommitCallback,
    Partition,
    PartitionRead,
    ReplicationConfig,
    monotonic_ms,
)
from raftlog.replication.throttle import ReplicationThrottle
from raftlog.storage import AppendInfo, PartitionLog
from raftlog.storage.checkpoint import CheckpointError, OffsetCheckpoint, PartitionOffsets
from raftlog.storage.file_io import EMPTY_SLICE
from raftlog.tasks import TaskSet
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

# Every hosted partition's high watermark, in the broker's data directory (beside `logs/`,
# whose every entry is a partition). HIGH_WATERMARK_FILE: the one-file-per-partition
# checkpoint of earlier versions, still read when the broker's file lacks the partition.
HIGH_WATERMARKS_FILE = "replication-offset-checkpoint"
HIGH_WATERMARK_FILE = "high-watermark-checkpoint"
# fsyncs for the fsync durability policy: one thread, since the disk serializes them anyway.
_FSYNC_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raftlog-replica-fsync")
# Writes of the high-watermark checkpoint: one thread, so two writes never overlap.
_CHECKPOINT_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raftlog-hw-checkpoint")

# Role changes of one metadata pass logged one by one; the rest are counted (_RoleChanges).
ROLE_CHANGES_LOGGED = 20
# Every leader is looked at this often (the hot ones every tick_interval_ms): an idle
# partition needs no tick, this is a safety net for one that became busy unnoticed.
FULL_TICK_INTERVAL_MS = 1000
# Fetch sessions a leader keeps (one per follower broker: far more than a cluster has) and
# how long an unused one lives (a follower fetches at least every replica_fetch_wait_max_ms).
FETCH_SESSIONS_MAX = 100
FETCH_SESSION_IDLE_MS_MAX = 120_000
# A partition whose metadata changed: (partition, its new PartitionInfo, its topic's config).
RoleChange = tuple["Partition", PartitionInfo, dict[str, str]]


class _RoleChanges:
    """The role changes of one metadata pass, logged at INFO one by one up to
    ROLE_CHANGES_LOGGED, then counted: a 10,000-partition topic's creation or a node's
    failover must not write thousands of lines (each costs the event loop ~20 us)."""

    __slots__ = ("by_kind", "count", "node_id")

    def __init__(self, node_id: int):
        self.node_id = node_id
        self.count = 0
        self.by_kind: dict[str, int] = {}

    def log(self, kind: str, msg: str, *args: object) -> None:
        self.count += 1
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        log.log(logging.INFO if self.count <= ROLE_CHANGES_LOGGED else logging.DEBUG, msg, *args)

    def log_summary(self) -> None:
        if self.count > ROLE_CHANGES_LOGGED:
            log.info(
                "node %d: %d partitions changed (%s), %d of them logged above",
                self.node_id,
                self.count,
                ", ".join(f"{kind} {n}" for kind, n in sorted(self.by_kind.items())),
                ROLE_CHANGES_LOGGED,
            )


class ReplicaManager:
    """All the partitions a broker hosts, as replicas: see the module docstring."""

    def __init__(
        self,
        node_id: int,
        config: ReplicationConfig,
        propose_isr: Callable[[TopicPartition, ProposeIsr], Awaitable[Any]],
        connect: Callable[[int], Awaitable[Any]],
        broker_epoch: Callable[[], int | None],
        clock_ms: Callable[[], int] = monotonic_ms,
        data_dir: str | None = None,
    ):
        self.node_id = node_id
        self.config = config
        # The high-watermark checkpoint (None: none, in tests of the manager alone), what it
        # held when the broker started, and the entries last written.
        self._hw_file = (
            None
            if data_dir is None
            else PartitionOffsets(os.path.join(data_dir, HIGH_WATERMARKS_FILE))
        )
        self._hw_read: dict[tuple[str, int], tuple[str, int]] = {}
        if self._hw_file is not None:
            try:
                self._hw_read = self._hw_file.read()
            except CheckpointError as e:
                log.warning("%s; every partition starts from high watermark 0", e)
        self._hw_written: list[tuple[str, int, str, int]] | None = None
        self._hw_writing = False
        self._propose_isr = propose_isr
        self._connect = connect
        self._broker_epoch = broker_epoch
        self.clock_ms = clock_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        # Leaders that need `tick` soon (waiting produces, an ISR change in flight, records
        # not yet committed): ticked every tick_interval_ms. The rest are looked at once per
        # FULL_TICK_INTERVAL_MS: an idle partition needs nothing, and ticking 3,000 idle
        # leaders 20 times a second cost a third of a core.
        self._hot: set[TopicPartition] = set()
        # Followers' fetch sessions with this broker as leader (fetch_session.py), and the
        # waiter of each session's long-polling fetch.
        self.fetch_sessions = LeaderSessions(FETCH_SESSIONS_MAX, FETCH_SESSION_IDLE_MS_MAX)
        self._session_waiters: dict[int, asyncio.Future[None]] = {}
        self._broker_epochs: dict[int, int] = {}
        self._fetchers: dict[int, ReplicaFetcher] = {}
        # What the replicas this broker adds in reassignments may fetch (throttle.py).
        self.throttle = ReplicationThrottle()
        self._task_group: asyncio.TaskGroup | None = None
        self._tasks = TaskSet(f"replica manager of broker {node_id}")
        self.stopping = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """The background loops (ticks, checkpoints, fetchers); runs until cancelled."""
        async with asyncio.TaskGroup() as tg:
            self._task_group = tg
            tg.create_task(self._tick_loop())
            for fetcher in self._fetchers.values():
                fetcher.start(tg)
            try:
                await asyncio.Event().wait()
            finally:
                # Cancelled (the node stops, or a loop crashed): the group is shutting down
                # and refuses new tasks, yet metadata changes still arrive on the loop while
                # it waits for its tasks. Fetchers created from now on are not started.
                self._task_group = None

    def close(self) -> None:
        """Stop fetching, answer every waiting produce, checkpoint every high watermark."""
        self.stopping = True
        for fetcher in self._fetchers.values():
            fetcher.stop()
        self._fetchers.clear()
        entries = self._hw_entries()
        if self._hw_file is not None and entries != self._hw_written:
            # On the checkpoint's thread, after a write still running there (never two at once).
            try:
                _CHECKPOINT_EXECUTOR.submit(self._hw_file.write, entries).result()
            except OSError as e:
                log.warning("writing the high watermark checkpoint failed: %s", e)
        now = self.clock_ms()
        for p in self.partitions.values():
            self._perform(p, p.core.go_offline(p.core.leader_epoch, p.core.partition_epoch), now)
            p.wake(p.follower_waiters)
            p.wake(p.consumer_waiters)

    def cut_off(self) -> None:
        """This broker is cut off from the metadata quorum: every led partition's acks=all
        waiters fail (PartitionCore.cut_off)."""
        now = self.clock_ms()
        for p in self.partitions.values():
            if p.core.waiters:
                self._perform(p, p.core.cut_off(), now)

    async def _tick_loop(self) -> None:
        interval = self.config.tick_interval_ms / 1000
        next_checkpoint = self.clock_ms() + self.config.high_watermark_checkpoint_interval_ms
        next_full = self.clock_ms()
        while True:
            await asyncio.sleep(interval)
            now = self.clock_ms()
            if now >= next_full:
                # Every leader: the ones that became hot without being marked (a safety net),
                # and the hot set rebuilt from what the cores say.
                next_full = now + FULL_TICK_INTERVAL_MS
                self._hot = {tp for tp, p in self.partitions.items() if p.core.needs_tick}
                self.fetch_sessions.expire(now)
            for tp in list(self._hot):
                p = self.partitions.get(tp)
                if p is None or p.core.role is not Role.LEADER:
                    self._hot.discard(tp)
                    continue
                self._perform(p, p.core.tick(now), now)
                if not p.core.needs_tick:
                    self._hot.discard(tp)
            if now >= next_checkpoint:
                self._checkpoint_high_watermarks()
                next_checkpoint = now + self.config.high_watermark_checkpoint_interval_ms

    # -- the high-watermark checkpoint -----------------------------------------------------------

    def _hw_entries(self) -> list[tuple[str, int, str, int]]:
        return [
            (tp.topic, tp.partition, p.topic_id, p.core.high_watermark)
            for tp, p in self.partitions.items()
        ]

    def _checkpoint_high_watermarks(self) -> None:
        """Write every hosted partition's high watermark if one changed, on a thread (the
        entries are taken here, on the loop); a write still running skips this round."""
        if self._hw_file is None or self._hw_writing:
            return
        entries = self._hw_entries()
        if entries == self._hw_written:
            return
        self._hw_writing = True
        hw_file = self._hw_file

        async def write() -> None:
            try:
                await asyncio.get_running_loop().run_in_executor(
                    _CHECKPOINT_EXECUTOR, hw_file.write, entries
                )
                self._hw_written = entries
            except OSError as e:
                # Only the checkpoint lags: after a restart the HWs start lower and catch up.
                log.warning("writing the high watermark checkpoint failed: %s", e)
            finally:
                self._hw_writing = False

        self._tasks.spawn(write(), "high watermark checkpoint")

    def _initial_high_watermark(self, tp: TopicPartition, plog: PartitionLog, topic_id: str) -> int:
        """What the checkpoint says of a partition being added: the broker's file if it has
        this topic's entry, else the per-partition file of earlier versions, else 0."""
        found = self._hw_read.get((tp.topic, tp.partition))
        if found is not None and found[0] == topic_id:
            return found[1]
        try:
            return OffsetCheckpoint(os.path.join(plog.path, HIGH_WATERMARK_FILE)).read() or 0
        except CheckpointError as e:
            log.warning("%s: %s; starting from high watermark 0", tp, e)
            return 0

    # -- hosting -------------------------------------------------------------------------------

    def add(
        self,
        tp: TopicPartition,
        plog: PartitionLog,
        topic_config: dict[str, str],
        topic_id: str = "",
    ) -> Partition:
        hw = self._initial_high_watermark(tp, plog, topic_id)
        p = Partition(tp, plog, self.node_id, topic_config, self.config, hw, topic_id)
        self.partitions[tp] = p
        return p

    def remove(self, tp: TopicPartition) -> None:
        """The partition is no longer hosted (deleted, moved): fail its waiters."""
        p = self.partitions.pop(tp, None)
        if p is None:
            return
        now = self.clock_ms()
        self._perform(p, p.core.go_offline(p.core.leader_epoch, p.core.partition_epoch), now)
        p.wake(p.follower_waiters)
        p.wake(p.consumer_waiters)
        self._assign_fetcher(p)

    def get(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def add_waiter(
        self, tps: Iterable[TopicPartition], fut: asyncio.Future[None], follower: bool
    ) -> None:
        """A long-polling fetch waits on these partitions: a follower's for appends, a
        consumer's for the high watermark to move. A partition not hosted wakes it at once."""
        for tp in tps:
            p = self.partitions.get(tp)
            if p is None:
                if not fut.done():
                    fut.set_result(None)
                continue
            (p.follower_waiters if follower else p.consumer_waiters).add(fut)

    def remove_waiter(
        self, tps: Iterable[TopicPartition], fut: asyncio.Future[None], follower: bool
    ) -> None:
        for tp in tps:
            p = self.partitions.get(tp)
            if p is not None:
                (p.follower_waiters if follower else p.consumer_waiters).discard(fut)

    def high_watermarks(self) -> dict[TopicPartition, int]:
        """Every hosted partition's high watermark (retention stops there)."""
        return {tp: p.high_watermark for tp, p in self.partitions.items()}

    # -- metadata ------------------------------------------------------------------------------

    def apply_metadata(self, topics: Iterable[TopicInfo], broker_epochs: dict[int, int]) -> None:
        """Bring every hosted partition's role in line with the metadata, at once."""
        self.apply_role_changes(self.role_changes(topics), broker_epochs)

    def role_changes(self, topics: Iterable[TopicInfo]) -> list[RoleChange]:
        """The hosted partitions whose metadata differs from what they last applied. Cheap
        for unchanged ones (ClusterMetadata keeps their PartitionInfo objects)."""
        changes: list[RoleChange] = []
        partitions = self.partitions
        for t in topics:
            name = t.name
            for info in t.partitions:
                p = partitions.get(TopicPartition(name, info.partition))
                if p is None or p.info is info:
                    continue
                if p.info == info:
                    p.info = info  # the same state in a new object: compare by identity next
                    continue
                changes.append((p, info, t.config))
        return changes

    def apply_role_changes(
        self,
        changes: list[RoleChange],
        broker_epochs: dict[int, int],
        budget_s: float | None = None,
    ) -> list[RoleChange]:
        """Apply `role_changes`; with `budget_s`, stop once that much time has gone and return
        the ones left (the caller yields to the event loop and calls again with them; one the
        metadata changed again meanwhile is applied, then corrected by the next pass)."""
        self._broker_epochs = dict(broker_epochs)
        now = self.clock_ms()
        deadline = None if budget_s is None else time.monotonic() + budget_s
        log_changes = _RoleChanges(self.node_id)
        done = 0
        for p, info, config in changes:
            done += 1
            if self.partitions.get(p.tp) is not p or p.info is info:
                continue  # removed, or applied already
            p.topic_config = dict(config)
            joining = self.joining(p)
            self._apply_partition(p, info, now, log_changes)
            self._assign_fetcher(p)
            if joining != self.joining(p) and p.fetched_from is not None:
                self._fetchers[p.fetched_from].changed(p.tp)  # its fetch size follows
            if deadline is not None and done % 16 == 0 and time.monotonic() >= deadline:
                break
        log_changes.log_summary()
        return changes[done:]

    def _apply_partition(
        self, p: Partition, info: PartitionInfo, now: int, changes: _RoleChanges
    ) -> None:
        core = p.core
        p.info = info
        # Its role or ISR changes: a follower's session must look at it again (an error now,
        # or a replica outside the ISR whose fetches have to count).
        self._touch_sessions(p, info.replicas)
        if info.leader_epoch > core.leader_epoch or (
            info.leader_epoch == core.leader_epoch
            and core.role is Role.OFFLINE
            and info.leader >= 0
        ):
            if info.leader == self.node_id:
                actions = core.become_leader(
                    info.leader_epoch,
                    info.partition_epoch,
                    info.replicas,
                    info.isr,
                    self._broker_epochs,
                    p.partition_config(),
                    now,
                )
                changes.log(
                    "leads",
                    "node %d leads %s at epoch %d (log end %d, high watermark %d, isr %s)",
                    self.node_id,
                    p.tp,
                    info.leader_epoch,
                    p.log.log_end_offset,
                    core.high_watermark,
                    list(info.isr),
                )
            elif info.leader >= 0:
                actions = core.become_follower(
                    info.leader, info.leader_epoch, info.partition_epoch, info.replicas
                )
                changes.log(
                    "follows",
                    "node %d follows %d for %s at epoch %d (log end %d)",
                    self.node_id,
                    info.leader,
                    p.tp,
                    info.leader_epoch,
                    p.log.log_end_offset,
                )
            else:
                actions = core.go_offline(info.leader_epoch, info.partition_epoch)
                changes.log("has no leader", "%s has no leader (epoch %d)", p.tp, info.leader_epoch)
            try:
                self._perform(p, actions, now)
            except StorageError as e:
                # The log went offline (the scrubber found damage, a write failed) after the
                # controller last heard from this broker: it elected this replica before the
                # broker's offline report reached it (a chaos run: damage found 0.8 s before
                # the election, reported 0.2 s after it). Take no role with that log; the
                # report moves leadership elsewhere, and the log manager reopens or refetches
                # the log as a new partition. Raising here stopped the metadata change for
                # every partition after this one.
                log.warning(
                    "%s: cannot take the role of epoch %d (leader %d): %s",
                    p.tp,
                    info.leader_epoch,
                    info.leader,
                    e,
                )
                self._perform(p, core.go_offline(info.leader_epoch, info.partition_epoch), now)
            p.wake(p.consumer_waiters)
            p.wake(p.follower_waiters)
            if core.role is Role.LEADER:
                self._hot.add(p.tp)
            elif p.fetched_from == core.leader_id:
                self._fetchers[core.leader_id].changed(p.tp)
        elif (
            core.role is Role.LEADER
            and info.leader_epoch == core.leader_epoch
            and info.partition_epoch > core.partition_epoch
        ):
            self._perform(
                p,
                core.update_isr(
                    info.isr, info.partition_epoch, self._broker_epochs, now, info.replicas
                ),
                now,
            )
            changes.log(
                "ISR changed",
                "%s: ISR now %s (epoch %d, partition epoch %d)",
                p.tp,
                list(info.isr),
                info.leader_epoch,
                info.partition_epoch,
            )

    def joining(self, p: Partition) -> bool:
        """This broker's replica of `p` is joining in a reassignment under way: its fetches
        count against the replication throttle."""
        info = p.info
        return info is not None and bool(info.adding) and self.node_id in info.adding

    def set_replication_throttle(self, rate: int) -> None:
        """The metadata's replication throttle (bytes per second, 0: none) from now on."""
        if not self.throttle.set_rate(rate, self.clock_ms()):
            return
        log.info(
            "replication throttle for joining replicas: %s",
            f"{rate} bytes/s" if rate else "off",
        )
        for fetcher in self._fetchers.values():
            for tp, p in fetcher.followed.items():
                if self.joining(p):
                    fetcher.changed(tp)  # its fetch size follows the rate
            fetcher.wake()

    def _assign_fetcher(self, p: Partition) -> None:
        """`p` is fetched by the fetcher of the leader it follows, or by none: move it."""
        core = p.core
        target = core.leader_id if core.role is Role.FOLLOWER else None
        if p.fetched_from == target:
            return
        if p.fetched_from is not None:
            old = self._fetchers.get(p.fetched_from)
            if old is not None:
                old.drop(p.tp)
                if not old.followed:
                    del self._fetchers[p.fetched_from]
                    old.stop()
        p.fetched_from = target
        if target is None:
            return
        fetcher = self._fetchers.get(target)
        if fetcher is None:
            fetcher = self._fetchers[target] = ReplicaFetcher(self, target)
            if self._task_group is not None:
                fetcher.start(self._task_group)
        fetcher.add(p.tp, p)
        fetcher.wake()

    def following(self, leader_id: int) -> list[Partition]:
        return [
            p
            for p in self.partitions.values()
            if p.core.role is Role.FOLLOWER and p.core.leader_id == leader_id
        ]

    def _fetch_state_changed(self, p: Partition) -> None:
        """`p`'s fetch state (log end, epochs, durable offset) may have changed: its
        fetcher sends it in the next request of its session."""
        if p.fetched_from is not None:
            fetcher = self._fetchers.get(p.fetched_from)
            if fetcher is not None:
                fetcher.changed(p.tp)

    # -- actions ---------------------------------------------------------------------------------

    def _perform(self, p: Partition, actions: list[Any], now: int) -> None:
        for a in actions:
            if isinstance(a, LOG_ACTIONS):
                before = p.log.log_end_offset
                perform_on_log(p.core, p.log, a, now)
                if isinstance(a, Truncate):
                    log.info(
                        "%s: follower truncated to %d (log end was %d, high watermark %d)",
                        p.tp,
                        p.log.log_end_offset,
                        before,
                        p.core.high_watermark,
                    )
                elif isinstance(a, TruncateFully):
                    log.info(
                        "%s: follower restarted its log at the leader's start %d", p.tp, a.offset
                    )
                elif isinstance(a, Append) and p.fsync_policy:
                    self.schedule_flush(p)
            elif isinstance(a, CompleteProduce):
                a.token(a.error)
            elif isinstance(a, HighWatermarkChanged):
                p.wake(p.consumer_waiters)
                self._touch_sessions(p)  # the followers learn it in their next answer
            elif isinstance(a, ProposeIsr):
                self._spawn(self._propose(p, a), f"ISR proposal for {p.tp}")
                self._hot.add(p.tp)  # ticked until the metadata resolves it
            else:
                raise InvariantError(f"unknown replication action {a!r}")

    def _spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> None:
        self._tasks.spawn(coro, what)

    async def _propose(self, p: Partition, proposal: ProposeIsr) -> None:
        try:
            await self._propose_isr(p.tp, proposal)
            log.info("%s: proposed ISR %s", p.tp, list(proposal.isr))
        except RaftlogError as e:
            log.info("%s: ISR change to %s refused: %s", p.tp, list(proposal.isr), e)
            # Refusals that prove the change was not applied; anything else (a stale
            # partition epoch, a timeout, no controller) waits for the metadata to tell.
            definitive = isinstance(e, InvalidRequestError | StaleBrokerEpochError)
            if self.partitions.get(p.tp) is p:
                p.core.on_isr_proposal_refused(proposal, definitive)

    # -- leader: produce -----------------------------------------------------------------------

    def leader(self, tp: TopicPartition) -> Partition:
        """The partition, if this broker leads it; else the error a client should act on."""
        p = self.partitions.get(tp)
        if p is None:
            raise NotLeaderOrFollowerError(f"broker {self.node_id} does not host {tp}")
        if p.core.role is not Role.LEADER:
            leader = p.core.leader_id
            raise NotLeaderOrFollowerError(
                f"broker {self.node_id} is not the leader of {tp} "
                f"(the leader is {leader if leader >= 0 else 'none: the partition is offline'})"
            )
        return p

    def append_as_leader(
        self,
        p: Partition,
        chunks: list[memoryview],
        waits: list[tuple[int, CommitCallback] | None],
    ) -> list[AppendInfo | RaftlogError]:
        """Append record-batch chunks to a partition this broker leads, at its leader epoch,
        with one write (`PartitionLog.append_chunks`): each chunk's outcome, in order (a
        chunk's own error leaves the others appended; a failed write fails them all). Then
        wake the followers. A chunk with a wait in `waits` (acks=all: its timeout in ms and
        its callback) has its callback called exactly once: with None once its records are
        committed, or with the error that ended it (its append's own, leadership lost, the
        ISR under min.insync.replicas, the timeout).
        The one way records enter a leader's log: produce handlers of any protocol call it."""
        outcomes: list[AppendInfo | RaftlogError]
        try:
            outcomes = p.log.append_chunks(chunks, p.core.leader_epoch)
        except RaftlogError as e:
            outcomes = [e] * len(chunks)
        if any(not isinstance(o, RaftlogError) for o in outcomes):
            self.after_leader_append(p)
        for outcome, wait in zip(outcomes, waits, strict=True):
            if wait is None:
                continue
            if isinstance(outcome, RaftlogError):
                wait[1](outcome)
            else:
                self.wait_for_commit(p, outcome.last_offset, wait[0], wait[1])
        return outcomes

    def after_leader_append(self, p: Partition) -> None:
        """The leader's log grew: wake followers, maybe commit (a single-replica ISR)."""
        now = self.clock_ms()
        p.wake(p.follower_waiters)
        core = p.core
        sessions = self.fetch_sessions
        for replica_id in core.followers:
            session = sessions.of_replica(replica_id)
            if session is None:
                continue
            sp = session.partitions.get(p.tp)
            if sp is None:
                continue
            # Idle partitions of a session are not named in its requests: the follower was at
            # the log end as of its last request (that request would have answered this
            # partition otherwise). Tell the core before the append is judged (the lag rule).
            core.on_follower_idle(replica_id, sp.fetch_offset, session.last_request_ms)
            session.touched.add(p.tp)
            waiter = self._session_waiters.get(session.id)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        if p.fsync_policy:
            self.schedule_flush(p)
        self._perform(p, core.on_leader_append(now), now)
        self._hot.add(p.tp)

    def wait_for_commit(
        self, p: Partition, last_offset: int, timeout_ms: int, done: CommitCallback
    ) -> None:
        now = self.clock_ms()
        self._perform(p, p.core.wait_for_commit(last_offset, now + timeout_ms, done, now), now)
        self._hot.add(p.tp)

    def _touch_sessions(self, p: Partition, replicas: Iterable[int] | None = None) -> None:
        """Mark `p` in the fetch sessions of its replicas: their next request looks at it."""
        sessions = self.fetch_sessions
        for replica_id in p.core.replicas if replicas is None else replicas:
            session = sessions.of_replica(replica_id)
            if session is not None and p.tp in session.partitions:
                session.touched.add(p.tp)

    def add_session_waiter(self, session: LeaderSession, fut: asyncio.Future[None]) -> None:
        """A long-polling fetch of `session` waits: an append to any of its partitions wakes
        it (one waiter per session instead of one per partition)."""
        self._session_waiters[session.id] = fut

    def remove_session_waiter(self, session: LeaderSession, fut: asyncio.Future[None]) -> None:
        if self._session_waiters.get(session.id) is fut:
            del self._session_waiters[session.id]

    # -- leader: fetches -------------------------------------------------------------------------

    def read_as_leader(
        self,
        p: Partition,
        offset: int,
        max_bytes: int,
        follower: bool,
        leader_epoch: int,
        room: int,
        first: bool,
    ) -> PartitionRead:
        """A fetch's read of `p`, led here, from `offset`, of at most `max_bytes` and `room`
        (what is left of the response's max_bytes): a follower reads up to the log end, a
        consumer up to the high watermark once its leader epoch passes KIP-320's check
        (raises the error to answer). The response's `first` data gets at least one whole
        batch whatever its size (readers always progress); later data that does not fit
        `room` is not read now (`deferred`). The one way a fetch reads a leader's log, for
        any protocol's handler."""
        limit = p.log.log_end_offset if follower else self.consumer_fetch(p, leader_epoch)
        hw, start = p.core.high_watermark, p.log.log_start_offset
        if not first and room <= 0:
            return PartitionRead(hw, start, EMPTY_SLICE, limit > offset)
        data = p.log.read_slice(offset, min(max_bytes, room), max_offset=limit)
        if not first and data.size > room:
            return PartitionRead(hw, start, EMPTY_SLICE, True)
        return PartitionRead(hw, start, data)

    @staticmethod
    def consumer_fetch(p: Partition, current_leader_epoch: int) -> int:
        """The offset a consumer's read of `p` (led here) must stop at; raises what to answer
        (a fenced or unknown leader epoch, KIP-320)."""
        answer = p.core.on_consumer_fetch(current_leader_epoch)
        if answer.error is not None:
            raise answer.error
        return answer.max_offset

    def follower_fetch(
        self, tp: TopicPartition, replica_id: int, broker_epoch: int, fetch: FollowerFetch
    ) -> tuple[Partition, FetchAnswer]:
        p = self.leader(tp)
        now = self.clock_ms()
        answer, actions = p.core.on_follower_fetch(replica_id, broker_epoch, fetch, now)
        self._perform(p, actions, now)
        if actions:
            self._hot.add(tp)
        if answer.out_of_range:
            raise OffsetOutOfRangeError(
                f"{tp}: follower {replica_id} fetches at {fetch.fetch_offset}, outside "
                f"[{p.log.log_start_offset}, {p.log.log_end_offset}]",
                p.log.log_start_offset,
                p.log.log_end_offset,
            )
        if answer.error is not None:
            raise answer.error
        return p, answer

    # -- follower: fetch answers -----------------------------------------------------------------

    async def connect(self, node_id: int) -> Any:
        """A connection to broker `node_id` (the replica fetchers')."""
        return await self._connect(node_id)

    def broker_epoch(self) -> int | None:
        return self._broker_epoch()

    def on_fetch_answer(
        self,
        p: Partition,
        spec: FollowerFetch,
        error: RaftlogError | None,
        diverging: tuple[int, int] | None,
        high_watermark: int,
        log_start_offset: int,
        data: memoryview | None,
    ) -> bool:
        """Apply one partition of a fetch answer; True if the log changed."""
        now = self.clock_ms()
        core = p.core
        out_of_range = isinstance(error, OffsetOutOfRangeError)
        end_before = p.log.log_end_offset
        actions = core.on_fetch_response(
            spec,
            None if out_of_range else error,
            diverging,
            high_watermark,
            log_start_offset,
            data,
            out_of_range,
        )
        try:
            self._perform(p, actions, now)
        except (CorruptRecordError, InvalidOffsetError) as e:
            # The leader sent bytes that do not continue our log: drop them and fetch again.
            log.warning("%s: fetched data rejected: %s", p.tp, e)
            self._back_off_fetch(p, now)
            return False
        except StorageError as e:
            # Logged on the first failure and then once per backoff, which doubles.
            log.error(
                "%s: appending fetched data failed (%d in a row): %s",
                p.tp,
                p.append_failures + 1,
                e,
            )
            self._back_off_fetch(p, now)
            return False
        p.append_failures = 0
        if core.role is Role.FOLLOWER and (error is None or out_of_range):
            self._perform(p, core.after_follower_write(now), now)
        return p.log.log_end_offset != end_before or bool(actions)

    def _back_off_fetch(self, p: Partition, now: int) -> None:
        """Leave `p` out of fetches for a backoff that doubles with each failure in a row."""
        cfg = self.config
        delay_ms = min(
            cfg.replica_fetch_backoff_ms << min(p.append_failures, 16),
            max(cfg.replica_append_backoff_ms_max, cfg.replica_fetch_backoff_ms),
        )
        p.append_failures += 1
        p.fetch_backoff_until_ms = now + delay_ms

    # -- durability (fsync policy) ---------------------------------------------------------------

    def schedule_flush(self, p: Partition) -> None:
        """fsync what was appended, on the fsync thread; again afterwards if more came."""
        if p.flushing:
            p.flush_again = True
            return
        p.flushing = True
        p.flush_done = asyncio.get_running_loop().create_future()
        self._spawn(self._flush(p), f"flush of {p.tp}")

    async def _flush(self, p: Partition) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                p.flush_again = False
                fds, offset, token = p.log.flush_begin()
                try:
                    await loop.run_in_executor(_FSYNC_EXECUTOR, _fdatasync_all, fds)
                finally:
                    for fd in fds:
                        os.close(fd)
                durable = p.log.flush_end(offset, token)
                now = self.clock_ms()
                if self.partitions.get(p.tp) is p:
                    self._perform(p, p.core.on_durable(durable, now), now)
                    self._fetch_state_changed(p)
                if not p.flush_again:
                    return
        except OSError as e:
            with contextlib.suppress(RaftlogError):
                p.log.flush_failed(e)
        except RaftlogError as e:
            log.error("%s: fsync for the fsync durability policy failed: %s", p.tp, e)
        finally:
            p.flushing = False
            done, p.flush_done = p.flush_done, None
            if done is not None and not done.done():
                done.set_result(None)

    async def wait_durable(self, p: Partition) -> None:
        while p.flushing and p.flush_done is not None:
            await asyncio.shield(p.flush_done)


def _fdatasync_all(fds: list[int]) -> None:
    for fd in fds:
        os.fdatasync(fd)


# Partition, ReplicationConfig, CommitCallback and ReplicaFetcher are re-exported: they lived
# here before partition.py and fetcher.py.
__all__ = [
    "CommitCallback",
    "Partition",
    "ReplicaFetcher",
    "ReplicaManager",
    "ReplicationConfig",
]
