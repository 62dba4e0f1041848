"""The idempotent producer's state (raftlog/client/idempotence.py), through its public methods:
stamping, the per-partition room, acknowledgements, each kind of failed send, the KIP-360 epoch
bump. No sender, no accumulator, no clock."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.client.idempotence import (
    IDEMPOTENT_IN_FLIGHT_MAX,
    PRODUCER_EPOCH_MAX,
    REFUSED_BEFORE_APPEND,
    SEQUENCE_MODULUS,
    IdempotenceState,
    seq_behind,
)
from raftlog.errors import (
    BrokerNotAvailableError,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceError,
    RaftlogError,
    RequestTimedOutError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from raftlog.invariants import InvariantError
from raftlog.topics import TopicPartition

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


@dataclass(frozen=True)
class Records:
    count: int

    def __len__(self) -> int:
        return self.count


@dataclass(eq=False)
class Batch:
    """A stand-in for the accumulator's batch: what the state reads and writes."""

    tp: TopicPartition
    records: int = 1
    sequence: int = -1
    producer_epoch: int = -1
    order: int = -1
    outcome_unknown: bool = False
    builder: Records = field(init=False)

    def __post_init__(self) -> None:
        self.builder = Records(self.records)


def started(producer_id: int = 7, epoch: int = 0) -> IdempotenceState:
    state = IdempotenceState()
    state.start(producer_id, epoch)
    return state


def sent(state: IdempotenceState, *batches: Batch) -> None:
    for b in batches:
        state.begin_send(b)


def acknowledged(state: IdempotenceState, tp: TopicPartition) -> None:
    """A first batch of `tp` sent and acknowledged: its leader knows the producer."""
    first = Batch(tp)
    sent(state, first)
    state.end_send(tp)
    state.acked(first)


def test_a_new_state_sends_nothing_until_it_has_a_producer_id() -> None:
    state = IdempotenceState()
    assert not state.ready and state.producer_id == -1
    with pytest.raises(InvariantError, match="without a producer id"):
        state.begin_send(Batch(TP0))
    with pytest.raises(InvariantError, match="InitProducerId"):
        state.start(-1, 0)
    state.start(7, 3)
    assert state.ready and (state.producer_id, state.epoch) == (7, 3)


def test_batches_are_stamped_at_their_first_send_in_partition_order() -> None:
    state = started(epoch=2)
    a, b, c, d = Batch(TP0, 3), Batch(TP0, 2), Batch(TP1, 5), Batch(TP0, 1)
    sent(state, a, b, c, d)
    assert [x.sequence for x in (a, b, c, d)] == [0, 3, 0, 5]
    assert {x.producer_epoch for x in (a, b, c, d)} == {2}
    assert [x.order for x in (a, b, c, d)] == [1, 2, 3, 4]
    assert state.in_flight == 4
    # A resend keeps its sequence and order.
    state.end_send(TP0)
    state.begin_send(a)
    assert (a.sequence, a.order) == (0, 1) and state.in_flight == 4


def test_sequences_wrap_at_int32() -> None:
    state = started()
    first = Batch(TP0, SEQUENCE_MODULUS - 2)
    wrapping, after = Batch(TP0, 3), Batch(TP0, 1)
    sent(state, first, wrapping, after)
    assert (wrapping.sequence, after.sequence) == (SEQUENCE_MODULUS - 2, 1)
    assert seq_behind(SEQUENCE_MODULUS - 1, 0) and not seq_behind(0, SEQUENCE_MODULUS - 1)
    assert not seq_behind(5, 5) and seq_behind(4, 5)


def test_one_batch_in_flight_until_the_partition_acknowledged_one_of_the_epoch() -> None:
    """A leader that knows nothing of the producer appends its first batch at any sequence:
    with two in flight, a refused first and an appended second would leave the first behind
    the partition's sequences for good."""
    state = started()
    assert state.room(TP0, retrying=False) == 1
    first = Batch(TP0)
    sent(state, first)
    assert state.room(TP0, retrying=False) == 0
    state.end_send(TP0)
    assert state.room(TP0, retrying=False) == 1  # answered, not acknowledged: still one
    state.acked(first)
    assert state.room(TP0, retrying=False) == IDEMPOTENT_IN_FLIGHT_MAX
    assert state.room(TP1, retrying=False) == 1  # per partition


def test_a_partition_retrying_waits_for_its_batches_in_flight() -> None:
    state = started()
    acknowledged(state, TP0)
    b = Batch(TP0)
    sent(state, b)
    assert state.room(TP0, retrying=True) == 0
    assert state.room(TP0, retrying=False) == IDEMPOTENT_IN_FLIGHT_MAX - 1
    state.end_send(TP0)
    assert state.room(TP0, retrying=True) == 1  # the retry alone


