"""Pure parts of the clients: the producer's accumulator, futures, partitioner and configs,
the idempotence state driving the accumulator's drain, and the sender's retry and bump rules.

The accumulator and the idempotence state are used through their public methods; the sender
(which does I/O) only through `retry_or_fail` and `bump_epoch`, inside an event loop that the
test ends before any request could be made."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.client import accumulator as accumulator_module
from raftlog.client import futures as futures_module
from raftlog.client import sender as sender_module
from raftlog.client.accumulator import Accumulator, ProducerBatch
from raftlog.client.cluster import parse_bootstrap
from raftlog.client.consumer import ConsumerConfig
from raftlog.client.idempotence import IdempotenceState
from raftlog.client.producer import (
    BatchResult,
    ProducerConfig,
    RecordFuture,
    RecordFutures,
    Span,
    default_partitioner,
)
from raftlog.client.sender import Sender
from raftlog.errors import InvalidConfigError, RaftlogTimeoutError
from raftlog.metadata.model import PartitionInfo, TopicInfo
from raftlog.records import BatchBuilder, decode_records, validate_batch
from raftlog.topics import TopicPartition

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _topic() -> TopicInfo:
    """Topic "t": partition p led by node p."""
    return TopicInfo("t", "id", tuple(PartitionInfo(p, p, 0, (p,), (p,)) for p in range(2)))


def _acc(rng: random.Random | None = None, **kw: object) -> tuple[Accumulator, list[int]]:
    """An accumulator with metadata for topic "t"; the sender's wake-ups are counted."""
    wakes: list[int] = []
    acc = Accumulator(
        ProducerConfig(**kw),  # type: ignore[arg-type]
        {"t": _topic()},
        lambda: wakes.append(1),
        rng,
    )
    return acc, wakes


def _send(
    acc: Accumulator,
    tp: TopicPartition | None,
    key: bytes | None,
    value: bytes,
    headers: tuple[tuple[str, bytes], ...] = (),
) -> RecordFuture:
    fut = acc.append("t", value, key, headers, None if tp is None else tp.partition, None, True)
    assert fut is not None
    return fut


def _idempotent(**kw: object) -> tuple[Accumulator, IdempotenceState]:
    """An accumulator and the idempotence state of producer 7, epoch 0."""
    acc, _ = _acc(**kw)
    idem = IdempotenceState()
    idem.start(7, 0)
    return acc, idem


def _known_to_leaders(idem: IdempotenceState, *tps: TopicPartition) -> None:
    """As if each partition had acknowledged a batch of the producer's epoch ending before
    sequence 0 (an empty one): its leader knows the producer, so more than one batch may be in
    flight."""
    for tp in tps:
        empty = ProducerBatch(tp, 0.0, 1.0)
        idem.begin_send(empty)
        idem.end_send(tp)
        idem.acked(empty)


def _drain_idempotent(acc: Accumulator, idem: IdempotenceState, now: float | None = None) -> Any:
    """The accumulator's drain as the sender calls it: every partition led by broker 0, five
    free request slots, the idempotence state's bound per partition."""
    t = time.monotonic() if now is None else now
    return acc.drain(t, lambda tp: 0, lambda n: 5, False, idem.room)


def _drain(
    acc: Accumulator, now: float, closing: bool = False, blocked: frozenset[int] = frozenset()
):  # type: ignore[no-untyped-def]
    requests, next_ready, expired = acc.drain(
        now, lambda tp: tp.partition, lambda n: 0 if n in blocked else 5, closing
    )
    assert expired == []
    return {n: [b for r in rs for b in r] for n, rs in requests.items()}, next_ready


def _sender(**kw: object) -> Sender:
    """A sender with metadata for topic "t", not started: nothing is sent. Call its
    `retry_or_fail` inside `_in_loop` (a retry schedules a metadata refresh)."""
    sender = Sender(ProducerConfig(**kw))  # type: ignore[arg-type]
    sender.client.topics["t"] = _topic()
    return sender


def _in_loop(body: Callable[[], None]) -> None:
    """Run `body` on an event loop that ends right after it: the metadata refreshes that
    retries schedule are cancelled before they could make a request."""

    async def run() -> None:
        body()

    asyncio.run(run())


def _stamped(idem: IdempotenceState, *batches: ProducerBatch) -> None:
    """The batches are sent: stamped, and in flight on their partitions."""
    for b in batches:
        idem.begin_send(b)


def test_batch_waits_for_linger_then_goes() -> None:
    acc, _ = _acc(linger_ms=10_000, batch_size=10_000)
    t0 = time.monotonic()
    _send(acc, TP0, None, b"x")
    ready, next_ready = _drain(acc, t0)
    assert ready == {} and next_ready == pytest.approx(t0 + 10, abs=1)
    ready, _ = _drain(acc, t0 + 11)
    assert [len(b.builder) for b in ready[0]] == [1]


