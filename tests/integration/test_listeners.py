"""Two client listeners (raftlog/node.py): a client is told the brokers' addresses for the
listener it came in through, so a client outside a container network, connected to the
external listener, follows addresses it can reach; the other brokers and clients inside keep
the advertised internal ones."""

from __future__ import annotations

from pathlib import Path

from raftlog import protocol
from raftlog.launcher import free_ports, write_node_config
from tests.integration._cluster import NodeProcess
from tests.integration._support import HOST, RawClient


def test_each_listener_names_its_own_addresses(tmp_path: Path) -> None:
    client, external, raft = free_ports(3, HOST)
    config = tmp_path / "node-1" / "node.toml"
    config.parent.mkdir()
    write_node_config(
        str(config),
        {
            "node_id": 1,
            "data_dir": str(config.parent),
            "controller_voters": [f"1@{HOST}:{raft}"],
            "client_listener": f"{HOST}:{client}",
            "advertised_listener": f"{HOST}:{client}",
            "external_listener": f"{HOST}:{external}",
            # A name only the external clients use (as 127.0.0.1 is for a Docker host).
            "external_advertised_listener": f"localhost:{external}",
        },
    )
    node = NodeProcess(config, tmp_path / "logs")
    node.start()
    try:
        for port, expected in ((client, [HOST, client]), (external, ["localhost", external])):
            with RawClient(HOST, port) as c:
                body, _ = c.request(protocol.ApiKey.METADATA, {"topics": None})
                assert [b[1:3] for b in body["brokers"]] == [expected], (port, body)
                body, _ = c.request(protocol.ApiKey.FIND_COORDINATOR, {"group_id": "g"})
                assert [body["host"], body["port"]] == expected, (port, body)
    finally:
        assert node.stop() == 0, node.log_tail()
    assert not node.tracebacks(), node.tracebacks()
