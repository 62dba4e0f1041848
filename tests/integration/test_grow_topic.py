"""A topic grows under a steady acks=all load: the running producer and consumer group use the
new partitions without a restart, and every acknowledged record is in the log once.

Three real nodes, RF 3, min.insync.replicas 2. The producer sends keyless records (the
sticky partitioner spreads them over every partition it knows) with a short
metadata_max_age_ms, so it learns of the new partitions by its periodic refresh; the group's
members learn of them by the rebalance the metadata quorum starts when the topic grows; a
consumer without a group, subscribed to the topic, by its own periodic metadata refresh.
"""

from __future__ import annotations

import threading
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin, Consumer, Producer, RecordFuture
from raftlog.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    UnknownTopicOrPartitionError,
)
from raftlog.topics import TopicPartition
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._group_member import ThreadMember
from tests.integration._support import wait_for

TOPIC = "growing"
GROUP = "growers"
BEFORE, AFTER = 2, 5
WAIT_S = 60


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, 3) as c:
        yield c


class Production:
    """Keyless acks=all records until stopped; each acknowledged one's value and partition."""

    def __init__(self, bootstrap: str):
        self.stopped = threading.Event()
        self.acked: list[tuple[bytes, int]] = []
        self.error: BaseException | None = None
        self.trace = ""
        self._futures: list[tuple[bytes, RecordFuture]] = []
        self.thread = threading.Thread(target=self._run, args=(bootstrap,), daemon=True)
        self.thread.start()

    def _run(self, bootstrap: str) -> None:
        try:
            with Producer(
                bootstrap_servers=bootstrap,
                acks="all",
                linger_ms=2,
                batch_size=512,  # small batches: the sticky partitioner moves on often
                metadata_max_age_ms=500,
            ) as p:
                i = 0
                while not self.stopped.wait(0.002):
                    value = b"v%d" % i
                    self._futures.append((value, p.send(TOPIC, value)))
                    i += 1
                    self._collect()
                p.flush(30)
                self._collect(final=True)
        except BaseException as e:
            self.error = e
            self.trace = traceback.format_exc()

    def _collect(self, final: bool = False) -> None:
        while self._futures and (final or self._futures[0][1].done()):
            value, fut = self._futures.pop(0)
            self.acked.append((value, fut.result(30).partition))

    def partitions(self) -> set[int]:
        return {p for _, p in list(self.acked)}

    def stop(self) -> list[tuple[bytes, int]]:
        self.stopped.set()
        self.thread.join(60)
        assert not self.thread.is_alive() and self.error is None, self.trace
        return self.acked


class Reader:
    """A consumer without a group, subscribed to the whole topic: the partitions it read."""

    def __init__(self, bootstrap: str):
        self.seen: set[int] = set()
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(bootstrap,), daemon=True)
        self.thread.start()

    def _run(self, bootstrap: str) -> None:
        try:
            with Consumer(
                TOPIC,
                bootstrap_servers=bootstrap,
                auto_offset_reset="earliest",
                metadata_max_age_ms=500,
                fetch_max_wait_ms=100,
            ) as c:
                while not self.stopped.is_set():
                    self.seen.update(tp.partition for tp in c.poll(100))
        except BaseException as e:
            self.error = e

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(60)
        assert not self.thread.is_alive() and self.error is None, self.error


def read_all(bootstrap: str, partitions: int) -> list[bytes]:
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    with Admin(bootstrap) as admin:
        ends = {tp: end for tp, (end, _) in admin.list_offsets({tp: -1 for tp in tps}).items()}
    values: list[bytes] = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        got = Counter[TopicPartition]()

        def done() -> bool:
            for tp, records in c.poll(200).items():
                got[tp] += len(records)
                values.extend(r.value for r in records)
            return all(got[tp] >= ends[tp] for tp in tps)

        wait_for(done, WAIT_S, f"every record of {TOPIC} read back")
    return values


def test_a_topic_grows_under_load_and_its_producer_and_group_use_the_new_partitions(
    cluster: Cluster,
) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, BEFORE, 3, {"min.insync.replicas": "2"})
        production = Production(cluster.bootstrap)
        members = [ThreadMember(cluster.bootstrap, GROUP, TOPIC, f"m{i}") for i in range(2)]
        reader = Reader(cluster.bootstrap)
        try:
            wait_for(
                lambda: (
                    production.partitions() == set(range(BEFORE))
                    and all(m.partitions() for m in members)
                ),
                WAIT_S,
                "records in both partitions, consumed by both members",
            )
            with pytest.raises(InvalidPartitionsError, match="has 2 partitions"):
                admin.create_partitions(TOPIC, 1)
            with pytest.raises(InvalidReplicaAssignmentError, match="named twice"):
                admin.create_partitions(TOPIC, 3, [[1, 1, 2]])
            admin.create_partitions(TOPIC, AFTER, validate_only=True)
            assert len(admin.list_topics()[TOPIC].partitions) == BEFORE

            admin.create_partitions(TOPIC, AFTER)
            topic = admin.list_topics()[TOPIC]
            assert len(topic.partitions) == AFTER
            assert all(len(p.replicas) == 3 for p in topic.partitions)

            new = set(range(BEFORE, AFTER))
            wait_for(
                lambda: new <= production.partitions(),
                WAIT_S,
                f"the running producer's records acknowledged in partitions {sorted(new)}",
            )
            wait_for(
                lambda: new <= members[0].partitions() | members[1].partitions(),
                WAIT_S,
                f"the running group's members consuming partitions {sorted(new)}",
            )
            wait_for(
                lambda: new <= reader.seen,
                WAIT_S,
                f"the running consumer without a group reading partitions {sorted(new)}",
            )
        finally:
            acked = production.stop()
            for m in members:
                m.stop()
            reader.stop()

    values = read_all(cluster.bootstrap, AFTER)
    counts = Counter(values)
    acked_values = [v for v, _ in acked]
    lost = [v for v in acked_values if counts[v] == 0]
    twice = [v for v, n in counts.items() if n > 1]
    assert not lost and not twice, (len(acked_values), lost[:5], twice[:5])
    assert {p for _, p in acked} == set(range(AFTER))


def test_a_partition_named_explicitly_after_growth_is_found_by_asking_again(
    cluster: Cluster,
) -> None:
    """A producer whose metadata predates the growth sends to a new partition by number: it
    asks for the topic's metadata again instead of refusing (Kafka's producer waits for
    metadata naming the partition); a partition that does not exist is still refused."""
    with Admin(cluster.bootstrap) as admin, Producer(bootstrap_servers=cluster.bootstrap) as p:
        admin.create_topic(TOPIC, BEFORE, 3)
        assert p.send(TOPIC, b"before", partition=0).result(30).partition == 0
        assert p.partitions_for(TOPIC) == BEFORE  # cached from now on
        admin.create_partitions(TOPIC, AFTER)
        wait_for(
            lambda: all(
                len(v["partitions"]) == AFTER
                for v in (cluster.describe(n.node_id) for n in cluster.live())
                if v
            ),
            WAIT_S,
            "every node's metadata with the new partitions",
        )
        md = p.send(TOPIC, b"after", partition=AFTER - 1).result(30)
        assert (md.partition, md.offset) == (AFTER - 1, 0)
        md = p.send_many(TOPIC, [b"a", b"b"], partition=AFTER - 2)
        p.flush(30)
        assert p.partitions_for(TOPIC) == AFTER
        with pytest.raises(UnknownTopicOrPartitionError, match=f"partition {AFTER} of topic"):
            p.send(TOPIC, b"nowhere", partition=AFTER)
