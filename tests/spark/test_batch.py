"""Batch reads and writes against a real node: the raw consumer's records, record for record;
option errors before any job runs; the sink."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from raftlog.client import Admin
from raftlog.topics import TopicPartition
from tests.integration._support import BrokerProcess
from tests.spark._support import (
    as_recs,
    consume_range,
    create_topic,
    latest,
    produce,
    reader,
)

TOPIC = "events"
PARTITIONS = 3


@pytest.fixture(scope="module")
def events(module_broker: BrokerProcess) -> dict[int, int]:
    """TOPIC with records of every shape: null and present keys of several lengths, null
    values, headers, values of many sizes; returns the end offset per partition."""
    boot = module_broker.bootstrap
    create_topic(boot, TOPIC, PARTITIONS)
    rng = random.Random(12)
    records: list[tuple[Any, ...]] = []
    for i in range(6000):
        key = None if i % 3 == 0 else b"user-%d" % rng.randrange(2000)
        value = None if i % 97 == 0 else rng.randbytes(rng.choice((0, 1, 50, 200, 1000)))
        headers = [("trace", b"%d" % i), ("empty", None)] if i % 50 == 0 else None
        records.append((key, value, headers))
    # Plain 200-byte records too (no key, no headers): the columnar fast path.
    records += [(None, rng.randbytes(200)) for _ in range(6000)]
    produce(boot, TOPIC, records, linger_ms=20)
    return latest(boot, TOPIC)


def test_batch_read_equals_the_consumer_record_for_record(
    spark: Any, module_broker: BrokerProcess, events: dict[int, int]
) -> None:
    boot = module_broker.bootstrap
    expected = consume_range(boot, TOPIC, {}, events)
    assert len(expected) == 12000
    df = reader(spark, boot, subscribe=TOPIC, includeHeaders="true").load()
    assert as_recs(df) == expected
    # Split into more Spark partitions than log partitions: the same records, once each.
    df = reader(spark, boot, subscribe=TOPIC, includeHeaders="true", minPartitions="7").load()
    assert df.rdd.getNumPartitions() >= 7
    assert as_recs(df) == expected


def test_offset_ranges_timestamps_and_assign(
    spark: Any, module_broker: BrokerProcess, events: dict[int, int]
) -> None:
    boot = module_broker.bootstrap
    starts = {0: 5, 1: 0, 2: events[2] - 1}
    ends = {0: events[0] - 10, 1: -1, 2: events[2]}
    df = reader(
        spark,
        boot,
        subscribe=TOPIC,
        startingOffsets=json.dumps({TOPIC: {str(p): o for p, o in starts.items()}}),
        endingOffsets=json.dumps({TOPIC: {str(p): o for p, o in ends.items()}}),
    ).load()
    resolved = {**ends, 1: events[1]}
    assert as_recs(df, headers=False) == [
        (*r[:5], ()) for r in consume_range(boot, TOPIC, starts, resolved)
    ]
    # assign reads only the partitions named.
    df = reader(spark, boot, assign=json.dumps({TOPIC: [1]})).load()
    assert df.count() == events[1]
    assert {r.partition for r in df.select("partition").distinct().collect()} == {1}
    # startingOffsetsByTimestamp: the first record at or after the timestamp, per partition.
    with Admin(boot) as admin:
        tp = TopicPartition(TOPIC, 0)
        recs = consume_range(boot, TOPIC, {0: 100}, {0: 101})
        ts = recs[0][2]
        first = admin.list_offsets({tp: ts})[tp][0]
    df = reader(
        spark,
        boot,
        assign=json.dumps({TOPIC: [0]}),
        startingOffsetsByTimestamp=json.dumps({TOPIC: {"0": ts}}),
    ).load()
    assert df.count() == events[0] - first
    # startingTimestamp later than every record: an error by default, the end with "latest".
    future_ms = str(ts + 10 * 365 * 86400 * 1000)
    with pytest.raises(Exception, match="no record at or after the given timestamp"):
        reader(spark, boot, subscribe=TOPIC, startingTimestamp=future_ms).load().count()
    df = reader(
        spark,
        boot,
        subscribe=TOPIC,
        startingTimestamp=future_ms,
        startingOffsetsByTimestampStrategy="latest",
    ).load()
    assert df.count() == 0


def test_replay_from_a_groups_committed_offsets(
    spark: Any, module_broker: BrokerProcess, events: dict[int, int]
) -> None:
    boot = module_broker.bootstrap
    committed = {p: o // 2 for p, o in events.items()}
    with Admin(boot) as admin:
        admin.reset_offsets(
            "replayers", {TopicPartition(TOPIC, p): o for p, o in committed.items()}
        )
    df = reader(spark, boot, subscribe=TOPIC, startingOffsets="group:replayers").load()
    assert as_recs(df, headers=False) == [
        (*r[:5], ()) for r in consume_range(boot, TOPIC, committed, events)
    ]
    # And as an ending: [earliest, what the group committed).
    df = reader(spark, boot, subscribe=TOPIC, endingOffsets="group:replayers").load()
    assert df.count() == sum(committed.values())


def test_replay_from_a_kafka_groups_commits(
    spark: Any, module_broker: BrokerProcess, events: dict[int, int]
) -> None:
    """A group whose commits came from Kafka's own client (confluent-kafka through the Kafka
    listener) is one of the registry's groups: Spark replays from its commits too."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    boot = module_broker.bootstrap
    committed = {p: o // 3 for p, o in events.items()}
    consumer = Consumer(
        {"bootstrap.servers": module_broker.kafka_bootstrap, "group.id": "kafka-replayers"}
    )
    try:
        offsets = [KafkaTopicPartition(TOPIC, p, o) for p, o in committed.items()]
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()
    df = reader(spark, boot, subscribe=TOPIC, startingOffsets="group:kafka-replayers").load()
    assert df.count() == sum(events.values()) - sum(committed.values())


BAD_OPTIONS = [
    ({"subscribe": "no-such-topic"}, "unknown topic 'no-such-topic'"),
    ({"subscribe": TOPIC, "startingOffsets": '{"events": {"0": 1,'}, "is not valid JSON"),
    ({"subscribe": TOPIC, "startingOffsets": '{"events": {"zero": 1}}'}, "is not a number"),
    ({"subscribe": TOPIC, "startingOffsets": '{"events": {"0": 0}}'}, "missing events-1"),
    ({"subscribe": TOPIC, "startingOffsets": "soonest"}, "must be 'earliest', 'latest'"),
    ({"subscribe": TOPIC, "assign": '{"events": [0]}'}, "given: subscribe, assign"),
    ({}, "exactly one of 'subscribe', 'subscribePattern' or 'assign'"),
    ({"subscribe": TOPIC, "startingOffsets": "group:nobody"}, "has no committed offsets"),
    ({"subscribe": TOPIC, "startingOffset": "earliest"}, "did you mean 'startingOffsets'"),
    ({"subscribe": TOPIC, "failOnDataLoss": "maybe"}, "must be true or false"),
    ({"subscribe": TOPIC, "minPartitions": "0"}, "must be a positive integer"),
    ({"subscribePattern": "ev[ents"}, "not a regular expression"),
    ({"assign": '{"events": [0, 9]}'}, "do not exist: events-9"),
    ({"subscribe": TOPIC, "raftlog.bootstrap.servers": ""}, "is required"),
]


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS, ids=[m for _, m in BAD_OPTIONS])
def test_bad_options_fail_at_load(
    spark: Any, module_broker: BrokerProcess, events: dict[int, int], options: dict[str, str],
    message: str,
) -> None:  # fmt: skip
    r = reader(spark, module_broker.bootstrap, **options)
    with pytest.raises(Exception, match="RaftlogSparkOptionError") as info:
        r.load()
    assert message in str(info.value)


