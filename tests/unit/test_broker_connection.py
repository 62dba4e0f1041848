"""The broker's Connection with a real Broker and stand-in transports (or a real socket, for
sendfile): internal errors versus malformed requests, the request memory pool, frames over the
limit, the frame deadline, the replication listener, connection limits, idle connections, and
file slices whose segment changes before they are sent."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog import protocol
from raftlog.broker import connection as connection_module
from raftlog.broker.config import BrokerConfig
from raftlog.broker.connection import Connection, Listener, Response
from raftlog.broker.request_memory import READ_BYTES
from raftlog.broker.server import Broker
from raftlog.errors import (
    InvalidRequestError,
    PolicyViolationError,
    RaftlogError,
    RecordTooLargeError,
)
from raftlog.storage import FileSlice

API_VERSIONS = int(protocol.ApiKey.API_VERSIONS)
FETCH = int(protocol.ApiKey.FETCH)
PRODUCE = int(protocol.ApiKey.PRODUCE)
# Deadline for state the event loop reaches within a few iterations.
WAIT_S = 5.0


class FakeTransport(asyncio.Transport):
    """Records what the connection writes and whether it reads."""

    def __init__(self, address: str = "127.0.0.1", port: int = 40000):
        super().__init__()
        self.peer = (address, port)
        self.written = bytearray()
        self.reading = True
        self.closed = False
        self.aborted = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def write(self, data: Any) -> None:
        self.written += data

    def writelines(self, parts: Any) -> None:
        for p in parts:
            self.written += p

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading and not self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def responses(self) -> list[tuple[int, dict[str, Any], bytes]]:
        decoder = protocol.FrameDecoder()
        decoder.feed(bytes(self.written))
        out = []
        while (frame := decoder.next_frame()) is not None:
            corr, body = protocol.parse_response_header(frame[0])
            out.append((corr, body, bytes(frame[1])))
        return out


class _Metadata:
    """No topics: what the handlers these tests call need from the cluster metadata."""

    controller_id = 1

    def topics(self) -> dict[str, Any]:
        return {}

    def partition(self, topic: str, partition: int) -> None:
        return None

    def brokers(self) -> list[Any]:
        return []


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    brokers: list[Broker] = []

    def make(**limits: Any) -> Broker:
        cfg = BrokerConfig(data_dir=str(tmp_path / f"b{len(brokers)}"), port=0, **limits)
        b = Broker(cfg, _Metadata())  # type: ignore[arg-type]
        brokers.append(b)
        return b

    yield make
    for b in brokers:
        b.connections.close()
        b.logs.close()


def connect(broker: Broker, address: str = "127.0.0.1", port: int = 40000) -> Connection:
    conn = Connection(broker)
    conn.connection_made(FakeTransport(address, port))
    return conn


def transport(conn: Connection) -> FakeTransport:
    t = conn.transport
    assert isinstance(t, FakeTransport)
    return t


def request(api: int, corr: int, body: dict[str, Any], payload: bytes = b"") -> bytes:
    parts = protocol.encode_request(api, 0, corr, "test", body, [payload] if payload else [])
    return b"".join(bytes(p) for p in parts)


# -- our bugs versus the client's -----------------------------------------------------------


async def test_a_handler_bug_is_logged_and_answered_as_an_internal_error(
    make_broker: Callable[..., Broker], caplog: pytest.LogCaptureFixture
) -> None:
    broker = make_broker()
    real = broker.handlers[API_VERSIONS]

    def buggy(body: dict[str, Any], payload: memoryview, conn: Connection) -> Any:
        if body.get("boom"):
            return {}["a key the handler forgot"]  # a KeyError: our bug
        return real(body, payload, conn)

    broker.handlers[API_VERSIONS] = buggy
    conn = connect(broker)
    conn.data_received(request(API_VERSIONS, 1, {"boom": True}) + request(API_VERSIONS, 2, {}))
    (c1, bug, _), (c2, fine, _) = transport(conn).responses()
    assert (c1, c2) == (1, 2)
    assert bug["error"] == RaftlogError.code, bug  # not InvalidRequestError: not the client's
    assert "internal error in broker 1 handling the API_VERSIONS request" in bug["message"]
    assert "apis" in fine  # the connection goes on serving
    assert not transport(conn).closed
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.exc_info is not None and record.exc_info[0] is KeyError


async def test_a_bug_in_an_async_handler_is_an_internal_error_too(
    make_broker: Callable[..., Broker], caplog: pytest.LogCaptureFixture
) -> None:
    broker = make_broker()

    async def buggy(body: dict[str, Any], payload: memoryview, conn: Connection) -> Response:
        await asyncio.sleep(0)
        raise TypeError("unsupported operand")

    broker.handlers[API_VERSIONS] = lambda body, payload, conn: buggy(body, payload, conn)
    conn = connect(broker)
    conn.data_received(request(API_VERSIONS, 7, {}))

    async def answered() -> None:
        while not transport(conn).responses():
            await asyncio.sleep(0.001)

    await asyncio.wait_for(answered(), WAIT_S)
    [(corr, body, _)] = transport(conn).responses()
    assert corr == 7 and body["error"] == RaftlogError.code
    assert any(r.exc_info and r.exc_info[0] is TypeError for r in caplog.records)


async def test_a_malformed_body_is_refused_naming_the_field(
    make_broker: Callable[..., Broker], caplog: pytest.LogCaptureFixture
) -> None:
    conn = connect(make_broker())
    bad = {"max_wait_ms": 0, "topics": [["t", [[0, "12", 100]]]]}
    conn.data_received(request(FETCH, 3, bad) + request(API_VERSIONS, 4, {}))
    (_, refused, _), (_, fine, _) = transport(conn).responses()
    assert refused["error"] == InvalidRequestError.code
    assert refused["message"] == (
        "malformed FETCH request: topics[0][1][0][1] (fetch_offset) must be a 64-bit integer, "
        "got '12'"
    )
    assert "apis" in fine
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# -- request memory (queued_request_bytes_max) ----------------------------------------------


def frame_prefix(total: int) -> bytes:
    """The first bytes of an ApiVersions frame of `total` bytes (the rest is payload)."""
    full = request(API_VERSIONS, 1, {})
    return (total - 4).to_bytes(4, "little") + full[4:]


def frame_rest(total: int) -> bytes:
    return b"\0" * (total - len(frame_prefix(total)))


async def test_a_frame_reserves_what_it_lacks_and_waits_when_the_pool_is_full(
    make_broker: Callable[..., Broker],
) -> None:
    broker = make_broker(queued_request_bytes_max=100_000, request_bytes_max=60_000)
    memory = broker.connections.memory
    a, b, c = connect(broker, port=1), connect(broker, port=2), connect(broker, port=3)
    a.data_received(frame_prefix(50_000))
    b.data_received(frame_prefix(40_000))
    # What each frame lacks is reserved (less than one socket read here), before it arrives.
    assert memory.used == 90_000
    assert transport(a).reading and transport(b).reading
    c.data_received(frame_prefix(30_000))
    assert not transport(c).reading, "a frame that does not fit must stop its reader"
    assert memory.used == 90_000 + len(frame_prefix(30_000))  # only what c holds
    a.data_received(frame_rest(50_000))  # a's frame completes and is answered
    assert [corr for corr, _, _ in transport(a).responses()] == [1]
    assert transport(c).reading, "released memory must wake the waiting reader"
    assert memory.used == 40_000 + 30_000


async def test_an_announced_frame_reserves_one_read_not_its_length(
    make_broker: Callable[..., Broker],
) -> None:
    """Issue 21: three connections announcing a third of the pool each, then sending nothing,
    used to reserve all of it; the next request that came in two reads found no room."""
    broker = make_broker()  # the defaults: 256 MiB pool, 100 MiB frames
    pool = broker.config.queued_request_bytes_max
    attackers = [connect(broker, port=p) for p in (1, 2, 3)]
    for conn in attackers:
        conn.data_received(frame_prefix(pool // 3))
    memory = broker.connections.memory
    assert memory.used == 3 * (len(frame_prefix(pool // 3)) + READ_BYTES)
    client = connect(broker, port=4)
    whole = request(API_VERSIONS, 7, {}, b"x" * 1_000_000)
    client.data_received(whole[: len(whole) // 2])
    assert transport(client).reading
    client.data_received(whole[len(whole) // 2 :])
    assert [corr for corr, _, _ in transport(client).responses()] == [7]


async def test_a_closed_connection_releases_its_reservation(
    make_broker: Callable[..., Broker],
) -> None:
    broker = make_broker(queued_request_bytes_max=100_000, request_bytes_max=60_000)
    a, b = connect(broker, port=1), connect(broker, port=2)
    a.data_received(frame_prefix(60_000))
    b.data_received(frame_prefix(60_000))
    assert not transport(b).reading
    a.connection_lost(None)
    assert transport(b).reading
    assert broker.connections.memory.used == 60_000


async def test_the_oldest_frame_reads_on_when_partial_frames_fill_the_pool(
    make_broker: Callable[..., Broker],
) -> None:
    """Counting bytes as they come lets partial frames fill the pool; the oldest one may
    always read on, so they complete one after another instead of waiting for each other."""
    broker = make_broker(queued_request_bytes_max=100_000, request_bytes_max=60_000)
    memory = broker.connections.memory
    conns = [connect(broker, port=p) for p in range(1, 5)]
    half = frame_prefix(60_000) + b"\0" * 20_000
    for conn in conns:
        conn.data_received(half)
    assert memory.used > memory.bytes_max - 20_000  # full of halves
    assert transport(conns[0]).reading  # the oldest
    assert not any(transport(c).reading for c in conns[2:])
    for i, conn in enumerate(conns):
        assert transport(conn).reading, f"connection {i} never got to read on"
        conn.data_received(b"\0" * (60_000 - len(half)))
        assert [corr for corr, _, _ in transport(conn).responses()] == [1]
    assert memory.used == 0


async def test_a_frame_larger_than_the_pool_is_refused(
    make_broker: Callable[..., Broker], caplog: pytest.LogCaptureFixture
) -> None:
    broker = make_broker(queued_request_bytes_max=50_000, request_bytes_max=200_000)
    conn = connect(broker)
    conn.data_received(frame_prefix(60_000))
    [(corr, body, _)] = transport(conn).responses()
    assert corr == 1 and body["error"] == InvalidRequestError.code
    assert body["message"] == (
        "a API_VERSIONS frame of 59996 bytes (after its length field) exceeds broker 1's "
        "queued_request_bytes_max=50000 (all connections' request bytes)"
    )
    conn.data_received(frame_rest(60_000))  # read and dropped, then the connection closes
    assert transport(conn).closed
    assert any(body["message"] in r.getMessage() for r in caplog.records)
    conn.connection_lost(None)
    assert broker.connections.memory.used == 0


# -- frames over the limit ------------------------------------------------------------------


async def test_an_oversized_produce_is_answered_then_dropped_unbuffered_then_closed(
    make_broker: Callable[..., Broker],
) -> None:
    broker = make_broker(request_bytes_max=10_000)
    conn = connect(broker)
    conn.data_received(request(API_VERSIONS, 1, {}))  # answered as usual first
    big = request(PRODUCE, 2, {"acks": -1, "timeout_ms": 1000, "topics": []}, b"r" * 50_000)
    conn.data_received(big[:3000])
    # Answered at once, from the header, before the rest arrives.
    (_, first, _), (corr, body, _) = transport(conn).responses()
    assert "apis" in first and first["request_bytes_max"] == 10_000
    assert corr == 2 and body["error"] == RecordTooLargeError.code, body
    assert body["message"] == (
        f"a PRODUCE frame of {len(big) - 4} bytes (after its length field) exceeds broker 1's "
        "request_bytes_max=10000"
    )
    for at in range(3000, len(big), 7000):
        assert not transport(conn).closed
        conn.data_received(big[at : at + 7000])
        assert conn._decoder.buffered_bytes == 0  # dropped, never buffered
        assert broker.connections.memory.used == 0
    assert transport(conn).closed  # once the whole frame is read
    assert len(transport(conn).responses()) == 2


async def test_an_oversized_frame_whose_header_cannot_be_read_closes_at_once(
    make_broker: Callable[..., Broker],
) -> None:
    broker = make_broker(request_bytes_max=10_000)
    conn = connect(broker)
    # A header length beyond what is read of an oversized frame (OVERSIZED_HEADER_BYTES_MAX).
    conn.data_received(struct.pack("<II", 10**6, 200_000))
    assert transport(conn).closed and transport(conn).responses() == []


# -- the frame deadline (request_receive_ms_max) --------------------------------------------


async def test_a_frame_that_does_not_arrive_in_time_closes_its_connection(
    make_broker: Callable[..., Broker], caplog: pytest.LogCaptureFixture
) -> None:
    broker = make_broker(request_receive_ms_max=50)
    slow, fast = connect(broker, port=1), connect(broker, port=2)
    slow.data_received(frame_prefix(5000))
    whole = request(API_VERSIONS, 3, {})
    fast.data_received(whole[:5])
    fast.data_received(whole[5:])  # complete in time: its timer stops

    async def closed() -> None:
        while not transport(slow).closed:
            slow.data_received(b"\0")  # trickling does not help
            await asyncio.sleep(0.01)

    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(closed(), WAIT_S)
    assert asyncio.get_running_loop().time() - started >= 0.04
    assert not transport(fast).closed
    [line] = [r.getMessage() for r in caplog.records if "request_receive_ms_max" in r.getMessage()]
    assert line.startswith(
        "closing connection from 127.0.0.1:1: its frame of 5000 bytes did not arrive within "
        "request_receive_ms_max=50 ("
    ), line
    # What it held is back at once, not when its transport has flushed and gone.
    assert broker.connections.memory.used == 0 and broker.connections.memory.oldest is None


async def test_slow_frame_closes_are_logged_a_few_per_interval_then_counted(
    make_broker: Callable[..., Broker],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection_module, "SLOW_FRAME_LOG_INTERVAL_S", 0.2)
    broker = make_broker(request_receive_ms_max=20)
    conns = [connect(broker, port=p) for p in range(1, 31)]
    for conn in conns:
        conn.data_received(frame_prefix(5000))

    def lines() -> list[str]:
        messages = [r.getMessage() for r in caplog.records]
        return [m for m in messages if "request_receive_ms_max" in m]

    async def summary() -> None:
        while len(lines()) <= connection_module.SLOW_FRAME_LOG_BURST:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(summary(), WAIT_S)
    got = lines()
    assert all(transport(c).closed for c in conns)
    assert len(got) == connection_module.SLOW_FRAME_LOG_BURST + 1, got
    assert got[-1].startswith(
        f"closed {30 - connection_module.SLOW_FRAME_LOG_BURST} more connections in the last"
    ), got[-1]


# -- the replication listener ---------------------------------------------------------------


async def test_the_replication_listener_serves_followers_only(
    make_broker: Callable[..., Broker],
) -> None:
    broker = make_broker(queued_request_bytes_max=100_000, request_bytes_max=60_000)
    conn = Connection(broker, Listener.REPLICATION)
    conn.connection_made(FakeTransport())
    assert conn.connections is broker.replication_connections
    produce = {"acks": 1, "timeout_ms": 1000, "topics": []}
    consumer_fetch = {"replica_id": -1, "max_wait_ms": 0, "topics": []}
    follower_fetch = {"replica_id": 2, "replica_epoch": 1, "max_wait_ms": 0, "topics": []}
    conn.data_received(
        request(API_VERSIONS, 1, {})
        + request(PRODUCE, 2, produce)
        + request(FETCH, 3, consumer_fetch)
        + request(FETCH, 4, follower_fetch)
    )
    versions, refused_produce, refused_fetch, fetched = transport(conn).responses()
    assert versions[1]["request_bytes_max"] == 60_000
    for (_, body, _), what in ((refused_produce, "PRODUCE"), (refused_fetch, "consumer's FETCH")):
        assert body["error"] == InvalidRequestError.code
        assert "replication listener serves only followers" in body["message"], body
        assert what in body["message"] and "client listener" in body["message"], body
    assert fetched[1] == {"topics": []}
    # Its own pool: a client connection filling the client pool leaves it untouched.
    client = connect(broker)
    client.data_received(frame_prefix(60_000))
    assert broker.connections.memory.used == 60_000
    assert broker.replication_connections.memory.used == 0


# -- connection limits ----------------------------------------------------------------------


def refusal(conn: Connection) -> str:
    [(corr, body, _)] = transport(conn).responses()
    assert corr == 0 and body["error"] == PolicyViolationError.code, body
    assert transport(conn).closed
    return str(body["message"])


async def test_connection_limits_per_address_and_in_all(
    make_broker: Callable[..., Broker],
) -> None:
    broker = make_broker(connections_max=3, connections_per_address_max=2)
    a1, a2 = connect(broker, "10.0.0.1", 1), connect(broker, "10.0.0.1", 2)
    a3 = connect(broker, "10.0.0.1", 3)
    assert "connections_per_address_max=2 reached for 10.0.0.1" in refusal(a3)
    b1 = connect(broker, "10.0.0.2", 1)
    c1 = connect(broker, "10.0.0.3", 1)
    assert "connections_max=3 reached" in refusal(c1)
    assert not any(transport(c).closed for c in (a1, a2, b1))
    a3.connection_lost(None)  # a refused connection frees nothing it never held
    a1.connection_lost(None)
    assert not transport(connect(broker, "10.0.0.1", 4)).closed


async def test_refusals_are_logged_once_per_interval_with_a_count(
    make_broker: Callable[..., Broker],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection_module, "REFUSAL_LOG_INTERVAL_S", 0.05)
    broker = make_broker(connections_per_address_max=1)
    connect(broker, "10.0.0.9", 1)
    for port in range(2, 52):
        refusal(connect(broker, "10.0.0.9", port))
    lines = [r.getMessage() for r in caplog.records if "refus" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("refusing connection from 10.0.0.9:2"), lines

    async def summary() -> list[str]:
        while True:
            lines = [r.getMessage() for r in caplog.records if "refus" in r.getMessage()]
            if len(lines) > 1:
                return lines
            await asyncio.sleep(0.01)

    lines = await asyncio.wait_for(summary(), WAIT_S)
    assert lines[1].startswith("refused 49 more connections in the last"), lines


# -- idle connections -----------------------------------------------------------------------


async def test_an_idle_connection_is_closed_and_a_busy_one_is_not(
    make_broker: Callable[..., Broker],
) -> None:
    broker = make_broker(connection_idle_ms_max=50)
    never: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
    broker.handlers[API_VERSIONS] = lambda body, payload, conn: never  # a request in flight
    idle, busy = connect(broker, port=1), connect(broker, port=2)
    busy.data_received(request(API_VERSIONS, 1, {}))

    async def closed() -> None:
        while not transport(idle).closed:
            await asyncio.sleep(0.005)

    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(closed(), WAIT_S)
    assert asyncio.get_running_loop().time() - started >= 0.04
    # Four more idle periods: the connection with a request in flight stays open.
    deadline = asyncio.get_running_loop().time() + 0.2
    while asyncio.get_running_loop().time() < deadline:
        assert not transport(busy).closed
        await asyncio.sleep(0.01)
    never.cancel()


# -- file slices whose segment changes before the send --------------------------------------


@pytest.fixture
async def socket_pair() -> AsyncIterator[tuple[socket.socket, socket.socket]]:
    """A connected TCP pair on loopback (sendfile needs a real socket): (broker's, client's)."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    yield server, client
    client.close()
    server.close()


