"""The request-memory pool as a pure core (raftlog/broker/request_memory.py): bytes are counted
as they arrive, never as announced; waiters are woken in order; and frames always complete,
whatever mix of partial frames fills the pool (a seeded randomized run of many connections)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from raftlog.broker.request_memory import RequestMemory

READ = 1000  # bytes one socket read brings at most, in these tests


class Conns:
    """Connections as the broker's are: each woken one tells the pool its state again."""

    def __init__(self, bytes_max: int):
        self.memory: RequestMemory[str] = RequestMemory(bytes_max, self._wake, read_bytes=READ)
        self.state: dict[str, tuple[int, int, int]] = {}
        self.may_read: dict[str, bool] = {}
        self.woken: list[str] = []

    def update(self, conn: str, buffered: int, missing: int = 0, frame: int = 0) -> bool:
        self.state[conn] = (buffered, missing, frame)
        self.may_read[conn] = self.memory.update(conn, buffered, missing, frame)
        self.memory.check()
        return self.may_read[conn]

    def _wake(self, conn: str) -> None:
        self.woken.append(conn)
        self.update(conn, *self.state[conn])


def test_an_announced_frame_holds_what_arrived_and_one_read_not_its_length() -> None:
    c = Conns(10_000)
    # Three peers each announce a frame of 1 GB and have sent 8 bytes of it.
    for peer in ("a", "b", "c"):
        assert c.update(peer, 8, missing=10**9 - 8)
    assert c.memory.used == 3 * (8 + READ)
    # Another connection goes on reading frames as they come.
    assert c.update("d", 0)
    assert c.update("d", 500, missing=1500)


def test_a_frame_reserves_what_it_lacks_up_to_one_read() -> None:
    c = Conns(10_000)
    assert c.update("a", 100, missing=50)
    assert c.memory.held("a") == 150
    assert c.update("a", 100, missing=5000)
    assert c.memory.held("a") == 100 + READ


def test_a_read_that_does_not_fit_waits_and_is_woken_in_order_when_memory_comes_back() -> None:
    c = Conns(3000)
    assert c.update("old", 1500, missing=10_000)  # the oldest: 2500 held
    assert not c.update("x", 100, missing=10_000)  # 100 + 1000 does not fit
    assert not c.update("y", 100, missing=10_000)
    assert c.memory.waiting == 2 and c.memory.used == 2500 + 200
    # The oldest frame completes (its bytes go to the handler): "x", whose frame started
    # next, now reads on, and "y" too, the pool having room for it.
    c.update("old", 0)
    assert c.woken == ["x", "y"] and c.may_read["x"] and c.may_read["y"]


def test_between_frames_a_connection_reads_while_the_pool_has_room() -> None:
    c = Conns(2000)
    assert c.update("big", 900, missing=5000)  # oldest: 1900 held
    assert c.update("idle", 0)  # 1900 < 2000: room for a read
    assert c.update("small", 99, missing=1)  # 100 more: the pool is full
    assert not c.update("idle", 0)
    c.update("small", 0)  # its frame completed
    assert c.woken == ["idle"] and c.may_read["idle"]


def test_the_oldest_frame_reads_on_beyond_a_full_pool() -> None:
    c = Conns(3000)
    assert c.update("a", 10, missing=2000)
    assert c.update("b", 10, missing=1500)  # 1010 + 1010: fits
    assert not c.update("c", 900, missing=2000)  # 900 + 1000 more does not
    # "a" is the oldest: it reads on although the pool cannot hold its next read.
    assert c.update("a", 1800, missing=210)
    assert c.memory.used > c.memory.bytes_max


def test_the_privilege_passes_when_the_oldest_frame_ends_or_its_connection_closes() -> None:
    c = Conns(1500)
    assert c.update("a", 500, missing=5000)  # oldest: 1500
    assert not c.update("b", 500, missing=5000)
    assert not c.update("c", 400, missing=5000)
    c.memory.release("a")  # closed: "b" started first after it
    assert c.woken == ["b"] and c.may_read["b"] and not c.may_read["c"]
    assert c.memory.oldest == "b"
    # "b" completes that frame and starts another in the same read: it goes to the back,
    # and "c" becomes the oldest.
    assert not c.update("b", 300, missing=5000, frame=1)
    assert c.woken == ["b", "c"] and c.may_read["c"]
    assert c.memory.oldest == "c"


