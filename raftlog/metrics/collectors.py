"""The node's Prometheus collectors: metric families built at scrape time from existing state.

Gauges that describe state (partition counts, under-replicated, controller, Raft, log sizes and
offsets, follower lag, group lag, connections ...) are computed here when Prometheus scrapes,
from what the broker, the replication cores, the LogManager and the metadata already hold:
nothing on a hot path keeps books for them. Counters and histograms of events come from the
plain ints of stats.py, turned into families here. Every name is in names.py (the table that
docs/METRICS.md shows).

Rules:
- A scrape runs on the node's event loop (http.py), so collectors read the broker's dicts
  without locks and without racing their changes; the metadata state, written by the Raft
  thread, is read under its lock (`quorum.read`), only what is needed copied out.
- Label values come from bounded sets: API names, listener names, topics, follower ids, error
  kinds, and at most `partition_series_max` partitions (and as many group-partition pairs) per
  node (`split_series`); the rest are counted in per-topic aggregates, and a gauge says how
  many were left out.
- Kafka's rules for who reports what: each broker counts the partitions it leads as
  under-replicated, at or under min ISR, and reports the consumer-group lag and follower lag
  of those (a sum over brokers counts each partition once); offline partitions, topic and
  partition totals and fenced brokers are the active controller's (0 or absent elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

import raftlog.metrics.names as n
from raftlog.metrics.stats import BrokerStats
from raftlog.replication.core import Role
from raftlog.topics import TopicPartition

if TYPE_CHECKING:
    from raftlog.broker.server import Broker
    from raftlog.metadata.quorum import QuorumStatus
    from raftlog.metadata.state import MetadataState

# Kafka's and Prometheus' habit: 1000 series of one kind per node is what a dashboard can plot
# and a Prometheus stores without thought; 10,000 partitions on one node would be 40,000+.
PARTITION_SERIES_MAX_DEFAULT = 1000
# Offline logs listed one by one (the LogManager reports at most this many to the metadata).
OFFLINE_LOG_SERIES_MAX = 1000


@dataclass(frozen=True, slots=True)
class NodeSources:
    """What the collectors read of a node; stand-ins in unit tests.

    `status`: the Raft member's status; `read(fn)`: fn(MetadataState) under the state's lock;
    `controller_active`: None on a broker-only node, else whether this node's controller is
    the active one; `broker`: the node's broker once started, else None."""

    node_id: int
    status: Callable[[], QuorumStatus]
    read: Callable[[Callable[[MetadataState], Any]], Any]
    controller_active: Callable[[], bool | None]
    broker: Callable[[], Broker | None]
    partition_series_max: int = PARTITION_SERIES_MAX_DEFAULT


class NodeCollector(Collector):
    """Every raftlog metric of one node (registered in the node's own CollectorRegistry)."""

    def __init__(self, sources: NodeSources):
        self.sources = sources

    def describe(self) -> Iterable[Metric]:
        # Nothing at registration: collect() reads a live node, and runs at scrape time only.
        return []

    def collect(self) -> Iterator[Metric]:
        src = self.sources
        yield from quorum_families(src.status(), src.controller_active())
        broker = src.broker()
        if src.controller_active() and broker is not None:
            yield from controller_families(broker)
        if broker is not None:
            yield from broker_families(broker, src.read, src.partition_series_max)


# -- the quorum and the controller ----------------------------------------------------------


def quorum_families(status: QuorumStatus, active: bool | None) -> Iterator[Metric]:
    yield _gauge(n.ACTIVE_CONTROLLER, 1 if active else 0)
    yield _gauge(n.RAFT_TERM, status.term)
    yield _gauge(n.RAFT_COMMIT_INDEX, status.commit_index)
    yield _gauge(n.RAFT_LAST_APPLIED, status.last_applied)
    yield _gauge(n.RAFT_APPLY_LAG, max(status.commit_index - status.last_applied, 0))
    yield _gauge(n.RAFT_LEADER, 1 if status.is_leader else 0)


