"""One consumer group's states, transitions and rules: the only place they live.

A rebalance must not hand a partition to a new owner while the old one still consumes it (the
ownership registry promises one consumer per partition in a group). So a rebalance runs in two
steps, as Kafka's classic group protocol does (GroupMetadata.scala, GroupCoordinator.scala):
first the group *prepares*: the current generation and its assignment stay in force, members
learn of the rebalance from their next heartbeat, commit their positions (accepted: their
generation still stands), give their partitions up and join again; only when every member has
joined again, or the rebalance timeout has passed (members that did not rejoin are removed),
is the next generation and its assignment computed and handed out.

`GroupState` is one group; its public methods (`join`, `leave`, `tick`, `topic_changed`,
`delete`) are the only transitions, and each ends in `check`, the invariants below, in
production too. MetadataState (state.py) holds the groups and calls the transitions from its
commands; the coordinator (coordinator.py) reads them, and uses `heartbeat`, `join_outcome`
and `check_commit`, which answer for a group that may not exist. The snapshot holds each group
as its record (`to_record`/`from_record`: plain dicts, lists, ints and strs).

States (`GroupPhase`, `GroupState.phase`, the record's "state"; Kafka's names and meanings):

- Empty: no members. A group of committed offsets only (a standalone consumer, a reset, Spark)
  or one whose members all left. A join makes it PreparingRebalance.
- PreparingRebalance: the current generation's assignment stands (its members may commit);
  members that have joined this round are listed in "rejoined". Heartbeats are answered
  RebalanceInProgressError. Completes when every member has rejoined (a join, a leave, an
  expiry), or at "rebalance_deadline_ms" (the coordinator's `tick_group` carries the time);
  then the generation moves on, with the assignment of the members that rejoined (Stable), or
  with none left (Empty). Kafka keeps static members (an instance id) that did not rejoin;
  here they are removed like the others, and get their member id back when they join again.
- CompletingRebalance: Kafka groups only. A raftlog group's assignment is computed by the
  state machine when the join completes, so no member has to be waited for. A Kafka group (see
  below) waits here for its leader member's SyncGroup, which carries the assignment its
  client-side assignor computed; then Stable. Heartbeats are answered normally; commits are
  RebalanceInProgressError (Kafka's rules). A join that changes a member (or a new one), or
  a leave, starts another rebalance; a member joining again unchanged gets its answer again.
  Past the deadline (the rebalance timeout) the leader, which sent no assignment, is removed
  and the others rebalance under a new one.
- Stable: every member has the current generation's assignment, and every partition of the
  subscribed topics has one owner. A join of a new member, a join with a changed subscription
  or assignor list, a leave, an expiry, or a subscribed topic created or deleted starts a
  rebalance (PreparingRebalance). A member of the generation joining again with the same
  subscription gets the current assignment and changes nothing.
- Dead: deleted (only an Empty group can be): the record is removed.

Phase changes (`_PREVIOUS`: to -> the states it may be entered from; each is checked):
Empty -> PreparingRebalance -> Stable | Empty; Stable -> PreparingRebalance; Empty -> Dead;
Kafka groups: PreparingRebalance -> CompletingRebalance -> Stable | PreparingRebalance.
A first join goes Empty -> PreparingRebalance -> Stable in one command (the joiner is every
member); the last leave goes Stable -> PreparingRebalance -> Empty.

The generation moves by one at every completion, also one that leaves the group Empty, so a
commit or heartbeat from before any completed rebalance is recognised as stale.

Kafka classic groups ("protocol_type" other than "raftlog", set by the first member: Kafka
clients' JoinGroup carries "consumer"), one registry with raftlog's: members offer
[[protocol name, metadata bytes], ...]; a raftlog member cannot join a Kafka group nor the
reverse (InconsistentGroupProtocolError, as Kafka refuses another protocol type). The
protocol is chosen by the members' votes (Kafka's ClassicGroup.selectProtocol); the first
member to join leads, another rejoined member if it did not rejoin; the JoinGroup answer of the
leader lists every member's metadata; the leader's SyncGroup (`sync`) brings each member's
assignment bytes, kept as sent ("assignment_bytes") and decoded by the coordinator into
"assignment" (describe, lag; partitions that do not exist are left out, a partition given to
two members refused). Commits are checked as Kafka checks them: member and generation, not
partition ownership (the leader's assignor decides it). A topic created or deleted starts no
rebalance (the leader watches metadata and rejoins); a deleted topic's partitions leave the
assignment. Kafka keeps static members that missed a rebalance; here they are removed like the
others, and get their member id back when they join again (as in raftlog groups).

Fields (the record's keys; `from_record` fills those a snapshot from older code lacks):

- "group_id", "generation" (int >= 0), "protocol" (the assignor of the generation, or None),
  "next_member" (the number of the next generated member id);
- "state": a GroupPhase value (`phase`);
- "members": member id -> {"member_id", "client_id", "instance_id", "session_timeout_ms",
  "rebalance_timeout_ms", "topics" (sorted), "protocols", "joined_ms"};
- "assignment": member id -> [[topic, partition], ...]: the current generation's owners;
- "rejoined": sorted member ids that joined during this PreparingRebalance;
- "rebalance_deadline_ms": when this PreparingRebalance (or a Kafka group's
  CompletingRebalance) ends, or None: not started yet (a rebalance started by a topic change
  or by a leave of older code, which carry no time; the coordinator's next `tick_group` starts
  it);
- "protocol_type" ("raftlog" in records of older code), "leader" (Kafka groups' leader member,
  else None), "assignment_bytes" (Kafka groups, Stable: member id -> the bytes its leader sent).

Invariants (`GroupState.check`, at the end of every transition, in production too):

- Empty if and only if there are no members; then no assignment and no protocol;
- "rejoined" is sorted, without repeats, a subset of the members, and empty outside
  PreparingRebalance; "rebalance_deadline_ms" is None outside Preparing/CompletingRebalance;
- the assignment names only members, and each partition at most once, each one that exists
  (raftlog groups: of a topic its owner subscribes to); in Stable every member has an entry,
  and in a raftlog group every partition of every subscribed topic that exists has an owner;
- raftlog groups never leave Empty/PreparingRebalance/Stable and have no leader or bytes;
  Kafka groups have a leader among the members in Completing and Stable, no assignment in
  CompletingRebalance, and in Stable assignment bytes for exactly the members.

Rules every function keeps: no clock (time arrives as `now_ms`), no randomness, no iteration
over sets or dicts in an order that could differ between replicas (members are sorted), no I/O.
Refusals are RaftlogErrors raised before the first change; a broken invariant raises
GroupInvariantError (a bug in raftlog, the same on every replica).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from raftlog.errors import (
    CommitFailedError,
    GroupNotEmptyError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from raftlog.invariants import InvariantError
from raftlog.metadata import assignors

# topic -> its partition count, or None when the topic does not exist.
PartitionCount = Callable[[str], int | None]

# The protocol type of raftlog's own groups (the state machine assigns). Any other value is a
# Kafka classic group's (its clients' `protocol_type`, "consumer" for consumers): its leader
# member assigns, in SyncGroup.
NATIVE_PROTOCOL_TYPE = "raftlog"


class GroupPhase(enum.Enum):
    """A group's state, by Kafka's names (GroupState in Kafka's GroupMetadata.scala; here
    GroupPhase, since the name GroupState is the whole group's)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY = GroupPhase.EMPTY
PREPARING = GroupPhase.PREPARING_REBALANCE
COMPLETING = GroupPhase.COMPLETING_REBALANCE
STABLE = GroupPhase.STABLE
DEAD = GroupPhase.DEAD

# to -> the states it may be entered from. Kafka's table, with Stable also entered straight
# from PreparingRebalance (raftlog groups: no SyncGroup wait) and Dead only from
# Empty (a group is deleted only when it has no members; Kafka also kills groups whose
# coordinator moves, which a replicated coordinator never needs).
_PREVIOUS: dict[GroupPhase, frozenset[GroupPhase]] = {
    PREPARING: frozenset({EMPTY, STABLE, COMPLETING}),
    COMPLETING: frozenset({PREPARING}),
    STABLE: frozenset({PREPARING, COMPLETING}),
    EMPTY: frozenset({PREPARING}),
    DEAD: frozenset({EMPTY}),
}


class GroupInvariantError(InvariantError):
    """A group invariant or transition rule broke: a bug in raftlog (the same on every
    replica). Raised explicitly, so the checks run under `python -O` too."""


def same_subscription(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a member's join changes nothing the assignment depends on."""
    return bool(old["topics"] == new["topics"] and old["protocols"] == new["protocols"])


@dataclass(slots=True)
class GroupState:
    """One consumer group; its public methods are its only transitions, each ending in
    `check` (the invariants of the module docstring)."""

    group_id: str
    phase: GroupPhase = EMPTY
    # Invariant: >= 0; moves by one at every completed rebalance.
    generation: int = 0
    # The assignor of the generation, or None (Empty).
    protocol: str | None = None
    # member id -> {"member_id", "client_id", "instance_id", "session_timeout_ms",
    #               "rebalance_timeout_ms", "topics" (sorted), "protocols", "joined_ms"}
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    # member id -> [[topic, partition], ...]: the current generation's owners.
    assignment: dict[str, list[list[Any]]] = field(default_factory=dict)
    # The number of the next generated member id.
    next_member: int = 0
    # Sorted member ids that joined during this PreparingRebalance.
    rejoined: list[str] = field(default_factory=list)
    # When this PreparingRebalance ends (or, in a Kafka group, when the CompletingRebalance
    # waiting for its leader's SyncGroup does), or None: not started yet.
    rebalance_deadline_ms: int | None = None
    # NATIVE_PROTOCOL_TYPE, or a Kafka group's protocol type (set by its first member).
    protocol_type: str = NATIVE_PROTOCOL_TYPE
    # Kafka groups: the member that assigns (the first to join; another rejoined member if it
    # did not rejoin), None when Empty; always None in native groups.
    leader: str | None = None
    # Kafka groups, Stable: member id -> the assignment bytes its leader sent (what SyncGroup
    # answers); `assignment` holds the same decoded, for describe, lag and the registry.
    assignment_bytes: dict[str, bytes] = field(default_factory=dict)

    # -- the snapshot's record -----------------------------------------------------------------

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> GroupState:
        """From the snapshot's record. A record of code from before the two-step rebalance
        has no "state", "rejoined" or "rebalance_deadline_ms": that code rebalanced in one
        step, so a group with members was Stable, one without Empty."""
        members = {m: dict(v) for m, v in record["members"].items()}
        phase = record.get("state", STABLE.value if members else EMPTY.value)
        return cls(
            group_id=record["group_id"],
            phase=GroupPhase(phase),
            generation=record["generation"],
            protocol=record["protocol"],
            members=members,
            assignment={m: [list(tp) for tp in a] for m, a in record["assignment"].items()},
            next_member=record["next_member"],
            rejoined=list(record.get("rejoined", [])),
            rebalance_deadline_ms=record.get("rebalance_deadline_ms"),
            protocol_type=record.get("protocol_type", NATIVE_PROTOCOL_TYPE),
            leader=record.get("leader"),
            assignment_bytes=dict(record.get("assignment_bytes", {})),
        )

    def to_record(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "state": self.phase.value,
            "generation": self.generation,
            "protocol": self.protocol,
            "members": {m: dict(v) for m, v in self.members.items()},
            "assignment": {m: [list(tp) for tp in a] for m, a in self.assignment.items()},
            "next_member": self.next_member,
            "rejoined": list(self.rejoined),
            "rebalance_deadline_ms": self.rebalance_deadline_ms,
            "protocol_type": self.protocol_type,
            "leader": self.leader,
            "assignment_bytes": dict(self.assignment_bytes),
        }

    # -- reads ---------------------------------------------------------------------------------

    def rebalance_timeout_ms(self) -> int:
        """How long a rebalance waits for members to rejoin: the largest of their timeouts
        (Kafka's GroupMetadata.rebalanceTimeoutMs)."""
        return max((int(m["rebalance_timeout_ms"]) for m in self.members.values()), default=0)

    def waiting_for(self) -> list[str]:
        """The members a PreparingRebalance still waits for (sorted); [] in any other state."""
        if self.phase is not PREPARING:
            return []
        rejoined = set(self.rejoined)
        return [m for m in sorted(self.members) if m not in rejoined]

    @property
    def client_assigned(self) -> bool:
        """A Kafka classic group: its leader member assigns (SyncGroup)."""
        return self.protocol_type != NATIVE_PROTOCOL_TYPE

    def member_view(self, member_id: str) -> dict[str, Any]:
        """What a join answers: the member's id, the group's generation, state and assignor,
        and the member's partitions in that generation. A Kafka group's adds its protocol
        type and leader, and for the leader every member's (id, instance id, metadata of the
        chosen protocol): what JoinGroup answers the leader, which assigns from them."""
        view = {
            "member_id": member_id,
            "generation": self.generation,
            "state": self.phase.value,
            "protocol": self.protocol,
            "assignment": [list(tp) for tp in self.assignment.get(member_id, [])],
        }
        if self.client_assigned:
            view["protocol_type"] = self.protocol_type
            view["leader"] = self.leader
            view["members"] = (
                [
                    [
                        m,
                        self.members[m]["instance_id"],
                        protocol_metadata(self.members[m], self.protocol),
                    ]
                    for m in sorted(self.members)
                ]
                if member_id == self.leader and self.phase in (COMPLETING, STABLE)
                else []
            )
        return view

    # -- transitions ---------------------------------------------------------------------------

    def join(
        self,
        member: dict[str, Any],
        partitions: PartitionCount,
        protocol_type: str = NATIVE_PROTOCOL_TYPE,
        new_member_id: str | None = None,
    ) -> dict[str, Any]:
        """Add a member, or refresh one, and count it as joined for the rebalance. `member` is
        its record as the join carries it (the fields of the module docstring, "joined_ms"
        the join's time); an empty "member_id" asks for a new one, named after its client and
        the next member number. Returns the member's view (`member_view`); one in
        PreparingRebalance means the rebalance waits for other members.

        Refused, before any change: no assignor offered, an unknown member id (without an
        instance id), no assignor shared with the other members. A static member (an
        instance id) gets back the member id its instance had. A member of a Stable group
        joining again with the same subscription changes nothing but its record; anything
        else starts a rebalance, or joins the one under way, and completes it if this was the
        last member it waited for.

        A Kafka member (`protocol_type` other than NATIVE_PROTOCOL_TYPE) offers
        [[protocol name, metadata bytes], ...] as "protocols"; it may join only a group of
        its protocol type (an Empty group takes the type of its first member) sharing a
        protocol name with every member (InconsistentGroupProtocolError otherwise, as Kafka
        answers). `new_member_id`: the id a new member (empty "member_id") gets instead of a
        generated one: the id the coordinator handed out in Kafka's MEMBER_ID_REQUIRED
        round; refused if a member has it already."""
        member_id, instance_id = member["member_id"], member["instance_id"]
        if not member["protocols"]:
            raise InvalidRequestError(
                f"group {self.group_id!r}: a member must offer at least one assignor"
            )
        if self.members and protocol_type != self.protocol_type:
            raise InconsistentGroupProtocolError(
                f"group {self.group_id!r} is a {_kind(self.protocol_type)} group: a "
                f"{_kind(protocol_type)} member cannot join it (use another group id)"
            )
        if instance_id is not None:
            # Static membership: the same instance keeps its member id across restarts.
            for mid, m in self.members.items():
                if m["instance_id"] == instance_id:
                    member_id = mid
                    break
        if member_id and member_id not in self.members and instance_id is None:
            raise UnknownMemberIdError(
                f"member {member_id!r} is not in group {self.group_id!r}; join with an empty id"
            )
        if not member_id and new_member_id is not None and new_member_id in self.members:
            raise InvalidRequestError(
                f"group {self.group_id!r}: member id {new_member_id!r} is taken already"
            )
        new_id = member_id or new_member_id or f"{member['client_id']}-{self.next_member}"
        # Refuse a member that shares no assignor (protocol) with the others.
        offered = {
            **{mid: m["protocols"] for mid, m in sorted(self.members.items()) if mid != new_id},
            new_id: member["protocols"],
        }
        if protocol_type == NATIVE_PROTOCOL_TYPE:
            assignors.choose_assignor(offered)
        else:
            _vote(self.group_id, offered)
        if not member_id and new_member_id is None:
            self.next_member += 1
        if not self.members:
            self.protocol_type = protocol_type
        self._join({**member, "member_id": new_id}, member["joined_ms"], partitions)
        self.check(partitions)
        return self.member_view(new_id)

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, tuple[bytes, list[list[Any]]]] | None,
        partitions: PartitionCount,
    ) -> bytes | None:
        """A Kafka group member's SyncGroup: its assignment bytes, or None while the group
        waits for its leader's (the coordinator answers it when the group is Stable).

        The leader's `assignments` (member id -> (the bytes as sent, the partitions they
        name)) complete the rebalance: CompletingRebalance -> Stable. Members it leaves out
        get empty bytes (Kafka's rule), entries for non-members are dropped, and partitions of
        topics that do not exist are left out of the decoded assignment (the bytes stay as
        sent). Refused: a native group, an unknown member, another generation
        (IllegalGenerationError), a group preparing a rebalance (RebalanceInProgressError), a
        partition assigned to two members (InvalidRequestError: the leader's assignor broke
        the one-owner rule; nothing is stored)."""
        if not self.client_assigned:
            raise InconsistentGroupProtocolError(
                f"group {self.group_id!r} is a raftlog group: its assignment comes with the "
                "join, there is no SyncGroup"
            )
        self.require_current(member_id, generation, "SyncGroup")
        if self.phase is PREPARING:
            raise RebalanceInProgressError(
                f"group {self.group_id!r} is rebalancing again: member {member_id!r} must join"
            )
        if self.phase is STABLE:
            return self.assignment_bytes.get(member_id, b"")
        if member_id != self.leader or assignments is None:
            return None
        owners: dict[tuple[str, int], str] = {}
        decoded: dict[str, list[list[Any]]] = {}
        for m in sorted(assignments):
            if m not in self.members:
                continue
            kept: list[list[Any]] = []
            for topic, partition in assignments[m][1]:
                count = partitions(topic)
                if count is None or not 0 <= partition < count:
                    continue
                if (topic, partition) in owners:
                    raise InvalidRequestError(
                        f"group {self.group_id!r}: leader {member_id!r} assigned "
                        f"{topic}-{partition} to both {owners[topic, partition]!r} and {m!r}"
                    )
                owners[topic, partition] = m
                kept.append([topic, partition])
            decoded[m] = sorted(kept)
        ordered = sorted(self.members)
        self.assignment = {m: decoded.get(m, []) for m in ordered}
        self.assignment_bytes = {m: assignments[m][0] if m in assignments else b"" for m in ordered}
        self.rebalance_deadline_ms = None
        self._become(STABLE)
        self.check(partitions)
        return self.assignment_bytes[member_id]

    def require_current(self, member_id: str, generation: int, what: str) -> None:
        """Refuse `what` (a SyncGroup, a commit) unless it comes from a member at the current
        generation: UnknownMemberIdError, IllegalGenerationError."""
        if member_id not in self.members:
            raise UnknownMemberIdError(
                f"{what}: member {member_id!r} is not in group {self.group_id!r} (expired, "
                "left, or removed by a rebalance); join with an empty member id"
            )
        if generation != self.generation:
            raise IllegalGenerationError(
                f"group {self.group_id!r}: {what} of member {member_id!r} at generation "
                f"{generation}, the group is at generation {self.generation} (a rebalance "
                "happened; join again)"
            )

    def leave(
        self, member_ids: Iterable[str], now_ms: int | None, partitions: PartitionCount
    ) -> list[str]:
        """Members leave (a clean close) or are expired (no heartbeat within their session
        timeout): their partitions have no owner until the rebalance this starts completes.
        `now_ms` None (entries of older code): the next `tick` starts the deadline.

        Returns the members removed: each once, in the order named; unknown ids are ignored."""
        gone = [m for m in dict.fromkeys(member_ids) if m in self.members]
        if gone:
            for m in gone:
                self._remove(m)
            self.rejoined = [m for m in self.rejoined if m in self.members]
            if self.phase in (STABLE, COMPLETING):
                self._prepare(now_ms)
            self._maybe_complete(partitions, now_ms)
        self.check(partitions)
        return gone

    def tick(self, now_ms: int, partitions: PartitionCount) -> list[str]:
        """The coordinator's clock reaches the group: a PreparingRebalance without a deadline
        gets one (rebalance timeout from now); one whose deadline has passed completes without
        the members that did not rejoin in time, which are removed. Returns the members
        removed. Nothing happens when the group is not rebalancing or its deadline is ahead."""
        late: list[str] = []
        deadline = self.rebalance_deadline_ms
        waiting = self.phase in (PREPARING, COMPLETING)
        if waiting and deadline is None:
            self.rebalance_deadline_ms = now_ms + self.rebalance_timeout_ms()
        elif self.phase is PREPARING and deadline is not None and now_ms >= deadline:
            late = self.waiting_for()
            for m in late:
                self._remove(m)
            self._complete(partitions, now_ms)
        elif self.phase is COMPLETING and deadline is not None and now_ms >= deadline:
            # A Kafka group's leader sent no SyncGroup within the rebalance timeout: it goes,
            # and the others join again under a new leader (Kafka removes such members too).
            late = [self.leader] if self.leader is not None else []
            for m in late:
                self._remove(m)
            self._prepare(now_ms)
            self._maybe_complete(partitions, now_ms)
        self.check(partitions)
        return late

    def topic_changed(self, topic: str, partitions: PartitionCount) -> None:
        """A topic was created or deleted: a group whose members subscribe to it rebalances.

        The partitions of a deleted topic leave the assignment at once (nobody can read them
        any more, and a commit must not store an offset for a partition that does not exist),
        also where no member subscribes to it: a Kafka group's leader may assign beyond the
        subscriptions (a hypothesis run found a group left owning a deleted topic's partition,
        which broke the group's invariants inside the metadata state machine)."""
        if partitions(topic) is None:
            for member_id in sorted(self.assignment):
                owned = self.assignment[member_id]
                self.assignment[member_id] = [tp for tp in owned if tp[0] != topic]
        # A Kafka group's leader watches the topics itself and rejoins (Kafka's coordinator
        # starts no rebalance for a topic change).
        subscribed = any(topic in m["topics"] for m in self.members.values())
        if subscribed and self.phase is STABLE and not self.client_assigned:
            # No time in topic commands: the coordinator's next tick starts the deadline.
            self._prepare(None)
        self.check(partitions)

    def delete(self) -> None:
        """The group is deleted (Dead): refused unless it is Empty. The caller drops it."""
        if self.members:
            raise GroupNotEmptyError(
                f"group {self.group_id!r} has {len(self.members)} active members"
            )
        self._become(DEAD)

    # -- steps of the transitions (each leaves the check to its transition) --------------------

    def _join(self, member: dict[str, Any], now_ms: int, partitions: PartitionCount) -> None:
        member_id = member["member_id"]
        old = self.members.get(member_id)
        self.members[member_id] = member
        if self.client_assigned and self.leader is None:
            self.leader = member_id
        unchanged = old is not None and same_subscription(old, member)
        # Kafka's leader joining a Stable group again unchanged asks for a rebalance; a Kafka
        # member joining a CompletingRebalance group unchanged lost its JoinGroup answer.
        if unchanged and (
            (self.phase is STABLE and member_id != self.leader) or (self.phase is COMPLETING)
        ):
            return
        if member_id in self.assignment and not self.client_assigned:
            # Partitions of topics it no longer subscribes to are given up now (its client
            # revoked them before joining); the rest stay its own until the rebalance completes.
            topics = member["topics"]
            owned = self.assignment[member_id]
            self.assignment[member_id] = [tp for tp in owned if tp[0] in topics]
        if self.phase in (EMPTY, STABLE, COMPLETING):
            self._prepare(now_ms)
        if member_id not in self.rejoined:
            self.rejoined = sorted([*self.rejoined, member_id])
        self._maybe_complete(partitions, now_ms)

    def _prepare(self, now_ms: int | None) -> None:
        self._become(PREPARING)
        self.rejoined = []
        self.rebalance_deadline_ms = (
            None if now_ms is None else now_ms + self.rebalance_timeout_ms()
        )

    def _remove(self, member_id: str) -> None:
        del self.members[member_id]
        self.assignment.pop(member_id, None)
        self.assignment_bytes.pop(member_id, None)
        if member_id == self.leader:
            self.leader = None

    def _maybe_complete(self, partitions: PartitionCount, now_ms: int | None) -> None:
        if self.phase is PREPARING and not self.waiting_for():
            self._complete(partitions, now_ms)

    def _complete(self, partitions: PartitionCount, now_ms: int | None) -> None:
        """The next generation: the assignor every member supports assigns the subscribed
        topics' partitions among the members (all of which have rejoined), starting from the
        current assignment (the sticky assignor keeps what it can). A Kafka group instead
        chooses its protocol by the members' votes, keeps its leader (or elects the first
        member if it left) and waits in CompletingRebalance for the leader's assignment,
        until the rebalance timeout from `now_ms` (None: the next tick starts it)."""
        self.generation += 1
        self.rejoined = []
        self.rebalance_deadline_ms = None
        members = self.members
        if not members:
            self.protocol = None
            self.assignment = {}
            self.assignment_bytes = {}
            self.leader = None
            self._become(EMPTY)
            return
        ordered = sorted(members)
        if self.client_assigned:
            if self.leader not in members:
                self.leader = ordered[0]
            self.protocol = _vote(self.group_id, {m: members[m]["protocols"] for m in ordered})
            self.assignment = {}
            self.assignment_bytes = {}
            self._become(COMPLETING)
            if now_ms is not None:
                self.rebalance_deadline_ms = now_ms + self.rebalance_timeout_ms()
            return
        protocol = assignors.choose_assignor({m: members[m]["protocols"] for m in ordered})
        subscriptions = {m: members[m]["topics"] for m in ordered}
        counts: dict[str, int] = {}
        for topic in sorted({t for m in ordered for t in members[m]["topics"]}):
            count = partitions(topic)
            if count is not None:
                counts[topic] = count
        current = {
            m: [(t, p) for t, p in self.assignment[m]]
            for m in sorted(self.assignment)
            if m in members
        }
        result = assignors.ASSIGNORS[protocol](subscriptions, counts, current)
        self.protocol = protocol
        self.assignment = {m: [[t, p] for t, p in result.get(m, [])] for m in ordered}
        self._become(STABLE)

    def _become(self, to: GroupPhase) -> None:
        if self.phase not in _PREVIOUS[to]:
            raise GroupInvariantError(
                f"group {self.group_id!r} generation {self.generation}: no transition from "
                f"{self.phase.value} to {to.value} (allowed from "
                f"{sorted(p.value for p in _PREVIOUS[to])})"
            )
        self.phase = to

    # -- invariants ----------------------------------------------------------------------------

    def check(self, partitions: PartitionCount) -> None:
        """Raise GroupInvariantError unless the group keeps every invariant of the module
        docstring. Cost: one pass over the members and their assignment."""
        state = self.phase
        members, assignment, rejoined = self.members, self.assignment, self.rejoined

        def broken(why: str) -> GroupInvariantError:
            return GroupInvariantError(
                f"group {self.group_id!r} generation {self.generation} ({state.value}): {why}"
            )

        kafka = self.client_assigned
        if state not in (EMPTY, PREPARING, COMPLETING, STABLE) or (
            state is COMPLETING and not kafka
        ):
            raise broken("not a state a group record can be in")
        if (state is EMPTY) != (not members):
            raise broken(f"{len(members)} members")
        if state is EMPTY and (assignment or self.protocol is not None):
            raise broken("an Empty group with an assignment or a protocol")
        if state is not PREPARING and rejoined:
            raise broken("rejoined members outside PreparingRebalance")
        if state not in (PREPARING, COMPLETING) and self.rebalance_deadline_ms is not None:
            raise broken("a rebalance deadline outside a rebalance")
        if not kafka and (self.leader is not None or self.assignment_bytes):
            raise broken("a raftlog group with a leader member or assignment bytes")
        if kafka:
            if self.leader is not None and self.leader not in members:
                raise broken(f"leader {self.leader!r} is not a member")
            if state in (COMPLETING, STABLE) and self.leader is None:
                raise broken("no leader")
            if state is COMPLETING and (assignment or self.assignment_bytes):
                raise broken("an assignment before the leader sent one")
            if not self.assignment_bytes.keys() <= members.keys() or (
                state is STABLE and self.assignment_bytes.keys() != members.keys()
            ):
                raise broken("assignment bytes not exactly the members'")
        if rejoined != sorted(set(rejoined)) or not set(rejoined) <= members.keys():
            raise broken(f"rejoined {rejoined!r:.200} is not a sorted subset of the members")
        if not assignment.keys() <= members.keys():
            raise broken("an assignment to a non-member")
        owners: dict[tuple[str, int], str] = {}
        for member_id in sorted(assignment):
            topics = members[member_id]["topics"]
            for topic, partition in assignment[member_id]:
                if (topic, partition) in owners:
                    raise broken(
                        f"{topic}-{partition} owned by {owners[topic, partition]!r} and "
                        f"{member_id!r}"
                    )
                owners[topic, partition] = member_id
                count = partitions(topic)
                # A Kafka leader's assignor may assign beyond the subscriptions it was shown.
                subscribed = kafka or topic in topics
                if not subscribed or count is None or not 0 <= partition < count:
                    raise broken(
                        f"{member_id!r} owns {topic}-{partition}, not a subscribed partition"
                    )
        if state is STABLE:
            if assignment.keys() != members.keys():
                raise broken("a member of a Stable group without an assignment entry")
            if kafka:
                return  # the leader's assignor decides what every member gets
            for topic in sorted({t for m in members.values() for t in m["topics"]}):
                count = partitions(topic)
                for partition in range(count or 0):
                    if (topic, partition) not in owners:
                        raise broken(f"{topic}-{partition} has no owner")


