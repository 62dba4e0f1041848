"""Fetch: read many partitions in one request, long-polling until enough data arrives.

Consumers and followers use the same request; its body and the response's are
`raftlog.messages.fetch` (FetchRequest, FetchResponse). The first partition with data returns
at least one whole batch even when it exceeds the limits (so readers always progress); later
ones stay within the remaining `max_bytes`. An OffsetOutOfRange error carries the leader's log
start offset; a follower whose log diverges from the leader's gets `diverging` (it must
truncate) and no data.

Rules:
- Consumers read only below the high watermark; followers up to the log end. A stated
  `current_leader_epoch` older than the leader's is FencedLeaderEpochError, newer
  UnknownLeaderEpochError (KIP-320).
- A follower's fetch is its progress report: it is given to the replication core once, when
  the request arrives (moving the high watermark, maybe the ISR); a long-poll then re-reads
  only data. Followers wait for appends, consumers for the high watermark to move.
- A long-poll waits from its read on: its waiter is registered before the handler returns,
  in the same step as the read that found too little. The wait itself runs later (a task), and
  an append in between (a Produce in the same socket read, or from another connection first
  in the event loop's queue) must wake it, not leave it to sit out max_wait_ms; a follower's
  missed wake-up stalls every acks=all produce on the partition for its 500 ms wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raftlog.broker.response import Response
from raftlog.errors import InvalidRequestError, OffsetOutOfRangeError, RaftlogError
from raftlog.messages.fetch import (
    FetchPartition,
    FetchPartitionResult,
    FetchRequest,
    FetchResponse,
)
from raftlog.replication.core import UNDEFINED_EPOCH, FollowerFetch, Role
from raftlog.replication.fetch_session import (
    NEW_SESSION,
    NO_SESSION,
    LeaderSession,
    SessionAnswer,
    SessionPartition,
)
from raftlog.storage import FileSlice
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource

MAX_WAIT_MS_LIMIT = 5 * 60 * 1000


@dataclass(slots=True)
class _Want:
    tp: TopicPartition
    offset: int
    max_bytes: int
    leader_epoch: int
    # Followers: settled when the request arrived.
    error: RaftlogError | None = None
    diverging: tuple[int, int] | None = None
    # A follower's fetch session: what the leader holds of this partition (what was sent).
    session: SessionPartition | None = None


def handle_fetch(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response | asyncio.Future[Response] | Any:
    req = FetchRequest.from_body(body)
    max_wait_ms = min(max(req.max_wait_ms, 0), MAX_WAIT_MS_LIMIT)
    min_bytes = max(req.min_bytes, 0)
    max_bytes = max(req.max_bytes, 1)
    follower = req.is_follower
    if follower and req.session_epoch is not None and req.session_epoch != NO_SESSION:
        return _session_fetch(broker, req, max_wait_ms, min_bytes, max_bytes)
    wanted: list[_Want] = []
    for tp, p in req.partitions():
        want = _Want(tp, p.fetch_offset, max(p.partition_max_bytes, 1), p.leader_epoch_or_default)
        if follower:
            _check_follower(broker, req, p, want)
        wanted.append(want)
    response, total, urgent = _read(broker, wanted, max_bytes, follower)
    if total >= min_bytes or max_wait_ms == 0 or urgent:
        return response
    # Waiting starts now, not when the coroutine first runs (see the module rules).
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    woken: asyncio.Future[None] = loop.create_future()
    replicas = broker.replicas
    tps = [w.tp for w in wanted]
    replicas.add_waiter(tps, woken, follower)
    return long_poll(
        broker,
        deadline,
        min_bytes,
        woken,
        lambda: _read(broker, wanted, max_bytes, follower),
        lambda fut: replicas.add_waiter(tps, fut, follower),
        lambda fut: replicas.remove_waiter(tps, fut, follower),
    )


def _session_fetch(
    broker: HandlerContext, req: FetchRequest, max_wait_ms: int, min_bytes: int, max_bytes: int
) -> Response | Awaitable[Response]:
    """A follower's fetch within its fetch session (raftlog/replication/fetch_session.py):
    the partitions it names are its progress report, as in a full fetch; the answer holds
    those and every other partition of the session with news."""
    replicas = broker.replicas
    sessions = replicas.fetch_sessions
    now = replicas.clock_ms()
    replica_id = req.replica_id
    epoch = req.session_epoch
    if epoch == NEW_SESSION:
        session = sessions.open(replica_id, now)
    else:
        session = sessions.get(req.session_id or 0, epoch or 0, replica_id, now)
    session.broker_epoch = -1 if req.replica_epoch is None else req.replica_epoch
    session.forget(req.forgotten_partitions())
    listed: list[_Want] = []
    for tp, p in req.partitions():
        if not p.fully_stated:
            raise InvalidRequestError(
                f"fetch of {tp.topic} in a session: a partition entry needs all 6 fields"
            )
        want = _Want(tp, p.fetch_offset, max(p.partition_max_bytes, 1), p.leader_epoch_or_default)
        want.session = session.update(
            tp,
            (
                want.offset,
                want.max_bytes,
                want.leader_epoch,
                p.last_fetched_epoch_or_default,
                p.durable_offset_or_default,
            ),
        )
        _check_follower(broker, req, p, want)
        listed.append(want)
    listed_tps = {w.tp for w in listed}
    answer = session.begin(now)

    def read() -> tuple[Response, int, bool]:
        # Each read looks for news again (an append woke the session's one waiter); only
        # the one sent, the last, reaches the session (`LeaderSession.sent`).
        nonlocal answer
        answer = session.begin(replicas.clock_ms())
        news = _session_news(broker, session, listed_tps, answer)
        return _read(broker, listed + news, max_bytes, True, answer)

    response, total, urgent = _read(
        broker, listed + _session_news(broker, session, listed_tps, answer), max_bytes, True, answer
    )
    session.last_request_ms = now
    if total >= min_bytes or max_wait_ms == 0 or urgent:
        session.sent(answer, now)
        return response
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    woken: asyncio.Future[None] = loop.create_future()
    replicas.add_session_waiter(session, woken)

    async def answer_later() -> Response:
        response = await long_poll(
            broker,
            deadline,
            min_bytes,
            woken,
            read,
            lambda fut: replicas.add_session_waiter(session, fut),
            lambda fut: replicas.remove_session_waiter(session, fut),
        )
        session.sent(answer, replicas.clock_ms())
        return response

    return answer_later()


def _session_news(
    broker: HandlerContext,
    session: LeaderSession,
    listed: set[TopicPartition],
    answer: SessionAnswer,
) -> list[_Want]:
    """The partitions of `session` not named in the request that have news for the follower:
    data past the fetch offset the session holds, a new high watermark or log start offset,
    or an error. A partition with data counts as fetched now (the lag rule's bookkeeping),
    and so does one whose follower is outside the ISR: as a full fetch would, that fetch
    lets it back in once it has caught up (a refused expansion is tried again).

    Only the partitions the leader marked since the last request are looked at (appends,
    high watermark moves, role and ISR changes), and every partition every
    FULL_SCAN_INTERVAL_MS; news a full scan finds unmarked (except a log start moved by
    retention, which is not marked) is a missed mark, logged as an error."""
    replicas = broker.replicas
    replica_id = session.replica_id
    news: list[_Want] = []
    marked = answer.marked
    for tp in answer.candidates:
        sp = session.partitions[tp]
        if tp in listed:
            continue
        p = replicas.get(tp)
        record = False  # a fetch of the follower's to record now (the lag rule, the ISR)
        if p is not None and p.core.role is Role.LEADER:
            plog = p.log
            end = plog.log_end_offset
            outside_isr = replica_id not in p.core.isr
            if outside_isr:
                session.outside_isr.add(tp)
            else:
                session.outside_isr.discard(tp)
            record = end > sp.fetch_offset or outside_isr or not p.core.follower_known(replica_id)
            data_or_hw = end > sp.fetch_offset or p.high_watermark != sp.high_watermark_sent
            if not record and not data_or_hw and plog.log_start_offset == sp.log_start_sent:
                continue
            if marked is not None and data_or_hw and tp not in marked:
                log.error(
                    "fetch session %d of replica %d: %s had news the leader did not mark "
                    "(a missed mark; sent now)",
                    session.id,
                    replica_id,
                    tp,
                )
        want = _Want(tp, sp.fetch_offset, sp.max_bytes, sp.current_leader_epoch)
        want.session = sp
        if record:
            spec = FollowerFetch(
                fetch_offset=sp.fetch_offset,
                last_fetched_epoch=sp.last_fetched_epoch,
                current_leader_epoch=sp.current_leader_epoch,
                durable_offset=sp.durable_offset,
            )
            try:
                _, fetched = replicas.follower_fetch(
                    tp, session.replica_id, session.broker_epoch, spec
                )
                want.diverging = fetched.diverging
            except RaftlogError as e:
                want.error = e
        news.append(want)
    return session.rotate(news)


def _check_follower(
    broker: HandlerContext, req: FetchRequest, p: FetchPartition, want: _Want
) -> None:
    """Give a follower's fetch to the replication core (once): progress, HW, divergence."""
    spec = FollowerFetch(
        fetch_offset=want.offset,
        last_fetched_epoch=(
            UNDEFINED_EPOCH if p.last_fetched_epoch is None else p.last_fetched_epoch
        ),
        current_leader_epoch=want.leader_epoch,
        durable_offset=p.durable_offset_or_default,
    )
    replica_epoch = -1 if req.replica_epoch is None else req.replica_epoch
    try:
        _, answer = broker.replicas.follower_fetch(want.tp, req.replica_id, replica_epoch, spec)
    except RaftlogError as e:
        want.error = e
        return
    want.diverging = answer.diverging


async def long_poll(
    broker: HandlerContext,
    deadline: float,
    min_bytes: int,
    woken: asyncio.Future[None],
    read: Callable[[], tuple[Response, int, bool]],
    register: Callable[[asyncio.Future[None]], None],
    unregister: Callable[[asyncio.Future[None]], None],
) -> Response:
    """Wait on `woken` (registered by the caller) until `deadline` (loop time), `read`ing
    again after each wake-up and once at the deadline; a new waiter is registered in the same
    step as each re-read. The response is the last read's."""
    loop = asyncio.get_running_loop()
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0 or broker.stopping:
                break
            timed_out = False
            try:
                async with asyncio.timeout(remaining):
                    await woken
            except TimeoutError:
                timed_out = True
            unregister(woken)
            response, total, urgent = read()
            if total >= min_bytes or urgent or timed_out:
                return response
            woken = loop.create_future()
            register(woken)
    finally:
        unregister(woken)
    return read()[0]


def _read(
    broker: HandlerContext,
    wanted: list[_Want],
    max_bytes: int,
    follower: bool,
    answer: SessionAnswer | None = None,
) -> tuple[Response, int, bool]:
    """(the response, its data bytes, whether it must go now: an error or a divergence)."""
    zero_copy = broker.config.fetch_zero_copy
    zero_copy_min = broker.config.fetch_zero_copy_min_bytes
    replicas = broker.replicas
    by_topic: dict[str, list[FetchPartitionResult]] = {}
    parts: list[bytes | memoryview | FileSlice] = []
    remaining = max_bytes
    total = 0
    urgent = False
    # The metrics: (topic, bytes) of each partition with data, counted when the answer is sent.
    sent: list[tuple[str, int]] | None = [] if broker.stats.enabled else None
    for w in wanted:
        tp = w.tp
        out = by_topic.setdefault(tp.topic, [])
        try:
            if w.error is not None:
                raise w.error
            part = broker.leader_partition(tp)
            if w.diverging is not None:  # a follower that must truncate gets no data
                hw, start = part.high_watermark, part.log.log_start_offset
                if w.session is not None and answer is not None:
                    answer.tell(w.session, hw, start)
                out.append(FetchPartitionResult(tp.partition, 0, hw, start, diverging=w.diverging))
                urgent = True
                continue
            read = replicas.read_as_leader(
                part, w.offset, w.max_bytes, follower, w.leader_epoch, remaining, not total
            )
        except RaftlogError as e:
            start = e.log_start_offset if isinstance(e, OffsetOutOfRangeError) else -1
            out.append(FetchPartitionResult(tp.partition, e.code, -1, start, 0, str(e)))
            urgent = True
            continue
        hw, start, sl = read.high_watermark, read.log_start_offset, read.data
        if answer is not None:
            if w.session is not None:
                answer.tell(w.session, hw, start)
            if read.deferred:
                answer.deferred.append(tp)  # its data waits for the next request
        if sl.size:
            if zero_copy and sl.size >= zero_copy_min:
                parts.append(sl)
            else:
                try:
                    parts.append(sl.read())
                except RaftlogError as e:
                    out.append(FetchPartitionResult(tp.partition, e.code, -1, -1, 0, str(e)))
                    urgent = True
                    continue
        out.append(FetchPartitionResult(tp.partition, 0, hw, start, sl.size))
        total += sl.size
        remaining -= sl.size
        if sent is not None and sl.size:
            sent.append((tp.topic, sl.size))
    response = FetchResponse(
        tuple((t, tuple(rs)) for t, rs in by_topic.items()),
        None if answer is None else answer.session_id,
    )
    built = Response(response.to_body(), parts)
    if sent:
        built.fetched = (follower, sent)
    return built, total, urgent
