"""The base of messages whose body is the empty map ``{}`` (requests that ask without
arguments, answers that only say "done")."""

from __future__ import annotations

from typing import Any, Self


class EmptyBody:
    """A message without fields: its body is ``{}``; a body's unknown fields are ignored."""

    __slots__ = ()

    def to_body(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Self:
        return cls()
