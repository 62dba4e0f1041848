"""GroupState (raftlog/metadata/groups.py) through its public methods: each transition, its
refusals, the phase table, and each invariant its closing check enforces. The same rules
through the replicated commands are in test_groups.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from raftlog.errors import (
    GroupNotEmptyError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    UnknownMemberIdError,
)
from raftlog.metadata.groups import GroupInvariantError, GroupPhase, GroupState

TIMEOUT_MS = 1_000
COUNTS = {"t": 4, "u": 2}


def partitions(topic: str) -> int | None:
    return COUNTS.get(topic)


def member(
    member_id: str = "",
    topics: tuple[str, ...] = ("t",),
    now_ms: int = 0,
    protocols: tuple[str, ...] = ("range",),
    instance_id: str | None = None,
) -> dict[str, Any]:
    return {
        "member_id": member_id,
        "client_id": "c",
        "instance_id": instance_id,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": TIMEOUT_MS,
        "topics": sorted(topics),
        "protocols": list(protocols),
        "joined_ms": now_ms,
    }


def two_members() -> tuple[GroupState, str, str]:
    """A Stable group of generation 2 with members c-0 and c-1."""
    g = GroupState("g")
    a = g.join(member(), partitions)["member_id"]
    b = g.join(member(now_ms=1), partitions)["member_id"]
    g.join(member(a, now_ms=2), partitions)
    assert (g.phase, g.generation) == (GroupPhase.STABLE, 2)
    return g, a, b


def test_a_first_join_completes_at_once() -> None:
    g = GroupState("g")
    view = g.join(member(), partitions)
    assert view == g.member_view("c-0")
    assert (view["generation"], view["state"], view["protocol"]) == (1, "Stable", "range")
    assert view["assignment"] == [["t", p] for p in range(4)]
    assert g.next_member == 1 and g.waiting_for() == []


def test_a_second_join_prepares_and_waits_for_the_first() -> None:
    g = GroupState("g")
    a = g.join(member(), partitions)["member_id"]
    view = g.join(member(now_ms=100), partitions)
    assert view["state"] == "PreparingRebalance" and view["assignment"] == []
    assert g.waiting_for() == [a] and g.rejoined == [view["member_id"]]
    assert g.rebalance_deadline_ms == 100 + TIMEOUT_MS
    assert len(g.assignment[a]) == 4  # the old generation stands
    g.join(member(a, now_ms=150), partitions)
    assert g.phase is GroupPhase.STABLE and g.generation == 2
    assert sorted(len(owned) for owned in g.assignment.values()) == [2, 2]


def test_an_unchanged_join_into_a_stable_group_changes_only_the_member_record() -> None:
    g, a, _ = two_members()
    before = copy.deepcopy(g)
    g.join(member(a, now_ms=50), partitions)
    before.members[a]["joined_ms"] = 50
    assert g == before


def test_join_refusals_change_nothing() -> None:
    g, _, _ = two_members()
    before = copy.deepcopy(g)
    with pytest.raises(InvalidRequestError, match="at least one assignor"):
        g.join(member(protocols=()), partitions)
    with pytest.raises(UnknownMemberIdError):
        g.join(member("ghost"), partitions)
    with pytest.raises(InconsistentGroupProtocolError):
        g.join(member(protocols=("roundrobin",)), partitions)
    assert g == before


def test_a_static_member_gets_its_member_id_back() -> None:
    g = GroupState("g")
    a = g.join(member(instance_id="i1"), partitions)["member_id"]
    view = g.join(member(instance_id="i1", now_ms=5), partitions)
    assert view["member_id"] == a and g.next_member == 1


def test_leave_removes_members_once_and_rebalances() -> None:
    g, a, b = two_members()
    assert g.leave([b, b, "ghost"], 10, partitions) == [b]
    # a had not rejoined: the rebalance waits for it.
    assert g.phase is GroupPhase.PREPARING_REBALANCE and g.waiting_for() == [a]
    assert b not in g.assignment and g.rebalance_deadline_ms == 10 + TIMEOUT_MS
    assert g.leave(["ghost"], 11, partitions) == []
    assert g.leave([a], 12, partitions) == [a]
    assert (g.phase, g.generation, g.protocol, g.assignment) == (GroupPhase.EMPTY, 3, None, {})


def test_a_leave_without_time_waits_for_the_tick_to_set_the_deadline() -> None:
    g, _, b = two_members()
    g.leave([b], None, partitions)
    assert g.rebalance_deadline_ms is None
    assert g.tick(500, partitions) == []
    assert g.rebalance_deadline_ms == 500 + TIMEOUT_MS


def test_tick_completes_at_the_deadline_without_the_late_members() -> None:
    g, a, b = two_members()
    c = g.join(member(now_ms=0), partitions)["member_id"]
    assert g.tick(TIMEOUT_MS - 1, partitions) == []  # before the deadline: nothing
    assert g.tick(TIMEOUT_MS, partitions) == [a, b]
    assert (g.phase, g.generation, sorted(g.members)) == (GroupPhase.STABLE, 3, [c])
    assert g.tick(TIMEOUT_MS * 5, partitions) == []  # not rebalancing: nothing


def test_a_topic_change_rebalances_subscribers_only() -> None:
    g, _, _ = two_members()
    other = GroupState("o")
    other.join(member(topics=("u",)), partitions)
    g.topic_changed("u", partitions)
    assert g.phase is GroupPhase.STABLE  # nobody subscribes to u
    other.topic_changed("u", partitions)
    assert other.phase is GroupPhase.PREPARING_REBALANCE
    assert other.rebalance_deadline_ms is None  # the next tick starts it


def test_a_deleted_topic_leaves_the_assignment_at_once() -> None:
    g = GroupState("g")
    a = g.join(member(topics=("t", "u")), partitions)["member_id"]
    counts = {"t": 4}
    g.topic_changed("u", counts.get)
    assert g.phase is GroupPhase.PREPARING_REBALANCE
    assert all(t == "t" for t, _ in g.assignment[a])


def test_delete_only_an_empty_group() -> None:
    g, _, _ = two_members()
    with pytest.raises(GroupNotEmptyError):
        g.delete()
    empty = GroupState("e")
    empty.delete()
    assert empty.phase is GroupPhase.DEAD


def test_the_phases_are_kafkas() -> None:
    assert [p.value for p in GroupPhase] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]


@pytest.mark.parametrize(
    "phase", [GroupPhase.PREPARING_REBALANCE, GroupPhase.STABLE, GroupPhase.DEAD]
)
def test_dead_only_from_empty(phase: GroupPhase) -> None:
    with pytest.raises(GroupInvariantError, match=f"no transition from {phase.value} to Dead"):
        GroupState("g", phase=phase).delete()


def test_the_record_round_trips_and_one_of_older_code_loads() -> None:
    g, _, b = two_members()
    g.leave([b], 7, partitions)
    assert GroupState.from_record(g.to_record()) == g
    record = GroupState("o").to_record()
    assert record["state"] == "Empty"
    stable = two_members()[0].to_record()
    for field in ("state", "rejoined", "rebalance_deadline_ms"):
        del stable[field], record[field]
    assert GroupState.from_record(stable).phase is GroupPhase.STABLE  # members: it was Stable
    assert GroupState.from_record(record) == GroupState("o")


# -- the closing check -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "breakage",
    [
        "two owners",
        "no owner",
        "assignment to a stranger",
        "rejoined outside a rebalance",
        "deadline outside a rebalance",
        "empty with members",
        "empty with a protocol",
        "unsubscribed partition",
        "partition out of range",
        "unsorted rejoined",
        "completing",
    ],
)
def test_the_closing_check_finds_a_broken_group(breakage: str) -> None:
    g, a, b = two_members()
    if breakage == "two owners":
        g.assignment[b].append(g.assignment[a][0])
    elif breakage == "no owner":
        g.assignment[b] = []
    elif breakage == "assignment to a stranger":
        g.assignment["ghost"] = []
    elif breakage == "rejoined outside a rebalance":
        g.rejoined = [a]
    elif breakage == "deadline outside a rebalance":
        g.rebalance_deadline_ms = 5
    elif breakage == "empty with members":
        g.phase = GroupPhase.EMPTY
    elif breakage == "empty with a protocol":
        g = GroupState("g", protocol="range")
    elif breakage == "unsubscribed partition":
        g.members[a]["topics"] = ["u"]
    elif breakage == "partition out of range":
        g.assignment[a].append(["t", 9])
    elif breakage == "unsorted rejoined":
        g.leave([], 0, partitions)
        g.phase = GroupPhase.PREPARING_REBALANCE
        g.rejoined = [b, a]
    else:
        g.phase = GroupPhase.COMPLETING_REBALANCE
    with pytest.raises(GroupInvariantError, match="group 'g'"):
        # Transitions that change nothing here still end in the check.
        g.tick(0, partitions)
