"""The metadata snapshot format (raftlog/metadata/state.py): today's format round-trips as
plain records, and a snapshot written by the code of commit a115116 (format 1, before
partitions and groups were types) loads with everything it held and goes on working.

fixtures/metadata_snapshot_format1.pickle was written by that commit's code;
fixtures/make_metadata_snapshot_format1.py made it and says how."""

from __future__ import annotations

import copy
import copyreg
import os
import pickle
from typing import Any

import pytest
from pysyncobj import pickle as syncobj_pickle

from raftlog.metadata.groups import GroupPhase
from raftlog.metadata.partition_state import NO_LEADER
from raftlog.metadata.state import SNAPSHOT_FORMAT, MetadataState
from tests.unit.fixtures.make_metadata_snapshot_format1 import build
from tests.unit.test_metadata_state import ok

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "metadata_snapshot_format1.pickle")


class Format1:
    """Pickles as code up to a115116 pickled a MetadataState: the default pickling of an
    object (its class, then its fields as they are), with no format number."""

    def __init__(self, fields: dict[str, Any]):
        self.fields = fields

    def __reduce__(self) -> tuple[Any, ...]:
        return (copyreg._reconstructor, (MetadataState, object, None), self.fields)


def format1_fields(s: MetadataState) -> dict[str, Any]:
    """`s`'s fields in format 1's layout: today's records, without the format number."""
    fields = copy.deepcopy(s.__getstate__())
    del fields["snapshot_format"]
    return fields


def load_fixture() -> MetadataState:
    with open(FIXTURE, "rb") as f:
        state = syncobj_pickle.loads(f.read())
    assert isinstance(state, MetadataState)
    return state


def test_a_snapshot_of_commit_a115116_loads_with_everything_it_held() -> None:
    s = load_fixture()
    assert sorted(s.topics) == ["events", "logs"]
    events = s.topics["events"]
    assert events["topic_id"] == "id-events"
    assert events["config"] == {"min.insync.replicas": "2"}
    p0, p1, p2 = events["partitions"]
    assert (p0.topic, p0.partition, p2.partition) == ("events", 0, 2)
    assert (p0.replicas, p0.leader, p0.leader_epoch) == ([1, 2, 3], 1, 0)
    assert (p0.isr, p0.elr, p0.partition_epoch) == ([1], [2], 2)
    assert (p1.leader, p1.isr, p1.partition_epoch) == (2, [2, 1], 1)
    assert (p2.leader, p2.leader_epoch, p2.isr) == (1, 1, [1, 2])  # moved off fenced 3
    assert s.topics["logs"]["partitions"][1].isr == [2]
    assert s.brokers[3]["fenced"] and s.next_broker_epoch == 4
    assert s.offline_replicas == {2: {"broker_epoch": 2, "replicas": [["logs", 1, "checksum"]]}}
    readers = s.groups["readers"]
    assert readers.phase is GroupPhase.STABLE and readers.generation == 2
    assert readers.assignment == {"c-0": [["events", 0], ["events", 1]], "c-1": [["events", 2]]}
    growing = s.groups["growing"]
    assert growing.phase is GroupPhase.PREPARING_REBALANCE
    assert growing.rejoined == ["y-1"] and growing.rebalance_deadline_ms == 30_050
    assert growing.members["x-0"]["instance_id"] == "st-1" and growing.next_member == 2
    assert s.groups["replay"].phase is GroupPhase.EMPTY
    assert s.committed("readers") == {
        ("events", 0): (40, "m", 30),
        ("events", 1): (41, "m", 30),
        ("events", 2): (42, "m", 30),
    }
    assert s.committed("replay") == {("logs", 0): (7, "reset", 60)}
    assert s.next_producer_id == 1000
    assert (s.version, s.topology_version, s.partitions_created) == (17, 8, 5)


def test_the_loaded_snapshot_equals_todays_state_from_the_same_commands() -> None:
    """The commands that made the fixture give, with today's code, the state it holds."""
    assert load_fixture() == build()


