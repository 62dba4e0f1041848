"""Client connections: frames in, responses out in request order, within shared limits.

Rules:
- Requests are pipelined: the client may send many before reading a response. Each request gets
  a slot in a FIFO; a handler fills its slot now (produce, metadata) or later (a long-polling
  fetch), and responses leave strictly in request order, as Kafka clients expect.
- Bad input never stops the broker: an unparseable frame (garbage, a header that is not
  msgpack, a frame over the size limit) gets an error response when its correlation id can be
  read and the connection is closed; a well-framed request with bad content (unknown API or
  version, a body without its API's shape: protocol.REQUEST_BODIES) gets an
  InvalidRequestError naming the field, and the connection stays open.
- A handler that raises anything but a RaftlogError has a bug: the broker logs it at ERROR
  with its traceback, answers that request with a generic internal error (code 1), and keeps
  serving this connection and every other. Nothing the client sent is blamed for it.
- Back-pressure: reading pauses while too many responses are queued or the socket's write
  buffer is full, so a client that never reads cannot make the broker buffer without limit.
- Request memory (`RequestMemory` in request_memory.py, Kafka's queued.max.request.bytes):
  each listener's connections share a pool, counted as bytes arrive (what a decoder buffers,
  plus one socket read reserved while a frame is incomplete), never for what a length prefix
  announces. A connection whose next read does not fit stops reading until memory is
  released; the oldest incomplete frame may always read on, so frames always complete. A
  frame larger than the pool could never fit and is refused like an oversized frame.
- A frame must arrive in full within `request_receive_ms_max` of its first byte (Kafka's
  request timeouts play this part for its clients): a connection that trickles is closed, and
  logged at WARNING with its address, the frame's announced size, the bytes received and the
  setting (at most SLOW_FRAME_LOG_BURST lines per SLOW_FRAME_LOG_INTERVAL_S, then a count).
- A frame over the limit (`request_bytes_max`, or a pool smaller than that) is answered before
  the connection closes: the decoder reads the small header after the length prefix (at most
  OVERSIZED_HEADER_BYTES_MAX) for the correlation id, the request gets RecordTooLargeError
  (a Produce) or InvalidRequestError (any other API) naming the frame's size, the limit and its
  setting, the rest of the frame is read and dropped (never buffered: a close with unread bytes
  would reset the connection and lose the answer), then the connection closes. A header that
  cannot be read closes it at once. ApiVersions tells clients the limit, so they refuse such
  requests before sending them.
- Listeners: the client and external listeners share one `Connections`; the replication
  listener has its own (its own pool and limits), so a client cannot make followers' fetches
  wait, and serves only what followers need (REPLICATION_APIS, and Fetch only from replicas);
  any other request gets InvalidRequestError naming the client listener.
- Connection limits (`Connections`, per listener as above): at most `connections_max` in
  all and `connections_per_address_max` from one address; a refused connection gets one error frame
  (correlation id 0, PolicyViolationError naming the limit) and is closed, and refusals are
  logged at most once per REFUSAL_LOG_INTERVAL_S with a count. A connection with no request in
  flight and no bytes received for `connection_idle_ms_max` is closed (Kafka's
  connections.max.idle.ms).
- Fetch responses may carry file slices, sent with sendfile. A Response dups each segment fd
  its slices name when it is built (in the same synchronous step as the read that took the
  slices), so a segment deleted before the send is still read whole; a segment truncated under
  us sends fewer bytes than the frame announced, and the connection is then aborted rather
  than left desynced.
- Queued responses are bounded per connection: MAX_PENDING_RESPONSES of them, their
  MAX_PENDING_RESPONSE_FDS segment dups, MAX_PENDING_RESPONSE_BYTES of payload not yet handed
  to the socket (fetches served with pread + write), and a full socket buffer. Dispatching
  stops at the request that reaches a bound and reading pauses; the frames already read wait
  in the decoder and are dispatched when the queue drains. So a client that pipelines fetches
  and never reads exhausts neither the broker's fds nor its memory.
- The responses completed while one read's frames are dispatched leave in one write at the
  end of that read: a client that pipelines many small requests costs one send per read, not
  one per request.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
from bisect import bisect_left
from collections import Counter, deque
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from raftlog import protocol
from raftlog.broker.config import BrokerConfig
from raftlog.broker.request_memory import RequestMemory
from raftlog.broker.response import Response, SendfileSlice, error_response
from raftlog.errors import (
    InvalidRequestError,
    PolicyViolationError,
    RaftlogError,
    RecordTooLargeError,
    UnsupportedVersionError,
)
from raftlog.invariants import InvariantError
from raftlog.messages.produce import ProduceRequest, ProduceResponse
from raftlog.metrics.stats import LATENCY_BUCKETS_S, BrokerStats, RequestTable, camel_case
from raftlog.tasks import TaskSet

if TYPE_CHECKING:
    from collections.abc import Iterable

    from raftlog.broker.handlers import produce
    from raftlog.broker.handlers.produce import CommitWait, ProduceGroup

log = logging.getLogger(__name__)

# Responses queued (being computed or waiting for earlier ones) before reading pauses.
MAX_PENDING_RESPONSES = 1000
# Segment fds dup'd by a connection's queued fetch responses before reading pauses: each
# response holds a dup per segment it reads from until it is sent, and a client that pipelines
# fetches without reading must not make the broker run out of file descriptors.
MAX_PENDING_RESPONSE_FDS = 256
# Payload bytes of a connection's queued responses (fetches served with pread + write) before
# dispatching pauses: one fetch at the consumer's default fetch_max_bytes (50 MiB) fits.
MAX_PENDING_RESPONSE_BYTES = 64 * 1024 * 1024
_PRODUCE = int(protocol.ApiKey.PRODUCE)
_check_produce_body = protocol.REQUEST_BODIES[_PRODUCE].check
# Produce requests appended together before their responses are written: enough to make the
# write cost per request small, few enough that the client gets answers while we work.
MAX_GROUPED_REQUESTS = 128
# A flood of refused connections logs one line per interval (with a count), not one each.
REFUSAL_LOG_INTERVAL_S = 10.0
# Connections closed for a frame that did not arrive in time: a few lines each interval, each
# naming its peer (an operator looks for who), then a count.
SLOW_FRAME_LOG_INTERVAL_S = 10.0
SLOW_FRAME_LOG_BURST = 10
# The header read from an oversized frame to answer it: a request header is a few hundred
# bytes (a Produce's lists its partitions); a longer one is not read, the connection closes.
OVERSIZED_HEADER_BYTES_MAX = 64 * 1024
# The correlation id of the one frame a refused connection gets: clients start at 1.
REFUSAL_CORRELATION_ID = 0


class _Slot:
    """A request's place in the response queue; its API (-1: its header could not be read)
    and arrival time (the loop's time, which is time.monotonic()) are for the metrics."""

    __slots__ = ("api_key", "correlation_id", "received_at", "response")

    def __init__(self, correlation_id: int, api_key: int = -1, received_at: float = 0.0):
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.received_at = received_at
        self.response: Response | None = None


class Listener(enum.Enum):
    """Which listener accepted a connection (raftlog/node.py has them all)."""

    CLIENT = "client"
    # Metadata and FindCoordinator name the brokers' external addresses.
    EXTERNAL = "external"
    # Followers' fetches: its own Connections, and only REPLICATION_APIS.
    REPLICATION = "replication"
    # Kafka's wire protocol (raftlog/broker/kafka_connection.py), sharing the client
    # listeners' Connections; the external one names the brokers' external Kafka addresses.
    KAFKA = "kafka"
    KAFKA_EXTERNAL = "kafka_external"


# What the replication listener serves: a follower's fetches, and what it may ask first.
REPLICATION_APIS = frozenset(
    int(k) for k in (protocol.ApiKey.API_VERSIONS, protocol.ApiKey.METADATA, protocol.ApiKey.FETCH)
)


class _RateLimitedLog:
    """The first `burst` lines of an interval are logged as they come (WARNING); the others
    are counted and summed up in one line at the end of the interval: a flood must not turn
    into a flood of log lines."""

    def __init__(self, interval_s: float, burst: int, summary: str):
        # `summary` is a format with {count}, {interval_s} and {last}.
        self.interval_s = interval_s
        self.burst = burst
        self.summary = summary
        self.noted = 0  # since the broker started
        self._logged = 0  # in this interval
        self._suppressed = 0
        self._last = ""
        self._timer: asyncio.TimerHandle | None = None

    def note(self, line: str, last: str) -> None:
        """Log `line`, or count it (`last` describes it in the summary)."""
        self.noted += 1
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._flush)
        if self._logged < self.burst:
            self._logged += 1
            log.warning("%s", line)
        else:
            self._suppressed += 1
            self._last = last

    def _flush(self) -> None:
        self._logged = 0
        if not self._suppressed:
            self._timer = None
            return
        log.warning(
            "%s",
            self.summary.format(
                count=self._suppressed, interval_s=self.interval_s, last=self._last
            ),
        )
        self._suppressed = 0
        self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._flush)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Connections:
    """Every open connection of one listener (or of the client and external listeners
    together) and the limits they share: how many in all, how many per address, the request
    memory pool, the idle timeout, the frame deadline."""

    def __init__(self, config: BrokerConfig, name: str = "client"):
        self.config = config
        self.name = name
        self.open: set[Connection] = set()
        self._per_address: Counter[str] = Counter()
        self.memory: RequestMemory[Connection] = RequestMemory(
            config.queued_request_bytes_max, Connection.memory_available
        )
        self.refusals = _RateLimitedLog(
            REFUSAL_LOG_INTERVAL_S,
            1,
            "refused {count} more connections in the last {interval_s:.0f} s (the last from "
            "{last})",
        )
        self.slow_frames = _RateLimitedLog(
            SLOW_FRAME_LOG_INTERVAL_S,
            SLOW_FRAME_LOG_BURST,
            "closed {count} more connections in the last {interval_s:.0f} s whose frame did "
            f"not arrive within request_receive_ms_max={config.request_receive_ms_max} (the "
            "last from {last})",
        )
        self.idle_s = config.connection_idle_ms_max / 1000
        self.frame_deadline_s = config.request_receive_ms_max / 1000
        # What one frame may be: both bounds apply, and the message names the one that bit.
        self.frame_bytes_max = min(config.request_bytes_max, config.queued_request_bytes_max)
        self.frame_limit_setting = (
            f"queued_request_bytes_max={config.queued_request_bytes_max} (all connections' "
            "request bytes)"
            if config.queued_request_bytes_max < config.request_bytes_max
            else f"request_bytes_max={config.request_bytes_max}"
        )

    def admit(self, conn: Connection, address: str) -> str | None:
        """Register `conn`, or return why it is refused."""
        cfg = self.config
        if len(self.open) >= cfg.connections_max:
            return f"connections_max={cfg.connections_max} reached"
        if self._per_address[address] >= cfg.connections_per_address_max:
            return (
                f"connections_per_address_max={cfg.connections_per_address_max} reached "
                f"for {address}"
            )
        self.open.add(conn)
        self._per_address[address] += 1
        return None

    def remove(self, conn: Connection, address: str) -> None:
        if conn in self.open:
            self.open.discard(conn)
            self._per_address[address] -= 1
            if not self._per_address[address]:
                del self._per_address[address]
        self.memory.release(conn)

    def close(self) -> None:
        self.refusals.close()
        self.slow_frames.close()


