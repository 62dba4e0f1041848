"""A consumer group's states and transitions (raftlog/metadata/groups.py), through the
replicated state machine's commands: every transition of the rebalance protocol, the timeout
path, stale-generation commits, topic changes, the invariant check, and snapshots written by
code from before the two-step rebalance."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from raftlog.errors import (
    CommitFailedError,
    GroupNotEmptyError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from raftlog.metadata import groups
from raftlog.metadata.groups import GroupState
from raftlog.metadata.state import MetadataState
from tests.unit.test_metadata_snapshot import Format1, format1_fields

TIMEOUT_MS = 10_000


def ok(state: MetadataState, name: str, /, **args: Any) -> Any:
    result = state.apply((name, args))
    assert result[0] == "ok", result
    return result[1]


def err(state: MetadataState, name: str, error: type, /, **args: Any) -> str:
    before = copy.deepcopy(state)
    result = state.apply((name, args))
    assert result[0] == "err" and result[1] == error.code, result
    assert state == before, f"refused {name} changed the state"
    return str(result[2])


def new_state(partitions: int = 4, topics: tuple[str, ...] = ("t",)) -> MetadataState:
    s = MetadataState()
    ok(
        s,
        "register_broker",
        node_id=1,
        host="h",
        port=1,
        rack=None,
        incarnation="i",
        now_ms=0,
    )
    for t in topics:
        ok(s, "create_topic", name=t, topic_id=t, partitions=partitions, replication_factor=1,
           config={})  # fmt: skip
    return s


def join(
    s: MetadataState,
    member: str = "",
    now_ms: int = 0,
    topics: tuple[str, ...] = ("t",),
    timeout_ms: int = TIMEOUT_MS,
    group_id: str = "g",
) -> dict[str, Any]:
    view: dict[str, Any] = ok(
        s,
        "join_group",
        group_id=group_id,
        member_id=member,
        client_id="c",
        instance_id=None,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=timeout_ms,
        topics=list(topics),
        protocols=["range"],
        now_ms=now_ms,
    )
    return view


def commit(s: MetadataState, member: str, generation: int, tp: list[Any]) -> Any:
    return s.apply(
        (
            "commit_offsets",
            {
                "group_id": "g",
                "member_id": member,
                "generation": generation,
                "offsets": [[*tp, 7, ""]],
                "now_ms": 1,
            },
        )
    )


def group(s: MetadataState) -> GroupState:
    return s.groups["g"]


def heartbeat(s: MetadataState, member: str, generation: int) -> int:
    return groups.heartbeat("g", s.groups.get("g"), member, generation)


def two_members(s: MetadataState) -> tuple[str, str]:
    """A Stable group of two members at generation 2; their ids."""
    a = join(s)["member_id"]
    b = join(s, now_ms=1)["member_id"]
    join(s, a, now_ms=2)
    assert group(s).phase.value == "Stable" and group(s).generation == 2
    return a, b


# -- joins -----------------------------------------------------------------------------------


def test_first_join_completes_at_once_empty_to_stable() -> None:
    s = new_state()
    view = join(s)
    assert view == {
        "member_id": "c-0",
        "generation": 1,
        "state": "Stable",
        "protocol": "range",
        "assignment": [["t", 0], ["t", 1], ["t", 2], ["t", 3]],
    }
    assert group(s).rejoined == [] and group(s).rebalance_deadline_ms is None


def test_a_second_join_prepares_and_the_old_generation_stands_until_all_rejoined() -> None:
    s = new_state()
    a = join(s)["member_id"]
    b_view = join(s, now_ms=100)
    b = b_view["member_id"]
    # The joiner waits: the group prepares, generation 1 and its assignment stand.
    assert b_view["state"] == "PreparingRebalance" and b_view["generation"] == 1
    assert b_view["assignment"] == []
    g = group(s)
    assert g.phase.value == "PreparingRebalance"
    assert g.rejoined == [b] and g.waiting_for() == [a]
    assert g.rebalance_deadline_ms == 100 + TIMEOUT_MS
    assert g.assignment[a] == [["t", 0], ["t", 1], ["t", 2], ["t", 3]]
    # The old owner learns of it from its heartbeat and commits: accepted, its generation
    # stands. The joiner owns nothing yet.
    with pytest.raises(RebalanceInProgressError, match="rebalancing"):
        heartbeat(s, a, 1)
    assert commit(s, a, 1, ["t", 3])[0] == "ok"
    assert commit(s, b, 1, ["t", 3])[1] == CommitFailedError.code
    # The old owner rejoins: the last one waited for, so generation 2 is handed out.
    again = join(s, a, now_ms=200)
    assert again["state"] == "Stable" and again["generation"] == 2
    assert groups.join_outcome("g", group(s), b, 1) == group(s).member_view(b)
    owned = sorted(again["assignment"] + group(s).assignment[b])
    assert owned == [["t", 0], ["t", 1], ["t", 2], ["t", 3]]
    assert again["assignment"] and group(s).assignment[b]
    # Commits of generation 1 are stale now, with the group, member and generation named.
    message = commit(s, a, 1, again["assignment"][0])[2]
    assert "stale" in message and repr(a) in message and "generation 1" in message
    assert heartbeat(s, a, 2) == 2


def test_join_outcome_waits_then_answers_or_says_the_member_is_gone() -> None:
    s = new_state()
    a = join(s)["member_id"]
    b = join(s)["member_id"]
    assert groups.join_outcome("g", group(s), b, 1) is None  # still waiting for a
    ok(s, "leave_group", group_id="g", member_ids=[b], now_ms=5)
    with pytest.raises(UnknownMemberIdError, match="generation 1"):
        groups.join_outcome("g", group(s), b, 1)
    # The joiner left before the old member rejoined: the group still waits for that one.
    assert group(s).phase.value == "PreparingRebalance" and group(s).waiting_for() == [a]


def test_a_member_joining_again_unchanged_into_a_stable_group_changes_nothing() -> None:
    s = new_state()
    a, _ = two_members(s)
    before = copy.deepcopy(group(s))
    view = join(s, a, now_ms=50)
    assert view["state"] == "Stable" and view["generation"] == 2
    assert view["assignment"] == before.assignment[a]
    before.members[a]["joined_ms"] = 50
    assert group(s) == before


def test_a_changed_subscription_rebalances_and_gives_up_the_dropped_topics_at_once() -> None:
    s = new_state(partitions=2, topics=("t", "u"))
    a = join(s, topics=("t", "u"))["member_id"]
    assert len(group(s).assignment[a]) == 4
    b = join(s, topics=("t", "u"))["member_id"]
    join(s, a, topics=("t", "u"))
    # b now wants only "u": its "t" partitions have no owner until the rebalance completes.
    view = join(s, b, topics=("u",))
    assert view["state"] == "PreparingRebalance"
    assert all(t == "u" for t, _ in group(s).assignment[b])
    join(s, a, topics=("t", "u"))
    assert group(s).phase.value == "Stable"
    assert all(t == "u" for t, _ in group(s).assignment[b])


# -- leaves and expiry -----------------------------------------------------------------------


def test_a_leave_prepares_and_the_survivor_takes_over_after_rejoining() -> None:
    s = new_state()
    a, b = two_members(s)
    b_owned = group(s).assignment[b]
    assert ok(s, "leave_group", group_id="g", member_ids=[b], now_ms=10) == 1
    g = group(s)
    assert g.phase.value == "PreparingRebalance" and g.generation == 2
    assert b not in g.assignment and g.waiting_for() == [a]
    assert g.rebalance_deadline_ms == 10 + TIMEOUT_MS
    # The survivor keeps committing its own partitions of generation 2 meanwhile.
    assert commit(s, a, 2, g.assignment[a][0])[0] == "ok"
    assert commit(s, a, 2, b_owned[0])[1] == CommitFailedError.code
    view = join(s, a, now_ms=20)
    assert view["generation"] == 3 and len(view["assignment"]) == 4


def test_the_last_member_leaving_empties_the_group_and_moves_the_generation() -> None:
    s = new_state()
    a = join(s)["member_id"]
    ok(s, "leave_group", group_id="g", member_ids=[a, a, "ghost"])  # no now_ms: older code
    g = group(s)
    assert g.phase.value == "Empty" and g.generation == 2
    assert g.members == {} and g.assignment == {} and g.protocol is None
    assert commit(s, a, 1, ["t", 0])[1] == CommitFailedError.code
    # An Empty group takes standalone commits again (generation -1), and can be deleted.
    assert commit(s, "", -1, ["t", 0])[0] == "ok"
    ok(s, "delete_group", group_id="g")
    assert "g" not in s.groups


def test_a_leave_of_the_last_member_waited_for_completes_the_rebalance() -> None:
    s = new_state()
    a, b = two_members(s)
    c = join(s)["member_id"]  # prepares; c rejoined, a and b are waited for
    join(s, a)
    assert group(s).waiting_for() == [b]
    ok(s, "leave_group", group_id="g", member_ids=[b], now_ms=30)
    g = group(s)
    assert g.phase.value == "Stable" and g.generation == 3
    assert sorted(g.assignment) == [a, c]


def test_reset_and_delete_need_an_empty_group() -> None:
    s = new_state()
    a = join(s)["member_id"]
    join(s)
    assert group(s).phase.value == "PreparingRebalance"
    err(s, "reset_offsets", GroupNotEmptyError, group_id="g", offsets=[["t", 0, 0]], now_ms=1)
    err(s, "delete_group", GroupNotEmptyError, group_id="g")
    ok(s, "leave_group", group_id="g", member_ids=[a, "c-1"], now_ms=1)
    assert group(s).phase.value == "Empty"
    ok(s, "reset_offsets", group_id="g", offsets=[["t", 0, 0]], now_ms=1)


# -- the rebalance deadline (tick_group) -----------------------------------------------------


def test_at_the_deadline_members_that_did_not_rejoin_are_removed() -> None:
    s = new_state()
    a = join(s, now_ms=0)["member_id"]
    b = join(s, now_ms=1_000)["member_id"]
    deadline = 1_000 + TIMEOUT_MS
    assert group(s).rebalance_deadline_ms == deadline
    # Before the deadline a tick changes nothing (and is not refused).
    before = copy.deepcopy(s.groups)
    assert ok(s, "tick_group", group_id="g", now_ms=deadline - 1) == []
    assert s.groups == before
    # At it, a (which never rejoined) is removed and b gets every partition.
    assert ok(s, "tick_group", group_id="g", now_ms=deadline) == [a]
    g = group(s)
    assert g.phase.value == "Stable" and g.generation == 2 and sorted(g.members) == [b]
    assert len(g.assignment[b]) == 4
    assert groups.join_outcome("g", g, b, 1)["assignment"] == g.assignment[b]  # type: ignore[index]
    # a's late commit and heartbeat are refused: it is no member any more.
    assert "not a member" in commit(s, a, 1, ["t", 0])[2]
    with pytest.raises(UnknownMemberIdError):
        heartbeat(s, a, 1)
    # A tick of a Stable group changes nothing either.
    assert ok(s, "tick_group", group_id="g", now_ms=deadline + 10**6) == []


def test_a_deadline_with_nobody_rejoined_empties_the_group() -> None:
    s = new_state()
    a, b = two_members(s)
    ok(s, "leave_group", group_id="g", member_ids=[b], now_ms=0)
    assert ok(s, "tick_group", group_id="g", now_ms=TIMEOUT_MS) == [a]
    assert group(s).phase.value == "Empty" and group(s).generation == 3


def test_a_topic_change_prepares_without_a_deadline_and_the_first_tick_sets_it() -> None:
    s = new_state(partitions=2)
    a = join(s, topics=("t", "later"))["member_id"]
    assert len(group(s).assignment[a]) == 2
    ok(s, "create_topic", name="later", topic_id="l", partitions=3, replication_factor=1,
       config={})  # fmt: skip
    g = group(s)
    assert g.phase.value == "PreparingRebalance" and g.rebalance_deadline_ms is None
    assert ok(s, "tick_group", group_id="g", now_ms=500) == []
    assert g.rebalance_deadline_ms == 500 + TIMEOUT_MS
    view = join(s, a, topics=("t", "later"))
    assert view["generation"] == 2 and len(view["assignment"]) == 5
    # A topic nobody subscribes to changes nothing.
    ok(s, "create_topic", name="other", topic_id="o", partitions=1, replication_factor=1,
       config={})  # fmt: skip
    assert group(s).phase.value == "Stable"


def test_a_deleted_topic_leaves_the_assignment_at_once() -> None:
    s = new_state(partitions=2, topics=("t", "u"))
    a = join(s, topics=("t", "u"))["member_id"]
    ok(s, "delete_topic", name="u")
    g = group(s)
    assert g.phase.value == "PreparingRebalance"
    assert g.assignment[a] == [["t", 0], ["t", 1]]
    assert commit(s, a, 1, ["u", 0])[1] == CommitFailedError.code
    join(s, a, topics=("t", "u"))
    assert group(s).phase.value == "Stable" and group(s).assignment[a] == [["t", 0], ["t", 1]]


# -- snapshots of older code -----------------------------------------------------------------


def old_format(s: MetadataState) -> Format1:
    """`s` as code from before the two-step rebalance pickled it: group records without
    "state", "rejoined" and "rebalance_deadline_ms" (the fields it did not have)."""
    fields = format1_fields(s)
    for g in fields["groups"].values():
        for field in ("state", "rejoined", "rebalance_deadline_ms"):
            del g[field]
    return Format1(fields)


def test_a_snapshot_of_older_code_loads_and_behaves() -> None:
    s = new_state()
    a, b = two_members(s)
    ok(s, "commit_offsets", group_id="o", member_id="", generation=-1,
       offsets=[["t", 0, 3, ""]], now_ms=1)  # fmt: skip
    blob = pickle.dumps(old_format(s), protocol=2)  # pysyncobj pickles with protocol 2
    loaded = pickle.loads(blob)
    assert loaded == s  # upgraded on load: Stable with members, Empty without
    assert loaded.groups["g"].phase.value == "Stable" and loaded.groups["o"].phase.value == "Empty"
    # It goes on as a group of today's code does: commits, then a two-step rebalance.
    assert commit(loaded, a, 2, loaded.groups["g"].assignment[a][0])[0] == "ok"
    assert ok(loaded, "leave_group", group_id="g", member_ids=[b], now_ms=5) == 1
    assert loaded.groups["g"].phase.value == "PreparingRebalance"
    assert join(loaded, a)["generation"] == 3
    assert len(loaded.groups["g"].assignment[a]) == 4


def test_a_static_member_removed_at_the_deadline_gets_its_id_back() -> None:
    """Unlike Kafka, a static member (instance id) that does not rejoin in time is removed like
    the others; joining again with its instance id it gets its member id back."""
    s = new_state()

    def join_static(member: str, now_ms: int) -> dict[str, Any]:
        view: dict[str, Any] = ok(
            s, "join_group", group_id="g", member_id=member, client_id="c", instance_id="i1",
            session_timeout_ms=10_000, rebalance_timeout_ms=TIMEOUT_MS, topics=["t"],
            protocols=["range"], now_ms=now_ms,
        )  # fmt: skip
        return view

    a = join_static("", 0)["member_id"]
    b = join(s, now_ms=0)["member_id"]
    assert ok(s, "tick_group", group_id="g", now_ms=TIMEOUT_MS) == [a]
    assert sorted(group(s).members) == [b] and group(s).generation == 2
    view = join_static(a, TIMEOUT_MS + 1)
    assert view["member_id"] == a and view["state"] == "PreparingRebalance"
    assert join(s, b)["generation"] == 3
    assert sorted(group(s).assignment) == [a, b]
