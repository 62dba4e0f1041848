"""One way to start local raftlog nodes: ports, configs, processes, readiness, stop.

Everything that runs nodes on this machine uses this module: `raftlog dev` and `raftlog demo`,
the chaos suite's local backend (chaos/local_cluster.py), the benchmarks and the test helpers.
It has three parts:

- Ports (`free_ports`, `PortPlan`): every node has a client, a Raft and a replication port,
  and usually a Kafka and a metrics port. `PortPlan.based(PORT, n)` is `raftlog dev --port
  PORT`'s fixed layout (client PORT+i-1, Raft PORT+100+i-1, replication PORT+200+i-1, Kafka
  PORT+300+i-1, metrics PORT+400+i-1); `PortPlan.picked(n)` takes free ports from below
  the kernel's ephemeral range (see `free_ports` for why not port 0); `PortPlan.same` gives
  every node the same ports (nodes in their own network namespaces).
- Configs (`write_node_config`, `cluster_settings`, `write_cluster_configs`): the TOML of each
  combined controller+broker node of a cluster, at `<data root>/node-<id>/node.toml`, the
  node's data directory beside it. `cluster_settings` is pure; the writers only write it.
- Processes (`NodeProcess`, `LocalCluster`): a child process running `raftlog node --config
  PATH` (or `raftlog dev ...`), across its incarnations, and a set of nodes started together
  and stopped together.

Rules:
- A node is ready when its data directory holds a live ready file (raftlog/readiness.py)
  naming the process we started, never by parsing output that processes may share. A stale
  ready file (a node killed with -9 cannot remove its own) is removed before each launch.
- Every wait polls observable state (ready files, process status) against a deadline;
  failures raise `LaunchError` (`ExitedBeforeReadyError` when the process exited first), whose
  message names the process; callers add its log tail.
- At most one incarnation of a `NodeProcess` runs at a time. An exit nobody asked for (no
  stop, no kill) is recorded in `problems` when it is noticed (`check_alive`).
- A clean stop signals every node first and then waits (a node waiting for its peers must not
  serialise the others), with SIGCONT before SIGTERM (a paused node cannot act on SIGTERM),
  and SIGKILL at the deadline: a stop never hangs.
- This module imports neither the broker nor the node: it only writes configs and runs the
  `raftlog` command line, so the chaos suite, the benchmarks and the tests can use it freely.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from raftlog.errors import RaftlogError
from raftlog.invariants import InvariantError
from raftlog.readiness import READY_FILE, read_ready_file, remove_ready_file

LOOPBACK = "127.0.0.1"
# `raftlog dev --port PORT`: node i's Raft port is PORT + RAFT_PORT_OFFSET + i - 1 and its
# replication listener (followers fetch there) PORT + REPLICATION_PORT_OFFSET + i - 1.
RAFT_PORT_OFFSET = 100
REPLICATION_PORT_OFFSET = 200
# ... and its Kafka listener (Kafka's wire protocol) PORT + KAFKA_PORT_OFFSET + i - 1.
KAFKA_PORT_OFFSET = 300
# ... and its metrics listener (Prometheus' /metrics over HTTP) PORT + METRICS_PORT_OFFSET + i - 1.
METRICS_PORT_OFFSET = 400
PORT_MAX = 65535
# Ports `free_ports` picks from: below the ephemeral range, above the ports services usually
# claim. If the kernel's ephemeral range leaves no room there, free_ports binds port 0.
PICKED_PORT_MIN = 20000
# How many random candidates free_ports tries per port before giving up on the range.
PORT_PICK_ATTEMPTS = 200
# A node is ready 1-3 s after it starts here; a loaded 2-core machine has taken 10 s and more.
START_TIMEOUT_S = 60.0
# A node's own shutdown_timeout_ms is 10 s; a clean stop fits in this with room to spare.
STOP_TIMEOUT_S = 30.0
READY_POLL_S = 0.05
# `raftlog node` under this environment variable runs under cProfile and writes
# <dir>/node-<id>-<pid>.prof when it stops (a node killed with -9 writes nothing).
PROFILE_DIR_ENV = "RAFTLOG_PROFILE_DIR"
CONFIG_HEADER = "# written by `raftlog dev`; edit or delete to change the cluster\n"
LOG_TAIL_BYTES = 4000


class LaunchError(Exception):
    """A local node (or `raftlog dev`) did not start, stop or take a signal as asked.

    Not a RaftlogError: those are the wire's errors, each with its own code; whoever launches
    decides what a failed launch is to its users (a FaultError, a failed test, a command's
    error)."""


class ExitedBeforeReadyError(LaunchError):
    """The process exited before it was ready (a node that cannot start says why on its
    stderr: a port in use, a bad config)."""


# -- ports ------------------------------------------------------------------------------------


def _ephemeral_port_min() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range starts here


def _port_free(host: str, port: int) -> bool:
    """Free for TCP and UDP (a controller's Raft port number also takes heartbeats by UDP)."""
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def free_ports(n: int, host: str = LOOPBACK) -> list[int]:
    """n distinct ports free right now, picked at random below the kernel's ephemeral range.

    Not from binding port 0: that port comes from the ephemeral range, from which the kernel
    also takes the local port of every outgoing connection, so between this check and the
    node's own bind any process's connect() may take it (measured here: a cause of failed
    starts). A port below the range is only taken by an explicit bind.
    """
    top = _ephemeral_port_min()
    if top - PICKED_PORT_MIN < 10 * n:
        return _bound_ports(n, host)
    rng = random.Random()
    ports: list[int] = []
    for _ in range(PORT_PICK_ATTEMPTS * n):
        port = rng.randrange(PICKED_PORT_MIN, top)
        if port not in ports and _port_free(host, port):
            ports.append(port)
            if len(ports) == n:
                return ports
    raise RaftlogError(
        f"no {n} free ports found in {PICKED_PORT_MIN}..{top - 1} on {host} after "
        f"{PORT_PICK_ATTEMPTS * n} tries"
    )


def free_base_port(offsets: Sequence[int], host: str = LOOPBACK) -> int:
    """A port P below the kernel's ephemeral range with P + offset free for every offset.

    `raftlog dev --port 0` on one node: its Kafka listener is PORT + KAFKA_PORT_OFFSET, so a
    restart given the port the first start reported (`--port P`) binds the same Kafka port; a
    client port bound at 0 would put P + 300 in the ephemeral range, where an outgoing
    connection may hold it at the restart (measured: a failed restart in CI). Falls back to a
    port bound at 0 (offsets unchecked) when the range below the ephemeral one is too small.
    """
    top = _ephemeral_port_min() - max(offsets)
    if top - PICKED_PORT_MIN < 10:
        return _bound_ports(1, host)[0]
    rng = random.Random()
    for _ in range(PORT_PICK_ATTEMPTS):
        base = rng.randrange(PICKED_PORT_MIN, top)
        if all(_port_free(host, base + offset) for offset in offsets):
            return base
    raise RaftlogError(
        f"no port P in {PICKED_PORT_MIN}..{top - 1} on {host} with P + {list(offsets)} free "
        f"after {PORT_PICK_ATTEMPTS} tries"
    )


def _bound_ports(n: int, host: str) -> list[int]:
    """n ports the kernel hands out for port 0 (may be taken again before they are used)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind((host, 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@dataclass(frozen=True, slots=True)
class PortPlan:
    """The client, Raft, replication, Kafka and metrics port of nodes 1..n (index i is node
    i + 1).

    Invariants: the first three tuples have the same length n >= 1, `kafka` and `metrics` too
    or are empty (no such listeners); every port is in 1..65535.
    """

    client: tuple[int, ...]
    raft: tuple[int, ...]
    replication: tuple[int, ...]
    kafka: tuple[int, ...] = ()
    metrics: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.client)
        if n < 1 or len(self.raft) != n or len(self.replication) != n:
            raise ValueError(
                f"a port plan needs as many client, Raft and replication ports (>= 1): got "
                f"{len(self.client)}, {len(self.raft)}, {len(self.replication)}"
            )
        if self.kafka and len(self.kafka) != n:
            raise ValueError(f"a port plan for {n} nodes with {len(self.kafka)} Kafka ports")
        if self.metrics and len(self.metrics) != n:
            raise ValueError(f"a port plan for {n} nodes with {len(self.metrics)} metrics ports")
        ports = (*self.client, *self.raft, *self.replication, *self.kafka, *self.metrics)
        bad = [p for p in ports if not 1 <= p <= PORT_MAX]
        if bad:
            raise ValueError(f"ports {bad} are outside 1..{PORT_MAX}")

    @property
    def nodes(self) -> int:
        return len(self.client)

    @classmethod
    def based(cls, base: int, n: int, kafka: bool = True, metrics: bool = True) -> PortPlan:
        """`raftlog dev --port BASE --nodes n`: PORT+i, PORT+100+i, PORT+200+i, (`kafka`)
        PORT+300+i and (`metrics`) PORT+400+i for i < n."""
        return cls(
            tuple(base + i for i in range(n)),
            tuple(base + RAFT_PORT_OFFSET + i for i in range(n)),
            tuple(base + REPLICATION_PORT_OFFSET + i for i in range(n)),
            tuple(base + KAFKA_PORT_OFFSET + i for i in range(n)) if kafka else (),
            tuple(base + METRICS_PORT_OFFSET + i for i in range(n)) if metrics else (),
        )

    @classmethod
    def picked(
        cls, n: int, host: str = LOOPBACK, kafka: bool = True, metrics: bool = True
    ) -> PortPlan:
        """3n distinct ports free on `host` now (`free_ports`), n more each for `kafka` and
        `metrics`."""
        if n < 1:
            raise ValueError(f"a port plan for {n} nodes: need at least 1")
        ports = free_ports((3 + kafka + metrics) * n, host)
        groups = [tuple(ports[i * n : (i + 1) * n]) for i in range(3 + kafka + metrics)]
        return cls(
            groups[0],
            groups[1],
            groups[2],
            groups[3] if kafka else (),
            groups[3 + kafka] if metrics else (),
        )

    @classmethod
    def same(
        cls, n: int, client: int, raft: int, replication: int, kafka: int | None = None
    ) -> PortPlan:
        """The same ports for every node (each on its own address, e.g. a namespace)."""
        kafka_ports = () if kafka is None else (kafka,) * n
        return cls((client,) * n, (raft,) * n, (replication,) * n, kafka_ports)


# -- configs ----------------------------------------------------------------------------------


def toml_value(v: Any) -> str:
    """A TOML literal for a bool, an int, a list of them or a string."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def node_config_text(settings: Mapping[str, Any]) -> str:
    """A node's TOML: plain settings first (None ones left out, so the node's default holds),
    then a [table] per dict setting (e.g. [log])."""
    lines = [
        f"{k} = {toml_value(v)}"
        for k, v in settings.items()
        if v is not None and not isinstance(v, dict)
    ]
    for table, values in settings.items():
        if isinstance(values, dict):
            lines.append(f"\n[{table}]")
            lines.extend(f"{toml_value(k)} = {toml_value(v)}" for k, v in values.items())
    return CONFIG_HEADER + "\n".join(lines) + "\n"


def write_node_config(path: str | Path, settings: Mapping[str, Any]) -> None:
    with open(path, "w") as f:
        f.write(node_config_text(settings))


def node_dir(data_root: str | Path, node_id: int) -> Path:
    """Where node `node_id` of a cluster under `data_root` keeps its data and its node.toml."""
    return Path(data_root) / f"node-{node_id}"


def cluster_settings(
    data_root: str | Path,
    ports: PortPlan,
    hosts: Sequence[str] | None = None,
    settings: Mapping[str, Any] | None = None,
    advertise: Callable[[int, str], str] | None = None,
    controllers: int | None = None,
) -> list[dict[str, Any]]:
    """The settings of nodes 1..n: nodes 1..`controllers` (None: all) are controller+broker
    nodes that form the quorum, the others broker-only nodes that follow it as observers.

    `hosts[i]` is node i+1's address (all 127.0.0.1 by default); `settings` are added to every
    node's (they win over the defaults here); `advertise(node_id, address)`, if given, is the
    address the node advertises instead of its client, its replication and its Kafka listener
    (a proxy in front of each)."""
    n = ports.nodes
    hosts = list(hosts) if hosts is not None else [LOOPBACK] * n
    if len(hosts) != n:
        raise ValueError(f"{len(hosts)} hosts for {n} nodes")
    k = n if controllers is None else controllers
    if not 1 <= k <= n:
        raise ValueError(f"{k} controllers among {n} nodes: must be 1..{n}")
    voters = [f"{i + 1}@{hosts[i]}:{ports.raft[i]}" for i in range(k)]
    nodes = []
    for i in range(n):
        client = f"{hosts[i]}:{ports.client[i]}"
        replication = f"{hosts[i]}:{ports.replication[i]}"
        kafka = f"{hosts[i]}:{ports.kafka[i]}" if ports.kafka else None
        metrics = f"{hosts[i]}:{ports.metrics[i]}" if ports.metrics else None
        advertised = {}
        if advertise is not None:
            advertised = {
                "advertised_listener": advertise(i + 1, client),
                "replication_advertised_listener": advertise(i + 1, replication),
            }
            if kafka is not None:
                advertised["kafka_advertised_listener"] = advertise(i + 1, kafka)
        nodes.append(
            {
                "node_id": i + 1,
                "roles": ["controller", "broker"] if i < k else ["broker"],
                "data_dir": os.path.abspath(node_dir(data_root, i + 1)),
                "client_listener": client,
                "replication_listener": replication,
                "kafka_listener": kafka,
                "metrics_listener": metrics,
                "controller_voters": voters,
                **advertised,
                **(settings or {}),
            }
        )
    return nodes


def write_cluster_configs(
    data_root: str | Path,
    ports: PortPlan,
    hosts: Sequence[str] | None = None,
    settings: Mapping[str, Any] | None = None,
    advertise: Callable[[int, str], str] | None = None,
    controllers: int | None = None,
) -> list[Path]:
    """Write `cluster_settings(...)` to `<data_root>/node-<id>/node.toml`; their paths."""
    paths = []
    for node in cluster_settings(data_root, ports, hosts, settings, advertise, controllers):
        path = node_dir(data_root, node["node_id"]) / "node.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_node_config(path, node)
        paths.append(path)
    return paths


def dev_data_dirs(data_dir: str | Path, nodes: int) -> list[Path]:
    """Where `raftlog dev --nodes N --data-dir DIR` keeps each node's data."""
    if nodes == 1:
        return [Path(data_dir)]
    return [node_dir(data_dir, i) for i in range(1, nodes + 1)]


def cli_command(*args: str) -> list[str]:
    """The `raftlog` command line, run with this interpreter."""
    return [sys.executable, "-m", "raftlog.cli", *args]


def node_command(config_path: str | Path, log_level: str | None = None) -> list[str]:
    """`raftlog node --config PATH [--log-level LEVEL]`."""
    level = ["--log-level", log_level] if log_level else []
    return cli_command("node", "--config", str(config_path), *level)


# -- processes --------------------------------------------------------------------------------


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process, from /proc (None if unreadable)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # Fields after the command: state is [0]; utime and stime are the 14th and 15th overall.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


Output = int | IO[Any] | None


class NodeProcess:
    """A child process that runs raftlog nodes (`raftlog node`, or `raftlog dev`), across its
    incarnations, each started from the same command line.

    `data_dirs` are where its nodes write their ready files. With `ready_pid_is_own` (one node
    in the process itself) a ready file counts only if it names this incarnation's pid; with
    several nodes (`raftlog dev --nodes 3`: its children) a live one counts, stale ones being
    removed before each launch. With `log_dir`, each incarnation writes its stdout and stderr
    to `<log_dir>/<log_stem>-<incarnation>.out/.err`, so a killed incarnation's log survives
    its restart; otherwise its output goes to `stdout`/`stderr` (None: ours). With
    `new_session` it runs in its own session and process group, and a kill takes the whole
    group (a `raftlog dev` and its nodes).

    Invariants: at most one incarnation runs; `expect_exit` is False exactly while an
    incarnation runs that nobody asked to stop (its exit is then a problem); `cpu_s_before`
    sums the CPU seconds of earlier incarnations, read just before each was signalled.
    """

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        data_dirs: Sequence[str | Path],
        *,
        ready_pid_is_own: bool = True,
        log_dir: str | Path | None = None,
        log_stem: str = "node",
        stdout: Output = None,
        stderr: Output = None,
        exec_prefix: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        new_session: bool = False,
    ):
        self.name = name
        self.command = list(command)
        self.data_dirs = [Path(d) for d in data_dirs]
        self.ready_pid_is_own = ready_pid_is_own
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.log_stem = log_stem
        self.stdout, self.stderr = stdout, stderr
        self.exec_prefix = list(exec_prefix)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.new_session = new_session
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnation = 0
        self.expect_exit = True
        self.problems: list[str] = []
        self.err_paths: list[Path] = []
        self.cpu_s_before = 0.0

    # -- lifecycle ---------------------------------------------------------------------------

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The running incarnation's pid (None when none runs)."""
        return self.proc.pid if self.proc is not None and self.running() else None

    def launch(self) -> None:
        """Start the next incarnation; `wait_ready` waits until it serves."""
        if self.running():
            raise LaunchError(f"{self.name} is already running")
        self.incarnation += 1
        for d in self.data_dirs:
            # A file left by a node killed with -9 must not pass for this incarnation's.
            if d.is_dir():
                remove_ready_file(str(d))
        cmd = [*self.exec_prefix, *self.command]
        with contextlib.ExitStack() as files:
            stdout, stderr = self.stdout, self.stderr
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                stem = self.log_dir / f"{self.log_stem}-{self.incarnation}"
                err_path = stem.with_name(stem.name + ".err")
                self.err_paths.append(err_path)
                # Append mode: every writer (the node, a test adding a line) writes at the end.
                stdout = files.enter_context(open(stem.with_name(stem.name + ".out"), "ab"))
                stderr = files.enter_context(open(err_path, "ab"))
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=self.env,
                cwd=self.cwd,
                start_new_session=self.new_session,
            )
        self.expect_exit = False

    def ready_infos(self) -> list[dict[str, Any]] | None:
        """The ready files of this incarnation's nodes, once every one has written its own."""
        proc = self.proc
        infos = []
        for d in self.data_dirs:
            info = read_ready_file(str(d))
            if info is None:
                return None
            if self.ready_pid_is_own and (proc is None or info.get("pid") != proc.pid):
                return None
            infos.append(info)
        return infos

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> list[dict[str, Any]]:
        """Poll until every node of this incarnation is ready; its ready files' contents.
        ExitedBeforeReadyError if the process exits first, LaunchError at the deadline."""
        proc = self.proc
        if proc is None:
            raise InvariantError(f"{self.name}: wait_ready before launch")
        deadline = time.monotonic() + timeout_s
        while True:
            infos = self.ready_infos()
            if infos is not None:
                return infos
            code = proc.poll()
            if code is not None:
                self.expect_exit = True  # reported by this error, not again as a problem
                raise ExitedBeforeReadyError(
                    f"{self.name} exited with status {code} before it was ready"
                )
            if time.monotonic() > deadline:
                waiting = [str(d) for d in self.data_dirs if read_ready_file(str(d)) is None]
                raise LaunchError(
                    f"{self.name} was not ready after {timeout_s:g} s (no live {READY_FILE} "
                    f"of this start in {', '.join(waiting) or 'its data directories'})"
                )
            time.sleep(READY_POLL_S)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> list[dict[str, Any]]:
        """Launch and wait until ready; a start that fails (or is interrupted) kills what it
        started."""
        self.launch()
        try:
            return self.wait_ready(timeout_s)
        except BaseException:
            self.kill()
            raise

    def check_alive(self) -> str | None:
        """`note_exit` (a subclass may raise instead)."""
        return self.note_exit()

    def note_exit(self) -> str | None:
        """Note an incarnation that exited without being asked to; the note, or None."""
        if self.proc is None or self.expect_exit or self.proc.poll() is None:
            return None
        self.expect_exit = True
        problem = (
            f"{self.name} incarnation {self.incarnation} died unexpectedly with status "
            f"{self.proc.returncode}"
        )
        self.problems.append(problem)
        return problem

    def send_signal(self, sig: signal.Signals) -> None:
        """Send `sig` to the running incarnation (LaunchError if none runs)."""
        if self.proc is None or not self.running():
            raise LaunchError(f"{self.name} is not running: cannot send {sig.name}")
        self.proc.send_signal(sig)

    def _note_cpu(self) -> None:
        pid = self.pid
        if pid is not None:
            self.cpu_s_before += process_cpu_seconds(pid) or 0.0

    def cpu_seconds(self) -> float:
        """CPU seconds of every incarnation so far (the running one up to now)."""
        pid = self.pid
        now = (process_cpu_seconds(pid) or 0.0) if pid is not None else 0.0
        return self.cpu_s_before + now

    def kill(self) -> None:
        """SIGKILL (the whole group with `new_session`) and reap; a no-op if it has exited."""
        proc = self.proc
        if proc is None:
            return
        self.expect_exit = True
        if proc.poll() is None:
            self._note_cpu()
        if self.new_session:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        elif proc.poll() is None:
            proc.kill()
        proc.wait()

    def kill9(self) -> None:
        """kill -9 the running incarnation (no flush, no close: its next start recovers)."""
        self.note_exit()
        if not self.running():
            raise LaunchError(f"{self.name} is not running: cannot send SIGKILL")
        self.kill()

    def begin_stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Ask the running incarnation to stop (SIGCONT first: a paused process cannot act on
        `sig`); `finish_stop` waits for it."""
        self.note_exit()
        if self.proc is None or not self.running():
            return
        self.expect_exit = True
        self._note_cpu()
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(sig)

    def finish_stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Wait for the exit `begin_stop` asked for; its status, or None if it did not come
        within `timeout_s` and the process was killed."""
        proc = self.proc
        if proc is None:
            return 0
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def stop(
        self, timeout_s: float = STOP_TIMEOUT_S, sig: signal.Signals = signal.SIGTERM
    ) -> int | None:
        """`begin_stop` and `finish_stop`: the exit status, None if it had to be killed."""
        self.begin_stop(sig)
        return self.finish_stop(timeout_s)

    # -- logs --------------------------------------------------------------------------------

    def tracebacks(self) -> list[str]:
        """A note per log file that holds a Python traceback, with the traceback's start."""
        found = []
        for path in self.err_paths:
            text = path.read_text(errors="replace") if path.exists() else ""
            at = text.find("Traceback")
            if at >= 0:
                found.append(
                    f"{self.name} logged a traceback in {path}:\n"
                    f"{text[max(at - 300, 0) : at + 3000]}"
                )
        return found

    def log_tail(self, nbytes: int = LOG_TAIL_BYTES) -> str:
        """The end of the last incarnation's stderr file."""
        if not self.err_paths or not self.err_paths[-1].exists():
            return "(no log)"
        data = self.err_paths[-1].read_bytes()[-nbytes:]
        return f"--- {self.err_paths[-1]} (tail) ---\n" + data.decode(errors="replace")


