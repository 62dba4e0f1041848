"""Incremental fetch sessions between a follower and its leader (Kafka's KIP-227), pure.

Without them a follower names every partition it follows from a leader in every Fetch, and the
leader checks every one and answers every one, twice a second when idle: with 10,000 partitions
on three brokers that is ~6,700 partitions per request, and most of a core per broker for
nothing. A session makes both sides remember the partition list, so a request names only what
changed and an answer carries only what has news.

No sockets, no clock reads (time comes in as `now_ms`), no asyncio: `LeaderSessions` is the
leader's table of sessions, `FollowerSession` the follower's half; the fetch handler
(raftlog/broker/handlers/fetch.py) and the replica fetcher (raftlog/replication/manager.py)
drive them.

Wire (Fetch request fields, replica fetches only; docs/PROTOCOL.md):
- `session_id` (0: none) and `session_epoch`: -1 = no session (a full fetch, what consumers
  send); 0 = open a session holding exactly the partitions listed (it replaces this replica's
  previous session); n >= 1 = the n-th incremental fetch of `session_id`: the partitions listed
  are added or updated, those in `forgotten` ([[topic, [partition, ...]], ...]) leave.
- The answer carries `session_id` (0: none was opened). A session the leader no longer has is
  FetchSessionIdNotFoundError, a wrong epoch InvalidFetchSessionEpochError: the follower then
  opens a new session with its full list. Both are whole-request errors.
- In a session's answer: every partition the request listed, and every other partition of the
  session that has news for the follower: data past the fetch offset the session holds, a high
  watermark or log start offset other than the last one sent, or an error.

Rules:
- A request that names a partition is its progress report, as a full fetch's is; a partition
  left out keeps the fetch state the session holds, which is still the follower's (its log has
  not changed, or it would have said). The leader still records a fetch for every partition it
  answers with data (Kafka's "last fetch" bookkeeping needs it, for the lag rule).
- The follower sends a request's changes as pending until its answer arrives: a lost answer
  (a timeout, a dropped connection) leaves the leader's state unknown, so the next request
  opens a new session with the full list. Only an answered request moves the epoch.
- Bounded: one session per replica (a new one replaces the old), at most `sessions_max` in
  all (the least recently used goes), and a session unused for `idle_ms_max` is dropped.
- Only what is sent counts as told. A long poll reads a session several times and sends its
  last read; each read is a `SessionAnswer` that changes nothing in the session until
  `LeaderSession.sent` takes it: the marks it looked at, the high watermarks and log starts
  it carries. (A read that was not sent once recorded a high watermark as told: the follower
  never heard it, and restarted with a stale checkpoint.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from raftlog.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError
from raftlog.topics import TopicPartition

# session_epoch values on the wire.
NO_SESSION = -1
NEW_SESSION = 0
# Session ids are int32 on the wire (Kafka's), never 0.
SESSION_ID_MAX = 2**31 - 1
# How often a session's request looks at every partition for news, not only the marked ones.
FULL_SCAN_INTERVAL_MS = 10_000

T = TypeVar("T")


@dataclass(slots=True)
class SessionPartition:
    """What the leader holds of one partition of a session: the follower's last fetch state
    and what it was last told."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    durable_offset: int
    # The high watermark and log start offset last sent (-1: nothing sent yet).
    high_watermark_sent: int = -1
    log_start_sent: int = -1


class SessionAnswer:
    """One read of a session for an answer that a long poll may replace with a later read:
    what it looked at and what it would tell, applied by `LeaderSession.sent` if sent."""

    __slots__ = ("candidates", "deferred", "marked", "session_id", "told")

    def __init__(
        self, session_id: int, candidates: list[TopicPartition], marked: set[TopicPartition] | None
    ):
        self.session_id = session_id
        # The partitions to look at for news; with a full scan, `marked` holds the ones that
        # were marked (news found in another is a missed mark), else None.
        self.candidates = candidates
        self.marked = marked
        # (partition, high watermark, log start offset) of each partition it answers.
        self.told: list[tuple[SessionPartition, int, int]] = []
        # Partitions with data it had no room for: marked again, for the next request.
        self.deferred: list[TopicPartition] = []

    def tell(self, sp: SessionPartition, high_watermark: int, log_start: int) -> None:
        self.told.append((sp, high_watermark, log_start))


# What a follower states per partition: (fetch_offset, max_bytes, current_leader_epoch,
# last_fetched_epoch, durable_offset), the wire's partition fields after the index.
FetchState = tuple[int, int, int, int, int]


