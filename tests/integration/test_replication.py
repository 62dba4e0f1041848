"""Partition replication with real processes: what acks=all promises, under kill -9 and SIGSTOP.

Three combined controller+broker nodes; topics with replication factor 3 and
min.insync.replicas 2; `replica_lag_time_max_ms` short so ISR changes happen in seconds. Each
test checks the promises, not the mechanism:
- every acks=all acknowledgement names a record that is read back at that offset, after the
  leader's kill -9, a full-cluster kill -9, a paused follower;
- no offset ever holds two values (offsets are never reused);
- acks=all is refused while the ISR is below the minimum, and works again after;
- a deposed leader with records nobody else has truncates them when it returns;
- after healing, every replica's log is byte-identical below the high watermark.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog.client import Admin, Consumer, Producer
from raftlog.errors import NotEnoughReplicasError, RaftlogError
from raftlog.records import HEADER, LOG_OVERHEAD
from raftlog.storage.checkpoint import PartitionOffsets
from raftlog.topics import TopicPartition
from tests.integration._cluster import Cluster, Describe, NodeProcess, started_cluster
from tests.integration._support import wait_for

SESSION_TIMEOUT_MS = 1500
REPLICA_LAG_MS = 2000
SETTLE_S = 30.0
# Generous for a loaded 2-core machine; a healthy cluster meets each with a wide margin.
CHANGE_S = 30.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(
        tmp_path,
        3,
        SESSION_TIMEOUT_MS,
        SETTLE_S,
        replica_lag_time_max_ms=REPLICA_LAG_MS,
    ) as c:
        yield c


# -- helpers ------------------------------------------------------------------------------------


def create(c: Cluster, topic: str, partitions: int = 1, min_isr: int = 2) -> None:
    with Admin(c.bootstrap) as admin:
        admin.create_topic(topic, partitions, 3, {"min.insync.replicas": str(min_isr)})
    wait_in_sync(c, topic)


def partition(d: Describe, topic: str, p: int = 0) -> dict[str, Any]:
    """The partition in a node's view; one with no leader and no ISR where that node has not
    applied the topic's creation yet (its view may lag the quorum's)."""
    for part in d["partitions"]:
        if part["topic"] == topic and part["partition"] == p:
            return dict(part)
    return {"topic": topic, "partition": p, "leader": -1, "isr": [], "replicas": [-1], "elr": []}


def wait_in_sync(c: Cluster, topic: str, partitions: int = 1) -> Describe:
    """Every partition of `topic` led, with all three replicas in its ISR."""

    def ok(d: Describe) -> bool:
        return all(
            partition(d, topic, p)["leader"] >= 0
            and sorted(partition(d, topic, p)["isr"]) == sorted(partition(d, topic, p)["replicas"])
            for p in range(partitions)
        )

    # Every live node's view: one that has just come back (SIGCONT) still shows the old ISR.
    return c.wait_every_view(ok, CHANGE_S, f"every replica of {topic} in sync")[0]


@contextlib.contextmanager
def paused(*nodes: NodeProcess) -> Iterator[None]:
    """SIGSTOP (a frozen VM, a long GC pause); SIGCONT on the way out, always."""
    for n in nodes:
        assert n.proc is not None
        n.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for n in nodes:
            assert n.proc is not None
            n.proc.send_signal(signal.SIGCONT)


class Sender:
    """An acks=all producer in a thread, sending unique values and recording every
    acknowledgement: value -> (partition, offset)."""

    def __init__(self, bootstrap: str, topic: str, count: int, partitions: int = 1):
        self.topic = topic
        self.count = count
        self.partitions = partitions
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: list[BaseException] = []
        self._lock = threading.Lock()
        self._producer = Producer(
            bootstrap_servers=bootstrap,
            acks="all",
            linger_ms=2,
            delivery_timeout_ms=60_000,
            retry_backoff_ms=50,
        )
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sender:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(120)
        self._producer.close()

    def _run(self) -> None:
        for i in range(self.count):
            value = b"v-%06d" % i
            fut = self._producer.send(self.topic, value, partition=i % self.partitions)
            fut.add_done_callback(lambda f, v=value: self._done(v, f))
            if i % 50 == 49:
                time.sleep(0.005)  # a steady stream, not one burst
        self._producer.flush(100)

    def _done(self, value: bytes, fut: Any) -> None:
        error = fut.exception(0)
        with self._lock:
            if error is not None:
                self.failed.append(error)
            else:
                md = fut.result(0)
                self.acked[value] = (md.partition, md.offset)

    def wait_acked(self, n: int) -> None:
        wait_for(lambda: len(self.acked) >= n or None, CHANGE_S, f"{n} acknowledged sends")

    def done(self) -> None:
        self._thread.join(120)
        assert not self._thread.is_alive(), "the producer did not finish"


def read_everything(bootstrap: str, topic: str, partitions: int = 1) -> dict[int, dict[int, bytes]]:
    """partition -> offset -> value, from the log start to the high watermark."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    out: dict[int, dict[int, bytes]] = {p: {} for p in range(partitions)}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "could not read everything in 60 s"
            for tp, records in consumer.poll(timeout_ms=500).items():
                for r in records:
                    assert r.offset not in out[tp.partition], f"offset {r.offset} read twice"
                    out[tp.partition][r.offset] = r.value
    return out