def test_the_loaded_snapshot_goes_on_working() -> None:
    s = load_fixture()
    # The partition rules: broker 3 returns and rejoins an ISR; the leader of events-0 fails.
    epoch3 = s.brokers[3]["broker_epoch"]
    ok(s, "unfence_broker", node_id=3, broker_epoch=epoch3)
    p1 = s.topics["events"]["partitions"][1]
    ok(s, "alter_isr", topic="events", partition=1, leader_id=2, leader_epoch=p1.leader_epoch,
       partition_epoch=p1.partition_epoch, isr=[2, 3, 1])  # fmt: skip
    assert p1.isr == [2, 3, 1]
    ok(s, "fence_broker", node_id=1, broker_epoch=s.brokers[1]["broker_epoch"])
    p0 = s.topics["events"]["partitions"][0]
    assert (p0.leader, p0.isr, p0.elr) == (2, [2], [1])  # the ELR member leads, 1 is ELR
    assert s.topics["logs"]["partitions"][0].leader == 2
    # The group rules: x-0 rejoins and completes the rebalance; commits go on.
    view = ok(s, "join_group", group_id="growing", member_id="x-0", client_id="x",
              instance_id="st-1", session_timeout_ms=10_000, rebalance_timeout_ms=30_000,
              topics=["logs"], protocols=["range", "roundrobin"], now_ms=70)  # fmt: skip
    assert view["state"] == "Stable" and view["generation"] == 2
    ok(s, "commit_offsets", group_id="readers", member_id="c-1", generation=2,
       offsets=[["events", 2, 50, ""]], now_ms=80)  # fmt: skip
    assert s.committed("readers")[("events", 2)] == (50, "", 80)


def test_a_snapshot_holds_plain_records_and_its_format_and_round_trips() -> None:
    s = build()
    blob = syncobj_pickle.dumps(s)
    # No class of the partition or group types: renaming them never breaks a snapshot.
    assert b"PartitionState" not in blob and b"GroupState" not in blob
    fields = pickle.loads(blob).__getstate__()
    assert fields["snapshot_format"] == SNAPSHOT_FORMAT == 2
    assert fields["topics"]["events"]["partitions"][0] == {
        "replicas": [1, 2, 3],
        "leader": 1,
        "leader_epoch": 0,
        "isr": [1],
        "elr": [2],
        "partition_epoch": 2,
    }
    assert fields["groups"]["readers"]["state"] == "Stable"
    assert syncobj_pickle.loads(blob) == s
    assert s.snapshot() == s and s.snapshot() is not s


def test_format_1_records_of_older_code_get_their_missing_fields() -> None:
    """Code older than a115116 wrote partitions without "elr", groups without the two-step
    rebalance's fields, and no offline_replicas or topology_version."""
    s = build()
    fields = format1_fields(s)
    for t in fields["topics"].values():
        for p in t["partitions"]:
            if not p["elr"]:
                del p["elr"]
    del fields["offline_replicas"], fields["topology_version"]
    loaded = pickle.loads(pickle.dumps(Format1(fields), protocol=2))
    assert loaded.offline_replicas == {} and loaded.topology_version == 0
    assert loaded.topics["logs"]["partitions"][0].elr == []
    assert loaded.topics == s.topics and loaded.groups == s.groups


@pytest.mark.parametrize("version", [3, 0, "2"])
def test_a_snapshot_format_this_code_does_not_know_is_refused(version: object) -> None:
    fields = format1_fields(build())
    fields["snapshot_format"] = version
    with pytest.raises(ValueError, match="metadata snapshot format"):
        pickle.loads(pickle.dumps(Format1(fields), protocol=2))


def test_an_offline_partition_survives_the_round_trip() -> None:
    s = build()
    for n in (1, 2):
        ok(s, "fence_broker", node_id=n, broker_epoch=s.brokers[n]["broker_epoch"])
    offline = [p for p in s.topics["logs"]["partitions"] if p.leader == NO_LEADER]
    assert offline
    assert pickle.loads(pickle.dumps(s, protocol=2)) == s
