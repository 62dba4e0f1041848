"""A TCP proxy that speaks Toxiproxy's HTTP API, for machines where Toxiproxy cannot be installed.

    python -m chaos.toxiproxy_server --host 127.0.0.1 --port 8474

The chaos suite drives link faults through Toxiproxy's API with the `toxiproxy-python` client;
where a real Toxiproxy runs (TOXIPROXY_URL) the same calls go to it instead. This server keeps
the API as Toxiproxy's README and api.go define it, and the toxics' effects as toxics/*.go
implement them (read there, not copied):

    GET /version                          200 {"version": ...}
    GET /proxies                          200 {name: proxy, ...}
    POST /proxies                         201 proxy    (400 missing name/upstream, 409 exists)
    POST /populate                        201 {"proxies": [...]}  (create, or replace if the
                                          listen or upstream address differs)
    GET /proxies/{p}                      200 proxy    (404)
    POST|PATCH /proxies/{p}               200 proxy    (listen, upstream, enabled)
    DELETE /proxies/{p}                   204
    GET /proxies/{p}/toxics               200 [toxic, ...]
    POST /proxies/{p}/toxics              200 toxic    (400 bad body/stream/type, 409 exists)
    GET|POST|PATCH|DELETE /proxies/{p}/toxics/{t}   200 toxic / 204
    POST /reset                           204: enable every proxy, remove every toxic

A proxy is {name, listen, upstream, enabled, toxics}; a toxic is {name (default
"<type>_<stream>"), type, stream ("upstream": client to server, "downstream", the default:
server to client), toxicity (probability, default 1.0, drawn once per connection when the toxic
meets it), attributes}. Errors are {"error": message, "status": code} with that HTTP status.

Toxics and their attributes (integers): latency {latency, jitter} ms: each chunk waits latency
+/- jitter after it was read; bandwidth {rate} KB/s (1 KB = 1000 bytes); slow_close {delay} ms
between the end of the stream and the close; timeout {timeout} ms: data is dropped and the
connection closed after the timeout (0: held open forever; removing the toxic closes it);
reset_peer {timeout} ms: the first data (or end of stream) starts the timer, then the
connection is reset (RST); slicer {average_size, size_variation} bytes, {delay} µs: each chunk
is cut into pieces of about average_size, written `delay` apart; limit_data {bytes}: the
connection is closed once that many bytes went through; noop. A disabled proxy ("down") closes
its listener and every connection; enabling it listens again on the same address.

How data moves: each connection has two links (upstream, downstream); a link is a reader task,
a chain of stages (one per toxic, in the order they were added) joined by queues, and a writer
task. Adding a toxic appends a stage and points the previous stage's output at it; removing one
hands what the stage holds to its successor and unlinks it, all without an `await`, so the
single-threaded event loop sees no half-spliced chain and no byte is reordered or lost (except
by the toxics that drop data). Like Toxiproxy, the end of either direction closes the whole
connection once the other direction has flushed, and a reset resets both sockets.

Rules: every buffer is bounded (a link stops reading while it holds LINK_BUFFER_BYTES_MAX
bytes; HTTP requests are bounded in header and body size); attribute values are checked (ints
>= 0, slicer sizes that make progress, toxicity in [0, 1]) and a bad value is a 400, where
Toxiproxy would accept it and misbehave; a failure inside a connection's tasks closes that
connection and is logged and counted (`errors`), never silently dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import ipaddress
import itertools
import json
import logging
import random
import signal
import socket
import struct
import sys
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

API_PORT_DEFAULT = 8474
VERSION = "2.9.0-raftlog"
# Toxiproxy copies with io.Copy's 32 KiB buffer: a chunk is at most this many bytes.
CHUNK_BYTES_MAX = 32 * 1024
# A link stops reading from its source while this many bytes are between its reader and its
# writer (held by a slow toxic); TCP flow control then slows the sender, as Toxiproxy's
# unbuffered channels do.
LINK_BUFFER_BYTES_MAX = 1 << 20
HTTP_HEADER_BYTES_MAX = 64 * 1024
HTTP_BODY_BYTES_MAX = 1 << 20
# Toxiproxy's API has a 15 s read timeout; an idle keep-alive connection is closed after this.
HTTP_IDLE_TIMEOUT_S = 60.0
UPSTREAM_CONNECT_TIMEOUT_S = 10.0

STREAMS = ("upstream", "downstream")
# Each toxic type and its attributes with their defaults (what Toxiproxy shows for a zero value).
TOXIC_TYPES: dict[str, dict[str, int]] = {
    "noop": {},
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slow_close": {"delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
    "limit_data": {"bytes": 0},
}


class ApiError(Exception):
    """An API failure with its HTTP status; the body says {"error": message, "status": code}."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.message = message
        self.status = status


