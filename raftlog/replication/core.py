"""The replication core: one partition's replication state on one broker, as a pure state machine.

No sockets, no asyncio, no clock, no files: events and `now_ms` go in, actions come out, and the
driver (`raftlog/replication/manager.py`) performs them — appends, truncations, ISR proposals to
the metadata quorum, answers to waiting produce requests. The core reads the local log only
through `LogView` (offsets and the leader-epoch cache, all in memory), never writes it. So every
rule below runs, unchanged, in the unit tests and in the simulation (tests/sim/) with a fake log,
a fake network and a fake clock.

Roles follow the metadata: `become_leader` / `become_follower` at a leader epoch, `update_isr`
when the committed ISR changes at the same epoch, `go_offline` when the partition has no leader.

Leader rules (Kafka's, with the fixes; `Partition.scala`, KIP-101, KIP-279, KIP-320, KIP-966):
- Each follower's progress is what its fetches say: the fetch offset is its log end offset, and
  `durable_offset` what it has on disk (equal to it unless the topic uses the fsync policy).
  `last_caught_up_ms` is Kafka's definition: the last time the follower had fetched up to the
  leader's log end offset as it was at its previous fetch.
- High watermark = the minimum durable offset over the leader and the "maximal" ISR (the
  committed ISR plus a pending expansion; a pending shrink still counts the leaving replica),
  and over caught-up followers that are about to join. It never moves back, and it does not
  advance at all while the committed ISR is smaller than `min_insync_replicas` (KIP-966's
  strict min ISR), so a record acknowledged to acks=all is on at least that many replicas.
- ISR shrink: a follower that has not caught up within `replica_lag_time_max_ms`. ISR expand:
  a follower whose log end offset is at least the high watermark and at least the start offset
  of the leader's current epoch (KAFKA-7128). One ISR change is in flight at a time, and only
  the metadata resolves it (`update_isr`): an unanswered proposal is sent again, never
  forgotten, since the quorum may have applied it and lost only the answer — forgetting a
  committed expansion would let this leader commit records on fewer replicas than the ISR
  that elections use. Only a refusal that proves nothing was applied drops it.
- acks=all: refused before the append when the ISR is below the minimum
  (NotEnoughReplicasError); otherwise the request waits until the high watermark covers its
  last offset. It fails with NotEnoughReplicasAfterAppendError when the ISR drops below the
  minimum meanwhile, RequestTimedOutError at its deadline, NotLeaderOrFollowerError when this
  broker stops leading. Its records may then be in the log or not: the outcome is unknown.
- Fetches carry the fetcher's idea of the leader epoch: older is FencedLeaderEpochError, newer
  UnknownLeaderEpochError (KIP-320). A follower fetch also carries the epoch of its last fetched
  batch; if the leader's log diverges from the follower's there, the answer is the diverging
  epoch and where that epoch ends in the leader's log (Fetch v12, KAFKA-10554), and no data.

Follower rules:
- Fetch from the log end offset with the latest epoch of the local log. A diverging-epoch answer
  truncates to min(leader's end of that epoch, the local end of that epoch); if the local log
  does not have that epoch the next fetch asks again with an older one (KIP-279's rounds). An
  offset out of the leader's range (retention) restarts the local log at the leader's log start.
- Adopt the leader's high watermark, clamped to the local log end; follow its log start offset,
  clamped to the local high watermark.

Invariants (checked at the end of every transition, also under `python -O`): log start <= high
watermark <= log end; a leader is in its own ISR, the ISR is a subset of the replicas; the
leader's high watermark never decreases within a leadership; waiting produces are in offset
order and all above the high watermark.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from raftlog.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    RaftlogError,
    RequestTimedOutError,
    StaleBrokerEpochError,
    UnknownLeaderEpochError,
)
from raftlog.invariants import InvariantError

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
# Kafka's replica.lag.time.max.ms default; the dev cluster sets it shorter.
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000
# How long an ISR proposal may stay unanswered before it is proposed again.
ISR_PROPOSAL_TIMEOUT_MS = 5_000


class ReplicationInvariantError(InvariantError):
    """A replication invariant broke: a bug in raftlog, never the peer's fault."""


def require(condition: bool, message: str) -> None:
    """An invariant check that still runs under `python -O` (unlike `assert`)."""
    if not condition:
        raise ReplicationInvariantError(message)


