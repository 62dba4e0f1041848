"""The group coordinator over a real MetadataState: membership and generations, expiry and its
grace period, the active/inactive role, commit batching (one Raft entry for a burst, one
result per caller), offsets, reset and describe; Kafka's classic groups (the MEMBER_ID_REQUIRED
round, JoinGroup answers with the leader, SyncGroup waiting for the leader's assignment).

The quorum is a fake that applies each proposal to a MetadataState in memory (arguments
pickled, as Raft would), counts proposals and can fail or hold them; the clock is a fake
advanced by hand. Expiry is tested through `sweep()`, the body of the `run()` loop.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.errors import (
    CommitFailedError,
    GroupIdNotFoundError,
    GroupNotEmptyError,
    InconsistentGroupProtocolError,
    InvalidConfigError,
    InvalidRequestError,
    InvalidTopicError,
    NotControllerError,
    NotCoordinatorError,
    PolicyViolationError,
    RaftlogError,
    RaftlogTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    error_from_code,
)
from raftlog.metadata import group_requests
from raftlog.metadata.coordinator import CoordinatorConfig, GroupCoordinator
from raftlog.metadata.quorum import COMMAND_BYTES_MAX, command_bytes
from raftlog.metadata.state import MetadataState

SESSION_MS = 10_000


class FakeQuorum:
    """MetadataQuorum's propose/read over a local MetadataState; like the real one, it refuses
    a command over COMMAND_BYTES_MAX, and it records every command's serialized size."""

    def __init__(self) -> None:
        self.state = MetadataState()
        self.calls: list[str] = []
        self.sizes: list[int] = []
        # name -> errors the next proposals of that name raise, in order
        self.failures: dict[str, list[RaftlogError]] = {}
        # while set and not released, commit_batch proposals wait (a slow Raft round trip)
        self.commit_gate: asyncio.Event | None = None

    async def propose(self, name: str, /, **args: Any) -> Any:
        self.calls.append(name)
        size = command_bytes((name, args))
        self.sizes.append(size)
        if size > COMMAND_BYTES_MAX:
            raise PolicyViolationError(f"{name} is {size} bytes")
        await asyncio.sleep(0)  # the round trip: other tasks run meanwhile
        if name == "commit_batch" and self.commit_gate is not None:
            await self.commit_gate.wait()
        if self.failures.get(name):
            raise self.failures[name].pop(0)
        result = self.state.apply((name, pickle.loads(pickle.dumps(args))))
        if result[0] == "ok":
            return result[1]
        raise error_from_code(result[1], result[2])

    def read(self, fn: Callable[[MetadataState], Any]) -> Any:
        return fn(self.state)

    def apply(self, name: str, /, **args: Any) -> Any:
        result = self.state.apply((name, args))
        assert result[0] == "ok", result
        return result[1]


class FakeClock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@pytest.fixture
def quorum() -> FakeQuorum:
    q = FakeQuorum()
    q.apply(
        "register_broker",
        node_id=1,
        host="127.0.0.1",
        port=9001,
        rack=None,
        incarnation="i",
        now_ms=0,
    )
    q.apply(
        "create_topic", name="t", topic_id="id-t", partitions=4, replication_factor=1, config={}
    )
    return q


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def make(
    quorum: FakeQuorum, clock: FakeClock
) -> AsyncIterator[Callable[..., GroupCoordinator]]:
    """Active coordinators over the shared fake quorum and clock, closed after the test."""
    made: list[GroupCoordinator] = []

    def factory(active: bool = True, **kw: Any) -> GroupCoordinator:
        kw.setdefault("commit_linger_ms", 0)
        c = GroupCoordinator(quorum.propose, quorum.read, clock_ms=clock, **kw)
        if active:
            c.become_active()
        made.append(c)
        return c

    yield factory
    for c in made:
        await c.close()


@pytest.fixture
def coord(make: Callable[..., GroupCoordinator]) -> GroupCoordinator:
    return make()


async def join(
    c: GroupCoordinator,
    member_id: str = "",
    group_id: str = "g",
    client_id: str = "c",
    topics: tuple[str, ...] = ("t",),
) -> dict[str, Any]:
    return await c.join(
        group_id,
        member_id,
        client_id,
        None,
        SESSION_MS,
        30_000,
        list(topics),
        ["range"],
    )


def members(quorum: FakeQuorum, group_id: str = "g") -> list[str]:
    return sorted(quorum.state.groups[group_id].members)


