"""A client's connection to one broker: pipelined requests, responses matched by correlation id.

Rules: every request has a deadline (`request_timeout_ms`); a broken connection fails every
pending request with BrokerNotAvailableError (retriable) and is never reused; a response-level
error body ({"error": code, "message": ...}) becomes the matching RaftlogError.

A peer that is not a raftlog broker is recognised at its first bytes, not after a timeout: a
first frame whose length prefix or header length cannot be ours (over MAX_RESPONSE_BYTES,
or a header that does not fit) or that does not decode fails every request at once with
NotABrokerError, "not a raftlog broker at HOST:PORT", quoting what it sent. Line-based servers
(HTTP, Redis, SMTP) answer only once a request line ends, so the first request on a connection
carries a newline byte (its correlation id is FIRST_CORRELATION_ID, 10, "\n"), as HTTP/2's
connection preface makes HTTP/1 servers answer at once. A peer that closes before answering
anything fails the requests at once too (BrokerNotAvailableError: a broker may have just
crashed). A broker that refuses the connection (a connection limit) sends one frame with
correlation id 0 and the error saying which limit; that error fails every request.

The broker's frame limit: `learn_limits` asks ApiVersions for `request_bytes_max` (the largest
frame_length the broker reads); from then on a request over it is refused here, before it is
written, with RecordTooLargeError (a Produce) or InvalidRequestError naming both sizes. A broker
that is sent one anyway (its limit not learned yet, or a broker too old to say it) answers it
with the same error and closes the connection.

Two ways to wait for a response: `request` (await a future) for the occasional call, and
`queue_request` + `flush` for the producer's hot path: the response runs a callback straight
from `data_received` (no task, no future, no timer per request), the requests queued in one
sender pass leave in one write, and one timer per connection enforces the deadlines (requests
on a connection are answered in order, so only the oldest one's deadline needs watching).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

from raftlog import protocol
from raftlog.errors import (
    BrokerNotAvailableError,
    InvalidRequestError,
    NotABrokerError,
    RaftlogError,
    RaftlogTimeoutError,
    RecordTooLargeError,
    error_from_code,
)
from raftlog.invariants import InvariantError
from raftlog.messages.metadata import ApiVersionsRequest, ApiVersionsResponse

log = logging.getLogger(__name__)

ResponseT = tuple[dict[str, Any], memoryview]
# Correlation ids fit 32 bits, so pre-encoded headers (protocol.ProduceTemplate) can hold them.
MAX_CORRELATION_ID = 0xFFFFFFFF
# A connection's first request has correlation id 10: byte 0x0a, a newline, in its header, so a
# line-based server (HTTP...) answers it at once instead of waiting for the end of a line.
FIRST_CORRELATION_ID = 10
# The id of the one frame a broker sends on a connection it refuses (broker/connection.py).
REFUSAL_CORRELATION_ID = 0
# Largest response frame accepted. A fetch response is at most the consumer's fetch_max_bytes
# (50 MiB by default) or one batch (max.message.bytes, 1 MiB by default); 512 MiB leaves room
# for any setting one Python process could hold, and is below every length that 4 printable
# ASCII characters make (at least 0x20202020, 514 MiB): a text protocol's answer is refused
# from its first 4 bytes.
MAX_RESPONSE_BYTES = 512 * 1024 * 1024
# Bytes of a non-broker's answer quoted in NotABrokerError.
QUOTED_BYTES = 40
# Called with (body, payload, None) or (None, None, error) when a queued request ends.
ResponseCallback = Callable[[dict[str, Any] | None, memoryview | None, RaftlogError | None], None]


class BrokerConnection(asyncio.Protocol):
    def __init__(self, host: str, port: int, client_id: str):
        self.host, self.port, self.client_id = host, port, client_id
        self.transport: asyncio.Transport | None = None
        self._decoder = protocol.FrameDecoder(MAX_RESPONSE_BYTES)
        self._pending: dict[int, asyncio.Future[ResponseT] | ResponseCallback] = {}
        self._ids = itertools.count(FIRST_CORRELATION_ID)
        # The first bytes the peer sent, until it has sent one valid frame (then None).
        self._first_bytes: bytes | None = b""
        self._closed: RaftlogError | None = None
        self._drained = asyncio.Event()
        self._drained.set()
        # Queued requests not yet written.
        self._out: list[bytes | memoryview] = []
        # Callback requests in the order they were sent: correlation id, deadline, api key,
        # in three deques of numbers rather than one deque of tuples, because these live as
        # long as their requests and a tuple per request is garbage-collector work.
        self._deadline_ids: collections.deque[int] = collections.deque()
        self._deadline_at: collections.deque[float] = collections.deque()
        self._deadline_api: collections.deque[int] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        # Called when the transport's write buffer drains after pause_writing().
        self.on_writable: Callable[[], None] | None = None
        # Called when a request gets no response in time (the cluster client then asks other
        # brokers for metadata first).
        self.on_timeout: Callable[[], None] | None = None
        # The largest frame_length the broker reads, once `learn_limits` asked it (None: not
        # known, nothing refused here).
        self.request_bytes_max: int | None = None
        self.limits_learned = False

    @classmethod
    async def connect(
        cls, host: str, port: int, client_id: str, timeout_s: float = 10.0
    ) -> BrokerConnection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                _, conn = await loop.create_connection(
                    lambda: cls(host, port, client_id), host, port
                )
        except (OSError, TimeoutError) as e:
            raise BrokerNotAvailableError(
                f"cannot connect to broker at {host}:{port}: {e or 'timed out'}"
            ) from None
        return conn

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    # -- asyncio callbacks ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not isinstance(transport, asyncio.Transport):
            raise InvariantError("isinstance(transport, asyncio.Transport) does not hold")
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._first_bytes is not None:
            quoted = f" after sending {self._first_bytes!r}" if self._first_bytes else ""
            message = (
                f"{self.host}:{self.port} closed the connection before answering{quoted}: "
                "not a raftlog broker, or a broker that stopped or refused the connection"
            )
        else:
            message = f"connection to broker {self.host}:{self.port} lost"
        self._fail_all(BrokerNotAvailableError(message + (f": {exc}" if exc else "")))

    def pause_writing(self) -> None:
        self._drained.clear()

    def resume_writing(self) -> None:
        self._drained.set()
        if self.on_writable is not None:
            self.on_writable()

    @property
    def writable(self) -> bool:
        """Open, and its write buffer below the transport's high-water mark."""
        return self._closed is None and self._drained.is_set()

    def data_received(self, data: bytes) -> None:
        if self._first_bytes is not None and len(self._first_bytes) < QUOTED_BYTES:
            self._first_bytes += data[: QUOTED_BYTES - len(self._first_bytes)]
        self._decoder.feed(data)
        while True:
            try:
                frame = self._decoder.next_frame()
                if frame is None:
                    return
                corr, body = protocol.parse_response_header(frame[0])
            except protocol.RemoteProtocolError as e:
                self._invalid_frame(e)
                return
            self._first_bytes = None
            if corr == REFUSAL_CORRELATION_ID and body.get("error"):
                # The broker refused this connection and is closing it.
                self._fail_all(error_from_code(body["error"], body.get("message") or ""))
                return
            waiter = self._pending.pop(corr, None)
            if waiter is None:
                continue  # a request that timed out on our side
            error = body.get("error")
            if isinstance(waiter, asyncio.Future):
                if waiter.done():
                    continue
                if error:
                    waiter.set_exception(error_from_code(error, body.get("message") or ""))
                else:
                    waiter.set_result((body, frame[1]))
            else:
                # Answers come in request order: the oldest deadline is usually this one's.
                # Dropping it now keeps the deque as short as the requests in flight.
                ids = self._deadline_ids
                if ids and ids[0] == corr:
                    ids.popleft()
                    self._deadline_at.popleft()
                    self._deadline_api.popleft()
                if error:
                    waiter(None, None, error_from_code(error, body.get("message") or ""))
                else:
                    waiter(body, frame[1], None)

    def _closed_error(self) -> RaftlogError:
        """A new instance of the error that closed this connection (one instance raised in
        many places would collect all their tracebacks)."""
        closed = self._closed
        if closed is None:
            raise InvariantError("closed is None")
        return type(closed)(str(closed))

    def _invalid_frame(self, e: protocol.RemoteProtocolError) -> None:
        error: RaftlogError
        if self._first_bytes is not None:
            error = NotABrokerError(
                f"not a raftlog broker at {self.host}:{self.port}: it answered "
                f"{self._first_bytes!r}, which is not a raftlog frame ({e})"
            )
        else:
            error = BrokerNotAvailableError(
                f"broker {self.host}:{self.port} sent an invalid frame: {e}"
            )
        self._fail_all(error)
        if self.transport is not None:
            self.transport.abort()

    # -- requests ------------------------------------------------------------------------------

    async def learn_limits(self, timeout_s: float) -> None:
        """Ask the broker (ApiVersions) for its frame limit; from then on, requests over it are
        refused before they are sent. A broker that does not state one leaves it unknown."""
        try:
            body, _ = await self.request(
                protocol.ApiKey.API_VERSIONS, ApiVersionsRequest().to_body(), (), timeout_s
            )
        except RaftlogError as e:
            if e.retriable:
                raise  # no answer: the caller tries this broker again later
            body = {}  # a broker that refuses the question: its limit stays unknown
        self.request_bytes_max = ApiVersionsResponse.from_body(body).request_bytes_max
        self.limits_learned = True

    def check_size(self, api_key: int, frame_length: int, what: str = "") -> None:
        """Raise if a request frame of `frame_length` bytes (after its length field) is over
        the broker's limit: RecordTooLargeError for a Produce, else InvalidRequestError.
        `what` says what the request carries, for the message."""
        limit = self.request_bytes_max
        if limit is None or frame_length <= limit:
            return
        api = protocol.ApiKey(api_key).name
        message = (
            f"a {api} request of {frame_length} bytes{what} is over broker "
            f"{self.host}:{self.port}'s request_bytes_max={limit} (the largest request it "
            "reads): not sent"
        )
        if api_key == protocol.ApiKey.PRODUCE:
            raise RecordTooLargeError(message)
        raise InvalidRequestError(message)

    def send(
        self,
        api_key: int,
        body: dict[str, Any],
        payload: Sequence[bytes | memoryview] = (),
        expect_response: bool = True,
        api_version: int = 0,
    ) -> asyncio.Future[ResponseT] | None:
        """Write a request now; returns the future of its response (None if not expected)."""
        if self._closed is not None:
            raise self._closed_error()
        if self.transport is None:
            raise InvariantError("self.transport is None")
        corr = self._next_id()
        fut: asyncio.Future[ResponseT] | None = None
        frame = protocol.encode_request(api_key, api_version, corr, self.client_id, body, payload)
        if self.request_bytes_max is not None:
            self.check_size(api_key, _frame_length(frame))
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._pending[corr] = fut
        self.transport.writelines(frame)
        return fut

    def queue_request(
        self,
        api_key: int,
        body: dict[str, Any],
        payload: Sequence[bytes | memoryview],
        callback: ResponseCallback | None,
        timeout_s: float,
    ) -> None:
        """Queue a request for the next `flush`; `callback` gets its outcome (None: no response
        is expected, as for acks=0)."""
        corr = self._register(api_key, callback, timeout_s)
        frame = protocol.encode_request(api_key, 0, corr, self.client_id, body, payload)
        if self.request_bytes_max is not None:
            try:
                self.check_size(api_key, _frame_length(frame))
            except RaftlogError:
                self._forget(corr)
                raise
        self._out += frame

    def queue_produce(
        self,
        template: protocol.ProduceTemplate,
        payload: Sequence[bytes | memoryview],
        nbytes: int,
        callback: ResponseCallback | None,
        timeout_s: float,
    ) -> None:
        """`queue_request` for a one-partition Produce whose header comes from `template`
        (`nbytes` = the payload's size)."""
        limit = self.request_bytes_max
        if limit is not None and template.frame_length(nbytes) > limit:
            self.check_size(protocol.ApiKey.PRODUCE, template.frame_length(nbytes))
        corr = self._register(protocol.ApiKey.PRODUCE, callback, timeout_s)
        out = self._out
        out.append(template.frame_prefix(corr, nbytes))
        out += payload

    def _next_id(self) -> int:
        corr = next(self._ids)
        if corr > MAX_CORRELATION_ID:
            # Ids wrap (a connection can live for days at 50k requests/s); an id comes back
            # only after 4 billion others, long after its request ended.
            self._ids = itertools.count(1)
            corr = next(self._ids)
        return corr

    def _register(self, api_key: int, callback: ResponseCallback | None, timeout_s: float) -> int:
        """A correlation id for a queued request; its callback and deadline are kept."""
        if self._closed is not None:
            raise self._closed_error()
        corr = self._next_id()
        if callback is not None:
            self._pending[corr] = callback
            self._deadline_ids.append(corr)
            self._deadline_at.append(time.monotonic() + timeout_s)
            self._deadline_api.append(api_key)
            if self._timer is None:
                self._arm_timer()
        return corr

    def _forget(self, corr: int) -> None:
        """Undo `_register` of the request just registered (it will not be sent)."""
        self._pending.pop(corr, None)
        if self._deadline_ids and self._deadline_ids[-1] == corr:
            self._deadline_ids.pop()
            self._deadline_at.pop()
            self._deadline_api.pop()

    def flush(self) -> None:
        """Write every queued request (one write for all of them)."""
        if self._out and self.transport is not None and self._closed is None:
            out, self._out = self._out, []
            self.transport.writelines(out)

    def _arm_timer(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(
            loop.time() + max(self._deadline_at[0] - time.monotonic(), 0) + 0.001,
            self._check_deadlines,
        )

    def _check_deadlines(self) -> None:
        self._timer = None
        now = time.monotonic()
        ids, at, apis = self._deadline_ids, self._deadline_at, self._deadline_api
        while ids and (ids[0] not in self._pending or at[0] <= now):
            corr, deadline, api_key = ids.popleft(), at.popleft(), apis.popleft()
            waiter = self._pending.get(corr)
            if deadline <= now and waiter is not None and not isinstance(waiter, asyncio.Future):
                del self._pending[corr]
                self._timed_out()
                waiter(
                    None,
                    None,
                    RaftlogTimeoutError(
                        f"{protocol.ApiKey(api_key).name} request to {self.host}:{self.port} "
                        "got no response in time"
                    ),
                )
        if ids and self._closed is None:
            self._arm_timer()

    async def request(
        self,
        api_key: int,
        body: dict[str, Any],
        payload: Sequence[bytes | memoryview] = (),
        timeout_s: float = 30.0,
    ) -> ResponseT:
        fut = self.send(api_key, body, payload)
        if fut is None:
            raise InvariantError("fut is None")
        try:
            async with asyncio.timeout(timeout_s):
                return await fut
        except TimeoutError:
            self._timed_out()
            raise RaftlogTimeoutError(
                f"{protocol.ApiKey(api_key).name} request to {self.host}:{self.port} got no "
                f"response in {timeout_s:.1f} s"
            ) from None

    def _timed_out(self) -> None:
        if self.on_timeout is not None:
            self.on_timeout()

    async def wait_writable(self) -> None:
        await self._drained.wait()

    def _fail_all(self, error: RaftlogError) -> None:
        if self._closed is None:
            self._closed = error
        pending, self._pending = self._pending, {}
        self._deadline_ids.clear()
        self._deadline_at.clear()
        self._deadline_api.clear()
        self._out = []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for waiter in pending.values():
            if not isinstance(waiter, asyncio.Future):
                waiter(None, None, error)
            elif not waiter.done():
                waiter.set_exception(error)
        self._drained.set()
        if self.on_writable is not None:
            self.on_writable()

    def close(self) -> None:
        self._fail_all(BrokerNotAvailableError(f"connection to {self.host}:{self.port} closed"))
        if self.transport is not None:
            self.transport.close()


def _frame_length(frame: Sequence[bytes | memoryview]) -> int:
    """The frame_length field of an encoded frame (its bytes after that field)."""
    return sum(map(len, frame)) - 4
