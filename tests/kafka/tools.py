"""The programs the Kafka-protocol tests need from outside the venv, and what a test does when
one is missing.

kcat (Debian `kcat`) and Go with Sarama (Debian `golang-go`, `golang-github-shopify-sarama-dev`,
and gcc for Sarama's cgo zstd codec) are installed by scripts/test (`ensure_kafka_tools` in
scripts/_system.sh) when it runs as root with apt-get, as CI does. The rule, the Docker tests'
rule: where they could have been installed (root with apt-get) a missing one FAILS the test,
since an install step failed and a skip would hide it; elsewhere the test skips, naming what is
missing and how to provide it (README, "Test").
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

KCAT = "/usr/bin/kcat"
GOCODE = Path("/usr/share/gocode")
SARAMA_SOURCES = GOCODE / "src" / "github.com" / "Shopify" / "sarama"
INSTALL_HINT = "scripts/test installs it as root with apt-get (ensure_kafka_tools)"


def kcat_missing() -> str | None:
    """None when kcat can run here; otherwise what is missing, for a skip or failure message."""
    if shutil.which("kcat") is None and not os.access(KCAT, os.X_OK):
        return f"kcat is not installed (Debian package kcat; {INSTALL_HINT})"
    return None


def go_missing() -> str | None:
    """None when a Sarama program can be built here; otherwise what is missing."""
    missing = []
    if shutil.which("go") is None:
        missing.append("go (Debian package golang-go)")
    if shutil.which("gcc") is None:
        missing.append("gcc (Sarama's zstd codec is cgo)")
    if not SARAMA_SOURCES.is_dir():
        missing.append(f"Sarama's sources in {SARAMA_SOURCES} (golang-github-shopify-sarama-dev)")
    if missing:
        return f"{', '.join(missing)} not installed ({INSTALL_HINT})"
    return None


def could_install() -> bool:
    """True where scripts/test installs the tools itself (root with apt-get, as in CI)."""
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def need(missing: str | None) -> None:
    """Go on when nothing is missing; otherwise fail (the tools could have been installed here)
    or skip (they could not), naming what is missing."""
    if missing is None:
        return
    if could_install():
        pytest.fail(f"{missing}: an install step failed", pytrace=False)
    pytest.skip(missing)


def need_kcat() -> str:
    """The kcat executable, or fail/skip as `need` says."""
    need(kcat_missing())
    return shutil.which("kcat") or KCAT


def need_go() -> None:
    """Go on when Go and Sarama are here, or fail/skip as `need` says."""
    need(go_missing())
