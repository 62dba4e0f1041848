"""Compose's `prometheus` service, run as the docs say (`--profile prometheus up -d prometheus`)
in the Docker cluster's own network, with the shipped docker/prometheus.yml and
docs/prometheus/alerts.yml, asked only over its HTTP API from the host.

Checked: every node's metrics target (raftlog-N:9098, by service name inside the network) is
`up`; exactly one node reports `raftlog_active_controller` 1, and it is the one the cluster
itself names as its quorum leader; every rule of docs/prometheus/alerts.yml is loaded from the
file compose mounts and evaluates without error; no alert fires on the healthy cluster.

The image is PROMETHEUS_IMAGE where set (a registry's prom/prometheus), else
raftlog-prometheus:local, which `docker/cluster build` (the docker_image fixture) makes from
the host's Debian prometheus: a missing host prometheus fails the test where scripts/test could
have installed it (root with apt-get) and skips it elsewhere, as the other Prometheus tests do.
The shipped config scrapes and evaluates every 15 s, so the first answers take up to that long;
every wait is a poll of the API with a deadline.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest

from tests.docker._docker import UP_NODES, DockerCluster, docker, report
from tests.integration._prometheus import RULES, need_prometheus
from tests.integration._support import wait_for

LOCAL_IMAGE = "raftlog-prometheus:local"
# docker/prometheus.yml's scrape_interval and evaluation_interval are 15 s: each target's first
# scrape and the rules' first evaluation come within one interval of the start (about a
# second). Four intervals leave room for a loaded CI machine.
FIRST_ANSWERS_TIMEOUT_S = 60.0
# The cluster is idle and healthy: a leadership change while the test looks would take a
# scrape interval to show; two allow for one.
CONTROLLER_TIMEOUT_S = 30.0
POLL_S = 0.5
# Each API request answers from memory in milliseconds; a stuck one fails the poll.
HTTP_TIMEOUT_S = 5.0
# Where compose mounts the rules in the container (beside prometheus.yml, which names them).
RULES_IN_CONTAINER = "/etc/prometheus/alerts.yml"
_RULE = re.compile(r"^\s*- (alert|record): *(\S+)", re.M)


@pytest.fixture
def prometheus_image(docker_image: str) -> str:
    """The prometheus service's image, present on this machine (checked before a cluster
    starts)."""
    image = os.environ.get("PROMETHEUS_IMAGE", "")
    if image and image != LOCAL_IMAGE:
        return image
    need_prometheus()
    assert docker("image", "inspect", "-f", "{{.Id}}", LOCAL_IMAGE, check=False), (
        f"the host has prometheus but `docker/cluster build` made no {LOCAL_IMAGE}"
    )
    return LOCAL_IMAGE


class PrometheusAPI:
    """Prometheus' HTTP API at `url`; `last_error` keeps why the latest request failed."""

    def __init__(self, url: str):
        self.url = url
        self.last_error = ""

    def get(self, path: str, **params: str) -> Any:
        """GET /api/v1/PATH?PARAMS; its `data`, or None while the server does not answer
        (starting: compose's port proxy accepts, then resets, until Prometheus listens)."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(
                f"{self.url}/api/v1/{path}{query}", timeout=HTTP_TIMEOUT_S
            ) as r:
                body = json.load(r)
        except (urllib.error.URLError, ConnectionError, http.client.HTTPException) as e:
            self.last_error = f"GET /api/v1/{path}: {e!r}"
            return None
        assert body["status"] == "success", body
        return body["data"]

    def by_instance(self, expr: str) -> dict[str, float] | None:
        """An instant query's value per `instance` label (None: no answer)."""
        data = self.get("query", query=expr)
        if data is None:
            return None
        assert data["resultType"] == "vector", data
        return {s["metric"]["instance"]: float(s["value"][1]) for s in data["result"]}


def shipped_rules() -> set[tuple[str, str]]:
    """(alerting|recording, name) of every rule in docs/prometheus/alerts.yml."""
    kinds = {"alert": "alerting", "record": "recording"}
    found = {(kinds[kind], name) for kind, name in _RULE.findall(RULES.read_text())}
    assert any(kind == "alerting" for kind, _ in found), f"no alert found in {RULES}"
    return found


