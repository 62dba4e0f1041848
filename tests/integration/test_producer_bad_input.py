"""A record the producer cannot encode never reaches its sender: `send` refuses it, naming the
field, and the producer goes on delivering; and nothing one batch does can stop the sender. A
record over the broker's request limit fails at once with RecordTooLargeError naming both
sizes: refused unsent once the producer knows the limit (ApiVersions), else answered by the
broker from the request's header.

Before these checks `send(topic, "a string")` (or a timestamp of 2**64) was accepted, the
sender task died building the batch, no later record was delivered, `result()` blocked forever
and `close()` raised the TypeError.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import struct
import time
from typing import Any

import pytest

from raftlog import protocol
from raftlog.client import Admin, AsyncProducer, Producer
from raftlog.client.connection import BrokerConnection
from raftlog.errors import (
    CorruptRecordError,
    RaftlogError,
    RaftlogTimeoutError,
    RecordTooLargeError,
)
from raftlog.records import encode_batch
from tests.integration._support import BrokerProcess, RawClient, produce_body

TOPIC = "bad-input"

# (send() keyword arguments, the exception send must raise, a phrase of its message)
BAD_RECORDS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"value": "a string"}, TypeError, "value"),
    ({"value": 5}, TypeError, "value"),
    ({"value": b"v", "key": "a string"}, TypeError, "key"),
    ({"value": b"v", "key": 7}, TypeError, "key"),
    ({"value": b"v", "timestamp_ms": 2**64}, ValueError, "timestamp_ms"),
    ({"value": b"v", "timestamp_ms": 2**63}, ValueError, "timestamp_ms"),
    ({"value": b"v", "timestamp_ms": -5}, ValueError, "timestamp_ms"),
    ({"value": b"v", "timestamp_ms": 1.5}, TypeError, "timestamp_ms"),
    ({"value": b"v", "timestamp_ms": "now"}, TypeError, "timestamp_ms"),
    ({"value": b"v", "headers": [(b"bytes-key", b"v")]}, TypeError, "header key"),
    ({"value": b"v", "headers": [("k", "a string")]}, TypeError, "header 'k'"),
    ({"value": b"v", "headers": [("k",)]}, TypeError, "headers"),
    ({"value": b"v", "headers": {"k": b"v"}}, TypeError, "headers"),
    ({"value": b"v", "headers": "kv"}, TypeError, "headers"),
    ({"value": b"v", "headers": [("\udc80", b"v")]}, ValueError, "header key"),
    ({"value": b"v", "partition": "0"}, TypeError, "partition"),
]


@pytest.fixture(scope="module")
def topic_broker(module_broker: BrokerProcess) -> BrokerProcess:
    with Admin(module_broker.bootstrap) as admin:
        admin.create_topic(TOPIC, 2)
    return module_broker


BAD_RECORD_IDS = [
    "value-str",
    "value-int",
    "key-str",
    "key-int",
    "ts-2**64",
    "ts-2**63",
    "ts-negative",
    "ts-float",
    "ts-str",
    "header-key-bytes",
    "header-value-str",
    "header-not-a-pair",
    "headers-dict",
    "headers-str",
    "header-key-surrogate",
    "partition-str",
]


@pytest.mark.parametrize(("kw", "error", "phrase"), BAD_RECORDS, ids=BAD_RECORD_IDS)
def test_send_refuses_a_record_it_cannot_encode_and_the_producer_goes_on(
    topic_broker: BrokerProcess, kw: dict[str, Any], error: type[Exception], phrase: str
) -> None:
    # Both send paths: the per-record fast path (a keyless record joining an open batch) and
    # the general one (a record that fills a batch alone).
    for options in ({"linger_ms": 50}, {"linger_ms": 0, "batch_size": 1}):
        producer = Producer(bootstrap_servers=topic_broker.bootstrap, acks=1, **options)
        try:
            before = producer.send(TOPIC, b"before")  # opens the sticky batch
            with pytest.raises(error, match=phrase) as raised:
                producer.send(TOPIC, **kw)
            assert TOPIC in str(raised.value)
            after = [producer.send(TOPIC, b"after-%d" % i) for i in range(3)]
            assert before.result(10).offset >= 0
            assert all(f.result(10).offset >= 0 for f in after)
        finally:
            producer.close(10)  # must not raise a record's error


def test_async_send_refuses_a_record_it_cannot_encode_and_the_producer_goes_on(
    topic_broker: BrokerProcess,
) -> None:
    async def main() -> None:
        producer = AsyncProducer(bootstrap_servers=topic_broker.bootstrap, acks=1, linger_ms=5)
        await producer.start()
        try:
            for kw, error, phrase in BAD_RECORDS:
                with pytest.raises(error, match=phrase):
                    await producer.send(TOPIC, **kw)
            fut = await producer.send(TOPIC, b"fine")
            assert (await asyncio.wait_for(fut, 10)).offset >= 0
        finally:
            await producer.close(10)

    asyncio.run(main())


def test_a_batch_that_cannot_be_built_fails_alone_and_the_sender_goes_on(
    topic_broker: BrokerProcess,
) -> None:
    """Whatever makes one batch fail to build (here a builder that raises: a bug, or bytes
    that got past send's checks), that batch's futures get the error, the sender survives,
    and close() does not raise it."""

    class Exploding(RuntimeError):
        pass

    class BrokenBuilder:
        size_bytes = 100

        def __len__(self) -> int:
            return 1

        def build_parts(self) -> tuple[bytes, bytes]:
            raise Exploding("cannot build this batch")

        def seal(self) -> tuple[bytes, bytes]:
            return self.build_parts()

    producer = Producer(bootstrap_servers=topic_broker.bootstrap, acks=1, linger_ms=200)
    try:
        doomed = producer.send(TOPIC, b"doomed", partition=0)
        batch = doomed._batch
        with producer._core.acc.lock:
            # Same byte count as the real one, so the buffer accounting stays balanced.
            BrokenBuilder.size_bytes = batch.builder.size_bytes  # type: ignore[attr-defined]
            batch.builder = BrokenBuilder()  # type: ignore[attr-defined, assignment]
            batch.sealed = True  # type: ignore[attr-defined]  # later records open a new one
        with pytest.raises(Exploding, match="cannot build"):
            doomed.result(10)
        assert producer.send(TOPIC, b"next", partition=0).result(10).offset >= 0
        producer.flush(10)
        assert producer._core.acc.buffered_bytes == 0
    finally:
        producer.close(10)


def test_a_sender_that_dies_anyway_fails_everything_and_hangs_nothing(
    topic_broker: BrokerProcess,
) -> None:
    """The last line of defence: the sender task ends with an error (here its drain raises:
    a bug). Every queued record fails with that error at once, later sends raise it, flush()
    returns and close() does not raise."""

    class Bug(Exception):
        pass

    producer = Producer(bootstrap_servers=topic_broker.bootstrap, acks=1, linger_ms=100)
    try:
        assert producer.send(TOPIC, b"before").result(10).offset >= 0
        core = producer._core

        def drain(*args: Any) -> Any:
            raise Bug("drain is broken")

        queued = producer.send(TOPIC, b"queued")  # waits for its linger
        core.acc.drain = drain  # type: ignore[method-assign]
        producer._loop.call_soon_threadsafe(core._kick)
        with pytest.raises(RaftlogError, match="sender stopped: Bug"):
            queued.result(5)
        with pytest.raises(RaftlogError, match="sender stopped: Bug"):
            producer.send(TOPIC, b"after", key=b"k")
        producer.flush(5)
    finally:
        producer.close(5)


def test_every_future_resolves_by_its_delivery_timeout_when_the_sender_is_stuck(
    topic_broker: BrokerProcess,
) -> None:
    """The sender's thread is blocked (a callback that never returns, a bug): `result()`
    without a timeout still returns by delivery_timeout_ms plus a small bound."""
    producer = Producer(
        bootstrap_servers=topic_broker.bootstrap, acks=1, linger_ms=0, delivery_timeout_ms=1000
    )
    release = threading_event()
    try:
        producer.send(TOPIC, b"warm-up").result(10)
        producer._loop.call_soon_threadsafe(release.wait, 30)  # the loop is now stuck
        started = time.monotonic()
        fut = producer.send(TOPIC, b"stuck")
        with pytest.raises(RaftlogTimeoutError, match="delivery_timeout_ms=1000"):
            fut.result()
        waited = time.monotonic() - started
        assert 1.0 <= waited < 4.0, waited
        assert fut.done()
    finally:
        release.set()
        producer.close(10)


def test_records_in_flight_expire_by_their_delivery_timeout(
    topic_broker: BrokerProcess,
) -> None:
    """A broker that takes the request and never answers (SIGSTOP) with a request timeout far
    beyond the delivery timeout: the record's future fails at its delivery timeout (as Kafka
    expires in-flight batches), callbacks included, not when the request times out."""
    producer = Producer(
        bootstrap_servers=topic_broker.bootstrap,
        acks=1,
        linger_ms=0,
        request_timeout_ms=60_000,
        delivery_timeout_ms=1500,
    )
    proc = topic_broker.proc
    assert proc is not None
    try:
        producer.send(TOPIC, b"warm-up").result(10)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            fut = producer.send(TOPIC, b"held")
            called = threading_event()
            fut.add_done_callback(lambda f: called.set())
            assert called.wait(10), "no callback within 10 s"
            waited = time.monotonic() - started
            with pytest.raises(RaftlogTimeoutError, match="delivery_timeout_ms=1500"):
                fut.result(0)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert 1.5 <= waited < 3.5, waited
        assert producer.send(TOPIC, b"after").result(15).offset >= 0
    finally:
        producer.close(10)


def threading_event() -> Any:
    import threading

    return threading.Event()


def test_the_broker_refuses_a_negative_timestamp(topic_broker: BrokerProcess) -> None:
    """A client that is not ours sends a batch stamped -5 ms: the broker refuses it from the
    batch header (CorruptRecordError naming the timestamp), and appends nothing."""
    batch = encode_batch([(None, b"negative")], timestamp=-5)
    with RawClient(topic_broker.host, topic_broker.port) as raw:
        body, _ = raw.request(
            protocol.ApiKey.PRODUCE, produce_body(TOPIC, {1: len(batch)}), [batch]
        )
    [[_topic, [[_partition, error, _base, _start, message]]]] = body["topics"]
    assert error == CorruptRecordError.code, body
    assert "negative first timestamp -5" in message


# -- requests over the broker's frame limit (issue 21) ----------------------------------------

MIB = 1024 * 1024
# The case: a producer allowed 200 MiB requests sends a 150 MiB record to a broker that
# reads at most request_bytes_max = 100 MiB. It was retried 36 times for 20 s, then reported as
# "BrokerNotAvailableError ... closed the connection before answering".
HUGE_RECORD_BYTES = 150 * MIB
BROKER_LIMIT = 100 * MIB  # BrokerConfig's request_bytes_max


def huge_producer(bootstrap: str) -> Producer:
    return Producer(
        bootstrap_servers=bootstrap,
        max_request_size=200 * MIB,
        batch_size=200 * MIB,
        buffer_memory=400 * MIB,
        linger_ms=0,
        delivery_timeout_ms=60_000,
    )


def send_huge(producer: Producer) -> tuple[BaseException | None, float]:
    """Send the huge record (after a small one, so metadata and the connection are there);
    its error and how long after send() it came (printed, not asserted: this machine's speed
    varies; before the fix it was the delivery timeout, 20.5 s and 17 attempts here)."""
    producer.send(TOPIC, b"warm-up", partition=0).result(30)
    value = b"h" * HUGE_RECORD_BYTES
    started = time.monotonic()
    error = producer.send(TOPIC, value, partition=0).exception(30)
    return error, time.monotonic() - started


def no_retries(caplog: pytest.LogCaptureFixture) -> None:
    """The batch failed on its first attempt: the producer logged no retry."""
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert not retries, retries


def test_a_record_over_the_brokers_request_limit_fails_at_once_unsent(
    topic_broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    with huge_producer(topic_broker.bootstrap) as producer:
        error, took_s = send_huge(producer)
        print(f"RecordTooLargeError {took_s * 1000:.0f} ms after send (refused unsent)")
        assert isinstance(error, RecordTooLargeError), repr(error)
        message = str(error)
        assert f"over broker {topic_broker.bootstrap}'s request_bytes_max={BROKER_LIMIT}" in (
            message
        ), message
        batch = re.search(r"PRODUCE request of (\d+) bytes \(a record batch of (\d+)", message)
        assert batch and int(batch[1]) > int(batch[2]) > HUGE_RECORD_BYTES, message
        no_retries(caplog)
        # The producer goes on.
        assert producer.send(TOPIC, b"after", partition=0).result(30).offset >= 0


def test_a_record_sent_over_the_brokers_limit_is_refused_by_the_broker_at_once(
    topic_broker: BrokerProcess,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A producer that has not learned the limit (a broker too old to state it) sends the
    request: the broker answers it from its header, and the batch fails at once."""

    async def limit_unknown(self: BrokerConnection, timeout_s: float) -> None:
        self.limits_learned = True

    monkeypatch.setattr(BrokerConnection, "learn_limits", limit_unknown)
    with huge_producer(topic_broker.bootstrap) as producer:
        error, took_s = send_huge(producer)
        print(f"RecordTooLargeError {took_s * 1000:.0f} ms after send (answered by the broker)")
        assert isinstance(error, RecordTooLargeError), repr(error)
        assert f"exceeds broker 1's request_bytes_max={BROKER_LIMIT}" in str(error), error
        no_retries(caplog)
        assert producer.send(TOPIC, b"after", partition=0).result(30).offset >= 0


