"""DescribeReplicas (API 24): the broker's handler reports its own logs as they are (a compacted
log's dirty ratio and last clean, a delete-policy log without them, an offline log with its
reason, topics filtered), and the CLI's phrases for them, including a broker that did not
answer."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from raftlog.broker.handlers.admin import handle_describe_replicas
from raftlog.cli.client_cmd import format_cleaning, leader_cleaning
from raftlog.cli.cluster_cmd import add_cleaning, format_status
from raftlog.client.admin import ReplicaStates
from raftlog.errors import LogOfflineError
from raftlog.messages.replicas import CleanSummary, DescribeReplicasResponse, ReplicaState
from raftlog.records import Record, encode_batch
from raftlog.storage import LogConfig, PartitionLog, cleaner
from raftlog.topics import TopicPartition

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "600", "min.cleanable.dirty.ratio": "0"}


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


class _Logs:
    """The LogManager surface the handler reads."""

    def __init__(
        self, logs: dict[TopicPartition, PartitionLog], offline: dict[TopicPartition, Any]
    ):
        self._logs, self._offline = logs, offline

    def partitions(self) -> list[TopicPartition]:
        return list(self._logs)

    def find(self, tp: TopicPartition) -> PartitionLog | None:
        return self._logs.get(tp)

    def offline(self) -> dict[TopicPartition, Any]:
        return dict(self._offline)

    def config_for(self, topic_config: dict[str, str]) -> LogConfig:
        return LogConfig.from_topic_config(topic_config)


def _write(log: PartitionLog, clock: FakeClock, rounds: int) -> None:
    for r in range(rounds):
        for k in range(5):
            value = b"%d-%d" % (k, r) + b"v" * 40
            log.append(encode_batch([Record(b"key-%d" % k, value, (), clock.now_ms)]), 0)


def _describe(ctx: Any, topics: list[str] | None) -> DescribeReplicasResponse:
    answer = handle_describe_replicas(ctx, {"topics": topics}, memoryview(b""), None)  # type: ignore[arg-type]
    return DescribeReplicasResponse.from_body(answer.body)


def test_the_handler_reports_each_hosted_log_as_it_is(tmp_path: Path) -> None:
    clock = FakeClock()
    table, events = TopicPartition("table", 0), TopicPartition("events", 0)
    gone = TopicPartition("events", 1)
    compacted = PartitionLog.open(
        str(tmp_path / "table-0"), LogConfig.from_topic_config(COMPACTED), clock_ms=clock
    )
    plain = PartitionLog.open(str(tmp_path / "events-0"), LogConfig(), clock_ms=clock)
    with compacted, plain:
        _write(compacted, clock, 10)
        _write(plain, clock, 1)
        offline = SimpleNamespace(
            topic=SimpleNamespace(config={}), error=LogOfflineError("events-1: the disk is full")
        )
        ctx = SimpleNamespace(
            config=SimpleNamespace(node_id=2),
            logs=_Logs({table: compacted, events: plain}, {gone: offline}),
            # This broker has replica state (a high watermark) for the compacted log only.
            replicas={table: SimpleNamespace(high_watermark=compacted.log_end_offset)},
        )

        before = _describe(ctx, None)
        assert before.node_id == 2
        assert [r.tp for r in before.replicas] == [events, gone, table]
        e, g, t = before.replicas
        assert (e.cleanup_policy, e.dirty_ratio, e.high_watermark) == ("delete", None, None)
        assert (e.log_end_offset, e.segments, e.offline) == (5, 1, False)
        assert e.size_bytes == plain.size_bytes and e.last_clean_ms == -1
        assert g.offline and g.offline_reason == "events-1: the disk is full"
        assert (g.size_bytes, g.log_end_offset, g.dirty_ratio) == (None, None, None)
        assert t.cleanup_policy == "compact" and t.dirty_ratio == 1.0  # nothing cleaned yet
        assert (t.last_clean_ms, t.last_clean) == (-1, None)
        assert t.high_watermark == t.log_end_offset == 50 and t.segments == compacted.segment_count

        plan = compacted.plan_clean(compacted.log_end_offset)
        assert plan is not None
        clock.now_ms += 5000
        result = cleaner.run(plan, keys_max=1000, bytes_per_s=0)
        assert compacted.install_clean(result)

        (t,) = _describe(ctx, ["table"]).replicas
        assert t.dirty_ratio == 0.0
        assert t.last_clean_ms == compacted.last_clean_ms >= 0
        assert t.last_clean is not None
        assert t.last_clean.records_read == result.records_read > result.records_kept
        assert t.last_clean.records_kept == result.records_kept
        assert t.last_clean.bytes_written == result.bytes_written
        assert t.size_bytes == compacted.size_bytes
        assert _describe(ctx, ["nope"]).replicas == ()


def test_the_cli_phrases_the_leader_s_cleaning_or_says_why_it_cannot() -> None:
    tp = TopicPartition("table", 0)
    clean = CleanSummary(9000, 1204, 3, 1, 1, 0.5)
    states = ReplicaStates(
        (
            ReplicaState(
                1, tp, "compact", dirty_ratio=0.42, last_clean_ms=88_000, last_clean=clean
            ),
            ReplicaState(2, tp, "compact", dirty_ratio=0.9),
            ReplicaState(1, TopicPartition("events", 0), "delete"),
        ),
        {3: "BrokerNotAvailableError: connection refused"},
    )
    now_ms = 100_000
    c = leader_cleaning(states, tp, 1)
    assert format_cleaning(c, now_ms) == (
        "dirty 0.42, last clean 12 s ago (1,204 of 9,000 records kept)"
    )
    assert c["last_clean"]["records_kept"] == 1204 and c["error"] is None
    assert format_cleaning(leader_cleaning(states, tp, 2), now_ms) == (
        "dirty 0.90, not cleaned since broker 2 started"
    )
    gone = leader_cleaning(states, tp, 3)
    assert gone["dirty_ratio"] is None
    assert format_cleaning(gone, now_ms) == (
        "unknown (broker 3 did not answer (BrokerNotAvailableError: connection refused))"
    )
    assert "no leader" in format_cleaning(leader_cleaning(states, tp, -1), now_ms)

    st: dict[str, Any] = {
        "node_id": 1,
        "controller_id": 1,
        "quorum": {"term": 1, "commit_index": 5, "last_applied": 5},
        "voters": [],
        "brokers": [],
        "partitions": [
            {
                "topic": t,
                "partition": 0,
                "leader": 1,
                "leader_epoch": 0,
                "replicas": [1, 2, 3],
                "isr": [1, 2, 3],
                "offline_replicas": [],
            }
            for t in ("events", "table")
        ],
    }
    add_cleaning(st, states)
    assert st["partitions"][0]["cleaning"] is None  # delete policy: no dirty ratio
    assert st["partitions"][1]["cleaning"]["dirty_ratio"] == 0.42
    assert st["replica_states_unanswered"] == [[3, "BrokerNotAvailableError: connection refused"]]
    text = format_status(st, now_ms)
    assert "table-0  leader 1" in text and "cleaning: dirty 0.42, last clean 12 s ago" in text
    assert "events-0  leader 1  epoch 0  replicas [1, 2, 3]  isr [1, 2, 3]\n" in text
    assert "Broker 3 did not answer for its replicas' state: BrokerNotAvailableError" in text