async def until(condition: Callable[[], bool], what: str) -> None:
    """Let the loop run until `condition` holds (no clock: a bounded number of turns)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not reached: {what}")


async def group_of(
    c: GroupCoordinator, n: int, group_id: str = "g", **kw: Any
) -> list[dict[str, Any]]:
    """A Stable group of `n` new members, formed as consumers form it: the first join is
    answered at once; the others wait in the barrier until the first, told by its heartbeat,
    joins again. Their views, first member first."""
    first = await join(c, group_id=group_id, **kw)
    if n == 1:
        return [first]
    waiting = [asyncio.create_task(join(c, group_id=group_id, **kw)) for _ in range(n - 1)]
    state = c._read(lambda s: s)
    await until(lambda: len(state.groups[group_id].members) == n, f"{n} members")
    assert not any(t.done() for t in waiting)  # the barrier holds them
    with pytest.raises(RebalanceInProgressError):
        c.heartbeat(group_id, first["member_id"], first["generation"])
    again = await join(c, member_id=first["member_id"], group_id=group_id, **kw)
    return [again, *[await t for t in waiting]]


# -- membership ------------------------------------------------------------------------------


async def test_join_heartbeat_and_generation_bump_on_second_join(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    a = await join(coord)
    assert a == {
        "member_id": "c-0",
        "generation": 1,
        "state": "Stable",
        "protocol": "range",
        "assignment": [["t", 0], ["t", 1], ["t", 2], ["t", 3]],
    }
    assert coord.heartbeat("g", "c-0", 1) == 1

    # A second member's join waits in the barrier until the first has rejoined.
    joining = asyncio.create_task(join(coord))
    await until(lambda: members(quorum) == ["c-0", "c-1"], "c-1 in the group")
    for _ in range(10):
        await asyncio.sleep(0)
    assert not joining.done()
    assert coord.describe_group("g")["state"] == "PreparingRebalance"
    with pytest.raises(RebalanceInProgressError, match="'c-0' at generation 1"):
        coord.heartbeat("g", "c-0", 1)
    again = await join(coord, member_id="c-0")
    b = await joining
    assert b["member_id"] == "c-1" and b["generation"] == again["generation"] == 2
    assert b["state"] == again["state"] == "Stable"
    assert sorted(again["assignment"] + b["assignment"]) == a["assignment"]
    assert again["assignment"] and b["assignment"]
    # Joining again unchanged into the Stable group: answered at once, no new generation.
    assert (await join(coord, member_id="c-0"))["generation"] == 2
    # A stale generation is no heartbeat error: the answer tells the member to rejoin.
    assert coord.heartbeat("g", "c-0", 1) == 2
    assert quorum.calls == ["join_group"] * 4  # heartbeats never reach Raft

    with pytest.raises(UnknownMemberIdError, match="ghost"):
        coord.heartbeat("g", "ghost", 2)
    with pytest.raises(UnknownMemberIdError, match="nogroup"):
        coord.heartbeat("nogroup", "c-0", 1)
    # Rejoining with an id the group does not know is refused by the state machine.
    with pytest.raises(UnknownMemberIdError):
        await join(coord, member_id="ghost")


async def test_leave_rebalances_and_forgets_the_member(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    await group_of(coord, 2)
    assert await coord.leave("g", ["c-0", "not-a-member"]) == 1
    assert members(quorum) == ["c-1"]
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat("g", "c-1", 2)
    assert (await join(coord, member_id="c-1"))["generation"] == 3
    assert coord.heartbeat("g", "c-1", 3) == 3
    with pytest.raises(UnknownMemberIdError):
        coord.heartbeat("g", "c-0", 3)


async def test_malformed_requests_are_refused_before_raft(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    bad_offsets: list[Any] = [
        [["t", 0]],
        [["t", "0", 1, ""]],
        [["t", 0, -1, ""]],
        [["t", 0, 1, 5]],
        [[0, 0, 1, ""]],
        "t:0",
    ]
    for offsets in bad_offsets:
        with pytest.raises(InvalidRequestError):
            await coord.commit("g", "c-0", 1, offsets)
    with pytest.raises(InvalidRequestError, match="session_timeout_ms"):
        await coord.join("g", "", "c", None, 0, 30_000, ["t"], ["range"])
    with pytest.raises(InvalidRequestError, match="topics"):
        await coord.join("g", "", "c", None, SESSION_MS, 30_000, "t", ["range"])  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="group_id"):
        await coord.join("", "", "c", None, SESSION_MS, 30_000, ["t"], ["range"])
    with pytest.raises(InvalidRequestError):
        await coord.reset_offsets("g", [["t", 0, 1, "extra"]])
    assert quorum.calls == []


# -- expiry ----------------------------------------------------------------------------------


async def test_expiry_after_session_timeout_moves_assignment_to_survivor(
    coord: GroupCoordinator, quorum: FakeQuorum, clock: FakeClock
) -> None:
    a, b = await group_of(coord, 2)
    assert len(b["assignment"]) == 2
    clock.advance(6_000)
    assert coord.heartbeat("g", b["member_id"], 2) == 2
    clock.advance(SESSION_MS - 6_000)  # a: exactly the session timeout, not beyond it
    assert await coord.sweep() == 0
    assert members(quorum) == ["c-0", "c-1"]

    clock.advance(1)
    assert await coord.sweep() == 1
    assert members(quorum) == [b["member_id"]]
    assert quorum.calls.count("leave_group") == 1
    # The survivor learns of the rebalance from its heartbeat and takes every partition.
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat("g", b["member_id"], 2)
    rejoined = await join(coord, member_id=b["member_id"])
    assert rejoined["generation"] == 3
    assert rejoined["assignment"] == [["t", 0], ["t", 1], ["t", 2], ["t", 3]]
    # The expired member is gone: its heartbeat and its commits are refused.
    with pytest.raises(UnknownMemberIdError):
        coord.heartbeat("g", a["member_id"], 2)
    with pytest.raises(CommitFailedError, match="not a member"):
        await coord.commit("g", a["member_id"], 2, [["t", 0, 5, ""]])
    assert await coord.sweep() == 0  # nothing left to expire: no proposal
    assert quorum.calls.count("leave_group") == 1


async def test_one_leave_proposal_per_group_per_sweep(
    coord: GroupCoordinator, quorum: FakeQuorum, clock: FakeClock
) -> None:
    for group_id in ("g1", "g2"):
        await group_of(coord, 3, group_id=group_id)
    clock.advance(SESSION_MS + 1)
    assert await coord.sweep() == 6
    assert quorum.calls.count("leave_group") == 2
    assert members(quorum, "g1") == [] and members(quorum, "g2") == []


async def test_failed_expiry_is_logged_and_retried_on_the_next_sweep(
    coord: GroupCoordinator,
    quorum: FakeQuorum,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await join(coord)
    clock.advance(SESSION_MS + 1)
    quorum.failures["leave_group"] = [RaftlogTimeoutError("no quorum leader")] * 3
    with caplog.at_level(logging.WARNING, logger="raftlog.metadata.coordinator"):
        for _ in range(3):  # a full disk fails every sweep: one warning per interval
            assert await coord.sweep() == 0
            clock.advance(100)
    assert caplog.text.count("retrying every sweep") == 1
    assert members(quorum) == ["c-0"]
    assert await coord.sweep() == 1
    assert members(quorum) == []


async def test_run_loop_survives_a_failing_sweep_and_stops_when_cancelled(
    make: Callable[..., GroupCoordinator], caplog: pytest.LogCaptureFixture
) -> None:
    coord = make(sweep_interval_ms=0)
    sweeps = 0

    async def sweep() -> int:
        nonlocal sweeps
        sweeps += 1
        if sweeps == 1:
            raise RuntimeError("bug in sweep")
        return 0

    coord.sweep = sweep  # type: ignore[method-assign]
    task = asyncio.create_task(coord.run())
    for _ in range(100):
        if sweeps >= 3:
            break
        await asyncio.sleep(0)
    assert sweeps >= 3
    assert "group sweep failed" in caplog.text
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_new_controller_gives_every_member_a_grace_period(
    make: Callable[..., GroupCoordinator], quorum: FakeQuorum, clock: FakeClock
) -> None:
    old = make()
    await group_of(old, 2)
    old.become_inactive()
    # The failover takes far longer than a session: heartbeats went to the old controller.
    clock.advance(6 * SESSION_MS)
    new = make(active=False)
    assert await new.sweep() == 0  # inactive: never expires
    new.become_active()
    assert await new.sweep() == 0
    clock.advance(SESSION_MS)
    assert new.heartbeat("g", "c-0", 2) == 2
    assert await new.sweep() == 0
    clock.advance(1)
    assert await new.sweep() == 1  # c-1 never heartbeated to the new controller
    assert members(quorum) == ["c-0"]
    assert (await join(new, member_id="c-0"))["generation"] == 3
    # Leadership comes back to the first node after another long gap: heartbeat times it
    # kept from its earlier term must not count.
    new.become_inactive()
    clock.advance(6 * SESSION_MS)
    old.become_active()
    assert await old.sweep() == 0
    assert members(quorum) == ["c-0"]


async def test_member_that_joined_elsewhere_gets_grace_on_first_sight(
    coord: GroupCoordinator, quorum: FakeQuorum, clock: FakeClock
) -> None:
    quorum.apply(
        "join_group",
        group_id="g",
        member_id="",
        client_id="other",
        instance_id=None,
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=30_000,
        topics=["t"],
        protocols=["range"],
        now_ms=0,
    )
    clock.advance(SESSION_MS + 1)
    assert await coord.sweep() == 0  # first sight starts its clock
    clock.advance(SESSION_MS + 1)
    assert await coord.sweep() == 1


async def test_inactive_coordinator_refuses_member_operations(
    coord: GroupCoordinator, quorum: FakeQuorum, clock: FakeClock
) -> None:
    await join(coord)
    coord.become_inactive()
    calls = list(quorum.calls)
    with pytest.raises(NotCoordinatorError):
        await join(coord)
    with pytest.raises(NotCoordinatorError):
        coord.heartbeat("g", "c-0", 1)
    with pytest.raises(NotCoordinatorError):
        await coord.commit("g", "c-0", 1, [["t", 0, 1, ""]])
    with pytest.raises(NotCoordinatorError):
        await coord.leave("g", ["c-0"])
    clock.advance(10 * SESSION_MS)
    assert await coord.sweep() == 0
    assert quorum.calls == calls
    assert members(quorum) == ["c-0"]
    # Reads of the local state still work on any node.
    assert coord.describe_group("g")["state"] == "Stable"
    coord.become_active()
    assert coord.heartbeat("g", "c-0", 1) == 1


# -- the rebalance barrier -------------------------------------------------------------------


async def test_commits_during_the_rebalance_are_accepted_and_stale_ones_after_it_refused(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    a = await join(coord)
    joining = asyncio.create_task(join(coord))
    await until(lambda: len(members(quorum)) == 2, "a second member")
    # Preparing: a's generation 1 stands, so its commits go in; the joiner owns nothing yet.
    await coord.commit("g", "c-0", 1, [["t", 3, 30, ""]])
    with pytest.raises(CommitFailedError, match="'c-1' does not own t-0 in generation 1"):
        await coord.commit("g", "c-1", 1, [["t", 0, 1, ""]])
    await join(coord, member_id=a["member_id"])
    b = await joining
    assert b["assignment"] == [["t", 2], ["t", 3]]
    # The new owner starts where the old one committed; the old one's generation is over.
    assert coord.fetch_offsets("g", [("t", 3)]) == {("t", 3): (30, "")}
    with pytest.raises(CommitFailedError, match="'c-0' generation 1 is stale"):
        await coord.commit("g", "c-0", 1, [["t", 0, 31, ""]])


async def test_a_member_that_does_not_rejoin_is_removed_at_the_rebalance_deadline(
    coord: GroupCoordinator, quorum: FakeQuorum, clock: FakeClock
) -> None:
    """The timeout path: a member that heartbeats but never rejoins (its application does not
    poll) holds the rebalance up for the rebalance timeout, then is removed by the sweep."""
    a = await join(coord)
    joining = asyncio.create_task(join(coord))
    await until(lambda: len(members(quorum)) == 2, "a second member")
    for _ in range(3):  # 3 x 9 s: a's heartbeats keep it alive, b waits in the barrier
        clock.advance(SESSION_MS - 1_000)
        with pytest.raises(RebalanceInProgressError):
            coord.heartbeat("g", a["member_id"], 1)
        assert await coord.sweep() == 0
    assert "tick_group" not in quorum.calls  # the deadline (30 s) is not reached yet
    assert not joining.done()
    clock.advance(3_001)
    assert await coord.sweep() == 1
    b = await joining
    assert b["generation"] == 2 and len(b["assignment"]) == 4
    assert members(quorum) == ["c-1"] and quorum.calls.count("tick_group") == 1
    with pytest.raises(UnknownMemberIdError):
        coord.heartbeat("g", a["member_id"], 1)
    with pytest.raises(CommitFailedError, match="not a member"):
        await coord.commit("g", a["member_id"], 1, [["t", 0, 5, ""]])


async def test_members_waiting_in_the_barrier_are_not_expired(
    coord: GroupCoordinator, quorum: FakeQuorum, clock: FakeClock
) -> None:
    """A waiting join blocks its member's connection: it cannot heartbeat, and must not be
    expired for it (Kafka keeps such members alive too). Once the join is answered the
    session counts again from then."""
    a = await join(coord)
    joining = asyncio.create_task(join(coord))
    await until(lambda: len(members(quorum)) == 2, "a second member")
    clock.advance(SESSION_MS + 1)  # neither has heartbeated: a (not waiting) expires
    assert await coord.sweep() == 1
    assert members(quorum) == ["c-1"]
    b = await joining  # a's expiry completed the rebalance
    assert b["generation"] == 2 and len(b["assignment"]) == 4
    assert a["member_id"] not in quorum.state.groups["g"].assignment
    clock.advance(SESSION_MS)
    assert await coord.sweep() == 0
    clock.advance(1)
    assert await coord.sweep() == 1  # now b is silent past its session


async def test_waiting_joins_fail_when_the_coordinator_becomes_inactive(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    await join(coord)
    joining = asyncio.create_task(join(coord))
    await until(lambda: len(members(quorum)) == 2, "a second member")
    coord.become_inactive()
    with pytest.raises(NotCoordinatorError, match=r"'c-1' to group 'g' \(generation 1\)"):
        await joining
    # The barrier is replicated state: joining again through the new coordinator goes on
    # from where the rebalance is.
    coord.become_active()
    joining = asyncio.create_task(join(coord, member_id="c-1"))
    await until(lambda: "g" in coord._waiters, "c-1 waiting again")
    await join(coord, member_id="c-0")
    assert (await joining)["generation"] == 2


async def test_a_join_waits_no_longer_than_the_deadline_and_its_margin(
    make: Callable[..., GroupCoordinator], quorum: FakeQuorum
) -> None:
    """If the rebalance cannot be ended (the sweep's tick keeps failing: a full disk), a
    waiting join is answered RebalanceInProgress after its deadline plus the margin."""
    coord = make(join_wait_margin_ms=20)
    await coord.join("g", "", "c", None, SESSION_MS, 0, ["t"], ["range"])
    quorum.failures["tick_group"] = [RaftlogTimeoutError("no quorum leader")] * 10
    with pytest.raises(RebalanceInProgressError, match="was not answered within 20 ms"):
        await coord.join("g", "", "c", None, SESSION_MS, 0, ["t"], ["range"])
    assert coord._waiters == {}


async def test_a_topic_change_gets_its_deadline_from_the_sweep(
    coord: GroupCoordinator, quorum: FakeQuorum, clock: FakeClock
) -> None:
    a = await join(coord, topics=("t", "later"))
    quorum.apply(
        "create_topic", name="later", topic_id="l", partitions=2, replication_factor=1, config={}
    )
    assert quorum.state.groups["g"].rebalance_deadline_ms is None
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat("g", a["member_id"], 1)
    assert await coord.sweep() == 0
    assert quorum.state.groups["g"].rebalance_deadline_ms == clock.now_ms + 30_000
    again = await join(coord, member_id=a["member_id"], topics=("t", "later"))
    assert again["generation"] == 2 and len(again["assignment"]) == 6


# -- commits ---------------------------------------------------------------------------------


async def test_200_concurrent_commits_are_one_proposal_with_one_result_each(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    stale = await join(coord)  # generation 1: four partitions
    joining = asyncio.create_task(join(coord))
    await until(lambda: len(members(quorum)) == 2, "a second member")
    a = await join(coord, member_id=stale["member_id"])
    b = await joining  # generation 2
    assert a["generation"] == b["generation"] == 2
    plan: list[tuple[str, int, list[Any]]] = []  # member, generation, [t, p, offset, meta]
    for i in range(200):
        if i % 3 == 0:
            t, p = stale["assignment"][i % 4]
            plan.append((a["member_id"], 1, [t, p, 10_000 + i, "stale"]))
        else:
            view = a if i % 2 else b
            t, p = view["assignment"][(i // 2) % 2]
            plan.append((view["member_id"], 2, [t, p, i, f"m{i}"]))
    calls = len(quorum.calls)

    results = await asyncio.gather(
        *(coord.commit("g", m, gen, [entry]) for m, gen, entry in plan),
        return_exceptions=True,
    )

    assert quorum.calls[calls:] == ["commit_batch"]
    failures = [r for r in results if r is not None]
    assert len({id(r) for r in failures}) == len(failures)  # one exception per caller
    expected: dict[tuple[str, int], tuple[int, str]] = {}
    for (_member, gen, (t, p, offset, meta)), result in zip(plan, results, strict=True):
        if gen == 1:
            assert isinstance(result, CommitFailedError), result
            assert "generation 1 is stale" in str(result)
        else:
            assert result is None, result
            expected[(t, p)] = (offset, meta)  # the last commit in call order wins
    assert len(failures) == 67
    assert coord.fetch_offsets("g") == expected
    assert len(expected) == 4


async def test_batches_are_bounded_by_commit_batch_max(
    make: Callable[..., GroupCoordinator], quorum: FakeQuorum
) -> None:
    coord = make(commit_batch_max=50, commit_pending_max=500)
    m = await join(coord)
    await asyncio.gather(*(coord.commit("g", "c-0", 1, [["t", 0, i, ""]]) for i in range(120)))
    assert quorum.calls.count("commit_batch") == 3
    assert coord.fetch_offsets("g", [("t", 0)]) == {("t", 0): (119, "")}
    assert m["generation"] == 1


async def test_commits_during_an_inflight_batch_go_out_together_next(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    await join(coord)
    quorum.commit_gate = asyncio.Event()
    first = [asyncio.create_task(coord.commit("g", "c-0", 1, [["t", 0, i, ""]])) for i in range(3)]
    while "commit_batch" not in quorum.calls:
        await asyncio.sleep(0)
    later = [asyncio.create_task(coord.commit("g", "c-0", 1, [["t", 1, i, ""]])) for i in range(5)]
    await asyncio.sleep(0)
    quorum.commit_gate.set()
    await asyncio.gather(*first, *later)
    assert quorum.calls.count("commit_batch") == 2
    assert coord.fetch_offsets("g") == {("t", 0): (2, ""), ("t", 1): (4, "")}


async def test_commit_linger_gathers_commits_that_arrive_later(
    make: Callable[..., GroupCoordinator], quorum: FakeQuorum
) -> None:
    coord = make(commit_linger_ms=2)
    await join(coord)
    first = asyncio.create_task(coord.commit("g", "c-0", 1, [["t", 0, 1, ""]]))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    second = asyncio.create_task(coord.commit("g", "c-0", 1, [["t", 1, 2, ""]]))
    await asyncio.gather(first, second)
    assert quorum.calls.count("commit_batch") == 1


async def test_a_failed_batch_proposal_fails_every_caller(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    await join(coord)
    quorum.failures["commit_batch"] = [NotControllerError("leader changed")]
    results = await asyncio.gather(
        *(coord.commit("g", "c-0", 1, [["t", 0, i, ""]]) for i in range(10)),
        return_exceptions=True,
    )
    assert all(isinstance(r, NotCoordinatorError) for r in results), results
    assert len({id(r) for r in results}) == 10
    assert quorum.calls.count("commit_batch") == 1
    await coord.commit("g", "c-0", 1, [["t", 0, 7, ""]])  # the next batch goes through
    assert coord.fetch_offsets("g") == {("t", 0): (7, "")}


async def test_waiting_commits_fail_when_the_coordinator_becomes_inactive(
    make: Callable[..., GroupCoordinator], quorum: FakeQuorum
) -> None:
    coord = make(commit_linger_ms=60_000)  # the batch would wait a minute: it must not
    await join(coord)
    task = asyncio.create_task(coord.commit("g", "c-0", 1, [["t", 0, 1, ""]]))
    await asyncio.sleep(0)
    coord.become_inactive()
    with pytest.raises(NotCoordinatorError, match="stopped being the group coordinator"):
        await task
    assert "commit_batch" not in quorum.calls


async def test_a_caller_that_gives_up_is_not_committed_for(
    make: Callable[..., GroupCoordinator], quorum: FakeQuorum
) -> None:
    coord = make(commit_linger_ms=60_000, commit_batch_max=2)
    await join(coord)
    gave_up = asyncio.create_task(coord.commit("g", "c-0", 1, [["t", 0, 1, ""]]))
    await asyncio.sleep(0)
    gave_up.cancel()
    await asyncio.sleep(0)
    # Two more fill a batch, which goes out at once instead of after the linger.
    await asyncio.gather(
        coord.commit("g", "c-0", 1, [["t", 1, 2, ""]]),
        coord.commit("g", "c-0", 1, [["t", 2, 3, ""]]),
    )
    assert gave_up.cancelled()
    assert coord.fetch_offsets("g") == {("t", 1): (2, ""), ("t", 2): (3, "")}


# -- offsets, reset, describe ----------------------------------------------------------------


async def test_fetch_offsets_after_commits(coord: GroupCoordinator) -> None:
    a = await join(coord)
    await coord.commit("g", a["member_id"], 1, [["t", 0, 5, "x"], ["t", 3, 9, None]])
    await coord.commit("g", a["member_id"], 1, [["t", 0, 6, "y"]])
    assert coord.fetch_offsets("g") == {("t", 0): (6, "y"), ("t", 3): (9, "")}
    assert coord.fetch_offsets("g", [("t", 3), ("t", 1)]) == {("t", 3): (9, "")}
    assert coord.fetch_offsets("unknown") == {}
    # A consumer that assigns partitions itself commits with generation -1 to an empty group.
    await coord.commit("solo", "", -1, [["t", 2, 4, ""]])
    assert coord.fetch_offsets("solo") == {("t", 2): (4, "")}


async def test_reset_offsets_needs_an_empty_group(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    await group_of(coord, 2)
    with pytest.raises(GroupNotEmptyError, match="2 active members"):
        await coord.reset_offsets("g", [["t", 0, 0]])
    await coord.leave("g", members(quorum))
    assert await coord.reset_offsets("g", [["t", 0, 0], ["t", 1, 3]]) == 2
    assert coord.fetch_offsets("g") == {("t", 0): (0, "reset"), ("t", 1): (3, "reset")}
    await coord.delete_group("g")
    assert coord.list_groups() == []
    with pytest.raises(GroupIdNotFoundError):
        await coord.delete_group("g")


async def test_describe_and_list_groups(
    coord: GroupCoordinator, quorum: FakeQuorum, clock: FakeClock
) -> None:
    a = await join(coord, client_id="alice")
    joining = asyncio.create_task(join(coord, client_id="bob"))
    await until(lambda: len(members(quorum)) == 2, "bob in the group")
    view = coord.describe_group("g")
    assert view["state"] == "PreparingRebalance" and view["rebalance_deadline_ms"] is not None
    assert [m["rejoined"] for m in view["members"]] == [False, True]
    assert view["members"][0]["assignment"] == [["t", 0], ["t", 1], ["t", 2], ["t", 3]]
    assert view["members"][1]["assignment"] == []
    a = await join(coord, member_id=a["member_id"], client_id="alice")
    b = await joining
    await join(coord, group_id="other", client_id="carol")
    await coord.commit("g", b["member_id"], 2, [["t", 2, 11, "meta"]])

    view = coord.describe_group("g")
    assert view["group_id"] == "g"
    assert view["state"] == "Stable"
    assert view["generation"] == 2 and view["protocol"] == "range"
    assert [(m["member_id"], m["client_id"]) for m in view["members"]] == [
        (a["member_id"], "alice"),
        (b["member_id"], "bob"),
    ]
    assert view["members"][0]["assignment"] == [["t", 0], ["t", 1]]
    assert view["members"][1]["assignment"] == [["t", 2], ["t", 3]]
    assert view["members"][0]["topics"] == ["t"]
    assert view["offsets"] == [["t", 2, 11, "meta", clock.now_ms]]

    assert view["protocol_type"] == "raftlog"
    assert coord.list_groups() == [
        {
            "group_id": "g",
            "state": "Stable",
            "generation": 2,
            "protocol": "range",
            "protocol_type": "raftlog",
            "members": 2,
        },
        {
            "group_id": "other",
            "state": "Stable",
            "generation": 1,
            "protocol": "range",
            "protocol_type": "raftlog",
            "members": 1,
        },
    ]
    # What Kafka's DescribeGroups shows: a raftlog member has no Kafka bytes of its own.
    shown = coord.describe_members("g")
    assert shown is not None
    assert (shown["state"], shown["protocol_type"], shown["protocol"]) == (
        "Stable",
        "raftlog",
        "range",
    )
    assert shown["members"][0] == {
        "member_id": a["member_id"],
        "instance_id": None,
        "client_id": "alice",
        "topics": ["t"],
        "assignment": [["t", 0], ["t", 1]],
        "metadata": None,
        "assignment_bytes": None,
    }
    assert coord.describe_members("nope") is None
    await coord.leave("g", [a["member_id"], b["member_id"]])
    view = coord.describe_group("g")
    assert view["state"] == "Empty" and view["members"] == [] and view["protocol"] is None
    assert view["offsets"] == [["t", 2, 11, "meta", clock.now_ms]]
    with pytest.raises(GroupIdNotFoundError):
        coord.describe_group("nope")


# -- sizes: every command fits one Raft entry (issue 9) ----------------------------------------

BIG = 25_000  # more partitions than one Raft command holds with these names


@pytest.fixture
def wide(quorum: FakeQuorum) -> FakeQuorum:
    """Three topics of 10,000 partitions (the most a topic may have)."""
    for name in ("wide-a", "wide-b", "wide-c"):
        quorum.apply(
            "create_topic", name=name, topic_id=name, partitions=10_000, replication_factor=1,
            config={},
        )  # fmt: skip
    return quorum


def wide_entries(n: int, width: int = 4) -> list[list[Any]]:
    topics = ("wide-a", "wide-b", "wide-c")
    return [[topics[i // 10_000], i % 10_000, i, "m"][:width] for i in range(n)]


async def test_a_commit_too_large_for_one_command_is_split_and_applied_in_full(
    coord: GroupCoordinator, wide: FakeQuorum
) -> None:
    """One OffsetCommit of 25,000 partitions (the issue's size): several commands, each within
    the limit, every offset stored, one answer to the caller."""
    await coord.commit("g", "", -1, wide_entries(BIG))
    assert len(wide.calls) > 1 and all(name == "commit_batch" for name in wide.calls)
    assert max(wide.sizes) <= COMMAND_BYTES_MAX
    committed = wide.state.committed("g")
    assert len(committed) == BIG and committed[("wide-c", 4_999)][0] == 24_999


async def test_a_batch_of_commits_stays_within_one_command(
    coord: GroupCoordinator, wide: FakeQuorum
) -> None:
    """Many concurrent mid-sized commits: batches are cut by bytes, not only by count."""
    entries = wide_entries(BIG)
    chunks = [entries[i : i + 2_500] for i in range(0, BIG, 2_500)]
    await asyncio.gather(*(coord.commit(f"g{i}", "", -1, c) for i, c in enumerate(chunks)))
    assert 1 < len(wide.calls) < len(chunks)
    assert max(wide.sizes) <= COMMAND_BYTES_MAX
    assert sum(len(wide.state.committed(f"g{i}")) for i in range(len(chunks))) == BIG


async def test_a_refused_piece_refuses_the_commit(
    coord: GroupCoordinator, wide: FakeQuorum
) -> None:
    entries = wide_entries(BIG)
    entries[-1] = ["no-such-topic", 0, 1, ""]  # in the last piece
    with pytest.raises(UnknownTopicOrPartitionError, match="no-such-topic-0"):
        await coord.commit("g", "", -1, entries)
    # The pieces before it were checked on their own and applied.
    assert 0 < len(wide.state.committed("g")) < BIG


async def test_a_large_reset_is_split_and_a_refusal_says_how_far_it_got(
    coord: GroupCoordinator, wide: FakeQuorum
) -> None:
    assert await coord.reset_offsets("g", wide_entries(BIG, width=3)) == BIG
    assert len(wide.calls) > 1 and max(wide.sizes) <= COMMAND_BYTES_MAX
    assert len(wide.state.committed("g")) == BIG
    entries = wide_entries(BIG, width=3)
    entries[-1] = ["no-such-topic", 0, 1]
    with pytest.raises(UnknownTopicOrPartitionError, match=r"\d+ of the 25000 offsets were"):
        await coord.reset_offsets("h", entries)


async def test_expiry_of_a_large_group_is_proposed_in_pieces(
    make: Callable[..., GroupCoordinator], quorum: FakeQuorum, clock: FakeClock
) -> None:
    # A small command budget stands for a group too large for one leave_group command.
    budget = CoordinatorConfig().commit_batch_bytes_max // 50
    coord = make(commit_batch_bytes_max=budget)
    await group_of(coord, 60, client_id="c" * 1000)
    quorum.calls.clear()
    quorum.sizes.clear()
    clock.advance(SESSION_MS + 1)
    assert await coord.sweep() == 60
    assert quorum.calls.count("leave_group") > 1 and max(quorum.sizes) <= budget
    assert quorum.state.groups["g"].members == {}


async def test_ids_and_commit_metadata_are_bounded(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    limits = CoordinatorConfig()
    with pytest.raises(PolicyViolationError, match="offset_metadata_bytes_max=4096"):
        await coord.commit("g", "", -1, [["t", 0, 1, "x" * (limits.offset_metadata_bytes_max + 1)]])
    await coord.commit("g", "", -1, [["t", 0, 1, "é" * (limits.offset_metadata_bytes_max // 2)]])
    with pytest.raises(PolicyViolationError, match="id_bytes_max=1024"):
        await join(coord, client_id="c" * (limits.id_bytes_max + 1))
    with pytest.raises(PolicyViolationError, match="id_bytes_max=1024"):
        await coord.commit("g" * (limits.id_bytes_max + 1), "", -1, [])
    with pytest.raises(InvalidRequestError, match=r"offset 0\.\.9223372036854775807"):
        await coord.commit("g", "", -1, [["t", 0, 2**63, ""]])
    with pytest.raises(InvalidRequestError, match="generation"):
        await coord.commit("g", "", 2**31, [])
    with pytest.raises(InvalidTopicError):
        await join(coord, topics=("not a topic",))
    assert quorum.calls == ["commit_batch"]


def test_a_config_that_cannot_hold_one_commit_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match="commit_batch_bytes_max"):
        CoordinatorConfig(commit_batch_bytes_max=1000)
    with pytest.raises(InvalidConfigError, match="commit_batch_bytes_max"):
        CoordinatorConfig(commit_batch_bytes_max=COMMAND_BYTES_MAX)


names = st.text(min_size=0, max_size=300)


@settings(max_examples=200, deadline=None)
@given(
    group=names,
    member=names,
    generation=st.integers(-1, 2**31 - 1),
    entries=st.lists(
        st.tuples(names, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), names),
        max_size=20,
    ),
    now_ms=st.integers(0, 2**63 - 1),
)
def test_size_bounds_are_upper_bounds_of_the_real_pickles(
    group: str, member: str, generation: int, entries: list[Any], now_ms: int
) -> None:
    """The coordinator's byte estimates never undercount what pysyncobj serializes."""
    config = CoordinatorConfig(offset_metadata_bytes_max=10_000)
    checked, sizes = group_requests.offset_entries(
        group, entries, 4, config.offset_metadata_bytes_max
    )
    commit = {
        "group_id": group, "member_id": member, "generation": generation, "offsets": checked,
        "now_ms": now_ms,
    }  # fmt: skip
    estimate = group_requests.COMMIT_BYTES
    estimate += group_requests.str_bytes(group) + group_requests.str_bytes(member)
    estimate += sum(sizes)
    batch = ("commit_batch", {"commits": [commit]})
    assert command_bytes(batch) <= estimate + group_requests.BATCH_ENVELOPE_BYTES_MAX
    reset_entries, reset_sizes = group_requests.offset_entries(
        group, [e[:3] for e in checked], 3, config.offset_metadata_bytes_max
    )
    reset = ("reset_offsets", {"group_id": group, "offsets": reset_entries, "now_ms": now_ms})
    reset_estimate = group_requests.RESET_BYTES + group_requests.str_bytes(group)
    assert command_bytes(reset) <= reset_estimate + sum(reset_sizes)
    leave = ("leave_group", {"group_id": group, "member_ids": [member, group]})
    leave_estimate = group_requests.LEAVE_BYTES + group_requests.str_bytes(group)
    leave_estimate += sum(group_requests.str_bytes(m) + 10 for m in (member, group))
    assert command_bytes(leave) <= leave_estimate


# -- Kafka's classic groups: MEMBER_ID_REQUIRED, JoinGroup with the leader, SyncGroup -------

KAFKA_REBALANCE_MS = 30_000


async def kjoin(
    c: GroupCoordinator,
    member_id: str = "",
    protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),),
    protocol_type: str = "consumer",
    client_id: str = "k",
) -> dict[str, Any]:
    return await c.kafka_join(
        "g",
        member_id,
        client_id,
        None,
        SESSION_MS,
        KAFKA_REBALANCE_MS,
        protocol_type,
        protocols,
        ["t"],
    )


