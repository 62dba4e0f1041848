"""A rebalance never hands a partition to a new owner while the old one still consumes it
(issue #21, part 4), against a real node, with records produced all the while.

Members commit after every poll (tests/integration/_group_member.py). A clean join and a
clean leave must process no record twice and have no commit refused; after a member's kill -9
exactly the records it processed after its last commit are processed again, by the others.
Before the two-step rebalance, one clean join into a one-member group made three commits fail
and 98 records get processed by both members.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from raftlog.client import Admin, AsyncConsumer, Consumer, Producer
from raftlog.errors import GroupIdNotFoundError
from raftlog.topics import TopicPartition
from tests.integration._group_member import GROUP_OPTS, ThreadMember
from tests.integration._support import BrokerProcess, _child_env, wait_for

TOPIC = "events"
PARTITIONS = 6
GROUP = "g"
REPO = Path(__file__).resolve().parents[2]
# Records are produced at about this rate for as long as a test runs (keys spread them).
PRODUCE_INTERVAL_S = 0.002
WAIT_S = 60

Record = tuple[str, int, int]  # topic, partition, offset


class Production:
    """A producer thread sending keyed records until stopped; every record is acknowledged."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.stopped = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with Producer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=2) as p:
                i = 0
                while not self.stopped.wait(PRODUCE_INTERVAL_S):
                    p.send(TOPIC, b"%d" % i, key=b"k%d" % (i % 60))
                    i += 1
                p.flush(30)
                self.sent = i
        except BaseException as e:
            self.error = e

    def stop(self) -> int:
        self.stopped.set()
        self.thread.join(60)
        assert not self.thread.is_alive() and self.error is None, self.error
        return self.sent


class ProcessMember:
    """A member in its own process, to be killed with SIGKILL; its event lines in a file."""

    def __init__(self, bootstrap: str, name: str, tmp: Path):
        self.name = name
        self.out = tmp / f"{name}.events"
        self.hold_file = tmp / f"{name}.hold"
        self.stop_file = tmp / f"{name}.stop"
        self.stderr = (tmp / f"{name}.stderr").open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "tests.integration._group_member",
                "--bootstrap", bootstrap, "--group", GROUP, "--topic", TOPIC, "--name", name,
                "--out", str(self.out), "--hold-file", str(self.hold_file),
                "--stop-file", str(self.stop_file),
            ],
            cwd=REPO,
            env=_child_env(),
            stderr=self.stderr,
        )  # fmt: skip

    @property
    def lines(self) -> list[str]:
        return self.out.read_text().splitlines() if self.out.exists() else []

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self.stderr.close()

    def ensure_gone(self) -> None:
        if self.proc.poll() is None:
            self.kill9()


def processed(lines: list[str]) -> list[Record]:
    rows = (line.split() for line in lines if line.startswith("R "))
    return [(t, int(p), int(o)) for _, t, p, o in rows]


def refused(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("F ")]


def after_last_commit(lines: list[str]) -> set[Record]:
    last = max((i for i, line in enumerate(lines) if line == "C"), default=-1)
    return set(processed(lines[last + 1 :]))


def stable_with(admin: Admin, n: int) -> dict[str, Any] | None:
    """The group, once Stable with `n` members that each own partitions."""
    try:
        d = admin.describe_group(GROUP)
    except GroupIdNotFoundError:
        return None  # no member has joined yet
    stable = d["state"] == "Stable" and len(d["members"]) == n
    return d if stable and all(m["assignment"] for m in d["members"]) else None


def all_records(admin: Admin) -> set[Record]:
    ends = admin.list_offsets({TopicPartition(TOPIC, p): -1 for p in range(PARTITIONS)})
    return {(TOPIC, tp.partition, o) for tp, (end, _) in ends.items() for o in range(end)}


def wait_processed(admin: Admin, members: list[Callable[[], list[str]]], sent: int) -> None:
    """Until the members have processed every record of the topic (`sent` of them)."""
    wanted = all_records(admin)
    assert len(wanted) == sent, (len(wanted), sent)

    def done() -> bool:
        seen: set[Record] = set()
        for lines in members:
            seen.update(processed(lines()))
        return wanted <= seen

    wait_for(done, WAIT_S, f"every one of the {sent} records processed", interval_s=0.05)


def twice(*line_lists: list[str]) -> list[Record]:
    counts = Counter(r for lines in line_lists for r in processed(lines))
    return sorted(r for r, n in counts.items() if n > 1)


