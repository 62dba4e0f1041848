"""A blocking socket speaking Kafka's framing by hand: exact checks and fuzzing of the Kafka
listener (raftlog/broker/kafka_connection.py), with raftlog's own Kafka message codecs."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from raftlog.kafka.api import ApiKey, request_header_version

_SIZE = struct.Struct(">i")
_HEADER_V1 = struct.Struct(">hhi")  # api_key, api_version, correlation_id (+ client_id)
CLIENT_ID = b"raw-kafka-test"


def request_frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """A whole request frame: size, header v1 (v2 for flexible versions), body."""
    header = (
        _HEADER_V1.pack(api_key, version, correlation_id)
        + struct.pack(">h", len(CLIENT_ID))
        + CLIENT_ID
    )
    if request_header_version(api_key, version) == 2:
        header += b"\x00"  # no tagged fields
    return _SIZE.pack(len(header) + len(body)) + header + body


class KafkaRawClient:
    def __init__(self, address: str, timeout_s: float = 10.0):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout_s = timeout_s
        self._buf = b""
        self._corr = 0

    def __enter__(self) -> KafkaRawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, api_key: int, version: int, body: bytes, corr: int | None = None) -> int:
        if corr is None:
            self._corr += 1
            corr = self._corr
        self.sock.sendall(request_frame(api_key, version, corr, body))
        return corr

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, timeout_s: float | None = None) -> tuple[int, bytes] | None:
        """(correlation id, response body after a v0 header), or None if the broker closed."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            if len(self._buf) >= 4:
                (size,) = _SIZE.unpack_from(self._buf)
                if len(self._buf) >= 4 + size:
                    frame, self._buf = self._buf[4 : 4 + size], self._buf[4 + size :]
                    return struct.unpack_from(">i", frame)[0], frame[4:]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no whole Kafka response before the deadline")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                raise TimeoutError("no whole Kafka response before the deadline") from None
            except ConnectionResetError:
                return None
            if not data:
                return None
            self._buf += data

    def request(self, api_key: ApiKey, version: int, request: Any) -> bytes:
        """Send `request` (a raftlog.kafka.messages request) and return the response body."""
        corr = self.send(api_key, version, bytes(request.encode(version)))
        got = self.recv()
        assert got is not None, (
            f"the broker closed the connection instead of answering {api_key.name}"
        )
        assert got[0] == corr, f"response for correlation id {got[0]}, expected {corr}"
        return got[1]

    def closed_by_broker(self, within_s: float = 10.0) -> bool:
        """True if the broker closes the connection (reads EOF) within `within_s`."""
        try:
            return self.recv(within_s) is None
        except TimeoutError:
            return False
