"""InitProducerId (API 19): an idempotent producer asks for its producer id and epoch.

Request body ``{}``. Response body ``{"producer_id": int, "producer_epoch": int}`` (the epoch
is 0 for a new id: raftlog/broker/handlers/producer_ids.py).

Rules: see raftlog/messages/__init__.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raftlog.messages.empty import EmptyBody


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest(EmptyBody):
    """An InitProducerId request: it has no fields."""


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    """A producer id no other producer has had, and its epoch."""

    producer_id: int
    producer_epoch: int = 0

    def to_body(self) -> dict[str, Any]:
        return {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> InitProducerIdResponse:
        return cls(int(body["producer_id"]), int(body["producer_epoch"]))


__all__ = ["InitProducerIdRequest", "InitProducerIdResponse"]
