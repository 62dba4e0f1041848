"""`AsyncConsumer`: a consumer for asyncio code, with Kafka's options (`Consumer`, the
synchronous one, runs it on a thread: sync_consumer.py).

A consumer owns its position per partition (brokers keep no consumer state, as in the paper):
`poll` returns records from the position on and advances it; `seek`, `seek_to_beginning` and
`seek_to_end` rewind or skip, so replay is one call. One Fetch request per broker covers all of
that broker's assigned partitions and long-polls (`fetch_min_bytes`, `fetch_max_wait_ms`).
Batch checksums are verified on receipt (`check_crcs`), so a corrupted byte anywhere between the
producer and here is an error, not a wrong record. A batch that fails its checks (or whose
records do not decode: the broker never decodes records) stops only its own partition: the
other partitions' records keep coming, and the next `poll` with nothing buffered raises the
CorruptRecordError naming the partition and offset; the position stays there until the caller
seeks past it (Kafka does the same).

A position is the offset of the next record to read, not always an offset that holds one: a
compacted log has gaps (whole batches gone, cleaned v2 batches with holes or no records). A
poll that hands out a batch's last fetched record moves the position to the batch's next
offset, past any compacted offsets after the record; a fetch whose batches hold no record
moves it past them at once (fetched.py), so the consumer never fetches the same gap twice.
`seek` may name any offset, in a gap or not: the next fetch starts at the first batch that
ends past it. Committed offsets are positions, so they may point into a gap too.

Positions start from `auto_offset_reset` ("latest", "earliest", or "none" to raise) when none
was set, and are reset the same way if the broker says the position is out of range (retention
deleted it). With a `group_id` the group coordinator assigns partitions and keeps committed
offsets (group.py).

Rebalances (with a `group_id`) follow Kafka's eager protocol, so that a partition is never
consumed by two members: when a heartbeat says the group rebalances, the next poll hands out
no more records of the current assignment (fetched ones not yet returned are dropped: the
positions point before them, so the next owner reads them, and none is processed twice),
commits the positions if auto-commit is on (accepted: the generation stands until every member
has rejoined), calls `on_partitions_revoked` with the whole assignment (a manual-commit
application commits there) and joins again. The join runs on between polls (poll returns {}
meanwhile) and is answered once the rebalance completes; then partitions kept from the
generation right before continue from their positions, the others from the group's committed
offsets, and `on_partitions_assigned` gets the new assignment.

Failures: `poll` retries retriable errors itself (a broker that is down, a partition without a
leader, a coordinator that moved), with `retry_backoff_ms` between tries, and returns what it
has when the caller's timeout ends; one partition whose leader is down does not hold up the
others. A rebalance's join runs on between polls (a poll waits for it no longer than its own
timeout) and auto-commits are asynchronous, so a coordinator that is away never blocks `poll`
past its timeout either (a commit before rejoining does wait, up to request_timeout_ms). Only
non-retriable errors reach the caller.

`Consumer` (sync_consumer.py) runs the same code on an event loop in a background thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from raftlog import protocol
from raftlog.client.cluster import ClusterClient
from raftlog.client.fetched import ConsumerRecord, FetchBuffer
from raftlog.client.group import GroupMembership
from raftlog.errors import (
    CommitFailedError,
    CorruptRecordError,
    IllegalGenerationError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    RaftlogError,
    UnknownMemberIdError,
    error_from_code,
)
from raftlog.invariants import InvariantError
from raftlog.messages.fetch import FetchPartition, FetchRequest, FetchResponse
from raftlog.tasks import TaskSet
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092"
    client_id: str = "raftlog-consumer"
    group_id: str | None = None
    auto_offset_reset: str = "latest"
    max_poll_records: int = 500
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 50 * 1024 * 1024
    max_partition_fetch_bytes: int = 1024 * 1024
    check_crcs: bool = True
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    # Groups (with group_id): positions are committed to the group and restored from it.
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    # A member silent this long is removed and its partitions reassigned (Kafka: 45 s; a
    # local cluster wants faster recovery).
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1000
    max_poll_interval_ms: int = 300_000
    group_instance_id: str | None = None
    # Without a group_id, a subscription's topics are looked up again this often, and the
    # partitions a topic grew by since are read from their start (Kafka's
    # metadata.max.age.ms). A group learns of them by a rebalance instead.
    metadata_max_age_ms: int = 300_000
    # Assignors in preference order; the group uses the first one every member offers.
    partition_assignment_strategy: tuple[str, ...] = ("range", "sticky", "roundrobin")
    # Rebalance listener (Kafka's ConsumerRebalanceListener, eager protocol), called inside
    # poll() (and close()) in the caller's thread: on_partitions_revoked with every partition
    # this member owns, before it rejoins (positions are still in place: a manual-commit
    # application commits here); on_partitions_assigned with every partition of the new
    # assignment. An AsyncConsumer also awaits what a callback returns, if it is awaitable.
    on_partitions_revoked: Callable[[set[TopicPartition]], Any] | None = None
    on_partitions_assigned: Callable[[set[TopicPartition]], Any] | None = None

    def __post_init__(self) -> None:
        if self.auto_offset_reset not in ("latest", "earliest", "none"):
            raise InvalidConfigError(
                f"auto_offset_reset={self.auto_offset_reset!r}: must be latest, earliest or none"
            )
        if self.group_id is not None and not self.group_id:
            raise InvalidConfigError("group_id must not be empty")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise InvalidConfigError(
                f"heartbeat_interval_ms={self.heartbeat_interval_ms} must be below "
                f"session_timeout_ms={self.session_timeout_ms}"
            )
        for name in (
            "max_poll_records",
            "fetch_max_bytes",
            "max_partition_fetch_bytes",
            "metadata_max_age_ms",
        ):
            if getattr(self, name) < 1:
                raise InvalidConfigError(f"{name}={getattr(self, name)}: must be >= 1")
        for name in ("fetch_min_bytes", "fetch_max_wait_ms"):
            if getattr(self, name) < 0:
                raise InvalidConfigError(f"{name}={getattr(self, name)}: must be >= 0")


class AsyncConsumer:
    def __init__(self, *topics: str, **options: Any):
        self.config = ConsumerConfig(**options)
        self.client = ClusterClient(
            self.config.bootstrap_servers, self.config.client_id, self.config.request_timeout_ms
        )
        self._subscription = list(topics)
        # Invariant: every assigned partition has an entry; None = reset by policy first.
        self._positions: dict[TopicPartition, int | None] = {}
        self._paused: set[TopicPartition] = set()
        # Fetched records not yet returned by poll: runs of one partition's records (one per
        # batch, with the position after it), never empty, so poll and seek work per run, not
        # per record. Fetches happen only while it is empty (_poll_once), so no fetch of a
        # partition overtakes its buffered runs.
        self._buffer = FetchBuffer()
        # Which assigned partition leads the next fetch (see _fetch).
        self._fetch_rotation = 0
        # A partition's error found by a fetch (a corrupt batch), raised by the next poll that
        # has no buffered records left; the partition is not fetched until then.
        self._partition_errors: dict[TopicPartition, RaftlogError] = {}
        self._started = False
        # Without a group: whether the assignment is the subscription's whole topics (then
        # `_follow_growth` adds the partitions they grow by), and when it next looks.
        self._whole_topics = False
        self._metadata_due = 0.0
        cfg = self.config
        self._group: GroupMembership | None = None
        if cfg.group_id is not None:
            self._group = GroupMembership(
                self.client,
                cfg.group_id,
                cfg.client_id,
                cfg.group_instance_id,
                cfg.session_timeout_ms,
                cfg.max_poll_interval_ms,
                cfg.partition_assignment_strategy,
                cfg.request_timeout_ms,
            )
        # A rebalance: set when this member must give up its partitions and join again (a
        # heartbeat said so, a commit was refused, the subscription changed); cleared when
        # the join starts, set again if it fails.
        self._needs_rejoin = False
        # A join in progress (see _wait_rebalance), and the auto-commit in progress.
        self._join_task: asyncio.Task[list[TopicPartition]] | None = None
        # What this member gave up when it last revoked (see _revoke), until its join completes.
        self._revoked: _Revoked | None = None
        # How rebalance listener callbacks run: inline here; the sync Consumer runs them in
        # its caller's thread, so that they may call the consumer.
        self._run_listener: Callable[[Listener, set[TopicPartition]], Awaitable[None]] = (
            _run_listener_inline
        )
        # The first exception a listener callback raised, raised by poll once the rebalance
        # step it interrupted is done (Kafka does the same).
        self._listener_error: Exception | None = None
        self._auto_commit_task: asyncio.Task[None] | None = None
        # Assigned partitions whose committed offsets are not known yet (the coordinator did
        # not answer): they are not fetched, nor reset by policy, until they are.
        self._need_committed: set[TopicPartition] = set()
        # Auto-commits, asynchronous commits and the heartbeat loop.
        self._tasks = TaskSet("consumer")
        self._commit_tasks: set[asyncio.Task[None]] = set()
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._next_auto_commit = 0.0

    async def start(self) -> None:
        await self.client.any_connection()
        if self._subscription:
            await self.subscribe(self._subscription)
        self._started = True

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- assignment and positions --------------------------------------------------------------

    async def subscribe(self, topics: Sequence[str]) -> None:
        """Consume these topics: with a group_id, the partitions the group assigns to this
        member (rebalanced as members come and go); without one, every partition.

        With a group_id the join starts here and runs on in the background (it may wait for
        the group's other members to rejoin); poll waits for it within its timeout, and
        `assignment()` is empty until it has completed."""
        self._subscription = list(topics)
        if self._group is not None:
            if self._positions or self._join_task is not None or self._group.member_id:
                self._needs_rejoin = True  # the next poll gives the partitions up and rejoins
            else:
                # The first join starts now and runs on between polls (it may wait for the
                # group's other members to rejoin); poll waits for it within its timeout.
                self._start_join()
            if self._heartbeat_task is None:
                self._heartbeat_task = self._tasks.spawn(self._heartbeat_loop(), "heartbeats")
            return
        tps: list[TopicPartition] = []
        for t in topics:
            info = await self.client.topic(t)
            tps.extend(TopicPartition(t, p.partition) for p in info.partitions)
        self.assign(tps)
        self._whole_topics = True
        self._metadata_due = time.monotonic() + self.config.metadata_max_age_ms / 1000

    async def _follow_growth(self) -> None:
        """Without a group: assign the partitions the subscribed topics grew by, from offset
        0 (every record in them was written after this consumer subscribed, or is as new)."""
        self._metadata_due = time.monotonic() + self.config.metadata_max_age_ms / 1000
        await self.client.refresh_metadata(self._subscription)
        added = []
        for t in self._subscription:
            info = self.client.topics.get(t)
            for p in () if info is None else info.partitions:
                tp = TopicPartition(t, p.partition)
                if tp not in self._positions:
                    self._positions[tp] = 0
                    added.append(tp)
        if added:
            log.info("subscribed topics grew: reading %s from offset 0", ", ".join(map(str, added)))

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        self._whole_topics = False
        tps = [TopicPartition(*tp) for tp in partitions]
        self._positions = {tp: self._positions.get(tp) for tp in tps}
        self._paused &= set(tps)
        self._need_committed &= set(tps)
        self._forget_errors()
        self._drop_buffered(lambda tp: tp not in self._positions)

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def subscription(self) -> list[str]:
        return list(self._subscription)

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        tp = TopicPartition(*tp)
        self._check_assigned(tp)
        if offset < 0:
            raise InvalidConfigError(f"seek({tp}, {offset}): offset must be >= 0")
        self._positions[tp] = offset
        self._partition_errors.pop(tp, None)  # the caller moved past it
        self._need_committed.discard(tp)
        self._drop_buffered(lambda buffered: buffered == tp)

    async def seek_to_beginning(self, *tps: TopicPartition | tuple[str, int]) -> None:
        await self._seek_to(protocol.EARLIEST_TIMESTAMP, tps)

    async def seek_to_end(self, *tps: TopicPartition | tuple[str, int]) -> None:
        await self._seek_to(protocol.LATEST_TIMESTAMP, tps)

    async def _seek_to(
        self, timestamp: int, tps: Sequence[TopicPartition | tuple[str, int]]
    ) -> None:
        targets = [TopicPartition(*tp) for tp in tps] or list(self._positions)
        for tp in targets:
            self._check_assigned(tp)
        offsets = await self.list_offsets({tp: timestamp for tp in targets})
        for tp, (offset, _) in offsets.items():
            self.seek(tp, offset)

    async def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        tp = TopicPartition(*tp)
        self._check_assigned(tp)
        if tp in self._need_committed:
            await self._load_committed()
        pos = self._positions[tp]
        if pos is None:
            await self._reset_positions([tp])
            pos = self._positions[tp]
            if pos is None:
                raise InvariantError("pos is None")
        return pos

    def pause(self, *tps: TopicPartition | tuple[str, int]) -> None:
        for tp in tps:
            tp = TopicPartition(*tp)
            self._check_assigned(tp)
            self._paused.add(tp)
        self._drop_buffered(lambda tp: tp in self._paused)

    def resume(self, *tps: TopicPartition | tuple[str, int]) -> None:
        for tp in tps:
            self._paused.discard(TopicPartition(*tp))

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def _forget_errors(self) -> None:
        """Pending partition errors of partitions no longer assigned go with them."""
        for tp in [tp for tp in self._partition_errors if tp not in self._positions]:
            del self._partition_errors[tp]

    def _check_assigned(self, tp: TopicPartition) -> None:
        if tp not in self._positions:
            raise InvalidConfigError(f"partition {tp} is not assigned to this consumer")

    def _drop_buffered(self, pred: Callable[[TopicPartition], bool]) -> None:
        """Forget the buffered runs of partitions matching `pred`; positions already point
        before them."""
        self._buffer.drop(pred)

    # -- offsets -------------------------------------------------------------------------------

    async def list_offsets(
        self, specs: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """{tp: -2 earliest | -1 latest | timestamp ms} -> {tp: (offset, timestamp)}."""
        return await self.client.list_offsets(specs)

    async def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        res = await self.list_offsets(
            {TopicPartition(*tp): protocol.EARLIEST_TIMESTAMP for tp in tps}
        )
        return {tp: o for tp, (o, _) in res.items()}

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        res = await self.list_offsets(
            {TopicPartition(*tp): protocol.LATEST_TIMESTAMP for tp in tps}
        )
        return {tp: o for tp, (o, _) in res.items()}

    async def _reset_positions(self, tps: Sequence[TopicPartition], partial: bool = False) -> None:
        """Positions from `auto_offset_reset`; `partial`: partitions whose offsets cannot be
        had now (retriable: no leader, leader down) keep no position, the others get theirs."""
        policy = self.config.auto_offset_reset
        if policy == "none":
            raise OffsetOutOfRangeError(
                f"no position for {', '.join(map(str, tps))} and auto_offset_reset='none'"
            )
        ts = protocol.EARLIEST_TIMESTAMP if policy == "earliest" else protocol.LATEST_TIMESTAMP
        if partial:
            offsets, failed = await self.client.list_offsets_partial({tp: ts for tp in tps})
            for tp, error in failed.items():
                log.debug("no %s offset for %s yet: %s", policy, tp, error)
        else:
            offsets = await self.list_offsets({tp: ts for tp in tps})
        for tp, (offset, _) in offsets.items():
            if tp in self._positions:
                self._positions[tp] = offset

    # -- fetching ------------------------------------------------------------------------------

    async def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records from the current positions, at most `max_records` (max_poll_records).

        Waits up to `timeout_ms` for data; returns {} when none came. Retriable errors are
        retried inside (with `retry_backoff_ms` between tries) until `timeout_ms`; only
        non-retriable ones are raised.
        """
        limit = max_records or self.config.max_poll_records
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        while True:
            try:
                return await self._poll_once(limit, deadline)
            except RaftlogError as e:
                if not e.retriable:
                    raise
                # As Kafka's consumer: a broker that is down, a partition without a leader,
                # a coordinator that moved are retried here with a backoff, never thrown at
                # the caller, whose own timeout is the only one that ends the poll.
                log.info("poll: %s: %s; retrying", type(e).__name__, e)
                self.client.invalidate()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return self._take(limit)
                await asyncio.sleep(min(self.config.retry_backoff_ms / 1000, remaining))

    async def _poll_once(
        self, limit: int, deadline: float
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        if self._group is not None:
            if not await self._wait_rebalance(deadline):
                return {}
            self._maybe_auto_commit()
        elif self._whole_topics and time.monotonic() >= self._metadata_due:
            await self._follow_growth()
        while not self._buffer:
            if self._partition_errors:
                tp = next(iter(self._partition_errors))
                raise self._partition_errors.pop(tp)
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            await self._fetch(max(remaining_ms, 0))
            if self._buffer or time.monotonic() >= deadline:
                break
        return self._take(limit)

    def _take(self, limit: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to `limit` buffered records, advancing the positions past them (to a run's
        next offset when it is handed out whole: past the offsets compaction left empty)."""
        out, positions = self._buffer.take(limit)
        self._positions.update(positions)
        return out

    async def getone(self) -> ConsumerRecord:
        """Block until one record is available and return it (a never-ending stream's step)."""
        while True:
            batch = await self.poll(self.config.fetch_max_wait_ms, max_records=1)
            for records in batch.values():
                return records[0]

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        return await self.getone()

    async def _fetch(self, max_wait_ms: int) -> None:
        errors = self._partition_errors
        active = [tp for tp in self._positions if tp not in self._paused and tp not in errors]
        if not active:
            if max_wait_ms:
                await asyncio.sleep(min(max_wait_ms, self.config.fetch_max_wait_ms) / 1000)
            return
        # The broker fills a fetch response in request order until fetch_max_bytes is used up,
        # so a fixed order would starve the partitions behind a busy one: rotate which
        # partition comes first on every fetch (Kafka's KIP-74 does the same).
        k = self._fetch_rotation % len(active)
        self._fetch_rotation += 1
        active = active[k:] + active[:k]
        if self._need_committed:
            try:
                await self._load_committed()
            except RaftlogError as e:
                if not e.retriable:
                    raise
                log.info("committed offsets not known yet (%s); retrying", e)
            active = [tp for tp in active if tp not in self._need_committed]
        unknown = [tp for tp in active if self._positions[tp] is None]
        if unknown:
            # Partitions whose leader is down stay unknown this round; the others go on.
            await self._reset_positions(unknown, partial=True)
            active = [tp for tp in active if self._positions[tp] is not None]
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in active:
            try:
                await self.client.topic(tp.topic)
                by_node.setdefault(self.client.leader_for(tp), []).append(tp)
            except RaftlogError as e:
                log.debug("no leader for %s yet: %s", tp, e)
                self.client.invalidate(tp.topic)
        if not by_node:
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            return
        wait = min(max_wait_ms, self.config.fetch_max_wait_ms)
        results = await asyncio.gather(
            *(self._fetch_from(node, tps, wait) for node, tps in by_node.items()),
            return_exceptions=True,
        )
        for r in results:
            if isinstance(r, RaftlogError) and r.retriable:
                log.debug("fetch failed, will retry: %s", r)
                self.client.invalidate()
            elif isinstance(r, BaseException):
                raise r

    async def _fetch_from(self, node: int, tps: list[TopicPartition], max_wait_ms: int) -> None:
        wanted: dict[TopicPartition, FetchPartition] = {}
        for tp in tps:
            pos = self._positions[tp]
            if pos is None:
                raise InvariantError("pos is None")
            # The leader epoch this consumer believes in: a deposed leader answers
            # FencedLeaderEpoch, one that has not caught up UnknownLeaderEpoch (KIP-320); both
            # are retriable, with fresh metadata.
            info = self.client.topics.get(tp.topic)
            epoch = (
                info.partitions[tp.partition].leader_epoch
                if info is not None and tp.partition < len(info.partitions)
                else -1
            )
            wanted[tp] = FetchPartition(
                tp.partition, pos, self.config.max_partition_fetch_bytes, epoch
            )
        requested = {tp: self._positions[tp] for tp in tps}
        request = FetchRequest.of(
            wanted,
            max_wait_ms=max_wait_ms,
            min_bytes=self.config.fetch_min_bytes,
            max_bytes=self.config.fetch_max_bytes,
        )
        body, payload = await self.client.request(node, protocol.ApiKey.FETCH, request.to_body())
        pos = 0
        reset: list[TopicPartition] = []
        for tp, r in FetchResponse.from_body(body).results():
            nbytes = r.nbytes
            chunk = payload[pos : pos + nbytes]
            pos += nbytes
            if tp not in self._positions or self._positions[tp] != requested.get(tp):
                continue  # reassigned or sought while the fetch was in flight
            if r.error:
                err = error_from_code(r.error, r.message or "")
                if (
                    isinstance(err, OffsetOutOfRangeError)
                    and self.config.auto_offset_reset != "none"
                ):
                    log.warning("%s; resetting to %s", err, self.config.auto_offset_reset)
                    reset.append(tp)
                    continue
                if err.retriable:
                    self.client.invalidate(tp.topic)
                    continue
                raise err
            if nbytes:
                try:
                    skip_to = self._buffer.add(
                        tp, chunk, requested[tp] or 0, self.config.check_crcs
                    )
                    if skip_to is not None:
                        # Batches without a record for us (compacted away, empty, markers):
                        # nothing of this partition is buffered (fetches happen only when
                        # the buffer is empty), so the position moves past them now.
                        self._positions[tp] = skip_to
                except CorruptRecordError as e:
                    # This partition stops here (its records before the bad batch are
                    # buffered); the others go on. poll raises the error once the records
                    # fetched before it are returned, and fetches the partition again only
                    # after that.
                    log.error("%s", e)
                    self._partition_errors[tp] = e
        if reset:
            await self._reset_positions(reset)

    # -- groups --------------------------------------------------------------------------------

    async def _wait_rebalance(self, deadline: float) -> bool:
        """Take part in a rebalance; False while this member's join is still under way (poll
        hands out nothing meanwhile), True when there is none or it has completed.

        A rebalance this member learns of (`_needs_rejoin`) goes in three steps, as Kafka's
        eager protocol: revoke (`_revoke`: no more records of the old assignment, positions
        committed, the listener told), join (a task that runs on between polls: the
        coordinator answers once every member has rejoined, and a join answered late is not
        sent again, which would make a second member), assign (`_assign`). A failed join
        leaves the rejoin due: the next poll tries again (poll retries retriable errors).
        """
        if self._needs_rejoin and self._join_task is None:
            await self._revoke()
            self._start_join()
            self._raise_listener_error()
        task = self._join_task
        if task is None:
            return True
        remaining = max(deadline - time.monotonic(), 0)
        finished, _ = await asyncio.wait({task}, timeout=remaining)
        if not finished:
            return False
        self._join_task = None
        await self._assign(task.result())
        self._raise_listener_error()
        return True

    def _start_join(self) -> None:
        self._needs_rejoin = False
        self._join_task = asyncio.ensure_future(self._join())

    async def _join(self) -> list[TopicPartition]:
        group = self._group
        if group is None:
            raise InvariantError("group is None")
        try:
            return await group.join(self._subscription)
        except BaseException:
            self._needs_rejoin = True
            raise

    async def _revoke(self) -> None:
        """Give up every partition before joining again (Kafka's eager rebalance).

        Records fetched but not yet returned by poll are dropped (the positions point before
        them, so whoever owns the partition next reads them: none is handed out twice);
        commits on their way land first; with auto-commit the positions are committed
        (accepted: the group's generation stands until every member has rejoined); then
        `on_partitions_revoked` gets every owned partition, positions still in place, so a
        manual-commit application commits there. The positions are kept aside (`_revoked`):
        a partition this member gets back in the very next generation continues from them.
        """
        group = self._group
        if group is None:
            raise InvariantError("group is None")
        self._buffer.clear()
        self._partition_errors.clear()
        if self._commit_tasks:
            await asyncio.gather(*self._commit_tasks, return_exceptions=True)
        owned = set(self._positions)
        if owned:
            if self.config.enable_auto_commit:
                try:
                    await self.commit()
                except RaftlogError as e:
                    log.info(
                        "group %s: member %s (generation %d): commit before rejoining refused: %s",
                        group.group_id,
                        group.member_id,
                        group.generation,
                        e,
                    )
            await self._call_listener(self.config.on_partitions_revoked, owned)
        if owned or self._revoked is None:
            self._revoked = _Revoked(
                group.member_id, group.generation, dict(self._positions), set(self._paused)
            )
        self._positions = {}
        self._paused = set()
        self._need_committed = set()

    async def _assign(self, partitions: list[TopicPartition]) -> None:
        """The join completed: these are this member's partitions now.

        A partition this member owned in the generation right before keeps its position (no
        other member can have owned it in between: there was no generation in between);
        every other one starts from the group's committed offset, fetched now or, if the
        coordinator cannot answer yet, before it is first fetched (none committed:
        `auto_offset_reset`). Then `on_partitions_assigned` gets the whole assignment."""
        group = self._group
        if group is None:
            raise InvariantError("group is None")
        revoked, self._revoked = self._revoked, None
        new = set(partitions)
        kept: dict[TopicPartition, int | None] = {}
        if (
            revoked is not None
            and revoked.member_id == group.member_id
            and group.generation in (revoked.generation, revoked.generation + 1)
        ):
            kept = revoked.positions
            self._paused = revoked.paused & new
        self._positions = {tp: kept.get(tp) for tp in sorted(new)}
        self._need_committed = {tp for tp, pos in self._positions.items() if pos is None}
        self._forget_errors()
        try:
            await self._load_committed()
        except RaftlogError as e:
            if not e.retriable:
                raise
            log.info("group %s: committed offsets not known yet (%s)", group.group_id, e)
        await self._call_listener(self.config.on_partitions_assigned, new)

    async def _call_listener(self, callback: Listener | None, tps: set[TopicPartition]) -> None:
        """Run a rebalance listener callback; an exception it raises is logged and kept for
        poll to raise once the rebalance step is done (the rebalance itself goes on)."""
        if callback is None:
            return
        try:
            await self._run_listener(callback, set(tps))
        except Exception as e:
            group_id = self._group.group_id if self._group is not None else None
            log.error("group %s: rebalance listener %r raised %r", group_id, callback, e)
            if self._listener_error is None:
                self._listener_error = e

    def _raise_listener_error(self) -> None:
        error, self._listener_error = self._listener_error, None
        if error is not None:
            raise error

    async def _load_committed(self) -> None:
        """Positions of newly assigned partitions from the group's committed offsets (none
        committed: None, so auto_offset_reset decides)."""
        group = self._group
        if group is None:
            raise InvariantError("group is None")
        self._need_committed &= set(self._positions)
        tps = sorted(self._need_committed)
        if tps:
            committed = await group.committed(tps)
            for tp in tps:
                if tp in self._need_committed and tp in self._positions:
                    self._positions[tp] = committed.get(tp)
            self._need_committed.difference_update(tps)

    async def _heartbeat_loop(self) -> None:
        """Heartbeat every heartbeat_interval_ms, also while a rebalance waits for the next
        poll (the coordinator's RebalanceInProgress answer still counts as a sign of life, so
        an application slow to poll is not expired meanwhile), but not while a join is in
        flight: the coordinator does not expire a member whose join waits, and the join
        holds the group connection."""
        group = self._group
        if group is None:
            raise InvariantError("group is None")
        while True:
            await asyncio.sleep(self.config.heartbeat_interval_ms / 1000)
            if self._join_task is not None and not self._join_task.done():
                continue
            join_before, generation_before = self._join_task, group.generation
            try:
                current = await group.heartbeat()
                # An answer about the generation a join started since has left behind is old
                # news (on the group connection a join's answer comes after it).
                fresh = self._join_task is join_before and group.generation == generation_before
                if not current and fresh:
                    self._needs_rejoin = True
            except RaftlogError as e:
                log.debug("group %s: heartbeat failed: %s", group.group_id, e)

    def _group_work_due(self) -> bool:
        """A rebalance or an auto-commit waits for the next poll."""
        return self._group is not None and (
            self._needs_rejoin
            or self._join_task is not None
            or (self.config.enable_auto_commit and time.monotonic() >= self._next_auto_commit)
        )

    def _maybe_auto_commit(self) -> None:
        """Commit the positions every auto_commit_interval_ms, without waiting (Kafka's
        auto-commit is asynchronous too): a coordinator that is away must not hold up poll.
        One auto-commit at a time, so an older one can never land after a newer one."""
        if not self.config.enable_auto_commit or time.monotonic() < self._next_auto_commit:
            return
        if self._auto_commit_task is not None and not self._auto_commit_task.done():
            return
        if self._needs_rejoin or self._join_task is not None:
            return  # the rejoin commits first, in the generation it leaves
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
        offsets = {tp: o for tp, o in self._positions.items() if o is not None}
        if not offsets:
            return
        task = self._auto_commit_task = self._tasks.spawn(self._auto_commit(offsets), "auto-commit")
        self._commit_tasks.add(task)
        task.add_done_callback(self._commit_tasks.discard)

    async def _auto_commit(self, offsets: dict[TopicPartition, int]) -> None:
        group = self._group
        if group is None:
            raise InvariantError("group is None")
        try:
            await group.commit(offsets)
        except (CommitFailedError, UnknownMemberIdError, IllegalGenerationError) as e:
            log.info("auto-commit refused, rejoining: %s", e)
            self._needs_rejoin = True
        except RaftlogError as e:
            # The coordinator is away (or refused for another reason): the positions stay,
            # and the next interval commits them.
            log.info("auto-commit failed, will try again: %s", e)

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` (default: the current positions) to the group; raises
        CommitFailedError when the group moved on (stale generation, not the owner)."""
        if self._group is None:
            raise InvalidConfigError("commit() needs a group_id")
        if offsets is None:
            offsets = {tp: o for tp, o in self._positions.items() if o is not None}
        try:
            await self._group.commit(offsets)
        except (CommitFailedError, UnknownMemberIdError, IllegalGenerationError):
            self._needs_rejoin = True  # this member's generation is over: the next poll rejoins
            raise

    def commit_async(
        self,
        offsets: dict[TopicPartition, int] | None = None,
        callback: Callable[[dict[TopicPartition, int], BaseException | None], Any] | None = None,
    ) -> asyncio.Task[None]:
        """Commit without waiting; `callback(offsets, error)` runs when the answer comes."""
        if self._group is None:
            raise InvalidConfigError("commit_async() needs a group_id")
        if offsets is None:
            offsets = {tp: o for tp, o in self._positions.items() if o is not None}
        chosen = dict(offsets)

        async def go() -> None:
            error: BaseException | None = None
            try:
                await self.commit(chosen)
            except RaftlogError as e:
                error = e
                log.info("asynchronous commit refused: %s", e)
            if callback is not None:
                callback(chosen, error)

        task = self._tasks.spawn(go(), "asynchronous commit")
        self._commit_tasks.add(task)
        task.add_done_callback(self._commit_tasks.discard)
        return task

    async def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets for these partitions (absent: none committed)."""
        if self._group is None:
            raise InvalidConfigError("committed() needs a group_id")
        return await self._group.committed([TopicPartition(*tp) for tp in tps])

    async def close(self) -> None:
        """Commit (with auto-commit), leave the group (so it rebalances at once), close."""
        if self._join_task is not None:
            self._join_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, RaftlogError):
                await self._join_task
            self._join_task = None
        if self._commit_tasks:
            await asyncio.gather(*self._commit_tasks, return_exceptions=True)
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat_task
            self._heartbeat_task = None
        group = self._group
        if group is not None and group.member_id:
            owned = set(self._positions)
            if owned:
                try:
                    if self.config.enable_auto_commit:
                        await self.commit()
                except RaftlogError as e:
                    log.info("final commit refused: %s", e)
                # As Kafka's close: the listener may commit what the application processed.
                await self._call_listener(self.config.on_partitions_revoked, owned)
            try:
                await group.leave()
            except RaftlogError as e:
                log.info("leaving group %s failed: %s", group.group_id, e)
        if group is not None:
            await group.close()
        await self.client.close()
        self._raise_listener_error()


Listener = Callable[[set[TopicPartition]], Any]


async def _run_listener_inline(callback: Listener, tps: set[TopicPartition]) -> None:
    result = callback(tps)
    if inspect.isawaitable(result):
        await result


@dataclass(frozen=True, slots=True)
class _Revoked:
    """What a member gave up before joining again: its id and generation then, its positions
    and paused partitions (see AsyncConsumer._assign)."""

    member_id: str
    generation: int
    positions: dict[TopicPartition, int | None]
    paused: set[TopicPartition]
