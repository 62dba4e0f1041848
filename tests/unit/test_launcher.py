"""The launcher's pure parts (raftlog/launcher.py): port plans, node configs, command lines,
argument checks and the readiness rule, without starting a process or opening a socket."""

from __future__ import annotations

import os
import signal
import sys
import tomllib
from pathlib import Path

import pytest

from raftlog.invariants import InvariantError
from raftlog.launcher import (
    CONFIG_HEADER,
    ClusterNode,
    LaunchError,
    LocalCluster,
    NodeProcess,
    PortPlan,
    bootstrap_of,
    cluster_settings,
    dev_data_dirs,
    dev_process,
    kafka_bootstrap_of,
    node_command,
    node_config_text,
    write_cluster_configs,
)
from raftlog.readiness import write_ready_file

# -- port plans ----------------------------------------------------------------------------


def test_a_based_plan_is_raftlog_devs_fixed_layout() -> None:
    plan = PortPlan.based(9092, 3)
    assert plan.client == (9092, 9093, 9094)
    assert plan.raft == (9192, 9193, 9194)
    assert plan.replication == (9292, 9293, 9294)
    assert plan.kafka == (9392, 9393, 9394)
    assert plan.nodes == 3


def test_a_same_plan_gives_every_node_the_same_ports() -> None:
    plan = PortPlan.same(2, 9092, 9192, 9292)
    assert plan == PortPlan((9092, 9092), (9192, 9192), (9292, 9292))


@pytest.mark.parametrize(
    ("client", "raft", "replication"),
    [
        ((), (), ()),  # no node
        ((1, 2), (3,), (4, 5)),  # lengths differ
        ((0,), (1,), (2,)),  # port 0 is no port
        ((65536,), (1,), (2,)),  # above the range
    ],
)
def test_a_port_plan_refuses_what_no_cluster_can_use(
    client: tuple[int, ...], raft: tuple[int, ...], replication: tuple[int, ...]
) -> None:
    with pytest.raises(ValueError):
        PortPlan(client, raft, replication)


def test_a_based_plan_past_the_last_port_is_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        PortPlan.based(65400, 3)  # its replication ports would be 65600..


def test_a_picked_plan_needs_a_node() -> None:
    with pytest.raises(ValueError):
        PortPlan.picked(0)


# -- configs -------------------------------------------------------------------------------


def test_a_node_config_is_toml_with_plain_settings_before_tables() -> None:
    text = node_config_text(
        {
            "node_id": 1,
            "log": {"min.insync.replicas": 2},
            "roles": ["controller", "broker"],
            "auto_create_topics": False,
            "data_dir": 'C:\\data "x"',
            "fetch_zero_copy_min_bytes": None,  # left out: the node's default holds
        }
    )
    assert text.startswith(CONFIG_HEADER)
    assert "fetch_zero_copy_min_bytes" not in text
    assert text.index("auto_create_topics") < text.index("[log]")
    assert tomllib.loads(text) == {
        "node_id": 1,
        "roles": ["controller", "broker"],
        "auto_create_topics": False,
        "data_dir": 'C:\\data "x"',
        "log": {"min.insync.replicas": 2},
    }


def test_cluster_settings_form_one_quorum_of_combined_nodes() -> None:
    nodes = cluster_settings(
        "/r", PortPlan.based(9092, 3), settings={"broker_session_timeout_ms": 7}
    )
    voters = ["1@127.0.0.1:9192", "2@127.0.0.1:9193", "3@127.0.0.1:9194"]
    assert [n["node_id"] for n in nodes] == [1, 2, 3]
    for i, n in enumerate(nodes, start=1):
        assert n["roles"] == ["controller", "broker"]
        assert n["controller_voters"] == voters
        assert n["data_dir"] == f"/r/node-{i}"
        assert n["client_listener"] == f"127.0.0.1:{9091 + i}"
        assert n["replication_listener"] == f"127.0.0.1:{9291 + i}"
        assert n["broker_session_timeout_ms"] == 7
        assert "advertised_listener" not in n


def test_cluster_settings_make_the_nodes_after_the_controllers_broker_only() -> None:
    nodes = cluster_settings("/r", PortPlan.based(9092, 5), controllers=3)
    voters = ["1@127.0.0.1:9192", "2@127.0.0.1:9193", "3@127.0.0.1:9194"]
    assert [n["roles"] for n in nodes] == [["controller", "broker"]] * 3 + [["broker"]] * 2
    assert all(n["controller_voters"] == voters for n in nodes)
    for bad in (0, 6):
        with pytest.raises(ValueError, match=f"{bad} controllers among 5 nodes"):
            cluster_settings("/r", PortPlan.based(9092, 5), controllers=bad)


def test_cluster_settings_take_each_nodes_host_and_what_it_advertises() -> None:
    nodes = cluster_settings(
        "/r",
        PortPlan.same(2, 9092, 9192, 9292),
        hosts=["10.0.0.1", "10.0.0.2"],
        advertise=lambda node_id, address: f"proxy-{node_id}-{address}",
    )
    assert nodes[1]["controller_voters"] == ["1@10.0.0.1:9192", "2@10.0.0.2:9192"]
    assert nodes[1]["client_listener"] == "10.0.0.2:9092"
    assert nodes[1]["advertised_listener"] == "proxy-2-10.0.0.2:9092"
    assert nodes[1]["replication_advertised_listener"] == "proxy-2-10.0.0.2:9292"
    assert "kafka_advertised_listener" not in nodes[1]
    # With Kafka listeners, those are proxied too (the chaos suite's link faults for Kafka's
    # clients).
    nodes = cluster_settings(
        "/r",
        PortPlan.same(2, 9092, 9192, 9292, 9392),
        hosts=["10.0.0.1", "10.0.0.2"],
        advertise=lambda node_id, address: f"proxy-{node_id}-{address}",
    )
    assert nodes[1]["kafka_listener"] == "10.0.0.2:9392"
    assert nodes[1]["kafka_advertised_listener"] == "proxy-2-10.0.0.2:9392"


