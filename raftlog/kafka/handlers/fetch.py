"""Kafka's Fetch (v4-11), for consumers: the native read path, Kafka's request and response.

Each partition is read with `ReplicaManager.read_as_leader`, the one read every fetch uses: up
to the high watermark only, KIP-320's leader epoch check (FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH), partition and response byte budgets, at least one whole batch for the
first partition with data (KIP-74). A fetch that finds less than `min_bytes` long-polls with the
native handler's `long_poll` (woken by the high watermark, registered in the step that read).

Rules:
- Consumers only: a fetch with a replica id (a Kafka broker's follower) is refused with
  NOT_LEADER_OR_FOLLOWER per partition; raftlog's followers use the native protocol.
- No fetch sessions (KIP-227): every answer says session id 0 and carries every partition
  asked for, which Kafka's clients take as "no session" and keep sending full fetches; an
  incremental fetch (a session id we never gave) is FETCH_SESSION_ID_NOT_FOUND.
- Records are sent as stored when every batch in the read is Kafka's format (magic 2); a
  batch in raftlog's own format (magic 1, written by raftlog's Producer) is converted to v2
  for this client only (raftlog/records.py's convert_to_v2): per-record work, paid only
  when a Kafka client reads what raftlog's Producer wrote (docs/ARCHITECTURE.md, "Two record
  formats").
- read_committed is served as read_uncommitted: without transactions every record below the
  high watermark is committed, and the last stable offset is the high watermark.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raftlog.broker.handlers.fetch import MAX_WAIT_MS_LIMIT, long_poll
from raftlog.broker.response import KafkaResponse, Response
from raftlog.errors import NotLeaderOrFollowerError, OffsetOutOfRangeError, RaftlogError
from raftlog.kafka import api
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode, kafka_code
from raftlog.kafka.messages.fetch import FetchPartitionResponse, FetchRequest, FetchResponse
from raftlog.records import convert_to_v2
from raftlog.storage import FileSlice
from raftlog.topics import TopicPartition

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource


@dataclass(slots=True)
class _Want:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    leader_epoch: int


def handle_fetch(
    ctx: HandlerContext, request: FetchRequest, version: int, source: RequestSource
) -> Response | Awaitable[Response]:
    header_version = api.response_header_version(api.ApiKey.FETCH, version)
    if request.session_id != 0 or request.session_epoch > 0:
        return KafkaResponse(
            FetchResponse(0, int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND), 0, []).encode(version),
            header_version,
        )
    wanted = [
        _Want(
            topic,
            p.partition,
            p.fetch_offset,
            max(p.partition_max_bytes, 1),
            p.current_leader_epoch,
        )
        for topic, parts in request.topics
        for p in parts
    ]
    max_bytes = max(request.max_bytes, 1)
    follower = request.replica_id >= 0

    def read() -> tuple[Response, int, bool]:
        return _read(ctx, wanted, max_bytes, follower, version, header_version)

    response, total, urgent = read()
    max_wait_ms = min(max(request.max_wait_ms, 0), MAX_WAIT_MS_LIMIT)
    if total >= max(request.min_bytes, 0) or max_wait_ms == 0 or urgent:
        return response
    response.close()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    woken: asyncio.Future[None] = loop.create_future()
    replicas = ctx.replicas
    tps = [TopicPartition(w.topic, w.partition) for w in wanted]
    replicas.add_waiter(tps, woken, False)
    return long_poll(
        ctx,
        deadline,
        max(request.min_bytes, 0),
        woken,
        read,
        lambda fut: replicas.add_waiter(tps, fut, False),
        lambda fut: replicas.remove_waiter(tps, fut, False),
    )


def _read(
    ctx: HandlerContext,
    wanted: list[_Want],
    max_bytes: int,
    follower: bool,
    version: int,
    header_version: int,
) -> tuple[Response, int, bool]:
    """(the response, its record bytes, whether it must go now: an error)."""
    cfg = ctx.config
    zero_copy, zero_copy_min = cfg.fetch_zero_copy, cfg.fetch_zero_copy_min_bytes
    replicas = ctx.replicas
    topics: list[tuple[str, list[FetchPartitionResponse]]] = []
    by_topic: dict[str, list[FetchPartitionResponse]] = {}
    remaining = max_bytes
    total = 0
    urgent = False
    # The metrics: (topic, bytes) of each partition with data, counted when the answer is sent.
    sent: list[tuple[str, int]] | None = [] if ctx.stats.enabled else None
    for w in wanted:
        out = by_topic.get(w.topic)
        if out is None:
            out = by_topic[w.topic] = []
            topics.append((w.topic, out))
        try:
            if follower:
                raise _not_for_followers(ctx)
            part = ctx.leader_partition(TopicPartition(w.topic, w.partition))
            read = replicas.read_as_leader(
                part, w.offset, w.max_bytes, False, w.leader_epoch, remaining, not total
            )
            records, size = _records(read.data, zero_copy, zero_copy_min)
        except RaftlogError as e:
            start = e.log_start_offset if isinstance(e, OffsetOutOfRangeError) else -1
            out.append(FetchPartitionResponse(w.partition, kafka_code(e), -1, -1, start, [], 0))
            urgent = True
            continue
        hw = read.high_watermark
        out.append(
            FetchPartitionResponse(w.partition, 0, hw, hw, read.log_start_offset, records, size)
        )
        total += size
        remaining -= size
        if sent is not None and size:
            sent.append((w.topic, size))
    encoded = FetchResponse(0, 0, 0, topics).encode(version)
    built = KafkaResponse(encoded, header_version)
    if sent:
        built.fetched = (False, sent)  # consumers only: followers fetch natively
    return built, total, urgent


def _not_for_followers(ctx: HandlerContext) -> RaftlogError:
    return NotLeaderOrFollowerError(
        f"broker {ctx.config.node_id}'s Kafka listener serves consumers only: a replica's "
        "fetch goes to its native replication listener"
    )


def _records(
    sl: FileSlice, zero_copy: bool, zero_copy_min: int
) -> tuple[list[bytes | FileSlice], int]:
    """A read's record parts for a Kafka client, and their size (module rules)."""
    if not sl.size:
        return [], 0
    data = convert_to_v2(sl.read())
    return [data], len(data)


HANDLERS: dict[int, Callable[..., Any]] = {ApiKey.FETCH: handle_fetch}
