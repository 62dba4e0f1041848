"""InitProducerId: the messages match kafka-python's codecs byte for byte at v0-1; the handler
refuses transactional ids and gives idempotent producers a new id at epoch 0."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.old import init_producer_id as old
from kafka.protocol.producer.transaction import InitProducerIdRequest as KpRequest
from kafka.protocol.producer.transaction import InitProducerIdResponse as KpResponse
from kp_oracle import (
    INT16,
    INT32,
    INT64,
    NULLABLE_TEXT,
    assert_matches_kafka_python,
)

from raftlog.errors import InvalidRequestError, NotControllerError, RaftlogTimeoutError
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.handlers.producer_ids import handle_init_producer_id, id_error_code
from raftlog.kafka.messages.producer_ids import InitProducerIdRequest, InitProducerIdResponse

VERSIONS = (0, 1)

requests = st.builds(InitProducerIdRequest, NULLABLE_TEXT, INT32)
responses = st.builds(InitProducerIdResponse, INT16, INT64, INT16, INT32)


@pytest.mark.parametrize("version", VERSIONS)
@given(request=requests)
def test_request_matches_kafka_python(version: int, request: InitProducerIdRequest) -> None:
    assert_matches_kafka_python(request, version, KpRequest, old, "InitProducerIdRequest")


@pytest.mark.parametrize("version", VERSIONS)
@given(response=responses)
def test_response_matches_kafka_python(version: int, response: InitProducerIdResponse) -> None:
    assert_matches_kafka_python(response, version, KpResponse, old, "InitProducerIdResponse")


def test_the_layout_byte_by_byte() -> None:
    assert InitProducerIdRequest(None, 60000).encode(0) == bytes.fromhex("ffff 0000ea60")
    assert InitProducerIdResponse(0, 7, 0).encode(1) == bytes.fromhex(
        "00000000 0000 0000000000000007 0000"
    )


class _Ids:
    def __init__(self, outcome: int | Exception):
        self.outcome = outcome
        self.calls = 0

    async def next_id(self) -> int:
        self.calls += 1
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


class _Ctx:
    """What the handler uses of a HandlerContext: producer_ids."""

    def __init__(self, outcome: int | Exception):
        self.producer_ids = _Ids(outcome)


def _handle(ctx: Any, request: InitProducerIdRequest) -> InitProducerIdResponse:
    out = handle_init_producer_id(ctx, request, 1, None)  # type: ignore[arg-type]
    if isinstance(out, InitProducerIdResponse):
        return out
    return asyncio.run(out)  # type: ignore[arg-type]


def test_an_idempotent_producer_gets_a_new_id_at_epoch_0() -> None:
    ctx = _Ctx(4242)
    assert _handle(ctx, InitProducerIdRequest(None, -1)) == InitProducerIdResponse(0, 4242, 0)
    assert ctx.producer_ids.calls == 1


def test_a_transactional_id_is_refused_without_taking_an_id() -> None:
    ctx = _Ctx(1)
    answer = _handle(ctx, InitProducerIdRequest("tx-1", 60000))
    assert answer == InitProducerIdResponse(ErrorCode.UNSUPPORTED_VERSION, -1, -1)
    assert ctx.producer_ids.calls == 0


def test_no_id_now_is_a_code_every_client_retries() -> None:
    for error in (NotControllerError("no leader"), RaftlogTimeoutError("proposal timed out")):
        answer = _handle(_Ctx(error), InitProducerIdRequest())
        assert answer == InitProducerIdResponse(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert id_error_code(InvalidRequestError("x")) == ErrorCode.INVALID_REQUEST
