"""BrokerConnection's callback requests against a real loopback socket: a scripted server
answers (or does not), and the callbacks must see responses, timeouts and a lost connection."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from raftlog import protocol
from raftlog.client.connection import FIRST_CORRELATION_ID, BrokerConnection
from raftlog.errors import (
    BrokerNotAvailableError,
    InvalidRequestError,
    NotABrokerError,
    PolicyViolationError,
    RaftlogError,
    RaftlogTimeoutError,
    RecordTooLargeError,
)

Outcome = tuple[dict[str, Any] | None, RaftlogError | None]


class ScriptedBroker:
    """Reads request frames; answers each one whose correlation id `answer` accepts."""

    def __init__(self, answer: Callable[[int], bool]):
        self.answer = answer
        self.seen: list[int] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        decoder = protocol.FrameDecoder()
        while data := await reader.read(65536):
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                corr = frame[0][2]
                self.seen.append(corr)
                if self.answer(corr):
                    writer.writelines(protocol.encode_response(corr, {"echo": corr}))


@pytest.fixture
async def server() -> AsyncIterator[tuple[ScriptedBroker, int]]:
    broker = ScriptedBroker(lambda corr: corr % 2 == 1)  # odd ids answered, even ids never
    srv = await asyncio.start_server(broker.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    yield broker, port
    srv.close()
    for w in broker.writers:
        w.close()


async def _outcomes(n: int, timeout_s: float = 10.0) -> tuple[list[Outcome], Any, Any]:
    outcomes: list[Outcome] = []
    done = asyncio.Event()

    def callback(body: dict[str, Any] | None, _payload: Any, error: RaftlogError | None) -> None:
        outcomes.append((body, error))
        if len(outcomes) == n:
            done.set()

    async def wait() -> None:
        await asyncio.wait_for(done.wait(), timeout_s)

    return outcomes, callback, wait


async def test_callbacks_get_responses_and_timeouts(server: tuple[ScriptedBroker, int]) -> None:
    broker, port = server
    conn = await BrokerConnection.connect("127.0.0.1", port, "test")
    outcomes, callback, wait = await _outcomes(4)
    for _ in range(4):  # correlation ids 10..13: 11 and 13 answered, 10 and 12 time out
        conn.queue_request(protocol.ApiKey.METADATA, {}, [], callback, timeout_s=0.3)
    assert broker.seen == []  # queued requests leave only with flush()
    conn.flush()
    await wait()
    answered = sorted(body["echo"] for body, error in outcomes if body is not None)
    timed_out = [error for body, error in outcomes if body is None]
    assert answered == [11, 13]
    assert len(timed_out) == 2 and all(isinstance(e, RaftlogTimeoutError) for e in timed_out)
    assert conn.in_flight == 0 and not conn.closed  # a timeout does not break the connection
    conn.close()


async def test_lost_connection_fails_queued_callbacks(server: tuple[ScriptedBroker, int]) -> None:
    broker, port = server
    conn = await BrokerConnection.connect("127.0.0.1", port, "test")
    outcomes, callback, wait = await _outcomes(2)
    conn.queue_request(protocol.ApiKey.METADATA, {}, [], callback, timeout_s=30)
    conn.queue_request(protocol.ApiKey.METADATA, {}, [], callback, timeout_s=30)
    conn.flush()
    deadline = asyncio.get_running_loop().time() + 10
    while len(broker.seen) < 2:  # the server has read both requests
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    for w in broker.writers:
        w.transport.abort()
    await wait()
    # Request 1 was answered before the connection dropped, or it failed with it.
    errors = [error for body, error in outcomes if body is None]
    assert errors and all(isinstance(e, BrokerNotAvailableError) for e in errors)
    assert conn.closed
    with pytest.raises(BrokerNotAvailableError):
        conn.queue_request(protocol.ApiKey.METADATA, {}, [], callback, timeout_s=1)


@pytest.fixture
async def answering_server() -> AsyncIterator[tuple[ScriptedBroker, int]]:
    broker = ScriptedBroker(lambda corr: True)
    srv = await asyncio.start_server(broker.handle, "127.0.0.1", 0)
    yield broker, srv.sockets[0].getsockname()[1]
    srv.close()
    for w in broker.writers:
        w.close()


async def test_answered_requests_leave_no_deadline_behind(
    answering_server: tuple[ScriptedBroker, int],
) -> None:
    """Deadlines of answered requests must not pile up until the oldest one's timer fires (30 s
    of requests at a high rate is millions of entries, and garbage-collector time)."""
    _broker, port = answering_server
    conn = await BrokerConnection.connect("127.0.0.1", port, "test")
    outcomes, callback, wait = await _outcomes(2000)
    template = protocol.ProduceTemplate("test", 1, 1000, "t", 0)
    for i in range(2000):
        if i % 2:
            conn.queue_request(protocol.ApiKey.METADATA, {}, [], callback, timeout_s=30)
        else:
            conn.queue_produce(template, [b"x" * 10], 10, callback, timeout_s=30)
        if i % 100 == 99:
            conn.flush()
    await wait()
    first = FIRST_CORRELATION_ID
    assert sorted(body["echo"] for body, _ in outcomes) == list(range(first, first + 2000))  # type: ignore[index]
    assert conn.in_flight == 0 and len(conn._deadline_ids) == len(conn._deadline_at) == 0
    conn.close()


async def test_correlation_ids_wrap_within_32_bits(
    answering_server: tuple[ScriptedBroker, int],
) -> None:
    broker, port = answering_server
    conn = await BrokerConnection.connect("127.0.0.1", port, "test")
    conn._ids = itertools.count(0xFFFFFFFF)
    outcomes, callback, wait = await _outcomes(2)
    template = protocol.ProduceTemplate("test", 1, 1000, "t", 0)
    conn.queue_produce(template, [b"a"], 1, callback, timeout_s=30)
    conn.queue_produce(template, [b"b"], 1, callback, timeout_s=30)
    conn.flush()
    await wait()
    assert broker.seen == [0xFFFFFFFF, 1]
    assert all(error is None for _, error in outcomes)
    conn.close()


# -- peers that are not raftlog brokers ------------------------------------------------------


@pytest.fixture
async def peer() -> AsyncIterator[Callable[[Callable[..., Any]], Any]]:
    """Start a one-off server whose connection handler is the test's; yields its port."""
    servers: list[asyncio.Server] = []
    writers: list[asyncio.StreamWriter] = []

    async def start(handler: Callable[..., Any]) -> int:
        async def wrapped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writers.append(writer)
            await handler(reader, writer)

        srv = await asyncio.start_server(wrapped, "127.0.0.1", 0)
        servers.append(srv)
        return int(srv.sockets[0].getsockname()[1])

    yield start
    for srv in servers:
        srv.close()
    for w in writers:
        w.close()


