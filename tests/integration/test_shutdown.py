"""Graceful shutdown: SIGTERM (or SIGINT) exits 0 promptly, answers what it can, loses nothing.

A long-polling fetch must not hold the shutdown for its max wait: the broker answers it with
what it has. A producer sending at full speed when SIGTERM lands keeps every record it was told
about; the partition files then verify clean offline (`raftlog storage verify`).
"""

from __future__ import annotations

import threading
import time

import pytest

from raftlog import protocol
from raftlog.client import Admin, Producer, RecordFuture, TopicPartition
from raftlog.errors import NotLeaderOrFollowerError
from tests.integration._support import (
    STOP_TIMEOUT_S,
    BrokerProcess,
    RawClient,
    consume_exactly,
    fetch_body,
    run_cli,
    wait_for,
)

PARTITIONS = 3
LONG_WAIT_MS = 120_000  # far longer than any acceptable shutdown


def create_topic(broker: BrokerProcess, name: str) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(name, PARTITIONS, config={"segment.bytes": "65536"})


def verify_partitions(broker: BrokerProcess, topic: str) -> None:
    for p in range(PARTITIONS):
        path = broker.data_dir / "logs" / f"{topic}-{p}"
        res = run_cli("storage", "verify", str(path))
        assert res.returncode == 0, f"{path}:\n{res.stdout}{res.stderr}"


@pytest.mark.parametrize("stop", ["stop", "interrupt"], ids=["SIGTERM", "SIGINT"])
def test_signal_with_a_pending_long_poll_exits_promptly(broker: BrokerProcess, stop: str) -> None:
    topic = "shutdown-poll"
    create_topic(broker, topic)
    tps = {TopicPartition(topic, p): 0 for p in range(PARTITIONS)}
    with RawClient(broker.host, broker.port, timeout_s=30) as raw:
        corr = raw.send_request(protocol.ApiKey.FETCH, fetch_body(tps, LONG_WAIT_MS))
        assert raw.response_pending(0.3), "the fetch at the log end was not held"
        started = time.monotonic()
        rc = getattr(broker, stop)()
        took = time.monotonic() - started
        assert rc == 0, broker.log_tail()
        # The held fetch was answered (no data) before the connection closed: with no error,
        # or NotLeaderOrFollower (a stopping broker leads nothing), which clients retry.
        frames = raw.drain_until_closed()
    assert took < STOP_TIMEOUT_S < LONG_WAIT_MS / 1000
    assert len(frames) == 1, frames
    got_corr, body = protocol.parse_response_header(frames[0][0])
    assert got_corr == corr
    parts = [p for _, ps in body["topics"] for p in ps]
    assert sorted(p[0] for p in parts) == list(range(PARTITIONS))
    not_leader = NotLeaderOrFollowerError.code
    assert all(p[1] in (0, not_leader) and p[4] == 0 for p in parts), parts
    verify_partitions(broker, topic)
    broker.start()  # the fixture's teardown checks this incarnation's clean stop too


def test_sigterm_while_producing_keeps_every_acknowledged_record(broker: BrokerProcess) -> None:
    topic = "shutdown-produce"
    create_topic(broker, topic)
    sent: list[tuple[bytes, bytes, RecordFuture]] = []
    stop = threading.Event()
    producer = Producer(
        bootstrap_servers=broker.bootstrap,
        acks="all",
        linger_ms=1,
        batch_size=4096,
        buffer_memory=256 * 1024,
        retry_backoff_ms=20,
        max_block_ms=60_000,
    )

    def produce() -> None:
        i = 0
        while not stop.is_set() and i < 200_000:
            key, value = b"k%d" % (i % 13), b"v%07d" % i
            sent.append((key, value, producer.send(topic, value, key=key)))
            i += 1

    def acked() -> list[tuple[bytes, bytes, object]]:
        return [(k, v, f.result(0)) for k, v, f in sent[:] if f.done() and f.exception(0) is None]

    thread = threading.Thread(target=produce, name="shutdown-producer")
    thread.start()
    try:
        wait_for(lambda: len(acked()) >= 3000, 60, "3000 acknowledged records")
        started = time.monotonic()
        rc = broker.stop()
        took = time.monotonic() - started
        assert rc == 0, broker.log_tail()
        assert took < STOP_TIMEOUT_S
        acked_at_stop = len(acked())
        # Offline, with the producer still trying: the files are consistent.
        verify_partitions(broker, topic)
        broker.start()
        n = len(sent)
        wait_for(
            lambda: any(f.done() and f.exception(0) is None for _, _, f in sent[n : n + 5000]),
            60,
            "a record sent after the restart to be acknowledged",
        )
    finally:
        stop.set()
        thread.join(60)
    producer.flush(timeout=60)
    producer.close(timeout=30)
    final = acked()
    assert len(final) > acked_at_stop
    with Admin(broker.bootstrap) as admin:
        (desc,) = admin.describe_topics([topic])
    ends = {p.partition: p.log_end_offset for p in desc.partitions}
    consumed = consume_exactly(broker.bootstrap, topic, ends)
    at = {(r.partition, r.offset): r for rs in consumed.values() for r in rs}
    for key, value, meta in final:
        r = at.get((meta.partition, meta.offset))  # type: ignore[attr-defined]
        assert r is not None and (r.key, r.value) == (key, value), (meta, key, value, r)
    broker.restart()
    assert broker.stop() == 0
    verify_partitions(broker, topic)
    broker.start()
