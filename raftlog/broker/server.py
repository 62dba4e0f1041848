"""The broker: an asyncio TCP server in front of the partition logs.

`Broker` owns the LogManager and the listening socket and reads the cluster metadata (the Raft
state, through `ClusterMetadata`). It hosts the partitions whose replicas include its node,
serves produce and fetch only for partitions it leads (NotLeaderOrFollowerError otherwise, so
clients refresh metadata and follow the leader), and reconciles its logs with the metadata
whenever the metadata changes: open new partitions, delete deleted topics.

Shutdown (`stop`): stop accepting, let in-flight requests finish (bounded by
`shutdown_timeout_ms`), flush and close every log (every one, even if some fail). After kill -9
instead, the next start runs storage recovery and every acknowledged record is there.

Housekeeping (every `flush_check_interval_ms`): while the broker is cut off from the metadata
quorum (`writable_partition`), fail its waiting acks=all produces; flush by `flush.ms`,
retention every
`retention_check_interval_ms`, move logs that went offline to the LogManager's offline table
and reopen offline ones whose backoff passed. A log that goes offline while serving (a write
it could not make: a full or failing disk) wakes housekeeping at once, so that it is reported
without waiting for the tick. The scrubber, a task of its own, checks closed
segments' checksums (`scrub_bytes_per_s`, in slices of at most SCRUB_SECONDS_PER_TICK_MAX every
SCRUB_TICK_S): fetches serve trusted data unchecked, so a flipped byte is found there, not by a
consumer. The log cleaner, another task, compacts the compacted topics' logs one at a time
(`_clean`: planned and swapped in on the loop, read and written in a child process under
`log_cleaner_io_bytes_per_s`: storage/cleaner.py, cleaner_process.py). A partition's error
never stops the others (the LogManager catches and rate-limits them); a bug that ends the task
is logged at once.

Offline replicas: whenever the set of this broker's offline logs changes, the broker proposes
it to the metadata (`report_offline_replicas`, with its broker epoch), so `cluster status`
shows it wherever it is asked; the metadata takes the replica out of the ISR and moves its
leadership to another in-sync replica (Kafka's rule for a log directory that cannot be
written: a leader whose disk is full hands over within about a second, and its producers'
in-flight requests get the retriable LogOfflineError, KAFKA_STORAGE_ERROR, and retry at the
new leader). Produce, fetch and list-offsets for an offline partition
answer LogOfflineError (retriable). A damaged replica heals itself once it is out of the ISR and
ELR and another live broker leads: its files are set aside (LogManager.set_aside_damaged) and it
refetches the partition from the leader like a new follower.

Replication: the broker's `ReplicaManager` (raftlog/replication/manager.py) holds every
hosted partition's log and replication core. After each change of brokers, topics or
partitions (the metadata's topology version, not group traffic) the broker reconciles its logs
and hands the partitions' new states to the ReplicaManager, which leads, follows or idles each
one. The handlers reach partitions through it: `replicas.leader(tp)` for produce, its fetch
entry points for consumers and followers, `high_watermark(tp)` for what consumers may see.

The heap: a broker with 10,000 partitions holds a few hundred thousand long-lived objects (logs,
segments, cores, metadata), and CPython's cyclic garbage collector walked all of them in every
full collection, 100-200 ms of the event loop each, several times while a big topic was
created and first written (a full collection runs whenever the heap grew by a quarter). After
a reconciler pass that opened logs, the broker collects the young generations and freezes what
is left (`gc.freeze()`: later collections skip it); objects freed by reference counting are
still freed at once. When partitions leave the broker, it unfreezes, so that reference cycles
among their objects are collected by the next full collection rather than kept for good. Only
a broker that owns its process does this (`freeze_heap`, set by raftlog/node.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from raftlog import protocol
from raftlog.broker.cleaner_process import CleanerProcess
from raftlog.broker.config import BrokerConfig
from raftlog.broker.connection import Connection, Connections, Listener
from raftlog.broker.context import HandlerContext
from raftlog.broker.handlers import admin, fetch, groups, produce, producer_ids
from raftlog.broker.kafka_connection import KafkaConnection
from raftlog.broker.logs import LogManager
from raftlog.errors import (
    LogOfflineError,
    NotLeaderOrFollowerError,
    RaftlogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raftlog.invariants import InvariantError
from raftlog.metadata.cluster import ClusterMetadata
from raftlog.metadata.coordinator import GroupCoordinator
from raftlog.metadata.model import TopicInfo
from raftlog.metrics.stats import BrokerStats
from raftlog.replication.core import ProposeIsr
from raftlog.replication.manager import ReplicaManager
from raftlog.replication.partition import Partition
from raftlog.storage import PartitionLog, cleaner
from raftlog.tasks import TaskSet
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

# The scrubber's share of the broker's event loop: a slice of at most SCRUB_SECONDS_PER_TICK_MAX
# every SCRUB_TICK_S (5% at most), each checking at most scrub_bytes_per_s * SCRUB_TICK_S.
# Short slices keep the loop's latency (a batch costs ~2 us to check: 8 MiB of 190-byte batches
# at once would block it ~90 ms); frequent ones keep a pass over a broker's small-batch logs
# within seconds (one 5 ms slice a second took ~14 s for 27,000 batches: damage a chaos fault
# made was not found within its window).
SCRUB_TICK_S = 0.1
SCRUB_SECONDS_PER_TICK_MAX = 0.005

# Topic settings the controller's election rules read; a topic created without them gets the
# broker's default written in.
REPLICATION_TOPIC_KEYS = (
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "durability.policy",
)
# After a failed offline report (no quorum leader, a timeout), try again this much later.
OFFLINE_REPORT_RETRY_S = 1.0
# The reconciler opens new logs this many at a time on its worker thread, and applies roles
# for at most this long before it yields to the loop: a heartbeat or a produce request waits
# at most about one slice (the broker is fenced after broker_session_timeout_ms of silence).
RECONCILE_OPEN_SLICE = 256
# A topic's creation (CreateTopics, or auto-creation by a produce) is answered once this
# broker's logs of it are open, or after this long at most (then its clients get
# NotLeaderOrFollower for a while and retry).
CREATE_OPEN_S_MAX = 10.0
RECONCILE_SLICE_S = 0.02


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        metadata: ClusterMetadata,
        coordinator: GroupCoordinator | None = None,
        kafka_handlers: Callable[[HandlerContext], dict[int, Any]] | None = None,
    ):
        self.config = config
        # The group coordinator of this node (controllers only); active on the Raft leader.
        self.coordinator = coordinator
        os.makedirs(config.data_dir, exist_ok=True)
        self.metadata = metadata
        self._reconcile_scheduled = False
        self._metadata_ready = False
        self.logs = LogManager(config.data_dir, config.log_defaults)
        # This broker's registered epoch (set by the node once registered); followers send it
        # with their fetches so a leader can tell incarnations apart.
        self.broker_epoch: int | None = None
        self._replica_conns: dict[int, Any] = {}
        self.replicas = ReplicaManager(
            config.node_id,
            config.replication,
            self._propose_isr,
            self._replica_connection,
            lambda: self.broker_epoch,
            data_dir=config.data_dir,
        )
        self._seen_topology = -1
        # The reconciler (a task of its own): `reconcile()` sets the event, the task brings
        # logs and replicas in line with the metadata in slices, yielding to the loop between
        # them, so that thousands of new partitions never stall heartbeats or other traffic.
        self._reconcile_wanted = asyncio.Event()
        self._reconciler: asyncio.Task[None] | None = None
        # What the hosted logs were last planned from: (topic, id, partitions) of each topic.
        self._planned: tuple[tuple[str, str, int, tuple[int, ...]], ...] | None = None
        # Each topic's config as its hosted logs last took it (_apply_topic_configs).
        self._applied_configs: dict[str, dict[str, str]] = {}
        # Log files are created and opened on this thread (file creation is slow), then
        # handed to the loop; one thread keeps one writer per log directory at a time.
        self._open_executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"raftlog-logs-{config.node_id}"
        )
        self._opening: asyncio.Future[Any] | None = None
        # The topology version the last finished reconciler pass started from.
        self._reconciled_version = -1
        self._reconciled = asyncio.Event()
        # Set whenever the LogManager's offline table changes; the reporter task waits on it.
        self._offline_changed = asyncio.Event()
        self.logs.on_offline_change = self._offline_changed.set
        # Set (thread-safely, see start) when a serving log goes offline: wakes housekeeping.
        self._went_offline = asyncio.Event()
        self.producer_ids = producer_ids.ProducerIdManager(self.metadata)
        self.handlers: dict[int, Any] = {}
        context: HandlerContext = self  # mypy checks the Broker is one
        for key, fn in (
            (protocol.ApiKey.API_VERSIONS, admin.handle_api_versions),
            (protocol.ApiKey.METADATA, admin.handle_metadata),
            (protocol.ApiKey.CREATE_TOPICS, admin.handle_create_topics),
            (protocol.ApiKey.DELETE_TOPICS, admin.handle_delete_topics),
            (protocol.ApiKey.CREATE_PARTITIONS, admin.handle_create_partitions),
            (protocol.ApiKey.ELECT_LEADERS, admin.handle_elect_leaders),
            (
                protocol.ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                admin.handle_alter_partition_reassignments,
            ),
            (protocol.ApiKey.ALTER_TOPIC_CONFIG, admin.handle_alter_topic_config),
            (protocol.ApiKey.DESCRIBE_REPLICAS, admin.handle_describe_replicas),
            (protocol.ApiKey.DESCRIBE_CONFIGS, admin.handle_describe_configs),
            (protocol.ApiKey.PRODUCE, produce.handle_produce),
            (protocol.ApiKey.FETCH, fetch.handle_fetch),
            (protocol.ApiKey.LIST_OFFSETS, admin.handle_list_offsets),
            (protocol.ApiKey.DESCRIBE_CLUSTER, admin.handle_describe_cluster),
            (protocol.ApiKey.FIND_COORDINATOR, groups.handle_find_coordinator),
            (protocol.ApiKey.JOIN_GROUP, groups.handle_join_group),
            (protocol.ApiKey.HEARTBEAT, groups.handle_heartbeat),
            (protocol.ApiKey.LEAVE_GROUP, groups.handle_leave_group),
            (protocol.ApiKey.OFFSET_COMMIT, groups.handle_offset_commit),
            (protocol.ApiKey.OFFSET_FETCH, groups.handle_offset_fetch),
            (protocol.ApiKey.LIST_GROUPS, groups.handle_list_groups),
            (protocol.ApiKey.DESCRIBE_GROUPS, groups.handle_describe_groups),
            (protocol.ApiKey.DELETE_GROUPS, groups.handle_delete_groups),
            (protocol.ApiKey.RESET_OFFSETS, groups.handle_reset_offsets),
            (protocol.ApiKey.INIT_PRODUCER_ID, producer_ids.handle_init_producer_id),
        ):
            self.handlers[int(key)] = functools.partial(fn, context)
        # The Kafka listeners' handlers, (request, version, connection) -> answer, from the
        # factory the node passes in (raftlog/kafka/handlers/registry.py's kafka_handlers):
        # the Kafka handlers build on this package's, so this package cannot import them.
        if kafka_handlers is None and (config.kafka_listener or config.kafka_external_listener):
            raise InvariantError("a Kafka listener without Kafka handlers (kafka_handlers)")
        self.kafka_handlers = {} if kafka_handlers is None else kafka_handlers(context)
        # The client and external listeners' connections, and the replication listener's.
        self.connections = Connections(config)
        self.replication_connections = Connections(config, "replication")
        # Event counters for the metrics (raftlog/metrics/): requests, traffic, ISR changes.
        self.stats = BrokerStats(config.metrics_enable)
        self._server: asyncio.Server | None = None
        self._housekeeping: asyncio.Task[None] | None = None
        # Whether housekeeping last found this broker cut off from the quorum (logged on change).
        self._cut_off = False
        self._offline_reporter: asyncio.Task[None] | None = None
        self._scrubber: asyncio.Task[None] | None = None
        self._cleaner: asyncio.Task[None] | None = None
        # The log cleaner's work runs in a child process (cleaner_process.py), one clean at a
        # time; this thread waits for it, so the loop never does.
        self._cleaner_process = CleanerProcess(f"raftlog-cleaner-{config.node_id}")
        self._cleaner_executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"raftlog-cleaner-{config.node_id}"
        )
        # Its background loops: a loop that ends with an error (a bug: the expected ones are
        # caught inside) is logged at once rather than at shutdown.
        self._tasks = TaskSet(f"broker {config.node_id}")
        self.port = config.port
        # The listeners beyond the client one, and the ports they bound.
        self._listeners: dict[Listener, asyncio.Server] = {}
        self.listener_ports: dict[Listener, int] = {}
        self.stopping = False

    @property
    def external_port(self) -> int | None:
        return self.listener_ports.get(Listener.EXTERNAL)

    @property
    def replication_port(self) -> int | None:
        return self.listener_ports.get(Listener.REPLICATION)

    @property
    def kafka_port(self) -> int | None:
        return self.listener_ports.get(Listener.KAFKA)

    @property
    def kafka_external_port(self) -> int | None:
        return self.listener_ports.get(Listener.KAFKA_EXTERNAL)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen. Call `metadata_ready()` once the local metadata has caught up."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self), self.config.host, self.config.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        for listener, address, factory in (
            (Listener.EXTERNAL, self.config.external_listener, Connection),
            (Listener.REPLICATION, self.config.replication_listener, Connection),
            (Listener.KAFKA, self.config.kafka_listener, KafkaConnection),
            (Listener.KAFKA_EXTERNAL, self.config.kafka_external_listener, KafkaConnection),
        ):
            if address is None:
                continue
            host, port = address
            server = await loop.create_server(
                functools.partial(factory, self, listener), host, port, reuse_address=True
            )
            bound = server.sockets[0].getsockname()[1]
            self._listeners[listener] = server
            self.listener_ports[listener] = bound
            log.info(
                "broker %d: %s listener on %s:%d",
                self.config.node_id,
                listener.value,
                host,
                bound,
            )
        tasks = self._tasks
        # A log goes offline inside whatever call failed, maybe on a worker thread.
        self.logs.on_went_offline = lambda: loop.call_soon_threadsafe(self._went_offline.set)
        self._housekeeping = tasks.spawn(self._housekeep(), "housekeeping")
        self._reconciler = tasks.spawn(self._reconcile_loop(), "reconciler")
        if self.config.scrub_bytes_per_s > 0:
            self._scrubber = tasks.spawn(self._scrub(), "scrubber")
        if self.config.log_cleaner_enable:
            self._cleaner = tasks.spawn(self._clean(), "log cleaner")
        self._offline_reporter = tasks.spawn(self._report_offline(), "offline replica reports")
        log.info(
            "broker %d listening on %s:%d, data in %s, %d partitions, fetches served with %s",
            self.config.node_id,
            self.config.host,
            self.port,
            self.config.data_dir,
            len(self.logs.partitions()),
            self.config.fetch_path(),
        )

    async def stop(self) -> None:
        """Graceful stop: no new connections, in-flight requests finish, logs flush and close."""
        self.stopping = True
        try:
            servers = (self._server, *self._listeners.values())
            for server in servers:
                if server is not None:
                    server.close()
            self.replicas.close()  # waiting produces answer, followers stop, HWs checkpointed
            for task in (
                self._reconciler,
                self._housekeeping,
                self._scrubber,
                self._cleaner,
                self._offline_reporter,
            ):
                if task is not None:
                    task.cancel()
                    # wait, not await: a task that failed was logged when it did (TaskSet).
                    await asyncio.wait([task])
            if self._opening is not None:
                # Logs being opened on the worker thread: let it finish, then close them.
                await asyncio.wait([self._opening])
                if not self._opening.cancelled() and self._opening.exception() is None:
                    for _, _, opened in self._opening.result()[0]:
                        if isinstance(opened, PartitionLog):
                            opened.close()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.config.shutdown_timeout_ms / 1000
            # Let queued responses drain (long-polls answer at their deadline or on data).
            pools = (self.connections, self.replication_connections)
            while any(c.busy for conns in pools for c in conns.open) and loop.time() < deadline:
                await asyncio.sleep(0.01)
            for conns in pools:
                for conn in list(conns.open):
                    if conn.transport is not None:
                        conn.transport.close()
                conns.close()
            for server in servers:
                if server is not None:
                    with contextlib.suppress(asyncio.TimeoutError):
                        async with asyncio.timeout(1.0):
                            await server.wait_closed()
            for conn in self._replica_conns.values():
                conn.close()
        finally:
            self.logs.close()
            self._open_executor.shutdown(wait=False)
            self._cleaner_process.stop()  # a clean under way is dropped, never waited for
            self._cleaner_executor.shutdown(wait=False)
        log.info("broker %d stopped", self.config.node_id)

    async def _scrub(self) -> None:
        """The background checksum check of closed segments, in short slices (SCRUB_TICK_S)."""
        budget_bytes = max(int(self.config.scrub_bytes_per_s * SCRUB_TICK_S), 1)
        while True:
            await asyncio.sleep(SCRUB_TICK_S)
            self.stats.scrubbed_bytes += self.logs.scrub(budget_bytes, SCRUB_SECONDS_PER_TICK_MAX)

    async def _clean(self) -> None:
        """The log cleaner: one clean at a time, its reads and writes on a worker thread, its
        swap on the event loop (storage/cleaner.py)."""
        loop = asyncio.get_running_loop()
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.log_cleaner_backoff_ms / 1000)
            if self.stopping:
                return
            picked = self.logs.plan_clean(self.replicas.high_watermarks())
            if picked is None:
                continue
            tp, plog, plan = picked
            try:
                result = await loop.run_in_executor(
                    self._cleaner_executor,
                    self._cleaner_process.run,
                    plan,
                    cfg.log_cleaner_keys_max,
                    cfg.log_cleaner_io_bytes_per_s,
                )
            except asyncio.CancelledError:
                # Stopping: stop() kills the cleaner process (it opened the files itself); its
                # files go at the log's next open.
                plan.close()
                raise
            except (OSError, RaftlogError, InvariantError) as e:
                plan.close()
                self.stats.clean_failures += 1
                self.logs.errors.log(logging.ERROR, (tp, "clean"), "cleaning %s failed: %s", tp, e)
                continue
            if self.logs.hosted(tp) is not plog:
                cleaner.discard(result)
                plan.close()
                continue
            try:
                installed = plog.install_clean(result)
            except RaftlogError as e:  # the log went offline (a full disk): it is moved out
                cleaner.discard(result)
                self.logs.errors.log(
                    logging.ERROR, (tp, "clean"), "installing a clean of %s failed: %s", tp, e
                )
                continue
            if not installed:
                log.info("%s: a clean was dropped: the log changed while it ran", tp)
                continue
            self.stats.cleaned(result, time.time())
            log.info(
                "%s: cleaned offsets [%d, %d) in %.2f s: %d of %d records kept, %d tombstones "
                "removed, %d -> %d bytes",
                tp,
                plan.segments[0].base,
                result.end,
                result.seconds,
                result.records_kept,
                result.records_read,
                result.tombstones_removed,
                result.bytes_read,
                result.bytes_written,
            )

    async def _housekeep(self) -> None:
        loop = asyncio.get_running_loop()
        next_retention = loop.time() + self.config.retention_check_interval_ms / 1000
        while True:
            # Woken early by a log that went offline: moving it out of the ReplicaManager
            # (its acks=all waiters answered) and reporting it is what moves its leadership.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.flush_check_interval_ms / 1000):
                    await self._went_offline.wait()
            self._went_offline.clear()
            stale = self.metadata.stale
            if stale != self._cut_off:
                self._cut_off = stale
                if stale:
                    log.warning(
                        "broker %d is cut off from the metadata quorum (no majority of the "
                        "voters for %.1f s): refusing produce, naming no leaders to Kafka's "
                        "clients",
                        self.config.node_id,
                        self.metadata.quorum.out_of_contact_s(),
                    )
                else:
                    log.warning("broker %d reaches the metadata quorum again", self.config.node_id)
            if stale:
                self.replicas.cut_off()  # its waiting acks=all produces: ask elsewhere
            self.logs.maybe_flush()
            if loop.time() >= next_retention:
                self.logs.enforce_retention(self.replicas.high_watermarks())
                next_retention = loop.time() + self.config.retention_check_interval_ms / 1000
            changed = self.logs.check_offline()
            if not self.stopping and self._metadata_ready:
                changed += self.logs.retry_offline()
                changed += self._heal_damaged()
            if changed:
                self._sync_replicas()
                self._reconcile_wanted.set()  # roles for the logs that came back

    def _heal_damaged(self) -> int:
        """Damaged replicas that another live broker leads, and that the metadata no longer
        counts as in sync or eligible: set aside and refetched. Returns how many."""
        healed = 0
        me = self.config.node_id
        damaged = self.logs.damaged()
        live = {b.node_id for b in self.metadata.brokers()} if damaged else set()
        for tp in damaged:
            p = self.metadata.partition(tp.topic, tp.partition)
            if p is None or p.leader in (me, -1) or me in p.isr or me in p.elr:
                continue
            if p.leader not in live:
                continue
            if self.logs.set_aside_damaged(tp) is not None:
                healed += 1
        return healed

    async def _report_offline(self) -> None:
        """Keep the metadata's record of this broker's offline replicas equal to the
        LogManager's: on every change, and again after a failed proposal."""
        reported: list[list[Any]] = []  # a new broker epoch starts with nothing reported
        while True:
            await self._offline_changed.wait()
            self._offline_changed.clear()
            current = self.logs.offline_report()
            if current == reported:
                continue
            try:
                await self.metadata.report_offline_replicas(self.config.node_id, current)
            except RaftlogError as e:
                self.logs.errors.log(
                    logging.WARNING,
                    ("metadata", "offline report"),
                    "broker %d: reporting %d offline replicas to the metadata failed, retrying "
                    "in %.1f s: %s",
                    self.config.node_id,
                    len(current),
                    OFFLINE_REPORT_RETRY_S,
                    e,
                )
                await asyncio.sleep(OFFLINE_REPORT_RETRY_S)
                self._offline_changed.set()
                continue
            reported = current
            log.info(
                "broker %d reported its offline replicas to the metadata: %s",
                self.config.node_id,
                ", ".join(f"{t}-{p}" for t, p, _ in current) or "none",
            )

    # -- metadata ------------------------------------------------------------------------------

    def metadata_ready(self) -> None:
        """The local metadata has caught up: from now on, reconcile the logs with it."""
        self._metadata_ready = True
        self.reconcile()

    def on_metadata_change(self) -> None:
        """Called on the event loop after the metadata changed (coalesced). Group and offset
        traffic does not change the topology version, so it costs nothing here."""
        self._reconcile_scheduled = False
        # A change applied while the node stops can land here after the quorum is gone.
        if self.stopping:
            return
        if self._metadata_ready and self.metadata.topology_version != self._seen_topology:
            self.reconcile()

    def reconcile(self) -> None:
        """Open the partitions this node hosts; remove partitions of deleted topics; bring
        every hosted partition's replication role in line with the metadata. Asks the
        reconciler task to do it (`_reconcile_loop`), soon.

        Only once the metadata has caught up: an unknown directory is deleted only when the
        metadata is known to be current, never because a lagging replica has not seen a topic.
        """
        if self._metadata_ready and not self.stopping:
            self._reconcile_wanted.set()

    async def _reconcile_loop(self) -> None:
        """Reconcile whenever asked; changes that arrive meanwhile are taken by the next pass."""
        while True:
            await self._reconcile_wanted.wait()
            self._reconcile_wanted.clear()
            if self.stopping:
                return
            await self._reconcile_pass()

    async def reconcile_now(self) -> None:
        """One reconciler pass, awaited: for a Broker run without `start()` (a benchmark of the
        produce path), whose reconciler task does not run."""
        self._metadata_ready = True
        await self._reconcile_pass()

    async def wait_reconciled(self, stop: asyncio.Event | None = None) -> None:
        """Until the logs and roles match the metadata as it is now (a pass of the reconciler
        that started after this call), or until `stop` is set."""
        target = self.metadata.topology_version
        while self._reconciled_version < target and not self.stopping:
            if stop is not None and stop.is_set():
                return
            self._reconciled.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    await self._reconciled.wait()

    async def _reconcile_pass(self) -> None:
        version = self.metadata.topology_version
        await self._reconcile_pass_at()
        self._reconciled_version = version
        self._reconciled.set()

    async def _reconcile_pass_at(self) -> None:
        self._seen_topology = self.metadata.topology_version
        topics = self.metadata.topics()
        node = self.config.node_id
        planned = tuple(
            sorted(
                (
                    t.name,
                    t.topic_id,
                    len(t.partitions),
                    # Which of them this node hosts: a reassignment moves replicas.
                    tuple(p.partition for p in t.partitions if node in p.replicas),
                )
                for t in topics.values()
            )
        )
        if planned != self._planned:
            # Topics came or went, or replicas moved: the logs change. (Leaders and ISRs do
            # not touch them.)
            started = time.monotonic()
            to_open = self.logs.plan(
                topics.values(), self.config.node_id, sweep=self._planned is None
            )
            self._planned = planned
            self._sync_replicas()
            opened = 0
            loop = asyncio.get_running_loop()
            for i in range(0, len(to_open), RECONCILE_OPEN_SLICE):
                chunk = to_open[i : i + RECONCILE_OPEN_SLICE]
                self._opening = loop.run_in_executor(
                    self._open_executor, self.logs.open_many, chunk
                )
                results, unsynced = await self._opening
                self._opening = None
                if unsynced:  # after the adoption below, on the same thread: off the path
                    self._on_worker(self.logs.sync_new, unsynced)
                if self.stopping:
                    for _, _, plog in results:
                        if isinstance(plog, PartitionLog):
                            plog.close()
                    return
                for tp, info, result in results:
                    if self.logs.adopt(tp, info, result) is not None:
                        opened += 1
                # The new logs serve as soon as their slice is in: apply their roles now.
                await self._apply_metadata()
            if opened and self.config.freeze_heap:
                _freeze_heap()
            if to_open:
                log.info(
                    "broker %d opened %d of %d new partition logs in %.2f s",
                    self.config.node_id,
                    opened,
                    len(to_open),
                    time.monotonic() - started,
                )
            self._purge_deleted()
        self._sync_replicas()
        self._apply_topic_configs(topics)
        await self._apply_metadata()

    def _apply_topic_configs(self, topics: dict[str, TopicInfo]) -> None:
        """The hosted logs of a topic whose configs changed (alter_topic_config) take them.
        A log opened later is opened with them."""
        applied = self._applied_configs
        for t in topics.values():
            if applied.get(t.name) == t.config:
                continue
            first = t.name not in applied
            applied[t.name] = dict(t.config)
            if first:
                continue  # its logs were opened with this config
            config = self.logs.config_for(t.config)
            for i in range(len(t.partitions)):
                plog = self.logs.find(TopicPartition(t.name, i))
                if plog is not None:
                    plog.config = config
        for name in [n for n in applied if n not in topics]:
            del applied[name]

    def _purge_deleted(self) -> None:
        """Remove the directories of deleted partitions, on the worker thread."""
        self._on_worker(self.logs.purge_deleted)

    def _on_worker(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the worker thread, in order with the log opening it also runs;
        nobody waits for it, and an exception (a bug: `fn` handles its own errors) is logged."""
        fut = asyncio.get_running_loop().run_in_executor(self._open_executor, fn, *args)
        fut.add_done_callback(functools.partial(_log_worker_failure, fn.__name__))

    async def _apply_metadata(self) -> None:
        """Every hosted partition's role as the metadata says, in slices of at most
        RECONCILE_SLICE_S, yielding to the loop in between (a failover changes thousands).
        News that arrives meanwhile is taken by another pass (the metadata's version)."""
        metadata, replicas = self.metadata, self.replicas
        replicas.set_replication_throttle(metadata.replication_throttle())
        while not self.stopping:
            version = metadata.topology_version
            changes = replicas.role_changes(metadata.topics().values())
            while changes and not self.stopping:
                changes = replicas.apply_role_changes(
                    changes, metadata.broker_epochs(), RECONCILE_SLICE_S
                )
                if changes:
                    await asyncio.sleep(0)
            if metadata.topology_version == version:
                return

    def _sync_replicas(self) -> None:
        """The ReplicaManager hosts exactly the open logs (roles follow in _apply_metadata)."""
        hosted = self.replicas.partitions
        removed = [tp for tp, p in hosted.items() if self.logs.find(tp) is not p.log]
        for tp in removed:
            self.replicas.remove(tp)
        if removed and self.config.freeze_heap:
            gc.unfreeze()  # their objects may be frozen: let a full collection reach them
        if len(hosted) == self.logs.count:
            return
        topics = self.metadata.topics()
        for tp in self.logs.partitions():
            if tp not in hosted:
                plog = self.logs.find(tp)
                if plog is not None:
                    t = topics.get(tp.topic)
                    self.replicas.add(
                        tp,
                        plog,
                        dict(t.config) if t is not None else {},
                        self.logs.topic_id(tp),
                    )

    async def _propose_isr(self, tp: TopicPartition, proposal: ProposeIsr) -> int:
        p = self.replicas.get(tp)
        before = len(proposal.isr) if p is None else len(p.core.isr)
        epoch = await self.metadata.alter_isr(
            tp.topic,
            tp.partition,
            self.config.node_id,
            proposal.leader_epoch,
            proposal.partition_epoch,
            list(proposal.isr),
            [list(e) for e in proposal.broker_epochs],
        )
        self.stats.isr_changed(before, len(proposal.isr))  # Kafka counts those accepted
        return epoch

    async def _replica_connection(self, node_id: int) -> Any:
        """The connection this broker's fetcher uses to reach leader `node_id`: to its
        replication listener (its client listener if it registered none)."""
        from raftlog.client.connection import BrokerConnection

        conn = self._replica_conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        broker = self.metadata.replication_endpoint(node_id)
        if broker is None:
            raise NotLeaderOrFollowerError(f"broker {node_id} is not registered")
        conn = await BrokerConnection.connect(
            broker.host, broker.port, f"raftlog-replica-{self.config.node_id}", 10.0
        )
        self._replica_conns[node_id] = conn
        return conn

    def schedule_reconcile(self, loop: asyncio.AbstractEventLoop) -> None:
        """Thread-safe: the Raft tick thread calls this after every applied command."""
        if not self._reconcile_scheduled:
            self._reconcile_scheduled = True
            loop.call_soon_threadsafe(self.on_metadata_change)

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        config: dict[str, Any],
        validate_only: bool = False,
    ) -> TopicInfo:
        # The controller decides elections with these, so the broker's defaults for them are
        # written into the topic (Kafka's controller knows the cluster defaults; ours knows
        # only what the topic says).
        # A default min.insync.replicas is capped at the topic's replication factor (an RF-1
        # topic in a cluster whose default is 2 gets 1): a default must not make creating a
        # smaller topic fail. One the topic itself states is checked as it is.
        config = dict(config)
        for key in REPLICATION_TOPIC_KEYS:
            if key not in config and key in self.config.log_defaults:
                value = str(self.config.log_defaults[key])
                if key == "min.insync.replicas" and value.isdigit():
                    value = str(min(int(value), max(int(replication_factor), 1)))
                config[key] = value
        if validate_only:
            from raftlog.storage import LogConfig
            from raftlog.topics import validate_topic_name

            validate_topic_name(name)
            LogConfig.from_topic_config(config)
            return TopicInfo(name, "", ())
        info = await self.metadata.create_topic(name, partitions, replication_factor, config)
        self.reconcile()
        log.info("created topic %s with %d partitions", name, len(info.partitions))
        # Answer once this broker's logs of it are open (what a client of a one-node cluster
        # expects to use at once), for at most CREATE_OPEN_S_MAX: the topic exists either way.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CREATE_OPEN_S_MAX):
                await self.wait_reconciled()
        return info

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None = None,
        validate_only: bool = False,
    ) -> None:
        """Grow topic `name` to `count` partitions; answered, as create_topic is, once this
        broker's logs of the new partitions are open (for at most CREATE_OPEN_S_MAX)."""
        if validate_only:
            self.metadata.check_create_partitions(name, count, assignments)
            return
        await self.metadata.create_partitions(name, count, assignments)
        self.reconcile()
        log.info("grew topic %s to %d partitions", name, count)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CREATE_OPEN_S_MAX):
                await self.wait_reconciled()

    async def alter_topic_config(
        self, name: str, changes: dict[str, str | None], validate_only: bool = False
    ) -> dict[str, str]:
        """Change topic `name`'s configs (ClusterMetadata.alter_topic_config); this broker's
        logs of it take the new settings in the reconcile pass that follows (the others' in
        theirs, as the metadata reaches them)."""
        if validate_only:
            return self.metadata.check_topic_config(name, changes)
        config = await self.metadata.alter_topic_config(name, changes)
        self.reconcile()
        log.info("topic %s: configs changed (%s)", name, ", ".join(sorted(changes)))
        return config

    async def elect_leaders(
        self, partitions: list[tuple[str, int]] | None
    ) -> list[tuple[str, int, int, str | None]]:
        """Preferred-leader elections (ClusterMetadata.elect_leaders); logs what moved."""
        results = await self.metadata.elect_leaders(partitions)
        self.reconcile()
        moved = [f"{t}-{p}" for t, p, code, _ in results if code == 0]
        if moved:
            log.info(
                "preferred leaders elected for %d partitions: %s", len(moved), ", ".join(moved[:10])
            )
        return results

    async def alter_partition_reassignments(
        self, entries: list[tuple[str, int, list[int] | None]], throttle: int | None = None
    ) -> list[tuple[str, int, int, str | None]]:
        """Start or cancel reassignments (ClusterMetadata.alter_partition_reassignments),
        and set the replication throttle if `throttle` is given."""
        results = await self.metadata.alter_partition_reassignments(entries, throttle)
        self.reconcile()
        started = [f"{t}-{p}" for t, p, code, _ in results if code == 0]
        if started:
            log.info("reassignments changed for %s", ", ".join(started[:10]))
        return results

    async def delete_topic(self, name: str) -> None:
        await self.metadata.delete_topic(name)
        self.reconcile()
        log.info("deleted topic %s", name)

    def topics_to_auto_create(self, topics: Iterable[Any]) -> list[str]:
        """The unknown topics among `topics`, if this broker auto-creates topics."""
        if not self.config.auto_create_topics:
            return []
        known = self.metadata.topics()
        return sorted({t for t in topics if isinstance(t, str) and t not in known})

    async def auto_create(self, topics: list[str]) -> dict[str, RaftlogError]:
        """Create `topics` with the broker's defaults; returns the errors by topic (an
        invalid name, no quorum). A topic created meanwhile by someone else is fine."""
        errors: dict[str, RaftlogError] = {}
        for topic in topics:
            try:
                await self.create_topic(
                    topic,
                    self.config.default_partitions,
                    self.config.default_replication_factor,
                    {},
                )
            except TopicAlreadyExistsError:
                pass
            except RaftlogError as e:
                errors[topic] = e
        # The request that named them appends next: their logs must be open here first (a
        # request that found one created meanwhile by another waits as the creator did).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CREATE_OPEN_S_MAX):
                await self.wait_reconciled()
        return errors

    def produce_group(self) -> produce.ProduceGroup:
        """A group for the Produce requests of one socket read (handlers/produce.py)."""
        return produce.ProduceGroup(self)

    def leader_partition(self, tp: TopicPartition) -> Partition:
        """A partition this broker leads, or the error a client should act on."""
        p = self.replicas.get(tp)
        if p is None:
            if self.metadata.partition(tp.topic, tp.partition) is None:
                raise UnknownTopicOrPartitionError(f"unknown topic or partition {tp}")
            offline = self.logs.offline_error(tp)
            if offline is not None:
                raise LogOfflineError(
                    f"broker {self.config.node_id} cannot serve {tp}, its log is offline: {offline}"
                )
        return self.replicas.leader(tp)

    def writable_partition(self, tp: TopicPartition) -> Partition:
        """`leader_partition`, refused while this broker is cut off from the metadata quorum
        past its session timeout (`ClusterMetadata.stale`): the others have fenced it and
        moved its leaderships, and its acks=all requests cannot commit. Kafka's clients
        refresh metadata on NOT_LEADER_OR_FOLLOWER, not on a timeout (librdkafka retried the
        same cut-off leader for a whole 18 s isolation); reads of committed data go on."""
        p = self.leader_partition(tp)
        if self.metadata.stale:
            raise NotLeaderOrFollowerError(
                f"broker {self.config.node_id} is cut off from the metadata quorum; its "
                f"leadership of {tp} has likely moved: ask another broker for metadata"
            )
        return p

    def leader_log(self, tp: TopicPartition) -> PartitionLog:
        """The log of a partition this broker leads, or the error a client should act on."""
        return self.leader_partition(tp).log

    def high_watermark(self, tp: TopicPartition) -> int:
        """What consumers may read of a partition this broker leads."""
        return self.leader_partition(tp).high_watermark


def _freeze_heap() -> None:
    """The broker took on many long-lived objects: collect the young generations' garbage and
    keep every object alive now out of later collections (the module docstring's "heap")."""
    gc.collect(1)
    gc.freeze()


def _log_worker_failure(what: str, fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("broker worker thread: %s failed", what, exc_info=fut.exception())


# BrokerConfig is re-exported: it lived here before raftlog/broker/config.py.
__all__ = ["Broker", "BrokerConfig"]