def _kind(protocol_type: str) -> str:
    if protocol_type == NATIVE_PROTOCOL_TYPE:
        return "raftlog"
    return f"Kafka {protocol_type!r}"


def _vote(group_id: str, member_protocols: dict[str, list[Any]]) -> str:
    """A Kafka group's protocol (Kafka's ClassicGroup.selectProtocol): of the protocol names
    every member offers, each member votes for the first in its own preference order; the most
    votes win, a tie goes to the smallest name. Raises InconsistentGroupProtocolError if the
    members share none."""
    names = {m: [str(p[0]) for p in protocols] for m, protocols in member_protocols.items()}
    shared = set.intersection(*(set(n) for n in names.values())) if names else set()
    if not shared:
        raise InconsistentGroupProtocolError(
            f"group {group_id!r}: its {len(names)} members share no protocol (assignor); "
            f"they offer {sorted({n for ns in names.values() for n in ns})[:10]}"
        )
    votes: dict[str, int] = {}
    for m in sorted(names):
        choice = next(n for n in names[m] if n in shared)
        votes[choice] = votes.get(choice, 0) + 1
    return min(votes, key=lambda n: (-votes[n], n))


def protocol_metadata(member: dict[str, Any], protocol: str | None) -> bytes:
    """A Kafka member's metadata for `protocol` (what it offered with that name)."""
    for name, metadata in member["protocols"]:
        if name == protocol:
            return bytes(metadata)
    return b""


