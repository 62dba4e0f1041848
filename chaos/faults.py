"""Faults as data, and injectors that always heal (Redpanda's FailureSpec + injector model).

A `FaultSpec(kind, targets, start_s, duration_s)` says what to break, where and when; it is
plain data, written into the history (`f: fault`) and into report.json. `schedule(seed, ...)`
draws a seeded mix of faults for a run with quiet periods between them (steady, fault and
recovery phases): the same seed and arguments give the same schedule, byte for byte.

`inject(spec, cluster, network)` turns a spec into a context manager: entering breaks, leaving
heals, whatever happens inside (an exception, a KeyboardInterrupt) and even if healing one
target fails (every target is healed before the first error is raised). Healing means: killed
or stopped nodes are started again, paused nodes are continued, network rules are removed.

Kinds and their targets (node ids; `role` names a target to resolve when the fault starts,
because which node leads is only known then: "controller", "leader:<topic>-<partition>",
"follower:<topic>-<partition>", "random"):

    kill              kill -9 each target (docker kill); heal: start it again (storage
                      recovery runs)
    kill-all          kill -9 every node at once; heal: start them all
    pause             SIGSTOP each target (docker pause); heal: SIGCONT (docker unpause)
    restart           graceful stop (SIGTERM; docker stop) of each target; heal: start it again
    rolling-restart   graceful restart of each target in turn, each back before the next
    isolate           each target cut off from every other node (network)
    split             the targets on one side, the other nodes on the other (network)
    bridge            targets[0] sees both sides; the other nodes are split around it
    one-way           packets from targets[0] to targets[1:] are dropped, not the reverse
    link              a toxic (`options`: toxic, stream, attributes) on the TCP proxy in front
                      of each target, so on every client and replica-fetch connection to it
                      (chaos/link_faults.py); heal: the toxic is removed
    disk-full         each target's log directory (a small tmpfs) filled; heal: emptied
    torn-tail         kill -9 each target, its unsynced tails cut or garbled (`options`: mode);
                      heal: started again (chaos/disk_faults.py)
    bitflip           a byte flipped in an old segment of each partition the target follows,
                      its leader killed, the partition read from offset 0 while the window
                      lasts; heal: leader started, byte restored if no one set it aside
    reassign          one replica of up to two partitions moved to a node that holds none
                      (`options`: throttle), every second one also growing the topic by a
                      partition (`grow`), and the target killed while the moves run; heal:
                      started again (chaos/move_faults.py). Needs more nodes than the
                      replication factor for real moves (with as many, the replicas reorder)

Network faults need a `network` with `apply(grudge)` / `heal()` (chaos/netns.py); process
faults need a `cluster` with the small ProcessControl interface below; `inject` handles these
two. Link, disk and move faults have their own injectors (chaos/link_faults.py,
chaos/disk_faults.py, chaos/move_faults.py), which the runner picks by kind. The options of
link, torn-tail and reassign faults are drawn from a second generator seeded by the seed
alone, so adding them left every older schedule as it was.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from raftlog.errors import RaftlogError

PROCESS_KINDS = ("kill", "kill-all", "pause", "restart", "rolling-restart")
NETWORK_KINDS = ("isolate", "split", "bridge", "one-way")
# Toxics on the proxy in front of a node (chaos/link_faults.py).
LINK_KINDS = ("link",)
# Damage to a replica's files (chaos/disk_faults.py).
DISK_KINDS = ("disk-full", "torn-tail", "bitflip")
# Replicas moved and the topic grown while a node dies (chaos/move_faults.py).
MOVE_KINDS = ("reassign",)
KINDS = PROCESS_KINDS + NETWORK_KINDS + LINK_KINDS + DISK_KINDS + MOVE_KINDS
# The throttles a `reassign` fault picks from (bytes per second; 0: none).
MOVE_THROTTLES = (0, 256 * 1024)
# The toxics a `link` fault picks from (Toxiproxy's names), in the order a schedule cycles
# through them after a seeded shuffle, so that any six link faults in a row cover them all.
LINK_TOXICS = ("latency", "bandwidth", "slicer", "reset_peer", "timeout", "limit_data")
TAIL_MODES = ("cut", "garble")

# Schedule defaults, after Redpanda's chaos phases: a steady phase before the first fault, a
# fault window, a quiet period to recover before the next, a recovery phase at the end. A
# pysyncobj election takes 0.4-2 s here and a broker is fenced after its session timeout (3 s
# by default), so a fault shorter than ~5 s tests little and a quiet period under ~5 s does not
# let the cluster settle.
STEADY_S = 5.0
FAULT_S_MIN, FAULT_S_MAX = 5.0, 20.0
QUIET_S_MIN, QUIET_S_MAX = 5.0, 15.0
RECOVERY_S = 10.0


class FaultError(RuntimeError):
    """A fault could not be injected or healed (the message names the fault and the node).

    Not a RaftlogError: those carry wire codes that must stay unique; this never goes on the
    wire."""


# A node id -> the node ids it does not receive packets from. Node 0 is the host (the clients).
Grudge = dict[int, frozenset[int]]


@dataclass(frozen=True, slots=True)
class FaultSpec:
    kind: str
    targets: tuple[int, ...] = ()
    start_s: float = 0.0
    duration_s: float = 0.0
    role: str = ""  # resolved into targets when the fault starts (see the module docstring)
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise FaultError(f"fault kind {self.kind!r}: must be one of {', '.join(KINDS)}")
        if self.start_s < 0 or self.duration_s < 0:
            raise FaultError(f"fault {self.kind}: start_s and duration_s must be >= 0")

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "kind": self.kind,
            "targets": list(self.targets),
            "start_s": self.start_s,
            "duration_s": self.duration_s,
        }
        if self.role:
            d["role"] = self.role
        if self.options:
            d["options"] = dict(self.options)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FaultSpec:
        return cls(
            kind=d["kind"],
            targets=tuple(int(t) for t in d.get("targets", ())),
            start_s=float(d.get("start_s", 0.0)),
            duration_s=float(d.get("duration_s", 0.0)),
            role=d.get("role", ""),
            options=dict(d.get("options", {})),
        )

    def with_targets(self, targets: Sequence[int]) -> FaultSpec:
        return FaultSpec(self.kind, tuple(targets), self.start_s, self.duration_s, "", self.options)


# -- schedules ---------------------------------------------------------------------------------


def _targets(kind: str, nodes: Sequence[int], rng: random.Random) -> tuple[int, ...]:
    n = len(nodes)
    if kind == "kill-all":
        return tuple(nodes)
    if kind in LINK_KINDS or kind in DISK_KINDS or kind in MOVE_KINDS:
        return (rng.choice(list(nodes)),)
    if kind in ("kill", "pause", "restart", "isolate"):
        # At most a minority at once: the promise under test holds while a majority lives.
        return tuple(sorted(rng.sample(list(nodes), rng.randint(1, max((n - 1) // 2, 1)))))
    if kind == "rolling-restart":
        return tuple(nodes)
    if kind == "split":
        return tuple(sorted(rng.sample(list(nodes), max((n - 1) // 2, 1))))
    if kind == "bridge":
        return (rng.choice(list(nodes)),)
    if kind == "one-way":
        src = rng.choice(list(nodes))
        return (src, *sorted(x for x in nodes if x != src))
    raise FaultError(f"no target rule for fault kind {kind!r}")


def schedule(
    seed: int,
    duration_s: float,
    kinds: Sequence[str],
    nodes: Sequence[int],
    steady_s: float = STEADY_S,
    fault_s: tuple[float, float] = (FAULT_S_MIN, FAULT_S_MAX),
    quiet_s: tuple[float, float] = (QUIET_S_MIN, QUIET_S_MAX),
    recovery_s: float = RECOVERY_S,
) -> list[FaultSpec]:
    """A seeded sequence of faults that do not overlap, with quiet periods between them.

    The run is: `steady_s` without faults, then faults separated by quiet periods, then at
    least `recovery_s` without faults before `duration_s` ends. Times are rounded to the
    millisecond so that a schedule survives JSON unchanged.
    """
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise FaultError(f"fault kinds {list(kinds)}: each must be one of {', '.join(KINDS)}")
    if not nodes:
        raise FaultError("a schedule needs at least one node")
    if not (0 < fault_s[0] <= fault_s[1] and 0 <= quiet_s[0] <= quiet_s[1]):
        raise FaultError(f"bad ranges: fault_s={fault_s}, quiet_s={quiet_s}")
    rng = random.Random(seed)
    options = _Options(seed)
    out: list[FaultSpec] = []
    t = steady_s
    end = duration_s - recovery_s
    while True:
        length = round(rng.uniform(*fault_s), 3)
        if t + length > end:
            return out
        kind = rng.choice(list(kinds))
        out.append(
            FaultSpec(kind, _targets(kind, nodes, rng), round(t, 3), length, "", options.next(kind))
        )
        t += length + rng.uniform(*quiet_s)


class _Options:
    """The options of a schedule's faults: toxics cycle through a seeded order of LINK_TOXICS
    with seeded attributes; torn tails alternate cut and garble from a seeded start."""

    def __init__(self, seed: int):
        self.rng = random.Random(f"options-{seed}")
        self.toxics = list(LINK_TOXICS)
        self.rng.shuffle(self.toxics)
        self.count: dict[str, int] = {}

    def next(self, kind: str) -> dict[str, Any]:
        n = self.count[kind] = self.count.get(kind, -1) + 1
        if kind == "link":
            toxic = self.toxics[n % len(self.toxics)]
            return toxic_options(toxic, self.rng)
        if kind == "torn-tail":
            return {"mode": TAIL_MODES[(n + self.rng.randrange(2)) % 2]}
        if kind == "reassign":
            return {"grow": n % 2 == 1, "throttle": self.rng.choice(MOVE_THROTTLES)}
        return {}


def toxic_options(toxic: str, rng: random.Random) -> dict[str, Any]:
    """A toxic's stream and attributes (Toxiproxy's), drawn in ranges that hurt a run of
    seconds without stopping it, except timeout 0: a black hole for the fault's window."""
    stream = rng.choice(("upstream", "downstream"))
    if toxic == "latency":
        attributes = {"latency": rng.randint(50, 400), "jitter": rng.randint(0, 100)}
    elif toxic == "bandwidth":
        attributes = {"rate": rng.randint(2, 50)}  # KB/s
    elif toxic == "slicer":
        average = rng.randint(1, 64)
        attributes = {"average_size": average, "size_variation": rng.randint(0, average - 1),
                      "delay": rng.randint(0, 2000)}  # fmt: skip
    elif toxic == "reset_peer":
        attributes = {"timeout": rng.randint(0, 2000)}
    elif toxic == "timeout":
        attributes = {"timeout": 0}
    elif toxic == "limit_data":
        attributes = {"bytes": rng.randint(1000, 100_000)}
    else:
        raise FaultError(f"toxic {toxic!r}: must be one of {', '.join(LINK_TOXICS)}")
    return {"toxic": toxic, "stream": stream, "attributes": attributes}


