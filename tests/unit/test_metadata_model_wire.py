"""The metadata records keep their wire form once built (raftlog/metadata/model.py)."""

from __future__ import annotations

import dataclasses

from raftlog.metadata.cluster import _topic_info
from raftlog.metadata.model import PartitionInfo, TopicInfo
from raftlog.metadata.partition_state import PartitionState


def _state(isr_of_0: list[int], partition_epoch_of_0: int) -> dict[str, object]:
    parts = [
        PartitionState(
            topic="big",
            partition=i,
            replicas=[1, 2, 3],
            leader=1,
            leader_epoch=0,
            isr=isr_of_0 if i == 0 else [1, 2, 3],
            elr=[],
            partition_epoch=partition_epoch_of_0 if i == 0 else 0,
        )
        for i in range(1000)
    ]
    return {"name": "big", "topic_id": "id-big", "partitions": parts, "config": {}}


def test_a_change_of_one_partition_rebuilds_only_its_wire_form() -> None:
    before = _topic_info(_state([1, 2, 3], 0))
    wire = before.to_wire()["partitions"]
    assert before.to_wire()["partitions"] is wire  # built once
    after = _topic_info(_state([1, 2], 1), before)
    new = after.to_wire()["partitions"]
    assert new[0] == [0, 1, 0, [1, 2, 3], [1, 2], 1, []]
    assert all(new[i] is wire[i] for i in range(1, 1000))  # the others are reused
    assert TopicInfo.from_wire(after.to_wire()) == after


def test_a_record_copied_with_changes_does_not_keep_the_old_wire_form() -> None:
    p = PartitionInfo(0, 1, 2, (1, 2), (1,), 3)
    t = TopicInfo("a", "id-a", (p,))
    assert t.to_wire()["partitions"] == [[0, 1, 2, [1, 2], [1], 3, []]]
    moved = dataclasses.replace(t, partitions=(dataclasses.replace(p, leader=2, isr=(2,)),))
    assert moved.to_wire()["partitions"] == [[0, 2, 2, [1, 2], [2], 3, []]]
    assert moved == TopicInfo("a", "id-a", (PartitionInfo(0, 2, 2, (1, 2), (2,), 3),))
