"""The metrics' pure parts: event counters, series bounds, group lag, the families built from
stand-in partition rows, the HTTP answers, and the names table against docs/METRICS.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from raftlog.metadata.quorum import QuorumStatus
from raftlog.metrics import names
from raftlog.metrics.collectors import (
    NodeCollector,
    NodeSources,
    PartitionRow,
    group_lags,
    lag_families,
    replica_families,
    split_series,
    stats_families,
)
from raftlog.metrics.http import MetricsServer
from raftlog.metrics.stats import LATENCY_BUCKETS_S, BrokerStats, RequestStats, RequestTable
from raftlog.topics import TopicPartition

DOCS = Path(__file__).resolve().parents[2] / "docs" / "METRICS.md"


def exposition(*families: Any) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The samples Prometheus would read from these families (through the real exposition)."""

    class Fixed(Collector):
        def collect(self) -> Any:
            return list(families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


# -- counters ---------------------------------------------------------------------------------


def test_request_stats_bucket_every_answer_once_and_count_errors() -> None:
    s = RequestStats()
    for seconds in (0.00005, 0.0001, 0.003, 0.7, 100.0):
        s.observe(seconds, error=seconds > 1)
    assert s.count == 5 and s.errors == 1 and sum(s.buckets) == s.count
    cumulative = dict(s.cumulative())
    assert cumulative["0.0001"] == 2  # an answer at the bound is in its bucket (le)
    assert cumulative["0.005"] == 3
    assert cumulative["1.0"] == 4
    assert cumulative["+Inf"] == 5
    assert len(cumulative) == len(LATENCY_BUCKETS_S) + 1


def test_unknown_api_keys_share_one_entry_and_never_grow_the_table() -> None:
    table = RequestTable({0: "ApiVersions"}.get)
    for key in range(1000, 2000):
        table[key].observe(0.001, True)
    table[0].observe(0.001, False)
    assert list(table) == [0]
    assert dict(table.by_name())["unknown"].count == 1000
    assert dict(table.by_name())["ApiVersions"].count == 1


def test_topic_traffic_counts_appends_and_sends_and_forgets_deleted_topics() -> None:
    stats = BrokerStats()
    traffic = stats.traffic
    traffic.appended("a", 100, 3)
    traffic.appended("a", 50, 2)
    traffic.sent((False, [("a", 40), ("b", 10)]))
    traffic.sent((True, [("a", 70)]))
    assert traffic.bytes_in == {"a": 150} and traffic.records_in == {"a": 5}
    assert traffic.bytes_out == {"a": 40, "b": 10}
    assert traffic.replication_bytes_out == 70
    samples = exposition(*stats_families(stats, {"a"}))
    assert samples["raftlog_topic_bytes_out_total"] == [({"topic": "a"}, 40.0)]  # b: deleted
    assert samples["raftlog_topic_records_in_total"] == [({"topic": "a"}, 5.0)]
    assert samples["raftlog_replication_bytes_out_total"] == [({}, 70.0)]


def test_isr_changes_count_shrinks_and_expands() -> None:
    stats = BrokerStats()
    stats.isr_changed(3, 2)
    stats.isr_changed(2, 3)
    stats.isr_changed(2, 3)
    stats.isr_changed(3, 3)
    assert (stats.isr_shrinks, stats.isr_expands) == (1, 2)


def test_request_families_are_a_histogram_per_api_and_listener() -> None:
    stats = BrokerStats()
    table = stats.requests("client", {5: "Produce"}.get)
    table[5].observe(0.002, False)
    table[5].observe(0.02, True)
    samples = exposition(*stats_families(stats, set()))
    labels = {"api": "Produce", "listener": "client"}
    assert samples["raftlog_requests_total"] == [(labels, 2.0)]
    assert samples["raftlog_request_errors_total"] == [(labels, 1.0)]
    assert ({**labels, "le": "0.0025"}, 1.0) in samples["raftlog_request_duration_seconds_bucket"]
    assert samples["raftlog_request_duration_seconds_count"] == [(labels, 2.0)]
    assert samples["raftlog_request_duration_seconds_sum"] == [(labels, pytest.approx(0.022))]


# -- series bounds and the broker's gauges ----------------------------------------------------


def row(topic: str, partition: int, leader: bool = True, **kw: Any) -> PartitionRow:
    values: dict[str, Any] = {
        "size_bytes": 100,
        "log_start_offset": 0,
        "log_end_offset": 10,
        "high_watermark": 8,
        "replicas": 3,
        "isr": 3,
        "min_isr": 2,
    }
    values.update(kw)
    return PartitionRow(TopicPartition(topic, partition), leader, **values)


def test_split_series_keeps_the_first_and_counts_the_rest() -> None:
    assert split_series([1, 2, 3], 5) == ([1, 2, 3], 0)
    assert split_series([1, 2, 3], 2) == ([1, 2], 1)
    assert split_series([1, 2, 3], 0) == ([], 3)


def test_replica_gauges_count_only_led_partitions_and_bound_per_partition_series() -> None:
    rows = [
        row("t", 0, isr=3, follower_lag=((2, 0), (3, 0)), producer_ids=4),
        row("t", 1, isr=2, follower_lag=((2, 0), (3, 7))),  # under-replicated, at min ISR
        row("t", 2, isr=1, follower_lag=((2, 9),)),  # under min ISR
        row("u", 0, leader=False, isr=1, producer_ids=99),  # a follower: not counted
    ]
    samples = exposition(*replica_families(rows, series_max=2))

    def one(name: str) -> float:
        [(_, v)] = samples[name]
        return v

    assert one("raftlog_partitions") == 4
    assert one("raftlog_leader_partitions") == 3
    assert one("raftlog_under_replicated_partitions") == 2
    assert one("raftlog_at_min_isr_partitions") == 1
    assert one("raftlog_under_min_isr_partitions") == 1
    assert one("raftlog_producer_ids") == 4
    assert one("raftlog_partition_series_omitted") == 2
    sizes = samples["raftlog_log_size_bytes"]
    assert [ls["partition"] for ls, _ in sizes] == ["0", "1"]  # the first two only
    lag = {(ls["partition"], ls["follower"]): v for ls, v in samples["raftlog_replica_lag_records"]}
    assert lag == {("0", "2"): 0, ("0", "3"): 0, ("1", "2"): 0, ("1", "3"): 7}
    # The per-topic series count every partition, the omitted ones too.
    assert dict((ls["topic"], v) for ls, v in samples["raftlog_topic_partitions"]) == {
        "t": 3,
        "u": 1,
    }
    assert ({"topic": "t"}, 300.0) in samples["raftlog_topic_log_size_bytes"]
    assert ({"topic": "t"}, 9.0) in samples["raftlog_topic_replica_lag_max_records"]


def test_group_lag_is_high_watermark_minus_commit_on_led_partitions_only() -> None:
    commits = [("g", "t:0", 3), ("g", "t:1", 12), ("g", "elsewhere:0", 0), ("h", "t:0", 10)]
    lags = group_lags(commits, {"t:0": 10, "t:1": 10})
    assert lags == [
        ("g", TopicPartition("t", 0), 7),
        ("g", TopicPartition("t", 1), 0),  # a commit past the high watermark: 0, not -2
        ("h", TopicPartition("t", 0), 0),
    ]
    samples = exposition(*lag_families(lags, series_max=1))
    assert samples["raftlog_consumer_group_lag"] == [
        ({"group": "g", "topic": "t", "partition": "0"}, 7.0)
    ]
    assert samples["raftlog_consumer_group_lag_series_omitted"] == [({}, 2.0)]
    assert ({"group": "g", "topic": "t"}, 7.0) in samples["raftlog_consumer_group_topic_lag"]
    assert ({"group": "h", "topic": "t"}, 0.0) in samples["raftlog_consumer_group_topic_lag"]


def test_a_node_without_a_broker_reports_its_quorum_only() -> None:
    status = QuorumStatus(
        is_leader=False, leader="a:1", term=4, commit_index=20, last_applied=17, ready=True, raw={}
    )
    sources = NodeSources(
        node_id=2,
        status=lambda: status,
        read=lambda fn: fn(None),
        controller_active=lambda: False,
        broker=lambda: None,
    )
    samples = exposition(*NodeCollector(sources).collect())
    assert samples["raftlog_active_controller"] == [({}, 0.0)]
    assert samples["raftlog_raft_term"] == [({}, 4.0)]
    assert samples["raftlog_raft_apply_lag"] == [({}, 3.0)]
    assert "raftlog_partitions" not in samples


# -- the HTTP listener's answers --------------------------------------------------------------


def server(exposition_bytes: bytes = b"# metrics\n") -> MetricsServer:
    return MetricsServer(CollectorRegistry(), "127.0.0.1", 0, lambda r: exposition_bytes)


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 200),
        (b"GET /metrics?x=1 HTTP/1.0\r\n\r\n", 200),
        (b"GET / HTTP/1.1\r\n\r\n", 404),
        (b"GET /metrics/ HTTP/1.1\r\n\r\n", 404),
        (b"POST /metrics HTTP/1.1\r\n\r\n", 405),
        (b"GET /metrics\r\n\r\n", 400),
        (b"\x00\xffgarbage", 400),
        (b"GET /metrics HTTP/2.0\r\n\r\n", 400),
    ],
)
def test_the_listener_answers_get_metrics_only(head: bytes, status: int) -> None:
    got, body, content_type = server().respond(head)
    assert got == status
    if status == 200:
        assert body == b"# metrics\n"
        assert content_type.startswith("text/plain; version=")


def test_a_collector_that_raises_makes_the_scrape_a_500() -> None:
    def broken(registry: CollectorRegistry) -> bytes:
        raise RuntimeError("a bug")

    s = MetricsServer(CollectorRegistry(), "127.0.0.1", 0, broken)
    assert s.respond(b"GET /metrics HTTP/1.1\r\n\r\n")[0] == 500


# -- names --------------------------------------------------------------------------------------


def test_names_are_unique_prometheus_style_and_all_in_the_docs() -> None:
    seen = [s.name for s in names.ALL]
    assert len(seen) == len(set(seen))
    docs = DOCS.read_text()
    for s in names.ALL:
        assert re.fullmatch(r"raftlog_[a-z_]+", s.name), s.name
        assert s.name.endswith("_total") == (s.kind == "counter"), s.name
        assert s.kind in ("gauge", "counter", "histogram")
        assert f"`{s.name}`" in docs, f"{s.name} is not in docs/METRICS.md"
    assert names.markdown_table() in docs, "docs/METRICS.md's table is names.markdown_table()"
