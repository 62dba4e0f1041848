"""Consumer groups against a real node: exclusive ownership in every generation, expiry of a
silent member, committed offsets that never go backwards, commits accepted while the group
prepares a rebalance and refused once the member is out of it, replay. (test_rebalance.py:
no record processed twice across a join, a leave or a kill.)"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

from raftlog.client import Admin, Consumer, Producer
from raftlog.errors import CommitFailedError, GroupIdNotFoundError, GroupNotEmptyError
from raftlog.topics import TopicPartition
from tests.integration._support import BrokerProcess, run_cli, wait_for

TOPIC = "clicks"
PARTITIONS = 6
RECORDS = 3000
GROUP_OPTS = {
    "session_timeout_ms": 1500,
    "heartbeat_interval_ms": 200,
    "auto_commit_interval_ms": 200,
    "fetch_max_wait_ms": 100,
}


def produce(broker: BrokerProcess, n: int, start: int = 0) -> None:
    with Producer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=2) as p:
        futures = [p.send(TOPIC, b"%d" % i, key=b"k%d" % (i % 60)) for i in range(start, start + n)]
        p.flush(30)
        for f in futures:
            f.result(10)


class Watcher:
    """Samples the group from the coordinator: one owner per partition in every generation,
    and committed offsets that never move backwards."""

    def __init__(self, broker: BrokerProcess, group: str):
        self.admin = Admin(broker.bootstrap)
        self.group = group
        self.owners: dict[int, dict[tuple[str, int], str]] = {}
        self.last_committed: dict[tuple[str, int], int] = {}
        self.problems: list[str] = []
        self.generations: set[int] = set()

    def sample(self) -> dict:
        try:
            d = self.admin.describe_group(self.group)
        except GroupIdNotFoundError:  # consumers join in the background: none has yet
            return {"state": "Dead", "generation": 0, "members": [], "offsets": []}
        gen = d["generation"]
        self.generations.add(gen)
        owners: dict[tuple[str, int], str] = {}
        for m in d["members"]:
            for t, p in m["assignment"]:
                if (t, p) in owners:
                    self.problems.append(f"generation {gen}: {t}-{p} owned by two members")
                owners[(t, p)] = m["member_id"]
        if d["state"] == "Stable":
            missing = PARTITIONS - len(owners)
            if missing:
                self.problems.append(f"generation {gen}: {missing} partitions without owner")
        # While the group prepares a rebalance, owners only leave (a member that left takes
        # its partitions along); a partition never gets another owner within a generation.
        before = self.owners.get(gen, {})
        moved = [tp for tp, m in owners.items() if tp in before and before[tp] != m]
        gained = [tp for tp in owners if tp not in before] if gen in self.owners else []
        if moved or gained:
            self.problems.append(f"generation {gen}: {moved + gained} changed owner within it")
        self.owners[gen] = owners
        for t, p, offset, *_ in d["offsets"]:
            prev = self.last_committed.get((t, p), -1)
            if offset < prev:
                self.problems.append(f"{t}-{p}: committed offset went back {prev} -> {offset}")
            self.last_committed[(t, p)] = offset
        return d

    def close(self) -> None:
        self.admin.close()


def _consume_loop(
    c: Consumer, stop: threading.Event, seen: dict, name: str, errors: list[str]
) -> None:
    try:
        while not stop.is_set():
            for tp, records in c.poll(100).items():
                if tp not in c.assignment():
                    errors.append(f"{name} got records of {tp} it does not own")
                for r in records:
                    seen[name].append((tp, r.offset))
    except Exception as e:  # surfaced by the test below
        errors.append(f"{name}: {e!r}")


def test_three_members_share_six_partitions_and_survive_a_crash(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(TOPIC, PARTITIONS)
    produce(broker, RECORDS)
    watcher = Watcher(broker, "g")
    consumers = [
        Consumer(
            TOPIC,
            bootstrap_servers=broker.bootstrap,
            group_id="g",
            auto_offset_reset="earliest",
            client_id=f"m{i}",
            **GROUP_OPTS,
        )
        for i in range(3)
    ]
    stop = [threading.Event() for _ in consumers]
    seen: dict[str, list] = defaultdict(list)
    errors: list[str] = []
    threads = [
        threading.Thread(target=_consume_loop, args=(c, s, seen, f"m{i}", errors))
        for i, (c, s) in enumerate(zip(consumers, stop, strict=True))
    ]
    for t in threads:
        t.start()
    try:

        def stable_with(n: int) -> bool:
            d = watcher.sample()
            members = d["members"]
            return (
                d["state"] == "Stable"
                and len(members) == n
                and all(m["assignment"] for m in members)
            )

        wait_for(lambda: stable_with(3), 20, "three members, each owning partitions")
        # Crash one member: stop its polling and heartbeats without leaving the group.
        victim = consumers[2]
        stop[2].set()
        threads[2].join(10)
        victim._async._heartbeat_task.cancel()  # type: ignore[union-attr]
        t0 = time.monotonic()
        wait_for(lambda: stable_with(2), 20, "the silent member expired and partitions moved")
        expiry_s = time.monotonic() - t0
        produce(broker, 600, start=RECORDS)
        total = RECORDS + 600

        def all_committed() -> bool:
            d = watcher.sample()
            return sum(o for _, _, o, *_ in d["offsets"]) == total

        wait_for(all_committed, 30, "every record committed by the two survivors")
    finally:
        for s in stop:
            s.set()
        for t in threads:
            t.join(10)
        for c in consumers[:2]:
            c.close()
        watcher.close()
    assert not errors, errors
    assert not watcher.problems, watcher.problems
    assert len(watcher.generations) >= 2  # the three-member one and the two-member one
    assert expiry_s < 10
    # At-least-once: every offset of every partition was delivered to some member.
    delivered: dict[TopicPartition, set[int]] = defaultdict(set)
    for records in seen.values():
        for tp, offset in records:
            delivered[tp].add(offset)
    with Admin(broker.bootstrap) as admin:
        ends = admin.list_offsets({TopicPartition(TOPIC, p): -1 for p in range(PARTITIONS)})
        assert sum(o for o, _ in ends.values()) == RECORDS + 600
        for tp, (end, _) in ends.items():
            assert delivered[tp] >= set(range(end)), f"{tp} missed offsets"
        # After the clean closes the group is empty: reset is allowed and replays.
        wait_for(lambda: admin.describe_group("g")["state"] == "Empty", 10, "empty group")
        assert admin.reset_offsets("g", {TopicPartition(TOPIC, p): 0 for p in range(PARTITIONS)})
    with Consumer(TOPIC, bootstrap_servers=broker.bootstrap, group_id="g", **GROUP_OPTS) as replay:
        got = 0
        deadline = time.monotonic() + 30
        while got < RECORDS + 600 and time.monotonic() < deadline:
            got += sum(len(r) for r in replay.poll(200).values())
        assert got == RECORDS + 600


def test_commits_stand_while_the_group_prepares_and_stale_ones_are_refused_after(
    broker: BrokerProcess,
) -> None:
    """A member's commits are accepted until the rebalance completes (its generation stands
    while the group prepares), and refused from then on if it did not rejoin; an active
    group's offsets cannot be reset."""
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(TOPIC, 2)
    produce(broker, 100)
    # A short rebalance timeout: `first` never polls again, so the group removes it.
    opts = {**GROUP_OPTS, "enable_auto_commit": False, "max_poll_interval_ms": 3000}
    first = Consumer(
        TOPIC,
        bootstrap_servers=broker.bootstrap,
        group_id="s",
        auto_offset_reset="earliest",
        **opts,
    )
    try:
        wait_for(lambda: first.poll(200), 10, "records for the first member")
        first.commit()  # current generation: accepted
        answers: list[object] = []
        first.commit_async(callback=lambda offsets, error: answers.append((offsets, error)))
        wait_for(lambda: answers, 10, "the asynchronous commit's callback")
        assert answers[0][1] is None and answers[0][0]  # type: ignore[index]
        second = Consumer(TOPIC, bootstrap_servers=broker.bootstrap, group_id="s", **opts)
        try:
            with Admin(broker.bootstrap) as admin:
                wait_for(
                    lambda: admin.describe_group("s")["state"] == "PreparingRebalance",
                    10,
                    "the group preparing a rebalance",
                )
                shown = run_cli("group", "describe", "s", "-b", broker.bootstrap)
                assert shown.returncode == 0, shown
                assert "state PreparingRebalance  generation 1" in shown.stdout, shown.stdout
                assert "generation 1 stands until 1 of 2 members rejoin" in shown.stdout
                assert shown.stdout.count("  not rejoined") == 1, shown.stdout
                # `first` has not rejoined: its generation stands, its commit goes in.
                first.commit({TopicPartition(TOPIC, 0): 1})
                with pytest.raises(GroupNotEmptyError):
                    admin.reset_offsets("s", {TopicPartition(TOPIC, 0): 0})
                # `second` polls; `first` does not, and is removed at the rebalance deadline.

                def second_assigned() -> set[TopicPartition]:
                    second.poll(100)
                    return second.assignment()

                wait_for(second_assigned, 20, "the second member's assignment")
                d = admin.describe_group("s")
                assert d["state"] == "Stable" and len(d["members"]) == 1
            with pytest.raises(CommitFailedError, match="not a member"):
                first.commit({TopicPartition(TOPIC, 0): 2})
        finally:
            second.close()
    finally:
        first.close()
