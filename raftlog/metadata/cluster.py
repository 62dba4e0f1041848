"""`ClusterMetadata`: the broker's view of the replicated metadata (the MetadataStore seam).

The broker reads topics, partitions and brokers from the local copy of the Raft state (a voter's
or an observer's), and changes them by proposing commands. Reads are cheap: converted views are
cached per state version.

`describe_cluster()` is what `raftlog cluster status` shows (the DescribeCluster API): every
field named (docs/PROTOCOL.md), including the replicas whose logs their brokers reported
offline. A report counts only while its broker epoch is the broker's registered one.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from raftlog.errors import (
    NotControllerError,
    RaftlogError,
    StaleBrokerEpochError,
    UnknownTopicOrPartitionError,
    error_from_code,
)
from raftlog.metadata.model import BrokerInfo, PartitionInfo, TopicInfo
from raftlog.metadata.partition_state import PartitionState
from raftlog.metadata.quorum import MetadataQuorum
from raftlog.metadata.state import MetadataState
from raftlog.tasks import TaskSet

# ISR changes in one alter_isr_batch command: ~150 bytes each, far below the command bound.
ISR_BATCH_MAX = 1000


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


def _partition_info(i: int, p: PartitionState) -> PartitionInfo:
    return PartitionInfo(
        i,
        p.leader,
        p.leader_epoch,
        tuple(p.replicas),
        tuple(p.isr),
        p.partition_epoch,
        tuple(p.elr),
        tuple(p.adding),
    )


def _topic_info(t: dict[str, Any], old: TopicInfo | None = None) -> TopicInfo:
    """The view of topic `t`. Partitions unchanged since `old` (same leader epoch and
    partition epoch: every change of leader, ISR, ELR or replicas bumps one of them) keep
    their PartitionInfo object, and an unchanged topic keeps its TopicInfo: an ISR change in
    a 10,000-partition topic builds one new object, and readers (the replica manager) can
    tell what changed by identity."""
    parts = t["partitions"]
    if old is None or old.topic_id != t["topic_id"] or len(old.partitions) != len(parts):
        return TopicInfo(
            t["name"],
            t["topic_id"],
            tuple(_partition_info(i, p) for i, p in enumerate(parts)),
            dict(t["config"]),
        )
    infos = list(old.partitions)
    changed = False
    for i, p in enumerate(parts):
        o = infos[i]
        if o.partition_epoch != p.partition_epoch or o.leader_epoch != p.leader_epoch:
            infos[i] = _partition_info(i, p)
            changed = True
    if not changed and old.config == t["config"]:
        return old
    return TopicInfo(t["name"], t["topic_id"], tuple(infos), dict(t["config"]))


# The keys of each partition in `describe()`'s view (DescribeCluster's answer).
PARTITION_VIEW_KEYS = frozenset(
    {
        "topic",
        "partition",
        "leader",
        "leader_epoch",
        "replicas",
        "isr",
        "offline_replicas",
        "adding",
        "removing",
    }
)


class ClusterMetadata:
    def __init__(
        self, quorum: MetadataQuorum, voters: dict[int, str], stale_after_ms: int | None = None
    ):
        """`stale_after_ms`: how long this node may reach no majority of the voters before
        its view counts as stale (`stale`); None: never (a node's own clients only)."""
        self.quorum = quorum
        self.voters = voters
        self.stale_after_ms = stale_after_ms
        # ISR changes waiting to go to the quorum, and the task sending them (alter_isr).
        self._isr_queue: list[tuple[dict[str, Any], asyncio.Future[int]]] = []
        self._isr_sender: asyncio.Task[None] | None = None
        self._tasks = TaskSet("cluster metadata")
        self._by_address = {addr: node for node, addr in voters.items()}
        self._cache_version = -1
        self._topics: dict[str, TopicInfo] = {}
        self._brokers: list[BrokerInfo] = []
        # The live brokers as clients of the external listeners reach them (each broker's
        # external address, or its client listener's where it has none).
        self._external_brokers: list[BrokerInfo] = []
        # The live brokers' Kafka listeners (internal, external), for the Kafka listener's
        # Metadata answers: brokers without one are left out (a Kafka client cannot use them).
        self._kafka_brokers: tuple[list[BrokerInfo], list[BrokerInfo]] = ([], [])
        self._all_brokers: dict[int, BrokerInfo] = {}
        # Where followers reach each registered broker: its replication listener, or its
        # client listener where it registered none (a broker started before it existed).
        self._replication_endpoints: dict[int, BrokerInfo] = {}
        self._broker_epochs: dict[int, int] = {}
        self._broker_voters: dict[int, list[str] | None] = {}
        self._replication_throttle = 0

    @property
    def topology_version(self) -> int:
        """Bumps when brokers, topics or partitions change (not on group or offset traffic)."""
        return int(getattr(self.quorum.state, "topology_version", 0))

    def _refresh(self) -> None:
        # The version is read without the lock first: an int read is atomic, and a cache
        # built at the current version is the current state (an apply in progress has not
        # bumped it yet, so this read simply comes just before that apply). The lock is
        # taken only to rebuild, and only when brokers, topics or partitions changed.
        if self.topology_version == self._cache_version:
            return

        def grab(s: MetadataState) -> tuple[Any, ...]:
            version = int(getattr(s, "topology_version", 0))
            if version == self._cache_version:
                return (
                    version,
                    self._topics,
                    self._brokers,
                    self._external_brokers,
                    self._kafka_brokers,
                    self._all_brokers,
                    self._replication_endpoints,
                    self._broker_epochs,
                    self._broker_voters,
                    self._replication_throttle,
                )
            cached = self._topics
            topics = {name: _topic_info(t, cached.get(name)) for name, t in s.topics.items()}
            every = {
                n: BrokerInfo(b["node_id"], b["host"], b["port"], b["rack"])
                for n, b in sorted(s.brokers.items())
            }
            live = [every[n] for n, b in sorted(s.brokers.items()) if not b["fenced"]]
            external = [
                BrokerInfo(n, str(b["external"][0]), int(b["external"][1]), b["rack"])
                if b.get("external")
                else every[n]
                for n, b in sorted(s.brokers.items())
                if not b["fenced"]
            ]
            kafka = [
                BrokerInfo(n, str(b["kafka"][0]), int(b["kafka"][1]), b["rack"])
                for n, b in sorted(s.brokers.items())
                if not b["fenced"] and b.get("kafka")
            ]
            kafka_external = [
                BrokerInfo(n, str(a[0]), int(a[1]), b["rack"])
                for n, b in sorted(s.brokers.items())
                if not b["fenced"] and (a := b.get("kafka_external") or b.get("kafka"))
            ]
            replication = {
                n: BrokerInfo(n, str(b["replication"][0]), int(b["replication"][1]), b["rack"])
                if b.get("replication")
                else every[n]
                for n, b in sorted(s.brokers.items())
            }
            epochs = {n: int(b["broker_epoch"]) for n, b in s.brokers.items()}
            voters = {n: b.get("controller_voters") for n, b in s.brokers.items()}
            kafkas = (kafka, kafka_external)
            throttle = int(getattr(s, "replication_throttle", 0))
            return (
                version,
                topics,
                live,
                external,
                kafkas,
                every,
                replication,
                epochs,
                voters,
                throttle,
            )

        (
            self._cache_version,
            self._topics,
            self._brokers,
            self._external_brokers,
            self._kafka_brokers,
            self._all_brokers,
            self._replication_endpoints,
            self._broker_epochs,
            self._broker_voters,
            self._replication_throttle,
        ) = self.quorum.read(grab)

    def broker_epochs(self) -> dict[int, int]:
        """Every registered broker's current epoch (fenced ones included)."""
        self._refresh()
        return self._broker_epochs

    def broker(self, node_id: int) -> BrokerInfo | None:
        """A registered broker's endpoint, fenced or not (followers reach leaders by it)."""
        self._refresh()
        return self._all_brokers.get(node_id)

    def replication_endpoint(self, node_id: int) -> BrokerInfo | None:
        """Where followers fetch from registered broker `node_id` (fenced or not): its
        replication listener, or its client listener if it registered none."""
        self._refresh()
        return self._replication_endpoints.get(node_id)

    @property
    def stale(self) -> bool:
        """Whether this node has been cut off from the metadata quorum for over
        `stale_after_ms` (the broker session timeout: the others have fenced it by now and
        moved its leaderships, so what it knows of leaders is out of date)."""
        limit = self.stale_after_ms
        return limit is not None and self.quorum.out_of_contact_s() * 1000 > limit

    @property
    def controller_id(self) -> int:
        leader = self.quorum.status().leader
        return -1 if leader is None else self._by_address.get(leader, -1)

    def brokers(self, external: bool = False) -> list[BrokerInfo]:
        """The live brokers, at the addresses clients of the client listeners use (or, with
        `external`, those of the external listeners)."""
        self._refresh()
        return list(self._external_brokers if external else self._brokers)

    def kafka_brokers(self, external: bool = False) -> list[BrokerInfo]:
        """The live brokers' Kafka listeners (with `external`, their external Kafka listeners,
        or the internal one where a broker has no external one)."""
        self._refresh()
        return list(self._kafka_brokers[1 if external else 0])

    def broker_voters(self) -> dict[int, list[str] | None]:
        """Every registered broker's controller_voters (None: it did not say)."""
        self._refresh()
        return dict(self._broker_voters)

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

    async def create_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None = None
    ) -> TopicInfo:
        """Grow topic `name` to `count` partitions (MetadataState.create_partitions)."""
        args: dict[str, Any] = {"name": name, "partitions": count}
        if assignments is not None:
            args["assignments"] = [list(a) for a in assignments]
        await self.quorum.propose("create_partitions", **args)
        return self.topic(name)

    def check_create_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None = None
    ) -> None:
        """Raise what create_partitions would be refused with, against this node's copy of
        the state; change nothing (a validate-only request)."""
        wanted = None if assignments is None else [list(a) for a in assignments]
        self.quorum.read(lambda state: state.new_partitions(name, count, wanted))

    async def alter_topic_config(self, name: str, changes: dict[str, str | None]) -> dict[str, str]:
        """Change topic `name`'s configs (MetadataState.alter_topic_config): its new config."""
        config = await self.quorum.propose("alter_topic_config", name=name, changes=changes)
        return dict(config)

    def check_topic_config(self, name: str, changes: dict[str, str | None]) -> dict[str, str]:
        """The config alter_topic_config would give topic `name`, or what it would be
        refused with, against this node's copy of the state; change nothing."""
        config: dict[str, str] = self.quorum.read(
            lambda state: state.new_topic_config(name, changes)
        )
        return config

    async def elect_leaders(
        self, partitions: list[tuple[str, int]] | None
    ) -> list[tuple[str, int, int, str | None]]:
        """Preferred-leader elections (MetadataState.elect_leaders): (topic, partition,
        error code, message) per partition, 0 where its preferred leader leads now."""
        wanted = None if partitions is None else [[t, p] for t, p in partitions]
        results = await self.quorum.propose("elect_leaders", partitions=wanted)
        return [(t, p, code, message) for t, p, code, message in results]

    async def alter_partition_reassignments(
        self, entries: list[tuple[str, int, list[int] | None]], throttle: int | None = None
    ) -> list[tuple[str, int, int, str | None]]:
        """Start, replace (a replica list) or cancel (None) reassignments
        (MetadataState.alter_partition_reassignments): (topic, partition, error code, message)
        per entry. `throttle` (bytes per second, 0: none) replaces the replication throttle."""
        wanted = [[t, p, None if r is None else list(r)] for t, p, r in entries]
        args: dict[str, Any] = {"reassignments": wanted}
        if throttle is not None:
            args["throttle"] = throttle
        results = await self.quorum.propose("alter_partition_reassignments", **args)
        return [(t, p, code, message) for t, p, code, message in results]

    def replication_throttle(self) -> int:
        """Bytes per second each broker may fetch for the replicas it is adding in
        reassignments (0: unthrottled)."""
        self._refresh()
        return self._replication_throttle

    async def allocate_producer_ids(self, count: int) -> int:
        """A block of `count` producer ids, unique in the cluster; returns its first id."""
        return int(await self.quorum.propose("allocate_producer_ids", count=count))

    async def delete_topic(self, name: str) -> None:
        await self.quorum.propose("delete_topic", name=name)

    async def alter_isr(
        self,
        topic: str,
        partition: int,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
        broker_epochs: list[list[int]],
    ) -> int:
        """A partition leader's ISR change; returns the new partition epoch.

        Changes asked for while others are on their way go to the quorum together, in one
        `alter_isr_batch` command of at most ISR_BATCH_MAX (Kafka's AlterPartition carries
        many partitions too): a failover or a restart changes the ISR of thousands of
        partitions at once, and one Raft entry each was a storm that every broker had to
        apply one by one. Each change is still checked and applied or refused on its own."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        self._isr_queue.append(
            (
                {
                    "topic": topic,
                    "partition": partition,
                    "leader_id": leader_id,
                    "leader_epoch": leader_epoch,
                    "partition_epoch": partition_epoch,
                    "isr": isr,
                    "broker_epochs": broker_epochs,
                },
                fut,
            )
        )
        if self._isr_sender is None or self._isr_sender.done():
            self._isr_sender = self._tasks.spawn(self._send_isr_changes(), "ISR change sender")
        return await fut

    async def _send_isr_changes(self) -> None:
        """Send the queued ISR changes, a batch at a time, until none is left. Every error is
        handed to the callers: this task ends only when the queue is empty (or cancelled)."""
        await asyncio.sleep(0)  # changes asked for in this turn of the loop join the first
        while self._isr_queue:
            batch = self._isr_queue[:ISR_BATCH_MAX]
            del self._isr_queue[:ISR_BATCH_MAX]
            try:
                results = await self.alter_isr_batch([args for args, _ in batch])
            except RaftlogError as e:
                for _, fut in batch:
                    if not fut.done():  # a new instance each: one shared collects tracebacks
                        fut.set_exception(error_from_code(e.code, str(e)))
                continue
            except BaseException as e:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(
                            NotControllerError(f"the ISR change was not sent ({e!r}); retry")
                        )
                raise
            for (_, fut), result in zip(batch, results, strict=True):
                if fut.done():
                    continue
                if isinstance(result, RaftlogError):
                    fut.set_exception(result)
                else:
                    fut.set_result(result)

    async def alter_isr_batch(self, changes: list[dict[str, Any]]) -> list[int | RaftlogError]:
        """Many ISR changes (each `alter_isr`'s arguments) in one command: per change, the new
        partition epoch or the error that refused it. Raises when the command as a whole
        fails (no quorum, a timeout)."""
        results = await self.quorum.propose("alter_isr_batch", changes=changes)
        if not isinstance(results, list) or len(results) != len(changes):
            raise RaftlogError(f"alter_isr_batch of {len(changes)} changes returned {results!r}")
        return [
            int(r[1]) if r[0] == "ok" else error_from_code(int(r[1]), str(r[2])) for r in results
        ]

    async def report_offline_replicas(self, node_id: int, replicas: list[list[Any]]) -> None:
        """Replace broker `node_id`'s report of its offline replicas ([topic, partition,
        reason], ...; empty clears it), under its registered broker epoch."""

        def epoch_of(s: MetadataState) -> int | None:
            b = s.brokers.get(node_id)
            return None if b is None else int(b["broker_epoch"])

        epoch = self.quorum.read(epoch_of)
        if epoch is None:
            raise StaleBrokerEpochError(f"broker {node_id} is not registered")
        await self.quorum.propose(
            "report_offline_replicas", node_id=node_id, broker_epoch=epoch, replicas=replicas
        )

    def describe_cluster(self) -> dict[str, Any]:
        """The quorum as this node sees it, every registered broker, every partition."""
        st = self.quorum.status()

        def grab(s: MetadataState) -> dict[str, Any]:
            offline_logs = []
            offline: dict[tuple[str, int], list[int]] = {}
            for node_id, report in sorted(s.offline_replicas.items()):
                broker = s.brokers.get(node_id)
                if broker is None or broker["broker_epoch"] != report["broker_epoch"]:
                    continue  # from an earlier incarnation of that broker
                for topic, partition, reason in report["replicas"]:
                    if topic not in s.topics or partition >= len(s.topics[topic]["partitions"]):
                        continue  # deleted since
                    offline.setdefault((topic, partition), []).append(node_id)
                    offline_logs.append(
                        {
                            "node_id": node_id,
                            "broker_epoch": report["broker_epoch"],
                            "topic": topic,
                            "partition": partition,
                            "reason": reason,
                        }
                    )
            return {
                "brokers": [
                    {
                        "node_id": b["node_id"],
                        "host": b["host"],
                        "port": b["port"],
                        "external": b.get("external"),
                        "replication": b.get("replication"),
                        "kafka": b.get("kafka"),
                        "kafka_external": b.get("kafka_external"),
                        "metrics": b.get("metrics"),
                        "rack": b["rack"],
                        "broker_epoch": b["broker_epoch"],
                        "fenced": b["fenced"],
                        "shutting_down": b.get("shutting_down", False),
                    }
                    for _, b in sorted(s.brokers.items())
                ],
                "partitions": [
                    {
                        "topic": name,
                        "partition": i,
                        "leader": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "replicas": list(p.replicas),
                        "isr": list(p.isr),
                        "offline_replicas": offline.get((name, i), []),
                        "adding": list(p.adding),
                        "removing": list(p.removing),
                    }
                    for name in sorted(s.topics)
                    for i, p in enumerate(s.topics[name]["partitions"])
                ],
                "offline_logs": offline_logs,
                "replication_throttle": int(getattr(s, "replication_throttle", 0)),
                "metadata_version": s.version,
            }

        out: dict[str, Any] = self.quorum.read(grab)
        out["voters"] = [{"node_id": n, "address": a} for n, a in sorted(self.voters.items())]
        out["controller_id"] = self._by_address.get(st.leader, -1) if st.leader else -1
        out["quorum"] = {
            "term": st.term,
            "commit_index": st.commit_index,
            "last_applied": st.last_applied,
            "ready": st.ready,
            "this_node_leads": st.is_leader,
            # Not None while this node's metadata journal refuses writes for lack of disk space
            # (why, since when), or once its Raft thread has failed (the node then exits).
            "journal_full": st.journal_full,
            "raft_thread_failure": st.failure,
        }
        return out
