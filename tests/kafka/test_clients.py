"""Kafka's own clients against a three-node raftlog cluster, through its Kafka listeners.

Every client (confluent-kafka/librdkafka 2.16, kcat/librdkafka 2.0.2, kafka-python 3.0,
aiokafka 0.14, Sarama 1.22 from Go) round-trips keyed records with headers through a
replication-factor-3 topic; kcat and confluent-kafka with every codec; each door reads what the
other wrote (raftlog's Producer with and without compression, librdkafka's batches read by
raftlog's Consumer); confluent-kafka's AdminClient creates and deletes topics. The clients are
driven by tests/kafka/clients.py, each as its own users drive it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin, Consumer, Producer, TopicPartition
from tests.integration._cluster import Cluster, started_cluster
from tests.kafka import clients
from tests.kafka.tools import need_go, need_kcat

TOPIC = "kafka-clients"
PARTITIONS = 6
_partitions = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("kafka-clients")
    with started_cluster(root) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=PARTITIONS * 4, replication_factor=3)
        yield c


def fresh_partition() -> int:
    """A partition no other test of the module writes (so each reads back only its own)."""
    return next(_partitions)


def check_roundtrip(
    read: list[clients.Record], sent: list[clients.Outgoing], partition: int
) -> None:
    assert clients.payloads(read) == sent
    assert [r.partition for r in read] == [partition] * len(sent)
    offsets = [r.offset for r in read]
    assert offsets == list(range(offsets[0], offsets[0] + len(sent))), "offsets not consecutive"
    assert all(r.timestamp > 0 for r in read)


@pytest.mark.parametrize("client", ["confluent", "kafka_python", "aiokafka"])
def test_each_python_client_round_trips_keyed_records_with_headers(
    cluster: Cluster, client: str
) -> None:
    partition = fresh_partition()
    sent = clients.keyed_records(200, client)
    roundtrip = getattr(clients, f"{client}_roundtrip")
    read = roundtrip(cluster.kafka_bootstrap, TOPIC, sent, partition=partition)
    check_roundtrip(read, sent, partition)


def test_kcat_round_trips_keyed_records_with_headers(cluster: Cluster) -> None:
    need_kcat()
    partition = fresh_partition()
    sent = clients.keyed_records(100, "kcat")
    clients.kcat_produce(cluster.kafka_bootstrap, TOPIC, sent, partition=partition)
    read = clients.kcat_consume(cluster.kafka_bootstrap, TOPIC, partition=partition)
    check_roundtrip(read, sent, partition)


def test_a_go_service_with_sarama_round_trips_keyed_records(cluster: Cluster) -> None:
    need_go()
    partition = fresh_partition()
    read = clients.sarama_roundtrip(cluster.kafka_bootstrap, TOPIC, 100, partition=partition)
    check_roundtrip(read, clients.keyed_records(100, "sarama"), partition)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_from_kcat_and_confluent_kafka(cluster: Cluster, codec: str) -> None:
    need_kcat()
    p1, p2 = fresh_partition(), fresh_partition()
    sent = clients.keyed_records(300, f"kcat-{codec}")
    clients.kcat_produce(cluster.kafka_bootstrap, TOPIC, sent, partition=p1, compression=codec)
    check_roundtrip(clients.kcat_consume(cluster.kafka_bootstrap, TOPIC, partition=p1), sent, p1)
    sent = clients.keyed_records(300, f"confluent-{codec}")
    read = clients.confluent_roundtrip(
        cluster.kafka_bootstrap, TOPIC, sent, partition=p2, compression=codec
    )
    check_roundtrip(read, sent, p2)
    # And raftlog's own Consumer reads the compressed batches the clients wrote.
    for partition, prefix in ((p1, f"kcat-{codec}"), (p2, f"confluent-{codec}")):
        read_native = native_read(cluster, partition, 300)
        assert [(k, v, h) for k, v, h, _ in read_native] == clients.keyed_records(300, prefix)


def native_read(
    cluster: Cluster, partition: int, n: int
) -> list[tuple[bytes | None, bytes | None, clients.Headers, int]]:
    """The first n records of a partition read with raftlog's Consumer (deadline: 60 s)."""
    out: list[tuple[bytes | None, bytes | None, clients.Headers, int]] = []
    with Consumer(bootstrap_servers=cluster.bootstrap) as consumer:
        tp = TopicPartition(TOPIC, partition)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + 60
        while len(out) < n:
            assert time.monotonic() < deadline, f"raftlog's Consumer read {len(out)} of {n}"
            for records in consumer.poll(timeout_ms=500).values():
                out.extend((r.key, r.value, tuple(r.headers), r.timestamp) for r in records)
    return out[:n]


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_kafka_clients_read_what_raftlogs_producer_wrote(
    cluster: Cluster, compression: str
) -> None:
    partition = fresh_partition()
    sent = clients.keyed_records(500, f"native-{compression}")
    with Producer(
        bootstrap_servers=cluster.bootstrap, acks="all", compression_type=compression
    ) as producer:
        futures = [
            producer.send(
                TOPIC, v, k, list(h), partition=partition, timestamp_ms=1_700_000_000_000 + i
            )
            for i, (k, v, h) in enumerate(sent)
        ]
        producer.flush(timeout=30)
        for f in futures:
            f.result(timeout=30)
    read = clients.confluent_consume(cluster.kafka_bootstrap, TOPIC, partition=partition)
    check_roundtrip(read, sent, partition)
    assert [r.timestamp for r in read] == [1_700_000_000_000 + i for i in range(len(sent))]
    also = clients.kafka_python_consume(
        cluster.kafka_bootstrap, TOPIC, partition=partition, end_offset=read[-1].offset + 1
    )
    assert clients.payloads(also) == sent


