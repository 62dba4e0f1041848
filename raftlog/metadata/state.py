"""The cluster metadata as a deterministic state machine: what the Raft quorum replicates.

It holds the registries that ZooKeeper held for early Kafka, plus partition state (KRaft):

- brokers: id, endpoint, rack, incarnation and broker epoch, fenced or not (broker registry);
- topics: id, config, and per partition a PartitionState (partition_state.py; a topic grows
  by create_partitions and never shrinks; alter_partition_reassignments moves replicas): the
  replicas,
  leader, leader epoch, ISR, ELR and partition epoch, changed only by its transitions, which
  hold every election rule and check the partition's invariants at their end;
- consumer groups: state, members, generation, chosen assignor and the assignment (consumer
  and ownership registries). A rebalance runs in two steps, as in Kafka's classic protocol:
  a join, leave, expiry or subscribed-topic change moves the group to PreparingRebalance while
  the current generation's assignment stands; the next generation is assigned only when every
  member has joined again (join_group), or at the rebalance deadline (tick_group, proposed by
  the coordinator with its clock). groups.py's GroupState holds every state, transition and
  invariant; the commands here look the group up and call its transition;
- committed offsets per group and partition (offset registry);
- the next producer id block (for idempotent producers);
- the replication throttle of reassignments (bytes per second; set with them).

Rules (etcd raft / TigerBeetle style):
- Every change is a command applied with `apply(command)`; a command is `(name, kwargs)` of
  plain values. The same commands in the same order give the same state on every replica:
  no clock (time arrives inside the command as `now_ms`), no randomness, no iteration over
  sets or str hashes, no I/O.
- `apply` never raises for a refused command: it returns `("err", code, message)` so every
  replica refuses identically and the proposer gets the error; `("ok", value)` otherwise.
- A refused command leaves the state untouched: every `_cmd_*` checks everything that can
  refuse it before its first change (no undo log: the hot command, `commit_batch`, would pay
  for one on every commit). `commit_batch` refuses or applies each of its commits on its own.
- Arguments are checked against the handler's annotations before it runs (signatures.py:
  names, and types: `int` is not `bool`; a `list[X]` may arrive as a tuple), and entries inside
  lists are checked by the handler, so a malformed command is refused with
  `InvalidRequestError` naming the argument. Only `RaftlogError` becomes a refusal: any other
  exception from a handler is a bug in this module and propagates (the Raft thread then stops
  the node loudly), rather than being disguised as the client's error.
- The state compares with `==` in tests. pysyncobj pickles it into its snapshots; what it
  pickles (`__getstate__`) is plain dicts, lists, ints and strs (partitions and groups as their
  records) and the format number, `SNAPSHOT_FORMAT`, so renaming a class never breaks a
  snapshot. Format 1 (no number: code up to a115116) loads: `__setstate__` fills the fields
  its writer predates before any command runs. A format this code does not know is refused.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, NoReturn

from raftlog.errors import (
    ElectionNotNeededError,
    GroupIdNotFoundError,
    GroupNotEmptyError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    PreferredLeaderNotAvailableError,
    RaftlogError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raftlog.metadata import groups
from raftlog.metadata.group_requests import kafka_assignments, kafka_protocols
from raftlog.metadata.groups import NATIVE_PROTOCOL_TYPE, GroupState
from raftlog.metadata.partition_state import (
    NO_LEADER,
    MetadataInvariantError,
    PartitionState,
    TopicRules,
)
from raftlog.metadata.signatures import SEQUENCE_TYPES as _SEQUENCE_TYPES
from raftlog.metadata.signatures import Signature
from raftlog.metadata.signatures import is_int as _is_int
from raftlog.storage.config import LogConfig
from raftlog.topics import validate_topic_name

__all__ = ["NO_LEADER", "MetadataInvariantError", "MetadataState", "SNAPSHOT_FORMAT"]

# What __getstate__ writes. 1: the fields as they were (no number; code up to a115116);
# 2: the same layout, written by code whose partitions and groups are types, and numbered.
SNAPSHOT_FORMAT = 2
MAX_PARTITIONS = 10_000
PRODUCER_ID_BLOCK = 1000
# Producer ids are int64 on the wire (Kafka's producerId).
PRODUCER_ID_MAX = 2**63 - 1
Result = tuple[Any, ...]


# Topic configs a live topic keeps as it was created (`new_topic_config` says why).
FIXED_TOPIC_CONFIGS = frozenset({"durability.policy", "min.insync.replicas"})

# The commands that change brokers, topics or partitions (see topology_version).
TOPOLOGY_COMMANDS = frozenset(
    {
        "register_broker",
        "fence_broker",
        "unfence_broker",
        "shut_down_broker",
        "create_topic",
        "create_partitions",
        "alter_topic_config",
        "elect_leaders",
        "alter_partition_reassignments",
        "delete_topic",
        "alter_isr",
        "alter_isr_batch",
        "report_offline_replicas",
    }
)


def _ok(value: Any = None) -> Result:
    return ("ok", value)


def _err(error: RaftlogError) -> Result:
    return ("err", error.code, str(error))


class MetadataState:
    """The replicated state. Mutate it only through `apply`."""

    def __init__(self) -> None:
        # node_id -> {"node_id", "host", "port", "rack", "incarnation", "broker_epoch",
        #             "fenced", "registered_ms", "external", "controller_voters",
        #             "replication"} (the last three missing in brokers registered before they
        #             existed)
        self.brokers: dict[int, dict[str, Any]] = {}
        # Invariant: strictly increases; every registration takes the next value.
        self.next_broker_epoch = 1
        # name -> {"name", "topic_id", "config": {str: str},
        #          "partitions": [PartitionState, ...] (index = partition number)}
        self.topics: dict[str, dict[str, Any]] = {}
        # Partitions ever created: spreads the first replica of new topics across brokers.
        self.partitions_created = 0
        # group -> its state (groups.py describes the fields, states and invariants).
        self.groups: dict[str, GroupState] = {}
        # group -> {"topic:partition": [offset, metadata, commit_ms]}
        self.offsets: dict[str, dict[str, list[Any]]] = {}
        self.next_producer_id = 0
        # node_id -> {"broker_epoch", "replicas": [[topic, partition, reason], ...]}: the
        # replicas whose logs that broker reported offline (storage damage, a full disk). Only
        # an entry with the broker's current epoch counts (a re-registered broker reports anew).
        self.offline_replicas: dict[int, dict[str, Any]] = {}
        # Bytes per second each broker may fetch for the replicas it is adding in
        # reassignments (`raftlog partitions reassign --throttle`); 0: unthrottled.
        self.replication_throttle = 0
        # Count of applied commands: a cheap "has anything changed" for watchers.
        self.version = 0
        # Count of applied commands that changed brokers, topics or partitions (not groups or
        # offsets): what the brokers' logs and replicas follow, so that offset commits at
        # thousands per second do not make every broker re-examine every partition.
        self.topology_version = 0

    # -- the one entry point -------------------------------------------------------------------

    def apply(self, command: tuple[str, dict[str, Any]]) -> Result:
        if not isinstance(command, tuple) or len(command) != 2:
            return _err(InvalidRequestError(f"a metadata command is (name, args), got {command!r}"))
        name, args = command
        signature = _SIGNATURES.get(name) if isinstance(name, str) else None
        if signature is None:
            return _err(InvalidRequestError(f"unknown metadata command {name!r}"))
        try:
            signature.check(args)
            result: Result = getattr(self, "_cmd_" + name)(**args)
        except RaftlogError as e:
            return _err(e)
        self.version += 1
        if name in TOPOLOGY_COMMANDS:
            self.topology_version += 1
        return result

    def snapshot(self) -> MetadataState:
        return copy.deepcopy(self)

    def __getstate__(self) -> dict[str, Any]:
        """What a pysyncobj snapshot (and a deepcopy) holds: the fields, with partitions and
        groups as their plain records, and the format (`SNAPSHOT_FORMAT`)."""
        fields = dict(self.__dict__)
        fields["topics"] = {
            name: {**t, "partitions": [p.to_record() for p in t["partitions"]]}
            for name, t in self.topics.items()
        }
        fields["groups"] = {gid: g.to_record() for gid, g in self.groups.items()}
        fields["snapshot_format"] = SNAPSHOT_FORMAT
        return fields

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling (a pysyncobj snapshot, a deepcopy). Format 1 (no "snapshot_format",
        code up to a115116) is this format's layout with fields missing where the code that
        wrote it predates them; they get their defaults here, once, so commands never meet a
        partial record."""
        fields = dict(state)
        version = fields.pop("snapshot_format", 1)
        if not isinstance(version, int) or not 1 <= version <= SNAPSHOT_FORMAT:
            raise ValueError(
                f"metadata snapshot format {version!r}: this code reads formats 1 to "
                f"{SNAPSHOT_FORMAT} (a snapshot of newer code?)"
            )
        MetadataState.__init__(self)  # the defaults of the fields older formats lack
        self.__dict__.update(fields)
        self.topics = {
            name: {
                **t,
                "partitions": [
                    PartitionState.from_record(name, i, record)
                    for i, record in enumerate(t["partitions"])
                ],
            }
            for name, t in fields["topics"].items()
        }
        self.groups = {gid: GroupState.from_record(g) for gid, g in fields["groups"].items()}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MetadataState) and self.__dict__ == other.__dict__

    # -- brokers -------------------------------------------------------------------------------

    def _cmd_register_broker(
        self,
        node_id: int,
        host: str,
        port: int,
        rack: str | None,
        incarnation: str,
        now_ms: int,
        clean_shutdown: bool = False,
        external: list[Any] | None = None,
        controller_voters: list[str] | None = None,
        replication: list[Any] | None = None,
        kafka: list[Any] | None = None,
        kafka_external: list[Any] | None = None,
        metrics: list[Any] | None = None,
    ) -> Result:
        """A broker (re)starts: a new epoch fences any older incarnation still running.

        `external`, `replication`, `kafka`, `kafka_external` and `metrics` are [host, port] of
        its external, replication, Kafka-protocol and metrics listeners (raftlog/node.py), if
        it has them
        (followers reach a broker without a replication listener at its client listener);
        `controller_voters` the voter list it was configured with (nodes compare them).

        A restart is a leadership change: the old incarnation leaves every ISR it was in (as
        if fenced), so its partitions move to other in-sync replicas at a new leader epoch, and
        it rejoins each ISR only after catching up again (its log may have lost an unflushed
        tail). Where it was the last ISR member it stays, and leads again at a new epoch.
        """
        listeners = {
            "external": external,
            "replication": replication,
            "kafka": kafka,
            "kafka_external": kafka_external,
            "metrics": metrics,
        }
        for name, address in listeners.items():
            if address is not None and (
                len(address) != 2 or type(address[0]) is not str or type(address[1]) is not int
            ):
                raise InvalidRequestError(
                    f"register_broker: {name} must be [host, port], got {address!r:.100}"
                )
        epoch = self.next_broker_epoch
        self.next_broker_epoch += 1
        if node_id in self.brokers:
            self._remove_from_isrs(node_id, clean=clean_shutdown, restarted=True)
        self.brokers[node_id] = {
            "node_id": node_id,
            "host": host,
            "port": port,
            "rack": rack,
            "incarnation": incarnation,
            "broker_epoch": epoch,
            "fenced": False,
            "registered_ms": now_ms,
            "external": None if external is None else [external[0], external[1]],
            "controller_voters": None if controller_voters is None else list(controller_voters),
            "replication": None if replication is None else [replication[0], replication[1]],
        }
        for name in ("kafka", "kafka_external", "metrics"):
            address = listeners[name]
            if address is not None:  # absent, not None, in brokers registered without one
                self.brokers[node_id][name] = [address[0], address[1]]
        self._elect_for_returning(node_id)
        return _ok(epoch)

    def _check_epoch(self, node_id: int, broker_epoch: int) -> dict[str, Any]:
        broker = self.brokers.get(node_id)
        if broker is None or broker["broker_epoch"] != broker_epoch:
            raise StaleBrokerEpochError(
                f"broker {node_id} epoch {broker_epoch} is not the registered one "
                f"({broker['broker_epoch'] if broker else 'none'})"
            )
        return broker

    def _cmd_fence_broker(self, node_id: int, broker_epoch: int) -> Result:
        """The controller lost the broker's heartbeats: move its leaderships away and take it
        out of every ISR (where it is not the last member)."""
        broker = self._check_epoch(node_id, broker_epoch)
        if broker["fenced"]:
            return _ok(0)
        broker["fenced"] = True
        return _ok(self._remove_from_isrs(node_id, clean=True, restarted=False))

    def _cmd_shut_down_broker(self, node_id: int, broker_epoch: int) -> Result:
        """Controlled shutdown (Kafka's): a broker stopping cleanly asks first, so that its
        leaderships move to other in-sync replicas while it still answers, and clients find
        the new leaders at once rather than after its session timeout. It is fenced as a
        silent broker is, and stays fenced while its heartbeats go on, until it registers
        again (a new epoch: `register_broker` writes its entry anew)."""
        broker = self._check_epoch(node_id, broker_epoch)
        broker["shutting_down"] = True
        if broker["fenced"]:
            return _ok(0)
        broker["fenced"] = True
        return _ok(self._remove_from_isrs(node_id, clean=True, restarted=False))

    def _cmd_unfence_broker(self, node_id: int, broker_epoch: int) -> Result:
        broker = self._check_epoch(node_id, broker_epoch)
        if not broker["fenced"] or broker.get("shutting_down", False):
            return _ok(0)
        broker["fenced"] = False
        return _ok(self._elect_for_returning(node_id))

    def _live(self, node_id: int) -> bool:
        b = self.brokers.get(node_id)
        return b is not None and not b["fenced"]

    def _offline_on(self, node_id: int, topic: str, partition: int) -> bool:
        """Whether `node_id`'s current report lists its replica of topic-partition offline."""
        report = self.offline_replicas.get(node_id)
        return report is not None and any(
            t == topic and p == partition for t, p, _ in report["replicas"]
        )

    def _electable(self, topic: str, index: int) -> Callable[[int], bool]:
        """Whether a replica may lead topic-`index`: its broker is live and has not reported
        the replica's log offline."""
        return lambda node_id: self._live(node_id) and not self._offline_on(node_id, topic, index)

    # -- partition leadership: the rules live in partition_state.py ----------------------------

    def _remove_from_isrs(self, node_id: int, clean: bool, restarted: bool) -> int:
        """`node_id` stopped (fenced) or restarted: it leaves every ISR where others remain
        and gives up its leaderships (PartitionState.remove_broker). Returns how many
        leaderships moved."""
        moved = 0
        for topic in self._sorted_topics():
            rules = TopicRules.of(topic["config"])
            for i, p in enumerate(topic["partitions"]):
                electable = self._electable(topic["name"], i)
                moved += p.remove_broker(node_id, clean, restarted, rules, electable)
        return moved

    def _elect_for_returning(self, node_id: int) -> int:
        """Offline partitions whose ISR or ELR holds `node_id` get it back as leader."""
        elected = 0
        for topic in self._sorted_topics():
            rules = TopicRules.of(topic["config"])
            for p in topic["partitions"]:
                elected += p.elect_returning(node_id, rules)
        return elected

    # -- topics --------------------------------------------------------------------------------

    def _sorted_topics(self) -> list[dict[str, Any]]:
        return [self.topics[name] for name in sorted(self.topics)]

    def _assign_replicas(self, partitions: int, replication_factor: int) -> list[list[int]]:
        """Replicas per partition: leaders spread evenly; replicas in distinct racks if set.

        Brokers are ordered so that racks alternate (Kafka's rack-aware order); partition p's
        replicas are the `replication_factor` brokers from position start + p in that ring.
        """
        live = sorted(n for n in self.brokers if self._live(n))
        if replication_factor > len(live):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} needs {replication_factor} live "
                f"brokers; {len(live)} are live"
            )
        by_rack: dict[str, list[int]] = {}
        for n in live:
            by_rack.setdefault(self.brokers[n]["rack"] or "", []).append(n)
        ring: list[int] = []
        racks = sorted(by_rack)
        while len(ring) < len(live):
            for rack in racks:
                if by_rack[rack]:
                    ring.append(by_rack[rack].pop(0))
        start = self.partitions_created % len(ring)
        return [
            [ring[(start + p + j) % len(ring)] for j in range(replication_factor)]
            for p in range(partitions)
        ]

    def _cmd_create_topic(
        self,
        name: str,
        topic_id: str,
        partitions: int,
        replication_factor: int,
        config: dict[str, str],
    ) -> Result:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"topic {name!r}: partitions must be 1..{MAX_PARTITIONS}, got {partitions!r}"
            )
        if not isinstance(replication_factor, int) or replication_factor < 1:
            raise InvalidReplicationFactorError(
                f"topic {name!r}: replication factor must be >= 1, got {replication_factor!r}"
            )
        config = {str(k): str(v) for k, v in config.items()}
        LogConfig.from_topic_config(config)
        min_isr = int(config.get("min.insync.replicas", "1"))
        if min_isr > replication_factor:
            raise InvalidReplicationFactorError(
                f"topic {name!r}: min.insync.replicas={min_isr} is larger than the replication "
                f"factor {replication_factor}: acks=all could never succeed"
            )
        replicas = self._assign_replicas(partitions, replication_factor)
        self.partitions_created += partitions
        rules = TopicRules.of(config)
        self.topics[name] = {
            "name": name,
            "topic_id": topic_id,
            "config": config,
            "partitions": [PartitionState.new(name, i, r, rules) for i, r in enumerate(replicas)],
        }
        self._rebalance_groups_for(name)
        return _ok(topic_id)

    def _cmd_alter_topic_config(self, name: str, changes: dict[str, str | None]) -> Result:
        """Change topic `name`'s configs (Kafka's IncrementalAlterConfigs SET and DELETE):
        each key set to its value, or back to the broker's default with None. Returns the new
        config. `new_topic_config` has the rules."""
        config = self.new_topic_config(name, changes)
        self.topics[name]["config"] = config
        return _ok(dict(config))

    def new_topic_config(self, name: str, changes: dict[str, str | None]) -> dict[str, str]:
        """Topic `name`'s config with `changes` applied, or the error that refuses them
        (nothing changes; a validate-only request calls this alone). Every key must be a known
        topic config and every value valid (LogConfig's checks, as at creation).
        `durability.policy` and `min.insync.replicas` stay as created, for now: the first
        changes what an acknowledged record's replicas promise, the second the ISR rules every
        partition's state was checked against."""
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        fixed = sorted(k for k in changes if k in FIXED_TOPIC_CONFIGS)
        if fixed:
            raise InvalidConfigError(
                f"topic {name!r}: {', '.join(fixed)} cannot be changed on a live topic (set "
                "it when the topic is created)"
            )
        config = {
            k: v for k, v in topic["config"].items() if k not in changes or changes[k] is not None
        }
        config.update({str(k): str(v) for k, v in changes.items() if v is not None})
        LogConfig.from_topic_config(config)  # raises InvalidConfigError naming the key
        return config

    def _cmd_create_partitions(
        self, name: str, partitions: int, assignments: list[list[int]] | None = None
    ) -> Result:
        """Grow topic `name` to `partitions` (Kafka's CreatePartitions). The new partitions
        are placed as a new topic's are (leaders spread, racks alternate), or on
        `assignments`, one replica list per new partition. Shrinking is refused: a record's
        partition would change under its key, and data would be dropped. Groups subscribed
        to the topic rebalance, as on a topic's creation. Returns the new partition count."""
        replicas = self.new_partitions(name, partitions, assignments)
        topic = self.topics[name]
        current = len(topic["partitions"])
        self.partitions_created += len(replicas)
        rules = TopicRules.of(topic["config"])
        topic["partitions"].extend(
            PartitionState.new(name, current + i, r, rules) for i, r in enumerate(replicas)
        )
        self._rebalance_groups_for(name)
        return _ok(partitions)

    def new_partitions(
        self, name: str, partitions: int, assignments: list[list[int]] | None = None
    ) -> list[list[int]]:
        """The replicas create_partitions would give the new partitions of `name`, or the
        error it would refuse with; changes nothing (a validate-only request asks this)."""
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        current = len(topic["partitions"])
        if not isinstance(partitions, int) or partitions <= current:
            raise InvalidPartitionsError(
                f"topic {name!r} has {current} partitions: it can grow to more, not to "
                f"{partitions!r} (partitions are never removed)"
            )
        if partitions > MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"topic {name!r}: partitions must be at most {MAX_PARTITIONS}, got {partitions}"
            )
        # The topic's replication factor: partition 0's target replicas (while a reassignment
        # moves it, its replicas also hold the leaving ones: a chaos run grew a topic by
        # partitions of four replicas that way).
        factor = len(topic["partitions"][0].target_replicas())
        added = partitions - current
        if assignments is None:
            return self._assign_replicas(added, factor)
        return self._checked_assignments(name, current, added, factor, assignments)

    def _checked_assignments(
        self, name: str, first: int, count: int, factor: int, assignments: list[list[int]]
    ) -> list[list[int]]:
        """`assignments` for partitions first..first+count-1, or InvalidReplicaAssignmentError
        naming what is wrong: one list per new partition, `factor` distinct registered
        live brokers each (Kafka's rules for a CreatePartitions assignment)."""
        if len(assignments) != count:
            raise InvalidReplicaAssignmentError(
                f"topic {name!r}: {count} new partitions need {count} replica assignments, "
                f"got {len(assignments)}"
            )
        out = []
        for i, replicas in enumerate(assignments):
            where = f"topic {name!r} partition {first + i}"
            if not isinstance(replicas, (list, tuple)) or not all(_is_int(r) for r in replicas):
                raise InvalidReplicaAssignmentError(
                    f"{where}: replicas must be broker ids, got {replicas!r:.200}"
                )
            if len(replicas) != factor:
                raise InvalidReplicaAssignmentError(
                    f"{where}: {len(replicas)} replicas given; the topic's replication factor "
                    f"is {factor}"
                )
            if len(set(replicas)) != len(replicas):
                raise InvalidReplicaAssignmentError(
                    f"{where}: a broker is named twice in {replicas}"
                )
            unknown = sorted(r for r in replicas if r not in self.brokers)
            if unknown:
                raise InvalidReplicaAssignmentError(f"{where}: unknown brokers {unknown}")
            down = sorted(r for r in replicas if not self._live(r))
            if down:
                raise InvalidReplicaAssignmentError(
                    f"{where}: brokers {down} are fenced or shutting down (a new partition's "
                    "replicas must be live: each starts in its ISR)"
                )
            out.append(list(replicas))
        return out

    def _cmd_elect_leaders(self, partitions: list[list[Any]] | None = None) -> Result:
        """Preferred-leader elections (Kafka's ElectLeaders, type preferred): each named
        [topic, partition] gets its first replica back as leader if that is a live ISR
        member; None: every partition whose preferred leader does not lead. Returns
        [[topic, partition, error code, message], ...] (code 0: elected), one per partition
        asked for, or per partition tried when None: a refusal of one does not refuse the
        others (UnknownTopicOrPartitionError, ElectionNotNeededError,
        PreferredLeaderNotAvailableError)."""
        wanted: list[tuple[str, int]] = []
        if partitions is None:
            for topic in self._sorted_topics():
                for p in topic["partitions"]:
                    if p.leader != p.replicas[0]:
                        wanted.append((topic["name"], p.partition))
        else:
            for entry in partitions:
                if len(entry) != 2 or type(entry[0]) is not str or not _is_int(entry[1]):
                    raise InvalidRequestError(
                        f"elect_leaders: each partition is [topic, partition], got {entry!r:.200}"
                    )
                wanted.append((entry[0], entry[1]))
        results: list[list[Any]] = []
        for topic_name, index in wanted:
            found = self.topics.get(topic_name)
            if found is None or not 0 <= index < len(found["partitions"]):
                error: RaftlogError = UnknownTopicOrPartitionError(
                    f"unknown partition {topic_name}-{index}"
                )
                results.append([topic_name, index, error.code, str(error)])
                continue
            p = found["partitions"][index]
            rules = TopicRules.of(found["config"])
            if p.elect_preferred(rules, self._electable(topic_name, index)):
                results.append([topic_name, index, 0, None])
                continue
            if p.leader == p.replicas[0]:
                error = ElectionNotNeededError(
                    f"{topic_name}-{index}: its preferred leader {p.replicas[0]} leads already"
                )
            else:
                error = PreferredLeaderNotAvailableError(
                    f"{topic_name}-{index}: its preferred leader {p.replicas[0]} is not a live "
                    f"in-sync replica (isr {p.isr})"
                )
            results.append([topic_name, index, error.code, str(error)])
        return _ok(results)

    def _cmd_alter_partition_reassignments(
        self, reassignments: list[list[Any]], throttle: int | None = None
    ) -> Result:
        """Start, replace or cancel reassignments (Kafka's AlterPartitionReassignments, KIP-455):
        each entry is [topic, partition, target replicas] or [topic, partition, None] (cancel).
        Returns [[topic, partition, error code, message], ...], one per entry (code 0: started,
        or done at once; PartitionState.reassign has the rules). A refused entry does not
        refuse the others. Target brokers must be registered (a fenced one's replica joins when
        it is back). `throttle`, if given, replaces the replication throttle (bytes per second,
        0 removes it) in the same command, so a move never starts unthrottled."""
        if throttle is not None and not 0 <= throttle < 2**63:
            raise InvalidRequestError(
                f"alter_partition_reassignments: throttle {throttle} must be bytes per second "
                ">= 0 (0 removes it)"
            )
        for entry in reassignments:
            ok_shape = (
                type(entry) in (list, tuple)
                and len(entry) == 3
                and type(entry[0]) is str
                and _is_int(entry[1])
                and (
                    entry[2] is None
                    or (type(entry[2]) in (list, tuple) and all(_is_int(r) for r in entry[2]))
                )
            )
            if not ok_shape:
                raise InvalidRequestError(
                    "alter_partition_reassignments: each entry is [topic, partition, "
                    f"[broker, ...] | None], got {entry!r:.200}"
                )
        results: list[list[Any]] = []
        for topic_name, index, target in reassignments:
            found = self.topics.get(topic_name)
            try:
                if found is None or not 0 <= index < len(found["partitions"]):
                    raise UnknownTopicOrPartitionError(f"unknown partition {topic_name}-{index}")
                p = found["partitions"][index]
                rules = TopicRules.of(found["config"])
                electable = self._electable(topic_name, index)
                if target is None:
                    p.cancel_reassignment(rules, electable)
                else:
                    unknown = sorted(r for r in target if r not in self.brokers)
                    if unknown:
                        raise InvalidReplicaAssignmentError(
                            f"{topic_name}-{index}: unknown brokers {unknown}"
                        )
                    p.reassign(list(target), rules, electable)
            except RaftlogError as e:
                results.append([topic_name, index, e.code, str(e)])
                continue
            results.append([topic_name, index, 0, None])
        if throttle is not None:
            self.replication_throttle = throttle
        return _ok(results)

    def preferred_elections_due(self, imbalance_percentage: int) -> list[list[Any]]:
        """The [topic, partition]s an automatic leader rebalance elects (Kafka's
        auto.leader.rebalance.enable): for each broker whose share of its preferred
        partitions led by others is above `imbalance_percentage` (Kafka's
        leader.imbalance.per.broker.percentage), those it could lead now (a live ISR member).
        Reads only."""
        preferred: dict[int, int] = {}
        ready: dict[int, list[list[Any]]] = {}
        elsewhere: dict[int, int] = {}
        for topic in self._sorted_topics():
            name = topic["name"]
            for p in topic["partitions"]:
                b = p.replicas[0]
                preferred[b] = preferred.get(b, 0) + 1
                state = p.preferred_state(self._electable(name, p.partition))
                if state != "leads":
                    elsewhere[b] = elsewhere.get(b, 0) + 1
                if state == "ready":
                    ready.setdefault(b, []).append([name, p.partition])
        due: list[list[Any]] = []
        for b in sorted(ready):
            if elsewhere[b] * 100 > imbalance_percentage * preferred[b]:
                due.extend(ready[b])
        return due

    def _cmd_delete_topic(self, name: str) -> Result:
        if name not in self.topics:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        del self.topics[name]
        prefix = name + ":"
        for offsets in self.offsets.values():
            for key in [k for k in offsets if k.startswith(prefix)]:
                del offsets[key]
        self._rebalance_groups_for(name)
        return _ok()

    def _cmd_alter_isr(
        self,
        topic: str,
        partition: int,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
        broker_epochs: list[list[int]] | None = None,
    ) -> Result:
        """A partition leader changes its ISR; only with the current epochs (no zombies).

        A replica may join only while its broker is live, and only as the incarnation whose
        fetches the leader saw (`broker_epochs`: [[node_id, broker_epoch], ...], KIP-903), so
        a fetch from before a restart cannot put a replica that lost data back in the ISR.
        """
        p = self._partition(topic, partition)
        if any(len(e) != 2 for e in broker_epochs or []):
            raise InvalidRequestError(
                f"{topic}-{partition}: broker_epochs must be [[node_id, broker_epoch], ...], "
                f"got {broker_epochs!r:.200}"
            )
        stated = {int(n): int(e) for n, e in broker_epochs or []}

        def check_joiner(r: int) -> None:
            broker = self.brokers.get(r)
            if broker is None or broker["fenced"]:
                raise InvalidRequestError(
                    f"{topic}-{partition}: broker {r} cannot join the ISR: it is fenced"
                )
            if self._offline_on(r, topic, partition):
                raise InvalidRequestError(
                    f"{topic}-{partition}: broker {r} cannot join the ISR: it reported its "
                    "replica's log offline"
                )
            if r in stated and stated[r] != broker["broker_epoch"]:
                raise StaleBrokerEpochError(
                    f"{topic}-{partition}: broker {r} caught up as epoch {stated[r]}, but its "
                    f"registered epoch is {broker['broker_epoch']} (it restarted)"
                )

        rules = TopicRules.of(self.topics[topic]["config"])
        return _ok(
            p.alter_isr(
                leader_id,
                leader_epoch,
                partition_epoch,
                isr,
                rules,
                check_joiner,
                self._electable(topic, partition),
            )
        )

    def _cmd_alter_isr_batch(self, changes: list[Any]) -> Result:
        """Many partition leaders' ISR changes in one Raft entry (a broker sends them
        together: a failover or a restart changes thousands at once, one entry each was a
        storm of commands); one result each. Each is checked, then refused or applied, on its
        own, exactly as an `alter_isr` command."""
        check = _SIGNATURES["alter_isr"].check
        results = []
        for c in changes:
            try:
                check(c)
                results.append(self._cmd_alter_isr(**c))
            except RaftlogError as e:
                results.append(_err(e))
        return _ok(results)

    def _partition(self, topic: str, partition: int) -> PartitionState:
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < len(t["partitions"]):
            raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{partition}")
        p: PartitionState = t["partitions"][partition]
        return p

    # -- consumer groups -----------------------------------------------------------------------
    #
    # A group's states, transitions and invariants live in groups.py (GroupState); these
    # commands check their arguments, look the group up and call its transition, which refuses
    # what must be refused before any change and checks the group's invariants at its end (in
    # production too: a broken group is a bug that must stop here, not spread through
    # snapshots).

    def _topic_partitions(self, topic: str) -> int | None:
        t = self.topics.get(topic)
        return None if t is None else len(t["partitions"])

    def _group(self, group_id: str) -> GroupState:
        group = self.groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"unknown group {group_id!r}")
        return group

    def _cmd_join_group(
        self,
        group_id: str,
        member_id: str,
        client_id: str,
        instance_id: str | None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        topics: list[str],
        protocols: list[str] | list[list[Any]],
        now_ms: int,
        protocol_type: str = NATIVE_PROTOCOL_TYPE,
        new_member_id: str | None = None,
    ) -> Result:
        """Add (or refresh) a member and count it as joined for the group's rebalance.

        Returns the member's view (GroupState.member_view). A view in state PreparingRebalance
        means the rebalance waits for other members: the coordinator answers the join once the
        generation has moved on (groups.join_outcome). A refused join leaves no empty group
        behind and uses no member number. A Kafka client's join (`protocol_type` its own,
        "consumer") offers [[name, metadata bytes], ...] as `protocols`; `new_member_id` is
        the id its coordinator handed out (GroupState.join). Entries of older code lack both."""
        if not group_id:
            raise InvalidRequestError("group id must not be empty")
        if protocol_type != NATIVE_PROTOCOL_TYPE:
            protocols = kafka_protocols(group_id, protocols)
        elif not all(type(p) is str for p in protocols):
            raise InvalidRequestError(f"group {group_id!r}: assignor names must be strings")
        member: dict[str, Any] = {
            "member_id": member_id,
            "client_id": client_id,
            "instance_id": instance_id,
            "session_timeout_ms": session_timeout_ms,
            "rebalance_timeout_ms": rebalance_timeout_ms,
            "topics": sorted(set(topics)),
            "protocols": list(protocols),
            "joined_ms": now_ms,
        }
        group = self.groups.get(group_id) or GroupState(group_id)
        view = group.join(member, self._topic_partitions, protocol_type, new_member_id)
        self.groups[group_id] = group
        return _ok(view)

    def _cmd_sync_group(
        self, group_id: str, member_id: str, generation: int, assignments: list[Any] | None
    ) -> Result:
        """A Kafka member's SyncGroup (GroupState.sync); the leader's carries `assignments`,
        [[member id, assignment bytes, [[topic, partition], ...]], ...] (the bytes as sent,
        the partitions as the coordinator decoded them). Returns the member's assignment
        bytes, or None while the group waits for its leader's."""
        checked = None if assignments is None else kafka_assignments(group_id, assignments)
        table = None if checked is None else {m: (raw, tps) for m, raw, tps in checked}
        return _ok(self._group(group_id).sync(member_id, generation, table, self._topic_partitions))

    def _rebalance_groups_for(self, topic: str) -> None:
        for gid in sorted(self.groups):
            self.groups[gid].topic_changed(topic, self._topic_partitions)

    def _cmd_leave_group(
        self, group_id: str, member_ids: list[str], now_ms: int | None = None
    ) -> Result:
        """Members leave (on close) or expire (the coordinator saw no heartbeat); the others
        rebalance. `now_ms` starts the rebalance deadline (entries of older code lack it: the
        coordinator's next tick_group starts it then)."""
        gone = self._group(group_id).leave(member_ids, now_ms, self._topic_partitions)
        return _ok(len(gone))

    def _cmd_tick_group(self, group_id: str, now_ms: int) -> Result:
        """The coordinator's clock reaches a rebalancing group (GroupState.tick): a rebalance
        without a deadline gets one; one past its deadline completes without the members that
        did not rejoin. Returns the members removed. Nothing happens (and nothing is refused)
        when the group is not rebalancing or its deadline is ahead: a tick proposed just
        before a completion is harmless."""
        return _ok(self._group(group_id).tick(now_ms, self._topic_partitions))

    def _cmd_commit_offsets(
        self, group_id: str, member_id: str, generation: int, offsets: list[Any], now_ms: int
    ) -> Result:
        """Store `[topic, partition, offset, metadata]` entries; refused from a stale
        generation, a non-member or a non-owner (groups.check_commit), and for partitions that
        do not exist (Kafka: UNKNOWN_TOPIC_OR_PARTITION), in which case nothing of the commit
        is stored.

        A group with no members accepts commits with generation -1 (a consumer that assigns
        partitions itself and uses the group only to keep offsets, as Kafka allows).
        """
        _check_entries(group_id, offsets, width=4)
        group = self.groups.get(group_id)
        if not groups.check_commit(
            group_id, group, member_id, generation, [(e[0], e[1]) for e in offsets]
        ):
            self._check_partitions_exist(f"commit to group {group_id!r}", offsets)
        # A member's partitions exist: assignments name existing partitions only, and deleting
        # a topic takes its partitions out of every assignment (GroupState.check).
        store = self.offsets.setdefault(group_id, {})
        for topic, partition, offset, metadata in offsets:
            store[f"{topic}:{partition}"] = [offset, metadata, now_ms]
        if group is None:
            self.groups[group_id] = GroupState(group_id)
        return _ok(len(offsets))

    def _check_partitions_exist(self, what: str, entries: list[Any]) -> None:
        topics = self.topics
        unknown = []
        for entry in entries:
            t = topics.get(entry[0])
            if t is None or entry[1] >= len(t["partitions"]):
                unknown.append(f"{entry[0]}-{entry[1]}")
        if unknown:
            shown = ", ".join(unknown[:_UNKNOWN_SHOWN_MAX])
            more = (
                f" and {len(unknown) - _UNKNOWN_SHOWN_MAX} more"
                if len(unknown) > _UNKNOWN_SHOWN_MAX
                else ""
            )
            raise UnknownTopicOrPartitionError(
                f"{what} refused: no such partition {shown}{more}; nothing was stored"
            )

    def _cmd_commit_batch(self, commits: list[Any]) -> Result:
        """Many commits in one Raft entry (the coordinator batches them); one result each.

        Each commit is checked, then refused or applied, on its own: a refused one leaves
        nothing behind and does not stop the others."""
        check = _SIGNATURES["commit_offsets"].check
        results = []
        for c in commits:
            try:
                check(c)
                results.append(self._cmd_commit_offsets(**c))
            except RaftlogError as e:
                results.append(_err(e))
        return _ok(results)

    def _cmd_reset_offsets(self, group_id: str, offsets: list[Any], now_ms: int) -> Result:
        """Set committed offsets by hand (the replay primitive); only for an empty group, and
        only for partitions that exist."""
        _check_entries(group_id, offsets, width=3)
        group = self.groups.get(group_id)
        if group is not None and group.members:
            raise GroupNotEmptyError(
                f"group {group_id!r} has {len(group.members)} active members; stop them "
                "before resetting offsets"
            )
        self._check_partitions_exist(f"offset reset of group {group_id!r}", offsets)
        store = self.offsets.setdefault(group_id, {})
        for topic, partition, offset in offsets:
            store[f"{topic}:{partition}"] = [offset, "reset", now_ms]
        if group is None:
            self.groups[group_id] = GroupState(group_id)
        return _ok(len(offsets))

    def _cmd_delete_group(self, group_id: str) -> Result:
        self._group(group_id).delete()
        del self.groups[group_id]
        self.offsets.pop(group_id, None)
        return _ok()

    def _cmd_noop(self) -> Result:
        """Nothing: a new leader commits one to know it has applied every earlier entry."""
        return _ok()

    # -- offline replicas ----------------------------------------------------------------------

    def _cmd_report_offline_replicas(
        self, node_id: int, broker_epoch: int, replicas: list[list[Any]]
    ) -> Result:
        """A broker reports the full set of its replicas whose logs are offline (each
        [topic, partition, reason]); it replaces the broker's previous report, and an empty
        set clears it. Entries for partitions that do not exist or are not the broker's are
        dropped (a topic deleted meanwhile).

        Each reported replica leaves its partition's ISR and ELR (its data cannot be trusted,
        or cannot be read) where another member remains, and gives up the leadership to
        another live ISR/ELR member. As the last one it stays in the ISR, and keeps leading if
        it led: nobody else holds the data, and its clients get LogOfflineError naming the
        damage until the log reopens."""
        self._check_epoch(node_id, broker_epoch)
        for e in replicas:
            if type(e) not in _SEQUENCE_TYPES or len(e) != 3 or type(e[0]) is not str:
                raise InvalidRequestError(
                    f"broker {node_id}: offline replica {e!r:.200} must be [topic, partition, "
                    "reason]"
                )
        kept: list[list[Any]] = []
        for topic, partition, reason in replicas:
            t = self.topics.get(topic)
            if t is None or not isinstance(partition, int):
                continue
            if not 0 <= partition < len(t["partitions"]):
                continue
            if node_id in t["partitions"][partition].replicas:
                kept.append([str(topic), partition, str(reason)])
        kept.sort(key=lambda e: (e[0], e[1]))
        reports = self.offline_replicas
        if kept:
            reports[node_id] = {"broker_epoch": broker_epoch, "replicas": kept}
        else:
            reports.pop(node_id, None)
        for topic_name, partition, _ in kept:
            t = self.topics[topic_name]
            electable = self._electable(topic_name, partition)
            t["partitions"][partition].leave_for_offline_log(
                node_id, TopicRules.of(t["config"]), electable
            )
        return _ok(len(kept))

    # -- producer ids --------------------------------------------------------------------------

    def _cmd_allocate_producer_ids(self, count: int = PRODUCER_ID_BLOCK) -> Result:
        if count < 1 or self.next_producer_id + count > PRODUCER_ID_MAX:
            raise InvalidRequestError(
                f"producer id block: count must be 1..{PRODUCER_ID_MAX - self.next_producer_id}"
                f" (ids are int64 and {self.next_producer_id} are taken), got {count}"
            )
        start = self.next_producer_id
        self.next_producer_id += count
        return _ok(start)

    # -- reads (not commands) ------------------------------------------------------------------

    def committed(self, group_id: str) -> dict[tuple[str, int], tuple[int, str, int]]:
        out = {}
        for key, (offset, metadata, ts) in self.offsets.get(group_id, {}).items():
            topic, _, partition = key.rpartition(":")
            out[(topic, int(partition))] = (offset, metadata, ts)
        return out


