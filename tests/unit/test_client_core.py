"""Pure parts of the clients: the producer's accumulator, futures, partitioner and configs."""

from __future__ import annotations

import threading

import pytest

from raftlog.client.cluster import parse_bootstrap
from raftlog.client.consumer import ConsumerConfig
from raftlog.client.producer import (
    BatchResult,
    ProducerConfig,
    RecordFuture,
    _Accumulator,
    default_partitioner,
)
from raftlog.errors import InvalidConfigError, RaftlogTimeoutError
from raftlog.topics import TopicPartition

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _acc(**kw: object) -> _Accumulator:
    return _Accumulator(ProducerConfig(**kw))  # type: ignore[arg-type]


def _drain(acc: _Accumulator, now: float, closing: bool = False, blocked: set[int] = frozenset()):  # type: ignore[assignment, no-untyped-def]
    return acc.drain(now, lambda tp: tp.partition % 2, lambda n: n in blocked, closing)


def test_batch_waits_for_linger_then_goes() -> None:
    acc = _acc(linger_ms=10, batch_size=10_000)
    acc.append(TP0, None, b"x", 1, (), now=100.0)
    ready, next_ready = _drain(acc, 100.005)
    assert ready == {} and next_ready == pytest.approx(100.010)
    ready, _ = _drain(acc, 100.010)
    assert [len(b.builder) for b in ready[0]] == [1]


def test_full_batch_goes_at_once_and_a_new_one_starts() -> None:
    acc = _acc(linger_ms=1000, batch_size=300)
    fulls = [acc.append(TP0, None, b"v" * 50, 1, (), now=0.0)[1] for _ in range(6)]
    assert fulls.index(True) < 5
    ready, _ = _drain(acc, 0.0)
    # The full batch goes; the one still filling waits for its linger.
    assert len(ready[0]) == 1 and acc.pending() == 1


def test_drain_groups_by_leader_and_respects_request_size_and_blocked_nodes() -> None:
    acc = _acc(linger_ms=0, batch_size=100, max_request_size=250)
    for _ in range(4):
        acc.append(TP0, None, b"v" * 80, 1, (), now=0.0)
        acc.append(TP1, None, b"v" * 80, 1, (), now=0.0)
    ready, _ = _drain(acc, 1.0, blocked={1})
    assert set(ready) == {0}  # node 1 is at its in-flight limit
    assert sum(b.builder.size_bytes for b in ready[0]) <= 250
    assert all(b.tp == TP0 for b in ready[0])


def test_closing_drains_everything() -> None:
    acc = _acc(linger_ms=60_000)
    acc.append(TP0, None, b"x", 1, (), now=0.0)
    ready, _ = _drain(acc, 0.0, closing=True)
    assert len(ready[0]) == 1 and acc.pending() == 0


def test_buffered_bytes_balance() -> None:
    acc = _acc(linger_ms=0, batch_size=100)
    for _ in range(10):
        acc.append(TP0, b"k", b"v" * 30, 1, (), now=0.0)
    ready, _ = _drain(acc, 1.0)
    sent = sum(len(b.builder.build()) for b in ready[0])
    assert acc.buffered_bytes == sent
    acc.release(sent)
    assert acc.buffered_bytes == 0


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
    acc = _acc(linger_ms=60_000, batch_size=1000)
    completes = [
        acc.append(TP0, b"k", b"x" * n, 1, (("h", b"v"),), now=0.0)[1] for n in range(0, 400, 7)
    ]
    sizes = [b.builder.size_bytes for b in acc.queues[TP0]]
    assert max(sizes) <= 1000 and len(sizes) > 1
    assert sizes == [len(b.builder.build()) for b in acc.queues[TP0]]
    assert sum(completes) >= len(sizes) - 1  # every closed batch woke the sender
    acc = _acc(batch_size=100)
    acc.append(TP0, None, b"y" * 500, 1, (), now=0.0)  # alone, it may exceed batch_size
    assert [len(b.builder) for b in acc.queues[TP0]] == [1]


def test_client_metadata_never_goes_back_to_an_older_leader_epoch() -> None:
    from raftlog.client.cluster import ClusterClient
    from raftlog.metadata.model import PartitionInfo, TopicInfo

    c = ClusterClient("127.0.0.1:1")
    newer = TopicInfo("t", "id", (PartitionInfo(0, 2, 5, (1, 2), (2,)),))
    older = TopicInfo("t", "id", (PartitionInfo(0, 1, 4, (1, 2), (1, 2)),))
    assert c._newest(newer).partitions[0].leader == 2
    assert c._newest(older).partitions[0].leader == 2  # a lagging broker's answer is ignored
    recreated = TopicInfo("t", "other-id", (PartitionInfo(0, 1, 0, (1,), (1,)),))
    assert c._newest(recreated).partitions[0].leader == 1  # a new topic id starts afresh
