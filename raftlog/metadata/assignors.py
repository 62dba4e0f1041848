"""Partition assignors for consumer groups: which member of a group reads which partition.

The group coordinator runs an assignor inside the replicated metadata state machine, when it
applies a committed Raft entry (a join, a leave, a subscription change). Every replica applies
the same entry on its own, so every replica must compute the *same* assignment, byte for byte,
or the replicas' states drift apart and the Raft log no longer describes one group. Hence the
rule this module keeps:

    Determinism. The output depends only on the values of the inputs, never on the insertion
    order of a dict or list, the iteration order of a set, `hash()` of a str (it changes with
    PYTHONHASHSEED from one process to the next), randomness, the clock or I/O. Every choice is
    made by sorting or by `min`/`max` with a total key that ends in the member id or the
    (topic, partition) pair; sets are used only for membership tests. Strings compare by code
    point, which is the same on every machine.

Inputs and outputs are plain builtins so that they pickle and msgpack-encode without help:

- `subscriptions`: member id -> the topics it subscribes to (order and duplicates ignored).
- `partitions_per_topic`: topic -> partition count. A subscribed topic missing from it does not
  exist (yet) and is ignored; a topic nobody subscribes to is not assigned.
- `current` (sticky only): member id -> the (topic, partition) pairs it held until now. Pairs may
  arrive as 2-lists (msgpack decodes tuples as lists); both are accepted.
- The result: member id -> sorted list of (topic, partition) tuples, with every member of
  `subscriptions` present (possibly with an empty list) and the members in sorted order, so
  that even the msgpack bytes of the result are the same on every replica.

The assignors, named as Kafka clients name them (`partition.assignment.strategy`):

- "range" (`range_assign`), Kafka's RangeAssignor: topic by topic, the members subscribed to the
  topic, sorted by id, each take a contiguous range of its partitions; with n partitions and m
  members each takes n // m and the first n % m take one more. Balanced per topic, not overall:
  the first members get the extra partition of every topic.
- "roundrobin" (`round_robin_assign`), Kafka's RoundRobinAssignor: all partitions of the
  subscribed topics, sorted by (topic, partition), are dealt to the members sorted by id in a
  circle; a member not subscribed to a partition's topic is skipped for that partition. With
  identical subscriptions the counts differ by at most one.
- "sticky" (`sticky_assign`), after Kafka's StickyAssignor: keeps as much of `current` as it can
  while reaching balance. A held pair is kept only if the member is still in the group, still
  subscribed to the topic and the partition still exists; a pair claimed by two members stays
  with the smaller member id. Partitions left without an owner go one at a time to the
  least-loaded member that may take them (ties: smaller member id), the partitions with the
  fewest eligible members first. Then, while some member holds a partition that another eligible
  member with at least two fewer partitions could take, one such partition moves from the most
  loaded member to the least-loaded eligible one. Only over-loaded members give, only
  under-loaded ones take.

Invariants of every result (the unit tests check them with hypothesis):

- every partition of every subscribed, existing topic is assigned to exactly one member, and
  that member subscribes to its topic; nothing else is assigned;
- "roundrobin" and "sticky" with identical subscriptions: max count - min count <= 1;
- "sticky", any subscriptions: no member holds a partition that an eligible member with at least
  two fewer partitions could take (so members with the same subscriptions differ by at most one);
- "sticky" with identical subscriptions moves the fewest partitions that any balanced assignment
  keeping `current` could (with different subscriptions it is a best effort, as in Kafka).

`choose_assignor` picks the assignor a whole group will use from each member's preference list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final, TypeAlias

from raftlog.errors import InconsistentGroupProtocolError
from raftlog.invariants import InvariantError

TopicPartitionPair: TypeAlias = tuple[str, int]
Subscriptions: TypeAlias = Mapping[str, Sequence[str]]
PartitionsPerTopic: TypeAlias = Mapping[str, int]
CurrentAssignment: TypeAlias = Mapping[str, Sequence[TopicPartitionPair]]
Assignment: TypeAlias = dict[str, list[TopicPartitionPair]]
Assignor: TypeAlias = Callable[[Subscriptions, PartitionsPerTopic, CurrentAssignment], Assignment]

# How many members an error message lists before it says "and N more": a group can be large,
# and an error message should stay readable.
_ERROR_MEMBERS_SHOWN_MAX: Final = 8


def _subscribed_topics(
    subscriptions: Subscriptions, partitions_per_topic: PartitionsPerTopic
) -> dict[str, list[str]]:
    """Member -> its subscribed topics that exist, sorted and without duplicates."""
    for topic, count in partitions_per_topic.items():
        if count < 0:
            # The metadata state never holds a negative count: this is a caller's bug.
            raise AssertionError(f"topic {topic!r} has a negative partition count {count}")
    return {
        member: sorted({t for t in topics if t in partitions_per_topic})
        for member, topics in sorted(subscriptions.items())
    }


def _subscribers(topics_of: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """Topic -> the members subscribed to it, sorted by member id (topics in sorted order)."""
    out: dict[str, list[str]] = {}
    for member in sorted(topics_of):
        for topic in topics_of[member]:
            out.setdefault(topic, []).append(member)
    return dict(sorted(out.items()))


def _finish(members: Sequence[str], owner: Mapping[TopicPartitionPair, str]) -> Assignment:
    """The result shape: every member, in sorted order, with its sorted pairs."""
    out: Assignment = {member: [] for member in sorted(members)}
    for tp in sorted(owner):
        out[owner[tp]].append(tp)
    return out


def range_assign(
    subscriptions: Subscriptions,
    partitions_per_topic: PartitionsPerTopic,
    current: CurrentAssignment | None = None,
) -> Assignment:
    """Kafka's RangeAssignor. `current` is accepted for a uniform signature and ignored."""
    topics_of = _subscribed_topics(subscriptions, partitions_per_topic)
    owner: dict[TopicPartitionPair, str] = {}
    for topic, members in _subscribers(topics_of).items():
        count = partitions_per_topic[topic]
        per_member, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            length = per_member + (1 if i < extra else 0)
            for partition in range(start, start + length):
                owner[(topic, partition)] = member
            start += length
        if start != count:
            raise InvariantError(f"range split of {topic!r} covered {start} of {count} partitions")
    return _finish(list(topics_of), owner)


