"""kill -9 the broker, restart it on the same data dir: every acknowledged record is there.

"Acknowledged" means the record's future completed without error; such a record must be found
at exactly the offset its RecordMetadata named, with its key, value and timestamp. Topics use
small segments so that recovery crosses segment boundaries and rebuilds indexes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import pytest

from raftlog.client import Admin, Producer, RecordFuture, RecordMetadata
from tests.integration._support import BrokerProcess, consume_exactly, run_cli, wait_for

PARTITIONS = 3
SMALL_SEGMENTS = {"segment.bytes": "16384", "index.interval.bytes": "512"}


def create_topic(broker: BrokerProcess, name: str) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(name, PARTITIONS, config=SMALL_SEGMENTS)


Sent = tuple[bytes, bytes, RecordFuture]


def acknowledged(sent: Iterable[Sent]) -> list[tuple[bytes, bytes, RecordMetadata]]:
    out = []
    for key, value, fut in sent:
        if fut.done() and fut.exception(0) is None:
            out.append((key, value, fut.result(0)))
    return out


def check_acknowledged_present(
    broker: BrokerProcess, topic: str, acked: list[tuple[bytes, bytes, RecordMetadata]]
) -> None:
    with Admin(broker.bootstrap) as admin:
        (desc,) = admin.describe_topics([topic])
    ends = {p.partition: p.log_end_offset for p in desc.partitions}
    consumed = consume_exactly(broker.bootstrap, topic, ends)
    at = {(r.partition, r.offset): r for rs in consumed.values() for r in rs}
    missing = []
    for key, value, meta in acked:
        r = at.get((meta.partition, meta.offset))
        if r is None or (r.key, r.value, r.timestamp) != (key, value, meta.timestamp):
            missing.append((meta, key, value, r))
    assert not missing, f"{len(missing)} acknowledged records lost or changed: {missing[:5]}"


@pytest.mark.parametrize("acks", ["all", 1])
def test_kill9_after_acknowledged_produce(broker: BrokerProcess, acks: int | str) -> None:
    topic = f"crash-after-{acks}"
    create_topic(broker, topic)
    with Producer(bootstrap_servers=broker.bootstrap, acks=acks, batch_size=2048) as producer:
        sent = [
            (
                b"k%d" % (i % 17),
                b"value-%06d" % i,
                producer.send(topic, b"value-%06d" % i, key=b"k%d" % (i % 17)),
            )
            for i in range(3000)
        ]
        producer.flush(timeout=30)
    acked = acknowledged(sent)
    assert len(acked) == len(sent)
    broker.kill9()
    broker.start()
    with Admin(broker.bootstrap) as admin:
        (desc,) = admin.describe_topics([topic])
    assert all(p.segments > 1 for p in desc.partitions), f"expected several segments: {desc}"
    assert sum(p.log_end_offset for p in desc.partitions) == len(sent)
    check_acknowledged_present(broker, topic, acked)


def test_kill9_during_produce_keeps_every_acknowledged_record(broker: BrokerProcess) -> None:
    """A producer keeps sending across the crash and the restart; nothing it was told is lost."""
    topic = "crash-during"
    create_topic(broker, topic)
    sent: list[Sent] = []
    stop = threading.Event()
    errors: list[BaseException] = []
    producer = Producer(
        bootstrap_servers=broker.bootstrap,
        acks="all",
        linger_ms=1,
        batch_size=4096,
        buffer_memory=256 * 1024,  # bounds what piles up while the broker is down
        retry_backoff_ms=20,
        max_block_ms=30_000,
    )

    def produce() -> None:
        i = 0
        try:
            while not stop.is_set() and i < 200_000:
                key, value = b"k%d" % (i % 11), b"v%07d" % i
                sent.append((key, value, producer.send(topic, value, key=key)))
                i += 1
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=produce, name="crash-producer")
    thread.start()
    try:
        wait_for(lambda: len(acknowledged(sent[:])) >= 3000, 60, "3000 acknowledged records")
        broker.kill9()
        acked_before = acknowledged(sent[:])
        broker.start()
        n = len(sent)
        wait_for(
            lambda: len(acknowledged(sent[n : n + 10_000])) >= 1000,
            60,
            "records sent after the restart to be acknowledged",
        )
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
    assert not errors, errors
    producer.flush(timeout=60)
    producer.close(timeout=30)
    acked = acknowledged(sent)
    assert len(acked) >= len(acked_before) + 1000
    check_acknowledged_present(broker, topic, acked)


def test_storage_verify_after_crash_recovery(broker: BrokerProcess) -> None:
    """After kill -9, restart and a clean stop, every partition directory verifies clean."""
    topic = "crash-verify"
    create_topic(broker, topic)
    with Producer(bootstrap_servers=broker.bootstrap, acks=1) as producer:
        for i in range(2000):
            producer.send(topic, b"%d" % i, key=b"%d" % (i % 5))
        producer.flush(timeout=30)
    broker.kill9()
    broker.start()
    broker.restart()  # recovery ran; now a clean stop, then the files are checked offline
    assert broker.stop() == 0
    for p in range(PARTITIONS):
        res = run_cli("storage", "verify", str(broker.data_dir / "logs" / f"{topic}-{p}"))
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.strip().endswith(": ok")
    broker.start()
