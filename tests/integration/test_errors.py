"""Errors a client sees: unknown topics, bad names, duplicates, auto-create, no broker.

Each error must reach the caller as the matching RaftlogError subclass with a message naming
what was wrong, and fast: none of these should wait out a long timeout.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

from raftlog import protocol
from raftlog.client import Admin, AsyncProducer, Consumer, Producer, TopicPartition
from raftlog.errors import (
    BrokerNotAvailableError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    RaftlogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from raftlog.records import encode_batch
from tests.integration._support import (
    BrokerProcess,
    RawClient,
    fetch_body,
    list_offsets_body,
    produce_body,
)
from tests.integration.conftest import MakeBroker

QUICK_S = 5.0  # an error that needs no waiting comes well within this


def test_unknown_topic_produce_and_fetch(broker: BrokerProcess) -> None:
    started = time.monotonic()
    with Producer(bootstrap_servers=broker.bootstrap) as producer:
        with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
            producer.send("nope", b"x")
        with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
            producer.partitions_for("nope")
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        Consumer("nope", bootstrap_servers=broker.bootstrap)
    with Consumer(bootstrap_servers=broker.bootstrap) as consumer:
        consumer.assign([TopicPartition("nope", 0)])
        with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
            consumer.position(TopicPartition("nope", 0))
    with Admin(broker.bootstrap) as admin:
        with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
            admin.describe_topics(["nope"])
        with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
            admin.delete_topics(["nope"])
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.list_offsets({TopicPartition("nope", 0): -1})
        admin.create_topic("exists", 2)
    assert time.monotonic() - started < 4 * QUICK_S

    # On the wire: per-partition error codes, and an unknown partition of a known topic.
    batch = encode_batch([(b"k", b"v")])
    with RawClient(broker.host, broker.port) as raw:
        for topic, partition in (("nope", 0), ("exists", 2), ("exists", -1)):
            body, _ = raw.request(
                protocol.ApiKey.PRODUCE, produce_body(topic, {partition: len(batch)}), [batch]
            )
            assert body["topics"][0][1][0][:2] == [partition, UnknownTopicOrPartitionError.code]
            tp = TopicPartition(topic, partition)
            body, payload = raw.request(protocol.ApiKey.FETCH, fetch_body({tp: 0}, 5000))
            [[_, [[_, error, _, _, nbytes, message, *_]]]] = body["topics"]
            assert (error, nbytes, payload) == (UnknownTopicOrPartitionError.code, 0, b"")
            assert str(tp) in message
            body, _ = raw.request(protocol.ApiKey.LIST_OFFSETS, list_offsets_body({tp: -1}))
            assert body["topics"][0][1][0][1] == UnknownTopicOrPartitionError.code
    with Admin(broker.bootstrap) as admin:
        assert sorted(admin.list_topics()) == ["exists"]  # nothing was auto-created
    with (
        Producer(bootstrap_servers=broker.bootstrap) as producer,
        pytest.raises(RaftlogError, match="partition 2 of topic 'exists' does not exist"),
    ):
        producer.send("exists", b"x", partition=2)


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a b", "a/b", "../escape", "ünïcode", "x" * 250, "tab\tname", "nul\0"],
)
def test_invalid_topic_names_are_refused(broker: BrokerProcess, name: str) -> None:
    with Admin(broker.bootstrap) as admin:
        with pytest.raises(InvalidTopicError):
            admin.create_topic(name)
        assert admin.list_topics() == {}
    assert sorted(p.name for p in (broker.data_dir / "logs").iterdir()) == []


def test_topic_creation_errors(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic("x" * 249, 1)  # the longest legal name
        admin.create_topic("dup", 3)
        with pytest.raises(TopicAlreadyExistsError, match="dup"):
            admin.create_topic("dup", 1)
        for bad in (0, -1, 10_001):
            with pytest.raises(InvalidPartitionsError):
                admin.create_topic("parts", bad)
        with pytest.raises(
            InvalidReplicationFactorError, match="replication factor 3 needs 3 live brokers"
        ):
            admin.create_topic("rf", 1, replication_factor=3)
        with pytest.raises(RaftlogError, match=r"segment\.bytes"):
            admin.create_topic("cfg", 1, config={"segment.bytes": "ten"})
        topics = admin.list_topics()
        assert sorted(topics) == sorted(["x" * 249, "dup"])
        assert len(topics["dup"].partitions) == 3
        admin.delete_topics(["dup"])
        admin.create_topic("dup", 1)  # a deleted name can be reused, with fresh data
        assert len(admin.list_topics()["dup"].partitions) == 1


def test_auto_create_is_off_by_default(broker: BrokerProcess) -> None:
    with (
        Producer(bootstrap_servers=broker.bootstrap) as producer,
        pytest.raises(UnknownTopicOrPartitionError),
    ):
        producer.send("auto", b"x")
    with Admin(broker.bootstrap) as admin:
        assert admin.list_topics() == {}


def test_auto_create_topics_flag(make_broker: MakeBroker) -> None:
    broker = make_broker("--auto-create-topics")
    with Producer(bootstrap_servers=broker.bootstrap) as producer:
        meta = producer.send("auto-by-producer", b"first").result(timeout=10)
    assert (meta.partition, meta.offset) == (0, 0)
    batch = encode_batch([(None, b"raw")])
    with RawClient(broker.host, broker.port) as raw:
        body, _ = raw.request(
            protocol.ApiKey.PRODUCE, produce_body("auto-by-raw", {0: len(batch)}), [batch]
        )
        assert body["topics"][0][1][0][:3] == [0, 0, 0]
        # Auto-creation still checks the name.
        body, _ = raw.request(
            protocol.ApiKey.PRODUCE, produce_body("bad name", {0: len(batch)}), [batch]
        )
        assert body["topics"][0][1][0][1] == InvalidTopicError.code
    with Admin(broker.bootstrap) as admin:
        assert sorted(admin.list_topics()) == ["auto-by-producer", "auto-by-raw"]
    with Consumer(
        "auto-by-producer", bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest"
    ) as c:
        assert [
            r.value for r in c.poll(timeout_ms=5000)[TopicPartition("auto-by-producer", 0)]
        ] == [b"first"]


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port nobody listens on: bound (so no one else takes it) but never listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def test_unreachable_bootstrap_server_fails_fast(closed_port: int) -> None:
    where = f"127.0.0.1:{closed_port}"
    admin = Admin(where)
    for make in (
        lambda: Producer(bootstrap_servers=where),
        lambda: Consumer("t", bootstrap_servers=where),
        admin.list_topics,
    ):
        started = time.monotonic()
        with pytest.raises(BrokerNotAvailableError, match=where):
            make()
        assert time.monotonic() - started < QUICK_S
    admin.close()


async def test_unreachable_bootstrap_server_fails_fast_async(closed_port: int) -> None:
    where = f"127.0.0.1:{closed_port}"
    started = time.monotonic()
    producer = AsyncProducer(bootstrap_servers=where)
    with pytest.raises(BrokerNotAvailableError, match=where):
        await producer.start()
    assert time.monotonic() - started < QUICK_S
    # A failed start leaves no background task behind (it would be destroyed while pending).
    assert asyncio.all_tasks() == {asyncio.current_task()}
    await producer.close()


def test_unsupported_api_and_version_are_answered_on_an_open_connection(
    broker: BrokerProcess,
) -> None:
    with RawClient(broker.host, broker.port) as raw:
        for api_key, version in ((99, 0), (-1, 0), (int(protocol.ApiKey.FETCH), 1)):
            corr = raw.send_request(api_key, {}, api_version=version)
            got, body, _ = raw.recv_response()
            assert got == corr
            assert body["error"] == UnsupportedVersionError.code, body
        body, _ = raw.request(protocol.ApiKey.API_VERSIONS, {})
        assert sorted(k for k, _, _ in body["apis"]) == sorted(int(k) for k in protocol.ApiKey)
