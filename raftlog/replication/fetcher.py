"""`ReplicaFetcher`: a follower's loop that pulls every partition it follows from one leader.

One Fetch request at a time (many partitions per request, long-polling), like a consumer,
within an incremental fetch session (fetch_session.py): a request names only the partitions
whose fetch state changed since the leader last heard it, and those it stopped following.
Each partition of an answer goes to the host's `on_fetch_answer` (the follower's apply); a
partition whose fetched data could not be appended is left out of the fetches while it backs
off; a fetch answer is waited for at most `fetch_response_timeout_ms`, then the connection is
dropped. The partitions this broker is adding in a reassignment ask for smaller fetches and
wait whenever the replication throttle (throttle.py) is in debt; the bytes fetched for them
are counted against it.

Rules: the fetcher only reads partitions and asks its host (the ReplicaManager, through
`FetcherHost`) to apply what it fetched; it never writes a log itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from raftlog import protocol
from raftlog.errors import (
    FetchSessionIdNotFoundError,
    InvalidFetchSessionEpochError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RaftlogError,
    RaftlogTimeoutError,
    error_from_code,
)
from raftlog.messages.fetch import FetchPartition, FetchRequest, FetchResponse
from raftlog.replication.core import FollowerFetch, Role
from raftlog.replication.fetch_session import FetchState, FollowerSession, SessionRequest
from raftlog.replication.partition import Partition, ReplicationConfig
from raftlog.replication.throttle import ReplicationThrottle
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

# How often a follower checks that its fetch session holds every partition's current state
# (a missed change would leave a partition unfetched): a pass over every followed partition.
FETCH_SESSION_VERIFY_MS = 60_000


class FetcherHost(Protocol):
    """What a fetcher needs of the ReplicaManager that runs it."""

    @property
    def config(self) -> ReplicationConfig: ...

    @property
    def node_id(self) -> int: ...

    @property
    def partitions(self) -> dict[TopicPartition, Partition]: ...

    @property
    def throttle(self) -> ReplicationThrottle:
        """The replication throttle of the partitions this broker is adding."""
        ...

    def joining(self, p: Partition) -> bool:
        """This broker's replica of `p` joins in a reassignment (the throttle slows it)."""
        ...

    def clock_ms(self) -> int: ...

    def broker_epoch(self) -> int | None:
        """This broker's registered epoch (None before it registered)."""
        ...

    async def connect(self, node_id: int) -> Any:
        """A connection to broker `node_id`'s replication listener."""
        ...

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
        """Apply one partition of a fetch answer (the follower's apply); True if the log
        changed."""
        ...

    async def wait_durable(self, p: Partition) -> None: ...


