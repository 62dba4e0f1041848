"""A seeded simulation of partition replication: replication cores on several brokers, the real
metadata state machine as controller, a lossy network, crashes, a fake clock.

What is real: `PartitionCore` (raftlog/replication/core.py) on every broker, `MetadataState`
(raftlog/metadata/state.py) deciding fencing, elections, ISR changes and the ELR, and the
leader-epoch cache rules (`LeaderEpochCache`). What is simulated: the logs (batches of integer
values in memory, with a flushed prefix that a power loss keeps), the network (messages with
random delay, loss, duplication, and cut links), the Raft quorum (one linearizable copy of the
state that brokers see with a lag, only over links that are up), heartbeats, and a producer
client sending acks=all batches of unique values.

Every step checks the invariants (Kafka's RaftEventSimulationTest is the model):
- committed data never changes: the value at each offset below any replica's high watermark
  is the same on every replica, at every time (no replica truncates below its HW);
- a replica that becomes leader holds every committed offset;
- one leader per epoch; leader epochs and each leader's high watermark never go back;
- every acks=all acknowledgement names values that are committed at those offsets.
After the faults, the cluster heals and must converge: every replica's log identical, every
acknowledged value at its offset.

Run one seed with a trace: `python -m tests.sim.run --seed N --trace`.
"""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from raftlog.errors import FencedLeaderEpochError, RaftlogError, error_from_code
from raftlog.metadata.partition_state import PartitionState
from raftlog.metadata.state import NO_LEADER, MetadataState
from raftlog.replication.core import (
    LOG_ACTIONS,
    Append,
    CompleteProduce,
    FollowerFetch,
    HighWatermarkChanged,
    PartitionConfig,
    PartitionCore,
    ProposeIsr,
    Role,
    Truncate,
    TruncateFully,
    perform_on_log,
)
from raftlog.storage.epoch_cache import LeaderEpochCache

CONTROLLER = 0
CLIENT = -1


class InvariantViolation(AssertionError):
    pass


# -- the log -----------------------------------------------------------------------------------


class MemoryEpochCache(LeaderEpochCache):
    """The real cache's rules, kept in memory (its "file" survives crashes with the log)."""

    def _commit(self, epochs: list[int], starts: list[int]) -> None:
        self._epochs, self._starts = epochs, starts


@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    epoch: int
    values: tuple[int, ...]

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.values)


class SimLog:
    """A partition log of batches of integer values; `flushed` is the recovery point."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.by_offset: dict[int, int] = {}  # offset -> value, for the checks
        self.start = 0
        self.flushed = 0
        self.epochs = MemoryEpochCache("")

    # LogView
    @property
    def log_start_offset(self) -> int:
        return self.start

    @property
    def log_end_offset(self) -> int:
        return self.batches[-1].next_offset if self.batches else self.start

    @property
    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for_epoch(epoch, self.log_end_offset)

    # reads
    def value_at(self, offset: int) -> int | None:
        return self.by_offset.get(offset) if offset >= self.start else None

    def values_from(self, offset: int, end: int | None = None) -> dict[int, int]:
        stop = self.log_end_offset if end is None else min(end, self.log_end_offset)
        return {o: self.by_offset[o] for o in range(max(offset, self.start), stop)}

    def _index(self, b: Batch) -> None:
        for i, v in enumerate(b.values):
            self.by_offset[b.base_offset + i] = v

    def _reindex(self) -> None:
        self.by_offset = {}
        for b in self.batches:
            self._index(b)

    def read(self, offset: int, max_offset: int, max_batches: int) -> list[Batch]:
        out = []
        for b in self.batches:
            if b.next_offset <= offset or b.next_offset > max_offset:
                continue
            out.append(b)
            if len(out) >= max_batches:
                break
        return out

    # writes
    def append_leader(self, values: tuple[int, ...], epoch: int) -> Batch:
        if epoch < self.latest_epoch:
            raise FencedLeaderEpochError(f"append at epoch {epoch} < {self.latest_epoch}")
        if epoch > self.latest_epoch:
            self.epochs.assign(epoch, self.log_end_offset)
        b = Batch(self.log_end_offset, epoch, values)
        self.batches.append(b)
        self._index(b)
        return b

    def assign_epoch(self, epoch: int) -> None:
        """A new leader's epoch starts at the log end (PartitionLog.assign_epoch)."""
        self.epochs.assign(epoch, self.log_end_offset)

    def append_as_follower(self, data: Iterable[Batch]) -> None:
        """Fetched batches, as they are (PartitionLog.append_as_follower)."""
        batches = list(data)
        expected = self.log_end_offset
        for b in batches:
            if b.base_offset != expected:
                raise InvariantViolation(
                    f"follower append at {b.base_offset}, log continues at {expected}"
                )
            expected = b.next_offset
        for b in batches:
            if b.epoch > self.latest_epoch:
                self.epochs.assign(b.epoch, b.base_offset)
            self.batches.append(b)
            self._index(b)

    def truncate_to(self, offset: int) -> None:
        """Remove the batch holding `offset` and everything after (PartitionLog.truncate_to)."""
        self.batches = [b for b in self.batches if b.next_offset <= offset]
        self._reindex()
        end = self.log_end_offset
        if end < self.start:
            self.start = end
        self.epochs.truncate_from_end(min(offset, end))
        self.flushed = min(self.flushed, end)

    def truncate_fully(self, offset: int) -> None:
        self.batches = []
        self.by_offset = {}
        self.start = offset
        self.flushed = offset
        self.epochs.clear()

    def delete_records_before(self, offset: int) -> None:
        if offset <= self.start:
            return
        self.start = offset
        self.batches = [b for b in self.batches if b.next_offset > offset]
        self.epochs.truncate_from_start(offset)

    def lose_unflushed(self) -> None:
        """Power loss: what was not fsynced is gone; recovery cuts the epoch cache."""
        self.batches = [b for b in self.batches if b.next_offset <= self.flushed]
        self._reindex()
        self.epochs.truncate_from_end(self.log_end_offset)