def test_full_batch_goes_at_once_and_a_new_one_starts() -> None:
    acc, wakes = _acc(linger_ms=1000_000, batch_size=300)
    for _ in range(6):
        _send(acc, TP0, None, b"v" * 50)
    assert wakes  # the batch that filled up woke the sender
    ready, _ = _drain(acc, time.monotonic())
    # The full batch goes; the one still filling waits for its linger.
    assert len(ready[0]) == 1 and acc.pending() == 1


def test_drain_groups_by_leader_and_respects_request_size_and_blocked_nodes() -> None:
    acc, _ = _acc(linger_ms=0, batch_size=100, max_request_size=250)
    for _ in range(4):
        _send(acc, TP0, None, b"v" * 80)
        _send(acc, TP1, None, b"v" * 80)
    requests, _, _ = acc.drain(
        time.monotonic() + 1, lambda tp: tp.partition, lambda n: 0 if n else 2, False
    )
    assert set(requests) == {0}  # node 1 is at its in-flight limit
    assert len(requests[0]) == 2  # node 0 has 2 free slots: 2 requests, 2 batches left
    for request in requests[0]:
        assert sum(b.builder.size_bytes for b in request) <= 250
        assert all(b.tp == TP0 and b.sealed for b in request)
    assert acc.pending() == 4 + 2


def test_closing_drains_everything() -> None:
    acc, _ = _acc(linger_ms=60_000)
    _send(acc, TP0, None, b"x")
    ready, _ = _drain(acc, time.monotonic(), closing=True)
    assert len(ready[0]) == 1 and acc.pending() == 0


def test_batches_past_their_delivery_timeout_expire_in_the_queue() -> None:
    acc, _ = _acc(linger_ms=0, delivery_timeout_ms=1000)
    fut = _send(acc, TP0, None, b"x")
    requests, _, expired = acc.drain(time.monotonic() + 2, lambda tp: None, lambda n: 5, False)
    assert requests == {} and expired == [fut._batch]
    assert acc.buffered_bytes == 0 and acc.pending() == 0


def test_buffered_bytes_balance() -> None:
    acc, _ = _acc(linger_ms=0, batch_size=100)
    for _ in range(10):
        _send(acc, TP0, b"k", b"v" * 30)
    ready, _ = _drain(acc, time.monotonic() + 1)
    sent = sum(len(b.builder.build()) for b in ready[0])
    assert acc.buffered_bytes == sent
    acc.release(sent)
    assert acc.buffered_bytes == 0


def test_fast_path_builds_the_same_batches_and_sticks_until_a_batch_fills() -> None:
    """Keyless records go to one sticky partition until its batch fills, then to another;
    the fast path (records that fit the open batch) and the general one build identical
    batches, and a drained batch takes no more records."""
    acc, _ = _acc(linger_ms=1000_000, batch_size=1000)
    futs = [_send(acc, None, None, bytes([i]) * 100) for i in range(30)]
    by_partition: dict[int, list[int]] = {}
    for f in futs:
        by_partition.setdefault(f._batch.topic_partition.partition, []).append(f._index)
    # 7 records of 125 bytes fit a 1000-byte batch (65-byte header); then the sticky
    # partition changes (2 partitions).
    assert len(by_partition) == 2
    first = futs[0]._batch
    assert sum(f._batch is first for f in futs) == 7
    queues = acc.queues
    reference = BatchBuilder()
    batch = queues[first.topic_partition][0]
    for i, f in enumerate(futs):
        if f._batch is first:
            reference.append(None, bytes([i]) * 100, f._timestamp)
    assert batch.builder.build() == reference.build()
    # Drain everything; the next record must open a new batch, not reuse a sealed one.
    _drain(acc, time.monotonic(), closing=True)
    later = _send(acc, None, None, b"z")
    assert all(later._batch is not f._batch for f in futs)


def test_record_future_offsets_and_errors() -> None:
    result = BatchResult(TP1)
    futs = [RecordFuture(result, i, 1000 + i) for i in range(3)]
    seen: list[int] = []
    futs[2].add_done_callback(lambda f: seen.append(f.result().offset))
    with pytest.raises(RaftlogTimeoutError):
        futs[0].result(timeout=0)
    threading.Thread(target=result.complete, args=(40,)).start()
    assert [f.result(5).offset for f in futs] == [40, 41, 42]
    assert futs[1].result().timestamp == 1001 and seen == [42]
    failed = BatchResult(TP0)
    failed.complete(-1, RaftlogTimeoutError("gone"))
    with pytest.raises(RaftlogTimeoutError, match="gone"):
        RecordFuture(failed, 0, 0).result()
    late: list[str] = []
    RecordFuture(failed, 0, 0).add_done_callback(lambda f: late.append("called"))
    assert late == ["called"]  # a callback added after completion runs at once


