"""FindCoordinator, OffsetCommit (v2-7) and OffsetFetch (v1-5): where a Kafka group lives and
its committed offsets, on the same coordinator and offset registry as raftlog's own groups.

Rules (Kafka's: KafkaApis and the group coordinator's OffsetMetadataManager; raftlog's: the
native handlers, raftlog/broker/handlers/groups.py):
- FindCoordinator (any node): a group's coordinator is the active controller's node (the metadata
  Raft leader runs the one GroupCoordinator), named by its Kafka listener (the external one for
  a client of the external listener). No active controller, or none with a live Kafka listener:
  COORDINATOR_NOT_AVAILABLE (retriable: the client asks again). A transactional id (key_type 1)
  gets COORDINATOR_NOT_AVAILABLE and a message saying raftlog has no transactions; any other
  key type INVALID_REQUEST.
- The others go to this node's GroupCoordinator and are answered NOT_COORDINATOR on every node
  that is not the active controller (retriable: the client finds the coordinator again). The
  coordinator's own failures are rewritten as Kafka's coordinator rewrites them
  (`group_error_code`: leadership lost NOT_COORDINATOR, no answer in time
  COORDINATOR_NOT_AVAILABLE).
- OffsetCommit: one `coordinator.commit` of every partition, checked as the native path checks
  it (a member of the current generation; generation -1 with no member id on an Empty group is
  a standalone commit, that of a consumer using assign()); its outcome is every partition's
  error code, so a commit naming a partition that does not exist gets
  UNKNOWN_TOPIC_OR_PARTITION on every partition and nothing is stored (the native rule).
  Before it, each partition on its own, as Kafka: metadata over the coordinator's
  `offset_metadata_bytes_max` (Kafka's offset.metadata.max.bytes) gets
  OFFSET_METADATA_TOO_LARGE and is left out; the others are committed. An empty group id is
  INVALID_GROUP_ID. Never INVALID_COMMIT_OFFSET_SIZE (Kafka's "too large for one record"):
  the coordinator splits a commit too large for one Raft command. retention_time_ms, the
  leader epoch and group_instance_id are not kept (OffsetFetch answers leader epoch -1).
- OffsetFetch: a `noop` Raft proposal first (the read barrier of the native handler: this node
  still leads and has applied every acknowledged commit), then the local registry. A partition
  without a committed offset (an unknown group too) is offset -1, metadata "", no error, as
  Kafka answers; v2+ with topics null is every partition the group has committed. A group-level
  error is the top-level error_code from v2 (with no topics), and every requested partition's
  before v2 (Kafka's OffsetFetchRequest.getErrorResponse).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from raftlog.errors import RaftlogError
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode, group_error_code
from raftlog.kafka.handlers.groups import coordinator_of
from raftlog.kafka.messages.commits import (
    NO_OFFSET,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from raftlog.kafka.messages.groups import (
    COORDINATOR_KEY_GROUP,
    COORDINATOR_KEY_TRANSACTION,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource

log = logging.getLogger(__name__)

NO_METADATA = ""  # OffsetFetch's metadata for a partition without a committed offset (Kafka's)


# -- FindCoordinator -----------------------------------------------------------------------------


def handle_find_coordinator(
    ctx: HandlerContext, request: FindCoordinatorRequest, version: int, source: RequestSource
) -> FindCoordinatorResponse:
    if request.key_type == COORDINATOR_KEY_TRANSACTION:
        return _no_coordinator(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"no transaction coordinator for {request.key!r}: raftlog does not support "
            "transactions (an idempotent producer without transactional.id works)",
        )
    if request.key_type != COORDINATOR_KEY_GROUP:
        return _no_coordinator(
            ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {request.key_type}"
        )
    if ctx.metadata.stale:
        return _no_coordinator(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"broker {ctx.config.node_id} is cut off from the metadata quorum; ask another",
        )
    node = ctx.metadata.controller_id
    for b in ctx.metadata.kafka_brokers(source.external):
        if b.node_id == node:
            return FindCoordinatorResponse(0, b.node_id, b.host, b.port)
    why = (
        "no active controller (the metadata quorum is electing)"
        if node < 0
        else f"the active controller, node {node}, has no live Kafka listener"
    )
    return _no_coordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator for group: {why}")


def _no_coordinator(code: ErrorCode, message: str) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(int(code), error_message=message)


# -- OffsetCommit --------------------------------------------------------------------------------


async def handle_offset_commit(
    ctx: HandlerContext, request: OffsetCommitRequest, version: int, source: RequestSource
) -> OffsetCommitResponse:
    codes, outcome = await _commit(ctx, request)
    return OffsetCommitResponse(
        tuple(
            OffsetCommitResponseTopic(
                topic.name,
                tuple(
                    OffsetCommitResponsePartition(p.partition_index, codes.get((i, j), outcome))
                    for j, p in enumerate(topic.partitions)
                ),
            )
            for i, topic in enumerate(request.topics)
        )
    )


async def _commit(
    ctx: HandlerContext, request: OffsetCommitRequest
) -> tuple[dict[tuple[int, int], int], int]:
    """Commit what may be committed: the codes of partitions refused on their own, by their
    (topic, partition) position in the request (a partition may be named twice), and the
    commit's outcome, every other partition's code."""
    group_id = request.group_id
    if not group_id:
        return {}, int(ErrorCode.INVALID_GROUP_ID)
    codes: dict[tuple[int, int], int] = {}
    try:
        coordinator = coordinator_of(ctx, group_id)
        metadata_bytes_max = coordinator.config.offset_metadata_bytes_max
        entries: list[list[Any]] = []
        for i, topic in enumerate(request.topics):
            for j, p in enumerate(topic.partitions):
                metadata = p.committed_metadata or ""
                if len(metadata.encode()) > metadata_bytes_max:
                    codes[i, j] = int(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                    continue
                entries.append([topic.name, p.partition_index, p.committed_offset, metadata])
        if entries:
            await coordinator.commit(
                group_id, request.member_id, request.generation_id_or_member_epoch, entries
            )
    except RaftlogError as e:
        log.debug("OffsetCommit to group %r refused: %s", group_id, e)
        return codes, group_error_code(e)
    return codes, 0


# -- OffsetFetch ---------------------------------------------------------------------------------


async def handle_offset_fetch(
    ctx: HandlerContext, request: OffsetFetchRequest, version: int, source: RequestSource
) -> OffsetFetchResponse:
    wanted = (
        None
        if request.topics is None
        else [(t.name, p) for t in request.topics for p in t.partition_indexes]
    )
    try:
        coordinator = coordinator_of(ctx, request.group_id)
        await ctx.metadata.quorum.propose("noop")  # the read barrier (module rules)
        found = coordinator.fetch_offsets(request.group_id, wanted)
    except RaftlogError as e:
        log.debug("OffsetFetch of group %r failed: %s", request.group_id, e)
        return fetch_error_response(request, version, group_error_code(e))
    return fetch_response(wanted, found)


def fetch_response(
    wanted: list[tuple[str, int]] | None, found: dict[tuple[str, int], tuple[int, str]]
) -> OffsetFetchResponse:
    """The answer naming `wanted` partitions in request order (or, None, every one in
    `found`, sorted), each with its committed (offset, metadata) or -1 and ""."""
    named = sorted(found) if wanted is None else wanted

    def partition(tp: tuple[str, int]) -> OffsetFetchResponsePartition:
        offset, metadata = found.get(tp, (NO_OFFSET, NO_METADATA))
        return OffsetFetchResponsePartition(tp[1], offset, metadata)

    return OffsetFetchResponse(
        tuple(
            OffsetFetchResponseTopic(t, tuple(map(partition, tps))) for t, tps in _by_topic(named)
        )
    )


def fetch_error_response(
    request: OffsetFetchRequest, version: int, code: int
) -> OffsetFetchResponse:
    """A group-level error: the top-level error_code from v2, every partition's before."""
    if version >= 2:
        return OffsetFetchResponse((), code)
    return OffsetFetchResponse(
        tuple(
            OffsetFetchResponseTopic(
                t.name,
                tuple(
                    OffsetFetchResponsePartition(p, NO_OFFSET, NO_METADATA, code)
                    for p in t.partition_indexes
                ),
            )
            for t in request.topics or ()
        )
    )


def _by_topic(tps: Iterable[tuple[str, int]]) -> list[tuple[str, list[tuple[str, int]]]]:
    """`tps` grouped by topic, topics in order of first appearance, partitions in order."""
    out: dict[str, list[tuple[str, int]]] = {}
    for tp in tps:
        out.setdefault(tp[0], []).append(tp)
    return list(out.items())


HANDLERS: dict[int, Callable[..., Any]] = {
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
}
