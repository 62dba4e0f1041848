"""Kafka's ElectLeaders (API key 43) from Kafka's own admin clients, on a three-node cluster
through its Kafka listeners, the controller's automatic rebalance off.

A 6-partition RF-3 topic: each node is the preferred leader (first replica) of two partitions.
Node 2 is killed with SIGKILL, its partitions move to the others, it restarts and rejoins every
ISR. confluent-kafka's AdminClient.elect_leaders (ElectionType.PREFERRED) gives it one
partition back by name, then the rest with partitions=None (every partition whose preferred
leader does not lead); a second election of the same partition answers ELECTION_NOT_NEEDED,
through confluent-kafka, kafka-python and a raw v0 request. Refusals: an unknown partition or
topic is UNKNOWN_TOPIC_OR_PARTITION, an unclean election INVALID_REQUEST with raftlog's reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.messages.elect_leaders import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    TopicPartitions,
)
from tests.integration._cluster import Cluster, Describe, started_cluster
from tests.integration._support import wait_for
from tests.kafka._raw import KafkaRawClient

TOPIC = "kafka-elected"
PARTITIONS = 6
RECORDS = 300
WAIT_S = 60.0
VICTIM = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("kafka-elect-leaders")
    with started_cluster(root, 3, auto_leader_rebalance_enable=False) as c:
        yield c


@pytest.fixture
def admin(cluster: Cluster) -> Any:
    """confluent-kafka's AdminClient (kept referenced while its futures are waited on: a
    destroyed client fails them)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})


def _partitions(d: Describe, topic: str = TOPIC) -> list[dict[str, Any]]:
    return [p for p in d["partitions"] if p["topic"] == topic]


def _preferred_of(d: Describe, node_id: int) -> set[int]:
    return {int(p["partition"]) for p in _partitions(d) if p["replicas"][0] == node_id}


def _led_by(d: Describe, node_id: int) -> set[int]:
    return {int(p["partition"]) for p in _partitions(d) if p["leader"] == node_id}


def _all_preferred(d: Describe, topic: str = TOPIC) -> bool:
    parts = _partitions(d, topic)
    return bool(parts) and all(p["leader"] == p["replicas"][0] for p in parts)


def create_topic(cluster: Cluster, admin: Any, topic: str) -> Describe:
    """`topic` (PARTITIONS partitions, RF 3) made with confluent-kafka, once every partition is
    led by its preferred leader."""
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(timeout=WAIT_S)
    return cluster.wait_view(
        lambda d: len(_partitions(d, topic)) == PARTITIONS and _all_preferred(d, topic),
        WAIT_S,
        f"every partition of {topic} led by its preferred leader",
    )


def elect(admin: Any, partitions: list[tuple[str, int]] | None, unclean: bool = False) -> Any:
    """confluent-kafka's elect_leaders: {(topic, partition): KafkaError or None}; raises
    KafkaException for a whole request refused."""
    from confluent_kafka import ElectionType, KafkaException, TopicPartition

    kind = ElectionType.UNCLEAN if unclean else ElectionType.PREFERRED
    wanted = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
    # No request_timeout / operation_timeout: confluent-kafka 2.16.1's elect_leaders fails
    # with any keyword argument (SystemError from its C argument parsing); the default,
    # socket.timeout.ms (60 s), bounds the request and result(timeout=) the wait.
    future = admin.elect_leaders(kind, wanted)
    result = future.result(timeout=WAIT_S)
    # Each partition's outcome is a KafkaError (2.16.1; its docstring says KafkaException).
    return {
        (tp.topic, tp.partition): e.args[0] if isinstance(e, KafkaException) else e
        for tp, e in result.items()
    }