class LeaderSession:
    """One follower's session with this leader."""

    __slots__ = (
        "_rotation",
        "broker_epoch",
        "epoch",
        "id",
        "last_request_ms",
        "last_used_ms",
        "next_full_scan_ms",
        "outside_isr",
        "partitions",
        "replica_id",
        "touched",
    )

    def __init__(self, session_id: int, replica_id: int, now_ms: int):
        self.id = session_id
        self.replica_id = replica_id
        # The follower's broker epoch, as its last request stated it.
        self.broker_epoch = -1
        # The epoch of the last request applied; the next must carry epoch + 1.
        self.epoch = NEW_SESSION
        self.partitions: dict[TopicPartition, SessionPartition] = {}
        self.last_used_ms = now_ms
        # When the last request's partitions were all looked at (`_session_news`): each was
        # then either answered or had nothing new, i.e. the follower was at the log end.
        self.last_request_ms = -1
        # Partitions that may have news since the last request: the leader marks them when
        # it appends, when the high watermark moves, when a partition's role or ISR changes
        # (`touch`). A request looks at these, not at every partition of the session.
        self.touched: set[TopicPartition] = set()
        # Partitions whose follower (this session's) is outside the ISR: each request counts
        # as a fetch of theirs, so they rejoin once caught up (as with full fetches).
        self.outside_isr: set[TopicPartition] = set()
        # When a request next looks at every partition anyway: a safety net for a missed
        # mark, and how a moved log start offset (retention, unmarked) reaches the follower.
        self.next_full_scan_ms = now_ms + FULL_SCAN_INTERVAL_MS
        # Where the next answer starts its walk over the partitions: it moves on every time,
        # so with a full response budget no partition is always last (and starved).
        self._rotation = 0

    def update(self, tp: TopicPartition, state: FetchState) -> SessionPartition:
        """The follower names `tp` with `state`: add it or take the new state."""
        sp = self.partitions.get(tp)
        if sp is None:
            sp = self.partitions[tp] = SessionPartition(*state)
        else:
            (
                sp.fetch_offset,
                sp.max_bytes,
                sp.current_leader_epoch,
                sp.last_fetched_epoch,
                sp.durable_offset,
            ) = state
        return sp

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.partitions.pop(tp, None)
            self.touched.discard(tp)
            self.outside_isr.discard(tp)

    def begin(self, now_ms: int) -> SessionAnswer:
        """A read for an answer: it looks at the marked partitions, or at every partition
        when a full scan is due (every FULL_SCAN_INTERVAL_MS). The session is unchanged until
        the answer is `sent`."""
        marked = self.touched | self.outside_isr
        if now_ms >= self.next_full_scan_ms:
            return SessionAnswer(self.id, list(self.partitions), marked)
        return SessionAnswer(self.id, [tp for tp in marked if tp in self.partitions], None)

    def sent(self, answer: SessionAnswer, now_ms: int) -> None:
        """`answer` went to the follower: the marks it looked at are done (except what it
        deferred), and the follower now knows the high watermarks and log starts it told."""
        self.touched.difference_update(answer.candidates)
        self.touched.update(answer.deferred)
        for sp, high_watermark, log_start in answer.told:
            sp.high_watermark_sent = high_watermark
            sp.log_start_sent = log_start
        if answer.marked is not None:
            self.next_full_scan_ms = now_ms + FULL_SCAN_INTERVAL_MS

    def rotate(self, items: list[T]) -> list[T]:
        """`items` starting one further along each call: with a full response budget no
        partition is always last (and starved)."""
        if len(items) < 2:
            return items
        start = self._rotation % len(items)
        self._rotation = start + 1
        return items[start:] + items[:start]


