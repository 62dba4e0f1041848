"""`LogManager`: the partition logs a broker hosts, under `<data_dir>/logs/<topic>-<partition>`.

It opens every hosted partition at start (running storage recovery), creates and deletes them
with topics, wakes long-polling fetches when a partition grows, and runs the retention and
flush timers. Storage calls are synchronous and run on the event loop thread: appends are
page-cache writes of microseconds, and one thread keeps the "one writer per log" rule without
locks. fsyncs of rolled segments already run on the storage layer's own thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Iterable
from typing import Any

from raftlog.errors import RaftlogError, UnknownTopicOrPartitionError
from raftlog.metadata.model import TopicInfo
from raftlog.storage import LogConfig, PartitionLog
from raftlog.storage.checkpoint import atomic_write
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

TOPIC_ID_FILE = "topic-id"


def partition_dir_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def _read_topic_id(path: str) -> str | None:
    try:
        with open(os.path.join(path, TOPIC_ID_FILE), "rb") as f:
            return f.read().decode("ascii", "replace").strip()
    except FileNotFoundError:
        return None


def parse_partition_dir(name: str) -> TopicPartition | None:
    topic, dash, part = name.rpartition("-")
    if not dash or not topic or not part.isdigit():
        return None
    return TopicPartition(topic, int(part))


class LogManager:
    def __init__(self, data_dir: str, defaults: dict[str, Any] | None = None):
        self.root = os.path.join(data_dir, "logs")
        os.makedirs(self.root, exist_ok=True)
        self.defaults = dict(defaults or {})
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._topic_ids: dict[TopicPartition, str] = {}
        # Long-polling fetches waiting for a partition to grow.
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    def config_for(self, topic_config: dict[str, str]) -> LogConfig:
        return LogConfig.from_topic_config({**self.defaults, **topic_config})

    def reconcile(self, topics: Iterable[TopicInfo], node_id: int) -> None:
        """Make the hosted logs match the metadata: open partitions whose replicas include
        `node_id`; close and delete the others, and any whose topic was deleted and re-created
        (a different topic id, kept in each partition directory's `topic-id` file)."""
        wanted: dict[TopicPartition, TopicInfo] = {}
        for t in topics:
            for p in t.partitions:
                if node_id in p.replicas:
                    wanted[TopicPartition(t.name, p.partition)] = t
        for tp in list(self._logs):
            t = wanted.get(tp)
            if t is None or self._topic_ids.get(tp) != t.topic_id:
                self._drop(tp, "its topic was deleted or it moved away")
        for name in sorted(os.listdir(self.root)):
            path = os.path.join(self.root, name)
            tp = parse_partition_dir(name)
            t = wanted.get(tp) if tp is not None else None
            if tp in self._logs:
                continue
            if t is None or _read_topic_id(path) not in (None, t.topic_id):
                log.warning("deleting %s: not a partition this node hosts", path)
                shutil.rmtree(path, ignore_errors=True)
        for tp, t in wanted.items():
            if tp not in self._logs:
                self._open(tp, t)

    def _open(self, tp: TopicPartition, topic: TopicInfo) -> PartitionLog:
        plog = self._logs.get(tp)
        if plog is None:
            path = os.path.join(self.root, partition_dir_name(tp))
            plog = PartitionLog.open(path, self.config_for(topic.config))
            if _read_topic_id(path) is None:
                atomic_write(os.path.join(path, TOPIC_ID_FILE), topic.topic_id.encode())
            self._logs[tp] = plog
            self._topic_ids[tp] = topic.topic_id
        return plog

    def _drop(self, tp: TopicPartition, why: str) -> None:
        plog = self._logs.pop(tp)
        self._topic_ids.pop(tp, None)
        plog.close()
        shutil.rmtree(plog.path, ignore_errors=True)
        log.info("deleted partition %s: %s", tp, why)
        self.notify(tp)  # waiting fetches wake up and see the partition is gone

    def get(self, tp: TopicPartition) -> PartitionLog:
        try:
            return self._logs[tp]
        except KeyError:
            raise UnknownTopicOrPartitionError(
                f"this broker does not host partition {tp}"
            ) from None

    def find(self, tp: TopicPartition) -> PartitionLog | None:
        return self._logs.get(tp)

    def partitions(self) -> list[TopicPartition]:
        return list(self._logs)

    # -- long-poll support ---------------------------------------------------------------------

    def add_waiter(self, tps: Iterable[TopicPartition], fut: asyncio.Future[None]) -> None:
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)

    def remove_waiter(self, tps: Iterable[TopicPartition], fut: asyncio.Future[None]) -> None:
        for tp in tps:
            waiters = self._waiters.get(tp)
            if waiters is not None:
                waiters.discard(fut)
                if not waiters:
                    del self._waiters[tp]

    def notify(self, tp: TopicPartition) -> None:
        waiters = self._waiters.pop(tp, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def wake_all(self) -> None:
        for tp in list(self._waiters):
            self.notify(tp)

    # -- housekeeping --------------------------------------------------------------------------

    def enforce_retention(self) -> int:
        deleted = 0
        for tp, plog in list(self._logs.items()):
            try:
                deleted += plog.enforce_retention()
            except OSError as e:
                log.error("retention on %s failed: %s", tp, e)
        return deleted

    def maybe_flush(self) -> None:
        for tp, plog in self._logs.items():
            try:
                plog.maybe_flush()
            except RaftlogError as e:
                log.error("flushing %s failed: %s", tp, e)

    def close(self) -> None:
        for tp, plog in self._logs.items():
            try:
                plog.close()
            except OSError as e:
                log.error("closing %s failed: %s (recovery will check it at the next start)", tp, e)
        self._logs.clear()
