"""ApiVersions', Metadata's and DescribeCluster's typed messages: the documented layouts
(docs/PROTOCOL.md), and back."""

from __future__ import annotations

import msgpack

from raftlog import protocol
from raftlog.messages.metadata import (
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
)
from raftlog.metadata.model import BrokerInfo, PartitionInfo, TopicInfo


def _wire(body: dict) -> dict:  # type: ignore[type-arg]
    return msgpack.unpackb(msgpack.packb(body))  # type: ignore[no-any-return]


def test_api_versions() -> None:
    body = ApiVersionsRequest().to_body()
    assert body == {}
    protocol.check_request_body(protocol.ApiKey.API_VERSIONS, body)
    assert ApiVersionsRequest.from_body(body) == ApiVersionsRequest()
    resp = ApiVersionsResponse((ApiVersion(0, 0, 0), ApiVersion(1, 0, 0)), "0.1.0", 2, 1 << 20)
    body = resp.to_body()
    assert list(body.items()) == [
        ("apis", [[0, 0, 0], [1, 0, 0]]),
        ("server_version", "0.1.0"),
        ("node_id", 2),
        ("request_bytes_max", 1 << 20),
    ]
    assert ApiVersionsResponse.from_body(_wire(body)) == resp
    # An older broker states no limit; a refusing one answers nothing usable.
    older = ApiVersionsResponse((), "0.0.9", 1)
    assert "request_bytes_max" not in older.to_body()
    assert ApiVersionsResponse.from_body({}).request_bytes_max is None
    assert ApiVersionsResponse.from_body({"request_bytes_max": 0}).request_bytes_max is None


def test_a_metadata_request_is_the_documented_layout() -> None:
    for req, body in [
        (MetadataRequest(), {"topics": None, "allow_auto_create": False}),
        (MetadataRequest(("a", "b"), True), {"topics": ["a", "b"], "allow_auto_create": True}),
    ]:
        assert req.to_body() == body and list(req.to_body()) == ["topics", "allow_auto_create"]
        protocol.check_request_body(protocol.ApiKey.METADATA, body)
        assert MetadataRequest.from_body(_wire(body)) == req
    assert MetadataRequest.from_body({}) == MetadataRequest()


def test_a_metadata_response_is_the_documented_layout_and_round_trips() -> None:
    info = TopicInfo(
        "t", "id-1", (PartitionInfo(0, 1, 3, (1, 2), (1,), 4, (2,)),), {"retention.ms": "5"}
    )
    resp = MetadataResponse(
        (BrokerInfo(1, "h1", 9092), BrokerInfo(2, "h2", 9093, "r2")),
        1,
        (MetadataTopic("t", info=info), MetadataTopic("u", 10, "unknown topic 'u'")),
    )
    body = resp.to_body()
    assert body == {
        "brokers": [[1, "h1", 9092, None], [2, "h2", 9093, "r2"]],
        "controller_id": 1,
        "topics": [
            {
                "name": "t",
                "error": 0,
                "message": None,
                "topic_id": "id-1",
                "partitions": [[0, 1, 3, [1, 2], [1], 4, [2]]],
                "config": {"retention.ms": "5"},
            },
            {
                "name": "u",
                "error": 10,
                "message": "unknown topic 'u'",
                "topic_id": None,
                "partitions": [],
                "config": {},
            },
        ],
    }
    assert [list(t) for t in body["topics"]] == [
        ["name", "error", "message", "topic_id", "partitions", "config"]
    ] * 2
    assert MetadataResponse.from_body(_wire(body)) == resp


def test_describe_cluster_keeps_the_order_brokers_always_wrote() -> None:
    body = DescribeClusterRequest().to_body()
    assert body == {}
    protocol.check_request_body(protocol.ApiKey.DESCRIBE_CLUSTER, body)
    assert DescribeClusterRequest.from_body(body) == DescribeClusterRequest()
    view = {
        "brokers": [{"node_id": 1, "host": "h", "port": 1}],
        "partitions": [{"topic": "t", "partition": 0, "leader": 1}],
        "offline_logs": [],
        "metadata_version": 7,
        "voters": [{"node_id": 1, "address": "h:2"}],
        "controller_id": 1,
        "quorum": {"term": 3, "ready": True},
    }
    resp = DescribeClusterResponse.of(2, view)
    body = resp.to_body()
    assert list(body) == ["node_id", *view]
    assert body == {"node_id": 2, **view}
    assert DescribeClusterResponse.from_body(_wire(body)) == resp
