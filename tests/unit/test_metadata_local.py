"""The single-node topic registry: validation, persistence, errors that name the topic."""

from __future__ import annotations

import pytest

from raftlog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raftlog.metadata import BrokerInfo, LocalMetadata
from raftlog.topics import validate_topic_name

BROKER = BrokerInfo(1, "127.0.0.1", 9092)


def test_create_persist_reload_delete(tmp_path) -> None:  # type: ignore[no-untyped-def]
    md = LocalMetadata(str(tmp_path), BROKER)
    info = md.create_topic("page.views_v1-x", 3, 1, {"retention.ms": 1000})
    assert [p.partition for p in info.partitions] == [0, 1, 2]
    assert all(p.leader == 1 and p.isr == (1,) for p in info.partitions)
    assert info.config == {"retention.ms": "1000"}
    again = LocalMetadata(str(tmp_path), BROKER)
    assert again.topic("page.views_v1-x") == info
    again.delete_topic("page.views_v1-x")
    assert LocalMetadata(str(tmp_path), BROKER).topics() == {}


def test_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    md = LocalMetadata(str(tmp_path), BROKER)
    md.create_topic("t", 1, 1, {})
    with pytest.raises(TopicAlreadyExistsError, match="'t'"):
        md.create_topic("t", 1, 1, {})
    with pytest.raises(InvalidPartitionsError, match="partitions"):
        md.create_topic("u", 0, 1, {})
    with pytest.raises(InvalidRequestError, match="replication factor 3"):
        md.create_topic("u", 1, 3, {})
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes"):
        md.create_topic("u", 1, 1, {"segment.bytes": "tiny"})
    with pytest.raises(InvalidConfigError, match="retention_ms"):
        md.create_topic("u", 1, 1, {"retention.ms": "-5"})
    with pytest.raises(UnknownTopicOrPartitionError, match="'nope'"):
        md.delete_topic("nope")
    assert "u" not in md.topics()


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "slash/x", "é"])
def test_bad_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_good_topic_names() -> None:
    for name in ["a", "A.b_c-9", "x" * 249]:
        assert validate_topic_name(name) == name
