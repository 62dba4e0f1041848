"""A connection on a Kafka listener: Kafka's framing and headers on the native machinery.

`KafkaConnection` is a `Connection` (raftlog/broker/connection.py) with another codec: the
request-memory pool, the connection limits, the frame deadline, the idle timeout,
back-pressure, responses in request order and sendfile are the native listener's, unchanged.
What differs, and why:

- Frames are Kafka's (raftlog/kafka/frames.py) and so are request headers (api.py): the API
  numbering is Kafka's, hence a listener of its own.
- A request is decoded into its typed message (raftlog/kafka/messages/) before its handler
  runs; handlers (raftlog/kafka/handlers/) return a response message, a built `Response`
  (Fetch: built in the step that read the file slices), an awaitable of either, or None (a
  Produce with acks=0, which Kafka never answers).
- Kafka has no generic error frame: an error a request cannot carry in its own response
  closes the connection, as Kafka's broker does (its clients reconnect and retry). That is:
  a frame that cannot be parsed (size, header, or body: logged at WARNING with the peer), an
  API or version outside ApiVersions' ranges (Kafka's answer; ApiVersions itself at an
  unknown version is answered with a v0 body and UNSUPPORTED_VERSION, so clients retry
  lower), a frame over the size limit, and a handler that raised (a bug: logged at ERROR
  with its traceback; the other connections go on).
- A refused connection (a limit reached) is closed without a frame: Kafka has none for it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from raftlog.broker.connection import Connection, Listener, _Slot
from raftlog.broker.response import KafkaResponse, Response
from raftlog.invariants import InvariantError
from raftlog.kafka import api
from raftlog.kafka.frames import KafkaFrameDecoder
from raftlog.kafka.messages import decode_request
from raftlog.kafka.messages.api_versions import unsupported_version_response
from raftlog.metrics.stats import BrokerStats, RequestTable
from raftlog.protocol import RemoteProtocolError

if TYPE_CHECKING:
    from raftlog.broker.connection import ConnectionHost

log = logging.getLogger(__name__)

# A handler of the Kafka listener: (decoded request, its version, the connection) -> answer.
KafkaHandler = Callable[[Any, int, Any], Any]
_API_VERSIONS = int(api.ApiKey.API_VERSIONS)


class KafkaConnection(Connection):
    def __init__(self, broker: ConnectionHost, listener: Listener = Listener.KAFKA):
        if listener not in (Listener.KAFKA, Listener.KAFKA_EXTERNAL):
            raise InvariantError(f"a Kafka connection on the {listener.value} listener")
        super().__init__(broker, listener)
        self._decoder = KafkaFrameDecoder(self.connections.frame_bytes_max)  # type: ignore[assignment]
        self._kafka_handlers: dict[int, KafkaHandler] = broker.kafka_handlers

    def _request_table(self, stats: BrokerStats) -> RequestTable | None:
        # Kafka's API keys, under this listener's name: a table of its own.
        return stats.requests(self.listener.value, _kafka_api_name) if stats.enabled else None

    def _refusal_frame(self, refused: str) -> bytes:
        return b""

    def _process(self) -> None:
        """Dispatch the whole frames buffered, until the queued responses reach a bound (as
        the native connection does; Kafka's Produce requests are not grouped yet)."""
        self._resume_handle = None
        if self._processing or self._closing:
            return
        self._processing = True
        self._out = []
        decoder: KafkaFrameDecoder = self._decoder  # type: ignore[assignment]
        try:
            while not self._backlogged and not self._closing:
                try:
                    frame = decoder.next_frame()
                except RemoteProtocolError as e:
                    self._kafka_close(f"{e}")
                    return
                if frame is None:
                    break
                self._dispatch_kafka(frame)
        finally:
            self._write_gathered()
            self._processing = False
        self._account_memory()
        self._update_reading()

    def _dispatch_kafka(self, frame: memoryview) -> None:
        try:
            header, body_at = api.decode_request_header(frame)
        except RemoteProtocolError as e:
            self._kafka_close(f"a request header that cannot be read: {e}")
            return
        key, version, correlation_id = header.api_key, header.api_version, header.correlation_id
        supported = api.SUPPORTED_VERSIONS.get(key)  # type: ignore[call-overload]
        if supported is None or not supported[0] <= version <= supported[1]:
            if key == _API_VERSIONS and version > 0:
                # Kafka's fallback: a v0 answer naming our ranges; the client retries lower.
                self._answer(
                    correlation_id, KafkaResponse([unsupported_version_response()], 0), key
                )
                return
            self.request_failed_closing(key)
            name = api.api_name(key)
            self._kafka_close(
                f"{name} version {version} is not supported"
                + (f" (supported: {supported[0]}..{supported[1]})" if supported else "")
            )
            return
        try:
            request = decode_request(key, version, frame, body_at)
        except RemoteProtocolError as e:
            self.request_failed_closing(key)
            self._kafka_close(f"a malformed {api.api_name(key)} v{version} request: {e}")
            return
        header_version = api.response_header_version(key, version)
        self.client_id = header.client_id or ""
        try:
            result = self._kafka_handlers[key](request, version, self)
        except Exception as e:
            self._handler_failed(key, version, correlation_id, e)
            return
        if result is None:
            self.handled_unanswered(key)
            return  # a Produce with acks=0: Kafka sends no response
        if isinstance(result, Response) or hasattr(result, "encode"):
            self._answer(correlation_id, _to_response(result, version, header_version), key)
            return
        slot = _Slot(correlation_id, key, self._received_at)
        self._slots.append(slot)
        self._tasks.spawn(
            self._complete_kafka(slot, result, key, version, header_version), "a Kafka response"
        )

    def _answer(self, correlation_id: int, response: Response, key: int) -> None:
        slot = _Slot(correlation_id, key, self._received_at)
        slot.response = response
        self._slots.append(slot)
        self._hold(response)
        self._flush()

    async def _complete_kafka(
        self, slot: _Slot, pending: Awaitable[Any], key: int, version: int, header_version: int
    ) -> None:
        try:
            result = await pending
        except Exception as e:
            self._handler_failed(key, version, slot.correlation_id, e)
            return
        if result is None:
            # Nothing to send (a Produce with acks=0 that waited for a topic's creation).
            self.handled_unanswered(key)
            self._slots.remove(slot)
            self._flush()
            return
        slot.response = _to_response(result, version, header_version)
        self._hold(slot.response)
        self._flush()

    def _handler_failed(self, key: int, version: int, correlation_id: int, e: Exception) -> None:
        """A handler raised: our bug (handlers put every expected error in their response).
        Kafka has no error frame for it: log it with its traceback and close this one
        connection; the client reconnects and retries."""
        self.request_failed_closing(key)
        log.error(
            "internal error handling %s v%d (correlation id %d) from %s: %s: %s",
            api.api_name(key),
            version,
            correlation_id,
            self.peer,
            type(e).__name__,
            e,
            exc_info=e,
        )
        self._write_gathered()
        self._close()

    def _kafka_close(self, why: str) -> None:
        log.warning("closing Kafka connection from %s: %s", self.peer, why)
        self._write_gathered()
        self._close()

    def _encode_header(self, correlation_id: int, resp: Response) -> tuple[bytes, Response]:
        if not isinstance(resp, KafkaResponse):
            raise InvariantError(f"a Kafka connection answering with {type(resp).__name__}")
        return resp.header(correlation_id), resp


def _kafka_api_name(key: int) -> str | None:
    """The metrics' label of a Kafka API key ("ListOffsets"), None for a key we do not know."""
    return api.api_name(key) if key in _KAFKA_KEYS else None


_KAFKA_KEYS = frozenset(int(k) for k in api.ApiKey)


def _to_response(result: Any, version: int, header_version: int) -> Response:
    if isinstance(result, Response):
        return result
    encoded = result.encode(version)
    parts = [encoded] if isinstance(encoded, bytes | bytearray) else encoded
    return KafkaResponse(parts, header_version)