def check_no_refusal_and_nothing_twice(*line_lists: list[str]) -> None:
    failed = [f for lines in line_lists for f in refused(lines)]
    duplicated = twice(*line_lists)
    total = sum(len(processed(lines)) for lines in line_lists)
    assert not failed and not duplicated, (
        f"{len(failed)} commits refused, {len(duplicated)} of {total} records processed twice "
        f"(e.g. {duplicated[:5]}); refusals: {failed[:3]}"
    )


def owned_partitions(lines: list[str], since: int) -> set[int]:
    return {p for _, p, _ in processed(lines[since:])}


@contextlib.contextmanager
def topic_in_production(broker: BrokerProcess) -> Iterator[tuple[Admin, Production]]:
    """The topic, records produced to it from now until the block ends, and an Admin."""
    with Admin(broker.bootstrap) as admin:
        admin.create_topic(TOPIC, PARTITIONS)
        production = Production(broker.bootstrap)
        try:
            yield admin, production
        finally:
            production.stopped.set()


def test_a_clean_join_processes_no_record_twice_and_refuses_no_commit(
    broker: BrokerProcess,
) -> None:
    with topic_in_production(broker) as (admin, production):
        a = ThreadMember(broker.bootstrap, GROUP, TOPIC, "a")
        b: ThreadMember | None = None
        try:
            wait_for(lambda: len(processed(a.lines)) >= 300, WAIT_S, "a processing records")
            generation = wait_for(lambda: stable_with(admin, 1), WAIT_S, "a alone")["generation"]
            b = ThreadMember(broker.bootstrap, GROUP, TOPIC, "b")
            d = wait_for(lambda: stable_with(admin, 2), WAIT_S, "a and b sharing the topic")
            assert d["generation"] == generation + 1
            b_start = len(b.lines)
            wait_for(lambda: len(processed(b.lines[b_start:])) >= 300, WAIT_S, "b processing")
            sent = production.stop()
            wait_processed(admin, [lambda: a.lines, lambda: b.lines], sent)
        finally:
            for m in (a, b):
                if m is not None:
                    m.stop()
    check_no_refusal_and_nothing_twice(a.lines, b.lines)
    # b really took partitions over from a (processed records a had owned before).
    assert owned_partitions(b.lines, 0) and owned_partitions(b.lines, 0) <= set(range(PARTITIONS))


def test_a_clean_leave_processes_no_record_twice_and_refuses_no_commit(
    broker: BrokerProcess,
) -> None:
    with topic_in_production(broker) as (admin, production):
        a = ThreadMember(broker.bootstrap, GROUP, TOPIC, "a")
        b = ThreadMember(broker.bootstrap, GROUP, TOPIC, "b")
        try:
            wait_for(lambda: stable_with(admin, 2), WAIT_S, "a and b sharing the topic")
            wait_for(
                lambda: len(processed(a.lines)) >= 200 and len(processed(b.lines)) >= 200,
                WAIT_S,
                "a and b processing records",
            )
            b_owned = owned_partitions(b.lines, 0)
            b.stop()  # a clean leave: its last poll committed, then it leaves the group
            wait_for(lambda: stable_with(admin, 1), WAIT_S, "a alone")
            a_start = len(a.lines)
            wait_for(
                lambda: owned_partitions(a.lines, a_start) >= b_owned,
                WAIT_S,
                "a processing b's former partitions",
            )
            sent = production.stop()
            wait_processed(admin, [lambda: a.lines, lambda: b.lines], sent)
        finally:
            a.stop()
            b.stop()
    check_no_refusal_and_nothing_twice(a.lines, b.lines)


