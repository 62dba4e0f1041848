"""Incremental fetch sessions (raftlog/replication/fetch_session.py): both halves, pure."""

from __future__ import annotations

import pytest

from raftlog.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError
from raftlog.replication.fetch_session import (
    FULL_SCAN_INTERVAL_MS,
    NEW_SESSION,
    FollowerSession,
    LeaderSession,
    LeaderSessions,
)
from raftlog.topics import TopicPartition

A, B, C = (TopicPartition("t", i) for i in range(3))


def state(offset: int, epoch: int = 1) -> tuple[int, int, int, int, int]:
    return (offset, 1024, epoch, epoch, offset)


def test_a_session_continues_only_with_the_next_epoch_and_its_own_replica() -> None:
    sessions = LeaderSessions(sessions_max=10, idle_ms_max=60_000)
    s = sessions.open(replica_id=2, now_ms=0)
    assert sessions.get(s.id, 1, 2, 10) is s and s.epoch == 1
    with pytest.raises(InvalidFetchSessionEpochError, match="epoch 1, expected 2"):
        sessions.get(s.id, 1, 2, 20)  # a request sent again (its answer was lost)
    with pytest.raises(FetchSessionIdNotFoundError):
        sessions.get(s.id, 2, 3, 20)  # another replica naming it
    with pytest.raises(FetchSessionIdNotFoundError):
        sessions.get(s.id + 1, 1, 2, 20)


def test_one_session_per_replica_and_a_bounded_table() -> None:
    sessions = LeaderSessions(sessions_max=2, idle_ms_max=60_000)
    first = sessions.open(2, 0)
    second = sessions.open(2, 1)  # the same follower opens anew: the old one goes
    assert sessions.of_replica(2) is second and len(sessions) == 1
    with pytest.raises(FetchSessionIdNotFoundError):
        sessions.get(first.id, 1, 2, 2)
    sessions.open(3, 5)
    sessions.open(4, 6)  # over the bound: the least recently used (replica 2's) goes
    assert len(sessions) == 2 and sessions.of_replica(2) is None
    assert sessions.expire(6 + 60_001) == 2 and len(sessions) == 0


def sent_read(
    s: LeaderSession, now_ms: int
) -> tuple[list[TopicPartition], set[TopicPartition] | None]:
    """One read of `s` that is sent: (its candidates, the marked ones of a full scan)."""
    answer = s.begin(now_ms)
    s.sent(answer, now_ms)
    return answer.candidates, answer.marked


def test_candidates_are_the_marked_partitions_then_all_at_a_full_scan() -> None:
    sessions = LeaderSessions(sessions_max=10, idle_ms_max=60_000)
    s = sessions.open(2, 0)
    for tp in (A, B, C):
        s.update(tp, state(0))
    assert sent_read(s, 1) == ([], None)
    s.touched.add(B)
    s.outside_isr.add(C)  # looked at on every request until it is back in the ISR
    tps, marked = sent_read(s, 2)
    assert sorted(tps) == [B, C] and marked is None
    assert sent_read(s, 3)[0] == [C]
    s.touched.add(A)
    tps, marked = sent_read(s, FULL_SCAN_INTERVAL_MS)
    assert sorted(tps) == [A, B, C] and marked == {A, C}
    s.forget([C])
    assert sent_read(s, FULL_SCAN_INTERVAL_MS + 1) == ([], None)


def test_a_read_that_is_not_sent_changes_nothing_the_sent_one_counts() -> None:
    """A long poll reads a session again and sends only its last read. The high watermark
    an earlier read would have told stays untold, and its marks stay: the last read finds
    the same news (once, a read at the poll's deadline that was not sent recorded a high
    watermark as told; the follower never heard it and kept a stale one)."""
    s = LeaderSessions(10, 60_000).open(2, 0)
    sp = s.update(A, state(100))
    s.update(B, state(0))
    sp.high_watermark_sent, sp.log_start_sent = 50, 0
    s.touched.add(A)  # the high watermark moved to 100
    first = s.begin(10)
    assert first.candidates == [A]
    first.tell(sp, 100, 0)
    # Not sent: the session still holds what the follower was told, and A's mark.
    assert (sp.high_watermark_sent, sp.log_start_sent) == (50, 0) and s.touched == {A}
    last = s.begin(20)
    assert last.candidates == [A]
    last.tell(sp, 100, 0)
    last.deferred.append(B)  # data of B that did not fit waits for the next request
    s.sent(last, 20)
    assert (sp.high_watermark_sent, sp.log_start_sent) == (100, 0)
    assert s.touched == {B}


def test_a_full_scan_not_sent_is_done_again_by_the_next_read() -> None:
    s = LeaderSessions(10, 60_000).open(2, 0)
    s.update(A, state(0))
    assert s.begin(FULL_SCAN_INTERVAL_MS).marked == set()  # a full scan, not sent
    assert s.begin(FULL_SCAN_INTERVAL_MS + 1).marked == set()  # so this read is one too
    s.sent(s.begin(FULL_SCAN_INTERVAL_MS + 2), FULL_SCAN_INTERVAL_MS + 2)
    assert s.begin(FULL_SCAN_INTERVAL_MS + 3).marked is None


def test_rotation_moves_the_start_along() -> None:
    s = LeaderSessions(10, 60_000).open(2, 0)
    assert [s.rotate([1, 2, 3]) for _ in range(3)] == [[1, 2, 3], [2, 3, 1], [3, 1, 2]]


def test_the_follower_sends_its_full_list_then_only_changes() -> None:
    f = FollowerSession()
    req = f.request({A: state(0), B: state(0)}, [A, B])
    assert (req.session_id, req.epoch, set(req.send), req.forgotten) == (0, NEW_SESSION, {A, B}, ())
    f.answered(session_id=7)
    assert (f.session_id, f.epoch, f.held) == (7, 1, {A: state(0), B: state(0)})
    # A did not change, B did: only B goes.
    req = f.request({A: state(0), B: state(5)}, None)
    assert (req.session_id, req.epoch, req.send, req.forgotten) == (7, 1, {B: state(5)}, ())
    f.answered(7)
    # B is no longer followed from this leader, C is new.
    req = f.request({C: state(0)}, [A, C])
    assert (req.epoch, req.send, req.forgotten) == (2, {C: state(0)}, (B,))
    f.answered(7)
    assert f.held == {A: state(0), C: state(0)} and f.epoch == 3


def test_a_lost_answer_opens_a_new_session() -> None:
    f = FollowerSession()
    f.request({A: state(0)}, [A])
    f.answered(7)
    f.request({A: state(3)}, None)
    f.reset()  # no answer: whether the leader applied it is unknown
    req = f.request({A: state(3), B: state(0)}, [A, B])
    assert (req.session_id, req.epoch, set(req.send)) == (0, NEW_SESSION, {A, B})
    assert f.held == {}


def test_a_leader_without_sessions_gets_full_fetches() -> None:
    f = FollowerSession()
    f.request({A: state(0)}, [A])
    f.answered(session_id=0)  # an older leader: no session id in its answer
    assert not f.open
    assert f.request({A: state(0)}, [A]).epoch == NEW_SESSION