def controller_families(broker: Broker) -> Iterator[Metric]:
    """The active controller's view of the whole cluster (from its metadata)."""
    metadata = broker.metadata
    topics = metadata.topics()
    offline = partitions = 0
    for t in topics.values():
        partitions += len(t.partitions)
        offline += sum(1 for p in t.partitions if p.leader < 0)
    epochs = metadata.broker_epochs()
    live = len(metadata.brokers())
    yield _gauge(n.OFFLINE_PARTITIONS, offline)
    yield _gauge(n.GLOBAL_TOPICS, len(topics))
    yield _gauge(n.GLOBAL_PARTITIONS, partitions)
    yield _gauge(n.ACTIVE_BROKERS, live)
    yield _gauge(n.FENCED_BROKERS, max(len(epochs) - live, 0))


# -- the broker -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionRow:
    """One hosted partition as the metrics see it (plain values, taken on the loop)."""

    tp: TopicPartition
    leader: bool
    size_bytes: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    replicas: int
    isr: int
    min_isr: int
    # Leader only: follower id -> its lag in offsets behind the leader's log end (-1 before
    # its first fetch at this leadership: unknown, not exported).
    follower_lag: tuple[tuple[int, int], ...] = ()
    producer_ids: int = 0


def split_series(keys: Sequence[Any], series_max: int) -> tuple[list[Any], int]:
    """The keys that get series of their own, in the order given (callers put the most useful
    first), and how many are left out."""
    if len(keys) <= series_max:
        return list(keys), 0
    return list(keys[:series_max]), len(keys) - series_max


def partition_rows(broker: Broker) -> list[PartitionRow]:
    """Every hosted partition, leaders first, then by topic and partition."""
    rows = []
    for tp, p in broker.replicas.partitions.items():
        core, plog = p.core, p.log
        leader = core.role is Role.LEADER
        end = plog.log_end_offset
        lag: tuple[tuple[int, int], ...] = ()
        if leader:
            lag = tuple(
                sorted(
                    (f.replica_id, end - f.log_end_offset)
                    for f in core.followers.values()
                    if f.log_end_offset >= 0
                )
            )
        rows.append(
            PartitionRow(
                tp,
                leader,
                plog.size_bytes,
                plog.log_start_offset,
                end,
                core.high_watermark,
                len(core.replicas),
                len(core.isr),
                core.config.min_insync_replicas,
                lag,
                len(plog.producer_state),
            )
        )
    rows.sort(key=lambda r: (not r.leader, r.tp.topic, r.tp.partition))
    return rows


def broker_families(
    broker: Broker, read: Callable[[Callable[[MetadataState], Any]], Any], series_max: int
) -> Iterator[Metric]:
    rows = partition_rows(broker)
    yield from replica_families(rows, series_max)
    yield from group_lag_families(rows, read, series_max)
    yield from offline_log_families(broker)
    yield from connection_families(broker)
    yield from stats_families(broker.stats, set(broker.metadata.topics()))
    yield from cleaner_families(broker)


def replica_families(rows: Sequence[PartitionRow], series_max: int) -> Iterator[Metric]:
    """Kafka's ReplicaManager gauges (over the partitions this broker leads), and the
    per-partition log gauges within the series bound (per-topic sums for all)."""
    led = [r for r in rows if r.leader]
    yield _gauge(n.PARTITIONS, len(rows))
    yield _gauge(n.LEADER_PARTITIONS, len(led))
    yield _gauge(n.UNDER_REPLICATED_PARTITIONS, sum(1 for r in led if r.isr < r.replicas))
    yield _gauge(n.UNDER_MIN_ISR_PARTITIONS, sum(1 for r in led if r.isr < r.min_isr))
    yield _gauge(n.AT_MIN_ISR_PARTITIONS, sum(1 for r in led if r.isr == r.min_isr))
    yield _gauge(n.PRODUCER_IDS, sum(r.producer_ids for r in led))
    shown, omitted = split_series(rows, series_max)
    yield _gauge(n.PARTITION_SERIES_OMITTED, omitted)
    size = _family(n.LOG_SIZE_BYTES, ["topic", "partition"])
    start = _family(n.LOG_START_OFFSET, ["topic", "partition"])
    end = _family(n.LOG_END_OFFSET, ["topic", "partition"])
    hw = _family(n.HIGH_WATERMARK, ["topic", "partition"])
    lag = _family(n.REPLICA_LAG, ["topic", "partition", "follower"])
    for r in shown:
        labels = [r.tp.topic, str(r.tp.partition)]
        size.add_metric(labels, r.size_bytes)
        start.add_metric(labels, r.log_start_offset)
        end.add_metric(labels, r.log_end_offset)
        hw.add_metric(labels, r.high_watermark)
        for follower, behind in r.follower_lag:
            lag.add_metric([*labels, str(follower)], behind)
    yield from (size, start, end, hw, lag)
    topic_size: dict[str, int] = {}
    topic_count: dict[str, int] = {}
    topic_lag: dict[str, int] = {}
    for r in rows:
        t = r.tp.topic
        topic_size[t] = topic_size.get(t, 0) + r.size_bytes
        topic_count[t] = topic_count.get(t, 0) + 1
        if r.leader:
            worst = max((behind for _, behind in r.follower_lag), default=0)
            topic_lag[t] = max(topic_lag.get(t, 0), worst)
    yield _by_topic(n.TOPIC_LOG_SIZE_BYTES, topic_size)
    yield _by_topic(n.TOPIC_PARTITIONS, topic_count)
    yield _by_topic(n.TOPIC_REPLICA_LAG_MAX, topic_lag)