def resolve_role(spec: FaultSpec, view: dict[str, Any], rng: random.Random) -> FaultSpec:
    """The spec with its role turned into targets, from a `describe_cluster()` view taken when
    the fault starts: "controller", "leader:<tp>", "follower:<tp>" (a random non-leader
    replica), "random" (any registered broker). A spec without a role is returned unchanged."""
    role = spec.role
    if not role:
        return spec
    if role == "controller":
        target = int(view["controller_id"])
        if target < 0:
            raise FaultError("fault role controller: the cluster has no controller now")
        return spec.with_targets([target])
    if role == "random":
        return spec.with_targets([rng.choice(sorted(int(b["node_id"]) for b in view["brokers"]))])
    kind, _, tp = role.partition(":")
    for part in view["partitions"]:
        if f"{part['topic']}-{part['partition']}" != tp:
            continue
        leader, replicas = part["leader"], part["replicas"]
        if kind == "leader":
            if leader < 0:
                raise FaultError(f"fault role {role}: {tp} has no leader now")
            return spec.with_targets([int(leader)])
        if kind == "follower":
            followers = sorted(int(r) for r in replicas if r != leader)
            if not followers:
                raise FaultError(f"fault role {role}: {tp} has no follower")
            return spec.with_targets([rng.choice(followers)])
    raise FaultError(f"fault role {role!r}: unknown role or partition")


