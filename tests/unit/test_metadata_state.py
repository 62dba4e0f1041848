"""The metadata state machine: determinism, broker fencing and leader election, ISR epochs,
groups and the offset registry's rules."""

from __future__ import annotations

import pickle
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.errors import (
    CommitFailedError,
    FencedLeaderEpochError,
    GroupNotEmptyError,
    InvalidReplicationFactorError,
    InvalidUpdateVersionError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
)
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
    leaders = [p["leader"] for p in parts]
    assert sorted(leaders) == [1, 2, 3, 4, 5, 6]  # one leadership per broker
    for p in parts:
        racks = {s.brokers[r]["rack"] for r in p["replicas"]}
        assert len(racks) == 3, p  # three replicas in three racks
        assert p["isr"] == p["replicas"] and p["leader"] == p["replicas"][0]
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
    led_by_1 = [i for i, p in enumerate(s.topics["t"]["partitions"]) if p["leader"] == 1]
    assert led_by_1
    before = [dict(p) for p in s.topics["t"]["partitions"]]
    assert ok(s, "fence_broker", node_id=1, broker_epoch=epochs[1]) == len(led_by_1)
    for i, p in enumerate(s.topics["t"]["partitions"]):
        assert p["leader"] != 1
        assert 1 not in p["isr"] or p["leader"] == NO_LEADER
        if i in led_by_1:
            assert p["leader"] in before[i]["isr"]  # never outside the ISR
            assert p["leader_epoch"] == before[i]["leader_epoch"] + 1
    # A zombie with an old epoch cannot unfence itself.
    err(s, "unfence_broker", StaleBrokerEpochError, node_id=1, broker_epoch=epochs[1] - 1)


def test_last_isr_member_fenced_means_offline_until_it_returns() -> None:
    s, epochs = cluster(1)
    ok(s, "create_topic", name="t", topic_id="id", partitions=1, replication_factor=1, config={})
    ok(s, "fence_broker", node_id=1, broker_epoch=epochs[1])
    p = s.topics["t"]["partitions"][0]
    assert p["leader"] == NO_LEADER and p["isr"] == [1] and p["leader_epoch"] == 1
    ok(s, "unfence_broker", node_id=1, broker_epoch=epochs[1])
    assert p["leader"] == 1 and p["leader_epoch"] == 2


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
        leader, other = p["replicas"]
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
        assert p["leader"] == (other if unclean else NO_LEADER)


def test_alter_isr_needs_current_epochs() -> None:
    s, _ = cluster(3)
    ok(s, "create_topic", name="t", topic_id="id", partitions=1, replication_factor=3, config={})
    p = s.topics["t"]["partitions"][0]
    leader = p["leader"]
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
        isr=p["replicas"],
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
        isr=p["replicas"],
    )


def join(
    s: MetadataState,
    member: str = "",
    instance: str | None = None,
    topics: tuple[str, ...] = ("t",),
    proto: str = "range",
) -> dict:
    return ok(
        s,
        "join_group",
        group_id="g",
        member_id=member,
        client_id="c",
        instance_id=instance,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        topics=list(topics),
        protocols=[proto],
        now_ms=0,
    )


def test_group_generations_and_commit_rules() -> None:
    s, _ = cluster(1)
    ok(s, "create_topic", name="t", topic_id="id", partitions=4, replication_factor=1, config={})
    a = join(s)
    assert a["generation"] == 1 and len(a["assignment"]) == 4
    b = join(s)
    gen = s.groups["g"]["generation"]
    assert gen == 2
    owned_a = s.groups["g"]["assignment"][a["member_id"]]
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
    owned_b = s.groups["g"]["assignment"][b["member_id"]]
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
    assert len(s.groups["g"]["assignment"][m["member_id"]]) == 2


