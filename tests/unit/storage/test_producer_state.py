"""The producer-state core (storage/producer_state.py): sequence checks, the window of 5,
wrap-around, epochs, the bound, expiry, snapshots and rebuild, against an independent model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
)
from raftlog.storage.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    SEQUENCE_MODULUS,
    ProducerState,
    SnapshotError,
    last_sequence,
)

SEQ_MAX = SEQUENCE_MODULUS - 1


def append(
    state: ProducerState, pid: int, epoch: int, seq: int, count: int, offset: int, ts: int = 0
) -> object:
    """The leader's path: check, then record and commit if it is to be appended. Returns the
    duplicate's metadata, None (appended), or the error raised."""
    txn = state.begin()
    try:
        dup = txn.check(pid, epoch, seq, count)
    except (OutOfOrderSequenceError, InvalidProducerEpochError) as e:
        return e
    if dup is None:
        txn.record(pid, epoch, seq, count, offset, ts)
        txn.commit()
    return dup


def test_in_order_duplicate_gap() -> None:
    s = ProducerState("t-0")
    assert append(s, 7, 0, 0, 3, 100) is None
    assert append(s, 7, 0, 3, 2, 103) is None
    dup = append(s, 7, 0, 0, 3, 999)
    assert dup is not None and dup.first_offset == 100 and dup.last_offset == 102  # type: ignore[attr-defined]
    assert isinstance(append(s, 7, 0, 6, 1, 105), OutOfOrderSequenceError)  # 5 is missing
    assert isinstance(append(s, 7, 0, 4, 1, 105), OutOfOrderSequenceError)  # overlaps, no match
    assert append(s, 7, 0, 5, 1, 105) is None


def test_window_of_five_then_duplicate_sequence() -> None:
    s = ProducerState("t-0")
    for i in range(NUM_BATCHES_TO_RETAIN + 2):
        assert append(s, 1, 0, 2 * i, 2, 10 * i) is None
    # The two oldest batches left the window: a retry of them is out of order, never a
    # duplicate (which a client counts as delivered): the partition cannot tell.
    for seq in (0, 2):
        out = append(s, 1, 0, seq, 2, 0)
        assert isinstance(out, OutOfOrderSequenceError) and "cannot tell" in str(out)
    assert append(s, 1, 0, 4, 2, 0).first_offset == 20  # type: ignore[union-attr]


def test_a_batch_behind_an_unknown_producers_first_is_not_a_duplicate() -> None:
    """A new producer's first batch (sequences 0..4) is refused elsewhere (the broker did not
    host the partition yet) while its second (5..9), sent meanwhile, is appended: the retry of
    the first was never appended. Answering it as a duplicate acknowledged records that were
    in no log (the replication benchmark's 20,000 sent, high watermark 11,112)."""
    s = ProducerState("t-0")
    assert append(s, 7, 0, 5, 5, 0) is None  # unknown producer: any sequence starts it
    assert append(s, 7, 0, 10, 5, 5) is None
    out = append(s, 7, 0, 0, 5, 10)
    assert isinstance(out, OutOfOrderSequenceError), out


def test_sequence_wraps_at_int32() -> None:
    s = ProducerState("t-0")
    assert append(s, 1, 0, SEQ_MAX - 1, 2, 0) is None  # ends at 2^31 - 1
    assert append(s, 1, 0, 0, 3, 2) is None  # wraps to 0
    assert append(s, 1, 0, 3, 2, 5) is None
    # A batch that itself wraps: base 2^31 - 2, 4 records, last sequence 1.
    assert last_sequence(SEQ_MAX - 1, 4) == 1
    s2 = ProducerState("t-1")
    assert append(s2, 1, 0, SEQ_MAX - 1, 4, 0) is None
    assert append(s2, 1, 0, 2, 1, 4) is None
    assert append(s2, 1, 0, SEQ_MAX - 1, 4, 9).first_offset == 0  # type: ignore[union-attr]


def test_epochs() -> None:
    s = ProducerState("t-0")
    assert append(s, 1, 3, 0, 1, 0) is None
    assert append(s, 1, 3, 1, 1, 1) is None
    assert isinstance(append(s, 1, 2, 2, 1, 2), InvalidProducerEpochError)  # a zombie
    assert isinstance(append(s, 1, 4, 2, 1, 2), OutOfOrderSequenceError)  # new epoch not at 0
    assert append(s, 1, 4, 0, 1, 2) is None  # new epoch at 0
    # The old epoch's batches no longer count as duplicates, and the old epoch is fenced.
    assert isinstance(append(s, 1, 3, 0, 1, 3), InvalidProducerEpochError)


def test_unknown_producer_starts_anywhere() -> None:
    s = ProducerState("t-0")
    assert append(s, 1, 0, 41, 1, 0) is None
    assert isinstance(append(s, 1, 0, 43, 1, 1), OutOfOrderSequenceError)
    assert isinstance(append(s, 1, -1, 0, 1, 1), OutOfOrderSequenceError)


def test_a_failed_write_changes_nothing() -> None:
    s = ProducerState("t-0")
    assert append(s, 1, 0, 0, 1, 0) is None
    txn = s.begin()
    assert txn.check(1, 0, 1, 1) is None
    txn.record(1, 0, 1, 1, 1, 0)
    assert txn.check(1, 0, 2, 1) is None  # a later batch of the same append sees the first
    txn.record(1, 0, 2, 1, 2, 0)
    # ... no commit: the write failed.
    entry = s.get(1)
    assert entry is not None and entry.last_seq == 0


