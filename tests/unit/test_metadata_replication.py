"""The metadata's partition rules for replication: strict min ISR and the ELR (KIP-966), fencing
and re-registration as leadership changes, ISR changes checked against epochs (KIP-903)."""

from __future__ import annotations

from typing import Any

import pytest

from raftlog.errors import (
    FencedLeaderEpochError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    StaleBrokerEpochError,
)
from raftlog.metadata.partition_state import PartitionState
from raftlog.metadata.state import NO_LEADER, MetadataState
from tests.unit.test_metadata_state import err, ok


class Cluster:
    """A MetadataState with brokers 1..n and one partition "t-0" of replicas [1, 2, 3]."""

    def __init__(self, min_isr: int = 2, rf: int = 3, config: dict[str, str] | None = None):
        self.s = MetadataState()
        self.epochs: dict[int, int] = {}
        self.incarnations = 0
        for n in range(1, rf + 1):
            self.register(n)
        ok(
            self.s,
            "create_topic",
            name="t",
            topic_id="id",
            partitions=1,
            replication_factor=rf,
            config={"min.insync.replicas": str(min_isr), **(config or {})},
        )

    @property
    def p(self) -> PartitionState:
        p: PartitionState = self.s.topics["t"]["partitions"][0]
        return p

    def register(self, n: int, clean: bool = False) -> None:
        self.incarnations += 1
        self.epochs[n] = ok(
            self.s,
            "register_broker",
            node_id=n,
            host="h",
            port=n,
            rack=None,
            incarnation=f"i{self.incarnations}",
            now_ms=0,
            clean_shutdown=clean,
        )

    def fence(self, n: int) -> None:
        ok(self.s, "fence_broker", node_id=n, broker_epoch=self.epochs[n])

    def unfence(self, n: int) -> None:
        ok(self.s, "unfence_broker", node_id=n, broker_epoch=self.epochs[n])

    def alter(self, isr: list[int], **extra: Any) -> Any:
        p = self.p
        return ok(
            self.s,
            "alter_isr",
            topic="t",
            partition=0,
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            partition_epoch=p.partition_epoch,
            isr=isr,
            **extra,
        )

    def view(self) -> tuple[int, list[int], list[int]]:
        return self.p.leader, self.p.isr, self.p.elr


def test_min_isr_above_replication_factor_is_refused() -> None:
    s = MetadataState()
    ok(s, "register_broker", node_id=1, host="h", port=1, rack=None, incarnation="a", now_ms=0)
    msg = err(
        s,
        "create_topic",
        InvalidReplicationFactorError,
        name="t",
        topic_id="id",
        partitions=1,
        replication_factor=1,
        config={"min.insync.replicas": "2"},
    )
    assert "min.insync.replicas=2" in msg


def test_shrinking_below_min_isr_fills_the_elr_and_growing_back_clears_it() -> None:
    c = Cluster(min_isr=2)
    assert c.view() == (1, [1, 2, 3], [])
    c.alter([1, 2])  # still at the minimum: 3 is simply out
    assert c.view() == (1, [1, 2], [])
    c.alter([1])  # below: 2 held every committed record when it left, so it stays eligible
    assert c.view() == (1, [1], [2])
    c.alter([1, 3])  # back at the minimum: the high watermark may move past 2 again
    assert c.view() == (1, [1, 3], [])


def test_leader_fenced_with_isr_alone_elects_a_live_elr_member() -> None:
    c = Cluster(min_isr=2)
    c.alter([1, 2])
    c.alter([1])
    epoch = c.p.leader_epoch
    c.fence(1)
    leader, isr, elr = c.view()
    assert leader == 2 and isr == [2] and elr == [1]
    assert c.p.leader_epoch == epoch + 1