async def _request_error(port: int, timeout_s: float = 5.0) -> RaftlogError:
    """The error one Metadata request gets from the peer on `port` (it must get one fast)."""
    conn = await BrokerConnection.connect("127.0.0.1", port, "test")
    try:
        await conn.request(protocol.ApiKey.METADATA, {"topics": None}, timeout_s=timeout_s)
    except RaftlogError as e:
        return e
    finally:
        conn.close()
    raise AssertionError("the peer answered like a broker")


async def test_a_line_based_server_is_not_a_broker_at_once(peer: Any) -> None:
    """An HTTP server answers only when a request line ends: the first request carries a
    newline, the answer is recognised from its first bytes."""

    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()  # waits for b"\n", as http.server does
        writer.write(b"HTTP/1.0 400 Bad request syntax\r\nContent-Type: text/html\r\n\r\n")
        await writer.drain()

    port = await peer(http)
    started = time.monotonic()
    error = await _request_error(port)
    assert time.monotonic() - started < 2.0
    assert isinstance(error, NotABrokerError) and not error.retriable
    assert f"not a raftlog broker at 127.0.0.1:{port}" in str(error)
    assert "HTTP/1.0 400" in str(error)


@pytest.mark.parametrize(
    "answer",
    [
        b"\x10\x00\x00\x00\x0c\x00\x00\x00" + b"\xc1" * 12,  # not msgpack
        b"\x07\x00\x00\x00\x03\x00\x00\x00\xa2hi",  # msgpack, but not [corr, body]
        b"\x00\x00\x01\x00\xff\xff\xff\xff",  # a header length that cannot fit
        b"SSH-2.0-OpenSSH_9.2\r\n",  # a server that speaks first
    ],
)
async def test_garbage_as_first_frame_is_not_a_broker(peer: Any, answer: bytes) -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(answer)
        await writer.drain()
        await reader.read()  # keep the connection open: only the bytes may tell

    port = await peer(garbage)
    error = await _request_error(port)
    assert isinstance(error, NotABrokerError), error
    assert f"not a raftlog broker at 127.0.0.1:{port}" in str(error)


async def test_a_peer_that_closes_at_once_fails_requests_at_once(peer: Any) -> None:
    async def close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    port = await peer(close)
    started = time.monotonic()
    error = await _request_error(port)
    assert time.monotonic() - started < 2.0
    assert isinstance(error, BrokerNotAvailableError), error
    assert f"127.0.0.1:{port} closed the connection before answering" in str(error)
    assert "not a raftlog broker" in str(error)