def _fail_and_return(cluster: Cluster, admin: Any) -> set[int]:
    """Records written, node VICTIM killed and back in every ISR; its preferred partitions."""
    from confluent_kafka import Producer

    preferred = _preferred_of(create_topic(cluster, admin, TOPIC), VICTIM)
    assert len(preferred) == PARTITIONS // 3, preferred
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(TOPIC, b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(WAIT_S) == 0, "records left unacknowledged"
    cluster.kill9(VICTIM)
    cluster.wait_view(
        lambda d: not _led_by(d, VICTIM) and all(int(p["leader"]) > 0 for p in _partitions(d)),
        WAIT_S,
        f"node {VICTIM}'s partitions led by the others",
    )
    cluster.nodes[VICTIM].start()
    cluster.wait_view(
        lambda d: all(VICTIM in p["isr"] for p in _partitions(d)),
        WAIT_S,
        f"node {VICTIM} back in every ISR",
    )
    return preferred


def test_admin_clients_give_a_returned_broker_its_preferred_leaderships_back(
    cluster: Cluster, admin: Any
) -> None:
    from confluent_kafka import KafkaError
    from kafka import KafkaAdminClient

    preferred = _fail_and_return(cluster, admin)
    assert not _led_by(cluster.describe(1), VICTIM), "the automatic rebalance is off"

    # One partition by name.
    one = min(preferred)
    assert elect(admin, [(TOPIC, one)]) == {(TOPIC, one): None}
    cluster.wait_view(
        lambda d: _led_by(d, VICTIM) == {one}, WAIT_S, f"node {VICTIM} leading {TOPIC}-{one}"
    )

    # Every partition whose preferred leader does not lead: the rest of node VICTIM's, and
    # the answer names just those.
    rest = preferred - {one}
    everywhere = elect(admin, None)
    assert {tp: e for tp, e in everywhere.items() if tp[0] == TOPIC} == {
        (TOPIC, p): None for p in rest
    }
    assert all(e is None for e in everywhere.values()), everywhere
    d = cluster.wait_view(
        lambda d: _led_by(d, VICTIM) == preferred,
        WAIT_S,
        f"node {VICTIM} leading {sorted(preferred)}",
    )
    assert _all_preferred(d), d
    # Nothing left to elect: an empty answer.
    assert elect(admin, None) == {}

    # A second election of a partition its preferred leader leads: ELECTION_NOT_NEEDED.
    again = elect(admin, [(TOPIC, one)])
    error = again[(TOPIC, one)]
    assert error.code() == KafkaError.ELECTION_NOT_NEEDED, error
    assert f"{TOPIC}-{one}: its preferred leader {VICTIM} leads already" in error.str()

    # kafka-python (to the controller it finds in Metadata) hears the same, and ignores it as
    # Kafka's tools do.
    kp_admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        response = kp_admin.elect_leaders(0, {TOPIC: [one]})
    finally:
        kp_admin.close()
    assert response.error_code == 0
    ((topic, ((partition, code, _message),)),) = [
        (r.topic, [(p.partition_id, p.error_code, p.error_message) for p in r.partition_result])
        for r in response.replica_election_results
    ]
    assert (topic, partition, code) == (TOPIC, one, ErrorCode.ELECTION_NOT_NEEDED)

    # v0 on the wire, to each node: the same answer wherever it is asked.
    request = ElectLeadersRequest((TopicPartitions(TOPIC, (one,)),), timeout_ms=10_000)
    for node in cluster.nodes.values():
        with KafkaRawClient(str(node.config.kafka_listener), WAIT_S) as raw:
            body = raw.request(ApiKey.ELECT_LEADERS, 0, request)
        answer = ElectLeadersResponse.decode(body, 0)
        ((topic, (result,)),) = answer.replica_election_results
        assert (topic, result.partition_id) == (TOPIC, one)
        assert result.error_code == ErrorCode.ELECTION_NOT_NEEDED, result

    # Nothing moved by any of these, and every record acknowledged before the moves is there.
    d = cluster.wait_view(lambda d: _all_preferred(d), WAIT_S, "every partition preferred-led")
    assert _led_by(d, VICTIM) == preferred
    _wait_end_offsets(cluster, [RECORDS // PARTITIONS] * PARTITIONS)


def _wait_end_offsets(cluster: Cluster, wanted: list[int]) -> None:
    """Poll until each partition's end offset (ListOffsets latest: the high watermark) is
    `wanted`, and check that it never answers less. A leader elected just after it rejoined
    the ISR holds its own high watermark from before it caught up (the previous leader's is
    not yet in a fetch answer) for a moment after the election; it answers
    OFFSET_NOT_AVAILABLE until its followers move it (KIP-207), not that older value (50 -> 0
    for 0.1-0.3 s before the fix)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "ends"})
    ends: list[int] = []

    def reached() -> bool:
        got = []
        for p in range(PARTITIONS):
            try:
                got.append(
                    consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=WAIT_S)[1]
                )
            except KafkaException as e:
                if e.args[0].code() != KafkaError.OFFSET_NOT_AVAILABLE:
                    raise
                return False  # the new leader does not know its high watermark yet
        back = [(p, g, w) for p, (g, w) in enumerate(zip(got, wanted, strict=True)) if g < w]
        assert not back, f"end offsets went back after the election (partition, got, was): {back}"
        ends[:] = got
        return ends == wanted

    try:
        wait_for(reached, WAIT_S, f"end offsets {wanted}")
    except AssertionError as e:
        raise AssertionError(f"{e}; last {ends}") from None
    finally:
        consumer.close()


def test_unknown_partitions_and_unclean_elections_are_refused(cluster: Cluster, admin: Any) -> None:
    from confluent_kafka import KafkaError

    topic = "kafka-elect-refused"
    create_topic(cluster, admin, topic)

    answer = elect(admin, [(topic, 99), ("no-such-topic", 0), (topic, 0)])
    assert set(answer) == {(topic, 99), ("no-such-topic", 0), (topic, 0)}
    for tp in ((topic, 99), ("no-such-topic", 0)):
        assert answer[tp].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, answer[tp]
        assert f"unknown partition {tp[0]}-{tp[1]}" in answer[tp].str()
    assert answer[(topic, 0)].code() == KafkaError.ELECTION_NOT_NEEDED

    answer = elect(admin, [(topic, 1)], unclean=True)
    error = answer[(topic, 1)]
    assert error.code() == KafkaError.INVALID_REQUEST, error
    assert "unclean.leader.election.enable" in error.str()

    # Unclean for every partition: the whole request is refused (v1's top-level code).
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as refused:
        elect(admin, None, unclean=True)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