def round_robin_assign(
    subscriptions: Subscriptions,
    partitions_per_topic: PartitionsPerTopic,
    current: CurrentAssignment | None = None,
) -> Assignment:
    """Kafka's RoundRobinAssignor. `current` is accepted for a uniform signature and ignored."""
    topics_of = _subscribed_topics(subscriptions, partitions_per_topic)
    members = list(topics_of)  # sorted by _subscribed_topics
    subscribed = {member: frozenset(topics) for member, topics in topics_of.items()}
    owner: dict[TopicPartitionPair, str] = {}
    cursor = 0  # index into `members` of the next member to offer a partition to
    for topic in _subscribers(topics_of):  # only topics with a subscriber, sorted
        for partition in range(partitions_per_topic[topic]):
            # The topic has a subscriber, so this finds one within len(members) steps.
            while topic not in subscribed[members[cursor]]:
                cursor = (cursor + 1) % len(members)
            owner[(topic, partition)] = members[cursor]
            cursor = (cursor + 1) % len(members)
    return _finish(members, owner)


def _valid_current(
    topics_of: Mapping[str, list[str]],
    partitions_per_topic: PartitionsPerTopic,
    current: CurrentAssignment,
) -> dict[TopicPartitionPair, str]:
    """The pairs of `current` that may be kept, each with its one owner.

    Members are visited in sorted order, so a pair claimed twice stays with the smaller id.
    """
    subscribed = {member: frozenset(topics) for member, topics in topics_of.items()}
    owner: dict[TopicPartitionPair, str] = {}
    for member in sorted(current):
        if member not in subscribed:
            continue  # left the group
        for topic, partition in sorted((str(t), int(p)) for t, p in current[member]):
            if topic not in subscribed[member]:
                continue  # unsubscribed, or the topic was deleted
            if not 0 <= partition < partitions_per_topic[topic]:
                continue  # the partition no longer exists
            owner.setdefault((topic, partition), member)
    return owner


