"""`ClusterMetadata`: the broker's view of the replicated metadata (the MetadataStore seam).

The broker reads topics, partitions and brokers from the local copy of the Raft state (a voter's
or an observer's), and changes them by proposing commands. Reads are cheap: converted views are
cached per state version.
"""

from __future__ import annotations

import uuid
from typing import Any

from raftlog.errors import UnknownTopicOrPartitionError
from raftlog.metadata.model import BrokerInfo, PartitionInfo, TopicInfo
from raftlog.metadata.quorum import MetadataQuorum
from raftlog.metadata.state import MetadataState


def parse_voters(voters: list[str]) -> dict[int, str]:
    """["1@host:port", ...] -> {1: "host:port"}; raises ValueError naming a bad entry."""
    out: dict[int, str] = {}
    for v in voters:
        node, at, addr = v.partition("@")
        host, colon, port = addr.rpartition(":")
        if not at or not node.isdigit() or not colon or not host or not port.isdigit():
            raise ValueError(f"controller voter {v!r} must look like ID@HOST:PORT")
        out[int(node)] = addr
    if not out:
        raise ValueError("at least one controller voter is needed")
    return out


def _topic_info(t: dict[str, Any]) -> TopicInfo:
    return TopicInfo(
        t["name"],
        t["topic_id"],
        tuple(
            PartitionInfo(
                i,
                p["leader"],
                p["leader_epoch"],
                tuple(p["replicas"]),
                tuple(p["isr"]),
                p["partition_epoch"],
                tuple(p.get("elr", ())),
            )
            for i, p in enumerate(t["partitions"])
        ),
        dict(t["config"]),
    )


class ClusterMetadata:
    def __init__(self, quorum: MetadataQuorum, voters: dict[int, str]):
        self.quorum = quorum
        self.voters = voters
        self._by_address = {addr: node for node, addr in voters.items()}
        self._cache_version = -1
        self._topics: dict[str, TopicInfo] = {}
        self._brokers: list[BrokerInfo] = []

    def _refresh(self) -> None:
        # The version is read without the lock first: an int read is atomic, and a cache
        # built at the current version is the current state (an apply in progress has not
        # bumped it yet, so this read simply comes just before that apply). The lock is
        # taken only to rebuild.
        if self.quorum.state.version == self._cache_version:
            return

        def grab(s: MetadataState) -> tuple[int, dict[str, TopicInfo], list[BrokerInfo]]:
            if s.version == self._cache_version:
                return s.version, self._topics, self._brokers
            topics = {name: _topic_info(t) for name, t in s.topics.items()}
            brokers = [
                BrokerInfo(b["node_id"], b["host"], b["port"], b["rack"])
                for _, b in sorted(s.brokers.items())
                if not b["fenced"]
            ]
            return s.version, topics, brokers

        self._cache_version, self._topics, self._brokers = self.quorum.read(grab)

    @property
    def controller_id(self) -> int:
        leader = self.quorum.status().leader
        return -1 if leader is None else self._by_address.get(leader, -1)

    def brokers(self) -> list[BrokerInfo]:
        self._refresh()
        return list(self._brokers)

    def topics(self) -> dict[str, TopicInfo]:
        self._refresh()
        return dict(self._topics)

    def topic(self, name: str) -> TopicInfo:
        self._refresh()
        try:
            return self._topics[name]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}") from None

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        self._refresh()
        t = self._topics.get(topic)
        if t is None or not 0 <= partition < len(t.partitions):
            return None
        return t.partitions[partition]

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, config: dict[str, Any]
    ) -> TopicInfo:
        await self.quorum.propose(
            "create_topic",
            name=name,
            topic_id=uuid.uuid4().hex,
            partitions=partitions,
            replication_factor=replication_factor,
            config={str(k): str(v) for k, v in config.items()},
        )
        return self.topic(name)

    async def delete_topic(self, name: str) -> None:
        await self.quorum.propose("delete_topic", name=name)

    def describe_cluster(self) -> dict[str, Any]:
        """The quorum as this node sees it, every registered broker, every partition."""
        st = self.quorum.status()

        def grab(s: MetadataState) -> dict[str, Any]:
            return {
                "brokers": [
                    [b["node_id"], b["host"], b["port"], b["rack"], b["broker_epoch"], b["fenced"]]
                    for _, b in sorted(s.brokers.items())
                ],
                "partitions": [
                    [name, i, p["leader"], p["leader_epoch"], p["replicas"], p["isr"]]
                    for name in sorted(s.topics)
                    for i, p in enumerate(s.topics[name]["partitions"])
                ],
                "metadata_version": s.version,
            }

        out: dict[str, Any] = self.quorum.read(grab)
        out["voters"] = [[n, a] for n, a in sorted(self.voters.items())]
        out["controller_id"] = self._by_address.get(st.leader, -1) if st.leader else -1
        out["quorum"] = {
            "term": st.term,
            "commit_index": st.commit_index,
            "last_applied": st.last_applied,
            "ready": st.ready,
            "this_node_leads": st.is_leader,
        }
        return out
