"""One raftlog node: a controller (Raft voter) and/or a broker, from a TOML config.

    node_id = 1
    roles = ["controller", "broker"]
    data_dir = "data/node-1"
    rack = "a"                                   # optional
    client_listener = "127.0.0.1:9092"           # brokers: where clients connect
    advertised_listener = "node-1:9092"          # optional: the address others are told
    external_listener = "0.0.0.0:9094"           # optional: a second listener for clients
    external_advertised_listener = "127.0.0.1:19092"   # elsewhere, and what they are told
    replication_listener = "0.0.0.0:9095"        # optional: where followers fetch from it
    replication_advertised_listener = "node-1:9095"    # optional: what the others are told
                                                 #   (default: advertised_listener's host)
    kafka_listener = "0.0.0.0:9093"              # optional: Kafka's wire protocol, for
    kafka_advertised_listener = "node-1:9093"    #   Kafka's own clients and tools
    kafka_external_listener = "0.0.0.0:9096"     # optional: the same for clients elsewhere,
    kafka_external_advertised_listener = "127.0.0.1:29092"   # and what they are told
    metrics_listener = "0.0.0.0:9098"            # optional: Prometheus' /metrics over HTTP
    metrics_advertised_listener = "node-1:9098"  # optional: what the metadata names for it
    metrics_partition_series_max = 1000          # per-partition series at most (METRICS.md)
    controller_voters = ["1@127.0.0.1:19092", "2@127.0.0.1:19093", "3@127.0.0.1:19094"]
    broker_heartbeat_interval_ms = 500
    broker_session_timeout_ms = 3000
    auto_leader_rebalance_enable = true          # leaders go back to their preferred replica
    leader_imbalance_check_interval_ms = 300000  #   this often, for a broker with more than
    leader_imbalance_per_broker_percentage = 10  #   this share of them led elsewhere
    auto_create_topics = false
    fetch_zero_copy = true                       # false: pread + write instead of sendfile
    fetch_zero_copy_min_bytes = 65536            # optional: smaller data is copied (pread)
    default_replication_factor = 1
    queued_request_bytes_max = 268435456         # optional: client connection limits, see
    connections_per_address_max = 250            #   BrokerConfig (broker/server.py) for
    connection_idle_ms_max = 600000              #   each one's default and why
    request_receive_ms_max = 30000               #   (each listener has its own)
    [log]                                        # broker-wide topic config defaults
    "retention.ms" = "604800000"

A controller's Raft address is its own entry in `controller_voters`; it also receives the
brokers' UDP heartbeats on that host and port number. A broker that is not a controller
follows the metadata as an observer.

Listeners (Kafka's listeners / advertised.listeners, with three fixed names): the client
listener is where clients reach this broker, registered in the metadata as
`advertised_listener` (default: `client_listener` itself; a listener bound to 0.0.0.0 must
advertise an address others can connect to). An optional external listener serves clients that
reach the brokers by other addresses (a host outside a container network): a client connected
to it receives every broker's external address in Metadata and FindCoordinator answers, so it
bootstraps from one and follows the rest. The replication listener (Kafka's inter-broker
listener) is where the other brokers' followers fetch from this one, registered as
`replication_advertised_listener` (default: `replication_listener` itself, or, bound to
0.0.0.0, the client listener's advertised host with its own port): its connections
have their own request memory and limits, so no client can make replication wait behind its
frames, and it serves only followers' requests. Without one, followers fetch through the client
listener (as brokers registered before it existed are reached). Controller traffic needs none
of these: Raft runs over pysyncobj's own TCP port and broker heartbeats are UDP datagrams, both
on the controller's `controller_voters` address.

Kafka's clients (librdkafka, kcat, the Java client, kafka-python, Sarama ...) connect to the
optional Kafka listener, which speaks Kafka's wire protocol (raftlog/broker/kafka_connection.py)
and is registered as `kafka_advertised_listener` (default: the listener itself, or, bound to
0.0.0.0, the client listener's advertised host with its own port); Metadata answers on it name
the other brokers' Kafka listeners. The optional Kafka external listener is its counterpart for
clients that reach the brokers by other addresses (Kafka's advertised.listeners with an
internal and an external name), as the external listener is for the native protocol.

Metrics: with a `metrics_listener`, the node serves Prometheus' text format at
http://<metrics_listener>/metrics from its own event loop (raftlog/metrics/; docs/METRICS.md
lists the metrics), controller-only nodes included; a broker registers it in the metadata as
`metrics_advertised_listener` (defaulting as the replication listener's does), so `raftlog
cluster status` names every broker's metrics address. Without one, nothing is served and the
broker does not count requests or traffic.

Environment: `raftlog node` reads `RAFTLOG_<SETTING>` (e.g. RAFTLOG_NODE_ID=2,
RAFTLOG_CONTROLLER_VOTERS="1@a:9093,2@b:9093,3@c:9093") over the TOML's settings, so one file
serves every node of a container cluster (`NodeConfig.load(path, environ)`). Lists are
comma-separated; booleans true/false; `[log]` has no variable.

Voters: each broker registers its `controller_voters`; a broker whose list differs from that of
a majority of the registered brokers stops with an error naming both lists (a copied service
not edited, a list not updated everywhere), and the others log a warning naming it.

Start order: check that the node's ports are free (Raft TCP and heartbeat UDP for a controller,
the client listener for a broker: one that stays taken fails the start within seconds, naming
it), join the quorum, wait until the local metadata has caught up (bounded), open the listener,
register the broker (a new incarnation, so an older process of this node is fenced), reconcile
the logs with the metadata, then heartbeat. SIGTERM/SIGINT stop it in reverse, after a
controlled shutdown (Kafka's): a broker first proposes `shut_down_broker`, which moves its
leaderships to other in-sync replicas, and waits (CONTROLLED_SHUTDOWN_S at most) until its
own logs follow that, so clients meet NOT_LEADER with the new leaders while it still answers
instead of waiting out its session timeout. A broker with no other live broker to hand over
to, or without a quorum, skips it (a single node restarts as before).

If the quorum member's Raft thread fails (quorum.py), the node stops with an error naming it,
so that the process exits non-zero and a restart rebuilds its Raft state.

Readiness (raftlog/readiness.py): once started, a node writes `<data_dir>/node.ready` and
prints its "ready on" line as one write; it removes the file first thing when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import sys
import time
import tomllib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raftlog.broker.config import BrokerConfig
from raftlog.broker.server import Broker
from raftlog.errors import InvalidConfigError, RaftlogError
from raftlog.invariants import InvariantError
from raftlog.kafka.handlers.registry import kafka_handlers
from raftlog.metadata.cluster import ClusterMetadata, parse_voters
from raftlog.metadata.controller import (
    RETRY_BACKOFF_MAX_S,
    RETRY_BACKOFF_MIN_S,
    Controller,
    LeaderBalance,
    send_heartbeats,
)
from raftlog.metadata.coordinator import GroupCoordinator
from raftlog.metadata.quorum import MetadataQuorum, check_port_free
from raftlog.metadata.state import MetadataState
from raftlog.metrics import (
    PARTITION_SERIES_MAX_DEFAULT,
    MetricsServer,
    NodeSources,
    node_registry,
)
from raftlog.readiness import remove_ready_file, write_line, write_ready_file
from raftlog.replication.partition import ReplicationConfig
from raftlog.storage import LogConfig
from raftlog.storage.checkpoint import atomic_write, fsync_dir

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0
# How long a stopping broker waits for its controlled shutdown (the proposal and its own logs
# following it) before it stops anyway; the controller then fences it after its session timeout.
CONTROLLED_SHUTDOWN_S = 3.0
# How often a broker compares its controller_voters with those the other brokers registered:
# a wrong list is caught within seconds, at the cost of one local metadata read.
VOTERS_CHECK_INTERVAL_S = 1.0
# NodeConfig settings passed to BrokerConfig as they are when set (None: BrokerConfig's
# default, which is documented there with its reason).
_BROKER_SETTINGS = (
    "request_bytes_max",
    "queued_request_bytes_max",
    "connections_max",
    "connections_per_address_max",
    "connection_idle_ms_max",
    "request_receive_ms_max",
    "retention_check_interval_ms",
    "fetch_zero_copy_min_bytes",
    "log_cleaner_enable",
    "log_cleaner_io_bytes_per_s",
    "log_cleaner_keys_max",
    "log_cleaner_backoff_ms",
)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    node_id: int
    data_dir: str
    controller_voters: list[str]
    roles: list[str] = field(default_factory=lambda: ["controller", "broker"])
    rack: str | None = None
    client_listener: str = "127.0.0.1:9092"
    # What the metadata names for the client listener (None: client_listener itself).
    advertised_listener: str | None = None
    # A second listener for clients that reach the brokers by other addresses, and what the
    # metadata names for it (None: external_listener itself).
    external_listener: str | None = None
    external_advertised_listener: str | None = None
    # Where the other brokers' followers fetch from this one, and what the metadata names for
    # it (None: replication_listener itself). No replication listener: the client listener.
    replication_listener: str | None = None
    replication_advertised_listener: str | None = None
    # Kafka's wire protocol, and what the metadata names for it (None: none; the advertised
    # one defaults as the replication listener's does); its external counterpart.
    kafka_listener: str | None = None
    kafka_advertised_listener: str | None = None
    kafka_external_listener: str | None = None
    kafka_external_advertised_listener: str | None = None
    # Prometheus' metrics over HTTP (None: none; the advertised one defaults as the
    # replication listener's does), and how many partitions get series of their own on this
    # node (the rest are in per-topic series; docs/METRICS.md has the arithmetic).
    metrics_listener: str | None = None
    metrics_advertised_listener: str | None = None
    metrics_partition_series_max: int = PARTITION_SERIES_MAX_DEFAULT
    # Kafka's defaults are 2 s / 9 s; a local cluster wants faster failure detection.
    broker_heartbeat_interval_ms: int = 500
    broker_session_timeout_ms: int = 3000
    # Kafka's auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds (300 s)
    # and leader.imbalance.per.broker.percentage: the active controller moves leaderships
    # back to their preferred replicas (controller.py's LeaderBalance).
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    leader_imbalance_per_broker_percentage: int = 10
    auto_create_topics: bool = False
    fetch_zero_copy: bool = True
    default_partitions: int = 1
    default_replication_factor: int = 1
    # Kafka's replica.lag.time.max.ms (30 s): a follower not caught up for this long leaves
    # the ISR. `raftlog dev` writes a shorter one (a local cluster should react in seconds).
    replica_lag_time_max_ms: int = 30_000
    # Kafka's replica.fetch.wait.max.ms: how long a follower's fetch long-polls its leader.
    replica_fetch_wait_max_ms: int = 500
    log: dict[str, Any] = field(default_factory=dict)
    # Broker limits (None: BrokerConfig's default; Kafka's names in parentheses):
    request_bytes_max: int | None = None  # (socket.request.max.bytes)
    queued_request_bytes_max: int | None = None  # (queued.max.request.bytes)
    connections_max: int | None = None  # (max.connections)
    connections_per_address_max: int | None = None  # (max.connections.per.ip)
    connection_idle_ms_max: int | None = None  # (connections.max.idle.ms)
    request_receive_ms_max: int | None = None  # a frame's deadline (Kafka: request.timeout.ms)
    retention_check_interval_ms: int | None = None  # (log.retention.check.interval.ms)
    fetch_zero_copy_min_bytes: int | None = None  # smaller fetched data is copied, not sendfile'd
    log_cleaner_enable: bool | None = None  # (log.cleaner.enable)
    log_cleaner_io_bytes_per_s: int | None = None  # (log.cleaner.io.max.bytes.per.second)
    log_cleaner_keys_max: int | None = None  # offset map keys (log.cleaner.dedupe.buffer.size)
    log_cleaner_backoff_ms: int | None = None  # (log.cleaner.backoff.ms)

    def __post_init__(self) -> None:
        bad = set(self.roles) - {"controller", "broker"}
        if bad or not self.roles:
            raise InvalidConfigError(f"roles={self.roles}: each must be controller or broker")
        voters = parse_voters(self.controller_voters)
        if "controller" in self.roles and self.node_id not in voters:
            raise InvalidConfigError(
                f"node {self.node_id} has the controller role but is not in controller_voters"
            )
        if self.leader_imbalance_check_interval_ms < 1:
            raise InvalidConfigError(
                f"leader_imbalance_check_interval_ms={self.leader_imbalance_check_interval_ms}: "
                "must be >= 1"
            )
        if not 0 <= self.leader_imbalance_per_broker_percentage <= 100:
            raise InvalidConfigError(
                "leader_imbalance_per_broker_percentage="
                f"{self.leader_imbalance_per_broker_percentage}: must be 0..100"
            )
        if self.broker_session_timeout_ms <= self.broker_heartbeat_interval_ms:
            raise InvalidConfigError(
                "broker_session_timeout_ms must be larger than broker_heartbeat_interval_ms"
            )
        for name in _LISTENERS:
            address = getattr(self, name)
            if address is not None:
                _split_listener(name, address)
        if self.metrics_partition_series_max < 0:
            raise InvalidConfigError(
                f"metrics_partition_series_max={self.metrics_partition_series_max}: must be >= 0"
            )
        for kind in ("external", "replication", "kafka", "kafka_external", "metrics"):
            if (
                getattr(self, f"{kind}_advertised_listener") is not None
                and getattr(self, f"{kind}_listener") is None
            ):
                raise InvalidConfigError(
                    f"{kind}_advertised_listener is set but {kind}_listener is not"
                )
        # [log] holds topic config defaults: the same keys and checks as a topic's config.
        try:
            LogConfig.from_topic_config(self.log)
        except InvalidConfigError as e:
            raise InvalidConfigError(f"[log]: {e}") from None
        BrokerConfig(data_dir=self.data_dir, **self.broker_settings())  # checks them now

    def broker_settings(self) -> dict[str, Any]:
        """The BrokerConfig settings this config sets (the rest keep BrokerConfig's defaults)."""
        return {n: getattr(self, n) for n in _BROKER_SETTINGS if getattr(self, n) is not None}

    @classmethod
    def load(cls, path: str, environ: Mapping[str, str] | None = None) -> NodeConfig:
        """The config in the TOML file `path`, with `RAFTLOG_<SETTING>` variables of `environ`
        (if given) over its settings."""
        try:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise InvalidConfigError(f"{path}: not valid TOML: {e}") from None
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidConfigError(f"{path}: unknown settings {', '.join(unknown)}")
        if environ is not None:
            raw.update(_settings_from_env(environ))
        try:
            return cls(**raw)
        except TypeError as e:
            raise InvalidConfigError(f"{path}: {e}") from None

    def listener_address(self, listener: str = "client") -> tuple[str, int]:
        """(host, port) the client, external or replication listener binds."""
        name = f"{listener}_listener"
        address = getattr(self, name)
        if address is None:
            raise InvariantError(f"{name} is not set")
        return _split_listener(name, address)

    def advertised(self, bound_port: int, listener: str = "client") -> tuple[str, int]:
        """(host, port) the metadata names for a listener bound on `bound_port`. A replication
        listener bound to every address (0.0.0.0) and not advertised otherwise is named by the
        host the client listener advertises: the other brokers reach this one by that name."""
        name = "advertised_listener" if listener == "client" else f"{listener}_advertised_listener"
        address = getattr(self, name)
        if address is not None:
            return _split_listener(name, address)
        host = self.listener_address(listener)[0]
        if listener in ("replication", "kafka", "metrics") and host in _WILDCARD_HOSTS:
            host = self.advertised(0)[0]
        return host, bound_port

    @property
    def voters(self) -> dict[int, str]:
        return parse_voters(self.controller_voters)

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles


_LISTENERS = (
    "client_listener",
    "advertised_listener",
    "external_listener",
    "external_advertised_listener",
    "replication_listener",
    "replication_advertised_listener",
    "kafka_listener",
    "kafka_advertised_listener",
    "kafka_external_listener",
    "kafka_external_advertised_listener",
    "metrics_listener",
    "metrics_advertised_listener",
)
# Hosts a listener binds to listen on every address: not a name another host can dial.
_WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})
# The settings a RAFTLOG_<NAME> variable can set, by how its text is read.
_ENV_INT = "int"
_ENV_BOOL = "bool"
_ENV_LIST = "list"
_ENV_STR = "str"


