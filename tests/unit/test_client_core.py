"""Pure parts of the clients: the producer's accumulator, futures, partitioner and configs."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.client.cluster import parse_bootstrap
from raftlog.client.consumer import ConsumerConfig
from raftlog.client.producer import (
    BatchResult,
    ProducerConfig,
    RecordFuture,
    RecordFutures,
    Span,
    _ProducerCore,
    default_partitioner,
)
from raftlog.errors import InvalidConfigError, RaftlogTimeoutError
from raftlog.metadata.model import PartitionInfo, TopicInfo
from raftlog.records import BatchBuilder, decode_records
from raftlog.topics import TopicPartition

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _core(rng: random.Random | None = None, **kw: object) -> tuple[_ProducerCore, list[int]]:
    """A producer core with metadata for topic "t" (partition p led by node p) and no loop:
    wake-ups are counted instead of sent."""
    core = _ProducerCore(ProducerConfig(**kw), rng)  # type: ignore[arg-type]
    core.client.topics["t"] = TopicInfo(
        "t", "id", tuple(PartitionInfo(p, p, 0, (p,), (p,)) for p in range(2))
    )
    wakes: list[int] = []
    core._wake = lambda: wakes.append(1)  # type: ignore[method-assign]
    return core, wakes


def _send(
    core: _ProducerCore,
    tp: TopicPartition | None,
    key: bytes | None,
    value: bytes,
    headers: tuple[tuple[str, bytes], ...] = (),
) -> RecordFuture:
    fut = core.append("t", value, key, headers, None if tp is None else tp.partition, None, True)
    assert fut is not None
    return fut


def _known_to_leaders(core: _ProducerCore, *tps: TopicPartition) -> None:
    """As if each partition had acknowledged a batch of the producer's epoch ending before
    sequence 0: its leader knows the producer, so more than one batch may be in flight."""
    for tp in tps:
        core._acked_next[tp] = 0


def _drain_idempotent(core: _ProducerCore, now: float | None = None) -> Any:
    """The accumulator's drain as the sender calls it: every partition led by broker 0, five
    free request slots, the core's idempotence bound per partition."""
    t = time.monotonic() if now is None else now
    return core.acc.drain(t, lambda tp: 0, lambda n: 5, False, core._room_of)


def _drain(
    core: _ProducerCore, now: float, closing: bool = False, blocked: frozenset[int] = frozenset()
):  # type: ignore[no-untyped-def]
    requests, next_ready, expired = core.acc.drain(
        now, lambda tp: tp.partition, lambda n: 0 if n in blocked else 5, closing
    )
    assert expired == []
    return {n: [b for r in rs for b in r] for n, rs in requests.items()}, next_ready


def test_batch_waits_for_linger_then_goes() -> None:
    core, _ = _core(linger_ms=10_000, batch_size=10_000)
    t0 = time.monotonic()
    _send(core, TP0, None, b"x")
    ready, next_ready = _drain(core, t0)
    assert ready == {} and next_ready == pytest.approx(t0 + 10, abs=1)
    ready, _ = _drain(core, t0 + 11)
    assert [len(b.builder) for b in ready[0]] == [1]


def test_full_batch_goes_at_once_and_a_new_one_starts() -> None:
    core, wakes = _core(linger_ms=1000_000, batch_size=300)
    for _ in range(6):
        _send(core, TP0, None, b"v" * 50)
    assert wakes  # the batch that filled up woke the sender
    ready, _ = _drain(core, time.monotonic())
    # The full batch goes; the one still filling waits for its linger.
    assert len(ready[0]) == 1 and core.acc.pending() == 1


def test_drain_groups_by_leader_and_respects_request_size_and_blocked_nodes() -> None:
    core, _ = _core(linger_ms=0, batch_size=100, max_request_size=250)
    for _ in range(4):
        _send(core, TP0, None, b"v" * 80)
        _send(core, TP1, None, b"v" * 80)
    requests, _, _ = core.acc.drain(
        time.monotonic() + 1, lambda tp: tp.partition, lambda n: 0 if n else 2, False
    )
    assert set(requests) == {0}  # node 1 is at its in-flight limit
    assert len(requests[0]) == 2  # node 0 has 2 free slots: 2 requests, 2 batches left
    for request in requests[0]:
        assert sum(b.builder.size_bytes for b in request) <= 250
        assert all(b.tp == TP0 and b.sealed for b in request)
    assert core.acc.pending() == 4 + 2


