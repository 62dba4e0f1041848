"""The Docker cluster of docker/compose.yaml under test: started with `docker/cluster up`, driven
with the docker CLI, observed from the host through the external listeners.

Rules (STYLE.md, Tests): every cluster is its own compose project (its own network, volumes and
host ports), removed with its data at the end; every wait polls observable state (a container's
health, a node's DescribeCluster answer) with a deadline; a node that logged a Python traceback
fails the test. Clients run on the host, as a user's would, and reach the brokers only through
the published 127.0.0.1 ports.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raftlog.client import Admin, Consumer, Producer
from raftlog.errors import RaftlogError
from raftlog.launcher import free_ports
from tests.integration._support import wait_for

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "docker" / "cluster"
COMPOSE_FILE = ROOT / "docker" / "compose.yaml"
# Nodes 1-3 (controllers and brokers) start with `docker/cluster up`; 4 and 5 (brokers only, the
# compose profile "grow") with `docker/cluster grow`.
SERVICES = ("raftlog-1", "raftlog-2", "raftlog-3", "raftlog-4", "raftlog-5")
UP_NODES = (1, 2, 3)
GROW_PROFILE = "grow"
# Compose's `prometheus` service (scraping the nodes from inside the network) is in its own
# profile; `docker/cluster down` removes it with the nodes.
PROMETHEUS_PROFILE = "prometheus"
# `docker/cluster up` of three nodes takes 5-20 s here, `grow` about as long; the script's own
# deadline (RAFTLOG_UP_TIMEOUT_S) is below this one, so it fails first, with the nodes' logs.
UP_TIMEOUT_S = 240.0
DOCKER_TIMEOUT_S = 120.0
# Describe requests go to one node at a time; a killed or paused node must not hold a poll.
DESCRIBE_TIMEOUT_MS = 2000
POLL_INTERVAL_S = 0.2
# After a send() that raised (no metadata answer in time), try the record again this much later.
SEND_RETRY_S = 0.1

_projects = itertools.count(1)

Describe = dict[str, Any]


def docker(
    *args: str,
    timeout_s: float = DOCKER_TIMEOUT_S,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> str:
    proc = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout_s, check=False, env=env
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc.stdout.strip()


class DockerCluster:
    """One compose project of docker/compose.yaml; `service` names are raftlog-1..5, of which
    `nodes` (1-3 after `up`, 1-5 after `grow`) were started. Host ports are chosen for all
    five, so that a grown node's are known before it starts, and for Prometheus."""

    def __init__(self, log_dir: Path):
        self.project = f"rltest{os.getpid()}x{next(_projects)}"
        n = len(SERVICES)
        ports = free_ports(3 * n + 1)
        self.ports = ports[:n]
        self.kafka_ports = ports[n : 2 * n]
        # compose.yaml's default metrics ports (39092-39096) lie in the ephemeral port range.
        self.metrics_ports = ports[2 * n : 3 * n]
        self.prometheus_port = ports[-1]
        self.nodes: tuple[int, ...] = UP_NODES
        self.log_dir = log_dir
        self.env = {
            **os.environ,
            "RAFTLOG_COMPOSE_PROJECT": self.project,
            **{f"RAFTLOG_PORT_{i + 1}": str(p) for i, p in enumerate(self.ports)},
            **{f"RAFTLOG_KAFKA_PORT_{i + 1}": str(p) for i, p in enumerate(self.kafka_ports)},
            **{f"RAFTLOG_METRICS_PORT_{i + 1}": str(p) for i, p in enumerate(self.metrics_ports)},
            "RAFTLOG_PROMETHEUS_PORT": str(self.prometheus_port),
        }
        self.image = os.environ.get("RAFTLOG_IMAGE", "raftlog:local")
        self.up_s: float | None = None
        self.grow_s: float | None = None
        # What `docker/cluster grow` said: seconds from starting nodes 4 and 5 to all five
        # healthy, and whether it rebuilt the image first (the source changed since `up`).
        self.grow_healthy_s: int | None = None
        self.grow_rebuilt = False

    # -- lifecycle ---------------------------------------------------------------------------

    def cluster(
        self, *args: str, timeout_s: float = UP_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(CLUSTER), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=self.env,
            check=False,
        )

    def compose(self, *args: str, check: bool = True) -> str:
        """`docker compose ARGS` on this project with its host ports, the grown nodes' and
        Prometheus' profiles enabled (so that `logs` and `ps` include them once they exist)."""
        return docker(
            "compose",
            "-f",
            str(COMPOSE_FILE),
            "-p",
            self.project,
            "--profile",
            GROW_PROFILE,
            "--profile",
            PROMETHEUS_PROFILE,
            *args,
            check=check,
            env=self.env,
        )

    def up(self) -> None:
        started = time.monotonic()
        proc = self.cluster("up")
        self.up_s = time.monotonic() - started
        assert proc.returncode == 0, f"docker/cluster up failed:\n{proc.stdout}\n{proc.stderr}"
        assert f"bootstrap servers: {self.bootstrap}" in proc.stdout, proc.stdout
        assert f"Kafka protocol bootstrap servers: {self.kafka_bootstrap}" in proc.stdout, (
            proc.stdout
        )

    def grow(self) -> float:
        """`docker/cluster grow`: start nodes 4 and 5 (brokers only) into the running cluster;
        the seconds the whole command took (a rebuild of the image if the source changed since
        `up`, then the start, until all five were healthy)."""
        started = time.monotonic()
        proc = self.cluster("grow")
        self.grow_s = time.monotonic() - started
        assert proc.returncode == 0, f"docker/cluster grow failed:\n{proc.stdout}\n{proc.stderr}"
        self.nodes = tuple(range(1, len(SERVICES) + 1))
        healthy = re.search(r"healthy (\d+) s after starting", proc.stderr)
        assert healthy, proc.stderr
        self.grow_healthy_s = int(healthy.group(1))
        self.grow_rebuilt = "== built " in proc.stderr
        assert f"bootstrap servers: {self.bootstrap}" in proc.stdout, proc.stdout
        assert f"Kafka protocol bootstrap servers: {self.kafka_bootstrap}" in proc.stdout, (
            proc.stdout
        )
        return self.grow_s

    def start_prometheus(self) -> None:
        """Start compose's `prometheus` service in this project, as the docs tell a user to
        (its image: PROMETHEUS_IMAGE, else the one `docker/cluster build` made); its API at
        `prometheus_url`. `down` removes it with its volume."""
        self.compose("up", "-d", "prometheus")

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    def down(self) -> list[str]:
        """Save the logs, remove everything with its data; list tracebacks found in the logs."""
        problems = []
        logs = self.compose("logs", "--no-color", "--timestamps", check=False)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / f"{self.project}.log").write_text(logs)
        at = logs.find("Traceback")
        if at >= 0:
            problems.append(f"a node logged a traceback:\n{logs[max(at - 500, 0) : at + 3000]}")
        proc = self.cluster("down", "-v", "--remove-orphans", "-t", "20")
        if proc.returncode != 0:
            problems.append(f"docker/cluster down -v failed: {proc.stderr}")
        # `down -v` removes the grown nodes and Prometheus too, with their volumes.
        label = f"label=com.docker.compose.project={self.project}"
        for kind, ls in (("containers", ("ps", "-a")), ("volumes", ("volume", "ls"))):
            left = docker(*ls, "-q", "--filter", label, check=False)
            if left:
                problems.append(f"docker/cluster down -v left {kind}: {left.split()}")
        return problems

    # -- addresses ---------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """The started nodes' external listeners."""
        return ",".join(self.external(n) for n in self.nodes)

    @property
    def kafka_bootstrap(self) -> str:
        """The started nodes' external Kafka listeners, as a Kafka client on the host reaches
        them."""
        return ",".join(f"127.0.0.1:{self.kafka_ports[n - 1]}" for n in self.nodes)

    def external(self, node_id: int) -> str:
        return f"127.0.0.1:{self.ports[node_id - 1]}"

    @property
    def network(self) -> str:
        return f"{self.project}_raftlog"

    def container(self, node_id: int) -> str:
        cid = self.compose("ps", "-a", "-q", SERVICES[node_id - 1])
        assert cid, f"no container for {SERVICES[node_id - 1]}"
        return cid

    def health(self, node_id: int) -> str:
        return docker(
            "inspect",
            "-f",
            "{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}",
            self.container(node_id),
        )

    def wait_healthy(self, node_id: int, timeout_s: float = 90.0) -> None:
        wait_for(
            lambda: self.health(node_id) == "healthy",
            timeout_s,
            f"node {node_id}'s container to be healthy",
            interval_s=POLL_INTERVAL_S,
        )

    # -- observing ---------------------------------------------------------------------------

    def describe(self, node_id: int) -> Describe | None:
        """Node `node_id`'s own view, asked through its external listener; None if it does not
        answer."""
        try:
            with Admin(self.external(node_id), request_timeout_ms=DESCRIBE_TIMEOUT_MS) as a:
                d = a.describe_cluster()
        except (OSError, RaftlogError):
            return None
        return d if d["node_id"] == node_id else None

    def wait_view(
        self,
        predicate: Callable[[Describe], bool],
        timeout_s: float,
        what: str,
        via: tuple[int, ...] = (1, 2, 3),
    ) -> Describe:
        """Poll the nodes `via` until the active controller's view satisfies `predicate`."""
        last: list[Describe] = []

        def check() -> Describe | None:
            for n in via:
                d = self.describe(n)
                if d is not None and d["quorum"]["this_node_leads"]:
                    last[:] = [d]
                    return d if predicate(d) else None
            return None

        try:
            return wait_for(check, timeout_s, what, interval_s=POLL_INTERVAL_S)
        except AssertionError as e:
            raise AssertionError(f"{e}; last controller view: {last[:1]}") from None

    def partitions(self, d: Describe, topic: str) -> dict[int, dict[str, Any]]:
        return {p["partition"]: p for p in d["partitions"] if p["topic"] == topic}

    def wait_full_isr(
        self, topic: str, timeout_s: float, via: tuple[int, ...] = (1, 2, 3)
    ) -> Describe:
        def full(d: Describe) -> bool:
            parts = self.partitions(d, topic)
            return bool(parts) and all(
                sorted(p["isr"]) == sorted(p["replicas"]) and p["leader"] >= 0
                for p in parts.values()
            )

        return self.wait_view(full, timeout_s, f"every replica of {topic} in its ISR", via)

    def create_topic(self, topic: str, partitions: int) -> None:
        with Admin(self.bootstrap) as admin:
            admin.create_topic(
                topic, partitions, replication_factor=3, config={"min.insync.replicas": "2"}
            )
        self.wait_full_isr(topic, 30.0)


