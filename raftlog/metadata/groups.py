"""One consumer group's states, transitions and rules: the only place they live.

A rebalance must not hand a partition to a new owner while the old one still consumes it (the
ownership registry promises one consumer per partition in a group). So a rebalance runs in two
steps, as Kafka's classic group protocol does (GroupMetadata.scala, GroupCoordinator.scala):
first the group *prepares*: the current generation and its assignment stay in force, members
learn of the rebalance from their next heartbeat, commit their positions (accepted: their
generation still stands), give their partitions up and join again; only when every member has
joined again, or the rebalance timeout has passed (members that did not rejoin are removed),
is the next generation and its assignment computed and handed out.

The functions here act on the group's replicated record (a plain dict, so that it pickles into
pysyncobj snapshots and compares with `==`); MetadataState (state.py) calls them from its
commands and the coordinator (coordinator.py) calls the read-only ones. Issue #22 turns the
record into a type whose methods are these functions.

States (`GroupPhase`, the record's "state"; Kafka's names and meanings):

- Empty: no members. A group of committed offsets only (a standalone consumer, a reset, Spark)
  or one whose members all left. A join makes it PreparingRebalance.
- PreparingRebalance: the current generation's assignment stands (its members may commit);
  members that have joined this round are listed in "rejoined". Heartbeats are answered
  RebalanceInProgressError. Completes when every member has rejoined (a join, a leave, an
  expiry), or at "rebalance_deadline_ms" (the coordinator's `tick_group` carries the time);
  then the generation moves on, with the assignment of the members that rejoined (Stable), or
  with none left (Empty). Kafka keeps static members (an instance id) that did not rejoin;
  here they are removed like the others, and get their member id back when they join again.
- CompletingRebalance: not used. In Kafka the group waits there for the leader member's
  SyncGroup (the leader assigns); here the state machine assigns when it completes the join,
  so no member has to be waited for. The Kafka group protocol will add it between
  PreparingRebalance and Stable; the transition table already allows it.
- Stable: every member has the current generation's assignment, and every partition of the
  subscribed topics has one owner. A join of a new member, a join with a changed subscription
  or assignor list, a leave, an expiry, or a subscribed topic created or deleted starts a
  rebalance (PreparingRebalance). A member of the generation joining again with the same
  subscription gets the current assignment and changes nothing.
- Dead: deleted (only an Empty group can be): the record is removed.

Transitions (`_PREVIOUS`: to -> the states it may be entered from; `_become` checks each):
Empty -> PreparingRebalance -> Stable | Empty; Stable -> PreparingRebalance; Empty -> Dead.
A first join goes Empty -> PreparingRebalance -> Stable in one command (the joiner is every
member); the last leave goes Stable -> PreparingRebalance -> Empty.

The generation moves by one at every completion, also one that leaves the group Empty, so a
commit or heartbeat from before any completed rebalance is recognised as stale.

Record fields (every one present; `upgrade` fills those a snapshot from older code lacks):

- "group_id", "generation" (int >= 0), "protocol" (the assignor of the generation, or None),
  "next_member" (the number of the next generated member id);
- "state": a GroupPhase value;
- "members": member id -> {"member_id", "client_id", "instance_id", "session_timeout_ms",
  "rebalance_timeout_ms", "topics" (sorted), "protocols", "joined_ms"};
- "assignment": member id -> [[topic, partition], ...]: the current generation's owners;
- "rejoined": sorted member ids that joined during this PreparingRebalance;
- "rebalance_deadline_ms": when this PreparingRebalance ends, or None: not started yet (a
  rebalance started by a topic change or by a leave of older code, which carry no time; the
  coordinator's next `tick_group` starts it).

Invariants (`check_group`, after every command that changes a group, in production too):

- Empty if and only if there are no members; then no assignment and no protocol;
- "rejoined" is sorted, without repeats, a subset of the members, and empty outside
  PreparingRebalance; "rebalance_deadline_ms" is None outside PreparingRebalance;
- the assignment names only members, and each partition at most once, each one of a topic its
  owner subscribes to and that exists; in Stable every member has an entry and every partition
  of every subscribed topic that exists has an owner.

Rules every function keeps: no clock (time arrives as `now_ms`), no randomness, no iteration
over sets or dicts in an order that could differ between replicas (members are sorted), no I/O.
Refusals are RaftlogErrors raised before the first change; a broken invariant raises
GroupInvariantError (a bug in raftlog, the same on every replica).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any

from raftlog.errors import (
    CommitFailedError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from raftlog.invariants import InvariantError
from raftlog.metadata import assignors

Group = dict[str, Any]
# topic -> its partition count, or None when the topic does not exist.
PartitionCount = Callable[[str], int | None]


class GroupPhase(enum.Enum):
    """A group's state, by Kafka's names (GroupState in Kafka's GroupMetadata.scala; here
    GroupPhase, since issue #22 gives the name GroupState to the whole group record)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY = GroupPhase.EMPTY.value
PREPARING = GroupPhase.PREPARING_REBALANCE.value
COMPLETING = GroupPhase.COMPLETING_REBALANCE.value
STABLE = GroupPhase.STABLE.value
DEAD = GroupPhase.DEAD.value

# to -> the states it may be entered from. Kafka's table, with Stable also entered straight
# from PreparingRebalance (no SyncGroup wait: see the module docstring) and Dead only from
# Empty (a group is deleted only when it has no members; Kafka also kills groups whose
# coordinator moves, which a replicated coordinator never needs).
_PREVIOUS: dict[str, frozenset[str]] = {
    PREPARING: frozenset({EMPTY, STABLE, COMPLETING}),
    COMPLETING: frozenset({PREPARING}),
    STABLE: frozenset({PREPARING, COMPLETING}),
    EMPTY: frozenset({PREPARING}),
    DEAD: frozenset({EMPTY}),
}


class GroupInvariantError(InvariantError):
    """A group invariant or transition rule broke: a bug in raftlog (the same on every
    replica). Raised explicitly, so the checks run under `python -O` too."""


# -- the record ----------------------------------------------------------------------------------


def new_group(group_id: str) -> Group:
    return {
        "group_id": group_id,
        "state": EMPTY,
        "generation": 0,
        "protocol": None,
        "members": {},
        "assignment": {},
        "next_member": 0,
        "rejoined": [],
        "rebalance_deadline_ms": None,
    }


def upgrade(group: Group) -> None:
    """Fill the fields a group from a snapshot of older code lacks. That code rebalanced in one
    step, so a group with members was Stable, one without Empty."""
    if "state" not in group:
        group["state"] = STABLE if group["members"] else EMPTY
    group.setdefault("rejoined", [])
    group.setdefault("rebalance_deadline_ms", None)


def same_subscription(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a member's join changes nothing the assignment depends on."""
    return bool(old["topics"] == new["topics"] and old["protocols"] == new["protocols"])


def rebalance_timeout_ms(group: Group) -> int:
    """How long a rebalance waits for members to rejoin: the largest of their timeouts
    (Kafka's GroupMetadata.rebalanceTimeoutMs)."""
    return max((int(m["rebalance_timeout_ms"]) for m in group["members"].values()), default=0)


def waiting_for(group: Group) -> list[str]:
    """The members a PreparingRebalance still waits for (sorted); [] in any other state."""
    if group["state"] != PREPARING:
        return []
    rejoined = set(group["rejoined"])
    return [m for m in sorted(group["members"]) if m not in rejoined]


# -- transitions (commands call these; each ends consistent, check_group verifies) ---------------


def join(group: Group, member: dict[str, Any], now_ms: int, partitions: PartitionCount) -> None:
    """Add a member, or refresh one, and count it as joined for the rebalance.

    The caller has checked everything that can refuse the join (state.py's join_group). A
    member of a Stable group joining again with the same subscription changes nothing but its
    record; anything else starts a rebalance, or joins the one under way, and completes it if
    this was the last member it waited for."""
    member_id = member["member_id"]
    old = group["members"].get(member_id)
    group["members"][member_id] = member
    if group["state"] == STABLE and old is not None and same_subscription(old, member):
        return
    if member_id in group["assignment"]:
        # Partitions of topics it no longer subscribes to are given up now (its client revoked
        # them before joining); the rest stay its own until the rebalance completes.
        topics = member["topics"]
        owned = group["assignment"][member_id]
        group["assignment"][member_id] = [tp for tp in owned if tp[0] in topics]
    if group["state"] in (EMPTY, STABLE):
        _prepare(group, now_ms)
    if member_id not in group["rejoined"]:
        group["rejoined"] = sorted([*group["rejoined"], member_id])
    _maybe_complete(group, partitions)


def leave(
    group: Group, member_ids: Iterable[str], now_ms: int | None, partitions: PartitionCount
) -> list[str]:
    """Members leave (a clean close) or are expired (no heartbeat within their session
    timeout): their partitions have no owner until the rebalance this starts completes.

    Returns the members removed: each once, in the order named; unknown ids are ignored."""
    gone = [m for m in dict.fromkeys(member_ids) if m in group["members"]]
    if not gone:
        return []
    for m in gone:
        del group["members"][m]
        group["assignment"].pop(m, None)
    group["rejoined"] = [m for m in group["rejoined"] if m in group["members"]]
    if group["state"] == STABLE:
        _prepare(group, now_ms)
    _maybe_complete(group, partitions)
    return gone


def tick(group: Group, now_ms: int, partitions: PartitionCount) -> list[str]:
    """The coordinator's clock reaches the group: a PreparingRebalance without a deadline gets
    one (rebalance timeout from now); one whose deadline has passed completes without the
    members that did not rejoin in time, which are removed. Returns the members removed."""
    if group["state"] != PREPARING:
        return []
    deadline = group["rebalance_deadline_ms"]
    if deadline is None:
        group["rebalance_deadline_ms"] = now_ms + rebalance_timeout_ms(group)
        return []
    if now_ms < deadline:
        return []
    late = waiting_for(group)
    for m in late:
        del group["members"][m]
        group["assignment"].pop(m, None)
    _complete(group, partitions)
    return late


def topic_changed(group: Group, topic: str, partitions: PartitionCount) -> None:
    """A topic was created or deleted: a group whose members subscribe to it rebalances.

    The partitions of a deleted topic leave the assignment at once (nobody can read them any
    more, and a commit must not store an offset for a partition that does not exist)."""
    if not any(topic in m["topics"] for m in group["members"].values()):
        return
    if partitions(topic) is None:
        for member_id in sorted(group["assignment"]):
            owned = group["assignment"][member_id]
            group["assignment"][member_id] = [tp for tp in owned if tp[0] != topic]
    if group["state"] == STABLE:
        # No time in topic commands: the coordinator's next tick starts the deadline.
        _prepare(group, None)


def delete(group: Group) -> None:
    """The group is deleted: allowed for an Empty group only (the caller refuses others)."""
    _become(group, DEAD)


def _prepare(group: Group, now_ms: int | None) -> None:
    _become(group, PREPARING)
    group["rejoined"] = []
    group["rebalance_deadline_ms"] = (
        None if now_ms is None else now_ms + rebalance_timeout_ms(group)
    )


def _maybe_complete(group: Group, partitions: PartitionCount) -> None:
    if group["state"] == PREPARING and not waiting_for(group):
        _complete(group, partitions)


def _complete(group: Group, partitions: PartitionCount) -> None:
    """The next generation: the assignor every member supports assigns the subscribed topics'
    partitions among the members (all of which have rejoined), starting from the current
    assignment (the sticky assignor keeps what it can)."""
    group["generation"] += 1
    group["rejoined"] = []
    group["rebalance_deadline_ms"] = None
    members = group["members"]
    if not members:
        group["protocol"] = None
        group["assignment"] = {}
        _become(group, EMPTY)
        return
    ordered = sorted(members)
    protocol = assignors.choose_assignor({m: members[m]["protocols"] for m in ordered})
    subscriptions = {m: members[m]["topics"] for m in ordered}
    counts: dict[str, int] = {}
    for topic in sorted({t for m in ordered for t in members[m]["topics"]}):
        count = partitions(topic)
        if count is not None:
            counts[topic] = count
    current = {
        m: [(t, p) for t, p in group["assignment"][m]]
        for m in sorted(group["assignment"])
        if m in members
    }
    result = assignors.ASSIGNORS[protocol](subscriptions, counts, current)
    group["protocol"] = protocol
    group["assignment"] = {m: [[t, p] for t, p in result.get(m, [])] for m in ordered}
    _become(group, STABLE)


def _become(group: Group, to: str) -> None:
    if group["state"] not in _PREVIOUS[to]:
        raise GroupInvariantError(
            f"group {group['group_id']!r} generation {group['generation']}: no transition "
            f"from {group['state']} to {to} (allowed from {sorted(_PREVIOUS[to])})"
        )
    group["state"] = to


# -- rules the coordinator and the commands read (no change) -------------------------------------


def member_view(group: Group, member_id: str) -> dict[str, Any]:
    """What a join answers: the member's id, the group's generation, state and assignor, and
    the member's partitions in that generation."""
    return {
        "member_id": member_id,
        "generation": group["generation"],
        "state": group["state"],
        "protocol": group["protocol"],
        "assignment": [list(tp) for tp in group["assignment"].get(member_id, [])],
    }


def join_outcome(
    group_id: str, group: Group | None, member_id: str, generation_joined: int
) -> dict[str, Any] | None:
    """For a join that waits for its rebalance (joined while the group was at
    `generation_joined`): the answer once the generation has moved on, None while it has not.

    Raises UnknownMemberIdError if the member left the group meanwhile (it is then not in the
    new generation). A group already preparing its next rebalance still answers with the
    generation that completed: the member learns of the next one from its heartbeat, as in
    Kafka, where every waiting join is answered when its rebalance completes."""
    if group is None or member_id not in group["members"]:
        raise UnknownMemberIdError(
            f"group {group_id!r}: member {member_id!r} left or was removed while its join "
            f"waited for the rebalance of generation {generation_joined}; join with an empty "
            "member id"
        )
    if group["generation"] <= generation_joined:
        return None
    return member_view(group, member_id)


def heartbeat(group_id: str, group: Group | None, member_id: str, generation: int) -> int:
    """A heartbeat's answer: the group's current generation (another one than the member's
    own tells it to rejoin), or RebalanceInProgressError while the group prepares a rebalance
    (the member commits, gives up its partitions and joins again)."""
    if group is None or member_id not in group["members"]:
        raise UnknownMemberIdError(
            f"member {member_id!r} is not in group {group_id!r} (expired, left, removed by a "
            "rebalance it did not rejoin in time, or never joined); join with an empty member id"
        )
    if group["state"] == PREPARING:
        raise RebalanceInProgressError(
            f"group {group_id!r} is rebalancing: member {member_id!r} at generation "
            f"{generation} must commit, give up its partitions and join again (generation "
            f"{group['generation']} stands until every member has)"
        )
    current: int = group["generation"]
    return current


def check_commit(
    group_id: str,
    group: Group | None,
    member_id: str,
    generation: int,
    partitions: Iterable[tuple[str, int]],
) -> bool:
    """Whether a commit of `partitions` may be stored. True: a member's commit (its generation
    is current and it owns every partition; in PreparingRebalance too, since the generation
    stands until the rebalance completes); False: a standalone commit (generation -1, no
    members: a consumer that assigns partitions itself, as Kafka allows). Refusals raise
    CommitFailedError naming the group, member and generation."""
    members = group["members"] if group is not None else {}
    if not members and generation == -1:
        return False
    if group is None or member_id not in members:
        raise CommitFailedError(
            f"commit to group {group_id!r} refused: {member_id!r} (generation {generation}) is "
            "not a member (it was removed or never joined; rejoin the group)"
        )
    if generation != group["generation"]:
        raise CommitFailedError(
            f"commit to group {group_id!r} refused: member {member_id!r} generation "
            f"{generation} is stale, the group is at generation {group['generation']} (a "
            "rebalance happened; the partitions may belong to another member now)"
        )
    owned = {(t, p) for t, p in group["assignment"].get(member_id, [])}
    foreign = [f"{t}-{p}" for t, p in partitions if (t, p) not in owned]
    if foreign:
        raise CommitFailedError(
            f"commit to group {group_id!r} refused: member {member_id!r} does not own "
            f"{', '.join(foreign)} in generation {generation}"
        )
    return True


# -- invariants ----------------------------------------------------------------------------------


def check_group(group: Group, partitions: PartitionCount) -> None:
    """Raise GroupInvariantError unless `group` keeps every invariant of the module docstring.

    Cost: one pass over the members and their assignment; run after commands that change a
    group (not after commits, which change offsets only)."""
    gid, state = group["group_id"], group["state"]
    members, assignment, rejoined = group["members"], group["assignment"], group["rejoined"]

    def broken(why: str) -> GroupInvariantError:
        return GroupInvariantError(
            f"group {gid!r} generation {group['generation']} ({state}): {why}"
        )

    if state not in (EMPTY, PREPARING, STABLE):
        raise broken("not a state a group record can be in")
    if (state == EMPTY) != (not members):
        raise broken(f"{len(members)} members")
    if state == EMPTY and (assignment or group["protocol"] is not None):
        raise broken("an Empty group with an assignment or a protocol")
    if state != PREPARING and (rejoined or group["rebalance_deadline_ms"] is not None):
        raise broken("rejoined members or a rebalance deadline outside PreparingRebalance")
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
                    f"{topic}-{partition} owned by {owners[topic, partition]!r} and {member_id!r}"
                )
            owners[topic, partition] = member_id
            count = partitions(topic)
            if topic not in topics or count is None or not 0 <= partition < count:
                raise broken(f"{member_id!r} owns {topic}-{partition}, not a subscribed partition")
    if state == STABLE:
        if assignment.keys() != members.keys():
            raise broken("a member of a Stable group without an assignment entry")
        for topic in sorted({t for m in members.values() for t in m["topics"]}):
            count = partitions(topic)
            for partition in range(count or 0):
                if (topic, partition) not in owners:
                    raise broken(f"{topic}-{partition} has no owner")
