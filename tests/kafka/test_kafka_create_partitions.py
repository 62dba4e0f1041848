"""Kafka's CreatePartitions (API key 37) from Kafka's own admin clients, on a three-node cluster
through its Kafka listeners (RF 3).

confluent-kafka's AdminClient, kafka-python's KafkaAdminClient and aiokafka's admin each grow a
topic (aiokafka with an explicit replica assignment); shrinking, an unknown topic and a bad
assignment are refused with Kafka's error codes and raftlog's messages; validate_only grows
nothing. A confluent-kafka producer and a consumer group member started before the topic grew
use the new partitions without a restart, learning of them by their metadata refresh
(`topic.metadata.refresh.interval.ms`), as with Kafka.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration._cluster import Cluster, Describe, started_cluster
from tests.integration._support import wait_for
from tests.kafka import clients

WAIT_S = 60.0
REFRESH_MS = 1000  # the clients' metadata refresh: how soon they see a topic grow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("kafka-create-partitions")
    with started_cluster(root, 3) as c:
        yield c


@pytest.fixture
def admin(cluster: Cluster) -> Any:
    """confluent-kafka's AdminClient (kept referenced while its futures are waited on: a
    destroyed client fails them)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})


def create_topic(cluster: Cluster, admin: Any, topic: str, partitions: int) -> None:
    """`topic` with `partitions` partitions and RF 3, made with confluent-kafka's AdminClient,
    once every node's metadata holds it."""
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(timeout=WAIT_S)
    wait_partitions(cluster, topic, partitions)


def partitions_of(view: Describe, topic: str) -> list[dict[str, Any]]:
    return [p for p in view["partitions"] if p["topic"] == topic]


def wait_partitions(cluster: Cluster, topic: str, count: int) -> list[Describe]:
    """Every node's view once it holds `count` partitions of `topic`."""
    return cluster.wait_every_view(
        lambda d: len(partitions_of(d, topic)) == count,
        WAIT_S,
        f"{count} partitions of {topic} in every node's metadata",
    )


def confluent_grow(
    admin: Any,
    topic: str,
    count: int,
    assignment: list[list[int]] | None = None,
    validate_only: bool = False,
) -> None:
    """confluent-kafka's AdminClient.create_partitions; raises its KafkaException."""
    from confluent_kafka.admin import NewPartitions

    # replica_assignment=None is not "none given" to confluent-kafka: leave it out then.
    placed = {} if assignment is None else {"replica_assignment": assignment}
    futures = admin.create_partitions(
        [NewPartitions(topic, count, **placed)],
        request_timeout=WAIT_S,
        validate_only=validate_only,
    )
    futures[topic].result(timeout=WAIT_S)


def confluent_refusal(admin: Any, topic: str, count: int, **options: Any) -> Any:
    """The KafkaError confluent-kafka's create_partitions fails with."""
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as refused:
        confluent_grow(admin, topic, count, **options)
    return refused.value.args[0]


def test_each_admin_client_grows_a_topic_and_kafkas_refusals_come_back(
    cluster: Cluster, admin: Any
) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewPartitions as AioNewPartitions
    from aiokafka.errors import InvalidReplicationAssignmentError as AioBadAssignment
    from confluent_kafka import KafkaError
    from kafka import KafkaAdminClient
    from kafka.errors import InvalidPartitionsError, UnknownTopicOrPartitionError

    topic = "grown-by-admins"
    create_topic(cluster, admin, topic, 2)

    confluent_grow(admin, topic, 5)
    wait_partitions(cluster, topic, 5)

    kp_admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        kp_admin.create_partitions({topic: 6})
        wait_partitions(cluster, topic, 6)
        with pytest.raises(InvalidPartitionsError, match="has 6 partitions: it can grow to more"):
            kp_admin.create_partitions({topic: 4})
        with pytest.raises(UnknownTopicOrPartitionError, match="unknown topic 'nowhere'"):
            kp_admin.create_partitions({"nowhere": 3})
        # validate_only checks as the real request would...
        with pytest.raises(InvalidPartitionsError, match="has 6 partitions"):
            kp_admin.create_partitions({topic: 6}, validate_only=True)
    finally:
        kp_admin.close()

    # ...and grows nothing when the request is valid.
    confluent_grow(admin, topic, 9, validate_only=True)
    wait_partitions(cluster, topic, 6)  # still 6 in every node's metadata
    listed = admin.list_topics(topic, timeout=WAIT_S).topics[topic]
    assert len(listed.partitions) == 6

    # Shrinking, an unknown topic: Kafka's codes with raftlog's messages.
    refused = confluent_refusal(admin, topic, 3)
    assert refused.code() == KafkaError.INVALID_PARTITIONS
    assert "topic 'grown-by-admins' has 6 partitions: it can grow to more, not to 3" in (
        refused.str()
    )
    refused = confluent_refusal(admin, "nowhere", 3)
    assert refused.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "unknown topic 'nowhere'" in refused.str()
    # An assignment of two replicas where the topic has three.
    refused = confluent_refusal(admin, topic, 7, assignment=[[1, 2]])
    assert refused.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert "2 replicas given; the topic's replication factor is 3" in refused.str()

    async def aiokafka_grow() -> None:
        aio = AIOKafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
        await aio.start()
        try:
            with pytest.raises(AioBadAssignment, match="a broker is named twice"):
                await aio.create_partitions({topic: AioNewPartitions(7, [[1, 1, 2]])})
            await aio.create_partitions({topic: AioNewPartitions(7, [[3, 1, 2]])})
        finally:
            await aio.close()

    asyncio.run(aiokafka_grow())
    for view in wait_partitions(cluster, topic, 7):
        placed = {p["partition"]: p["replicas"] for p in partitions_of(view, topic)}
        assert placed[6] == [3, 1, 2]
        assert all(len(set(r)) == 3 for r in placed.values())


