"""The Kafka listener by hand: exact answers, Kafka's error codes, and bad input.

One `raftlog dev` node (its Kafka listener on by default) serves the module. Requests are built
with raftlog's Kafka message codecs and record batches with kafka-python's
DefaultRecordBatchBuilder (an independent implementation of record batch v2), so a test fails
if either side gets a byte wrong. What each kind of bad input must get (raftlog/broker/
kafka_connection.py): an unparseable frame, an unknown API or version closes that connection
(Kafka's broker does the same); ApiVersions at an unknown version is answered with v0 and
UNSUPPORTED_VERSION; a batch with a wrong CRC is CORRUPT_MESSAGE and one over the topic's
max.message.bytes MESSAGE_TOO_LARGE for its partition, nothing appended; and every time the
broker keeps serving other connections.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from raftlog.client import Admin
from raftlog.kafka.api import SUPPORTED_VERSIONS, ApiKey
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from raftlog.kafka.messages.commits import OffsetFetchRequest
from raftlog.kafka.messages.consumer_protocol import ConsumerProtocolSubscription
from raftlog.kafka.messages.fetch import FetchPartition, FetchRequest, FetchResponse
from raftlog.kafka.messages.group_admin import DescribeGroupsRequest, ListGroupsRequest
from raftlog.kafka.messages.groups import (
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    LeaveGroupRequest,
    SyncGroupRequest,
)
from raftlog.kafka.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from raftlog.kafka.messages.metadata import MetadataRequest, MetadataResponse
from raftlog.kafka.messages.produce import ProduceRequest, ProduceResponse
from tests.integration._support import BrokerProcess
from tests.kafka._raw import KafkaRawClient, request_frame

TOPIC = "kafka-raw"
PROBE_ID = 999_999


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("kafka-broker")
    b = BrokerProcess(root / "data", root / "logs")
    try:
        b.start()
        with Admin(b.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=2, replication_factor=1)
            admin.create_topic("small", partitions=1, config={"max.message.bytes": "2000"})
        yield b
    finally:
        problems = b.shutdown_and_check()
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


def batch(
    records: list[tuple[bytes | None, bytes | None]], *, timestamp: int = 1_700_000_000_000
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp + i, key, value, [("h", b"v%d" % i)])
    return bytes(builder.build())


def produce(client: KafkaRawClient, topic: str, partition: int, data: bytes, acks: int = 1):
    request = ProduceRequest(None, acks, 10_000, ((topic, ((partition, memoryview(data)),)),))
    body = client.request(ApiKey.PRODUCE, 8, request)
    ((name, (result,)),) = ProduceResponse.decode(body, 8).topics
    assert name == topic
    return result


def fetch(client: KafkaRawClient, topic: str, partition: int, offset: int, version: int = 11):
    request = FetchRequest(
        -1,
        100,
        1,
        1 << 20,
        0,
        0,
        -1,
        ((topic, (FetchPartition(partition, -1, offset, -1, 1 << 20),)),),
        (),
        "",
    )
    body = client.request(ApiKey.FETCH, version, request)
    response = FetchResponse.decode(body, version)
    ((name, (p,)),) = response.topics
    assert name == topic
    return p


def still_serving(b: BrokerProcess) -> None:
    """Another connection still gets answers, and the broker process is alive."""
    assert b.check_alive() is None
    with KafkaRawClient(b.kafka_bootstrap) as c:
        body = c.request(ApiKey.METADATA, 8, MetadataRequest((TOPIC,)))
        assert MetadataResponse.decode(body, 8).topics[0].error_code == 0


def test_api_versions_names_every_api_with_a_handler_at_every_version(
    kafka_broker: BrokerProcess,
) -> None:
    with KafkaRawClient(kafka_broker.kafka_bootstrap) as c:
        for version in range(4):
            body = c.request(ApiKey.API_VERSIONS, version, ApiVersionsRequest("raw", "1.0"))
            response = ApiVersionsResponse.decode(body, version)
            assert response.error_code == 0
            advertised = {k: (lo, hi) for k, lo, hi in response.api_keys}
            for key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.LIST_OFFSETS):
                assert advertised[key] == SUPPORTED_VERSIONS[key]


def test_api_versions_at_an_unknown_version_gets_kafkas_fallback(
    kafka_broker: BrokerProcess,
) -> None:
    with KafkaRawClient(kafka_broker.kafka_bootstrap) as c:
        corr = c.send(ApiKey.API_VERSIONS, 99, b"")
        got = c.recv()
        assert got is not None and got[0] == corr
        response = ApiVersionsResponse.decode(got[1], 0)
        assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert any(k == ApiKey.PRODUCE for k, _, _ in response.api_keys)
        # The connection stays usable: the client retries at a version we named.
        body = c.request(ApiKey.API_VERSIONS, 2, ApiVersionsRequest())
        assert ApiVersionsResponse.decode(body, 2).error_code == 0


def test_metadata_names_the_kafka_listener_and_every_partition(kafka_broker: BrokerProcess) -> None:
    with KafkaRawClient(kafka_broker.kafka_bootstrap) as c:
        for version in (0, 1, 4, 8):
            body = c.request(ApiKey.METADATA, version, MetadataRequest((TOPIC, "no-such-topic")))
            response = MetadataResponse.decode(body, version)
            (broker,) = response.brokers
            assert f"{broker.host}:{broker.port}" == kafka_broker.kafka_bootstrap
            known, unknown = response.topics
            assert (known.name, known.error_code) == (TOPIC, 0)
            assert [p.partition for p in known.partitions] == [0, 1]
            assert all(p.leader == broker.node_id for p in known.partitions)
            assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_produce_then_fetch_returns_the_batch_as_sent(kafka_broker: BrokerProcess) -> None:
    records = [(b"key-%d" % i, b"value-%d" % i) for i in range(10)]
    data = batch(records)
    with KafkaRawClient(kafka_broker.kafka_bootstrap) as c:
        result = produce(c, TOPIC, 1, data)
        assert result.error_code == 0
        base = result.base_offset
        for version in (4, 7, 11):
            p = fetch(c, TOPIC, 1, base, version)
            assert p.error_code == 0 and p.high_watermark >= base + 10
            got = b"".join(p.records)
            # The leader stamped the base offset and its epoch; from the magic byte on, the
            # batch is the client's bytes (its CRC-32C covers them, not the stamped fields).
            assert got[8:12] == data[8:12] and got[16 : len(data)] == data[16:]
            read = DefaultRecordBatch(bytearray(got[: 12 + struct.unpack_from(">i", got, 8)[0]]))
            assert read.validate_crc()
            assert [(r.key, r.value, r.offset) for r in read] == [
                (k, v, base + i) for i, (k, v) in enumerate(records)
            ]


def test_list_offsets_earliest_latest_and_by_timestamp(kafka_broker: BrokerProcess) -> None:
    with KafkaRawClient(kafka_broker.kafka_bootstrap) as c:
        base = produce(
            c, TOPIC, 0, batch([(None, b"t%d" % i) for i in range(5)], timestamp=5_000)
        ).base_offset
        for version in (1, 4, 5):
            parts = tuple(ListOffsetsPartition(0, -1, ts) for ts in (-2, -1, 5_002))
            body = c.request(
                ApiKey.LIST_OFFSETS, version, ListOffsetsRequest(-1, 0, ((TOPIC, parts),))
            )
            # One partition per request entry, in order.
            ((_, answers),) = ListOffsetsResponse.decode(body, version).topics
            earliest, latest, at = answers
            assert earliest.offset == 0 and latest.offset >= base + 5
            assert (at.offset, at.timestamp) == (base + 2, 5_002)


def test_a_wrong_crc_is_corrupt_message_and_appends_nothing(kafka_broker: BrokerProcess) -> None:
    data = bytearray(batch([(b"k", b"v")]))
    data[-1] ^= 0x01  # a flipped bit in the record: the CRC-32C no longer matches
    with KafkaRawClient(kafka_broker.kafka_bootstrap) as c:
        before = fetch(c, TOPIC, 0, 0).high_watermark
        result = produce(c, TOPIC, 0, bytes(data))
        assert result.error_code == ErrorCode.CORRUPT_MESSAGE
        assert fetch(c, TOPIC, 0, 0).high_watermark == before
    still_serving(kafka_broker)


def test_a_batch_over_max_message_bytes_is_message_too_large(kafka_broker: BrokerProcess) -> None:
    data = batch([(None, b"x" * 5000)])
    with KafkaRawClient(kafka_broker.kafka_bootstrap) as c:
        assert produce(c, "small", 0, data).error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert produce(c, "small", 0, batch([(None, b"x" * 100)])).error_code == 0
    still_serving(kafka_broker)


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="http"),
        pytest.param(struct.pack(">i", 3) + b"abc", id="size-below-a-header"),
        pytest.param(struct.pack(">i", 0x7FFFFFFF) + b"\0" * 8, id="size-over-the-limit"),
        pytest.param(request_frame(77, 0, 1, b""), id="unknown-api-key"),
        pytest.param(request_frame(ApiKey.PRODUCE, 99, 1, b""), id="unknown-version"),
        pytest.param(request_frame(ApiKey.METADATA, 8, 1, b"\xff\xff\xff\x7f"), id="huge-array"),
        pytest.param(request_frame(ApiKey.PRODUCE, 8, 1, b"\x00"), id="body-cut-short"),
    ],
)
def test_bad_frames_close_that_connection_only(kafka_broker: BrokerProcess, frame: bytes) -> None:
    with KafkaRawClient(kafka_broker.kafka_bootstrap) as c:
        c.send_raw(frame)
        assert c.closed_by_broker(), "the broker kept a connection that sent garbage open"
    still_serving(kafka_broker)


# The consumer-group APIs, on a group of their own (a JoinGroup that survives its mutation
# either asks for a member id or completes at once: it is the group's only member).
_SUBSCRIPTION = ConsumerProtocolSubscription((TOPIC,)).encode(0)
GROUP_REQUESTS: list[tuple[ApiKey, int, Any]] = [
    (ApiKey.FIND_COORDINATOR, 2, FindCoordinatorRequest("fuzz-group")),
    (
        ApiKey.JOIN_GROUP,
        5,
        JoinGroupRequest(
            "fuzz-group",
            10_000,
            "",
            "consumer",
            (JoinGroupRequestProtocol("range", _SUBSCRIPTION),),
            rebalance_timeout_ms=500,
        ),
    ),
    (ApiKey.SYNC_GROUP, 3, SyncGroupRequest("fuzz-group", 1, "m")),
    (ApiKey.HEARTBEAT, 3, HeartbeatRequest("fuzz-group", 1, "m")),
    (ApiKey.LEAVE_GROUP, 2, LeaveGroupRequest("fuzz-group", "m")),
    (ApiKey.OFFSET_FETCH, 5, OffsetFetchRequest("fuzz-group", None)),
    (ApiKey.LIST_GROUPS, 2, ListGroupsRequest()),
    (ApiKey.DESCRIBE_GROUPS, 4, DescribeGroupsRequest(("fuzz-group",))),
]


def test_fuzzed_frames_never_stop_the_broker(kafka_broker: BrokerProcess) -> None:
    """Thousands of mutated frames of every API: each is answered or closes its connection."""
    rng = random.Random(20261126)
    sink_batch = memoryview(batch([(b"k", b"v")]))
    one_fetch = ((TOPIC, (FetchPartition(0, -1, 0, -1, 1 << 20),)),)
    latest = ((TOPIC, (ListOffsetsPartition(0, -1, -1),)),)
    requests: list[tuple[ApiKey, int, Any]] = [
        (ApiKey.API_VERSIONS, 3, ApiVersionsRequest("fuzz", "1")),
        (ApiKey.METADATA, 8, MetadataRequest((TOPIC,))),
        (ApiKey.PRODUCE, 8, ProduceRequest(None, 1, 1000, (("fuzz-sink", ((0, sink_batch),)),))),
        (ApiKey.FETCH, 11, FetchRequest(-1, 0, 1, 1 << 20, 0, 0, -1, one_fetch, (), "")),
        (ApiKey.LIST_OFFSETS, 5, ListOffsetsRequest(-1, 0, latest)),
        *GROUP_REQUESTS,
    ]
    seeds = [request_frame(k, v, 1, bytes(r.encode(v))) for k, v, r in requests]
    probe = request_frame(ApiKey.API_VERSIONS, 0, PROBE_ID, b"")
    frames = 1000
    deadline = time.monotonic() + 180
    closed = answered = 0
    conn = KafkaRawClient(kafka_broker.kafka_bootstrap)
    try:
        for i in range(frames):
            assert time.monotonic() < deadline, f"only {i} fuzzed frames in 180 s"
            frame = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 4)):
                # A frame cut down to its size field can only grow again.
                kind = rng.random() if len(frame) > 4 else 1.0
                at = rng.randrange(4, len(frame)) if len(frame) > 4 else 4
                if kind < 0.5:
                    frame[at] = rng.randrange(256)
                elif kind < 0.75:
                    del frame[at:]
                else:
                    frame[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
                frame[0:4] = struct.pack(">i", len(frame) - 4)
            # A probe after each: its answer says the connection is in step again (a mutated
            # request may have no answer: acks=0, or a long poll that outlasts the wait).
            try:
                conn.send_raw(bytes(frame) + probe)
                while (got := conn.recv(1.0)) is not None and got[0] != PROBE_ID:
                    pass
            except (TimeoutError, OSError):
                got = None
            if got is None:
                closed += 1
                conn.sock.close()
                conn = KafkaRawClient(kafka_broker.kafka_bootstrap)
            else:
                answered += 1
    finally:
        conn.sock.close()
    assert closed + answered == frames and closed > 0 and answered > 0, (closed, answered)
    still_serving(kafka_broker)