def _split_listener(name: str, address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidConfigError(f"{name}={address!r}: must be HOST:PORT")
    return host, int(port)


def _env_kind(annotation: str) -> str | None:
    base = annotation.replace(" | None", "")
    if base in ("int", "bool", "str"):
        return base
    if base == "list[str]":
        return _ENV_LIST
    return None  # [log] (a table) has no variable


def _settings_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """NodeConfig settings from RAFTLOG_<SETTING> variables (RAFTLOG_NODE_ID=2); variables that
    name no setting (RAFTLOG_BOOTSTRAP, the clients' own) are left alone."""
    out: dict[str, Any] = {}
    for name, f in NodeConfig.__dataclass_fields__.items():
        variable = "RAFTLOG_" + name.upper()
        text = environ.get(variable)
        kind = _env_kind(str(f.type))
        if text is None or kind is None:
            continue
        text = text.strip()
        if kind == _ENV_INT:
            try:
                out[name] = int(text)
            except ValueError:
                raise InvalidConfigError(f"{variable}={text!r}: must be an integer") from None
        elif kind == _ENV_BOOL:
            if text.lower() not in ("true", "false", "1", "0"):
                raise InvalidConfigError(f"{variable}={text!r}: must be true or false")
            out[name] = text.lower() in ("true", "1")
        elif kind == _ENV_LIST:
            out[name] = [item.strip() for item in text.split(",") if item.strip()]
        else:
            out[name] = text
    return out


def voters_disagreement(
    node_id: int, own: list[str], registered: Mapping[int, list[str] | None]
) -> tuple[bool, list[int]]:
    """Whose `controller_voters` differ from this node's, among the registered brokers that
    named theirs: (whether a strict majority of those, this node counted as agreeing, do, and
    which nodes differ). Entries compare as a set of (node id, address)."""
    mine = sorted(parse_voters(own).items())
    agree = 1
    differ = []
    for other, voters in sorted(registered.items()):
        if other == node_id or voters is None:
            continue
        try:
            theirs = sorted(parse_voters(voters).items())
        except ValueError:
            theirs = []
        if theirs == mine:
            agree += 1
        else:
            differ.append(other)
    return len(differ) > agree, differ


class Node:
    def __init__(self, config: NodeConfig):
        self.config = config
        voters = config.voters
        raft_address = voters[config.node_id] if config.is_controller else None
        os.makedirs(config.data_dir, exist_ok=True)
        self.quorum = MetadataQuorum(
            raft_address,
            list(voters.values()),
            config.data_dir,
            on_change=self._on_change,
            on_failure=self._on_quorum_failure,
        )
        self._quorum_failed = asyncio.Event()
        # Cut off from the quorum past its session timeout, a broker's view of leaders is stale.
        self.metadata = ClusterMetadata(self.quorum, voters, config.broker_session_timeout_ms)
        self.broker: Broker | None = None
        self.controller: Controller | None = None
        self.coordinator = (
            GroupCoordinator(self.quorum.propose, self.quorum.read)
            if config.is_controller
            else None
        )
        self.broker_epoch: int | None = None
        # Whether the previous run of this node stopped cleanly (its marker file was there):
        # registration says so, and an unclean restart is not trusted to hold every record.
        self._clean_start = _take_clean_shutdown_marker(config.data_dir)
        self._loop: asyncio.AbstractEventLoop | None = None
        # The metrics listener (started by `run`), serving this node's own registry.
        self.metrics: MetricsServer | None = None
        if config.metrics_listener is not None:
            host, port = config.listener_address("metrics")
            self.metrics = MetricsServer(
                node_registry(
                    NodeSources(
                        config.node_id,
                        self.quorum.status,
                        self.quorum.read,
                        self._controller_active,
                        lambda: self.broker,
                        config.metrics_partition_series_max,
                    )
                ),
                host,
                port,
            )

    def _controller_active(self) -> bool | None:
        if not self.config.is_controller:
            return None
        return self.controller is not None and self.controller.active

    def _on_change(self) -> None:
        # On the Raft tick thread.
        if self.broker is not None and self._loop is not None:
            self.broker.schedule_reconcile(self._loop)

    def _on_quorum_failure(self, error: BaseException) -> None:
        # On the Raft thread, once, as it ends: wake _watch_quorum on the event loop.
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._quorum_failed.set)

    async def _watch_quorum(self) -> None:
        await self._quorum_failed.wait()
        raise RaftlogError(
            f"node {self.config.node_id}: the metadata quorum's Raft thread failed "
            f"({self.quorum.failure}); the node stops so that a restart rebuilds its Raft "
            "state from the journal"
        )

    def _check_ports(self) -> None:
        """Fail, naming the port, if one this node must listen on stays taken."""
        cfg = self.config
        if cfg.is_controller:
            address = cfg.voters[cfg.node_id]
            try:
                check_port_free(address, socket.SOCK_DGRAM, "controller heartbeat listener (UDP)")
            except OSError as e:
                if e.errno != errno.EADDRNOTAVAIL:
                    raise
                # The usual cause: a node copied from another without changing its node_id.
                raise InvalidConfigError(
                    f"node {cfg.node_id}: controller_voters names {address} as this node's "
                    f"Raft address, which is not an address of this host ({e.strerror}): is "
                    f"node_id={cfg.node_id} right, or is it another node's id?"
                ) from None
        if cfg.is_broker:
            check_port_free(cfg.client_listener, socket.SOCK_STREAM, "client listener")
            if cfg.external_listener is not None:
                check_port_free(cfg.external_listener, socket.SOCK_STREAM, "external listener")
        if cfg.metrics_listener is not None:
            check_port_free(cfg.metrics_listener, socket.SOCK_STREAM, "metrics listener")
        if cfg.is_broker:
            for name in ("replication", "kafka", "kafka_external"):
                address = getattr(cfg, f"{name}_listener")
                if address is not None:
                    what = f"{name.replace('_', ' ')} listener"
                    check_port_free(address, socket.SOCK_STREAM, what)

    def controller_address(self) -> str | None:
        leader = self.quorum.status().leader
        return leader if leader in self.config.voters.values() else None

    async def run(self, stop: asyncio.Event) -> None:
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        remove_ready_file(cfg.data_dir)  # a stale one from a start that was killed
        self._check_ports()
        self.quorum.start()
        try:
            if self.metrics is not None:
                await self.metrics.start()  # after the quorum: its status is a metric
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._watch_quorum())
                if cfg.is_controller:
                    coordinator = self.coordinator
                    if coordinator is None:
                        raise InvariantError("coordinator is None")

                    def on_active(active: bool) -> None:
                        if active:
                            coordinator.become_active()
                        else:
                            coordinator.become_inactive()

                    self.controller = Controller(
                        self.quorum,
                        cfg.voters[cfg.node_id],
                        cfg.broker_session_timeout_ms,
                        on_active=on_active,
                        leader_balance=LeaderBalance(
                            cfg.leader_imbalance_check_interval_ms,
                            cfg.leader_imbalance_per_broker_percentage,
                        )
                        if cfg.auto_leader_rebalance_enable
                        else None,
                    )
                    tg.create_task(self.controller.run())
                    tg.create_task(coordinator.run())
                await self._wait_ready(stop)
                if cfg.is_broker and not stop.is_set():
                    await self._start_broker(tg, stop)
                if not stop.is_set():
                    self._signal_ready()
                await stop.wait()
                if self.broker is not None:
                    await self._controlled_shutdown()
                    # Metadata changes still land on the loop while the TaskGroup winds down:
                    # a stopping broker no longer reconciles its logs with them.
                    self.broker.stopping = True
                raise _Stop
        except* _Stop:
            pass
        finally:
            remove_ready_file(cfg.data_dir)
            if self.metrics is not None:
                await self.metrics.stop()
            if self.controller is not None:
                await self.controller.close()
            if self.coordinator is not None:
                await self.coordinator.close()
            if self.broker is not None:
                await self.broker.stop()  # raises if a log could not be flushed and closed
            self.quorum.stop()
            if stop.is_set() and self.broker is not None:
                _write_clean_shutdown_marker(cfg.data_dir)
            log.info("node %d stopped", cfg.node_id)

    def _client_address(self) -> str:
        if self.broker is None:
            raise InvariantError("self.broker is None")
        return f"{self.broker.config.host}:{self.broker.port}"

    def _signal_ready(self) -> None:
        cfg = self.config
        address = self._client_address() if self.broker is not None else None
        info: dict[str, Any] = {"node_id": cfg.node_id, "client_address": address}
        kafka = None
        if self.broker is not None and self.broker.kafka_port is not None:
            kafka_host, kafka_port = cfg.advertised(self.broker.kafka_port, "kafka")
            kafka = f"{kafka_host}:{kafka_port}"
            info["kafka_address"] = kafka
        metrics = self.metrics_url()
        if metrics is not None:
            info["metrics_url"] = metrics
        info["pid"] = os.getpid()
        write_ready_file(cfg.data_dir, info)
        extras = [f"Kafka protocol on {kafka}"] if kafka else []
        if metrics is not None:
            extras.append(f"metrics at {metrics}")
        also = f" ({'; '.join(extras)})" if extras else ""
        if address is not None:
            write_line(sys.stdout, f"raftlog broker {cfg.node_id} ready on {address}{also}")
        else:
            write_line(sys.stdout, f"raftlog controller {cfg.node_id} ready{also}")

    def metrics_url(self) -> str | None:
        """http://host:port/metrics as others reach it (the advertised address), or None."""
        if self.metrics is None:
            return None
        host, port = self.config.advertised(self.metrics.port, "metrics")
        return f"http://{host}:{port}/metrics"

    async def _controlled_shutdown(self) -> None:
        """Hand this broker's leaderships over before it stops (module docstring)."""
        broker, epoch, node_id = self.broker, self.broker_epoch, self.config.node_id
        if broker is None or epoch is None:
            return

        def others_live(s: MetadataState) -> bool:
            return any(not b["fenced"] for n, b in s.brokers.items() if n != node_id)

        if not self.quorum.read(others_live):
            return
        started = time.monotonic()
        try:
            async with asyncio.timeout(CONTROLLED_SHUTDOWN_S):
                moved = await self.quorum.propose(
                    "shut_down_broker",
                    timeout_s=CONTROLLED_SHUTDOWN_S,
                    node_id=node_id,
                    broker_epoch=epoch,
                )
                broker.reconcile()
                await broker.wait_reconciled()
        except (RaftlogError, TimeoutError) as e:
            log.warning(
                "broker %d: controlled shutdown failed (%s); stopping anyway, the controller "
                "fences it after its session timeout",
                node_id,
                str(e) or f"not done within {CONTROLLED_SHUTDOWN_S:g} s",
            )
            return
        log.info(
            "broker %d: controlled shutdown: %s leaderships moved in %.2f s",
            node_id,
            moved,
            time.monotonic() - started,
        )

    async def _wait_ready(self, stop: asyncio.Event) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.quorum.status().ready:
            if stop.is_set():
                return
            if time.monotonic() > deadline:
                raise RaftlogError(
                    f"node {self.config.node_id}: the metadata quorum "
                    f"({', '.join(self.config.controller_voters)}) has no leader after "
                    f"{READY_TIMEOUT_S:.0f} s: are a majority of the controllers running?"
                )
            await asyncio.sleep(0.05)

    async def _start_broker(self, tg: asyncio.TaskGroup, stop: asyncio.Event) -> None:
        cfg = self.config
        host, port = cfg.listener_address()
        external = cfg.listener_address("external") if cfg.external_listener else None
        replication = cfg.listener_address("replication") if cfg.replication_listener else None
        kafka = cfg.listener_address("kafka") if cfg.kafka_listener else None
        kafka_external = (
            cfg.listener_address("kafka_external") if cfg.kafka_external_listener else None
        )
        self.broker = Broker(
            BrokerConfig(
                data_dir=cfg.data_dir,
                node_id=cfg.node_id,
                host=host,
                port=port,
                external_listener=external,
                replication_listener=replication,
                kafka_listener=kafka,
                kafka_external_listener=kafka_external,
                # Without a metrics listener nobody reads the counters: skip counting.
                metrics_enable=self.metrics is not None,
                auto_create_topics=cfg.auto_create_topics,
                fetch_zero_copy=cfg.fetch_zero_copy,
                freeze_heap=True,
                default_partitions=cfg.default_partitions,
                default_replication_factor=cfg.default_replication_factor,
                log_defaults=dict(cfg.log),
                replication=ReplicationConfig(
                    replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
                    replica_fetch_wait_max_ms=cfg.replica_fetch_wait_max_ms,
                ),
                **cfg.broker_settings(),
            ),
            self.metadata,
            self.coordinator,
            kafka_handlers,
        )
        await self.broker.start()
        advertised_host, advertised_port = cfg.advertised(self.broker.port)
        external_advertised = None
        if self.broker.external_port is not None:
            external_advertised = list(cfg.advertised(self.broker.external_port, "external"))
        # The replication listener, when the node has one (older commands lack the argument).
        extra_listeners: dict[str, Any] = {}
        for name, bound in (
            ("replication", self.broker.replication_port),
            ("kafka", self.broker.kafka_port),
            ("kafka_external", self.broker.kafka_external_port),
        ):
            if bound is not None:
                extra_listeners[name] = list(cfg.advertised(bound, name))
        if self.metrics is not None:
            extra_listeners["metrics"] = list(cfg.advertised(self.metrics.port, "metrics"))
        incarnation = uuid.uuid4().hex
        backoff_s = RETRY_BACKOFF_MIN_S
        while True:
            try:
                self.broker_epoch = await self.quorum.propose(
                    "register_broker",
                    node_id=cfg.node_id,
                    host=advertised_host,
                    port=advertised_port,
                    rack=cfg.rack,
                    incarnation=incarnation,
                    now_ms=time.time_ns() // 1_000_000,
                    clean_shutdown=self._clean_start,
                    external=external_advertised,
                    controller_voters=list(cfg.controller_voters),
                    **extra_listeners,
                )
                break
            except RaftlogError as e:
                if stop.is_set():
                    return  # stopping before the quorum came back: nothing to register for
                log.warning(
                    "registering broker %d failed, retrying in %.1f s: %s",
                    cfg.node_id,
                    backoff_s,
                    e,
                )
                await asyncio.sleep(backoff_s)
                backoff_s = min(2 * backoff_s, RETRY_BACKOFF_MAX_S)
        log.info(
            "broker %d registered with epoch %d (%s shutdown before)",
            cfg.node_id,
            self.broker_epoch,
            "clean" if self._clean_start else "unclean",
        )
        self.broker.broker_epoch = self.broker_epoch
        self.broker.metadata_ready()
        # Replication's loops (fetchers, ISR checks): in the node's TaskGroup, so a crashed
        # loop stops the node loudly instead of leaving it half alive.
        tg.create_task(self.broker.replicas.run())
        tg.create_task(
            send_heartbeats(
                cfg.node_id,
                lambda: self.broker_epoch,
                self.controller_address,
                cfg.broker_heartbeat_interval_ms,
            )
        )
        tg.create_task(self._watch_voters())
        # Ready means serving: the logs this node hosts are open and in their roles. (With
        # heartbeats already going, a broker with 10,000 partitions is not fenced meanwhile.)
        await self.broker.wait_reconciled(stop)

    async def _watch_voters(self) -> None:
        """Stop the node if a majority of the registered brokers list other controller_voters
        (checked on every change of the registered brokers); warn about each one that differs
        from a majority that agrees with this node."""
        cfg = self.config
        warned: set[tuple[int, tuple[str, ...]]] = set()
        while True:
            registered = self.metadata.broker_voters()
            outvoted, differ = voters_disagreement(cfg.node_id, cfg.controller_voters, registered)
            if outvoted:
                lists = "; ".join(f"node {n}: {registered[n]}" for n in differ)
                raise InvalidConfigError(
                    f"node {cfg.node_id}: controller_voters {cfg.controller_voters} differ from "
                    f"those of most registered brokers ({lists}): every node must list the "
                    "same voters"
                )
            for n in differ:
                key = (n, tuple(registered[n] or ()))
                if key not in warned:
                    warned.add(key)
                    log.warning(
                        "broker %d lists controller_voters %s, not this node's %s",
                        n,
                        registered[n],
                        cfg.controller_voters,
                    )
            await asyncio.sleep(VOTERS_CHECK_INTERVAL_S)


