"""Where keyless records go: the uniform sticky partitioner alone, then inside the producer's
accumulator with batches leaving by linger (issue #21: they all went to one partition)."""

from __future__ import annotations

import itertools
import random
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.client.accumulator import Accumulator
from raftlog.client.partitioner import UniformStickyPartitioner
from raftlog.client.producer import ProducerConfig, Span, default_partitioner
from raftlog.metadata.model import PartitionInfo, TopicInfo

VALUE = bytes(200)
RECORD_BYTES = 25 + len(VALUE)  # what a 200-byte keyless record adds to a batch
LINGER_MS = 5


def stints(p: UniformStickyPartitioner, topic: str, partitions: int, n: int) -> list[int]:
    """The partitions of the next `n` stints: each stint takes batch_size bytes."""
    seen = []
    for _ in range(n):
        stint = p.stint(topic, partitions)
        seen.append(stint.partition)
        stint.nbytes += p.batch_size
        assert p.maybe_move(stint, 1) == (partitions > 1)
    return seen


def test_a_stint_ends_at_the_first_batch_boundary_past_batch_size() -> None:
    p = UniformStickyPartitioner(1000, random.Random(1))
    stint = p.stint("t", 6)
    first = stint.partition
    stint.nbytes += 400
    assert not p.maybe_move(stint, 600)  # 400 + 600 fits batch_size: the stint goes on
    stint.nbytes += 600
    assert p.partition("t", 6) == first
    assert p.maybe_move(stint, 1)  # 1000 + 1 would pass it
    second = p.partition("t", 6)
    assert second != first and stint.nbytes == 0
    # A single record bigger than batch_size ends its stint at once.
    stint.nbytes += 5000
    assert p.maybe_move(stint, 5000) and p.partition("t", 6) != second
    with pytest.raises(AssertionError):
        p.maybe_move(stint, 0)  # a record adds at least its fixed part


@given(partitions=st.integers(1, 40), rounds=st.integers(1, 5), seed=st.integers(0, 2**32))
@settings(max_examples=100, deadline=None)
def test_every_partition_gets_one_stint_per_round_never_two_in_a_row(
    partitions: int, rounds: int, seed: int
) -> None:
    p = UniformStickyPartitioner(100, random.Random(seed))
    # The first stint starts the first round; every `partitions` stints after it is a round.
    seen = stints(p, "t", partitions, rounds * partitions)
    for r in range(rounds):
        assert sorted(seen[r * partitions : (r + 1) * partitions]) == list(range(partitions))
    if partitions > 1:
        assert all(a != b for a, b in itertools.pairwise(seen))
    else:
        assert p.stint("t", 1).nbytes == 0  # one partition: nowhere to go, the count restarts


def test_rounds_come_in_random_orders_and_topics_are_independent() -> None:
    p = UniformStickyPartitioner(100, random.Random(3))
    orders = {tuple(stints(p, "a", 6, 6)) for _ in range(20)}
    assert len(orders) > 10  # not one fixed rotation: producers do not move in step
    b_before = p.partition("b", 3)
    stints(p, "a", 6, 7)
    assert p.partition("b", 3) == b_before


def test_a_topic_that_grew_starts_a_new_stint_among_all_its_partitions() -> None:
    p = UniformStickyPartitioner(100, random.Random(5))
    stints(p, "t", 2, 3)
    p.stint("t", 2).nbytes += 50
    assert p.stint("t", 8).nbytes == 0
    assert sorted(stints(p, "t", 8, 8)) == list(range(8))


# -- inside the producer's accumulator -----------------------------------------------------------


def acc_with(partitions: int, seed: int = 11, **kw: object) -> Accumulator:
    """A producer's accumulator with metadata for topic "t" (partition p led by node p) and no
    sender: its wake-ups are dropped, and the test drains the batches itself."""
    topic = TopicInfo(
        "t", "id", tuple(PartitionInfo(p, p, 0, (p,), (p,)) for p in range(partitions))
    )
    return Accumulator(
        ProducerConfig(**kw),  # type: ignore[arg-type]
        {"t": topic},
        lambda: None,
        random.Random(seed),
    )


def drain_after_linger(acc: Accumulator) -> None:
    """What the sender does once linger_ms has passed: take every batch, and (as answers would)
    free their bytes. The drain's `now` is set past every batch's linger."""
    now = time.monotonic() + LINGER_MS / 1000
    requests, _, expired = acc.drain(now, lambda tp: tp.partition, lambda n: 5, False)
    assert expired == [] and acc.pending() == 0
    acc.release(sum(b.builder.size_bytes for rs in requests.values() for r in rs for b in r))
    acc.wake_scheduled = False


