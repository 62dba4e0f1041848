"""The idempotent producer against real broker processes: lost responses, a restarted broker,
and a kill -9 of the partition leader never make a record appear twice."""

from __future__ import annotations

import collections
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog import protocol
from raftlog.client import Admin, Producer
from raftlog.client.connection import BrokerConnection
from raftlog.errors import OutOfOrderSequenceError, RecordTooLargeError
from raftlog.records import encode_batch
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._support import BrokerProcess, RawClient
from tests.integration.test_replication import (
    CHANGE_S,
    SESSION_TIMEOUT_MS,
    SETTLE_S,
    Sender,
    check_acked,
    create,
    leader_of,
    read_everything,
    wait_in_sync,
)


def values_in_log(bootstrap: str, topic: str, partitions: int = 1) -> dict[int, list[bytes]]:
    read = read_everything(bootstrap, topic, partitions)
    return {p: [v for _, v in sorted(by_offset.items())] for p, by_offset in read.items()}


def check_exactly_once_in_order(values: dict[int, list[bytes]], sent: list[bytes]) -> None:
    """Each value at most once in the whole topic, and in send order within its partition."""
    counts = collections.Counter(v for vs in values.values() for v in vs)
    twice = [v for v, n in counts.items() if n > 1]
    assert not twice, f"{len(twice)} records appear more than once, e.g. {twice[:5]}"
    rank = {v: i for i, v in enumerate(sent)}
    for p, vs in values.items():
        ranks = [rank[v] for v in vs]
        assert ranks == sorted(ranks), f"partition {p} is not in send order"


def test_lost_responses_are_retried_without_duplicates(
    broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("lossy", 2)
    # About one read in three from the broker is lost and its connection dropped: the broker
    # appended those batches, the producer never hears so and resends them. Drawn at random
    # (seeded), not every 3rd read: a new connection takes three reads before its first
    # Produce answer (ApiVersions, a metadata refresh), and a fixed every-3rd pattern then
    # drops that answer on every connection, forever.
    reads = collections.Counter[str]()
    original = BrokerConnection.data_received
    rng = random.Random(3)

    def lossy(self: BrokerConnection, data: bytes) -> None:
        reads["all"] += 1
        if reads["all"] > 10 and rng.random() < 1 / 3:
            reads["dropped"] += 1
            self.transport.abort()
            return
        original(self, data)

    monkeypatch.setattr(BrokerConnection, "data_received", lossy)
    sent = [b"r-%05d" % i for i in range(3000)]
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=1, retry_backoff_ms=20) as producer:
        futures = []
        for i, v in enumerate(sent):
            futures.append(producer.send("lossy", v, partition=i % 2))
            if i % 20 == 19:
                time.sleep(0.005)  # many requests, so that many responses are lost
        producer.flush(120)
        offsets = [f.result(0) for f in futures]
    monkeypatch.setattr(BrokerConnection, "data_received", original)
    assert reads["dropped"] >= 5, reads
    values = values_in_log(broker.bootstrap, "lossy", 2)
    assert sum(map(len, values.values())) == len(sent)
    check_exactly_once_in_order(values, sent)
    # Each acknowledged offset, a duplicate's included, is where its record is.
    for v, md in zip(sent, offsets, strict=True):
        assert values[md.partition][md.offset] == v