# -- rules the coordinator and the commands read (the group may not exist) ---------------------


def join_outcome(
    group_id: str, group: GroupState | None, member_id: str, generation_joined: int
) -> dict[str, Any] | None:
    """For a join that waits for its rebalance (joined while the group was at
    `generation_joined`): the answer once the generation has moved on, None while it has not.

    Raises UnknownMemberIdError if the member left the group meanwhile (it is then not in the
    new generation). A group already preparing its next rebalance still answers with the
    generation that completed: the member learns of the next one from its heartbeat, as in
    Kafka, where every waiting join is answered when its rebalance completes."""
    if group is None or member_id not in group.members:
        raise UnknownMemberIdError(
            f"group {group_id!r}: member {member_id!r} left or was removed while its join "
            f"waited for the rebalance of generation {generation_joined}; join with an empty "
            "member id"
        )
    if group.generation <= generation_joined:
        return None
    return group.member_view(member_id)


def sync_outcome(
    group_id: str, group: GroupState | None, member_id: str, generation: int
) -> bytes | None:
    """For a Kafka member's SyncGroup that waits for its leader's: its assignment bytes once
    the group is Stable at `generation`, None while it still waits. Raises what the member
    must act on: UnknownMemberIdError (it left or was removed), RebalanceInProgressError (the
    group moved on to another rebalance: join again)."""
    if group is None or member_id not in group.members:
        raise UnknownMemberIdError(
            f"group {group_id!r}: member {member_id!r} left or was removed while its SyncGroup "
            f"of generation {generation} waited; join with an empty member id"
        )
    if group.generation != generation or group.phase is PREPARING:
        raise RebalanceInProgressError(
            f"group {group_id!r} rebalanced while member {member_id!r} waited for the "
            f"assignment of generation {generation}; join again"
        )
    if group.phase is STABLE:
        return group.assignment_bytes.get(member_id, b"")
    return None


