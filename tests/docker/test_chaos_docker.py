"""The chaos suite on the docker backend (`raftlog chaos run --backend docker`,
chaos/docker_cluster.py): a short seeded run of kill, isolate and pause against
docker/compose.yaml's containers ends valid, and its faults were really applied to the
containers, not only scheduled: the killed container was started again and passed a health
check, the isolated node's container held DROP rules for both peers (and they for it), the
paused one was unpaused; every replica's files were read; the project is gone afterwards.

About 90 s here: `up` 15-25 s, the 50 s workload, settling, the final reads, stop and `down -v`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.runner import RunConfig, run, summary
from tests.docker._docker import docker

# Seed 6 of this schedule: kill node 2 at 5 s, isolate node 3 at 16.5 s, pause node 1 at
# 26.6 s (each 5-8 s long, 4-6 s apart), then 8 s to recover (chaos/faults.py, schedule).
SEED = 6
DURATION_S = 50.0


def _actions(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "actions.jsonl").read_text().splitlines()]


def test_short_chaos_run_on_docker_is_valid_and_its_faults_were_applied(
    docker_image: str, tmp_path: Path
) -> None:
    cfg = RunConfig(
        out=tmp_path / "run",
        backend="docker",
        duration_s=DURATION_S,
        faults=("kill", "pause", "isolate"),
        seed=SEED,
        steady_s=5.0,
        fault_s=(5.0, 8.0),
        quiet_s=(4.0, 6.0),
        recovery_s=8.0,
        progress=False,
    )
    assert [(s.kind, s.targets) for s in cfg.schedule()] == [
        ("kill", (2,)),
        ("isolate", (3,)),
        ("pause", (1,)),
    ]
    report = run(cfg)
    assert report["valid"], f"{summary(report)}\nproblems: {report['problems']}"
    assert report["acknowledged"] > 1000 and report["lost"] == 0, summary(report)
    assert report["replica_divergence"] == 0 and report["duplicated"] == 0, summary(report)

    # The report's faults, in order, each started and healed (an injector's error would have
    # been recorded as an indeterminate fault: there is none).
    faults = report["faults"]
    assert [(f["kind"], f["targets"]) for f in faults] == [("kill", [2]), ("isolate", [3]),
                                                           ("pause", [1])]  # fmt: skip
    for f in faults:
        assert f["healed_s"] is not None and f["healed_s"] > f["started_s"], f
    history = [json.loads(line) for line in (cfg.out / "history.jsonl").read_text().splitlines()]
    done = [o for o in history if o["f"] == "fault" and o["type"] != "invoke"]
    assert [o["type"] for o in done] == ["ok", "ok", "ok"], done

    # What was done to the containers.
    root = cfg.out / "cluster"
    actions = _actions(root)
    by = [(a["action"], a["nodes"]) for a in actions]
    kill = by.index(("kill", [2]))
    assert by[kill + 1 : kill + 3] == [("start", [2]), ("healthy", [2])], by
    assert ("pause", [1]) in by and by.index(("unpause", [1])) > by.index(("pause", [1])), by
    rules = {a["nodes"][0]: a["rules"] for a in actions if a["action"] == "iptables"}
    assert sorted(rules) == [1, 2, 3], actions
    assert len(rules[3]) == 2 and all(r.endswith("-j DROP") for r in rules[3]), rules
    assert all(len(rules[n]) == 1 and rules[n][0].startswith("-A INPUT -s") for n in (1, 2))
    assert rules[1] == rules[2], rules  # both drop node 3's address...
    node3 = rules[1][0].split()[3]
    assert all(node3 not in r for r in rules[3]), rules  # ...and node 3 drops the others'
    flushed = sorted(a["nodes"] for a in actions if a["action"] == "iptables-flush")
    assert flushed == [[1], [2], [3]], actions

    # Node 2's container ran twice: its log has two ready lines; the others ran once.
    (log,) = (root / "logs").glob("*.log")
    text = log.read_text()
    for node, incarnations in ((1, 1), (2, 2), (3, 1)):
        assert text.count(f"raftlog broker {node} ready") == incarnations, node

    # Every replica of every partition was read from its files, each with records.
    reads = [o for o in history if o["f"] == "replica-read"]
    assert sorted((o["node"], o["tp"]) for o in reads) == [
        (n, f"chaos-{p}") for n in (1, 2, 3) for p in range(3)
    ]
    assert all(o["value"] for o in reads)

    # The project is gone with its volumes.
    project = log.stem
    label = f"label=com.docker.compose.project={project}"
    assert docker("ps", "-a", "-q", "--filter", label) == ""
    assert docker("volume", "ls", "-q", "--filter", label) == ""


def test_a_short_run_through_kafkas_own_client_on_docker_is_valid(
    docker_image: str, tmp_path: Path
) -> None:
    """`--client kafka` on the docker backend: confluent-kafka from the host through the
    containers' published external Kafka listeners, a node killed and started again."""
    cfg = RunConfig(
        out=tmp_path / "kafka",
        backend="docker",
        client="kafka",
        duration_s=30.0,
        faults=("kill",),
        seed=SEED,
        steady_s=5.0,
        fault_s=(5.0, 8.0),
        quiet_s=(4.0, 6.0),
        recovery_s=8.0,
        progress=False,
    )
    report = run(cfg)
    assert report["valid"], f"{summary(report)}\nproblems: {report['problems']}"
    assert report["acknowledged"] > 500 and report["lost"] == report["duplicated"] == 0
    assert [f["kind"] for f in report["faults"]] == ["kill"] * len(report["faults"])
    history = [json.loads(line) for line in (cfg.out / "history.jsonl").read_text().splitlines()]
    assert sum(1 for o in history if o["f"] == "commit" and o["type"] == "ok") > 5