class Deliveries:
    """A confluent-kafka producer's acknowledged records: (partition, offset, value)."""

    def __init__(self) -> None:
        self.acked: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))

    def partitions(self) -> set[int]:
        return {p for p, _, _ in self.acked}


def test_a_running_producer_and_group_member_use_new_partitions(
    cluster: Cluster, admin: Any
) -> None:
    from confluent_kafka import Consumer, Producer

    topic, group = "grown-under-clients", "grown-group"
    create_topic(cluster, admin, topic, 2)
    producer = Producer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "topic.metadata.refresh.interval.ms": REFRESH_MS,
        }
    )
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": REFRESH_MS,
        }
    )
    deliveries = Deliveries()
    # What the member read: partition -> offset -> value (a rebalance may hand a partition
    # over again, and nothing is committed: its records are then read twice).
    consumed: dict[int, dict[int, bytes]] = {}
    sent = 0

    def produce(n: int) -> None:
        """n keyless records (librdkafka spreads them over every partition it knows)."""
        nonlocal sent
        for _ in range(n):
            producer.produce(topic, f"v-{sent:05d}".encode(), on_delivery=deliveries)
            sent += 1
        assert producer.flush(WAIT_S) == 0, "records left unacknowledged"
        assert not deliveries.errors, deliveries.errors

    def poll_group(until: Any, what: str) -> None:
        """Serve the member (rebalances happen in poll) until `until()` holds."""
        deadline = time.monotonic() + WAIT_S
        while not until():
            assert time.monotonic() < deadline, f"{what}: assignment {consumer.assignment()}"
            msg = consumer.poll(clients.POLL_S)
            if msg is not None and msg.error() is None:
                consumed.setdefault(msg.partition(), {})[msg.offset()] = msg.value()

    def assigned() -> set[int]:
        return {tp.partition for tp in consumer.assignment()}

    try:
        consumer.subscribe([topic])
        poll_group(lambda: assigned() == {0, 1}, "the member owns partitions 0 and 1")
        produce(50)
        assert deliveries.partitions() <= {0, 1}

        confluent_grow(admin, topic, 5)
        wait_partitions(cluster, topic, 5)

        # The producer's periodic metadata refresh finds partitions 2-4; keyless records then
        # land there too.
        def every_partition_written() -> bool:
            produce(20)
            return deliveries.partitions() >= {2, 3, 4}

        wait_for(every_partition_written, WAIT_S, "the running producer writing partitions 2-4")

        # The member's refresh sees the topic grow: it rejoins and owns every partition.
        poll_group(lambda: assigned() == {0, 1, 2, 3, 4}, "the member owns partitions 0-4")
        wanted = {p: {o: v for q, o, v in deliveries.acked if q == p} for p in range(5)}
        poll_group(
            lambda: all(consumed.get(p) == wanted[p] for p in range(5)),
            "the member reading every partition",
        )
    finally:
        consumer.close()
        producer.flush(WAIT_S)

    # What landed in the new partitions reads back, in order, with a consumer of its own.
    for partition in range(2, 5):
        mine = sorted((o, v) for p, o, v in deliveries.acked if p == partition)
        read = clients.confluent_consume(
            cluster.kafka_bootstrap, topic, partition=partition, end_offset=mine[-1][0] + 1
        )
        assert [(r.offset, r.value) for r in read] == mine
