"""Kafka's IncrementalAlterConfigs (API key 44) and AlterConfigs (33) from Kafka's own admin
clients, on a three-node cluster through its Kafka listeners (RF 3).

- confluent-kafka's incremental_alter_configs SETs retention.ms and DELETEs it again; each time
  raftlog's own Admin shows the topic's overrides changed, and DescribeConfigs through
  confluent-kafka shows the value, read_only false and the source (DYNAMIC_TOPIC_CONFIG, then
  DEFAULT_CONFIG), min.insync.replicas read-only.
- The change is real: max.message.bytes lowered through Kafka's API makes the leader refuse a
  50 kB record from a confluent-kafka producer (MSG_SIZE_TOO_LARGE, the broker's
  MESSAGE_TOO_LARGE); confluent-kafka's legacy alter_configs then replaces the whole set, which
  puts it back to the default, and the record fits again.
- kafka-python's alter_configs, incremental (its default when the broker offers it) and legacy
  (its read-modify-write, which sends back min.insync.replicas, fixed at creation, with its
  value); aiokafka's (legacy) alter_configs.
- Refusals, each with Kafka's code and raftlog's message, changing nothing: an unknown key, a
  bad value, min.insync.replicas (fixed at creation), an unknown topic, a BROKER resource;
  validate_only changes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog.client import Admin
from tests.integration._cluster import Cluster, Describe, started_cluster
from tests.integration._support import wait_for

WAIT_S = 60.0
BIG = b"b" * 50_000  # a record over max.message.bytes=10000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("kafka-alter-configs")
    with started_cluster(root, 3) as c:
        yield c


@pytest.fixture
def admin(cluster: Cluster) -> Any:
    """confluent-kafka's AdminClient (kept referenced while its futures are waited on: a
    destroyed client fails them)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})


def _partitions(d: Describe, topic: str) -> list[dict[str, Any]]:
    return [p for p in d["partitions"] if p["topic"] == topic]


def create_topic(cluster: Cluster, admin: Any, topic: str, config: dict[str, str]) -> None:
    """`topic` (1 partition, RF 3, `config`) made with confluent-kafka, once every node's
    metadata holds it with a leader."""
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, 1, 3, config=config)])[topic].result(timeout=WAIT_S)
    cluster.wait_every_view(
        lambda d: [p["leader"] >= 1 for p in _partitions(d, topic)] == [True],
        WAIT_S,
        f"{topic} with a leader in every node's metadata",
    )


def overrides(cluster: Cluster, topic: str) -> dict[str, str]:
    """The topic's own configs, as raftlog's Admin describes them."""
    with Admin(cluster.bootstrap) as a:
        return dict(a.describe_topics([topic])[0].overrides)


def wait_overrides(cluster: Cluster, topic: str, wanted: dict[str, str]) -> None:
    """Until raftlog's Admin shows `wanted` as the topic's overrides, on every node."""
    for node in cluster.nodes.values():

        def shown(bootstrap: str = node.bootstrap) -> bool:
            with Admin(bootstrap) as a:
                return dict(a.describe_topics([topic])[0].overrides) == wanted

        wait_for(shown, WAIT_S, f"{topic}'s overrides {wanted} on node {node.node_id}")


