"""A compacted topic through Kafka's clients, on a three-node cluster (RF 3) through its Kafka
listeners.

- confluent-kafka writes rounds of keyed records (some deletes; half the rounds compressed
  with lz4, half with zstd) to a topic made with cleanup.policy=compact through Kafka's
  CreateTopics; every replica's cleaner compacts it. confluent-kafka, kafka-python, aiokafka
  and kcat then read it from the beginning across the gaps: for every key its last value at
  its original offset, offsets only going up, fewer records than were written.
- A record without a key is refused on the compacted topic with Kafka's INVALID_RECORD, as
  Kafka's broker does; a keyed one in the same producer goes through.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog.storage.checkpoint import OffsetCheckpoint
from raftlog.storage.cleaner import CLEANER_CHECKPOINT_FILE
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._support import wait_for
from tests.kafka import clients

WAIT_S = 60.0
TOPIC = "kafka-table"
KEYS = [f"k{i:02d}".encode() for i in range(30)]
ROUNDS = 12
CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
    "min.insync.replicas": "2",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("kafka-compaction")
    with started_cluster(root, 3, log_cleaner_backoff_ms=100) as c:
        yield c


@pytest.fixture(scope="module")
def written(cluster: Cluster) -> dict[bytes, tuple[int, bytes | None]]:
    """The compacted topic, written and cleaned on every replica: each key's last (offset,
    value) as the producer's acknowledgements place them."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config=CONFIG)])[TOPIC].result(timeout=WAIT_S)
    last: dict[bytes, tuple[int, bytes | None]] = {}
    for r in range(ROUNDS):
        records: list[clients.Outgoing] = []
        for i, key in enumerate(KEYS):
            value = None if (r * len(KEYS) + i) % 5 == 0 else b"%s@%d" % (key, r)
            records.append((key, value, ()))
        codec = "lz4" if r % 2 else "zstd"
        end = clients.confluent_produce(
            cluster.kafka_bootstrap, TOPIC, records, compression=codec, timeout_s=WAIT_S
        )
        for n, (key, value, _) in enumerate(records):
            last[key] = (end - len(records) + n, value)

    def cleaned(node: int) -> int:
        path = cluster.nodes[node].data_dir / "logs" / f"{TOPIC}-0" / CLEANER_CHECKPOINT_FILE
        return (OffsetCheckpoint(str(path)).read() or 0) if path.exists() else 0

    wait_for(lambda: all(cleaned(n) > 0 for n in cluster.nodes), WAIT_S, "every replica cleaned")
    return last


def check(read: list[clients.Record], last: dict[bytes, tuple[int, bytes | None]]) -> None:
    offsets = [r.offset for r in read]
    assert offsets == sorted(set(offsets))
    assert len(read) < ROUNDS * len(KEYS), "nothing was compacted away"
    seen = {r.key: (r.offset, r.value) for r in read}
    for key, (offset, value) in last.items():
        assert seen.get(key) == (offset, value), key


@pytest.mark.parametrize(
    "consume",
    [
        clients.confluent_consume,
        clients.kafka_python_consume,
        clients.aiokafka_consume,
        clients.kcat_consume,
    ],
    ids=["confluent-kafka", "kafka-python", "aiokafka", "kcat"],
)
def test_kafka_clients_read_a_compacted_log_across_its_gaps(
    cluster: Cluster, written: dict[bytes, tuple[int, bytes | None]], consume: Any
) -> None:
    check(consume(cluster.kafka_bootstrap, TOPIC, timeout_s=WAIT_S), written)


def test_a_record_without_a_key_is_refused_with_invalid_record(
    cluster: Cluster, written: dict[bytes, tuple[int, bytes | None]]
) -> None:
    with pytest.raises(clients.KafkaClientError, match=r"(?i)invalid.?record") as refused:
        clients.confluent_produce(
            cluster.kafka_bootstrap, TOPIC, [(None, b"no key", ())], timeout_s=WAIT_S
        )
    assert "has no key" in str(refused.value) or "INVALID_RECORD" in str(refused.value)
    end = clients.confluent_produce(
        cluster.kafka_bootstrap, TOPIC, [(b"k00", b"keyed", ())], timeout_s=WAIT_S
    )
    assert end > ROUNDS * len(KEYS)