def test_released_memory_does_not_wake_waiters_into_a_pool_that_is_still_full() -> None:
    c = Conns(2000)
    assert c.update("a", 100, missing=3000)  # oldest: 1100
    assert c.update("b", 400, missing=400)  # 800: 1900 in all
    assert c.update("c", 0)  # 1900 < 2000
    assert c.update("a", 2500, missing=500)  # the oldest reads on: 3000 held, 3800 in all
    assert not c.update("c", 0)  # full: between frames it waits
    assert not c.update("b", 0)  # "b" done, and waits too: the oldest alone is over the pool
    assert c.woken == []
    c.update("a", 0)  # "a" done: room again, the waiters in their order
    assert c.woken == ["c", "b"] and c.may_read["c"] and c.may_read["b"]


# -- frames always complete ---------------------------------------------------------------------


@dataclass
class Sender:
    """A connection's client: frames to send, and what the broker side has read of them."""

    name: str
    frames: list[int]  # sizes still to send, in order
    sent: int = 0  # bytes of frames[0] the broker has read
    buffered: int = 0  # bytes the broker's decoder holds (of frames[0])
    number: int = 0  # frames completed
    may_read: bool = True
    done: list[int] = field(default_factory=list)


def drain(seed: int, senders_n: int, frames_n: int, bytes_max: int, frame_max: int) -> None:
    """Many connections, each with frames of random sizes up to `frame_max`, read in random
    order one read at a time: whatever the interleaving, every frame completes (no state where
    nobody may read while frames are outstanding), and the memory held stays within the bound
    the pool documents. Fails naming the seed."""
    rng = random.Random(seed)
    memory: RequestMemory[str] = RequestMemory(bytes_max, lambda c: woken.add(c), READ)
    woken: set[str] = set()
    senders = {
        f"c{i}": Sender(f"c{i}", [rng.randint(1, frame_max) for _ in range(frames_n)])
        for i in range(senders_n)
    }

    def account(s: Sender) -> None:
        missing = s.frames[0] - s.sent if s.frames and s.sent else 0
        s.may_read = memory.update(s.name, s.buffered, missing, s.number)

    steps = 0
    while any(s.frames for s in senders.values()):
        steps += 1
        assert steps < 1_000_000, f"seed {seed}: no end"
        for name in list(woken):
            woken.discard(name)
            account(senders[name])
        ready = [s for s in senders.values() if s.frames and s.may_read]
        assert ready, (
            f"seed {seed}: deadlock: nobody may read; used {memory.used} of {bytes_max}, "
            f"{[(s.name, s.sent, s.frames[:1]) for s in senders.values() if s.frames]}"
        )
        s = rng.choice(ready)
        # One read: at most READ bytes, at most the rest of this frame (the model sends one
        # frame at a time, so a read never carries the next one).
        n = min(rng.randint(1, READ), s.frames[0] - s.sent)
        s.sent += n
        s.buffered += n
        if s.sent == s.frames[0]:  # whole: handled at once, its bytes released
            s.done.append(s.frames.pop(0))
            s.sent = s.buffered = 0
            s.number += 1
        account(s)
        memory.check()
        oldest = memory.oldest
        others = sum(memory.held(c) for c in senders if c != oldest)
        # The reservations of all but the oldest fit the pool, plus what reads brought beyond
        # (at most one read each); the oldest holds at most one frame and one read.
        assert others <= bytes_max + READ * senders_n, (seed, others)
        if oldest is not None:
            assert memory.held(oldest) <= frame_max + READ, (seed, memory.held(oldest))
    assert memory.used == 0, (seed, memory.used)


@pytest.mark.parametrize("seed", range(40))
def test_frames_always_complete_however_partial_frames_fill_the_pool(seed: int) -> None:
    rng = random.Random(seed)
    bytes_max = rng.choice([2_000, 5_000, 20_000])
    drain(seed, senders_n=rng.randint(2, 60), frames_n=rng.randint(1, 8),
          bytes_max=bytes_max, frame_max=rng.choice([bytes_max // 2, bytes_max]))  # fmt: skip


def test_hundreds_of_half_sent_large_frames_all_complete() -> None:
    """The deadlock whole-frame reservation used to rule out: 300 producers each half-way
    through a request of nearly the pool's size."""
    drain(seed=7, senders_n=300, frames_n=2, bytes_max=50_000, frame_max=50_000)
