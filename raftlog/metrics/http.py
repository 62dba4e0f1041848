"""The metrics listener: a minimal HTTP/1.x server on the node's own event loop.

`GET /metrics` (a query string is ignored) answers `prometheus_client.generate_latest` of the
node's registry with its content type; any other path 404, any other method on it 405. Every
answer closes the connection (Prometheus opens one per scrape).

Why not prometheus_client's `start_http_server`: it serves from threads of its own, so its
collectors would read the broker's dicts while the event loop changes them ("dictionary
changed size during iteration", or worse, a half-made view). Here a scrape is a callback of
the loop that owns the broker, like any request.

Limits (a metrics port is often reachable by more than Prometheus):
- at most CONNECTIONS_MAX connections at once; more are closed at once;
- a request head of at most REQUEST_HEAD_BYTES_MAX bytes (a longer one is answered 431 and
  closed), within REQUEST_HEAD_S of the connection opening (else closed): a peer that
  trickles holds nothing for long;
- a request line that is not `METHOD TARGET HTTP/1.x` gets 400 and the connection closes;
- a collector that raises (a bug) makes that scrape a 500, logged; the node goes on.
A body sent with the request is never read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
# Prometheus and a few people's curls: a handful of connections at once is plenty.
CONNECTIONS_MAX = 16
# A scrape's request head is a few hundred bytes (Prometheus sends Accept, User-Agent and a
# scrape-timeout header); 8 KiB is what many servers allow a whole head.
REQUEST_HEAD_BYTES_MAX = 8192
# Prometheus' default scrape timeout is 10 s; a head takes milliseconds to arrive.
REQUEST_HEAD_S = 10.0
# How long a response may take to leave before the connection is dropped.
RESPONSE_SEND_S = 30.0


class MetricsServer:
    """Serves `registry` at http://host:port/metrics on the running loop."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        exposition: Callable[[CollectorRegistry], bytes] = generate_latest,
    ):
        self.registry = registry
        self.host = host
        self.port = port
        self._exposition = exposition
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.Task[None]] = set()
        self.refused = 0  # connections closed for CONNECTIONS_MAX
        self.scrapes = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, limit=REQUEST_HEAD_BYTES_MAX, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        server = self._server
        if server is None:
            return
        server.close()
        for task in list(self._open):
            task.cancel()
        if self._open:
            await asyncio.wait(list(self._open))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await server.wait_closed()
        self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None or len(self._open) >= CONNECTIONS_MAX:
            self.refused += 1
            writer.close()
            return
        self._open.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the peer went away or was too slow: nothing to answer
        finally:
            self._open.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_HEAD_S):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            await _answer(writer, 431, b"request head too large\n")
            return
        except asyncio.IncompleteReadError as e:
            if not e.partial:
                return  # connected and closed (a port check)
            head = e.partial  # the peer closed after its head: answer what we got
        status, body, content_type = self.respond(head)
        await _answer(writer, status, body, content_type)

    def respond(self, head: bytes) -> tuple[int, bytes, str]:
        """(status, body, content type) for a request head (its bytes up to the blank line).
        Pure but for the exposition: unit-tested without sockets."""
        line = head.split(b"\r\n", 1)[0]
        parts = line.split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            return 400, b"bad request\n", _TEXT
        method, target = parts[0], parts[1]
        path = target.split(b"?", 1)[0]
        if path != METRICS_PATH.encode():
            return 404, b"not found: the metrics are at /metrics\n", _TEXT
        if method != b"GET":
            return 405, b"method not allowed: GET /metrics\n", _TEXT
        self.scrapes += 1
        try:
            body = self._exposition(self.registry)
        except Exception:
            # A collector's bug: the scrape fails (Prometheus records it), the node goes on.
            log.exception("building the metrics failed")
            return 500, b"internal error building the metrics (the node's log has it)\n", _TEXT
        return 200, body, CONTENT_TYPE_LATEST


_TEXT = "text/plain; charset=utf-8"
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}


async def _answer(
    writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str = _TEXT
) -> None:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    writer.write(head + body)
    async with asyncio.timeout(RESPONSE_SEND_S):
        await writer.drain()