class ReplicaFetcher:
    """Pulls every partition this broker follows from one leader, one Fetch at a time,
    within an incremental fetch session (fetch_session.py): a request names only the
    partitions whose fetch state changed since the leader last heard it (`changed`), and
    those it stopped following; the answer has only partitions with news."""

    def __init__(self, manager: FetcherHost, leader_id: int):
        self.manager = manager
        self.leader_id = leader_id
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopped = False
        self.session = FollowerSession()
        # The partitions followed from this leader (set by the manager).
        self.followed: dict[TopicPartition, Partition] = {}
        # Partitions whose fetch state may differ from what the leader holds.
        self._changed: set[TopicPartition] = set()
        # The followed set changed since the last request (some may have to be forgotten).
        self._followed_changed = True
        # Partitions left out after failed appends, until the time each may come back.
        self._backing_off: dict[TopicPartition, int] = {}
        self._next_verify_ms = 0

    def start(self, tg: asyncio.TaskGroup) -> None:
        if self._task is None and not self._stopped:
            self._task = tg.create_task(self._run())

    def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()

    def wake(self) -> None:
        self._wake.set()

    def add(self, tp: TopicPartition, p: Partition) -> None:
        """Fetch `tp` from this leader from now on."""
        self.followed[tp] = p
        self._changed.add(tp)
        self._followed_changed = True

    def drop(self, tp: TopicPartition) -> None:
        """Stop fetching `tp` from this leader (forgotten by the next request)."""
        if self.followed.pop(tp, None) is not None:
            self._followed_changed = True

    def changed(self, tp: TopicPartition) -> None:
        self._changed.add(tp)

    async def _run(self) -> None:
        cfg = self.manager.config
        backoff_s = cfg.replica_fetch_backoff_ms / 1000
        while not self._stopped:
            if not self.followed:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                changed = await self._fetch_once()
            except (FetchSessionIdNotFoundError, InvalidFetchSessionEpochError) as e:
                log.info("fetch session with broker %d: %s", self.leader_id, e)
                self.session.reset()
                continue  # at once: the next request opens a new session
            except (RaftlogError, OSError) as e:
                self.session.reset()  # the leader's state is unknown now
                log.info("fetch from broker %d failed: %s; retrying", self.leader_id, e)
                await asyncio.sleep(backoff_s)
                continue
            if not changed:
                # Errors on every partition (e.g. the leader has not applied the new epoch
                # yet), or every one waits for the throttle: do not spin.
                await asyncio.sleep(self._idle_s(backoff_s))

    def _idle_s(self, backoff_s: float) -> float:
        """How long to wait when no partition can be fetched now: the backoff, or less if a
        partition's wait (a throttled one's, typically) ends sooner."""
        if not self._backing_off:
            return backoff_s
        soonest = min(self._backing_off.values()) - self.manager.clock_ms()
        return min(backoff_s, max(soonest, 1) / 1000)

    def _state(self, p: Partition) -> FetchState:
        spec = p.core.fetch_spec()
        max_bytes = self.manager.config.replica_fetch_max_bytes
        if self.manager.joining(p):
            max_bytes = self.manager.throttle.fetch_bytes(max_bytes)
        return (
            spec.fetch_offset,
            max_bytes,
            spec.current_leader_epoch,
            spec.last_fetched_epoch,
            spec.durable_offset,
        )

    def _next_request(self, now: int) -> SessionRequest:
        followed = self.followed
        for tp, until in list(self._backing_off.items()):
            if until <= now or tp not in followed:
                del self._backing_off[tp]
                self._changed.add(tp)
                self._followed_changed = True
        delay_ms = self.manager.throttle.delay_ms(now)
        if delay_ms:
            # The throttle is in debt: the joining replicas wait until it is repaid.
            until = now + delay_ms
            joining = self.manager.joining
            for tp, fp in followed.items():
                if joining(fp) and self._backing_off.get(tp, 0) < until:
                    self._backing_off[tp] = until
                    self._followed_changed = True
        session = self.session
        if session.open and now >= self._next_verify_ms:
            self._verify(now)
        if not session.open:
            tps: Iterable[TopicPartition] = followed
        else:
            tps = self._changed
        states = {
            tp: self._state(p)
            for tp in tps
            if (p := followed.get(tp)) is not None
            and tp not in self._backing_off
            and p.core.role is Role.FOLLOWER
        }
        current = (
            [tp for tp in followed if tp not in self._backing_off]
            if self._followed_changed
            else None
        )
        self._changed = set()
        self._followed_changed = False
        return session.request(states, current)

    def _verify(self, now: int) -> None:
        """Every FETCH_SESSION_VERIFY_MS: the leader must hold every followed partition's
        current state. A difference is a missed change (a bug): logged, and sent."""
        self._next_verify_ms = now + FETCH_SESSION_VERIFY_MS
        held = self.session.held
        missed = [
            tp
            for tp, p in self.followed.items()
            if tp not in self._backing_off
            and tp not in self._changed
            and p.core.role is Role.FOLLOWER
            and held.get(tp) != self._state(p)
        ]
        if missed:
            log.error(
                "fetch session with broker %d was out of step for %d partitions (%s): a "
                "missed change, sending them now",
                self.leader_id,
                len(missed),
                ", ".join(str(tp) for tp in missed[:5]),
            )
            self._changed.update(missed)

    async def _fetch_once(self) -> bool:
        manager = self.manager
        cfg = manager.config
        broker_epoch = manager.broker_epoch()
        if broker_epoch is None:
            raise NotLeaderOrFollowerError("this broker is not registered yet")
        now = manager.clock_ms()
        req = self._next_request(now)
        if not req.send and not self.session.held and not req.forgotten:
            # Every partition backs off after failed appends: the loop sleeps.
            self.session.reset()
            return False
        forgotten: dict[str, list[int]] = {}
        for tp in req.forgotten:
            forgotten.setdefault(tp.topic, []).append(tp.partition)
        wait_ms = cfg.replica_fetch_wait_max_ms
        if self._backing_off:
            # A long poll must not outlast a waiting partition's wait (a throttled one
            # would fetch at less than its rate).
            wait_ms = max(0, min(wait_ms, min(self._backing_off.values()) - now))
        request = FetchRequest.of(
            {tp: FetchPartition(tp.partition, *state) for tp, state in req.send.items()},
            replica_id=manager.node_id,
            replica_epoch=broker_epoch,
            max_wait_ms=wait_ms,
            min_bytes=1,
            max_bytes=cfg.replica_fetch_response_max_bytes,
            session_id=req.session_id,
            session_epoch=req.epoch,
            forgotten=tuple((t, tuple(ps)) for t, ps in forgotten.items()),
        )
        conn = await manager.connect(self.leader_id)
        try:
            body, payload = await conn.request(
                protocol.ApiKey.FETCH, request.to_body(), (), cfg.fetch_response_timeout_ms / 1000
            )
        except RaftlogTimeoutError:
            # No answer to a long poll: the connection is unusable, not slow. One that carried
            # data through a network cut can stay stuck in TCP's retransmission backoff long
            # after the cut heals (a chaos run: a follower's fetches timed out for 70 s on a
            # connection to a reachable leader, the partition out of its ISR meanwhile). Drop
            # it; the next fetch connects again (Kafka's client disconnects the same way).
            conn.close()
            raise
        resp = FetchResponse.from_body(body)
        self.session.answered(resp.session_id or 0)
        held = self.session.held
        changed = False
        pos = 0
        flushes: list[Partition] = []
        throttled = 0  # bytes fetched for joining replicas
        for tp, r in resp.results():
            nbytes = r.nbytes
            data = payload[pos : pos + nbytes] if nbytes else None
            pos += nbytes
            p = self.followed.get(tp)
            st: FetchState | None = req.send.get(tp) or held.get(tp)
            if p is None or st is None or manager.partitions.get(tp) is not p:
                continue  # no longer followed from here, or removed meanwhile
            if nbytes and manager.joining(p):
                throttled += nbytes
            # Whatever the answer did to the log, the leader must hear the new state.
            self._changed.add(tp)
            spec = FollowerFetch(
                fetch_offset=st[0],
                last_fetched_epoch=st[3],
                current_leader_epoch=st[2],
                durable_offset=st[4],
            )
            error = None
            if r.error:
                error = error_from_code(r.error, r.message or "")
                if isinstance(error, OffsetOutOfRangeError):
                    error = OffsetOutOfRangeError(str(error), r.log_start_offset, -1)
                else:
                    log.debug("%s: fetch from %d: %s", p.tp, self.leader_id, error)
            if manager.on_fetch_answer(
                p, spec, error, r.diverging, r.high_watermark, r.log_start_offset, data
            ):
                changed = True
                if p.fsync_policy:
                    flushes.append(p)
            elif error is None:
                changed = True  # an empty answer after the long-poll: just go again
            if p.fetch_backoff_until_ms > now:
                self._backing_off[tp] = p.fetch_backoff_until_ms
                self._followed_changed = True
        if not resp.topics:
            changed = True  # nothing new in the whole session: the long poll ran out
        manager.throttle.record(throttled, manager.clock_ms())
        # The fsync policy: the next fetch must report what is durable, so wait for it.
        for p in flushes:
            await manager.wait_durable(p)
        return changed