def test_batches_stamped_from_the_oldest_unacknowledged_one_stay_within_the_broker_window() -> None:
    """Found in a chaos run: at a leader change, new batches went to the new leader while
    the oldest was still unanswered by the old one; the new leader acknowledged eleven more,
    and the old batch's retry fell behind the five batches it keeps: OutOfOrderSequence."""
    state = started()
    acknowledged(state, TP0)
    oldest = Batch(TP0)
    sent(state, oldest)  # unanswered (an acks=all wait on the old leader)
    later = [Batch(TP0) for _ in range(IDEMPOTENT_IN_FLIGHT_MAX - 1)]
    assert state.room(TP0, retrying=False) == len(later)
    sent(state, *later)
    assert state.room(TP0, retrying=False) == 0
    for b in later:  # the new leader acknowledges every later one first
        state.end_send(TP0)
        state.acked(b)
    assert state.room(TP0, retrying=False) == 0  # still: `oldest` may need the window
    state.end_send(TP0)
    assert state.send_failed(oldest, NotLeaderOrFollowerError("moved"), written=True)
    state.acked(oldest)  # its retry answered as a duplicate
    assert state.room(TP0, retrying=False) == IDEMPOTENT_IN_FLIGHT_MAX
    state.check()


def test_more_answers_than_sends_is_a_bug() -> None:
    state = started()
    with pytest.raises(InvariantError, match="more answers than batches sent"):
        state.end_send(TP0)


@pytest.mark.parametrize(
    "error, written, unknown",
    [
        (BrokerNotAvailableError("connection lost"), True, True),
        (RequestTimedOutError("no answer"), True, True),
        (NotLeaderOrFollowerError("after the acks=all wait"), True, True),
        (NotEnoughReplicasAfterAppendError("appended, not replicated"), True, True),
        (StorageError("disk"), True, True),
        (NotLeaderOrFollowerError("never written"), False, False),
        (UnknownTopicOrPartitionError("not hosted yet"), True, False),
        (InvalidProducerEpochError("fenced"), True, False),
    ],
)
def test_a_failed_send_leaves_the_outcome_unknown_unless_the_error_proves_no_append(
    error: RaftlogError, written: bool, unknown: bool
) -> None:
    state = started()
    b = Batch(TP0)
    sent(state, b)
    state.end_send(TP0)
    assert state.send_failed(b, error, written) is error.retriable
    assert b.outcome_unknown is unknown
    assert (type(error) in REFUSED_BEFORE_APPEND) is not unknown or not written
    assert not state.bump_pending


def test_a_duplicate_is_never_trusted() -> None:
    """DuplicateSequence is not success: the batch may never have been appended."""
    state = started()
    b = Batch(TP0)
    sent(state, b)
    state.end_send(TP0)
    assert state.send_failed(b, DuplicateSequenceError("old"), written=True) is False
    assert b.outcome_unknown and not state.bump_pending


def test_out_of_order_behind_an_unanswered_batch_is_retried_in_order() -> None:
    state = started()
    acknowledged(state, TP0)
    b = Batch(TP0)
    c = Batch(TP0)
    sent(state, b, c)
    # c answered first: b, before it, is not acknowledged yet. Resend c after b.
    state.end_send(TP0)
    assert state.send_failed(c, OutOfOrderSequenceError("gap"), written=True) is True
    assert not state.bump_pending and not c.outcome_unknown


def test_out_of_order_for_the_first_unacknowledged_batch_bumps_the_epoch() -> None:
    """The leader lost the producer's state."""
    state = started(epoch=3)
    acknowledged(state, TP0)
    b = Batch(TP0)
    sent(state, b)
    state.end_send(TP0)
    assert state.send_failed(b, OutOfOrderSequenceError("lost"), written=True) is True
    assert state.bump_pending and not state.ready and state.bump_due


def test_out_of_order_behind_an_acknowledged_batch_bumps_the_epoch() -> None:
    """Batch a refused before append, b after it acknowledged, a's retry out of order: a is
    behind what the partition acknowledged, never appendable under its sequence."""
    state = started()
    a, b = Batch(TP0), Batch(TP0)
    sent(state, a, b)
    state.end_send(TP0)
    assert state.send_failed(a, UnknownTopicOrPartitionError("not hosted"), True) is True
    assert not a.outcome_unknown
    state.end_send(TP0)
    state.acked(b)
    sent(state, a)
    state.end_send(TP0)
    assert state.send_failed(a, OutOfOrderSequenceError("behind"), written=True) is True
    assert state.bump_pending
    bump = state.bump([a])
    assert bump.failing == [] and a.sequence == -1 and state.epoch == 1


