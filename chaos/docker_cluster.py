"""The chaos suite's DOCKER backend: the three nodes of docker/compose.yaml as containers, each
killable, pausable, restartable and cut off on its own, driven with the docker CLI.

What each fault is here (chaos/faults.py names the kinds):

    kill, kill-all      `docker kill` (SIGKILL to the node, PID 1 of its container); heal:
                        `docker start`, then the container's health check passes again
    pause               `docker pause` (the cgroup freezer); heal: `docker unpause`
    restart, rolling-   `docker stop` (SIGTERM, SIGKILL after STOP_TIMEOUT_S); heal:
    restart             `docker start`
    isolate, split,     iptables DROP rules inside the containers' network namespaces, as
    bridge, one-way     chaos/netns.py writes them: a grudge against a node becomes `INPUT -s
                        <its address> -j DROP` in the receiver; the host (node 0, the clients)
                        is the network's gateway address, which published ports' traffic comes
                        from, and a host grudge becomes `OUTPUT -d <gateway> -j DROP` in the
                        sender. Heal: the filter table's INPUT and OUTPUT chains flushed in
                        every running container (Docker's own DNS rules are in the nat table).
                        Needs iptables in the image (docker/build-base.sh installs it) and
                        NET_ADMIN, granted by the override file below. Without iptables only
                        isolate works, as `docker network disconnect` (which also cuts the
                        host from the node); split, bridge and one-way are refused.
    link, disk kinds    refused: their injectors need a proxy or a file system on the host
                        (chaos/link_faults.py, chaos/disk_faults.py).

`refuse_unsupported` names every kind the backend cannot run before anything starts.

The cluster is its own compose project (`raftlogchaos<pid>` unless given; never "raftlog", the
user's and docker/cluster's default) with free host ports (RAFTLOG_PORT_1..3, and the Kafka and
metrics listeners') and a compose override file written under ROOT (ROOT/compose.chaos.json)
that adds NET_ADMIN, turns the restart policy off (only the nemesis brings a node back) and
passes the run's node settings as RAFTLOG_<SETTING> variables. `docker/cluster up`
(RAFTLOG_COMPOSE_OVERRIDE) builds the image if needed, starts the project and waits until every
node is healthy.

`close()` stops the containers gracefully (unpausing first), saves `docker compose logs` to
ROOT/logs/<project>.log, copies each container's log directory out (`docker cp`) to
ROOT/replicas/node-<id>/logs so that the replica-read reads every replica's files, and removes
the project with its volumes (`down -v`) whatever happened before: also after a failure or
Ctrl-C. It returns what went wrong: a container that stopped without the suite stopping it, a
non-zero exit on SIGTERM, a traceback in the logs.

Everything the suite did to a container (kill, stop, start, healthy again, pause, unpause, the
iptables rules as `iptables -S` listed them right after a change, their flush) is appended to
ROOT/actions.jsonl: the proof that a run's faults were applied, not only scheduled.

Every wait polls observable state (`docker inspect`: running, paused, health, start time)
against a deadline; the host reaches the nodes only through the published 127.0.0.1 ports.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import threading
import time
from calendar import timegm
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from chaos.faults import (
    DISK_KINDS,
    LINK_KINDS,
    NETWORK_KINDS,
    FaultError,
    FaultSpec,
    Grudge,
    grudge_for,
)
from chaos.local_cluster import ClientViews, wait_until
from raftlog.launcher import free_ports

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_SCRIPT = ROOT / "docker" / "cluster"
COMPOSE_FILE = ROOT / "docker" / "compose.yaml"
NODES = 3  # the services of docker/compose.yaml
DATA_DIR = "/var/lib/raftlog"  # the nodes' data_dir (docker/node.toml), a named volume each
NETWORK = "raftlog"  # the compose file's network, "<project>_raftlog" once created
# The compose project name docker/cluster and users use by default: never the chaos suite's.
USER_PROJECT = "raftlog"
# `docker/cluster up` builds the image when the source changed (a minute on this machine) and
# waits up to its own RAFTLOG_UP_TIMEOUT_S (180 s) for health; this deadline is above both.
UP_TIMEOUT_S = 420.0
# compose.yaml's stop_grace_period is 30 s; the node stops within its 10 s shutdown timeout.
STOP_TIMEOUT_S = 30
# A restarted container is healthy after 5-15 s here; a loaded 2-core machine takes longer.
START_TIMEOUT_S = 120.0
# Any other docker command (inspect, kill, pause, exec iptables, cp) answers in well under this.
DOCKER_TIMEOUT_S = 60.0
DOWN_TIMEOUT_S = 120.0
KILL_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.2
# Kinds no docker run can have; without iptables in the image, also these network kinds.
LOCAL_ONLY_KINDS = LINK_KINDS + DISK_KINDS
IPTABLES_ONLY_KINDS = tuple(k for k in NETWORK_KINDS if k != "isolate")


def command(cmd: Sequence[str], timeout_s: float, env: dict[str, str] | None = None) -> str:
    """Run `cmd`; its stdout, or FaultError naming the command, its status and its output."""
    what = " ".join(cmd)
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        raise FaultError(f"`{what}` did not finish in {timeout_s:g} s") from None
    except FileNotFoundError:
        raise FaultError(f"`{what}`: {cmd[0]} is not installed (docker/cluster)") from None
    if proc.returncode != 0:
        raise FaultError(
            f"`{what}` exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return proc.stdout.strip()


def docker(*args: str, timeout_s: float = DOCKER_TIMEOUT_S) -> str:
    return command(["docker", *args], timeout_s)


# runc freezes a container's cgroup and gives up ("unable to freeze", container left running)
# when a process does not stop in time: one in uninterruptible I/O on a loaded machine (CI,
# beside chaos runs). Trying again shortly after works; the container is never half-paused.
PAUSE_ATTEMPTS = 5
PAUSE_RETRY_S = 0.5


def docker_pause(container: str) -> None:
    for attempt in range(1, PAUSE_ATTEMPTS + 1):
        try:
            docker("pause", container)
            return
        except FaultError as e:
            if "unable to freeze" not in str(e) or attempt == PAUSE_ATTEMPTS:
                raise
            time.sleep(PAUSE_RETRY_S)


def unsupported_kinds(kinds: Sequence[str], iptables: bool = True) -> list[str]:
    """The kinds of `kinds` the docker backend cannot inject (with or without iptables)."""
    refused = LOCAL_ONLY_KINDS + (() if iptables else IPTABLES_ONLY_KINDS)
    return [k for k in kinds if k in refused]


def refuse_unsupported(kinds: Sequence[str], nodes: int, iptables: bool = True) -> None:
    """FaultError naming what a docker run cannot do: its node count, its fault kinds."""
    if nodes != NODES:
        raise FaultError(
            f"backend docker: docker/compose.yaml has {NODES} nodes, the run asked for {nodes}"
        )
    bad = unsupported_kinds(kinds, iptables)
    if not bad:
        return
    local = [k for k in bad if k in LOCAL_ONLY_KINDS]
    net = [k for k in bad if k not in LOCAL_ONLY_KINDS]
    why = []
    if local:
        why.append(
            f"{', '.join(local)}: local backend only (their injectors need a TCP proxy or the "
            "node's files on this host)"
        )
    if net:
        why.append(
            f"{', '.join(net)}: need iptables in the image (docker/build-base.sh installs it); "
            "without it only isolate works, by docker network disconnect"
        )
    raise FaultError("backend docker cannot inject these fault kinds: " + "; ".join(why))


def _docker_time(text: str) -> int:
    """Nanoseconds since the epoch of a docker timestamp ("2026-11-23T13:40:01.123456789Z"):
    an integer, because a float has no room for nanoseconds at this magnitude."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)", text)
    if m is None:
        raise FaultError(f"docker timestamp {text!r}: not RFC 3339")
    seconds = timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    zone = m.group(3)
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds * 10**9 + int((m.group(2) or "0").ljust(9, "0"))


