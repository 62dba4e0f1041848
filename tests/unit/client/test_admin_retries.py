"""The Admin client retries a repeatable request's retriable refusals (AsyncAdmin._repeatable):
a metadata quorum whose leader changed under the command, a broker gone; a refusal retrying
cannot cure goes to the caller at once, and retries stop at the request timeout.

The cluster client is a fake that answers from a script: what is under test is the client's
retry rule, not a cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raftlog.client.admin import AsyncAdmin
from raftlog.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    NotControllerError,
    RaftlogError,
)


class ScriptedClient:
    def __init__(self, script: list[RaftlogError | dict[str, Any]], timeout_s: float = 5.0):
        self.script = script
        self.request_timeout_s = timeout_s
        self.calls = 0

    async def request(self, node_id: Any, api_key: int, body: dict[str, Any]) -> Any:
        self.calls += 1
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(step, RaftlogError):
            raise step
        return step, ()


def _admin(client: ScriptedClient) -> AsyncAdmin:
    admin = AsyncAdmin("127.0.0.1:1")
    admin.client = client  # type: ignore[assignment]
    return admin


def test_a_leader_change_and_a_lost_broker_are_retried() -> None:
    client = ScriptedClient(
        [
            NotControllerError("metadata command alter_topic_config failed: LEADER_CHANGED"),
            BrokerNotAvailableError("connection lost"),
            {"config": {"retention.ms": "5"}},
        ]
    )
    config = asyncio.run(_admin(client).alter_topic_config("t", {"retention.ms": "5"}))
    assert config == {"retention.ms": "5"} and client.calls == 3


def test_a_refusal_retrying_cannot_cure_is_raised_at_once() -> None:
    client = ScriptedClient([InvalidConfigError("retention.ms=-5: must be >= -1")])
    with pytest.raises(InvalidConfigError, match="must be >= -1"):
        asyncio.run(_admin(client).alter_topic_config("t", {"retention.ms": "-5"}))
    assert client.calls == 1


def test_retries_stop_at_the_request_timeout() -> None:
    client = ScriptedClient([NotControllerError("no leader")], timeout_s=0.5)
    with pytest.raises(NotControllerError, match="no leader"):
        asyncio.run(_admin(client).describe_cluster())
    assert 2 <= client.calls <= 5  # 0.1 + 0.2 s of backoff fit in 0.5 s, 0.4 more does not