def sticky_assign(
    subscriptions: Subscriptions,
    partitions_per_topic: PartitionsPerTopic,
    current: CurrentAssignment,
) -> Assignment:
    """A balanced assignment that keeps as much of `current` as it can (see the module doc)."""
    topics_of = _subscribed_topics(subscriptions, partitions_per_topic)
    subscribers = _subscribers(topics_of)
    members = list(topics_of)
    owner = _valid_current(topics_of, partitions_per_topic, current)
    kept = frozenset(owner)

    # held[member][topic] is the set of partitions it holds; it is read only through sorted(),
    # min() and max() with total keys, never in set order.
    held: dict[str, dict[str, set[int]]] = {member: {} for member in members}
    count = {member: 0 for member in members}
    for (topic, partition), member in owner.items():
        held[member].setdefault(topic, set()).add(partition)
        count[member] += 1

    def give(topic: str, partition: int, member: str) -> None:
        owner[(topic, partition)] = member
        held[member].setdefault(topic, set()).add(partition)
        count[member] += 1

    # Phase 1: partitions without a (valid) owner go to the least-loaded eligible member. The
    # partitions with the fewest eligible members go first, while there is still room to keep
    # their few candidates level; with identical subscriptions this is plain (topic, partition)
    # order.
    orphans = sorted(
        (len(members_of_topic), topic, partition)
        for topic, members_of_topic in subscribers.items()
        for partition in range(partitions_per_topic[topic])
        if (topic, partition) not in owner
    )
    for _, topic, partition in orphans:
        give(topic, partition, min(subscribers[topic], key=lambda m: (count[m], m)))

    # Phase 2: move one partition at a time from an over-loaded member to an eligible member
    # holding at least two fewer. Each move lowers the sum of squared counts by at least 2, so
    # the loop ends after at most total**2 // 2 moves; the bound turns a bug into an error
    # instead of a replica that never finishes applying an entry.
    total = len(owner)
    for _ in range(total * total // 2 + 1):
        move = _next_move(members, subscribers, held, count, kept)
        if move is None:
            break
        giver, topic, partition, taker = move
        held[giver][topic].discard(partition)
        count[giver] -= 1
        give(topic, partition, taker)
    else:
        raise AssertionError(f"sticky rebalance of {total} partitions did not converge")
    return _finish(members, owner)


def _next_move(
    members: Sequence[str],
    subscribers: Mapping[str, list[str]],
    held: Mapping[str, Mapping[str, set[int]]],
    count: Mapping[str, int],
    kept: frozenset[TopicPartitionPair],
) -> tuple[str, str, int, str] | None:
    """The next (giver, topic, partition, taker) move of the sticky rebalance, or None.

    The giver is the most loaded member (then the smaller id) that has a partition some eligible
    member with at least two fewer could take. It gives, in this order of preference, a
    partition assigned only in this round (moving it breaks no stickiness), to the least-loaded
    taker, then the smaller taker id, then the smaller topic; within the topic, the highest
    partition number.
    """
    if not members:
        return None
    least = min(count.values())
    for giver in sorted(members, key=lambda m: (-count[m], m)):
        if count[giver] - least < 2:
            return None  # every later giver holds no more than this one
        best: tuple[bool, int, str, str] | None = None
        for topic, partitions in sorted(held[giver].items()):
            if not partitions:
                continue
            takers = [m for m in subscribers[topic] if count[m] <= count[giver] - 2]
            if not takers:
                continue
            taker = min(takers, key=lambda m: (count[m], m))
            only_kept = all((topic, p) in kept for p in partitions)
            candidate = (only_kept, count[taker], taker, topic)
            if best is None or candidate < best:
                best = candidate
        if best is not None:
            _, _, taker, topic = best
            partition = max(held[giver][topic], key=lambda p: ((topic, p) not in kept, p))
            return giver, topic, partition, taker
    return None


ASSIGNORS: Final[Mapping[str, Assignor]] = {
    "range": range_assign,
    "roundrobin": round_robin_assign,
    "sticky": sticky_assign,
}


def choose_assignor(member_protocols: Mapping[str, Sequence[str]]) -> str:
    """The assignor a group uses: the first one, in the preference list of the member with the
    smallest id, that every member lists and that this module implements.

    Raises InconsistentGroupProtocolError if there is none (or the group has no members).
    """
    if not member_protocols:
        raise InconsistentGroupProtocolError("a group with no members has no assignor to choose")
    first = min(member_protocols)
    for protocol in member_protocols[first]:
        if protocol in ASSIGNORS and all(
            protocol in protocols for protocols in member_protocols.values()
        ):
            return protocol
    shown = sorted(member_protocols)[:_ERROR_MEMBERS_SHOWN_MAX]
    listed = ", ".join(f"{m!r}: {list(member_protocols[m])}" for m in shown)
    more = len(member_protocols) - len(shown)
    if more:
        listed += f", and {more} more"
    raise InconsistentGroupProtocolError(
        f"no assignor is supported by all {len(member_protocols)} members "
        f"(known: {sorted(ASSIGNORS)}); members list {{{listed}}}"
    )