class DockerCluster(ClientViews):
    """Nodes 1..3 of docker/compose.yaml as the compose project `project`; files under ROOT."""

    def __init__(
        self,
        root: Path,
        n: int = NODES,
        session_timeout_ms: int = 1500,
        settings: dict[str, Any] | None = None,
        project: str | None = None,
    ):
        refuse_unsupported((), n)
        self.root = root
        self.project = project or f"raftlogchaos{os.getpid()}"
        if self.project == USER_PROJECT:
            raise FaultError(
                f"backend docker: compose project {USER_PROJECT!r} is the user's cluster's; "
                "the chaos run removes its project's volumes at the end"
            )
        ports = free_ports(3 * NODES)
        # The client listeners' host ports, the external Kafka listeners' (the workload's
        # with --client kafka) and the metrics listeners', all picked free so that they clash
        # with nothing (compose.yaml's defaults lie in the kernel's ephemeral port range: one
        # was once taken when a CI run started this cluster).
        self.ports, self.kafka_ports = ports[:NODES], ports[NODES : 2 * NODES]
        self.metrics_ports = ports[2 * NODES :]
        self.services = [f"raftlog-{i}" for i in range(1, NODES + 1)]
        root.mkdir(parents=True, exist_ok=True)
        self.override = root / "compose.chaos.json"
        env = {
            "RAFTLOG_BROKER_SESSION_TIMEOUT_MS": str(session_timeout_ms),
            **{f"RAFTLOG_{k.upper()}": _env_value(v) for k, v in (settings or {}).items()},
        }
        # JSON is YAML: compose reads it as an override of compose.yaml's services.
        services = {s: {"cap_add": ["NET_ADMIN"], "restart": "no", "environment": env}
                    for s in self.services}  # fmt: skip
        self.override.write_text(json.dumps({"services": services}, indent=2) + "\n")
        self.env = {
            **os.environ,
            "RAFTLOG_COMPOSE_PROJECT": self.project,
            "RAFTLOG_COMPOSE_OVERRIDE": str(self.override),
            **{f"RAFTLOG_PORT_{i + 1}": str(p) for i, p in enumerate(self.ports)},
            **{f"RAFTLOG_KAFKA_PORT_{i + 1}": str(p) for i, p in enumerate(self.kafka_ports)},
            **{f"RAFTLOG_METRICS_PORT_{i + 1}": str(p) for i, p in enumerate(self.metrics_ports)},
        }
        self.image = self.env.get("RAFTLOG_IMAGE", "raftlog:local")
        self._up = False
        self._closed = False
        # Nodes the suite took down (killed or stopped) and has not started again.
        self._down: set[int] = set()
        self._containers: dict[int, str] = {}
        self.network = DockerNetwork(self)
        self.problems: list[str] = []
        self.actions = root / "actions.jsonl"
        self.t0 = time.monotonic()
        self._record_lock = threading.Lock()

    # -- compose -----------------------------------------------------------------------------

    def _script(self, *args: str, timeout_s: float) -> None:
        """docker/cluster ARGS for this project (its environment names the project)."""
        try:
            command(["bash", str(CLUSTER_SCRIPT), *args], timeout_s, self.env)
        except FaultError as e:
            raise FaultError(f"compose project {self.project}: {e}") from None

    def compose(self, *args: str, timeout_s: float = DOCKER_TIMEOUT_S) -> str:
        return docker("compose", "-f", str(COMPOSE_FILE), "-f", str(self.override),
                      "-p", self.project, *args, timeout_s=timeout_s)  # fmt: skip

    def prepare(self, kinds: Sequence[str]) -> None:
        """Build the image if needed (docker/cluster build) and refuse the kinds this image
        cannot inject, before any container exists."""
        self._script("build", timeout_s=UP_TIMEOUT_S)
        self.network.iptables = self._image_has_iptables()
        refuse_unsupported(kinds, NODES, self.network.iptables)

    def _image_has_iptables(self) -> bool:
        try:
            docker("run", "--rm", "--entrypoint", "sh", self.image, "-c", "command -v iptables")
        except FaultError:
            return False
        return True

    def record(self, action: str, nodes: Sequence[int], **extra: Any) -> None:
        """Append what the suite did to a container to ROOT/actions.jsonl (t: seconds since
        this object was made), so that a run shows its faults were really applied."""
        line = {"t": round(time.monotonic() - self.t0, 3), "action": action,
                "nodes": list(nodes), **extra}  # fmt: skip
        with self._record_lock, open(self.actions, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def container(self, node_id: int) -> str:
        if node_id not in self._containers:
            cid = self.compose("ps", "-a", "-q", self.services[node_id - 1])
            if not cid:
                raise FaultError(f"project {self.project}: no container for node {node_id}")
            self._containers[node_id] = cid
        return self._containers[node_id]

    def state(self, node_id: int) -> dict[str, Any]:
        """The container's `.State` (Running, Paused, Pid, ExitCode, StartedAt, Health)."""
        state: dict[str, Any] = json.loads(
            docker("inspect", "-f", "{{json .State}}", self.container(node_id))
        )
        return state

    # -- ProcessControl ----------------------------------------------------------------------

    def node_ids(self) -> list[int]:
        return list(range(1, NODES + 1))

    def address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.ports[node_id - 1]}"

    def kafka_address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.kafka_ports[node_id - 1]}"

    def pid(self, node_id: int) -> int | None:
        """The node's host pid while its container runs unpaused, else None."""
        s = self.state(node_id)
        return int(s["Pid"]) if s["Running"] and not s["Paused"] else None

    def kill9(self, node_id: int) -> None:
        self._check_up(node_id)
        self._down.add(node_id)
        docker("kill", "--signal", "KILL", self.container(node_id))
        self.record("kill", [node_id])
        wait_until(
            lambda: not self.state(node_id)["Running"], KILL_TIMEOUT_S,
            f"node {node_id}'s container to exit after docker kill",
        )  # fmt: skip

    def stop(self, node_id: int) -> None:
        self._check_up(node_id)
        self._down.add(node_id)
        self.record("stop", [node_id])
        docker("stop", "-t", str(STOP_TIMEOUT_S), self.container(node_id),
               timeout_s=STOP_TIMEOUT_S + DOCKER_TIMEOUT_S)  # fmt: skip
        code = self.state(node_id)["ExitCode"]
        if code != 0:
            self.problems.append(f"node {node_id} exited with status {code} on docker stop")

    def pause(self, node_id: int) -> None:
        self._check_up(node_id)
        docker_pause(self.container(node_id))
        self.record("pause", [node_id])
        if not self.state(node_id)["Paused"]:
            raise FaultError(f"node {node_id}: docker pause left its container unpaused")

    def resume(self, node_id: int) -> None:
        docker("unpause", self.container(node_id))
        self.record("unpause", [node_id])

    def start(self, *node_ids: int) -> None:
        """Bring the project up the first time (docker/cluster up: every node healthy); after
        that start the given nodes (all if none) whose containers are not running, together,
        and wait until each has passed a health check since this start."""
        if not self._up:
            self._up = True  # from here close() has a project to remove, even if up fails
            self._script("up", timeout_s=UP_TIMEOUT_S)
            return
        ids = [i for i in (node_ids or self.node_ids()) if not self.state(i)["Running"]]
        if ids:
            docker("start", *(self.container(i) for i in ids))
            self.record("start", ids)
        for i in ids:
            wait_until(functools.partial(self._healthy_since_start, i), START_TIMEOUT_S,
                       f"node {i}'s container to be healthy after docker start")  # fmt: skip
            self._down.discard(i)
            self.record("healthy", [i], started_at=self.state(i)["StartedAt"])

    def _healthy_since_start(self, node_id: int) -> bool:
        s = self.state(node_id)
        if not s["Running"]:
            raise FaultError(
                f"node {node_id}'s container exited with status {s['ExitCode']} while starting"
            )
        health = s.get("Health") or {}
        log = health.get("Log") or []
        # The status can still be the last incarnation's: a check must have run since.
        return (
            health.get("Status") == "healthy"
            and bool(log)
            and log[-1]["ExitCode"] == 0
            and _docker_time(log[-1]["Start"]) >= _docker_time(s["StartedAt"])
        )

    def _check_up(self, node_id: int) -> None:
        """Note a node found down that the suite did not take down (LocalCluster's
        check_alive): with the restart policy off it stays down until a fault starts it."""
        if node_id in self._down:
            return
        s = self.state(node_id)
        if not s["Running"]:
            self._down.add(node_id)
            self.problems.append(
                f"node {node_id}'s container exited unexpectedly with status {s['ExitCode']}"
            )

    # -- the replica files ---------------------------------------------------------------------

    def partition_dir(self, node_id: int, tp: str) -> Path:
        """Where the replica-read finds node `node_id`'s copy of partition `tp` once `close()`
        has copied it out of the stopped container."""
        return self.root / "replicas" / f"node-{node_id}" / "logs" / tp

    # -- teardown ----------------------------------------------------------------------------

    def close(self) -> list[str]:
        """Stop every node, keep its logs and partition files, remove the project with its
        volumes (always); the list of what went wrong during the cluster's life."""
        if self._closed:
            return []
        self._closed = True
        problems: list[str] = []
        try:
            if self._up:
                self._stop_and_collect(problems)
        finally:
            if self._up:
                try:
                    self._script("down", "-v", "--remove-orphans", "-t", "10",
                                 timeout_s=DOWN_TIMEOUT_S)  # fmt: skip
                except FaultError as e:
                    problems.append(str(e))
        return [*self.problems, *problems]

    def _stop_and_collect(self, problems: list[str]) -> None:
        running = []
        for i in self.node_ids():
            try:
                self._check_up(i)
                s = self.state(i)
            except FaultError as e:
                problems.append(str(e))
                continue
            if s["Paused"]:
                docker("unpause", self.container(i))  # a paused node cannot act on SIGTERM
                self.record("unpause", [i])
            if s["Running"]:
                running.append(i)
        if running:
            docker("stop", "-t", str(STOP_TIMEOUT_S), *(self.container(i) for i in running),
                   timeout_s=STOP_TIMEOUT_S + DOCKER_TIMEOUT_S)  # fmt: skip
        for i in running:
            code = self.state(i)["ExitCode"]
            if code != 0:
                problems.append(f"node {i} exited with status {code} on docker stop")
        logs = self.compose("logs", "--no-color", "--timestamps", timeout_s=DOWN_TIMEOUT_S)
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        (self.root / "logs" / f"{self.project}.log").write_text(logs + "\n")
        at = logs.find("Traceback")
        if at >= 0:
            problems.append(f"a node logged a traceback:\n{logs[max(at - 500, 0) : at + 3000]}")
        for i in self.node_ids():
            dest = self.root / "replicas" / f"node-{i}"
            dest.mkdir(parents=True, exist_ok=True)
            try:
                docker("cp", f"{self.container(i)}:{DATA_DIR}/logs", str(dest),
                       timeout_s=DOWN_TIMEOUT_S)  # fmt: skip
            except FaultError as e:
                problems.append(f"node {i}'s partition files: {e}")


