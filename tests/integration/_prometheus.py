"""A real Prometheus server (Debian's `prometheus`) and `promtool` for the tests: found or the
test fails/skips, started as a child process on its own config, data directory and free port,
asked over its HTTP API, always stopped.

Debian's `prometheus` package gives both programs; scripts/test installs it as root with
apt-get (`ensure_prometheus` in scripts/_system.sh). The rule, the Kafka tools' rule
(tests/kafka/tools.py): where it could have been installed (root with apt-get) a missing
program FAILS the test, since an install step failed and a skip would hide it; elsewhere the
test skips, naming what is missing.

`shortened_rules` is how a test exercises the shipped alert rules (docs/prometheus/alerts.yml)
without waiting their operator-sized `for:` durations: the same expressions, with the
durations and range windows of the named alerts replaced, each replacement checked to have
happened, so a renamed or restructured alert fails the test instead of being left unexercised.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from raftlog.launcher import free_ports
from tests.integration._support import HOST, wait_for

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "prometheus" / "alerts.yml"
INSTALL_HINT = "scripts/test installs it as root with apt-get (ensure_prometheus)"
# Prometheus 2.42 opens its TSDB and serves /-/ready in about a second here; 30 s leaves room
# for a loaded 2-core CI machine and still fails a hung start in bounded time.
READY_TIMEOUT_S = 30.0
# A graceful stop (SIGTERM) closes the TSDB's head; it takes well under a second here.
STOP_TIMEOUT_S = 15.0
# Each API request answers from memory in milliseconds; a stuck one fails the poll.
HTTP_TIMEOUT_S = 5.0
# A free port can still be taken between the pick and Prometheus' bind (ENVIRONMENT.md,
# "Process traps"): start again on another this many times.
START_ATTEMPTS = 3


def missing() -> str | None:
    """None when `prometheus` and `promtool` are here; otherwise what is missing."""
    absent = [p for p in ("prometheus", "promtool") if shutil.which(p) is None]
    if absent:
        return f"{' and '.join(absent)} not installed (Debian package prometheus; {INSTALL_HINT})"
    return None


def need_prometheus() -> None:
    """Go on when both programs are here; otherwise fail where scripts/test could have
    installed them (root with apt-get) and skip elsewhere, naming what is missing."""
    what = missing()
    if what is None:
        return
    if os.geteuid() == 0 and shutil.which("apt-get") is not None:
        pytest.fail(f"{what}: an install step failed", pytrace=False)
    pytest.skip(what)


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run `promtool ARGS` (60 s at most), its output captured as text."""
    return subprocess.run(["promtool", *map(str, args)], capture_output=True, text=True, timeout=60)


@dataclass(frozen=True, slots=True)
class Shortening:
    """What a test changes in one alert: its `for:` (None: keep it) and every range window of
    its expression (None: keep them)."""

    for_: str | None = None
    window: str | None = None


_RULE_START = re.compile(r"^\s*- (alert|record): *(\S+)")
_FOR = re.compile(r"^(\s*for: *)(\S+)")
_WINDOW = re.compile(r"\[(\d+[smhd])\]")


def shortened_rules(text: str, changes: dict[str, Shortening]) -> str:
    """`text` (a rule file) with each named alert's `for:` and range windows replaced as
    `changes` says. Fails when an alert is not in the file, or has no `for:` or no window to
    replace: the test would no longer exercise what it claims."""
    out: list[str] = []
    current: str | None = None
    done: dict[str, set[str]] = {name: set() for name in changes}
    for line in text.splitlines(keepends=True):
        start = _RULE_START.match(line)
        if start:
            current = start.group(2) if start.group(1) == "alert" else None
        change = changes.get(current) if current is not None else None
        if change is not None and current is not None:
            m = _FOR.match(line)
            if m and change.for_ is not None:
                line = f"{m.group(1)}{change.for_}{line[m.end() :]}"
                done[current].add("for")
            elif change.window is not None and _WINDOW.search(line):
                line = _WINDOW.sub(f"[{change.window}]", line)
                done[current].add("window")
        out.append(line)
    for name, change in changes.items():
        wanted = {"for"} if change.for_ else set()
        wanted |= {"window"} if change.window else set()
        assert done[name] == wanted, f"alert {name}: replaced {done[name]}, expected {wanted}"
    return "".join(out)


def scrape_config(
    targets: list[str], rules: Path, interval: str = "1s", job: str = "raftlog"
) -> str:
    """A Prometheus config (JSON is YAML) scraping `targets` as job `job` every `interval`,
    evaluating `rules` as often."""
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}],
    }
    return json.dumps(config, indent=2)


class PrometheusServer:
    """`prometheus` on `config`, its data and log under `root`, on a free 127.0.0.1 port."""

    def __init__(self, config: Path, root: Path):
        self.config = config
        self.data_dir = root / "prometheus-data"
        self.log_path = root / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        for attempt in range(START_ATTEMPTS):
            (self.port,) = free_ports(1, HOST)
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [
                        "prometheus",
                        f"--config.file={self.config}",
                        f"--storage.tsdb.path={self.data_dir}",
                        f"--web.listen-address={HOST}:{self.port}",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            try:
                wait_for(self._ready, READY_TIMEOUT_S, "Prometheus to be ready", interval_s=0.1)
                return
            except _Exited:
                if "address already in use" in self.log_tail() and attempt + 1 < START_ATTEMPTS:
                    continue
                raise AssertionError(f"prometheus exited at start:\n{self.log_tail()}") from None
            except AssertionError as e:
                self.stop()
                raise AssertionError(f"{e}\n{self.log_tail()}") from None

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise _Exited()
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=HTTP_TIMEOUT_S) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, ConnectionError):
            return False

    def stop(self) -> None:
        """SIGTERM, SIGKILL after STOP_TIMEOUT_S; a no-op when it is not running."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)

    def check_running(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, (
            f"prometheus died (exit {self.proc and self.proc.returncode}):\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    # -- the HTTP API -------------------------------------------------------------------------

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/PATH?PARAMS; its `data` (the request must succeed)."""
        self.check_running()
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(
            f"{self.url}/api/v1/{path}{query}", timeout=HTTP_TIMEOUT_S
        ) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        """An instant vector query: (labels, value) per series."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return [(s["metric"], float(s["value"][1])) for s in data["result"]]

    def scalar(self, expr: str) -> float | None:
        """The value of a query that yields one series, None if it yields none."""
        result = self.query(expr)
        assert len(result) <= 1, f"{expr}: {result}"
        return result[0][1] if result else None

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing), each with `labels`, `state`, `value`."""
        return list(self.api("alerts")["alerts"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets", state="active")["activeTargets"])


class _Exited(Exception):
    """The server process ended while we waited for it to be ready."""
