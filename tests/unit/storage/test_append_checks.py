"""append_checks.py on its own: what a leader's chunks and a follower's batches come to, and
the errors they get, with no log and no file."""

from __future__ import annotations

import pytest

from raftlog.errors import (
    CorruptRecordError,
    InvalidOffsetError,
    InvalidRequestError,
    RecordTooLargeError,
)
from raftlog.records import encode_batch
from raftlog.storage.append_checks import check_follower_batches, check_leader_chunks
from raftlog.storage.producer_state import ProducerState
from tests.unit.storage._helpers import batch_of, stamped


def _state() -> ProducerState:
    return ProducerState("t-0", 100, 86_400_000)


def test_leader_chunks_get_consecutive_offsets_and_stamped_headers() -> None:
    a, b = batch_of(3, timestamp=5), batch_of(2, timestamp=9)
    iov, nbytes, batches, next_offset, records, max_ts, outcomes, producers = check_leader_chunks(
        "t-0", [memoryview(a), memoryview(b)], 10, 7, 1 << 20, _state()
    )
    assert b"".join(iov) == stamped(a, 10, 7) + stamped(b, 13, 7)
    assert (nbytes, next_offset, records, max_ts) == (len(a) + len(b), 15, 5, 9)
    assert batches == [(10, len(a), 5), (13, len(b), 9)]
    assert outcomes == [(10, 12, 3, 1, len(a), 5), (13, 14, 2, 1, len(b), 9)]
    assert producers is None


def test_a_bad_chunk_gets_its_error_and_the_others_go_on() -> None:
    good, big = batch_of(1), batch_of(1, value_bytes=500)
    torn = good[:-1]
    _, nbytes, batches, next_offset, _, _, outcomes, _ = check_leader_chunks(
        "t-0",
        [memoryview(torn), memoryview(big), memoryview(b""), memoryview(good)],
        0,
        0,
        len(good) + 100,
        _state(),
    )
    assert isinstance(outcomes[0], CorruptRecordError)
    assert isinstance(outcomes[1], RecordTooLargeError)
    assert isinstance(outcomes[2], CorruptRecordError)
    assert outcomes[3] == (0, 0, 1, 1, len(good), 0)
    assert (nbytes, batches, next_offset) == (len(good), [(0, len(good), 0)], 1)


def test_an_idempotent_batch_must_be_alone_and_a_duplicate_is_not_written() -> None:
    idem = encode_batch([(None, b"v")], producer_id=4, producer_epoch=0, base_sequence=0)
    state = _state()
    _, _, _, _, _, _, outcomes, producers = check_leader_chunks(
        "t-0", [memoryview(idem + idem)], 0, 0, 1 << 20, state
    )
    assert isinstance(outcomes[0], InvalidRequestError)
    _, _, batches, _, _, _, outcomes, producers = check_leader_chunks(
        "t-0", [memoryview(idem)], 0, 0, 1 << 20, state
    )
    assert producers is not None and len(batches) == 1
    assert len(state) == 0  # nothing is published before the caller commits
    producers.commit()
    _, nbytes, batches, next_offset, _, _, outcomes, _ = check_leader_chunks(
        "t-0", [memoryview(idem)], 1, 0, 1 << 20, state
    )
    assert (nbytes, batches, next_offset) == (0, [], 1)
    assert outcomes == [(0, 0, 1, 0, 0, 0)]  # answered with its original offsets


def test_follower_batches_must_continue_the_log() -> None:
    a = encode_batch([(None, b"x")] * 2, base_offset=5, partition_leader_epoch=3, timestamp=4)
    b = encode_batch([(None, b"y")], base_offset=7, partition_leader_epoch=4, timestamp=2)
    batches, epochs, next_offset, records, max_ts, idempotent = check_follower_batches(
        "t-0", memoryview(a + b), 5, 3
    )
    assert batches == [(5, len(a), 4), (7, len(b), 2)]
    assert (epochs, next_offset, records, max_ts, idempotent) == ([(4, 7)], 8, 3, 4, [])
    with pytest.raises(InvalidOffsetError, match="has base offset 5, the log continues at 6"):
        check_follower_batches("t-0", memoryview(a), 6, 3)
    with pytest.raises(CorruptRecordError, match="empty append"):
        check_follower_batches("t-0", memoryview(b""), 5, 3)