def run_at(acc: Accumulator, rate: int, seconds: float, many: bool = False) -> Counter[int]:
    """`rate` keyless records a second for `seconds` of simulated time, in ticks of linger_ms:
    each tick's records, then the drain that linger brings. Returns records per partition."""
    per_tick = rate * LINGER_MS / 1000
    counts: Counter[int] = Counter()
    owed = 0.0
    for _ in range(round(seconds * 1000 / LINGER_MS)):
        owed += per_tick
        k, owed = int(owed), owed - int(owed)
        if many:
            spans: list[Span] = []
            assert acc.append_many("t", [VALUE] * k, 0, None, True, spans) == k
            counts.update({b.tp.partition: n for b, _, n, _ in spans})
        else:
            for _ in range(k):
                fut = acc.append("t", VALUE, None, None, None, None, True)
                assert fut is not None
                counts[fut._batch.tp.partition] += 1
        drain_after_linger(acc)
    return counts


@pytest.mark.parametrize("rate", [500, 2_000, 20_000])
def test_keyless_records_spread_when_batches_leave_by_linger(rate: int) -> None:
    """The issue's case with the default batch_size (64 KiB) and linger_ms: at these rates
    every batch leaves by linger before it fills. Before, the sticky partition moved only when
    a batch filled: 100% of the records went to one partition of six. Now it moves after
    batch_size bytes whatever made the batch leave; over 20 s no partition gets more than
    twice its fair share (the rounds make it much less)."""
    acc = acc_with(6, linger_ms=LINGER_MS)
    counts = run_at(acc, rate, 20.0)
    fair = sum(counts.values()) / 6
    assert len(counts) == 6 and max(counts.values()) <= 2 * fair, counts
    # A stint is batch_size bytes rounded up to the batch that leaves: at most one tick more.
    per_stint = ProducerConfig().batch_size / RECORD_BYTES
    assert max(counts.values()) <= fair + per_stint + rate * LINGER_MS / 1000, counts


def test_send_many_spreads_as_send_does_with_batches_leaving_by_linger() -> None:
    """send_many keeps its own fast path; with the same randomness and the same drains it
    puts every record where send() one by one puts it."""
    one = run_at(acc_with(6, seed=4, linger_ms=LINGER_MS), 2_000, 10.0)
    many = run_at(acc_with(6, seed=4, linger_ms=LINGER_MS), 2_000, 10.0, many=True)
    assert one == many and len(one) == 6


def test_at_full_speed_each_stint_is_one_full_batch() -> None:
    """Batches that fill before linger (the old partitioner's only move) still move the sticky
    partition at every full batch, so batching is as big as before."""
    acc = acc_with(6, linger_ms=60_000, batch_size=10_000)
    futs = [acc.append("t", VALUE, None, None, None, None, True) for _ in range(400)]
    batches = [f._batch for f in futs if f is not None]
    runs = [b for i, b in enumerate(batches) if i == 0 or b is not batches[i - 1]]
    assert len(runs) == len(set(runs))  # no batch was left and later appended to
    assert all(b.sealed and b.builder.size_bytes + RECORD_BYTES > 10_000 for b in runs[:-1])
    assert all(a.tp != b.tp for a, b in itertools.pairwise(runs))


def test_keyed_and_explicit_partition_records_do_not_move_or_follow_the_sticky_one() -> None:
    acc = acc_with(6, linger_ms=LINGER_MS)
    keys = [b"user-%d" % i for i in range(50)]
    for _ in range(30):  # many stints' worth of keyless bytes in between
        for k in keys:
            fut = acc.append("t", VALUE, k, None, None, None, True)
            assert fut is not None and fut._batch.tp.partition == default_partitioner(k, 6)
        fut = acc.append("t", VALUE, None, None, 4, None, True)
        assert fut is not None and fut._batch.tp.partition == 4
        run_at(acc, 20_000, 0.1)
    # Keyed and explicit records are not counted in a keyless stint.
    stint = acc.sticky.stint("t", 6)
    nbytes = stint.nbytes
    acc.append("t", VALUE * 100, b"k", None, None, None, True)
    acc.append("t", VALUE * 100, None, None, stint.partition, None, True)
    assert acc.sticky.stint("t", 6) is stint and stint.nbytes == nbytes