def random_commands(seed: int, n: int) -> list[tuple[str, dict[str, Any]]]:
    """A command stream like a controller's, from a seeded RNG (printed on failure)."""
    rng = random.Random(seed)
    cmds: list[tuple[str, dict[str, Any]]] = []
    for i in range(n):
        kind = rng.choice(
            ["register", "fence", "unfence", "create", "delete", "join", "leave", "commit", "isr"]
        )
        node = rng.randint(1, 4)
        if kind == "register":
            cmds.append(
                (
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
            )
        elif kind in ("fence", "unfence"):
            epoch = rng.randint(1, i + 1)
            cmds.append((f"{kind}_broker", {"node_id": node, "broker_epoch": epoch}))
        elif kind == "create":
            cmds.append(
                (
                    "create_topic",
                    {
                        "name": f"t{rng.randint(0, 3)}",
                        "topic_id": str(i),
                        "partitions": rng.randint(1, 6),
                        "replication_factor": rng.randint(1, 3),
                        "config": {},
                    },
                )
            )
        elif kind == "delete":
            cmds.append(("delete_topic", {"name": f"t{rng.randint(0, 3)}"}))
        elif kind == "join":
            cmds.append(
                (
                    "join_group",
                    {
                        "group_id": f"g{rng.randint(0, 1)}",
                        "member_id": "",
                        "client_id": "c",
                        "instance_id": rng.choice([None, "x", "y"]),
                        "session_timeout_ms": 1000,
                        "rebalance_timeout_ms": 1000,
                        "topics": rng.sample(["t0", "t1", "t2", "t3"], rng.randint(1, 3)),
                        "protocols": [rng.choice(["range", "roundrobin", "sticky"])],
                        "now_ms": i,
                    },
                )
            )
        elif kind == "leave":
            cmds.append(
                (
                    "leave_group",
                    {"group_id": f"g{rng.randint(0, 1)}", "member_ids": [f"c-{rng.randint(0, 5)}"]},
                )
            )
        elif kind == "commit":
            cmds.append(
                (
                    "commit_offsets",
                    {
                        "group_id": f"g{rng.randint(0, 1)}",
                        "member_id": f"c-{rng.randint(0, 5)}",
                        "generation": rng.randint(-1, 5),
                        "offsets": [["t0", 0, rng.randint(0, 99), ""]],
                        "now_ms": i,
                    },
                )
            )
        else:
            cmds.append(
                (
                    "alter_isr",
                    {
                        "topic": f"t{rng.randint(0, 3)}",
                        "partition": 0,
                        "leader_id": node,
                        "leader_epoch": rng.randint(0, 2),
                        "partition_epoch": rng.randint(0, 2),
                        "isr": [node],
                    },
                )
            )
    return cmds


def check_invariants(s: MetadataState) -> None:
    for t in s.topics.values():
        for p in t["partitions"]:
            assert p["leader"] == NO_LEADER or p["leader"] in p["isr"], p
            assert set(p["isr"]) <= set(p["replicas"]), p
            assert len(set(p["replicas"])) == len(p["replicas"]), p
    for g in s.groups.values():
        owners: dict[tuple[str, int], str] = {}
        for mid, tps in g["assignment"].items():
            assert mid in g["members"]
            for t, p in tps:
                assert (t, p) not in owners, (t, p, owners)  # exactly one owner per generation
                owners[(t, p)] = mid
                assert t in g["members"][mid]["topics"]
        wanted = {
            (t, p)
            for m in g["members"].values()
            for t in m["topics"]
            if t in s.topics
            for p in range(len(s.topics[t]["partitions"]))
        }
        assert set(owners) == wanted  # every subscribed partition has an owner


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 120))
def test_same_commands_same_state_and_invariants_hold(seed: int, n: int) -> None:
    cmds = random_commands(seed, n)
    a, b = MetadataState(), MetadataState()
    for cmd in cmds:
        ra = a.apply(cmd)
        check_invariants(a)
        assert ra == b.apply(pickle.loads(pickle.dumps(cmd))), f"seed {seed}"
    assert a == b, f"seed {seed}"
    # A snapshot (pickle, as pysyncobj makes) restores an equal state that evolves equally.
    c = pickle.loads(pickle.dumps(a))
    assert c == a
    more = random_commands(seed + 1, 20)
    for cmd in more:
        assert a.apply(cmd) == c.apply(cmd)
    assert a == c
