"""Kafka's AlterPartitionReassignments (45) and ListPartitionReassignments (46) from
kafka-python's KafkaAdminClient (Alter v1, List v0: what it negotiates) and raw v0 requests,
on a four-node cluster through its Kafka listeners (nodes 1-3 the metadata quorum, node 4
broker-only).

A partition (RF 3, min.insync.replicas 2) whose replicas leave out node 4 gets records, then
node 4 is killed, so a move onto it waits: kafka-python moves the partition's first replica
(its leader) onto node 4 and lists the move under way (replicas: the target then the leaving
one; adding [4], removing the first), as every node answers a raw v0 List; node 4 returns, the
move completes (the leaving leader hands over) and the list is empty; every record written
before the move is read back. A second move is cancelled midway: back to the original
replicas. Refusals: a cancel with no move under way is NO_REASSIGNMENT_IN_PROGRESS, an unknown
topic or partition UNKNOWN_TOPIC_OR_PARTITION, an unregistered broker
INVALID_REPLICA_ASSIGNMENT, and a v1 request that forbids a replication-factor change
INVALID_REPLICATION_FACTOR for a target of another length.

While node 4 is down the admin client is bootstrapped from the other nodes once node 4 is
fenced (so Metadata no longer names it): kafka-python sends its Metadata request to a broker it
knows without trying another when that one refuses the connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.messages.reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListPartitionReassignmentsTopics,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
    ReassignablePartition,
    ReassignableTopic,
)
from raftlog.kafka.wire import Reader
from tests.integration._cluster import Cluster, Describe, started_cluster
from tests.integration._support import wait_for
from tests.kafka._raw import KafkaRawClient

PARTITIONS = 4  # RF 3 on 4 brokers: some partition leaves out node 4
RECORDS = 200
WAIT_S = 60.0
SPARE = 4  # the broker-only node: killing it leaves the metadata quorum whole


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("kafka-reassignments")
    with started_cluster(root, 4, controllers=3, auto_leader_rebalance_enable=False) as c:
        yield c


@pytest.fixture
def admin(cluster: Cluster) -> Iterator[Any]:
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        yield client
    finally:
        client.close()


@contextlib.contextmanager
def spare_down(cluster: Cluster) -> Iterator[Any]:
    """SPARE killed and fenced, and a kafka-python admin client of the other nodes (module
    docstring); SPARE is started again on the way out if the test did not."""
    from kafka import KafkaAdminClient

    cluster.kill9(SPARE)
    try:
        cluster.wait_every_view(
            lambda d: any(b["node_id"] == SPARE and b["fenced"] for b in d["brokers"]),
            WAIT_S,
            f"node {SPARE} fenced in every live node's metadata",
        )
        others = [n for i, n in cluster.nodes.items() if i != SPARE]
        bootstrap = ",".join(str(n.config.kafka_listener) for n in others)
        client = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            yield client
        finally:
            client.close()
    finally:
        if not cluster.nodes[SPARE].running():
            cluster.nodes[SPARE].start()


def _partition(d: Describe, topic: str, index: int) -> dict[str, Any]:
    return next(p for p in d["partitions"] if p["topic"] == topic and p["partition"] == index)


def create_topic(cluster: Cluster, topic: str) -> tuple[int, list[int]]:
    """`topic` (PARTITIONS partitions, RF 3, min.insync.replicas 2) made with confluent-kafka,
    every partition in sync; a partition whose replicas leave out SPARE, and its replicas."""
    from confluent_kafka.admin import AdminClient, NewTopic

    new = NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    admin.create_topics([new])[topic].result(timeout=WAIT_S)
    d = cluster.wait_view(
        lambda d: (
            sum(1 for p in d["partitions"] if p["topic"] == topic and len(p["isr"]) == 3)
            == PARTITIONS
        ),
        WAIT_S,
        f"every partition of {topic} in sync",
    )
    choices = [p for p in d["partitions"] if p["topic"] == topic and SPARE not in p["replicas"]]
    assert choices, f"every partition of {topic} has a replica on node {SPARE}: {d}"
    return int(choices[0]["partition"]), list(choices[0]["replicas"])


def produce(cluster: Cluster, topic: str, partition: int) -> list[bytes]:
    """RECORDS records written to `topic`-`partition` with acks=all; their values."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
    values = [b"r%d" % i for i in range(RECORDS)]
    for value in values:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(WAIT_S) == 0, "records left unacknowledged"
    return values