class LogView(Protocol):
    """What the core reads of the local log (PartitionLog satisfies it)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def latest_epoch(self) -> int: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...


class ReplicaLog(LogView, Protocol):
    """What performing the core's log actions changes (`perform_on_log`): PartitionLog
    satisfies it, and so does the replication simulation's log (tests/sim/model.py)."""

    def assign_epoch(self, epoch: int) -> None:
        """Record that `epoch` starts at the log end."""
        ...

    def truncate_to(self, offset: int) -> object: ...

    def truncate_fully(self, offset: int) -> None: ...

    def delete_records_before(self, offset: int) -> object: ...

    def append_as_follower(self, data: Any) -> object: ...


class Role(enum.Enum):
    OFFLINE = "offline"  # hosted here, but neither leading nor following (no leader)
    LEADER = "leader"
    FOLLOWER = "follower"


# -- actions: what the driver must do ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AssignEpoch:
    """Leader: record in the leader-epoch cache that `epoch` starts at `start_offset`."""

    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class Truncate:
    """Follower: remove everything at `offset` and after (and epochs starting there)."""

    offset: int


@dataclass(frozen=True, slots=True)
class TruncateFully:
    """Follower: the leader no longer has our position: empty the log, restart at `offset`."""

    offset: int


@dataclass(frozen=True, slots=True)
class Append:
    """Follower: append fetched batches as they are (offsets and epochs from the leader)."""

    data: Any  # bytes-like


@dataclass(frozen=True, slots=True)
class AdvanceLogStart:
    """Follower: the leader's log start moved; delete records below `offset`."""

    offset: int


@dataclass(frozen=True, slots=True)
class ProposeIsr:
    """Leader: ask the metadata quorum to make `isr` the ISR (alter_isr)."""

    isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int
    # The broker epochs of added replicas as their fetches stated them (KIP-903): the quorum
    # refuses an addition made on behalf of an older incarnation of that broker.
    broker_epochs: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class CompleteProduce:
    """Answer a waiting acks=all produce: `error` None means committed."""

    token: Any
    error: RaftlogError | None


@dataclass(frozen=True, slots=True)
class HighWatermarkChanged:
    """The high watermark moved (consumers waiting for data may read more)."""

    high_watermark: int


Action = (
    AssignEpoch
    | Truncate
    | TruncateFully
    | Append
    | AdvanceLogStart
    | ProposeIsr
    | CompleteProduce
    | HighWatermarkChanged
)


# -- fetches ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FollowerFetch:
    """What a follower puts in its fetch for this partition."""

    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int
    durable_offset: int


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """The leader's verdict on one partition of a fetch, before any data is read.

    `error` set: answer it. `diverging` set: answer (epoch, end_offset) and no data. Otherwise
    read from the fetch offset up to `max_offset` (the log end for followers, the high watermark
    for consumers).
    """

    error: RaftlogError | None = None
    diverging: tuple[int, int] | None = None
    # The fetch offset is outside [log start, log end]: the answer carries the log start.
    out_of_range: bool = False
    max_offset: int = 0


@dataclass(slots=True)
class FollowerProgress:
    """The leader's view of one follower. Changed only by PartitionCore's methods.

    Invariant: durable_offset <= log_end_offset; both -1 until the follower's first fetch at
    this leadership.
    """

    replica_id: int
    broker_epoch: int = -1
    log_end_offset: int = UNDEFINED_OFFSET
    durable_offset: int = UNDEFINED_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = UNDEFINED_OFFSET
    last_fetch_ms: int = 0

    def caught_up(self, leader_leo: int, now_ms: int, lag_max_ms: int) -> bool:
        return self.log_end_offset == leader_leo or now_ms - self.last_caught_up_ms <= lag_max_ms


@dataclass(slots=True)
class _Waiter:
    required_offset: int
    deadline_ms: int
    token: Any


@dataclass(slots=True)
class PartitionConfig:
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    # The fsync policy (topic config durability.policy=fsync): a replica counts toward the high
    # watermark only what it has fsynced, so acks=all means "on disk on every ISR member".
    # Otherwise (Kafka's default) what is in its log counts, and the page cache holds it.
    fsync_policy: bool = False
    # An ISR proposal unanswered this long is sent again.
    isr_proposal_timeout_ms: int = ISR_PROPOSAL_TIMEOUT_MS

    def __post_init__(self) -> None:
        require(self.min_insync_replicas >= 1, "min_insync_replicas must be >= 1")
        require(self.replica_lag_time_max_ms >= 1, "replica_lag_time_max_ms must be >= 1")


