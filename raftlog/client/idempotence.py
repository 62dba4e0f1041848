"""The idempotent producer's state: producer id and epoch, sequences, and Kafka's KIP-360 bump.

A pure state machine: no I/O, no asyncio, no clock, no logging. The sender (client/sender.py)
calls it as batches are sent and answered and asks it what to do; the broker's half of the
rules is storage/producer_state.py.

How it works. The producer gets a producer id and epoch (InitProducerId, `start`) before its
first send, and stamps each batch, when it is first sent (`begin_send`), with them and its
partition's next sequence number; the partition leader appends each sequence once, so a retry
after a lost response, a timeout or a leader change never duplicates a record.

The rules it keeps:
- Order per partition, with up to IDEMPOTENT_IN_FLIGHT_MAX requests in flight: a request
  carries at most one batch per partition (the accumulator's drain, given `room`); a partition
  whose batch failed sends nothing more until its batches in flight are answered, then resends
  in sequence order (the batch's `order`, kept by the accumulator's `requeue`), one batch at a
  time.
- The broker's window: a leader recognises a retry as a duplicate only among the producer's
  last NUM_BATCHES_TO_RETAIN (5) batches of the partition, so no more than
  IDEMPOTENT_IN_FLIGHT_MAX batches are stamped from the oldest unacknowledged one on (`room`,
  `_span`). Without it, a leader change let new batches go to the new leader while older ones
  were still unanswered by the old: the new leader acknowledged eleven more, and the older
  batches' retries fell behind its window (OutOfOrderSequence, an epoch bump, nine sends of
  unknown outcome in a chaos run).
- Until a partition has acknowledged a batch of the current epoch, it has one batch in flight
  (`room` is 1): a partition that knows nothing of the producer appends its first batch at any
  sequence (storage/producer_state.py), so a second batch sent beside a first that is refused
  (the leader did not host the partition yet) would be appended ahead of it, and the first
  could then never be appended under its sequence.
- OutOfOrderSequenceError for a batch that an earlier unanswered batch of its partition
  precedes is retried like any retriable error (`send_failed`).
- When the sequence space of a partition gets a hole (a batch with a sequence failed or
  expired: `sequence_lost`; or the leader answers OutOfOrderSequence for the first
  unacknowledged batch: it lost the producer's state; or for a batch behind one it
  acknowledged: it started the producer's sequences after that batch), the producer bumps its
  epoch (KIP-360): the sender stops sending (`ready` is False), waits for every batch in flight
  (`bump_due`), then starts epoch + 1 (a new producer id past int16: `bump` leaves the id at -1
  and the sender asks for a new one) with every queued batch restamped from sequence 0, except
  a batch whose outcome is unknown.
- A batch's outcome is unknown when one of its sends was written and no answer proved it was
  not appended (a lost connection, a timeout, NotLeaderOrFollower or
  NotEnoughReplicasAfterAppend after an acks=all wait, a storage error: anything but
  REFUSED_BEFORE_APPEND). It may be in the log under its old sequence, and restamped it would
  be appended again: `bump` hands it back to fail with OutOfOrderSequenceError saying its
  outcome is unknown (Kafka never changes the sequence of a batch that was sent, for this
  reason).
- InvalidProducerEpochError fails the batch. DuplicateSequenceError (Kafka's client counts it
  as delivered) is never trusted: a raftlog broker does not answer it, since a batch behind the
  window a partition keeps may never have been appended; it fails the batch like any other
  non-retriable error.

Bounded: one entry per partition the producer has sent to, in five dicts (the unacknowledged
batches of each: at most IDEMPOTENT_IN_FLIGHT_MAX).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sized
from typing import Generic, NamedTuple, Protocol, TypeVar

from raftlog.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRequestError,
    NotEnoughReplicasError,
    OutOfOrderSequenceError,
    RaftlogError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from raftlog.invariants import InvariantError, require
from raftlog.topics import TopicPartition

# Kafka's bound on requests in flight per connection that still keeps order (the broker keeps
# the last 5 batches of each producer per partition: NUM_BATCHES_TO_RETAIN).
IDEMPOTENT_IN_FLIGHT_MAX = 5
SEQUENCE_MODULUS = 2**31  # sequences are int32 >= 0, wrapping to 0
PRODUCER_EPOCH_MAX = 2**15 - 1  # int16: past it the producer asks for a new producer id

# A broker answers these to a Produce only for a batch it did not append. Any other error of a
# written request (a lost connection, a timeout, NotLeaderOrFollower or
# NotEnoughReplicasAfterAppend after an acks=all wait, a storage error) leaves the outcome
# unknown: the records may be in the log.
REFUSED_BEFORE_APPEND: tuple[type[RaftlogError], ...] = (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRequestError,
    NotEnoughReplicasError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,  # the broker hosts no such partition: nothing to append to
)


def seq_behind(seq: int, other: int) -> bool:
    """`seq` comes before `other` in the wrapping sequence space (within half of it)."""
    return 0 < (other - seq) % SEQUENCE_MODULUS < SEQUENCE_MODULUS // 2


class SequencedBatch(Protocol):
    """What the state reads and writes on a batch (the accumulator's ProducerBatch)."""

    # The base sequence and epoch it was stamped with at its first send (-1: not yet, or reset
    # by an epoch bump), and its place in the partition's send order (-1: never sent).
    sequence: int
    producer_epoch: int
    order: int
    # A send of it was written and no answer proved it was not appended.
    outcome_unknown: bool

    @property
    def tp(self) -> TopicPartition: ...

    @property
    def builder(self) -> Sized:
        """Its records: len() is how many sequence numbers it takes."""
        ...


B = TypeVar("B", bound=SequencedBatch)


class Bump(NamedTuple, Generic[B]):
    """What an epoch bump did: the id and epoch it left, and the queued batches whose outcome
    is unknown (they must fail: restamped, they could be appended twice)."""

    old_producer_id: int
    old_epoch: int
    failing: list[B]


class IdempotenceState:
    """One idempotent producer's ids and per-partition sequences (see the module's rules).

    Invariants (checked by `check`, after `start` and `bump`, and on the fields each
    transition touches):
    - a batch is stamped only while the producer has an id: producer_id >= 0;
    - 0 <= epoch <= PRODUCER_EPOCH_MAX once the producer has an id;
    - every sequence is in 0..SEQUENCE_MODULUS - 1;
    - batches in flight per partition >= 0, and their sum is `in_flight`.
    """

    __slots__ = (
        "_acked_next",
        "_in_flight",
        "_next_seq",
        "_send_order",
        "_stamped",
        "_unacked",
        "bump_pending",
        "epoch",
        "in_flight",
        "producer_id",
    )

    def __init__(self) -> None:
        self.producer_id = -1  # -1: none yet (InitProducerId not answered, or past int16)
        self.epoch = -1
        # A partition's sequences have a hole: bump the epoch once nothing is in flight.
        self.bump_pending = False
        self._next_seq: dict[TopicPartition, int] = {}  # the next sequence to stamp
        # After the last acknowledged batch of this epoch; no entry: none acknowledged yet.
        self._acked_next: dict[TopicPartition, int] = {}
        # Batches sent and not answered (a defaultdict: the hot path's cheapest counter).
        self._in_flight: collections.defaultdict[TopicPartition, int] = collections.defaultdict(int)
        self.in_flight = 0  # their sum
        self._send_order = 0  # the last order given to a batch
        # Per partition, batches stamped in this epoch, and the unacknowledged ones as
        # (their stamping index, the batch), oldest first: at most IDEMPOTENT_IN_FLIGHT_MAX.
        self._stamped: dict[TopicPartition, int] = {}
        self._unacked: dict[TopicPartition, collections.deque[tuple[int, SequencedBatch]]] = {}

    # -- the producer id -----------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Batches may be sent: the producer has an id and no epoch bump is pending."""
        return self.producer_id >= 0 and not self.bump_pending

    def start(self, producer_id: int, epoch: int) -> None:
        """InitProducerId answered: a new id and epoch; every partition starts at sequence 0."""
        require(
            producer_id >= 0 and 0 <= epoch <= PRODUCER_EPOCH_MAX,
            f"InitProducerId gave producer id {producer_id}, epoch {epoch}",
        )
        self.producer_id, self.epoch = producer_id, epoch
        self._next_seq.clear()
        self._acked_next.clear()
        self._stamped.clear()
        self._unacked.clear()
        self.check()

    # -- sends and answers ---------------------------------------------------------------------

    def room(self, tp: TopicPartition, retrying: bool) -> int:
        """How many batches partition `tp` may send now; `retrying`: the first batch of its
        queue is a retry. One retrying a batch sends nothing until its batches in flight are
        answered, then the retry alone; one that has acknowledged no batch of this epoch has
        one in flight at most; else as many as keep the batches stamped from the oldest
        unacknowledged one within the broker's window."""
        in_flight = self._in_flight[tp]
        if retrying or tp not in self._acked_next:
            return 0 if in_flight else 1
        return max(IDEMPOTENT_IN_FLIGHT_MAX - self._span(tp), 0)

    def _span(self, tp: TopicPartition) -> int:
        """Batches of `tp` stamped from its oldest unacknowledged one on (0: none is)."""
        unacked = self._unacked.get(tp)
        if not unacked:
            return 0
        return self._stamped[tp] - unacked[0][0]

    def begin_send(self, b: SequencedBatch) -> None:
        """`b` is being sent: stamped with the partition's next sequence at its first send
        (and again after an epoch bump), in the partition's send order; it counts as in
        flight on its partition until `end_send`."""
        tp = b.tp
        if b.sequence < 0:
            if self.producer_id < 0:  # not `require`: its message would be built every time
                raise InvariantError(f"a batch for {tp} stamped without a producer id")
            seq = self._next_seq.get(tp, 0)
            b.sequence, b.producer_epoch = seq, self.epoch
            self._next_seq[tp] = (seq + len(b.builder)) % SEQUENCE_MODULUS
            index = self._stamped.get(tp, 0)
            self._stamped[tp] = index + 1
            unacked = self._unacked.get(tp)
            if unacked is None:
                unacked = self._unacked[tp] = collections.deque()
            unacked.append((index, b))
            if b.order < 0:
                self._send_order += 1
                b.order = self._send_order
        self._in_flight[tp] += 1
        self.in_flight += 1

    def end_send(self, tp: TopicPartition) -> None:
        """A send of a batch of `tp` was answered (or failed): it is no longer in flight."""
        n = self._in_flight[tp] - 1
        if n < 0 or self.in_flight <= 0:
            raise InvariantError(f"{tp}: more answers than batches sent")
        self._in_flight[tp] = n
        self.in_flight -= 1

    def acked(self, b: SequencedBatch) -> None:
        """`b` was appended: its partition's leader knows the producer, up to `b`'s end."""
        if b.sequence >= 0:
            tp = b.tp
            self._acked_next[tp] = (b.sequence + len(b.builder)) % SEQUENCE_MODULUS
            unacked = self._unacked.get(tp)
            if unacked:
                if unacked[0][1] is b:
                    unacked.popleft()
                else:  # answered out of order (a later batch first): rare, and at most 5
                    for entry in unacked:
                        if entry[1] is b:
                            unacked.remove(entry)
                            break

    def send_failed(self, b: SequencedBatch, error: RaftlogError, written: bool) -> bool:
        """A send of stamped batch `b` failed with `error`; `written`: its request reached a
        connection (else the broker cannot have seen it). Marks its outcome unknown unless the
        error proves it was not appended, and starts a bump when OutOfOrderSequence says its
        partition lost (or skipped) the producer's sequences. Returns whether the batch may be
        retried: OutOfOrderSequenceError is, whatever its `retriable` says (an earlier batch
        is unanswered or retried, or the next epoch restamps this one)."""
        if b.sequence < 0:
            return error.retriable
        if written and not isinstance(error, REFUSED_BEFORE_APPEND):
            b.outcome_unknown = True
        if not isinstance(error, OutOfOrderSequenceError):
            return error.retriable
        # An earlier batch of the partition is unanswered or being retried: resend in order.
        # Else the leader lost this producer's state, or started it after this batch (a later
        # one was acknowledged): a new epoch (KIP-360).
        acked = self._acked_next.get(b.tp, 0)
        if b.sequence == acked or seq_behind(b.sequence, acked):
            self.sequence_lost(b)
        return True

    def sequence_lost(self, b: SequencedBatch) -> bool:
        """`b` failed or expired for good: if it was stamped, its partition's sequences have a
        hole that the broker will never fill, and the next epoch starts every partition at 0
        again. Returns True if this made a bump pending (it was not already)."""
        if b.sequence < 0 or self.bump_pending:
            return False
        self.bump_pending = True
        return True

    # -- the epoch bump ------------------------------------------------------------------------

    @property
    def bump_due(self) -> bool:
        """A bump is pending and nothing is in flight: `bump` may run now."""
        return self.bump_pending and self.in_flight == 0

    def bump(self, queued: Iterable[B]) -> Bump[B]:
        """Start the next epoch (a new producer id past int16: the id becomes -1 and the
        sender asks for one). Every batch of `queued` (all the accumulator holds) is to be
        restamped from sequence 0 in its send order, except those whose outcome is unknown:
        they are returned, to fail (the caller takes them out of the queues)."""
        require(self.bump_due, f"an epoch bump with {self.in_flight} batch(es) in flight")
        old = (self.producer_id, self.epoch)
        self.bump_pending = False
        if self.epoch >= PRODUCER_EPOCH_MAX:
            self.producer_id = self.epoch = -1
        else:
            self.epoch += 1
        self._next_seq.clear()
        self._acked_next.clear()
        self._stamped.clear()
        self._unacked.clear()
        failing: list[B] = []
        for b in queued:
            if b.outcome_unknown and b.sequence >= 0:
                failing.append(b)
            else:
                b.sequence = -1
        self.check()
        return Bump(old[0], old[1], failing)

    def check(self) -> None:
        """The invariants of the class docstring (the whole state: O(partitions))."""
        require(
            self.producer_id < 0 or 0 <= self.epoch <= PRODUCER_EPOCH_MAX,
            f"producer {self.producer_id} has epoch {self.epoch}",
        )
        for what, seqs in (("next", self._next_seq), ("acknowledged", self._acked_next)):
            for tp, seq in seqs.items():
                require(0 <= seq < SEQUENCE_MODULUS, f"{tp}: {what} sequence {seq}")
        require(
            all(n >= 0 for n in self._in_flight.values())
            and sum(self._in_flight.values()) == self.in_flight,
            f"batches in flight {self.in_flight} vs per partition {self._in_flight}",
        )
        for tp in self._unacked:
            require(
                self._span(tp) <= IDEMPOTENT_IN_FLIGHT_MAX,
                f"{tp}: {self._span(tp)} batches stamped from the oldest unacknowledged one",
            )