def consume(cluster: Cluster, topic: str, partition: int, count: int) -> list[bytes]:
    """The first `count` values of `topic`-`partition`, read from the beginning."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": "moved",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    values: list[bytes] = []

    def read() -> bool:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
        return len(values) >= count

    try:
        wait_for(read, WAIT_S, f"{count} records of {topic}-{partition}", interval_s=0)
    finally:
        consumer.close()
    return values


def tp(topic: str, partition: int) -> Any:
    from kafka import TopicPartition

    return TopicPartition(topic, partition)


def flexible_answer(raw: KafkaRawClient, api_key: ApiKey, version: int, request: Any) -> Any:
    """`request` sent on `raw`, its answer decoded. KafkaRawClient strips a v0 response header
    (the correlation id); a flexible version's header v1 has tagged fields after it, left here
    for the Reader to skip."""
    response_type: Any = {
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: AlterPartitionReassignmentsResponse,
        ApiKey.LIST_PARTITION_REASSIGNMENTS: ListPartitionReassignmentsResponse,
    }[api_key]
    reader = Reader(raw.request(api_key, version, request))
    reader.tagged_fields()
    answer = response_type.decode(reader, version)
    reader.expect_end("the body")
    return answer


def raw_list(cluster: Cluster, request: ListPartitionReassignmentsRequest) -> list[Any]:
    """A v0 ListPartitionReassignments sent to every live node: each node's answer."""
    answers = []
    for node in cluster.live():
        with KafkaRawClient(str(node.config.kafka_listener), WAIT_S) as raw:
            answers.append(flexible_answer(raw, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, request))
    return answers


def test_a_replica_moves_onto_another_broker_and_every_record_stays(cluster: Cluster) -> None:
    topic = "kafka-moved"
    index, original = create_topic(cluster, topic)
    values = produce(cluster, topic, index)
    first = original[0]
    target = [SPARE, *original[1:]]  # the first replica (the leader) makes way for SPARE

    # SPARE is down: the move waits for it, so it is seen under way.
    with spare_down(cluster) as admin:
        assert admin.alter_partition_reassignments({tp(topic, index): target}) == {
            tp(topic, index): None
        }
        ongoing = {
            "replicas": [*target, first],
            "adding_replicas": [SPARE],
            "removing_replicas": [first],
        }
        assert admin.list_partition_reassignments() == {tp(topic, index): ongoing}
        named = {topic: [index, (index + 1) % PARTITIONS]}
        assert admin.list_partition_reassignments(named) == {tp(topic, index): ongoing}
        assert admin.list_partition_reassignments([tp("no-such-topic", 0)]) == {}
        # Every live node answers a v0 List alike (the read barrier: the move is in each).
        expected = ListPartitionReassignmentsResponse(
            (
                OngoingTopicReassignment(
                    topic,
                    (OngoingPartitionReassignment(index, (*target, first), (SPARE,), (first,)),),
                ),
            )
        )
        request = ListPartitionReassignmentsRequest(
            (ListPartitionReassignmentsTopics(topic, tuple(range(PARTITIONS))),), 10_000
        )
        assert raw_list(cluster, request) == [expected] * len(cluster.live())
        # The leader stays while the move is under way.
        assert _partition(cluster.describe(1), topic, index)["leader"] == first

        # SPARE returns, catches up, and the move completes: the leaving leader hands over.
        cluster.nodes[SPARE].start()
        cluster.wait_view(
            lambda d: (
                (p := _partition(d, topic, index))["replicas"] == target
                and not p["adding"]
                and not p["removing"]
                and sorted(p["isr"]) == sorted(target)
                and p["leader"] in target
            ),
            WAIT_S,
            f"{topic}-{index} moved to {target}",
        )
        wait_for(
            lambda: admin.list_partition_reassignments() == {},
            WAIT_S,
            "no move listed once it completed",
        )
        # Nothing to cancel now.
        from kafka.errors import NoReassignmentInProgressError

        assert admin.alter_partition_reassignments({tp(topic, index): None}) == {
            tp(topic, index): NoReassignmentInProgressError
        }
    # Every record acknowledged before the move, read from the new replicas.
    assert consume(cluster, topic, index, RECORDS) == values


