"""The Docker cluster grows from three nodes to five under a steady acks=all load, its replicas
move onto the new brokers, and an old node is emptied and killed without losing a record.

`docker/cluster up` starts nodes 1-3 (controllers and brokers); `docker/cluster grow` adds
nodes 4 and 5 (brokers only: they follow the three voters' quorum and register). Replicas move
with the CLI a user would run on the host: `raftlog partitions reassign --generate` over all
five brokers, `--execute`, then `--verify` until every move is done; then `raftlog broker
decommission 2` moves node 2's replicas to the others, and node 2 is killed. Every acknowledged
record is read back at the offset its acknowledgement named (tests/docker/_docker.py,
check_acknowledged).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.docker._docker import (
    Describe,
    DockerCluster,
    LoadProducer,
    check_acknowledged,
    docker,
    read_all,
    report,
)
from tests.integration._support import run_cli, wait_for

TOPIC = "growing"
PARTITIONS = 3
GROWN = (4, 5)
# The old node emptied and killed: a voter, so the quorum goes on with the other two.
RETIRED = 2
# A move of a few thousand small records completes within seconds here; the deadlines leave a
# wide margin on a loaded machine and still fail a stuck move in bounded time.
MOVE_TIMEOUT_S = 120.0
# Registration follows health (the healthcheck asks the node for its own unfenced broker);
# the controller's view confirms it within a heartbeat or two.
REGISTER_TIMEOUT_S = 30.0
# Failover of the metadata quorum if the killed node led it: the session timeout (3 s in
# compose.yaml) plus an election.
FAILOVER_TIMEOUT_S = 60.0
# Each --verify is a process start (about 0.5 s); polling faster only loads the machine.
VERIFY_INTERVAL_S = 1.0
CLI_TIMEOUT_S = 60.0
# A new quorum leader is elected within about a second (ENVIRONMENT.md, pysyncobj).
RETRY_INTERVAL_S = 1.0


class Cli:
    """`raftlog ARGS -b BOOTSTRAP` on the host, run again while it fails with a retriable
    metadata error (the quorum's leader changed under the command: seen on this loaded
    2-core machine without any fault injected; the CLI says "retry" and leaves it to the
    user). Counts the retries, for the report."""

    def __init__(self, c: DockerCluster):
        self.c = c
        self.retries = 0

    def run(self, *args: str, timeout_s: float = CLI_TIMEOUT_S) -> tuple[int, str]:
        """The exit status and output of the last try."""
        deadline = time.monotonic() + timeout_s
        while True:
            proc = run_cli(*args, "-b", self.c.bootstrap, timeout_s=timeout_s)
            out = proc.stdout + proc.stderr
            retriable = proc.returncode != 0 and proc.stderr.rstrip().endswith("; retry")
            if not retriable or time.monotonic() >= deadline:
                return proc.returncode, out
            self.retries += 1
            time.sleep(RETRY_INTERVAL_S)

    def reassign(self, *args: str) -> tuple[int, str]:
        return self.run("partitions", "reassign", *args)


def _settled(c: DockerCluster, d: Describe) -> bool:
    """Every partition of TOPIC has a leader, no move under way and its whole replica set in
    sync."""
    parts = c.partitions(d, TOPIC)
    return len(parts) == PARTITIONS and all(
        p["leader"] >= 0
        and not p["adding"]
        and not p["removing"]
        and sorted(p["isr"]) == sorted(p["replicas"])
        for p in parts.values()
    )


def _topic_logs(c: DockerCluster, node_id: int) -> list[str]:
    """The TOPIC partition directories in the node's data directory."""
    names = docker("exec", c.container(node_id), "ls", "/var/lib/raftlog/logs").split()
    return [n for n in names if n.startswith(f"{TOPIC}-")]