def test_partitioner_is_stable_and_spreads() -> None:
    keys = [f"user-{i}".encode() for i in range(3000)]
    parts = [default_partitioner(k, 6) for k in keys]
    assert parts == [default_partitioner(k, 6) for k in keys]
    counts = [parts.count(p) for p in range(6)]
    assert min(counts) > 400  # 500 expected each


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"acks": 2}, "acks"),
        ({"compression_type": "brotli"}, "compression_type"),
        ({"batch_size": 0}, "batch_size"),
        ({"linger_ms": -1}, "linger_ms"),
    ],
)
def test_producer_config_validation(kw: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidConfigError, match=field):
        ProducerConfig(**kw)  # type: ignore[arg-type]


def test_consumer_config_validation() -> None:
    with pytest.raises(InvalidConfigError, match="auto_offset_reset"):
        ConsumerConfig(auto_offset_reset="middle")
    with pytest.raises(InvalidConfigError, match="group_id"):
        ConsumerConfig(group_id="")
    with pytest.raises(InvalidConfigError, match="heartbeat_interval_ms"):
        ConsumerConfig(group_id="g", heartbeat_interval_ms=5000, session_timeout_ms=5000)


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["h:9092"]) == [("h", 9092)]
    for bad in ("", "host", "host:0", "host:x", ":9092"):
        with pytest.raises(InvalidConfigError):
            parse_bootstrap(bad)


def test_batches_never_outgrow_batch_size() -> None:
    """A batch closes before a record would take it past batch_size (one record minimum), so a
    batch_size near the broker's max_message_bytes never yields refused batches."""
    acc, wakes = _acc(linger_ms=60_000, batch_size=1000)
    closed = 0
    for n in range(0, 400, 7):
        before = acc.pending()
        _send(acc, TP0, b"k", b"x" * n, (("h", b"v"),))
        closed += acc.pending() > before and before > 0
        acc.wake_scheduled = False  # as a sender pass would
    sizes = [b.builder.size_bytes for b in acc.queues[TP0]]
    assert max(sizes) <= 1000 and len(sizes) > 1
    assert sizes == [len(b.builder.build()) for b in acc.queues[TP0]]
    assert len(wakes) >= closed  # every closed batch woke the sender
    acc, _ = _acc(batch_size=100)
    _send(acc, TP0, None, b"y" * 500)  # alone, it may exceed batch_size
    assert [len(b.builder) for b in acc.queues[TP0]] == [1]


def test_client_metadata_never_goes_back_to_an_older_leader_epoch() -> None:
    from raftlog.client.cluster import ClusterClient

    c = ClusterClient("127.0.0.1:1")
    newer = TopicInfo("t", "id", (PartitionInfo(0, 2, 5, (1, 2), (2,)),))
    older = TopicInfo("t", "id", (PartitionInfo(0, 1, 4, (1, 2), (1, 2)),))
    assert c._newest(newer).partitions[0].leader == 2
    assert c._newest(older).partitions[0].leader == 2  # a lagging broker's answer is ignored
    recreated = TopicInfo("t", "other-id", (PartitionInfo(0, 1, 0, (1,), (1,)),))
    assert c._newest(recreated).partitions[0].leader == 1  # a new topic id starts afresh


def test_a_record_that_exactly_fills_the_open_batch_wakes_the_sender_and_moves_on() -> None:
    """4 records of 125 bytes fill a 565-byte batch exactly (65-byte header): the 4th takes
    the fast path, and must still wake the sender and move the sticky partition."""
    acc, wakes = _acc(linger_ms=1000_000, batch_size=65 + 4 * 125)
    futs = [_send(acc, None, None, b"v" * 100)]
    assert len(wakes) == 1  # the partition's first batch opened: its linger clock starts
    acc.wake_scheduled = False  # as a sender pass would
    futs += [_send(acc, None, None, b"v" * 100) for _ in range(3)]
    assert len({f._batch for f in futs}) == 1
    batch = acc.queues[futs[0]._batch.topic_partition][0]
    assert batch.builder.size_bytes == 565 and acc.open_batches["t"] is batch
    assert len(wakes) == 2  # the 4th record filled it
    # The next record goes to the other partition, in a new batch.
    nxt = _send(acc, None, None, b"w")
    assert nxt._batch.topic_partition != futs[0]._batch.topic_partition
    ready, _ = _drain(acc, time.monotonic())
    assert [len(b.builder) for b in ready[futs[0]._batch.topic_partition.partition]] == [4]
    assert acc.batches_since_yield == 0