BAD_FOR_BATCH = [
    ({"startingOffsets": "latest"}, "not allowed in a batch query"),
    ({"startingOffsets": '{"events": {"0": -1, "1": 0, "2": 0}}'}, "allowed here: >= 0, -2"),
    ({"endingOffsets": '{"events": {"0": 99999999, "1": -1, "2": -1}}'}, "high watermark"),
    ({"maxOffsetsPerTrigger": "10"}, "streaming queries (spark.readStream) only"),
    ({"commitToGroup": "g"}, "streaming queries (spark.readStream) only"),
]


@pytest.mark.parametrize(("options", "message"), BAD_FOR_BATCH, ids=[m for _, m in BAD_FOR_BATCH])
def test_options_wrong_for_a_batch_query_fail_before_any_job(
    spark: Any, module_broker: BrokerProcess, events: dict[int, int], options: dict[str, str],
    message: str,
) -> None:  # fmt: skip
    """Options valid for streaming but not batch: load() cannot tell which it is, so they fail
    when the query is planned, still before any task runs."""
    df = reader(spark, module_broker.bootstrap, subscribe=TOPIC, **options).load()
    jobs_before = spark.sparkContext.statusTracker().getJobIdsForGroup(None)
    with pytest.raises(Exception, match="RaftlogSparkOptionError") as info:
        df.count()
    assert message in str(info.value)
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(None) == jobs_before


