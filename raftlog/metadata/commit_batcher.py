"""Group commit for offset commits: many callers' commits in one Raft entry.

The group coordinator (coordinator.py) checks each commit and hands it here with an upper
bound of its command's size; `CommitBatcher.submit` queues it and returns its future, which
gets that commit's own outcome from the per-commit results of its `commit_batch` command.

Rules:
- Commits that arrive within `linger_ms` of the first, or while earlier batches are in
  flight, go into one `commit_batch` command of at most `batch_max` commits and
  `batch_bytes_max` bytes (one Raft entry). One Raft round trip takes 20-50 ms; one entry
  per commit would cap a cluster at a few dozen commits/s, batches of up to 500 allow more
  than 5,000 commits/s.
- Up to `batches_in_flight` batches are in Raft at once, submitted in call order: Raft
  applies them in that order, so a member's later commit of a partition is applied after its
  earlier one.
- At most `pending_max` commits wait (each holds a slot until its future is done); beyond
  that `submit` waits for room (backpressure) instead of growing a queue without limit. A
  caller that gave up (its future cancelled) is not committed for: it cannot learn the
  outcome.
- Every caller gets its own exception instance (one raised in many tasks would collect all
  their tracebacks). `fail_all` ends every waiting commit (the coordinator lost its role);
  `close` stops the flusher, whose batches in Raft then end with an unknown outcome
  (NotCoordinatorError saying so: committing again is safe).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from raftlog.errors import NotCoordinatorError, RaftlogError, error_from_code
from raftlog.invariants import InvariantError
from raftlog.tasks import TaskSet

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PendingCommit:
    """One caller's commit (or a piece of it), waiting for its batch. `args` are
    commit_offsets' arguments; `size_bytes` bounds their serialized size from above."""

    args: dict[str, Any]
    future: asyncio.Future[None]
    size_bytes: int


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """The coordinator's commit settings (CoordinatorConfig's commit_* fields, checked there)."""

    batch_max: int
    batch_bytes_max: int
    linger_ms: int
    batches_in_flight: int
    pending_max: int