def test_a_move_cancelled_midway_goes_back(cluster: Cluster) -> None:
    topic = "kafka-cancelled"
    index, original = create_topic(cluster, topic)
    target = [*original[:2], SPARE]
    with spare_down(cluster) as admin:
        assert admin.alter_partition_reassignments({tp(topic, index): target}) == {
            tp(topic, index): None
        }
        assert admin.list_partition_reassignments({topic: [index]}) == {
            tp(topic, index): {
                "replicas": [*target, original[2]],
                "adding_replicas": [SPARE],
                "removing_replicas": [original[2]],
            }
        }
        assert admin.alter_partition_reassignments({tp(topic, index): None}) == {
            tp(topic, index): None
        }
        assert admin.list_partition_reassignments() == {}
        d = cluster.wait_view(
            lambda d: (
                (p := _partition(d, topic, index))["replicas"] == original and not p["adding"]
            ),
            WAIT_S,
            f"{topic}-{index} back on {original}",
        )
        assert sorted(_partition(d, topic, index)["isr"]) == sorted(original)
    cluster.wait_brokers_settled(WAIT_S)
    # SPARE never became a replica: nothing moves once it is back.
    d = cluster.wait_views_agree(
        lambda d: _partition(d, topic, index)["replicas"] == original,
        WAIT_S,
        "every node agrees on the original replicas",
    )
    assert not _partition(d, topic, index)["adding"]


def test_refusals_are_kafkas_errors(cluster: Cluster, admin: Any) -> None:
    from kafka.errors import (
        InvalidReplicationAssignmentError,
        NoReassignmentInProgressError,
        UnknownTopicOrPartitionError,
    )

    topic = "kafka-refused"
    index, original = create_topic(cluster, topic)
    assert admin.alter_partition_reassignments(
        {
            tp(topic, index): None,
            tp(topic, 99): original,
            tp("no-such-topic", 0): [1, 2, 3],
            tp(topic, (index + 1) % PARTITIONS): [1, 2, 42],
        }
    ) == {
        tp(topic, index): NoReassignmentInProgressError,
        tp(topic, 99): UnknownTopicOrPartitionError,
        tp("no-such-topic", 0): UnknownTopicOrPartitionError,
        tp(topic, (index + 1) % PARTITIONS): InvalidReplicationAssignmentError,
    }

    # v0 on the wire (to every node) and v1 refusing a replication-factor change.
    unknown = AlterPartitionReassignmentsRequest(
        (ReassignableTopic("no-such-topic", (ReassignablePartition(0, (1, 2, 3)),)),), 10_000
    )
    shrink = AlterPartitionReassignmentsRequest(
        (ReassignableTopic(topic, (ReassignablePartition(index, tuple(original[:2])),)),),
        10_000,
        allow_replication_factor_change=False,
    )
    for node in cluster.live():
        with KafkaRawClient(str(node.config.kafka_listener), WAIT_S) as raw:
            answer = flexible_answer(raw, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, unknown)
            ((name, (result,)),) = answer.responses
            assert (name, result.error_code) == (
                "no-such-topic",
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            )
            assert result.error_message == "unknown partition no-such-topic-0"
            answer = flexible_answer(raw, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, shrink)
            ((name, (result,)),) = answer.responses
            assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR, result
            assert "changed from 3 to 2" in str(result.error_message)
            assert answer.allow_replication_factor_change is False
    # Nothing moved.
    d = cluster.describe(1)
    assert _partition(d, topic, index)["replicas"] == original
