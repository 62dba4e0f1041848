"""ApiVersions, Metadata, CreateTopics, CreatePartitions, DeleteTopics, DescribeConfigs,
ListOffsets, ElectLeaders, AlterPartitionReassignments, AlterTopicConfig and DescribeReplicas.

These are control-plane requests: small, rare, and answered from metadata and log state.
Bodies and responses are documented in docs/PROTOCOL.md.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from raftlog import __version__, protocol
from raftlog.broker.response import Response, error_response
from raftlog.errors import RaftlogError
from raftlog.messages.metadata import (
    ApiVersion,
    ApiVersionsResponse,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
)
from raftlog.messages.offsets import (
    ListOffsetsPartitionResult,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from raftlog.messages.partitions import ElectionResult, ElectLeadersRequest, ElectLeadersResponse
from raftlog.messages.replicas import (
    CleanSummary,
    DescribeReplicasRequest,
    DescribeReplicasResponse,
    ReplicaState,
)
from raftlog.messages.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribedTopic,
    PartitionFigures,
    TopicResult,
)
from raftlog.topics import TopicPartition

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource
    from raftlog.storage import PartitionLog


def handle_api_versions(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    apis = tuple(
        ApiVersion(k, lo, hi) for k, (lo, hi) in sorted(protocol.SUPPORTED_VERSIONS.items())
    )
    # request_bytes_max: the largest frame_length this listener reads; clients refuse bigger
    # requests before sending them (RecordTooLargeError) instead of having them refused.
    answer = ApiVersionsResponse(apis, __version__, broker.config.node_id, conn.request_bytes_max)
    return Response(answer.to_body())


def handle_metadata(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response | Awaitable[Response]:
    request = MetadataRequest.from_body(body)
    names = request.topics
    missing = broker.topics_to_auto_create(names or ()) if request.allow_auto_create else []
    if missing:

        async def create_then_answer() -> Response:
            errors = await broker.auto_create(missing)
            return _metadata(broker, names, errors, conn.external)

        return create_then_answer()
    return _metadata(broker, names, {}, conn.external)


def _metadata(
    broker: HandlerContext,
    names: tuple[str, ...] | None,
    create_errors: dict[str, RaftlogError],
    external: bool,
) -> Response:
    md = broker.metadata
    if names is None:
        topics = [MetadataTopic(t.name, info=t) for t in md.topics().values()]
    else:
        topics = []
        for name in names:
            try:
                if name in create_errors:
                    raise create_errors[name]
                t = md.topic(name)
                topics.append(MetadataTopic(t.name, info=t))
            except RaftlogError as e:
                topics.append(MetadataTopic(name, e.code, str(e)))
    # The addresses of the listener this client came in through (raftlog/node.py).
    answer = MetadataResponse(tuple(md.brokers(external)), md.controller_id, tuple(topics))
    return Response(answer.to_body())


async def handle_create_topics(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    request = CreateTopicsRequest.from_body(body)
    cfg = broker.config
    results = []
    for spec in request.topics:
        name = spec.name
        try:
            await broker.create_topic(
                name,
                cfg.default_partitions if spec.partitions is None else spec.partitions,
                cfg.default_replication_factor
                if spec.replication_factor is None
                else spec.replication_factor,
                spec.config or {},
                validate_only=request.validate_only,
            )
            results.append(TopicResult(name))
        except RaftlogError as e:
            results.append(TopicResult(name, e.code, str(e)))
    return Response(CreateTopicsResponse(tuple(results)).to_body())


async def handle_create_partitions(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    request = CreatePartitionsRequest.from_body(body)
    results = []
    for spec in request.topics:
        assignments = None if spec.assignments is None else [list(a) for a in spec.assignments]
        try:
            await broker.create_partitions(
                spec.name, spec.count, assignments, validate_only=request.validate_only
            )
            results.append(TopicResult(spec.name))
        except RaftlogError as e:
            results.append(TopicResult(spec.name, e.code, str(e)))
    return Response(CreatePartitionsResponse(tuple(results)).to_body())


async def handle_elect_leaders(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    """Preferred-leader elections; a failure of the whole request (no quorum) is its error."""
    request = ElectLeadersRequest.from_body(body)
    parts = request.partitions
    wanted = None if parts is None else [(tp.topic, tp.partition) for tp in parts]
    try:
        return _per_partition(await broker.elect_leaders(wanted))
    except RaftlogError as e:
        return error_response(e)


async def handle_alter_partition_reassignments(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    """Start or cancel reassignments, and set the replication throttle if the request has
    "throttle" (bytes per second, 0 removes it); a failure of the whole request (no quorum) is
    its error. The answer: the same shape as ElectLeaders' ({"partitions": [[topic,
    partition, error, message], ...]})."""
    entries = [(t, p, None if r is None else list(r)) for t, p, r in body["reassignments"]]
    try:
        return _per_partition(
            await broker.alter_partition_reassignments(entries, body.get("throttle"))
        )
    except RaftlogError as e:
        return error_response(e)


def _per_partition(outcomes: list[tuple[str, int, int, str | None]]) -> Response:
    """(topic, partition, error code, message) per partition, answered in ElectLeaders'
    shape (the reassignments' answer too)."""
    results = tuple(ElectionResult(TopicPartition(t, p), c, m) for t, p, c, m in outcomes)
    return Response(ElectLeadersResponse(results).to_body())


async def handle_alter_topic_config(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    """Change a topic's configs: each key of "changes" set to its value, or back to the
    default with null; "validate_only" checks and changes nothing. The answer: {"config": the
    topic's config as it is (or would be) afterwards}, or the error (unknown topic, an unknown
    key or a bad value, a config fixed at creation)."""
    changes = {str(k): None if v is None else str(v) for k, v in body["changes"].items()}
    try:
        config = await broker.alter_topic_config(
            body["topic"], changes, bool(body.get("validate_only", False))
        )
    except RaftlogError as e:
        return error_response(e)
    return Response({"config": config})


async def handle_delete_topics(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    results = []
    for name in DeleteTopicsRequest.from_body(body).topics:
        try:
            await broker.delete_topic(name)
            results.append(TopicResult(name))
        except RaftlogError as e:
            results.append(TopicResult(name, e.code, str(e)))
    return Response(DeleteTopicsResponse(tuple(results)).to_body())


def handle_describe_configs(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    """Per topic: the effective log config and each partition's offsets and size."""
    names = DescribeConfigsRequest.from_body(body).topics
    md = broker.metadata
    if names is None:
        names = tuple(sorted(md.topics()))
    out = []
    for name in names:
        try:
            t = md.topic(name)
        except RaftlogError as e:
            out.append(DescribedTopic(name, e.code, str(e)))
            continue
        cfg = broker.logs.config_for(t.config)
        partitions = []
        for p in t.partitions:
            tp = TopicPartition(name, p.partition)
            replica = broker.replicas.get(tp)
            if replica is None:
                partitions.append(PartitionFigures(p.partition))
                continue
            plog = replica.log
            partitions.append(
                PartitionFigures(
                    p.partition,
                    plog.log_start_offset,
                    plog.log_end_offset,
                    replica.high_watermark,
                    plog.size_bytes,
                    len(plog.segment_base_offsets),
                    # Where this broker leads: every replica's log end offset as it knows it
                    # (a follower's from its last fetch; -1 before one).
                    replica.replica_log_end_offsets(),
                )
            )
        out.append(
            DescribedTopic(
                name,
                0,
                None,
                t.topic_id,
                {k.replace("_", "."): v for k, v in _config_items(cfg)},
                dict(t.config),
                tuple(partitions),
            )
        )
    return Response(DescribeConfigsResponse(tuple(out)).to_body())


def _config_items(cfg: Any) -> list[tuple[str, Any]]:
    return [(name, getattr(cfg, name)) for name in cfg.__dataclass_fields__]


def handle_list_offsets(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    """timestamp -2: log start; -1: high watermark; else first offset with ts >= timestamp.
    A leader that does not know its high watermark yet answers OffsetNotAvailableError for the
    last two (`Partition.known_high_watermark`)."""
    results = []
    for topic, parts in ListOffsetsRequest.from_body(body).topics:
        out = []
        for p in parts:
            partition, timestamp = p.partition, p.timestamp
            try:
                leader = broker.leader_partition(TopicPartition(topic, partition))
                plog = leader.log
                if timestamp == protocol.EARLIEST_TIMESTAMP:
                    out.append(ListOffsetsPartitionResult(partition, offset=plog.log_start_offset))
                    continue
                hw = leader.known_high_watermark()  # a new leader's may not be known yet
                if timestamp == protocol.LATEST_TIMESTAMP:
                    out.append(ListOffsetsPartitionResult(partition, offset=hw))
                else:
                    found = plog.offset_for_timestamp(timestamp)
                    if found is None or found[0] >= hw:
                        out.append(ListOffsetsPartitionResult(partition))
                    else:
                        out.append(ListOffsetsPartitionResult(partition, 0, found[1], found[0]))
            except RaftlogError as e:
                out.append(ListOffsetsPartitionResult(partition, e.code, message=str(e)))
        results.append((topic, tuple(out)))
    return Response(ListOffsetsResponse(tuple(results)).to_body())


def handle_describe_cluster(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    view = broker.metadata.describe_cluster()
    return Response(DescribeClusterResponse.of(broker.config.node_id, view).to_body())


def handle_describe_replicas(
    broker: HandlerContext, body: dict[str, Any], payload: memoryview, conn: RequestSource
) -> Response:
    """This broker's own replicas of the topics asked for (null: all), open or offline: sizes,
    offsets, and for compacted logs the dirty ratio and the last clean (Kafka's
    DescribeLogDirs). Local state the metadata does not hold: a client asks every broker."""
    topics = DescribeReplicasRequest.from_body(body).topics
    wanted = None if topics is None else set(topics)
    node = broker.config.node_id
    logs = broker.logs
    states = []
    for tp in logs.partitions():
        plog = logs.find(tp)
        if plog is None or (wanted is not None and tp.topic not in wanted):
            continue
        replica = broker.replicas.get(tp)
        states.append(
            replica_state(node, tp, plog, None if replica is None else replica.high_watermark)
        )
    reported = {r.tp for r in states}
    for tp, off in logs.offline().items():
        if tp not in reported and (wanted is None or tp.topic in wanted):
            policy = logs.config_for(off.topic.config).cleanup_policy
            states.append(ReplicaState(node, tp, policy, offline_reason=str(off.error)))
    states.sort(key=lambda r: r.tp)
    return Response(DescribeReplicasResponse(node, tuple(states)).to_body())


def replica_state(
    node: int, tp: TopicPartition, plog: PartitionLog, high_watermark: int | None
) -> ReplicaState:
    """One open log's state. The dirty ratio counts, as the cleaner does, what is below the
    high watermark (the log end where this broker has no replica state for it)."""
    config = plog.config
    offline = plog.offline_error
    if offline is not None:  # went offline while serving; housekeeping moves it soon
        return ReplicaState(node, tp, config.cleanup_policy, offline_reason=str(offline))
    dirty: float | None = None
    if config.compact:
        max_offset = plog.log_end_offset if high_watermark is None else high_watermark
        dirty, _ = plog.cleaning_state(max_offset)
    last = plog.last_clean
    return ReplicaState(
        node,
        tp,
        config.cleanup_policy,
        plog.size_bytes,
        plog.log_start_offset,
        plog.log_end_offset,
        high_watermark,
        plog.segment_count,
        dirty,
        plog.last_clean_ms,
        None
        if last is None
        else CleanSummary(
            last.records_read,
            last.records_kept,
            last.tombstones_removed,
            last.bytes_read,
            last.bytes_written,
            last.seconds,
        ),
    )