def test_closing_drains_everything() -> None:
    core, _ = _core(linger_ms=60_000)
    _send(core, TP0, None, b"x")
    ready, _ = _drain(core, time.monotonic(), closing=True)
    assert len(ready[0]) == 1 and core.acc.pending() == 0


def test_batches_past_their_delivery_timeout_expire_in_the_queue() -> None:
    core, _ = _core(linger_ms=0, delivery_timeout_ms=1000)
    fut = _send(core, TP0, None, b"x")
    requests, _, expired = core.acc.drain(time.monotonic() + 2, lambda tp: None, lambda n: 5, False)
    assert requests == {} and expired == [fut._batch]
    assert core.acc.buffered_bytes == 0 and core.acc.pending() == 0


def test_buffered_bytes_balance() -> None:
    core, _ = _core(linger_ms=0, batch_size=100)
    for _ in range(10):
        _send(core, TP0, b"k", b"v" * 30)
    ready, _ = _drain(core, time.monotonic() + 1)
    sent = sum(len(b.builder.build()) for b in ready[0])
    assert core.acc.buffered_bytes == sent
    core.acc.release(sent)
    assert core.acc.buffered_bytes == 0


def test_fast_path_builds_the_same_batches_and_sticks_until_a_batch_fills() -> None:
    """Keyless records go to one sticky partition until its batch fills, then to another;
    the fast path (records that fit the open batch) and the general one build identical
    batches, and a drained batch takes no more records."""
    core, _ = _core(linger_ms=1000_000, batch_size=1000)
    futs = [_send(core, None, None, bytes([i]) * 100) for i in range(30)]
    by_partition: dict[int, list[int]] = {}
    for f in futs:
        by_partition.setdefault(f._batch.topic_partition.partition, []).append(f._index)
    # 7 records of 125 bytes fit a 1000-byte batch (65-byte header); then the sticky
    # partition changes (2 partitions).
    assert len(by_partition) == 2
    first = futs[0]._batch
    assert sum(f._batch is first for f in futs) == 7
    queues = core.acc.queues
    reference = BatchBuilder()
    batch = queues[first.topic_partition][0]
    for i, f in enumerate(futs):
        if f._batch is first:
            reference.append(None, bytes([i]) * 100, f._timestamp)
    assert batch.builder.build() == reference.build()
    # Drain everything; the next record must open a new batch, not reuse a sealed one.
    _drain(core, time.monotonic(), closing=True)
    later = _send(core, None, None, b"z")
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
        ({"compression_type": "gzip"}, "compression_type"),
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
    core, wakes = _core(linger_ms=60_000, batch_size=1000)
    closed = 0
    for n in range(0, 400, 7):
        before = core.acc.pending()
        _send(core, TP0, b"k", b"x" * n, (("h", b"v"),))
        closed += core.acc.pending() > before and before > 0
        core._wake_scheduled = False  # as a sender pass would
    sizes = [b.builder.size_bytes for b in core.acc.queues[TP0]]
    assert max(sizes) <= 1000 and len(sizes) > 1
    assert sizes == [len(b.builder.build()) for b in core.acc.queues[TP0]]
    assert len(wakes) >= closed  # every closed batch woke the sender
    core, _ = _core(batch_size=100)
    _send(core, TP0, None, b"y" * 500)  # alone, it may exceed batch_size
    assert [len(b.builder) for b in core.acc.queues[TP0]] == [1]


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
    core, wakes = _core(linger_ms=1000_000, batch_size=65 + 4 * 125)
    futs = [_send(core, None, None, b"v" * 100)]
    assert len(wakes) == 1  # the partition's first batch opened: its linger clock starts
    core._wake_scheduled = False  # as a sender pass would
    futs += [_send(core, None, None, b"v" * 100) for _ in range(3)]
    assert len({f._batch for f in futs}) == 1
    batch = core.acc.queues[futs[0]._batch.topic_partition][0]
    assert batch.builder.size_bytes == 565 and core._open["t"] is batch
    assert len(wakes) == 2  # the 4th record filled it
    # The next record goes to the other partition, in a new batch.
    nxt = _send(core, None, None, b"w")
    assert nxt._batch.topic_partition != futs[0]._batch.topic_partition
    ready, _ = _drain(core, time.monotonic())
    assert [len(b.builder) for b in ready[futs[0]._batch.topic_partition.partition]] == [4]
    assert core.batches_since_yield == 0