def test_the_broker_answers_an_oversized_frame_then_drops_it_and_closes(
    topic_broker: BrokerProcess,
) -> None:
    payload_bytes = BROKER_LIMIT + MIB
    header = produce_body(TOPIC, {0: payload_bytes})
    with RawClient(topic_broker.host, topic_broker.port) as raw:
        frame = protocol.encode_request(protocol.ApiKey.PRODUCE, 0, 77, "raw", header, [])
        head = bytes(frame[0])
        frame_length = len(head) - 4 + payload_bytes
        raw.sock.sendall(struct.pack("<I", frame_length) + head[4:])
        # The answer comes from the header, before the payload.
        corr, body, _ = raw.recv_response(timeout_s=10)
        assert corr == 77 and body["error"] == RecordTooLargeError.code, body
        assert body["message"] == (
            f"a PRODUCE frame of {frame_length} bytes (after its length field) exceeds "
            f"broker 1's request_bytes_max={BROKER_LIMIT}"
        )
        # The connection stays open while the rest arrives (dropped), then closes.
        chunk = bytes(MIB)
        for _ in range(payload_bytes // MIB):
            raw.sock.sendall(chunk)
        assert raw.recv_frame(timeout_s=30) is None, "the broker did not close the connection"
    log = topic_broker.stderr_path.read_text()
    assert f"frame of {frame_length} bytes (after its length field) exceeds" in log