def test_one_record_per_batch_and_what_a_completed_batch_keeps() -> None:
    """batch_size below one record: every record is a sealed batch of its own (the paper's
    one message per request), with the bytes append + seal would make; completing a batch
    gives its futures their offsets and drops the record bytes."""
    acc, _ = _acc(linger_ms=0, batch_size=1)
    futs = [_send(acc, TP0, None, b"v%d" % i) for i in range(3)]
    futs.append(_send(acc, TP0, b"key", b"keyed", (("h", b"1"),)))
    batches = list(acc.queues[TP0])
    assert [len(b.builder) for b in batches] == [1, 1, 1, 1] and all(b.sealed for b in batches)
    # Each counts towards the sync Producer's next GIL yield; bigger batches do not.
    assert acc.batches_since_yield == 4
    for f, b, (k, v, h) in zip(
        futs,
        batches,
        [
            (None, b"v0", ()),
            (None, b"v1", ()),
            (None, b"v2", ()),
            (b"key", b"keyed", (("h", b"1"),)),
        ],
        strict=True,
    ):
        reference = BatchBuilder()
        reference.append(k, v, f._timestamp, h)
        assert f._batch is b and b.builder.build() == reference.build()
    assert acc.buffered_bytes == sum(b.builder.size_bytes for b in batches)
    for i, b in enumerate(batches):
        b.complete(100 + i)
    assert [f.result(0).offset for f in futs] == [100, 101, 102, 103]
    assert all(b"keyed" not in b"".join(b.builder.build_parts()) for b in batches)


def test_a_blocked_send_resumes_once_the_buffer_drains_to_seven_eighths() -> None:
    acc, _ = _acc(linger_ms=60_000, batch_size=100, buffer_memory=8000, max_block_ms=10_000)
    while acc.buffered_bytes < 8000:
        _send(acc, TP0, None, b"x" * 60)
    full = acc.buffered_bytes
    done = threading.Event()

    def blocked_send() -> None:
        _send(acc, TP1, None, b"y")
        done.set()

    t = threading.Thread(target=blocked_send)
    t.start()
    deadline = time.monotonic() + 10
    while acc.space_waiters == 0:  # it is waiting for space
        assert time.monotonic() < deadline
        time.sleep(0.001)
    acc.release(full - 7000 - 1)  # still above 7/8 of buffer_memory: stays blocked
    assert not done.wait(0.2) and acc.space_waiters == 1
    acc.release(2)  # now at 7/8: it resumes
    assert done.wait(10)
    t.join(10)
    assert acc.space_waiters == 0


def test_the_first_completion_wins_and_a_raising_callback_stops_nothing() -> None:
    """A batch expired at its delivery timeout keeps that outcome when a late answer comes;
    an application callback that raises is logged, and the other callbacks still run (it
    runs on the sender, which must not die of it)."""
    result = BatchResult(TP0)
    seen: list[str] = []

    def bad(f: RecordFuture) -> None:
        raise ValueError("application bug")

    RecordFuture(result, 0, 0).add_done_callback(bad)
    RecordFuture(result, 1, 0).add_done_callback(lambda f: seen.append("ran"))
    assert result.expire(RaftlogTimeoutError("expired")) is True
    assert seen == ["ran"]
    assert result.complete(7) is False  # the late answer
    with pytest.raises(RaftlogTimeoutError, match="expired"):
        RecordFuture(result, 0, 0).result(0)


