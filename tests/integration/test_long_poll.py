"""Long-polling fetches: held at the log end, woken by new data, bounded by max_wait_ms.

Timing assertions are about the order of events (the fetch was still pending when the record
was sent; it returned after the send and long before its max wait), plus lower bounds where the
broker must wait; never a tight upper bound that a loaded machine could miss.
"""

from __future__ import annotations

import asyncio
import threading
import time

from raftlog import protocol
from raftlog.client import Admin, AsyncConsumer, AsyncProducer, Consumer, Producer, TopicPartition
from raftlog.records import encode_batch, iter_records
from tests.integration._support import BrokerProcess, RawClient, fetch_body, produce_body
from tests.integration.conftest import MakeBroker

LONG_WAIT_MS = 30_000


def create_topic(broker: BrokerProcess, name: str, partitions: int = 1) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(name, partitions)


def test_fetch_at_log_end_wakes_when_a_record_is_produced(broker: BrokerProcess) -> None:
    topic = "wake"
    create_topic(broker, topic)
    tp = TopicPartition(topic, 0)
    arrived: list[tuple[float, tuple[int, dict, bytes]]] = []
    with RawClient(broker.host, broker.port, timeout_s=LONG_WAIT_MS / 1000 + 10) as raw:
        fetch_sent = time.monotonic()
        corr = raw.send_request(protocol.ApiKey.FETCH, fetch_body({tp: 0}, LONG_WAIT_MS))
        # The broker holds the fetch: nothing comes back while the partition is empty.
        assert raw.response_pending(0.3), "a fetch at the log end was answered at once"

        def read() -> None:
            response = raw.recv_response()
            arrived.append((time.monotonic(), response))

        reader = threading.Thread(target=read)
        reader.start()
        send_started = time.monotonic()
        with Producer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=0) as producer:
            meta = producer.send(topic, b"hello", key=b"k").result(timeout=10)
        reader.join(LONG_WAIT_MS / 1000 + 10)
        assert not reader.is_alive() and arrived, "the long-polling fetch never returned"
    returned, (got_corr, body, payload) = arrived[0]
    assert got_corr == corr
    assert send_started < returned < fetch_sent + LONG_WAIT_MS / 1000 / 2, (
        "the fetch did not return between the send and its max wait"
    )
    [[_, [[partition, error, hw, _, nbytes, _, _]]]] = body["topics"]
    assert (partition, error, hw) == (0, 0, 1)
    records = list(iter_records(payload[:nbytes]))
    assert [(r.offset, r.key, r.value) for r in records] == [(meta.offset, b"k", b"hello")]


async def test_async_consumer_poll_wakes_on_send(broker: BrokerProcess) -> None:
    topic = "wake-async"
    await asyncio.to_thread(create_topic, broker, topic)
    tp = TopicPartition(topic, 0)
    async with (
        AsyncConsumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=LONG_WAIT_MS) as c,
        AsyncProducer(bootstrap_servers=broker.bootstrap, linger_ms=0) as producer,
    ):
        c.assign([tp])
        await c.seek_to_end(tp)
        assert await c.position(tp) == 0
        poll_started = time.monotonic()
        poll = asyncio.create_task(c.poll(timeout_ms=LONG_WAIT_MS))
        # Wait until the consumer's fetch is on the wire (its connection has a request in
        # flight); the poll is then blocked on the broker, not on anything local.
        deadline = time.monotonic() + 10
        while not any(conn.in_flight for conn in c.client._conns.values()):
            assert time.monotonic() < deadline, "the consumer never sent its fetch"
            await asyncio.sleep(0.005)
        assert not poll.done()
        send_started = time.monotonic()
        meta = await producer.send_and_wait(topic, b"wake up")
        result = await asyncio.wait_for(poll, LONG_WAIT_MS / 1000 + 10)
        returned = time.monotonic()
    assert [(r.offset, r.value) for r in result[tp]] == [(meta.offset, b"wake up")]
    assert send_started < returned < poll_started + LONG_WAIT_MS / 1000 / 2