@dataclass(slots=True)
class PartitionCore:
    """One partition on one broker: leader, follower or offline. See the module docstring."""

    node_id: int
    name: str  # "topic-partition", for messages
    log: LogView
    high_watermark: int = 0
    config: PartitionConfig = field(default_factory=PartitionConfig)
    role: Role = Role.OFFLINE
    leader_id: int = -1
    leader_epoch: int = UNDEFINED_EPOCH
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    # Leader only -----------------------------------------------------------------------------
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    # The leader's log end offset when it took this epoch: a follower joins the ISR only past it.
    epoch_start_offset: int = 0
    # What this broker has on disk (== log end unless the fsync policy is on).
    durable_offset: int = 0
    # An ISR change sent to the quorum and not yet seen in the metadata; it counts toward the
    # high watermark (maximal ISR) until the metadata resolves it.
    pending_isr: tuple[int, ...] | None = None
    pending_since_ms: int = 0
    pending_broker_epochs: tuple[tuple[int, int], ...] = ()
    # Broker epochs the metadata knows, per replica (fetches from older ones are refused).
    broker_epochs: dict[int, int] = field(default_factory=dict)
    waiters: collections.deque[_Waiter] = field(default_factory=collections.deque)
    # Follower only ---------------------------------------------------------------------------
    # The leader's high watermark and log start offset in its latest fetch answer.
    leader_high_watermark: int = 0
    leader_log_start_offset: int = 0

    def __post_init__(self) -> None:
        self.high_watermark = min(
            max(self.high_watermark, self.log.log_start_offset), self.log.log_end_offset
        )
        self.durable_offset = self.log.log_end_offset
        self._check()

    # -- invariants ----------------------------------------------------------------------------

    def _check(self) -> None:
        log = self.log
        require(
            log.log_start_offset <= self.high_watermark <= log.log_end_offset,
            f"{self.name}: high watermark {self.high_watermark} outside the log "
            f"[{log.log_start_offset}, {log.log_end_offset}]",
        )
        require(
            self.durable_offset <= log.log_end_offset,
            f"{self.name}: durable offset {self.durable_offset} > log end {log.log_end_offset}",
        )
        if self.role is Role.LEADER:
            require(self.leader_id == self.node_id, f"{self.name}: leader id is not this node")
            require(self.node_id in self.isr, f"{self.name}: leader {self.node_id} not in ISR")
            require(
                set(self.isr) <= set(self.replicas),
                f"{self.name}: ISR {self.isr} not within replicas {self.replicas}",
            )
            previous = -1
            for w in self.waiters:
                require(
                    previous <= w.required_offset and w.required_offset > self.high_watermark,
                    f"{self.name}: waiting produce for offset {w.required_offset} out of order "
                    f"or already covered by the high watermark {self.high_watermark}",
                )
                previous = w.required_offset
            for f in self.followers.values():
                require(
                    f.durable_offset <= f.log_end_offset,
                    f"{self.name}: follower {f.replica_id} durable {f.durable_offset} > "
                    f"log end {f.log_end_offset}",
                )
        else:
            require(not self.waiters, f"{self.name}: a non-leader holds waiting produces")
            require(self.pending_isr is None, f"{self.name}: a non-leader has an ISR in flight")

    # -- role changes (from the metadata) ------------------------------------------------------

    def become_leader(
        self,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        broker_epochs: dict[int, int],
        config: PartitionConfig,
        now_ms: int,
    ) -> list[Action]:
        """This broker leads from `leader_epoch` on. Its high watermark stays what it was
        (followers' fetches will move it); every follower starts unknown."""
        require(
            leader_epoch >= self.leader_epoch,
            f"{self.name}: become leader at epoch {leader_epoch} after {self.leader_epoch}",
        )
        actions = self._drop_leadership(NotLeaderOrFollowerError, "a new leader epoch began")
        self.role = Role.LEADER
        self.leader_id = self.node_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.config = config
        self.broker_epochs = dict(broker_epochs)
        self.epoch_start_offset = self.log.log_end_offset
        self.followers = {
            r: FollowerProgress(r, last_caught_up_ms=now_ms if r in self.isr else 0)
            for r in self.replicas
            if r != self.node_id
        }
        self.pending_isr = None
        if self.log.latest_epoch < leader_epoch:
            actions.append(AssignEpoch(leader_epoch, self.log.log_end_offset))
        actions += self._maybe_advance_hw(now_ms)
        self._check()
        return actions

    def become_follower(
        self, leader_id: int, leader_epoch: int, partition_epoch: int, replicas: Iterable[int]
    ) -> list[Action]:
        require(leader_id != self.node_id, f"{self.name}: following itself")
        require(
            leader_epoch >= self.leader_epoch,
            f"{self.name}: become follower at epoch {leader_epoch} after {self.leader_epoch}",
        )
        actions = self._drop_leadership(NotLeaderOrFollowerError, f"broker {leader_id} leads now")
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self._check()
        return actions

    def go_offline(self, leader_epoch: int, partition_epoch: int) -> list[Action]:
        """The partition has no leader (or this broker no longer hosts it)."""
        actions = self._drop_leadership(NotLeaderOrFollowerError, "the partition has no leader")
        self.role = Role.OFFLINE
        self.leader_id = -1
        self.leader_epoch = max(self.leader_epoch, leader_epoch)
        self.partition_epoch = partition_epoch
        self._check()
        return actions

    def cut_off(self) -> list[Action]:
        """This broker is cut off from the metadata quorum (its leadership has likely moved):
        the acks=all waiters fail with NotLeaderOrFollowerError, so that their clients look
        for the new leader instead of waiting out their timeout. Their records stay: they
        commit if the cut heals first, or go when this replica follows the new leader."""
        if self.role is not Role.LEADER:
            return []
        return self._fail_waiters(
            NotLeaderOrFollowerError,
            f"{self.name}: broker {self.node_id} is cut off from the metadata quorum",
        )

    def update_isr(
        self,
        isr: Iterable[int],
        partition_epoch: int,
        broker_epochs: dict[int, int],
        now_ms: int,
        replicas: Iterable[int] | None = None,
    ) -> list[Action]:
        """The metadata's ISR changed at the same leader epoch (our proposal, or the controller
        removed a fenced broker), and with a reassignment its replicas: a joining replica is a
        follower from now on (unknown until it fetches), a leaving one is forgotten."""
        require(self.role is Role.LEADER, f"{self.name}: update_isr on a non-leader")
        new_isr = tuple(isr)
        require(self.node_id in new_isr, f"{self.name}: committed ISR {new_isr} lacks its leader")
        if replicas is not None and tuple(replicas) != self.replicas:
            self.replicas = tuple(replicas)
            self.followers = {
                r: self.followers.get(r) or FollowerProgress(r)
                for r in self.replicas
                if r != self.node_id
            }
        for r in new_isr:
            if r not in self.isr and r in self.followers:
                # A replica that joined counts as caught up now (it will not be shrunk at once).
                self.followers[r].last_caught_up_ms = max(
                    self.followers[r].last_caught_up_ms, now_ms
                )
        self.isr = new_isr
        self.partition_epoch = partition_epoch
        self.broker_epochs = dict(broker_epochs)
        self.pending_isr = None
        actions: list[Action] = []
        if len(self.isr) < self.config.min_insync_replicas:
            actions += self._fail_waiters(
                NotEnoughReplicasAfterAppendError,
                f"the ISR {list(self.isr)} fell below min.insync.replicas="
                f"{self.config.min_insync_replicas} after the append",
            )
        actions += self._maybe_advance_hw(now_ms)
        self._check()
        return actions

    def _drop_leadership(self, error: type[RaftlogError], why: str) -> list[Action]:
        actions = self._fail_waiters(error, f"{self.name}: {why}")
        self.followers = {}
        self.pending_isr = None
        return actions

    def _fail_waiters(self, error: type[RaftlogError], message: str) -> list[Action]:
        actions: list[Action] = [CompleteProduce(w.token, error(message)) for w in self.waiters]
        self.waiters.clear()
        return actions

    # -- leader: produce ----------------------------------------------------------------------

    def known_high_watermark(self) -> int:
        """The high watermark, or OffsetNotAvailableError while it is below the start of this
        leader's epoch (KIP-207): a leader that just took over (a failover, a preferred-leader
        election) holds the high watermark it had as a follower, which can be older than what
        its predecessor answered, until its followers' fetches move it. An end offset (what
        ListOffsets answers) must not go back."""
        if self.high_watermark < self.epoch_start_offset:
            raise OffsetNotAvailableError(
                f"{self.name}: leader {self.node_id} took over at leader epoch "
                f"{self.leader_epoch} and does not know the committed end yet (high watermark "
                f"{self.high_watermark} below the epoch's start {self.epoch_start_offset})"
            )
        return self.high_watermark

    def check_produce(self, acks: int) -> RaftlogError | None:
        """Before appending: may this broker take the produce at all?"""
        if self.role is not Role.LEADER:
            return NotLeaderOrFollowerError(
                f"broker {self.node_id} is not the leader of {self.name} "
                f"(the leader is {self.leader_id if self.leader_id >= 0 else 'unknown'})"
            )
        if acks == -1 and len(self.isr) < self.config.min_insync_replicas:
            return NotEnoughReplicasError(
                f"{self.name}: the ISR {list(self.isr)} is smaller than min.insync.replicas="
                f"{self.config.min_insync_replicas}; acks=all refused, nothing appended"
            )
        return None

    def on_leader_append(self, now_ms: int) -> list[Action]:
        """The local log grew (a produce was appended)."""
        if self.role is not Role.LEADER:
            return []
        actions = self._maybe_advance_hw(now_ms)
        self._check()
        return actions

    def on_durable(self, durable_offset: int, now_ms: int) -> list[Action]:
        """Data up to `durable_offset` is on disk here (fsync policy; otherwise = log end)."""
        self.durable_offset = min(max(self.durable_offset, durable_offset), self.log.log_end_offset)
        actions = self._maybe_advance_hw(now_ms) if self.role is Role.LEADER else []
        self._check()
        return actions

    def wait_for_commit(
        self, last_offset: int, deadline_ms: int, token: Any, now_ms: int
    ) -> list[Action]:
        """An acks=all produce appended records up to `last_offset`: answer it once committed."""
        required = last_offset + 1
        if self.role is not Role.LEADER:
            return [CompleteProduce(token, NotLeaderOrFollowerError(f"{self.name}: not leader"))]
        if self.high_watermark >= required:
            return [CompleteProduce(token, None)]
        if len(self.isr) < self.config.min_insync_replicas:
            return [
                CompleteProduce(
                    token,
                    NotEnoughReplicasAfterAppendError(
                        f"{self.name}: the ISR {list(self.isr)} fell below "
                        f"min.insync.replicas={self.config.min_insync_replicas} after the append"
                    ),
                )
            ]
        if self.waiters and self.waiters[-1].required_offset > required:
            # Offsets are assigned in order, so this only happens if the caller mixes up
            # requests; keep the deque ordered anyway.
            items = sorted(
                [*self.waiters, _Waiter(required, deadline_ms, token)],
                key=lambda w: w.required_offset,
            )
            self.waiters = collections.deque(items)
        else:
            self.waiters.append(_Waiter(required, deadline_ms, token))
        self._check()
        return []

    # -- leader: fetches -------------------------------------------------------------------------

    def _check_fetch_epoch(self, current_leader_epoch: int) -> RaftlogError | None:
        if self.role is not Role.LEADER:
            return NotLeaderOrFollowerError(
                f"broker {self.node_id} is not the leader of {self.name}"
            )
        if current_leader_epoch < 0:
            return None  # an old client that does not say
        if current_leader_epoch < self.leader_epoch:
            return FencedLeaderEpochError(
                f"{self.name}: fetch at leader epoch {current_leader_epoch}, the leader is at "
                f"{self.leader_epoch}: refresh metadata"
            )
        if current_leader_epoch > self.leader_epoch:
            return UnknownLeaderEpochError(
                f"{self.name}: fetch at leader epoch {current_leader_epoch}, this leader is "
                f"still at {self.leader_epoch}: retry"
            )
        return None

    def on_consumer_fetch(self, current_leader_epoch: int) -> FetchAnswer:
        error = self._check_fetch_epoch(current_leader_epoch)
        if error is not None:
            return FetchAnswer(error=error)
        return FetchAnswer(max_offset=self.high_watermark)

    def on_follower_fetch(
        self,
        replica_id: int,
        broker_epoch: int,
        fetch: FollowerFetch,
        now_ms: int,
    ) -> tuple[FetchAnswer, list[Action]]:
        """A follower asks for data: record its progress, maybe move the HW and the ISR."""
        error = self._check_fetch_epoch(fetch.current_leader_epoch)
        if error is None and replica_id not in self.followers:
            error = NotLeaderOrFollowerError(
                f"broker {replica_id} is not a replica of {self.name} (replicas "
                f"{list(self.replicas)})"
            )
        if error is None and broker_epoch < self.broker_epochs.get(replica_id, -1):
            error = StaleBrokerEpochError(
                f"{self.name}: fetch from broker {replica_id} epoch {broker_epoch}, an older "
                f"incarnation (current {self.broker_epochs[replica_id]})"
            )
        if error is not None:
            return FetchAnswer(error=error), []
        if fetch.fetch_offset < self.log.log_start_offset or (
            fetch.fetch_offset > self.log.log_end_offset
            and fetch.last_fetched_epoch == UNDEFINED_EPOCH
        ):
            return FetchAnswer(out_of_range=True), []
        if fetch.last_fetched_epoch != UNDEFINED_EPOCH:
            epoch, end = self.log.end_offset_for_epoch(fetch.last_fetched_epoch)
            if epoch < fetch.last_fetched_epoch or end < fetch.fetch_offset:
                # The follower's log has records we do not: it must truncate first. Its
                # progress is not recorded, since its log end is not a prefix of ours.
                return FetchAnswer(diverging=(epoch, end)), []
        leader_leo = self.log.log_end_offset
        f = self.followers[replica_id]
        f.broker_epoch = max(f.broker_epoch, broker_epoch)
        offset = fetch.fetch_offset
        if offset >= leader_leo:
            f.last_caught_up_ms = max(f.last_caught_up_ms, now_ms)
        elif offset >= f.last_fetch_leader_leo >= 0:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.last_fetch_leader_leo = leader_leo
        f.last_fetch_ms = now_ms
        f.log_end_offset = min(offset, leader_leo)
        f.durable_offset = min(fetch.durable_offset, f.log_end_offset)
        actions = self._maybe_expand_isr(f, now_ms)
        actions += self._maybe_advance_hw(now_ms)
        self._check()
        return FetchAnswer(max_offset=leader_leo), actions

    # -- leader: high watermark and ISR ------------------------------------------------------------

    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return tuple(r for r in self.replicas if r in self.isr or r in self.pending_isr)

    def _maybe_advance_hw(self, now_ms: int) -> list[Action]:
        if len(self.isr) < self.config.min_insync_replicas:
            return []  # strict min ISR: nothing is committed on too few replicas
        leader_leo = self.log.log_end_offset
        new_hw = self.local_durable_offset()
        maximal = self.maximal_isr()
        lag_max = self.config.replica_lag_time_max_ms
        for f in self.followers.values():
            if f.durable_offset < new_hw and (
                f.replica_id in maximal
                or (f.log_end_offset >= 0 and f.caught_up(leader_leo, now_ms, lag_max))
            ):
                new_hw = f.durable_offset
        if new_hw <= self.high_watermark:
            return []
        self.high_watermark = new_hw
        actions: list[Action] = [HighWatermarkChanged(new_hw)]
        waiters = self.waiters
        while waiters and waiters[0].required_offset <= new_hw:
            actions.append(CompleteProduce(waiters.popleft().token, None))
        return actions

    def _maybe_expand_isr(self, f: FollowerProgress, now_ms: int) -> list[Action]:
        if f.replica_id in self.isr or self.pending_isr is not None:
            return []
        if f.log_end_offset < self.high_watermark or f.log_end_offset < self.epoch_start_offset:
            return []
        new_isr = tuple(r for r in self.replicas if r in self.isr or r == f.replica_id)
        return [self._propose(new_isr, ((f.replica_id, f.broker_epoch),), now_ms)]

    def _propose(
        self, isr: tuple[int, ...], broker_epochs: tuple[tuple[int, int], ...], now_ms: int
    ) -> ProposeIsr:
        self.pending_isr = isr
        self.pending_since_ms = now_ms
        self.pending_broker_epochs = broker_epochs
        return ProposeIsr(isr, self.leader_epoch, self.partition_epoch, broker_epochs)

    def out_of_sync_replicas(self, now_ms: int) -> list[int]:
        leader_leo = self.log.log_end_offset
        lag_max = self.config.replica_lag_time_max_ms
        return [
            r
            for r in self.isr
            if r != self.node_id
            and (f := self.followers.get(r)) is not None
            and f.log_end_offset != leader_leo
            and now_ms - f.last_caught_up_ms > lag_max
        ]

    def on_isr_proposal_refused(self, proposal: ProposeIsr, definitive: bool) -> list[Action]:
        """The quorum refused `proposal`. `definitive`: the refusal proves it was not applied
        (a fenced replica, a stale broker epoch), so it is dropped and the next tick decides
        again. Otherwise (a stale partition epoch: maybe this very proposal applied before;
        a timeout) only the metadata can tell, and the proposal stays pending until it does."""
        if (
            definitive
            and self.pending_isr == proposal.isr
            and self.partition_epoch == proposal.partition_epoch
            and self.leader_epoch == proposal.leader_epoch
        ):
            self.pending_isr = None
        self._check()
        return []

    @property
    def needs_tick(self) -> bool:
        """Whether `tick` may have work now or later without another event: a leader with
        an ISR change in flight, produces waiting, records not yet committed, or an ISR
        follower not at the log end (it may have to leave the ISR). An idle leader whose
        followers are all at its log end needs no tick until something happens to it."""
        if self.role is not Role.LEADER:
            return False
        if self.pending_isr is not None or self.waiters:
            return True
        leader_leo = self.log.log_end_offset
        if self.high_watermark < leader_leo:
            return True
        followers = self.followers
        return any(
            (f := followers.get(r)) is not None and f.log_end_offset != leader_leo
            for r in self.isr
            if r != self.node_id
        )

    def follower_known(self, replica_id: int) -> bool:
        """Whether a fetch of `replica_id`'s was recorded at this leadership (its position is
        known). A fetch session's leader records one for a partition whose follower is still
        unknown, as a full fetch would have."""
        f = self.followers.get(replica_id)
        return f is not None and f.log_end_offset >= 0

    def on_follower_idle(self, replica_id: int, fetch_offset: int, at_ms: int) -> None:
        """A follower's fetch session held `fetch_offset` for this partition unchanged at
        `at_ms`, and the leader's log ended at or below it then (the request left it out and
        had nothing to send it): the follower was caught up at `at_ms`, as a full fetch at
        that time would have recorded. The leader calls this before an append is judged."""
        f = self.followers.get(replica_id)
        if (
            self.role is not Role.LEADER
            or f is None
            or f.log_end_offset != fetch_offset
            or at_ms <= f.last_fetch_ms
        ):
            return
        f.last_caught_up_ms = max(f.last_caught_up_ms, at_ms)
        f.last_fetch_leader_leo = fetch_offset
        f.last_fetch_ms = at_ms

    def tick(self, now_ms: int) -> list[Action]:
        """Periodic: shrink the ISR, retry a lost proposal, expire waiting produces."""
        actions: list[Action] = []
        if self.role is not Role.LEADER:
            return actions
        timeout_ms = self.config.isr_proposal_timeout_ms
        if self.pending_isr is not None and now_ms - self.pending_since_ms > timeout_ms:
            # No answer: send it again (same partition epoch, so it applies at most once).
            actions.append(self._propose(self.pending_isr, self.pending_broker_epochs, now_ms))
        if self.pending_isr is None:
            lagging = self.out_of_sync_replicas(now_ms)
            if lagging:
                new_isr = tuple(r for r in self.isr if r not in lagging)
                actions.append(self._propose(new_isr, (), now_ms))
        if self.waiters:
            kept: collections.deque[_Waiter] = collections.deque()
            for w in self.waiters:
                if w.deadline_ms <= now_ms:
                    actions.append(
                        CompleteProduce(
                            w.token,
                            RequestTimedOutError(
                                f"{self.name}: not committed within the request's timeout "
                                f"(high watermark {self.high_watermark}, needs "
                                f"{w.required_offset}, ISR {list(self.isr)})"
                            ),
                        )
                    )
                else:
                    kept.append(w)
            self.waiters = kept
        actions += self._maybe_advance_hw(now_ms)
        self._check()
        return actions

    # -- follower ----------------------------------------------------------------------------------

    def fetch_spec(self) -> FollowerFetch:
        """What this follower's next fetch asks for."""
        require(self.role is Role.FOLLOWER, f"{self.name}: fetch_spec on a non-follower")
        return FollowerFetch(
            fetch_offset=self.log.log_end_offset,
            last_fetched_epoch=self.log.latest_epoch,
            current_leader_epoch=self.leader_epoch,
            durable_offset=self.local_durable_offset(),
        )

    def local_durable_offset(self) -> int:
        """What this replica counts as its own toward the high watermark."""
        if self.config.fsync_policy:
            return min(self.durable_offset, self.log.log_end_offset)
        return self.log.log_end_offset

    def on_fetch_response(
        self,
        spec: FollowerFetch,
        error: RaftlogError | None,
        diverging: tuple[int, int] | None,
        leader_high_watermark: int,
        leader_log_start_offset: int,
        data: Any,
        out_of_range: bool = False,
    ) -> list[Action]:
        """The leader answered the fetch made with `spec`. Returns what to do to the log; the
        driver then calls `after_follower_write`. A stale answer (the log moved, or the epoch
        did) is dropped."""
        if (
            self.role is not Role.FOLLOWER
            or spec.current_leader_epoch != self.leader_epoch
            or spec.fetch_offset != self.log.log_end_offset
        ):
            return []
        if out_of_range:
            # Our position is below the leader's log start (retention moved on) or past its
            # end with no epoch to compare: restart at its log start.
            return [TruncateFully(leader_log_start_offset)]
        if error is not None:
            return []
        if diverging is not None:
            epoch, end = diverging
            if epoch == UNDEFINED_EPOCH or end == UNDEFINED_OFFSET:
                # The leader knows none of our epochs: none of our history is known to be
                # shared with it; restart from its log start.
                return [TruncateFully(leader_log_start_offset)]
            return [Truncate(self._truncation_offset(epoch, end))]
        actions: list[Action] = []
        if data is not None and len(data):
            actions.append(Append(data))
        self.leader_high_watermark = leader_high_watermark
        self.leader_log_start_offset = leader_log_start_offset
        return actions

    def _truncation_offset(self, leader_epoch: int, leader_end: int) -> int:
        leo = self.log.log_end_offset
        local_epoch, local_end = self.log.end_offset_for_epoch(leader_epoch)
        if local_epoch == UNDEFINED_EPOCH:
            # We have no epoch that old: keep nothing of ours past where the leader's ends.
            return min(leo, leader_end, self.log.log_start_offset)
        # Same epoch: the histories agree up to the smaller end. An older local epoch: cut to
        # where it ends; the next fetch asks again with it (KIP-279's rounds).
        return min(leader_end, local_end, leo)

    def after_follower_write(self, now_ms: int) -> list[Action]:
        """The driver performed the actions of `on_fetch_response`: adopt the leader's HW and
        log start (clamped to what we have)."""
        require(self.role is Role.FOLLOWER, f"{self.name}: after_follower_write on a non-follower")
        log = self.log
        leo = log.log_end_offset
        self.durable_offset = min(self.durable_offset, leo)
        # A truncation may have cut below our high watermark only after an unclean election;
        # clamping keeps the invariant, and the truncation itself was logged by the driver.
        hw = min(max(self.high_watermark, min(self.leader_high_watermark, leo)), leo)
        self.high_watermark = max(hw, log.log_start_offset)
        actions: list[Action] = []
        target_start = min(self.leader_log_start_offset, self.high_watermark)
        if target_start > log.log_start_offset:
            actions.append(AdvanceLogStart(target_start))
        self._check()
        return actions

    def after_truncation(self, now_ms: int) -> None:
        """The log was truncated (by a Truncate/TruncateFully action or recovery)."""
        log = self.log
        self.durable_offset = min(self.durable_offset, log.log_end_offset)
        self.high_watermark = min(
            max(self.high_watermark, log.log_start_offset), log.log_end_offset
        )
        self._check()


