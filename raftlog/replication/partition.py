"""`Partition`: one partition a broker hosts, as a replica (its log, its replication core, and
who waits on it), and the broker-wide `ReplicationConfig`.

Rules: a Partition is changed only by the ReplicaManager (raftlog/replication/manager.py),
on the event loop thread; handlers and the replica fetcher read it. Its core
(replication/core.py) decides; the manager performs the core's actions on the log.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from raftlog.errors import RaftlogError
from raftlog.metadata.model import PartitionInfo
from raftlog.replication.core import PartitionConfig, PartitionCore, Role
from raftlog.storage import FileSlice, PartitionLog
from raftlog.topics import TopicPartition

# Called with None (committed) or the error of an acks=all produce.
CommitCallback = Callable[[RaftlogError | None], None]


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """Broker-wide replication settings (Kafka's names, with the unit last)."""

    # replica.lag.time.max.ms: a follower not caught up for this long leaves the ISR.
    replica_lag_time_max_ms: int = 30_000
    # replica.fetch.wait.max.ms: how long a follower's fetch long-polls the leader.
    replica_fetch_wait_max_ms: int = 500
    # replica.fetch.max.bytes (per partition) and replica.fetch.response.max.bytes.
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    # replica.fetch.backoff.ms: after a failed fetch (leader unreachable, an error).
    replica_fetch_backoff_ms: int = 200
    # A partition whose fetched data cannot be appended (a full disk) waits
    # replica_fetch_backoff_ms, doubling per failure up to this, before it is fetched again:
    # without it the follower refetched the same bytes at once, about a thousand times a second
    # with two log lines each, for as long as the disk stayed full.
    replica_append_backoff_ms_max: int = 5_000
    # replica.high.watermark.checkpoint.interval.ms
    high_watermark_checkpoint_interval_ms: int = 5_000
    # How often leaders look for lagging followers and expired produce requests.
    tick_interval_ms: int = 50
    # Request timeout of a follower's fetch (over the long-poll wait); see
    # fetch_response_timeout_ms for the bound that applies.
    replica_socket_timeout_ms: int = 30_000

    @property
    def fetch_response_timeout_ms(self) -> int:
        """How long a follower waits for a fetch's answer before it drops the connection and
        fetches again: the long-poll wait plus the lag bound, at most the socket timeout.
        A request that a link swallowed (a half-open connection, a proxy or middlebox that lost
        it) is never answered; waiting past the lag bound only keeps the follower out of the
        ISR after the link is back (the chaos suite saw 28 s with a 3 s lag bound)."""
        return min(
            self.replica_socket_timeout_ms,
            self.replica_fetch_wait_max_ms + self.replica_lag_time_max_ms,
        )


class Partition:
    """One hosted partition: its log, its replication core, and who waits on it."""

    def __init__(
        self,
        tp: TopicPartition,
        plog: PartitionLog,
        node_id: int,
        topic_config: dict[str, str],
        config: ReplicationConfig,
        high_watermark: int = 0,
        topic_id: str = "",
    ):
        self.tp = tp
        self.log = plog
        self.topic_config = dict(topic_config)
        self.topic_id = topic_id
        self.core = PartitionCore(node_id, str(tp), plog, high_watermark=high_watermark)
        self.replication = config
        self.info: PartitionInfo | None = None
        # Long-polling fetches: followers wake on appends, consumers on HW moves.
        self.follower_waiters: set[asyncio.Future[None]] = set()
        self.consumer_waiters: set[asyncio.Future[None]] = set()
        # fsync policy: a flush is running / another one is needed after it.
        self.flushing = False
        self.flush_again = False
        # Follower: fetched data that could not be appended (a full disk, a failed write) or
        # was rejected; the partition is left out of fetches until `fetch_backoff_until_ms`.
        self.append_failures = 0
        self.fetch_backoff_until_ms = 0
        self.flush_done: asyncio.Future[None] | None = None
        # Follower: the leader whose ReplicaFetcher fetches this partition (None: none).
        self.fetched_from: int | None = None

    def partition_config(self) -> PartitionConfig:
        return PartitionConfig(
            min_insync_replicas=int(self.topic_config.get("min.insync.replicas", "1")),
            replica_lag_time_max_ms=self.replication.replica_lag_time_max_ms,
            fsync_policy=self.topic_config.get("durability.policy") == "fsync",
        )

    @property
    def high_watermark(self) -> int:
        return self.core.high_watermark

    def known_high_watermark(self) -> int:
        """The high watermark for ListOffsets (PartitionCore.known_high_watermark)."""
        return self.core.known_high_watermark()

    @property
    def fsync_policy(self) -> bool:
        return self.core.config.fsync_policy

    def replica_log_end_offsets(self) -> dict[int, int]:
        """Leader only: each replica's log end offset as the leader knows it (its own, and
        each follower's from its last fetch, -1 before one); {} on a follower."""
        if self.core.role is not Role.LEADER:
            return {}
        out = {f.replica_id: f.log_end_offset for f in self.core.followers.values()}
        out[self.core.node_id] = self.log.log_end_offset
        return dict(sorted(out.items()))

    def wake(self, waiters: set[asyncio.Future[None]]) -> None:
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
            waiters.clear()


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """What one partition of a fetch gets from its leader (`ReplicaManager.read_as_leader`):
    its high watermark and log start, and `data`, empty when nothing is sent now. `deferred`:
    there is data to send that did not fit the response; it waits for the next request."""

    high_watermark: int
    log_start_offset: int
    data: FileSlice
    deferred: bool = False