class ConnectionHost(Protocol):
    """What a connection needs of the broker that accepted it (server.py's Broker)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def port(self) -> int: ...

    @property
    def connections(self) -> Connections: ...

    @property
    def replication_connections(self) -> Connections: ...

    @property
    def handlers(self) -> dict[int, Any]:
        """API key -> handler(body, payload, connection), the broker bound in."""
        ...

    @property
    def kafka_handlers(self) -> dict[int, Any]:
        """Kafka API key -> handler(request, version, connection), the broker bound in
        (raftlog/kafka/handlers/registry.py)."""
        ...

    def produce_group(self) -> ProduceGroup:
        """A group for the Produce requests of one socket read (handlers/produce.py)."""
        ...

    @property
    def stats(self) -> BrokerStats:
        """The broker's event counters (raftlog/metrics/stats.py): requests per API."""
        ...

    def topics_to_auto_create(self, topics: Iterable[Any]) -> list[str]: ...


class Connection(asyncio.Protocol):
    def __init__(self, broker: ConnectionHost, listener: Listener = Listener.CLIENT):
        self.broker = broker
        self.listener = listener
        # Accepted by the external listener: Metadata and FindCoordinator then name the
        # brokers' external addresses.
        self.external = listener in (Listener.EXTERNAL, Listener.KAFKA_EXTERNAL)
        # The client id of the request being dispatched (Kafka's request header carries one;
        # raftlog's protocol does not: ""), for handlers that name things after it.
        self.client_id = ""
        self._replication = listener is Listener.REPLICATION
        self.connections: Connections = (
            broker.replication_connections
            if listener is Listener.REPLICATION
            else broker.connections
        )
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._address = "?"
        self._decoder = protocol.FrameDecoder(
            self.connections.frame_bytes_max, OVERSIZED_HEADER_BYTES_MAX
        )
        self._slots: deque[_Slot] = deque()
        self._tasks = TaskSet("connection")
        self._paused_reading = False
        self._write_paused = False
        self._waiting_memory = False
        self._closing = False
        # An oversized frame was answered: its rest is read and dropped, then we close.
        self._draining = False
        self._sending = False  # a sendfile writer is running
        # Why to close once every request so far is answered (close_after_answer), or None.
        self._close_after: str | None = None
        # Segment fds held by queued responses (Response.fds), bounded by reading less.
        self._response_fds = 0
        # Payload bytes of queued responses (Response.nbytes), and of those gathered in _out.
        self._response_bytes = 0
        self._gathered_bytes = 0
        # _process is running; or is scheduled to dispatch frames left buffered.
        self._processing = False
        self._resume_handle: asyncio.Handle | None = None
        # While data_received dispatches a read's frames, responses gather here.
        self._out: list[Any] | None = None
        # Slots of the current produce group's requests, and their response topic lists.
        self._grouped: list[tuple[_Slot, produce.Results, CommitWait | None]] = []
        # Idle detection: when bytes last arrived (loop time), and the timer that checks.
        self._received_at = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        # The frame deadline: the number of the incomplete frame being timed, and its timer.
        self._timed_frame = -1
        self._frame_timer: asyncio.TimerHandle | None = None
        # The metrics: this listener's requests, counted as each is answered (None: off).
        self._requests = self._request_table(broker.stats)

    def _request_table(self, stats: BrokerStats) -> RequestTable | None:
        return stats.requests(self.listener.value, _api_name) if stats.enabled else None

    def close_after_answer(self, why: str) -> None:
        """Close this connection once every request read so far is answered (requests read
        after it are dropped; the client sends them again on a new connection)."""
        self._close_after = why

    @property
    def request_bytes_max(self) -> int:
        """The largest frame_length this connection's listener reads."""
        return self.connections.frame_bytes_max

    @property
    def busy(self) -> bool:
        """Responses still owed to this client."""
        return bool(self._slots) or self._sending

    # -- asyncio callbacks ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not isinstance(transport, asyncio.Transport):
            raise TypeError(f"a broker connection needs a stream transport, got {transport!r}")
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if peer:
            self._address = str(peer[0])
            self.peer = f"{peer[0]}:{peer[1]}"
        refused = self.connections.admit(self, self._address)
        if refused is not None:
            self._closing = True
            self.connections.refusals.note(
                f"refusing connection from {self.peer}: {refused}", f"{self.peer}: {refused}"
            )
            frame = self._refusal_frame(refused)
            if frame:
                transport.write(frame)
            transport.close()
            return
        loop = asyncio.get_running_loop()
        self._received_at = loop.time()
        self._idle_timer = loop.call_at(
            self._received_at + self.connections.idle_s, self._check_idle
        )
        log.debug("connection from %s", self.peer)

    def _refusal_frame(self, refused: str) -> bytes:
        """One frame saying why a connection is refused, so the client reports the limit
        rather than a reset (b"": the protocol has no such frame, just close)."""
        return protocol.encode_response_header(
            REFUSAL_CORRELATION_ID,
            {"error": PolicyViolationError.code, "message": f"connection refused: {refused}"},
            0,
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        for handle in (self._idle_timer, self._resume_handle, self._frame_timer):
            if handle is not None:
                handle.cancel()
        self._idle_timer = self._resume_handle = self._frame_timer = None
        self._tasks.cancel()
        for slot in self._slots:
            if slot.response is not None:
                slot.response.close()
        self._slots.clear()
        self.connections.remove(self, self._address)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._flush()
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._received_at = asyncio.get_running_loop().time()
        if self._draining:
            # The rest of an oversized frame: dropped (the decoder counts it down); bytes
            # after it are not read at all, the connection closes once it is answered.
            self._decoder.feed(memoryview(data)[: self._decoder.discarding_bytes])
            self._maybe_finish_draining()
            return
        self._decoder.feed(data)
        self._process()

    def _process(self) -> None:
        """Dispatch the whole frames buffered, until the queued responses reach a bound (the
        rest wait in the decoder; `_update_reading` resumes them once the queue drains)."""
        self._resume_handle = None
        if self._processing or self._closing or self._draining:
            return
        self._processing = True
        self._out = []
        # The Produce requests of this read are appended together (handlers/produce.py): a
        # pipelining producer costs one write per partition per read, not one per request.
        group: ProduceGroup | None = None
        try:
            slots = self._slots
            # _backlogged, inlined: this runs once per request on the produce hot path.
            while (
                len(slots) < MAX_PENDING_RESPONSES
                and self._response_fds < MAX_PENDING_RESPONSE_FDS
                and self._response_bytes < MAX_PENDING_RESPONSE_BYTES
                and not self._write_paused
                and not self._closing
            ):
                try:
                    frame = self._decoder.next_frame()
                except protocol.RemoteProtocolError as e:
                    if group is not None:
                        self._finish_group(group)
                        group = None
                    if not isinstance(e, protocol.FrameTooLargeError):
                        self._protocol_error(None, e)
                        return
                    self._refuse_oversized(e)
                    break
                if frame is None:
                    break
                header, payload = frame
                if (
                    len(header) == 5
                    and header[0] == _PRODUCE
                    and not self._replication
                    and header[1] == 0
                    and type(header[2]) is int
                    and type(header[4]) is dict
                ):
                    if group is None:
                        group = self.broker.produce_group()
                    if self._add_produce(group, header[2], header[4], payload):
                        if len(group) >= MAX_GROUPED_REQUESTS:
                            # Answer what we have: the client works on these responses
                            # while we append the rest of the read.
                            self._finish_group(group)
                            group = None
                            self._write_gathered()
                            self._out = []
                        continue
                if group is not None:
                    self._finish_group(group)
                    group = None
                self._dispatch(header, payload)
        finally:
            if group is not None:
                self._finish_group(group)
            self._write_gathered()
            self._processing = False
        self._account_memory()
        self._update_reading()
        if self._draining:
            self._maybe_finish_draining()

    def _refuse_oversized(self, e: protocol.FrameTooLargeError) -> None:
        """Answer a frame over the limit (if its header gave a correlation id), drop the rest
        of it as it arrives, then close (module docstring)."""
        conns = self.connections
        header = e.header
        corr = header[2] if header and len(header) > 2 and type(header[2]) is int else None
        api = header[0] if header and type(header[0]) is int else None
        what = _API_NAMES.get(api, "request") if api is not None else "request"
        message = (
            f"a {what} frame of {e.frame_bytes - 4} bytes (after its length field) exceeds "
            f"broker {self.broker.config.node_id}'s {conns.frame_limit_setting}"
        )
        log.warning("closing connection from %s: %s", self.peer, message)
        if corr is None:
            self._write_gathered()
            self._close()
            return
        error: RaftlogError = (
            RecordTooLargeError(message) if api == _PRODUCE else InvalidRequestError(message)
        )
        self._respond_error(corr, error, -1 if api is None else api)
        self._draining = True
        # Nothing more is buffered for this connection; the frame deadline bounds the rest.
        conns.memory.release(self)
        self._waiting_memory = False
        self._watch_frame(self._decoder.discarding_bytes > 0)

    def _maybe_finish_draining(self) -> None:
        """Close a draining connection once the oversized frame is read and every response
        before its answer (and the answer) is written."""
        if (
            self._draining
            and not self._closing
            and not self._decoder.discarding_bytes
            and not self.busy
            and self._out is None
        ):
            self._close()

    def _close(self) -> None:
        self._closing = True
        # It reads nothing more: what it held goes back now, not when the transport has
        # flushed (a peer that does not read could hold it, and the oldest frame's privilege).
        self.connections.memory.release(self)
        if self.transport is not None:
            self.transport.close()  # sends what is buffered, then closes

    def _account_memory(self) -> None:
        if self._closing:
            return
        if self._draining:
            self._waiting_memory = False  # it holds nothing: it reads to drop
            return
        dec = self._decoder
        partial = dec.partial_frame()
        if partial is None:
            missing = frame = 0
        else:
            missing, frame = partial.missing_bytes, partial.number
        memory = self.connections.memory
        self._waiting_memory = not memory.update(self, dec.buffered_bytes, missing, frame)
        self._watch_frame(partial is not None, frame)
        if self._waiting_memory:
            log.debug(
                "%s: request memory full (%d of queued_request_bytes_max=%d used); reading "
                "paused with %d bytes buffered",
                self.peer,
                memory.used,
                memory.bytes_max,
                dec.buffered_bytes,
            )

    def _watch_frame(self, incomplete: bool, frame: int = -2) -> None:
        """Time the incomplete frame `frame` (a new one from now), or stop timing."""
        if not incomplete:
            if self._frame_timer is not None:
                self._frame_timer.cancel()
                self._frame_timer = None
            return
        if self._frame_timer is not None and self._timed_frame == frame:
            return  # the same frame: its deadline stands
        if self._frame_timer is not None:
            self._frame_timer.cancel()
        self._timed_frame = frame
        loop = asyncio.get_running_loop()
        self._frame_timer = loop.call_at(
            loop.time() + self.connections.frame_deadline_s, self._frame_overdue
        )

    def _frame_overdue(self) -> None:
        """A frame did not arrive in full within request_receive_ms_max: close the connection."""
        self._frame_timer = None
        if self._closing or self.transport is None:
            return
        partial = self._decoder.partial_frame()
        if self._draining:
            announced, received = "the rest of an oversized frame", ""
        elif partial is None or partial.number != self._timed_frame:
            return  # completed meanwhile (a timer that lost a race with a read)
        elif partial.frame_bytes:
            announced = f"its frame of {partial.frame_bytes} bytes"
            received = f" ({partial.received_bytes} received)"
        else:
            announced = "its frame's length prefix"
            received = f" ({partial.received_bytes} of 4 bytes received)"
        ms = self.connections.config.request_receive_ms_max
        self.connections.slow_frames.note(
            f"closing connection from {self.peer}: {announced} did not arrive within "
            f"request_receive_ms_max={ms}{received}",
            self.peer,
        )
        self._close()

    def memory_available(self) -> None:
        """Called by RequestMemory when memory was released (or this connection's frame
        became the oldest): try again, read on if granted."""
        self._account_memory()
        self._update_reading()

    def _check_idle(self) -> None:
        self._idle_timer = None
        transport = self.transport
        if self._closing or transport is None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        idle_s = self.connections.idle_s
        if self.busy or self._waiting_memory:
            # A request in flight, or we are the ones not reading: not idle. Count from now.
            self._received_at = now
        elif now - self._received_at >= idle_s:
            log.debug(
                "closing connection from %s: idle for connection_idle_ms_max=%d",
                self.peer,
                self.connections.config.connection_idle_ms_max,
            )
            self._close()
            return
        self._idle_timer = loop.call_at(self._received_at + idle_s, self._check_idle)

    def _add_produce(
        self, group: ProduceGroup, correlation_id: int, body: dict[str, Any], payload: memoryview
    ) -> bool:
        """Add a Produce request to this read's group; False if it must take the ordinary
        path (it names a topic to auto-create, which waits for the quorum)."""
        broker = self.broker
        try:
            _check_produce_body(body)
            request = ProduceRequest.from_body(body)
            acks = group.acks_of(request)
            if broker.config.auto_create_topics and broker.topics_to_auto_create(
                request.topic_names()
            ):
                return False
            results, wait = group.add(acks, request, payload, None, group.timeout_of(request))
        except Exception as e:
            self._request_failed(correlation_id, _PRODUCE, e)
            return True
        if acks:
            slot = _Slot(correlation_id, _PRODUCE, self._received_at)
            self._slots.append(slot)
            self._grouped.append((slot, results, wait))
        else:
            self.handled_unanswered(_PRODUCE)
        return True

    def _finish_group(self, group: ProduceGroup) -> None:
        group.finish()
        grouped, self._grouped = self._grouped, []
        for slot, results, wait in grouped:
            if wait is None or wait.remaining == 0:
                slot.response = Response(ProduceResponse.body_of(results))
            else:
                # acks=all: answered when its last partition commits (or fails), in order.
                wait.on_done = functools.partial(self._answer_later, slot, results)
        self._flush()

    def _answer_later(self, slot: _Slot, results: produce.Results) -> None:
        slot.response = Response(ProduceResponse.body_of(results))
        if not self._closing:
            self._flush()

    def _write_gathered(self) -> None:
        out, self._out = self._out, None
        self._response_bytes -= self._gathered_bytes
        self._gathered_bytes = 0
        if out and self.transport is not None:
            self.transport.writelines(out)

    @property
    def _backlogged(self) -> bool:
        """Too much queued for this client: dispatch no more of its requests for now."""
        return (
            len(self._slots) >= MAX_PENDING_RESPONSES
            or self._response_fds >= MAX_PENDING_RESPONSE_FDS
            or self._response_bytes >= MAX_PENDING_RESPONSE_BYTES
            or self._write_paused
        )

    def _hold(self, resp: Response) -> None:
        self._response_fds += resp.fds
        self._response_bytes += resp.nbytes

    def _release(self, resp: Response) -> None:
        self._response_fds -= resp.fds
        self._response_bytes -= resp.nbytes

    # -- dispatch ------------------------------------------------------------------------------

    def _dispatch(self, header: list[Any], payload: memoryview) -> None:
        try:
            api_key, version, correlation_id, _client_id, body = protocol.parse_request_header(
                header
            )
        except protocol.RemoteProtocolError as e:
            corr = header[2] if len(header) > 2 and isinstance(header[2], int) else None
            if e.fatal or corr is None:
                self._protocol_error(corr, e)
            else:
                self._respond_error(corr, InvalidRequestError(str(e)))
            return
        handler = self.broker.handlers.get(api_key)
        supported = protocol.SUPPORTED_VERSIONS.get(api_key)
        if handler is None or supported is None:
            self._respond_error(
                correlation_id, UnsupportedVersionError(f"unknown API key {api_key}")
            )
            return
        if not supported[0] <= version <= supported[1]:
            self._respond_error(
                correlation_id,
                UnsupportedVersionError(
                    f"API {protocol.ApiKey(api_key).name} version {version} is not supported "
                    f"(supported: {supported[0]}..{supported[1]})"
                ),
                api_key,
            )
            return
        if self._replication and not _replication_request(api_key, body):
            self._respond_error(correlation_id, self._not_for_replication(api_key), api_key)
            return
        try:
            protocol.check_request_body(api_key, body)
            result = handler(body, payload, self)
        except Exception as e:
            self._request_failed(correlation_id, api_key, e)
            return
        if result is None:
            self.handled_unanswered(api_key)
            return  # acks=0 produce: no response at all
        slot = _Slot(correlation_id, api_key, self._received_at)
        self._slots.append(slot)
        if isinstance(result, Response):
            slot.response = result
            self._hold(result)
            self._flush()
        else:
            self._tasks.spawn(self._complete(slot, result, api_key), "a pending response")

    async def _complete(self, slot: _Slot, pending: Awaitable[Response], api_key: int) -> None:
        try:
            slot.response = await pending
            self._hold(slot.response)
        except RaftlogError as e:
            slot.response = error_response(e)
        except Exception as e:
            slot.response = self._internal_error(slot.correlation_id, _request_of(api_key), e)
        self._flush()

    def _not_for_replication(self, api_key: int) -> InvalidRequestError:
        broker = self.broker
        what = protocol.ApiKey(api_key).name
        if api_key == protocol.ApiKey.FETCH:
            what = "a consumer's FETCH (replica_id -1)"
        return InvalidRequestError(
            f"broker {broker.config.node_id}'s replication listener serves only followers "
            f"(API_VERSIONS, METADATA and a replica's FETCH), not {what}: clients connect to "
            f"its client listener, {broker.config.host}:{broker.port}"
        )

    def _request_failed(self, correlation_id: int, api_key: int, e: Exception) -> None:
        """Answer a request whose handler (or body check) raised."""
        if isinstance(e, RaftlogError):
            self._respond_error(correlation_id, e, api_key)
        elif isinstance(e, protocol.InvalidBodyError):
            self._respond_error(correlation_id, InvalidRequestError(e.describe(api_key)), api_key)
        elif isinstance(e, protocol.RemoteProtocolError):
            # The body does not match the frame (e.g. payload sizes that do not add up).
            if e.fatal:
                self._protocol_error(correlation_id, e)
            else:
                self._respond_error(correlation_id, InvalidRequestError(str(e)), api_key)
        else:
            slot = _Slot(correlation_id, api_key, self._received_at)
            slot.response = self._internal_error(correlation_id, _request_of(api_key), e)
            self._slots.append(slot)
            self._flush()

    def _internal_error(self, correlation_id: int, what: str, e: Exception) -> Response:
        """Our bug, not the client's: log it with its traceback, answer a generic error
        (code 1, as Kafka's UNKNOWN_SERVER_ERROR) that blames nothing the client sent."""
        log.error(
            "internal error %s (correlation id %d) from %s: %s: %s",
            what,
            correlation_id,
            self.peer,
            type(e).__name__,
            e,
            exc_info=e,
        )
        return error_response(
            RaftlogError(
                f"internal error in broker {self.broker.config.node_id} {what} "
                "(the broker's log has the details)"
            )
        )

    def _respond_error(self, correlation_id: int, error: RaftlogError, api_key: int = -1) -> None:
        slot = _Slot(correlation_id, api_key, self._received_at)
        slot.response = error_response(error)
        self._slots.append(slot)
        self._flush()

    def _protocol_error(self, correlation_id: int | None, error: Exception) -> None:
        log.warning("closing connection from %s: %s", self.peer, error)
        if correlation_id is not None:
            self._respond_error(correlation_id, InvalidRequestError(str(error)))
        self._write_gathered()
        self._close()

    # -- writing -------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Write every completed response at the head of the queue, in order."""
        transport = self.transport
        if transport is None or self._sending:
            return
        requests = self._requests
        now = 0.0
        while self._slots and self._slots[0].response is not None:
            slot = self._slots.popleft()
            resp = slot.response
            if resp is None:
                raise InvariantError("resp is None")
            if requests is not None:
                # The metrics: RequestStats.observe inlined (raftlog/metrics/stats.py), a few
                # additions per answer; an error is a request-level one (an error body).
                if not now:
                    now = time.monotonic()
                stats = requests[slot.api_key]
                took = now - slot.received_at
                stats.count += 1
                stats.sum_s += took
                stats.buckets[bisect_left(LATENCY_BUCKETS_S, took)] += 1
                if resp.body.get("error"):
                    stats.errors += 1
                if resp.fetched is not None:
                    self.broker.stats.traffic.sent(resp.fetched)
            header, resp = self._encode_header(slot.correlation_id, resp)
            parts = resp.parts
            if parts and any(isinstance(p, SendfileSlice) for p in parts):
                self._sending = True
                self._tasks.spawn(self._sendfile(header, resp), "a sendfile response")
                return
            # No file slices here (they take the branch above): plain buffers only.
            out = self._out
            if out is not None:
                out.append(header)
                if parts:
                    out += parts
                    self._gathered_bytes += resp.nbytes  # released by _write_gathered
            else:
                transport.writelines([header, *parts])  # type: ignore[list-item]
                self._release(resp)
        if self._close_after is not None and not self._slots and not self._closing:
            log.debug(
                "closing connection from %s after its answers: %s", self.peer, self._close_after
            )
            self._write_gathered()
            self._close()
            return
        self._update_reading()
        if self._draining:
            self._maybe_finish_draining()

    def handled_unanswered(self, api_key: int) -> None:
        """A request that gets no answer (acks=0) was handled: count it (the metrics)."""
        if self._requests is not None:
            self._requests[api_key].observe(time.monotonic() - self._received_at, False)

    def request_failed_closing(self, api_key: int) -> None:
        """A request closes the connection instead of being answered: count it as an error."""
        if self._requests is not None:
            self._requests[api_key].observe(time.monotonic() - self._received_at, True)

    def _encode_header(self, correlation_id: int, resp: Response) -> tuple[bytes, Response]:
        """The response's frame prefix and header. A body msgpack refuses is a handler's bug
        (request bodies are checked before handlers run): logged, answered as an internal
        error."""
        parts = resp.parts
        size = (
            sum(p.size if isinstance(p, SendfileSlice) else len(p) for p in parts) if parts else 0
        )
        try:
            return protocol.encode_response_header(correlation_id, resp.body, size), resp
        except (TypeError, ValueError, OverflowError) as e:
            self._release(resp)
            resp.close()
            err = self._internal_error(correlation_id, "encoding a response", e)
            return protocol.encode_response_header(correlation_id, err.body, 0), err

    async def _sendfile(self, header: bytes, resp: Response) -> None:
        transport = self.transport
        if transport is None:
            raise InvariantError("transport is None")
        loop = asyncio.get_running_loop()
        part: bytes | memoryview | SendfileSlice | None = None
        try:
            transport.write(header)
            for part in resp.parts:
                if not isinstance(part, SendfileSlice):
                    transport.write(part)
                    continue
                if transport.is_closing():
                    return  # the client went away meanwhile
                sent = await loop.sendfile(transport, part.file, part.position, part.size)
                if sent != part.size:
                    # The frame announced part.size bytes: anything else desyncs the stream.
                    log.warning(
                        "aborting connection from %s: %s shrank under a fetch (sent %d of %d "
                        "bytes from byte %d)",
                        self.peer,
                        part.path,
                        sent,
                        part.size,
                        part.position,
                    )
                    self._abort()
                    return
        except ConnectionError as e:
            log.debug("sendfile to %s failed: %s", self.peer, e)
            self._abort()
            return
        except OSError as e:  # reading the segment failed (EIO...): the frame cannot complete
            where = part.path if isinstance(part, SendfileSlice) else "a fetch response"
            log.warning("aborting connection from %s: sending %s failed: %s", self.peer, where, e)
            self._abort()
            return
        except Exception:
            # Our bug, with the frame half sent: the connection cannot go on.
            log.exception("internal error sending a fetch response to %s", self.peer)
            self._abort()
            return
        finally:
            self._release(resp)
            resp.close()
            self._sending = False
            # loop.sendfile paused and resumed reading on its own: take the state it left.
            self._paused_reading = not transport.is_reading()
        self._flush()

    def _abort(self) -> None:
        self._closing = True
        self.connections.memory.release(self)
        if self.transport is not None:
            self.transport.abort()

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or self._closing or self._sending:
            return
        backlogged = self._backlogged
        should_pause = self._waiting_memory or backlogged
        if should_pause and not self._paused_reading:
            transport.pause_reading()
            self._paused_reading = True
        elif not should_pause and self._paused_reading:
            transport.resume_reading()
            self._paused_reading = False
        if (
            not backlogged
            and not self._processing
            and self._resume_handle is None
            and self._decoder.has_frame
        ):
            # Frames left buffered when the queue was full: dispatch them on the next turn
            # of the loop (not from inside whichever callback drained the queue).
            self._resume_handle = asyncio.get_running_loop().call_soon(self._process)


_API_NAMES = {int(k): k.name for k in protocol.ApiKey}
# The metrics' label for each API key, as Kafka names its requests ("ListOffsets").
_METRIC_API_NAMES = {int(k): camel_case(k.name) for k in protocol.ApiKey}
_api_name = _METRIC_API_NAMES.get
_FETCH = int(protocol.ApiKey.FETCH)


def _replication_request(api_key: int, body: dict[str, Any]) -> bool:
    """Whether the replication listener serves this request: REPLICATION_APIS, a Fetch only
    from a replica (replica_id >= 0)."""
    if api_key not in REPLICATION_APIS:
        return False
    if api_key == _FETCH:
        replica_id = body.get("replica_id", -1)
        return type(replica_id) is int and replica_id >= 0
    return True


def _request_of(api_key: int) -> str:
    return f"handling the {protocol.ApiKey(api_key).name} request"