def test_given_settings_win_over_the_clusters_own() -> None:
    (node,) = cluster_settings("/r", PortPlan.based(9092, 1), settings={"roles": ["broker"]})
    assert node["roles"] == ["broker"]


def test_cluster_settings_need_a_host_per_node() -> None:
    with pytest.raises(ValueError, match="2 hosts for 3 nodes"):
        cluster_settings("/r", PortPlan.based(9092, 3), hosts=["a", "b"])


def test_cluster_configs_are_written_where_the_nodes_keep_their_data(tmp_path: Path) -> None:
    paths = write_cluster_configs(tmp_path, PortPlan.based(9092, 2))
    assert paths == [tmp_path / "node-1" / "node.toml", tmp_path / "node-2" / "node.toml"]
    second = tomllib.loads(paths[1].read_text())
    assert second["node_id"] == 2
    assert second["data_dir"] == str(tmp_path / "node-2")


# -- command lines and argument checks ----------------------------------------------------


def test_node_and_dev_command_lines() -> None:
    assert node_command("/c/node.toml") == [
        sys.executable, "-m", "raftlog.cli", "node", "--config", "/c/node.toml",
    ]  # fmt: skip
    assert node_command("x.toml", "INFO")[-2:] == ["--log-level", "INFO"]
    dev = dev_process("/d", ["--port", "0"], nodes=3)
    assert dev.command[3:] == ["dev", "--data-dir", "/d", "--nodes", "3", "--port", "0"]
    assert dev.data_dirs == [Path("/d/node-1"), Path("/d/node-2"), Path("/d/node-3")]
    assert not dev.ready_pid_is_own  # its nodes are its children
    assert dev_process("/d").ready_pid_is_own  # one node runs in `raftlog dev` itself


def test_kafka_bootstrap_names_every_nodes_kafka_listener_or_none() -> None:
    infos = [
        {"node_id": 1, "client_address": "127.0.0.1:1", "kafka_address": "127.0.0.1:301"},
        {"node_id": 2, "client_address": "127.0.0.1:2", "kafka_address": "127.0.0.1:302"},
    ]
    assert kafka_bootstrap_of(infos) == "127.0.0.1:301,127.0.0.1:302"
    assert kafka_bootstrap_of([*infos, {"node_id": 3, "client_address": "127.0.0.1:3"}]) is None


def test_dev_data_dirs() -> None:
    assert dev_data_dirs("/d", 1) == [Path("/d")]
    assert dev_data_dirs("/d", 2) == [Path("/d/node-1"), Path("/d/node-2")]


def test_dev_needs_a_node() -> None:
    with pytest.raises(ValueError):
        dev_process("/d", nodes=0)


def test_a_cluster_needs_an_address_per_config() -> None:
    with pytest.raises(ValueError):
        LocalCluster(["/a/node.toml", "/b/node.toml"], ["127.0.0.1:1"])


def test_a_cluster_node_runs_its_config_and_waits_in_its_directory() -> None:
    node = ClusterNode(2, "/r/node-2/node.toml", "127.0.0.1:9093", log_level="WARNING")
    assert node.name == "node 2" and node.log_stem == "node-2"
    assert node.command == node_command("/r/node-2/node.toml", "WARNING")
    assert node.data_dirs == [Path("/r/node-2")]


def test_a_process_never_started_takes_no_signal_and_has_nothing_to_wait_for() -> None:
    p = NodeProcess("node 1", ["true"], ["/nowhere"])
    assert not p.running() and p.pid is None
    with pytest.raises(LaunchError, match="node 1 is not running: cannot send SIGSTOP"):
        p.send_signal(signal.SIGSTOP)
    with pytest.raises(LaunchError, match="not running"):
        p.kill9()
    with pytest.raises(InvariantError):
        p.wait_ready(0.1)
    assert p.stop() == 0
    assert p.note_exit() is None and p.problems == []
    assert p.cpu_seconds() == 0.0
    assert p.tracebacks() == [] and p.log_tail() == "(no log)"


# -- readiness ----------------------------------------------------------------------------


def test_ready_only_once_every_node_has_a_live_ready_file(tmp_path: Path) -> None:
    dirs = [tmp_path / "node-1", tmp_path / "node-2"]
    for d in dirs:
        d.mkdir()
    p = NodeProcess("the cluster", ["true"], dirs, ready_pid_is_own=False)
    info = {"node_id": 1, "client_address": "127.0.0.1:1", "pid": os.getpid()}
    write_ready_file(str(dirs[0]), info)
    assert p.ready_infos() is None
    write_ready_file(str(dirs[1]), {**info, "node_id": 2, "client_address": "127.0.0.1:2"})
    infos = p.ready_infos()
    assert infos is not None and bootstrap_of(infos) == "127.0.0.1:1,127.0.0.1:2"


def test_a_ready_file_must_name_the_process_that_was_started(tmp_path: Path) -> None:
    info = {"node_id": 1, "client_address": "127.0.0.1:1", "pid": os.getpid()}
    write_ready_file(str(tmp_path), info)
    # A live pid that is not this process's (none was started): an earlier start's file.
    assert NodeProcess("node 1", ["true"], [tmp_path]).ready_infos() is None