def test_an_epoch_bump_fails_a_batch_of_unknown_outcome_instead_of_appending_it_twice(
    broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KIP-360's hole: batch A is appended but its response is lost (outcome unknown to the
    producer) and it waits to be retried; meanwhile batch B of another topic fails for good
    (too large for its topic), a hole in the sequences that bumps the producer's epoch. A
    restamped under the new epoch from sequence 0 would be appended a second time: it must
    fail instead, saying that its outcome is unknown."""
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("unknown", 1)
        admin.create_topic("small", 1, config={"max.message.bytes": "300"})
    drop, dropped = threading.Event(), threading.Event()
    original = BrokerConnection.data_received

    def lossy(self: BrokerConnection, data: bytes) -> None:
        if drop.is_set() and not dropped.is_set():
            dropped.set()
            self.transport.abort()  # the response to A is lost with its connection
            return
        original(self, data)

    monkeypatch.setattr(BrokerConnection, "data_received", lossy)
    # A waits retry_backoff_ms for the metadata refresh its retry asks for: B fails first.
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0, retry_backoff_ms=1500) as p:
        p.send("unknown", b"warm-up").result(30)
        p.send("small", b"warm-up").result(30)
        drop.set()
        a = p.send("unknown", b"A")
        assert dropped.wait(30), "the response to A never came"
        b = p.send("small", b"B" * 1000)
        with pytest.raises(RecordTooLargeError):
            b.result(30)
        a_error = a.exception(30)
        # The producer goes on under its new epoch.
        p.send("unknown", b"C").result(30)
    values = values_in_log(broker.bootstrap, "unknown")[0]
    assert values == [b"warm-up", b"A", b"C"]  # A once: its first attempt
    assert isinstance(a_error, OutOfOrderSequenceError), a_error
    assert "outcome is unknown" in str(a_error)


def _init_producer_id(raw: RawClient) -> tuple[int, int]:
    """A producer id and epoch from InitProducerId."""
    raw.send_request(protocol.ApiKey.INIT_PRODUCER_ID, {})
    frame = raw.recv_frame()
    assert frame is not None
    _, body = protocol.parse_response_header(frame[0])
    return body["producer_id"], body["producer_epoch"]


def _produce(raw: RawClient, batch: bytes) -> list[Any]:
    corr = raw.send_request(
        protocol.ApiKey.PRODUCE,
        {"acks": -1, "timeout_ms": 10_000, "topics": [["t", [[0, len(batch)]]]]},
        [batch],
    )
    frame = raw.recv_frame()
    assert frame is not None
    _corr, body = protocol.parse_response_header(frame[0])
    assert _corr == corr
    return list(body["topics"][0][1][0])


@pytest.mark.parametrize("kill", [True, False])
def test_a_restarted_broker_rebuilds_producer_state(broker: BrokerProcess, kill: bool) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("t", 1, config={"segment.bytes": "2000"})
    with RawClient(broker.host, broker.port) as raw:
        pid, epoch = _init_producer_id(raw)
        batches = [
            encode_batch(
                [(None, b"x%d" % (3 * seq + i)) for i in range(3)],
                timestamp=int(time.time() * 1000),
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=3 * seq,
            )
            for seq in range(40)  # several segments: snapshots at rolls, then a tail
        ]
        answers = [_produce(raw, b) for b in batches]
        assert [a[1] for a in answers] == [0] * 40 and answers[-1][2] == 117
    if kill:
        broker.kill9()
        broker.start()
    else:
        broker.restart()
    with RawClient(broker.host, broker.port) as raw:
        deadline = time.monotonic() + CHANGE_S
        while True:
            again = _produce(raw, batches[-1])
            if again[1] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)  # the partition may still be electing its leader
        assert again[1:3] == [0, 117], again  # the original offsets: deduplicated
        older = _produce(raw, batches[-4])
        assert older[1:3] == [0, 108], older
        skipped = encode_batch(
            [(None, b"y")],
            timestamp=int(time.time() * 1000),
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=200,
        )
        assert _produce(raw, skipped)[1] == 43  # OutOfOrderSequenceError
    values = values_in_log(broker.bootstrap, "t")[0]
    assert len(values) == 120 and len(set(values)) == 120


def test_a_batch_behind_a_new_producers_first_is_out_of_order_not_a_duplicate(
    broker: BrokerProcess,
) -> None:
    """A new producer's first batch (sequences 0..2) refused (its leader did not host the
    partition yet) while its second (3..5) was appended: the retry of the first was never
    appended. The broker answered DuplicateSequence, which the producer counted as delivered:
    the replication benchmark acknowledged 20,000 records of which 11,112 were in the log."""
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("t", 1)
    with RawClient(broker.host, broker.port) as raw:
        pid, epoch = _init_producer_id(raw)

        def batch(base_sequence: int) -> bytes:
            return encode_batch(
                [(None, b"s%d" % (base_sequence + i)) for i in range(3)],
                timestamp=int(time.time() * 1000),
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=base_sequence,
            )

        for seq in (3, 6):  # an unknown producer may start at any sequence
            assert _produce(raw, batch(seq))[1] == 0
        refused = _produce(raw, batch(0))
        assert refused[1] == OutOfOrderSequenceError.code, refused
    assert values_in_log(broker.bootstrap, "t")[0] == [b"s%d" % i for i in range(3, 9)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(
        tmp_path, 3, SESSION_TIMEOUT_MS, SETTLE_S, replica_lag_time_max_ms=2000
    ) as c:
        yield c


def test_kill9_of_the_leader_keeps_each_acked_record_exactly_once_in_order(
    cluster: Cluster,
) -> None:
    create(cluster, "once", partitions=3)
    victim = leader_of(cluster, "once", 0)
    with Sender(cluster.bootstrap, "once", 6000, partitions=3) as sender:
        sender.wait_acked(1500)
        cluster.kill9(victim)
        sender.wait_acked(len(sender.acked) + 300)
        sender.done()
    assert not sender.failed, sender.failed[:3]
    assert len(sender.acked) == 6000
    cluster.nodes[victim].start()
    wait_in_sync(cluster, "once", 3)
    read = read_everything(cluster.bootstrap, "once", 3)
    check_acked(sender, read)
    values = {p: [v for _, v in sorted(r.items())] for p, r in read.items()}
    assert sum(map(len, values.values())) == 6000  # nothing twice, nothing unacknowledged
    check_exactly_once_in_order(values, [b"v-%06d" % i for i in range(6000)])
