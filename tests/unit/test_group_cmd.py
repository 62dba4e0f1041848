"""`raftlog group list|describe` output for Kafka groups, raftlog groups and groups of committed
offsets only, from what the Admin client returns (a fake Admin: no broker)."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from raftlog.cli import group_cmd

KAFKA_GROUP = {
    "group_id": "kg",
    "state": "Stable",
    "generation": 3,
    "protocol": "range",
    "protocol_type": "consumer",
    "rebalance_deadline_ms": None,
    "members": [
        {
            "member_id": "rdkafka-1",
            "client_id": "rdkafka",
            "instance_id": None,
            "session_timeout_ms": 45_000,
            "topics": ["t"],
            "assignment": [["t", 0], ["t", 1]],
            "rejoined": False,
        }
    ],
    "offsets": [["t", 0, 5, "", 1700]],
    "partitions": [
        {"topic": "t", "partition": 0, "committed": 5, "log_end_offset": 9, "lag": 4,
         "owner": "rdkafka-1"},
        {"topic": "t", "partition": 1, "committed": None, "log_end_offset": 2, "lag": None,
         "owner": "rdkafka-1"},
    ],
}  # fmt: skip
OFFSETS_ONLY = {
    **KAFKA_GROUP,
    "group_id": "og",
    "state": "Empty",
    "protocol": None,
    "protocol_type": "raftlog",
    "members": [],
    "partitions": [{**KAFKA_GROUP["partitions"][0], "owner": None}],
}


class FakeAdmin:
    def __init__(self, bootstrap: Any) -> None:
        pass

    def __enter__(self) -> FakeAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def list_groups(self) -> list[dict[str, Any]]:
        return [
            {"group_id": "kg", "state": "Stable", "generation": 3, "protocol": "range",
             "protocol_type": "consumer", "members": 1},
            {"group_id": "og", "state": "Empty", "generation": 0, "protocol": None,
             "protocol_type": "raftlog", "members": 0},
            # A broker of older code: no protocol_type.
            {"group_id": "old", "state": "Stable", "generation": 1, "protocol": "range",
             "members": 2},
        ]  # fmt: skip

    def describe_group(self, group_id: str) -> dict[str, Any]:
        return {"kg": KAFKA_GROUP, "og": OFFSETS_ONLY}[group_id]


@pytest.fixture(autouse=True)
def fake_admin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_cmd, "Admin", FakeAdmin)


def args(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(bootstrap_server="b:1", json=False, **kw)


def test_list_shows_each_groups_protocol_type(capsys: pytest.CaptureFixture[str]) -> None:
    assert group_cmd._list(args()) == 0
    assert capsys.readouterr().out.splitlines() == [
        "kg  Stable  generation 3  members 1  protocol range  type consumer",
        "og  Empty  generation 0  members 0  protocol -  type -",
        "old  Stable  generation 1  members 2  protocol range  type raftlog",
    ]
    assert group_cmd._list(argparse.Namespace(bootstrap_server="b:1", json=True)) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["protocol_type"] for r in rows] == ["consumer", None, "raftlog"]


def test_describe_a_kafka_group(capsys: pytest.CaptureFixture[str]) -> None:
    assert group_cmd._describe(args(group="kg")) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0] == "Group kg  type consumer  state Stable  generation 3  protocol range  members 1"
    )
    assert out[1] == "  member rdkafka-1  client rdkafka  partitions t-0, t-1"
    assert out[3].split() == ["t", "0", "5", "9", "4", "rdkafka-1"]
    assert out[4].split() == ["t", "1", "-", "2", "-", "rdkafka-1"]
    assert group_cmd._describe(argparse.Namespace(bootstrap_server="b", json=True, group="kg")) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["protocol_type"] == "consumer"
    assert shown["members"][0]["assignment"] == [
        {"topic": "t", "partition": 0},
        {"topic": "t", "partition": 1},
    ]


def test_describe_a_group_of_offsets_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert group_cmd._describe(args(group="og")) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Group og  type -  state Empty  generation 3  protocol -  members 0"
    assert out[2].split() == ["t", "0", "5", "9", "4", "-"]