def group_lag_families(
    rows: Sequence[PartitionRow],
    read: Callable[[Callable[[MetadataState], Any]], Any],
    series_max: int,
) -> Iterator[Metric]:
    """Each consumer group's lag (high watermark - committed offset) on the partitions this
    broker leads, from the commits every node's metadata state holds."""
    led = {f"{r.tp.topic}:{r.tp.partition}": r for r in rows if r.leader}

    def commits(state: MetadataState) -> list[tuple[str, str, int]]:
        return [
            (group, key, entry[0])
            for group, store in state.offsets.items()
            for key, entry in store.items()
            if key in led
        ]

    found = sorted(read(commits)) if led else []
    lags = group_lags(found, {k: r.high_watermark for k, r in led.items()})
    yield from lag_families(lags, series_max)


def group_lags(
    commits: Iterable[tuple[str, str, int]], high_watermarks: dict[str, int]
) -> list[tuple[str, TopicPartition, int]]:
    """(group, partition, lag) for commits [(group, "topic:partition", offset)] of partitions
    whose high watermark is given; a commit past the high watermark (a reset by hand, a
    leader that lost an unreplicated tail) is lag 0, not negative."""
    out = []
    for group, key, offset in commits:
        hw = high_watermarks.get(key)
        if hw is None:
            continue
        topic, _, partition = key.rpartition(":")
        out.append((group, TopicPartition(topic, int(partition)), max(hw - offset, 0)))
    return out


def lag_families(
    lags: Sequence[tuple[str, TopicPartition, int]], series_max: int
) -> Iterator[Metric]:
    shown, omitted = split_series(lags, series_max)
    family = _family(n.CONSUMER_GROUP_LAG, ["group", "topic", "partition"])
    for group, tp, lag in shown:
        family.add_metric([group, tp.topic, str(tp.partition)], lag)
    yield family
    sums: dict[tuple[str, str], int] = {}
    for group, tp, lag in lags:
        sums[(group, tp.topic)] = sums.get((group, tp.topic), 0) + lag
    topic_family = _family(n.CONSUMER_GROUP_TOPIC_LAG, ["group", "topic"])
    for (group, topic), lag in sorted(sums.items()):
        topic_family.add_metric([group, topic], lag)
    yield topic_family
    yield _gauge(n.CONSUMER_GROUP_LAG_SERIES_OMITTED, omitted)


def offline_log_families(broker: Broker) -> Iterator[Metric]:
    """The LogManager's offline table: a count, and a series per log with its reason's kind
    (the error class: the reason's text, with paths and offsets, would make a series per
    failure)."""
    offline = broker.logs.offline()
    yield _gauge(n.OFFLINE_LOGS, len(offline))
    family = _family(n.OFFLINE_LOG, ["topic", "partition", "reason"])
    for tp in sorted(offline)[:OFFLINE_LOG_SERIES_MAX]:
        kind = type(offline[tp].error).__name__
        family.add_metric([tp.topic, str(tp.partition), kind], 1)
    yield family


