"""What a request handler sees of the broker and of the connection a request came on.

Handlers (raftlog/broker/handlers/) take a `HandlerContext` and a `RequestSource`, never the
`Broker` or the `Connection`: the context names every broker operation a handler may call, so
a second protocol's handlers call the same ones, and the broker package has no import cycle
(server.py builds the Broker, which satisfies `HandlerContext`; connection.py's Connection
satisfies `RequestSource`; neither module is imported by a handler).

Rules: a handler reads partitions through `replicas` and `leader_partition`, metadata through
`metadata`, and changes the cluster only through the coroutines named here. Adding an
operation here is adding it to the broker's public surface: say why in its docstring.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from raftlog.broker.config import BrokerConfig
    from raftlog.broker.logs import LogManager
    from raftlog.errors import RaftlogError
    from raftlog.metadata.cluster import ClusterMetadata
    from raftlog.metadata.coordinator import GroupCoordinator
    from raftlog.metadata.model import TopicInfo
    from raftlog.metrics.stats import BrokerStats
    from raftlog.replication.manager import ReplicaManager
    from raftlog.replication.partition import Partition
    from raftlog.topics import TopicPartition


class ProducerIds(Protocol):
    """Unique producer ids (InitProducerId)."""

    async def next_id(self) -> int: ...


class RequestSource(Protocol):
    """The connection a request came on, as a handler may know it."""

    @property
    def external(self) -> bool:
        """It came through the external listener: name brokers by their external addresses."""
        ...

    @property
    def request_bytes_max(self) -> int:
        """The largest frame_length its listener reads."""
        ...

    @property
    def client_id(self) -> str:
        """The client id of the request being handled ("" when its protocol has none)."""
        ...

    def close_after_answer(self, why: str) -> None:
        """Close the connection once this request (and those before it) is answered."""
        ...


class HandlerContext(Protocol):
    """The broker operations request handlers use."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def metadata(self) -> ClusterMetadata: ...

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def logs(self) -> LogManager: ...

    @property
    def coordinator(self) -> GroupCoordinator | None:
        """The group coordinator of this node (controllers only), active on the Raft leader."""
        ...

    @property
    def producer_ids(self) -> ProducerIds: ...

    @property
    def stats(self) -> BrokerStats:
        """The broker's event counters (raftlog/metrics/stats.py): the produce and fetch
        handlers count what they append and send, per topic, where they already know it."""
        ...

    @property
    def stopping(self) -> bool:
        """The broker is shutting down: long polls end now."""
        ...

    def leader_partition(self, tp: TopicPartition) -> Partition:
        """A partition this broker leads, or raises the error a client should act on."""
        ...

    def writable_partition(self, tp: TopicPartition) -> Partition:
        """`leader_partition` for a produce: also NotLeaderOrFollowerError while this broker
        is cut off from the metadata quorum (its leadership has likely moved)."""
        ...

    def topics_to_auto_create(self, topics: Iterable[Any]) -> list[str]: ...

    async def auto_create(self, topics: list[str]) -> dict[str, RaftlogError]: ...

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        config: dict[str, Any],
        validate_only: bool = False,
    ) -> TopicInfo: ...

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None = None,
        validate_only: bool = False,
    ) -> None: ...

    async def alter_topic_config(
        self, name: str, changes: dict[str, str | None], validate_only: bool = False
    ) -> dict[str, str]: ...

    async def elect_leaders(
        self, partitions: list[tuple[str, int]] | None
    ) -> list[tuple[str, int, int, str | None]]: ...

    async def alter_partition_reassignments(
        self, entries: list[tuple[str, int, list[int] | None]], throttle: int | None = None
    ) -> list[tuple[str, int, int, str | None]]: ...

    async def delete_topic(self, name: str) -> None: ...
