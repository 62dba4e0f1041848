"""The metadata state machine: determinism, broker fencing and leader election, ISR epochs,
groups and the offset registry's rules."""

from __future__ import annotations

import copy
import pickle
import random
import typing
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from raftlog.errors import (
    CommitFailedError,
    ElectionNotNeededError,
    FencedLeaderEpochError,
    GroupNotEmptyError,
    InconsistentGroupProtocolError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    NoReassignmentInProgressError,
    PreferredLeaderNotAvailableError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from raftlog.metadata import assignors
from raftlog.metadata.state import NO_LEADER, MetadataState


def ok(state: MetadataState, name: str, /, **args: Any) -> Any:
    result = state.apply((name, args))
    assert result[0] == "ok", result
    return result[1]


def err(state: MetadataState, name: str, error: type, /, **args: Any) -> str:
    result = state.apply((name, args))
    assert result[0] == "err" and result[1] == error.code, result
    return str(result[2])


def cluster(n: int = 3, racks: list[str | None] | None = None) -> tuple[MetadataState, dict]:
    s = MetadataState()
    epochs = {}
    for i in range(1, n + 1):
        rack = racks[i - 1] if racks else None
        epochs[i] = ok(
            s,
            "register_broker",
            node_id=i,
            host="127.0.0.1",
            port=9000 + i,
            rack=rack,
            incarnation=f"inc-{i}",
            now_ms=0,
        )
    return s, epochs


def test_topic_assignment_spreads_leaders_and_respects_racks() -> None:
    s, _ = cluster(6, racks=["a", "a", "b", "b", "c", "c"])
    ok(s, "create_topic", name="t", topic_id="id", partitions=6, replication_factor=3, config={})
    parts = s.topics["t"]["partitions"]
    leaders = [p.leader for p in parts]
    assert sorted(leaders) == [1, 2, 3, 4, 5, 6]  # one leadership per broker
    for p in parts:
        racks = {s.brokers[r]["rack"] for r in p.replicas}
        assert len(racks) == 3, p  # three replicas in three racks
        assert p.isr == p.replicas and p.leader == p.replicas[0]
    err(
        s,
        "create_topic",
        TopicAlreadyExistsError,
        name="t",
        topic_id="x",
        partitions=1,
        replication_factor=1,
        config={},
    )
    msg = err(
        s,
        "create_topic",
        InvalidReplicationFactorError,
        name="u",
        topic_id="x",
        partitions=1,
        replication_factor=7,
        config={},
    )
    assert "6 are live" in msg


def test_fencing_moves_leadership_within_the_isr_and_bumps_epochs() -> None:
    s, epochs = cluster(3)
    ok(s, "create_topic", name="t", topic_id="id", partitions=3, replication_factor=2, config={})
    led_by_1 = [i for i, p in enumerate(s.topics["t"]["partitions"]) if p.leader == 1]
    assert led_by_1
    before = copy.deepcopy(s.topics["t"]["partitions"])
    assert ok(s, "fence_broker", node_id=1, broker_epoch=epochs[1]) == len(led_by_1)
    for i, p in enumerate(s.topics["t"]["partitions"]):
        assert p.leader != 1
        assert 1 not in p.isr or p.leader == NO_LEADER
        if i in led_by_1:
            assert p.leader in before[i].isr  # never outside the ISR
            assert p.leader_epoch == before[i].leader_epoch + 1
    # A zombie with an old epoch cannot unfence itself.
    err(s, "unfence_broker", StaleBrokerEpochError, node_id=1, broker_epoch=epochs[1] - 1)


def test_a_controlled_shutdown_moves_leaderships_and_stays_fenced_until_it_registers() -> None:
    s, epochs = cluster(3)
    ok(s, "create_topic", name="t", topic_id="id", partitions=3, replication_factor=3, config={})
    led_by_2 = [i for i, p in enumerate(s.topics["t"]["partitions"]) if p.leader == 2]
    assert ok(s, "shut_down_broker", node_id=2, broker_epoch=epochs[2]) == len(led_by_2)
    assert s.brokers[2]["fenced"] and s.brokers[2]["shutting_down"]
    for p in s.topics["t"]["partitions"]:
        assert p.leader not in (2, NO_LEADER) and 2 not in p.isr
    # Its heartbeats go on until the process ends: the controller's unfence is a no-op.
    assert ok(s, "unfence_broker", node_id=2, broker_epoch=epochs[2]) == 0
    assert s.brokers[2]["fenced"]
    err(s, "shut_down_broker", StaleBrokerEpochError, node_id=2, broker_epoch=epochs[2] - 1)
    # Started again: a new registration, alive, no longer shutting down.
    ok(s, "register_broker", node_id=2, host="h", port=1, rack=None, incarnation="b", now_ms=1)
    assert not s.brokers[2]["fenced"] and not s.brokers[2].get("shutting_down", False)


def test_preferred_leaders_come_back_once_live_and_in_sync() -> None:
    s, epochs = cluster(3)
    ok(s, "create_topic", name="t", topic_id="id", partitions=6, replication_factor=3, config={})
    parts = s.topics["t"]["partitions"]
    preferred_by_2 = [p.partition for p in parts if p.replicas[0] == 2]
    assert preferred_by_2 and all(parts[i].leader == 2 for i in preferred_by_2)
    assert s.preferred_elections_due(10) == []
    ok(s, "fence_broker", node_id=2, broker_epoch=epochs[2])
    assert all(parts[i].leader != 2 for i in preferred_by_2)
    # Fenced: not a live ISR member, so not due, and an explicit election is refused.
    assert s.preferred_elections_due(10) == []
    results = ok(s, "elect_leaders", partitions=[["t", preferred_by_2[0]], ["t", 99], ["u", 0]])
    assert [r[2] for r in results] == [
        PreferredLeaderNotAvailableError.code,
        UnknownTopicOrPartitionError.code,
        UnknownTopicOrPartitionError.code,
    ], results
    # Back, but not in the ISR yet (it has to catch up first): still not due.
    ok(s, "unfence_broker", node_id=2, broker_epoch=epochs[2])
    assert all(parts[i].leader != 2 for i in preferred_by_2)
    assert s.preferred_elections_due(10) == []
    for i in preferred_by_2:
        p = parts[i]
        ok(
            s,
            "alter_isr",
            topic="t",
            partition=i,
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            partition_epoch=p.partition_epoch,
            isr=sorted([*p.isr, 2]),
        )
    due = s.preferred_elections_due(10)
    assert due == [["t", i] for i in preferred_by_2]
    # Above 100% nothing is ever due; the election itself needs no imbalance.
    assert s.preferred_elections_due(100) == []
    epochs_before = [parts[i].leader_epoch for i in preferred_by_2]
    results = ok(s, "elect_leaders", partitions=None)
    assert results == [["t", i, 0, None] for i in preferred_by_2]
    assert all(parts[i].leader == 2 for i in preferred_by_2)
    assert [parts[i].leader_epoch for i in preferred_by_2] == [e + 1 for e in epochs_before]
    again = ok(s, "elect_leaders", partitions=[["t", preferred_by_2[0]]])
    assert again[0][2] == ElectionNotNeededError.code
    assert ok(s, "elect_leaders", partitions=None) == []
    err(s, "elect_leaders", InvalidRequestError, partitions=[["t"]])


def _join_isr(s: MetadataState, topic: str, index: int, joiner: int) -> None:
    """The leader's ISR change that adds `joiner` (it caught up)."""
    p = s.topics[topic]["partitions"][index]
    ok(
        s,
        "alter_isr",
        topic=topic,
        partition=index,
        leader_id=p.leader,
        leader_epoch=p.leader_epoch,
        partition_epoch=p.partition_epoch,
        isr=[*p.isr, joiner],
    )


def test_a_reassignment_adds_replicas_then_drops_the_old_ones_once_the_new_are_in_sync() -> None:
    s, _ = cluster(5)
    ok(
        s,
        "create_topic",
        name="t",
        topic_id="id",
        partitions=1,
        replication_factor=3,
        config={"min.insync.replicas": "2"},
    )
    p = s.topics["t"]["partitions"][0]
    original, leader = list(p.replicas), p.leader
    target = [4, 5, leader]
    epoch = p.partition_epoch
    assert ok(s, "alter_partition_reassignments", reassignments=[["t", 0, target]]) == [
        ["t", 0, 0, None]
    ]
    leaving = [r for r in original if r != leader]
    assert p.replicas == target + leaving and p.adding == [4, 5] and p.removing == leaving
    assert p.isr == original and p.leader == leader and p.partition_epoch > epoch
    assert p.to_record()["adding"] == [4, 5]
    _join_isr(s, "t", 0, 4)
    assert p.reassigning and p.isr == [4, *original]  # 5 has not caught up yet
    leader_epoch = p.leader_epoch
    _join_isr(s, "t", 0, 5)
    # Complete: the leaving replicas are gone, the leader (a target replica) kept its place.
    assert p.replicas == target and p.isr == target and not p.reassigning
    assert p.leader == leader and p.leader_epoch == leader_epoch
    assert "adding" not in p.to_record()


def test_a_leaving_leader_hands_over_and_a_cancel_goes_back_to_the_original_replicas() -> None:
    s, epochs = cluster(4)
    ok(s, "create_topic", name="t", topic_id="id", partitions=2, replication_factor=3, config={})
    p0, p1 = s.topics["t"]["partitions"]
    leader = p0.leader
    others = [r for r in p0.replicas if r != leader]
    spare = next(b for b in (1, 2, 3, 4) if b not in p0.replicas)
    ok(s, "alter_partition_reassignments", reassignments=[["t", 0, [*others, spare]]])
    leader_epoch = p0.leader_epoch
    _join_isr(s, "t", 0, spare)
    assert p0.replicas == [*others, spare] and p0.leader == others[0]
    assert p0.leader_epoch == leader_epoch + 1

    # A cancel midway: back to the original replicas, the joining one out of the ISR.
    original = list(p1.replicas)
    spare1 = next(b for b in (1, 2, 3, 4) if b not in original)
    ok(s, "alter_partition_reassignments", reassignments=[["t", 1, [spare1, *original[1:]]]])
    _join_isr(s, "t", 1, spare1)
    assert not p1.reassigning  # only the first replica left: complete once spare1 joined
    before = copy.deepcopy(s)
    results = ok(
        s,
        "alter_partition_reassignments",
        reassignments=[
            ["t", 1, None],
            ["t", 7, [1, 2, 3]],
            ["t", 0, [1, 1, 2]],
            ["t", 0, [9, 1, 2]],
        ],
    )
    assert [r[2] for r in results] == [
        NoReassignmentInProgressError.code,  # nothing under way
        UnknownTopicOrPartitionError.code,
        InvalidRequestError.code,  # a broker twice
        InvalidReplicaAssignmentError.code,  # unknown broker
    ], results
    assert s.topics == before.topics  # refused entries change nothing
    moving = list(p1.replicas)
    target = [next(b for b in (1, 2, 3, 4) if b not in moving), *moving[:2]]
    ok(s, "alter_partition_reassignments", reassignments=[["t", 1, target]])
    assert p1.reassigning
    ok(s, "alter_partition_reassignments", reassignments=[["t", 1, None]])
    assert p1.replicas == moving and not p1.reassigning and p1.isr == moving
    err(s, "alter_partition_reassignments", InvalidRequestError, reassignments=[["t", 1]])
    del epochs


def test_the_replication_throttle_is_set_with_the_moves_and_kept_in_snapshots() -> None:
    s, _ = cluster(4)
    ok(s, "create_topic", name="t", topic_id="id", partitions=1, replication_factor=3, config={})
    p = s.topics["t"]["partitions"][0]
    spare = next(b for b in (1, 2, 3, 4) if b not in p.replicas)
    assert s.replication_throttle == 0
    move = [["t", 0, [spare, *p.replicas[1:]]]]
    ok(s, "alter_partition_reassignments", reassignments=move, throttle=1_000_000)
    assert s.replication_throttle == 1_000_000 and p.adding == [spare]
    restored = pickle.loads(pickle.dumps(s))
    assert restored == s and restored.replication_throttle == 1_000_000
    # Refused whole: a negative rate changes neither the throttle nor the moves.
    before = copy.deepcopy(s)
    err(
        s,
        "alter_partition_reassignments",
        InvalidRequestError,
        reassignments=[["t", 0, None]],
        throttle=-1,
    )
    assert s == before
    # Without `throttle` the rate stays; with no moves and 0 it goes (--verify's removal).
    ok(s, "alter_partition_reassignments", reassignments=[["t", 0, None]])
    assert s.replication_throttle == 1_000_000 and not p.reassigning
    ok(s, "alter_partition_reassignments", reassignments=[], throttle=0)
    assert s.replication_throttle == 0


def test_last_isr_member_fenced_means_offline_until_it_returns() -> None:
    s, epochs = cluster(1)
    ok(s, "create_topic", name="t", topic_id="id", partitions=1, replication_factor=1, config={})
    ok(s, "fence_broker", node_id=1, broker_epoch=epochs[1])
    p = s.topics["t"]["partitions"][0]
    assert p.leader == NO_LEADER and p.isr == [1] and p.leader_epoch == 1
    ok(s, "unfence_broker", node_id=1, broker_epoch=epochs[1])
    assert p.leader == 1 and p.leader_epoch == 2


def test_unclean_election_only_when_enabled() -> None:
    for unclean in (False, True):
        s, epochs = cluster(2)
        ok(
            s,
            "create_topic",
            name="t",
            topic_id="id",
            partitions=1,
            replication_factor=2,
            config={"unclean.leader.election.enable": str(unclean).lower()},
        )
        p = s.topics["t"]["partitions"][0]
        leader, other = p.replicas
        ok(
            s,
            "alter_isr",
            topic="t",
            partition=0,
            leader_id=leader,
            leader_epoch=0,
            partition_epoch=0,
            isr=[leader],
        )
        ok(s, "fence_broker", node_id=leader, broker_epoch=epochs[leader])
        assert p.leader == (other if unclean else NO_LEADER)


def test_alter_isr_needs_current_epochs() -> None:
    s, _ = cluster(3)
    ok(s, "create_topic", name="t", topic_id="id", partitions=1, replication_factor=3, config={})
    p = s.topics["t"]["partitions"][0]
    leader = p.leader
    assert (
        ok(
            s,
            "alter_isr",
            topic="t",
            partition=0,
            leader_id=leader,
            leader_epoch=0,
            partition_epoch=0,
            isr=[leader],
        )
        == 1
    )
    err(
        s,
        "alter_isr",
        InvalidUpdateVersionError,
        topic="t",
        partition=0,
        leader_id=leader,
        leader_epoch=0,
        partition_epoch=0,
        isr=p.replicas,
    )
    err(
        s,
        "alter_isr",
        FencedLeaderEpochError,
        topic="t",
        partition=0,
        leader_id=leader,
        leader_epoch=5,
        partition_epoch=1,
        isr=p.replicas,
    )


def join_args(
    member: str = "",
    instance: str | None = None,
    topics: tuple[str, ...] = ("t",),
    proto: str = "range",
) -> dict[str, Any]:
    return {
        "group_id": "g",
        "member_id": member,
        "client_id": "c",
        "instance_id": instance,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "topics": list(topics),
        "protocols": [proto],
        "now_ms": 0,
    }


def join(
    s: MetadataState,
    member: str = "",
    instance: str | None = None,
    topics: tuple[str, ...] = ("t",),
    proto: str = "range",
) -> dict:
    return ok(s, "join_group", **join_args(member, instance, topics, proto))


def test_group_generations_and_commit_rules() -> None:
    s, _ = cluster(1)
    ok(s, "create_topic", name="t", topic_id="id", partitions=4, replication_factor=1, config={})
    a = join(s)
    assert a["generation"] == 1 and len(a["assignment"]) == 4
    b = join(s)
    assert b["state"] == "PreparingRebalance"  # generation 2 waits for a to rejoin
    join(s, member=a["member_id"])
    gen = s.groups["g"].generation
    assert gen == 2
    owned_a = s.groups["g"].assignment[a["member_id"]]
    assert len(owned_a) == 2
    # Stale generation, non-member and non-owner commits are refused, with reasons.
    assert "stale" in err(
        s,
        "commit_offsets",
        CommitFailedError,
        group_id="g",
        member_id=a["member_id"],
        generation=1,
        offsets=[[*owned_a[0], 5, ""]],
        now_ms=1,
    )
    assert "not a member" in err(
        s,
        "commit_offsets",
        CommitFailedError,
        group_id="g",
        member_id="ghost",
        generation=gen,
        offsets=[],
        now_ms=1,
    )
    owned_b = s.groups["g"].assignment[b["member_id"]]
    assert "does not own" in err(
        s,
        "commit_offsets",
        CommitFailedError,
        group_id="g",
        member_id=a["member_id"],
        generation=gen,
        offsets=[[*owned_b[0], 5, ""]],
        now_ms=1,
    )
    ok(
        s,
        "commit_offsets",
        group_id="g",
        member_id=a["member_id"],
        generation=gen,
        offsets=[[*owned_a[0], 5, "m"]],
        now_ms=1,
    )
    assert s.committed("g")[tuple(owned_a[0])] == (5, "m", 1)
    err(s, "reset_offsets", GroupNotEmptyError, group_id="g", offsets=[["t", 0, 0]], now_ms=2)
    ok(s, "leave_group", group_id="g", member_ids=[a["member_id"], b["member_id"]])
    ok(s, "reset_offsets", group_id="g", offsets=[["t", 0, 0]], now_ms=2)
    assert s.committed("g")[("t", 0)][0] == 0


def test_static_member_keeps_its_id_without_rebalance() -> None:
    s, _ = cluster(1)
    ok(s, "create_topic", name="t", topic_id="id", partitions=2, replication_factor=1, config={})
    first = join(s, instance="host-1")
    again = join(s, instance="host-1")
    assert again["member_id"] == first["member_id"]
    assert again["generation"] == first["generation"]


def test_topic_creation_rebalances_subscribed_groups() -> None:
    s, _ = cluster(1)
    m = join(s, topics=("later",))
    assert m["assignment"] == []
    ok(
        s,
        "create_topic",
        name="later",
        topic_id="id",
        partitions=2,
        replication_factor=1,
        config={},
    )
    # The members learn of it from their heartbeats and rejoin (test_groups.py has the rest).
    assert s.groups["g"].phase.value == "PreparingRebalance"
    join(s, member=m["member_id"], topics=("later",))
    assert len(s.groups["g"].assignment[m["member_id"]]) == 2


def test_a_topic_grows_and_never_shrinks_and_subscribed_groups_rebalance() -> None:
    s, _ = cluster(3)
    ok(s, "create_topic", name="t", topic_id="id", partitions=2, replication_factor=2, config={})
    m = join(s, topics=("t",))
    assert len(s.groups["g"].assignment[m["member_id"]]) == 2
    assert ok(s, "create_partitions", name="t", partitions=5) == 5
    parts = s.topics["t"]["partitions"]
    assert [p.partition for p in parts] == [0, 1, 2, 3, 4]
    for p in parts[2:]:
        # Each new partition: the topic's replication factor, distinct brokers, all in the
        # ISR, led by its first replica at epoch 0.
        assert len(set(p.replicas)) == 2 and p.isr == p.replicas and p.leader == p.replicas[0]
        assert p.leader_epoch == 0
    assert {p.leader for p in parts[2:]} == {1, 2, 3}  # leaders spread
    assert s.groups["g"].phase.value == "PreparingRebalance"
    join(s, member=m["member_id"], topics=("t",))
    assert len(s.groups["g"].assignment[m["member_id"]]) == 5

    before = copy.deepcopy(s)
    assert "has 5 partitions" in err(
        s, "create_partitions", InvalidPartitionsError, name="t", partitions=5
    )
    err(s, "create_partitions", InvalidPartitionsError, name="t", partitions=3)
    err(s, "create_partitions", InvalidPartitionsError, name="t", partitions=10_001)
    err(s, "create_partitions", UnknownTopicOrPartitionError, name="nope", partitions=3)
    assert s == before


def test_an_explicit_assignment_for_new_partitions_is_checked() -> None:
    s, epochs = cluster(3)
    ok(s, "create_topic", name="t", topic_id="id", partitions=1, replication_factor=2, config={})
    bad = {
        "need 2 replica assignments, got 1": [[1, 2]],
        "3 replicas given; the topic's replication factor is 2": [[1, 2], [1, 2, 3]],
        "a broker is named twice": [[1, 1], [2, 3]],
        "unknown brokers [7]": [[1, 7], [2, 3]],
    }
    for message, assignments in bad.items():
        got = err(
            s,
            "create_partitions",
            InvalidReplicaAssignmentError,
            name="t",
            partitions=3,
            assignments=assignments,
        )
        assert message in got, got
    ok(s, "fence_broker", node_id=3, broker_epoch=epochs[3])
    got = err(
        s,
        "create_partitions",
        InvalidReplicaAssignmentError,
        name="t",
        partitions=2,
        assignments=[[3, 1]],
    )
    assert "brokers [3] are fenced" in got
    ok(s, "create_partitions", name="t", partitions=3, assignments=[[2, 1], [1, 2]])
    assert [p.replicas for p in s.topics["t"]["partitions"][1:]] == [[2, 1], [1, 2]]
    assert [p.leader for p in s.topics["t"]["partitions"][1:]] == [2, 1]
    # Placed by the controller with a broker down: only live brokers get the new replicas.
    ok(s, "create_partitions", name="t", partitions=5)
    assert all(3 not in p.replicas for p in s.topics["t"]["partitions"][3:])
    # new_partitions answers what the command would do, and changes nothing.
    before = copy.deepcopy(s)
    assert len(s.new_partitions("t", 7)) == 2
    with pytest.raises(InvalidPartitionsError):
        s.new_partitions("t", 4)
    assert s == before


def random_command(rng: random.Random, i: int) -> tuple[str, dict[str, Any]]:
    """One command like a controller's, or (one in ten) a malformed or hostile one."""
    kind = rng.choice(
        [
            "register", "fence", "unfence", "create", "delete", "join", "leave", "commit",
            "batch", "reset", "delete_group", "producer_ids", "isr", "offline", "malformed",
            "join", "tick", "kafka_join", "sync", "grow", "elect", "reassign",
        ]
    )  # fmt: skip
    node = rng.randint(1, 4)
    if kind == "register":
        return (
            "register_broker",
            {
                "node_id": node,
                "host": "h",
                "port": node,
                "rack": rng.choice([None, "a", "b"]),
                "incarnation": f"i{i}",
                "now_ms": i,
            },
        )
    if kind in ("fence", "unfence"):
        return (f"{kind}_broker", {"node_id": node, "broker_epoch": rng.randint(1, i + 1)})
    if kind == "create":
        return (
            "create_topic",
            {
                "name": f"t{rng.randint(0, 3)}",
                "topic_id": str(i),
                "partitions": rng.randint(1, 6),
                "replication_factor": rng.randint(1, 3),
                "config": rng.choice([{}, {"retention.ms": "1000"}, {"retention.ms": "-5x"}]),
            },
        )
    if kind == "delete":
        return ("delete_topic", {"name": f"t{rng.randint(0, 3)}"})
    if kind == "reassign":
        moves = [
            [
                f"t{rng.randint(0, 3)}",
                rng.randint(0, 6),
                rng.choice([None, rng.sample([1, 2, 3, 4, 5], rng.randint(1, 4))]),
            ]
            for _ in range(rng.randint(0, 3))
        ]
        return ("alter_partition_reassignments", {"reassignments": moves})
    if kind == "elect":
        chosen = [[f"t{rng.randint(0, 3)}", rng.randint(0, 6)] for _ in range(rng.randint(0, 3))]
        return ("elect_leaders", {"partitions": rng.choice([None, chosen])})
    if kind == "grow":
        grow: dict[str, Any] = {"name": f"t{rng.randint(0, 3)}", "partitions": rng.randint(0, 9)}
        if rng.random() < 0.3:
            grow["assignments"] = [
                rng.sample([1, 2, 3, 4, 5], rng.randint(1, 3)) for _ in range(rng.randint(0, 4))
            ]
        return ("create_partitions", grow)
    if kind == "join":
        return (
            "join_group",
            {
                "group_id": f"g{rng.randint(0, 1)}",
                "member_id": rng.choice(["", "", "c-1", "ghost"]),
                "client_id": "c",
                "instance_id": rng.choice([None, "x", "y"]),
                "session_timeout_ms": 1000,
                "rebalance_timeout_ms": 1000,
                "topics": rng.sample(["t0", "t1", "t2", "t3"], rng.randint(1, 3)),
                "protocols": rng.sample(["range", "roundrobin", "sticky"], rng.randint(1, 2)),
                "now_ms": i,
            },
        )
    if kind == "kafka_join":
        # A Kafka client's join: its own group ids (g1 is shared with raftlog's joins: the
        # two kinds refuse each other there), protocols with metadata bytes.
        return (
            "join_group",
            {
                "group_id": f"g{rng.randint(1, 2)}",
                "member_id": rng.choice(["", "k-x", "k-y"]),
                "client_id": "k",
                "instance_id": None,
                "session_timeout_ms": 1000,
                "rebalance_timeout_ms": 1000,
                "topics": rng.sample(["t0", "t1"], rng.randint(1, 2)),
                "protocols": [
                    [p, b"m"] for p in rng.sample(["range", "sticky"], rng.randint(1, 2))
                ],
                "now_ms": i,
                "protocol_type": "consumer",
                "new_member_id": rng.choice([None, "k-x", "k-y"]),
            },
        )
    if kind == "sync":
        members = ["k-x", "k-y", "k-0"]
        return (
            "sync_group",
            {
                "group_id": f"g{rng.randint(1, 2)}",
                "member_id": rng.choice(members),
                "generation": rng.randint(0, 4),
                "assignments": rng.choice(
                    [
                        None,
                        [
                            [m, b"a", [[f"t{rng.randint(0, 2)}", rng.randint(0, 5)]]]
                            for m in members
                        ],
                    ]
                ),
            },
        )
    if kind == "leave":
        leave: dict[str, Any] = {
            "group_id": f"g{rng.randint(0, 1)}",
            "member_ids": [f"c-{rng.randint(0, 5)}"],
        }
        if rng.random() < 0.8:  # entries of older code carry no time
            leave["now_ms"] = i
        return ("leave_group", leave)
    if kind == "tick":
        return ("tick_group", {"group_id": f"g{rng.randint(0, 1)}", "now_ms": i * 300})
    if kind in ("commit", "batch"):
        commits = [
            {
                "group_id": f"g{rng.randint(0, 1)}",
                "member_id": rng.choice(["", f"c-{rng.randint(0, 5)}"]),
                "generation": rng.randint(-1, 5),
                "offsets": [
                    [f"t{rng.randint(0, 4)}", rng.randint(0, 6), rng.randint(0, 99), "m"]
                    for _ in range(rng.randint(0, 3))
                ],
                "now_ms": i,
            }
            for _ in range(rng.randint(1, 4))
        ]
        if kind == "commit":
            return ("commit_offsets", commits[0])
        return ("commit_batch", {"commits": commits})
    if kind == "reset":
        return (
            "reset_offsets",
            {
                "group_id": f"g{rng.randint(0, 2)}",
                "offsets": [[f"t{rng.randint(0, 4)}", rng.randint(0, 6), rng.randint(0, 9)]],
                "now_ms": i,
            },
        )
    if kind == "delete_group":
        return ("delete_group", {"group_id": f"g{rng.randint(0, 2)}"})
    if kind == "producer_ids":
        return ("allocate_producer_ids", {"count": rng.randint(-1, 3)})
    if kind == "isr":
        args: dict[str, Any] = {
            "topic": f"t{rng.randint(0, 3)}",
            "partition": 0,
            "leader_id": node,
            "leader_epoch": rng.randint(0, 2),
            "partition_epoch": rng.randint(0, 2),
            "isr": rng.sample([1, 2, 3, 4], rng.randint(1, 3)),
        }
        if rng.random() < 0.5:
            args["broker_epochs"] = [[n, rng.randint(1, i + 1)] for n in args["isr"]]
        return ("alter_isr", args)
    if kind == "offline":
        return (
            "report_offline_replicas",
            {
                "node_id": node,
                "broker_epoch": rng.randint(1, i + 1),
                "replicas": [[f"t{rng.randint(0, 3)}", rng.randint(0, 3), "EIO"]],
            },
        )
    # A well-formed command with one argument broken: wrong type, missing, or extra.
    name, args = random_command(rng, i)
    while name == "noop" or not args:
        name, args = random_command(rng, i)
    args = dict(args)
    key = rng.choice(sorted(args))
    how = rng.choice(["type", "missing", "extra", "entry"])
    if how == "type":
        args[key] = rng.choice(["1", 1.5, None, True, [1], {"a": 1}, -(2**70)])
    elif how == "missing":
        del args[key]
    elif how == "extra":
        args["surplus"] = 1
    else:
        args[key] = [rng.choice([["t0"], ["t0", "0", 1, ""], ("t0", 0, -1, ""), "t0-0", None])]
    return (name, args)


def random_commands(seed: int, n: int) -> list[tuple[str, dict[str, Any]]]:
    """A command stream like a controller's, from a seeded RNG (printed on failure)."""
    rng = random.Random(seed)
    return [random_command(rng, i) for i in range(n)]


def check_invariants(s: MetadataState) -> None:
    for t in s.topics.values():
        for p in t["partitions"]:
            assert p.leader == NO_LEADER or p.leader in p.isr, p
            assert set(p.isr) <= set(p.replicas), p
            assert len(set(p.replicas)) == len(p.replicas), p
    for g in s.groups.values():
        assert (g.phase.value == "Empty") == (not g.members), g
        kafka = g.client_assigned  # a Kafka group: its leader member assigns
        states = ("Empty", "PreparingRebalance", "Stable") + (("CompletingRebalance",) * kafka)
        assert g.phase.value in states, g
        owners: dict[tuple[str, int], str] = {}
        for mid, tps in g.assignment.items():
            assert mid in g.members
            for t, p in tps:
                assert (t, p) not in owners, (t, p, owners)  # exactly one owner per generation
                owners[(t, p)] = mid
                assert kafka or t in g.members[mid]["topics"]
                assert t in s.topics and p < len(s.topics[t]["partitions"])
        if kafka:
            continue  # what every member gets is the leader's assignor's choice
        wanted = {
            (t, p)
            for m in g.members.values()
            for t in m["topics"]
            if t in s.topics
            for p in range(len(s.topics[t]["partitions"]))
        }
        if g.phase.value == "Stable":
            assert set(owners) == wanted  # every subscribed partition has an owner
        else:
            assert set(owners) <= wanted  # while preparing, moving partitions have none


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 120))
# A Kafka group's leader assigned a partition of a topic no member subscribed to; deleting
# that topic left it owned (GroupState.topic_changed).
@example(seed=91739, n=104)
def test_same_commands_same_state_and_invariants_hold(seed: int, n: int) -> None:
    cmds = random_commands(seed, n)
    a, b = MetadataState(), MetadataState()
    for cmd in cmds:
        before = copy.deepcopy(a)
        ra = a.apply(cmd)
        check_invariants(a)
        assert ra == b.apply(pickle.loads(pickle.dumps(cmd))), f"seed {seed}"
        if ra[0] == "err":
            assert a == before, f"seed {seed}: refused {cmd} changed the state"
        elif cmd[0] == "commit_batch":
            # A batch is its commits applied one by one: refused ones leave nothing behind.
            one_by_one = [before.apply(("commit_offsets", c)) for c in cmd[1]["commits"]]
            before.version = a.version
            assert (ra[1], a) == (one_by_one, before), f"seed {seed}"
    assert a == b, f"seed {seed}"
    # A snapshot (pickle, as pysyncobj makes) restores an equal state that evolves equally.
    c = pickle.loads(pickle.dumps(a))
    assert c == a
    more = random_commands(seed + 1, 20)
    for cmd in more:
        assert a.apply(cmd) == c.apply(cmd)
    assert a == c


