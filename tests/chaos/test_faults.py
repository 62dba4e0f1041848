"""Faults as data and injectors that always heal: schedules reproduce from their seed, network
faults become the right grudges, and every injector heals on exit, even when the body raised
or one target's healing failed."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.faults import (
    KINDS,
    MOVE_THROTTLES,
    NETWORK_KINDS,
    FaultError,
    FaultSpec,
    Grudge,
    grudge_for,
    inject,
    resolve_role,
    schedule,
)
from tests.integration._support import wait_for

NODES = [1, 2, 3]


class FakeCluster:
    """Records what the injectors ask; `fail_start` makes starting one node fail."""

    def __init__(self, pids: dict[int, int] | None = None, fail_start: int | None = None):
        self.calls: list[tuple[str, tuple[int, ...]]] = []
        self.pids = pids or {}
        self.fail_start = fail_start
        self.down: set[int] = set()

    def node_ids(self) -> list[int]:
        return list(NODES)

    def pid(self, node_id: int) -> int | None:
        return self.pids.get(node_id)

    def kill9(self, node_id: int) -> None:
        self.calls.append(("kill9", (node_id,)))
        self.down.add(node_id)

    def stop(self, node_id: int) -> None:
        self.calls.append(("stop", (node_id,)))
        self.down.add(node_id)

    def pause(self, node_id: int) -> None:
        os.kill(self.pids[node_id], signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        os.kill(self.pids[node_id], signal.SIGCONT)

    def start(self, *node_ids: int) -> None:
        self.calls.append(("start", node_ids))
        if self.fail_start in node_ids:
            raise FaultError(f"node {self.fail_start} would not start")
        self.down -= set(node_ids)


class FakeNetwork:
    def __init__(self) -> None:
        self.applied: list[Grudge] = []
        self.healed = 0

    def node_ids(self) -> list[int]:
        return list(NODES)

    def apply(self, grudge: Grudge) -> None:
        self.applied.append(grudge)

    def heal(self) -> None:
        self.healed += 1


# -- schedules ---------------------------------------------------------------------------------


def test_same_seed_same_schedule_other_seed_other_schedule() -> None:
    a = schedule(7, 300, KINDS, NODES)
    assert a == schedule(7, 300, KINDS, NODES)
    assert a != schedule(8, 300, KINDS, NODES)
    assert json.dumps([f.to_json() for f in a]) == json.dumps(
        [f.to_json() for f in schedule(7, 300, KINDS, NODES)]
    )
    assert [FaultSpec.from_json(f.to_json()) for f in a] == a


@given(
    st.integers(0, 2**32),
    st.floats(0, 600),
    st.lists(st.sampled_from(KINDS), min_size=1, max_size=4),
)
def test_schedules_keep_their_phases(seed: int, duration_s: float, kinds: list[str]) -> None:
    faults = schedule(seed, duration_s, kinds, NODES, steady_s=5, fault_s=(5, 20),
                      quiet_s=(5, 15), recovery_s=10)  # fmt: skip
    t = 5.0
    for f in faults:
        assert f.kind in kinds
        assert f.start_s >= t, "faults overlap or start before the steady phase ended"
        assert 5 <= f.duration_s <= 20
        assert set(f.targets) <= set(NODES) and f.targets
        if f.kind in ("kill", "pause", "restart", "isolate", "split"):
            assert len(f.targets) <= 1, "more than a minority of three nodes broken at once"
        t = f.start_s + f.duration_s + 5  # the quiet period's minimum
    if faults:
        last = faults[-1]
        assert last.start_s + last.duration_s <= duration_s - 10


def test_bad_specs_are_refused() -> None:
    with pytest.raises(FaultError, match="fault kind 'meteor'"):
        FaultSpec("meteor")
    with pytest.raises(FaultError, match="each must be one of"):
        schedule(1, 100, ["kill", "flood"], NODES)
    with (
        pytest.raises(FaultError, match="resolve role"),
        inject(FaultSpec("kill", role="controller"), FakeCluster()),
    ):
        pass


# -- grudges -----------------------------------------------------------------------------------


def test_network_faults_as_grudges() -> None:
    assert grudge_for(FaultSpec("isolate", (2,)), NODES) == {
        1: {2}, 2: {1, 3}, 3: {2},
    }  # fmt: skip
    assert grudge_for(FaultSpec("split", (1,), options={"clients": "majority"}), NODES) == {
        0: {1}, 1: {0, 2, 3}, 2: {1}, 3: {1},
    }  # fmt: skip
    five = [1, 2, 3, 4, 5]
    # Node 3 bridges {1, 2} and {4, 5}: it hears everyone, the sides do not hear each other.
    assert grudge_for(FaultSpec("bridge", (3,)), five) == {
        1: {4, 5}, 2: {4, 5}, 4: {1, 2}, 5: {1, 2},
    }  # fmt: skip
    assert grudge_for(FaultSpec("one-way", (1, 2, 3)), NODES) == {2: {1}, 3: {1}}
    with pytest.raises(FaultError, match="not nodes"):
        grudge_for(FaultSpec("isolate", (9,)), NODES)


# -- injectors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", NETWORK_KINDS)
def test_network_injector_heals_after_an_exception(kind: str) -> None:
    net = FakeNetwork()
    targets = (1, 2, 3) if kind == "one-way" else (2,)
    with pytest.raises(RuntimeError, match="boom"), inject(FaultSpec(kind, targets), network=net):
        assert net.applied and net.healed == 0
        raise RuntimeError("boom")
    assert net.healed == 1


def test_kill_restarts_every_target_even_when_the_body_fails() -> None:
    cluster = FakeCluster()
    with pytest.raises(RuntimeError), inject(FaultSpec("kill", (1, 3)), cluster):
        assert cluster.down == {1, 3}
        raise RuntimeError("the workload broke")
    assert cluster.calls == [("kill9", (1,)), ("kill9", (3,)), ("start", (1, 3))]
    assert cluster.down == set()


def test_kill_all_and_restart() -> None:
    cluster = FakeCluster()
    with inject(FaultSpec("kill-all"), cluster):
        assert cluster.down == set(NODES)
    assert cluster.calls[-1] == ("start", (1, 2, 3)) and not cluster.down
    cluster = FakeCluster()
    with inject(FaultSpec("restart", (2,)), cluster):
        assert cluster.down == {2}
    assert cluster.calls == [("stop", (2,)), ("start", (2,))]


def test_rolling_restart_restarts_each_in_turn() -> None:
    cluster = FakeCluster()
    with inject(FaultSpec("rolling-restart", (1, 2, 3)), cluster):
        assert not cluster.down
    assert cluster.calls == [(c, (n,)) for n in NODES for c in ("stop", "start")]
    cluster = FakeCluster(fail_start=2)
    with (
        pytest.raises(FaultError, match="node 2 would not start"),
        inject(FaultSpec("rolling-restart", (1, 2, 3)), cluster),
    ):
        pass
    # Node 2's start failed during the roll; leaving tried it again and reported the failure.
    assert cluster.calls[-1] == ("start", (2,)) and 3 not in [c[1][0] for c in cluster.calls]


def test_a_failed_heal_is_reported_after_all_heals_were_tried() -> None:
    cluster = FakeCluster(fail_start=1)
    with (
        pytest.raises(FaultError, match="healing failed: start nodes \\[1, 3\\]"),
        inject(FaultSpec("kill", (1, 3)), cluster),
    ):
        pass


def _state(pid: int) -> str:
    # /proc/PID/stat: "pid (comm) S ...": the state letter follows the command name.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def sleepers() -> Iterator[dict[int, subprocess.Popen[bytes]]]:
    procs = {n: subprocess.Popen(["sleep", "60"]) for n in NODES}
    yield procs
    for p in procs.values():
        p.kill()
        p.wait()


def test_pause_stops_and_continues_real_processes(
    sleepers: dict[int, subprocess.Popen[bytes]],
) -> None:
    cluster = FakeCluster(pids={n: p.pid for n, p in sleepers.items()})

    def stopped() -> list[bool]:
        return [_state(sleepers[n].pid) == "T" for n in NODES]

    with pytest.raises(RuntimeError), inject(FaultSpec("pause", (1, 2)), cluster):
        # Signals are delivered asynchronously: wait for the state to show it.
        wait_for(lambda: stopped() == [True, True, False], 5, "nodes 1 and 2 stopped")
        raise RuntimeError("interrupted while paused")
    wait_for(lambda: stopped() == [False, False, False], 5, "every node continued")


def test_roles_resolve_from_a_cluster_view() -> None:
    view = {
        "controller_id": 2,
        "brokers": [
            {"node_id": n, "host": "h", "port": n, "rack": None, "broker_epoch": e, "fenced": False}
            for n, e in ((1, 5), (2, 6))
        ],
        "partitions": [
            {
                "topic": "t",
                "partition": 0,
                "leader": 3,
                "leader_epoch": 4,
                "replicas": [3, 1, 2],
                "isr": [3, 1, 2],
            },
            {
                "topic": "t",
                "partition": 1,
                "leader": -1,
                "leader_epoch": 4,
                "replicas": [1],
                "isr": [],
            },
        ],
    }
    rng = random.Random(1)
    assert resolve_role(FaultSpec("kill", role="controller"), view, rng).targets == (2,)
    assert resolve_role(FaultSpec("kill", role="leader:t-0"), view, rng).targets == (3,)
    assert resolve_role(FaultSpec("pause", role="follower:t-0"), view, rng).targets in [(1,), (2,)]
    assert resolve_role(FaultSpec("kill", role="random"), view, rng).targets in [(1,), (2,)]
    assert resolve_role(FaultSpec("kill", (1,)), view, rng) == FaultSpec("kill", (1,))
    with pytest.raises(FaultError, match="has no leader"):
        resolve_role(FaultSpec("kill", role="leader:t-1"), view, rng)
    with pytest.raises(FaultError, match="unknown role or partition"):
        resolve_role(FaultSpec("kill", role="leader:t-9"), view, rng)


def test_reassign_faults_kill_one_node_and_alternate_growth() -> None:
    specs = schedule(5, 600, ("reassign",), [1, 2, 3, 4])
    assert len(specs) > 4
    assert all(len(s.targets) == 1 and s.targets[0] in (1, 2, 3, 4) for s in specs)
    assert [s.options["grow"] for s in specs] == [i % 2 == 1 for i in range(len(specs))]
    assert {s.options["throttle"] for s in specs} <= set(MOVE_THROTTLES)
    with pytest.raises(FaultError, match=r"chaos/move_faults\.py"), inject(specs[0]):
        pass
