"""Builds the Go programs of the Kafka-protocol tests (tests/kafka/<name>/main.go) offline, once
per test session.

Go modules would download from a module proxy; Debian instead ships the libraries' sources
under /usr/share/gocode, so the programs build in GOPATH mode (about 3 s, ENVIRONMENT.md): a
temporary GOPATH holds src/<name>/main.go, and `GO111MODULE=off GOPATH=<tmp>:/usr/share/gocode
go build` links against Debian's Sarama. The build cache lives in the same temporary directory,
so nothing is written outside it; the directory is removed when the process exits.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.kafka.tools import GOCODE, go_missing

HERE = Path(__file__).resolve().parent
# A first build compiles Sarama and its dependencies (cgo zstd included): ~3 s idle, far more
# on a loaded 2-core machine.
BUILD_TIMEOUT_S = 300.0


class GoBuildError(RuntimeError):
    """A Go program could not be built: what is missing, or the compiler's output."""


@functools.cache
def _gopath() -> Path:
    path = Path(tempfile.mkdtemp(prefix="raftlog-gopath-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@functools.cache
def go_binary(name: str) -> Path:
    """Path to the built program tests/kafka/<name>/main.go (built on the first call)."""
    missing = go_missing()
    if missing is not None:
        raise GoBuildError(f"cannot build {name}: {missing}")
    source = HERE / name / "main.go"
    if not source.is_file():
        raise GoBuildError(f"cannot build {name}: no {source}")
    gopath = _gopath()
    package = gopath / "src" / name
    package.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, package / "main.go")
    binary = gopath / "bin" / name
    env = {
        **os.environ,
        # cgo runs gcc and pkg-config (for libzstd) from PATH.
        "PATH": os.environ.get("PATH", os.defpath),
        "GO111MODULE": "off",
        "GOPATH": f"{gopath}:{GOCODE}",
        "GOCACHE": str(gopath / "cache"),
        "GOFLAGS": "",
        # Debian's sources are all there is: never reach for the network.
        "GOPROXY": "off",
    }
    try:
        proc = subprocess.run(
            ["go", "build", "-o", str(binary), "."],
            cwd=package,
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GoBuildError(f"`go build` of {name} ran past {BUILD_TIMEOUT_S:g} s") from None
    if proc.returncode != 0 or not binary.is_file():
        raise GoBuildError(f"`go build` of {name} exited {proc.returncode}:\n{proc.stderr}")
    return binary


def sarama_binary() -> Path:
    """The sarama_roundtrip program (tests/kafka/sarama_roundtrip/main.go), built once."""
    return go_binary("sarama_roundtrip")
