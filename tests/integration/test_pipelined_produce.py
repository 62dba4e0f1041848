"""Pipelined Produce requests in one socket read: the broker appends them together
(handlers/produce.py, ProduceGroup), and each request must still get exactly its own outcome.

One `sendall` carries good requests for two partitions, a corrupt batch, an unknown partition,
an acks=0 request, a request for both partitions, a malformed body, an unsupported version and
a Fetch; the responses must come in request order with consecutive offsets for the good ones,
the right error for each bad one, and the Fetch must see every record produced before it.
"""

from __future__ import annotations

from typing import Any

from raftlog import protocol
from raftlog.client import Admin, TopicPartition
from raftlog.errors import (
    CorruptRecordError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from raftlog.records import encode_batch, iter_records
from tests.integration._support import BrokerProcess, RawClient, fetch_body, produce_body
from tests.integration.conftest import MakeBroker


def _frame(corr: int, body: Any, payload: list[bytes], api_version: int = 0) -> bytes:
    parts = protocol.encode_request(
        protocol.ApiKey.PRODUCE, api_version, corr, "pipelined", body, payload
    )
    return b"".join(bytes(p) for p in parts)


def test_one_read_of_many_produce_requests_answers_each_on_its_own(
    broker: BrokerProcess,
) -> None:
    topic = "piped"
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(topic, partitions=2)
    stream: list[bytes] = []
    # corr -> what the response must say: ("ok", partition, record index) or an error code.
    expect: dict[int, Any] = {}
    sent: dict[int, list[bytes]] = {0: [], 1: []}  # values in the order they must be stored
    corr = 0

    def produce(partition: int, value: bytes) -> None:
        nonlocal corr
        corr += 1
        batch = encode_batch([(None, value)])
        stream.append(_frame(corr, produce_body(topic, {partition: len(batch)}), [batch]))
        expect[corr] = ("ok", partition, len(sent[partition]))
        sent[partition].append(value)

    for i in range(60):
        produce(i % 2, b"v%d" % i)
        if i == 10:
            corr += 1
            bad = bytearray(encode_batch([(None, b"corrupt")]))
            bad[-1] ^= 0xFF
            stream.append(_frame(corr, produce_body(topic, {0: len(bad)}), [bytes(bad)]))
            expect[corr] = CorruptRecordError.code
        if i == 20:
            corr += 1
            batch = encode_batch([(None, b"nowhere")])
            stream.append(_frame(corr, produce_body(topic, {7: len(batch)}), [batch]))
            expect[corr] = UnknownTopicOrPartitionError.code
        if i == 30:
            corr += 1  # acks=0: appended, never answered
            batch = encode_batch([(None, b"quiet")])
            stream.append(_frame(corr, produce_body(topic, {1: len(batch)}, acks=0), [batch]))
            sent[1].append(b"quiet")
        if i == 40:
            corr += 1
            body: Any = {"acks": 1, "timeout_ms": 1000, "topics": 5}
            stream.append(_frame(corr, body, []))
            expect[corr] = InvalidRequestError.code
            corr += 1
            batch = encode_batch([(None, b"v2")])
            stream.append(_frame(corr, produce_body(topic, {0: len(batch)}), [batch], 9))
            expect[corr] = UnsupportedVersionError.code
        if i == 50:
            corr += 1
            b0, b1 = encode_batch([(None, b"both-0")]), encode_batch([(None, b"both-1")])
            stream.append(_frame(corr, produce_body(topic, {0: len(b0), 1: len(b1)}), [b0, b1]))
            expect[corr] = ("both", len(sent[0]), len(sent[1]))
            sent[0].append(b"both-0")
            sent[1].append(b"both-1")
    corr += 1
    tps = {TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 0}
    fetch = protocol.encode_request(protocol.ApiKey.FETCH, 0, corr, "pipelined", fetch_body(tps))
    stream.append(b"".join(bytes(p) for p in fetch))
    fetch_corr = corr

    with RawClient(broker.host, broker.port) as raw:
        raw.sock.sendall(b"".join(stream))  # one write: the broker reads it in few reads
        answered = []
        for _ in range(len(expect)):
            got, body, _ = raw.recv_response()
            answered.append(got)
            want = expect[got]
            if isinstance(want, int):
                error = body.get("error") or body["topics"][0][1][0][1]
                assert error == want, (got, body)
            elif want[0] == "ok":
                [[t, [[p, error, offset, _, _]]]] = body["topics"]
                assert (t, p, error, offset) == (topic, want[1], 0, want[2]), got
            else:
                [[_, [r0, r1]]] = body["topics"]
                assert (r0[:3], r1[:3]) == ([0, 0, want[1]], [1, 0, want[2]])
        assert answered == sorted(expect)  # in request order, nothing for acks=0
        got, body, payload = raw.recv_response()
        assert got == fetch_corr
        [[_, results]] = body["topics"]
        pos = 0
        for partition, error, high_watermark, _, nbytes, *_ in results:
            assert error == 0 and high_watermark == len(sent[partition])
            records = list(iter_records(payload[pos : pos + nbytes]))
            pos += nbytes
            assert [r.value for r in records] == sent[partition]
            assert [r.offset for r in records] == list(range(len(sent[partition])))


def test_grouped_produce_with_auto_create_takes_the_ordinary_path(
    make_broker: MakeBroker,
) -> None:
    """A request for a topic still to be created waits for the quorum; requests around it
    keep their order and offsets."""
    broker = make_broker("--auto-create-topics")
    batch = encode_batch([(None, b"x")])
    frames = [
        _frame(1, produce_body("auto-a", {0: len(batch)}), [batch]),
        _frame(2, produce_body("auto-a", {0: len(batch)}), [batch]),
        _frame(3, produce_body("auto-b", {0: len(batch)}), [batch]),
        _frame(4, produce_body("auto-a", {0: len(batch)}), [batch]),
    ]
    with RawClient(broker.host, broker.port) as raw:
        raw.sock.sendall(b"".join(frames[:2]))
        results = [raw.recv_response() for _ in range(2)]
        raw.sock.sendall(b"".join(frames[2:]))
        results += [raw.recv_response() for _ in range(2)]
    assert [r[0] for r in results] == [1, 2, 3, 4]
    offsets = [r[1]["topics"][0][1][0][1:3] for r in results]
    assert offsets == [[0, 0], [0, 1], [0, 0], [0, 2]]