def test_fetch_min_bytes_not_reached_waits_for_max_wait(broker: BrokerProcess) -> None:
    topic = "min-bytes"
    create_topic(broker, topic)
    with Producer(bootstrap_servers=broker.bootstrap, acks=1) as producer:
        producer.send(topic, b"only a few bytes").result(timeout=10)
    tp = TopicPartition(topic, 0)
    max_wait_ms = 1200

    # Raw: the data is there but below min_bytes; the broker answers at max_wait with it.
    with RawClient(broker.host, broker.port) as raw:
        started = time.monotonic()
        body, payload = raw.request(
            protocol.ApiKey.FETCH, fetch_body({tp: 0}, max_wait_ms, min_bytes=1_000_000)
        )
        waited = time.monotonic() - started
    assert waited >= max_wait_ms / 1000 * 0.9, f"answered after {waited:.3f} s"
    [[_, [[_, error, _, _, nbytes, _, _]]]] = body["topics"]
    assert error == 0 and nbytes > 0
    assert [r.value for r in iter_records(payload)] == [b"only a few bytes"]

    # The same through the consumer's fetch_min_bytes / fetch_max_wait_ms.
    with Consumer(
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        fetch_min_bytes=1_000_000,
        fetch_max_wait_ms=max_wait_ms,
    ) as consumer:
        consumer.assign([tp])
        assert consumer.position(tp) == 0
        started = time.monotonic()
        batch = consumer.poll(timeout_ms=max_wait_ms)
        waited = time.monotonic() - started
    assert waited >= max_wait_ms / 1000 * 0.9, f"answered after {waited:.3f} s"
    assert [r.value for r in batch[tp]] == [b"only a few bytes"]


def test_fetch_wakes_once_min_bytes_are_reached(broker: BrokerProcess) -> None:
    topic = "min-bytes-reached"
    create_topic(broker, topic)
    tp = TopicPartition(topic, 0)
    with (
        RawClient(broker.host, broker.port, timeout_s=LONG_WAIT_MS / 1000 + 10) as raw,
        Producer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=0) as producer,
    ):
        fetch_sent = time.monotonic()
        raw.send_request(protocol.ApiKey.FETCH, fetch_body({tp: 0}, LONG_WAIT_MS, 4000))
        producer.send(topic, b"small").result(timeout=10)
        # One small record is below min_bytes: still held.
        assert raw.response_pending(0.3), "answered before min_bytes were available"
        producer.send(topic, b"x" * 5000).result(timeout=10)
        _, body, payload = raw.recv_response()
        returned = time.monotonic()
    assert returned < fetch_sent + LONG_WAIT_MS / 1000 / 2
    [[_, [[_, error, hw, _, nbytes, _, _]]]] = body["topics"]
    assert (error, hw) == (0, 2) and nbytes >= 4000
    assert [r.value for r in iter_records(payload)] == [b"small", b"x" * 5000]


def test_fetch_max_bytes_bounds_the_response(broker: BrokerProcess) -> None:
    """Past the first batch (always returned whole), a response stays within max_bytes."""
    topic = "max-bytes"
    create_topic(broker, topic, partitions=2)
    with Producer(bootstrap_servers=broker.bootstrap, acks=1, batch_size=1) as producer:
        for i in range(50):
            producer.send(topic, b"%04d" % i + b"y" * 996, partition=i % 2)
        producer.flush(timeout=30)
    tps = {TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 0}
    with RawClient(broker.host, broker.port) as raw:
        for max_bytes in (1, 2500, 10_000):
            body = fetch_body(tps)
            body["max_bytes"] = max_bytes
            resp, payload = raw.request(protocol.ApiKey.FETCH, body)
            batch_sizes = [h.size for _, h in _batches(payload)]
            assert batch_sizes, "a fetch with data returned nothing"
            assert batch_sizes[0] <= max_bytes or len(batch_sizes) == 1, (
                f"max_bytes={max_bytes}: an oversized first batch must come alone"
            )
            assert len(payload) <= max(max_bytes, batch_sizes[0]), (
                f"max_bytes={max_bytes}: got {len(payload)} bytes in {len(batch_sizes)} batches"
            )
            sizes = [p[4] for _, parts in resp["topics"] for p in parts]
            assert sum(sizes) == len(payload)


def _batches(payload: bytes):
    from raftlog.records import iter_batches

    return list(iter_batches(payload))


