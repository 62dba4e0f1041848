"""The producer's accumulator (raftlog/client/accumulator.py) through its public methods: the
ways batches leave it besides `drain` (discard, take_all, fail_all), flushes, requeue order and
the buffer's accounting. The drain, append and send_many paths are in test_client_core.py."""

from __future__ import annotations

import random
import time

import pytest

from raftlog.client.accumulator import Accumulator, ProducerBatch
from raftlog.client.producer import ProducerConfig
from raftlog.errors import RaftlogError
from raftlog.metadata.model import PartitionInfo, TopicInfo
from raftlog.topics import TopicPartition

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def accumulator(**kw: object) -> tuple[Accumulator, list[int]]:
    """Topic "t" with two partitions led by nodes 0 and 1; wake-ups counted."""
    wakes: list[int] = []
    topic = TopicInfo("t", "id", tuple(PartitionInfo(p, p, 0, (p,), (p,)) for p in range(2)))
    acc = Accumulator(ProducerConfig(**kw), {"t": topic}, lambda: wakes.append(1))  # type: ignore[arg-type]
    return acc, wakes


def fill(acc: Accumulator, tp: TopicPartition, n: int) -> list[ProducerBatch]:
    """`n` batches of one 90-byte record on `tp` (batch_size 100: one record each)."""
    for i in range(n):
        assert acc.append("t", bytes([i]) * 90, None, None, tp.partition, None, True) is not None
    return list(acc.queues[tp])


def test_discard_takes_batches_out_and_their_bytes_out_of_the_buffer() -> None:
    acc, _ = accumulator(batch_size=100, linger_ms=60_000)
    a, b, c = fill(acc, TP0, 3)
    (d,) = fill(acc, TP1, 1)
    before = acc.buffered_bytes
    with acc.lock:
        freed = acc.discard([b, d])
    assert freed == b.builder.size_bytes + d.builder.size_bytes
    assert acc.buffered_bytes == before - freed
    assert list(acc.queues[TP0]) == [a, c] and list(acc.queues[TP1]) == []
    assert acc.queued() == [a, c] and acc.pending() == 2
    with acc.lock:
        assert acc.discard([]) == 0


def test_take_all_empties_the_queues_and_new_records_open_new_batches() -> None:
    acc, _ = accumulator(batch_size=100, linger_ms=60_000)
    batches = fill(acc, TP0, 2) + fill(acc, TP1, 1)
    with acc.lock:
        assert acc.take_all() == batches
    assert acc.pending() == 0
    (fresh,) = fill(acc, TP0, 1)
    assert fresh not in batches


def test_fail_all_releases_every_byte_and_later_appends_raise() -> None:
    """The sender died: nothing may wait for it, nor block on a buffer it will never drain."""
    acc, _ = accumulator(batch_size=100, linger_ms=60_000)
    batches = fill(acc, TP0, 2)
    error = RaftlogError("the producer's sender stopped: Bug()")
    assert acc.fail_all(error) == batches
    assert acc.buffered_bytes == 0 and acc.pending() == 0 and acc.dead is error
    with pytest.raises(RaftlogError, match="sender stopped"):
        acc.append("t", b"after", b"key", None, None, None, True)


def test_a_flush_makes_lingering_batches_ready() -> None:
    acc, _ = accumulator(linger_ms=60_000)
    acc.append("t", b"x", None, None, 0, None, True)
    now = time.monotonic()
    with acc.lock:
        requests, next_ready, _ = acc.drain(now, lambda tp: 0, lambda n: 5, False)
    assert requests == {} and next_ready is not None and next_ready > now + 50
    acc.begin_flush()
    with acc.lock:
        requests, _, _ = acc.drain(now, lambda tp: 0, lambda n: 5, False)
    acc.end_flush()
    assert [len(b.builder) for r in requests[0] for b in r] == [1]


def test_requeue_puts_a_retried_batch_at_the_head_and_counts_its_bytes_again() -> None:
    """Without sequences (no idempotence) a retried batch goes first; with them, after the
    batches sent before it (its `order`)."""
    acc, _ = accumulator(batch_size=100, linger_ms=0)
    a, b = fill(acc, TP0, 2)
    with acc.lock:
        requests, _, _ = acc.drain(time.monotonic() + 1, lambda tp: 0, lambda n: 5, False)
    assert [x for r in requests[0] for x in r] == [a, b]
    acc.release(a.builder.size_bytes + b.builder.size_bytes)
    (c,) = fill(acc, TP0, 1)
    acc.requeue(b)
    assert list(acc.queues[TP0]) == [b, c]
    assert acc.buffered_bytes == b.builder.size_bytes + c.builder.size_bytes
    a.order, b.order, c.order = 1, 2, -1
    acc.requeue(a)
    assert list(acc.queues[TP0]) == [a, b, c]


def test_the_sender_is_woken_once_per_pass() -> None:
    """Appends ask for one wake-up until the sender's next pass clears `wake_scheduled`."""
    acc, wakes = accumulator(batch_size=100, linger_ms=0)
    fill(acc, TP0, 3)
    assert len(wakes) == 1 and acc.wake_scheduled
    with acc.lock:
        acc.wake_scheduled = False  # as the sender's pass does
    fill(acc, TP1, 1)
    assert len(wakes) == 2


@pytest.mark.parametrize("many", [False, True])
def test_keyless_records_spread_over_the_partitions_a_topic_grew_by(many: bool) -> None:
    """The sticky partitioner moves among every partition the metadata names: after the topic
    grew, its stints reach partitions that had no queue yet (they raised IndexError)."""
    topics: dict[str, TopicInfo] = {}
    # Seed 2: the first stint after the growth is on partition 0, which has a queue; the
    # next ones are on partitions that have none yet.
    rng = random.Random(2)
    config = ProducerConfig(batch_size=100, linger_ms=60_000)
    acc = Accumulator(config, topics, lambda: None, rng)

    def grow_to(n: int) -> None:
        topics["t"] = TopicInfo(
            "t", "id", tuple(PartitionInfo(p, 0, 0, (0,), (0,)) for p in range(n))
        )

    grow_to(1)
    for _ in range(3):
        assert acc.append("t", b"x" * 60, None, None, None, None, True) is not None
    grow_to(8)
    for _ in range(200):
        if many:
            assert acc.append_many("t", [b"y" * 60], 0, None, True, []) == 1
        else:
            assert acc.append("t", b"y" * 60, None, None, None, None, True) is not None
    used = {tp.partition for tp, q in acc.queues.items() if q}
    assert used == set(range(8)), used
