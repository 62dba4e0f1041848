"""A client's connection to one broker: pipelined requests, responses matched by correlation id.

Rules: every request has a deadline (`request_timeout_ms`); a broken connection fails every
pending request with BrokerNotAvailableError (retriable) and is never reused; a response-level
error body ({"error": code, "message": ...}) becomes the matching RaftlogError.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from typing import Any

from raftlog import protocol
from raftlog.errors import BrokerNotAvailableError, RaftlogTimeoutError, error_from_code

log = logging.getLogger(__name__)

ResponseT = tuple[dict[str, Any], memoryview]


class BrokerConnection(asyncio.Protocol):
    def __init__(self, host: str, port: int, client_id: str):
        self.host, self.port, self.client_id = host, port, client_id
        self.transport: asyncio.Transport | None = None
        self._decoder = protocol.FrameDecoder(1 << 31)
        self._pending: dict[int, asyncio.Future[ResponseT]] = {}
        self._ids = itertools.count(1)
        self._closed: Exception | None = None
        self._drained = asyncio.Event()
        self._drained.set()

    @classmethod
    async def connect(
        cls, host: str, port: int, client_id: str, timeout_s: float = 10.0
    ) -> BrokerConnection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: cls(host, port, client_id), host, port), timeout_s
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
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        import socket

        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(
            BrokerNotAvailableError(
                f"connection to broker {self.host}:{self.port} lost" + (f": {exc}" if exc else "")
            )
        )

    def pause_writing(self) -> None:
        self._drained.clear()

    def resume_writing(self) -> None:
        self._drained.set()

    def data_received(self, data: bytes) -> None:
        self._decoder.feed(data)
        while True:
            try:
                frame = self._decoder.next_frame()
                if frame is None:
                    return
                corr, body = protocol.parse_response_header(frame[0])
            except protocol.RemoteProtocolError as e:
                self._fail_all(
                    BrokerNotAvailableError(
                        f"broker {self.host}:{self.port} sent an invalid frame: {e}"
                    )
                )
                if self.transport is not None:
                    self.transport.abort()
                return
            fut = self._pending.pop(corr, None)
            if fut is None or fut.done():
                continue  # a request that timed out on our side
            if body.get("error"):
                fut.set_exception(error_from_code(body["error"], body.get("message") or ""))
            else:
                fut.set_result((body, frame[1]))

    # -- requests ------------------------------------------------------------------------------

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
            raise BrokerNotAvailableError(str(self._closed))
        assert self.transport is not None
        corr = next(self._ids)
        fut: asyncio.Future[ResponseT] | None = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._pending[corr] = fut
        self.transport.writelines(
            protocol.encode_request(api_key, api_version, corr, self.client_id, body, payload)
        )
        return fut

    async def request(
        self,
        api_key: int,
        body: dict[str, Any],
        payload: Sequence[bytes | memoryview] = (),
        timeout_s: float = 30.0,
    ) -> ResponseT:
        fut = self.send(api_key, body, payload)
        assert fut is not None
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            raise RaftlogTimeoutError(
                f"{protocol.ApiKey(api_key).name} request to {self.host}:{self.port} got no "
                f"response in {timeout_s:.1f} s"
            ) from None

    async def wait_writable(self) -> None:
        await self._drained.wait()

    def _fail_all(self, error: Exception) -> None:
        if self._closed is None:
            self._closed = error
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error)
        self._drained.set()

    def close(self) -> None:
        self._fail_all(BrokerNotAvailableError(f"connection to {self.host}:{self.port} closed"))
        if self.transport is not None:
            self.transport.close()