def _bad_body(detail: str) -> ApiError:
    return ApiError(f"bad request body: {detail}", 400)


# -- toxics ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Toxic:
    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": dict(self.attributes),
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
        }


def _attributes(toxic_type: str, raw: Any, current: dict[str, int]) -> dict[str, int]:
    """The attributes of a toxic from a request: the known ones, checked; others ignored."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _bad_body(f"attributes must be an object, got {raw!r}")
    attrs = dict(current)
    for key in TOXIC_TYPES[toxic_type]:
        if key not in raw:
            continue
        v = raw[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise _bad_body(f"{toxic_type} attribute {key} must be an integer, got {v!r}")
        if v < 0:
            raise _bad_body(f"{toxic_type} attribute {key} must be >= 0, got {v}")
        attrs[key] = v
    if toxic_type == "slicer":
        if attrs["average_size"] < 1:
            raise _bad_body(f"slicer average_size must be >= 1, got {attrs['average_size']}")
        if attrs["size_variation"] >= attrs["average_size"]:
            raise _bad_body(
                f"slicer size_variation ({attrs['size_variation']}) must be smaller than "
                f"average_size ({attrs['average_size']})"
            )
    return attrs


def _toxicity(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0.0 <= raw <= 1.0:
        raise _bad_body(f"toxicity must be a number in [0, 1], got {raw!r}")
    return float(raw)


def parse_toxic(body: Any) -> Toxic:
    """A new toxic from a POST body, validated in the order Toxiproxy's AddToxicJson does."""
    if not isinstance(body, dict):
        raise _bad_body("expected a JSON object")
    stream = body.get("stream", "downstream")
    if not isinstance(stream, str):
        raise _bad_body(f"stream must be a string, got {stream!r}")
    if stream.lower() not in STREAMS:
        raise ApiError("stream was invalid, can be either upstream or downstream", 400)
    stream = stream.lower()
    toxic_type = body.get("type", "")
    name = body.get("name") or f"{toxic_type}_{stream}"
    if not isinstance(name, str):
        raise _bad_body(f"name must be a string, got {name!r}")
    if toxic_type not in TOXIC_TYPES:
        raise ApiError("invalid toxic type", 400)
    toxicity = _toxicity(body.get("toxicity", 1.0))
    attrs = _attributes(toxic_type, body.get("attributes"), TOXIC_TYPES[toxic_type])
    return Toxic(name, toxic_type, stream, toxicity, attrs)


class Chunk:
    """Bytes read from the source, stamped with the monotonic time they were read."""

    __slots__ = ("data", "ts")

    def __init__(self, data: bytes, ts: float):
        self.data = data
        self.ts = ts


class Close:
    """The end of the stream: a plain close (FIN), or a reset (RST) when `reset`."""

    __slots__ = ("reset",)

    def __init__(self, reset: bool):
        self.reset = reset


Item = Chunk | Close
EOF = Close(reset=False)


class Stage:
    """One toxic on one link: takes items from `input`, puts what passes into `output`.

    Items it has taken but not passed on are in `held` at every `await`, so a stage can be
    stopped at any point and what it holds handed on (Toxiproxy: "don't drop any data on the
    floor"). `state` outlives restarts (limit_data's count of bytes sent).
    """

    def __init__(self, link: Link, toxic: Toxic, output: asyncio.Queue[Item]):
        self.link = link
        self.toxic = toxic
        self.active = link.conn.proxy.server.rng.random() < toxic.toxicity
        self.input: asyncio.Queue[Item] = asyncio.Queue()
        self.output = output
        self.held: collections.deque[Item] = collections.deque()
        self.state: dict[str, Any] = {}
        self.closed = False
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = self.link.conn.spawn(self._run(), f"{self.toxic.name} stage")

    def stop(self) -> None:
        """Stop the task where it waits; what it held stays in `held`."""
        if self.task is not None:
            self.task.cancel()
            self.task = None

    def flush_into(self, output: asyncio.Queue[Item]) -> None:
        """Hand everything held or queued on, in order (the stage must be stopped)."""
        while self.held:
            output.put_nowait(self.held.popleft())
        while not self.input.empty():
            output.put_nowait(self.input.get_nowait())

    async def take(self) -> Item:
        item = await self.input.get()
        self.held.append(item)
        return item

    def pass_on(self) -> None:
        self.output.put_nowait(self.held.popleft())

    def drop(self) -> None:
        item = self.held.popleft()
        if isinstance(item, Chunk):
            self.link.release(len(item.data))

    def close(self, reset: bool) -> None:
        """Close the stream here, as Toxiproxy's stub.Close: what follows is discarded."""
        while self.held:
            self.drop()
        self.closed = True
        self.output.put_nowait(Close(reset))

    async def _run(self) -> None:
        if self.closed:
            return
        pipe = _PIPES[self.toxic.type] if self.active else _noop
        await pipe(self, self.toxic.attributes)


