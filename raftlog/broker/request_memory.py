"""The request-memory pool (Kafka's queued.max.request.bytes), as a pure core: no sockets, no
asyncio, no clock. `Connection` (connection.py) tells it what each connection's decoder holds
after every read; it answers whether that connection may read on.

Rules:
- Memory is counted as bytes arrive, never for what a length prefix announces. A connection
  between frames holds what its decoder buffers. A connection in the middle of a frame holds
  what it buffers plus what the frame still lacks, up to one socket read (`read_bytes`:
  asyncio reads at most 256 KiB at a time), reserved before it reads on. So a peer that
  announces a huge frame and sends nothing holds a few bytes and one read; before the pool
  counted bytes, three connections announcing 85 MiB each and trickling a byte every 5 s
  reserved all 256 MiB but a few bytes, and the next request that arrived in two reads filled
  it: the broker stopped reading from everyone (issue 21).
- A connection whose next read does not fit waits (stops reading) and is woken, in the order
  the waiters came, when memory is released.
- No deadlock: counting bytes as they come lets every connection hold part of a frame, and
  when those parts fill the pool, none could finish (hundreds of producers each half-way
  through a 1 MiB request). So the oldest incomplete frame (the one whose first byte arrived
  first) may always read on, beyond the pool if it must: some frame can always complete, and
  when it does the privilege passes to the next oldest. The frames of the other connections
  complete in turn. A privileged sender that stalls loses the privilege at its frame deadline
  (`request_receive_ms_max`: the connection is closed). Kafka's own pool is not strict the same
  way: its SimpleMemoryPool grants an allocation larger than what is left.
- Bounds: the reservations of the connections in the middle of a frame, except the oldest,
  fit `bytes_max` together; the oldest adds at most one frame (the frame limit); and a read
  may bring more than was reserved (a connection between frames reserves nothing ahead, and
  one that reserved the rest of its frame may receive the next frames with it), at most one
  read (`read_bytes`) per connection. The first is the pool; the second the price of having
  no deadlock; the third of reading frames that arrive whole (nearly all of them) without a
  second look at the pool, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from raftlog.invariants import InvariantError

K = TypeVar("K", bound=Hashable)

# asyncio's selector transports read at most this much per call (max_size in
# asyncio/selector_events.py).
READ_BYTES = 256 * 1024


class RequestMemory(Generic[K]):
    """The request bytes all connections of a listener may hold at once.

    Connections are any hashable keys; `wake(key)` is called for a waiting connection when
    memory it may fit in was released (it calls `update` again).
    """

    def __init__(self, bytes_max: int, wake: Callable[[K], None], read_bytes: int = READ_BYTES):
        if not (bytes_max > 0 and read_bytes > 0):
            raise InvariantError((bytes_max, read_bytes))
        self.bytes_max = bytes_max
        self.read_bytes = read_bytes
        self._wake = wake
        # Invariant: used == sum(self._held.values()).
        self.used = 0
        self._held: dict[K, int] = {}
        # Connections with an incomplete frame, by that frame's first byte, oldest first; the
        # value is the frame's number on its connection (a new frame goes to the back).
        # Invariant: the first key is never in _waiting.
        self._frames: dict[K, int] = {}
        # Insertion-ordered: first come, first woken.
        self._waiting: dict[K, None] = {}

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def oldest(self) -> K | None:
        """The connection whose incomplete frame started first: it may always read on."""
        return next(iter(self._frames), None)

    def held(self, conn: K) -> int:
        return self._held.get(conn, 0)

    def update(self, conn: K, buffered: int, missing: int = 0, frame: int = 0) -> bool:
        """`conn`'s decoder holds `buffered` bytes now and lacks `missing` more of its
        incomplete frame number `frame` (missing 0: no incomplete frame). True if it may read
        on; False: it waits and is woken through `wake`."""
        if not (buffered >= 0 and missing >= 0):
            raise InvariantError((buffered, missing))
        old = self._held.get(conn, 0)
        passed = False
        if missing:
            if self._frames.get(conn) != frame:
                passed = self._drop_frame(conn)
                self._frames[conn] = frame
            want = buffered + min(missing, self.read_bytes)
            if next(iter(self._frames)) is conn:
                self._set(conn, old, want)
                self._waiting.pop(conn, None)
                self._after_change(conn, old, want, passed)
                return True
            granted = self.used - old + want <= self.bytes_max
        else:
            passed = self._drop_frame(conn)
            want = buffered
            # Nothing reserved ahead: its next read comes on top, so only into a pool with room.
            granted = self.used - old + want < self.bytes_max
        new = want if granted else buffered
        self._set(conn, old, new)
        if granted:
            self._waiting.pop(conn, None)
        else:
            self._waiting[conn] = None
        self._after_change(conn, old, new, passed)
        return granted

    def release(self, conn: K) -> None:
        """`conn` is gone: everything it held comes back."""
        self._waiting.pop(conn, None)
        passed = self._drop_frame(conn)
        old = self._held.get(conn, 0)
        self._set(conn, old, 0)
        self._after_change(conn, old, 0, passed)

    def check(self) -> None:
        """The invariants (tests call this after every step; O(connections))."""
        if self.used != sum(self._held.values()):
            raise InvariantError((self.used, self._held))
        if not all(v > 0 for v in self._held.values()):
            raise InvariantError(self._held)
        oldest = self.oldest
        if not (oldest is None or oldest not in self._waiting):
            raise InvariantError(oldest)

    # -- internals ------------------------------------------------------------------------------

    def _drop_frame(self, conn: K) -> bool:
        """Forget `conn`'s incomplete frame; True if it was the oldest (the privilege passes)."""
        if conn not in self._frames:
            return False
        was_oldest = next(iter(self._frames)) is conn
        del self._frames[conn]
        return was_oldest

    def _set(self, conn: K, old: int, new: int) -> None:
        if new:
            self._held[conn] = new
        else:
            self._held.pop(conn, None)
        self.used += new - old

    def _after_change(self, conn: K, old: int, new: int, passed: bool) -> None:
        """Wake whoever may read now: the new oldest frame when the privilege passed, and the
        waiters, first come first, while the pool has room, when `conn` released memory
        (not `conn` itself: it was just answered)."""
        if passed:
            oldest = self.oldest
            if oldest is not None and oldest in self._waiting:
                del self._waiting[oldest]
                self._wake(oldest)
        if new < old and self._waiting:
            for waiter in list(self._waiting):
                if self.used >= self.bytes_max:
                    break
                if waiter in self._waiting and waiter is not conn:
                    del self._waiting[waiter]
                    self._wake(waiter)
