"""Offline replicas in the metadata: the `report_offline_replicas` command, and how
`describe_cluster` (cluster status) shows them, every field named."""

from __future__ import annotations

import copy
import pickle
import threading
from collections.abc import Callable
from typing import Any

from raftlog.cli.cluster_cmd import format_status
from raftlog.errors import StaleBrokerEpochError
from raftlog.metadata.cluster import PARTITION_VIEW_KEYS, ClusterMetadata
from raftlog.metadata.partition_state import PartitionState
from raftlog.metadata.quorum import QuorumStatus
from raftlog.metadata.state import MetadataState
from tests.unit.test_metadata_state import cluster as two_brokers
from tests.unit.test_metadata_state import ok


def cluster() -> tuple[MetadataState, dict[int, int]]:
    """Two registered brokers and a topic "t" of two partitions, each on both."""
    s, epochs = two_brokers(2)
    ok(s, "create_topic", name="t", topic_id="id-t", partitions=2, replication_factor=2, config={})
    return s, epochs


REASON = "t-0: damaged data below the recovery point 6050: .../00000000000000003000.log: byte 12275"


def test_a_report_replaces_the_previous_one_and_an_empty_one_clears_it() -> None:
    s, epochs = cluster()
    assert (
        ok(
            s,
            "report_offline_replicas",
            node_id=1,
            broker_epoch=epochs[1],
            replicas=[["t", 1, "disk full"], ["t", 0, REASON]],
        )
        == 2
    )
    assert s.offline_replicas == {
        1: {"broker_epoch": epochs[1], "replicas": [["t", 0, REASON], ["t", 1, "disk full"]]}
    }
    ok(s, "report_offline_replicas", node_id=1, broker_epoch=epochs[1], replicas=[["t", 1, "x"]])
    assert s.offline_replicas[1]["replicas"] == [["t", 1, "x"]]
    ok(s, "report_offline_replicas", node_id=1, broker_epoch=epochs[1], replicas=[])
    assert s.offline_replicas == {}


def test_a_report_from_a_stale_incarnation_is_refused_and_changes_nothing() -> None:
    s, epochs = cluster()
    ok(s, "register_broker", node_id=1, host="h", port=1, rack=None, incarnation="new", now_ms=1)
    before = s.snapshot()
    result = s.apply(
        ("report_offline_replicas", {"node_id": 1, "broker_epoch": epochs[1], "replicas": []})
    )
    assert result[0] == "err" and result[1] == StaleBrokerEpochError.code, result
    assert s.offline_replicas == before.offline_replicas


def test_entries_for_unknown_or_foreign_partitions_are_dropped() -> None:
    s, epochs = cluster()
    ok(
        s,
        "create_topic",
        name="one",
        topic_id="id-1",
        partitions=1,
        replication_factor=1,
        config={},
    )
    owner = s.topics["one"]["partitions"][0].replicas[0]
    other = 2 if owner == 1 else 1
    n = ok(
        s,
        "report_offline_replicas",
        node_id=other,
        broker_epoch=epochs[other],
        replicas=[["gone", 0, "r"], ["t", 7, "r"], ["one", 0, "not mine"], ["t", 0, "mine"]],
    )
    assert n == 1
    assert s.offline_replicas[other]["replicas"] == [["t", 0, "mine"]]


def test_the_state_with_reports_pickles_and_replays_identically() -> None:
    a, epochs = cluster()
    b, _ = cluster()
    cmd = (
        "report_offline_replicas",
        {"node_id": 2, "broker_epoch": epochs[2], "replicas": [["t", 1, "r"]]},
    )
    a.apply(cmd)
    b.apply(cmd)
    assert a == b
    assert pickle.loads(pickle.dumps(a)) == a


def test_a_state_from_before_the_field_accepts_reports() -> None:
    """A snapshot taken by an older version (format 1) has no `offline_replicas` field."""
    s, epochs = cluster()
    fields = s.__getstate__()
    del fields["snapshot_format"], fields["offline_replicas"]
    s = MetadataState.__new__(MetadataState)
    s.__setstate__(fields)  # what unpickling does
    ok(s, "report_offline_replicas", node_id=1, broker_epoch=epochs[1], replicas=[["t", 0, "r"]])
    assert s.offline_replicas[1]["replicas"] == [["t", 0, "r"]]


class FakeQuorum:
    """The parts of MetadataQuorum that ClusterMetadata reads: the state, its lock, a status."""

    def __init__(self, state: MetadataState):
        self.state = state
        self.lock = threading.Lock()

    def read(self, fn: Callable[[MetadataState], Any]) -> Any:
        with self.lock:
            return fn(self.state)

    def status(self) -> QuorumStatus:
        return QuorumStatus(True, "127.0.0.1:19001", 3, 40, 40, True, {})


