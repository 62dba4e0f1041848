"""Partition assignors: complete, exclusive, balanced, sticky, and deterministic across processes.

The assignors run inside the Raft state machine, so besides the usual invariants every test here
also cares that equal inputs give equal outputs whatever the dicts' insertion order and whatever
PYTHONHASHSEED the process started with.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog.errors import RaftlogError, error_class
from raftlog.metadata.assignors import (
    ASSIGNORS,
    Assignment,
    InconsistentGroupProtocolError,
    choose_assignor,
    range_assign,
    round_robin_assign,
    sticky_assign,
)

Pair = tuple[str, int]
Subs = dict[str, list[str]]
Ppt = dict[str, int]
Current = dict[str, list[Pair]]

# Upper and lower case, so that code-point order (Z < a) is exercised; "ghost" never exists.
TOPICS = ["Z", "a", "b", "c.x"]
TOPIC_POOL = [*TOPICS, "ghost"]
MEMBER_IDS = st.text(alphabet="abAB-_0", min_size=1, max_size=3)


@st.composite
def groups(draw: st.DrawFn, identical: bool = False, members_min: int = 0) -> tuple[Subs, Ppt]:
    """(subscriptions, partitions_per_topic); subscriptions may name topics that do not exist."""
    ppt = draw(st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 7), max_size=len(TOPICS)))
    members = draw(st.lists(MEMBER_IDS, min_size=members_min, max_size=6, unique=True))
    topic_lists = st.lists(st.sampled_from(TOPIC_POOL), max_size=6)  # duplicates allowed
    if identical:
        topics = draw(topic_lists)
        return {m: list(topics) for m in members}, ppt
    return {m: draw(topic_lists) for m in members}, ppt


@st.composite
def currents(draw: st.DrawFn, subs: Subs, ppt: Ppt) -> Current:
    """A previous assignment with everything that can go stale: members that left, partitions
    claimed twice, deleted topics, partitions that no longer exist, unsubscribed topics."""
    owners = [*sorted(subs), "gone"]
    current: Current = {}
    for topic in sorted(ppt):
        for partition in range(ppt[topic]):
            for member in draw(st.lists(st.sampled_from(owners), max_size=2)):
                current.setdefault(member, []).append((topic, partition))
    garbage = st.tuples(st.sampled_from(owners), st.sampled_from(TOPIC_POOL), st.integers(-1, 9))
    for member, topic, partition in draw(st.lists(garbage, max_size=8)):
        current.setdefault(member, []).append((topic, partition))
    return current


def reordered(subs: Subs, ppt: Ppt, current: Current, rnd: random.Random) -> tuple[Any, ...]:
    """The same values with every dict and list built in another order."""

    def shuffled(items: Sequence[Any]) -> list[Any]:
        out = list(items)
        rnd.shuffle(out)
        return out

    return (
        {m: shuffled(subs[m]) for m in shuffled(list(subs))},
        {t: ppt[t] for t in shuffled(list(ppt))},
        {m: shuffled(current[m]) for m in shuffled(list(current))},
    )


def assignable(subs: Mapping[str, Sequence[str]], ppt: Mapping[str, int]) -> set[Pair]:
    return {(t, p) for topics in subs.values() for t in topics if t in ppt for p in range(ppt[t])}


def check_complete_and_exclusive(result: Assignment, subs: Subs, ppt: Ppt) -> None:
    assert list(result) == sorted(subs), "every member present, in sorted order"
    seen: list[Pair] = []
    for member, pairs in result.items():
        assert pairs == sorted(pairs), f"{member}'s list is not sorted"
        for pair in pairs:
            assert type(pair) is tuple and type(pair[0]) is str and type(pair[1]) is int
            assert pair[0] in subs[member], f"{pair} given to {member}, not subscribed"
        seen.extend(pairs)
    assert len(seen) == len(set(seen)), "a partition was assigned twice"
    assert set(seen) == assignable(subs, ppt)


def counts(result: Assignment) -> list[int]:
    return [len(pairs) for pairs in result.values()]


def assert_locally_balanced(result: Assignment, subs: Subs) -> None:
    """No member holds a partition that an eligible member with >= 2 fewer could take."""
    for a, held in result.items():
        for b, other in result.items():
            if len(held) >= len(other) + 2:
                movable = [pair for pair in held if pair[0] in subs[b]]
                assert not movable, (
                    f"{a} ({len(held)}) could give {movable[0]} to {b} ({len(other)})"
                )


def owner_of(result: Assignment) -> dict[Pair, str]:
    return {pair: member for member, pairs in result.items() for pair in pairs}


def kept_owners(subs: Subs, ppt: Ppt, current: Current) -> dict[Pair, str]:
    """An independent statement of which current pairs are valid, and whose they stay."""
    claimants: dict[Pair, list[str]] = {}
    for member, pairs in current.items():
        for topic, partition in pairs:
            if member in subs and topic in subs[member] and 0 <= partition < ppt.get(topic, 0):
                claimants.setdefault((topic, partition), []).append(member)
    return {pair: min(members) for pair, members in claimants.items()}


def minimal_moves(kept_counts: Sequence[int], total: int) -> int:
    """The fewest kept partitions any balanced assignment of `total` partitions to
    len(kept_counts) members with identical subscriptions must take away from their owners:
    the members keeping most get the (total % members) places of size q+1."""
    q, r = divmod(total, len(kept_counts))
    ordered = sorted(kept_counts, reverse=True)
    targets = [q + 1] * r + [q] * (len(ordered) - r)
    return sum(max(0, c - t) for c, t in zip(ordered, targets, strict=True))


def moved(result: Assignment, before: Mapping[Pair, str]) -> int:
    after = owner_of(result)
    return sum(1 for pair, member in before.items() if after[pair] != member)


ALL = sorted(ASSIGNORS.items())
IDS = [name for name, _ in ALL]


# --- invariants of all three -------------------------------------------------------------------


@pytest.mark.parametrize(("name", "assign"), ALL, ids=IDS)
@given(data=st.data())
def test_complete_exclusive_and_subscribed_only(name: str, assign: Any, data: Any) -> None:
    subs, ppt = data.draw(groups())
    current = data.draw(currents(subs, ppt))
    inputs_before = pickle.dumps((subs, ppt, current))
    check_complete_and_exclusive(assign(subs, ppt, current), subs, ppt)
    assert pickle.dumps((subs, ppt, current)) == inputs_before, "an input was modified"


@pytest.mark.parametrize(("name", "assign"), ALL, ids=IDS)
@given(data=st.data(), rnd=st.randoms(use_true_random=False))
def test_deterministic_whatever_the_insertion_order(
    name: str, assign: Any, data: Any, rnd: random.Random
) -> None:
    subs, ppt = data.draw(groups())
    current = data.draw(currents(subs, ppt))
    first = assign(subs, ppt, current)
    assert assign(subs, ppt, current) == first
    other = assign(*reordered(subs, ppt, current, rnd))
    assert list(other.items()) == list(first.items())
    # What a replica would store or send: the same bytes, and a pickle that round-trips.
    assert msgpack.packb(other) == msgpack.packb(first)
    assert pickle.loads(pickle.dumps(first)) == first


@pytest.mark.parametrize(("name", "assign"), ALL, ids=IDS)
def test_no_members_no_topics(name: str, assign: Any) -> None:
    assert assign({}, {"t": 3}, {}) == {}
    assert assign({"m": ["ghost"]}, {"t": 3}, {"m": [("t", 0)]}) == {"m": []}
    assert assign({"m": ["t"]}, {"t": 0}, {}) == {"m": []}


# --- balance -----------------------------------------------------------------------------------


@given(groups(identical=True, members_min=1))
def test_range_is_balanced_per_topic(group: tuple[Subs, Ppt]) -> None:
    subs, ppt = group
    result = range_assign(subs, ppt)
    for topic in assignable(subs, ppt):
        per_member = [sum(1 for t, _ in pairs if t == topic[0]) for pairs in result.values()]
        assert max(per_member) - min(per_member) <= 1


@pytest.mark.parametrize(
    "assign", [round_robin_assign, sticky_assign], ids=["roundrobin", "sticky"]
)
@given(data=st.data())
def test_identical_subscriptions_are_balanced(assign: Any, data: Any) -> None:
    subs, ppt = data.draw(groups(identical=True, members_min=1))
    current = data.draw(currents(subs, ppt))
    sizes = counts(assign(subs, ppt, current))
    assert max(sizes) - min(sizes) <= 1, sizes


@given(groups(identical=True, members_min=1))
def test_sticky_from_nothing_is_balanced(group: tuple[Subs, Ppt]) -> None:
    subs, ppt = group
    sizes = counts(sticky_assign(subs, ppt, {}))
    assert max(sizes) - min(sizes) <= 1, sizes


@given(data=st.data())
def test_sticky_is_locally_balanced_for_any_subscriptions(data: Any) -> None:
    subs, ppt = data.draw(groups())
    current = data.draw(st.one_of(st.just({}), currents(subs, ppt)))
    result = sticky_assign(subs, ppt, current)
    assert_locally_balanced(result, subs)
    # A consequence worth its own line: members with the same topics differ by at most one.
    for a in result:
        for b in result:
            if set(subs[a]) == set(subs[b]):
                assert abs(len(result[a]) - len(result[b])) <= 1


# --- stickiness --------------------------------------------------------------------------------


@st.composite
def balanced_groups(draw: st.DrawFn) -> tuple[Subs, Ppt, Current]:
    """Identical subscriptions and a balanced current assignment dealt in a random order."""
    subs, ppt = draw(groups(identical=True, members_min=2))
    pairs = draw(st.permutations(sorted(assignable(subs, ppt))))
    members = draw(st.permutations(sorted(subs)))
    current: Current = {m: [] for m in members}
    for i, pair in enumerate(pairs):
        current[members[i % len(members)]].append(pair)
    return subs, ppt, current


@given(balanced_groups(), st.data())
def test_sticky_member_leaves_only_its_partitions_move(
    group: tuple[Subs, Ppt, Current], data: Any
) -> None:
    subs, ppt, current = group
    leaver = data.draw(st.sampled_from(sorted(subs)))
    staying = {m: t for m, t in subs.items() if m != leaver}
    result = sticky_assign(staying, ppt, current)
    for member in staying:
        assert set(current[member]) <= set(result[member]), f"{member} lost a partition"
    sizes = counts(result)
    assert max(sizes) - min(sizes) <= 1


@given(balanced_groups(), MEMBER_IDS)
def test_sticky_member_joins_moves_the_minimum(
    group: tuple[Subs, Ppt, Current], joiner: str
) -> None:
    subs, ppt, current = group
    if joiner in subs:
        joiner += "-new"
    joined = {**subs, joiner: list(next(iter(subs.values())))}
    result = sticky_assign(joined, ppt, current)
    before = kept_owners(joined, ppt, current)
    assert len(before) == len(assignable(subs, ppt)), "a balanced current is fully valid"
    kept_counts = [len(current.get(m, [])) for m in joined]
    assert moved(result, before) == minimal_moves(kept_counts, len(before))
    sizes = counts(result)
    assert max(sizes) - min(sizes) <= 1


@given(data=st.data())
def test_sticky_moves_the_minimum_from_any_current(data: Any) -> None:
    """Stale, unbalanced, doubly claimed: still only the unavoidable moves (identical subs)."""
    subs, ppt = data.draw(groups(identical=True, members_min=1))
    current = data.draw(currents(subs, ppt))
    before = kept_owners(subs, ppt, current)
    kept_counts = [sum(1 for owner in before.values() if owner == m) for m in subs]
    result = sticky_assign(subs, ppt, current)
    assert moved(result, before) == minimal_moves(kept_counts, len(assignable(subs, ppt)))


def test_minimal_moves_counts_what_it_should() -> None:
    # The reference the sticky tests lean on, checked by hand: 7 partitions over 3 members.
    assert minimal_moves([7, 0, 0], 7) == 4  # keeps 3
    assert minimal_moves([3, 3, 1], 7) == 1  # one of the 3s keeps 3, the other gives one
    assert minimal_moves([3, 2, 2], 7) == 0
    assert minimal_moves([0, 0, 0], 7) == 0  # nothing held: nothing to move


# --- known answers -----------------------------------------------------------------------------


def test_range_known_answers() -> None:
    assert range_assign({"m2": ["t"], "m1": ["t"]}, {"t": 5}) == {
        "m1": [("t", 0), ("t", 1), ("t", 2)],
        "m2": [("t", 3), ("t", 4)],
    }
    # Kafka's RangeAssignor javadoc: C0 gets the extra partition of both topics.
    both = ["t0", "t1"]
    assert range_assign({"C0": both, "C1": both}, {"t0": 3, "t1": 3}) == {
        "C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
        "C1": [("t0", 2), ("t1", 2)],
    }
    # Ranges are cut among the topic's subscribers only; member order is code-point order.
    assert range_assign({"b": ["t", "u"], "a": ["t"], "B": ["u"]}, {"t": 3, "u": 2}) == {
        "B": [("u", 0)],
        "a": [("t", 0), ("t", 1)],
        "b": [("t", 2), ("u", 1)],
    }


def test_round_robin_known_answers() -> None:
    # Kafka's RoundRobinAssignor javadoc, identical subscriptions.
    both = ["t0", "t1"]
    assert round_robin_assign({"C1": both, "C0": both}, {"t0": 3, "t1": 3}) == {
        "C0": [("t0", 0), ("t0", 2), ("t1", 1)],
        "C1": [("t0", 1), ("t1", 0), ("t1", 2)],
    }
    # The javadoc's example with different subscriptions: C0 <- t0, C1 <- t0,t1, C2 <- t0,t1,t2.
    subs = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    assert round_robin_assign(subs, {"t0": 1, "t1": 2, "t2": 3}) == {
        "C0": [("t0", 0)],
        "C1": [("t1", 0)],
        "C2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)],
    }


def test_sticky_known_answers() -> None:
    subs = {"a": ["t"], "b": ["t"], "c": ["t"]}
    # b and c join a that held all 7: a gives its highest partitions, to b and c in turn.
    assert sticky_assign(subs, {"t": 7}, {"a": [("t", p) for p in range(7)]}) == {
        "a": [("t", 0), ("t", 1), ("t", 2)],
        "b": [("t", 4), ("t", 6)],
        "c": [("t", 3), ("t", 5)],
    }
    # Stale entries dropped, a double claim stays with the smaller id, msgpack-style lists are
    # accepted, and the orphans go to the least loaded (ties: smaller id).
    current: Any = {
        "c": [["t", 0], ["t", 1]],
        "b": [("t", 1), ("t", 9), ("gone", 0)],
        "left": [("t", 2)],
    }
    assert sticky_assign(subs, {"t": 4}, current) == {
        "a": [("t", 2), ("t", 3)],
        "b": [("t", 1)],
        "c": [("t", 0)],
    }
    # Different subscriptions. Kept: A b3, C a0 b1; orphans b0, b2 go to A (least loaded, then
    # the smaller id). B can only take a0, from C; then A (3) gives C (1) a partition of b, and
    # it gives b2, which it has only just received, not b3, which it held before.
    subs = {"A": ["b"], "B": ["a"], "C": ["a", "b"]}
    current = {"A": [("b", 3)], "C": [("a", 0), ("b", 1)]}
    assert sticky_assign(subs, {"a": 1, "b": 4}, current) == {
        "A": [("b", 0), ("b", 3)],
        "B": [("a", 0)],
        "C": [("b", 1), ("b", 2)],
    }


# --- choosing the assignor ---------------------------------------------------------------------


def test_choose_assignor_follows_the_smallest_member() -> None:
    assert choose_assignor({"b": ["range", "sticky"], "a": ["sticky", "range"]}) == "sticky"
    assert choose_assignor({"a": ["roundrobin", "range"], "b": ["range"]}) == "range"
    # A protocol every member lists but this module lacks cannot be run by the state machine.
    assert choose_assignor({"a": ["cooperative-sticky", "range"], "b": ["range"]}) == "range"
    assert choose_assignor({"only": ["roundrobin"]}) == "roundrobin"


def test_choose_assignor_without_a_common_protocol() -> None:
    with pytest.raises(InconsistentGroupProtocolError, match=r"'a': \['range'\]") as info:
        choose_assignor({"a": ["range"], "b": ["sticky", "roundrobin"]})
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, RaftlogError)
    assert not info.value.retriable
    with pytest.raises(InconsistentGroupProtocolError, match="cooperative-sticky"):
        choose_assignor({"a": ["cooperative-sticky"], "b": ["cooperative-sticky"]})
    with pytest.raises(InconsistentGroupProtocolError, match="no members"):
        choose_assignor({})
    many = {f"m{i:02}": ["range"] for i in range(20)} | {"z": ["sticky"]}
    with pytest.raises(InconsistentGroupProtocolError, match="and 13 more"):
        choose_assignor(many)


def test_error_code_is_22_and_unique() -> None:
    assert InconsistentGroupProtocolError.code == 22
    assert error_class(22) is InconsistentGroupProtocolError

    def subclasses(cls: type[RaftlogError]) -> list[type[RaftlogError]]:
        return [c for sub in cls.__subclasses__() for c in [sub, *subclasses(sub)]]

    codes = [cls.code for cls in subclasses(RaftlogError)]
    assert len(codes) == len(set(codes)), sorted(codes)


# --- determinism across processes --------------------------------------------------------------

# Builds the same input values in every process, but in set order, which follows PYTHONHASHSEED.
BUILD_INPUTS = """
topic_set = {"orders", "clicks", "views", "audit", "payments", "t.x", "Zeta"}
member_set = {f"consumer-{i}" for i in range(7)} | {"Alpha", "beta"}
topics, members = list(topic_set), list(member_set)
t_rank = {t: i for i, t in enumerate(sorted(topic_set))}
m_rank = {m: i for i, m in enumerate(sorted(member_set))}
ppt = {t: 2 + t_rank[t] % 4 for t in topics}
subs = {m: [t for t in topics if (m_rank[m] + t_rank[t]) % 3] for m in members}
current = {
    m: [(t, p) for t in topics for p in range(6) if (m_rank[m] * 7 + t_rank[t] * 3 + p) % 5 == 0]
    for m in members
}
"""

SCRIPT = (
    BUILD_INPUTS
    + """
import json
from raftlog.metadata.assignors import ASSIGNORS
out = {name: list(assign(subs, ppt, current).items()) for name, assign in sorted(ASSIGNORS.items())}
print(json.dumps({"input_order": [members, topics], "results": out}))
"""
)


def test_same_result_under_different_hash_seeds() -> None:
    inputs: dict[str, Any] = {}
    exec(BUILD_INPUTS, inputs)
    here = {
        name: json.loads(
            json.dumps(list(assign(inputs["subs"], inputs["ppt"], inputs["current"]).items()))
        )
        for name, assign in ASSIGNORS.items()
    }
    root = Path(__file__).resolve().parents[2]
    orders = []
    for seed in ["0", "1", "2"]:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        report = json.loads(proc.stdout)
        orders.append(json.dumps(report["input_order"]))
        assert report["results"] == here, f"PYTHONHASHSEED={seed} gave another assignment"
    # Otherwise the test would prove nothing: the seeds must have shuffled the inputs.
    assert len(set(orders)) > 1, "the hash seeds did not change the input order"
