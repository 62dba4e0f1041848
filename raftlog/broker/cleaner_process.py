"""`CleanerProcess`: the log cleaner's work (storage/cleaner.py `run`) in a child process.

A clean decodes every record of the segments it rewrites: Python work that, on a thread of the
broker's process, takes the interpreter lock from the event loop for as long as it runs (the
benchmark measured the produce p50 1.4x and p99 several times higher during a clean at the
default budget). In a child process it takes none of it: the loop keeps its core, the clean
gets the other.

Rules:
- One child, started (spawn: never a fork of the threaded broker) on the first clean and kept
  for the next ones; one clean at a time. `run` blocks: the broker calls it on a thread. The
  child runs at niceness CLEANER_NICENESS, so on a busy machine the broker gets the CPU first.
- The plan's file descriptors are the broker's: the child opens the segments by path. A file
  that went meanwhile (retention, truncation) fails the clean, and the next pass plans again;
  whatever changed, the log's generation check decides whether the result is installed.
- The result comes back with the broker's own plan (whose descriptors the install closes),
  never the child's copy of it.
- An error in the child comes back as a CleanFailedError naming it; a child that dies (killed, out
  of memory) fails the clean and is started again by the next one.
- `stop` kills the child at once: what it was writing are `.cleaned` files, never committed
  (the next clean or open removes them). So a broker never waits on a clean to stop. A child
  whose broker was killed stops at its next read or write (its parent changed) and ends; a
  clean always writes new `.cleaned` files (cleaner.py), never one such an orphan still holds.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import threading
from multiprocessing.connection import Connection
from typing import Any

from raftlog.errors import CleanFailedError
from raftlog.storage import cleaner

log = logging.getLogger(__name__)

# The child's niceness (nice(2)): a clean runs only on CPU the broker leaves.
CLEANER_NICENESS = 10


class CleanerProcess:
    def __init__(self, name: str = "raftlog-cleaner"):
        self.name = name
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Connection | None = None
        self._stopped = False

    def run(self, plan: cleaner.CleanPlan, keys_max: int, bytes_per_s: int) -> cleaner.CleanResult:
        """cleaner.run(plan, ...) in the child; blocks until it answers."""
        with self._lock:
            conn = self._ensure()
            try:
                conn.send((plan, keys_max, bytes_per_s))
                ok, value = conn.recv()
            except (EOFError, OSError) as e:
                self._forget()
                raise CleanFailedError(f"the cleaner process ended during the clean ({e!r})") from e
        if not ok:
            raise CleanFailedError(f"cleaning {plan.name} failed in the cleaner process: {value}")
        result: cleaner.CleanResult = value
        result.plan = plan
        return result

    def stop(self) -> None:
        """Kill the child, if any (from any thread); later runs fail."""
        self._stopped = True
        proc = self._proc
        if proc is not None and proc.is_alive():
            proc.kill()
        self._forget()

    def _ensure(self) -> Connection:
        if self._stopped:
            raise CleanFailedError("the cleaner process is stopped (the broker is stopping)")
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            return self._conn
        self._forget()
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child,), name=self.name, daemon=True)
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        log.info("log cleaner process %d started", proc.pid)
        return parent

    def _forget(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.join(timeout=5)


def _serve(conn: Connection) -> None:
    """The child: clean each plan it is sent, answer (True, result) or (False, why). It stops
    a clean, and ends, once its broker has gone (killed: the pipe's end, or a new parent)."""
    broker = os.getppid()
    # Background work: the scheduler gives the broker's own process the CPU first.
    os.nice(CLEANER_NICENESS)

    def orphaned() -> bool:
        return os.getppid() != broker

    while True:
        try:
            plan, keys_max, bytes_per_s = conn.recv()
        except (EOFError, OSError):
            return
        fds: list[int] = []
        try:
            views = []
            for v in plan.segments:
                fds.append(os.open(v.path, os.O_RDONLY))
                views.append(dataclasses.replace(v, fd=fds[-1]))
            plan.segments = views
            answer: tuple[bool, Any] = (
                True,
                cleaner.run(plan, keys_max, bytes_per_s, cancelled=orphaned),
            )
        except Exception as e:  # every failure goes back to the broker, by name
            answer = (False, f"{type(e).__name__}: {e}")
        finally:
            for fd in fds:
                os.close(fd)
        try:
            conn.send(answer)
        except OSError:  # the broker is gone (BrokenPipeError): nobody to answer
            return