def test_sendfile_and_buffered_fetches_serve_the_same_bytes(make_broker: MakeBroker) -> None:
    """The fetch paths (sendfile for everything; the default, which copies a partition's data
    below 64 KiB and sendfiles the rest; --no-fetch-zero-copy's pread + write) answer the same
    fetches with byte-identical responses, limits and long-poll included."""
    brokers = [
        make_broker("--fetch-zero-copy-min-bytes", "0"),
        make_broker(),
        # Partition 0 holds ~6 KB, partition 1 ~32 KB: one copied, one sendfile'd, one answer.
        make_broker("--fetch-zero-copy-min-bytes", "16384"),
        make_broker("--no-fetch-zero-copy"),
    ]
    answers = []
    for broker in brokers:
        create_topic(broker, "paths", partitions=2)
        with Producer(bootstrap_servers=broker.bootstrap, acks=1, batch_size=3000) as producer:
            for i in range(400):
                producer.send("paths", b"%05d" % i + b"z" * (i % 300 if i % 2 else 20),
                              partition=i % 2, timestamp_ms=1_700_000_000_000 + i)  # fmt: skip
            producer.flush(timeout=30)
        tps = {TopicPartition("paths", 0): 17, TopicPartition("paths", 1): 0}
        got = []
        with RawClient(broker.host, broker.port) as raw:
            for max_bytes in (1, 5000, 1 << 20):
                body = fetch_body(tps)
                body["max_bytes"] = max_bytes
                got.append(raw.request(protocol.ApiKey.FETCH, body))
            at_end = {TopicPartition("paths", 0): 200}
            corr = raw.send_request(protocol.ApiKey.FETCH, fetch_body(at_end, LONG_WAIT_MS))
            assert raw.response_pending(0.2)  # held at the log end
            with Producer(bootstrap_servers=broker.bootstrap, acks=1) as producer:
                producer.send("paths", b"late", partition=0, timestamp_ms=1_800_000_000_000)
            got_corr, resp, payload = raw.recv_response(timeout_s=20)
            assert got_corr == corr
            got.append((resp, payload))
        answers.append(got)
    assert answers[0] == answers[1] == answers[2] == answers[3]
    sizes = [entry[4] for _, ps in answers[0][2][0]["topics"] for entry in ps]
    assert sizes[0] < 16384 <= sizes[1]  # the mixed broker's answer had both kinds of part
    modes = (
        "sendfile\n",
        "sendfile (pread + write below 65536 bytes)",
        "sendfile (pread + write below 16384 bytes)",
        "pread + write",
    )
    for broker, mode in zip(brokers, modes, strict=True):
        assert f"fetches served with {mode}" in broker.stderr_path.read_text()
    values = [r.value for r in iter_records(answers[0][-1][1])]
    assert values == [b"late"]


def test_a_record_produced_in_the_same_read_as_a_long_poll_wakes_it(
    broker: BrokerProcess,
) -> None:
    """A Fetch at the log end and a Produce in one socket read: the broker handles the fetch
    (nothing to read: it will wait), then appends the record, and only then does the fetch's
    wait start running. The fetch must count as waiting from its read on, so the append wakes
    it; a wait registered later misses the wake-up and sits out its whole max wait. (Under
    load a produce from another connection lands in that gap too: acks=all then stalls for a
    follower's 500 ms replica_fetch_wait_max_ms.)"""
    topic = "same-read"
    create_topic(broker, topic)
    tp = TopicPartition(topic, 0)
    batch = encode_batch([(None, b"together")])
    frames = [
        *protocol.encode_request(
            protocol.ApiKey.FETCH, 0, 1, "raw-test", fetch_body({tp: 0}, LONG_WAIT_MS), ()
        ),
        *protocol.encode_request(
            protocol.ApiKey.PRODUCE,
            0,
            2,
            "raw-test",
            produce_body(topic, {0: len(batch)}),
            [batch],
        ),
    ]
    with RawClient(broker.host, broker.port, timeout_s=LONG_WAIT_MS / 1000 + 10) as raw:
        sent = time.monotonic()
        raw.sock.sendall(b"".join(bytes(p) for p in frames))  # one write, one read
        fetch_corr, body, payload = raw.recv_response()
        returned = time.monotonic()
        produce_corr, produce_response, _ = raw.recv_response()
    assert (fetch_corr, produce_corr) == (1, 2)
    assert returned - sent < LONG_WAIT_MS / 1000 / 2, (
        f"the fetch returned after {returned - sent:.1f} s: it waited out its max wait, the "
        "append in the same read did not wake it"
    )
    [[_, [[partition, error, hw, _, nbytes, *_]]]] = body["topics"]
    assert (partition, error, hw) == (0, 0, 1), produce_response
    assert [r.value for r in iter_records(payload[:nbytes])] == [b"together"]