async def _noop(stage: Stage, attrs: dict[str, int]) -> None:
    while True:
        item = await stage.take()
        stage.pass_on()
        if isinstance(item, Close):
            return


async def _latency(stage: Stage, attrs: dict[str, int]) -> None:
    rng = stage.link.conn.proxy.server.rng
    while True:
        item = await stage.take()
        if isinstance(item, Chunk):
            delay_ms = attrs["latency"]
            if attrs["jitter"] > 0:
                delay_ms += rng.randrange(2 * attrs["jitter"]) - attrs["jitter"]
            sleep_s = delay_ms / 1000 - (time.monotonic() - item.ts)
            if sleep_s > 0:
                await asyncio.sleep(sleep_s)
                item.ts += sleep_s
        stage.pass_on()
        if isinstance(item, Close):
            return


async def _bandwidth(stage: Stage, attrs: dict[str, int]) -> None:
    rate = attrs["rate"]  # KB/s = bytes per millisecond
    debt_s = 0.0  # time owed for bytes already sent; negative when a sleep overshot
    while True:
        item = await stage.take()
        if isinstance(item, Close) or rate <= 0:
            stage.pass_on()
            if isinstance(item, Close):
                return
            continue
        debt_s += len(item.data) / (rate * 1000)
        # A slow rate sends large chunks in 100 ms slices, as Toxiproxy does.
        slice_bytes = rate * 100
        while len(item.data) > slice_bytes:
            await asyncio.sleep(0.1)
            stage.output.put_nowait(Chunk(item.data[:slice_bytes], item.ts))
            item.data = item.data[slice_bytes:]
            debt_s -= 0.1
        start = time.monotonic()
        if debt_s > 0:
            await asyncio.sleep(debt_s)
        debt_s -= time.monotonic() - start
        stage.pass_on()


async def _slow_close(stage: Stage, attrs: dict[str, int]) -> None:
    while True:
        item = await stage.take()
        if isinstance(item, Close):
            await asyncio.sleep(attrs["delay"] / 1000)
            stage.pass_on()
            return
        stage.pass_on()


async def _timeout(stage: Stage, attrs: dict[str, int]) -> None:
    timeout_s = attrs["timeout"] / 1000
    deadline = time.monotonic() + timeout_s
    while True:
        if timeout_s > 0:
            remaining = deadline - time.monotonic()
            try:
                async with asyncio.timeout(max(remaining, 0)):
                    item = await stage.take()
            except TimeoutError:
                stage.close(reset=False)
                return
        else:
            item = await stage.take()
        if isinstance(item, Close):
            stage.close(reset=item.reset)
            return
        stage.drop()  # the black hole


async def _reset_peer(stage: Stage, attrs: dict[str, int]) -> None:
    await stage.take()
    stage.drop()
    await asyncio.sleep(attrs["timeout"] / 1000)
    stage.close(reset=True)


def slice_points(
    start: int, end: int, average: int, variation: int, rng: random.Random
) -> list[int]:
    """Where the slicer cuts [start, end): Toxiproxy's halving, varied by +/- `variation`."""
    if (end - start) - average <= variation:
        return [start, end]
    mid = start + (end - start) // 2
    if variation > 0:
        mid += rng.randrange(2 * variation) - variation
    mid = min(max(mid, start + 1), end - 1)
    left = slice_points(start, mid, average, variation, rng)
    return left[:-1] + slice_points(mid, end, average, variation, rng)


async def _slicer(stage: Stage, attrs: dict[str, int]) -> None:
    rng = stage.link.conn.proxy.server.rng
    delay_s = attrs["delay"] / 1_000_000
    while True:
        item = await stage.take()
        if isinstance(item, Close):
            stage.pass_on()
            return
        points = slice_points(
            0, len(item.data), attrs["average_size"], attrs["size_variation"], rng
        )
        data = item.data
        for a, b in itertools.pairwise(points):
            if b < len(data):
                stage.output.put_nowait(Chunk(data[a:b], item.ts))
                item.data = data[b:]
            else:
                stage.pass_on()
            await asyncio.sleep(delay_s)