def _env_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list | tuple):
        return ",".join(str(x) for x in v)
    return str(v)


class DockerNetwork:
    """NetworkControl over the project's network: iptables in the containers, or (without
    iptables in the image) `docker network disconnect` for isolate only."""

    def __init__(self, cluster: DockerCluster):
        self.cluster = cluster
        self.iptables = True
        self._disconnected: list[int] = []

    def node_ids(self) -> list[int]:
        return self.cluster.node_ids()

    @property
    def name(self) -> str:
        return f"{self.cluster.project}_{NETWORK}"

    def addresses(self) -> tuple[dict[int, str], str]:
        """Each node's address on the project's network, and the gateway's (the host)."""
        out: dict[int, str] = {}
        gateway = ""
        ids = self.node_ids()
        # One docker call for all: each costs 0.1-2 s on a loaded machine, inside the window.
        lines = docker("inspect", "-f", "{{json .NetworkSettings.Networks}}",
                       *(self.cluster.container(i) for i in ids)).splitlines()  # fmt: skip
        for i, line in zip(ids, lines, strict=True):
            net = json.loads(line).get(self.name)
            if not net or not net.get("IPAddress"):
                raise FaultError(f"node {i} has no address on network {self.name}")
            out[i] = net["IPAddress"]
            gateway = net["Gateway"]
        return out, gateway

    def _iptables(self, node_id: int, *commands: Sequence[str]) -> str:
        """Run `iptables -w ARGS` for each of `commands` in node `node_id`'s container, as root,
        in one `docker exec` (each takes 0.2-2 s here: a container's rules go in at once)."""
        script = " && ".join(shlex.join(["iptables", "-w", *args]) for args in commands)
        return docker("exec", "-u", "0", self.cluster.container(node_id), "sh", "-c", script)

    def apply(self, grudge: Grudge) -> None:
        """Drop what the grudge says, on top of the rules already there."""
        if not self.iptables:
            self._disconnect(grudge)
            return
        addresses, gateway = self.addresses()
        addresses[0] = gateway
        rules: dict[int, list[list[str]]] = {}
        for receiver, senders in sorted(grudge.items()):
            for sender in sorted(senders):
                if receiver == 0:
                    rule = (sender, ["-A", "OUTPUT", "-d", gateway, "-j", "DROP"])
                else:
                    rule = (receiver, ["-A", "INPUT", "-s", addresses[sender], "-j", "DROP"])
                rules.setdefault(rule[0], []).append(rule[1])

        def one(node_id: int) -> None:
            rules_now = self._iptables(node_id, *rules[node_id], ["-S"])
            self.cluster.record("iptables", [node_id], rules=_appended(rules_now))

        errors = _each(sorted(rules), one)
        if errors:
            raise FaultError("applying the docker network's rules failed: " + "; ".join(errors))

    def rules(self, node_id: int) -> list[str]:
        """The container's filter rules (`iptables -S`), for checks and debugging."""
        return _appended(self._iptables(node_id, ["-S"]))

    def heal(self) -> None:
        errors = []
        if not self.iptables:
            for i in list(self._disconnected):
                try:
                    docker("network", "connect", "--alias", self.cluster.services[i - 1],
                           self.name, self.cluster.container(i))  # fmt: skip
                    self._disconnected.remove(i)
                    self.cluster.record("network-connect", [i])
                except FaultError as e:
                    errors.append(str(e))
        else:

            def flush(i: int) -> None:
                # A stopped container's namespace, rules included, is gone with it.
                if self.cluster.state(i)["Running"]:
                    self._iptables(i, ["-F", "INPUT"], ["-F", "OUTPUT"])
                    self.cluster.record("iptables-flush", [i])

            errors = _each(self.node_ids(), flush)
        if errors:
            raise FaultError("healing the docker network failed: " + "; ".join(errors))

    def _disconnect(self, grudge: Grudge) -> None:
        nodes = self.node_ids()
        targets = tuple(i for i in nodes if grudge.get(i, frozenset()) >= set(nodes) - {i})
        want = grudge_for(FaultSpec("isolate", targets), nodes) if targets else {}
        if not targets or _between_nodes(grudge) != _between_nodes(want):
            raise FaultError(
                f"grudge {dict(grudge)}: without iptables in the image the docker backend "
                "can only isolate whole nodes (docker network disconnect)"
            )
        for i in targets:
            docker("network", "disconnect", self.name, self.cluster.container(i))
            self._disconnected.append(i)
            self.cluster.record("network-disconnect", [i])


def _each(nodes: Sequence[int], action: Callable[[int], None]) -> list[str]:
    """`action(node)` for every node at once (one thread each: a docker exec takes 0.2-2 s
    here, and a fault's window is seconds); the errors of those that failed."""
    errors: list[str] = []

    def run(node: int) -> None:
        try:
            action(node)
        except FaultError as e:
            errors.append(f"node {node}: {e}")

    threads = [threading.Thread(target=run, args=(n,), name=f"docker-net-{n}") for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _appended(iptables_s: str) -> list[str]:
    """The rules of `iptables -S` output (its "-A" lines)."""
    return [r for r in iptables_s.splitlines() if r.startswith("-A")]


def _between_nodes(grudge: Grudge) -> dict[int, frozenset[int]]:
    """The grudge without the host (node 0): what it says about the nodes' own links."""
    return {k: v - {0} for k, v in grudge.items() if k and v - {0}}