def test_one_record_per_batch_and_what_a_completed_batch_keeps() -> None:
    """batch_size below one record: every record is a sealed batch of its own (the paper's
    one message per request), with the bytes append + seal would make; completing a batch
    gives its futures their offsets and drops the record bytes."""
    core, _ = _core(linger_ms=0, batch_size=1)
    futs = [_send(core, TP0, None, b"v%d" % i) for i in range(3)]
    futs.append(_send(core, TP0, b"key", b"keyed", (("h", b"1"),)))
    batches = list(core.acc.queues[TP0])
    assert [len(b.builder) for b in batches] == [1, 1, 1, 1] and all(b.sealed for b in batches)
    # Each counts towards the sync Producer's next GIL yield; bigger batches do not.
    assert core.batches_since_yield == 4
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
    assert core.acc.buffered_bytes == sum(b.builder.size_bytes for b in batches)
    for i, b in enumerate(batches):
        b.complete(100 + i)
    assert [f.result(0).offset for f in futs] == [100, 101, 102, 103]
    assert all(b"keyed" not in b"".join(b.builder.build_parts()) for b in batches)


def test_a_blocked_send_resumes_once_the_buffer_drains_to_seven_eighths() -> None:
    core, _ = _core(linger_ms=60_000, batch_size=100, buffer_memory=8000, max_block_ms=10_000)
    while core.acc.buffered_bytes < 8000:
        _send(core, TP0, None, b"x" * 60)
    full = core.acc.buffered_bytes
    done = threading.Event()

    def blocked_send() -> None:
        _send(core, TP1, None, b"y")
        done.set()

    t = threading.Thread(target=blocked_send)
    t.start()
    deadline = time.monotonic() + 10
    while core.acc.space_waiters == 0:  # it is waiting for space
        assert time.monotonic() < deadline
        time.sleep(0.001)
    core.acc.release(full - 7000 - 1)  # still above 7/8 of buffer_memory: stays blocked
    assert not done.wait(0.2) and core.acc.space_waiters == 1
    core.acc.release(2)  # now at 7/8: it resumes
    assert done.wait(10)
    t.join(10)
    assert core.acc.space_waiters == 0


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
    import raftlog.client.producer as producer_module

    monkeypatch.setattr(producer_module, "EXPIRY_GRACE_S", 0.05)
    core, _ = _core(linger_ms=0, delivery_timeout_ms=100)
    fut = _send(core, TP0, None, b"x")
    started = time.monotonic()
    with pytest.raises(RaftlogTimeoutError, match=r"delivery_timeout_ms=100 \+ 0.05 s"):
        fut.result()
    assert 0.15 <= time.monotonic() - started < 2
    assert isinstance(fut.exception(), RaftlogTimeoutError) and fut.done()
    # A wait with a timeout shorter than that bound is only a wait.
    other = _send(core, TP1, None, b"y")
    with pytest.raises(RaftlogTimeoutError, match=r"within 0\.01 s"):
        other.result(0.01)
    assert not other.done()


def test_an_expired_batch_names_its_attempts_and_last_error() -> None:
    from raftlog.errors import StorageError

    core, _ = _core(linger_ms=0, delivery_timeout_ms=1000)
    batch = _send(core, TP0, None, b"x")._batch
    core.client.invalidate = lambda topic=None: None  # type: ignore[method-assign]
    core._schedule_refresh = lambda topic: None  # type: ignore[method-assign]
    core._kick = lambda: None  # type: ignore[method-assign]
    for _ in range(3):
        core._retry_or_fail(batch, StorageError("t-0: no space left on device (ENOSPC)"))
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
    core, _ = _core(linger_ms=0, batch_size=100)
    core._producer_id, core._producer_epoch = 7, 0
    _known_to_leaders(core, TP0)
    for i in range(4):
        _send(core, TP0, None, b"v%d" % i + b"x" * 80)  # one batch each
    requests, _, _ = _drain_idempotent(core)
    assert [len(r) for r in requests[0]] == [1, 1, 1, 1]
    batches = [r[0] for r in requests[0]]
    for b in batches:
        core._stamp(b, *b.builder.build_parts())
        core._tp_in_flight[TP0] += 1
    assert [b.sequence for b in batches] == [0, 1, 2, 3]
    # Answers in any order: the failed batches go back in sequence order.
    for b in (batches[2], batches[0], batches[3]):
        core._tp_in_flight[TP0] -= 1
        b.attempts += 1
        core.acc.requeue(b)
    assert [b.sequence for b in core.acc.queues[TP0]] == [0, 2, 3]
    # Muted while its batch 1 is still in flight.
    assert _drain_idempotent(core)[0] == {}
    core._tp_in_flight[TP0] -= 1
    requests, _, _ = _drain_idempotent(core)
    assert [r[0].sequence for r in requests[0]] == [0, 2, 3]


