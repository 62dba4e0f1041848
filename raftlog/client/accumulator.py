"""The producer's accumulator: records into per-partition batches, batches out to the sender.

`append` (one record) and `append_many` (a run of values) pick a record's partition (the given
one; else the key's hash with the configured partitioner; else the topic's sticky partition,
which moves on after about `batch_size` bytes, at a batch boundary, however its batches left:
KIP-794's uniform sticky partitioner, client/partitioner.py) and add the record to that
partition's open batch, returning a `RecordFuture` (client/futures.py). The sender takes the
ready batches with `drain`: full (`batch_size`), old enough (`linger_ms`) or flushed, grouped
in requests per partition leader; a batch to retry goes back with `requeue`.

Rules:
- Thread-safe: the sync producer's `send` runs on any thread. Every queue change is made under
  `lock`; batches leave a queue only through `drain`, `discard` and `take_all`, under it, so a
  record is never appended to a batch that is being sent. A batch that left (or filled) is
  sealed and takes no more records.
- A batch never outgrows `batch_size`, unless one record alone does: a record that does not
  fit the open batch closes it and opens the next.
- A record is checked before it is queued (TypeError or ValueError naming the field and the
  topic: bytes-like value and key, (str, bytes) headers, an int timestamp in 0..2^63-1): a
  record that cannot be encoded would otherwise fail on the sender, far from its caller.
- Bounded memory: the bytes buffered (`buffered_bytes` = added by appends - released by the
  sender once sent, failed or expired) stay below `buffer_memory`; a blocking append waits
  for space (up to `max_block_ms`, then RaftlogTimeoutError) and resumes once the buffer has
  drained to 7/8 of it.
- Order: a retried batch goes back at the head of its partition's queue, after the batches
  sent before it (`ProducerBatch.order`): a partition resends in sequence order.
- The sender is woken (the `wake` callback) once per sender pass at most: when a batch
  becomes ready or a partition's first batch opens (its linger clock starts).
- Format: with `compression_type` none, batches are raftlog's own (records.BatchBuilder);
  with a codec, compressed Kafka v2 batches (client/compressed.py's CompressedBatchBuilder,
  which counts `size_bytes` as BatchBuilder does, so the rules above hold for both alike).

The per-record hot paths (`append`'s fast path, `append_many`) take the lock once and touch
only the open batch; anything per batch or per partition is done by `drain`.
"""

from __future__ import annotations

import collections
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from raftlog.client.compressed import CompressedBatchBuilder
from raftlog.client.futures import EXPIRY_GRACE_S, BatchResult, RecordFuture, Span
from raftlog.client.partitioner import Stint, UniformStickyPartitioner
from raftlog.client.producer_config import ProducerConfig
from raftlog.errors import (
    RaftlogError,
    RaftlogTimeoutError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from raftlog.invariants import InvariantError
from raftlog.metadata.model import TopicInfo
from raftlog.records import HEADER_SIZE, BatchBuilder
from raftlog.topics import TopicPartition

Headers = Sequence[tuple[str, bytes | None]]


class PartitionBeyondMetadataError(UnknownTopicOrPartitionError):
    """A partition named explicitly that the cached metadata does not have. The topic may
    have grown since (`raftlog topic alter`): the producer asks for its metadata again once
    before it gives up, as Kafka's producer waits for metadata naming the partition.

    Raised by the client, never sent on the wire; its code only has to be unique (codes from
    100 up are client-side errors), so that UnknownTopicOrPartitionError's still decodes as it."""

    code = 103


_time_ns = time.time_ns
# A record's encoded size must fit the batch's 32-bit length fields (with the batch header).
RECORD_BYTES_MAX = 2**31 - 1 - HEADER_SIZE
# Record timestamps are int64 milliseconds since the epoch, never negative (as in Kafka).
TIMESTAMP_MS_MAX = 2**63 - 1


def _checked_bytes(v: Any, what: str, topic: str) -> bytes | None:
    if v is None or type(v) is bytes:
        return v
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v)  # a copy: later changes to the caller's buffer cannot reach the batch
    raise TypeError(
        f"the {what} of a record for topic {topic!r} must be bytes (or bytearray, memoryview) "
        f"or None, not {type(v).__name__}"
    )


