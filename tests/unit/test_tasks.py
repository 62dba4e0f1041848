"""`TaskSet`: owned background tasks whose failures are logged at once; and no task in
raftlog/ without an owner."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from raftlog.tasks import TaskSet

RAFTLOG = Path(__file__).resolve().parents[2] / "raftlog"

# Tasks created outside a TaskSet or TaskGroup: (file, enclosing function), each either awaited
# by the function that made it (the consumer's join: by every poll until it ends) or watched
# by a done callback of its own (the producer's sender: a failure fails every batch).
OWNED_OTHERWISE = {
    ("raftlog/client/reader.py", "read_range"),
    ("raftlog/metadata/commit_batcher.py", "_flush"),
    ("raftlog/client/consumer.py", "_start_join"),
    ("raftlog/client/sender.py", "start"),
}


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


def _enclosing_function(tree: ast.AST, target: ast.AST) -> str:
    found = "<module>"
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            n is target for n in ast.walk(node)
        ):
            found = node.name  # walk goes outer to inner: the last match is innermost
    return found


def test_every_task_in_raftlog_has_an_owner() -> None:
    """asyncio.ensure_future / create_task outside raftlog/tasks.py only on a TaskGroup
    (`tg.create_task`) or where the task is owned otherwise (OWNED_OTHERWISE)."""
    strays = []
    for path in sorted(RAFTLOG.rglob("*.py")):
        rel = str(path.relative_to(RAFTLOG.parent))
        if rel == "raftlog/tasks.py":
            continue
        tree = ast.parse(path.read_text(), rel)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            if node.func.attr not in ("ensure_future", "create_task"):
                continue
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == "tg":
                continue  # a TaskGroup owns it
            where = (rel, _enclosing_function(tree, node))
            if where not in OWNED_OTHERWISE:
                strays.append(f"{rel}:{node.lineno} in {where[1]}")
    assert not strays, f"tasks without an owner (use raftlog.tasks.TaskSet): {strays}"
