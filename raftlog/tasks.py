"""Owned background tasks: every task raftlog starts outside an `asyncio.TaskGroup` has an owner.

asyncio keeps only a weak reference to a task, and an exception nobody retrieves surfaces, if
ever, as "Task exception was never retrieved" when the task is garbage-collected: a bug in an
ISR proposal, an fsync or an auto-commit would go unseen. `TaskSet.spawn(coro, what)` keeps
the task until it ends and logs a failure at once, at ERROR with its traceback, naming what
the task was and who owns it.

Rules:
- A task raftlog creates either runs in a TaskGroup, belongs to a TaskSet, is awaited by the
  function that created it, or has a done callback that acts on its failure (the producer's
  sender). tests/unit/test_tasks.py checks raftlog/ for strays.
- The coroutine handles the errors it expects (a refused proposal, a lost connection) itself;
  what reaches the set is a bug, and is logged, not raised: the owner goes on.
- Cancellation is not a failure. `cancel()` cancels every task still running (the owner's
  shutdown); `wait()` waits for them to end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class TaskSet:
    """The background tasks of one owner (`owner` names it in the log)."""

    __slots__ = ("_tasks", "failures", "owner")

    def __init__(self, owner: str):
        self.owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()
        self.failures = 0  # tasks that ended with an exception (each logged)

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, T], what: str) -> asyncio.Task[T]:
        """Start `coro` as a task of this set, named `what`."""
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.owner}: {what}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self.failures += 1
            log.error("%s failed: %r", task.get_name(), error, exc_info=error)

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def wait(self) -> None:
        """Until every task of the set has ended (failures are logged, not raised)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))
