"""The broker's settings (`BrokerConfig`), checked when made: a bad value is an
InvalidConfigError naming the setting, before anything starts.

Rules: frozen; every field has a default a single-node broker can run with; `raftlog/node.py`
builds it from the node's TOML file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raftlog import protocol
from raftlog.errors import InvalidConfigError
from raftlog.replication.partition import ReplicationConfig


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    data_dir: str
    node_id: int = 1
    host: str = "127.0.0.1"
    # 0 picks a free port (tests); the bound port is then Broker.port.
    port: int = 9092
    # (host, port) of a second client listener whose clients are told the brokers' external
    # addresses (raftlog/node.py); None: none. Port 0 picks one (Broker.external_port).
    external_listener: tuple[str, int] | None = None
    # (host, port) of the replication listener, where followers fetch (Kafka's inter-broker
    # listener): its connections have their own request memory pool and limits, so client
    # connections cannot make replication wait; it serves only followers' requests. None:
    # none (followers then fetch through the client listener). Port 0 picks one
    # (Broker.replication_port).
    replication_listener: tuple[str, int] | None = None
    # (host, port) of the Kafka listener, speaking Kafka's wire protocol (Kafka's clients and
    # tools: raftlog/broker/kafka_connection.py), and of an external one whose clients are
    # told the brokers' external Kafka addresses. None: none. Port 0 picks one
    # (Broker.kafka_port, Broker.kafka_external_port). Both share the client listeners'
    # connection limits and request memory.
    kafka_listener: tuple[str, int] | None = None
    kafka_external_listener: tuple[str, int] | None = None
    # Kafka's socket.request.max.bytes: a bigger frame closes the connection.
    request_bytes_max: int = protocol.DEFAULT_MAX_FRAME_BYTES
    # Kafka's queued.max.request.bytes (unbounded there by default): the request bytes all
    # connections together may hold while reading. Reading a frame reserves its whole length
    # from this pool first; a connection whose frame does not fit stops reading until memory
    # is released. 256 MiB holds two requests of the maximum size at once, and bounds what a
    # crowd of clients sending huge frames can make the broker allocate (each connection
    # could otherwise hold a 100 MiB partial frame: 1,000 of them 100 GB).
    queued_request_bytes_max: int = 256 * 1024 * 1024
    # Kafka's max.connections: bounds memory and fds; connections past it are refused.
    connections_max: int = 1000
    # Kafka's max.connections.per.ip (unbounded there): one address, leaking or hostile, can
    # hold at most a quarter of connections_max, so the other 750 slots stay open to every
    # other address; a busy application host (a Spark executor with dozens of tasks, each with
    # a connection per broker) stays well under it. Clients on one host share one address, so
    # this does not separate them from each other: the idle timeout below is what reclaims
    # sockets a careless local client leaks.
    connections_per_address_max: int = 250
    # Kafka's connections.max.idle.ms (its default too): a connection with no request in flight
    # and no bytes received for this long is closed, so leaked sockets cannot hold slots.
    connection_idle_ms_max: int = 10 * 60 * 1000
    # A request frame must arrive in full within this long of its first byte, or its
    # connection is closed (and logged): a peer that announces a frame and trickles it holds
    # a connection slot and the memory it sent. 30 s, Kafka's request.timeout.ms and our
    # clients' request_timeout_ms: a client has given up on a request it could not send in
    # that time. A 100 MiB frame must come at 3.5 MB/s or more; raise it for slower links.
    request_receive_ms_max: int = 30_000
    # Freeze the heap after logs are opened (the module docstring's "heap"): the node's
    # process sets it. Off for brokers embedded in another process (tests, benchmarks), whose
    # heap is not the broker's alone to freeze.
    freeze_heap: bool = False
    # Off by default (Kafka's modern advice): a typo must not silently create a topic.
    auto_create_topics: bool = False
    default_partitions: int = 1
    default_replication_factor: int = 1
    # sendfile by default: measured faster than a buffered pread + write on these VMs with
    # the current code (docs/ARCHITECTURE.md has the figures); False serves fetches buffered.
    fetch_zero_copy: bool = True
    # ...but a partition's data below this many bytes is copied into the response (pread),
    # which then goes out in one write: asyncio's sendfile costs a task, a write of the header,
    # unregistering and re-registering the socket's reader and the sendfile call itself, and
    # for the few hundred bytes of a follower's or a tailing consumer's fetch that is what a
    # fetch costs. Measured on the three-node cluster (RF 3, acks=all, 1,000 rec/s, one record
    # per request): the leader spent 18% of its time in sendfile; end-to-end p50 6.06 ms with
    # sendfile for everything, 4.95 ms with this (docs/ARCHITECTURE.md). 0: always sendfile.
    fetch_zero_copy_min_bytes: int = 64 * 1024
    # Broker-wide log defaults (Kafka topic config names); topics override them.
    log_defaults: dict[str, Any] = field(default_factory=dict)
    retention_check_interval_ms: int = 5 * 60 * 1000
    flush_check_interval_ms: int = 1000
    # The background checksum check of closed segments, bytes per second over all partitions
    # (0: off), and at most SCRUB_SECONDS_PER_TICK_MAX of the event loop per housekeeping
    # tick: 8 MiB/s of 1 MB batches checks a 10 GiB broker every ~21 min; of 190-byte batches
    # (~2 us each) the time bound holds it to ~0.5 MB/s.
    scrub_bytes_per_s: int = 8 * 1024 * 1024
    # The log cleaner (storage/cleaner.py): one clean at a time on a worker thread, a pass over
    # the compacted logs every log_cleaner_backoff_ms for one that is due. Its reads and
    # writes together keep under log_cleaner_io_bytes_per_s (Kafka's
    # log.cleaner.io.max.bytes.per.second; 0: no limit) so that produce latency holds while it
    # runs (bench/cleaner_bench.py); its offset map holds log_cleaner_keys_max keys (about 130
    # bytes each: 1,000,000 keys, ~130 MB at most).
    log_cleaner_enable: bool = True
    log_cleaner_io_bytes_per_s: int = 16 * 1024 * 1024
    log_cleaner_keys_max: int = 1_000_000
    log_cleaner_backoff_ms: int = 1000
    shutdown_timeout_ms: int = 10_000
    # Count requests, latency and traffic for the metrics (raftlog/metrics/stats.py): a few
    # integer additions per request. The node turns it off without a metrics listener, and
    # the produce-path benchmark to measure what it costs.
    metrics_enable: bool = True
    # Replication settings (replica.lag.time.max.ms, replica fetch sizes and waits, ...).
    replication: ReplicationConfig = field(default_factory=ReplicationConfig)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise InvalidConfigError(f"port={self.port}: must be 0..65535")
        for name, lowest in (
            ("request_bytes_max", 1024),
            ("queued_request_bytes_max", 1024),
            ("connections_max", 1),
            ("connections_per_address_max", 1),
            ("connection_idle_ms_max", 1),
            ("request_receive_ms_max", 1),
            ("fetch_zero_copy_min_bytes", 0),
            ("log_cleaner_io_bytes_per_s", 0),
            ("log_cleaner_keys_max", 1),
            ("log_cleaner_backoff_ms", 1),
        ):
            value = getattr(self, name)
            if type(value) is not int or value < lowest:
                raise InvalidConfigError(f"{name}={value!r}: must be an integer >= {lowest}")
        if self.default_partitions < 1:
            raise InvalidConfigError(f"default_partitions={self.default_partitions}: must be >= 1")

    def fetch_path(self) -> str:
        """How fetched data is sent, in words (the broker's start-up line)."""
        if not self.fetch_zero_copy:
            return "pread + write"
        if self.fetch_zero_copy_min_bytes:
            return f"sendfile (pread + write below {self.fetch_zero_copy_min_bytes} bytes)"
        return "sendfile"