class LoadProducer:
    """A steady acks=all load from the host in a thread: record i of key k is the value
    "k:i"; every acknowledgement is recorded with its offset and the time it arrived.

    A key's next record is sent only once its previous one is answered: the producer is not
    idempotent, and a batch retried after a leader change can land after a later batch sent
    to the new leader (seen here in rolling restarts even with one request in flight per
    connection), so only this keeps each key in order. The keys' records overlap in flight.
    A send() that raises (no metadata answer within request_timeout_ms while a node is down)
    is counted and the same record sent again."""

    def __init__(self, bootstrap: str, topic: str, keys: int = 12, interval_s: float = 0.002):
        self.topic = topic
        self.keys = keys
        self.interval_s = interval_s
        self.producer = Producer(
            bootstrap_servers=bootstrap,
            acks="all",
            linger_ms=2,
            retry_backoff_ms=50,
            request_timeout_ms=5000,
            delivery_timeout_ms=90_000,
        )
        self.acked: dict[str, tuple[int, int]] = {}  # value -> (partition, offset)
        self.ack_times: list[float] = []
        self.failed: list[str] = []
        self.sent = 0
        self.send_errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-producer", daemon=True)

    def __enter__(self) -> LoadProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        seq = [0] * self.keys
        outstanding: list[Any] = [None] * self.keys
        i = 0
        while not self._stop.is_set():
            k = i % self.keys
            i += 1
            if outstanding[k] is not None and not outstanding[k].done():
                time.sleep(self.interval_s / self.keys)
                continue
            value = f"k{k}:{seq[k]}"
            try:
                fut = self.producer.send(self.topic, value.encode(), key=f"k{k}".encode())
            except RaftlogError:
                self.send_errors += 1
                time.sleep(SEND_RETRY_S)
                continue
            seq[k] += 1
            self.sent += 1
            outstanding[k] = fut
            fut.add_done_callback(lambda f, v=value: self._done(v, f))
            time.sleep(self.interval_s)

    def _done(self, value: str, fut: Any) -> None:
        now = time.monotonic()
        error = fut.exception(0)
        with self._lock:
            if error is not None:
                self.failed.append(f"{value}: {error}")
                return
            md = fut.result(0)
            self.acked[value] = (md.partition, md.offset)
            self.ack_times.append(now)

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_more_acks(self, n: int, timeout_s: float) -> None:
        target = self.acked_count() + n
        wait_for(lambda: self.acked_count() >= target, timeout_s, f"{n} more acknowledged records")

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(120)
        self.producer.close()

    def longest_gap_s(self, since: float | None = None) -> float:
        """The longest time between consecutive acknowledgements (after `since`)."""
        times = sorted(t for t in self.ack_times if since is None or t >= since)
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def read_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0) -> list[Any]:
    """Every record of `topic` from the start until at least `expected` were read and the
    consumer is at the log end of every partition."""
    records: list[Any] = []
    with Consumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        deadline = time.monotonic() + timeout_s
        while True:
            assert time.monotonic() < deadline, f"read {len(records)} of {expected} records"
            for recs in consumer.poll(timeout_ms=500).values():
                records.extend(recs)
            if len(records) >= expected:
                ends = consumer.end_offsets(consumer.assignment())
                if all(consumer.position(tp) >= end for tp, end in ends.items()):
                    return records


