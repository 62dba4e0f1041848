"""The docker backend's refusals, without Docker: kinds it cannot inject are named before
anything starts (no output directory, no container), by `run` and by `raftlog chaos run`; a
grudge the docker network cannot express without iptables is refused before any docker call;
the user's compose project is never taken. (tests/docker/test_chaos_docker.py runs it for real.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos.docker_cluster import (
    DockerCluster,
    DockerNetwork,
    _docker_time,
    refuse_unsupported,
    unsupported_kinds,
)
from chaos.faults import DISK_KINDS, LINK_KINDS, PROCESS_KINDS, FaultError, FaultSpec, grudge_for
from chaos.runner import RunConfig, run
from raftlog.cli import main


def test_link_and_disk_kinds_are_refused_naming_each() -> None:
    assert unsupported_kinds((*PROCESS_KINDS, "isolate", "split", "bridge", "one-way")) == []
    with pytest.raises(FaultError) as e:
        refuse_unsupported(("kill", "link", "torn-tail", "isolate"), 3)
    assert "backend docker" in str(e.value) and "link, torn-tail: local backend only" in str(
        e.value
    )
    assert unsupported_kinds(LINK_KINDS + DISK_KINDS) == list(LINK_KINDS + DISK_KINDS)


def test_without_iptables_only_isolate_of_the_network_kinds() -> None:
    kinds = ("isolate", "split", "bridge", "one-way")
    assert unsupported_kinds(kinds, iptables=False) == ["split", "bridge", "one-way"]
    with pytest.raises(FaultError, match="split, bridge, one-way: need iptables in the image"):
        refuse_unsupported(kinds, 3, iptables=False)
    with pytest.raises(FaultError, match=r"docker/compose\.yaml has 3 nodes, the run asked for 5"):
        refuse_unsupported(("kill",), 5)


def test_run_refuses_before_starting_anything(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(FaultError, match="bitflip"):
        run(RunConfig(out=out, backend="docker", faults=("kill", "bitflip"), progress=False))
    with pytest.raises(FaultError, match="backend 'vm': must be one of local, docker"):
        run(RunConfig(out=out, backend="vm", progress=False))
    assert not out.exists()


def test_cli_exits_2_naming_the_refused_kinds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["chaos", "run", "--backend", "docker", "--faults", "pause,disk-full", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "backend docker cannot inject these fault kinds: disk-full: local backend only" in err
    assert not out.exists()


def test_the_users_compose_project_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FaultError, match="compose project 'raftlog' is the user's cluster's"):
        DockerCluster(tmp_path, project="raftlog")
    c = DockerCluster(tmp_path)
    assert c.project.startswith("raftlogchaos") and len(set(c.ports)) == 3
    assert c.close() == []  # never up: nothing to stop or remove


class _NoDocker:
    """A cluster whose containers must not be touched."""

    services = ("raftlog-1", "raftlog-2", "raftlog-3")
    project = "p"

    def node_ids(self) -> list[int]:
        return [1, 2, 3]

    def container(self, node_id: int) -> Any:
        raise AssertionError(f"docker called for node {node_id}")


@pytest.mark.parametrize(
    "spec",
    # (A split of one node from two is an isolate: the only split three nodes have.)
    [FaultSpec("bridge", (1,)), FaultSpec("one-way", (1, 2, 3)), FaultSpec("one-way", (2, 1))],
)
def test_without_iptables_a_grudge_other_than_isolate_is_refused_untouched(spec: FaultSpec) -> None:
    net = DockerNetwork(_NoDocker())  # type: ignore[arg-type]
    net.iptables = False
    with pytest.raises(FaultError, match="can only isolate whole nodes"):
        net.apply(grudge_for(spec, [1, 2, 3]))


def test_docker_timestamps() -> None:
    assert _docker_time("1970-01-01T00:00:01.5Z") == 1_500_000_000
    assert _docker_time("1970-01-01T01:00:00.123456789+01:00") == 123_456_789
    assert _docker_time("2026-11-23T13:40:01Z") > _docker_time("2026-11-23T13:40:00.999999999Z")
    with pytest.raises(FaultError, match="not RFC 3339"):
        _docker_time("yesterday")


def test_docker_pause_tries_again_when_runc_cannot_freeze(monkeypatch: pytest.MonkeyPatch) -> None:
    """runc gives up freezing a container whose process is in uninterruptible I/O (a loaded
    machine: "unable to freeze"); the pause is tried again, other errors are not."""
    from chaos import docker_cluster
    from chaos.faults import FaultError

    calls: list[tuple[str, ...]] = []
    outcomes = ["unable to freeze: unknown", "unable to freeze: unknown", None]

    def fake_docker(*args: str, timeout_s: float = 0.0) -> str:
        calls.append(args)
        error = outcomes.pop(0)
        if error is not None:
            raise FaultError(f"`docker pause c` exited 1:\n\nOCI runtime pause failed: {error}")
        return ""

    monkeypatch.setattr(docker_cluster, "docker", fake_docker)
    monkeypatch.setattr(docker_cluster, "PAUSE_RETRY_S", 0.0)
    docker_cluster.docker_pause("c")
    assert calls == [("pause", "c")] * 3

    outcomes[:] = ["No such container: c"]
    with pytest.raises(FaultError, match="No such container"):
        docker_cluster.docker_pause("c")