def test_a_wait_without_timeout_ends_at_the_deadline_plus_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nobody completes the batch (a stuck sender): result() and exception() without a
    timeout still return, EXPIRY_GRACE_S after its deadline, and expire it for everyone."""
    monkeypatch.setattr(futures_module, "EXPIRY_GRACE_S", 0.05)  # the waits
    monkeypatch.setattr(accumulator_module, "EXPIRY_GRACE_S", 0.05)  # the batch's error
    acc, _ = _acc(linger_ms=0, delivery_timeout_ms=100)
    fut = _send(acc, TP0, None, b"x")
    started = time.monotonic()
    with pytest.raises(RaftlogTimeoutError, match=r"delivery_timeout_ms=100 \+ 0.05 s"):
        fut.result()
    assert 0.15 <= time.monotonic() - started < 2
    assert isinstance(fut.exception(), RaftlogTimeoutError) and fut.done()
    # A wait with a timeout shorter than that bound is only a wait.
    other = _send(acc, TP1, None, b"y")
    with pytest.raises(RaftlogTimeoutError, match=r"within 0\.01 s"):
        other.result(0.01)
    assert not other.done()


def test_an_expired_batch_names_its_attempts_and_last_error() -> None:
    from raftlog.errors import StorageError

    sender = _sender(linger_ms=0, delivery_timeout_ms=1000)
    _send(sender.acc, TP0, None, b"x")
    (batch,) = sender.acc.queued()

    def retries() -> None:
        for _ in range(3):
            sender.retry_or_fail(batch, StorageError("t-0: no space left on device (ENOSPC)"))

    _in_loop(retries)
    error = batch.expiry_error("not sent")
    assert str(error) == (
        "record batch for t-0 expired after 3 attempt(s): not sent within "
        "delivery_timeout_ms=1000; last error: StorageError: t-0: no space left on device "
        "(ENOSPC)"
    )


def test_idempotence_is_the_default_and_its_conflicts(caplog: pytest.LogCaptureFixture) -> None:
    assert ProducerConfig().enable_idempotence is True
    # Only the default: turned off, with a warning naming why.
    assert ProducerConfig(acks=1).enable_idempotence is False
    assert "acks=1" in caplog.text
    caplog.clear()
    cfg = ProducerConfig(max_in_flight_requests_per_connection=6)
    assert cfg.enable_idempotence is False and "max_in_flight" in caplog.text
    # Asked for explicitly: a configuration error.
    with pytest.raises(InvalidConfigError, match="acks"):
        ProducerConfig(acks="1", enable_idempotence=True)
    with pytest.raises(InvalidConfigError, match="max_in_flight_requests_per_connection=6"):
        ProducerConfig(enable_idempotence=True, max_in_flight_requests_per_connection=6)
    assert ProducerConfig(acks=0, enable_idempotence=False).enable_idempotence is False


def test_idempotent_requests_take_one_batch_per_partition_and_retries_resend_in_order() -> None:
    acc, idem = _idempotent(linger_ms=0, batch_size=100)
    _known_to_leaders(idem, TP0)
    for i in range(4):
        _send(acc, TP0, None, b"v%d" % i + b"x" * 80)  # one batch each
    requests, _, _ = _drain_idempotent(acc, idem)
    assert [len(r) for r in requests[0]] == [1, 1, 1, 1]
    batches = [r[0] for r in requests[0]]
    _stamped(idem, *batches)
    assert [b.sequence for b in batches] == [0, 1, 2, 3]
    # Answers in any order: the failed batches go back in sequence order.
    for b in (batches[2], batches[0], batches[3]):
        idem.end_send(TP0)
        b.attempts += 1
        acc.requeue(b)
    assert [b.sequence for b in acc.queues[TP0]] == [0, 2, 3]
    # Nothing sent while its batch 1 is still in flight.
    assert _drain_idempotent(acc, idem)[0] == {}
    idem.end_send(TP0)
    # Then one retry at a time, in sequence order (Kafka's rule too): each must be answered
    # before the next goes, so none can overtake another.
    for expected in (0, 2, 3):
        requests, _, _ = _drain_idempotent(acc, idem)
        assert [r[0].sequence for r in requests[0]] == [expected]
        _stamped(idem, requests[0][0][0])
        assert _drain_idempotent(acc, idem)[0] == {}  # nothing more while it is in flight
        idem.end_send(TP0)
        idem.acked(requests[0][0][0])


def test_a_partition_sends_one_batch_until_its_leader_acknowledged_one() -> None:
    """A leader that knows nothing of the producer appends its first batch at any sequence:
    with two batches in flight, a refused first (UnknownTopicOrPartition: the leader did not
    host the partition yet) and an appended second would leave the first behind the
    partition's sequences for good."""
    acc, idem = _idempotent(linger_ms=0, batch_size=100)
    for v in (b"a", b"b", b"c"):
        _send(acc, TP0, None, v * 90)
    requests, _, _ = _drain_idempotent(acc, idem)
    (first,) = (r[0] for r in requests[0])
    _stamped(idem, first)
    assert _drain_idempotent(acc, idem)[0] == {}  # the second waits for the first's answer
    idem.end_send(TP0)
    idem.acked(first)
    first.complete(0)
    requests, _, _ = _drain_idempotent(acc, idem)
    assert [len(r) for r in requests[0]] == [1, 1]  # then both at once


def test_out_of_order_behind_an_acknowledged_batch_bumps_the_epoch_and_restamps_it() -> None:
    """The hole the rule above prevents, met anyway (a leader that lost the producer's state
    mid-stream): batch A is refused before append, B after it is acknowledged, A's retry is
    out of order. A is behind what the partition acknowledged: never appendable under its
    sequence, so the producer bumps its epoch and A is restamped (it was never appended)."""
    from raftlog.errors import OutOfOrderSequenceError, UnknownTopicOrPartitionError

    sender = _sender(linger_ms=0, batch_size=100)
    acc, idem = sender.acc, sender.idem
    assert idem is not None
    idem.start(7, 0)
    _known_to_leaders(idem, TP0)
    futures = [_send(acc, TP0, None, v * 90) for v in (b"a", b"b")]
    requests, _, _ = _drain_idempotent(acc, idem)
    a, b = (r[0] for r in requests[0])
    _stamped(idem, a, b)
    idem.end_send(TP0)
    _in_loop(lambda: sender.retry_or_fail(a, UnknownTopicOrPartitionError("not hosted yet")))
    assert not a.outcome_unknown  # refused before any append
    idem.end_send(TP0)
    idem.acked(b)
    b.complete(1)
    sender.client.topics["t"] = _topic()  # the retry dropped it (a refresh would restore it)
    requests, _, _ = _drain_idempotent(acc, idem, a.retry_at)
    assert [r[0] for r in requests[0]] == [a]  # resent under its sequence
    _stamped(idem, a)
    idem.end_send(TP0)
    _in_loop(lambda: sender.retry_or_fail(a, OutOfOrderSequenceError("behind the kept batches")))
    assert idem.bump_pending and idem.bump_due
    sender.bump_epoch()
    assert not futures[0].done() and list(acc.queues[TP0]) == [a] and a.sequence == -1
    assert idem.epoch == 1 and idem.ready