def test_after_a_kill_only_what_the_member_processed_since_its_last_commit_is_redelivered(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    with topic_in_production(broker) as (admin, production):
        victim = ProcessMember(broker.bootstrap, "victim", tmp_path)
        survivors = [ThreadMember(broker.bootstrap, GROUP, TOPIC, name) for name in ("a", "b")]
        try:
            wait_for(lambda: stable_with(admin, 3), WAIT_S, "three members sharing the topic")
            wait_for(
                lambda: all(len(processed(m.lines)) >= 100 for m in (victim, *survivors)),
                WAIT_S,
                "every member processing records",
            )
            # The victim processes one more poll's records and is killed before committing.
            victim.hold_file.touch()
            wait_for(lambda: "HOLD" in victim.lines, WAIT_S, "the victim holding a poll")
            victim.kill9()
            lost_work = after_last_commit(victim.lines)
            assert lost_work, "the victim's last poll returned records"
            wait_for(lambda: stable_with(admin, 2), WAIT_S, "the victim expired, a and b left")
            sent = production.stop()
            wait_processed(admin, [lambda: victim.lines, *[lambda m=m: m.lines for m in survivors]],
                           sent)  # fmt: skip
        finally:
            victim.ensure_gone()
            for m in survivors:
                m.stop()
    by_survivors = [r for m in survivors for r in processed(m.lines)]
    redelivered = set(processed(victim.lines)) & set(by_survivors)
    assert redelivered == lost_work, (
        f"redelivered {len(redelivered)} records, the victim processed {len(lost_work)} after "
        f"its last commit; extra {sorted(redelivered - lost_work)[:10]}, "
        f"missing {sorted(lost_work - redelivered)[:10]}"
    )
    # Nothing else twice: each redelivered record once, nothing twice among the survivors,
    # and no commit refused (the victim's last one was not made).
    check_no_refusal_and_nothing_twice(*(m.lines for m in survivors))
    assert not refused(victim.lines), refused(victim.lines)


def test_commits_in_on_partitions_revoked_are_accepted_sync_and_asyncio(
    broker: BrokerProcess,
) -> None:
    """Members that commit only in their rebalance listener (Kafka's ConsumerRebalanceListener
    pattern) lose nothing and process nothing twice: the sync Consumer runs the listener in
    the polling thread (so it may call commit), the AsyncConsumer awaits an async listener.
    `a` (sync) is alone, `b` (asyncio) joins, then leaves: each handover goes through a
    listener's commit, made while the group prepares the rebalance."""
    a_lines: list[str] = []
    b_lines: list[str] = []
    revoked: dict[str, list[set[TopicPartition]]] = {"a": [], "b": []}
    stop_b = threading.Event()
    b_error: list[BaseException] = []

    def run_b() -> None:
        async def main() -> None:
            holder: list[AsyncConsumer] = []

            async def on_revoked(tps: set[TopicPartition]) -> None:
                revoked["b"].append(tps)
                await holder[0].commit()
                b_lines.append("C")

            opts = {**GROUP_OPTS, "on_partitions_revoked": on_revoked}
            consumer = AsyncConsumer(TOPIC, bootstrap_servers=broker.bootstrap, group_id=GROUP,
                                     client_id="b", **opts)  # fmt: skip
            holder.append(consumer)
            await consumer.start()
            try:
                while not stop_b.is_set():
                    for tp, records in (await consumer.poll(100)).items():
                        b_lines.extend(f"R {tp.topic} {tp.partition} {r.offset}" for r in records)
            finally:
                await consumer.close()  # a clean leave: the listener commits

        try:
            asyncio.run(main())
        except BaseException as e:
            b_error.append(e)

    with topic_in_production(broker) as (admin, production):
        holder: list[Consumer] = []

        def on_a_revoked(tps: set[TopicPartition]) -> None:
            revoked["a"].append(tps)
            holder[0].commit()  # a call of the consumer from its own listener
            a_lines.append("C")

        a = Consumer(TOPIC, bootstrap_servers=broker.bootstrap, group_id=GROUP, client_id="a",
                     **{**GROUP_OPTS, "on_partitions_revoked": on_a_revoked})  # fmt: skip
        holder.append(a)
        b_thread = threading.Thread(target=run_b, daemon=True)

        def poll_a() -> None:
            for tp, records in a.poll(100).items():
                a_lines.extend(f"R {tp.topic} {tp.partition} {r.offset}" for r in records)

        def a_until(condition: Callable[[], Any], what: str) -> None:
            def check() -> Any:
                poll_a()
                return condition()

            wait_for(check, WAIT_S, what, interval_s=0)

        try:
            a_until(lambda: len(processed(a_lines)) >= 200, "a processing records")
            b_thread.start()
            a_until(lambda: stable_with(admin, 2), "a and b sharing the topic")
            a_until(lambda: len(processed(b_lines)) >= 200, "b processing records")
            stop_b.set()
            b_thread.join(60)
            assert not b_thread.is_alive() and not b_error, b_error
            a_until(lambda: stable_with(admin, 1), "a alone again")
            sent = production.stop()
            wanted = all_records(admin)
            assert len(wanted) == sent
            a_until(
                lambda: wanted <= set(processed(a_lines)) | set(processed(b_lines)),
                f"every one of the {sent} records processed",
            )
        finally:
            stop_b.set()
            a.close()
    check_no_refusal_and_nothing_twice(a_lines, b_lines)
    # Eager revocation: the whole assignment each time: a's when b joined, when b left and
    # at a's close; b's at its close.
    everything = {TopicPartition(TOPIC, p) for p in range(PARTITIONS)}
    assert len(revoked["a"]) == 3 and revoked["a"][0] == revoked["a"][2] == everything
    assert revoked["a"][1] | revoked["b"][0] == everything and len(revoked["b"]) == 1