def _checked_record(
    topic: Any,
    value: Any,
    key: Any,
    headers: Any,
    partition: Any,
    timestamp_ms: Any,
) -> tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]:
    """Check a record's fields before it enters a batch (TypeError / ValueError naming the
    field and the topic); returns value, key and headers as the batch encodes them. A field
    the batch cannot encode would otherwise fail on the sender, long after send() returned."""
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, not {type(topic).__name__}")
    value = _checked_bytes(value, "value", topic)
    key = _checked_bytes(key, "key", topic)
    if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
        raise TypeError(
            f"partition of a record for topic {topic!r} must be an int or None, "
            f"not {type(partition).__name__}"
        )
    if timestamp_ms is not None:
        if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool):
            raise TypeError(
                f"timestamp_ms of a record for topic {topic!r} must be an int (ms since the "
                f"epoch) or None, not {type(timestamp_ms).__name__}"
            )
        if not 0 <= timestamp_ms <= TIMESTAMP_MS_MAX:
            raise ValueError(
                f"timestamp_ms={timestamp_ms} of a record for topic {topic!r} is out of range: "
                f"it must be in 0..{TIMESTAMP_MS_MAX} (ms since the epoch)"
            )
    if not headers:
        return value, key, ()
    if not isinstance(headers, list | tuple):
        raise TypeError(
            f"headers of a record for topic {topic!r} must be a list of (str, bytes | None) "
            f"pairs, not {type(headers).__name__}"
        )
    checked = []
    for item in headers:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise TypeError(
                f"headers of a record for topic {topic!r} must be (str, bytes | None) pairs, "
                f"not {item!r}"
            )
        hkey, hvalue = item
        if not isinstance(hkey, str):
            raise TypeError(
                f"a header key of a record for topic {topic!r} must be a str, "
                f"not {type(hkey).__name__}"
            )
        try:
            hkey.encode()
        except UnicodeEncodeError as e:
            raise ValueError(
                f"header key {hkey!r} of a record for topic {topic!r} is not valid UTF-8: {e}"
            ) from None
        checked.append((hkey, _checked_bytes(hvalue, f"header {hkey!r} value", topic)))
    return value, key, tuple(checked)


class ProducerBatch(BatchResult):
    """A batch in the accumulator and in flight; it is also the BatchResult its records'
    futures share (one object per batch, not two: batches live long enough to cost the
    garbage collector per object). Completing it drops the builder, so a future kept after
    its record was sent does not keep the record's bytes alive."""

    __slots__ = (
        "attempts",
        "builder",
        "created",
        "in_flight",
        "last_error",
        "order",
        "outcome_unknown",
        "producer_epoch",
        "retry_at",
        "sealed",
        "sequence",
        "sticky_bytes",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        now: float,
        delivery_timeout_s: float,
        builder: BatchBuilder | CompressedBatchBuilder | None = None,
    ):
        BatchResult.__init__(self, tp)
        self.tp = tp
        self.builder: BatchBuilder | CompressedBatchBuilder = (
            BatchBuilder() if builder is None else builder
        )
        self.created = now
        self.deadline = now + delivery_timeout_s
        self.attempts = 0  # sends that failed (and were retried, or failed the batch)
        self.last_error: BaseException | None = None  # of the last failed send
        self.in_flight = False  # a request holding it is on a connection
        self.sealed = False  # full, drained or expired: it takes no more records
        self.retry_at = 0.0  # a retried batch is not sent again before this (its backoff)
        # Bytes send()'s fast path appended to it as its topic's open sticky batch and that
        # the topic's stint has not counted yet (a slot is cheaper there than the stint's dict).
        self.sticky_bytes = 0
        # Idempotence: the base sequence and epoch it was stamped with at its first send (-1:
        # not yet, or reset by an epoch bump), and its place in the partition's send order.
        self.sequence = -1
        self.producer_epoch = -1
        self.order = -1
        # A send of it was written and no answer proved it was not appended (see
        # REFUSED_BEFORE_APPEND): it may be in the log under its sequence, which therefore
        # must not change (an epoch bump fails it instead of restamping it).
        self.outcome_unknown = False

    def complete(self, base_offset: int, error: BaseException | None = None) -> bool:
        """On the sender's thread only (it drops the builder, which the sender reads); a
        batch already expired keeps its outcome and loses its builder here."""
        won = BatchResult.complete(self, base_offset, error)
        self.sealed = True
        self.builder = _COMPLETED_BUILDER
        return won

    def expire(self, error: RaftlogError) -> bool:
        # From any thread: the builder stays (the sender may be reading it); no more records.
        self.sealed = True
        return BatchResult.complete(self, -1, error)

    def expiry_error(self, what: str, after: str = "") -> RaftlogTimeoutError:
        """The error of a batch past its delivery timeout: how many sends it had, what did
        not happen in time, and what the last send met (a full disk reaches the producer as
        the broker's StorageError, not as a bare timeout)."""
        ms = round((self.deadline - self.created) * 1000)
        sends = self.attempts + (1 if self.in_flight else 0)
        text = (
            f"record batch for {self.tp} expired after {sends} attempt(s): {what} within "
            f"delivery_timeout_ms={ms}{after}"
        )
        if self.last_error is not None:
            text += f"; last error: {type(self.last_error).__name__}: {self.last_error}"
        error = RaftlogTimeoutError(text)
        error.__cause__ = self.last_error  # for code that wants the broker's error itself
        return error

    def overdue_error(self) -> RaftlogError:
        return self.expiry_error(
            "not completed", f" + {EXPIRY_GRACE_S:g} s (is the producer's sender stuck?)"
        )

    def seal(self) -> None:
        """Full: it takes no more records, and it is encoded now (BatchBuilder.seal)."""
        self.sealed = True
        self.builder.seal()