# -- refusals leave nothing behind (issue 9) ---------------------------------------------------


def refused(state: MetadataState, name: str, error: type, /, **args: Any) -> str:
    """Apply a command that must be refused with `error`; check it changed nothing."""
    before = copy.deepcopy(state)
    message = err(state, name, error, **args)
    assert state == before, f"refused {name} changed the state"
    return message


def test_refused_join_leaves_no_group_and_uses_no_member_number() -> None:
    s, _ = cluster(1)
    # An unknown member id on a group that does not exist: refused, and no empty group appears.
    refused(s, "join_group", UnknownMemberIdError, **join_args(member="ghost"))
    assert "g" not in s.groups
    join(s)
    # A member that shares no assignor with the group: refused before a member number is used.
    refused(s, "join_group", InconsistentGroupProtocolError, **join_args(proto="sticky"))
    assert join(s)["member_id"] == "c-1"


def test_commits_and_resets_for_partitions_that_do_not_exist_are_refused() -> None:
    s, _ = cluster(1)
    ok(s, "create_topic", name="t", topic_id="id", partitions=2, replication_factor=1, config={})
    for topic, partition in (("nope", 0), ("t", 2)):
        message = refused(
            s,
            "commit_offsets",
            UnknownTopicOrPartitionError,
            group_id="g",
            member_id="",
            generation=-1,
            offsets=[["t", 0, 5, ""], [topic, partition, 5, ""]],
            now_ms=1,
        )
        assert f"{topic}-{partition}" in message and "t-0" not in message
        refused(
            s,
            "reset_offsets",
            UnknownTopicOrPartitionError,
            group_id="g",
            offsets=[["t", 1, 0], [topic, partition, 0]],
            now_ms=1,
        )
    assert "g" not in s.groups and "g" not in s.offsets
    # In a batch, the refused commit leaves nothing and the others go in.
    results = ok(
        s,
        "commit_batch",
        commits=[
            {
                "group_id": "g",
                "member_id": "",
                "generation": -1,
                "offsets": [["t", 0, 7, ""], ["gone", 0, 1, ""]],
                "now_ms": 2,
            },
            {
                "group_id": "h",
                "member_id": "",
                "generation": -1,
                "offsets": [["t", 1, 3, ""]],
                "now_ms": 2,
            },
        ],
    )
    assert [r[0] for r in results] == ["err", "ok"]
    assert results[0][1] == UnknownTopicOrPartitionError.code
    assert "g" not in s.offsets and s.committed("h") == {("t", 1): (3, "", 2)}