async def serve(broker: Broker, sock: socket.socket) -> Connection:
    conn = Connection(broker)
    await asyncio.get_running_loop().connect_accepted_socket(lambda: conn, sock=sock)
    return conn


async def read_until_closed(sock: socket.socket) -> tuple[list[bytes], int]:
    """Whole frame payloads the peer sent before closing, and the bytes left over."""
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    decoder = protocol.FrameDecoder()
    payloads = []
    while True:
        try:
            data = await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), WAIT_S)
        except ConnectionResetError:
            data = b""
        decoder.feed(data)
        while (frame := decoder.next_frame()) is not None:
            payloads.append(bytes(frame[1]))
        if not data:
            return payloads, decoder.buffered_bytes


async def read_responses(client: socket.socket, n: int, payload: bytes) -> list[int]:
    """Read `n` response frames from `client`, each carrying `payload`; their correlation ids."""
    loop = asyncio.get_running_loop()
    client.setblocking(False)
    decoder = protocol.FrameDecoder()
    got: list[int] = []
    while len(got) < n:
        decoder.feed(await loop.sock_recv(client, 1 << 20))
        while (frame := decoder.next_frame()) is not None:
            got.append(protocol.parse_response_header(frame[0])[0])
            assert bytes(frame[1]) == payload
    return got


