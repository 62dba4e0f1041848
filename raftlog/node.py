"""One raftlog node: a controller (Raft voter) and/or a broker, from a TOML config.

    node_id = 1
    roles = ["controller", "broker"]
    data_dir = "data/node-1"
    rack = "a"                                   # optional
    client_listener = "127.0.0.1:9092"           # brokers: where clients connect
    controller_voters = ["1@127.0.0.1:19092", "2@127.0.0.1:19093", "3@127.0.0.1:19094"]
    broker_heartbeat_interval_ms = 500
    broker_session_timeout_ms = 3000
    auto_create_topics = false
    fetch_zero_copy = true                       # false: pread + write instead of sendfile
    default_replication_factor = 1
    queued_request_bytes_max = 268435456         # optional: client connection limits, see
    connections_per_address_max = 250            #   BrokerConfig (broker/server.py) for
    connection_idle_ms_max = 600000              #   each one's default and why
    [log]                                        # broker-wide topic config defaults
    "retention.ms" = "604800000"

A controller's Raft address is its own entry in `controller_voters`; it also receives the
brokers' UDP heartbeats on that host and port number. A broker that is not a controller
follows the metadata as an observer.

Start order: check that the node's ports are free (Raft TCP and heartbeat UDP for a controller,
the client listener for a broker: one that stays taken fails the start within seconds, naming
it), join the quorum, wait until the local metadata has caught up (bounded), open the listener,
register the broker (a new incarnation, so an older process of this node is fenced), reconcile
the logs with the metadata, then heartbeat. SIGTERM/SIGINT stop it in reverse.

If the quorum member's Raft thread fails (quorum.py), the node stops with an error naming it,
so that the process exits non-zero and a restart rebuilds its Raft state.

Readiness (raftlog/readiness.py): once started, a node writes `<data_dir>/node.ready` and
prints its "ready on" line as one write; it removes the file first thing when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
import tomllib
import uuid
from dataclasses import dataclass, field
from typing import Any

from raftlog.broker.server import Broker, BrokerConfig
from raftlog.errors import InvalidConfigError, RaftlogError
from raftlog.metadata.cluster import ClusterMetadata, parse_voters
from raftlog.metadata.controller import (
    RETRY_BACKOFF_MAX_S,
    RETRY_BACKOFF_MIN_S,
    Controller,
    send_heartbeats,
)
from raftlog.metadata.coordinator import GroupCoordinator
from raftlog.metadata.quorum import MetadataQuorum, check_port_free
from raftlog.readiness import remove_ready_file, write_line, write_ready_file
from raftlog.replication.manager import ReplicationConfig
from raftlog.storage import LogConfig
from raftlog.storage.checkpoint import atomic_write, fsync_dir

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0
# NodeConfig settings passed to BrokerConfig as they are when set (None: BrokerConfig's
# default, which is documented there with its reason).
_BROKER_SETTINGS = (
    "request_bytes_max",
    "queued_request_bytes_max",
    "connections_max",
    "connections_per_address_max",
    "connection_idle_ms_max",
    "retention_check_interval_ms",
)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    node_id: int
    data_dir: str
    controller_voters: list[str]
    roles: list[str] = field(default_factory=lambda: ["controller", "broker"])
    rack: str | None = None
    client_listener: str = "127.0.0.1:9092"
    # Kafka's defaults are 2 s / 9 s; a local cluster wants faster failure detection.
    broker_heartbeat_interval_ms: int = 500
    broker_session_timeout_ms: int = 3000
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
    retention_check_interval_ms: int | None = None  # (log.retention.check.interval.ms)

    def __post_init__(self) -> None:
        bad = set(self.roles) - {"controller", "broker"}
        if bad or not self.roles:
            raise InvalidConfigError(f"roles={self.roles}: each must be controller or broker")
        voters = parse_voters(self.controller_voters)
        if "controller" in self.roles and self.node_id not in voters:
            raise InvalidConfigError(
                f"node {self.node_id} has the controller role but is not in controller_voters"
            )
        if self.broker_session_timeout_ms <= self.broker_heartbeat_interval_ms:
            raise InvalidConfigError(
                "broker_session_timeout_ms must be larger than broker_heartbeat_interval_ms"
            )
        host, _, port = self.client_listener.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidConfigError(f"client_listener={self.client_listener!r}: HOST:PORT")
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
    def load(cls, path: str) -> NodeConfig:
        try:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise InvalidConfigError(f"{path}: not valid TOML: {e}") from None
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidConfigError(f"{path}: unknown settings {', '.join(unknown)}")
        try:
            return cls(**raw)
        except TypeError as e:
            raise InvalidConfigError(f"{path}: {e}") from None

    @property
    def voters(self) -> dict[int, str]:
        return parse_voters(self.controller_voters)

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles


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
        self.metadata = ClusterMetadata(self.quorum, voters)
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
            check_port_free(address, socket.SOCK_DGRAM, "controller heartbeat listener (UDP)")
        if cfg.is_broker:
            check_port_free(cfg.client_listener, socket.SOCK_STREAM, "client listener")

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
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._watch_quorum())
                if cfg.is_controller:
                    coordinator = self.coordinator
                    assert coordinator is not None

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
                    )
                    tg.create_task(self.controller.run())
                    tg.create_task(coordinator.run())
                await self._wait_ready(stop)
                if cfg.is_broker and not stop.is_set():
                    await self._start_broker(tg, stop)
                if not stop.is_set():
                    self._signal_ready()
                await stop.wait()
                raise _Stop
        except* _Stop:
            pass
        finally:
            remove_ready_file(cfg.data_dir)
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
        assert self.broker is not None
        return f"{self.broker.config.host}:{self.broker.port}"

    def _signal_ready(self) -> None:
        cfg = self.config
        address = self._client_address() if self.broker is not None else None
        write_ready_file(
            cfg.data_dir, {"node_id": cfg.node_id, "client_address": address, "pid": os.getpid()}
        )
        if address is not None:
            write_line(sys.stdout, f"raftlog broker {cfg.node_id} ready on {address}")
        else:
            write_line(sys.stdout, f"raftlog controller {cfg.node_id} ready")

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
        host, _, port = cfg.client_listener.rpartition(":")
        self.broker = Broker(
            BrokerConfig(
                data_dir=cfg.data_dir,
                node_id=cfg.node_id,
                host=host,
                port=int(port),
                auto_create_topics=cfg.auto_create_topics,
                fetch_zero_copy=cfg.fetch_zero_copy,
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
        )
        await self.broker.start()
        incarnation = uuid.uuid4().hex
        backoff_s = RETRY_BACKOFF_MIN_S
        while True:
            try:
                self.broker_epoch = await self.quorum.propose(
                    "register_broker",
                    node_id=cfg.node_id,
                    host=host,
                    port=self.broker.port,
                    rack=cfg.rack,
                    incarnation=incarnation,
                    now_ms=time.time_ns() // 1_000_000,
                    clean_shutdown=self._clean_start,
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


async def run_node(config: NodeConfig) -> None:
    """Run a node until SIGTERM or SIGINT, then stop it gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    node = Node(config)
    with contextlib.suppress(asyncio.CancelledError):
        await node.run(stop)
