"""Prometheus metrics of a node: what it serves at http://<metrics_listener>/metrics.

- `stats.py`: the event counters (requests, latency, traffic per topic, ISR changes, the
  cleaner's and the scrubber's work) as plain ints, counted on the event loop where the event
  happens, per request or per append, never per record.
- `collectors.py`: the custom collectors that build every family at scrape time, gauges of
  state straight from the broker, the replication cores, the LogManager and the metadata.
- `names.py`: every metric's name, type, labels and the Kafka JMX metric it follows (the
  table docs/METRICS.md shows).
- `http.py`: the metrics listener, a minimal asyncio HTTP server on the node's loop.

Rules: each node has its own `CollectorRegistry` (`node_registry`), never prometheus_client's
global one (tests run several nodes in one process); the exposition is prometheus_client's own
(`generate_latest`); nothing here runs on another thread, so the collectors read live broker
state without locks; label values come from bounded sets (collectors.py says how); and the
broker's hot paths never call prometheus_client (stats.py says why).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, ProcessCollector

from raftlog.metrics.collectors import PARTITION_SERIES_MAX_DEFAULT, NodeCollector, NodeSources
from raftlog.metrics.http import MetricsServer
from raftlog.metrics.stats import BrokerStats


def node_registry(sources: NodeSources) -> CollectorRegistry:
    """A registry of its own holding the node's collector and prometheus_client's process
    collector (process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds
    against process_max_fds: a node is its own process; tests that run several nodes in one
    process see that process in each)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(sources))
    ProcessCollector(registry=registry)
    return registry


__all__ = [
    "PARTITION_SERIES_MAX_DEFAULT",
    "BrokerStats",
    "MetricsServer",
    "NodeCollector",
    "NodeSources",
    "node_registry",
]
