"""CreateTopics', DeleteTopics' and DescribeConfigs' typed messages: the documented layouts
(docs/PROTOCOL.md), and back."""

from __future__ import annotations

import msgpack

from raftlog import protocol
from raftlog.messages.topics import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribedTopic,
    NewTopic,
    PartitionFigures,
    TopicResult,
)


def _wire(body: dict) -> dict:  # type: ignore[type-arg]
    return msgpack.unpackb(msgpack.packb(body), strict_map_key=False)  # type: ignore[no-any-return]


def test_a_create_request_leaves_out_what_is_not_stated() -> None:
    req = CreateTopicsRequest(
        (NewTopic("a", 3, {"retention.ms": "5"}, 2), NewTopic("b", 1, {}), NewTopic("c"))
    )
    body = req.to_body()
    assert body == {
        "topics": [
            {
                "name": "a",
                "partitions": 3,
                "config": {"retention.ms": "5"},
                "replication_factor": 2,
            },
            {"name": "b", "partitions": 1, "config": {}},
            {"name": "c"},
        ]
    }
    assert list(body["topics"][0]) == ["name", "partitions", "config", "replication_factor"]
    protocol.check_request_body(protocol.ApiKey.CREATE_TOPICS, body)
    assert CreateTopicsRequest.from_body(_wire(body)) == req
    checked = CreateTopicsRequest((NewTopic("a"),), validate_only=True)
    assert checked.to_body() == {"topics": [{"name": "a"}], "validate_only": True}
    assert CreateTopicsRequest.from_body(checked.to_body()) == checked


def test_create_and_delete_answer_a_result_per_topic() -> None:
    results = (TopicResult("a"), TopicResult("b", 11, "topic 'b' already exists"))
    body = {"topics": [["a", 0, None], ["b", 11, "topic 'b' already exists"]]}
    assert CreateTopicsResponse(results).to_body() == body
    assert DeleteTopicsResponse(results).to_body() == body
    assert CreateTopicsResponse.from_body(_wire(body)) == CreateTopicsResponse(results)
    assert DeleteTopicsResponse.from_body(_wire(body)) == DeleteTopicsResponse(results)
    req = DeleteTopicsRequest(("a", "b"))
    assert req.to_body() == {"topics": ["a", "b"]}
    protocol.check_request_body(protocol.ApiKey.DELETE_TOPICS, req.to_body())
    assert DeleteTopicsRequest.from_body(req.to_body()) == req


def test_describe_configs_is_the_documented_layout_and_round_trips() -> None:
    for req, body in [
        (DescribeConfigsRequest(), {"topics": None}),
        (DescribeConfigsRequest(("t",)), {"topics": ["t"]}),
    ]:
        assert req.to_body() == body
        protocol.check_request_body(protocol.ApiKey.DESCRIBE_CONFIGS, body)
        assert DescribeConfigsRequest.from_body(body) == req
    resp = DescribeConfigsResponse(
        (
            DescribedTopic(
                "t",
                0,
                None,
                "id-1",
                {"retention.ms": 5},
                {"retention.ms": "5"},
                (PartitionFigures(0, 0, 10, 9, 4096, 1, {1: 10, 2: 9}), PartitionFigures(1)),
            ),
            DescribedTopic("u", 10, "unknown topic 'u'"),
        )
    )
    body = resp.to_body()
    assert body == {
        "topics": [
            {
                "name": "t",
                "error": 0,
                "message": None,
                "topic_id": "id-1",
                "config": {"retention.ms": 5},
                "overrides": {"retention.ms": "5"},
                "partitions": [[0, 0, 10, 9, 4096, 1, {1: 10, 2: 9}], [1, -1, -1, -1, 0, 0, {}]],
            },
            {"name": "u", "error": 10, "message": "unknown topic 'u'"},
        ]
    }
    assert DescribeConfigsResponse.from_body(_wire(body)) == resp
    # An older broker's partition rows have no replica log ends.
    (older,) = DescribeConfigsResponse.from_body(
        {"topics": [{**body["topics"][0], "partitions": [[0, 0, 10, 9, 4096, 1]]}]}
    ).topics
    assert older.partitions[0].replica_log_end_offsets is None