# -- messages ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchRequest:
    request_id: int
    broker_epoch: int
    partitions: tuple[tuple[str, FollowerFetch], ...]


@dataclass(frozen=True, slots=True)
class FetchPartition:
    tp: str
    error: RaftlogError | None
    diverging: tuple[int, int] | None
    out_of_range: bool
    high_watermark: int
    log_start_offset: int
    batches: tuple[Batch, ...]


@dataclass(frozen=True, slots=True)
class FetchResponse:
    request_id: int
    partitions: tuple[FetchPartition, ...]


@dataclass(frozen=True, slots=True)
class Produce:
    request_id: int
    tp: str
    values: tuple[int, ...]
    acks: int
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    request_id: int
    error: RaftlogError | None
    base_offset: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class AlterIsr:
    request_id: int
    tp: str
    proposal: ProposeIsr


@dataclass(frozen=True, slots=True)
class AlterIsrResponse:
    request_id: int
    tp: str
    error: RaftlogError | None


@dataclass(slots=True)
class Message:
    deliver_at: int
    seq: int
    src: int
    dst: int
    body: Any


class Network:
    """Messages between nodes with random delay, loss and duplication; cut links drop them."""

    def __init__(self, rng: random.Random, loss: float, duplicate: float, delay_ms_max: int):
        self.rng = rng
        self.loss = loss
        self.duplicate = duplicate
        self.delay_ms_max = delay_ms_max
        self.cut: set[tuple[int, int]] = set()  # (src, dst) pairs that drop everything
        self.in_flight: list[Message] = []
        self._seq = itertools.count()

    def up(self, src: int, dst: int) -> bool:
        return (src, dst) not in self.cut

    def send(self, now: int, src: int, dst: int, body: Any) -> None:
        if not self.up(src, dst) or self.rng.random() < self.loss:
            return
        copies = 2 if self.rng.random() < self.duplicate else 1
        for _ in range(copies):
            at = now + self.rng.randint(0, self.delay_ms_max)
            self.in_flight.append(Message(at, next(self._seq), src, dst, body))

    def due(self, now: int) -> list[Message]:
        ready = [m for m in self.in_flight if m.deliver_at <= now]
        if ready:
            self.in_flight = [m for m in self.in_flight if m.deliver_at > now]
            ready.sort(key=lambda m: (m.deliver_at, m.seq))
        # A link cut while the message was in flight drops it too.
        return [m for m in ready if self.up(m.src, m.dst)]


# -- the cluster -------------------------------------------------------------------------------


@dataclass(slots=True)
class SimConfig:
    seed: int
    brokers: int = 3
    partitions: int = 2
    min_isr: int = 2
    fsync_policy: bool = False
    unclean: bool = False
    steps: int = 3000
    heal_steps: int = 3000
    loss: float = 0.02
    duplicate: float = 0.01
    delay_ms_max: int = 8
    fault_rate: float = 0.004
    produce_rate: float = 0.3
    power_loss: bool = False  # only meaningful with the fsync policy
    replica_lag_time_max_ms: int = 300
    session_timeout_ms: int = 400
    heartbeat_ms: int = 50
    fetch_timeout_ms: int = 150
    produce_timeout_ms: int = 800
    metadata_lag_p: float = 0.4

    @classmethod
    def random(cls, seed: int) -> SimConfig:
        r = random.Random(seed ^ 0x5EED)
        fsync = r.random() < 0.4
        return cls(
            seed=seed,
            min_isr=r.choice([1, 2, 2]),
            fsync_policy=fsync,
            power_loss=fsync and r.random() < 0.7,
            loss=r.choice([0.0, 0.02, 0.1]),
            duplicate=r.choice([0.0, 0.01, 0.05]),
            fault_rate=r.choice([0.002, 0.005, 0.01]),
        )