def test_offsets_of_a_deleted_topic_disappear_with_it() -> None:
    s, _ = cluster(1)
    for name in ("t", "u"):
        ok(
            s,
            "create_topic",
            name=name,
            topic_id=name,
            partitions=1,
            replication_factor=1,
            config={},
        )
    ok(
        s,
        "commit_offsets",
        group_id="g",
        member_id="",
        generation=-1,
        offsets=[["t", 0, 5, ""], ["u", 0, 6, ""]],
        now_ms=1,
    )
    ok(s, "delete_topic", name="t")
    assert s.committed("g") == {("u", 0): (6, "", 1)}
    # Re-created under the same name, the topic starts without the old group's offsets.
    ok(s, "create_topic", name="t", topic_id="t2", partitions=1, replication_factor=1, config={})
    assert ("t", 0) not in s.committed("g")


def test_producer_id_blocks_must_be_positive() -> None:
    s = MetadataState()
    for count in (0, -5):
        assert "count" in refused(s, "allocate_producer_ids", InvalidRequestError, count=count)
    assert ok(s, "allocate_producer_ids", count=10) == 0
    assert ok(s, "allocate_producer_ids") == 10


def test_malformed_commands_are_refused_naming_the_argument() -> None:
    s, _ = cluster(1)
    topic = {"name": "t", "topic_id": "i", "partitions": 1, "replication_factor": 1, "config": {}}
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("create_topic", {**topic, "partitions": "3"}, "partitions"),
        ("create_topic", {**topic, "partitions": True}, "partitions"),
        ("create_topic", {**topic, "config": {"a": 1}}, "config"),
        ("create_topic", {"name": "t", "topic_id": "i", "partitions": 1}, "replication_factor"),
        ("delete_topic", {"name": "t", "extra": 1}, "extra"),
        ("leave_group", {"group_id": "g", "member_ids": "c-0"}, "member_ids"),
        (
            "commit_offsets",
            {
                "group_id": "g",
                "member_id": "",
                "generation": -1,
                "offsets": [["t", 0, 5]],
                "now_ms": 1,
            },
            "offset entry",
        ),
        (
            "commit_offsets",
            {
                "group_id": "g",
                "member_id": "",
                "generation": -1,
                "offsets": [["t", "0", 5, ""]],
                "now_ms": 1,
            },
            "offset entry",
        ),
        ("commit_batch", {"commits": [{"group_id": "g"}]}, "member_id"),
        ("reset_offsets", {"group_id": "g", "offsets": [["t", 0, -1]], "now_ms": 1}, ">= 0"),
        (
            "alter_isr",
            {
                "topic": "t",
                "partition": 0,
                "leader_id": 1,
                "leader_epoch": 0,
                "partition_epoch": 0,
                "isr": ["1"],
            },
            "isr",
        ),
        ("no_such_command", {}, "no_such_command"),
    ]
    for name, args, named in cases:
        before = copy.deepcopy(s)
        result = s.apply((name, args))
        if name == "commit_batch":
            assert result[0] == "ok", result
            result = result[1][0]
            before.version += 1  # the batch itself was applied; its one commit was refused
        assert result[0] == "err" and result[1] == InvalidRequestError.code, (name, args, result)
        assert named in result[2], (named, result)
        assert s == before
    for command in (None, ("create_topic",), (5, {}), ("noop", [])):
        before = copy.deepcopy(s)
        result = s.apply(command)  # type: ignore[arg-type]
        assert result[0] == "err" and result[1] == InvalidRequestError.code, (command, result)
        assert s == before


