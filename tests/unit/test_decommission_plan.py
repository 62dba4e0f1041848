"""`raftlog broker decommission`'s plan (raftlog/cli/broker_cmd.py): every partition the
leaving broker holds gets the least loaded live broker in its place, the rest of its replicas
and their order kept; a partition that cannot be moved refuses the whole plan."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from raftlog.cli.broker_cmd import decommission_plan
from raftlog.errors import InvalidConfigError
from raftlog.topics import TopicPartition


def _p(topic: str, i: int, replicas: list[int], **moving: list[int]) -> dict[str, Any]:
    return {"topic": topic, "partition": i, "replicas": replicas, **moving}


def test_the_leaving_broker_is_replaced_in_place_by_the_least_loaded() -> None:
    parts = [_p("t", i, [1 + (i + j) % 4 for j in range(3)]) for i in range(8)]
    plan = decommission_plan(parts, [1, 2, 3, 4, 5], leaving=2)
    held = [TopicPartition("t", i) for i in range(8) if 2 in parts[i]["replicas"]]
    assert sorted(plan) == held
    for tp, target in plan.items():
        before = parts[tp.partition]["replicas"]
        assert 2 not in target and len(target) == 3 and len(set(target)) == 3
        # Only the leaving broker's place changes.
        assert [2 if r not in before else r for r in target] == before
    # The new broker 5 held nothing: it takes most of them, but the load stays even.
    after = Counter(
        r for i in range(8) for r in plan.get(TopicPartition("t", i), parts[i]["replicas"])
    )
    assert 2 not in after and max(after.values()) - min(after.values()) <= 1, after


def test_a_move_under_way_counts_by_its_target_and_nothing_else_moves() -> None:
    parts = [
        _p("t", 0, [4, 1, 2], adding=[4], removing=[2]),  # leaving 2 already
        _p("t", 1, [3, 1, 2], adding=[3], removing=[1]),  # 2 stays in its target
        _p("u", 0, [1, 3]),
    ]
    plan = decommission_plan(parts, [1, 2, 3, 4], leaving=2)
    assert plan == {TopicPartition("t", 1): [3, 4]}


def test_no_room_refuses_the_whole_plan() -> None:
    parts = [_p("t", 0, [1, 2]), _p("t", 1, [1, 2, 3])]
    with pytest.raises(InvalidConfigError, match=r"t-1 has 3 replicas .* no other live broker"):
        decommission_plan(parts, [1, 2, 3], leaving=2)
    assert decommission_plan([_p("t", 0, [1, 3])], [1, 2, 3], leaving=2) == {}
