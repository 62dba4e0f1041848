"""The metadata quorum: `MetadataState` replicated with Raft (pysyncobj), seen from asyncio.

This module and raft_journal.py (its journal) are the only ones that import pysyncobj. A node
is either a voter (a controller: it votes and may lead) or an observer (a broker that is not a
controller: a read-only pysyncobj member that keeps a full local copy of the state and forwards
its proposals to the leader, KRaft's "observer").

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
- The journal and snapshots live under `<data_dir>/raft/`. The journal is raft_journal.py's
  (pysyncobj's format, written with pwrite into preallocated space: pysyncobj's own mmap journal
  dies of SIGBUS on a full disk), without an fsync per entry: metadata survives kill -9 of any
  node, and survives power loss of a minority; losing power on a majority at once can lose the
  last entries. This module, not pysyncobj, decides when to compact it (a snapshot, then the
  journal restarts): every `COMPACT_ENTRIES` entries, `JOURNAL_BYTES_COMPACT` bytes (commands
  of up to 1 MiB would let 5,000 entries reach GBs) or `COMPACT_INTERVAL_S`, and after a failed
  snapshot (a full disk) not again for `COMPACT_RETRY_S`: pysyncobj retried at once, forking
  and pickling the whole state ~20 times a second while the disk stayed full.
- Every command is at most `COMMAND_BYTES_MAX` bytes serialized (pickle protocol 2, as pysyncobj
  journals and sends it); `propose` refuses a larger one with PolicyViolationError naming both
  sizes, before it reaches Raft. pysyncobj's limits sit above ours: it cuts an entry of at least
  `appendEntriesBatchSizeBytes` into chunks, and its chunking marks the last chunk by the
  command's length instead of the pickled entry's (syncobj.py:1281 in 0.3.17; pickle protocol 2
  turns every byte >= 0x80 of the command into two), so followers unpickled a truncated entry
  ("pickle data was truncated") and their Raft thread died. `APPEND_ENTRIES_BYTES_MAX`, twice
  our limit, keeps every entry on pysyncobj's unchunked path, which frames a message of any
  size.
- A full disk is not a failure: the journal raises JournalFullError inside a tick (Raft then
  behaves as if that message was lost), the tick loop notes it in `status()`, and `propose`
  refuses with StorageError while the journal cannot reserve room for the command. It clears by
  itself when a write succeeds again.
- Any other exception out of a tick stops this member for good, loudly: it is logged with its
  traceback, `status()` reports it, `propose` refuses, and `on_failure` tells the node, which
  exits non-zero. Ticking on would run Raft on state a half-done tick left behind; a restart
  rebuilds it from the journal and snapshot, the path Raft is built for.
- A voter checks that its Raft port is free before pysyncobj binds it (pysyncobj retries a
  failed bind forever, at 100% CPU, inside its constructor), and pysyncobj is told to try once:
  a port that stays taken for `PORT_IN_USE_RETRY_S` fails the start, naming it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pysyncobj.syncobj
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjException, replicated
from pysyncobj import pickle as syncobj_pickle
from pysyncobj import version as syncobj_version

from raftlog.errors import (
    NotControllerError,
    PolicyViolationError,
    RaftlogTimeoutError,
    StorageError,
    error_from_code,
)
from raftlog.invariants import InvariantError
from raftlog.metadata.raft_journal import JournalFullError, RaftJournal
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
# A leader that has heard from no majority for this long stops claiming to lead (pysyncobj's
# default is 30 s, during which status shows a leader that can commit nothing). Kafka's KRaft
# leader resigns after 1.5 fetch timeouts (3 s); well above the election timeout here.
LEADER_FALLBACK_S = 2.0
TICK_WAIT_S = 0.005
# How often the tick thread checks that this member can reach a majority of the voters
# (`out_of_contact_s`). pysyncobj drops a connection that carried nothing for its
# connectionTimeout (3.5 s); a leader sends on each every APPEND_ENTRIES_PERIOD_S.
CONTACT_CHECK_S = 0.1
# A port in use at start is tried again this long before the node gives up (check_port_free).
PORT_IN_USE_RETRY_S = 3.0
PORT_IN_USE_RETRY_INTERVAL_S = 0.1
# The largest command, serialized as pysyncobj journals and sends it. 1 MiB: an OffsetCommit of
# ~20,000 partitions with short names fits in one; the coordinator splits larger commits and
# resets (coordinator.py); anything else this large is refused.
COMMAND_BYTES_MAX = 1 << 20
# What pysyncobj wraps around a command in a journal entry (method id, tuples, type byte).
COMMAND_ENVELOPE_BYTES_MAX = 64
# pysyncobj's appendEntriesBatchSizeBytes: entries at least this large take its broken chunked
# path (see the module docstring), so this stays above every entry with a wide margin. Batches
# of small entries also grow to this size per message (pysyncobj's default is 64 KiB).
APPEND_ENTRIES_BYTES_MAX = 2 * COMMAND_BYTES_MAX
# Compaction (a snapshot, then the journal restarts): pysyncobj's defaults for entries and
# time, plus a size bound, and a pause after a snapshot that failed (see the module docstring).
COMPACT_ENTRIES = 5_000
COMPACT_INTERVAL_S = 300.0
JOURNAL_BYTES_COMPACT = 64 << 20
COMPACT_RETRY_S = 10.0
# pysyncobj's own triggers, set out of reach: this module triggers compaction instead.
_NEVER = 2**62


def command_bytes(command: tuple[str, dict[str, Any]]) -> int:
    """The size of `command` as pysyncobj pickles it (protocol 2), without its envelope."""
    return len(syncobj_pickle.dumps(command))


# pysyncobj creates its journal with this module-level function; every SyncObj in this process
# is a _Replica (this module is pysyncobj's only user), and each gets a RaftJournal.
_opened_journals: dict[str, RaftJournal] = {}


def _create_journal(path: str | None) -> RaftJournal:
    if path is None:
        raise AssertionError("the metadata quorum always keeps its journal in a file")
    journal = RaftJournal(path)
    _opened_journals[path] = journal
    return journal


if not hasattr(pysyncobj.syncobj, "createJournal"):
    raise ImportError(
        f"pysyncobj {syncobj_version.VERSION} has no syncobj.createJournal through which the "
        "metadata quorum gives it its journal (tested with 0.3.17)"
    )
pysyncobj.syncobj.createJournal = _create_journal


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
    # Why the Raft thread stopped (the node then exits); None while it runs.
    failure: str | None = None
    # Why metadata writes wait for disk space (see raft_journal.py); None when they do not.
    journal_full: str | None = None


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
        on_failure: Callable[[BaseException], None] | None = None,
    ):
        """`on_change` runs on the Raft thread after every applied command; `on_failure` runs
        on it once, if the thread fails (see the module docstring)."""
        self.raft_address = raft_address
        self.voters = sorted(v for v in voters if v != raft_address)
        self.dir = os.path.join(data_dir, "raft")
        os.makedirs(self.dir, exist_ok=True)
        self.lock = threading.Lock()
        self._on_change = on_change or (lambda: None)
        self._on_failure = on_failure or (lambda e: None)
        self._replica: _Replica | None = None
        self._journal: RaftJournal | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._failure: str | None = None
        # Since when (time.monotonic()) this member reaches no majority of the voters; None
        # while it does. Written by the tick thread only.
        self._contact_lost_at: float | None = None

    def start(self) -> None:
        """Join the quorum. Raises OSError (EADDRINUSE, naming the address) if the Raft port
        is taken, StorageError if the journal cannot be opened."""
        conf = SyncObjConf(
            autoTick=False,
            appendEntriesPeriod=APPEND_ENTRIES_PERIOD_S,
            raftMinTimeout=RAFT_MIN_TIMEOUT_S,
            raftMaxTimeout=RAFT_MAX_TIMEOUT_S,
            connectionRetryTime=CONNECTION_RETRY_S,
            leaderFallbackTimeout=LEADER_FALLBACK_S,
            appendEntriesBatchSizeBytes=APPEND_ENTRIES_BYTES_MAX,
            journalFile=os.path.join(self.dir, "journal"),
            fullDumpFile=os.path.join(self.dir, "snapshot"),
            commandsWaitLeader=True,
            dynamicMembershipChange=False,
            # One bind attempt: a taken port fails the constructor instead of spinning in it.
            maxBindRetries=1,
            logCompactionMinEntries=_NEVER,
            logCompactionMinTime=_NEVER,
        )
        if self.raft_address is not None:
            check_port_free(self.raft_address, socket.SOCK_STREAM, "Raft listener", any_host=True)
        try:
            self._replica = _Replica(
                self.raft_address, self.voters, conf, self.lock, self._on_change
            )
        except BaseException as e:
            journal = _opened_journals.pop(conf.journalFile, None)
            if journal is not None:
                journal._destroy()
            if isinstance(e, SyncObjException):
                # The port was taken between the check and pysyncobj's one bind attempt.
                raise OSError(
                    errno.EADDRINUSE,
                    f"Raft listener {self.raft_address}: address already in use ({e})",
                ) from None
            raise
        self._journal = _opened_journals.pop(conf.journalFile)
        self._thread = threading.Thread(target=self._tick, name="raftlog-raft", daemon=True)
        self._thread.start()
        log.info(
            "metadata quorum member %s started (voters %s)",
            self.raft_address or "observer",
            self.voters,
        )

    def _tick(self) -> None:
        replica, journal = self._replica, self._journal
        if replica is None or journal is None:
            raise InvariantError("the Raft replica and its journal are not set up (start() first)")
        next_compaction = 0.0
        next_contact_check = 0.0
        try:
            while not self._stopping.is_set():
                try:
                    replica.doTick(TICK_WAIT_S)
                except JournalFullError:
                    # Logged by the journal (rate-limited) and reported by status(); Raft
                    # resends what this tick dropped, and the next write that fits clears it.
                    # The tick may have ended before its wait for sockets: wait here instead.
                    self._stopping.wait(TICK_WAIT_S)
                    continue
                now = time.monotonic()
                if now >= next_contact_check:
                    next_contact_check = now + CONTACT_CHECK_S
                    self._check_contact(replica, now)
                if now >= next_compaction and (
                    len(journal) > COMPACT_ENTRIES
                    or journal.size_bytes > JOURNAL_BYTES_COMPACT
                    or now - journal.compacted_at > COMPACT_INTERVAL_S
                ):
                    # A snapshot that succeeds shrinks the journal and the condition clears;
                    # one that fails (logged by pysyncobj) is not tried again for a while.
                    replica.forceLogCompaction()
                    next_compaction = now + COMPACT_RETRY_S
        except BaseException as e:
            self._failure = f"{type(e).__name__}: {e}"
            log.critical(
                "metadata quorum member %s: the Raft thread failed and stops; this node must "
                "restart (Raft then rebuilds its state from the journal and snapshot)",
                self.raft_address or "observer",
                exc_info=True,
            )
            self._on_failure(e)

    def _check_contact(self, replica: _Replica, now: float) -> None:
        """Note whether this member is connected to a majority of the voters (itself counted
        if it votes)."""
        voters = len(self.voters) + (self.raft_address is not None)
        reached = (self.raft_address is not None) + sum(
            1 for node in replica.otherNodes if replica.isNodeConnected(node)
        )
        if 2 * reached > voters:
            self._contact_lost_at = None
        elif self._contact_lost_at is None:
            self._contact_lost_at = now

    def out_of_contact_s(self) -> float:
        """How long this member has reached no majority of the voters (0.0 while it does). A
        broker cut off this long past its session timeout has been fenced by the others, and
        its view of who leads what is stale (kafka/handlers/metadata.py)."""
        lost = self._contact_lost_at
        return 0.0 if lost is None else time.monotonic() - lost

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
        if self._replica is None:
            raise InvariantError("self._replica is None")
        return self._replica.state

    def read(self, fn: Callable[[MetadataState], Any]) -> Any:
        with self.lock:
            return fn(self.state)

    def status(self) -> QuorumStatus:
        replica = self._replica
        if replica is None:
            raise InvariantError("replica is None")
        raw = replica.getStatus()
        leader = raw.get("leader")
        return QuorumStatus(
            is_leader=bool(replica._isLeader()) and self._failure is None,
            leader=None if leader is None else str(getattr(leader, "address", leader)),
            term=int(raw.get("raft_term", 0)),
            commit_index=int(raw.get("commit_idx", 0)),
            last_applied=int(raw.get("last_applied", 0)),
            ready=bool(replica.isReady()) and self._failure is None,
            raw={str(k): str(v) for k, v in raw.items()},
            failure=self._failure,
            journal_full=None if self._journal is None else self._journal.full,
        )

    @property
    def failure(self) -> str | None:
        """Why the Raft thread stopped, or None while it runs."""
        return self._failure

    @property
    def is_leader(self) -> bool:
        return (
            self._replica is not None and self._failure is None and bool(self._replica._isLeader())
        )

    # -- writes --------------------------------------------------------------------------------

    async def propose(self, name: str, /, timeout_s: float = 5.0, **args: Any) -> Any:
        """Apply a command through Raft; returns its value or raises its RaftlogError.

        Refused before Raft: a command over COMMAND_BYTES_MAX (PolicyViolationError), a full
        disk (StorageError), a member whose Raft thread failed (NotControllerError)."""
        replica, journal = self._replica, self._journal
        if replica is None or journal is None:
            raise InvariantError("the Raft replica and its journal are not set up (start() first)")
        if self._failure is not None:
            raise NotControllerError(
                f"metadata command {name} refused: this node's Raft thread failed "
                f"({self._failure}); use another node"
            )
        command = (name, args)
        size = command_bytes(command)
        if size > COMMAND_BYTES_MAX:
            raise PolicyViolationError(
                f"metadata command {name} is {size} bytes serialized; the limit is "
                f"{COMMAND_BYTES_MAX} (COMMAND_BYTES_MAX)"
            )
        try:
            journal.reserve(size + COMMAND_ENVELOPE_BYTES_MAX)
        except JournalFullError as e:
            raise StorageError(f"metadata command {name} refused: {e}") from None
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[Any, ...]] = loop.create_future()

        def done(result: Any, error: Any) -> None:
            loop.call_soon_threadsafe(_settle, fut, result, error, name)

        replica.apply_command(command, callback=done)
        try:
            async with asyncio.timeout(timeout_s):
                result = await fut
        except TimeoutError:
            why = self._failure or journal.full or "no quorum leader?"
            raise RaftlogTimeoutError(
                f"metadata command {name} not committed within {timeout_s:.1f} s ({why})"
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


def check_port_free(
    address: str, kind: socket.SocketKind, what: str, any_host: bool = False
) -> None:
    """Raise OSError (EADDRINUSE, ...) naming `what` and `address` if it cannot be bound.

    Binds as the real owner will: TCP listeners (pysyncobj's, asyncio's) set SO_REUSEADDR, the
    UDP heartbeat socket does not; `any_host` binds the wildcard address, as pysyncobj binds its
    listener. A port in use is tried again for PORT_IN_USE_RETRY_S, so that a port another
    process holds for a moment (a port picked by binding port 0 and releasing it, as
    `raftlog dev --port 0` and the tests pick theirs) does not fail the start; a port that stays
    taken fails it within those seconds instead of never (pysyncobj retried forever). The
    socket is closed again at once and the owner binds next: another process may still take
    the port in between, and the owner's own bind then reports it."""
    host, _, port = address.rpartition(":")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bind_host = ("::" if family == socket.AF_INET6 else "0.0.0.0") if any_host else host
    deadline = time.monotonic() + PORT_IN_USE_RETRY_S
    while True:
        with socket.socket(family, kind) as sock:
            if kind == socket.SOCK_STREAM:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((bind_host, int(port)))
                return
            except OSError as e:
                error = e
        if error.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
            raise OSError(error.errno, f"{what} {address}: {error.strerror}") from None
        time.sleep(PORT_IN_USE_RETRY_INTERVAL_S)
