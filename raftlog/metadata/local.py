"""Single-node metadata: the topic registry in `<data_dir>/metadata.json`, written atomically.

This is the seam the Raft quorum plugs into: the broker only calls the methods below. Every
partition is led by this node at leader epoch 0, with replicas = isr = [node_id].
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

from raftlog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raftlog.metadata.model import BrokerInfo, PartitionInfo, TopicInfo
from raftlog.storage.checkpoint import atomic_write
from raftlog.storage.config import LogConfig
from raftlog.topics import validate_topic_name

FILE_NAME = "metadata.json"
MAX_PARTITIONS = 10_000


class LocalMetadata:
    def __init__(self, data_dir: str, broker: BrokerInfo):
        self.path = os.path.join(data_dir, FILE_NAME)
        self.broker = broker
        self._topics: dict[str, TopicInfo] = {}
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                raw = json.load(f)
            self._topics = {t["name"]: TopicInfo.from_wire(t) for t in raw["topics"]}

    @property
    def controller_id(self) -> int:
        return self.broker.node_id

    def brokers(self) -> list[BrokerInfo]:
        return [self.broker]

    def topics(self) -> dict[str, TopicInfo]:
        return dict(self._topics)

    def topic(self, name: str) -> TopicInfo:
        try:
            return self._topics[name]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}") from None

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, config: dict[str, Any]
    ) -> TopicInfo:
        validate_topic_name(name)
        if name in self._topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"topic {name!r}: partitions must be 1..{MAX_PARTITIONS}, got {partitions!r}"
            )
        if replication_factor != 1:
            raise InvalidRequestError(
                f"topic {name!r}: replication factor {replication_factor} needs "
                f"{replication_factor} brokers; this cluster has 1"
            )
        if not isinstance(config, dict):
            raise InvalidConfigError(f"topic {name!r}: config must be a map")
        config = {str(k): str(v) for k, v in config.items()}
        LogConfig.from_topic_config(config)  # validate now, not at the first append
        node = self.broker.node_id
        info = TopicInfo(
            name,
            uuid.uuid4().hex,
            tuple(PartitionInfo(p, node, 0, (node,), (node,)) for p in range(partitions)),
            config,
        )
        self._topics[name] = info
        self._save()
        return info

    def delete_topic(self, name: str) -> TopicInfo:
        info = self.topic(name)
        del self._topics[name]
        self._save()
        return info

    def _save(self) -> None:
        data = {"version": 0, "topics": [t.to_wire() for t in self._topics.values()]}
        atomic_write(self.path, json.dumps(data, indent=1).encode())