def test_bound_evicts_the_least_recently_appended(caplog: pytest.LogCaptureFixture) -> None:
    s = ProducerState("t-0", producer_ids_max=3)
    for pid in (1, 2, 3):
        assert append(s, pid, 0, 0, 1, pid) is None
    assert append(s, 1, 0, 1, 1, 10) is None  # 1 is now the most recent
    assert append(s, 4, 0, 0, 1, 11) is None  # evicts 2
    assert len(s) == 3 and s.get(2) is None and s.get(1) is not None
    assert s.evictions == 1
    assert "evicted producer 2" in caplog.text


def test_expiry_and_head_truncation() -> None:
    s = ProducerState("t-0", producer_id_expiration_ms=1000)
    append(s, 1, 0, 0, 1, 0, ts=5000)
    append(s, 2, 0, 0, 1, 1, ts=5800)
    assert s.remove_expired(6500) == 1 and s.get(1) is None and s.get(2) is not None
    s.truncate_head(2)
    assert len(s) == 0


def test_snapshot_round_trip_and_damage() -> None:
    s = ProducerState("t-0")
    for i in range(7):
        append(s, 1, 2, i, 1, i, ts=i)
    append(s, 9, 0, 0, 4, 7, ts=99)
    data = s.encode_snapshot(11)
    t = ProducerState("t-0")
    assert t.load_snapshot(data, "snap") == 11
    assert [(e.producer_id, e.epoch, list(e.batches)) for e in t.entries()] == [
        (e.producer_id, e.epoch, list(e.batches)) for e in s.entries()
    ]
    for bad in (data[:-1], data[:10], data[:30] + bytes([data[30] ^ 1]) + data[31:], b"x" * 40):
        with pytest.raises(SnapshotError):
            t.load_snapshot(bad, "snap")
        assert len(t) == 0


# -- against a model -----------------------------------------------------------------------------

# An action: (producer 0..2, kind, n): "next" sends the next batch of n records, "retry" resends
# the n-th most recent batch, "gap" skips n sequences, "bump" moves to the next epoch, "zombie"
# sends with the previous epoch.
actions = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.sampled_from(["next", "next", "next", "retry", "gap", "bump", "zombie"]),
        st.integers(1, 7),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(actions, st.integers(0, SEQ_MAX))
def test_matches_model_and_rebuilds(acts: list[tuple[int, str, int]], start_seq: int) -> None:
    state = ProducerState("t-0")
    log: list[tuple[int, int, int, int, int, int]] = []  # pid, epoch, seq, count, offset, ts
    offset = 0
    # The model: per producer, its epoch, its next sequence and every batch it had appended.
    epoch = [0, 0, 0]
    next_seq = [start_seq] * 3
    sent: list[list[tuple[int, int, int, int]]] = [[], [], []]  # epoch, seq, count, offset
    for ts, (p, kind, n) in enumerate(acts):
        if kind == "bump":
            epoch[p] += 1
            next_seq[p] = 0
            continue
        if kind == "retry":
            if not sent[p]:
                continue
            e, seq, count, first = sent[p][-min(n, len(sent[p]))]
            back = len(sent[p]) - sent[p].index((e, seq, count, first))
            out = append(state, p, e, seq, count, offset, ts)
            if e != epoch[p] and any(b[0] == epoch[p] for b in sent[p]):
                assert isinstance(out, InvalidProducerEpochError)
            elif e != epoch[p]:
                # No batch of the new epoch yet: the old epoch is still the current one there.
                assert out is not None
            elif back <= NUM_BATCHES_TO_RETAIN:
                assert out is not None and out.first_offset == first  # type: ignore[union-attr]
            else:
                assert isinstance(out, OutOfOrderSequenceError)
            continue
        if kind == "gap":
            seq = (next_seq[p] + n) % SEQUENCE_MODULUS
            out = append(state, p, epoch[p], seq, 1, offset, ts)
            if not sent[p]:
                assert out is None  # unknown producer: any sequence
                sent[p].append((epoch[p], seq, 1, offset))
                next_seq[p] = (seq + 1) % SEQUENCE_MODULUS
                log.append((p, epoch[p], seq, 1, offset, ts))
                offset += 1
            else:
                assert isinstance(out, OutOfOrderSequenceError)
            continue
        if kind == "zombie":
            if epoch[p] == 0 or not any(b[0] == epoch[p] for b in sent[p]):
                continue
            out = append(state, p, epoch[p] - 1, next_seq[p], 1, offset, ts)
            assert isinstance(out, InvalidProducerEpochError)
            continue
        out = append(state, p, epoch[p], next_seq[p], n, offset, ts)
        if sent[p] and sent[p][-1][0] != epoch[p] and next_seq[p] != 0:
            assert isinstance(out, OutOfOrderSequenceError)
            continue
        assert out is None, (kind, p, out)
        sent[p].append((epoch[p], next_seq[p], n, offset))
        log.append((p, epoch[p], next_seq[p], n, offset, ts))
        next_seq[p] = (next_seq[p] + n) % SEQUENCE_MODULUS
        offset += n

    def view(s: ProducerState) -> list[tuple[int, int, list[object]]]:
        return sorted((e.producer_id, e.epoch, list(e.batches)) for e in s.entries())

    # Rebuild: replaying the appended batches gives the same state; so does a snapshot taken
    # part way plus the tail after it.
    replayed = ProducerState("t-0")
    for b in log:
        replayed.record(*b)
    assert view(replayed) == view(state)
    cut = len(log) // 2
    half = ProducerState("t-0")
    for b in log[:cut]:
        half.record(*b)
    rebuilt = ProducerState("t-0")
    rebuilt.load_snapshot(half.encode_snapshot(cut), "snap")
    for b in log[cut:]:
        rebuilt.record(*b)
    assert view(rebuilt) == view(state)