def check_acked(sender: Sender, read: dict[int, dict[int, bytes]]) -> None:
    """Every acknowledged value is at its acknowledged offset; nothing acked is lost."""
    missing = [(v, p, o) for v, (p, o) in sorted(sender.acked.items()) if read[p].get(o) != v]
    assert not missing, f"{len(missing)} acknowledged records lost or moved, e.g. {missing[:5]}"


def checkpointed_hw(c: Cluster, node_id: int, topic: str, p: int) -> int:
    path = c.nodes[node_id].data_dir / "replication-offset-checkpoint"
    return PartitionOffsets(str(path)).read().get((topic, p), ("", 0))[1]


def replica_prefix(c: Cluster, node_id: int, topic: str, p: int, hw: int) -> tuple[bytes, int]:
    """The bytes of a stopped replica's batches that end at or below `hw`, and where they end."""
    path = c.nodes[node_id].data_dir / "logs" / f"{topic}-{p}"
    data = b"".join(
        (path / name).read_bytes() for name in sorted(os.listdir(path)) if name.endswith(".log")
    )
    pos, end_offset = 0, 0
    while pos + HEADER.size <= len(data):
        header = HEADER.unpack_from(data, pos)
        base, length, count = header[0], header[1], header[-1]
        if base + count > hw:
            break
        pos += LOG_OVERHEAD + length
        end_offset = base + count
    return data[:pos], end_offset


def check_replicas_identical(c: Cluster, topic: str, p: int = 0) -> None:
    """Every replica holds byte-identical batches below the high watermark. The leader's
    checkpointed HW is the highest (a follower learns it from its next fetch, as in Kafka, so
    one stopped right after the HW moved has an older one); every replica was in the ISR, so
    each must hold everything below it."""
    # All at once, as operators stop a cluster: one by one, the last ones stop without a quorum.
    problems = c.shutdown_and_check()
    assert not problems, "\n".join(problems)
    hw = max(checkpointed_hw(c, n, topic, p) for n in c.nodes)
    assert hw > 0, f"no replica of {topic}-{p} checkpointed a high watermark"
    prefixes = {n: replica_prefix(c, n, topic, p, hw) for n in c.nodes}
    ends = {n: end for n, (_, end) in prefixes.items()}
    assert set(ends.values()) == {hw}, f"replicas end below the HW {hw}: {ends}"
    sizes = {n: len(data) for n, (data, _) in prefixes.items()}
    assert len({data for data, _ in prefixes.values()}) == 1, (
        f"replicas differ below the high watermark {hw}: {sizes}"
    )


def leader_of(c: Cluster, topic: str, p: int = 0) -> int:
    return int(
        partition(
            c.wait_view(
                lambda d: partition(d, topic, p)["leader"] >= 0, CHANGE_S, f"{topic}-{p} led"
            ),
            topic,
            p,
        )["leader"]
    )


# -- the tests ------------------------------------------------------------------------------------


def test_kill9_of_the_leader_while_producing_acks_all_loses_nothing(cluster: Cluster) -> None:
    create(cluster, "orders", partitions=3)
    victim = leader_of(cluster, "orders", 0)
    with Sender(cluster.bootstrap, "orders", 6000, partitions=3) as sender:
        sender.wait_acked(1500)
        t0 = time.monotonic()
        cluster.kill9(victim)
        sender.wait_acked(len(sender.acked) + 300)  # acks flow again, through new leaders
        print(f"\nacks resumed {time.monotonic() - t0:.2f} s after kill -9 of leader {victim}")
        sender.done()
    assert not sender.failed, sender.failed[:3]
    assert len(sender.acked) == 6000
    cluster.nodes[victim].start()
    wait_in_sync(cluster, "orders", 3)  # the old leader caught up and rejoined every ISR
    read = read_everything(cluster.bootstrap, "orders", 3)
    check_acked(sender, read)
    for p in range(3):
        check_replicas_identical(cluster, "orders", p)