class LeaderSessions:
    """A leader's fetch sessions: at most one per replica, at most `sessions_max`."""

    def __init__(self, sessions_max: int, idle_ms_max: int):
        if sessions_max < 1 or idle_ms_max < 1:
            raise ValueError("sessions_max and idle_ms_max must be positive")
        self.sessions_max = sessions_max
        self.idle_ms_max = idle_ms_max
        self._by_id: dict[int, LeaderSession] = {}
        self._by_replica: dict[int, LeaderSession] = {}
        self._next_id = 1

    def __len__(self) -> int:
        return len(self._by_id)

    def of_replica(self, replica_id: int) -> LeaderSession | None:
        return self._by_replica.get(replica_id)

    def open(self, replica_id: int, now_ms: int) -> LeaderSession:
        """A new, empty session for `replica_id`, replacing its previous one."""
        self.expire(now_ms)
        old = self._by_replica.pop(replica_id, None)
        if old is not None:
            del self._by_id[old.id]
        while len(self._by_id) >= self.sessions_max:
            lru = min(self._by_id.values(), key=lambda s: s.last_used_ms)
            self._drop(lru)
        session_id = self._next_id
        while session_id in self._by_id:
            session_id = session_id % SESSION_ID_MAX + 1
        self._next_id = session_id % SESSION_ID_MAX + 1
        session = LeaderSession(session_id, replica_id, now_ms)
        self._by_id[session_id] = session
        self._by_replica[replica_id] = session
        return session

    def get(self, session_id: int, epoch: int, replica_id: int, now_ms: int) -> LeaderSession:
        """The session an incremental request (epoch >= 1) continues; moves its epoch.
        Raises FetchSessionIdNotFoundError or InvalidFetchSessionEpochError."""
        session = self._by_id.get(session_id)
        if session is None or session.replica_id != replica_id:
            raise FetchSessionIdNotFoundError(
                f"fetch session {session_id} of replica {replica_id} is not known here "
                "(expired, replaced, or this leader restarted): open a new one"
            )
        if epoch != session.epoch + 1:
            raise InvalidFetchSessionEpochError(
                f"fetch session {session_id}: epoch {epoch}, expected {session.epoch + 1}: "
                "open a new one"
            )
        session.epoch = epoch
        session.last_used_ms = now_ms
        return session

    def expire(self, now_ms: int) -> int:
        """Drop sessions unused for idle_ms_max; returns how many."""
        gone = [s for s in self._by_id.values() if now_ms - s.last_used_ms > self.idle_ms_max]
        for s in gone:
            self._drop(s)
        return len(gone)

    def close(self, replica_id: int) -> None:
        session = self._by_replica.get(replica_id)
        if session is not None:
            self._drop(session)

    def _drop(self, session: LeaderSession) -> None:
        del self._by_id[session.id]
        if self._by_replica.get(session.replica_id) is session:
            del self._by_replica[session.replica_id]


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """What the follower's next request carries."""

    session_id: int
    epoch: int
    send: dict[TopicPartition, FetchState]
    forgotten: tuple[TopicPartition, ...]


class FollowerSession:
    """The follower's half of its session with one leader: what the leader holds, and what
    to send so that it holds what this follower follows."""

    def __init__(self) -> None:
        self.session_id = 0
        # The epoch of the next request: 0 opens a session.
        self.epoch = NEW_SESSION
        # What the leader holds (as of the last answered request).
        self.held: dict[TopicPartition, FetchState] = {}
        self._pending: SessionRequest | None = None

    def request(
        self,
        changed: dict[TopicPartition, FetchState],
        followed: Iterable[TopicPartition] | None,
    ) -> SessionRequest:
        """The next request. `changed`: the partitions whose state may differ from what the
        leader holds (a partition already held with the same state is left out); `followed`:
        every partition followed now when that set may have changed (None: unchanged), so
        the ones no longer followed are forgotten. Without a session, `changed` must hold
        every followed partition (the caller sends the full list then)."""
        if self.session_id == 0:
            self._pending = SessionRequest(0, NEW_SESSION, dict(changed), ())
            return self._pending
        send = {tp: st for tp, st in changed.items() if self.held.get(tp) != st}
        forgotten: tuple[TopicPartition, ...] = ()
        if followed is not None:
            keep = set(followed)
            forgotten = tuple(tp for tp in self.held if tp not in keep and tp not in send)
        self._pending = SessionRequest(self.session_id, self.epoch, send, forgotten)
        return self._pending

    @property
    def open(self) -> bool:
        return self.session_id != 0

    def answered(self, session_id: int) -> None:
        """The pending request was answered without a session error."""
        req = self._pending
        self._pending = None
        if req is None:
            return
        if req.epoch == NEW_SESSION:
            self.held = dict(req.send)
        else:
            for tp in req.forgotten:
                self.held.pop(tp, None)
            self.held.update(req.send)
        if session_id == 0:  # the leader keeps no session (an older leader): full fetches
            self.reset()
            return
        self.session_id = session_id
        self.epoch = req.epoch + 1

    def reset(self) -> None:
        """A session error, a lost answer, a new connection: the next request opens anew."""
        self.session_id = 0
        self.epoch = NEW_SESSION
        self.held = {}
        self._pending = None
