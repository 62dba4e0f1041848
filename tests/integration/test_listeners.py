"""Two client listeners (raftlog/node.py): a client is told the brokers' addresses for the
listener it came in through, so a client outside a container network, connected to the
external listener, follows addresses it can reach; the other brokers and clients inside keep
the advertised internal ones."""

from __future__ import annotations

import json
from pathlib import Path

from raftlog import protocol
from raftlog.kafka.api import ApiKey
from raftlog.kafka.messages.metadata import MetadataRequest, MetadataResponse
from raftlog.launcher import free_ports, write_node_config
from tests.integration._cluster import NodeProcess
from tests.integration._support import HOST, RawClient, run_cli
from tests.kafka._raw import KafkaRawClient


def start_node(tmp_path: Path, **listeners: str) -> NodeProcess:
    """One controller+broker node with these listener settings, started."""
    (raft,) = free_ports(1, HOST)
    config = tmp_path / "node-1" / "node.toml"
    config.parent.mkdir()
    write_node_config(
        str(config),
        {
            "node_id": 1,
            "data_dir": str(config.parent),
            "controller_voters": [f"1@{HOST}:{raft}"],
            **listeners,
        },
    )
    node = NodeProcess(config, tmp_path / "logs")
    node.start()
    return node


def test_each_listener_names_its_own_addresses(tmp_path: Path) -> None:
    client, external = free_ports(2, HOST)
    node = start_node(
        tmp_path,
        client_listener=f"{HOST}:{client}",
        advertised_listener=f"{HOST}:{client}",
        external_listener=f"{HOST}:{external}",
        # A name only the external clients use (as 127.0.0.1 is for a Docker host).
        external_advertised_listener=f"localhost:{external}",
    )
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


def test_each_kafka_listener_names_its_own_addresses(tmp_path: Path) -> None:
    """Kafka's advertised.listeners with an internal and an external name: a Kafka client is
    told the Kafka addresses of the listener it came in through, and `cluster status --json`
    shows both under keys that name kafka."""
    client, kafka, kafka_external = free_ports(3, HOST)
    node = start_node(
        tmp_path,
        client_listener=f"{HOST}:{client}",
        kafka_listener=f"{HOST}:{kafka}",
        kafka_external_listener=f"{HOST}:{kafka_external}",
        kafka_external_advertised_listener=f"localhost:{kafka_external}",
    )
    try:
        for port, expected in (
            (kafka, (HOST, kafka)),
            (kafka_external, ("localhost", kafka_external)),
        ):
            with KafkaRawClient(f"{HOST}:{port}") as c:
                body = c.request(ApiKey.METADATA, 8, MetadataRequest(None))
                brokers = MetadataResponse.decode(body, 8).brokers
                assert [(b.host, b.port) for b in brokers] == [expected], port
        status = json.loads(run_cli("cluster", "status", "--json", "-b", f"{HOST}:{client}").stdout)
        (broker,) = status["brokers"]
        assert broker["kafka"] == [HOST, kafka]
        assert broker["kafka_external"] == ["localhost", kafka_external]
        text = run_cli("cluster", "status", "-b", f"{HOST}:{client}").stdout
        assert (
            f"kafka {HOST}:{kafka}" in text and f"kafka external localhost:{kafka_external}" in text
        )
    finally:
        assert node.stop() == 0, node.log_tail()
    assert not node.tracebacks(), node.tracebacks()