# -- argument checks ---------------------------------------------------------------------------

# How many unknown partitions a refusal lists before it says "and N more".
_UNKNOWN_SHOWN_MAX = 8


def _check_entries(group_id: str, entries: list[Any], width: int) -> None:
    """`[topic, partition, offset(, metadata)]` entries: str, int >= 0, int >= 0(, str).

    On the hot path (every commit of every batch): one pass of `type()` comparisons, and a
    second, slower one only to name the bad entry."""
    for e in entries:
        if (
            type(e) not in _SEQUENCE_TYPES
            or len(e) != width
            or type(e[0]) is not str
            or type(e[1]) is not int
            or type(e[2]) is not int
            or e[1] < 0
            or e[2] < 0
            or (width == 4 and type(e[3]) is not str)
        ):
            _refuse_entry(group_id, e, width)


def _refuse_entry(group_id: str, e: object, width: int) -> NoReturn:
    if (
        isinstance(e, list | tuple)
        and len(e) == width
        and _is_int(e[1])
        and _is_int(e[2])
        and (e[1] < 0 or e[2] < 0)
    ):
        raise InvalidRequestError(
            f"group {group_id!r}: {e[0]}-{e[1]} offset {e[2]}: partition and offset must be >= 0"
        )
    raise InvalidRequestError(
        f"group {group_id!r}: offset entry {e!r:.200} must be [topic (str), partition (int), "
        f"offset (int){', metadata (str)' if width == 4 else ''}]"
    )


_SIGNATURES = {
    name[len("_cmd_") :]: Signature(name[len("_cmd_") :], getattr(MetadataState, name))
    for name in sorted(vars(MetadataState))
    if name.startswith("_cmd_")
}
