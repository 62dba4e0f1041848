"""Kafka's ApiVersions (0-3), Metadata (0-8) and ListOffsets (1-5).

Rules:
- ApiVersions names only the APIs this listener has handlers for (`registry.py`), each with
  the version range of raftlog/kafka/api.py: Kafka's clients enable features by what a broker
  advertises, so an API without a handler is never advertised.
- Metadata names the brokers by their Kafka listeners (the external ones for a client of the
  Kafka external listener): a client follows partition leaders through them. A partition whose
  leader is not a live broker with a Kafka listener is LEADER_NOT_AVAILABLE with leader -1
  (clients retry); an unknown topic is UNKNOWN_TOPIC_OR_PARTITION unless the request allows
  auto-creation and the broker does it (the native rule, `topics_to_auto_create`). A broker
  cut off from the metadata quorum past its session timeout (`ClusterMetadata.stale`) names
  no leader at all: the others have fenced it and moved its leaderships, and a client told
  "I lead" kept sending to it (librdkafka: 20.6 s without writes in an isolate chaos run).
  It also closes the connection once it has answered: librdkafka sends its next Metadata
  request to the broker it sent to last (its "least idle" choice), so told
  LEADER_NOT_AVAILABLE over an open connection it kept asking the cut-off broker, every
  0.3-0.7 s, until the partition healed (23.7 s without writes, both producers, in a
  10-minute isolate run); with the connection closed it asks another broker.
- Its controller_id is always a broker it lists (`admin_node`): clients send admin requests
  there, and every broker serves them.
- ListOffsets: timestamp -2 is the log start, -1 the high watermark (what a consumer may read:
  without transactions the last stable offset is the same), any other the first offset whose
  timestamp is at least it, below the high watermark (-1/-1 when there is none). A stated
  current leader epoch is checked as a fetch's is (KIP-320). A leader whose high watermark is
  below the start of its epoch (it just took over; `Partition.known_high_watermark`) answers
  the last two with OFFSET_NOT_AVAILABLE (v5+; LEADER_NOT_AVAILABLE before), as Kafka's
  (KIP-207): its older high watermark would make the end offset go back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

from raftlog.errors import OffsetNotAvailableError, RaftlogError
from raftlog.kafka.api import SUPPORTED_VERSIONS, ApiKey
from raftlog.kafka.errors import ErrorCode, kafka_code
from raftlog.kafka.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from raftlog.kafka.messages.list_offsets import (
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from raftlog.kafka.messages.metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
)
from raftlog.topics import TopicPartition

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource
    from raftlog.metadata.model import TopicInfo

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
# Kafka's cluster id is a base64 UUID; raftlog's clusters have none yet, and Kafka's clients
# only log or display it.
CLUSTER_ID = "raftlog"


def api_versions_handler(keys: Collection[int]):  # type: ignore[no-untyped-def]
    """The ApiVersions handler advertising `keys` (those with handlers) at their ranges."""
    api_keys = sorted((int(k), lo, hi) for k, (lo, hi) in SUPPORTED_VERSIONS.items() if k in keys)

    def handle_api_versions(
        ctx: HandlerContext, request: ApiVersionsRequest, version: int, source: RequestSource
    ) -> ApiVersionsResponse:
        return ApiVersionsResponse(0, api_keys, 0)

    return handle_api_versions


def handle_metadata(
    ctx: HandlerContext, request: MetadataRequest, version: int, source: RequestSource
) -> MetadataResponse | Awaitable[MetadataResponse]:
    names = request.topics
    if version == 0 and not names:
        names = None  # v0: an empty list means every topic
    missing = ctx.topics_to_auto_create(names or ()) if request.allow_auto_topic_creation else []
    if missing:

        async def create_then_answer() -> MetadataResponse:
            errors = await ctx.auto_create(missing)
            return _metadata(ctx, names, errors, source.external)

        return create_then_answer()
    if ctx.metadata.stale:
        source.close_after_answer("cut off from the metadata quorum: ask another broker")
    return _metadata(ctx, names, {}, source.external)


def _metadata(
    ctx: HandlerContext,
    names: tuple[str, ...] | None,
    create_errors: dict[str, RaftlogError],
    external: bool,
) -> MetadataResponse:
    md = ctx.metadata
    brokers = [
        MetadataBroker(b.node_id, b.host, b.port, b.rack) for b in md.kafka_brokers(external)
    ]
    alive = {b.node_id for b in brokers}
    # A stale view names no leader (module docstring).
    leaders = set() if md.stale else alive
    topics: list[MetadataTopic] = []
    if names is None:
        for t in md.topics().values():
            topics.append(_topic(t, alive, leaders))
    else:
        for name in names:
            try:
                if name in create_errors:
                    raise create_errors[name]
                topics.append(_topic(md.topic(name), alive, leaders))
            except RaftlogError as e:
                topics.append(MetadataTopic(kafka_code(e), name, False, []))
    return MetadataResponse(
        0, brokers, CLUSTER_ID, admin_node(md.controller_id, alive, ctx.config.node_id), topics
    )


def admin_node(controller_id: int, alive: Collection[int], this_node: int) -> int:
    """The controller_id a Metadata answer names: the active controller where it is a listed
    broker, else this node where it is one, else any listed broker (-1 if none is).

    Kafka's clients send admin requests (CreateTopics, DeleteTopics, ElectLeaders, ...) to it;
    any raftlog broker serves them, proposing through the quorum, as a KRaft broker names a
    random live broker. librdkafka waits for the named node to appear in its broker list and
    refreshes metadata only while the id is -1: a controller fenced at the moment of the answer
    (a broker's heartbeat late on a loaded machine while its Raft thread kept leading), named
    but absent from the list, held a CreateTopics unsent until confluent-kafka's 60 s timeout.
    """
    if controller_id in alive:
        return controller_id
    if this_node in alive:
        return this_node
    return min(alive, default=-1)


def _topic(t: TopicInfo, alive: set[int], leaders: set[int]) -> MetadataTopic:
    """`alive`: the live brokers; `leaders`: those that may be named as a leader."""
    partitions = []
    for p in t.partitions:
        leader = p.leader if p.leader in leaders else -1
        error = 0 if leader >= 0 else int(ErrorCode.LEADER_NOT_AVAILABLE)
        offline = [r for r in p.replicas if r not in alive]
        partitions.append(
            MetadataPartition(
                error, p.partition, leader, p.leader_epoch, list(p.replicas), list(p.isr), offline
            )
        )
    return MetadataTopic(0, t.name, False, partitions)


def handle_list_offsets(
    ctx: HandlerContext, request: ListOffsetsRequest, version: int, source: RequestSource
) -> ListOffsetsResponse:
    replicas = ctx.replicas
    topics = []
    for topic, parts in request.topics:
        out = []
        for p in parts:
            partition, timestamp = p.partition, p.timestamp
            try:
                leader = ctx.leader_partition(TopicPartition(topic, partition))
                replicas.consumer_fetch(leader, p.current_leader_epoch)  # KIP-320's check
                plog = leader.log
                if timestamp == EARLIEST_TIMESTAMP:
                    found = (plog.log_start_offset, -1)
                else:
                    hw = leader.known_high_watermark()  # a new leader's may not be known yet
                    if timestamp == LATEST_TIMESTAMP:
                        found = (hw, -1)
                    else:
                        at = plog.offset_for_timestamp(timestamp)
                        found = (-1, -1) if at is None or at[0] >= hw else (at[0], at[1])
                out.append(ListOffsetsPartitionResponse(partition, 0, found[1], found[0], -1))
            except OffsetNotAvailableError:
                # Only v5+ knows OFFSET_NOT_AVAILABLE; older clients retry LEADER_NOT_AVAILABLE
                # (Kafka's own broker answers them so).
                code = (
                    ErrorCode.OFFSET_NOT_AVAILABLE
                    if version >= 5
                    else ErrorCode.LEADER_NOT_AVAILABLE
                )
                out.append(ListOffsetsPartitionResponse(partition, int(code), -1, -1, -1))
            except RaftlogError as e:
                out.append(ListOffsetsPartitionResponse(partition, kafka_code(e), -1, -1, -1))
        topics.append((topic, out))
    return ListOffsetsResponse(0, topics)


HANDLERS: dict[int, Callable[..., Any]] = {
    ApiKey.METADATA: handle_metadata,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
}
