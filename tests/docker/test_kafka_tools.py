"""Kafka's own tools on the host against the Docker cluster, through its external Kafka listeners.

Each node's external Kafka listener (0.0.0.0:9097 in its container) is published on a free
host port and advertised as 127.0.0.1:<that port> (docker/compose.yaml), so a client on the
host bootstraps from DockerCluster.kafka_bootstrap and reaches every partition leader through
the addresses Metadata names, never through the containers' own network. kcat writes keyed
records, placed by librdkafka's murmur2 partitioner, with acks=all to a topic with replication
factor 3 and min.insync.replicas=2; kcat and confluent-kafka read every partition back.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import AdminClient

from raftlog.client.partitioner import murmur2_partitioner
from tests.docker._docker import DockerCluster
from tests.integration._support import wait_for
from tests.kafka import clients
from tests.kafka.tools import need_kcat

TOPIC = "kcat-docker"
PARTITIONS = 3
RECORDS = 300
# What librdkafka reads as "no partition given": its partitioner picks one from the key.
ANY_PARTITION = -1
METADATA_TIMEOUT_S = 30.0
HEADERS = (("source", b"kcat-docker"),)


def test_kcat_writes_and_reads_keyed_records_through_the_external_kafka_listeners(
    docker_cluster: DockerCluster,
) -> None:
    need_kcat()
    c = docker_cluster
    c.create_topic(TOPIC, PARTITIONS)  # replication factor 3, every replica in the ISR

    # Every broker advertises its published host port, not its container's address.
    admin = AdminClient({"bootstrap.servers": c.kafka_bootstrap})

    def with_topic() -> Any:
        # The node asked may not have applied the topic's creation yet: ask again.
        md = admin.list_topics(timeout=METADATA_TIMEOUT_S)
        return md if TOPIC in md.topics and len(md.topics[TOPIC].partitions) == 3 else None

    metadata = wait_for(with_topic, METADATA_TIMEOUT_S, f"{TOPIC} in the Kafka metadata")
    assert sorted(f"{b.host}:{b.port}" for b in metadata.brokers.values()) == sorted(
        c.kafka_bootstrap.split(",")
    )
    assert sorted(len(p.replicas) for p in metadata.topics[TOPIC].partitions.values()) == [3] * 3

    # One header set for all (kcat runs once per run of equal headers).
    sent = [(k, v, HEADERS) for k, v, _ in clients.keyed_records(RECORDS, "kcat-docker")]
    clients.kcat_produce(
        c.kafka_bootstrap,
        TOPIC,
        sent,
        partition=ANY_PARTITION,
        acks="all",
        config={"partitioner": "murmur2_random"},
    )

    read_back: list[clients.Outgoing] = []
    for p in range(PARTITIONS):
        by_kcat = clients.kcat_consume(c.kafka_bootstrap, TOPIC, partition=p)
        by_confluent = clients.confluent_consume(c.kafka_bootstrap, TOPIC, partition=p)
        assert [r.offset for r in by_kcat] == list(range(len(by_kcat)))
        assert all(r.key is not None for r in by_kcat)
        # Where a key lands is murmur2 of the key, as raftlog's Producer(partitioner="murmur2")
        # and Kafka's Java client place it.
        assert all(murmur2_partitioner(r.key or b"", PARTITIONS) == p for r in by_kcat)
        assert clients.payloads(by_confluent) == clients.payloads(by_kcat)
        assert [r.offset for r in by_confluent] == [r.offset for r in by_kcat]
        read_back.extend(clients.payloads(by_kcat))
    # Every record once; within a partition in the order kcat sent them.
    assert sorted(read_back) == sorted(sent)
    order = {record[0]: i for i, record in enumerate(sent)}
    for p in range(PARTITIONS):
        keys = [r[0] for r in read_back if murmur2_partitioner(r[0] or b"", PARTITIONS) == p]
        assert [order[k] for k in keys] == sorted(order[k] for k in keys)

    # Every replica of every partition still in the ISR after the writes.
    c.wait_full_isr(TOPIC, 30.0)
