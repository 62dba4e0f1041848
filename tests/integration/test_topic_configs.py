"""Topic configs a broker does not know are refused, naming the key (they used to be accepted and
ignored): through `raftlog topic create -c`, and in a node's `[log]` defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftlog.client import Admin
from tests.integration._support import BrokerProcess, run_cli


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("foo=bar", "unknown topic config 'foo'"),
        ("retention.msx=5", "unknown topic config 'retention.msx' (did you mean 'retention.ms'?)"),
        ("retention_ms=5", "unknown topic config 'retention_ms' (did you mean 'retention.ms'?)"),
        ("cleanup.policy=compacted", "cleanup.policy='compacted': must be delete, compact or"),
        ("retention.ms=-5", "retention.ms=-5: must be >= -1"),
        ("min.insync.replicas=0", "min.insync.replicas=0: must be >= 1"),
    ],
)
def test_topic_create_refuses_unknown_or_invalid_configs(
    broker: BrokerProcess, config: str, message: str
) -> None:
    run = run_cli("topic", "create", "cfg", "-c", config, "-b", broker.bootstrap)
    assert run.returncode == 1, run
    assert run.stderr.count("\n") == 1 and message in run.stderr, run.stderr
    with Admin(broker.bootstrap) as admin:
        assert "cfg" not in admin.list_topics()


def test_known_configs_are_accepted(broker: BrokerProcess) -> None:
    run = run_cli(
        "topic", "create", "cfg", "-c", "cleanup.policy=delete", "-c", "min.insync.replicas=1",
        "-c", "unclean.leader.election.enable=false", "-c", "retention.ms=60000",
        "-b", broker.bootstrap,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr


def test_a_node_with_an_unknown_log_default_does_not_start(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text(
        "node_id = 1\n"
        f'data_dir = "{tmp_path / "data"}"\n'
        'client_listener = "127.0.0.1:1"\n'
        'controller_voters = ["1@127.0.0.1:2"]\n'
        "[log]\n"
        '"retention.msx" = "5"\n'
    )
    run = run_cli("node", "--config", str(config), timeout_s=30)
    assert run.returncode == 1, run
    assert "[log]: unknown topic config 'retention.msx'" in run.stderr, run.stderr
