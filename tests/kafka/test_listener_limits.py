"""The Kafka listener keeps the native listener's limits (it is the same connection machinery):
a connection limit per address shared with the native listener, the idle timeout, a frame's
deadline, and request memory. Each test runs a one-node cluster with small limits and checks
that the broker still serves a well-behaved client afterwards."""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from tests.integration._cluster import NodeProcess, started_cluster
from tests.integration._support import wait_for
from tests.kafka._raw import KafkaRawClient, request_frame

FLOOD_ADDRESS = "127.0.0.2"  # another client address on this machine (Linux routes 127/8 to lo)

MakeNode = Callable[..., NodeProcess]


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[MakeNode]:
    made = itertools.count()
    with contextlib.ExitStack() as stack:

        def make(**settings: Any) -> NodeProcess:
            root = tmp_path / f"c{next(made)}"
            return stack.enter_context(started_cluster(root, n=1, **settings)).nodes[1]

        yield make


def kafka_address(node: NodeProcess) -> tuple[str, int]:
    host, _, port = str(node.config.kafka_listener).rpartition(":")
    return host, int(port)


def answers(node: NodeProcess) -> bool:
    with KafkaRawClient(str(node.config.kafka_listener)) as c:
        body = c.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest("limits", "1"))
        return ApiVersionsResponse.decode(body, 3).error_code == 0


def closed(sock: socket.socket, within_s: float) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_the_per_address_limit_counts_both_protocols(make_node: MakeNode) -> None:
    node = make_node(connections_per_address_max=4)

    def connect(address: tuple[str, int]) -> socket.socket:
        s = socket.create_connection(address, source_address=(FLOOD_ADDRESS, 0))
        stack.callback(s.close)
        return s

    with contextlib.ExitStack() as stack:
        # Two native and two Kafka connections from one address fill its four.
        native = [connect((node.host, node.port)) for _ in range(2)]
        kafka = [connect(kafka_address(node)) for _ in range(2)]
        refused = connect(kafka_address(node))
        assert closed(refused, 10.0), "a fifth connection from the address was kept"
        assert not closed(kafka[0], 0.5) and not closed(native[0], 0.1)
        assert answers(node)  # another address is not locked out


def test_idle_kafka_connections_are_closed(make_node: MakeNode) -> None:
    node = make_node(connection_idle_ms_max=1000)
    idle = socket.create_connection(kafka_address(node))
    try:
        assert closed(idle, 10.0), "an idle Kafka connection outlived connection_idle_ms_max"
    finally:
        idle.close()
    # One that keeps asking stays open past the idle time.
    with KafkaRawClient(str(node.config.kafka_listener)) as c:
        started = time.monotonic()
        while time.monotonic() - started < 2.5:
            body = c.request(ApiKey.API_VERSIONS, 0, ApiVersionsRequest())
            assert ApiVersionsResponse.decode(body, 0).error_code == 0
            time.sleep(0.3)


def test_a_trickling_kafka_frame_is_closed_at_its_deadline(make_node: MakeNode) -> None:
    node = make_node(request_receive_ms_max=1000)
    frame = request_frame(ApiKey.API_VERSIONS, 0, 1, b"")
    slow = socket.create_connection(kafka_address(node))
    try:
        slow.sendall(frame[:6])  # the size and part of the header, then nothing
        assert closed(slow, 10.0), "a frame that never completed kept its connection"
    finally:
        slow.close()
    assert answers(node)


def test_a_flood_of_huge_kafka_frames_is_bounded_by_request_memory(make_node: MakeNode) -> None:
    """Frames announcing 8 MiB each, sent slowly from many connections: the broker holds at
    most its pool (queued_request_bytes_max) and keeps answering others."""
    node = make_node(queued_request_bytes_max=16 * 1024 * 1024, request_bytes_max=10 * 1024 * 1024)
    socks = []
    try:
        for _ in range(8):
            s = socket.create_connection(kafka_address(node))
            s.sendall(struct.pack(">i", 8 * 1024 * 1024) + b"\x00" * (1024 * 1024))
            socks.append(s)
        wait_for(lambda: answers(node) or None, 30.0, "an answer while the pool is full")
    finally:
        for s in socks:
            s.close()
    assert answers(node)
