"""The chaos workload through Kafka's own client: `raftlog chaos run --client kafka`.

The same operations, history and checker as the native workload (chaos/runner.py's
ProducerWorker and ConsumerWorker), sent through confluent-kafka (librdkafka) to the brokers'
Kafka listeners, so the checker's verdict rests on a client written elsewhere:

- `KafkaProducerWorker`: an idempotent producer (enable.idempotence, acks as the run asks:
  "all" by default; librdkafka's retries and its 5 requests in flight) sending the same unique
  values ("p<i>-<n>") to every partition in turn at `rate` sends/s. A delivery report is the
  completion: "ok" with its offset (or with none: librdkafka's implicit ack, see `_send`),
  "info" with librdkafka's error (indeterminate: an earlier attempt may have been appended),
  "fail" when produce() itself refused the record (never queued).
  Every send resolves within
  the run (message.timeout.ms, runner.KAFKA_DELIVERY_TIMEOUT_MS: longer than the native 20 s,
  which says why).
- `KafkaConsumerWorker`: a member of Kafka's classic consumer group "chaos-group" (the range
  assignor, eager rebalances), polling with consume() and committing its positions
  synchronously every `commit_interval_s`; each assignment it gets is recorded as an "assign"
  (the checker's per-assignment order checks restart there), each poll's records as one "ok"
  poll, a refused commit as "info".

librdkafka's own log (connection failures under faults, by the hundred) goes to
OUT/librdkafka.log, not the terminal: `kafka_log(out)` gives the logger both workers use.
RAFTLOG_CHAOS_LIBRDKAFKA_DEBUG=CONTEXTS (librdkafka's `debug`, e.g. "eos,msg,protocol") adds
its debug lines there, to trace what the client did with the brokers' answers.

Rules: librdkafka's callbacks run inside poll()/consume() on the worker's own thread, so the
in-flight bound is kept by polling until a slot frees (never by blocking on a semaphore); a
record with an error (librdkafka reports a broker-side failure that way) is left out of the
poll and named in its history entry ("errors"); every worker stops at the run's deadline.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from chaos.workload_thread import WorkloadThread

if TYPE_CHECKING:
    from chaos.runner import Recorder, RunConfig

# A producer has at most this many sends in flight (the native workload's bound).
IN_FLIGHT_MAX = 2000
POLL_S = 0.3
# librdkafka waits this long for any answer before it gives a broker up (socket.timeout.ms;
# its default, 60 s, kept an idempotent producer waiting on a SIGSTOPped leader for the whole
# pause: a paused process's kernel keeps the connection up, and without an error librdkafka
# does not refresh metadata). The native workload's request timeout is the same 5 s.
SOCKET_TIMEOUT_MS = 5000
CONSUME_BATCH = 500
DEBUG_ENV = "RAFTLOG_CHAOS_LIBRDKAFKA_DEBUG"


def _tp(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def kafka_log(cfg: RunConfig) -> logging.Logger:
    """The logger librdkafka writes to: OUT/librdkafka.log (one handler per run). Called once
    per run before the workers start (workers that each added a handler wrote every line once
    per worker)."""
    logger = logging.getLogger(f"chaos.librdkafka.{cfg.out}")
    if not logger.handlers:
        handler = logging.FileHandler(cfg.out / "librdkafka.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
        logger.setLevel(logging.DEBUG if os.environ.get(DEBUG_ENV) else logging.INFO)
    return logger


def debug_settings() -> dict[str, str]:
    """librdkafka's `debug` contexts from the environment (DEBUG_ENV), if any."""
    contexts = os.environ.get(DEBUG_ENV)
    return {"debug": contexts} if contexts else {}