def test_a_bug_in_a_command_is_not_disguised_as_a_malformed_command(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Only refusals (RaftlogError) become results; anything else is our bug and propagates,
    so tests see it (and the Raft thread stops the node loudly instead of hiding it)."""
    s, _ = cluster(1)
    ok(s, "create_topic", name="t", topic_id="id", partitions=2, replication_factor=1, config={})

    def broken(*args: Any) -> dict:
        raise KeyError("a bug")

    monkeypatch.setitem(assignors.ASSIGNORS, "range", broken)
    with pytest.raises(KeyError, match="a bug"):
        join(s)


def test_a_leave_naming_a_member_twice_removes_it_once() -> None:
    """Found by the fuzz test below: the second `del` raised KeyError after the first had
    removed the member, on every replica (the old catch-all hid it as "malformed")."""
    s, _ = cluster(1)
    ok(s, "create_topic", name="t", topic_id="id", partitions=2, replication_factor=1, config={})
    a, b = join(s)["member_id"], join(s)["member_id"]
    assert ok(s, "leave_group", group_id="g", member_ids=[a, a, "ghost", a]) == 1
    assert sorted(s.groups["g"].members) == [b]
    # b had rejoined (its join started the rebalance): a's leave completed it.
    assert s.groups["g"].assignment[b] == [["t", 0], ["t", 1]]


FUZZ_INTS = [-2, -1, 0, 1, 2, 3, 4, 2**31, 2**63, -(2**63), 10**30]
FUZZ_STRS = ["", "t0", "t1", "g0", "c-0", "c-1", "range", "sticky", "é", "true", "-1", "x" * 300]
FUZZ_STRS += ["min.insync.replicas", "unclean.leader.election.enable", "retention.ms"]
FUZZ_ENTRIES: list[Any] = [
    ["t0", 0, 1, ""], ["t0", 1, 1, "m"], ["t1", 0, 5, ""], ["t0", -1, 1, ""], ["t0", 0, -1, ""],
    ["t0", 0], ["t0", "0", 1, ""], [1, 0, 1, ""], ("t0", 0, 1), ["t0", 0, 1], ["t9", 0, 1, ""],
    ["t0", 0, 1, None], ["t0", 0, "r"], [["t0"]], {"a": 1}, None, "t0", [1, 1], [2, 5],
    {"group_id": "g0", "member_id": "", "generation": -1, "offsets": [["t0", 0, 1, ""]],
     "now_ms": 1},
    {"group_id": "g0", "member_id": "c-0", "generation": 1, "offsets": [], "now_ms": 1},
]  # fmt: skip


def fuzz_value(rng: random.Random, tp: Any) -> Any:
    """A value of annotation `tp` (a command argument's type), with hostile contents."""
    if tp is Any:
        return rng.choice(FUZZ_ENTRIES)
    if tp in (int, str, bool, type(None)):
        pool = {int: FUZZ_INTS, str: FUZZ_STRS, bool: [True, False], type(None): [None]}[tp]
        return rng.choice(pool)
    origin, targs = typing.get_origin(tp), typing.get_args(tp)
    if origin is list:
        return [fuzz_value(rng, targs[0]) for _ in range(rng.randint(0, 4))]
    if origin is dict:
        return {fuzz_value(rng, targs[0]): fuzz_value(rng, targs[1]) for _ in range(3)}
    return fuzz_value(rng, rng.choice(targs))  # a union


@pytest.mark.parametrize("seed", range(4))
def test_well_typed_hostile_arguments_never_raise_and_refusals_change_nothing(seed: int) -> None:
    """Arguments of the right types (they pass the annotation check) with hostile contents:
    duplicates, negatives, huge ints, unknown names, malformed entries. `apply` must answer
    ok or err, never raise (a raise stops every replica's Raft thread), and an err must leave
    the state as it was."""
    rng = random.Random(seed)
    s = MetadataState()
    for cmd in random_commands(seed, 150):
        s.apply(cmd)
    names = sorted(n[len("_cmd_") :] for n in vars(MetadataState) if n.startswith("_cmd_"))
    for _ in range(1_500):
        name = rng.choice(names)
        hints = typing.get_type_hints(getattr(MetadataState, "_cmd_" + name))
        params = [p for p in hints if p != "return"]
        args = {p: fuzz_value(rng, hints[p]) for p in params if rng.random() < 0.95}
        before = copy.deepcopy(s)
        result = s.apply((name, args))
        assert result[0] in ("ok", "err"), result
        if result[0] == "err":
            assert s == before, f"seed {seed}: refused {name} {args!r:.300} changed the state"
        check_invariants(s)


def test_a_live_topic_s_configs_change_and_go_back_to_their_defaults() -> None:
    s, _ = cluster(3)
    ok(
        s,
        "create_topic",
        name="t",
        topic_id="id",
        partitions=1,
        replication_factor=3,
        config={"min.insync.replicas": "2", "retention.ms": "60000"},
    )
    version = s.topology_version
    config = ok(
        s,
        "alter_topic_config",
        name="t",
        changes={"retention.ms": None, "max.message.bytes": "10000"},
    )
    assert config == {"min.insync.replicas": "2", "max.message.bytes": "10000"}
    assert s.topics["t"]["config"] == config and s.topology_version == version + 1
    assert pickle.loads(pickle.dumps(s)) == s
    before = copy.deepcopy(s)
    # Refused whole, changing nothing: an unknown key, a bad value, a key fixed at creation,
    # an unknown topic.
    msg = err(s, "alter_topic_config", InvalidConfigError, name="t", changes={"retention.msx": "1"})
    assert "retention.ms" in msg  # the suggestion
    msg = err(
        s,
        "alter_topic_config",
        InvalidConfigError,
        name="t",
        changes={"segment.bytes": "5", "retention.ms": "1"},
    )
    assert "segment.bytes=5" in msg
    msg = err(
        s, "alter_topic_config", InvalidConfigError, name="t", changes={"min.insync.replicas": "3"}
    )
    assert "cannot be changed on a live topic" in msg
    err(s, "alter_topic_config", UnknownTopicOrPartitionError, name="u", changes={})
    err(s, "alter_topic_config", InvalidRequestError, name="t", changes={"retention.ms": 5})
    assert s == before
    # unclean.leader.election.enable may change: elections read the config each time.
    ok(s, "alter_topic_config", name="t", changes={"unclean.leader.election.enable": "true"})
    assert s.topics["t"]["config"]["unclean.leader.election.enable"] == "true"


def test_a_topic_grown_while_its_first_partition_moves_keeps_its_replication_factor() -> None:
    """Found by the chaos suite's reassign faults: partition 0's replicas during a move hold
    the leaving ones too, and the new partitions got four replicas of a three-replica topic."""
    s, _ = cluster(4)
    ok(s, "create_topic", name="t", topic_id="id", partitions=1, replication_factor=3, config={})
    p0 = s.topics["t"]["partitions"][0]
    spare = next(b for b in (1, 2, 3, 4) if b not in p0.replicas)
    ok(s, "alter_partition_reassignments", reassignments=[["t", 0, [spare, *p0.replicas[1:]]]])
    assert len(p0.replicas) == 4 and p0.reassigning
    ok(s, "create_partitions", name="t", partitions=3)
    assert [len(p.replicas) for p in s.topics["t"]["partitions"][1:]] == [3, 3]
    err(s, "create_partitions", InvalidReplicaAssignmentError, name="t", partitions=4,
        assignments=[[1, 2, 3, 4]])  # fmt: skip
