"""Consumers own their positions: seek, rewind, skip to the end, pause, and find by time.

Partition 0 of the topic holds N0 records with timestamps BASE_TS + 10 * offset; partition 1
holds N1 records. A replay must return exactly what the first read returned.
"""

from __future__ import annotations

import time

import pytest

from raftlog.client import Admin, AsyncConsumer, Consumer, ConsumerRecord, Producer
from raftlog.errors import InvalidConfigError, OffsetOutOfRangeError
from raftlog.topics import TopicPartition
from tests.integration._support import BrokerProcess

TOPIC = "replay"
TP0 = TopicPartition(TOPIC, 0)
TP1 = TopicPartition(TOPIC, 1)
N0, N1 = 30, 12
BASE_TS = 1_700_000_000_000


def ts_of(offset: int) -> int:
    return BASE_TS + 10 * offset


@pytest.fixture
def replay_broker(broker: BrokerProcess) -> BrokerProcess:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(TOPIC, 2)
    # Small batches, so that seeks land inside and between batches.
    with Producer(bootstrap_servers=broker.bootstrap, acks="all", batch_size=200) as producer:
        futures = [
            producer.send(TOPIC, b"p0-%d" % i, key=b"k%d" % i, partition=0, timestamp_ms=ts_of(i))
            for i in range(N0)
        ]
        futures += [producer.send(TOPIC, b"p1-%d" % i, partition=1) for i in range(N1)]
        producer.flush(timeout=30)
        metas = [f.result(timeout=10) for f in futures]
    assert [m.offset for m in metas] == list(range(N0)) + list(range(N1))
    return broker


def read(consumer: Consumer, tp: TopicPartition, count: int) -> list[ConsumerRecord]:
    """Exactly `count` records of `tp` (fails on records of other partitions)."""
    out: list[ConsumerRecord] = []
    deadline = time.monotonic() + 20
    while len(out) < count:
        assert time.monotonic() < deadline, f"read {len(out)} of {count} from {tp}"
        batch = consumer.poll(timeout_ms=500, max_records=count - len(out))
        assert set(batch) <= {tp}, f"records from {set(batch)} while reading {tp}"
        out.extend(batch.get(tp, []))
    return out


def assert_nothing_more(consumer: Consumer) -> None:
    assert consumer.poll(timeout_ms=200) == {}


def test_seek_rewind_and_skip_to_end(replay_broker: BrokerProcess) -> None:
    with Consumer(bootstrap_servers=replay_broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TP0])
        assert c.assignment() == {TP0}
        assert c.position(TP0) == 0
        first = read(c, TP0, N0)
        assert [(r.offset, r.value, r.timestamp) for r in first] == [
            (i, b"p0-%d" % i, ts_of(i)) for i in range(N0)
        ]
        assert c.position(TP0) == N0
        assert_nothing_more(c)

        c.seek(TP0, 17)
        assert c.position(TP0) == 17
        assert read(c, TP0, N0 - 17) == first[17:]

        c.seek_to_beginning(TP0)
        assert c.position(TP0) == 0
        assert read(c, TP0, N0) == first  # the replay is byte-for-byte the first read

        # A seek back while records are buffered drops the buffer: nothing is skipped.
        c.seek(TP0, 3)
        assert read(c, TP0, 2) == first[3:5]
        c.seek(TP0, 1)
        assert read(c, TP0, 4) == first[1:5]

        c.seek_to_end(TP0)
        assert c.position(TP0) == N0
        assert_nothing_more(c)
        with Producer(bootstrap_servers=replay_broker.bootstrap) as producer:
            meta = producer.send(TOPIC, b"after-end", partition=0).result(timeout=10)
        assert meta.offset == N0
        [r] = read(c, TP0, 1)
        assert (r.offset, r.value) == (N0, b"after-end")


def test_assign_specific_partitions_reads_only_those(replay_broker: BrokerProcess) -> None:
    with Consumer(bootstrap_servers=replay_broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TP1])
        assert [r.value for r in read(c, TP1, N1)] == [b"p1-%d" % i for i in range(N1)]
        assert_nothing_more(c)
        c.assign([TP0, TP1])  # TP1 keeps its position, TP0 starts by the reset policy
        assert c.position(TP1) == N1
        assert [r.offset for r in read(c, TP0, N0)] == list(range(N0))
        with pytest.raises(InvalidConfigError, match="not assigned"):
            c.seek(TopicPartition(TOPIC, 5), 0)
        with pytest.raises(InvalidConfigError, match="must be >= 0"):
            c.seek(TP0, -1)