def tp_name(i: int) -> str:
    return f"t-{i}"


class Broker:
    def __init__(self, sim: Simulation, node_id: int):
        self.sim = sim
        self.node_id = node_id
        self.alive = True
        self.registered = False
        self.broker_epoch = -1
        self.clean_shutdown = False
        self.logs: dict[str, SimLog] = {}
        self.hw_checkpoint: dict[str, int] = {}
        self.cores: dict[str, PartitionCore] = {}
        self.seen_partitions: dict[str, PartitionState] = {}
        self.metadata_version = -1
        self.next_fetch_at: dict[int, int] = {}
        self.fetch_inflight: dict[int, tuple[int, int, dict[str, FollowerFetch]]] = {}
        self.next_heartbeat = 0
        self.pending_flush: dict[str, tuple[int, int]] = {}  # tp -> (due, offset)
        # token -> (client node, request id, appended batch) of waiting acks=all produces
        self.waiting: dict[int, tuple[int, int, Batch]] = {}
        self.proposals: dict[int, tuple[str, ProposeIsr]] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def crash(self, power_loss: bool) -> None:
        self.alive = False
        self.registered = False
        self.cores.clear()
        self.seen_partitions.clear()
        self.metadata_version = -1
        self.fetch_inflight.clear()
        self.next_fetch_at.clear()
        self.pending_flush.clear()
        self.waiting.clear()
        self.proposals.clear()
        self.clean_shutdown = False
        for log in self.logs.values():
            if power_loss:
                log.lose_unflushed()
            else:
                log.flushed = log.flushed  # the page cache survives a process crash

    def stop_cleanly(self) -> None:
        for tp, log in self.logs.items():
            log.flushed = log.log_end_offset
            core = self.cores.get(tp)
            if core is not None:
                self.hw_checkpoint[tp] = core.high_watermark
        self.crash(power_loss=False)
        self.clean_shutdown = True

    def restart(self) -> None:
        self.alive = True
        for log in self.logs.values():
            # Recovery fsyncs what it kept, and the checkpointed HW is clamped to the log.
            log.flushed = log.log_end_offset

    # -- the step ----------------------------------------------------------------------------

    def tick(self, now: int) -> None:
        sim = self.sim
        if not self.alive:
            return
        if not self.registered:
            if sim.net.up(self.node_id, CONTROLLER) and sim.net.up(CONTROLLER, self.node_id):
                self.broker_epoch = sim.controller.register(self.node_id, self.clean_shutdown)
                self.registered = True
                self.clean_shutdown = False
            return
        if now >= self.next_heartbeat:
            sim.net.send(now, self.node_id, CONTROLLER, Heartbeat(self.broker_epoch))
            self.next_heartbeat = now + sim.config.heartbeat_ms
        if sim.net.up(CONTROLLER, self.node_id) and sim.rng.random() < sim.config.metadata_lag_p:
            self.apply_metadata(sim.controller.state, sim.controller.version, now)
        for tp, (due, offset) in list(self.pending_flush.items()):
            if due <= now:
                del self.pending_flush[tp]
                log = self.logs[tp]
                log.flushed = max(log.flushed, min(offset, log.log_end_offset))
                self.schedule_flush(tp, now)  # group commit: what came during this fsync
                core = self.cores.get(tp)
                if core is not None:
                    self.perform(tp, core.on_durable(log.flushed, now), now)
        for tp, core in list(self.cores.items()):
            self.perform(tp, core.tick(now), now)
            if sim.rng.random() < 0.05:
                self.hw_checkpoint[tp] = core.high_watermark
        self.fetch(now)

    def schedule_flush(self, tp: str, now: int) -> None:
        log = self.logs[tp]
        if (
            self.sim.config.fsync_policy
            and tp not in self.pending_flush
            and log.flushed < log.log_end_offset
        ):
            offset = log.log_end_offset
            self.pending_flush[tp] = (now + self.sim.rng.randint(1, 15), offset)

    # -- metadata ----------------------------------------------------------------------------

    def apply_metadata(self, state: MetadataState, version: int, now: int) -> None:
        if version <= self.metadata_version:
            return
        self.metadata_version = version
        epochs = {n: b["broker_epoch"] for n, b in state.brokers.items()}
        topic = state.topics["t"]
        for i, p in enumerate(topic["partitions"]):
            tp = tp_name(i)
            if self.node_id not in p.replicas:
                continue
            log = self.logs.setdefault(tp, SimLog())
            core = self.cores.get(tp)
            if core is None:
                core = PartitionCore(
                    self.node_id,
                    tp,
                    log,
                    high_watermark=self.hw_checkpoint.get(tp, 0),
                    config=self.sim.partition_config,
                )
                self.cores[tp] = core
            seen = self.seen_partitions.get(tp)
            if seen == p:
                continue
            self.seen_partitions[tp] = copy.deepcopy(p)
            if p.leader_epoch > core.leader_epoch:
                if p.leader == self.node_id:
                    self.sim.check_new_leader(self, tp, p.leader_epoch)
                    actions = core.become_leader(
                        p.leader_epoch,
                        p.partition_epoch,
                        p.replicas,
                        p.isr,
                        epochs,
                        self.sim.partition_config,
                        now,
                    )
                elif p.leader != NO_LEADER:
                    actions = core.become_follower(
                        p.leader, p.leader_epoch, p.partition_epoch, p.replicas
                    )
                else:
                    actions = core.go_offline(p.leader_epoch, p.partition_epoch)
                self.perform(tp, actions, now)
            elif (
                core.role is Role.LEADER
                and p.leader_epoch == core.leader_epoch
                and p.partition_epoch > core.partition_epoch
            ):
                self.perform(tp, core.update_isr(p.isr, p.partition_epoch, epochs, now), now)

    # -- actions -----------------------------------------------------------------------------

    def perform(self, tp: str, actions: list[Any], now: int) -> None:
        sim = self.sim
        log = self.logs[tp]
        core = self.cores[tp]
        for a in actions:
            if isinstance(a, LOG_ACTIONS):
                # The broker's own code performs it (ReplicaManager._perform calls the same
                # function); around it, what the simulation checks and tracks.
                if isinstance(a, Truncate | TruncateFully):
                    sim.check_truncation(self, tp, a)
                perform_on_log(core, log, a, now)
                if isinstance(a, Truncate | TruncateFully) and tp in self.pending_flush:
                    due, offset = self.pending_flush[tp]
                    self.pending_flush[tp] = (due, min(offset, log.log_end_offset))
                elif isinstance(a, Append):
                    self.schedule_flush(tp, now)
            elif isinstance(a, ProposeIsr):
                rid = next(sim.ids)
                self.proposals[rid] = (tp, a)
                sim.net.send(now, self.node_id, CONTROLLER, AlterIsr(rid, tp, a))
            elif isinstance(a, CompleteProduce):
                client, request_id, batch = self.waiting.pop(a.token)
                resp = ProduceResponse(request_id, a.error, batch.base_offset)
                sim.net.send(now, self.node_id, client, resp)
            elif isinstance(a, HighWatermarkChanged):
                pass
            else:
                raise AssertionError(f"unknown action {a!r}")

    # -- follower: fetching ------------------------------------------------------------------

    def fetch(self, now: int) -> None:
        by_leader: dict[int, dict[str, FollowerFetch]] = {}
        for tp, core in self.cores.items():
            if core.role is Role.FOLLOWER:
                by_leader.setdefault(core.leader_id, {})[tp] = core.fetch_spec()
        for leader, specs in by_leader.items():
            inflight = self.fetch_inflight.get(leader)
            if inflight is not None and now - inflight[1] < self.sim.config.fetch_timeout_ms:
                continue
            if now < self.next_fetch_at.get(leader, 0):
                continue
            rid = next(self.sim.ids)
            self.fetch_inflight[leader] = (rid, now, specs)
            req = FetchRequest(rid, self.broker_epoch, tuple(specs.items()))
            self.sim.net.send(now, self.node_id, leader, req)

    def on_fetch_response(self, src: int, resp: FetchResponse, now: int) -> None:
        inflight = self.fetch_inflight.get(src)
        if inflight is None or inflight[0] != resp.request_id:
            return  # a duplicate or a late answer
        del self.fetch_inflight[src]
        specs = inflight[2]
        backoff = True
        for part in resp.partitions:
            core = self.cores.get(part.tp)
            if core is None or part.tp not in specs:
                continue
            actions = core.on_fetch_response(
                specs[part.tp],
                part.error,
                part.diverging,
                part.high_watermark,
                part.log_start_offset,
                part.batches,
                part.out_of_range,
            )
            if actions or part.diverging is not None:
                backoff = False
            self.perform(part.tp, actions, now)
            if core.role is Role.FOLLOWER and part.error is None:
                self.perform(part.tp, core.after_follower_write(now), now)
        # An answer with nothing new: wait a little (the real fetcher long-polls instead).
        self.next_fetch_at[src] = now + (self.sim.rng.randint(1, 10) if backoff else 0)

    # -- leader: serving -----------------------------------------------------------------------

    def on_fetch(self, src: int, req: FetchRequest, now: int) -> None:
        out = []
        for tp, spec in req.partitions:
            core = self.cores.get(tp)
            log = self.logs.get(tp)
            if core is None or log is None:
                from raftlog.errors import NotLeaderOrFollowerError

                err = NotLeaderOrFollowerError(f"{tp} not here")
                out.append(FetchPartition(tp, err, None, False, 0, 0, ()))
                continue
            answer, actions = core.on_follower_fetch(src, req.broker_epoch, spec, now)
            self.perform(tp, actions, now)
            batches: tuple[Batch, ...] = ()
            if answer.error is None and answer.diverging is None and not answer.out_of_range:
                batches = tuple(log.read(spec.fetch_offset, answer.max_offset, 3))
            out.append(
                FetchPartition(
                    tp,
                    answer.error,
                    answer.diverging,
                    answer.out_of_range,
                    core.high_watermark,
                    log.log_start_offset,
                    batches,
                )
            )
        self.sim.net.send(now, self.node_id, src, FetchResponse(req.request_id, tuple(out)))

    def on_produce(self, src: int, req: Produce, now: int) -> None:
        core = self.cores.get(req.tp)
        error = core.check_produce(req.acks) if core is not None else None
        if core is None:
            from raftlog.errors import NotLeaderOrFollowerError

            error = NotLeaderOrFollowerError(f"{req.tp} not hosted by {self.node_id}")
        if error is not None:
            self.sim.net.send(now, self.node_id, src, ProduceResponse(req.request_id, error, -1))
            return
        assert core is not None
        log = self.logs[req.tp]
        batch = log.append_leader(req.values, core.leader_epoch)
        self.sim.record_append(self, req.tp, batch)
        self.schedule_flush(req.tp, now)
        self.perform(req.tp, core.on_leader_append(now), now)
        if req.acks != -1:
            self.sim.net.send(
                now, self.node_id, src, ProduceResponse(req.request_id, None, batch.base_offset)
            )
            return
        token = next(self.sim.ids)
        self.waiting[token] = (src, req.request_id, batch)
        actions = core.wait_for_commit(batch.next_offset - 1, now + req.timeout_ms, token, now)
        self.perform(req.tp, actions, now)

    def on_alter_isr_response(self, resp: AlterIsrResponse, now: int) -> None:
        sent = self.proposals.pop(resp.request_id, None)
        core = self.cores.get(resp.tp)
        if sent is None or core is None or core.role is not Role.LEADER:
            return
        tp, proposal = sent
        if resp.error is not None:
            from raftlog.errors import InvalidRequestError, StaleBrokerEpochError

            definitive = isinstance(resp.error, InvalidRequestError | StaleBrokerEpochError)
            self.perform(tp, core.on_isr_proposal_refused(proposal, definitive), now)


