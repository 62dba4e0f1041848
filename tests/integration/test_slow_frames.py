"""Slow frames cannot lock a broker out (issue 21, part 1), on a real three-node cluster.

The attack: three connections to a partition leader's client listener each send a frame prefix
announcing a third of `queued_request_bytes_max` (~85 MiB) and then one byte every 5 s. Before
the fix each announced frame was reserved whole from the request-memory pool, so the three held
all of it but a few bytes while sending nothing. The next request that arrived in more than one
socket read (any large produce request: here a producer of 512 KiB records, ordinary traffic)
then found no room, waited holding what it had read, and so filled the pool: the broker stopped
reading every connection, the followers' fetches of its partitions among them, and acks=all
failed once the ISRs shrank.

While the attack lasts, acks=all produce to two partitions the attacked broker leads must succeed
within 2 s (the issue's figure), every ISR must stay full, and Admin requests to the attacked
broker must answer. Then a broker with a short `request_receive_ms_max` closes trickling
connections at their deadline and logs one WARNING per connection naming its address. And
replication never waits behind client frames: with the leader's client pool full of one
stalled frame's real bytes (what a client may still do, until its frame deadline), the
followers fetch through the replication listener and every ISR stays full.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog import protocol
from raftlog.broker.config import BrokerConfig
from raftlog.client import Admin, Producer
from raftlog.records import encode_batch
from raftlog.topics import TopicPartition
from tests.integration._cluster import Cluster, Describe, started_cluster
from tests.integration._support import HOST, RawClient, produce_body, wait_for

DEFAULTS = BrokerConfig(data_dir="unused")
SESSION_TIMEOUT_MS = 1500
# Short, so that a follower whose fetches stall leaves the ISR within the attack's window.
REPLICA_LAG_MS = 2000
# The bound on an acks=all produce during the attack.
ACKS_ALL_S_MAX = 2.0
# How long the attack runs while the checks go on: several replica lag times.
ATTACK_S = 5 * REPLICA_LAG_MS / 1000
TRICKLE_INTERVAL_S = 5.0
# Ordinary large records sent to the attacked broker meanwhile: their requests arrive in several
# socket reads (asyncio reads at most 256 KiB at a time).
BULK_RECORD_BYTES = 512 * 1024
TOPIC = "slow-frames"
PARTITIONS = 6


class Trickler:
    """One connection announcing a frame of `frame_length` bytes (the prefix's first field),
    then sending one byte of it every TRICKLE_INTERVAL_S from a thread until closed."""

    def __init__(self, host: str, port: int, frame_length: int):
        self.sock = socket.create_connection((host, port))
        self.sock.sendall(struct.pack("<II", frame_length, 32))
        self.stop = threading.Event()
        self.closed_by_broker = threading.Event()
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self) -> None:
        while not self.stop.wait(TRICKLE_INTERVAL_S):
            try:
                self.sock.sendall(b"\x90")
            except OSError:
                self.closed_by_broker.set()
                return

    def broker_closed(self) -> bool:
        """Whether the broker closed this connection (it sent EOF or reset it)."""
        if self.closed_by_broker.is_set():
            return True
        self.sock.setblocking(False)
        try:
            data = self.sock.recv(1)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        finally:
            self.sock.setblocking(True)
        if not data:
            self.closed_by_broker.set()
        return not data

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@contextlib.contextmanager
def attack(host: str, port: int, frame_length: int, n: int = 3) -> Iterator[list[Trickler]]:
    tricklers = [Trickler(host, port, frame_length) for _ in range(n)]
    try:
        yield tricklers
    finally:
        for t in tricklers:
            t.close()


def pool_third() -> int:
    """A frame length that three connections announcing it reserve the whole pool with (the
    issue's ~85 MiB): 4 + frame_length each."""
    return DEFAULTS.queued_request_bytes_max // 3 - 4


def partitions_of(d: Describe) -> list[dict[str, Any]]:
    return [p for p in d["partitions"] if p["topic"] == TOPIC]


def all_in_sync(d: Describe) -> bool:
    parts = partitions_of(d)
    return len(parts) == PARTITIONS and all(
        p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"]) for p in parts
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(
        tmp_path, 3, SESSION_TIMEOUT_MS, replica_lag_time_max_ms=REPLICA_LAG_MS
    ) as c:
        yield c


def test_slow_frames_do_not_lock_the_leader_out(cluster: Cluster) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    view = cluster.wait_views_agree(all_in_sync, 30, f"{TOPIC}'s partitions led and in sync")
    # The broker leading the most partitions (the metadata spreads 6 over 3: two each).
    led: dict[int, list[int]] = {}
    for p in partitions_of(view):
        led.setdefault(p["leader"], []).append(p["partition"])
    leader, parts = max(led.items(), key=lambda kv: len(kv[1]))
    assert len(parts) >= 2, led
    targets = [TopicPartition(TOPIC, p) for p in parts[:2]]
    node = cluster.nodes[leader]

    latencies_s: list[float] = []
    bulk_futures = []
    with (
        Producer(
            bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=0, request_timeout_ms=10_000
        ) as producer,
        Producer(bootstrap_servers=cluster.bootstrap, acks=1, linger_ms=0) as bulk,
        RawClient(node.host, node.port, timeout_s=ACKS_ALL_S_MAX) as raw,
        attack(node.host, node.port, pool_third()) as tricklers,
    ):
        started = time.monotonic()
        i = 0
        while time.monotonic() - started < ATTACK_S:
            bulk_futures.append(
                bulk.send(TOPIC, b"b" * BULK_RECORD_BYTES, partition=targets[0].partition)
            )
            for tp in targets:
                sent = time.monotonic()
                fut = producer.send(tp.topic, b"v%d" % i, partition=tp.partition)
                offset = fut.result(timeout=30).offset
                latencies_s.append(time.monotonic() - sent)
                assert offset >= 0
                i += 1
            d = cluster.describe(leader)  # an Admin call the attacked broker answers
            assert all_in_sync(d), f"an ISR shrank during the attack: {partitions_of(d)}"
            # And on a connection kept open, as a real client's is.
            body, _ = raw.request(protocol.ApiKey.DESCRIBE_CONFIGS, {"topics": [TOPIC]})
            assert body["topics"][0]["error"] == 0, body
            body, _ = raw.request(protocol.ApiKey.INIT_PRODUCER_ID, {})
            assert body.get("producer_id", -1) >= 0, body
        assert all(f.result(timeout=30).offset >= 0 for f in bulk_futures)
        # The attack held throughout: no trickling connection was closed meanwhile (the frame
        # deadline, 30 s by default, is longer than this test).
        assert not any(t.broker_closed() for t in tricklers)
    worst = max(latencies_s)
    print(
        f"{len(latencies_s)} acks=all produces during the attack: max {worst * 1000:.0f} ms, "
        f"median {sorted(latencies_s)[len(latencies_s) // 2] * 1000:.1f} ms"
    )
    assert worst <= ACKS_ALL_S_MAX, f"an acks=all produce took {worst:.2f} s during the attack"


def test_replication_does_not_wait_behind_a_full_client_pool(tmp_path: Path) -> None:
    pool = 4 * 1024 * 1024
    with started_cluster(
        tmp_path,
        3,
        SESSION_TIMEOUT_MS,
        replica_lag_time_max_ms=REPLICA_LAG_MS,
        queued_request_bytes_max=pool,
        request_bytes_max=pool,
    ) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        view = c.wait_views_agree(all_in_sync, 30, f"{TOPIC}'s partitions led and in sync")
        leader = partitions_of(view)[0]["leader"]
        node = c.nodes[leader]
        with RawClient(node.host, node.port, timeout_s=10) as raw:
            body, _ = raw.request(protocol.ApiKey.API_VERSIONS, {})
            assert body["request_bytes_max"] == pool
            # The oldest frame may read beyond the pool: one frame of the largest size, sent
            # but for its last byte, holds all of it; the client listener then reads nothing
            # else until that frame's deadline (30 s).
            hog = socket.create_connection((node.host, node.port))
            try:
                hog.sendall(struct.pack("<II", pool, 32) + b"\0" * (pool - 5))

                def client_listener_stalled() -> bool:
                    """Whether a request on `raw` goes unanswered (a connection that was
                    reading when the pool filled reads once more before it waits)."""
                    raw.send_request(protocol.ApiKey.API_VERSIONS, {})
                    if raw.response_pending(within_s=1.0):
                        return True
                    raw.recv_response()
                    return False

                wait_for(client_listener_stalled, 30, "the leader's client pool full")
                # Records the followers must fetch to stay in sync (a new connection's first
                # read is still handled: it came in before the broker could look at the pool).
                batch = encode_batch([(None, b"while the client pool is full")])
                with RawClient(node.host, node.port, timeout_s=10) as producer:
                    body, _ = producer.request(
                        protocol.ApiKey.PRODUCE,
                        produce_body(TOPIC, {partitions_of(view)[0]["partition"]: len(batch)}),
                        [batch],
                    )
                    assert body["topics"][0][1][0][1] == 0, body
                # Meanwhile the followers fetch them through the replication listener.
                other = next(i for i in c.nodes if i != leader)
                deadline = time.monotonic() + 3 * REPLICA_LAG_MS / 1000
                while time.monotonic() < deadline:
                    d = c.describe(other)
                    assert all_in_sync(d), f"an ISR shrank: {partitions_of(d)}"
                assert raw.response_pending(within_s=0), "the client pool emptied meanwhile"
            finally:
                hog.close()
            # Released: the waiting request is answered.
            _, body, _ = raw.recv_response()
            assert "apis" in body


def test_trickling_connections_are_closed_at_their_deadline(tmp_path: Path) -> None:
    deadline_ms = 1500
    with started_cluster(tmp_path, 1, request_receive_ms_max=deadline_ms) as c:
        node = c.nodes[1]
        opened = time.monotonic()
        with attack(HOST, node.port, pool_third()) as tricklers:
            wait_for(
                lambda: all(t.broker_closed() for t in tricklers),
                30,
                "the broker closing every trickling connection",
                interval_s=0.05,
            )
            took_s = time.monotonic() - opened
            # Not before its deadline (the broker's clock started after our connect).
            assert took_s >= deadline_ms / 1000 - 0.1, took_s
            ports = [t.sock.getsockname()[1] for t in tricklers]
        log = node.stderr_path.read_text()
        lines = [line for line in log.splitlines() if "request_receive_ms_max" in line]
        # One WARNING per connection, each naming its address and what it had sent.
        assert len(lines) == 3, lines
        for port in ports:
            line = next(x for x in lines if f"{HOST}:{port}" in x)
            assert "WARNING" in line and f"{pool_third() + 4} bytes" in line, line
        # The broker goes on serving.
        with Admin(node.bootstrap) as admin:
            assert admin.describe_cluster()["node_id"] == 1
