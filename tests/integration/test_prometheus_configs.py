"""The Prometheus files the repository ships pass Prometheus' own checks: every configuration
(`promtool check config`, which also checks the rule files it loads), the alert rules
(`promtool check rules`) and their unit tests on synthetic series (`promtool test rules
docs/prometheus/alerts_test.yml`: each alert fires after its `for:` and not before, with its
labels and annotations). Also: every configuration loads the one rule file, scrapes job
"raftlog" (the rules read up{job="raftlog"}) and names the ports raftlog dev and docker/
really use, and the test's shortening of the rules leaves them valid.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from raftlog.launcher import PortPlan
from tests.integration._prometheus import (
    ROOT,
    RULES,
    Shortening,
    need_prometheus,
    promtool,
    shortened_rules,
)

DOCS = ROOT / "docs" / "prometheus"
DOCKER = ROOT / "docker"
# `raftlog dev`'s default client port (its --port).
DEV_PORT = 9092


@pytest.fixture(autouse=True)
def _prometheus() -> None:
    need_prometheus()


def check(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alert_rules_pass_promtool_check_rules() -> None:
    check(promtool("check", "rules", RULES))


def test_the_alert_rules_unit_tests_pass() -> None:
    res = promtool("test", "rules", DOCS / "alerts_test.yml")
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("name", ["prometheus.yml", "docker-host.yml"])
def test_the_local_configs_pass_promtool_check_config(name: str) -> None:
    check(promtool("check", "config", DOCS / name))
    assert "rule_files:\n  - alerts.yml\n" in (DOCS / name).read_text()


def test_the_docker_config_passes_with_the_rules_mounted_beside_it(tmp_path: Path) -> None:
    # compose mounts docker/prometheus.yml and docs/prometheus/alerts.yml into one directory.
    compose = (DOCKER / "compose.yaml").read_text()
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in compose
    assert "../docs/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in compose
    shutil.copy(DOCKER / "prometheus.yml", tmp_path / "prometheus.yml")
    shutil.copy(RULES, tmp_path / "alerts.yml")
    check(promtool("check", "config", tmp_path / "prometheus.yml"))


def targets(path: Path) -> list[str]:
    text = path.read_text()
    assert re.search(r"- job_name: raftlog\n", text), f"{path}: no job named raftlog"
    found = re.findall(r"^\s*- targets: \[(.*)\]$", text, re.M)
    assert len(found) == 1, f"{path}: {found}"
    return [t.strip().strip('"') for t in found[0].split(",")]


def test_the_configs_name_the_ports_the_clusters_use() -> None:
    dev = PortPlan.based(DEV_PORT, 3)
    assert targets(DOCS / "prometheus.yml") == [f"127.0.0.1:{p}" for p in dev.metrics]
    # docker/compose.yaml publishes node i's 9098 on RAFTLOG_METRICS_PORT_i, 39092+i-1.
    compose = (DOCKER / "compose.yaml").read_text()
    published = re.findall(r'"127\.0\.0\.1:\$\{RAFTLOG_METRICS_PORT_\d:-(\d+)\}:9098"', compose)
    assert targets(DOCS / "docker-host.yml") == [f"127.0.0.1:{p}" for p in published[:3]]
    assert 'metrics_listener = "0.0.0.0:9098"' in (DOCKER / "node.toml").read_text()
    assert targets(DOCKER / "prometheus.yml") == [f"raftlog-{i}:9098" for i in (1, 2, 3)]


def test_shortened_rules_stay_valid_and_a_missing_alert_fails(tmp_path: Path) -> None:
    text = RULES.read_text()
    short = shortened_rules(
        text,
        {
            "RaftlogNodeDown": Shortening(for_="2s"),
            "RaftlogConsumerGroupLagGrowing": Shortening(for_="5s", window="10s"),
        },
    )
    assert "deriv(raftlog:consumer_group_topic_lag:sum[10s])" in short
    assert short.count("for: 2s") == 1 and short.count("for: 5s") == 1
    (tmp_path / "alerts.yml").write_text(short)
    check(promtool("check", "rules", tmp_path / "alerts.yml"))
    with pytest.raises(AssertionError, match="RaftlogGone"):
        shortened_rules(text, {"RaftlogGone": Shortening(for_="1s")})
    with pytest.raises(AssertionError, match="RaftlogOfflinePartitions"):  # it has no `for:`
        shortened_rules(text, {"RaftlogOfflinePartitions": Shortening(for_="1s")})
