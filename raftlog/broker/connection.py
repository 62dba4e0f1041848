"""One client connection: frames in, responses out in request order.

Rules:
- Requests are pipelined: the client may send many before reading a response. Each request gets
  a slot in a FIFO; a handler fills its slot now (produce, metadata) or later (a long-polling
  fetch), and responses leave strictly in request order, as Kafka clients expect.
- Bad input never stops the broker: an unparseable frame (garbage, a header that is not
  msgpack, a frame over the size limit) gets an error response when its correlation id can be
  read and the connection is closed; a well-framed request with bad content (unknown API or
  version, wrong field types) gets an error response and the connection stays open.
- Back-pressure: reading pauses while too many responses are queued or the socket's write
  buffer is full, so a client that never reads cannot make the broker buffer without limit.
- The responses completed while one read's frames are dispatched leave in one write at the
  end of that read: a client that pipelines many small requests costs one send per read, not
  one per request.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections import deque
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from raftlog import protocol
from raftlog.errors import InvalidRequestError, RaftlogError, UnsupportedVersionError
from raftlog.storage import FileSlice

if TYPE_CHECKING:
    from raftlog.broker.handlers.produce import CommitWait, ProduceGroup
    from raftlog.broker.server import Broker

log = logging.getLogger(__name__)

# Responses queued (being computed or waiting for earlier ones) before reading pauses.
MAX_PENDING_RESPONSES = 1000
_PRODUCE = int(protocol.ApiKey.PRODUCE)
# Produce requests appended together before their responses are written: enough to make the
# write cost per request small, few enough that the client gets answers while we work.
MAX_GROUPED_REQUESTS = 128
# What a handler raises when a body has the wrong shape for its API (Overflow: int() of an
# infinite float): the client's bug, answered with InvalidRequestError.
_MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError)


class Response:
    """A response body plus payload parts (bytes, or file slices written with sendfile)."""

    __slots__ = ("body", "parts")

    def __init__(
        self, body: dict[str, Any], parts: list[bytes | memoryview | FileSlice] | None = None
    ):
        self.body = body
        self.parts = parts or []


class _Slot:
    __slots__ = ("correlation_id", "response")

    def __init__(self, correlation_id: int):
        self.correlation_id = correlation_id
        self.response: Response | None = None


class Connection(asyncio.Protocol):
    def __init__(self, broker: Broker):
        self.broker = broker
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._decoder = protocol.FrameDecoder(broker.config.max_request_bytes)
        self._slots: deque[_Slot] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._paused_reading = False
        self._write_paused = False
        self._closing = False
        self._sending = False  # a sendfile writer is running
        # While data_received dispatches a read's frames, responses gather here.
        self._out: list[Any] | None = None
        # Slots of the current produce group's requests, and their response topic lists.
        self._grouped: list[tuple[_Slot, list[Any], CommitWait | None]] = []

    @property
    def busy(self) -> bool:
        """Responses still owed to this client."""
        return bool(self._slots) or self._sending

    # -- asyncio callbacks ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        if not self.broker.register_connection(self):
            log.warning(
                "refusing %s: max_connections=%d reached",
                self.peer,
                self.broker.config.max_connections,
            )
            transport.abort()
            return
        log.debug("connection from %s", self.peer)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()
        self.broker.unregister_connection(self)

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
        self._decoder.feed(data)
        self._out = []
        # The Produce requests of this read are appended together (handlers/produce.py): a
        # pipelining producer costs one write per partition per read, not one per request.
        group: ProduceGroup | None = None
        try:
            while not self._closing:
                try:
                    frame = self._decoder.next_frame()
                except protocol.RemoteProtocolError as e:
                    if group is not None:
                        self._finish_group(group)
                        group = None
                    self._protocol_error(None, e)
                    return
                if frame is None:
                    break
                header, payload = frame
                if (
                    len(header) == 5
                    and header[0] == _PRODUCE
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
        self._update_reading()

    def _add_produce(
        self, group: ProduceGroup, correlation_id: int, body: dict[str, Any], payload: memoryview
    ) -> bool:
        """Add a Produce request to this read's group; False if it must take the ordinary
        path (it names a topic to auto-create, which waits for the quorum)."""
        broker = self.broker
        try:
            acks = group.acks_of(body)
            topics = body["topics"]
            if broker.config.auto_create_topics and broker.topics_to_auto_create(
                t for t, _ in topics
            ):
                return False
            results, wait = group.add(acks, topics, payload, None, group.timeout_of(body))
        except Exception as e:
            self._request_failed(correlation_id, _PRODUCE, e)
            return True
        if acks:
            slot = _Slot(correlation_id)
            self._slots.append(slot)
            self._grouped.append((slot, results, wait))
        return True

    def _finish_group(self, group: ProduceGroup) -> None:
        group.finish()
        grouped, self._grouped = self._grouped, []
        for slot, results, wait in grouped:
            if wait is None or wait.remaining == 0:
                slot.response = Response({"topics": results})
            else:
                # acks=all: answered when its last partition commits (or fails), in order.
                wait.on_done = functools.partial(self._answer_later, slot, results)
        self._flush()

    def _answer_later(self, slot: _Slot, results: list[Any]) -> None:
        slot.response = Response({"topics": results})
        if not self._closing:
            self._flush()

    def _write_gathered(self) -> None:
        out, self._out = self._out, None
        if out and self.transport is not None:
            self.transport.writelines(out)

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
            )
            return
        try:
            result = handler(body, payload, self)
        except Exception as e:
            self._request_failed(correlation_id, api_key, e)
            return
        if result is None:
            return  # acks=0 produce: no response at all
        slot = _Slot(correlation_id)
        self._slots.append(slot)
        if isinstance(result, Response):
            slot.response = result
            self._flush()
        else:
            task = asyncio.ensure_future(self._complete(slot, result, api_key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _complete(self, slot: _Slot, pending: Awaitable[Response], api_key: int) -> None:
        try:
            slot.response = await pending
        except RaftlogError as e:
            slot.response = error_response(e)
        except _MALFORMED as e:
            slot.response = error_response(
                InvalidRequestError(
                    f"malformed {protocol.ApiKey(api_key).name} request: {type(e).__name__}: {e}"
                )
            )
        self._flush()

    def _request_failed(self, correlation_id: int, api_key: int, e: Exception) -> None:
        """Answer a request whose handler raised; re-raise what is not the client's doing."""
        if isinstance(e, RaftlogError):
            self._respond_error(correlation_id, e)
        elif isinstance(e, protocol.RemoteProtocolError):
            # The body does not match the frame (e.g. payload sizes that do not add up).
            if e.fatal:
                self._protocol_error(correlation_id, e)
            else:
                self._respond_error(correlation_id, InvalidRequestError(str(e)))
        elif isinstance(e, _MALFORMED):
            # The body had the wrong shape for this API: the client's bug, not ours.
            self._respond_error(
                correlation_id,
                InvalidRequestError(
                    f"malformed {protocol.ApiKey(api_key).name} request: {type(e).__name__}: {e}"
                ),
            )
        else:
            raise e

    def _respond_error(self, correlation_id: int, error: RaftlogError) -> None:
        slot = _Slot(correlation_id)
        slot.response = error_response(error)
        self._slots.append(slot)
        self._flush()

    def _protocol_error(self, correlation_id: int | None, error: Exception) -> None:
        log.warning("closing connection from %s: %s", self.peer, error)
        if correlation_id is not None:
            self._respond_error(correlation_id, InvalidRequestError(str(error)))
        self._write_gathered()
        self._closing = True
        if self.transport is not None:
            self.transport.close()  # sends what is buffered, then closes

    # -- writing -------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Write every completed response at the head of the queue, in order."""
        transport = self.transport
        if transport is None or self._sending:
            return
        while self._slots and self._slots[0].response is not None:
            slot = self._slots.popleft()
            resp = slot.response
            assert resp is not None
            header, resp = _encode_header(slot.correlation_id, resp)
            parts = resp.parts
            if parts and any(isinstance(p, FileSlice) for p in parts):
                self._sending = True
                task = asyncio.ensure_future(self._sendfile(header, resp))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return
            out = self._out
            if out is not None:
                out.append(header)
                if parts:
                    out += parts
            else:
                transport.writelines([header, *parts])
        self._update_reading()

    async def _sendfile(self, header: bytes, resp: Response) -> None:
        transport = self.transport
        assert transport is not None
        loop = asyncio.get_running_loop()
        try:
            transport.write(header)
            for part in resp.parts:
                if isinstance(part, FileSlice):
                    if part.size:
                        # A dup'ed fd: the segment may be deleted while we send; the open file
                        # stays readable until closed.
                        with os.fdopen(os.dup(part.fd), "rb", buffering=0) as f:
                            await loop.sendfile(transport, f, part.position, part.size)
                else:
                    transport.write(part)
        except (ConnectionError, RuntimeError) as e:
            log.debug("sendfile to %s failed: %s", self.peer, e)
            transport.abort()
            return
        finally:
            self._sending = False
        self._flush()

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or self._closing:
            return
        should_pause = self._write_paused or len(self._slots) >= MAX_PENDING_RESPONSES
        if should_pause and not self._paused_reading:
            transport.pause_reading()
            self._paused_reading = True
        elif not should_pause and self._paused_reading:
            transport.resume_reading()
            self._paused_reading = False


def error_response(error: RaftlogError) -> Response:
    return Response({"error": error.code, "message": str(error)})


def _encode_header(correlation_id: int, resp: Response) -> tuple[bytes, Response]:
    """The response's frame prefix and header; an error response instead if the body cannot
    be encoded (it echoes a value msgpack refuses, e.g. an int past 64 bits that a handler
    made from a float the client sent). Bad input must cost the client an error, not the
    connection."""
    parts = resp.parts
    size = sum(p.size if isinstance(p, FileSlice) else len(p) for p in parts) if parts else 0
    try:
        return protocol.encode_response_header(correlation_id, resp.body, size), resp
    except (TypeError, ValueError, OverflowError) as e:
        resp = error_response(InvalidRequestError(f"the response cannot be encoded: {e}"))
        return protocol.encode_response_header(correlation_id, resp.body, 0), resp
