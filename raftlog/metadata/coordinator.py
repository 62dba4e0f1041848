"""The consumer-group coordinator: runs on the active controller (the metadata Raft leader).

Kafka's classic group protocol, with the assignment computed by the replicated state machine
instead of a leader member. A group's states and transitions live in groups.py (Empty,
PreparingRebalance, Stable, Dead); this module drives them with the network and the clock:

- A join is one `join_group` command. When it completes the rebalance (the first member of a
  group, the last member to rejoin) or changes nothing (a member of a Stable group joining
  again unchanged), it is answered at once. Otherwise the group is preparing a rebalance and
  the join waits (Kafka's JoinGroup barrier) until the generation moves on: every member has
  rejoined, left or expired, or the rebalance deadline passed. It is then answered with the
  new generation and the member's partitions in it. The wait is bounded: by the group's
  rebalance deadline plus `join_wait_margin_ms` (RebalanceInProgressError after it: join
  again); by the coordinator's role (NotCoordinatorError when it stops being active). Waiting
  joins are bounded by the connections that sent them (one response slot each).
- Members of the current generation learn of a rebalance from their heartbeat
  (RebalanceInProgressError), commit (accepted: their generation stands until the rebalance
  completes), give up their partitions and join again. So a partition never has two
  consumers: its new owner gets it only after its old owner rejoined (having committed) or
  was removed.
- Kafka's classic groups (groups.py says how their state differs) take the same path:
  `kafka_join` is `join` with Kafka's protocols ([name, metadata bytes]) and the topics the
  caller decoded from them; its answer, once the rebalance completes, names the leader, and
  the leader's lists every member's metadata. A first JoinGroup of v4+ gets a member id from
  `pending_member_id` (answered MEMBER_ID_REQUIRED, KIP-394; in memory, bounded) and joins
  again with it. `sync` is SyncGroup: the leader's assignments go through Raft (one
  `sync_group` command), the other members' SyncGroups wait for them like joins wait for a
  rebalance (same bound; a rebalance meanwhile answers RebalanceInProgressError), and a
  member whose join or SyncGroup waits here is alive for the sweep (Kafka keeps them too).
- Only state changes go through Raft: joins, leaves, expiries, rebalance deadlines, commits,
  resets, deletes. Heartbeats do not. A heartbeat changes no replicated state, and a Raft entry
  per heartbeat (every member, every few seconds) would cost a disk write and a round trip on
  every voter. Heartbeat times live in this object's memory, on the one node that acts on them.
- Liveness is judged only while active. A new controller knows nothing of the heartbeats its
  predecessor saw, so `become_active()` gives every member in the state a fresh heartbeat time
  (a grace period of one session timeout): members that were alive under the old controller
  are not expired for the failover itself. A member seen in the state without a heartbeat time
  (it joined through another node) gets the same grace on first sight. `become_inactive()`
  stops expiry, fails waiting joins and makes the member operations raise
  `NotCoordinatorError`, so clients go and find the new active controller; a join they send
  there finds its rebalance where Raft left it (the rejoined members are replicated state).
- The caller calls `become_active()` only once this node's copy of the state is current (after
  a proposal of its own term has been applied), so the grace covers every member and the local
  reads below see every commit that was acknowledged.
- The sweep (every `sweep_interval_ms`) expires members silent for their session timeout
  (one `leave_group` per group per sweep), except members whose join waits in the barrier
  (Kafka keeps those alive too: a waiting member cannot heartbeat on its blocked connection);
  and it proposes `tick_group` for a rebalancing group whose deadline passed, or that has none
  yet (a rebalance started by a topic change). The clock is read here and passed into commands
  as `now_ms`: the state machine never reads a clock. A failed proposal is logged and tried
  again on the next sweep; the sweep loop never dies of it. Every completion happens in one of
  this node's own proposals, after which the waiting joins of that group are answered; the
  sweep also checks every group with waiting joins, in case another path moved it on.
- Commits are batched (group commit, commit_batcher.py): commits that arrive together go into
  one `commit_batch` command (one Raft entry) of at most `commit_batch_max` commits and
  `commit_batch_bytes_max` bytes, in call order, and each caller gets its own result; waiting
  commits are bounded by `commit_pending_max` (backpressure).
- Every command fits one Raft entry (quorum.COMMAND_BYTES_MAX). Sizes are bounded from above
  from string lengths (group_requests.py: what pickle protocol 2 can take at most), so a
  batch is cut before it would grow past `commit_batch_bytes_max`. A commit larger
  than that (an OffsetCommit of tens of thousands of partitions) is split into pieces that
  follow each other in the queue, so they are applied in order; each piece is checked on its
  own, so a rebalance between two pieces applies the first and refuses the rest (the caller gets
  the refusal; the member restarts those partitions from the last committed offsets, as after
  any refused commit: at least once). A reset is split the same way, and expiry proposes
  `leave_group` in pieces too, so a large group can always be expired.
- Input from the network is checked here (with group_requests.py's checks), before it is
  proposed: a malformed command must be refused with `InvalidRequestError`, not reach the
  state machine of every replica. Ids
  (group, member, client, instance, assignor names) are at most `id_bytes_max` bytes, commit
  metadata at most `offset_metadata_bytes_max` (Kafka's `offset.metadata.max.bytes`),
  partitions and generations int32 and offsets int64, as on Kafka's wire.
- Reads (`fetch_offsets`, `list_groups`, `describe_group`) use the local copy of the state
  under the quorum's lock; they work on any node, possibly lagging on a node that is not
  active.
- `NotControllerError` from the quorum (leadership lost mid-proposal) reaches group clients as
  `NotCoordinatorError`: for them both mean "find the coordinator again".
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from raftlog.errors import (
    GroupIdNotFoundError,
    InvalidConfigError,
    InvalidRequestError,
    NotControllerError,
    NotCoordinatorError,
    PolicyViolationError,
    RaftlogError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from raftlog.metadata import groups
from raftlog.metadata.commit_batcher import BatchLimits, CommitBatcher
from raftlog.metadata.group_requests import (
    BATCH_ENVELOPE_BYTES_MAX,
    COMMIT_BYTES,
    INT32_MAX,
    LEAVE_BYTES,
    RESET_BYTES,
    STR_BYTES,
    check_str,
    entry_bytes_max,
    is_int,
    kafka_assignments,
    kafka_protocols,
    offset_entries,
    split_by_size,
    str_bytes,
    str_list,
)
from raftlog.metadata.quorum import COMMAND_BYTES_MAX
from raftlog.metadata.state import MetadataState
from raftlog.tasks import TaskSet
from raftlog.topics import validate_topic_name

log = logging.getLogger(__name__)

T = TypeVar("T")

TopicPartition = tuple[str, int]


class Propose(Protocol):
    """Apply a command through Raft; returns its value or raises its RaftlogError."""

    def __call__(self, name: str, /, **args: Any) -> Awaitable[Any]: ...


class Read(Protocol):
    """Run `fn` on the local state under the lock `apply` takes; return its result."""

    def __call__(self, fn: Callable[[MetadataState], T], /) -> T: ...


def anchored_clock_ms() -> Callable[[], int]:
    """A clock that never goes backwards (monotonic) but reads like wall time.

    Expiry needs a monotonic clock (an NTP step must not expire every member); the timestamps
    that go into the replicated state (`joined_ms`, the commit time) are more useful to people
    as wall time. Anchoring the monotonic clock to the wall clock once, at start, gives both.
    """
    wall_ms = time.time_ns() // 1_000_000
    mono_ms = time.monotonic_ns() // 1_000_000
    return lambda: wall_ms + time.monotonic_ns() // 1_000_000 - mono_ms


# How many member ids a log line names (a group may have thousands).
_LOGGED_MEMBERS_MAX = 8
# Member ids handed out for Kafka's MEMBER_ID_REQUIRED round (`pending_member_id`): how long
# one waits for its client's second join (Kafka: the session timeout; clients rejoin at once),
# and how many one group keeps (a client looping on first joins must not grow memory).
PENDING_MEMBER_MS = 300_000
PENDING_MEMBERS_MAX = 1_000
# A failing expiry of one group is logged at most this often (it is retried every sweep).
EXPIRY_WARNING_INTERVAL_MS = 10_000


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    # 500 commits per Raft entry: at 20-50 ms per round trip, 10,000-25,000 commits/s, and an
    # entry of a few tens of KiB, well under what pysyncobj moves in one append.
    commit_batch_max: int = 500
    # A batch's estimated size: 1 KiB below one Raft command (COMMAND_BYTES_MAX, 1 MiB), room
    # for the batch's envelope. Larger single commits are split (see the module docstring).
    commit_batch_bytes_max: int = COMMAND_BYTES_MAX - 1024
    # Kafka's offset.metadata.max.bytes.
    offset_metadata_bytes_max: int = 4096
    # Group, member, client and instance ids and assignor names. Kafka bounds them only by its
    # string type (32,767 bytes); every id rides in every commit, heartbeat and expiry, so a
    # few hundred characters of real ids are allowed and megabytes are not.
    id_bytes_max: int = 1024
    # 2 ms: long enough to gather the commits of one burst, short next to a Raft round trip.
    commit_linger_ms: int = 2
    # Batches in Raft at once (see GroupCoordinator._flush).
    commit_batches_in_flight: int = 4
    # Ten full batches may wait; past that, callers wait for room (backpressure).
    commit_pending_max: int = 5_000
    # A sweep every 100 ms expires a member at most 0.1 s after its session timeout.
    sweep_interval_ms: int = 100
    # Shorter sessions than one sweep interval cannot be honoured; Kafka's upper bound
    # (group.max.session.timeout.ms) keeps a dead member from holding partitions for hours.
    session_timeout_ms_min: int = 100
    session_timeout_ms_max: int = 1_800_000
    # A join waiting for its rebalance is answered RebalanceInProgressError this long after
    # the group's rebalance deadline: the sweep completes the rebalance at the deadline (one
    # sweep interval and one Raft round trip later), so only a sweep that keeps failing (a
    # full metadata disk) makes the member ask again.
    join_wait_margin_ms: int = 2000

    def __post_init__(self) -> None:
        if self.commit_batch_max < 1:
            raise InvalidConfigError(f"commit_batch_max must be >= 1, got {self.commit_batch_max}")
        # The smallest batch must hold one commit of the largest ids and one largest entry.
        smallest = (
            COMMIT_BYTES + 2 * self.id_bytes_max + entry_bytes_max(self.offset_metadata_bytes_max)
        )
        largest = COMMAND_BYTES_MAX - BATCH_ENVELOPE_BYTES_MAX
        if not smallest <= self.commit_batch_bytes_max <= largest:
            raise InvalidConfigError(
                f"commit_batch_bytes_max must be {smallest}..{largest} (one commit with the "
                f"largest ids and metadata .. one Raft command), got {self.commit_batch_bytes_max}"
            )
        if self.offset_metadata_bytes_max < 0 or self.id_bytes_max < 1:
            raise InvalidConfigError(
                f"need offset_metadata_bytes_max >= 0 ({self.offset_metadata_bytes_max}) and "
                f"id_bytes_max >= 1 ({self.id_bytes_max})"
            )
        if self.commit_batches_in_flight < 1:
            raise InvalidConfigError(
                f"commit_batches_in_flight must be >= 1, got {self.commit_batches_in_flight}"
            )
        if self.commit_linger_ms < 0:
            raise InvalidConfigError(f"commit_linger_ms must be >= 0, got {self.commit_linger_ms}")
        if self.commit_pending_max < self.commit_batch_max:
            raise InvalidConfigError(
                f"commit_pending_max ({self.commit_pending_max}) must be >= commit_batch_max "
                f"({self.commit_batch_max})"
            )
        if self.sweep_interval_ms < 0:
            raise InvalidConfigError(
                f"sweep_interval_ms must be >= 0, got {self.sweep_interval_ms}"
            )
        if self.join_wait_margin_ms < 0:
            raise InvalidConfigError(
                f"join_wait_margin_ms must be >= 0, got {self.join_wait_margin_ms}"
            )
        if not 1 <= self.session_timeout_ms_min <= self.session_timeout_ms_max:
            raise InvalidConfigError(
                f"need 1 <= session_timeout_ms_min ({self.session_timeout_ms_min}) <= "
                f"session_timeout_ms_max ({self.session_timeout_ms_max})"
            )


# What a waiting request gets once the group moved on: (group id, the group or None, member
# id, generation) -> its answer, None to go on waiting, or raises the error to answer.
Outcome = Callable[[str, "groups.GroupState | None", str, int], Any]


@dataclass(slots=True)
class _Waiter:
    """A join waiting for its rebalance (groups.join_outcome: the generation moved past
    `generation`), or a Kafka member's SyncGroup waiting for its leader's assignment
    (groups.sync_outcome)."""

    member_id: str
    generation: int
    future: asyncio.Future[Any]
    outcome: Outcome
    what: str


class GroupCoordinator:
    """Consumer groups on the active controller: membership, expiry, offsets.

    `propose` applies a command through Raft (MetadataQuorum.propose); `read` reads the local
    state under its lock (MetadataQuorum.read); `clock_ms` is monotonic, in milliseconds.
    A new coordinator is inactive until `become_active()`.
    """

    def __init__(
        self,
        propose: Propose,
        read: Read,
        clock_ms: Callable[[], int] | None = None,
        commit_batch_max: int = 500,
        commit_linger_ms: int = 2,
        commit_pending_max: int = 5_000,
        sweep_interval_ms: int = 100,
        session_timeout_ms_min: int = 100,
        session_timeout_ms_max: int = 1_800_000,
        **limits: int,
    ) -> None:
        """`limits`: the other CoordinatorConfig fields (byte bounds), by name."""
        self.config = CoordinatorConfig(
            commit_batch_max=commit_batch_max,
            commit_linger_ms=commit_linger_ms,
            commit_pending_max=commit_pending_max,
            sweep_interval_ms=sweep_interval_ms,
            session_timeout_ms_min=session_timeout_ms_min,
            session_timeout_ms_max=session_timeout_ms_max,
            **limits,
        )
        self._propose_fn = propose
        self._read = read
        self._clock_ms = clock_ms if clock_ms is not None else anchored_clock_ms()
        self._active = False
        # group id -> member id -> clock_ms of the member's last heartbeat (or join, or first
        # sight while active). Invariant: only members of the state, pruned on every sweep, so
        # it is bounded by the number of members.
        self._heartbeat_ms: dict[str, dict[str, int]] = {}
        # group id -> clock_ms of the last warning that its expiry failed (one per interval).
        self._expiry_warned_ms: dict[str, int] = {}
        self._tasks = TaskSet("group coordinator")
        # Offset commits, batched into Raft entries (commit_batcher.py).
        self._commits = CommitBatcher(
            self._propose,
            BatchLimits(
                batch_max=self.config.commit_batch_max,
                batch_bytes_max=self.config.commit_batch_bytes_max,
                linger_ms=self.config.commit_linger_ms,
                batches_in_flight=self.config.commit_batches_in_flight,
                pending_max=self.config.commit_pending_max,
            ),
            self._clock_ms,
            self._check_active,
            self._tasks,
        )
        # group id -> joins waiting for their rebalance, Kafka members' SyncGroups waiting for
        # their leader's assignment. Invariant: every future is pending (answered ones are
        # removed by `_answer_waiters`, given-up ones by `_wait`); bounded by the requests in
        # flight, one per member connection.
        self._waiters: dict[str, list[_Waiter]] = {}
        # group id -> member id -> clock_ms it was handed out (`pending_member_id`).
        self._pending_members: dict[str, dict[str, int]] = {}

    # -- role ----------------------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self._active

    def become_active(self) -> None:
        """This node leads the metadata quorum: every member gets a fresh heartbeat (grace)."""
        now = self._clock_ms()
        members = self._read(_members_by_group)
        self._heartbeat_ms = {g: dict.fromkeys(ms, now) for g, ms in members.items()}
        self._active = True
        log.info(
            "group coordinator became active: %d groups, %d members get a grace period",
            len(members),
            sum(len(ms) for ms in members.values()),
        )

    def become_inactive(self) -> None:
        """Leadership lost: stop expiring; waiting commits fail with NotCoordinatorError.

        A batch already proposed is left to finish: its callers get the true outcome.
        """
        if self._active:
            log.info("group coordinator became inactive")
        self._active = False
        self._heartbeat_ms = {}
        self._pending_members = {}
        waiters, self._waiters = self._waiters, {}
        for group_id, group_waiters in sorted(waiters.items()):
            for w in group_waiters:
                if not w.future.done():
                    w.future.set_exception(
                        NotCoordinatorError(
                            f"{w.what} of {w.member_id!r} to group {group_id!r} (generation "
                            f"{w.generation}) not answered: this node stopped being the group "
                            "coordinator; find the coordinator and join again"
                        )
                    )
        self._commits.fail_all()

    async def close(self) -> None:
        """Stop: become inactive and end the commit flusher (its callers get an error)."""
        self.become_inactive()
        await self._commits.close()

    def _check_active(self, group_id: str) -> None:
        if not self._active:
            raise NotCoordinatorError(
                f"this node is not the coordinator of group {group_id!r} (not the active "
                "controller); find the coordinator and retry"
            )

    async def _propose(self, name: str, /, **args: Any) -> Any:
        try:
            return await self._propose_fn(name, **args)
        except NotControllerError as e:
            raise NotCoordinatorError(
                f"{name} for group {args.get('group_id', '?')!r} not applied: {e}"
            ) from e

    def _check_id(self, name: str, value: object, empty_ok: bool = True) -> None:
        size = str_bytes(check_str(name, value, empty_ok))
        if size > self.config.id_bytes_max:
            raise PolicyViolationError(
                f"{name} {value!r:.60} is {size} bytes; the limit is id_bytes_max="
                f"{self.config.id_bytes_max}"
            )

    def _id_pieces(self, group_id: str, member_ids: list[str]) -> list[list[str]]:
        """`member_ids` in runs that each fit one leave_group command."""
        budget = self.config.commit_batch_bytes_max - LEAVE_BYTES - str_bytes(group_id)
        sizes = [str_bytes(m) + STR_BYTES for m in member_ids]
        return [piece for piece, _ in split_by_size(member_ids, sizes, budget)]

    # -- membership ----------------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        client_id: str,
        instance_id: str | None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        topics: Sequence[str],
        protocols: Sequence[str],
    ) -> dict[str, Any]:
        """Join (or rejoin) a group; returns member_id, generation, state, protocol and the
        member's assignment in that generation, once the rebalance the join takes part in has
        completed (see the module docstring for the wait and its bounds).

        An empty `member_id` asks for a new one. The returned generation is the one the
        member's commits must carry.
        """
        args = self._join_args(
            group_id,
            member_id,
            client_id,
            instance_id,
            session_timeout_ms,
            rebalance_timeout_ms,
            topics,
        )
        protocol_list = str_list("protocols", protocols)
        for protocol in protocol_list:
            self._check_id("protocols", protocol, empty_ok=False)
        self._check_active(group_id)
        return await self._join(group_id, protocols=protocol_list, **args)

    async def kafka_join(
        self,
        group_id: str,
        member_id: str,
        client_id: str,
        instance_id: str | None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        topics: Sequence[str],
    ) -> dict[str, Any]:
        """A Kafka client's JoinGroup (the classic group protocol), answered as `join` is once
        its rebalance completes; its view (GroupState.member_view) adds the leader and, for
        the leader, every member's metadata. `protocols` are kept as sent; `topics` are the
        subscription the caller decoded from them. A member id that `pending_member_id`
        handed out (Kafka's MEMBER_ID_REQUIRED round) joins as a new member with that id."""
        args = self._join_args(
            group_id,
            member_id,
            client_id,
            instance_id,
            session_timeout_ms,
            rebalance_timeout_ms,
            topics,
        )
        self._check_id("protocol_type", protocol_type, empty_ok=False)
        if protocol_type == groups.NATIVE_PROTOCOL_TYPE:
            raise InvalidRequestError(
                f"group {group_id!r}: protocol type {protocol_type!r} is raftlog's own client's"
            )
        pairs = kafka_protocols(group_id, protocols)
        for name, _ in pairs:
            self._check_id("protocol name", name, empty_ok=False)
        self._check_active(group_id)
        new_member_id = None
        pending = self._pending_members.get(group_id, {})
        if member_id and pending.pop(member_id, None) is not None:
            new_member_id, args["member_id"] = member_id, ""
        return await self._join(
            group_id,
            protocols=pairs,
            protocol_type=protocol_type,
            new_member_id=new_member_id,
            **args,
        )

    def pending_member_id(self, group_id: str, client_id: str) -> str:
        """A member id for a Kafka client's first JoinGroup (v4+, no instance id), which is
        answered MEMBER_ID_REQUIRED with it (KIP-394): the client joins again with the id, so
        a join retried after a lost answer cannot leave a second member behind. Kept in
        memory (a new coordinator does not know it: the client's join then gets
        UnknownMemberIdError and starts over), at most PENDING_MEMBERS_MAX per group, each
        for PENDING_MEMBER_MS."""
        self._check_id("group_id", group_id, empty_ok=False)
        self._check_id("client_id", client_id)
        self._check_active(group_id)
        now = self._clock_ms()
        pending = self._pending_members.setdefault(group_id, {})
        for m, at in list(pending.items()):
            if now - at > PENDING_MEMBER_MS or len(pending) >= PENDING_MEMBERS_MAX:
                del pending[m]
        member_id = f"{client_id}-{uuid.uuid4()}"
        pending[member_id] = now
        return member_id

    def _join_args(
        self,
        group_id: str,
        member_id: str,
        client_id: str,
        instance_id: str | None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        topics: Sequence[str],
    ) -> dict[str, Any]:
        """A join's ids, timeouts and topics, checked, as join_group's arguments."""
        self._check_id("group_id", group_id, empty_ok=False)
        self._check_id("member_id", member_id)
        self._check_id("client_id", client_id)
        if instance_id is not None:
            self._check_id("instance_id", instance_id, empty_ok=False)
        lo, hi = self.config.session_timeout_ms_min, self.config.session_timeout_ms_max
        if not is_int(session_timeout_ms) or not lo <= session_timeout_ms <= hi:
            raise InvalidRequestError(
                f"group {group_id!r}: session_timeout_ms must be {lo}..{hi}, "
                f"got {session_timeout_ms!r}"
            )
        if not is_int(rebalance_timeout_ms) or not 0 <= rebalance_timeout_ms <= INT32_MAX:
            raise InvalidRequestError(
                f"group {group_id!r}: rebalance_timeout_ms must be 0..{INT32_MAX}, "
                f"got {rebalance_timeout_ms!r}"
            )
        topic_list = str_list("topics", topics)
        for topic in topic_list:
            validate_topic_name(topic)
        return {
            "member_id": member_id,
            "client_id": client_id,
            "instance_id": instance_id,
            "session_timeout_ms": session_timeout_ms,
            "rebalance_timeout_ms": rebalance_timeout_ms,
            "topics": topic_list,
        }

    async def _join(self, group_id: str, **args: Any) -> dict[str, Any]:
        """Propose a checked join; answer it now, or once its rebalance completes."""
        client_id = args["client_id"]
        view: dict[str, Any] = await self._propose(
            "join_group", group_id=group_id, now_ms=self._clock_ms(), **args
        )
        new_id = view["member_id"]
        self._seen(group_id, new_id)
        self._answer_waiters(group_id)  # this join may have completed others' rebalance
        if view["state"] == groups.PREPARING.value:
            waiting = self._read(lambda s: s.groups[group_id].waiting_for())
            log.info(
                "group %s: member %s (client %s) joins; generation %d waits for %d members "
                "to rejoin (%s%s)",
                group_id,
                new_id,
                client_id,
                view["generation"],
                len(waiting),
                ", ".join(waiting[:_LOGGED_MEMBERS_MAX]),
                ", ..." if len(waiting) > _LOGGED_MEMBERS_MAX else "",
            )
            view = await self._wait(
                group_id, new_id, view["generation"], groups.join_outcome, "join"
            )
            self._seen(group_id, new_id)
        log.info(
            "group %s: member %s (client %s) in generation %d (%s) with %d partitions",
            group_id,
            new_id,
            client_id,
            view["generation"],
            view["state"],
            len(view["assignment"]),
        )
        return view

    async def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        assignments: Sequence[tuple[str, bytes, Sequence[tuple[str, int]]]] | None,
    ) -> bytes:
        """A Kafka member's SyncGroup: its assignment bytes, once its group's leader has sent
        the assignment of `generation` (the leader's own `assignments`, each (member id, the
        bytes as sent, the partitions decoded from them), go through Raft: one command).
        Waits at most until the group's deadline plus `join_wait_margin_ms`; a rebalance
        meanwhile is RebalanceInProgressError (join again), as in Kafka."""
        self._check_id("group_id", group_id, empty_ok=False)
        self._check_id("member_id", member_id)
        entries = None if assignments is None else kafka_assignments(group_id, assignments)
        self._check_active(group_id)
        self._seen(group_id, member_id)
        answer: bytes | None
        if entries is not None:
            answer = await self._propose(
                "sync_group",
                group_id=group_id,
                member_id=member_id,
                generation=generation,
                assignments=entries,
            )
            self._answer_waiters(group_id)
        else:

            def outcome(s: MetadataState) -> bytes | None:
                g = s.groups.get(group_id)
                if g is not None and member_id in g.members:
                    g.require_current(member_id, generation, "SyncGroup")
                return groups.sync_outcome(group_id, g, member_id, generation)

            answer = self._read(outcome)
        if answer is None:
            answer = await self._wait(
                group_id, member_id, generation, groups.sync_outcome, "SyncGroup"
            )
        self._seen(group_id, member_id)
        return answer

    async def _wait(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        outcome: Outcome,
        what: str,
    ) -> Any:
        """Wait until `outcome` answers (a join: the generation moved past `generation`; a
        SyncGroup: the leader's assignment arrived), within the group's deadline plus
        join_wait_margin_ms."""
        self._check_active(group_id)  # the role may have gone while the proposal was applied
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(member_id, generation, future, outcome, what)
        self._waiters.setdefault(group_id, []).append(waiter)
        # Between the proposal and now other proposals may have moved the group on.
        self._answer_waiters(group_id)

        def deadline_ms(s: MetadataState) -> int | None:
            g = s.groups.get(group_id)
            if g is None or g.phase not in (groups.PREPARING, groups.COMPLETING):
                return None
            at = g.rebalance_deadline_ms
            return at if at is not None else self._clock_ms() + g.rebalance_timeout_ms()

        until_ms = self._read(deadline_ms)
        wait_ms = self.config.join_wait_margin_ms
        if until_ms is not None:
            wait_ms += max(until_ms - self._clock_ms(), 0)
        try:
            async with asyncio.timeout(wait_ms / 1000):
                return await future
        except TimeoutError:
            raise RebalanceInProgressError(
                f"group {group_id!r}: the {what} of member {member_id!r} at generation "
                f"{generation} was not answered within {wait_ms} ms (the group's deadline and "
                f"join_wait_margin_ms={self.config.join_wait_margin_ms}); join again"
            ) from None
        finally:
            waiters = self._waiters.get(group_id)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._waiters[group_id]

    def _answer_waiters(self, group_id: str) -> None:
        """Answer the joins and SyncGroups waiting on `group_id` that can be answered now."""
        waiters = self._waiters.get(group_id)
        if not waiters:
            return

        def outcomes(s: MetadataState) -> list[Any]:
            g = s.groups.get(group_id)
            out: list[Any] = []
            for w in waiters:
                try:
                    out.append(w.outcome(group_id, g, w.member_id, w.generation))
                except RaftlogError as e:
                    out.append(e)
            return out

        kept = []
        for w, outcome in zip(waiters, self._read(outcomes), strict=True):
            if w.future.done():
                continue
            if outcome is None:
                kept.append(w)
            elif isinstance(outcome, RaftlogError):
                w.future.set_exception(outcome)
            else:
                w.future.set_result(outcome)
        if kept:
            self._waiters[group_id] = kept
        else:
            del self._waiters[group_id]

    def _seen(self, group_id: str, member_id: str) -> None:
        if self._active:
            self._heartbeat_ms.setdefault(group_id, {})[member_id] = self._clock_ms()

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> int:
        """Record that the member is alive; return the group's current generation.

        In memory only, no Raft. While the group prepares a rebalance the answer is
        RebalanceInProgressError (groups.heartbeat): the member commits, gives up its
        partitions and joins again. A generation other than the member's own also tells it to
        join again; a stale `generation` is not an error here (its commits are refused).
        """
        check_str("group_id", group_id, empty_ok=False)
        check_str("member_id", member_id)
        self._check_active(group_id)

        def answer(s: MetadataState) -> int | RaftlogError:
            try:
                return groups.heartbeat(group_id, s.groups.get(group_id), member_id, generation)
            except RaftlogError as e:
                return e

        current = self._read(answer)
        if isinstance(current, UnknownMemberIdError):
            raise current
        self._seen(group_id, member_id)
        if isinstance(current, RaftlogError):
            raise current
        if generation != current:
            log.debug(
                "group %s: member %s heartbeats at generation %s, group is at %d",
                group_id,
                member_id,
                generation,
                current,
            )
        return current

    async def leave(self, group_id: str, member_ids: Sequence[str]) -> int:
        """Members leave (a consumer closing); returns how many were members."""
        self._check_id("group_id", group_id, empty_ok=False)
        ids = str_list("member_ids", member_ids)
        for member_id in ids:
            self._check_id("member_ids", member_id)
        self._check_active(group_id)
        gone = 0
        for piece in self._id_pieces(group_id, ids):
            gone += await self._propose(
                "leave_group", group_id=group_id, member_ids=piece, now_ms=self._clock_ms()
            )
        self._forget(group_id, ids)
        self._answer_waiters(group_id)
        log.info("group %s: %d of members %s left", group_id, gone, ids)
        return gone

    def member_of_instance(self, group_id: str, instance_id: str) -> str | None:
        """The member id a static member (`instance_id`) has in the group now, if any."""

        def find(s: MetadataState) -> str | None:
            g = s.groups.get(group_id)
            members = g.members if g is not None else {}
            return next((m for m, v in members.items() if v["instance_id"] == instance_id), None)

        return self._read(find)

    def _forget(self, group_id: str, member_ids: Iterable[str]) -> None:
        seen = self._heartbeat_ms.get(group_id)
        if seen is None:
            return
        for m in member_ids:
            seen.pop(m, None)
        if not seen:
            del self._heartbeat_ms[group_id]

    # -- expiry and rebalance deadlines ----------------------------------------------------------

    async def run(self) -> None:
        """Sweep (expiry, rebalance deadlines) every `sweep_interval_ms` until cancelled."""
        interval_s = self.config.sweep_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.sweep()
            except Exception:
                # A bug in one sweep must not end expiry for good: a dead loop would leave
                # crashed consumers owning their partitions forever. Log it loudly, go on.
                log.exception("group sweep failed; retrying on the next sweep")

    async def sweep(self) -> int:
        """Expire members whose session timed out (one `leave_group` per group), then propose
        `tick_group` for rebalancing groups whose deadline passed or is not set yet.

        Returns how many members were removed (expired or left behind by a rebalance).
        Proposal errors are logged, and tried again on the next sweep.
        """
        if not self._active:
            return 0
        views = self._read(_sweep_views)
        now = self._clock_ms()
        # Prune members that are gone; give members never seen by this node their grace, and
        # members waiting in a join barrier a fresh time (they cannot heartbeat meanwhile).
        for g, v in views.items():
            # Members whose join or SyncGroup waits here are alive too.
            waiting = {w.member_id for w in self._waiters.get(g, [])}
            if waiting:
                views[g] = dataclasses.replace(v, parked=v.parked | waiting)
        self._heartbeat_ms = {
            g: {
                m: now if m in v.parked else self._heartbeat_ms.get(g, {}).get(m, now)
                for m in v.session_timeout_ms
            }
            for g, v in views.items()
            if v.session_timeout_ms
        }
        removed = 0
        for group_id in sorted(views):
            if not self._active:
                break
            view = views[group_id]
            # Judge again just before proposing: earlier groups' proposals took time, and a
            # heartbeat may have arrived meanwhile.
            now = self._clock_ms()
            seen = self._heartbeat_ms.get(group_id, {})
            expired = sorted(
                m
                for m, session_timeout_ms in view.session_timeout_ms.items()
                if m in seen and m not in view.parked and now - seen[m] > session_timeout_ms
            )
            try:
                if expired:
                    gone = 0
                    for piece in self._id_pieces(group_id, expired):
                        gone += await self._propose(
                            "leave_group", group_id=group_id, member_ids=piece, now_ms=now
                        )
                    self._forget(group_id, expired)
                    removed += gone
                    log.info(
                        "group %s: members %s expired (no heartbeat within their session timeout)",
                        group_id,
                        expired,
                    )
                if view.preparing and (view.deadline_ms is None or now >= view.deadline_ms):
                    late = await self._propose("tick_group", group_id=group_id, now_ms=now)
                    if late:
                        self._forget(group_id, late)
                        removed += len(late)
                        log.info(
                            "group %s: rebalance deadline passed; members %s did not rejoin in "
                            "time and were removed",
                            group_id,
                            late,
                        )
            except RaftlogError as e:
                # Every sweep (100 ms) tries again; a full disk would make that a flood.
                last = self._expiry_warned_ms.get(group_id)
                if last is None or now - last >= EXPIRY_WARNING_INTERVAL_MS:
                    self._expiry_warned_ms[group_id] = now
                    log.warning(
                        "group %s: expiring members %s or ending its rebalance failed (%s); "
                        "retrying every sweep",
                        group_id,
                        expired,
                        e,
                    )
                continue
            finally:
                self._answer_waiters(group_id)
            self._expiry_warned_ms.pop(group_id, None)
        # Joins of groups the loop above did not touch (deleted, or moved on another way).
        for group_id in sorted(self._waiters):
            self._answer_waiters(group_id)
        return removed

    # -- offsets -------------------------------------------------------------------------------

    async def commit(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        offsets: Sequence[Sequence[Any]],
    ) -> None:
        """Commit `[topic, partition, offset, metadata]` entries; returns once applied.

        Raises CommitFailedError if the generation is stale, the member is not in the group or
        does not own a partition (generation -1 with an empty group: a consumer that assigns
        partitions itself). The commit rides in a batch with concurrent ones.
        """
        self._check_id("group_id", group_id, empty_ok=False)
        self._check_id("member_id", member_id)
        if not is_int(generation) or not -1 <= generation <= INT32_MAX:
            raise InvalidRequestError(
                f"group {group_id!r}: generation must be an int -1..{INT32_MAX}, got "
                f"{generation!r:.100}"
            )
        entries, sizes = offset_entries(group_id, offsets, 4, self.config.offset_metadata_bytes_max)
        self._check_active(group_id)
        base_bytes = COMMIT_BYTES + str_bytes(group_id) + str_bytes(member_id)
        args = {"group_id": group_id, "member_id": member_id, "generation": generation}
        total_bytes = base_bytes + sum(sizes)
        if total_bytes <= self.config.commit_batch_bytes_max:
            # The common case, kept lean: one piece, its future awaited directly (a caller
            # that gives up cancels it, and it is then not committed for).
            future = await self._commits.submit({**args, "offsets": entries}, total_bytes)
            await future
            return
        pieces = split_by_size(entries, sizes, self.config.commit_batch_bytes_max - base_bytes)
        log.info(
            "group %s: a commit of %d partitions by %s is split into %d commands",
            group_id,
            len(entries),
            member_id,
            len(pieces),
        )
        futures: list[asyncio.Future[None]] = []
        try:
            for piece, piece_bytes in pieces:
                futures.append(
                    await self._commits.submit({**args, "offsets": piece}, base_bytes + piece_bytes)
                )
            await asyncio.wait(futures)
        except BaseException:
            for f in futures:
                f.cancel()  # a piece not yet proposed is dropped; one in Raft finishes
            raise
        for f in futures:
            f.result()  # the first refusal, if any (later pieces were checked on their own)

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, tuple[int, str]]:
        """Committed offsets of the group (all, or those of `partitions` that have one)."""
        committed = self._read(lambda s: s.committed(group_id))
        out = {tp: (offset, metadata) for tp, (offset, metadata, _ts) in committed.items()}
        if partitions is None:
            return out
        wanted = {(str(t), int(p)) for t, p in partitions}
        return {tp: v for tp, v in out.items() if tp in wanted}

    async def reset_offsets(self, group_id: str, offsets: Sequence[Sequence[Any]]) -> int:
        """Set `[topic, partition, offset]` by hand (replay); refused while members exist.

        More offsets than one command holds go in several, one after the other; if one is
        refused (a member joined meanwhile), the error says how many were reset before it."""
        self._check_id("group_id", group_id, empty_ok=False)
        entries, sizes = offset_entries(group_id, offsets, 3, self.config.offset_metadata_bytes_max)
        base_bytes = RESET_BYTES + str_bytes(group_id)
        count = 0
        for piece, _ in split_by_size(
            entries, sizes, self.config.commit_batch_bytes_max - base_bytes
        ):
            try:
                count += await self._propose(
                    "reset_offsets", group_id=group_id, offsets=piece, now_ms=self._clock_ms()
                )
            except RaftlogError as e:
                if count == 0:
                    raise
                raise type(e)(
                    f"{e} ({count} of the {len(entries)} offsets were reset before this; "
                    "reset again to set the rest)"
                ) from e
        log.info("group %s: %d committed offsets reset by hand", group_id, count)
        return count

    async def delete_group(self, group_id: str) -> None:
        """Delete an empty group and its committed offsets."""
        self._check_id("group_id", group_id, empty_ok=False)
        await self._propose("delete_group", group_id=group_id)
        self._heartbeat_ms.pop(group_id, None)
        log.info("group %s deleted", group_id)

    # -- describe ------------------------------------------------------------------------------

    def list_groups(self) -> list[dict[str, Any]]:
        """Every group: id, state (groups.GroupPhase: Empty, PreparingRebalance,
        CompletingRebalance, Stable), generation, protocol, protocol type ("raftlog", or a
        Kafka group's), member count."""

        def overview(s: MetadataState) -> list[dict[str, Any]]:
            return [
                {
                    "group_id": gid,
                    "state": g.phase.value,
                    "generation": g.generation,
                    "protocol": g.protocol,
                    "protocol_type": g.protocol_type,
                    "members": len(g.members),
                }
                for gid, g in sorted(s.groups.items())
            ]

        return self._read(overview)

    def describe_group(self, group_id: str) -> dict[str, Any]:
        """One group: members (client ids, subscriptions, assignment in the current
        generation, and whether they rejoined the rebalance under way), generation, protocol,
        state, the rebalance deadline (PreparingRebalance) and committed offsets
        `[topic, partition, offset, metadata, commit_ms]`."""

        def describe(s: MetadataState) -> dict[str, Any] | None:
            g = s.groups.get(group_id)
            if g is None:
                return None
            rejoined = set(g.rejoined)
            return {
                "group_id": group_id,
                "state": g.phase.value,
                "generation": g.generation,
                "protocol": g.protocol,
                "protocol_type": g.protocol_type,
                "rebalance_deadline_ms": g.rebalance_deadline_ms,
                "members": [
                    {
                        "member_id": mid,
                        "client_id": m["client_id"],
                        "instance_id": m["instance_id"],
                        "session_timeout_ms": m["session_timeout_ms"],
                        "topics": list(m["topics"]),
                        "assignment": [list(tp) for tp in g.assignment.get(mid, [])],
                        "rejoined": mid in rejoined,
                    }
                    for mid, m in sorted(g.members.items())
                ],
                "offsets": [
                    [t, p, offset, metadata, ts]
                    for (t, p), (offset, metadata, ts) in sorted(s.committed(group_id).items())
                ],
            }

        view = self._read(describe)
        if view is None:
            raise GroupIdNotFoundError(f"unknown group {group_id!r}")
        return view

    def describe_members(self, group_id: str) -> dict[str, Any] | None:
        """What Kafka's DescribeGroups shows of a group, or None for an unknown one: its
        state, protocol type, protocol (assignor), and each member's ids, subscribed topics,
        assignment in the current generation, and, for a Kafka group's members, the metadata
        bytes it offered for the chosen protocol and the assignment bytes its leader sent
        (Stable; None where there are none: a raftlog group's members, whose subscription
        and assignment the caller encodes itself)."""

        def members(s: MetadataState) -> dict[str, Any] | None:
            g = s.groups.get(group_id)
            if g is None:
                return None
            kafka = g.client_assigned
            return {
                "state": g.phase.value,
                "protocol_type": g.protocol_type,
                "protocol": g.protocol,
                "members": [
                    {
                        "member_id": mid,
                        "instance_id": m["instance_id"],
                        "client_id": m["client_id"],
                        "topics": list(m["topics"]),
                        "assignment": [list(tp) for tp in g.assignment.get(mid, [])],
                        "metadata": groups.protocol_metadata(m, g.protocol) if kafka else None,
                        "assignment_bytes": g.assignment_bytes.get(mid) if kafka else None,
                    }
                    for mid, m in sorted(g.members.items())
                ],
            }

        return self._read(members)


# -- helpers ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _SweepView:
    """What the sweep needs of one group, read under the lock in one go."""

    session_timeout_ms: dict[str, int]  # member id -> its session timeout
    parked: frozenset[str]  # members that rejoined this rebalance (their join waits)
    preparing: bool
    deadline_ms: int | None


def _sweep_views(s: MetadataState) -> dict[str, _SweepView]:
    return {
        gid: _SweepView(
            session_timeout_ms={mid: int(m["session_timeout_ms"]) for mid, m in g.members.items()},
            parked=frozenset(g.rejoined),
            preparing=g.phase in (groups.PREPARING, groups.COMPLETING),
            deadline_ms=g.rebalance_deadline_ms,
        )
        for gid, g in s.groups.items()
    }


def _members_by_group(s: MetadataState) -> dict[str, dict[str, int]]:
    """group id -> member id -> session_timeout_ms, for every member in the state."""
    return {
        gid: {mid: int(m["session_timeout_ms"]) for mid, m in g.members.items()}
        for gid, g in s.groups.items()
    }
