"""Fetch responses queued while retention deletes their segments still carry the right bytes.

A fetch response served with sendfile holds a slice of a segment file. Before the fix the
broker duplicated the segment's fd only when it started sending: a response waiting behind
others (a slow reader, pipelined fetches) could find its segment deleted by retention in the
meantime, its fd closed, and the fd number taken by a newer segment, so the client got another
file's bytes or a frame that never completed.

Here a raw client pipelines fetches for every offset of a partition, reading nothing, so the
responses queue up on the broker with their slices taken; more records are produced so that
retention (by size, checked every 100 ms) deletes the segments under them; then the client
reads every response and checks that each one holds the records of the offset it asked for.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog import protocol
from raftlog.broker.connection import MAX_PENDING_RESPONSE_FDS
from raftlog.client import Admin, Producer
from raftlog.records import iter_records
from raftlog.topics import TopicPartition
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._support import HOST, fetch_body, list_offsets_body, wait_for

TOPIC = "churn"
SEGMENT_BYTES = 64 * 1024
RECORD_BYTES = 1000
RECORDS = 1300  # ~20 segments
RETENTION_BYTES = 10 * SEGMENT_BYTES
# Each response holds one segment's fd: below the bound on those, the broker dispatches every
# fetch (and takes every slice) at once, before retention runs.
FETCHES = MAX_PENDING_RESPONSE_FDS - 6


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, n=1, retention_check_interval_ms=100) as c:
        yield c


def value(offset: int) -> bytes:
    return f"{offset:010d}".encode().ljust(RECORD_BYTES, b".")


def produce(bootstrap: str, first: int, count: int) -> None:
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0, batch_size=4096) as p:
        for offset in range(first, first + count):
            p.send(TOPIC, value(offset))
        p.flush(60)


def log_start(sock: socket.socket) -> int:
    sock.sendall(
        b"".join(
            protocol.encode_request(
                protocol.ApiKey.LIST_OFFSETS,
                0,
                1,
                "t",
                list_offsets_body({TopicPartition(TOPIC, 0): protocol.EARLIEST_TIMESTAMP}),
            )
        )
    )
    decoder = protocol.FrameDecoder()
    while (frame := decoder.next_frame()) is None:
        decoder.feed(sock.recv(65536))
    return int(frame[0][1]["topics"][0][1][0][3])


def test_queued_fetches_survive_retention_deleting_their_segments(node: Cluster) -> None:
    bootstrap = node.bootstrap
    with Admin(bootstrap) as admin:
        admin.create_topic(
            TOPIC,
            1,
            config={"segment.bytes": str(SEGMENT_BYTES), "retention.bytes": str(RETENTION_BYTES)},
        )
    produce(bootstrap, 0, RECORDS // 2)  # under retention.bytes: nothing deleted yet
    port = node.nodes[1].port
    slow = socket.socket()
    # A small receive window: the broker's sends stall after a few responses.
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect((HOST, port))
    wanted = [i % (RECORDS // 2) for i in range(FETCHES)]
    slow.sendall(
        b"".join(
            bytes(part)
            for corr, offset in enumerate(wanted)
            for part in protocol.encode_request(
                protocol.ApiKey.FETCH,
                0,
                corr,
                "slow",
                fetch_body({TopicPartition(TOPIC, 0): offset}, max_wait_ms=0),
            )
        )
    )
    # Retention deletes the early segments while those responses wait to be sent.
    produce(bootstrap, RECORDS // 2, RECORDS)
    with socket.create_connection((HOST, port)) as probe:
        wait_for(lambda: log_start(probe) > RECORDS // 2, 30, "retention deleting segments")
    # Now read everything: every response must hold the records of the offset it asked for.
    slow.settimeout(60)
    decoder = protocol.FrameDecoder()
    answered = 0
    started = time.monotonic()
    while answered < FETCHES:
        frame = decoder.next_frame()
        if frame is None:
            data = slow.recv(1 << 20)
            assert data, f"the broker closed the connection after {answered} responses"
            decoder.feed(data)
            continue
        corr, body = protocol.parse_response_header(frame[0])
        assert corr == answered, (corr, answered)
        [[_, [[_, error, _, _, nbytes, message, _]]]] = body["topics"]
        # Every request was read (and its slice taken) before retention ran.
        assert error == 0, f"fetch {corr}: {message}"
        offsets = []
        for r in iter_records(frame[1]):  # checksums and lengths checked
            assert r.value == value(r.offset), f"fetch {corr}: offset {r.offset} wrong bytes"
            offsets.append(r.offset)
        assert nbytes == len(frame[1])
        assert offsets and offsets[0] <= wanted[corr] <= offsets[-1], (corr, offsets[:3])
        answered += 1
    assert time.monotonic() - started < 60
    slow.close()