def test_a_partition_sends_one_batch_until_its_leader_acknowledged_one() -> None:
    """A leader that knows nothing of the producer appends its first batch at any sequence:
    with two batches in flight, a refused first (UnknownTopicOrPartition: the leader did not
    host the partition yet) and an appended second would leave the first behind the
    partition's sequences for good."""
    core, _ = _core(linger_ms=0, batch_size=100)
    core._spawn = lambda coro: coro.close()  # type: ignore[method-assign]
    core._producer_id, core._producer_epoch = 7, 0
    for v in (b"a", b"b", b"c"):
        _send(core, TP0, None, v * 90)
    requests, _, _ = _drain_idempotent(core)
    (first,) = (r[0] for r in requests[0])
    core._stamp(first, *first.builder.build_parts())
    core._tp_in_flight[TP0] += 1
    assert _drain_idempotent(core)[0] == {}  # the second waits for the first's answer
    core._tp_in_flight[TP0] -= 1
    core._acked(first)
    first.complete(0)
    requests, _, _ = _drain_idempotent(core)
    assert [len(r) for r in requests[0]] == [1, 1]  # then both at once


def test_out_of_order_behind_an_acknowledged_batch_bumps_the_epoch_and_restamps_it() -> None:
    """The hole the rule above prevents, met anyway (a leader that lost the producer's state
    mid-stream): batch A is refused before append, B after it is acknowledged, A's retry is
    out of order. A is behind what the partition acknowledged: never appendable under its
    sequence, so the producer bumps its epoch and A is restamped (it was never appended)."""
    from raftlog.errors import OutOfOrderSequenceError, UnknownTopicOrPartitionError

    core, _ = _core(linger_ms=0, batch_size=100)
    core._spawn = lambda coro: coro.close()  # type: ignore[method-assign]
    core._producer_id, core._producer_epoch = 7, 0
    _known_to_leaders(core, TP0)
    futures = [_send(core, TP0, None, v * 90) for v in (b"a", b"b")]
    requests, _, _ = _drain_idempotent(core)
    a, b = (r[0] for r in requests[0])
    for x in (a, b):
        core._stamp(x, *x.builder.build_parts())
    core._retry_or_fail(a, UnknownTopicOrPartitionError("not hosted yet"))
    assert not a.outcome_unknown  # refused before any append
    core._acked(b)
    b.complete(1)
    requests, _, _ = _drain_idempotent(core, a.retry_at)
    assert [r[0] for r in requests[0]] == [a]  # resent under its sequence
    core._retry_or_fail(a, OutOfOrderSequenceError("behind the retained batches"))
    assert core._bump_pending
    core._bump_epoch()
    assert not futures[0].done() and list(core.acc.queues[TP0]) == [a] and a.sequence == -1


