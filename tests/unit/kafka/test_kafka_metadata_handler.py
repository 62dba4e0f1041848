"""The Kafka Metadata answer's controller_id (`admin_node`): always a broker the answer lists,
since Kafka's clients send admin requests there and wait, without refreshing, for a named
node to appear (librdkafka held a CreateTopics until its timeout when the active controller
was fenced at the moment of the answer)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from raftlog.kafka.handlers.metadata import admin_node, handle_metadata
from raftlog.kafka.messages.metadata import MetadataRequest
from raftlog.metadata.model import BrokerInfo


def context(controller_id: int, listed: list[int], this_node: int) -> Any:
    brokers = [BrokerInfo(n, "127.0.0.1", 9000 + n) for n in listed]
    metadata = SimpleNamespace(
        controller_id=controller_id,
        stale=False,
        kafka_brokers=lambda external: brokers,
        topics=dict,
    )
    return SimpleNamespace(
        metadata=metadata,
        config=SimpleNamespace(node_id=this_node),
        topics_to_auto_create=lambda names: [],
    )


@pytest.mark.parametrize(
    ("controller_id", "listed", "this_node", "named"),
    [
        (2, [1, 2, 3], 1, 2),  # the active controller, listed
        (2, [1, 3], 3, 3),  # the controller fenced: this node
        (-1, [1, 2, 3], 2, 2),  # no active controller: this node
        (2, [1, 3], 4, 1),  # neither listed (this node has no Kafka listener): the lowest listed
        (2, [], 1, -1),  # no broker listed at all
    ],
)
def test_controller_id_is_a_listed_broker(
    controller_id: int, listed: list[int], this_node: int, named: int
) -> None:
    assert admin_node(controller_id, set(listed), this_node) == named
    answer = handle_metadata(
        context(controller_id, listed, this_node),
        MetadataRequest(None, allow_auto_topic_creation=False),
        8,
        SimpleNamespace(external=False),
    )
    assert not callable(getattr(answer, "__await__", None))
    assert answer.controller_id == named  # type: ignore[union-attr]
    assert named == -1 or named in [b.node_id for b in answer.brokers]  # type: ignore[union-attr]
