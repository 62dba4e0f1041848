"""InitProducerId's typed messages: the documented layout (docs/PROTOCOL.md), and back."""

from __future__ import annotations

from raftlog import protocol
from raftlog.messages.producer_ids import InitProducerIdRequest, InitProducerIdResponse


def test_the_request_is_empty() -> None:
    body = InitProducerIdRequest().to_body()
    assert body == {}
    protocol.check_request_body(protocol.ApiKey.INIT_PRODUCER_ID, body)
    assert InitProducerIdRequest.from_body(body) == InitProducerIdRequest()


def test_the_response_is_the_documented_layout_and_round_trips() -> None:
    resp = InitProducerIdResponse(1000, 0)
    assert list(resp.to_body().items()) == [("producer_id", 1000), ("producer_epoch", 0)]
    assert InitProducerIdResponse.from_body(resp.to_body()) == resp
