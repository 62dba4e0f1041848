"""Topic names follow Kafka's rules."""

from __future__ import annotations

import pytest

from raftlog.errors import InvalidTopicError
from raftlog.topics import validate_topic_name


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "slash/x", "é"])
def test_bad_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_good_topic_names() -> None:
    for name in ["a", "A.b_c-9", "x" * 249]:
        assert validate_topic_name(name) == name
