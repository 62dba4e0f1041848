"""The Kafka Produce handler's acks=all wait (raftlog/kafka/handlers/produce.py), with a fake
replica manager that holds each append's commit callback for the test to call.

The wait must hear a commit (or a failure) that lands before the connection's task first runs
the handler's coroutine: it did not, and such a request was never answered; librdkafka's
partition then stalled for its 5 s request timeout (a stopping leader's handed-over requests,
in the Kafka-client chaos runs' rolling restarts).
"""

from __future__ import annotations

import asyncio
from typing import Any

from raftlog.errors import NotLeaderOrFollowerError, RaftlogError
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.handlers.produce import handle_produce
from raftlog.kafka.messages.produce import ProduceRequest, ProduceResponse
from raftlog.metrics.stats import BrokerStats
from raftlog.storage.log import AppendInfo

TOPIC = "t"


class _Core:
    def check_produce(self, acks: int) -> RaftlogError | None:
        return None


class _Partition:
    core = _Core()


class _Replicas:
    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def append_as_leader(
        self, p: _Partition, chunks: list[memoryview], waits: list[Any]
    ) -> list[AppendInfo]:
        self.callbacks += [w[1] for w in waits if w is not None]
        return [AppendInfo(7, 7, 1, 1, len(c), 0, 0) for c in chunks]


class _Ctx:
    def __init__(self) -> None:
        self.replicas = _Replicas()
        self.stats = BrokerStats()

    def topics_to_auto_create(self, names: Any) -> list[str]:
        return []

    def writable_partition(self, tp: Any) -> _Partition:
        return _Partition()


def _request(partitions: int) -> ProduceRequest:
    records = memoryview(b"x" * 61)
    return ProduceRequest(None, -1, 5000, [(TOPIC, [(p, records) for p in range(partitions)])])


async def _answer(ctx: _Ctx, partitions: int, settle: Any) -> ProduceResponse:
    pending = handle_produce(ctx, _request(partitions), 8, None)  # type: ignore[arg-type]
    assert asyncio.iscoroutine(pending)
    settle(ctx.replicas.callbacks)  # before anyone awaits the answer
    return await asyncio.wait_for(pending, 2.0)


def test_commits_before_the_answer_is_awaited_still_answer_it() -> None:
    def commit_all(callbacks: list[Any]) -> None:
        for cb in callbacks:
            cb(None)

    response = asyncio.run(_answer(_Ctx(), 3, commit_all))
    ((topic, parts),) = response.topics
    assert topic == TOPIC and [(p.partition, p.error_code, p.base_offset) for p in parts] == [
        (0, 0, 7),
        (1, 0, 7),
        (2, 0, 7),
    ]


def test_a_lost_leadership_before_the_answer_is_awaited_still_answers_it() -> None:
    def fail_all(callbacks: list[Any]) -> None:
        for cb in callbacks:
            cb(NotLeaderOrFollowerError("broker 2 leads now"))

    response = asyncio.run(_answer(_Ctx(), 2, fail_all))
    ((_, parts),) = response.topics
    assert {p.error_code for p in parts} == {ErrorCode.NOT_LEADER_OR_FOLLOWER}


def test_an_answer_awaited_before_the_commit_waits_for_it() -> None:
    async def run() -> ProduceResponse:
        ctx = _Ctx()
        pending = handle_produce(ctx, _request(1), 8, None)  # type: ignore[arg-type]
        assert asyncio.iscoroutine(pending)
        task = asyncio.ensure_future(pending)
        await asyncio.sleep(0.05)
        assert not task.done()  # acks=all: nothing before the commit
        ctx.replicas.callbacks[0](None)
        return await asyncio.wait_for(task, 2.0)

    ((_, parts),) = asyncio.run(run()).topics
    assert parts[0].error_code == 0