def test_streaming_only_errors(spark: Any, module_broker: BrokerProcess, events: Any) -> None:
    with pytest.raises(Exception, match="applies to batch queries"):
        reader(
            spark, module_broker.bootstrap, stream=True, subscribe=TOPIC, endingOffsets="latest"
        ).load().writeStream.format("noop").start().awaitTermination(60)


def test_sink_writes_rows_and_a_stream(
    spark: Any, module_broker: BrokerProcess, events: dict[int, int]
) -> None:
    boot = module_broker.bootstrap
    create_topic(boot, "written", 2)
    rows = [
        (f"k{i}", b"value-%d" % i, i % 2, [("h", b"%d" % i)] if i % 10 == 0 else [])
        for i in range(500)
    ]
    df = spark.createDataFrame(
        rows,
        "key string, value binary, partition int, headers array<struct<key:string,value:binary>>",
    )
    df.write.format("raftlog").mode("append").option("raftlog.bootstrap.servers", boot).option(
        "topic", "written"
    ).save()
    got = consume_range(boot, "written", {}, latest(boot, "written"))
    assert len(got) == 500
    by_value = {r[4]: r for r in got}
    for key, value, partition, headers in rows:
        rec = by_value[value]
        assert (rec[0], rec[3], rec[5]) == (partition, key.encode(), tuple(headers))
    # A stream from one topic into another (the topic from a column), every record once.
    create_topic(boot, "copied", 3)
    query = (
        reader(spark, boot, stream=True, subscribe=TOPIC, startingOffsets="earliest")
        .load()
        .selectExpr("key", "value", "'copied' AS topic", "partition")
        .writeStream.format("raftlog")
        .option("raftlog.bootstrap.servers", boot)
        .option("checkpointLocation", str(module_broker.data_dir.parent / "copy-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    assert latest(boot, "copied") == events
    # Sink errors come when the query is planned: no value column, no topic.
    with pytest.raises(Exception, match="needs a 'value' column"):
        spark.createDataFrame([("x",)], "key string").write.format("raftlog").mode("append").option(
            "raftlog.bootstrap.servers", boot
        ).option("topic", "written").save()
    with pytest.raises(Exception, match="needs a 'topic' option or a 'topic' column"):
        spark.createDataFrame([("x",)], "value string").write.format("raftlog").mode(
            "append"
        ).option("raftlog.bootstrap.servers", boot).save()
