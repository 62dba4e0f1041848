"""The Kafka client helpers (tests/kafka/clients.py) against librdkafka's mock cluster: each
client round-trips keyed records with headers through one partition with every codec, reads
what another client wrote, and fails loudly (TimeoutError, ValueError) rather than hanging.

This checks the harness, not raftlog: the same helpers then run against raftlog's Kafka
listener. kafka-python is left out here because it cannot read the mock's ApiVersions answers
(it asks v4 first; the mock's reply, error 35, does not decode); it is checked against a real
Kafka-protocol broker instead. kcat and Sarama need tools from Debian (tests/kafka/tools.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.kafka import clients
from tests.kafka.mock_cluster import mock_cluster
from tests.kafka.tools import need_go, need_kcat

N = 50
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with mock_cluster() as address:
        yield address


def fresh_topic() -> str:
    return f"mock-{uuid.uuid4().hex[:10]}"


def check(read: list[clients.Record], sent: list[clients.Outgoing], partition: int) -> None:
    assert clients.payloads(read) == sent
    assert [r.offset for r in read] == list(range(len(sent)))
    assert {r.partition for r in read} == {partition}
    assert all(r.timestamp > 1_600_000_000_000 for r in read)


PYTHON_ROUNDTRIPS = {
    "confluent": clients.confluent_roundtrip,
    "aiokafka": clients.aiokafka_roundtrip,
}


@pytest.mark.parametrize("compression", clients.COMPRESSIONS)
@pytest.mark.parametrize("client", sorted(PYTHON_ROUNDTRIPS))
def test_python_client_roundtrip(bootstrap: str, client: str, compression: str) -> None:
    sent = clients.keyed_records(N, client)
    read = PYTHON_ROUNDTRIPS[client](
        bootstrap, fresh_topic(), sent, partition=1, compression=compression, timeout_s=TIMEOUT_S
    )
    check(read, sent, 1)


@pytest.mark.parametrize("compression", clients.COMPRESSIONS)
def test_kcat_roundtrip(bootstrap: str, compression: str) -> None:
    need_kcat()
    topic, sent = fresh_topic(), clients.keyed_records(N, "kcat")
    clients.kcat_produce(bootstrap, topic, sent, compression=compression, timeout_s=TIMEOUT_S)
    check(clients.kcat_consume(bootstrap, topic, timeout_s=TIMEOUT_S), sent, 0)
    assert len(clients.kcat_consume(bootstrap, topic, count=5, timeout_s=TIMEOUT_S)) == 5


@pytest.mark.parametrize("compression", clients.COMPRESSIONS)
def test_sarama_roundtrip(bootstrap: str, compression: str) -> None:
    need_go()
    read = clients.sarama_roundtrip(
        bootstrap, fresh_topic(), N, partition=1, compression=compression, timeout_s=TIMEOUT_S
    )
    check(read, clients.keyed_records(N, "sarama"), 1)


def test_each_client_reads_what_another_wrote(bootstrap: str) -> None:
    need_kcat()
    need_go()
    topic, sent = fresh_topic(), clients.keyed_records(N, "confluent")
    end = clients.confluent_produce(bootstrap, topic, sent, compression="lz4", timeout_s=TIMEOUT_S)
    assert end == N
    check(clients.kcat_consume(bootstrap, topic, timeout_s=TIMEOUT_S), sent, 0)
    check(clients.aiokafka_consume(bootstrap, topic, end_offset=end, timeout_s=TIMEOUT_S), sent, 0)
    check(clients.sarama_consume(bootstrap, topic, N, timeout_s=TIMEOUT_S), sent, 0)

    topic = fresh_topic()
    clients.sarama_produce(bootstrap, topic, N, compression="zstd", timeout_s=TIMEOUT_S)
    read = clients.confluent_consume(bootstrap, topic, end_offset=N, timeout_s=TIMEOUT_S)
    check(read, clients.keyed_records(N, "sarama"), 0)


def test_idempotent_producers(bootstrap: str) -> None:
    need_go()
    sent = clients.keyed_records(N, "idempotent")
    for roundtrip, config in (
        (clients.confluent_roundtrip, {"enable.idempotence": True}),
        (clients.aiokafka_roundtrip, {"enable_idempotence": True}),
    ):
        check(
            roundtrip(bootstrap, fresh_topic(), sent, config=config, timeout_s=TIMEOUT_S), sent, 0
        )
    read = clients.sarama_roundtrip(bootstrap, fresh_topic(), N, idempotent=True)
    check(read, clients.keyed_records(N, "sarama"), 0)


def test_reading_past_the_end_times_out_saying_how_far(bootstrap: str) -> None:
    topic, sent = fresh_topic(), clients.keyed_records(3, "short")
    clients.confluent_produce(bootstrap, topic, sent, timeout_s=TIMEOUT_S)
    with pytest.raises(TimeoutError, match=r"read 3 records \(last offset 2\).*end offset 10"):
        clients.confluent_consume(bootstrap, topic, end_offset=10, timeout_s=2.0)
    with pytest.raises(TimeoutError, match=r"read 3 records \(last offset 2\).*end offset 10"):
        clients.aiokafka_consume(bootstrap, topic, end_offset=10, timeout_s=2.0)


def test_bad_options_are_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match="compression 'brotli'"):
        clients.confluent_produce("127.0.0.1:1", "t", [], compression="brotli")
    with pytest.raises(ValueError, match="acks '2'"):
        clients.aiokafka_produce("127.0.0.1:1", "t", [], acks="2")
    with pytest.raises(ValueError, match="a tab or newline"):
        clients.kcat_produce("127.0.0.1:1", "t", [(b"k", b"a\tb", ())])