def test_a_lost_sequence_bumps_the_epoch_and_restamps_from_zero() -> None:
    from raftlog.errors import OutOfOrderSequenceError

    sender = _sender(linger_ms=0, batch_size=100)
    acc, idem = sender.acc, sender.idem
    assert idem is not None
    idem.start(7, 3)
    _known_to_leaders(idem, TP0)
    _send(acc, TP0, None, b"a" * 90)
    _send(acc, TP0, None, b"b" * 90)
    requests, _, _ = _drain_idempotent(acc, idem)
    first, second = (r[0] for r in requests[0])
    _stamped(idem, first, second)
    idem.end_send(TP0)
    idem.end_send(TP0)

    def answers() -> None:
        # The leader lost the state: OutOfOrderSequence for the first unacknowledged batch.
        sender.retry_or_fail(first, OutOfOrderSequenceError("lost"))
        assert idem.bump_pending
        sender.retry_or_fail(second, OutOfOrderSequenceError("after a gap"))

    _in_loop(answers)
    assert [b.sequence for b in acc.queues[TP0]] == [0, 1]
    sender.bump_epoch()
    assert idem.epoch == 4 and not idem.bump_pending
    assert [b.sequence for b in acc.queues[TP0]] == [-1, -1]
    idem.begin_send(first)
    head, tail = first.builder.build_parts()
    from raftlog.records import with_producer

    h = validate_batch(
        b"".join(with_producer(head, tail, idem.producer_id, first.producer_epoch, first.sequence))
    )
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 4, 0)


def test_an_epoch_bump_fails_the_batches_of_unknown_outcome_and_restamps_the_rest() -> None:
    from raftlog.errors import (
        BrokerNotAvailableError,
        NotLeaderOrFollowerError,
        OutOfOrderSequenceError,
    )

    sender = _sender(linger_ms=0, batch_size=100)
    acc, idem = sender.acc, sender.idem
    assert idem is not None
    idem.start(7, 3)
    _known_to_leaders(idem, TP0, TP1)
    futures = [_send(acc, tp, None, v * 90) for tp, v in ((TP0, b"a"), (TP0, b"b"), (TP1, b"c"))]
    requests, _, _ = _drain_idempotent(acc, idem)
    lost, refused, other = (b for r in requests[0] for b in r)
    _stamped(idem, lost, refused, other)
    for b in (lost, refused, other):
        idem.end_send(b.tp)

    def answers() -> None:
        sender.retry_or_fail(lost, BrokerNotAvailableError("connection lost"))  # maybe appended
        sender.retry_or_fail(refused, OutOfOrderSequenceError("after a gap"))  # certainly not
        # A written request that fails on its connection, then a later attempt that is
        # refused: the first attempt may still have been appended.
        sender.retry_or_fail(other, NotLeaderOrFollowerError("moved"))
        assert acc.queues[TP1].popleft() is other  # drained again
        sender.retry_or_fail(other, NotLeaderOrFollowerError("no connection yet"), written=False)

    _in_loop(answers)
    assert [lost.outcome_unknown, refused.outcome_unknown, other.outcome_unknown] == [
        True,
        False,
        True,
    ]
    sender.client.topics["t"] = _topic()  # the retries dropped it (a refresh would restore it)
    never = _send(acc, TP1, None, b"d" * 90)  # queued, never sent
    idem.sequence_lost(refused)
    failing_bytes = lost.builder.size_bytes + other.builder.size_bytes
    before = acc.buffered_bytes
    sender.bump_epoch()
    assert idem.epoch == 4
    for f in (futures[0], futures[2]):
        error = f.exception(0)
        assert isinstance(error, OutOfOrderSequenceError) and "outcome is unknown" in str(error)
    assert not futures[1].done() and not never.done()
    assert [b.sequence for b in acc.queued()] == [-1, -1]
    assert list(acc.queues[TP0]) == [refused]
    assert acc.buffered_bytes == before - failing_bytes


# -- send_many ---------------------------------------------------------------------------------


def many_of(acc: Accumulator, values: list[bytes], partition: int | None) -> RecordFutures:
    """send_many's accumulator call, all of `values` queued (the topic's metadata is known)."""
    spans: list[Span] = []
    assert acc.append_many("t", values, 0, partition, True, spans) == len(values)
    return RecordFutures(spans)


