"""librdkafka's mock cluster as a stand-in broker for testing the Kafka client helpers.

confluent-kafka's librdkafka carries a small in-process Kafka cluster for its own tests
(`test.mock.num.brokers`): a client configured with it starts mock brokers that listen on
loopback TCP ports and answer any client, kcat and Sarama included. It implements the APIs a
plain producer and an assigned consumer need (ApiVersions, Metadata, Produce, Fetch,
ListOffsets, InitProducerId, ...) and creates topics on first use. The helpers in
tests/kafka/clients.py are checked against it in CI, so that they are known to work before
raftlog's Kafka listener is pointed at them. It is not a reference for raftlog's behaviour.

The cluster lives as long as the client that made it; its address is read from the log line
librdkafka writes when it starts the cluster ("Mock cluster enabled: original
bootstrap.servers and security.protocol ignored and replaced with HOST:PORT,...").
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator

START_TIMEOUT_S = 10.0
_ADDRESSES = re.compile(r"replaced with (\S+)")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def mock_cluster(brokers: int = 1) -> Iterator[str]:
    """Start a librdkafka mock cluster of `brokers` brokers; yields its bootstrap address."""
    from confluent_kafka import Producer

    lines = _Lines()
    log = logging.getLogger(f"{__name__}.{id(lines)}")
    log.addHandler(lines)
    log.setLevel(logging.INFO)
    log.propagate = False
    holder = Producer(
        {"bootstrap.servers": "127.0.0.1:1", "test.mock.num.brokers": brokers}, logger=log
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (found := [m for line in lines.lines if (m := _ADDRESSES.search(line))]):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"librdkafka's mock cluster did not start in {START_TIMEOUT_S:g} s: "
                    f"{lines.lines}"
                )
            holder.poll(0.05)
        yield found[0].group(1).rstrip(",")
    finally:
        holder.flush(0)
        del holder
        log.removeHandler(lines)