def entry(admin: Any, topic: str, key: str) -> Any:
    """`key`'s ConfigEntry from DescribeConfigs through confluent-kafka."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, topic)
    described = admin.describe_configs([resource], request_timeout=WAIT_S)[resource]
    return described.result(timeout=WAIT_S)[key]


def incremental(
    admin: Any, topic: str, *changes: tuple[str, str | None, Any], **options: Any
) -> None:
    """confluent-kafka's incremental_alter_configs of (key, value, AlterConfigOpType)s; raises
    its KafkaException."""
    from confluent_kafka.admin import ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k, v, incremental_operation=op) for k, v, op in changes]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    futures = admin.incremental_alter_configs([resource], request_timeout=WAIT_S, **options)
    futures[resource].result(timeout=WAIT_S)


def refusal(call: Any, *args: Any, **options: Any) -> Any:
    """The KafkaError `call` fails with."""
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as refused:
        call(*args, **options)
    return refused.value.args[0]


def test_incremental_set_and_delete_show_everywhere(cluster: Cluster, admin: Any) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigSource

    topic = "altered-incrementally"
    create_topic(cluster, admin, topic, {"min.insync.replicas": "2"})

    incremental(admin, topic, ("retention.ms", "123456", AlterConfigOpType.SET))
    wait_overrides(cluster, topic, {"min.insync.replicas": "2", "retention.ms": "123456"})
    shown = entry(admin, topic, "retention.ms")
    assert shown.value == "123456" and not shown.is_read_only and not shown.is_default
    assert shown.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    fixed = entry(admin, topic, "min.insync.replicas")
    assert fixed.value == "2" and fixed.is_read_only
    assert fixed.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    incremental(admin, topic, ("retention.ms", None, AlterConfigOpType.DELETE))
    wait_overrides(cluster, topic, {"min.insync.replicas": "2"})
    shown = entry(admin, topic, "retention.ms")
    assert shown.value == str(7 * 24 * 3600 * 1000) and not shown.is_read_only
    assert shown.source == ConfigSource.DEFAULT_CONFIG.value


def _deliver(producer: Any, topic: str) -> Any:
    """A 50 kB record to `topic` through `producer`: its delivery error (None: delivered)."""
    outcome: list[Any] = []
    producer.produce(topic, BIG, partition=0, on_delivery=lambda e, m: outcome.append(e))
    assert producer.flush(WAIT_S) == 0, "a record left unacknowledged"
    return outcome[0]


def test_max_message_bytes_lowered_through_kafkas_api_refuses_a_big_record(
    cluster: Cluster, admin: Any
) -> None:
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AlterConfigOpType, ConfigResource, ResourceType

    topic = "max-message-bytes"
    create_topic(cluster, admin, topic, {"retention.ms": "600000"})
    producer = Producer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "message.timeout.ms": 20_000,
        }
    )
    assert _deliver(producer, topic) is None

    incremental(admin, topic, ("max.message.bytes", "10000", AlterConfigOpType.SET))
    wait_overrides(cluster, topic, {"retention.ms": "600000", "max.message.bytes": "10000"})

    def refused() -> bool:
        error = _deliver(producer, topic)
        return error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE

    wait_for(refused, WAIT_S, "the leader refusing a 50 kB record at max.message.bytes=10000")

    # The legacy AlterConfigs replaces the whole set: max.message.bytes, not named, goes back
    # to its default, retention.ms takes the value named.
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "700000"})
    with pytest.warns(DeprecationWarning):
        futures = admin.alter_configs([resource], request_timeout=WAIT_S)
    futures[resource].result(timeout=WAIT_S)
    wait_overrides(cluster, topic, {"retention.ms": "700000"})
    wait_for(lambda: _deliver(producer, topic) is None, WAIT_S, "a 50 kB record accepted again")


def test_kafka_python_and_aiokafka_alter_configs(cluster: Cluster, admin: Any) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource as AioResource
    from aiokafka.admin.config_resource import ConfigResourceType as AioType
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpResource

    topic = "altered-by-python-clients"
    create_topic(cluster, admin, topic, {"min.insync.replicas": "2", "segment.ms": "3600000"})
    kp = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        # Incremental (kafka-python's choice when the broker offers IncrementalAlterConfigs).
        answer = kp.alter_configs([KpResource("TOPIC", topic, {"retention.ms": "99999"})])
        assert answer == {"topic": {topic: "OK"}}
        wanted = {"min.insync.replicas": "2", "segment.ms": "3600000", "retention.ms": "99999"}
        wait_overrides(cluster, topic, wanted)
        # Legacy: kafka-python reads the modified keys and sends them back with the new one,
        # min.insync.replicas included with its value, which changes nothing.
        answer = kp.alter_configs(
            [KpResource("TOPIC", topic, {"retention.ms": "88888"})], incremental=False
        )
        assert answer == {"topic": {topic: "OK"}}
        wait_overrides(cluster, topic, {**wanted, "retention.ms": "88888"})
        # DescribeConfigs' read_only: min.insync.replicas is not among the dynamic ones.
        with pytest.raises(ValueError, match="Unrecognized configs"):
            kp.alter_configs([KpResource("TOPIC", topic, {"min.insync.replicas": "3"})])
        answer = kp.alter_configs(
            [KpResource("TOPIC", topic, {"min.insync.replicas": "3"})], raise_on_unknown=False
        )
        assert "cannot be changed on a live topic" in answer["topic"][topic]
    finally:
        kp.close()

    async def aiokafka_alter() -> list[Any]:
        aio = AIOKafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
        await aio.start()
        try:
            configs = {"min.insync.replicas": "2", "retention.ms": "77777"}
            return await aio.alter_configs([AioResource(AioType.TOPIC, topic, configs)])
        finally:
            await aio.close()

    (response,) = asyncio.run(aiokafka_alter())
    assert [tuple(r)[:2] for r in response.resources] == [(0, None)]
    # The whole set: segment.ms, not named, went back to its default.
    wait_overrides(cluster, topic, {"min.insync.replicas": "2", "retention.ms": "77777"})


def test_refusals_name_what_was_wrong_and_change_nothing(cluster: Cluster, admin: Any) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    topic = "refused-changes"
    before = {"min.insync.replicas": "2", "retention.ms": "60000"}
    create_topic(cluster, admin, topic, before)
    op = AlterConfigOpType.SET

    refused = refusal(incremental, admin, topic, ("retention.msx", "5", op))
    assert refused.code() == KafkaError.INVALID_CONFIG
    assert "unknown topic config 'retention.msx' (did you mean 'retention.ms'?)" in refused.str()
    refused = refusal(incremental, admin, topic, ("segment.bytes", "5", op))
    assert refused.code() == KafkaError.INVALID_CONFIG and "segment.bytes=5" in refused.str()
    refused = refusal(incremental, admin, topic, ("min.insync.replicas", "3", op))
    assert refused.code() == KafkaError.INVALID_CONFIG
    assert "min.insync.replicas cannot be changed on a live topic" in refused.str()
    refused = refusal(
        incremental, admin, topic, ("cleanup.policy", "compacted", AlterConfigOpType.APPEND)
    )
    assert refused.code() == KafkaError.INVALID_CONFIG
    assert "must be delete, compact or compact,delete" in refused.str()
    refused = refusal(incremental, admin, "nowhere", ("retention.ms", "5", op))
    assert refused.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "unknown topic 'nowhere'" in refused.str()
    # A broker resource: raftlog has no dynamic broker configs.
    broker = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[ConfigEntry("log.retention.ms", "5", incremental_operation=op)],
    )
    future = admin.incremental_alter_configs([broker], request_timeout=WAIT_S)[broker]
    refused = refusal(future.result, timeout=WAIT_S)
    assert refused.code() == KafkaError.INVALID_REQUEST
    assert "raftlog has no dynamic broker configs" in refused.str()

    # validate_only: checked as the real request would be, and nothing changes.
    refused = refusal(incremental, admin, topic, ("segment.bytes", "5", op), validate_only=True)
    assert refused.code() == KafkaError.INVALID_CONFIG
    incremental(admin, topic, ("retention.ms", "1", op), validate_only=True)
    # A real change made after the refusals: once it shows on every node, so would they.
    incremental(admin, topic, ("segment.ms", "3600000", op))
    wait_overrides(cluster, topic, {**before, "segment.ms": "3600000"})