def segment(tmp_path: Path, data: bytes) -> tuple[int, str]:
    path = str(tmp_path / "00000000000000000000.log")
    with open(path, "wb") as f:
        f.write(data)
    return os.open(path, os.O_RDONLY), path


async def test_a_slice_of_a_segment_deleted_before_the_send_is_sent_whole(
    make_broker: Callable[..., Broker],
    socket_pair: tuple[socket.socket, socket.socket],
    tmp_path: Path,
) -> None:
    original = b"batch bytes of the deleted segment " * 100
    fd, path = segment(tmp_path, original)
    reopened: list[int] = []
    broker = make_broker()

    def fetch(body: dict[str, Any], payload: memoryview, conn: Connection) -> Response:
        resp = Response({"topics": []}, [FileSlice(fd, path, 0, len(original))])
        # Retention deletes the segment before the send: its fd is closed, and the next file
        # opened (another segment) may well get the same fd number.
        os.close(fd)
        os.unlink(path)
        other = tmp_path / "other.log"
        other.write_bytes(b"X" * len(original))
        reopened.append(os.open(other, os.O_RDONLY))
        return resp

    broker.handlers[FETCH] = fetch
    server, client = socket_pair
    conn = await serve(broker, server)
    client.sendall(request(FETCH, 1, {"topics": []}))

    async def answered() -> bytes:
        loop = asyncio.get_running_loop()
        client.setblocking(False)
        decoder = protocol.FrameDecoder()
        while (frame := decoder.next_frame()) is None:
            decoder.feed(await loop.sock_recv(client, 1 << 16))
        return bytes(frame[1])

    assert await asyncio.wait_for(answered(), WAIT_S) == original
    assert conn.transport is not None and not conn.transport.is_closing()
    conn.transport.close()
    for f in reopened:
        os.close(f)