class KafkaProducerWorker(WorkloadThread):
    def __init__(
        self,
        n: int,
        cfg: RunConfig,
        bootstrap: str,
        rec: Recorder,
        stop: threading.Event,
        delivery_ms: int,
    ):
        super().__init__(f"producer-{n}", stop)
        self.n, self.cfg, self.bootstrap, self.rec = n, cfg, bootstrap, rec
        self.log = kafka_log(cfg)
        self.delivery_ms = delivery_ms
        self.acked = self.sent = self.in_flight = 0

    def _run(self) -> None:
        from confluent_kafka import Producer

        stop = self.stop

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": self.cfg.acks,
                "linger.ms": 1,
                "message.timeout.ms": self.delivery_ms,
                "request.timeout.ms": 5000,
                # librdkafka's own request timeout (default 60 s): the native workload's 5 s.
                "socket.timeout.ms": SOCKET_TIMEOUT_MS,
                "retry.backoff.ms": 50,
                # A `reassign` fault may grow the topic: librdkafka refuses a partition its
                # metadata lacks until its next refresh (5 min by default).
                "topic.metadata.refresh.interval.ms": 2000,
                **debug_settings(),
            },
            logger=self.log,
        )
        interval = 1.0 / self.cfg.rate
        next_at = time.monotonic()
        for seq in itertools.count():
            if stop.is_set():
                break
            next_at += interval
            while not stop.is_set() and (
                time.monotonic() < next_at or self.in_flight >= IN_FLIGHT_MAX
            ):
                producer.poll(min(max(next_at - time.monotonic(), 0.0), 0.05))
            if stop.is_set():
                break
            self._send(producer, seq)
        producer.flush(self.delivery_ms / 1000 + 10)

    def _send(self, producer: Any, seq: int) -> None:
        from confluent_kafka import KafkaException

        partition = (seq + self.n) % self.cfg.partitions
        tp = _tp(self.cfg.topic, partition)
        value = f"p{self.n}-{seq}"
        i = self.rec.invoke(self.process, "send", value, tp=tp)
        self.sent += 1

        def delivered(err: Any, msg: Any) -> None:
            self.in_flight -= 1
            offset = msg.offset() if err is None else None
            if err is None:
                # librdkafka reports a delivery without an offset when it "implicitly acks"
                # a batch: its request failed (NOT_LEADER_OR_FOLLOWER at a leader change,
                # the records already appended) but a later batch of this idempotent
                # producer succeeded, so the broker's sequence check proves this one is in
                # the log. Acknowledged all the same: the checker must find it read back.
                self.acked += 1
                known = offset if offset is not None and offset >= 0 else None
                self.rec.complete(self.process, "ok", "send", i, value, tp=tp, offset=known)
            else:
                self.rec.complete(
                    self.process, "info", "send", i, value, tp=tp, error=str(err)[:200]
                )

        while True:
            try:
                producer.produce(self.cfg.topic, value.encode(), None, partition, delivered)
                self.in_flight += 1
                return
            except BufferError:  # librdkafka's queue is full: serve callbacks, then again
                producer.poll(0.05)
            except KafkaException as e:
                # Refused by librdkafka before it queued the record (an unknown partition
                # until its metadata names a grown topic's new ones): certainly not written.
                self.rec.complete(self.process, "fail", "send", i, value, tp=tp, error=str(e))
                return


class KafkaConsumerWorker(WorkloadThread):
    GROUP = "chaos-group"

    def __init__(
        self, n: int, cfg: RunConfig, bootstrap: str, rec: Recorder, stop: threading.Event
    ):
        super().__init__(f"consumer-{n}", stop)
        self.n, self.cfg, self.bootstrap, self.rec = n, cfg, bootstrap, rec
        self.log = kafka_log(cfg)
        self.polled = 0
        self.assignment: list[Any] = []

    def _run(self) -> None:
        from confluent_kafka import Consumer

        stop = self.stop

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.GROUP,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": max(self.cfg.session_timeout_ms * 4, 6000),
                "socket.timeout.ms": SOCKET_TIMEOUT_MS,
                **debug_settings(),
            },
            logger=self.log,
        )

        def assigned(_c: Any, partitions: list[Any]) -> None:
            self.assignment = list(partitions)
            names = sorted(_tp(p.topic, p.partition) for p in partitions)
            self.rec.standalone(self.process, "assign", names, group=self.GROUP)

        def revoked(_c: Any, _partitions: list[Any]) -> None:
            self.assignment = []

        consumer.subscribe([self.cfg.topic], on_assign=assigned, on_revoke=revoked)
        next_commit = time.monotonic() + self.cfg.commit_interval_s
        try:
            while not stop.is_set():
                i = self.rec.invoke(self.process, "poll", group=self.GROUP)
                records = consumer.consume(CONSUME_BATCH, POLL_S)
                value: dict[str, list[list[Any]]] = {}
                errors = []
                for r in records:
                    if r.error() is not None:
                        errors.append(str(r.error()))
                        continue
                    value.setdefault(_tp(r.topic(), r.partition()), []).append(
                        [r.offset(), (r.value() or b"").decode()]
                    )
                self.polled += sum(len(v) for v in value.values())
                extra = {"errors": errors[:5]} if errors else {}
                self.rec.complete(self.process, "ok", "poll", i, value, group=self.GROUP, **extra)
                if time.monotonic() >= next_commit and self.assignment:
                    next_commit = time.monotonic() + self.cfg.commit_interval_s
                    self._commit(consumer)
        finally:
            consumer.close()

    def _commit(self, consumer: Any) -> None:
        from confluent_kafka import KafkaException

        positions = [p for p in consumer.position(self.assignment) if p.offset >= 0]
        if not positions:
            return
        value = {_tp(p.topic, p.partition): p.offset for p in positions}
        i = self.rec.invoke(self.process, "commit", value, group=self.GROUP)
        try:
            consumer.commit(offsets=positions, asynchronous=False)
        except KafkaException as e:
            self.rec.complete(
                self.process, "info", "commit", i, value, group=self.GROUP, error=str(e)[:200]
            )
            return
        self.rec.complete(self.process, "ok", "commit", i, value, group=self.GROUP)