async def test_a_refused_connection_reports_the_brokers_reason(peer: Any) -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.writelines(
            protocol.encode_response(
                0,
                {
                    "error": PolicyViolationError.code,
                    "message": "connection refused: connections_per_address_max=2 reached",
                },
            )
        )
        await writer.drain()
        writer.close()

    port = await peer(refuse)
    error = await _request_error(port)
    assert isinstance(error, PolicyViolationError), error
    assert "connections_per_address_max=2" in str(error)


async def test_the_first_request_on_a_connection_carries_a_newline(peer: Any) -> None:
    seen = asyncio.get_running_loop().create_future()

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.set_result(await reader.readline())

    port = await peer(record)
    conn = await BrokerConnection.connect("127.0.0.1", port, "test")
    conn.send(protocol.ApiKey.METADATA, {"topics": None})
    line = await asyncio.wait_for(seen, 5)
    assert line.endswith(b"\n") and len(line) < 20  # the newline is in the header's start
    conn.close()


async def test_a_request_cancelled_as_its_answer_arrives_is_cancelled(
    server: tuple[ScriptedBroker, int],
) -> None:
    """A task cancelled in the loop iteration that its request's answer arrived in must end
    cancelled. Python 3.11's asyncio.wait_for returned the answer instead (gh-86296), so a
    replica fetcher's loop went on fetching and a node's TaskGroup never finished stopping: a
    node ignored SIGTERM in long chaos runs (3 times in one 10-minute run)."""
    _broker, port = server
    conn = await BrokerConnection.connect("127.0.0.1", port, "test")
    task: asyncio.Task[Any] | None = None
    received = conn.data_received

    def cancel_on_answer(data: bytes) -> None:
        received(data)  # resolves the request's future ...
        assert task is not None
        task.cancel()  # ... and the task is cancelled before it runs again

    conn.data_received = cancel_on_answer  # type: ignore[method-assign]
    if FIRST_CORRELATION_ID % 2 == 0:  # the server answers odd ids only: use up an even one
        conn.send(protocol.ApiKey.METADATA, {})
    task = asyncio.create_task(conn.request(protocol.ApiKey.METADATA, {}, timeout_s=5))
    with pytest.raises(asyncio.CancelledError):
        await task
    conn.close()


async def test_a_request_over_the_brokers_limit_is_refused_before_it_is_sent() -> None:
    """The client learns the broker's request_bytes_max from ApiVersions and refuses a larger
    request at once, naming both sizes, instead of sending it to have the connection closed."""
    seen: list[tuple[int, int]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = protocol.FrameDecoder(1 << 31)
        while data := await reader.read(1 << 16):
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                api, _, corr = frame[0][:3]
                seen.append((api, len(frame[1])))
                body = {"apis": [], "request_bytes_max": 1000} if api == 0 else {"ok": corr}
                writer.writelines(protocol.encode_response(corr, body))
        writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    conn = await BrokerConnection.connect("127.0.0.1", port, "test")
    try:
        assert not conn.limits_learned
        await conn.learn_limits(5.0)
        assert conn.limits_learned and conn.request_bytes_max == 1000
        outcomes, callback, _ = await _outcomes(1)
        template = protocol.ProduceTemplate("test", 1, 1000, "t", 0)
        big = b"x" * 2000
        with pytest.raises(RecordTooLargeError) as e:
            conn.queue_produce(template, [big], len(big), callback, 1.0)
        assert f"a PRODUCE request of {template.frame_length(len(big))} bytes is over broker " in (
            str(e.value)
        )
        assert f"127.0.0.1:{port}'s request_bytes_max=1000" in str(e.value)
        produce = {"acks": 1, "timeout_ms": 1000, "topics": [["t", [[0, len(big)]]]]}
        with pytest.raises(RecordTooLargeError):
            conn.queue_request(protocol.ApiKey.PRODUCE, produce, [big], callback, 1.0)
        with pytest.raises(InvalidRequestError, match="a METADATA request of"):
            conn.send(protocol.ApiKey.METADATA, {"topics": ["t" * 2000]})
        assert conn.in_flight == 0 and outcomes == []  # nothing registered, nothing sent
        body, _ = await conn.request(protocol.ApiKey.METADATA, {}, (), 5.0)
        assert body["ok"] > 0
        assert seen == [(0, 0), (1, 0)]
    finally:
        conn.close()
        srv.close()