def describe(s: MetadataState) -> dict[str, Any]:
    md = ClusterMetadata(FakeQuorum(s), {1: "127.0.0.1:19001", 2: "127.0.0.1:19002"})  # type: ignore[arg-type]
    return {"node_id": 1, **md.describe_cluster()}


def test_describe_cluster_names_every_field() -> None:
    s, epochs = cluster()
    d = describe(s)
    assert d["voters"] == [
        {"node_id": 1, "address": "127.0.0.1:19001"},
        {"node_id": 2, "address": "127.0.0.1:19002"},
    ]
    assert d["brokers"][0] == {
        "node_id": 1,
        "host": "127.0.0.1",
        "port": 9001,
        "external": None,
        "replication": None,
        "kafka": None,
        "kafka_external": None,
        "metrics": None,
        "rack": None,
        "broker_epoch": epochs[1],
        "fenced": False,
        "shutting_down": False,
    }
    p0 = d["partitions"][0]
    assert set(p0) == PARTITION_VIEW_KEYS
    assert (p0["topic"], p0["partition"], p0["offline_replicas"]) == ("t", 0, [])
    assert (p0["adding"], p0["removing"]) == ([], [])
    assert d["offline_logs"] == []
    assert d["controller_id"] == 1


def test_describe_cluster_shows_current_reports_only() -> None:
    s, epochs = cluster()
    ok(s, "report_offline_replicas", node_id=2, broker_epoch=epochs[2], replicas=[["t", 0, REASON]])
    d = describe(s)
    assert [p["offline_replicas"] for p in d["partitions"]] == [[2], []]
    assert d["offline_logs"] == [
        {"node_id": 2, "broker_epoch": epochs[2], "topic": "t", "partition": 0, "reason": REASON}
    ]
    text = format_status(d)
    # Broker 2 left t-0's ISR: under-replicated, led by broker 1.
    assert "Partitions: 2, offline: 0, under-replicated: 1, with offline replicas: 1" in text
    assert "  t-0  leader 1" in text and "UNDER-REPLICATED  OFFLINE REPLICAS [2]" in text
    assert f"  t-0 on broker 2: {REASON}" in text
    # Broker 2 restarts (a new registration): its old report no longer counts.
    ok(s, "register_broker", node_id=2, host="h", port=2, rack=None, incarnation="new", now_ms=1)
    d = describe(s)
    assert [p["offline_replicas"] for p in d["partitions"]] == [[], []]
    assert d["offline_logs"] == []
    assert "OFFLINE REPLICAS" not in format_status(d)


def partition(s: MetadataState, index: int) -> PartitionState:
    """A copy of partition `index` (later commands do not change it)."""
    return copy.deepcopy(s.topics["t"]["partitions"][index])


def test_an_offline_replica_leaves_the_isr_and_its_leadership_moves() -> None:
    s, epochs = cluster()
    led = [i for i in range(2) if partition(s, i).leader == 1]
    other = [i for i in range(2) if i not in led]
    assert led and other
    before = {i: partition(s, i) for i in range(2)}
    ok(
        s,
        "report_offline_replicas",
        node_id=1,
        broker_epoch=epochs[1],
        replicas=[["t", led[0], "r"]],
    )
    now = partition(s, led[0])
    assert (now.leader, now.isr) == (2, [2])
    assert now.leader_epoch == before[led[0]].leader_epoch + 1
    assert now.partition_epoch > before[led[0]].partition_epoch
    assert partition(s, other[0]) == before[other[0]]  # not reported: untouched
    # A second report of the same replica changes nothing more.
    ok(
        s,
        "report_offline_replicas",
        node_id=1,
        broker_epoch=epochs[1],
        replicas=[["t", led[0], "r"]],
    )
    assert partition(s, led[0]) == now


def test_an_offline_last_isr_member_keeps_its_place_and_its_leadership() -> None:
    s, epochs = cluster()
    p0 = partition(s, 0)
    follower = next(r for r in p0.replicas if r != p0.leader)
    ok(
        s,
        "report_offline_replicas",
        node_id=follower,
        broker_epoch=epochs[follower],
        replicas=[["t", 0, "r"]],
    )
    assert partition(s, 0).isr == [p0.leader]
    # Now the leader's log goes offline too: nobody else has the data, so it keeps the
    # leadership (its clients learn why from LogOfflineError); never the offline follower.
    ok(
        s,
        "report_offline_replicas",
        node_id=p0.leader,
        broker_epoch=epochs[p0.leader],
        replicas=[["t", 0, "r"]],
    )
    now = partition(s, 0)
    assert (now.leader, now.isr) == (p0.leader, [p0.leader])
    assert now.leader_epoch == p0.leader_epoch


def test_describe_cluster_leaves_out_reports_of_deleted_topics() -> None:
    s, epochs = cluster()
    ok(s, "report_offline_replicas", node_id=1, broker_epoch=epochs[1], replicas=[["t", 1, "r"]])
    ok(s, "delete_topic", name="t")
    assert describe(s)["offline_logs"] == []