class CommitBatcher:
    """Queues checked commits and proposes them in batches (see the module rules).

    `propose` applies a command through Raft; `ready` raises NotCoordinatorError for a group
    when this node has lost the coordinator's role (checked again after waiting for room)."""

    def __init__(
        self,
        propose: Callable[..., Awaitable[Any]],
        limits: BatchLimits,
        clock_ms: Callable[[], int],
        ready: Callable[[str], None],
        tasks: TaskSet,
    ) -> None:
        self._propose = propose
        self.limits = limits
        self._clock_ms = clock_ms
        self._ready = ready
        self._tasks = tasks
        # Commits (and pieces of split ones) waiting for the next batch, in call order.
        # Invariant: at most pending_max of them are not done; `_pending_bytes` is the sum of
        # their size_bytes.
        self._pending: list[PendingCommit] = []
        self._pending_bytes = 0
        self._pending_room = asyncio.Semaphore(limits.pending_max)
        self._batch_full = asyncio.Event()
        self._more_pending = asyncio.Event()
        # The task that lingers, then proposes batches until none is waiting; None when idle.
        self._flush_task: asyncio.Task[None] | None = None

    async def submit(self, args: dict[str, Any], size_bytes: int) -> asyncio.Future[None]:
        """Wait for room, then queue one commit_offsets for the next batch; its future."""
        await self._pending_room.acquire()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # The slot is freed when the outcome is known, or when the caller gives up.
        future.add_done_callback(lambda _: self._pending_room.release())
        try:
            self._ready(args["group_id"])  # the role may have gone while waiting for room
        except NotCoordinatorError:
            future.cancel()
            raise
        args["now_ms"] = self._clock_ms()
        self._queue(PendingCommit(args=args, future=future, size_bytes=size_bytes))
        return future

    def fail_all(self) -> None:
        """The coordinator lost its role: every waiting commit fails (NotCoordinatorError);
        a batch already proposed is left to finish (its callers get the true outcome)."""
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        for c in pending:
            _fail(
                c,
                NotCoordinatorError(
                    f"commit to group {c.args['group_id']!r} not made: this node stopped "
                    "being the group coordinator; find the coordinator and retry"
                ),
            )

    async def close(self) -> None:
        task, self._flush_task = self._flush_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _queue(self, commit: PendingCommit) -> None:
        self._pending.append(commit)
        self._pending_bytes += commit.size_bytes
        if (
            len(self._pending) >= self.limits.batch_max
            or self._pending_bytes >= self.limits.batch_bytes_max
        ):
            self._batch_full.set()
        self._more_pending.set()
        if self._flush_task is None:
            self._flush_task = self._tasks.spawn(self._flush(), "offset commit flusher")

    async def _flush(self) -> None:
        """Linger, then propose batches until no commit is waiting, with up to
        `batches_in_flight` batches in Raft at once: a Raft round costs ~20 ms whatever the
        batch size, so a commit arriving while one batch is in flight should not wait for it
        to finish."""
        in_flight: set[asyncio.Task[None]] = set()
        room = self.limits.batches_in_flight
        try:
            await self._linger()
            while self._pending or in_flight:
                if self._pending and len(in_flight) < room:
                    batch = self._take_batch()
                    if batch:
                        task = self._tasks.spawn(self._propose_batch(batch), "offset commit batch")
                        in_flight.add(task)
                        task.add_done_callback(in_flight.discard)
                    continue
                self._more_pending.clear()
                waiter = asyncio.ensure_future(self._more_pending.wait())
                try:
                    await asyncio.wait([*in_flight, waiter], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
                if self._pending and len(in_flight) < room:
                    await self._linger()  # gather the commits arriving together
        finally:
            for task in in_flight:
                task.cancel()
            if in_flight:
                await asyncio.gather(*in_flight, return_exceptions=True)
            if self._flush_task is asyncio.current_task():
                self._flush_task = None

    async def _linger(self) -> None:
        if (
            self.limits.linger_ms == 0
            or len(self._pending) >= self.limits.batch_max
            or self._pending_bytes >= self.limits.batch_bytes_max
        ):
            # One turn of the loop: callers already scheduled (a burst) join this batch.
            await asyncio.sleep(0)
            return
        self._batch_full.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.limits.linger_ms / 1000):
                await self._batch_full.wait()

    def _take_batch(self) -> list[PendingCommit]:
        """The next batch: up to batch_max commits and batch_bytes_max bytes (at least one
        commit; each fits alone, the coordinator splits larger ones)."""
        count_max, bytes_max = self.limits.batch_max, self.limits.batch_bytes_max
        n = total = 0
        for c in self._pending:
            if n == count_max or (n and total + c.size_bytes > bytes_max):
                break
            n += 1
            total += c.size_bytes
        taken, self._pending = self._pending[:n], self._pending[n:]
        self._pending_bytes -= total
        # A caller that gave up (cancelled) is not committed for: it cannot learn the outcome.
        return [c for c in taken if not c.future.done()]

    async def _propose_batch(self, batch: list[PendingCommit]) -> None:
        try:
            results = await self._propose("commit_batch", commits=[c.args for c in batch])
            if not (isinstance(results, list) and len(results) == len(batch)):
                raise InvariantError(f"commit_batch of {len(batch)} commits returned {results!r}")
        except asyncio.CancelledError:
            for c in batch:
                _fail(c, NotCoordinatorError(_unknown_outcome(c, "the coordinator stopped")))
            raise
        except RaftlogError as e:
            for c in batch:
                _fail(c, error_from_code(e.code, str(e)))
            return
        except Exception as e:
            log.exception("commit_batch of %d commits failed", len(batch))
            for c in batch:
                _fail(c, e)
            return
        for c, result in zip(batch, results, strict=True):
            if c.future.done():
                continue
            if result[0] == "ok":
                c.future.set_result(None)
            else:
                c.future.set_exception(error_from_code(result[1], result[2]))


def _fail(c: PendingCommit, error: BaseException) -> None:
    if not c.future.done():
        c.future.set_exception(error)


def _unknown_outcome(c: PendingCommit, why: str) -> str:
    return (
        f"commit to group {c.args['group_id']!r} by {c.args['member_id']!r}: {why} before the "
        "outcome was known; the commit may or may not have been applied (committing again is "
        "safe)"
    )
