"""DescribeReplicas' typed messages (API 24): the documented layout (docs/PROTOCOL.md), through
msgpack and back, and the request's shape check."""

from __future__ import annotations

import msgpack
import pytest

from raftlog import protocol
from raftlog.messages.replicas import (
    CleanSummary,
    DescribeReplicasRequest,
    DescribeReplicasResponse,
    ReplicaState,
)
from raftlog.topics import TopicPartition


def _wire(body: dict) -> dict:  # type: ignore[type-arg]
    return msgpack.unpackb(msgpack.packb(body), strict_map_key=False)  # type: ignore[no-any-return]


def test_the_request_names_topics_or_null_for_all() -> None:
    for req, body in [
        (DescribeReplicasRequest(), {"topics": None}),
        (DescribeReplicasRequest(("a", "b")), {"topics": ["a", "b"]}),
    ]:
        assert req.to_body() == body
        protocol.check_request_body(protocol.ApiKey.DESCRIBE_REPLICAS, body)
        assert DescribeReplicasRequest.from_body(_wire(body)) == req
    assert DescribeReplicasRequest.from_body({}) == DescribeReplicasRequest()
    with pytest.raises(protocol.InvalidBodyError) as e:
        protocol.check_request_body(protocol.ApiKey.DESCRIBE_REPLICAS, {"topics": "a"})
    assert e.value.describe(protocol.ApiKey.DESCRIBE_REPLICAS) == (
        "malformed DESCRIBE_REPLICAS request: topics must be an array or null, got 'a'"
    )


def test_the_response_names_every_field_and_reads_back() -> None:
    clean = CleanSummary(9000, 1204, 7, 600_000, 80_000, 0.25)
    compacted = ReplicaState(
        3, TopicPartition("table", 0), "compact", 4096, 0, 9000, 8990, 5, 0.42, 1_700_000, clean
    )
    deleted = ReplicaState(3, TopicPartition("events", 1), "delete", 10, 2, 7, None, 1)
    offline = ReplicaState(3, TopicPartition("events", 2), "delete", offline_reason="disk full")
    response = DescribeReplicasResponse(3, (compacted, deleted, offline))
    body = response.to_body()
    assert body["node_id"] == 3
    assert body["replicas"][0] == {
        "topic": "table",
        "partition": 0,
        "offline": False,
        "offline_reason": None,
        "cleanup_policy": "compact",
        "size_bytes": 4096,
        "log_start_offset": 0,
        "log_end_offset": 9000,
        "high_watermark": 8990,
        "segments": 5,
        "dirty_ratio": 0.42,
        "last_clean_ms": 1_700_000,
        "last_clean": {
            "records_read": 9000,
            "records_kept": 1204,
            "tombstones_removed": 7,
            "bytes_read": 600_000,
            "bytes_written": 80_000,
            "seconds": 0.25,
        },
    }
    assert body["replicas"][1]["dirty_ratio"] is None
    assert body["replicas"][1]["last_clean_ms"] == -1 and body["replicas"][1]["last_clean"] is None
    assert body["replicas"][2]["offline"] is True
    assert body["replicas"][2]["offline_reason"] == "disk full"
    assert body["replicas"][2]["size_bytes"] is None
    back = DescribeReplicasResponse.from_body(_wire(body))
    assert back == response
    assert [r.offline for r in back.replicas] == [False, False, True]
    # Fields a newer broker adds are ignored.
    body["replicas"][0]["a_newer_field"] = 1
    assert DescribeReplicasResponse.from_body(_wire(body)) == response
