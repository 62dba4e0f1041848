"""What a handler answers: a `Response`, a body plus payload parts the connection writes.

Rules: a handler builds its Response in the same synchronous step that took its file slices
(the fds are dup'd here, so the log may close or delete a segment afterwards); the connection
sends it, then closes it (`close` releases the dup'd fds), or closes it unsent when the
connection goes. Handlers import this module, never the connection.
"""

from __future__ import annotations

import io
import os
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

    __slots__ = ("_files", "body", "nbytes", "parts")

    def __init__(
        self,
        body: dict[str, Any],
        parts: Sequence[bytes | memoryview | FileSlice | SendfileSlice] | None = None,
    ):
        self.body = body
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