class _Stop(Exception):
    pass


# Written by a graceful stop after every log is flushed and closed, removed at start: its
# presence at start means nothing written before was lost (the logs' own markers say the same
# per partition; this one speaks for the whole node to the metadata).
CLEAN_SHUTDOWN_FILE = "node-clean-shutdown"


def _take_clean_shutdown_marker(data_dir: str) -> bool:
    path = os.path.join(data_dir, CLEAN_SHUTDOWN_FILE)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(data_dir)
    return True


def _write_clean_shutdown_marker(data_dir: str) -> None:
    atomic_write(os.path.join(data_dir, CLEAN_SHUTDOWN_FILE), b"clean\n")


# How long a thread may hold the GIL while another waits for it (CPython's default is 5 ms).
# The broker opens logs on a worker thread, and each of its system calls gives the GIL up; with
# the event loop busy (clients retrying, replication), getting it back took up to the whole
# interval each time: 10,000 new logs took 17-29 s to open instead of 6. At 0.5 ms they take
# 7-8 s, and the loop waits at most that long for the GIL itself.
GIL_SWITCH_INTERVAL_S = 0.0005


async def run_node(config: NodeConfig) -> None:
    """Run a node until SIGTERM or SIGINT, then stop it gracefully. The process is the
    node's own: it sets the GIL's switch interval (GIL_SWITCH_INTERVAL_S)."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    node = Node(config)
    with contextlib.suppress(asyncio.CancelledError):
        await node.run(stop)