def test_a_lost_sequence_bumps_the_epoch_and_restamps_from_zero() -> None:
    from raftlog.errors import OutOfOrderSequenceError

    core, _ = _core(linger_ms=0, batch_size=100)
    # No event loop here: the metadata refresh a retry schedules is not part of this check.
    core._spawn = lambda coro: coro.close()  # type: ignore[method-assign]
    core._producer_id, core._producer_epoch = 7, 3
    _known_to_leaders(core, TP0)
    _send(core, TP0, None, b"a" * 90)
    _send(core, TP0, None, b"b" * 90)
    requests, _, _ = _drain_idempotent(core)
    first, second = (r[0] for r in requests[0])
    for b in (first, second):
        core._stamp(b, *b.builder.build_parts())
    # The leader lost the state: OutOfOrderSequence for the first unacknowledged batch.
    core._retry_or_fail(first, OutOfOrderSequenceError("lost"))
    assert core._bump_pending
    core._retry_or_fail(second, OutOfOrderSequenceError("after a gap"))
    assert [b.sequence for b in core.acc.queues[TP0]] == [0, 1]
    core._bump_epoch()
    assert core._producer_epoch == 4 and not core._bump_pending
    assert [b.sequence for b in core.acc.queues[TP0]] == [-1, -1]
    head, tail = core._stamp(first, *first.builder.build_parts())
    from raftlog.records import validate_batch

    h = validate_batch(head + tail)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 4, 0)


def test_an_epoch_bump_fails_the_batches_of_unknown_outcome_and_restamps_the_rest() -> None:
    from raftlog.errors import (
        BrokerNotAvailableError,
        NotLeaderOrFollowerError,
        OutOfOrderSequenceError,
    )

    core, _ = _core(linger_ms=0, batch_size=100)
    core._spawn = lambda coro: coro.close()  # type: ignore[method-assign]
    core._producer_id, core._producer_epoch = 7, 3
    _known_to_leaders(core, TP0, TP1)
    topic = core.client.topics["t"]
    futures = [_send(core, tp, None, v * 90) for tp, v in ((TP0, b"a"), (TP0, b"b"), (TP1, b"c"))]
    requests, _, _ = _drain_idempotent(core)
    lost, refused, other = (b for r in requests[0] for b in r)
    for b in (lost, refused, other):
        core._stamp(b, *b.builder.build_parts())
    core._retry_or_fail(lost, BrokerNotAvailableError("connection lost"))  # maybe appended
    core._retry_or_fail(refused, OutOfOrderSequenceError("after a gap"))  # certainly not
    # A written request that fails on its connection, then a later attempt that is refused:
    # the first attempt may still have been appended.
    core._retry_or_fail(other, NotLeaderOrFollowerError("moved"))
    assert core.acc.queues[TP1].popleft() is other  # drained again
    core._retry_or_fail(other, NotLeaderOrFollowerError("no connection yet"), written=False)
    assert [lost.outcome_unknown, refused.outcome_unknown, other.outcome_unknown] == [
        True,
        False,
        True,
    ]
    core.client.topics["t"] = topic  # the retries dropped it (a refresh would restore it)
    never = _send(core, TP1, None, b"d" * 90)  # queued, never sent
    core._sequence_lost(refused)
    failing_bytes = lost.builder.size_bytes + other.builder.size_bytes
    before = core.acc.buffered_bytes
    core._bump_epoch()
    assert core._producer_epoch == 4
    for f in (futures[0], futures[2]):
        error = f.exception(0)
        assert isinstance(error, OutOfOrderSequenceError) and "outcome is unknown" in str(error)
    assert not futures[1].done() and not never.done()
    assert [b.sequence for q in core.acc.queues.values() for b in q] == [-1, -1]
    assert list(core.acc.queues[TP0]) == [refused]
    assert core.acc.buffered_bytes == before - failing_bytes


# -- send_many ---------------------------------------------------------------------------------


def many_of(core: _ProducerCore, values: list[bytes], partition: int | None) -> RecordFutures:
    """send_many's core call, all of `values` queued (the topic's metadata is known)."""
    spans: list[Span] = []
    assert core.append_many("t", values, 0, partition, True, spans) == len(values)
    return RecordFutures(spans)