def heartbeat(group_id: str, group: GroupState | None, member_id: str, generation: int) -> int:
    """A heartbeat's answer: the group's current generation (another one than the member's
    own tells it to rejoin), or RebalanceInProgressError while the group prepares a rebalance
    (the member commits, gives up its partitions and joins again)."""
    if group is None or member_id not in group.members:
        raise UnknownMemberIdError(
            f"member {member_id!r} is not in group {group_id!r} (expired, left, removed by a "
            "rebalance it did not rejoin in time, or never joined); join with an empty member id"
        )
    if group.phase is PREPARING:
        raise RebalanceInProgressError(
            f"group {group_id!r} is rebalancing: member {member_id!r} at generation "
            f"{generation} must commit, give up its partitions and join again (generation "
            f"{group.generation} stands until every member has)"
        )
    return group.generation


def check_commit(
    group_id: str,
    group: GroupState | None,
    member_id: str,
    generation: int,
    partitions: Iterable[tuple[str, int]],
) -> bool:
    """Whether a commit of `partitions` may be stored. True: a member's commit (its generation
    is current and it owns every partition; in PreparingRebalance too, since the generation
    stands until the rebalance completes); False: a standalone commit (generation -1, no
    members: a consumer that assigns partitions itself, as Kafka allows). Refusals raise
    CommitFailedError naming the group, member and generation."""
    members = group.members if group is not None else {}
    if not members and generation == -1:
        return False
    if group is not None and group.client_assigned:
        # Kafka's rules (ClassicGroup.validateOffsetCommit): a member of the current
        # generation commits whatever its leader gave it; not while its group waits for the
        # leader's assignment.
        group.require_current(member_id, generation, "commit")
        if group.phase is COMPLETING:
            raise RebalanceInProgressError(
                f"commit to group {group_id!r} refused: generation {generation} waits for its "
                "leader's assignment (SyncGroup)"
            )
        return True
    if group is None or member_id not in members:
        raise CommitFailedError(
            f"commit to group {group_id!r} refused: {member_id!r} (generation {generation}) is "
            "not a member (it was removed or never joined; rejoin the group)"
        )
    if generation != group.generation:
        raise CommitFailedError(
            f"commit to group {group_id!r} refused: member {member_id!r} generation "
            f"{generation} is stale, the group is at generation {group.generation} (a "
            "rebalance happened; the partitions may belong to another member now)"
        )
    owned = {(t, p) for t, p in group.assignment.get(member_id, [])}
    foreign = [f"{t}-{p}" for t, p in partitions if (t, p) not in owned]
    if foreign:
        raise CommitFailedError(
            f"commit to group {group_id!r} refused: member {member_id!r} does not own "
            f"{', '.join(foreign)} in generation {generation}"
        )
    return True
