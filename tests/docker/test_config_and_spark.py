"""The Docker cluster's configuration errors, and a Spark job on the host reading from it.

A bad node (a duplicate node id, a voter list that disagrees) is started next to a healthy
cluster from the same image, as a user copying a compose service would: it must stop with a
message in its log that says what is wrong, never turn healthy, and leave the others running.
"""

from __future__ import annotations

import collections
import json
import random
import subprocess
from pathlib import Path
from typing import Any

from raftlog_spark.jobs import pageviews

from raftlog.client import Producer
from tests.docker._docker import SERVICES, DockerCluster, docker, report
from tests.integration._support import wait_for

VOTERS = "1@raftlog-1:9093,2@raftlog-2:9093,3@raftlog-3:9093"
# A bad node fails at start (a duplicate id: within a second) or once it has joined the quorum
# and registered (a voter list: a few seconds); 90 s leaves room for a loaded machine.
BAD_NODE_TIMEOUT_S = 90.0


def _run_node(c: DockerCluster, name: str, alias: str, env: dict[str, str], *extra: str) -> str:
    args = ["run", "-d", "--name", name, "--network", c.network, "--network-alias", alias]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    return docker(*args, *extra, c.image)


def _exited_with_message(container: str, message: str) -> str:
    """Wait until `container` exits; check its status (1), its health (never healthy) and that
    its log says `message`; return the log."""
    wait_for(
        lambda: docker("inspect", "-f", "{{.State.Status}}", container) == "exited",
        BAD_NODE_TIMEOUT_S,
        f"bad node {container} to stop",
        interval_s=0.5,
    )
    state = json.loads(docker("inspect", "-f", "{{json .State}}", container))
    # docker logs writes the container's stdout and stderr to its own two.
    proc = subprocess.run(
        ["docker", "logs", container], capture_output=True, text=True, timeout=60, check=False
    )
    logs = proc.stdout + proc.stderr
    assert state["ExitCode"] == 1, f"exit code {state['ExitCode']}:\n{logs}"
    assert (state.get("Health") or {}).get("Status") != "healthy", state
    assert message in logs, f"{message!r} not in the bad node's log:\n{logs}"
    return logs


def test_a_duplicate_node_id_stops_that_node_saying_so(docker_cluster: DockerCluster) -> None:
    c = docker_cluster
    name = f"{c.project}-copy"
    # A service copied from raftlog-2 whose node id was not changed.
    container = _run_node(
        c,
        name,
        "raftlog-4",
        {
            "RAFTLOG_NODE_ID": "2",
            "RAFTLOG_CONTROLLER_VOTERS": VOTERS,
            "RAFTLOG_ADVERTISED_LISTENER": "raftlog-4:9092",
        },
    )
    try:
        logs = _exited_with_message(container, "which is not an address of this host")
        assert "node_id=2 right" in logs, logs
        for n in (1, 2, 3):
            assert c.health(n) == "healthy"
    finally:
        docker("rm", "-f", container, check=False)


def test_a_voter_list_that_disagrees_stops_that_node_saying_so(
    docker_cluster: DockerCluster,
) -> None:
    c = docker_cluster
    # Node 3 comes back with a voter list that was grown on it alone.
    docker("stop", "-t", "20", c.container(3), timeout_s=60)
    name = f"{c.project}-grown"
    container = _run_node(
        c,
        name,
        SERVICES[2],
        {
            "RAFTLOG_NODE_ID": "3",
            "RAFTLOG_CONTROLLER_VOTERS": VOTERS + ",4@raftlog-4:9093",
            "RAFTLOG_ADVERTISED_LISTENER": "raftlog-3:9092",
        },
        "-v",
        f"{c.project}_raftlog-3:/var/lib/raftlog",
    )
    try:
        logs = _exited_with_message(container, "differ from those of most registered brokers")
        assert "4@raftlog-4:9093" in logs, logs
        assert "every node must list the same voters" in logs, logs
    finally:
        docker("rm", "-f", container, check=False)
    # The right node 3 comes back and the cluster is whole again.
    docker("start", c.container(3))
    c.wait_healthy(3, 120.0)
    c.wait_view(
        lambda d: len(d["brokers"]) == 3 and not any(b["fenced"] for b in d["brokers"]),
        60.0,
        "three unfenced brokers",
    )


PAGES = ["/", "/pricing", "/docs", "/blog", "/signup"]
BASE_MS = 1_700_000_000_000


def test_the_spark_page_view_job_on_the_host_reads_the_cluster(
    docker_cluster: DockerCluster, spark: Any, tmp_path: Path
) -> None:
    c = docker_cluster
    c.create_topic("pageviews", 3)
    rng = random.Random(7)
    events = []
    for i in range(3000):
        user = f"user-{rng.randrange(200):04d}"
        e = {"user": user, "page": rng.choice(PAGES), "seq": i, "ts": BASE_MS + i * 97}
        events.append((user.encode(), json.dumps(e).encode()))
    with Producer(bootstrap_servers=c.bootstrap, acks="all", linger_ms=10) as p:
        for fut in [p.send("pageviews", v, key=k) for k, v in events]:
            fut.result(60)
    summary = pageviews.run_pageview_report(
        c.bootstrap, "pageviews", str(tmp_path / "report"), spark=spark
    )
    assert summary["events"] == len(events)
    assert summary["pages"] == dict(collections.Counter(json.loads(v)["page"] for _, v in events))
    users: dict[str, set[str]] = collections.defaultdict(set)
    for _, v in events:
        e = json.loads(v)
        users[e["page"]].add(e["user"])
    assert summary["users_per_page"] == {p: len(u) for p, u in users.items()}
    report("spark_from_host", {"events": summary["events"], "job_s": round(summary["job_s"], 2)})