# What a completed batch keeps instead of its builder: sealed, empty, shared.
_COMPLETED_BUILDER = BatchBuilder()
_COMPLETED_BUILDER.append(None, b"", 0)
_COMPLETED_BUILDER.seal()


class Accumulator:
    """Per-partition queues of batches; thread-safe (the sync producer's send runs anywhere).

    The last batch of a queue is the partition's open batch, the one `send` appends to, unless
    it is a batch being retried (those take no new records). Batches leave a queue only under
    the lock (`drain`, `discard`, `take_all`, `fail_all`), so a record is never appended to a
    batch that is being sent.

    Invariants: a sealed batch takes no more records; every batch in a queue is not complete,
    or expired by a waiter (then the next drain takes it out); `buffered_bytes` counts every
    queued batch and every batch whose send is not answered yet (appends and `requeue` add,
    `release`, expiry, `discard` and `fail_all` take away); `dead`, once set, stays set.
    """

    def __init__(
        self,
        config: ProducerConfig,
        topics: Mapping[str, TopicInfo],
        wake: Callable[[], None],
        rng: random.Random | None = None,
    ):
        """`topics`: the known topics' metadata (the cluster client's dict, updated in place;
        a topic missing from it makes an append return None). `wake`: makes the sender run a
        pass soon, from any thread. `rng`: the sticky partition's randomness (tests pass a
        seeded one)."""
        self.config = config
        self._topics = topics
        self._wake = wake
        self._batch_size = config.batch_size
        self._buffer_memory = config.buffer_memory
        self._partitioner = config.key_partitioner
        # 0: raftlog's own batches; a codec: compressed Kafka v2 batches (client/compressed.py).
        self._codec = config.compression_codec
        self._delivery_timeout_s = config.delivery_timeout_ms / 1000
        self.lock = threading.Lock()
        self.queues: dict[TopicPartition, collections.deque[ProducerBatch]] = {}
        # topic -> the queues (and TopicPartitions) of its partitions, by partition number:
        # what send() looks up, one dict access per record.
        self.by_topic: dict[
            str, tuple[list[collections.deque[ProducerBatch]], list[TopicPartition]]
        ] = {}
        # Where keyless records go (KIP-794's uniform sticky partitioning). The fast path
        # counts its bytes on the open batch; `_sticky_stint` adds them to the topic's stint.
        self.sticky = UniformStickyPartitioner(config.batch_size, rng)
        # topic -> the open batch of its sticky partition (the fast path's target).
        self.open_batches: dict[str, ProducerBatch] = {}
        # Bytes buffered = added (by send, under the lock) - released (by the sender thread
        # alone, without the lock: a response must not wait for a busy send()).
        self.added_bytes = 0
        self.released_bytes = 0
        self.space = threading.Condition(self.lock)
        self.space_waiters = 0
        # A send() blocked on a full buffer resumes once it drains to here, not at the first
        # freed byte: waking a blocked thread for every response (one record each, when
        # records go one per request) costs more than the record.
        self.resume_below = config.buffer_memory - config.buffer_memory // 8
        self.flushing = 0
        # A wake-up of the sender is owed already (appends need not ask for another): set by
        # appends and by the sender when ready batches wait for a slot, cleared by the sender
        # at the start of each pass; under the lock.
        self.wake_scheduled = False
        # One-record batches made since the sync Producer last yielded the GIL (its send()).
        self.batches_since_yield = 0
        # Set when the sender died with an error (`fail_all`): what every later append raises.
        self.dead: RaftlogError | None = None
        self.slot_bound = False
        # The earliest delivery deadline of a queued batch, as of the last drain: the sender
        # runs a pass then, so a batch expires on time even when nothing else wakes it.
        self.next_deadline = math.inf

    def topic_queues(
        self, topic: str, partitions: int
    ) -> tuple[list[collections.deque[ProducerBatch]], list[TopicPartition]]:
        """The topic's per-partition queues, grown to `partitions` (call with the lock held)."""
        entry = self.by_topic.get(topic)
        if entry is None:
            entry = self.by_topic[topic] = ([], [])
        queues, tps = entry
        while len(queues) < partitions:
            tp = TopicPartition(topic, len(queues))
            q = self.queues.setdefault(tp, collections.deque())
            queues.append(q)
            tps.append(tp)
        return entry

    # -- append: from any thread --------------------------------------------------------------

    def append(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp_ms: int | None,
        block: bool,
    ) -> RecordFuture | None:
        """Add a record to its partition's open batch; None if the topic's metadata is not
        known yet (the caller fetches it and calls again).

        The per-record hot path: a record with a `bytes` value and no key, partition,
        timestamp or headers that fits the topic's sticky open batch takes one dict lookup, one
        lock, one builder call and one future; anything else takes `_append`, which checks
        every field first (`_checked_record`): a record that cannot be encoded is refused
        here, in the caller's thread, and never reaches the sender. The open batch is used
        even if the topic's metadata was dropped meanwhile (after an error): its partition is
        known, and the sender refreshes the metadata before it sends it.
        """
        if (
            type(value) is bytes
            and key is None
            and partition is None
            and timestamp_ms is None
            and not headers
            and value
        ):
            batch = self.open_batches.get(topic)
            n = 25 + len(value)
            # The size is checked again under the lock; this first look spares the lock when
            # the record cannot fit (one record per batch: every record).
            if batch is not None and batch.builder.size_bytes + n <= self._batch_size:
                ts = _time_ns() // 1_000_000
                lock = self.lock
                lock.acquire()
                builder = batch.builder
                size = builder.size_bytes + n
                if (
                    size <= self._batch_size
                    and not batch.sealed
                    and self.added_bytes - self.released_bytes < self._buffer_memory
                ):
                    index = builder.append_value(value, ts)
                    self.added_bytes += n
                    batch.sticky_bytes += n
                    if size < self._batch_size:
                        lock.release()
                        return RecordFuture(batch, index, ts)
                    # This record filled the batch: wake the sender. (The next record moves
                    # the sticky partition on, if its stint is long enough.)
                    batch.seal()
                    wake = self._batch_ready()
                    lock.release()
                    if wake:
                        self._wake()
                    return RecordFuture(batch, index, ts)
                lock.release()
        return self._append(topic, value, key, headers, partition, timestamp_ms, block)

    def _append(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp_ms: int | None,
        block: bool,
    ) -> RecordFuture | None:
        if not (
            type(value) is bytes
            and (key is None or type(key) is bytes)
            and (partition is None or type(partition) is int)
            and timestamp_ms is None
            and not headers
            and type(topic) is str
        ):
            # Only what the common shapes above leave open (they are valid as they are).
            value, key, headers = _checked_record(
                topic, value, key, headers, partition, timestamp_ms
            )
        if self.dead is not None:
            raise self.dead
        sticky = False
        info = self._topics.get(topic)
        if info is None:
            return None
        partitions = len(info.partitions)
        if partition is None:
            if key is None:
                sticky = True  # the partition is the sticky one when the lock is held
            else:
                partition = self._partitioner(key, partitions)
        elif not 0 <= partition < partitions:
            raise PartitionBeyondMetadataError(
                f"partition {partition} of topic {topic!r} does not exist (it has {partitions})"
            )
        ts = _time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        # Bytes the record adds to a batch: its fixed part, its entry in the length table, key,
        # value and headers.
        if key is None and not headers:
            record_bytes = 25 + len(value) if value else 25
        else:
            record_bytes = 25 + (len(key) if key else 0) + (len(value) if value else 0)
            if headers:
                record_bytes += sum(8 + len(k.encode()) + len(v or b"") for k, v in headers)
        if record_bytes > RECORD_BYTES_MAX:
            raise RecordTooLargeError(
                f"a record of {record_bytes} bytes for topic {topic!r}: a record must be below "
                f"{RECORD_BYTES_MAX} bytes (its lengths are 32-bit)"
            )
        batch_size = self._batch_size
        lock = self.lock
        lock.acquire()
        try:
            if block and self.buffered_bytes >= self._buffer_memory:
                self._wait_for_space_locked()
            if sticky:
                # _sticky_stint, inlined: a call here costs 3% of a one-record batch's send().
                stint = self.sticky.stint(topic, partitions)
                open_ = self.open_batches.get(topic)
                if open_ is not None and open_.sticky_bytes:
                    stint.nbytes += open_.sticky_bytes
                    open_.sticky_bytes = 0
                partition = stint.partition
            if partition is None:
                raise InvariantError("partition is None")
            entry = self.by_topic.get(topic)
            # Every partition's queue, not only this one's: the stint may move to any of them
            # (a topic that grew has queues to add).
            if entry is None or len(entry[0]) < partitions:
                entry = self.topic_queues(topic, partitions)
            q = entry[0][partition]
            # Close the open batch before this record would take it past batch_size (a batch
            # holds at least one record): batches then never outgrow what was configured, so a
            # batch_size near the broker's max_message_bytes cannot produce refused batches.
            new_batch = self._needs_new_batch(q, record_bytes)
            sealed_wake = False
            if new_batch and sticky:
                # The sticky partition's open batch can take no more records (it filled, left
                # by linger or flush, or this record does not fit): the stint may end here.
                if q and not q[-1].sealed:
                    # It does not fit: the batch is closed for appends, as Kafka's accumulator
                    # closes one that a record did not fit, and goes with the next sender pass,
                    # not after linger_ms.
                    q[-1].seal()
                    sealed_wake = self._batch_ready()
                if partitions > 1 and self.sticky.maybe_move(stint, record_bytes):
                    # The record opens the next partition's stint (Kafka's abortOnNewBatch),
                    # not a batch of its own on the old one.
                    partition = stint.partition
                    q = entry[0][partition]
                    new_batch = self._needs_new_batch(q, record_bytes)
            if q:
                batch = q[-1]
                builder = batch.builder
                before = builder.size_bytes
            if new_batch and HEADER_SIZE + record_bytes >= batch_size:
                # The record fills a batch on its own (one message per request): encode it
                # at once, with no builder lists to fill and drop.
                batch = ProducerBatch(
                    entry[1][partition],
                    time.monotonic(),
                    self._delivery_timeout_s,
                    BatchBuilder.sealed_one(key, value, ts, headers or ())
                    if not self._codec
                    else CompressedBatchBuilder.sealed_one(
                        self._codec, key, value, ts, headers or ()
                    ),
                )
                batch.sealed = True
                q.append(batch)
                self.batches_since_yield += 1
                index = 0
                size = batch.builder.size_bytes
                added = size
            else:
                if new_batch:
                    batch = ProducerBatch(
                        entry[1][partition],
                        time.monotonic(),
                        self._delivery_timeout_s,
                        CompressedBatchBuilder(self._codec) if self._codec else None,
                    )
                    builder = batch.builder
                    q.append(batch)
                    before = 0
                index = builder.append(key, value, ts, headers or ())
                size = builder.size_bytes
                added = size - before
                if size >= batch_size:
                    batch.seal()
            self.added_bytes += added
            if sticky:
                self.open_batches[topic] = batch
                stint.nbytes += added
            # Wake the sender when a batch is ready, or a partition's first batch starts its
            # linger clock; once per sender pass.
            wake = self._batch_ready() if size >= batch_size or new_batch else False
        finally:
            lock.release()
        if wake or sealed_wake:
            self._wake()
        return RecordFuture(batch, index, ts)

    def _needs_new_batch(self, q: collections.deque[ProducerBatch], record_bytes: int) -> bool:
        """Whether a record of `record_bytes` must open a new batch in partition queue `q`."""
        if not q:
            return True
        batch = q[-1]
        before = batch.builder.size_bytes
        return batch.sealed or (before + record_bytes > self._batch_size and before > HEADER_SIZE)

    def append_many(
        self,
        topic: str,
        values: Sequence[bytes],
        start: int,
        partition: int | None,
        block: bool,
        spans: list[Span],
    ) -> int:
        """Add records with `values[start:]` (no key, no headers, the current time) in this
        order, adding where they went to `spans`; returns the index of the first value not
        queued: `len(values)`, or less when the topic's metadata is not known (yet, or any
        more: dropped after an error). The caller then fetches it and goes on from there, so
        no record is queued twice.

        The batch hot path: the lock is taken once, and each batch is filled by one builder
        call (`BatchBuilder.append_values`). Records go to `partition`, or to the sticky
        partition, which moves on exactly as it would for the same records sent one by one.
        Values other than non-empty `bytes` take `append` one by one (checked there)."""
        ts = _time_ns() // 1_000_000
        end = len(values)
        if not all(type(v) is bytes and v for v in values[start:]):
            for i in range(start, end):
                fut = self.append(topic, values[i], None, None, partition, ts, block)
                if fut is None:
                    return i
                spans.append((fut._batch, fut._index, 1, ts))
            return end
        if type(topic) is not str or (partition is not None and type(partition) is not int):
            _checked_record(topic, b"x", None, None, partition, None)  # raises, naming which
        if self.dead is not None:
            raise self.dead
        info = self._topics.get(topic)
        if info is None:
            return start
        partitions = len(info.partitions)
        if partition is not None and not 0 <= partition < partitions:
            raise PartitionBeyondMetadataError(
                f"partition {partition} of topic {topic!r} does not exist (it has {partitions})"
            )
        batch_size = self._batch_size
        sticky = partition is None
        wake = False
        i = start
        with self.lock:
            while i < end:
                if block and self.buffered_bytes >= self._buffer_memory:
                    self._wait_for_space_locked()
                if partition is None:
                    stint = self._sticky_stint(topic, partitions)
                    p = stint.partition
                else:
                    p = partition
                entry = self.by_topic.get(topic)
                if entry is None or len(entry[0]) < partitions:  # as in _append
                    entry = self.topic_queues(topic, partitions)
                q = entry[0][p]
                record_bytes = 25 + len(values[i])
                new_batch = self._needs_new_batch(q, record_bytes)
                if new_batch:
                    # The open batch can take no more: closed if the next value does not fit
                    # it, and a sticky partition's stint may end here (as in _append).
                    if q and not q[-1].sealed:
                        q[-1].seal()
                        wake = self._batch_ready() or wake
                    if sticky and partitions > 1 and self.sticky.maybe_move(stint, record_bytes):
                        p = stint.partition
                        q = entry[0][p]
                        new_batch = self._needs_new_batch(q, record_bytes)
                if new_batch:
                    batch = ProducerBatch(
                        entry[1][p],
                        time.monotonic(),
                        self._delivery_timeout_s,
                        CompressedBatchBuilder(self._codec) if self._codec else None,
                    )
                    q.append(batch)
                else:
                    batch = q[-1]
                builder = batch.builder
                before = 0 if new_batch else builder.size_bytes  # a new batch adds its header
                first = len(builder)
                i_next = builder.append_values(values, ts, i, batch_size)
                added = builder.size_bytes - before
                self.added_bytes += added
                spans.append((batch, first, i_next - i, ts))
                i = i_next
                # Stopped before the end: the next record did not fit, so this batch is done.
                full = i < end or builder.size_bytes >= batch_size
                if full:
                    batch.seal()
                if sticky:
                    self.open_batches[topic] = batch
                    stint.nbytes += added
                if full or new_batch:
                    wake = self._batch_ready() or wake
        if wake:
            self._wake()
        return end

    def _sticky_stint(self, topic: str, partitions: int) -> Stint:
        """The topic's stint, with the lock held, having counted what the fast path appended
        since the last call (`_append` does the same inline)."""
        stint = self.sticky.stint(topic, partitions)
        batch = self.open_batches.get(topic)
        if batch is not None and batch.sticky_bytes:
            stint.nbytes += batch.sticky_bytes
            batch.sticky_bytes = 0
        return stint

    def _batch_ready(self) -> bool:
        """A batch is ready (or a partition's first batch opened): with the lock held, say
        whether send() must wake the sender (once per sender pass)."""
        wake = not self.wake_scheduled
        self.wake_scheduled = True
        return wake

    def _wait_for_space_locked(self) -> None:
        """Wait (lock held) until the buffer drains to `resume_below`, up to max_block_ms."""
        self.space_waiters += 1
        try:
            if not self.space.wait_for(
                lambda: self.buffered_bytes <= self.resume_below,
                self.config.max_block_ms / 1000,
            ):
                raise RaftlogTimeoutError(
                    f"buffer_memory={self.config.buffer_memory} bytes stayed full for "
                    f"max_block_ms={self.config.max_block_ms}"
                )
        finally:
            self.space_waiters -= 1

    # -- the sender's side ---------------------------------------------------------------------

    def drain(
        self,
        now: float,
        node_of: Callable[[TopicPartition], int | None],
        free_slots: Callable[[int], int],
        closing: bool,
        room_of: Callable[[TopicPartition, bool], int] | None = None,
        max_request_of: Callable[[int], int] | None = None,
    ) -> tuple[dict[int, list[list[ProducerBatch]]], float | None, list[ProducerBatch]]:
        """Take the ready batches as requests per leader (at most `free_slots(node)` requests
        of at most max_request_size each, or `max_request_of(node)`: less when the broker reads
        less). Also returns the next time a lingering batch becomes ready, and the batches
        whose delivery timeout ran out before they could be sent. A batch larger than that
        bound still goes alone in a request (the sender refuses it if the broker cannot read
        it). `self.slot_bound` tells whether ready batches stayed for want of an in-flight slot.

        `room_of(tp, retrying)` (idempotence: IdempotenceState.room): how many batches a
        partition may send now, -1 for no bound (0: a retry waits for its batches in flight;
        1: none of its batches was acknowledged yet); `retrying`: its first batch is a retry.
        With it, a request takes at most one batch per partition, so a duplicate's answer (its
        original offsets) is that of one batch.

        Call with the lock held (the sender clears `wake_scheduled` under the same hold)."""
        config = self.config
        linger = config.linger_ms / 1000
        batch_size = config.batch_size
        flush = bool(self.flushing) or closing
        requests: dict[int, list[list[ProducerBatch]]] = {}
        last_size: dict[int, int] = {}
        slots: dict[int, int] = {}
        request_caps: dict[int, int] = {}
        next_ready: float | None = None
        expired: list[ProducerBatch] = []
        self.slot_bound = False
        next_deadline = math.inf
        for tp, q in self.queues.items():
            if not q:
                continue
            while q and q[0].deadline <= now:
                b = q.popleft()
                b.sealed = True  # it may still be a topic's open batch: no more records
                expired.append(b)
            if not q:
                continue
            first = q[0]
            if first.deadline < next_deadline:
                next_deadline = first.deadline  # a retried batch goes first: the oldest
            if first.retry_at > now:
                # Backing off; the partition waits behind it (its order is kept).
                next_ready = (
                    first.retry_at if next_ready is None else min(next_ready, first.retry_at)
                )
                continue
            if not (
                len(q) > 1
                or first.builder.size_bytes >= batch_size
                or now - first.created >= linger
                or flush
            ):
                t = first.created + linger
                next_ready = t if next_ready is None else min(next_ready, t)
                continue
            node = node_of(tp)
            room = -1 if room_of is None else room_of(tp, first.attempts > 0)  # -1: no bound
            if node is None or room == 0:
                continue
            took: list[ProducerBatch] | None = None  # the request that took this partition's last
            free = slots.get(node)
            if free is None:
                free = slots[node] = free_slots(node)
                if max_request_of is not None:
                    request_caps[node] = max_request_of(node)
            max_request = request_caps.get(node, config.max_request_size)
            while q and room != 0:
                b = q[0]
                size = b.builder.size_bytes
                if b is q[-1] and not (
                    size >= batch_size or now - b.created >= linger or flush or b.attempts
                ):
                    break
                node_requests = requests.get(node)
                if (
                    node_requests
                    and last_size[node] + size <= max_request
                    and (room_of is None or node_requests[-1] is not took)
                ):
                    node_requests[-1].append(b)
                    last_size[node] += size
                    took = node_requests[-1]
                elif free > 0:
                    free -= 1
                    took = [b]
                    requests.setdefault(node, []).append(took)
                    last_size[node] = size
                else:
                    self.slot_bound = True
                    break
                q.popleft()
                b.sealed = True
                room -= 1
            slots[node] = free
        self.next_deadline = next_deadline
        freed = sum(b.builder.size_bytes for b in expired)
        if freed:
            self.released_bytes += freed
            if self.space_waiters and self.buffered_bytes <= self.resume_below:
                self.space.notify_all()  # drain runs with the lock held
        return requests, next_ready, expired

    def requeue(self, batch: ProducerBatch) -> None:
        """Put a batch to retry back at the head of its partition's queue; a batch that was
        stamped with a sequence goes after those sent before it (send order), so that the
        partition resends them in sequence order whatever order their answers came in."""
        with self.lock:
            self.added_bytes += batch.builder.size_bytes
            q = self.queues.setdefault(batch.tp, collections.deque())
            i = 0
            if batch.order >= 0:
                while i < len(q) and 0 <= q[i].order < batch.order:
                    i += 1
            q.insert(i, batch)

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the queued and in-flight batches (what `buffer_memory` bounds)."""
        return self.added_bytes - self.released_bytes

    def release(self, nbytes: int) -> None:
        """Bytes sent (called on the sender's loop only). A blocked send() counts itself in
        space_waiters before it checks for space, so reading the count after the release
        cannot miss it."""
        self.released_bytes += nbytes
        if self.space_waiters and self.added_bytes - self.released_bytes <= self.resume_below:
            with self.lock:
                self.space.notify_all()

    def pending(self) -> int:
        """How many batches are queued (call with the lock held, or on the sender's thread)."""
        return sum(len(q) for q in self.queues.values())

    def queued(self) -> list[ProducerBatch]:
        """Every queued batch, partition by partition in queue order (lock held)."""
        return [b for q in self.queues.values() for b in q]

    def discard(self, batches: Iterable[ProducerBatch]) -> int:
        """Take these queued batches out of their queues (an epoch bump fails them), their
        bytes out of the buffer; returns the bytes freed (lock held). Blocked appends are not
        woken here: the caller signals the freed space (as after a response)."""
        gone = {id(b) for b in batches}
        if not gone:
            return 0
        freed = 0
        for q in self.queues.values():
            if any(id(b) in gone for b in q):
                kept = []
                for b in q:
                    if id(b) in gone:
                        freed += b.builder.size_bytes
                    else:
                        kept.append(b)
                q.clear()
                q.extend(kept)
        self.released_bytes += freed
        return freed

    def take_all(self) -> list[ProducerBatch]:
        """Empty every queue and return what they held (at close, lock held): the caller
        fails them. Their bytes stay counted: nothing can append any more."""
        batches = self.queued()
        self.queues.clear()
        self.by_topic.clear()
        return batches

    def fail_all(self, error: RaftlogError) -> list[ProducerBatch]:
        """The sender died with `error` (a bug): empty every queue, release every byte, wake
        blocked appends, and make every later append raise `error`. Returns the batches that
        were queued (the caller fails them). Takes the lock."""
        with self.lock:
            self.dead = error
            batches = self.take_all()
            self.released_bytes = self.added_bytes
            self.space.notify_all()
        return batches

    def begin_flush(self) -> None:
        """Until the matching `end_flush`, every batch is ready at once (no linger)."""
        with self.lock:
            self.flushing += 1

    def end_flush(self) -> None:
        with self.lock:
            self.flushing -= 1
