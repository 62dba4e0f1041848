"""GroupState (raftlog/metadata/groups.py) for Kafka's classic groups, through its public
methods: the leader member, the protocol vote, CompletingRebalance until the leader's
SyncGroup, Kafka's commit and heartbeat rules, and the refusals that keep the two kinds of
group apart. raftlog's own groups are in test_group_state.py."""

from __future__ import annotations

from typing import Any

import pytest

from raftlog.errors import (
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from raftlog.metadata.groups import (
    GroupInvariantError,
    GroupPhase,
    GroupState,
    check_commit,
    heartbeat,
)

TIMEOUT_MS = 1_000
COUNTS = {"t": 4}
CONSUMER = "consumer"


def partitions(topic: str) -> int | None:
    return COUNTS.get(topic)


def kafka_member(
    member_id: str = "",
    now_ms: int = 0,
    protocols: tuple[tuple[str, bytes], ...] = (("range", b"sub-range"),),
    instance_id: str | None = None,
) -> dict[str, Any]:
    return {
        "member_id": member_id,
        "client_id": "k",
        "instance_id": instance_id,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": TIMEOUT_MS,
        "topics": ["t"],
        "protocols": [[name, meta] for name, meta in protocols],
        "joined_ms": now_ms,
    }


def join(g: GroupState, m: dict[str, Any]) -> dict[str, Any]:
    return g.join(m, partitions, CONSUMER)


def synced_pair() -> tuple[GroupState, str, str]:
    """A Stable Kafka group of generation 2: leader k-0 and k-1, two partitions each."""
    g = GroupState("g")
    a = join(g, kafka_member())["member_id"]
    b = join(g, kafka_member(now_ms=1))["member_id"]
    join(g, kafka_member(a, now_ms=2))
    assert (g.phase, g.generation, g.leader) == (GroupPhase.COMPLETING_REBALANCE, 2, a)
    assert g.sync(b, 2, None, partitions) is None  # waits for the leader
    assignments = {a: (b"A", [["t", 0], ["t", 1]]), b: (b"B", [["t", 2], ["t", 3]])}
    assert g.sync(a, 2, assignments, partitions) == b"A"
    return g, a, b


def test_the_first_member_leads_and_gets_every_members_metadata() -> None:
    g = GroupState("g")
    view = join(g, kafka_member(now_ms=5))
    a = view["member_id"]
    assert g.protocol_type == CONSUMER and g.leader == a
    assert (view["state"], view["generation"], view["protocol"]) == (
        "CompletingRebalance",
        1,
        "range",
    )
    assert view["leader"] == a and view["members"] == [[a, None, b"sub-range"]]
    assert g.rebalance_deadline_ms == 5 + TIMEOUT_MS  # the leader's SyncGroup is awaited


def test_the_leaders_sync_makes_the_group_stable_and_others_get_their_bytes() -> None:
    g, a, b = synced_pair()
    assert g.phase is GroupPhase.STABLE and g.rebalance_deadline_ms is None
    assert g.assignment == {a: [["t", 0], ["t", 1]], b: [["t", 2], ["t", 3]]}
    assert g.sync(b, 2, None, partitions) == b"B"
    # Only the leader is shown the members; the others get an empty list.
    assert g.member_view(b)["members"] == [] and len(g.member_view(a)["members"]) == 2


def test_the_protocol_is_chosen_by_votes_with_ties_to_the_smallest_name() -> None:
    g = GroupState("g")
    a = join(g, kafka_member(protocols=(("roundrobin", b"r"), ("range", b"x"))))["member_id"]
    b = join(g, kafka_member(now_ms=1, protocols=(("range", b"y"), ("roundrobin", b"s"))))[
        "member_id"
    ]
    join(g, kafka_member(a, now_ms=2, protocols=(("roundrobin", b"r"), ("range", b"x"))))
    assert g.protocol == "range"  # one vote each: the tie goes to the smaller name
    assert g.member_view(a)["members"] == [[a, None, b"x"], [b, None, b"y"]]


def test_members_that_share_no_protocol_or_another_protocol_type_are_refused() -> None:
    g = GroupState("g")
    join(g, kafka_member())
    with pytest.raises(InconsistentGroupProtocolError, match="share no protocol"):
        join(g, kafka_member(protocols=(("cooperative-sticky", b""),)))
    native = {**kafka_member(), "protocols": ["range"]}
    with pytest.raises(InconsistentGroupProtocolError, match="Kafka 'consumer' group"):
        g.join(native, partitions)
    assert len(g.members) == 1  # nothing changed
    r = GroupState("r")
    r.join(native, partitions)
    with pytest.raises(InconsistentGroupProtocolError, match="is a raftlog group"):
        join(r, kafka_member())


def test_sync_refusals() -> None:
    g, a, b = synced_pair()
    with pytest.raises(IllegalGenerationError, match="generation 1"):
        g.sync(b, 1, None, partitions)
    with pytest.raises(UnknownMemberIdError):
        g.sync("nobody", 2, None, partitions)
    join(g, kafka_member(now_ms=10))  # a new member: a rebalance
    with pytest.raises(RebalanceInProgressError):
        g.sync(a, 2, None, partitions)
    r = GroupState("r")
    m = r.join({**kafka_member(), "protocols": ["range"]}, partitions)["member_id"]
    with pytest.raises(InconsistentGroupProtocolError, match="no SyncGroup"):
        r.sync(m, 1, None, partitions)


def test_a_partition_assigned_twice_is_refused_and_nothing_stored() -> None:
    g = GroupState("g")
    a = join(g, kafka_member())["member_id"]
    b = join(g, kafka_member(now_ms=1))["member_id"]
    join(g, kafka_member(a, now_ms=2))
    twice = {a: (b"A", [["t", 0]]), b: (b"B", [["t", 0]])}
    with pytest.raises(InvalidRequestError, match="t-0 to both"):
        g.sync(a, 2, twice, partitions)
    assert g.phase is GroupPhase.COMPLETING_REBALANCE and g.assignment_bytes == {}


def test_missing_members_get_empty_bytes_and_unknown_partitions_are_left_out() -> None:
    g = GroupState("g")
    a = join(g, kafka_member())["member_id"]
    b = join(g, kafka_member(now_ms=1))["member_id"]
    join(g, kafka_member(a, now_ms=2))
    sent = {a: (b"A", [["t", 0], ["gone", 0], ["t", 9]]), "stranger": (b"S", [["t", 1]])}
    g.sync(a, 2, sent, partitions)
    assert g.assignment == {a: [["t", 0]], b: []}
    assert g.assignment_bytes == {a: b"A", b: b""}


def test_heartbeats_and_commits_follow_kafkas_rules() -> None:
    g = GroupState("g")
    a = join(g, kafka_member())["member_id"]
    assert heartbeat("g", g, a, 1) == 1  # CompletingRebalance: the member is alive
    with pytest.raises(RebalanceInProgressError, match="SyncGroup"):
        check_commit("g", g, a, 1, [("t", 0)])
    g.sync(a, 1, {a: (b"A", [["t", 0]])}, partitions)
    # Stable: no ownership check (the leader's assignor decides), only member and generation.
    assert check_commit("g", g, a, 1, [("t", 3)]) is True
    with pytest.raises(IllegalGenerationError):
        check_commit("g", g, a, 0, [("t", 0)])
    with pytest.raises(UnknownMemberIdError):
        check_commit("g", g, "nobody", 1, [("t", 0)])


def test_the_leader_rejoining_unchanged_rebalances_another_member_does_not() -> None:
    g, a, b = synced_pair()
    join(g, kafka_member(b, now_ms=5))
    assert g.phase is GroupPhase.STABLE and g.generation == 2
    join(g, kafka_member(a, now_ms=6))
    assert g.phase is GroupPhase.PREPARING_REBALANCE
    # The generation stands until b rejoins: commits of generation 2 are still accepted.
    assert check_commit("g", g, b, 2, [("t", 2)]) is True


def test_a_member_joining_again_while_completing_gets_its_answer_again() -> None:
    g = GroupState("g")
    a = join(g, kafka_member())["member_id"]
    view = join(g, kafka_member(a, now_ms=3))
    assert (g.phase, g.generation, view["generation"]) == (
        GroupPhase.COMPLETING_REBALANCE,
        1,
        1,
    )


def test_a_leader_that_never_syncs_is_removed_at_the_deadline() -> None:
    g = GroupState("g")
    a = join(g, kafka_member())["member_id"]
    b = join(g, kafka_member(now_ms=1))["member_id"]
    join(g, kafka_member(a, now_ms=2))
    assert g.tick(2 + TIMEOUT_MS - 1, partitions) == []
    assert g.tick(2 + TIMEOUT_MS, partitions) == [a]
    assert g.phase is GroupPhase.PREPARING_REBALANCE and g.leader is None
    view = join(g, kafka_member(b, now_ms=2000))
    assert (view["leader"], view["generation"], view["state"]) == (b, 3, "CompletingRebalance")


def test_the_leader_leaving_elects_another_at_the_next_generation() -> None:
    g, a, b = synced_pair()
    assert g.leave([a], 10, partitions) == [a]
    assert g.leader is None and g.phase is GroupPhase.PREPARING_REBALANCE
    view = join(g, kafka_member(b, now_ms=11))
    assert (view["leader"], view["generation"]) == (b, 3)
    assert view["members"] == [[b, None, b"sub-range"]]


def test_the_last_leave_empties_the_group() -> None:
    g, a, b = synced_pair()
    g.leave([a, b], 10, partitions)
    assert g.phase is GroupPhase.EMPTY and g.leader is None and g.assignment_bytes == {}
    assert g.protocol_type == CONSUMER  # until another kind of member joins the empty group
    g.join({**kafka_member(), "protocols": ["range"]}, partitions)
    assert g.protocol_type == "raftlog" and g.phase is GroupPhase.STABLE


def test_a_topic_change_starts_no_rebalance_but_a_deleted_topic_leaves_the_assignment() -> None:
    g, a, b = synced_pair()
    COUNTS.pop("t")
    try:
        g.topic_changed("t", partitions)
    finally:
        COUNTS["t"] = 4
    assert g.phase is GroupPhase.STABLE and g.assignment == {a: [], b: []}


def test_the_record_round_trips_and_old_records_are_raftlog_groups() -> None:
    g, _, _ = synced_pair()
    assert GroupState.from_record(g.to_record()) == g
    old = g.to_record()
    for key in ("protocol_type", "leader", "assignment_bytes"):
        old.pop(key)
    native = GroupState.from_record({**old, "state": "Empty", "members": {}, "assignment": {}})
    assert native.protocol_type == "raftlog" and not native.client_assigned


def test_the_check_catches_a_kafka_group_without_a_leader() -> None:
    g, _, _ = synced_pair()
    g.leader = None
    with pytest.raises(GroupInvariantError, match="no leader"):
        g.check(partitions)
    g2, a, _ = synced_pair()
    g2.assignment_bytes.pop(a)
    with pytest.raises(GroupInvariantError, match="assignment bytes"):
        g2.check(partitions)