LOG_ACTIONS = (AssignEpoch, Truncate, TruncateFully, AdvanceLogStart, Append)


def perform_on_log(core: PartitionCore, log: ReplicaLog, action: Action, now_ms: int) -> None:
    """Perform one of the core's actions on its log (`isinstance(action, LOG_ACTIONS)`); the
    driver performs the rest (CompleteProduce, HighWatermarkChanged, ProposeIsr), which reach
    outside the partition. The broker's ReplicaManager and the replication simulation both
    call this: what the simulation checks is what the broker does to its logs."""
    if isinstance(action, AssignEpoch):
        require(
            action.start_offset == log.log_end_offset,
            f"{core.name}: epoch {action.epoch} assigned at {action.start_offset}, but the log "
            f"ends at {log.log_end_offset}",
        )
        log.assign_epoch(action.epoch)
    elif isinstance(action, Truncate):
        log.truncate_to(action.offset)
        core.after_truncation(now_ms)
    elif isinstance(action, TruncateFully):
        log.truncate_fully(action.offset)
        core.after_truncation(now_ms)
    elif isinstance(action, AdvanceLogStart):
        log.delete_records_before(action.offset)
    elif isinstance(action, Append):
        log.append_as_follower(action.data)
    else:
        raise ReplicationInvariantError(f"{core.name}: {action!r} is not a log action")
