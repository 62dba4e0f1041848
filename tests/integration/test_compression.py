"""raftlog's Producer with `compression_type` against a real node: every codec's batches
(Kafka record batches v2, compressed) are stored as sent and read back by raftlog's Consumer,
offsets, keys, values, headers and timestamps intact, next to raftlog's own batches."""

from __future__ import annotations

import json

import pytest

from raftlog.client import Admin, Producer
from raftlog.client.fetched import ConsumerRecord
from raftlog.client.partitioner import murmur2_partitioner
from raftlog.client.producer_config import COMPRESSION_TYPES
from raftlog.client.reader import RangeReader
from raftlog.topics import TopicPartition
from tests.integration._support import BrokerProcess, consume_exactly, run_cli
from tests.kafka import clients

PARTITIONS = 2
T0 = 1_764_000_000_000


@pytest.mark.parametrize("compression_type", ["gzip", "snappy", "lz4", "zstd", "none"])
def test_each_codec_round_trips_through_a_node(
    module_broker: BrokerProcess, compression_type: str
) -> None:
    topic = f"compressed-{compression_type}"
    with Admin(module_broker.bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS)
    sent: dict[tuple[int, int], tuple[bytes | None, bytes | None, tuple, int]] = {}  # type: ignore[type-arg]
    with Producer(
        bootstrap_servers=module_broker.bootstrap,
        compression_type=compression_type,
        linger_ms=20,
        batch_size=16 * 1024,
    ) as producer:
        futures = []
        for i in range(3000):
            key = b"user-%d" % (i % 37) if i % 3 else None
            value = None if i % 101 == 0 else b"page view %d of /index.html" % i
            headers = [("seq", b"%d" % i), ("null", None)] if i % 5 == 0 else []
            ts = T0 + i
            fut = producer.send(topic, value, key=key, headers=headers, timestamp_ms=ts)
            futures.append((fut, (key, value, tuple(headers), ts)))
        many = [b"bulk %d" % i for i in range(5000)]
        bulk = producer.send_many(topic, many, partition=1)
        producer.flush()
        for fut, record in futures:
            meta = fut.result(30)
            sent[(meta.partition, meta.offset)] = record
        for meta, value in zip(bulk.result(30), many, strict=True):
            sent[(meta.partition, meta.offset)] = (None, value, (), meta.timestamp)
    ends = {p: 1 + max(o for q, o in sent if q == p) for p in range(PARTITIONS)}
    got = consume_exactly(module_broker.bootstrap, topic, ends)
    records: list[ConsumerRecord] = [r for p in got for r in got[p]]
    assert len(records) == len(sent) == 8000
    for r in records:
        assert (r.key, r.value, r.headers, r.timestamp) == sent[(r.partition, r.offset)], r
    # The log holds the batches as sent (Kafka's v2 with the codec, or raftlog's own), and the
    # Spark source's reader reads them too.
    codec = COMPRESSION_TYPES[compression_type]
    read = 0
    with RangeReader(module_broker.bootstrap) as reader:
        for p, end in ends.items():
            for chunk in reader.read_range(TopicPartition(topic, p), 0, end):
                for _pos, header in chunk.batches:
                    assert header.magic == (2 if codec else 1)
                    assert header.attributes & 0x07 == codec
                for rec in chunk.records():
                    assert (rec.key, rec.value, rec.headers, rec.timestamp) == sent[(p, rec.offset)]
                    read += 1
    assert read == len(sent)