# -- injectors ---------------------------------------------------------------------------------


class ProcessControl(Protocol):
    """What the process injectors need from a cluster: chaos/local_cluster.py (processes and
    signals) and chaos/docker_cluster.py (containers: docker kill, stop, pause) have one.
    `pid` is None while the node is down or paused."""

    def node_ids(self) -> list[int]: ...

    def pid(self, node_id: int) -> int | None: ...

    def kill9(self, node_id: int) -> None: ...

    def stop(self, node_id: int) -> None: ...

    def pause(self, node_id: int) -> None: ...

    def resume(self, node_id: int) -> None: ...

    def start(self, *node_ids: int) -> None: ...


class NetworkControl(Protocol):
    """What the network injectors need (chaos/netns.py and chaos/docker_cluster.py have one)."""

    def node_ids(self) -> list[int]: ...

    def apply(self, grudge: Grudge) -> None: ...

    def heal(self) -> None: ...


def grudge_for(spec: FaultSpec, nodes: Sequence[int]) -> Grudge:
    """Who drops whose packets for a network fault. The host (node 0, the clients) keeps
    reaching every node unless `options["clients"]` says "majority": then it is on the side
    without the targets (the side a real client would most likely be on)."""
    everyone = set(nodes)
    targets = set(spec.targets)
    if not targets <= everyone:
        raise FaultError(f"fault {spec.kind}: targets {sorted(targets - everyone)} are not nodes")
    grudge: dict[int, set[int]] = {n: set() for n in [0, *nodes]}

    def cut(a: set[int], b: set[int]) -> None:
        for x in a:
            grudge[x] |= b
        for y in b:
            grudge[y] |= a

    if spec.kind in ("isolate", "split"):
        if spec.kind == "isolate":
            for x in targets:
                cut({x}, everyone - {x})
        else:
            cut(targets, everyone - targets)
        if spec.options.get("clients") == "majority":
            cut({0}, targets)
    elif spec.kind == "bridge":
        if len(targets) != 1:
            raise FaultError(f"fault bridge: one bridging node, got {sorted(targets)}")
        others = sorted(everyone - targets)
        side_a, side_b = set(others[: len(others) // 2]), set(others[len(others) // 2 :])
        cut(side_a, side_b)
    elif spec.kind == "one-way":
        src, *dsts = spec.targets
        for d in dsts:
            grudge[d].add(src)
    else:
        raise FaultError(f"fault {spec.kind} is not a network fault")
    return {n: frozenset(s) for n, s in grudge.items() if s}


def heal_all(actions: Sequence[tuple[str, Any]]) -> None:
    """Run every healing action; raise the first failure after all were tried."""
    errors: list[str] = []
    for what, action in actions:
        try:
            action()
        except (OSError, RaftlogError, FaultError, AssertionError) as e:
            errors.append(f"{what}: {e}")
    if errors:
        raise FaultError("healing failed: " + "; ".join(errors))


@contextmanager
def inject(
    spec: FaultSpec,
    cluster: ProcessControl | None = None,
    network: NetworkControl | None = None,
) -> Iterator[FaultSpec]:
    """Break what `spec` says on entry; heal on exit, always. Yields the spec."""
    if spec.role:
        raise FaultError(f"fault {spec.kind}: resolve role {spec.role!r} into targets first")
    if spec.kind in LINK_KINDS or spec.kind in DISK_KINDS or spec.kind in MOVE_KINDS:
        raise FaultError(
            f"fault {spec.kind}: injected by chaos/link_faults.py, chaos/disk_faults.py or "
            "chaos/move_faults.py"
        )
    if spec.kind in NETWORK_KINDS:
        if network is None:
            raise FaultError(f"fault {spec.kind} needs a network (chaos/netns.py)")
        net = network
        grudge = grudge_for(spec, net.node_ids())
        try:
            net.apply(grudge)
            yield spec
        finally:
            heal_all([("network rules", net.heal)])
        return
    if cluster is None:
        raise FaultError(f"fault {spec.kind} needs a cluster")
    c = cluster
    targets = list(c.node_ids()) if spec.kind == "kill-all" else list(spec.targets)
    if spec.kind == "rolling-restart":
        # The fault is the roll itself; leaving heals whatever a failed roll left stopped.
        stopped: list[int] = []
        try:
            for n in targets:
                stopped.append(n)
                c.stop(n)
                c.start(n)
                stopped.remove(n)
            yield spec
        finally:
            heal_all([(f"start node {n}", lambda n=n: c.start(n)) for n in stopped])
        return
    broken: list[int] = []
    try:
        for n in targets:
            broken.append(n)
            if spec.kind in ("kill", "kill-all"):
                c.kill9(n)
            elif spec.kind == "pause":
                c.pause(n)
            elif spec.kind == "restart":
                c.stop(n)
        yield spec
    finally:
        if spec.kind == "pause":
            heal_all([(f"resume node {n}", lambda n=n: c.resume(n)) for n in broken])
        elif broken:
            # Started together: nodes killed at once may each wait for a quorum of the others.
            heal_all([(f"start nodes {broken}", lambda: c.start(*broken))])
