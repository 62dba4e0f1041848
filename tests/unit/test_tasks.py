"""`TaskSet`: owned background tasks whose failures are logged at once."""

from __future__ import annotations

import asyncio

import pytest

from raftlog.tasks import TaskSet


async def _fails() -> None:
    await asyncio.sleep(0)
    raise KeyError("a bug")


async def test_a_failed_task_is_logged_at_once_with_its_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = TaskSet("broker 3")
    task = tasks.spawn(_fails(), "ISR proposal for t-0")
    assert len(tasks) == 1
    await asyncio.wait([task])
    await asyncio.sleep(0)  # done callbacks run on the next turn
    assert len(tasks) == 0 and tasks.failures == 1
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "broker 3: ISR proposal for t-0 failed: KeyError('a bug')" in record.getMessage()
    assert record.exc_info is not None


async def test_cancel_is_not_a_failure_and_wait_returns_when_all_ended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = TaskSet("consumer")
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    async def quick() -> int:
        return 7

    tasks.spawn(forever(), "heartbeats")
    done = tasks.spawn(quick(), "auto-commit")
    await started.wait()
    tasks.cancel()
    await asyncio.wait_for(tasks.wait(), 5)
    assert len(tasks) == 0 and tasks.failures == 0 and done.result() == 7
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
