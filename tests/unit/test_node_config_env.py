"""NodeConfig's container settings: RAFTLOG_<SETTING> variables over the TOML, the advertised and
external listeners, and the voter-list comparison between registered brokers (raftlog/node.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftlog.errors import InvalidConfigError
from raftlog.node import NodeConfig, voters_disagreement

VOTERS = ["1@a:9093", "2@b:9093", "3@c:9093"]


def _toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return str(path)


def test_environment_variables_override_the_toml(tmp_path: Path) -> None:
    path = _toml(
        tmp_path,
        'node_id = 9\ndata_dir = "/d"\ncontroller_voters = ["9@x:1"]\nroles = ["broker"]\n'
        'client_listener = "0.0.0.0:9092"\n',
    )
    env = {
        "RAFTLOG_NODE_ID": "2",
        "RAFTLOG_ROLES": "controller, broker",
        "RAFTLOG_CONTROLLER_VOTERS": ",".join(VOTERS),
        "RAFTLOG_ADVERTISED_LISTENER": "b:9092",
        "RAFTLOG_EXTERNAL_LISTENER": "0.0.0.0:9094",
        "RAFTLOG_EXTERNAL_ADVERTISED_LISTENER": "127.0.0.1:19093",
        "RAFTLOG_REPLICATION_LISTENER": "0.0.0.0:9095",
        "RAFTLOG_REQUEST_RECEIVE_MS_MAX": "5000",
        "RAFTLOG_AUTO_CREATE_TOPICS": "true",
        "RAFTLOG_BOOTSTRAP": "ignored:1",  # the clients' variable, no node setting
    }
    c = NodeConfig.load(path, env)
    assert (c.node_id, c.roles, c.controller_voters) == (2, ["controller", "broker"], VOTERS)
    assert c.auto_create_topics is True
    assert NodeConfig.load(path, {"RAFTLOG_FETCH_ZERO_COPY_MIN_BYTES": "0"}).broker_settings() == {
        "fetch_zero_copy_min_bytes": 0
    }
    assert c.listener_address() == ("0.0.0.0", 9092)
    assert c.advertised(9092) == ("b", 9092)
    assert c.listener_address("external") == ("0.0.0.0", 9094)
    assert c.advertised(9094, "external") == ("127.0.0.1", 19093)
    # A replication listener on every address is named by the client's advertised host.
    assert c.listener_address("replication") == ("0.0.0.0", 9095)
    assert c.advertised(9095, "replication") == ("b", 9095)
    assert c.broker_settings() == {"request_receive_ms_max": 5000}
    # Without an environment (the tests' harness, `raftlog dev`), the file alone counts.
    assert NodeConfig.load(path).node_id == 9


def test_without_advertised_listeners_the_bound_ones_are_named(tmp_path: Path) -> None:
    c = NodeConfig(
        node_id=1,
        data_dir="/d",
        controller_voters=["1@a:1"],
        client_listener="h:0",
        replication_listener="r:0",
    )
    assert c.advertised(4321) == ("h", 4321)
    assert c.advertised(4322, "replication") == ("r", 4322)


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("RAFTLOG_NODE_ID", "two", "RAFTLOG_NODE_ID='two': must be an integer"),
        ("RAFTLOG_AUTO_CREATE_TOPICS", "yes", "must be true or false"),
        ("RAFTLOG_EXTERNAL_LISTENER", "nohost", "external_listener='nohost': must be HOST:PORT"),
        ("RAFTLOG_ADVERTISED_LISTENER", "h:99999", "must be HOST:PORT"),
        ("RAFTLOG_FETCH_ZERO_COPY_MIN_BYTES", "-1", "fetch_zero_copy_min_bytes=-1: must be"),
    ],
)
def test_bad_variables_are_refused_naming_them(
    tmp_path: Path, variable: str, value: str, named: str
) -> None:
    path = _toml(tmp_path, 'node_id = 1\ndata_dir = "/d"\ncontroller_voters = ["1@a:1"]\n')
    with pytest.raises(InvalidConfigError, match=named.replace("(", r"\(")):
        NodeConfig.load(path, {variable: value})


@pytest.mark.parametrize("kind", ["external", "replication"])
def test_an_advertised_listener_needs_its_listener(kind: str) -> None:
    with pytest.raises(InvalidConfigError, match=f"{kind}_listener is not"):
        NodeConfig(
            node_id=1,
            data_dir="/d",
            controller_voters=["1@a:1"],
            **{f"{kind}_advertised_listener": "127.0.0.1:1"},  # type: ignore[arg-type]
        )


def test_a_node_outvoted_on_its_voter_list_is_told_so() -> None:
    grown = [*VOTERS, "4@d:9093"]
    registered = {1: VOTERS, 2: list(reversed(VOTERS)), 3: grown}
    # Node 3 lists one voter more than the two others: it is outvoted.
    assert voters_disagreement(3, grown, registered) == (True, [1, 2])
    # Nodes 1 and 2 agree (order does not matter) and see node 3 differ.
    assert voters_disagreement(1, VOTERS, registered) == (False, [3])
    # Alone, or with brokers that did not say (registered before the field existed): no verdict.
    assert voters_disagreement(3, grown, {3: grown}) == (False, [])
    assert voters_disagreement(3, grown, {1: None, 2: None, 3: grown}) == (False, [])
    # A tie does not stop anyone.
    assert voters_disagreement(1, VOTERS, {1: VOTERS, 2: grown}) == (False, [2])