def test_pause_and_resume(replay_broker: BrokerProcess) -> None:
    with Consumer(bootstrap_servers=replay_broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TP0, TP1])
        # Fill the consumer's buffer with both partitions, take one record, then pause TP0:
        # its buffered records are dropped and must come back, unskipped, after resume.
        c.seek(TP1, N1 - 1)
        got: dict[TopicPartition, list[ConsumerRecord]] = {TP0: [], TP1: []}
        deadline = time.monotonic() + 20
        while not got[TP0]:
            assert time.monotonic() < deadline
            for tp, records in c.poll(timeout_ms=500, max_records=1).items():
                got[tp].extend(records)
        c.pause(TP0)
        assert c.paused() == {TP0}
        pos0 = c.position(TP0)
        assert pos0 == len(got[TP0])
        while len(got[TP1]) < 1:
            assert time.monotonic() < deadline
            batch = c.poll(timeout_ms=500)
            assert TP0 not in batch, "a paused partition returned records"
            got[TP1].extend(batch.get(TP1, []))
        assert [r.offset for r in got[TP1]] == [N1 - 1]
        assert c.poll(timeout_ms=200) == {}  # TP0 paused, TP1 at its end
        assert c.position(TP0) == pos0
        c.resume(TP0)
        assert c.paused() == set()
        rest = read(c, TP0, N0 - pos0)
        assert [r.offset for r in got[TP0] + rest] == list(range(N0))


def test_offsets_for_times_and_list_offsets(replay_broker: BrokerProcess) -> None:
    with Consumer(bootstrap_servers=replay_broker.bootstrap) as c:
        c.assign([TP0, TP1])
        assert c.beginning_offsets([TP0, TP1]) == {TP0: 0, TP1: 0}
        assert c.end_offsets([TP0, TP1]) == {TP0: N0, TP1: N1}
        # auto_offset_reset="latest": a fresh position is the log end.
        assert c.position(TP0) == N0
        found = c.offsets_for_times(
            {TP0: ts_of(12)}  # exactly a record's timestamp
        )
        assert found == {TP0: (12, ts_of(12))}
        assert c.offsets_for_times({TP0: ts_of(12) - 3}) == {TP0: (12, ts_of(12))}
        assert c.offsets_for_times({TP0: 0}) == {TP0: (0, ts_of(0))}
        assert c.offsets_for_times({TP0: ts_of(N0 - 1) + 1}) == {TP0: None}
        # Seek to the offset found by time, then read from there.
        offset, _ = found[TP0]  # type: ignore[misc]
        c.seek(TP0, offset)
        assert [r.timestamp for r in read(c, TP0, N0 - offset)] == [
            ts_of(i) for i in range(offset, N0)
        ]
    with Admin(replay_broker.bootstrap) as admin:
        res = admin.list_offsets({TP0: ts_of(20), TP1: -2})
        assert res[TP0] == (20, ts_of(20))
        assert res[TP1][0] == 0
        assert admin.list_offsets({TP0: -1, TP1: -1}) == {TP0: (N0, -1), TP1: (N1, -1)}


def test_out_of_range_position_is_reset_or_raised(replay_broker: BrokerProcess) -> None:
    with Consumer(bootstrap_servers=replay_broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TP0])
        c.seek(TP0, N0 + 100)  # past the end: the broker says out of range, the policy resets
        assert [r.offset for r in read(c, TP0, N0)] == list(range(N0))
    with Consumer(bootstrap_servers=replay_broker.bootstrap, auto_offset_reset="none") as c:
        c.assign([TP0])
        with pytest.raises(OffsetOutOfRangeError):
            c.position(TP0)  # no position and no reset policy
        c.seek(TP0, N0 + 100)
        with pytest.raises(OffsetOutOfRangeError, match="out of range"):
            c.poll(timeout_ms=2000)


async def test_async_consumer_replays_identically(replay_broker: BrokerProcess) -> None:
    async with AsyncConsumer(
        TOPIC, bootstrap_servers=replay_broker.bootstrap, auto_offset_reset="earliest"
    ) as c:
        assert c.assignment() == {TP0, TP1}

        async def read_all() -> list[ConsumerRecord]:
            out: list[ConsumerRecord] = []
            deadline = time.monotonic() + 20
            while len(out) < N0 + N1:
                assert time.monotonic() < deadline
                for records in (await c.poll(timeout_ms=500)).values():
                    out.extend(records)
            return sorted(out, key=lambda r: (r.partition, r.offset))

        first = await read_all()
        assert await c.poll(timeout_ms=200) == {}
        await c.seek_to_beginning()
        assert [await c.position(tp) for tp in (TP0, TP1)] == [0, 0]
        assert await read_all() == first
        await c.seek_to_end(TP1)
        c.seek(TP0, N0 - 2)
        c.pause(TP1)
        got = await c.poll(timeout_ms=2000)
        assert {tp: [r.offset for r in rs] for tp, rs in got.items()} == {TP0: [N0 - 2, N0 - 1]}