def connection_families(broker: Broker) -> Iterator[Metric]:
    """Open connections and queued request bytes against their bounds, per connection pool
    (the client pool serves the client, external and Kafka listeners; replication its own)."""
    count = _family(n.CONNECTIONS, ["pool"])
    count_max = _family(n.CONNECTIONS_MAX, ["pool"])
    queued = _family(n.REQUEST_QUEUED_BYTES, ["pool"])
    queued_max = _family(n.REQUEST_QUEUED_BYTES_MAX, ["pool"])
    for pool in (broker.connections, broker.replication_connections):
        count.add_metric([pool.name], len(pool.open))
        count_max.add_metric([pool.name], pool.config.connections_max)
        queued.add_metric([pool.name], pool.memory.used)
        queued_max.add_metric([pool.name], pool.memory.bytes_max)
    yield from (count, count_max, queued, queued_max)


def stats_families(stats: BrokerStats, topics: set[str]) -> Iterator[Metric]:
    """The event counters: requests per API and listener, traffic per topic, ISR changes."""
    requests = CounterMetricFamily(*n.REQUESTS.help_pair, labels=["api", "listener"])
    errors = CounterMetricFamily(*n.REQUEST_ERRORS.help_pair, labels=["api", "listener"])
    latency = HistogramMetricFamily(*n.REQUEST_DURATION.help_pair, labels=["api", "listener"])
    for listener, table in sorted(stats.listeners.items()):
        for api, s in sorted(table.by_name(), key=lambda item: item[0]):
            requests.add_metric([api, listener], s.count)
            errors.add_metric([api, listener], s.errors)
            latency.add_metric([api, listener], s.cumulative(), s.sum_s)
    yield from (requests, errors, latency)
    traffic = stats.traffic
    traffic.forget(topics.__contains__)  # deleted topics' series end
    for spec, per_topic in (
        (n.TOPIC_BYTES_IN, traffic.bytes_in),
        (n.TOPIC_RECORDS_IN, traffic.records_in),
        (n.TOPIC_BYTES_OUT, traffic.bytes_out),
    ):
        family = CounterMetricFamily(*spec.help_pair, labels=["topic"])
        for topic, value in sorted(per_topic.items()):
            family.add_metric([topic], value)
        yield family
    yield _counter(n.REPLICATION_BYTES_OUT, traffic.replication_bytes_out)
    yield _counter(n.ISR_SHRINKS, stats.isr_shrinks)
    yield _counter(n.ISR_EXPANDS, stats.isr_expands)


def cleaner_families(broker: Broker) -> Iterator[Metric]:
    """The scrubber's and the log cleaner's progress."""
    stats = broker.stats
    yield _counter(n.SCRUBBER_BYTES, stats.scrubbed_bytes)
    yield _counter(n.CLEANER_CLEANS, stats.cleans)
    yield _counter(n.CLEANER_FAILURES, stats.clean_failures)
    yield _counter(n.CLEANER_BYTES_READ, stats.cleaned_bytes_read)
    yield _counter(n.CLEANER_BYTES_WRITTEN, stats.cleaned_bytes_written)
    yield _counter(n.CLEANER_RECORDS_READ, stats.cleaned_records_read)
    yield _counter(n.CLEANER_RECORDS_KEPT, stats.cleaned_records_kept)
    yield _gauge(n.CLEANER_LAST_CLEAN_SECONDS, stats.last_clean_s)
    yield _gauge(n.CLEANER_LAST_CLEAN_END, stats.last_clean_end_unix_s)
    compacted = sum(1 for p in broker.replicas.partitions.values() if p.log.config.compact)
    yield _gauge(n.COMPACTED_LOGS, compacted)


# -- helpers --------------------------------------------------------------------------------


def _gauge(spec: n.Spec, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(*spec.help_pair, value=value)


def _counter(spec: n.Spec, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(*spec.help_pair, value=value)


def _family(spec: n.Spec, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(*spec.help_pair, labels=labels)


def _by_topic(spec: n.Spec, values: dict[str, int]) -> GaugeMetricFamily:
    family = _family(spec, ["topic"])
    for topic, value in sorted(values.items()):
        family.add_metric([topic], value)
    return family
