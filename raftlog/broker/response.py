"""What a handler answers: a `Response`, a body plus payload parts the connection writes.

Rules: a handler builds its Response in the same synchronous step that took its file slices
(the fds are dup'd here, so the log may close or delete a segment afterwards); the connection
sends it, then closes it (`close` releases the dup'd fds), or closes it unsent when the
connection goes. Handlers import this module, never the connection.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Sequence
from typing import Any

from raftlog.errors import RaftlogError
from raftlog.storage import FileSlice


class SendfileSlice:
    """Bytes [position, position + size) of an open file of the response's own (a dup of the
    segment's fd, taken when the Response was built), written with sendfile."""

    __slots__ = ("file", "path", "position", "size")

    def __init__(self, file: io.FileIO, sl: FileSlice):
        self.file = file
        self.path = sl.path
        self.position = sl.position
        self.size = sl.size


class Response:
    """A response body plus payload parts (bytes, or file slices written with sendfile).

    FileSlice parts become SendfileSlices here: each segment fd the slices name is dup'd once
    (slices of one segment share the dup), so the log may close or delete the segment
    afterwards and the bytes stay readable until the response is sent or dropped (`close`).
    Build the Response in the same synchronous step that took the slices, before anything
    else can touch the log. `fds` counts the dups, which a connection bounds.
    """

    __slots__ = ("_files", "body", "fetched", "nbytes", "parts")

    def __init__(
        self,
        body: dict[str, Any],
        parts: Sequence[bytes | memoryview | FileSlice | SendfileSlice] | None = None,
    ):
        self.body = body
        # A fetch's record data, for the metrics: (to a follower, [(topic, bytes), ...]); the
        # connection counts it when the response goes out (a long poll's earlier reads, never
        # sent, are not counted). None: no record data, or metrics off.
        self.fetched: tuple[bool, list[tuple[str, int]]] | None = None
        self.parts: list[bytes | memoryview | SendfileSlice] = []
        self.nbytes = 0  # payload held in memory
        self._files: dict[int, io.FileIO] | None = None
        if not parts:
            return  # most responses: a body only
        files: dict[int, io.FileIO] = {}
        for p in parts:
            if isinstance(p, FileSlice):
                file = files.get(p.fd)
                if file is None:
                    file = files[p.fd] = os.fdopen(os.dup(p.fd), "rb", buffering=0)
                self.parts.append(SendfileSlice(file, p))
            else:
                self.parts.append(p)
                if not isinstance(p, SendfileSlice):
                    self.nbytes += len(p)
        if files:
            self._files = files

    @property
    def fds(self) -> int:
        return len(self._files) if self._files else 0

    def close(self) -> None:
        """Release the dup'd fds (the response was sent, or is being dropped)."""
        if self._files:
            for f in self._files.values():
                f.close()
            self._files = None


def error_response(error: RaftlogError) -> Response:
    return Response({"error": error.code, "message": str(error)})


_KAFKA_HEADER_V0 = struct.Struct(">ii")  # size, correlation_id
_KAFKA_HEADER_V1 = struct.Struct(">iib")  # size, correlation_id, empty tagged fields


class KafkaResponse(Response):
    """A response on a Kafka listener: its body is all in `parts` (encoded fields, record
    data passed through, file slices), framed by `header` with Kafka's size field and
    response header of version `header_version` (0, or 1 with tagged fields)."""

    __slots__ = ("header_version",)

    def __init__(self, parts: Sequence[Any], header_version: int = 0):
        # Parts as the Kafka messages encode them (typed `object` there): bytes, memoryviews
        # and file slices, the only kinds a record field carries.
        super().__init__({}, parts)
        self.header_version = header_version

    def header(self, correlation_id: int) -> bytes:
        """The frame's size field and the response header, for a body of `parts`."""
        size = sum(p.size if isinstance(p, SendfileSlice) else len(p) for p in self.parts)
        if self.header_version == 0:
            return _KAFKA_HEADER_V0.pack(4 + size, correlation_id)
        return _KAFKA_HEADER_V1.pack(5 + size, correlation_id, 0)
