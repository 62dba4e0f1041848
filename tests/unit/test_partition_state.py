"""PartitionState (raftlog/metadata/partition_state.py) through its public methods: each
transition, and each invariant its closing check enforces."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from raftlog.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    StaleBrokerEpochError,
)
from raftlog.metadata.partition_state import (
    NO_LEADER,
    MetadataInvariantError,
    PartitionState,
    TopicRules,
)

PLAIN = TopicRules()
STRICT = TopicRules(min_insync_replicas=2)


def live(*nodes: int) -> Callable[[int], bool]:
    """An `electable` where exactly `nodes` may lead."""
    return lambda r: r in nodes


def new(replicas: tuple[int, ...] = (1, 2, 3), rules: TopicRules = PLAIN) -> PartitionState:
    return PartitionState.new("t", 0, list(replicas), rules)


def state(p: PartitionState) -> tuple[int, int, list[int], list[int], int]:
    return (p.leader, p.leader_epoch, p.isr, p.elr, p.partition_epoch)


def no_joiner_refused(r: int) -> None:
    return None


# -- new, records ------------------------------------------------------------------------------


def test_a_new_partition_has_every_replica_in_sync_and_the_first_leading() -> None:
    p = new()
    assert (p.topic, p.partition, p.name, p.replicas) == ("t", 0, "t-0", [1, 2, 3])
    assert state(p) == (1, 0, [1, 2, 3], [], 0)


@pytest.mark.parametrize("replicas", [(), (1, 1)])
def test_a_new_partition_needs_distinct_replicas(replicas: tuple[int, ...]) -> None:
    with pytest.raises(MetadataInvariantError):
        new(replicas)


def test_the_record_round_trips_and_one_without_elr_loads() -> None:
    p = new()
    p.alter_isr(1, 0, 0, [1, 2], STRICT, no_joiner_refused)
    assert PartitionState.from_record("t", 0, p.to_record()) == p
    assert p.to_record() == {
        "replicas": [1, 2, 3],
        "leader": 1,
        "leader_epoch": 0,
        "isr": [1, 2],
        "elr": [],
        "partition_epoch": 1,
    }
    old = {k: v for k, v in new().to_record().items() if k != "elr"}
    assert PartitionState.from_record("t", 0, old) == new()


# -- alter_isr ---------------------------------------------------------------------------------


def test_alter_isr_shrinks_and_grows_at_a_new_partition_epoch() -> None:
    p = new()
    assert p.alter_isr(1, 0, 0, [1, 3], PLAIN, no_joiner_refused) == 1
    assert state(p) == (1, 0, [1, 3], [], 1)
    joiners: list[int] = []
    assert p.alter_isr(1, 0, 1, [3, 2, 1], PLAIN, joiners.append) == 2
    assert joiners == [2]  # only the replica that joins is checked
    assert p.isr == [1, 2, 3]  # in replica order


def test_alter_isr_below_min_isr_puts_the_leavers_in_the_elr() -> None:
    p = new(rules=STRICT)
    p.alter_isr(1, 0, 0, [1], STRICT, no_joiner_refused)
    assert (p.isr, p.elr) == ([1], [2, 3])
    p.alter_isr(1, 0, 1, [1, 2], STRICT, no_joiner_refused)
    assert (p.isr, p.elr) == ([1, 2], [])  # at the minimum again: the ELR is cleared


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((2, 0, 0, [2]), FencedLeaderEpochError),  # not the leader
        ((1, 1, 0, [1]), FencedLeaderEpochError),  # another leader epoch
        ((1, 0, 5, [1]), InvalidUpdateVersionError),  # a stale partition epoch
        ((1, 0, 0, [2, 3]), InvalidRequestError),  # without the leader
        ((1, 0, 0, [1, 4]), InvalidRequestError),  # a non-replica
    ],
)
def test_alter_isr_refusals_change_nothing(
    args: tuple[int, int, int, list[int]], error: type
) -> None:
    p = new()
    before = copy.deepcopy(p)
    with pytest.raises(error):
        p.alter_isr(*args, PLAIN, no_joiner_refused)
    assert p == before


def test_alter_isr_refused_by_a_joiner_check_changes_nothing() -> None:
    p = new()
    p.alter_isr(1, 0, 0, [1], PLAIN, no_joiner_refused)
    before = copy.deepcopy(p)

    def refuse(r: int) -> None:
        raise StaleBrokerEpochError(f"broker {r} restarted")

    with pytest.raises(StaleBrokerEpochError):
        p.alter_isr(1, 0, 1, [1, 2], PLAIN, refuse)
    assert p == before


# -- remove_broker -----------------------------------------------------------------------------


def test_a_fenced_leader_hands_over_to_the_first_live_isr_member() -> None:
    p = new()
    assert p.remove_broker(1, clean=True, restarted=False, rules=PLAIN, electable=live(2, 3))
    assert state(p) == (2, 1, [2, 3], [], 1)


def test_a_fenced_follower_leaves_the_isr_and_the_leader_stays() -> None:
    p = new()
    assert not p.remove_broker(3, clean=True, restarted=False, rules=PLAIN, electable=live(1, 2))
    assert state(p) == (1, 0, [1, 2], [], 1)


def test_a_broker_outside_the_partition_changes_nothing() -> None:
    p = new()
    assert not p.remove_broker(9, clean=True, restarted=False, rules=PLAIN, electable=live(1))
    assert p == new()


def test_a_fenced_last_isr_member_keeps_its_place_and_the_partition_goes_offline() -> None:
    p = new((1,))
    assert p.remove_broker(1, clean=True, restarted=False, rules=PLAIN, electable=live())
    assert state(p) == (NO_LEADER, 1, [1], [], 1)


def test_a_restarted_last_isr_member_leads_again_at_a_new_epoch() -> None:
    p = new((1,))
    assert not p.remove_broker(1, clean=False, restarted=True, rules=PLAIN, electable=live(1))
    assert state(p) == (1, 1, [1], [], 1)


def test_an_unclean_restart_of_the_last_isr_member_gives_way_to_an_elr_member() -> None:
    p = new((1, 2), STRICT)
    p.alter_isr(1, 0, 0, [1], STRICT, no_joiner_refused)
    assert (p.isr, p.elr) == ([1], [2])
    assert p.remove_broker(1, clean=False, restarted=True, rules=STRICT, electable=live(1, 2))
    assert state(p) == (2, 1, [2], [], 2)  # 1 may have lost its tail: not in the ELR


def test_a_fenced_leader_below_min_isr_hands_over_to_an_elr_member() -> None:
    p = new((1, 2), STRICT)
    p.alter_isr(1, 0, 0, [1], STRICT, no_joiner_refused)
    assert p.remove_broker(1, clean=True, restarted=False, rules=STRICT, electable=live(2))
    assert state(p) == (2, 1, [2], [1], 2)  # 1 left cleanly: it joins the ELR


@pytest.mark.parametrize("unclean", [False, True])
def test_unclean_election_only_when_the_rules_allow_it(unclean: bool) -> None:
    rules = TopicRules(unclean_election=unclean)
    p = new((1, 2))
    p.alter_isr(1, 0, 0, [1], rules, no_joiner_refused)
    p.remove_broker(1, clean=True, restarted=False, rules=rules, electable=live(2))
    assert (p.leader, p.isr) == ((2, [2]) if unclean else (NO_LEADER, [1]))


# -- elect_returning ---------------------------------------------------------------------------


def test_a_returning_isr_member_leads_an_offline_partition() -> None:
    p = new((1,))
    p.remove_broker(1, clean=True, restarted=False, rules=PLAIN, electable=live())
    assert not p.elect_returning(2, PLAIN)  # not a member: nothing
    assert p.elect_returning(1, PLAIN)
    assert state(p) == (1, 2, [1], [], 2)
    assert not p.elect_returning(1, PLAIN)  # online: nothing changes
    assert state(p) == (1, 2, [1], [], 2)


def test_a_returning_elr_member_leads_and_the_isr_joins_the_elr() -> None:
    p = new((1, 2), STRICT)
    p.alter_isr(1, 0, 0, [1], STRICT, no_joiner_refused)
    p.remove_broker(1, clean=True, restarted=False, rules=STRICT, electable=live())
    assert (p.leader, p.isr, p.elr) == (NO_LEADER, [1], [2])
    assert p.elect_returning(2, STRICT)
    assert (p.leader, p.isr, p.elr) == (2, [2], [1])


# -- leave_for_offline_log ---------------------------------------------------------------------


def test_an_offline_log_moves_the_leadership_and_leaves_the_isr() -> None:
    p = new()
    p.leave_for_offline_log(1, PLAIN, live(2, 3))
    assert state(p) == (2, 1, [2, 3], [], 1)


def test_the_last_member_with_an_offline_log_keeps_leading() -> None:
    p = new((1,))
    p.leave_for_offline_log(1, PLAIN, live(1))
    assert p == new((1,))  # nothing changed, no epoch bumped


def test_an_offline_log_of_a_follower_leaves_the_elr_too() -> None:
    p = new((1, 2, 3), TopicRules(min_insync_replicas=3))
    p.alter_isr(1, 0, 0, [1], TopicRules(min_insync_replicas=3), no_joiner_refused)
    assert p.elr == [2, 3]
    p.leave_for_offline_log(3, TopicRules(min_insync_replicas=3), live(1, 2))
    assert state(p) == (1, 0, [1], [2], 2)


# -- the invariant check -----------------------------------------------------------------------


def broken(**fields: object) -> PartitionState:
    """A partition whose fields break an invariant (as a bug in a transition would)."""
    p = new()
    for name, value in fields.items():
        setattr(p, name, value)
    return p


@pytest.mark.parametrize(
    "fields",
    [
        {"leader": 4},  # a leader outside the ISR
        {"isr": [1, 4]},  # an ISR member that is no replica
        {"isr": [1, 1]},  # repeats
        {"elr": [2], "isr": [1, 2]},  # ISR and ELR overlap
        {"elr": [4]},  # an ELR member that is no replica
        {"elr": [3], "isr": [1, 2]},  # an ELR while the ISR is at the minimum
        {"isr": [], "elr": []},  # nobody holds the data
        {"isr": [], "elr": [2], "leader": 1},  # a leader without an ISR
        {"replicas": [1, 2, 2]},  # repeated replicas
    ],
)
def test_the_closing_check_finds_a_broken_partition(fields: dict[str, object]) -> None:
    p = broken(**fields)
    with pytest.raises(MetadataInvariantError, match="t-0"):
        # A transition that changes nothing still ends in the check.
        p.leave_for_offline_log(9, PLAIN, live())


@pytest.mark.parametrize("field", ["leader_epoch", "partition_epoch"])
def test_the_closing_check_finds_an_epoch_gone_back(field: str) -> None:
    """A transition records the epochs it starts from; a bug that lowers one while it runs
    (here the `electable` callback does it) is found at its end."""
    p = new()
    p.alter_isr(1, 0, 0, [1, 2, 3], PLAIN, no_joiner_refused)

    def electable(r: int) -> bool:
        setattr(p, field, -5)
        return True

    with pytest.raises(MetadataInvariantError, match="epoch"):
        p.remove_broker(1, clean=True, restarted=False, rules=PLAIN, electable=electable)


def test_the_closing_check_finds_a_new_leader_at_the_same_epoch() -> None:
    p = new()

    def electable(r: int) -> bool:
        p.leader_epoch -= 1  # undoes the bump the election makes
        return True

    with pytest.raises(MetadataInvariantError, match="new leader epoch"):
        p.remove_broker(1, clean=True, restarted=False, rules=PLAIN, electable=electable)