def check_acknowledged(load: LoadProducer, records: list[Any]) -> dict[str, int]:
    """Every acknowledged record is in the log at the offset its acknowledgement named, and each
    key's records are in order. Returns counts: read, acknowledged, duplicates (a batch sent
    again after its answer was lost: the producer is not idempotent yet)."""
    at = {(r.partition, r.offset): r.value.decode() for r in records}
    missing = [v for v, where in load.acked.items() if at.get(where) != v]
    assert not missing, (
        f"{len(missing)} acknowledged records not where acknowledged: {missing[:10]}"
    )
    seen: set[str] = set()
    last: dict[str, int] = {}
    duplicates = 0
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        value = r.value.decode()
        if value in seen:
            duplicates += 1
            continue
        seen.add(value)
        key, _, n = value.partition(":")
        assert int(n) > last.get(key, -1), f"key {key}: {value} after {key}:{last[key]}"
        last[key] = int(n)
    return {
        "read": len(records),
        "acknowledged": len(load.acked),
        "duplicates": duplicates,
        "send_errors": load.send_errors,
    }


def report(name: str, figures: dict[str, Any]) -> None:
    """Print a test's measured figures (pytest -s shows them) and keep them in
    $RAFTLOG_DOCKER_REPORT (a JSON-lines file) when that is set."""
    line = json.dumps({"test": name, **figures})
    print(f"\n[docker figures] {line}")
    path = os.environ.get("RAFTLOG_DOCKER_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
