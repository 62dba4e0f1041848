"""One member of a Kafka consumer group, in its own process, for tests that kill it with -9.

    python -m tests.kafka.group_worker CLIENT BOOTSTRAP GROUP TOPIC OUT [ASSIGNOR [INSTANCE]]

CLIENT is confluent-kafka, kafka-python or aiokafka. The member subscribes to TOPIC in
GROUP, and for every record writes "partition offset value" to OUT (a line, flushed) before it
commits (synchronously, after each poll's records; INSTANCE, confluent-kafka only, makes it a
static member: group.instance.id): a record it was killed before committing
is read again by the next owner (at least once). Each assignment it gets is written as
"assigned p,p,..." and a revocation as "revoked"; SIGTERM closes the consumer cleanly (a
LeaveGroup) and ends the process.
"""

from __future__ import annotations

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


def confluent(
    bootstrap: str,
    group: str,
    topic: str,
    assignor: str,
    out: TextIO,
    stopped: Callable[[], bool],
    instance: str | None = None,
) -> None:
    from confluent_kafka import Consumer

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
                consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def kafka_python(
    bootstrap: str, group: str, topic: str, assignor: str, out: TextIO, stopped: Callable[[], bool]
) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener

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
            for records in batches.values():
                for r in records:
                    note(out, f"{r.partition} {r.offset} {r.value.decode()}")
            if batches:
                consumer.commit()
    finally:
        consumer.close()


def aio(
    bootstrap: str, group: str, topic: str, assignor: str, out: TextIO, stopped: Callable[[], bool]
) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.abc import ConsumerRebalanceListener

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
                    await consumer.commit()
        finally:
            await consumer.stop()

    asyncio.run(run())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