def test_a_lost_sequence_makes_one_bump_pending() -> None:
    state = started()
    unstamped, a = Batch(TP0), Batch(TP0)
    assert state.sequence_lost(unstamped) is False and not state.bump_pending
    sent(state, a)
    assert state.sequence_lost(a) is True
    assert state.sequence_lost(a) is False  # already pending: reported once
    assert not state.bump_due  # a is still in flight
    with pytest.raises(InvariantError, match="in flight"):
        state.bump([])
    state.end_send(TP0)
    assert state.bump_due


def test_the_bump_restamps_from_zero_and_fails_the_batches_of_unknown_outcome() -> None:
    state = started(epoch=3)
    lost, refused, other, never = Batch(TP0), Batch(TP0), Batch(TP1), Batch(TP1)
    sent(state, lost, refused, other)
    for b in (lost, refused, other):
        state.end_send(b.tp)
    state.send_failed(lost, BrokerNotAvailableError("connection lost"), written=True)
    state.send_failed(refused, OutOfOrderSequenceError("after a gap"), written=True)
    # A written send that failed, then a later attempt that was never written: the first
    # may still have been appended.
    state.send_failed(other, NotLeaderOrFollowerError("moved"), written=True)
    state.send_failed(other, NotLeaderOrFollowerError("no connection"), written=False)
    state.sequence_lost(refused)
    bump = state.bump([lost, refused, other, never])
    assert (bump.old_producer_id, bump.old_epoch) == (7, 3)
    assert bump.failing == [lost, other]
    assert (state.producer_id, state.epoch, state.ready) == (7, 4, True)
    assert [refused.sequence, never.sequence] == [-1, -1]
    # Every partition starts again at 0, one batch in flight until acknowledged.
    assert state.room(TP0, retrying=False) == 1
    sent(state, refused)
    assert (refused.sequence, refused.producer_epoch, refused.order) == (0, 4, 2)


def test_past_the_last_epoch_the_bump_asks_for_a_new_producer_id() -> None:
    state = started(epoch=PRODUCER_EPOCH_MAX)
    b = Batch(TP0)
    sent(state, b)
    state.end_send(TP0)
    state.sequence_lost(b)
    state.bump([b])
    assert (state.producer_id, state.epoch, state.ready) == (-1, -1, False)
    state.start(8, 0)
    assert state.ready and state.room(TP0, retrying=False) == 1


@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["send", "answer", "ack", "fail", "bump"]), st.integers(0, 2)),
        max_size=80,
    )
)
@settings(max_examples=80, deadline=None)
def test_any_sequence_of_calls_keeps_the_invariants(steps: list[tuple[str, int]]) -> None:
    """Whatever the order of sends, answers and failures: never more than one batch in flight
    on a partition that acknowledged none, sequences contiguous per partition in an epoch."""
    state = started()
    tps = [TopicPartition("t", p) for p in range(3)]
    in_flight: list[Batch] = []
    queued: list[Batch] = []
    acked: set[TopicPartition] = set()  # partitions that acknowledged a batch of the epoch
    expected = dict.fromkeys(tps, 0)  # the next sequence a new batch must get
    for what, p in steps:
        tp = tps[p]
        if what == "send" and state.ready and state.room(tp, retrying=False) != 0:
            b = next((x for x in queued if x.tp == tp), None)
            if b is None:
                b = Batch(tp, records=p + 1)
            else:
                queued.remove(b)
            new = b.sequence < 0
            state.begin_send(b)
            if new:
                assert b.sequence == expected[tp] and b.producer_epoch == state.epoch
                expected[tp] += b.records
            in_flight.append(b)
        elif what in ("answer", "ack", "fail") and in_flight:
            b = next((x for x in in_flight if x.tp == tp), in_flight[0])
            in_flight.remove(b)
            state.end_send(b.tp)
            if what == "ack":
                state.acked(b)
                acked.add(b.tp)
            else:
                if what == "fail":
                    state.send_failed(b, OutOfOrderSequenceError("x"), written=True)
                queued.append(b)
        elif what == "bump" and state.bump_due:
            for b in state.bump(queued).failing:
                queued.remove(b)
            acked.clear()
            expected = dict.fromkeys(tps, 0)
        state.check()
        assert state.in_flight == len(in_flight)
        for t in tps:
            if t not in acked:
                assert len([x for x in in_flight if x.tp == t]) <= 1, t
