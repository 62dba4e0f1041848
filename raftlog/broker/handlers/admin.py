"""ApiVersions, Metadata, CreateTopics, DeleteTopics, DescribeConfigs and ListOffsets.

These are control-plane requests: small, rare, and answered from metadata and log state.
Bodies and responses are documented in docs/PROTOCOL.md.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from raftlog import __version__, protocol
from raftlog.broker.response import Response
from raftlog.errors import InvalidRequestError, RaftlogError
from raftlog.topics import TopicPartition

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource


def handle_api_versions(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    apis = [[k, lo, hi] for k, (lo, hi) in sorted(protocol.SUPPORTED_VERSIONS.items())]
    return Response(
        {
            "apis": apis,
            "server_version": __version__,
            "node_id": broker.config.node_id,
            # The largest frame_length this listener reads: clients refuse bigger requests
            # before sending them (RecordTooLargeError) instead of having them refused.
            "request_bytes_max": conn.request_bytes_max,
        }
    )


def handle_metadata(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response | Awaitable[Response]:
    names = body.get("topics")
    if names is not None and not isinstance(names, list):
        raise InvalidRequestError("metadata 'topics' must be a list of names or null")
    missing = broker.topics_to_auto_create(names or []) if body.get("allow_auto_create") else []
    if missing:

        async def create_then_answer() -> Response:
            errors = await broker.auto_create(missing)
            return _metadata(broker, names, errors, conn.external)

        return create_then_answer()
    return _metadata(broker, names, {}, conn.external)


def _metadata(
    broker: HandlerContext,
    names: list[Any] | None,
    create_errors: dict[str, RaftlogError],
    external: bool,
) -> Response:
    md = broker.metadata
    if names is None:
        infos = list(md.topics().values())
        topics = [{"name": t.name, "error": 0, "message": None, **t.to_wire()} for t in infos]
    else:
        topics = []
        for name in names:
            try:
                if name in create_errors:
                    raise create_errors[name]
                t = md.topic(name)
                topics.append({"name": t.name, "error": 0, "message": None, **t.to_wire()})
            except RaftlogError as e:
                topics.append(
                    {
                        "name": name,
                        "error": e.code,
                        "message": str(e),
                        "topic_id": None,
                        "partitions": [],
                        "config": {},
                    }
                )
    return Response(
        {
            # The addresses of the listener this client came in through (raftlog/node.py).
            "brokers": [b.to_wire() for b in md.brokers(external)],
            "controller_id": md.controller_id,
            "topics": topics,
        }
    )


async def handle_create_topics(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    results = []
    for spec in body["topics"]:
        name = spec.get("name")
        try:
            await broker.create_topic(
                name,
                spec.get("partitions", broker.config.default_partitions),
                spec.get("replication_factor", broker.config.default_replication_factor),
                spec.get("config") or {},
                validate_only=bool(body.get("validate_only")),
            )
            results.append([name, 0, None])
        except RaftlogError as e:
            results.append([name, e.code, str(e)])
    return Response({"topics": results})


async def handle_delete_topics(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    results = []
    for name in body["topics"]:
        try:
            if not isinstance(name, str):
                raise InvalidRequestError(f"topic names must be strings, got {name!r}")
            await broker.delete_topic(name)
            results.append([name, 0, None])
        except RaftlogError as e:
            results.append([name, e.code, str(e)])
    return Response({"topics": results})


def handle_describe_configs(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    """Per topic: the effective log config and each partition's offsets and size."""
    names = body.get("topics")
    md = broker.metadata
    if names is None:
        names = sorted(md.topics())
    out = []
    for name in names:
        try:
            t = md.topic(name)
        except RaftlogError as e:
            out.append({"name": name, "error": e.code, "message": str(e)})
            continue
        cfg = broker.logs.config_for(t.config)
        partitions = []
        for p in t.partitions:
            tp = TopicPartition(name, p.partition)
            replica = broker.replicas.get(tp)
            if replica is None:
                partitions.append([p.partition, -1, -1, -1, 0, 0, {}])
                continue
            plog = replica.log
            partitions.append(
                [
                    p.partition,
                    plog.log_start_offset,
                    plog.log_end_offset,
                    replica.high_watermark,
                    plog.size_bytes,
                    len(plog.segment_base_offsets),
                    # Where this broker leads: every replica's log end offset as it knows it
                    # (a follower's from its last fetch; -1 before one).
                    replica.replica_log_end_offsets(),
                ]
            )
        out.append(
            {
                "name": name,
                "error": 0,
                "message": None,
                "topic_id": t.topic_id,
                "config": {k.replace("_", "."): v for k, v in _config_items(cfg)},
                "overrides": dict(t.config),
                "partitions": partitions,
            }
        )
    return Response({"topics": out})


def _config_items(cfg: Any) -> list[tuple[str, Any]]:
    return [(name, getattr(cfg, name)) for name in cfg.__dataclass_fields__]


def handle_list_offsets(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    """timestamp -2: log start; -1: high watermark; else first offset with ts >= timestamp."""
    results = []
    for topic, parts in body["topics"]:
        out = []
        for partition, timestamp in parts:
            tp = TopicPartition(topic, partition)
            try:
                leader = broker.leader_partition(tp)
                plog, hw = leader.log, leader.high_watermark
                if timestamp == protocol.EARLIEST_TIMESTAMP:
                    out.append([partition, 0, -1, plog.log_start_offset, None])
                elif timestamp == protocol.LATEST_TIMESTAMP:
                    out.append([partition, 0, -1, hw, None])
                else:
                    found = plog.offset_for_timestamp(int(timestamp))
                    if found is None or found[0] >= hw:
                        out.append([partition, 0, -1, -1, None])
                    else:
                        out.append([partition, 0, found[1], found[0], None])
            except RaftlogError as e:
                out.append([partition, e.code, -1, -1, str(e)])
        results.append([topic, out])
    return Response({"topics": results})


def handle_describe_cluster(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    return Response({"node_id": broker.config.node_id, **broker.metadata.describe_cluster()})