def test_full_cluster_kill9_and_restart_keeps_every_acknowledged_record(cluster: Cluster) -> None:
    create(cluster, "ledger", partitions=2)
    with Sender(cluster.bootstrap, "ledger", 3000, partitions=2) as sender:
        sender.done()
    assert len(sender.acked) == 3000, sender.failed[:3]
    cluster.kill9(*cluster.nodes)
    cluster.start()
    cluster.wait_brokers_settled(SETTLE_S)
    wait_in_sync(cluster, "ledger", 2)
    check_acked(sender, read_everything(cluster.bootstrap, "ledger", 2))
    check_replicas_identical(cluster, "ledger", 0)


def test_paused_follower_leaves_the_isr_and_rejoins(cluster: Cluster) -> None:
    create(cluster, "clicks")
    leader = leader_of(cluster, "clicks")
    follower = next(n for n in cluster.nodes if n != leader)
    with paused(cluster.nodes[follower]):
        shrunk = cluster.wait_view(
            lambda d: (
                follower not in partition(d, "clicks")["isr"]
                and partition(d, "clicks")["leader"] >= 0
            ),
            CHANGE_S,
            f"paused follower {follower} out of the ISR",
            via=leader,
        )
        assert len(partition(shrunk, "clicks")["isr"]) == 2
        # Two replicas are still the minimum: acks=all goes on without the paused one.
        with Sender(cluster.bootstrap, "clicks", 500) as sender:
            sender.done()
        assert len(sender.acked) == 500, sender.failed[:3]
    wait_in_sync(cluster, "clicks")
    check_acked(sender, read_everything(cluster.bootstrap, "clicks"))
    check_replicas_identical(cluster, "clicks")


def test_acks_all_is_refused_below_min_insync_replicas_and_works_again_after(
    cluster: Cluster,
) -> None:
    """min.insync.replicas 3 of 3 and one follower paused: the ISR shrinks to two (the
    metadata quorum keeps its majority), below the minimum, so acks=all is refused with
    NotEnoughReplicasError before the append; acks=1 still works; after SIGCONT the follower
    catches up, rejoins, and acks=all works again."""
    create(cluster, "payments", min_isr=3)
    leader = leader_of(cluster, "payments")
    follower = next(n for n in cluster.nodes if n != leader)
    with paused(cluster.nodes[follower]):
        cluster.wait_view(
            lambda d: (
                follower not in partition(d, "payments")["isr"]
                and partition(d, "payments")["leader"] >= 0
            ),
            CHANGE_S,
            f"the ISR without paused follower {follower}",
            via=leader,
        )
        with Producer(
            bootstrap_servers=cluster.nodes[leader].bootstrap,
            acks="all",
            delivery_timeout_ms=3000,
            retry_backoff_ms=100,
        ) as producer:
            fut = producer.send("payments", b"refused", partition=0)
            with pytest.raises(RaftlogError) as e:
                fut.result(20)
            assert isinstance(e.value, NotEnoughReplicasError) or isinstance(
                e.value.__cause__, NotEnoughReplicasError
            ), repr(e.value)
        # acks=1 is still taken: it promises only the leader's log.
        with Producer(bootstrap_servers=cluster.nodes[leader].bootstrap, acks=1) as producer:
            assert producer.send("payments", b"acks-1", partition=0).result(20).offset == 0
    wait_in_sync(cluster, "payments")
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as producer:
        assert producer.send("payments", b"after", partition=0).result(30).offset == 1
    assert read_everything(cluster.bootstrap, "payments")[0] == {0: b"acks-1", 1: b"after"}


def test_a_deposed_leader_truncates_what_only_it_had(cluster: Cluster) -> None:
    """The old leader appends records with acks=1 that no follower fetched, dies; a follower
    takes over from the ISR and writes other records at those offsets; the old leader comes
    back, truncates its divergent tail by leader epochs (KIP-279), and ends identical."""
    create(cluster, "audit", min_isr=1)
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as producer:
        for i in range(100):
            producer.send("audit", b"common-%d" % i, partition=0)
        producer.flush(30)
    old = leader_of(cluster, "audit")
    followers = [cluster.nodes[n] for n in cluster.nodes if n != old]
    with paused(*followers):
        with Producer(bootstrap_servers=cluster.nodes[old].bootstrap, acks=1) as producer:
            # A paused follower's fetch may be pending at the leader: the first appends after
            # the pause answer it (into a socket nobody reads until SIGCONT). One response
            # per follower at most: of 20 appends, each its own round trip, the last ones
            # reach no follower.
            tail = []
            for i in range(20):
                tail.append(producer.send("audit", b"lost-%d" % i, partition=0))
                producer.flush(10)
            assert [f.result(0).offset for f in tail] == list(range(100, 120))
        cluster.kill9(old)
    # Two of three controllers were paused: the quorum resumes with them, fences the dead
    # broker after its session, and elects a leader from the ISR.
    cluster.wait_view(
        lambda d: partition(d, "audit")["leader"] not in (old, -1),
        CHANGE_S,
        f"a leader of audit-0 other than {old}",
    )
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as producer:
        kept = [producer.send("audit", b"new-%d" % i, partition=0) for i in range(30)]
        producer.flush(30)
        first = kept[0].result(0).offset
        assert 100 <= first < 120, first  # the new leader lacks the old one's last appends
        assert [f.result(0).offset for f in kept] == list(range(first, first + 30))
    cluster.nodes[old].start()
    wait_in_sync(cluster, "audit")
    read = read_everything(cluster.bootstrap, "audit")[0]
    assert [read[o] for o in range(first, first + 30)] == [b"new-%d" % i for i in range(30)]
    assert len(read) == first + 30
    # What the old leader alone had is gone from it too (truncated), and nowhere else.
    assert [read[o] for o in range(100, first)] == [b"lost-%d" % i for i in range(first - 100)]
    check_replicas_identical(cluster, "audit")


