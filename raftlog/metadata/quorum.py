"""The metadata quorum: `MetadataState` replicated with Raft (pysyncobj), seen from asyncio.

This module and nothing else imports pysyncobj. A node is either a voter (a controller: it
votes and may lead) or an observer (a broker that is not a controller: a read-only pysyncobj
member that keeps a full local copy of the state and forwards its proposals to the leader,
KRaft's "observer").

Rules, and the pysyncobj traps they avoid (measured in ../shared/ENVIRONMENT.md):
- One replicated method, `apply_command(command)`, delegating to the pure MetadataState: method
  ids come from sorted method names, so voters and observers must share this exact class.
- The state is assigned after `SyncObj.__init__` (fields set before it are left out of
  snapshots), and ticking is manual (`autoTick=False`) on a thread this module starts only
  after that assignment, so no journal entry can be applied to an object without its state.
- Proposals never block: `propose()` passes a callback, which runs on the tick thread and hands
  the result to the event loop with `call_soon_threadsafe`; the asyncio side enforces the
  timeout (a synchronous pysyncobj call without a timeout waits forever when there is no leader).
- Readiness of an observer is polled with `isReady()` (`waitReady()` hangs on non-voters).
- Reads of the state from the event loop take `lock`, which `apply_command` also holds, so a
  reader never sees a half-applied command.
- The journal and snapshots live under `<data_dir>/raft/`. pysyncobj writes its journal through
  mmap without an fsync per entry: metadata survives kill -9 of any node, and survives power
  loss of a minority; losing power on a majority at once can lose the last entries.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

from raftlog.errors import NotControllerError, RaftlogTimeoutError, error_from_code
from raftlog.metadata.state import MetadataState

log = logging.getLogger(__name__)

# Raft timing: heartbeats every 20 ms and elections after 300-600 ms of silence give a
# failover well under a second (pysyncobj's defaults measured 0.8 s median here), at a few
# percent CPU per node.
APPEND_ENTRIES_PERIOD_S = 0.02
RAFT_MIN_TIMEOUT_S = 0.3
RAFT_MAX_TIMEOUT_S = 0.6
# pysyncobj's default of 5 s delays a restarted node's catch-up; reconnect fast on loopback.
CONNECTION_RETRY_S = 0.5
TICK_WAIT_S = 0.005


class _Replica(SyncObj):  # type: ignore[misc]
    def __init__(
        self,
        self_addr: str | None,
        voters: list[str],
        conf: SyncObjConf,
        lock: threading.Lock,
        on_apply: Callable[[], None],
    ):
        # Fields set BEFORE SyncObj.__init__ are left out of snapshots: the local lock and
        # callback, which must not be pickled.
        self.local_lock = lock
        self.local_on_apply = on_apply
        super().__init__(self_addr, voters, conf)
        # Set AFTER: the replicated, snapshotted state.
        self.state = MetadataState()

    @replicated  # type: ignore[untyped-decorator]
    def apply_command(self, command: tuple[str, dict[str, Any]]) -> tuple[Any, ...]:
        with self.local_lock:
            result = self.state.apply(command)
        self.local_on_apply()
        return result


@dataclass(frozen=True, slots=True)
class QuorumStatus:
    is_leader: bool
    leader: str | None
    term: int
    commit_index: int
    last_applied: int
    ready: bool
    raw: dict[str, Any]


class MetadataQuorum:
    """A node's member of the metadata quorum.

    `raft_address` is "host:port" for a voter, None for an observer; `voters` lists every
    voter's address (a voter's own included or not).
    """

    def __init__(
        self,
        raft_address: str | None,
        voters: list[str],
        data_dir: str,
        on_change: Callable[[], None] | None = None,
    ):
        self.raft_address = raft_address
        self.voters = sorted(v for v in voters if v != raft_address)
        self.dir = os.path.join(data_dir, "raft")
        os.makedirs(self.dir, exist_ok=True)
        self.lock = threading.Lock()
        self._on_change = on_change or (lambda: None)
        self._replica: _Replica | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> None:
        conf = SyncObjConf(
            autoTick=False,
            appendEntriesPeriod=APPEND_ENTRIES_PERIOD_S,
            raftMinTimeout=RAFT_MIN_TIMEOUT_S,
            raftMaxTimeout=RAFT_MAX_TIMEOUT_S,
            connectionRetryTime=CONNECTION_RETRY_S,
            journalFile=os.path.join(self.dir, "journal"),
            fullDumpFile=os.path.join(self.dir, "snapshot"),
            commandsWaitLeader=True,
            dynamicMembershipChange=False,
        )
        self._replica = _Replica(self.raft_address, self.voters, conf, self.lock, self._on_change)
        self._thread = threading.Thread(target=self._tick, name="raftlog-raft", daemon=True)
        self._thread.start()
        log.info(
            "metadata quorum member %s started (voters %s)",
            self.raft_address or "observer",
            self.voters,
        )

    def _tick(self) -> None:
        replica = self._replica
        assert replica is not None
        while not self._stopping.is_set():
            try:
                replica.doTick(TICK_WAIT_S)
            except Exception:  # a tick error must not silently kill the node's metadata
                log.exception("raft tick failed")
                raise

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._replica is not None:
            self._replica.destroy()
            self._replica = None

    # -- reads ---------------------------------------------------------------------------------

    @property
    def state(self) -> MetadataState:
        """The local copy (may lag the leader on a follower). Read it under `lock`."""
        assert self._replica is not None
        return self._replica.state

    def read(self, fn: Callable[[MetadataState], Any]) -> Any:
        with self.lock:
            return fn(self.state)

    def status(self) -> QuorumStatus:
        replica = self._replica
        assert replica is not None
        raw = replica.getStatus()
        leader = raw.get("leader")
        return QuorumStatus(
            is_leader=bool(replica._isLeader()),
            leader=None if leader is None else str(getattr(leader, "address", leader)),
            term=int(raw.get("raft_term", 0)),
            commit_index=int(raw.get("commit_idx", 0)),
            last_applied=int(raw.get("last_applied", 0)),
            ready=bool(replica.isReady()),
            raw={str(k): str(v) for k, v in raw.items()},
        )

    @property
    def is_leader(self) -> bool:
        return self._replica is not None and bool(self._replica._isLeader())

    # -- writes --------------------------------------------------------------------------------

    async def propose(self, name: str, /, timeout_s: float = 5.0, **args: Any) -> Any:
        """Apply a command through Raft; returns its value or raises its RaftlogError."""
        replica = self._replica
        assert replica is not None
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[Any, ...]] = loop.create_future()

        def done(result: Any, error: Any) -> None:
            loop.call_soon_threadsafe(_settle, fut, result, error, name)

        replica.apply_command((name, args), callback=done)
        try:
            result = await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            raise RaftlogTimeoutError(
                f"metadata command {name} not committed within {timeout_s:.1f} s "
                "(no quorum leader?)"
            ) from None
        if result[0] == "ok":
            return result[1]
        raise error_from_code(result[1], result[2])


def _settle(fut: asyncio.Future[tuple[Any, ...]], result: Any, error: Any, name: str) -> None:
    if fut.done():
        return
    if error == FAIL_REASON.SUCCESS:
        fut.set_result(result)
    elif error in (
        FAIL_REASON.NOT_LEADER,
        FAIL_REASON.MISSING_LEADER,
        FAIL_REASON.LEADER_CHANGED,
        FAIL_REASON.DISCARDED,
    ):
        fut.set_exception(
            NotControllerError(
                f"metadata command {name} failed: {FAIL_REASON_NAMES.get(error, error)}; retry"
            )
        )
    else:
        fut.set_exception(
            RaftlogTimeoutError(
                f"metadata command {name} failed: {FAIL_REASON_NAMES.get(error, error)}"
            )
        )


FAIL_REASON_NAMES = {getattr(FAIL_REASON, n): n for n in dir(FAIL_REASON) if n.isupper()}