def test_send_many_goes_on_where_the_metadata_went_missing() -> None:
    """The metadata dropped midway (after an error, from the sender's thread): the values
    queued so far stay queued once, and the call says where to go on."""
    core, _ = _core(linger_ms=60_000, batch_size=1000)
    values = [b"a", b"", b"c", b"d"]  # an empty value: the checked, one-by-one path
    spans: list[Span] = []
    original = core.append
    calls = 0

    def dropping(*args: object) -> RecordFuture | None:
        nonlocal calls
        calls += 1
        if calls == 3:
            core.client.topics.pop("t")
        return original(*args)  # type: ignore[arg-type]

    core.append = dropping  # type: ignore[method-assign]
    info = core.client.topics["t"]
    assert core.append_many("t", values, 0, 1, True, spans) == 2
    core.client.topics["t"] = info
    assert core.append_many("t", values, 2, 1, True, spans) == 4
    group = RecordFutures(spans)
    (batch,) = core.acc.queues[TP1]
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
    one, _ = _core(random.Random(7), linger_ms=60_000, batch_size=batch_size)
    many, _ = _core(random.Random(7), linger_ms=60_000, batch_size=batch_size)
    futs = [
        one.append("t", v, None, None, partition, 1234, True) for v in values
    ]  # the timestamp send_many will use
    group = many_of(many, values, partition)
    assert len(group) == len(values)
    for f, g in zip(futs, group, strict=True):
        assert f is not None
        assert f._batch.topic_partition == g._batch.topic_partition and f._index == g._index
    for tp, batches in one.acc.queues.items():
        theirs = many.acc.queues[tp]
        assert [len(b.builder) for b in batches] == [len(b.builder) for b in theirs]
        for a, b in zip(batches, theirs, strict=True):
            built = b.builder.build()
            assert len(built) == b.builder.size_bytes
            assert [r.value for r in decode_records(built)] == [
                r.value for r in decode_records(a.builder.build())
            ]
    assert one.acc.added_bytes - many.acc.added_bytes == 0


def test_send_many_results_and_a_failed_batch() -> None:
    core, wakes = _core(linger_ms=60_000, batch_size=1000)
    group = many_of(core, [b"v" * 100] * 20, 0)
    assert len(group) == 20 and not group.done()
    batches = core.acc.queues[TP0]
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
    ok, _ = _core(linger_ms=60_000, batch_size=1000)
    g2 = many_of(ok, [b"a", b"", b"c"], 1)  # an empty value: the checked path
    ok.acc.queues[TP1][0].complete(50)
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

    core, _ = _core(linger_ms=0, batch_size=100)
    core._spawn = lambda coro: coro.close()  # type: ignore[method-assign]
    _send(core, TP0, None, b"a" * 90)
    requests, _, _ = _drain_idempotent(core)
    (batch,) = (r[0] for r in requests[0])
    before = time.monotonic()
    core._retry_or_fail(batch, NotLeaderOrFollowerError("moved"), written=False)
    assert before + 0.08 <= batch.retry_at <= time.monotonic() + 0.12
    # Not sent again before its time, and the sender is told when to look again.
    requests, next_ready, _ = _drain_idempotent(core, before)
    assert requests == {} and next_ready == batch.retry_at
    requests, _, _ = _drain_idempotent(core, batch.retry_at)
    assert requests[0][0] == [batch]


def test_retries_are_warned_once_per_topic_per_interval_with_a_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topic whose leaders were not ready yet: one WARNING per topic per interval, however
    many partitions retry (10,000 partitions logged 10,000 lines), then one with the count."""
    from raftlog.client import producer as producer_module
    from raftlog.errors import NotLeaderOrFollowerError

    core, _ = _core(linger_ms=0, batch_size=100)
    core._spawn = lambda coro: coro.close()  # type: ignore[method-assign]
    _known_to_leaders(core, TP0, TP1)
    for tp in (TP0, TP1, TP0):
        _send(core, tp, None, b"a" * 90)
    requests, _, _ = _drain_idempotent(core)
    batches = [b for request in requests[0] for b in request]
    assert len(batches) == 3
    caplog.set_level("WARNING", logger="raftlog.client.producer")
    for b in batches:
        core._retry_or_fail(b, NotLeaderOrFollowerError("not ready"), written=False)
    warnings = [r for r in caplog.records if "retrying a record batch" in r.getMessage()]
    assert len(warnings) == 1 and "more retries" not in warnings[0].getMessage()
    monkeypatch.setattr(producer_module, "RETRY_WARNING_INTERVAL_S", 0.0)
    core._retry_warned_until["t"] = (0.0, core._retry_warned_until["t"][1])
    core._retry_or_fail(batches[0], NotLeaderOrFollowerError("not ready"), written=False)
    last = [r for r in caplog.records if "retrying a record batch" in r.getMessage()][-1]
    assert f"({len(batches) - 1} more retries of t since the last line)" in last.getMessage()