def test_send_many_goes_on_where_the_metadata_went_missing() -> None:
    """The metadata dropped midway (after an error, from the sender's thread): the values
    queued so far stay queued once, and the call says where to go on."""
    topics = {"t": _topic()}
    acc = Accumulator(ProducerConfig(linger_ms=60_000, batch_size=1000), topics, lambda: None)
    values = [b"a", b"", b"c", b"d"]  # an empty value: the checked, one-by-one path
    spans: list[Span] = []
    original = acc.append
    calls = 0

    def dropping(*args: object) -> RecordFuture | None:
        nonlocal calls
        calls += 1
        if calls == 3:
            topics.pop("t")
        return original(*args)  # type: ignore[arg-type]

    acc.append = dropping  # type: ignore[method-assign]
    info = topics["t"]
    assert acc.append_many("t", values, 0, 1, True, spans) == 2
    topics["t"] = info
    assert acc.append_many("t", values, 2, 1, True, spans) == 4
    group = RecordFutures(spans)
    (batch,) = acc.queues[TP1]
    assert len(batch.builder) == 4  # each value once
    batch.complete(10)
    assert [m.offset for m in group.result(0)] == [10, 11, 12, 13]


@given(
    sizes=st.lists(st.sampled_from([1, 1, 1, 7, 200, 200, 900]), min_size=1, max_size=60),
    batch_size=st.integers(1, 3000),
    partition=st.sampled_from([None, 1]),
)
@settings(max_examples=60, deadline=None)
def test_send_many_builds_the_batches_that_sends_one_by_one_build(
    sizes: list[int], batch_size: int, partition: int | None
) -> None:
    """The same records, batch boundaries, sticky partition moves and sizes as send() called
    for each value in order (mixed lengths: runs of one length take the fast path)."""
    values = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    one, _ = _acc(random.Random(7), linger_ms=60_000, batch_size=batch_size)
    many, _ = _acc(random.Random(7), linger_ms=60_000, batch_size=batch_size)
    futs = [
        one.append("t", v, None, None, partition, 1234, True) for v in values
    ]  # the timestamp send_many will use
    group = many_of(many, values, partition)
    assert len(group) == len(values)
    for f, g in zip(futs, group, strict=True):
        assert f is not None
        assert f._batch.topic_partition == g._batch.topic_partition and f._index == g._index
    for tp, batches in one.queues.items():
        theirs = many.queues[tp]
        assert [len(b.builder) for b in batches] == [len(b.builder) for b in theirs]
        for a, b in zip(batches, theirs, strict=True):
            built = b.builder.build()
            assert len(built) == b.builder.size_bytes
            assert [r.value for r in decode_records(built)] == [
                r.value for r in decode_records(a.builder.build())
            ]
    assert one.added_bytes - many.added_bytes == 0


def test_send_many_results_and_a_failed_batch() -> None:
    acc, wakes = _acc(linger_ms=60_000, batch_size=1000)
    group = many_of(acc, [b"v" * 100] * 20, 0)
    assert len(group) == 20 and not group.done()
    batches = acc.queues[TP0]
    assert [len(b.builder) for b in batches] == [7, 7, 6] and wakes
    assert [f._index for f in group[5:9]] == [5, 6, 0, 1] and group[-1]._index == 5
    with pytest.raises(RaftlogTimeoutError):
        group.result(timeout=0)
    batches[0].complete(100)
    batches[1].complete(300)
    batches[2].complete(-1, RaftlogTimeoutError("batch 3 expired"))
    assert group.done()
    with pytest.raises(RaftlogTimeoutError, match="batch 3 expired"):
        group.result()
    assert [f.result(0).offset for f in group[:14]] == [*range(100, 107), *range(300, 307)]
    with pytest.raises(IndexError, match="record 20 of 20"):
        group[20]
    ok, _ = _acc(linger_ms=60_000, batch_size=1000)
    g2 = many_of(ok, [b"a", b"", b"c"], 1)  # an empty value: the checked path
    ok.queues[TP1][0].complete(50)
    assert [m.offset for m in g2.result(0)] == [50, 51, 52]
    with pytest.raises(TypeError, match="value"):
        many_of(ok, [b"a", "text"], 1)  # type: ignore[list-item]


