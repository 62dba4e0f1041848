"""raftlog's Producer with `compression_type` against a real node: every codec's batches
(Kafka record batches v2, compressed) are stored as sent and read back by raftlog's Consumer,
offsets, keys, values, headers and timestamps intact, next to raftlog's own batches."""

from __future__ import annotations

import json

import pytest

from raftlog.client import Admin, Producer
from raftlog.client.fetched import ConsumerRecord
from raftlog.client.partitioner import murmur2_partitioner
from raftlog.client.producer_config import COMPRESSION_TYPES
from raftlog.client.reader import RangeReader
from raftlog.topics import TopicPartition
from tests.integration._support import BrokerProcess, consume_exactly, run_cli

PARTITIONS = 2
T0 = 1_764_000_000_000


@pytest.mark.parametrize("compression_type", ["gzip", "snappy", "lz4", "zstd", "none"])
def test_each_codec_round_trips_through_a_node(
    module_broker: BrokerProcess, compression_type: str
) -> None:
    topic = f"compressed-{compression_type}"
    with Admin(module_broker.bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS)
    sent: dict[tuple[int, int], tuple[bytes | None, bytes | None, tuple, int]] = {}  # type: ignore[type-arg]
    with Producer(
        bootstrap_servers=module_broker.bootstrap,
        compression_type=compression_type,
        linger_ms=20,
        batch_size=16 * 1024,
    ) as producer:
        futures = []
        for i in range(3000):
            key = b"user-%d" % (i % 37) if i % 3 else None
            value = None if i % 101 == 0 else b"page view %d of /index.html" % i
            headers = [("seq", b"%d" % i), ("null", None)] if i % 5 == 0 else []
            ts = T0 + i
            fut = producer.send(topic, value, key=key, headers=headers, timestamp_ms=ts)
            futures.append((fut, (key, value, tuple(headers), ts)))
        many = [b"bulk %d" % i for i in range(5000)]
        bulk = producer.send_many(topic, many, partition=1)
        producer.flush()
        for fut, record in futures:
            meta = fut.result(30)
            sent[(meta.partition, meta.offset)] = record
        for meta, value in zip(bulk.result(30), many, strict=True):
            sent[(meta.partition, meta.offset)] = (None, value, (), meta.timestamp)
    ends = {p: 1 + max(o for q, o in sent if q == p) for p in range(PARTITIONS)}
    got = consume_exactly(module_broker.bootstrap, topic, ends)
    records: list[ConsumerRecord] = [r for p in got for r in got[p]]
    assert len(records) == len(sent) == 8000
    for r in records:
        assert (r.key, r.value, r.headers, r.timestamp) == sent[(r.partition, r.offset)], r
    # The log holds the batches as sent (Kafka's v2 with the codec, or raftlog's own), and the
    # Spark source's reader reads them too.
    codec = COMPRESSION_TYPES[compression_type]
    read = 0
    with RangeReader(module_broker.bootstrap) as reader:
        for p, end in ends.items():
            for chunk in reader.read_range(TopicPartition(topic, p), 0, end):
                for _pos, header in chunk.batches:
                    assert header.magic == (2 if codec else 1)
                    assert header.attributes & 0x07 == codec
                for rec in chunk.records():
                    assert (rec.key, rec.value, rec.headers, rec.timestamp) == sent[(p, rec.offset)]
                    read += 1
    assert read == len(sent)


def test_raftlog_produce_compresses_and_places_keys_by_murmur2(
    module_broker: BrokerProcess,
) -> None:
    """`raftlog produce --compression-type zstd --partitioner murmur2`: keys land where Kafka's
    Java client puts them, and `raftlog consume` prints every record back."""
    b = ("--bootstrap-server", module_broker.bootstrap)
    with Admin(module_broker.bootstrap) as admin:
        admin.create_topic("cli-zstd", 6)
    lines = [f"user-{i % 9}:click {i}" for i in range(60)]
    res = run_cli(
        "produce", "cli-zstd", "--key-separator", ":", "--compression-type", "zstd",
        "--partitioner", "murmur2", *b, input=("\n".join(lines) + "\n").encode(),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    res = run_cli(
        "consume", "cli-zstd", "--from-beginning", "--max-messages", "60", "--format", "json", *b
    )
    assert res.returncode == 0, res.stderr
    got = [json.loads(line) for line in res.stdout.splitlines()]
    assert sorted(r["value"] for r in got) == sorted(line.split(":")[1] for line in lines)
    for r in got:
        assert r["partition"] == murmur2_partitioner(r["key"].encode(), 6), r
    res = run_cli("produce", "cli-zstd", "--compression-type", "brotli", *b, input=b"x\n")
    assert res.returncode != 0 and "brotli" in res.stderr