async def test_a_pending_member_id_joins_as_a_new_member_with_that_id(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    mid = coord.pending_member_id("g", "k")
    assert mid.startswith("k-") and "g" not in quorum.state.groups  # nothing proposed
    view = await kjoin(coord, mid)
    assert view["member_id"] == mid and view["leader"] == mid
    assert view["state"] == "CompletingRebalance" and view["members"] == [[mid, None, b"meta"]]
    # Used once: the same id again is an ordinary rejoin of that member.
    again = await kjoin(coord, mid)
    assert again["member_id"] == mid and len(quorum.state.groups["g"].members) == 1
    with pytest.raises(UnknownMemberIdError):
        await kjoin(coord, "k-never-handed-out")


async def test_the_leader_syncs_and_a_waiting_member_gets_its_assignment(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    a = (await kjoin(coord))["member_id"]
    second = asyncio.ensure_future(kjoin(coord))  # waits for a to rejoin
    await until(lambda: len(quorum.state.groups["g"].members) == 2, "b joined")
    first_again = await kjoin(coord, a)
    b_view = await second
    b = b_view["member_id"]
    assert first_again["leader"] == a == b_view["leader"] and b_view["members"] == []
    assert [m[0] for m in first_again["members"]] == sorted([a, b])
    generation = first_again["generation"]
    waiting = asyncio.ensure_future(coord.sync("g", b, generation, None))
    await until(lambda: "g" in coord._waiters, "b's SyncGroup waits")
    got = await coord.sync(
        "g", a, generation, [(a, b"for-a", [("t", 0), ("t", 1)]), (b, b"for-b", [("t", 2)])]
    )
    assert got == b"for-a" and await waiting == b"for-b"
    assert quorum.state.groups["g"].assignment == {a: [["t", 0], ["t", 1]], b: [["t", 2]]}
    # Stable: a SyncGroup again is answered from the state, without a proposal.
    calls = len(quorum.calls)
    assert await coord.sync("g", b, generation, None) == b"for-b"
    assert len(quorum.calls) == calls


async def test_a_kafka_group_is_described_with_its_members_bytes(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    """What Kafka's DescribeGroups and `raftlog group describe` read of a Kafka group."""
    a, b, generation, waiting = await kafka_pair_with_a_waiting_sync(coord, quorum)
    shown = coord.describe_members("g")
    assert shown is not None and shown["state"] == "CompletingRebalance"
    assert [m["assignment_bytes"] for m in shown["members"]] == [None, None]
    await coord.sync("g", a, generation, [(a, b"A", [("t", 0)]), (b, b"B", [("t", 1)])])
    await waiting
    shown = coord.describe_members("g")
    assert shown is not None
    assert (shown["state"], shown["protocol_type"], shown["protocol"]) == (
        "Stable",
        "consumer",
        "range",
    )
    assert [(m["member_id"], m["metadata"], m["assignment_bytes"]) for m in shown["members"]] == [
        (a, b"meta", b"A"),
        (b, b"meta", b"B"),
    ]
    await coord.commit("g", b, generation, [["t", 1, 4, ""]])
    view = coord.describe_group("g")
    assert view["protocol_type"] == "consumer"
    assert [(m["topics"], m["assignment"]) for m in view["members"]] == [
        (["t"], [["t", 0]]),
        (["t"], [["t", 1]]),
    ]
    assert [o[:3] for o in view["offsets"]] == [["t", 1, 4]]
    assert coord.list_groups()[0]["protocol_type"] == "consumer"


async def kafka_pair_with_a_waiting_sync(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> tuple[str, str, int, asyncio.Future[bytes]]:
    """Leader a and member b joined (generation 2); b's SyncGroup waits for a's."""
    a = (await kjoin(coord))["member_id"]
    second = asyncio.ensure_future(kjoin(coord))
    await until(lambda: len(quorum.state.groups["g"].members) == 2, "b joined")
    await kjoin(coord, a)
    b = (await second)["member_id"]
    generation = quorum.state.groups["g"].generation
    waiting = asyncio.ensure_future(coord.sync("g", b, generation, None))
    await until(lambda: "g" in coord._waiters, "b's SyncGroup waits")
    return a, b, generation, waiting


async def test_a_waiting_sync_ends_when_the_group_rebalances_again(
    coord: GroupCoordinator, quorum: FakeQuorum
) -> None:
    a, _, _, waiting = await kafka_pair_with_a_waiting_sync(coord, quorum)
    await coord.leave("g", [a])  # the leader goes before it assigned
    with pytest.raises(RebalanceInProgressError, match="join again"):
        await waiting


async def test_a_member_waiting_in_sync_is_not_expired(
    coord: GroupCoordinator, quorum: FakeQuorum, clock: FakeClock
) -> None:
    a, b, generation, waiting = await kafka_pair_with_a_waiting_sync(coord, quorum)
    clock.advance(SESSION_MS + 1)
    coord.heartbeat("g", a, generation)
    await coord.sweep()
    assert b in quorum.state.groups["g"].members  # its SyncGroup kept it alive
    await coord.sync("g", a, generation, [(a, b"A", []), (b, b"B", [])])
    assert await waiting == b"B"


async def test_refusals(coord: GroupCoordinator, make: Callable[..., GroupCoordinator]) -> None:
    await kjoin(coord)
    with pytest.raises(InconsistentGroupProtocolError, match="Kafka 'consumer' group"):
        await coord.join("g", "", "c", None, SESSION_MS, KAFKA_REBALANCE_MS, ["t"], ["range"])
    with pytest.raises(InvalidRequestError, match="raftlog's own"):
        await kjoin(coord, protocol_type="raftlog")
    with pytest.raises(InvalidRequestError, match="at least one protocol"):
        await kjoin(coord, protocols=())
    huge = (("range", b"x" * (group_requests.KAFKA_PROTOCOLS_BYTES_MAX + 1)),)
    with pytest.raises(PolicyViolationError, match="protocols take"):
        await kjoin(coord, protocols=huge)
    with pytest.raises(InvalidRequestError, match="not a \\[topic, partition\\]"):
        await coord.sync("g", "k-0", 1, [("k-0", b"", [("t", -1)])])
    inactive = make(active=False)
    with pytest.raises(NotCoordinatorError):
        inactive.pending_member_id("g", "k")