async def test_a_slice_of_a_segment_truncated_before_the_send_aborts_the_connection(
    make_broker: Callable[..., Broker],
    socket_pair: tuple[socket.socket, socket.socket],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    original = b"0123456789" * 1000
    fd, path = segment(tmp_path, original)
    broker = make_broker()

    def fetch(body: dict[str, Any], payload: memoryview, conn: Connection) -> Response:
        resp = Response({"topics": []}, [FileSlice(fd, path, 0, len(original))])
        os.truncate(path, len(original) // 2)  # a follower truncating its log under the send
        return resp

    broker.handlers[FETCH] = fetch
    server, client = socket_pair
    await serve(broker, server)
    # A fetch, then a request whose answer would follow the short frame and be misread.
    client.sendall(request(FETCH, 1, {"topics": []}) + request(API_VERSIONS, 2, {}))
    payloads, leftover = await read_until_closed(client)
    assert payloads == [], "a short frame was completed by the next response's bytes"
    assert leftover > 0  # the header and half the slice arrived, then the connection ended
    assert any("shrank under a fetch" in r.getMessage() for r in caplog.records)
    os.close(fd)


def test_slices_of_one_segment_share_one_dup(tmp_path: Path) -> None:
    fd, path = segment(tmp_path, b"0123456789")
    resp = Response({}, [FileSlice(fd, path, 0, 4), b"raw", FileSlice(fd, path, 4, 6)])
    assert resp.fds == 1
    resp.close()
    assert resp.fds == 0
    os.close(fd)


async def test_pipelined_fetches_hold_a_bounded_number_of_fds(
    make_broker: Callable[..., Broker],
    socket_pair: tuple[socket.socket, socket.socket],
    tmp_path: Path,
) -> None:
    """A client that pipelines fetches and reads nothing: the broker stops dispatching (and
    reading) once the queued responses hold MAX_PENDING_RESPONSE_FDS dups, and serves the
    rest, in order, once the client reads."""
    data = bytes(range(256)) * 32  # 8 KiB: a few responses fill the small socket buffers
    fd, path = segment(tmp_path, data)
    broker = make_broker()
    handled: list[int] = []

    def fetch(body: dict[str, Any], payload: memoryview, conn: Connection) -> Response:
        handled.append(1)
        return Response({"topics": []}, [FileSlice(fd, path, 0, len(data))])

    broker.handlers[FETCH] = fetch
    server, client = socket_pair
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    conn = await serve(broker, server)
    fds_before = len(os.listdir("/proc/self/fd"))
    n = 1000
    client.sendall(b"".join(request(FETCH, corr, {"topics": []}) for corr in range(n)))
    limit = connection_module.MAX_PENDING_RESPONSE_FDS

    async def backlogged() -> None:
        while len(handled) < limit:
            await asyncio.sleep(0.001)

    await asyncio.wait_for(backlogged(), WAIT_S)
    for _ in range(50):  # more turns of the loop: nothing more is dispatched
        await asyncio.sleep(0)
    assert len(handled) == limit
    assert conn._response_fds <= limit
    assert len(os.listdir("/proc/self/fd")) - fds_before <= limit

    got = await asyncio.wait_for(read_responses(client, n, data), 60)
    assert got == list(range(n))

    async def released() -> None:  # the last send's task ends after its bytes left
        while conn._response_fds:
            await asyncio.sleep(0.001)

    await asyncio.wait_for(released(), WAIT_S)
    assert conn.transport is not None
    conn.transport.close()
    os.close(fd)


async def test_pipelined_buffered_fetches_hold_a_bounded_number_of_bytes(
    make_broker: Callable[..., Broker],
    socket_pair: tuple[socket.socket, socket.socket],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fetches served with pread + write hold their payload until it is handed to the socket:
    a client that pipelines them and reads nothing makes the broker stop dispatching once
    MAX_PENDING_RESPONSE_BYTES are held (a full socket buffer then keeps it stopped)."""
    monkeypatch.setattr(connection_module, "MAX_PENDING_RESPONSE_BYTES", 4 << 20)
    chunk = bytes(range(256)) * 2048  # 512 KiB
    broker = make_broker()
    handled: list[int] = []

    def fetch(body: dict[str, Any], payload: memoryview, conn: Connection) -> Response:
        handled.append(1)
        return Response({"topics": []}, [chunk])

    broker.handlers[FETCH] = fetch
    server, client = socket_pair
    conn = await serve(broker, server)
    n = 100
    client.sendall(b"".join(request(FETCH, corr, {"topics": []}) for corr in range(n)))

    async def stopped() -> None:
        while len(handled) < 8:
            await asyncio.sleep(0.001)

    await asyncio.wait_for(stopped(), WAIT_S)
    for _ in range(50):
        await asyncio.sleep(0)
    # 8 responses fill the 4 MiB; the socket buffer then holds them (more than its high-water
    # mark), so nothing more is dispatched until the client reads.
    assert len(handled) == 8, len(handled)

    got = await asyncio.wait_for(read_responses(client, n, chunk), 60)
    assert got == list(range(n))
    assert conn._response_bytes == 0
    assert conn.transport is not None
    conn.transport.close()
