"""A batch whose records do not decode stops only its own partition.

The broker checks batches without decoding records (header, lengths table, checksum), so a
producer that is not ours can store a batch whose record bodies are inconsistent; only a
consumer finds out. It must still deliver every other partition, name the bad partition and
offset in the error, and keep its position there until the caller seeks past it.
"""

from __future__ import annotations

import struct
import time

import pytest
import xxhash

from raftlog import protocol
from raftlog.client import Admin, Consumer, Producer
from raftlog.errors import CorruptRecordError
from raftlog.topics import TopicPartition
from tests.integration._support import BrokerProcess, RawClient, produce_body

TOPIC = "half-corrupt"


def record_corrupt_batch() -> bytes:
    """One record whose key length (1000) overruns its 30-byte body; header, lengths table
    and checksum are right, so the broker appends it."""
    body = struct.pack("<bqi", 0, 0, 1000) + bytes(17)
    tail = struct.pack("<hiqqqhii", 0, 0, 0, 0, -1, -1, -1, 1) + struct.pack("<i", len(body))
    tail += body
    head = struct.pack("<qiibQ", 0, 25 + len(tail) - 12, -1, 1, xxhash.xxh3_64_intdigest(tail))
    return head + tail


@pytest.mark.parametrize("check_crcs", [True, False])
def test_a_corrupt_batch_stops_only_its_partition(broker: BrokerProcess, check_crcs: bool) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(TOPIC, 2)
    with Producer(bootstrap_servers=broker.bootstrap, acks=1) as producer:
        for i in range(3):
            producer.send(TOPIC, b"p0-%d" % i, partition=0)
            producer.send(TOPIC, b"p1-%d" % i, partition=1)
        producer.flush(10)
        bad = record_corrupt_batch()
        with RawClient(broker.host, broker.port) as raw:
            body, _ = raw.request(
                protocol.ApiKey.PRODUCE, produce_body(TOPIC, {0: len(bad)}), [bad]
            )
        assert body["topics"][0][1][0][1] == 0, body  # the broker accepted it at offset 3
        producer.send(TOPIC, b"p0-after", partition=0).result(10)

        consumer = Consumer(
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            check_crcs=check_crcs,
            fetch_max_wait_ms=100,
        )
        try:
            consumer.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
            got: dict[int, list[bytes]] = {0: [], 1: []}
            error: CorruptRecordError | None = None
            deadline = time.monotonic() + 20
            while error is None:
                assert time.monotonic() < deadline, got
                try:
                    for tp, records in consumer.poll(200).items():
                        got[tp.partition] += [r.value for r in records]
                except CorruptRecordError as e:
                    error = e
            # Everything before the bad batch, on both partitions, came first.
            assert got == {0: [b"p0-0", b"p0-1", b"p0-2"], 1: [b"p1-0", b"p1-1", b"p1-2"]}
            assert f"{TOPIC}-0" in str(error) and "offset 3" in str(error), error
            assert consumer.position(TopicPartition(TOPIC, 0)) == 3

            # The other partition keeps going while the bad one stays where it is.
            producer.send(TOPIC, b"p1-later", partition=1).result(10)
            later: list[bytes] = []
            errors = 0
            while b"p1-later" not in later:
                assert time.monotonic() < deadline, later
                try:
                    for tp, records in consumer.poll(200).items():
                        assert tp.partition == 1, records
                        later += [r.value for r in records]
                except CorruptRecordError:
                    errors += 1  # raised again for the same offset, until a seek past it
            assert consumer.position(TopicPartition(TOPIC, 0)) == 3

            # Seeking past it goes on with the records after it.
            consumer.seek(TopicPartition(TOPIC, 0), 4)
            after: list[bytes] = []
            while not after:
                assert time.monotonic() < deadline
                for records in consumer.poll(200).values():
                    after += [r.value for r in records]
            assert after == [b"p0-after"]
        finally:
            consumer.close()
