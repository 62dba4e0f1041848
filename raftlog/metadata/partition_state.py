"""One partition's replication state as the controller holds it: the only place it changes.

A partition has its replicas, a leader (NO_LEADER while offline), a leader epoch, an ISR, an
ELR (KIP-966's eligible leader replicas) and a partition epoch. `PartitionState`'s public
methods are its only transitions; MetadataState (state.py) calls them from its commands and
passes in what they need from the rest of the cluster: the topic's rules (`TopicRules`, from
its config) and which replicas may lead (`electable`: the broker is live and has not reported
this replica's log offline).

Transitions (each checks everything that can refuse it before its first change, and ends in
`_check`, which runs in production too):

- `remove_broker`: a broker is fenced or restarts; it leaves the ISR where others remain and
  gives up the leadership (the election rules are in its docstring);
- `elect_returning`: an offline partition gets a returning ISR or ELR member back as leader;
- `alter_isr`: the leader changes the ISR, with the current epochs only (no zombies);
- `leave_for_offline_log`: a broker reports its replica's log offline;
- `elect_preferred`: the first replica (the preferred leader) leads again, if it is a live
  ISR member (Kafka's preferred-leader election: leadership spreads as it was assigned);
- `reassign`, `cancel_reassignment`: move the replicas to a target set (KIP-455): the
  replicas become target + the original ones leaving, the joining ones catch up and enter the
  ISR through the leader's `alter_isr`, and the reassignment completes inside the ISR change
  that puts the last target replica in the ISR (replicas = target, the leader re-elected from
  the target if it was leaving). State only: a controller failover resumes it where it was.

Invariants (`_check`, after every transition):

- replicas are distinct and not empty; isr and elr are disjoint subsets of replicas, without
  repeats; the isr is empty only in an offline partition whose last ISR member restarted
  uncleanly, and then the elr is not;
- a leader is in the isr; the elr is empty while the isr has min.insync.replicas members;
  replicas in the elr were removed from the isr while it was below min.insync.replicas (when
  the high watermark could not advance), so each holds every committed record and may lead
  when no ISR member can;
- epochs never go back; a new leader comes with a new leader epoch; any change of leader,
  leader epoch, isr, elr or replicas comes with a new partition epoch (an ISR proposal names
  the partition epoch it changes, so a stale one is refused).

Rules: deterministic (no clock, no randomness, no I/O; replicas are visited in replica order);
a broken invariant raises MetadataInvariantError (a bug in raftlog, the same on every replica).
The record form (`to_record`/`from_record`) is the snapshot's: a plain dict of ints and lists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raftlog.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    NoReassignmentInProgressError,
)
from raftlog.invariants import InvariantError

NO_LEADER = -1

# Whether a replica (a broker id) may lead this partition now.
Electable = Callable[[int], bool]


class MetadataInvariantError(InvariantError):
    """A metadata invariant broke: a bug in raftlog (the same on every replica)."""


@dataclass(frozen=True, slots=True)
class TopicRules:
    """What a topic's config says about its partitions' ISR and elections."""

    # min.insync.replicas: below it the high watermark stops, and leavers join the ELR.
    min_insync_replicas: int = 1
    # unclean.leader.election.enable: with no ISR or ELR member live, any live replica leads.
    unclean_election: bool = False
    # durability.policy=fsync: every acknowledged record is on disk, so a broker that restarts
    # after an unclean shutdown kept its data.
    fsync: bool = False

    @classmethod
    def of(cls, config: dict[str, str]) -> TopicRules:
        return cls(
            int(config.get("min.insync.replicas", "1")),
            config.get("unclean.leader.election.enable") == "true",
            config.get("durability.policy") == "fsync",
        )


@dataclass(slots=True)
class PartitionState:
    """One partition of a topic; the module docstring has its invariants, the methods are its
    only transitions. The lists are replaced, never changed in place."""

    # Which partition (names it in errors; not part of the snapshot's record).
    topic: str
    partition: int
    # Invariant: distinct broker ids, not empty; changed only by a reassignment (below).
    replicas: list[int]
    # Invariant: in isr, or NO_LEADER (offline).
    leader: int
    # Invariant: never goes back; moves with every change of leader.
    leader_epoch: int
    # Invariant: distinct replicas; empty only while offline with an ELR. Kept in replica order.
    isr: list[int]
    # Invariant: distinct replicas outside the isr; empty while len(isr) >= min ISR.
    elr: list[int]
    # Invariant: never goes back; moves with every change of any field above.
    partition_epoch: int
    # A reassignment under way (KIP-455): the replicas joining and leaving. Invariant: disjoint
    # subsets of replicas; the target (replicas without `removing`) is not empty; both empty
    # when none is under way.
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)

    @classmethod
    def new(
        cls, topic: str, partition: int, replicas: list[int], rules: TopicRules
    ) -> PartitionState:
        """A new partition: every replica in the ISR, the first one leads, epochs 0."""
        leader = replicas[0] if replicas else NO_LEADER
        p = cls(topic, partition, list(replicas), leader, 0, list(replicas), [], 0)
        p._check(p._view(), rules)
        return p

    @classmethod
    def from_record(cls, topic: str, partition: int, record: dict[str, Any]) -> PartitionState:
        """From the snapshot's record; one written before the ELR existed has no "elr"."""
        return cls(
            topic,
            partition,
            list(record["replicas"]),
            int(record["leader"]),
            int(record["leader_epoch"]),
            list(record["isr"]),
            list(record.get("elr", [])),
            int(record["partition_epoch"]),
            list(record.get("adding", [])),
            list(record.get("removing", [])),
        )

    def to_record(self) -> dict[str, Any]:
        return {
            "replicas": list(self.replicas),
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
            "elr": list(self.elr),
            "partition_epoch": self.partition_epoch,
            # Only while a reassignment is under way: other records keep their old shape.
            **(
                {"adding": list(self.adding), "removing": list(self.removing)}
                if self.adding or self.removing
                else {}
            ),
        }

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # -- transitions -------------------------------------------------------------------------

    def remove_broker(
        self, node_id: int, clean: bool, restarted: bool, rules: TopicRules, electable: Electable
    ) -> bool:
        """`node_id` stopped (fenced) or restarted: it leaves the ISR if others remain and
        gives up the leadership. Returns whether the leadership moved away from it.

        Eligibility: a broker that restarted after an unclean shutdown, under the replication
        durability policy, may have lost an unflushed tail (power loss), so it leaves the ELR
        where another candidate remains. As the last ISR member it leads again at a new epoch
        only if it surely kept its data or no ELR member exists; otherwise it leaves the ISR
        and an ELR member leads, now or when one returns (KIP-966: a last replica standing
        that lost its disk cannot erase committed records). A fenced last ISR member keeps its
        place: the partition is offline until it or an ELR member returns.
        """
        before = self._view()
        eligible = clean or rules.fsync
        others = [r for r in self.isr + self.elr if r != node_id]
        if restarted and not eligible and node_id in self.elr and others:
            self.elr = [r for r in self.elr if r != node_id]
        if node_id in self.isr and len(self.isr) > 1:
            was_leader = self.leader == node_id
            self._set_isr(
                [r for r in self.isr if r != node_id], [node_id] if eligible else [], rules
            )
            if was_leader:
                self._elect(node_id, rules, electable)
        elif node_id in self.isr and restarted:
            if eligible or not self.elr:
                self.leader = node_id
                self.leader_epoch += 1
            else:
                self.isr = []
                self._elect(node_id, rules, electable)
        elif self.leader == node_id:
            self._elect(node_id, rules, electable)
        self._bump_if_changed(before)
        self._check(before, rules)
        return before[0] == node_id and self.leader != node_id

    def elect_returning(self, node_id: int, rules: TopicRules) -> bool:
        """An offline partition whose ISR or ELR holds `node_id` gets it back as leader (with
        an ISR of it alone). Returns whether it did; nothing changes otherwise."""
        if self.leader != NO_LEADER or (node_id not in self.isr and node_id not in self.elr):
            return False
        before = self._view()
        self.elr = [r for r in self.elr if r != node_id]
        self._set_isr([node_id], list(self.isr), rules)
        self.leader = node_id
        self.leader_epoch += 1
        self.partition_epoch += 1
        self._check(before, rules)
        return True

    def alter_isr(
        self,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
        rules: TopicRules,
        check_joiner: Callable[[int], None],
        electable: Electable | None = None,
    ) -> int:
        """The leader changes the ISR; only with the current epochs (no zombies). Each replica
        that joins is first passed to `check_joiner`, which raises if it may not (fenced, its
        log offline, another incarnation). Returns the new partition epoch."""
        if self.leader != leader_id or self.leader_epoch != leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.name}: ISR change from leader {leader_id} epoch {leader_epoch}, "
                f"but the leader is {self.leader} at epoch {self.leader_epoch}"
            )
        if self.partition_epoch != partition_epoch:
            raise InvalidUpdateVersionError(
                f"{self.name}: partition epoch {partition_epoch} is stale "
                f"(current {self.partition_epoch})"
            )
        if leader_id not in isr or any(r not in self.replicas for r in isr):
            raise InvalidRequestError(
                f"{self.name}: ISR {isr} must contain the leader and only replicas {self.replicas}"
            )
        for r in isr:
            if r not in self.isr:
                check_joiner(r)
        before = self._view()
        self._set_isr(list(isr), list(self.isr), rules)
        self.partition_epoch += 1
        self._maybe_complete(rules, electable)
        self._check(before, rules)
        return self.partition_epoch

    def leave_for_offline_log(self, node_id: int, rules: TopicRules, electable: Electable) -> None:
        """`node_id` reported its replica's log offline: it leaves the ISR and ELR where
        another member remains, and gives up the leadership to another member that can take
        it. As the last one it stays in the ISR, and keeps leading if it led: nobody else
        holds the data, and its clients get LogOfflineError naming the damage."""
        before = self._view()
        others = [r for r in self.isr + self.elr if r != node_id]
        if others:
            self.elr = [r for r in self.elr if r != node_id]
            if node_id in self.isr:
                if len(self.isr) > 1:
                    self._set_isr([r for r in self.isr if r != node_id], [], rules)
                else:  # the last ISR member: an ELR member takes over below
                    self.isr = []
        # Leadership moves only to a replica that can take it: with none, the reporting leader
        # keeps it (its clients get LogOfflineError naming the damage, not "no leader").
        candidates = [r for r in self.isr + self.elr if r != node_id]
        if self.leader in (node_id, NO_LEADER) and any(electable(r) for r in candidates):
            self._elect(node_id, rules, electable)
        self._bump_if_changed(before)
        self._check(before, rules)

    def elect_preferred(self, rules: TopicRules, electable: Electable) -> bool:
        """The preferred leader (the first replica) leads, at a new leader epoch, if it is in
        the ISR and electable and does not lead already. Returns whether it took over; nothing
        changes otherwise. Safe as any election within the ISR: it holds every committed
        record, and the old leader follows it from the new epoch on."""
        preferred = self.replicas[0]
        if self.leader == preferred or preferred not in self.isr or not electable(preferred):
            return False
        before = self._view()
        self.leader = preferred
        self.leader_epoch += 1
        self.partition_epoch += 1
        self._check(before, rules)
        return True

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    def target_replicas(self) -> list[int]:
        """Where a reassignment under way goes (the replicas, when none is)."""
        return [r for r in self.replicas if r not in self.removing]

    def original_replicas(self) -> list[int]:
        """Where a reassignment under way came from (the replicas, when none is)."""
        return [r for r in self.replicas if r not in self.adding]

    def reassign(self, target: list[int], rules: TopicRules, electable: Electable) -> None:
        """Start moving the replicas to `target` (distinct broker ids, at least
        min.insync.replicas of them; the caller checks that the brokers exist). A reassignment
        under way is replaced, counted from its original replicas. Completes at once if every
        target replica is in the ISR already (a reorder, or only replicas leaving)."""
        if not target or len(set(target)) != len(target):
            raise InvalidRequestError(f"{self.name}: target replicas {target} must be distinct")
        if len(target) < rules.min_insync_replicas:
            raise InvalidRequestError(
                f"{self.name}: {len(target)} target replicas {target}, fewer than "
                f"min.insync.replicas={rules.min_insync_replicas}: acks=all could never succeed"
            )
        original = self.original_replicas()
        replicas = list(target) + [r for r in original if r not in target]
        if not any(r in replicas for r in self.isr):
            raise InvalidRequestError(
                f"{self.name}: replacing the reassignment would leave no in-sync replica "
                f"(isr {self.isr}, replicas {replicas})"
            )
        before = self._view()
        self.replicas = replicas
        self.adding = [r for r in target if r not in original]
        self.removing = [r for r in original if r not in target]
        # Joining replicas of a replaced reassignment that are not replicas any more leave.
        self.isr = [r for r in replicas if r in self.isr]
        self.elr = [r for r in replicas if r in self.elr]
        if self.leader != NO_LEADER and self.leader not in self.isr:
            self._elect(self.leader, rules, electable)
        self._bump_if_changed(before)
        self._maybe_complete(rules, electable)
        self._check(before, rules)

    def cancel_reassignment(self, rules: TopicRules, electable: Electable) -> None:
        """Stop the reassignment under way: back to the original replicas; the joining ones
        leave (the ISR keeps its original members). Refused when no original replica is in the
        ISR (only the joining ones hold the committed records now)."""
        if not self.reassigning:
            raise NoReassignmentInProgressError(f"{self.name}: no reassignment is under way")
        original = self.original_replicas()
        if not any(r in original for r in self.isr):
            raise InvalidRequestError(
                f"{self.name}: no original replica {original} is in the ISR {self.isr}; the "
                "reassignment cannot be cancelled now (let it complete, or wait for one to "
                "catch up)"
            )
        before = self._view()
        self.replicas = original
        self.adding, self.removing = [], []
        self._set_isr([r for r in self.isr if r in original], [], rules)
        self.elr = [r for r in self.elr if r in original]
        if self.leader != NO_LEADER and self.leader not in self.isr:
            self._elect(self.leader, rules, electable)
        self._bump_if_changed(before)
        self._check(before, rules)

    def _maybe_complete(self, rules: TopicRules, electable: Electable | None) -> None:
        """The reassignment completes once every target replica is in the ISR: the leaving
        replicas go, and a leaving leader hands over to the first live target ISR member."""
        if not self.reassigning:
            return
        target = self.target_replicas()
        if any(r not in self.isr for r in target):
            return
        leaving_leader = self.leader in self.removing
        self.replicas = target
        self.adding, self.removing = [], []
        self.isr = [r for r in target if r in self.isr]
        self.elr = [r for r in self.elr if r in target]
        if leaving_leader:
            self._elect(self.leader, rules, electable or (lambda r: True))
        self.partition_epoch += 1

    def preferred_state(self, electable: Electable) -> str:
        """ "leads" (the preferred leader leads), "ready" (it could: elect_preferred would move
        the leadership) or "unavailable" (it is not a live ISR member)."""
        preferred = self.replicas[0]
        if self.leader == preferred:
            return "leads"
        if preferred in self.isr and electable(preferred):
            return "ready"
        return "unavailable"

    # -- steps of the transitions (each leaves the checks to its transition) -----------------

    def _set_isr(self, isr: list[int], elr_candidates: list[int], rules: TopicRules) -> None:
        """New ISR; replicas leaving it join the ELR while the ISR is below the minimum."""
        old_isr = self.isr
        self.isr = [r for r in self.replicas if r in isr]
        if len(self.isr) >= rules.min_insync_replicas:
            self.elr = []
        else:
            left = [r for r in old_isr if r not in self.isr and r in elr_candidates]
            self.elr = [r for r in self.replicas if (r in self.elr or r in left) and r not in isr]

    def _elect(self, exclude: int, rules: TopicRules, electable: Electable) -> None:
        """A new leader, at a new leader epoch: the first live ISR member (replica order),
        else a live ELR member (the ISR's members then join the ELR where the rules allow),
        else with unclean election any live replica, else none: the partition is offline and
        waits for an ISR or ELR member to return."""

        def ok(r: int) -> bool:
            return r != exclude and electable(r)

        live_isr = [r for r in self.replicas if r in self.isr and ok(r)]
        live_elr = [r for r in self.replicas if r in self.elr and ok(r)]
        if live_isr:
            self.leader = live_isr[0]
        elif live_elr:
            leader = live_elr[0]
            self.elr = [r for r in self.elr if r != leader]
            self._set_isr([leader], list(self.isr), rules)
            self.leader = leader
        elif rules.unclean_election and (
            out := [r for r in self.replicas if ok(r) and r not in self.adding]
        ):
            self.leader = out[0]
            self.isr = [out[0]]
            self.elr = []
        else:
            self.leader = NO_LEADER
        self.leader_epoch += 1

    def _view(self) -> tuple[Any, ...]:
        """What the epochs guard: (leader, leader_epoch, isr, elr, replicas, partition_epoch,
        adding, removing), copied."""
        return (
            self.leader,
            self.leader_epoch,
            list(self.isr),
            list(self.elr),
            list(self.replicas),
            self.partition_epoch,
            list(self.adding),
            list(self.removing),
        )

    def _bump_if_changed(self, before: tuple[Any, ...]) -> None:
        if _guarded(self._view()) != _guarded(before):
            self.partition_epoch += 1

    def _moving_ok(self, in_replicas: set[int]) -> bool:
        """A reassignment's lists: distinct, disjoint subsets of the replicas, leaving some."""
        adding, removing = set(self.adding), set(self.removing)
        return (
            len(adding) == len(self.adding)
            and len(removing) == len(self.removing)
            and adding <= in_replicas
            and removing <= in_replicas
            and adding.isdisjoint(removing)
            and len(removing) < len(self.replicas)
        )

    def _check(self, before: tuple[Any, ...], rules: TopicRules) -> None:
        """Raise MetadataInvariantError unless the module docstring's invariants hold, and the
        epochs moved as they must since `before` (a `_view` taken when the transition began).

        Cost: a few small sets per call (it runs for each partition a command changes, and
        for each partition of a new topic)."""
        isr, elr, replicas, leader = self.isr, self.elr, self.replicas, self.leader
        in_replicas, in_isr, in_elr = set(replicas), set(isr), set(elr)
        ok = (
            0 < len(in_replicas) == len(replicas)
            and len(in_isr) == len(isr)
            and len(in_elr) == len(elr)
            and in_isr <= in_replicas
            and in_elr <= in_replicas
            and in_isr.isdisjoint(in_elr)
            and (bool(isr) or (leader == NO_LEADER and bool(elr)))
            and (leader == NO_LEADER or leader in in_isr)
            and (not elr or len(isr) < rules.min_insync_replicas)
            and (not (self.adding or self.removing) or self._moving_ok(in_replicas))
        )
        if not ok:
            raise MetadataInvariantError(
                f"{self.name}: leader {leader} isr {isr} elr {elr} replicas {replicas} adding "
                f"{self.adding} removing {self.removing} break the partition invariants "
                f"(min.insync.replicas={rules.min_insync_replicas})"
            )
        leader_epoch, partition_epoch = self.leader_epoch, self.partition_epoch
        epochs_ok = (
            leader_epoch >= before[1]
            and partition_epoch >= before[5]
            and (leader == before[0] or leader_epoch > before[1])
            and (
                partition_epoch > before[5]
                or (
                    (leader, leader_epoch, isr, elr, replicas) == before[:5]
                    and (self.adding, self.removing) == before[6:]
                )
            )
        )
        if not epochs_ok:
            raise MetadataInvariantError(
                f"{self.name}: (leader, leader epoch, isr, elr, replicas, partition epoch) "
                f"went from {before} to {self._view()}: a leader change needs a new leader "
                "epoch, any change a new partition epoch, and epochs never go back"
            )


def _guarded(view: tuple[Any, ...]) -> tuple[Any, ...]:
    """A `_view` without its partition epoch: what a new partition epoch must come with."""
    return view[:5] + view[6:]
