"""Topic names and topic-partition ids: the rules Kafka users already know.

A topic name is 1-249 characters of ASCII letters, digits, '.', '_' and '-', and is not "." or
"..": it becomes a directory name (`<topic>-<partition>`), so the rules keep it safe on every
filesystem. Names starting with "__" are reserved for raftlog's internal topics.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from raftlog.errors import InvalidTopicError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def validate_topic_name(name: object) -> str:
    """Return the name if it is legal, else raise InvalidTopicError saying why."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError(f"topic name must be a non-empty string, got {name!r}")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters; the limit is {MAX_NAME_LENGTH}"
        )
    if not _LEGAL.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} has characters outside ASCII letters, digits, '.', '_', '-'"
        )
    return name
