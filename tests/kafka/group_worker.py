"""One member of a Kafka consumer group, in its own process, for tests that kill it with -9.

    python -m tests.kafka.group_worker CLIENT BOOTSTRAP GROUP TOPIC OUT [ASSIGNOR [INSTANCE]]

CLIENT is confluent-kafka, kafka-python or aiokafka. The member subscribes to TOPIC in
GROUP, and for every record writes "partition offset value" to OUT (a line, flushed) before it
commits (synchronously, after each poll's records; INSTANCE, confluent-kafka only, makes it a
static member: group.instance.id): a record it was killed before committing
is read again by the next owner (at least once). A commit the group refuses because it
rebalanced meanwhile (each client's CommitFailedError, librdkafka's ILLEGAL_GENERATION ...)
is what a real application meets too: the member notes it on stderr and polls on, and the
records go to their next owner. Each assignment it gets is written as "assigned p,p,..." and a
revocation as "revoked"; SIGTERM closes the consumer cleanly (a LeaveGroup) and ends the
process.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, TextIO

POLL_S = 0.2
SESSION_TIMEOUT_MS = 30_000


def main(argv: list[str]) -> int:
    client, bootstrap, group, topic, out_path = argv[:5]
    assignor = argv[5] if len(argv) > 5 else "range"
    instance = argv[6] if len(argv) > 6 else None
    # The Python clients' group events (joins, syncs, heartbeat errors) on stderr, for the
    # test's message when a group does not settle; librdkafka logs its own there.
    # RAFTLOG_TEST_CLIENT_DEBUG=1 logs everything the Python clients log, requests included.
    logging.basicConfig(stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    if os.environ.get("RAFTLOG_TEST_CLIENT_DEBUG"):
        logging.getLogger().setLevel(logging.DEBUG)
    else:
        for name in ("kafka.coordinator", "aiokafka.consumer.group_coordinator"):
            logging.getLogger(name).setLevel(logging.INFO)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("now", True))
    with open(out_path, "a", encoding="utf-8") as out:
        run = {"confluent-kafka": confluent, "kafka-python": kafka_python, "aiokafka": aio}[client]
        if instance is not None:
            confluent(bootstrap, group, topic, assignor, out, lambda: stop["now"], instance)
        else:
            run(bootstrap, group, topic, assignor, out, lambda: stop["now"])
    return 0


def note(out: TextIO, line: str) -> None:
    out.write(line + "\n")
    out.flush()


def refused(e: Exception) -> None:
    """A commit refused by a rebalance: say so and go on (the next owner reads the records)."""
    print(f"commit refused, the group rebalanced: {e!r}", file=sys.stderr, flush=True)


def confluent(
    bootstrap: str,
    group: str,
    topic: str,
    assignor: str,
    out: TextIO,
    stopped: Callable[[], bool],
    instance: str | None = None,
) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException

    # What librdkafka's commit raises when the group moved on under it.
    rebalanced = {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError._ASSIGNMENT_LOST,
        KafkaError._STATE,
    }

    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "partition.assignment.strategy": assignor,
    }
    if instance is not None:
        config["group.instance.id"] = instance
    consumer = Consumer(config)

    def assigned(c: Any, partitions: list[Any]) -> None:
        if assignor == "cooperative-sticky":
            c.incremental_assign(partitions)
        note(out, "assigned " + ",".join(str(p.partition) for p in partitions))

    def revoked(c: Any, partitions: list[Any]) -> None:
        if assignor == "cooperative-sticky":
            c.incremental_unassign(partitions)
        note(out, "revoked " + ",".join(str(p.partition) for p in partitions))

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
    try:
        while not stopped():
            records = consumer.consume(500, POLL_S)
            good = [r for r in records if r.error() is None]
            for r in good:
                note(out, f"{r.partition()} {r.offset()} {r.value().decode()}")
            if good:
                try:
                    consumer.commit(asynchronous=False)
                except KafkaException as e:
                    if e.args[0].code() not in rebalanced:
                        raise
                    refused(e)
    finally:
        consumer.close()


def kafka_python(
    bootstrap: str, group: str, topic: str, assignor: str, out: TextIO, stopped: Callable[[], bool]
) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.errors import CommitFailedError, RebalanceInProgressError

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
            note(out, "assigned " + ",".join(str(p.partition) for p in assigned))

        def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
            note(out, "revoked " + ",".join(str(p.partition) for p in revoked))

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
    )
    consumer.subscribe([topic], listener=Listener())
    try:
        while not stopped():
            batches = consumer.poll(timeout_ms=int(POLL_S * 1000))
            rejoin_if_join_lost(consumer)
            for records in batches.values():
                for r in records:
                    note(out, f"{r.partition} {r.offset} {r.value.decode()}")
            if batches:
                try:
                    consumer.commit()
                except (CommitFailedError, RebalanceInProgressError) as e:
                    refused(e)
    finally:
        consumer.close()


def rejoin_if_join_lost(consumer: Any) -> None:
    """Work around a kafka-python 3.0.12 bug that left a member out of its group for good.

    A group leader whose rejoin was started by a metadata change (its first assignment was
    made before it knew the topic's partitions), not by the coordinator, loses that join when
    poll()'s timeout expires between its SyncGroup and the answer: its assignment updated the
    metadata snapshot, so the next poll() sees no reason to rejoin and never collects the
    finished join. The member then neither consumes nor heartbeats; the coordinator expires
    it after its session timeout and the group settles one member short (traced with the
    client's debug log: "need_rejoin: False" right after "Sending leader SyncGroup", the
    SyncGroup answered with no error, no "Setting newly assigned partitions" ever after).
    A finished join that nothing collected is redone."""
    coordinator = consumer._coordinator
    join = getattr(coordinator, "_join_task", None)
    if join is not None and join.is_done and not coordinator.need_rejoin():
        print("kafka-python left a finished join uncollected: joining again", file=sys.stderr)
        coordinator.request_rejoin()


def aio(
    bootstrap: str, group: str, topic: str, assignor: str, out: TextIO, stopped: Callable[[], bool]
) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.abc import ConsumerRebalanceListener
    from aiokafka.errors import CommitFailedError, RebalanceInProgressError

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_assigned(self, assigned: Any) -> None:
            note(out, "assigned " + ",".join(str(p.partition) for p in assigned))

        async def on_partitions_revoked(self, revoked: Any) -> None:
            note(out, "revoked " + ",".join(str(p.partition) for p in revoked))

    async def run() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_TIMEOUT_MS,
        )
        consumer.subscribe([topic], listener=Listener())
        await consumer.start()
        try:
            while not stopped():
                batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000))
                for records in batches.values():
                    for r in records:
                        note(out, f"{r.partition} {r.offset} {r.value.decode()}")
                if batches:
                    try:
                        await consumer.commit()
                    except (CommitFailedError, RebalanceInProgressError) as e:
                        refused(e)
        finally:
            await consumer.stop()

    asyncio.run(run())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