def written_with_old_segments(cluster: Cluster, topic: str) -> tuple[Sender, int, Path]:
    """`topic` (RF 3, 16 KiB segments) with 4,000 acknowledged records: the sender, a follower
    and a segment file in the middle of that follower's log."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, 1, 3, {"min.insync.replicas": "2", "segment.bytes": "16384"})
    wait_in_sync(cluster, topic)
    with Sender(cluster.bootstrap, topic, 4000) as sender:
        sender.done()
    assert len(sender.acked) == 4000, sender.failed[:3]
    victim = next(n for n in cluster.nodes if n != leader_of(cluster, topic))
    part = cluster.nodes[victim].data_dir / "logs" / f"{topic}-0"
    segments = sorted(part.glob("*.log"))
    assert len(segments) >= 5, segments
    return sender, victim, segments[len(segments) // 2]


def healed_from_the_leader(
    cluster: Cluster, topic: str, sender: Sender, victim: int, target: Path
) -> Path:
    """Waits for `victim` to set its damaged log aside under `damaged/`, rejoin the ISR and
    hold every acknowledged record, identical to the others; the damaged copy of `target`."""
    damaged = cluster.nodes[victim].data_dir / "damaged"
    wait_for(
        lambda: (damaged.is_dir() and any(damaged.iterdir())) or None,
        CHANGE_S,
        f"node {victim} set its damaged log aside",
    )
    (aside,) = list(damaged.iterdir())
    wait_in_sync(cluster, topic)
    check_acked(sender, read_everything(cluster.bootstrap, topic))
    check_replicas_identical(cluster, topic)
    return aside / target.name


def test_a_damaged_follower_leaves_the_isr_and_heals_from_the_leader(cluster: Cluster) -> None:
    """Damage below a follower's recovery point (4 bytes of a batch length in a middle segment
    of a cleanly stopped log): the follower reports its replica offline, the metadata takes it
    out of the ISR, and it heals by itself: its files are set aside under `damaged/` (nothing
    deleted) and it refetches the partition from the leader, rejoins the ISR, ends identical."""
    topic = "healing"
    sender, victim, target = written_with_old_segments(cluster, topic)
    node = cluster.nodes[victim]
    assert node.stop() == 0, node.log_tail()
    data = target.read_bytes()
    pos = last = 0
    while pos < len(data):
        last = pos
        pos += HEADER.unpack_from(data, pos)[1] + LOG_OVERHEAD
    with open(target, "r+b") as f:
        f.seek(last + 8)
        f.write(struct.pack("<i", 0x7FFFFFF0))

    node.start()
    aside = healed_from_the_leader(cluster, topic, sender, victim, target)
    assert aside.read_bytes()[last + 8 : last + 12] == struct.pack("<i", 0x7FFFFFF0)


def test_a_flipped_byte_in_a_running_followers_old_segment_is_found_and_healed(
    cluster: Cluster,
) -> None:
    """A byte flipped in an old segment of a follower that keeps running: reads would serve it
    (no checksum check on the fetch path), so the broker's scrubber must find it, take the
    replica offline, set its files aside and refetch them: never a consumer's job."""
    topic = "scrubbed"
    sender, victim, target = written_with_old_segments(cluster, topic)
    node = cluster.nodes[victim]
    size = HEADER.unpack_from(target.read_bytes(), 0)[1] + LOG_OVERHEAD
    with open(target, "r+b") as f:  # the first batch's last byte: a record, checksummed
        f.seek(size - 1)
        byte = f.read(1)
        f.seek(size - 1)
        f.write(bytes([byte[0] ^ 0xFF]))

    aside = healed_from_the_leader(cluster, topic, sender, victim, target)
    assert aside.read_bytes()[size - 1] == byte[0] ^ 0xFF
    assert "found by the scrubber" in node.stderr_path.read_text(errors="replace")