def test_a_retried_batch_waits_its_backoff_which_doubles_up_to_the_maximum() -> None:
    """KIP-580: 100 ms, doubling per failed try, at most retry_backoff_max_ms, +-20%. Clients
    that retried every 100 ms kept a broker still opening 10,000 partitions busy refusing them."""
    from raftlog.client.producer import retry_backoff_s
    from raftlog.errors import NotLeaderOrFollowerError

    cfg = ProducerConfig(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    for attempts, nominal in ((1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (40, 1.0)):
        waits = [retry_backoff_s(cfg, attempts) for _ in range(200)]
        assert 0.8 * nominal <= min(waits) and max(waits) <= 1.2 * nominal, attempts
        assert max(waits) - min(waits) > 0.1 * nominal  # jittered
    # A maximum below the base: the base.
    assert retry_backoff_s(ProducerConfig(retry_backoff_ms=500, retry_backoff_max_ms=0), 3) >= 0.4
    with pytest.raises(InvalidConfigError, match="retry_backoff_max_ms=-1"):
        ProducerConfig(retry_backoff_max_ms=-1)

    sender = _sender(linger_ms=0, batch_size=100)
    acc, idem = sender.acc, sender.idem
    assert idem is not None
    _send(acc, TP0, None, b"a" * 90)
    requests, _, _ = _drain_idempotent(acc, idem)
    (batch,) = (r[0] for r in requests[0])
    before = time.monotonic()
    _in_loop(lambda: sender.retry_or_fail(batch, NotLeaderOrFollowerError("moved"), False))
    assert before + 0.08 <= batch.retry_at <= time.monotonic() + 0.12
    # Not sent again before its time, and the sender is told when to look again.
    requests, next_ready, _ = _drain_idempotent(acc, idem, before)
    assert requests == {} and next_ready == batch.retry_at
    requests, _, _ = _drain_idempotent(acc, idem, batch.retry_at)
    assert requests[0][0] == [batch]


def test_retries_are_warned_once_per_topic_per_interval_with_a_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topic whose leaders were not ready yet: one WARNING per topic per interval, however
    many partitions retry (10,000 partitions logged 10,000 lines), then one with the count."""
    from raftlog.errors import NotLeaderOrFollowerError

    clock = [1000.0]  # the sender's clock, advanced by the test
    monkeypatch.setattr(sender_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    sender = _sender(linger_ms=0, batch_size=100)
    acc, idem = sender.acc, sender.idem
    assert idem is not None
    idem.start(7, 0)
    _known_to_leaders(idem, TP0, TP1)
    for tp in (TP0, TP1, TP0):
        _send(acc, tp, None, b"a" * 90)
    requests, _, _ = _drain_idempotent(acc, idem)
    batches = [b for request in requests[0] for b in request]
    assert len(batches) == 3
    caplog.set_level("WARNING", logger="raftlog.client.sender")

    def retry(b: ProducerBatch) -> None:
        sender.retry_or_fail(b, NotLeaderOrFollowerError("not ready"), written=False)

    _in_loop(lambda: [retry(b) for b in batches] and None)
    warnings = [r for r in caplog.records if "retrying a record batch" in r.getMessage()]
    assert len(warnings) == 1 and "more retries" not in warnings[0].getMessage()
    clock[0] += sender_module.RETRY_WARNING_INTERVAL_S - 0.001
    _in_loop(lambda: retry(batches[0]))
    assert len([r for r in caplog.records if "retrying a record batch" in r.getMessage()]) == 1
    clock[0] += 0.001  # the interval is over
    _in_loop(lambda: retry(batches[1]))
    last = [r for r in caplog.records if "retrying a record batch" in r.getMessage()][-1]
    assert f"({len(batches)} more retries of t since the last line)" in last.getMessage()


# -- the sender with a connection that writes nowhere --------------------------------------------


class _Transport:
    """A transport that drops what the connection writes."""

    def writelines(self, parts: Any) -> None:
        pass

    def write(self, data: Any) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 0)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def test_a_one_batch_answer_acknowledges_every_record_of_the_batch() -> None:
    """A Produce answer for a batch of 3 records: the partition's acknowledged sequences end
    after all 3, so an OutOfOrderSequence for the next batch (sequence 3) says the leader lost
    the producer's state, and the epoch is bumped. Counted after the batch completed (which
    drops its records), the acknowledged end was 1, and the next batch was retried as if an
    earlier one were unanswered, until its delivery timeout."""
    from raftlog import protocol
    from raftlog.client.connection import FIRST_CORRELATION_ID, BrokerConnection
    from raftlog.errors import OutOfOrderSequenceError

    def answer(conn: BrokerConnection, corr: int, error: int, offset: int) -> None:
        result = [0, error, offset, 0, None]
        conn.data_received(b"".join(protocol.encode_response(corr, {"topics": [["t", [result]]]})))

    async def run() -> None:
        sender = _sender(linger_ms=0, batch_size=10_000)
        conn = BrokerConnection("127.0.0.1", 0, "test")
        conn.transport = _Transport()  # type: ignore[assignment]
        conn.limits_learned = True
        sender.client.ready_connection = lambda node: conn  # type: ignore[method-assign]
        idem = sender.idem
        assert idem is not None
        idem.start(7, 0)
        sender.start()
        first = sender.acc.append_many("t", [b"a", b"b", b"c"], 0, 0, False, [])
        assert first == 3
        for _ in range(3):
            await asyncio.sleep(0)
        answer(conn, FIRST_CORRELATION_ID, 0, 100)
        second = _send(sender.acc, TP0, None, b"d")._batch
        for _ in range(3):
            await asyncio.sleep(0)
        assert second.sequence == 3
        answer(conn, FIRST_CORRELATION_ID + 1, OutOfOrderSequenceError.code, -1)
        assert idem.bump_pending
        await sender.close(0)

    asyncio.run(run())