class Controller:
    """The metadata quorum, as one linearizable copy of the real state machine."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.state = MetadataState()
        self.version = 0
        self.heard: dict[int, tuple[int, int]] = {}  # node -> (broker epoch, time)
        self.incarnations = itertools.count(1)

    def apply(self, command: str, /, **args: Any) -> Any:
        result = self.state.apply((command, args))
        self.version += 1
        self.sim.check_metadata()
        if result[0] == "err":
            raise error_from_code(result[1], result[2])
        return result[1]

    def register(self, node_id: int, clean: bool) -> int:
        epoch = int(
            self.apply(
                "register_broker",
                node_id=node_id,
                host="sim",
                port=node_id,
                rack=None,
                incarnation=f"inc-{next(self.incarnations)}",
                now_ms=self.sim.now,
                clean_shutdown=clean,
            )
        )
        self.heard[node_id] = (epoch, self.sim.now)
        return epoch

    def on_message(self, src: int, body: Any, now: int) -> None:
        if isinstance(body, Heartbeat):
            b = self.state.brokers.get(src)
            if b is not None and b["broker_epoch"] == body.broker_epoch:
                self.heard[src] = (body.broker_epoch, now)
        elif isinstance(body, AlterIsr):
            prop = body.proposal
            topic, _, part = body.tp.rpartition("-")
            error: RaftlogError | None = None
            try:
                self.apply(
                    "alter_isr",
                    topic=topic,
                    partition=int(part),
                    leader_id=src,
                    leader_epoch=prop.leader_epoch,
                    partition_epoch=prop.partition_epoch,
                    isr=list(prop.isr),
                    broker_epochs=[list(e) for e in prop.broker_epochs],
                )
            except RaftlogError as e:
                error = e
            self.sim.net.send(
                now, CONTROLLER, src, AlterIsrResponse(body.request_id, body.tp, error)
            )

    def tick(self, now: int) -> None:
        for node_id, b in sorted(self.state.brokers.items()):
            heard = self.heard.get(node_id)
            fresh = heard is not None and heard[0] == b["broker_epoch"]
            silent = now - heard[1] if heard is not None and fresh else 1 << 30
            if not b["fenced"] and silent > self.sim.config.session_timeout_ms:
                self.apply("fence_broker", node_id=node_id, broker_epoch=b["broker_epoch"])
            elif b["fenced"] and silent <= self.sim.config.session_timeout_ms:
                self.apply("unfence_broker", node_id=node_id, broker_epoch=b["broker_epoch"])


@dataclass(slots=True)
class Fault:
    kind: str
    nodes: tuple[int, ...]
    until: int


class Simulation:
    def __init__(self, config: SimConfig, trace: Callable[[str], None] | None = None):
        self.config = config
        self.rng = random.Random(config.seed)
        self.trace = trace
        self.now = 0
        self.ids = itertools.count(1)
        self.net = Network(self.rng, config.loss, config.duplicate, config.delay_ms_max)
        self.partition_config = PartitionConfig(
            min_insync_replicas=config.min_isr,
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            fsync_policy=config.fsync_policy,
            isr_proposal_timeout_ms=500,
        )
        # Invariant state.
        self.committed: dict[str, dict[int, int]] = {}
        self.verified: dict[tuple[int, str], int] = {}
        self.leaders_by_epoch: dict[tuple[str, int], int] = {}
        self.leader_hw: dict[tuple[int, str, int], int] = {}
        self.partition_epochs: dict[str, int] = {}
        self.lost_allowed = config.unclean
        self.stats = {"faults": 0, "truncations": 0, "elections": 0}
        self.controller = Controller(self)
        self.brokers = {n: Broker(self, n) for n in range(1, config.brokers + 1)}
        for b in self.brokers.values():
            b.broker_epoch = self.controller.register(b.node_id, clean=True)
            b.registered = True
        topic_config = {"min.insync.replicas": str(config.min_isr)}
        if config.fsync_policy:
            topic_config["durability.policy"] = "fsync"
        if config.unclean:
            topic_config["unclean.leader.election.enable"] = "true"
        self.controller.apply(
            "create_topic",
            name="t",
            topic_id="t-id",
            partitions=config.partitions,
            replication_factor=config.brokers,
            config=topic_config,
        )
        self.faults: list[Fault] = []
        self.producing = True
        self.next_value = itertools.count(1)
        self.client_requests: dict[int, tuple[str, tuple[int, ...], int]] = {}
        self.acked: dict[str, dict[int, int]] = {}  # tp -> offset -> value
        self.acked_count = 0

    def log(self, msg: str) -> None:
        if self.trace is not None:
            self.trace(f"[{self.now:>7} ms] {msg}")

    # -- invariants ------------------------------------------------------------------------------

    def violation(self, msg: str) -> None:
        raise InvariantViolation(f"seed {self.config.seed} at {self.now} ms: {msg}")

    def check_metadata(self) -> None:
        for i, p in enumerate(self.controller.state.topics.get("t", {}).get("partitions", [])):
            tp = tp_name(i)
            prev = self.partition_epochs.get(tp, -1)
            if p.leader_epoch < prev:
                self.violation(f"{tp}: leader epoch went back {prev} -> {p.leader_epoch}")
            self.partition_epochs[tp] = p.leader_epoch

    def check_new_leader(self, broker: Broker, tp: str, epoch: int) -> None:
        self.stats["elections"] += 1
        self.log(f"broker {broker.node_id} leads {tp} at epoch {epoch}")
        other = self.leaders_by_epoch.setdefault((tp, epoch), broker.node_id)
        if other != broker.node_id:
            self.violation(f"{tp} epoch {epoch} has two leaders: {other} and {broker.node_id}")
        if self.lost_allowed:
            return
        log = broker.logs[tp]
        for offset, value in self.committed.get(tp, {}).items():
            if offset >= log.log_start_offset and log.value_at(offset) != value:
                self.violation(
                    f"new leader {broker.node_id} of {tp} (epoch {epoch}) lacks committed offset "
                    f"{offset} (value {value}; it has {log.value_at(offset)}, log end "
                    f"{log.log_end_offset})"
                )

    def check_truncation(self, broker: Broker, tp: str, action: Truncate | TruncateFully) -> None:
        self.stats["truncations"] += 1
        core = broker.cores[tp]
        log = broker.logs[tp]
        self.log(
            f"broker {broker.node_id} {tp}: {action} (leo {log.log_end_offset}, hw "
            f"{core.high_watermark})"
        )
        cut = (
            action.offset
            if isinstance(action, Truncate)
            else min(action.offset, log.log_end_offset)
        )
        if cut < core.high_watermark and not self.lost_allowed:
            self.violation(
                f"broker {broker.node_id} truncates {tp} to {action.offset}, below its high "
                f"watermark {core.high_watermark}"
            )
        key = (broker.node_id, tp)
        self.verified[key] = min(self.verified.get(key, 0), cut)

    def record_append(self, broker: Broker, tp: str, batch: Batch) -> None:
        self.log(f"broker {broker.node_id} appends {tp} {batch}")

    def check_state(self) -> None:
        for b in self.brokers.values():
            if not b.alive:
                continue
            for tp, core in b.cores.items():
                log = b.logs[tp]
                hw = core.high_watermark
                if core.role is Role.LEADER:
                    key3 = (b.node_id, tp, core.leader_epoch)
                    if hw < self.leader_hw.get(key3, -1):
                        self.violation(f"leader {b.node_id} of {tp}: HW went back to {hw}")
                    self.leader_hw[key3] = hw
                key = (b.node_id, tp)
                start = max(self.verified.get(key, 0), log.log_start_offset)
                if start >= hw:
                    continue
                committed = self.committed.setdefault(tp, {})
                for offset, value in log.values_from(start, hw).items():
                    known = committed.setdefault(offset, value)
                    if known != value and not self.lost_allowed:
                        self.violation(
                            f"{tp} offset {offset}: broker {b.node_id} has {value} below its HW "
                            f"{hw}, but {known} was committed there"
                        )
                self.verified[key] = hw

    # -- faults ----------------------------------------------------------------------------------

    def maybe_fault(self) -> None:
        cfg = self.config
        for f in [f for f in self.faults if f.until <= self.now]:
            self.heal(f)
        if self.rng.random() >= cfg.fault_rate or len(self.faults) >= 2:
            return
        busy = {n for f in self.faults for n in f.nodes}
        free = [n for n in self.brokers if n not in busy]
        if not free:
            return
        kinds = ["kill", "restart", "isolate", "cut-controller", "cut-link", "pause"]
        if cfg.power_loss:
            kinds.append("power-loss")
        kind = self.rng.choice(kinds)
        node = self.rng.choice(free)
        until = self.now + self.rng.randint(50, 1500)
        nodes: tuple[int, ...] = (node,)
        b = self.brokers[node]
        if kind in ("kill", "power-loss"):
            b.crash(power_loss=kind == "power-loss")
        elif kind == "restart":
            b.stop_cleanly()
            until = self.now + self.rng.randint(1, 100)
        elif kind == "isolate":
            for other in [CONTROLLER, CLIENT, *self.brokers]:
                if other != node:
                    self.net.cut |= {(node, other), (other, node)}
        elif kind == "cut-controller":
            self.net.cut |= {(node, CONTROLLER), (CONTROLLER, node)}
        elif kind == "cut-link":
            other = self.rng.choice([n for n in self.brokers if n != node])
            nodes = (node, other)
            self.net.cut |= {(node, other), (other, node)}
        elif kind == "pause":
            b.alive = False  # SIGSTOP: no ticks, no messages; state kept
        self.stats["faults"] += 1
        self.faults.append(Fault(kind, nodes, until))
        self.log(f"FAULT {kind} {nodes} until {until}")

    def heal(self, f: Fault) -> None:
        self.faults.remove(f)
        self.log(f"HEAL {f.kind} {f.nodes}")
        if f.kind in ("kill", "power-loss", "restart"):
            self.brokers[f.nodes[0]].restart()
        elif f.kind == "pause":
            self.brokers[f.nodes[0]].alive = True
        else:
            self.net.cut = {
                (a, b) for a, b in self.net.cut if a not in f.nodes and b not in f.nodes
            }

    def heal_all(self) -> None:
        for f in list(self.faults):
            self.heal(f)
        self.net.cut.clear()

    # -- the client ------------------------------------------------------------------------------

    def client_step(self) -> None:
        if not self.producing or self.rng.random() >= self.config.produce_rate:
            return
        i = self.rng.randrange(self.config.partitions)
        tp = tp_name(i)
        p = self.controller.state.topics["t"]["partitions"][i]
        leader = p.leader
        if leader == NO_LEADER or self.rng.random() < 0.1:
            leader = self.rng.choice(list(self.brokers))  # a client with stale metadata
        values = tuple(next(self.next_value) for _ in range(self.rng.randint(1, 3)))
        acks = -1 if self.rng.random() < 0.9 else 1
        rid = next(self.ids)
        self.client_requests[rid] = (tp, values, acks)
        self.net.send(
            self.now, CLIENT, leader, Produce(rid, tp, values, acks, self.config.produce_timeout_ms)
        )

    def on_produce_response(self, resp: ProduceResponse) -> None:
        req = self.client_requests.pop(resp.request_id, None)
        if req is None:
            return  # a duplicate
        tp, values, acks = req
        if resp.error is not None or acks != -1:
            return
        acked = self.acked.setdefault(tp, {})
        committed = self.committed.get(tp, {})
        for i, v in enumerate(values):
            offset = resp.base_offset + i
            acked[offset] = v
            self.acked_count += 1
            if committed.get(offset) != v and not self.lost_allowed:
                self.violation(
                    f"{tp}: acks=all acknowledged value {v} at offset {offset}, but the committed "
                    f"value there is {committed.get(offset)}"
                )

    # -- running -----------------------------------------------------------------------------------

    def deliver(self) -> None:
        for m in self.net.due(self.now):
            body = m.body
            if m.dst == CLIENT:
                self.on_produce_response(body)
                continue
            if m.dst == CONTROLLER:
                self.controller.on_message(m.src, body, self.now)
                continue
            b = self.brokers[m.dst]
            if not b.alive or not b.registered:
                continue
            if isinstance(body, FetchRequest):
                b.on_fetch(m.src, body, self.now)
            elif isinstance(body, FetchResponse):
                b.on_fetch_response(m.src, body, self.now)
            elif isinstance(body, Produce):
                b.on_produce(m.src, body, self.now)
            elif isinstance(body, AlterIsrResponse):
                b.on_alter_isr_response(body, self.now)

    def step(self) -> None:
        self.now += self.rng.randint(1, 5)
        self.deliver()
        self.controller.tick(self.now)
        for b in self.brokers.values():
            b.tick(self.now)
        self.client_step()
        self.check_state()

    def run(self) -> dict[str, Any]:
        for _ in range(self.config.steps):
            self.maybe_fault()
            self.step()
        self.producing = False
        self.heal_all()
        self.net.loss = 0.0
        self.net.duplicate = 0.0
        for _ in range(self.config.heal_steps):
            self.step()
            if self.converged():
                break
        self.check_final()
        return {
            "seed": self.config.seed,
            "acked": self.acked_count,
            "committed": sum(len(c) for c in self.committed.values()),
            **self.stats,
            "time_ms": self.now,
        }

    def converged(self) -> bool:
        for i in range(self.config.partitions):
            tp = tp_name(i)
            p = self.controller.state.topics["t"]["partitions"][i]
            if p.leader == NO_LEADER or len(p.isr) != len(p.replicas):
                return False
            leader = self.brokers[p.leader]
            core = leader.cores.get(tp)
            if core is None or core.role is not Role.LEADER:
                return False
            end = leader.logs[tp].log_end_offset
            if core.high_watermark != end:
                return False
            for b in self.brokers.values():
                c = b.cores.get(tp)
                if c is None or b.logs[tp].log_end_offset != end or c.high_watermark != end:
                    return False
        return True

    def check_final(self) -> None:
        if not self.converged():
            state = {
                tp_name(i): (p.leader, p.isr, p.elr, p.leader_epoch)
                for i, p in enumerate(self.controller.state.topics["t"]["partitions"])
            }
            logs = {
                (b.node_id, tp): (
                    log.log_start_offset,
                    log.log_end_offset,
                    b.cores[tp].role.value if tp in b.cores else None,
                    b.cores[tp].high_watermark if tp in b.cores else None,
                )
                for b in self.brokers.values()
                for tp, log in b.logs.items()
            }
            self.violation(f"did not converge after healing: metadata {state}, logs {logs}")
        for i in range(self.config.partitions):
            tp = tp_name(i)
            reference = None
            for b in self.brokers.values():
                values = b.logs[tp].values_from(0)
                if reference is None:
                    reference = values
                elif values != reference:
                    self.violation(f"{tp}: replicas differ after healing")
            assert reference is not None
            for offset, v in self.acked.get(tp, {}).items():
                if reference.get(offset) != v and not self.lost_allowed:
                    self.violation(f"{tp}: acknowledged value {v} at {offset} lost")