async def _limit_data(stage: Stage, attrs: dict[str, int]) -> None:
    sent = stage.state.setdefault("bytes_sent", 0)
    while True:
        item = await stage.take()
        if isinstance(item, Close):
            stage.pass_on()
            return
        remaining = max(attrs["bytes"] - sent, 0)
        if remaining < len(item.data):
            stage.link.release(len(item.data) - remaining)
            item.data = item.data[:remaining]
        if item.data:
            sent += len(item.data)
            stage.state["bytes_sent"] = sent
            stage.pass_on()
        else:
            stage.held.popleft()
        if attrs["bytes"] - sent <= 0:
            stage.close(reset=False)
            return


_PIPES: dict[str, Callable[[Stage, dict[str, int]], Awaitable[None]]] = {
    "noop": _noop,
    "latency": _latency,
    "bandwidth": _bandwidth,
    "slow_close": _slow_close,
    "timeout": _timeout,
    "reset_peer": _reset_peer,
    "slicer": _slicer,
    "limit_data": _limit_data,
}


# -- links and connections ---------------------------------------------------------------------


def _set_reset_on_close(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class Link:
    """One direction of a connection: reader -> stages -> writer."""

    def __init__(
        self,
        conn: Connection,
        stream: str,
        source: asyncio.StreamReader,
        dest: asyncio.StreamWriter,
        toxics: list[Toxic],
    ):
        self.conn = conn
        self.stream = stream
        self.source = source
        self.dest = dest
        self.out: asyncio.Queue[Item] = asyncio.Queue()  # what the writer writes
        self.stages: list[Stage] = []
        self.buffered_bytes = 0
        self._room = asyncio.Event()
        self._room.set()
        self.writer_done = False
        for toxic in toxics:
            self.add(toxic, start=False)

    def start(self) -> None:
        for stage in self.stages:
            stage.start()
        self.conn.spawn(self._read(), f"{self.stream} reader")
        self.conn.spawn(self._write(), f"{self.stream} writer")

    @property
    def head(self) -> asyncio.Queue[Item]:
        return self.stages[0].input if self.stages else self.out

    def _point_at(self, index: int, queue: asyncio.Queue[Item]) -> None:
        """Make whatever feeds stage `index` (the previous stage, or the reader) feed `queue`."""
        if index > 0:
            self.stages[index - 1].output = queue

    def release(self, nbytes: int) -> None:
        self.buffered_bytes -= nbytes
        if self.buffered_bytes < LINK_BUFFER_BYTES_MAX:
            self._room.set()

    # -- the chain, changed without an await -------------------------------------------------

    def add(self, toxic: Toxic, start: bool = True) -> None:
        stage = Stage(self, toxic, self.out)
        if self.stages:
            self.stages[-1].output = stage.input
        self.stages.append(stage)
        if start:
            stage.start()

    def remove(self, name: str) -> None:
        index = next(i for i, s in enumerate(self.stages) if s.toxic.name == name)
        stage = self.stages[index]
        stage.stop()
        if stage.toxic.type == "timeout" and stage.active and not stage.closed:
            # Toxiproxy's TimeoutToxic.Cleanup: removing the black hole closes the connection.
            stage.close(reset=False)
        elif not stage.closed:
            stage.flush_into(stage.output)
        self._point_at(index, stage.output)
        del self.stages[index]

    def update(self, toxic: Toxic) -> None:
        """New attributes or toxicity: the stage hands on what it holds and starts over."""
        stage = next(s for s in self.stages if s.toxic.name == toxic.name)
        stage.stop()
        if stage.closed:
            return
        while stage.held:
            stage.output.put_nowait(stage.held.popleft())
        stage.toxic = toxic
        stage.active = self.conn.proxy.server.rng.random() < toxic.toxicity
        stage.start()

    # -- the tasks ---------------------------------------------------------------------------

    async def _read(self) -> None:
        while True:
            await self._room.wait()
            try:
                data = await self.source.read(CHUNK_BYTES_MAX)
            except (ConnectionError, OSError):
                data = b""
            if not data:
                self.head.put_nowait(EOF)
                return
            if self.writer_done:
                continue  # the destination is gone: drain the source until it closes
            self.buffered_bytes += len(data)
            if self.buffered_bytes >= LINK_BUFFER_BYTES_MAX:
                self._room.clear()
            self.head.put_nowait(Chunk(data, time.monotonic()))

    async def _write(self) -> None:
        reset = False
        try:
            while True:
                item = await self.out.get()
                if isinstance(item, Close):
                    reset = item.reset
                    break
                self.dest.write(item.data)
                self.release(len(item.data))
                await self.dest.drain()
        except (ConnectionError, OSError):
            pass  # the destination went away: the connection closes below
        finally:
            self.writer_done = True
            self._room.set()
            self.conn.link_finished(self, reset)


class Connection:
    """A client connection and its upstream connection, with their two links."""

    def __init__(
        self,
        proxy: Proxy,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ):
        self.proxy = proxy
        self.client_writer = client[1]
        self.upstream_writer = upstream[1]
        self.tasks: set[asyncio.Task[None]] = set()
        self.reset = False
        self.closed = False
        self.links = {
            "upstream": Link(self, "upstream", client[0], upstream[1], proxy.toxics["upstream"]),
            "downstream": Link(
                self, "downstream", upstream[0], client[1], proxy.toxics["downstream"]
            ),
        }
        for link in self.links.values():
            link.start()

    def spawn(self, coro: Awaitable[None], what: str) -> asyncio.Task[None]:
        """A task owned by this connection: cancelled when it closes; a failure closes it."""
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self.tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self.tasks.discard(t)
            if t.cancelled():
                return
            exc = t.exception()
            if exc is not None:
                self.proxy.server.record_error(f"proxy {self.proxy.name}: {what} failed: {exc!r}")
                log.error("proxy %s: %s failed", self.proxy.name, what, exc_info=exc)
                self.close()

        task.add_done_callback(done)
        return task

    def link_finished(self, link: Link, reset: bool) -> None:
        """A link's writer is done: close its destination (after the other direction flushed,
        that closes the connection, as in Toxiproxy); a reset resets both sockets."""
        if reset:
            self.reset = True
            _set_reset_on_close(self.client_writer)
            _set_reset_on_close(self.upstream_writer)
        if self.reset:
            link.dest.transport.abort()
        else:
            link.dest.close()
        if all(ln.writer_done for ln in self.links.values()):
            self.close()

    def close(self) -> None:
        """Close both sockets now and stop every task (a disabled proxy, a failure, the end)."""
        if self.closed:
            return
        self.closed = True
        for writer in (self.client_writer, self.upstream_writer):
            if self.reset:
                writer.transport.abort()
            else:
                writer.close()
        for task in list(self.tasks):
            if task is not asyncio.current_task():
                task.cancel()
        self.proxy.connections.discard(self)


# -- proxies -----------------------------------------------------------------------------------


def _split_host_port(address: str, what: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ApiError(f"{what} {address!r}: expected HOST:PORT", 400)
    return host.strip("[]"), int(port)


def _format_address(host: str, port: int) -> str:
    try:
        is_v6 = ipaddress.ip_address(host).version == 6
    except ValueError:
        is_v6 = False
    return f"[{host}]:{port}" if is_v6 else f"{host}:{port}"


def resolve_listen(listen: str) -> tuple[str, int]:
    """The address a listen string binds: "" or ":0" is every interface, any port."""
    host, port = _split_host_port(listen or ":0", "listen")
    if not host:
        return "0.0.0.0", port
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ApiError(f"listen {listen!r}: {e}", 500) from None
    return str(infos[0][4][0]), port


class Proxy:
    def __init__(self, server: ToxiproxyServer, name: str, listen: str, upstream: str):
        self.server = server
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics: dict[str, list[Toxic]] = {"upstream": [], "downstream": []}
        self.connections: set[Connection] = set()
        self._listener: asyncio.Server | None = None

    def to_json(self, with_toxics: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
        }
        if with_toxics:
            d["toxics"] = [t.to_json() for t in self.all_toxics()]
        return d

    def all_toxics(self) -> list[Toxic]:
        return self.toxics["upstream"] + self.toxics["downstream"]

    def find_toxic(self, name: str) -> Toxic:
        for t in self.all_toxics():
            if t.name == name:
                return t
        raise ApiError("toxic not found", 404)

    def differs(self, listen: str, upstream: str) -> bool:
        return resolve_listen(listen) != resolve_listen(self.listen) or upstream != self.upstream

    async def start(self) -> None:
        if self.enabled:
            return
        host, port = resolve_listen(self.listen)
        try:
            self._listener = await asyncio.start_server(self._accept, host, port)
        except OSError as e:
            raise ApiError(f"listen tcp {self.listen}: {e.strerror or e}", 500) from None
        bound = self._listener.sockets[0].getsockname()
        self.listen = _format_address(bound[0], bound[1])
        self.enabled = True
        log.info("proxy %s listening on %s for %s", self.name, self.listen, self.upstream)

    def stop(self) -> None:
        """Stop listening (new connections are refused) and close every connection."""
        if not self.enabled:
            return
        self.enabled = False
        assert self._listener is not None
        self._listener.close()
        self._listener = None
        for conn in list(self.connections):
            conn.close()
        log.info("proxy %s stopped", self.name)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _nodelay(writer)
        if not self.enabled:
            writer.close()
            return
        host, _, port = self.upstream.rpartition(":")
        try:
            async with asyncio.timeout(UPSTREAM_CONNECT_TIMEOUT_S):
                up = await asyncio.open_connection(host.strip("[]"), int(port))
        except (OSError, TimeoutError, ValueError) as e:
            log.warning("proxy %s: cannot connect to upstream %s: %s", self.name, self.upstream, e)
            writer.close()
            return
        if not self.enabled:  # disabled while we dialed
            writer.close()
            up[1].close()
            return
        _nodelay(up[1])
        self.connections.add(Connection(self, (reader, writer), up))

    # -- toxics ------------------------------------------------------------------------------

    def add_toxic(self, toxic: Toxic) -> None:
        if any(t.name == toxic.name for t in self.all_toxics()):
            raise ApiError("toxic already exists", 409)
        self.toxics[toxic.stream].append(toxic)
        for conn in self.connections:
            conn.links[toxic.stream].add(toxic)

    def update_toxic(self, name: str, body: Any) -> Toxic:
        old = self.find_toxic(name)
        if not isinstance(body, dict):
            raise _bad_body("expected a JSON object")
        new = Toxic(
            old.name,
            old.type,
            old.stream,
            _toxicity(body.get("toxicity", old.toxicity)),
            _attributes(old.type, body.get("attributes"), old.attributes),
        )
        chain = self.toxics[old.stream]
        chain[chain.index(old)] = new
        for conn in self.connections:
            conn.links[old.stream].update(new)
        return new

    def remove_toxic(self, name: str) -> None:
        toxic = self.find_toxic(name)
        self.toxics[toxic.stream].remove(toxic)
        for conn in list(self.connections):
            conn.links[toxic.stream].remove(name)

    def remove_all_toxics(self) -> None:
        for toxic in self.all_toxics():
            self.remove_toxic(toxic.name)


def _nodelay(writer: asyncio.StreamWriter) -> None:
    # Go's TCP connections have TCP_NODELAY on by default: small writes (the slicer's pieces)
    # leave at once.
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


# -- the HTTP API ------------------------------------------------------------------------------


@dataclass(slots=True)
class Response:
    status: int
    body: Any = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


_REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    411: "Length Required",
    413: "Request Entity Too Large",
    500: "Internal Server Error",
}


def _decode(body: bytes) -> Any:
    if not body.strip():
        raise _bad_body("EOF")
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _bad_body(str(e)) from None


def _proxy_fields(body: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _bad_body("expected a JSON object")
    fields = dict(defaults)
    for key, kind in (("name", str), ("listen", str), ("upstream", str), ("enabled", bool)):
        if key in body:
            if not isinstance(body[key], kind):
                raise _bad_body(f"{key} must be a {kind.__name__}, got {body[key]!r}")
            fields[key] = body[key]
    return fields


class ToxiproxyServer:
    """The API server and its proxies, on the running event loop."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = API_PORT_DEFAULT, seed: int | None = None
    ):
        self.host = host
        self.port = port
        self.rng = random.Random(seed)
        self.proxies: dict[str, Proxy] = {}
        self.errors: list[str] = []
        self._lock = asyncio.Lock()  # one API change at a time, as Toxiproxy's mutexes do
        self._http: asyncio.Server | None = None

    def record_error(self, message: str) -> None:
        self.errors.append(message)

    async def start(self) -> None:
        self._http = await asyncio.start_server(self._serve_http, self.host, self.port)
        self.port = self._http.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
        if self._http is not None:
            self._http.close()
            await self._http.wait_closed()

    # -- HTTP/1.1, one request at a time per connection --------------------------------------

    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    async with asyncio.timeout(HTTP_IDLE_TIMEOUT_S):
                        head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    await self._send(writer, Response(400, {"error": "headers too large"}))
                    return
                if len(head) > HTTP_HEADER_BYTES_MAX:
                    await self._send(writer, Response(400, {"error": "headers too large"}))
                    return
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3:
                    await self._send(writer, Response(400, {"error": "bad request line"}))
                    return
                method, target, version = parts
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, _, v = line.partition(":")
                        headers[k.strip().lower()] = v.strip()
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    await self._send(writer, Response(411, {"error": "send a Content-Length"}))
                    return
                length_text = headers.get("content-length", "0") or "0"
                if not length_text.isdigit():
                    await self._send(writer, Response(400, {"error": "bad Content-Length"}))
                    return
                length = int(length_text)
                if length > HTTP_BODY_BYTES_MAX:
                    await self._send(writer, Response(413, {"error": "body too large"}))
                    return
                body = await reader.readexactly(length) if length else b""
                response = await self.handle(method, target, body, headers)
                await self._send(writer, response)
                if headers.get("connection", "").lower() == "close" or version == "HTTP/1.0":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def _send(self, writer: asyncio.StreamWriter, r: Response) -> None:
        if r.status == 204 or r.body is None:
            payload = b""
        elif isinstance(r.body, str):
            payload = r.body.encode()
        else:
            payload = json.dumps(r.body).encode()
            if r.status >= 400:
                payload += b"\n"  # Go's http.Error ends the body with a newline
        head = [f"HTTP/1.1 {r.status} {_REASONS.get(r.status, '')}"]
        if r.status != 204:
            head.append(f"Content-Type: {r.content_type}")
            head.append(f"Content-Length: {len(payload)}")
        head.extend(f"{k}: {v}" for k, v in r.headers.items())
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        await writer.drain()

    async def handle(
        self, method: str, target: str, body: bytes, headers: dict[str, str]
    ) -> Response:
        if headers.get("user-agent", "").startswith("Mozilla/"):
            return Response(403, "User agent not allowed\n", "text/plain; charset=utf-8")
        path = urllib.parse.urlsplit(target).path
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")] if path != "/" else []
        route = self._route(method, parts)
        if route is None:
            return Response(404, "404 page not found\n", "text/plain; charset=utf-8")
        if isinstance(route, Response):
            return route
        handler, args = route
        try:
            async with self._lock:
                response: Response = await handler(*args, body)
                return response
        except ApiError as e:
            return Response(
                e.status, {"error": e.message, "status": e.status}, "text/plain; charset=utf-8"
            )
        except Exception as e:  # our bug: answer 500, and count it so that tests see it
            self.record_error(f"{method} {target}: {e!r}")
            log.exception("%s %s failed", method, target)
            return Response(500, {"error": repr(e), "status": 500}, "text/plain; charset=utf-8")

    def _route(self, method: str, parts: list[str]) -> Any:
        n = len(parts)
        table: dict[str, Any] | None = None
        args: tuple[str, ...] = ()
        if parts == ["version"]:
            table = {"GET": self._version}
        elif parts == ["reset"]:
            table = {"POST": self._reset}
        elif parts == ["populate"]:
            table = {"POST": self._populate}
        elif parts == ["proxies"]:
            table = {"GET": self._proxy_index, "POST": self._proxy_create}
        elif n == 2 and parts[0] == "proxies":
            table = {
                "GET": self._proxy_show,
                "POST": self._proxy_update,
                "PATCH": self._proxy_update,
                "DELETE": self._proxy_delete,
            }
            args = (parts[1],)
        elif n == 3 and parts[0] == "proxies" and parts[2] == "toxics":
            table = {"GET": self._toxic_index, "POST": self._toxic_create}
            args = (parts[1],)
        elif n == 4 and parts[0] == "proxies" and parts[2] == "toxics":
            table = {
                "GET": self._toxic_show,
                "POST": self._toxic_update,
                "PATCH": self._toxic_update,
                "DELETE": self._toxic_delete,
            }
            args = (parts[1], parts[3])
        if table is None:
            return None
        if method not in table:
            return Response(405, None)
        return table[method], args

    def _get(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise ApiError("proxy not found", 404)
        return proxy

    # -- handlers ----------------------------------------------------------------------------

    async def _version(self, body: bytes) -> Response:
        return Response(
            200, json.dumps({"version": VERSION}) + "\n", "application/json;charset=utf-8"
        )

    async def _reset(self, body: bytes) -> Response:
        for proxy in self.proxies.values():
            await proxy.start()
            proxy.remove_all_toxics()
        return Response(204)

    async def _proxy_index(self, body: bytes) -> Response:
        return Response(200, {name: p.to_json() for name, p in self.proxies.items()})

    async def _proxy_create(self, body: bytes) -> Response:
        fields = _proxy_fields(
            _decode(body), {"name": "", "listen": "", "upstream": "", "enabled": True}
        )
        if not fields["name"]:
            raise ApiError("missing required field: name", 400)
        if not fields["upstream"]:
            raise ApiError("missing required field: upstream", 400)
        if fields["name"] in self.proxies:
            raise ApiError("proxy already exists", 409)
        proxy = Proxy(self, fields["name"], fields["listen"], fields["upstream"])
        if fields["enabled"]:
            await proxy.start()
        self.proxies[proxy.name] = proxy
        return Response(201, proxy.to_json())

    async def _populate(self, body: bytes) -> Response:
        items = _decode(body)
        if not isinstance(items, list):
            raise _bad_body("expected a JSON array of proxies")
        wanted = []
        for i, item in enumerate(items, 1):
            fields = _proxy_fields(
                item, {"name": "", "listen": "", "upstream": "", "enabled": True}
            )
            if not fields["name"]:
                raise ApiError(f"missing required field: name at proxy {i}", 400)
            if not fields["upstream"]:
                raise ApiError(f"missing required field: upstream at proxy {i}", 400)
            wanted.append(fields)
        done: list[Proxy] = []
        for fields in wanted:
            existing = self.proxies.get(fields["name"])
            if existing is not None and not existing.differs(fields["listen"], fields["upstream"]):
                done.append(existing)
                continue
            if existing is not None:
                existing.stop()
            proxy = Proxy(self, fields["name"], fields["listen"], fields["upstream"])
            try:
                if fields["enabled"]:
                    await proxy.start()
            except ApiError as e:
                return Response(
                    e.status,
                    {
                        "error": e.message,
                        "status": e.status,
                        "proxies": [p.to_json() for p in done],
                    },
                )
            self.proxies[proxy.name] = proxy
            done.append(proxy)
        return Response(201, {"proxies": [p.to_json() for p in done]})

    async def _proxy_show(self, name: str, body: bytes) -> Response:
        return Response(200, self._get(name).to_json())

    async def _proxy_update(self, name: str, body: bytes) -> Response:
        proxy = self._get(name)
        fields = _proxy_fields(
            _decode(body),
            {"listen": proxy.listen, "upstream": proxy.upstream, "enabled": proxy.enabled},
        )
        if proxy.differs(fields["listen"], fields["upstream"]):
            proxy.stop()
            proxy.listen, proxy.upstream = fields["listen"], fields["upstream"]
        if fields["enabled"] and not proxy.enabled:
            await proxy.start()
        elif not fields["enabled"]:
            proxy.stop()
        return Response(200, proxy.to_json())

    async def _proxy_delete(self, name: str, body: bytes) -> Response:
        proxy = self._get(name)
        proxy.stop()
        del self.proxies[name]
        return Response(204)

    async def _toxic_index(self, name: str, body: bytes) -> Response:
        return Response(200, [t.to_json() for t in self._get(name).all_toxics()])

    async def _toxic_create(self, name: str, body: bytes) -> Response:
        proxy = self._get(name)
        toxic = parse_toxic(_decode(body))
        proxy.add_toxic(toxic)
        return Response(200, toxic.to_json())

    async def _toxic_show(self, name: str, toxic: str, body: bytes) -> Response:
        return Response(200, self._get(name).find_toxic(toxic).to_json())

    async def _toxic_update(self, name: str, toxic: str, body: bytes) -> Response:
        return Response(200, self._get(name).update_toxic(toxic, _decode(body)).to_json())

    async def _toxic_delete(self, name: str, toxic: str, body: bytes) -> Response:
        self._get(name).remove_toxic(toxic)
        return Response(204)


# -- the command -------------------------------------------------------------------------------


async def serve(host: str, port: int, seed: int | None) -> None:
    server = ToxiproxyServer(host, port, seed)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # One write of the whole line: a test reads the port from it.
    line = f"toxiproxy API listening on {_format_address(host, server.port)}\n"
    sys.stdout.write(line)
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m chaos.toxiproxy_server",
        description="A TCP proxy that speaks Toxiproxy's HTTP API (see the module docstring).",
    )
    p.add_argument("--host", default="127.0.0.1", help="API address (default 127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=API_PORT_DEFAULT, help="API port (8474; 0 = any free port)"
    )
    p.add_argument("--seed", type=int, default=None, help="seed for toxicity, jitter, slicing")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = p.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        asyncio.run(serve(args.host, args.port, args.seed))
    except OSError as e:
        print(f"toxiproxy server: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