def test_last_replica_standing_that_lost_its_disk_cannot_erase_committed_records() -> None:
    """ISR {1} (below min 2), ELR {2}; 2 goes down, then 1; 1 comes back from an unclean
    shutdown (it may be empty): it must not lead, 2 must when it returns."""
    c = Cluster(min_isr=2)
    c.alter([1, 2])
    c.alter([1])
    c.fence(3)
    c.fence(2)
    assert c.view() == (1, [1], [2])
    c.fence(1)  # the last ISR member: offline, waiting for 1 or the ELR
    assert c.view() == (NO_LEADER, [1], [2])
    c.register(1, clean=False)
    leader, isr, elr = c.view()
    assert leader == NO_LEADER and isr == [] and elr == [2]
    c.register(2, clean=False)  # an ELR member, the last candidate left: it leads
    leader, isr, elr = c.view()
    assert leader == 2 and isr == [2]
    assert 1 not in elr  # the unclean restart is not eligible until it catches up


def test_last_replica_standing_after_a_clean_restart_leads_again_at_a_new_epoch() -> None:
    c = Cluster(min_isr=2)
    c.alter([1, 2])
    c.alter([1])
    c.fence(2)
    epoch = c.p.leader_epoch
    c.register(1, clean=True)
    assert c.view()[0] == 1
    assert c.p.leader_epoch == epoch + 1


def test_fsync_policy_keeps_an_unclean_restart_eligible() -> None:
    c = Cluster(min_isr=2, config={"durability.policy": "fsync"})
    c.alter([1, 2])
    c.alter([1])
    c.fence(2)
    c.register(1, clean=False)  # fsynced before acknowledging: nothing committed was lost
    assert c.view()[0] == 1


def test_restart_of_a_leader_moves_leadership_and_leaves_the_isr() -> None:
    c = Cluster(min_isr=2)
    epoch = c.p.leader_epoch
    c.register(1, clean=True)
    leader, isr, elr = c.view()
    assert leader == 2 and isr == [2, 3] and elr == []
    assert c.p.leader_epoch == epoch + 1


def test_restart_with_no_other_live_isr_member_leaves_the_partition_to_the_elr_or_offline() -> None:
    c = Cluster(min_isr=1, rf=2)
    c.fence(2)
    assert c.view() == (1, [1], [])
    c.register(1, clean=False)  # no ELR at all: the last member leads again
    assert c.view()[0] == 1


def test_isr_expansion_needs_a_live_broker_of_the_stated_incarnation() -> None:
    c = Cluster(min_isr=1)
    c.alter([1])
    c.fence(3)
    err(
        c.s,
        "alter_isr",
        InvalidRequestError,
        topic="t",
        partition=0,
        leader_id=1,
        leader_epoch=c.p.leader_epoch,
        partition_epoch=c.p.partition_epoch,
        isr=[1, 3],
    )
    old = c.epochs[2]
    c.register(2)  # 2 restarted: a fetch from its old incarnation must not put it back
    err(
        c.s,
        "alter_isr",
        StaleBrokerEpochError,
        topic="t",
        partition=0,
        leader_id=1,
        leader_epoch=c.p.leader_epoch,
        partition_epoch=c.p.partition_epoch,
        isr=[1, 2],
        broker_epochs=[[2, old]],
    )
    c.alter([1, 2], broker_epochs=[[2, c.epochs[2]]])
    assert c.view() == (1, [1, 2], [])


def test_isr_change_from_a_deposed_leader_is_fenced() -> None:
    c = Cluster(min_isr=1)
    c.fence(1)
    err(
        c.s,
        "alter_isr",
        FencedLeaderEpochError,
        topic="t",
        partition=0,
        leader_id=1,
        leader_epoch=0,
        partition_epoch=c.p.partition_epoch,
        isr=[1],
    )


@pytest.mark.parametrize("unclean", [False, True])
def test_unclean_election_only_when_enabled_and_never_into_an_elr_partition(unclean: bool) -> None:
    c = Cluster(min_isr=1, config={"unclean.leader.election.enable": str(unclean).lower()})
    c.alter([1])
    c.fence(1)
    leader, isr, _ = c.view()
    if unclean:
        assert leader == 2 and isr == [2]
    else:
        assert leader == NO_LEADER and isr == [1]
        c.unfence(1)
        assert c.view()[0] == 1