def test_raftlog_produce_compresses_and_places_keys_by_murmur2(
    module_broker: BrokerProcess,
) -> None:
    """`raftlog produce --compression-type zstd --partitioner murmur2`: keys land where Kafka's
    Java client puts them, and `raftlog consume` prints every record back."""
    b = ("--bootstrap-server", module_broker.bootstrap)
    with Admin(module_broker.bootstrap) as admin:
        admin.create_topic("cli-zstd", 6)
    lines = [f"user-{i % 9}:click {i}" for i in range(60)]
    res = run_cli(
        "produce", "cli-zstd", "--key-separator", ":", "--compression-type", "zstd",
        "--partitioner", "murmur2", *b, input=("\n".join(lines) + "\n").encode(),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    res = run_cli(
        "consume", "cli-zstd", "--from-beginning", "--max-messages", "60", "--format", "json", *b
    )
    assert res.returncode == 0, res.stderr
    got = [json.loads(line) for line in res.stdout.splitlines()]
    assert sorted(r["value"] for r in got) == sorted(line.split(":")[1] for line in lines)
    for r in got:
        assert r["partition"] == murmur2_partitioner(r["key"].encode(), 6), r
    res = run_cli("produce", "cli-zstd", "--compression-type", "brotli", *b, input=b"x\n")
    assert res.returncode != 0 and "brotli" in res.stderr


# -- through the other door: Kafka's clients on the node's Kafka listener -----------------------


@pytest.mark.parametrize("compression_type", ["gzip", "snappy", "lz4", "zstd"])
def test_kafkas_clients_read_what_a_compressing_producer_wrote(
    module_broker: BrokerProcess, compression_type: str
) -> None:
    """raftlog's compressed batches are Kafka's v2 as stored: confluent-kafka (librdkafka) and
    kafka-python read them as they are, records, headers and timestamps intact."""
    topic = f"to-kafka-{compression_type}"
    with Admin(module_broker.bootstrap) as admin:
        admin.create_topic(topic, 1)
    records = clients.keyed_records(500, compression_type)
    with Producer(
        bootstrap_servers=module_broker.bootstrap, compression_type=compression_type
    ) as p:
        futures = [
            p.send(topic, v, key=k, headers=list(h), timestamp_ms=T0 + i)
            for i, (k, v, h) in enumerate(records)
        ]
        p.flush()
        assert [f.result(30).offset for f in futures] == list(range(len(records)))
    readers = [clients.confluent_consume]
    if compression_type != "snappy":  # kafka-python's snappy needs python-snappy
        readers.append(clients.kafka_python_consume)
    for consume in readers:
        got = consume(module_broker.kafka_bootstrap, topic, end_offset=len(records))
        assert clients.payloads(got) == records, consume.__name__
        assert [(r.offset, r.timestamp) for r in got] == [
            (i, T0 + i) for i in range(len(records))
        ], consume.__name__


@pytest.mark.parametrize("compression_type", ["gzip", "snappy", "lz4", "zstd"])
def test_raftlogs_consumer_reads_what_librdkafka_compressed(
    module_broker: BrokerProcess, compression_type: str
) -> None:
    topic = f"from-kafka-{compression_type}"
    with Admin(module_broker.bootstrap) as admin:
        admin.create_topic(topic, 1)
    records = clients.keyed_records(500, compression_type)
    end = clients.confluent_produce(
        module_broker.kafka_bootstrap, topic, records, compression=compression_type
    )
    assert end == len(records)
    got = consume_exactly(module_broker.bootstrap, topic, {0: end})[0]
    assert [(r.key, r.value, r.headers) for r in got] == records


def test_murmur2_places_keys_where_kafkas_clients_do(module_broker: BrokerProcess) -> None:
    """The same keys from raftlog's Producer (partitioner="murmur2"), kafka-python (its
    default) and confluent-kafka (partitioner=murmur2_random) land in the same partitions."""
    topic = "placement"
    partitions = 7
    with Admin(module_broker.bootstrap) as admin:
        admin.create_topic(topic, partitions)
    keys = [f"customer-{i}".encode() for i in range(60)]
    with Producer(bootstrap_servers=module_broker.bootstrap, partitioner="murmur2") as p:
        ours = [p.send(topic, b"raftlog", key=k).result(30).partition for k in keys]
    from kafka import KafkaProducer

    kp = KafkaProducer(bootstrap_servers=module_broker.kafka_bootstrap, linger_ms=5)
    try:
        theirs = [kp.send(topic, b"kafka-python", key=k).get(30).partition for k in keys]
    finally:
        kp.close(timeout=10)
    from confluent_kafka import Producer as ConfluentProducer

    placed: dict[bytes, int] = {}
    cp = ConfluentProducer(
        {"bootstrap.servers": module_broker.kafka_bootstrap, "partitioner": "murmur2_random"}
    )
    for k in keys:
        cp.produce(
            topic, b"librdkafka", k,
            on_delivery=lambda err, msg: placed.__setitem__(msg.key(), msg.partition()),
        )  # fmt: skip
    assert cp.flush(30) == 0
    assert ours == theirs == [placed[k] for k in keys]
    assert ours == [murmur2_partitioner(k, partitions) for k in keys]
    assert len(set(ours)) == partitions  # the keys spread: the comparison means something