def test_prometheus_in_the_network_scrapes_every_node_and_loads_the_rules(
    prometheus_image: str, docker_cluster: DockerCluster
) -> None:
    cluster = docker_cluster
    prometheus = PrometheusAPI(cluster.prometheus_url)
    targets = {f"raftlog-{n}:9098" for n in UP_NODES}
    started = time.monotonic()
    cluster.start_prometheus()

    def logs() -> str:
        return cluster.compose("logs", "--no-color", "--tail", "30", "prometheus", check=False)

    def every_node_up() -> dict[str, float] | None:
        up = prometheus.by_instance('up{job="raftlog"}')
        return up if up is not None and up == dict.fromkeys(targets, 1.0) else None

    try:
        wait_for(
            every_node_up,
            FIRST_ANSWERS_TIMEOUT_S,
            f"up == 1 for {sorted(targets)}",
            interval_s=POLL_S,
        )
    except AssertionError as e:
        last = prometheus.by_instance('up{job="raftlog"}')
        raise AssertionError(f"{e}; last up: {last}; {prometheus.last_error}\n{logs()}") from None
    all_up_s = time.monotonic() - started

    # One active controller, and Prometheus names the node the cluster itself names.
    def one_controller() -> str | None:
        values = prometheus.by_instance('raftlog_active_controller{job="raftlog"}')
        if values is None or set(values) != targets:
            return None
        active = [i for i, v in values.items() if v == 1.0]
        if len(active) != 1 or any(v not in (0.0, 1.0) for v in values.values()):
            return None
        leaders = [
            n for n in UP_NODES if (d := cluster.describe(n)) and d["quorum"]["this_node_leads"]
        ]
        return active[0] if [f"raftlog-{n}:9098" for n in leaders] == active else None

    try:
        controller = wait_for(
            one_controller,
            CONTROLLER_TIMEOUT_S,
            "exactly one node reporting raftlog_active_controller 1, the quorum leader",
            interval_s=POLL_S,
        )
    except AssertionError as e:
        last = prometheus.by_instance('raftlog_active_controller{job="raftlog"}')
        raise AssertionError(f"{e}; last values: {last}") from None

    # Every shipped rule loaded from the mounted file, and each evaluated without an error.
    expected = shipped_rules()
    last_rules: list[dict[str, Any]] = []

    def rules_evaluated() -> bool:
        data = prometheus.get("rules")
        if data is None:
            return False
        last_rules[:] = [r | {"file": g["file"]} for g in data["groups"] for r in g["rules"]]
        return bool(last_rules) and all(r["health"] != "unknown" for r in last_rules)

    wait_for(
        rules_evaluated,
        FIRST_ANSWERS_TIMEOUT_S,
        "every rule evaluated",
        interval_s=POLL_S,
    )
    loaded = {(r["type"], r["name"]) for r in last_rules}
    assert loaded == expected, (
        f"missing: {sorted(expected - loaded)}, unexpected: {sorted(loaded - expected)}"
    )
    assert {r["file"] for r in last_rules} == {RULES_IN_CONTAINER}, last_rules
    bad = [(r["name"], r.get("lastError")) for r in last_rules if r["health"] != "ok"]
    assert not bad, bad
    rules_s = time.monotonic() - started

    alerts = prometheus.get("alerts")
    assert alerts is not None, prometheus.last_error
    firing = [a["labels"] for a in alerts["alerts"] if a["state"] == "firing"]
    assert not firing, f"alerts firing on a healthy cluster: {firing}"

    report(
        "prometheus_docker",
        {
            "image": prometheus_image,
            "up_s": round(cluster.up_s or 0.0, 1),
            "prometheus_all_targets_up_s": round(all_up_s, 1),
            "prometheus_rules_evaluated_s": round(rules_s, 1),
            "active_controller": controller,
            "rules": len(loaded),
        },
    )