def test_grow_to_five_move_replicas_onto_the_new_brokers_and_retire_an_old_node(
    docker_cluster: DockerCluster, tmp_path: Path
) -> None:
    c = docker_cluster
    cli = Cli(c)
    c.create_topic(TOPIC, PARTITIONS)
    with LoadProducer(c.bootstrap, TOPIC) as load:
        load.wait_more_acks(300, 60.0)

        # Grow: nodes 4 and 5 join as brokers, not as voters.
        grow_s = c.grow()
        d = c.wait_view(
            lambda d: all(
                any(b["node_id"] == n and not b["fenced"] for b in d["brokers"]) for n in GROWN
            ),
            REGISTER_TIMEOUT_S,
            f"brokers {GROWN} registered and unfenced",
        )
        assert [v["node_id"] for v in d["voters"]] == [1, 2, 3], d["voters"]
        load.wait_more_acks(200, 60.0)

        # Spread the topic over all five brokers.
        started = time.monotonic()
        code, out = cli.reassign("--generate", "--topics", TOPIC, "--brokers", "1,2,3,4,5")
        assert code == 0 and "Proposed partition reassignment configuration" in out, out
        proposed = json.loads(out.strip().splitlines()[-1])
        target = {p["partition"]: p["replicas"] for p in proposed["partitions"]}
        for n in GROWN:
            assert any(n in r for r in target.values()), f"the plan leaves broker {n} out: {out}"
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps(proposed))
        code, out = cli.reassign("--plan", str(plan), "--execute")
        assert code == 0, out
        wait_for(
            lambda: cli.reassign("--plan", str(plan), "--verify")[0] == 0,
            MOVE_TIMEOUT_S,
            f"the moves of {plan.read_text()} to complete",
            interval_s=VERIFY_INTERVAL_S,
        )
        d = c.wait_view(lambda d: _settled(c, d), MOVE_TIMEOUT_S, f"{TOPIC} settled after moves")
        reassign_s = time.monotonic() - started
        parts = c.partitions(d, TOPIC)
        assert {i: p["replicas"] for i, p in parts.items()} == target, parts
        for n in GROWN:
            assert any(n in p["isr"] for p in parts.values()), f"broker {n} in no ISR: {parts}"
        load.wait_more_acks(200, 60.0)

        # Retire node 2: every replica off it, its logs deleted, then killed.
        started = time.monotonic()
        code, text = cli.run(
            "broker",
            "decommission",
            str(RETIRED),
            "--timeout",
            str(int(MOVE_TIMEOUT_S)),
            timeout_s=MOVE_TIMEOUT_S + 30,
        )
        assert code == 0, text
        assert f"Broker {RETIRED} holds no replica: it can be stopped." in text, text
        d = c.wait_view(
            lambda d: (
                _settled(c, d)
                and all(RETIRED not in p["replicas"] for p in c.partitions(d, TOPIC).values())
            ),
            MOVE_TIMEOUT_S,
            f"{TOPIC} settled without broker {RETIRED}",
        )
        decommission_s = time.monotonic() - started
        wait_for(
            lambda: not _topic_logs(c, RETIRED),
            MOVE_TIMEOUT_S,
            f"node {RETIRED}'s logs of {TOPIC} deleted",
        )
        was_controller = d["controller_id"] == RETIRED
        load.wait_more_acks(200, 60.0)
        killed_at = time.monotonic()
        docker("kill", c.container(RETIRED))
        others = tuple(n for n in (1, 2, 3) if n != RETIRED)
        d = c.wait_view(
            lambda d: any(b["node_id"] == RETIRED and b["fenced"] for b in d["brokers"]),
            FAILOVER_TIMEOUT_S,
            f"killed node {RETIRED} fenced",
            others,
        )
        load.wait_more_acks(500, FAILOVER_TIMEOUT_S)
        gap_s = load.longest_gap_s(since=killed_at - 1)
        # Nothing of the topic was on the killed node: every replica still in sync.
        d = c.wait_full_isr(TOPIC, 30.0, others)
    parts = c.partitions(d, TOPIC)
    assert all(RETIRED not in p["replicas"] + p["isr"] for p in parts.values()), parts
    for n in GROWN:
        assert any(n in p["replicas"] and n in p["isr"] for p in parts.values()), parts
    assert not load.failed, load.failed[:5]
    counts = check_acknowledged(load, read_all(c.bootstrap, TOPIC, len(load.acked)))
    report(
        "grow",
        {
            **counts,
            "up_s": round(c.up_s or 0.0, 1),
            "grow_s": round(grow_s, 1),
            "grow_healthy_s": c.grow_healthy_s,
            "grow_rebuilt_image": c.grow_rebuilt,
            "reassign_s": round(reassign_s, 1),
            "decommission_s": round(decommission_s, 1),
            "retired_was_controller": was_controller,
            "longest_ack_gap_after_kill_s": round(gap_s, 2),
            "cli_retries": cli.retries,
            "replicas": {i: p["replicas"] for i, p in parts.items()},
        },
    )