def close_all(procs: Sequence[NodeProcess], timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
    """Stop every process (`stop_all`); everything that went wrong during their lives:
    unexpected exits, slow or failed stops, tracebacks in the logs, then each one's log tail
    (if anything went wrong)."""
    for p in procs:
        p.note_exit()
    problems = [problem for p in procs for problem in p.problems]
    problems.extend(stop_all(procs, timeout_s))
    for p in procs:
        problems.extend(p.tracebacks())
    if problems:
        problems.extend(p.log_tail() for p in procs)
    return problems


def dev_process(
    data_dir: str | Path,
    args: Sequence[str] = (),
    nodes: int = 1,
    name: str = "the cluster",
    **options: Any,
) -> NodeProcess:
    """`raftlog dev --data-dir DIR --nodes N ARGS...` as a NodeProcess: ready once each of its
    nodes has written its ready file (one node runs in the `raftlog dev` process itself, so
    its file must name that pid). `options` are NodeProcess's."""
    if nodes < 1:
        raise ValueError(f"raftlog dev --nodes {nodes}: need at least 1")
    command = cli_command("dev", "--data-dir", str(data_dir), "--nodes", str(nodes), *args)
    return NodeProcess(
        name, command, dev_data_dirs(data_dir, nodes), ready_pid_is_own=nodes == 1, **options
    )


def bootstrap_of(infos: Sequence[Mapping[str, Any]]) -> str:
    """ "host:port,..." of the nodes whose ready files these are."""
    return ",".join(str(info["client_address"]) for info in infos)


def kafka_bootstrap_of(infos: Sequence[Mapping[str, Any]]) -> str | None:
    """ "host:port,..." of the Kafka listeners of the nodes whose ready files these are (what
    Kafka's clients are given as bootstrap servers); None if any node has none."""
    addresses = [info.get("kafka_address") for info in infos]
    if not all(addresses):
        return None
    return ",".join(str(a) for a in addresses)


def stop_all(procs: Sequence[NodeProcess], timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
    """Stop every running process: signal all first, then wait for each against one deadline,
    SIGKILL at it. What went wrong: a slow exit, a non-zero status on SIGTERM."""
    problems = []
    running = [p for p in procs if p.running()]
    for p in running:
        p.begin_stop()
    deadline = time.monotonic() + timeout_s
    for p in running:
        rc = p.finish_stop(max(deadline - time.monotonic(), 0.1))
        if rc is None:
            problems.append(f"{p.name} did not exit within {timeout_s:g} s of SIGTERM")
        elif rc != 0:
            problems.append(f"{p.name} exited with status {rc} on SIGTERM")
    return problems


class ClusterNode(NodeProcess):
    """Node `node_id` of a local cluster: `raftlog node --config <config_path>`, its data in the
    config's directory (as `write_cluster_configs` lays them out), serving clients at
    `client_address`. `options` are NodeProcess's."""

    def __init__(
        self,
        node_id: int,
        config_path: str | Path,
        client_address: str,
        log_level: str | None = None,
        **options: Any,
    ):
        self.node_id = node_id
        self.config_path = Path(config_path)
        self.client_address = client_address
        options.setdefault("log_stem", f"node-{node_id}")
        super().__init__(
            f"node {node_id}",
            node_command(config_path, log_level),
            [self.config_path.parent],
            **options,
        )


class LocalCluster:
    """Nodes 1..n of one cluster, each a `ClusterNode` that can be killed, paused, stopped
    and restarted on its own.

    `config_paths[i]` is node i+1's config and `client_addresses[i]` where it serves clients.
    `exec_prefix(node_id)`, if given, is the command that runs node `node_id` (e.g. in its
    network namespace); every other option is ClusterNode's, the same for every node.
    """

    def __init__(
        self,
        config_paths: Sequence[str | Path],
        client_addresses: Sequence[str],
        *,
        exec_prefix: Callable[[int], Sequence[str]] | None = None,
        **options: Any,
    ):
        if len(config_paths) != len(client_addresses):
            raise ValueError(f"{len(config_paths)} configs, {len(client_addresses)} addresses")
        self.nodes: dict[int, ClusterNode] = {}
        for i, (path, address) in enumerate(zip(config_paths, client_addresses, strict=True)):
            prefix = exec_prefix(i + 1) if exec_prefix is not None else ()
            self.nodes[i + 1] = ClusterNode(i + 1, path, address, exec_prefix=prefix, **options)

    def node_ids(self) -> list[int]:
        return sorted(self.nodes)

    @property
    def bootstrap(self) -> str:
        """Every node's client address."""
        return ",".join(self.nodes[i].client_address for i in self.node_ids())

    def start(self, *node_ids: int, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the given nodes (all if none) that are not running, together, and wait until
        each is ready: a node waits for a metadata quorum, so they must start together."""
        ids = [i for i in (node_ids or self.node_ids()) if not self.nodes[i].running()]
        for i in ids:
            self.nodes[i].launch()
        deadline = time.monotonic() + timeout_s
        for i in ids:
            self.nodes[i].wait_ready(max(deadline - time.monotonic(), READY_POLL_S))

    def pid(self, node_id: int) -> int | None:
        return self.nodes[node_id].pid

    def kill9(self, node_id: int) -> None:
        self.nodes[node_id].kill9()

    def pause(self, node_id: int) -> None:
        self.nodes[node_id].send_signal(signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self.nodes[node_id].send_signal(signal.SIGCONT)

    def stop(self, node_id: int, timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
        """A clean stop of one node; what went wrong (see `stop_all`)."""
        return stop_all([self.nodes[node_id]], timeout_s)

    def cpu_seconds(self) -> dict[int, float]:
        """Each node's CPU seconds over all its incarnations."""
        return {i: self.nodes[i].cpu_seconds() for i in self.node_ids()}

    def close(self, timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
        """Stop every node; what went wrong during the cluster's life (see `close_all`)."""
        return close_all([self.nodes[i] for i in self.node_ids()], timeout_s)
