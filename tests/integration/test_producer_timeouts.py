"""A broker that stops answering (SIGSTOP: the process is alive, its socket open, nothing
moves): the producer's requests time out on their deadline, each record's future fails once
its delivery timeout runs out, and the same producer delivers again when the broker resumes.
The sender keeps no task per request, so these deadlines come from one timer per connection
and from the accumulator's expiry: this proves both fire."""

from __future__ import annotations

import os
import signal
import threading
import time

from raftlog.client import Admin, Producer
from raftlog.errors import RaftlogTimeoutError
from tests.integration._support import BrokerProcess, consume_exactly


def test_frozen_broker_fails_records_by_their_deadlines_then_recovers(
    broker: BrokerProcess,
) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("frozen", 1)
    with Producer(
        bootstrap_servers=broker.bootstrap,
        acks=1,
        linger_ms=0,
        request_timeout_ms=500,
        delivery_timeout_ms=2_000,
        retry_backoff_ms=50,
    ) as producer:
        assert producer.send("frozen", b"before").result(10).offset == 0
        os.kill(broker.proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            futures = [producer.send("frozen", f"frozen-{i}".encode()) for i in range(20)]
            errors = [f.exception(timeout=15) for f in futures]
            waited = time.monotonic() - started
        finally:
            os.kill(broker.proc.pid, signal.SIGCONT)
        assert all(isinstance(e, RaftlogTimeoutError) for e in errors), errors
        # Not before the delivery timeout, and not long after it (retries every 0.5 s).
        assert 2.0 <= waited < 10.0, waited
        # The same producer works again once the broker answers.
        after = producer.send("frozen", b"after").result(15)
    # What timed out may or may not have been appended (the broker had read some of it):
    # at-least-once, as in Kafka. What was acknowledged is there, in order.
    records = consume_exactly(broker.bootstrap, "frozen", {0: after.offset + 1})
    values = [r.value for r in records[0]]
    assert values[0] == b"before" and values[-1] == b"after"


def test_a_group_consumer_closes_in_bounded_time_against_a_frozen_broker(
    broker: BrokerProcess,
) -> None:
    """close() commits and leaves the group; with the broker frozen both requests time out,
    and close returns within its bound (2 x request_timeout_ms + 5 s) instead of hanging."""
    from raftlog.client import Consumer

    with Admin(broker.bootstrap) as admin:
        admin.create_topic("frozen-group", 1)
    consumer = Consumer(
        "frozen-group",
        bootstrap_servers=broker.bootstrap,
        group_id="frozen",
        request_timeout_ms=1000,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    consumer.poll(100)
    os.kill(broker.proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        consumer.close()
        took = time.monotonic() - started
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
    assert took < 2 * 1.0 + 5 + 2, took  # the bound, plus slack for a loaded machine


def test_send_waits_through_metadata_requests_that_time_out(broker: BrokerProcess) -> None:
    """A send() that needs metadata while the broker is frozen: each Metadata request times
    out (request_timeout_ms), and send() asks again until max_block_ms instead of raising the
    first timeout (a node restarting in a cluster looks like this to a client)."""
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("thawing", 1)
    with Producer(
        bootstrap_servers=broker.bootstrap,
        acks=1,
        request_timeout_ms=500,
        max_block_ms=20_000,
        retry_backoff_ms=50,
    ) as producer:
        os.kill(broker.proc.pid, signal.SIGSTOP)
        try:
            # Thawed after several metadata requests have timed out, from another thread.
            thaw = threading.Timer(2.5, os.kill, (broker.proc.pid, signal.SIGCONT))
            thaw.start()
            started = time.monotonic()
            fut = producer.send("thawing", b"after-thaw")
            blocked = time.monotonic() - started
        finally:
            thaw.cancel()
            os.kill(broker.proc.pid, signal.SIGCONT)
        assert fut.result(15).offset == 0
    assert blocked >= 2.0, blocked  # it did wait for the broker, through the timeouts
