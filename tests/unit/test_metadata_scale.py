"""The metadata at scale: ISR changes in batches, and views rebuilt only where they changed."""

from __future__ import annotations

import copy

from raftlog.errors import FencedLeaderEpochError, InvalidRequestError, InvalidUpdateVersionError
from raftlog.metadata.cluster import _topic_info
from raftlog.metadata.state import MetadataState
from tests.unit.test_metadata_state import cluster, err, ok


def shrink(s: MetadataState, partition: int, epoch: int = 0) -> dict[str, object]:
    p = s.topics["t"]["partitions"][partition]
    return {
        "topic": "t",
        "partition": partition,
        "leader_id": p.leader,
        "leader_epoch": epoch,
        "partition_epoch": p.partition_epoch,
        "isr": [p.leader],
        "broker_epochs": [],
    }


def test_a_batch_of_isr_changes_applies_or_refuses_each_on_its_own() -> None:
    s, _ = cluster(3)
    ok(s, "create_topic", name="t", topic_id="id", partitions=4, replication_factor=3, config={})
    alone = copy.deepcopy(s)
    changes = [shrink(s, 0), shrink(s, 1, epoch=7), shrink(s, 2), {"topic": "t"}]
    results = ok(s, "alter_isr_batch", changes=changes)
    assert results[0] == ("ok", 1) and results[2] == ("ok", 1)
    assert results[1][:2] == ("err", FencedLeaderEpochError.code)
    assert results[3][:2] == ("err", InvalidRequestError.code)  # malformed: named, refused
    # Exactly as the same changes one command each.
    ok(alone, "alter_isr", **shrink(alone, 0))
    err(alone, "alter_isr", FencedLeaderEpochError, **shrink(alone, 1, epoch=7))
    ok(alone, "alter_isr", **shrink(alone, 2))
    assert alone.topics == s.topics
    # A change sent twice (its answer was lost) is refused the second time.
    again = ok(s, "alter_isr_batch", changes=[changes[0]])
    assert again[0][:2] == ("err", InvalidUpdateVersionError.code)


def test_a_replica_reported_offline_cannot_rejoin_the_isr() -> None:
    s, epochs = cluster(3)
    ok(s, "create_topic", name="t", topic_id="id", partitions=1, replication_factor=3, config={})
    p = s.topics["t"]["partitions"][0]
    leader, follower = p.leader, p.replicas[1]
    ok(s, "alter_isr", **shrink(s, 0))
    ok(
        s,
        "report_offline_replicas",
        node_id=follower,
        broker_epoch=epochs[follower],
        replicas=[["t", 0, "damaged"]],
    )
    message = err(
        s,
        "alter_isr",
        InvalidRequestError,
        topic="t",
        partition=0,
        leader_id=leader,
        leader_epoch=p.leader_epoch,
        partition_epoch=p.partition_epoch,
        isr=[leader, follower],
    )
    assert "reported its replica's log offline" in message


def test_a_view_keeps_the_objects_of_what_did_not_change() -> None:
    s, _ = cluster(3)
    ok(s, "create_topic", name="t", topic_id="id", partitions=3, replication_factor=3, config={})
    first = _topic_info(s.topics["t"])
    assert _topic_info(s.topics["t"], first) is first  # nothing changed: the same view
    ok(s, "alter_isr", **shrink(s, 1))
    second = _topic_info(s.topics["t"], first)
    assert second is not first
    assert second.partitions[0] is first.partitions[0]
    assert second.partitions[2] is first.partitions[2]
    assert second.partitions[1].isr == (s.topics["t"]["partitions"][1].leader,)
    # A topic deleted and created again under the name is new throughout.
    ok(s, "delete_topic", name="t")
    ok(s, "create_topic", name="t", topic_id="id2", partitions=3, replication_factor=3, config={})
    third = _topic_info(s.topics["t"], second)
    assert all(a is not b for a, b in zip(third.partitions, second.partitions, strict=True))
