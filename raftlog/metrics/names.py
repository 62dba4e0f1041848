"""The names of raftlog's metrics: one `Spec` each, the Kafka JMX metric it follows.

docs/METRICS.md shows this table (`markdown_table()` prints it; a test checks that every name
here is there). Names are Prometheus style: `raftlog_` then what is measured, the unit last
(`_bytes`, `_seconds`), counters ending in `_total`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Spec:
    name: str
    kind: str  # gauge, counter, histogram
    labels: tuple[str, ...]
    kafka: str  # the Kafka metric it follows ("" if none)
    help: str

    @property
    def help_pair(self) -> tuple[str, str]:
        return self.name, self.help


ALL: list[Spec] = []


def _spec(name: str, kind: str, labels: str, kafka: str, help: str) -> Spec:
    spec = Spec(name, kind, tuple(labels.split()), kafka, help)
    ALL.append(spec)
    return spec


_KC = "kafka.controller:type=KafkaController,name="
_RM = "kafka.server:type=ReplicaManager,name="
_RAFT = "kafka.server:type=raft-metrics,name="
_BT = "kafka.server:type=BrokerTopicMetrics,name="
_LOG = "kafka.log:type=Log,name="
_CLEANER = "kafka.log:type=LogCleaner,name="

# The quorum and the controller (every node; the cluster totals on the active controller only).
ACTIVE_CONTROLLER = _spec(
    "raftlog_active_controller",
    "gauge",
    "",
    _KC + "ActiveControllerCount",
    "1 on the active controller (the Raft leader's controller), 0 elsewhere",
)
RAFT_TERM = _spec(
    "raftlog_raft_term", "gauge", "", _RAFT + "current-epoch", "the Raft term this node is in"
)
RAFT_COMMIT_INDEX = _spec(
    "raftlog_raft_commit_index",
    "gauge",
    "",
    _RAFT + "high-watermark",
    "the Raft log's commit index as this node knows it",
)
RAFT_LAST_APPLIED = _spec(
    "raftlog_raft_last_applied",
    "gauge",
    "",
    _RAFT + "log-end-offset",
    "the last Raft entry this node applied to its metadata state",
)
RAFT_APPLY_LAG = _spec(
    "raftlog_raft_apply_lag",
    "gauge",
    "",
    "",
    "Raft entries committed but not yet applied here (commit index - last applied)",
)
RAFT_LEADER = _spec(
    "raftlog_raft_leader",
    "gauge",
    "",
    _RAFT + "current-leader",
    "1 if this node is the Raft leader of the metadata quorum",
)
OFFLINE_PARTITIONS = _spec(
    "raftlog_offline_partitions",
    "gauge",
    "",
    _KC + "OfflinePartitionsCount",
    "partitions with no leader (active controller only)",
)
GLOBAL_TOPICS = _spec(
    "raftlog_global_topics", "gauge", "", _KC + "GlobalTopicCount", "topics (active controller)"
)
GLOBAL_PARTITIONS = _spec(
    "raftlog_global_partitions",
    "gauge",
    "",
    _KC + "GlobalPartitionCount",
    "partitions (active controller)",
)
ACTIVE_BROKERS = _spec(
    "raftlog_active_brokers",
    "gauge",
    "",
    _KC + "ActiveBrokerCount",
    "registered, unfenced brokers (active controller)",
)
FENCED_BROKERS = _spec(
    "raftlog_fenced_brokers",
    "gauge",
    "",
    _KC + "FencedBrokerCount",
    "registered brokers that are fenced (active controller)",
)

# The broker's replicas (Kafka's ReplicaManager: over the partitions this broker leads).
PARTITIONS = _spec(
    "raftlog_partitions", "gauge", "", _RM + "PartitionCount", "partitions hosted by this broker"
)
LEADER_PARTITIONS = _spec(
    "raftlog_leader_partitions", "gauge", "", _RM + "LeaderCount", "partitions this broker leads"
)
UNDER_REPLICATED_PARTITIONS = _spec(
    "raftlog_under_replicated_partitions",
    "gauge",
    "",
    _RM + "UnderReplicatedPartitions",
    "partitions led here whose ISR is smaller than their replica list",
)
UNDER_MIN_ISR_PARTITIONS = _spec(
    "raftlog_under_min_isr_partitions",
    "gauge",
    "",
    _RM + "UnderMinIsrPartitionCount",
    "partitions led here whose ISR is below min.insync.replicas (acks=all refused)",
)
AT_MIN_ISR_PARTITIONS = _spec(
    "raftlog_at_min_isr_partitions",
    "gauge",
    "",
    _RM + "AtMinIsrPartitionCount",
    "partitions led here whose ISR is exactly min.insync.replicas (one more loss refuses acks=all)",
)
PRODUCER_IDS = _spec(
    "raftlog_producer_ids",
    "gauge",
    "",
    _RM + "ProducerIdCount",
    "idempotent producer ids tracked by the partitions led here",
)
ISR_SHRINKS = _spec(
    "raftlog_isr_shrinks_total",
    "counter",
    "",
    _RM + "IsrShrinksPerSec",
    "ISR shrinks this broker's leaders made",
)
ISR_EXPANDS = _spec(
    "raftlog_isr_expands_total",
    "counter",
    "",
    _RM + "IsrExpandsPerSec",
    "ISR expansions this broker's leaders made",
)

# Per partition (at most partition_series_max partitions per node; leaders first).
LOG_SIZE_BYTES = _spec(
    "raftlog_log_size_bytes", "gauge", "topic partition", _LOG + "Size", "bytes of the log here"
)
LOG_START_OFFSET = _spec(
    "raftlog_log_start_offset",
    "gauge",
    "topic partition",
    _LOG + "LogStartOffset",
    "the log's first offset here",
)
LOG_END_OFFSET = _spec(
    "raftlog_log_end_offset",
    "gauge",
    "topic partition",
    _LOG + "LogEndOffset",
    "the offset the next record appended here takes",
)
HIGH_WATERMARK = _spec(
    "raftlog_high_watermark",
    "gauge",
    "topic partition",
    "",
    "what consumers may read of the partition, as this replica knows it",
)
REPLICA_LAG = _spec(
    "raftlog_replica_lag_records",
    "gauge",
    "topic partition follower",
    "kafka.server:type=FetcherLagMetrics,name=ConsumerLag",
    "leader only: offsets a follower is behind the leader's log end, as of its last fetch",
)
PARTITION_SERIES_OMITTED = _spec(
    "raftlog_partition_series_omitted",
    "gauge",
    "",
    "",
    "hosted partitions left out of the per-partition series (metrics_partition_series_max); "
    "the per-topic series count them",
)
TOPIC_LOG_SIZE_BYTES = _spec(
    "raftlog_topic_log_size_bytes",
    "gauge",
    "topic",
    "",
    "bytes of the topic's logs hosted here (every partition)",
)
TOPIC_PARTITIONS = _spec(
    "raftlog_topic_partitions", "gauge", "topic", "", "the topic's partitions hosted here"
)
TOPIC_REPLICA_LAG_MAX = _spec(
    "raftlog_topic_replica_lag_max_records",
    "gauge",
    "topic",
    "kafka.server:type=ReplicaFetcherManager,name=MaxLag",
    "the largest follower lag over the topic's partitions led here",
)

# Consumer groups (each broker: the partitions it leads).
CONSUMER_GROUP_LAG = _spec(
    "raftlog_consumer_group_lag",
    "gauge",
    "group topic partition",
    "kafka.consumer:type=consumer-fetch-manager-metrics,name=records-lag",
    "high watermark - the group's committed offset, on partitions led here",
)
CONSUMER_GROUP_TOPIC_LAG = _spec(
    "raftlog_consumer_group_topic_lag",
    "gauge",
    "group topic",
    "",
    "the group's lag summed over the topic's partitions led here (every partition)",
)
CONSUMER_GROUP_LAG_SERIES_OMITTED = _spec(
    "raftlog_consumer_group_lag_series_omitted",
    "gauge",
    "",
    "",
    "group-partition pairs left out of raftlog_consumer_group_lag (metrics_partition_series_max)",
)

# Offline logs (the LogManager's offline table).
OFFLINE_LOGS = _spec(
    "raftlog_offline_logs",
    "gauge",
    "",
    "kafka.log:type=LogManager,name=OfflineLogDirectoryCount",
    "hosted partitions whose log is offline here (damaged data, a full disk, a failed open)",
)
OFFLINE_LOG = _spec(
    "raftlog_offline_log",
    "gauge",
    "topic partition reason",
    "",
    "1 per offline log, `reason` the error's kind (the broker's log has its text)",
)

# Requests (both protocols; `listener` says which listener took them).
REQUESTS = _spec(
    "raftlog_requests_total",
    "counter",
    "api listener",
    "kafka.network:type=RequestMetrics,name=RequestsPerSec",
    "requests answered (and acks=0 produces handled)",
)
REQUEST_ERRORS = _spec(
    "raftlog_request_errors_total",
    "counter",
    "api listener",
    "kafka.network:type=RequestMetrics,name=ErrorsPerSec",
    "requests answered with a request-level error, or whose connection was closed for them",
)
REQUEST_DURATION = _spec(
    "raftlog_request_duration_seconds",
    "histogram",
    "api listener",
    "kafka.network:type=RequestMetrics,name=TotalTimeMs",
    "time from a request's arrival to its answer leaving (long polls included)",
)
CONNECTIONS = _spec(
    "raftlog_connections",
    "gauge",
    "pool",
    "kafka.server:type=socket-server-metrics,name=connection-count",
    "open connections of a connection pool (client: client, external and Kafka listeners)",
)
CONNECTIONS_MAX = _spec(
    "raftlog_connections_max",
    "gauge",
    "pool",
    "max.connections",
    "the pool's connection limit (connections_max)",
)
REQUEST_QUEUED_BYTES = _spec(
    "raftlog_request_queued_bytes",
    "gauge",
    "pool",
    "kafka.network:type=SocketServer,name=MemoryPoolUsed",
    "request bytes the pool's connections hold (received and reserved)",
)
REQUEST_QUEUED_BYTES_MAX = _spec(
    "raftlog_request_queued_bytes_max",
    "gauge",
    "pool",
    "queued.max.request.bytes",
    "the pool's request memory (queued_request_bytes_max)",
)

# Traffic per topic (as leader).
TOPIC_BYTES_IN = _spec(
    "raftlog_topic_bytes_in_total",
    "counter",
    "topic",
    _BT + "BytesInPerSec",
    "record batch bytes appended as leader (produce, both protocols)",
)
TOPIC_RECORDS_IN = _spec(
    "raftlog_topic_records_in_total",
    "counter",
    "topic",
    _BT + "MessagesInPerSec",
    "records appended as leader (from batch headers, not counted one by one)",
)
TOPIC_BYTES_OUT = _spec(
    "raftlog_topic_bytes_out_total",
    "counter",
    "topic",
    _BT + "BytesOutPerSec",
    "record bytes of fetch responses sent to consumers",
)
REPLICATION_BYTES_OUT = _spec(
    "raftlog_replication_bytes_out_total",
    "counter",
    "",
    _BT + "ReplicationBytesOutPerSec",
    "record bytes of fetch responses sent to followers",
)

# The scrubber and the log cleaner.
SCRUBBER_BYTES = _spec(
    "raftlog_log_scrubber_bytes_checked_total",
    "counter",
    "",
    "",
    "bytes of closed segments whose checksums the scrubber checked",
)
CLEANER_CLEANS = _spec(
    "raftlog_log_cleaner_cleans_total",
    "counter",
    "",
    "",
    "cleans of compacted logs installed",
)
CLEANER_FAILURES = _spec(
    "raftlog_log_cleaner_failures_total",
    "counter",
    "",
    "",
    "cleans that failed (the log is tried again later)",
)
CLEANER_BYTES_READ = _spec(
    "raftlog_log_cleaner_bytes_read_total",
    "counter",
    "",
    "",
    "bytes the cleaner read",
)
CLEANER_BYTES_WRITTEN = _spec(
    "raftlog_log_cleaner_bytes_written_total",
    "counter",
    "",
    "",
    "bytes the cleaner wrote",
)
CLEANER_RECORDS_READ = _spec(
    "raftlog_log_cleaner_records_read_total", "counter", "", "", "records the cleaner read"
)
CLEANER_RECORDS_KEPT = _spec(
    "raftlog_log_cleaner_records_kept_total", "counter", "", "", "records the cleaner kept"
)
CLEANER_LAST_CLEAN_SECONDS = _spec(
    "raftlog_log_cleaner_last_clean_seconds",
    "gauge",
    "",
    _CLEANER + "max-clean-time-secs",
    "how long the last clean took",
)
CLEANER_LAST_CLEAN_END = _spec(
    "raftlog_log_cleaner_last_clean_timestamp_seconds",
    "gauge",
    "",
    "",
    "when the last clean was installed (Unix time; 0: none yet)",
)
COMPACTED_LOGS = _spec(
    "raftlog_compacted_logs", "gauge", "", "", "hosted logs whose topic is compacted"
)


def markdown_table() -> str:
    """The table docs/METRICS.md shows."""
    lines = [
        "| name | type | labels | Kafka's JMX metric | meaning |",
        "|---|---|---|---|---|",
    ]
    for s in ALL:
        labels = ", ".join(s.labels) or "-"
        kafka = f"`{s.kafka}`" if s.kafka else "-"
        lines.append(f"| `{s.name}` | {s.kind} | {labels} | {kafka} | {s.help} |")
    return "\n".join(lines) + "\n"
