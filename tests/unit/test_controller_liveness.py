"""The active controller's liveness rules (raftlog/metadata/controller.py), on a fake clock
and a stand-in quorum: who is fenced, and when."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from raftlog.metadata.controller import CHECK_INTERVAL_S, CONTROLLER_STALL_MS, Controller

TIMEOUT_MS = 3000
STEP_MS = int(CHECK_INTERVAL_S * 1000)


class Quorum:
    """What the controller reads and proposes; a proposal is recorded and applied."""

    def __init__(self, brokers: dict[int, int]):
        self.is_leader = True
        self.state = SimpleNamespace(
            brokers={n: {"broker_epoch": e, "fenced": False} for n, e in brokers.items()}
        )
        self.proposed: list[tuple[str, int]] = []

    def read(self, fn: Any) -> Any:
        return fn(self.state)

    async def propose(self, name: str, /, **args: Any) -> int:
        if name != "noop":  # the new active controller's first command
            self.proposed.append((name, args["node_id"]))
            self.state.brokers[args["node_id"]]["fenced"] = name == "fence_broker"
        return 0


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


async def run_checks(c: Controller, clock: Clock, ms: int, heartbeats: dict[int, int]) -> None:
    """Regular passes for `ms`, the brokers in `heartbeats` (node -> epoch) heard before each."""
    for _ in range(ms // STEP_MS):
        clock.ms += STEP_MS
        for node, epoch in heartbeats.items():
            c.heard(node, epoch)
        c.check()
        await asyncio.sleep(0)  # let proposals run


@pytest.mark.asyncio
async def test_a_silent_broker_is_fenced_after_the_timeout_and_a_heard_one_is_not() -> None:
    quorum, clock = Quorum({1: 5, 2: 7}), Clock()
    c = Controller(quorum, "127.0.0.1:0", TIMEOUT_MS, clock_ms=clock)  # type: ignore[arg-type]
    await run_checks(c, clock, TIMEOUT_MS - 2 * STEP_MS, {1: 5, 2: 7})
    await run_checks(c, clock, TIMEOUT_MS - 2 * STEP_MS, {1: 5})
    assert quorum.proposed == []
    await run_checks(c, clock, 4 * STEP_MS, {1: 5})
    assert quorum.proposed == [("fence_broker", 2)]


@pytest.mark.asyncio
async def test_a_heartbeat_of_an_older_epoch_keeps_nobody_alive() -> None:
    quorum, clock = Quorum({1: 5}), Clock()
    c = Controller(quorum, "127.0.0.1:0", TIMEOUT_MS, clock_ms=clock)  # type: ignore[arg-type]
    await run_checks(c, clock, TIMEOUT_MS + 2 * STEP_MS, {1: 4})
    assert quorum.proposed == [("fence_broker", 1)]


@pytest.mark.asyncio
async def test_a_stalled_controller_does_not_count_its_own_stall_as_silence() -> None:
    quorum, clock = Quorum({1: 5, 2: 7}), Clock()
    c = Controller(quorum, "127.0.0.1:0", TIMEOUT_MS, clock_ms=clock)  # type: ignore[arg-type]
    await run_checks(c, clock, 1000, {1: 5, 2: 7})
    # The controller's loop is held up for twice the timeout: nobody was heard meanwhile.
    clock.ms += 2 * TIMEOUT_MS
    c.check()
    await asyncio.sleep(0)
    assert quorum.proposed == []
    # Its timeout starts again: broker 2, still silent, is fenced a full timeout later.
    await run_checks(c, clock, TIMEOUT_MS - 2 * STEP_MS, {1: 5})
    assert quorum.proposed == []
    await run_checks(c, clock, 4 * STEP_MS, {1: 5})
    assert quorum.proposed == [("fence_broker", 2)]


@pytest.mark.asyncio
async def test_a_late_pass_under_the_stall_bound_keeps_counting() -> None:
    quorum, clock = Quorum({1: 5}), Clock()
    c = Controller(quorum, "127.0.0.1:0", TIMEOUT_MS, clock_ms=clock)  # type: ignore[arg-type]
    await run_checks(c, clock, 1000, {1: 5})
    await run_checks(c, clock, TIMEOUT_MS - CONTROLLER_STALL_MS + 2 * STEP_MS, {})
    clock.ms += CONTROLLER_STALL_MS  # late, but not a stall
    c.check()
    await asyncio.sleep(0)
    assert quorum.proposed == [("fence_broker", 1)]