def test_raftlogs_consumer_reads_what_librdkafka_wrote(cluster: Cluster) -> None:
    partition = fresh_partition()
    sent = clients.keyed_records(500, "librdkafka")
    read = clients.confluent_roundtrip(cluster.kafka_bootstrap, TOPIC, sent, partition=partition)
    native = native_read(cluster, partition, len(sent))
    assert [(k, v, h) for k, v, h, _ in native] == sent
    assert [t for *_, t in native] == [r.timestamp for r in read]


def test_confluent_admin_client_creates_and_deletes_topics(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    futures = admin.create_topics([NewTopic("admin-made", num_partitions=3, replication_factor=3)])
    futures["admin-made"].result(timeout=30)
    view = cluster.wait_every_view(
        lambda d: len([p for p in d["partitions"] if p["topic"] == "admin-made"]) == 3,
        30.0,
        "admin-made in every node's metadata",
    )[0]
    made = [p for p in view["partitions"] if p["topic"] == "admin-made"]
    assert all(len(p["replicas"]) == 3 for p in made)
    again = admin.create_topics([NewTopic("admin-made", num_partitions=3, replication_factor=3)])
    with pytest.raises(Exception, match=r"TOPIC_ALREADY_EXISTS|already exists"):
        again["admin-made"].result(timeout=30)
    # compression.type takes Kafka's values; raftlog implements `producer` and says so.
    refused = admin.create_topics(
        [NewTopic("zstd-topic", 1, 1, config={"compression.type": "zstd"})]
    )
    with pytest.raises(Exception, match=r"compression.type='zstd': not supported; only 'producer'"):
        refused["zstd-topic"].result(timeout=30)
    kept = admin.create_topics(
        [NewTopic("producer-topic", 1, 1, config={"compression.type": "producer"})]
    )
    kept["producer-topic"].result(timeout=30)
    admin.delete_topics(["admin-made"])["admin-made"].result(timeout=30)
    metadata = admin.list_topics(timeout=30)
    assert "admin-made" not in metadata.topics
