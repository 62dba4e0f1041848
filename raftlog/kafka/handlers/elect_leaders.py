"""ElectLeaders: Kafka's admin clients and kafka-leader-election give partitions back to their
preferred leaders.

Rules:
- A preferred election (election_type 0; v0 has only these) goes through
  `ctx.elect_leaders`, the native handler's operation: one metadata quorum proposal for the
  whole request, in which each partition's first replica leads again at a new leader epoch if
  it is a live in-sync replica. Each partition's raftlog code becomes its Kafka code, with
  raftlog's message: 0 (elected), ELECTION_NOT_NEEDED (it led already),
  PREFERRED_LEADER_NOT_AVAILABLE (not a live in-sync replica; retriable),
  UNKNOWN_TOPIC_OR_PARTITION.
- Null topic_partitions is every partition whose preferred leader does not lead
  (`ctx.elect_leaders(None)`); the answer lists those partitions only, as Kafka's controller
  leaves out the ones that need no election. An empty array elects nothing and asks nothing.
- A partition named more than once is elected and answered once; the answer groups the
  partitions by topic, in the order the request first names them.
- election_type 1 (unclean) is refused, each named partition INVALID_REQUEST with a message:
  raftlog elects an out-of-sync replica only by the topic config
  unclean.leader.election.enable, never on request. Unclean with null topic_partitions, and an
  election type Kafka does not define, refuse the whole request (as Kafka refuses an unknown
  type).
- A whole request refused (the quorum cannot take it: no leader, a timeout; or the rules
  above) is the v1 top-level error_code and, as Kafka's broker answers (getErrorResponse),
  every named partition's error with raftlog's message; v0 has no top-level code, so there the
  partitions carry it alone (null topic_partitions then answer nothing, as Kafka's v0).
- timeout_ms is not used: the proposal is bounded by the quorum's own timeout.
- Any broker answers (the proposal reaches the quorum leader from any node), so a client that
  sends this to the Metadata response's controller_id is answered there too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from raftlog.errors import InvalidRequestError, RaftlogError, error_from_code
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import kafka_code
from raftlog.kafka.messages.elect_leaders import (
    ElectionType,
    ElectLeadersRequest,
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
    TopicPartitions,
)

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource

UNCLEAN_REFUSED = (
    "unclean elections on request are not supported: raftlog elects an out-of-sync replica "
    "only when the topic config unclean.leader.election.enable is true, by itself"
)


def named_partitions(
    topics: tuple[TopicPartitions, ...] | None,
) -> list[tuple[str, int]] | None:
    """The request's (topic, partition)s, each once, in the order first named; None: all."""
    if topics is None:
        return None
    return list(dict.fromkeys((t.topic, p) for t in topics for p in t.partitions))


def grouped(
    results: Iterable[tuple[str, int, int, str | None]],
) -> tuple[ReplicaElectionResult, ...]:
    """(topic, partition, Kafka code, message)s as the response's per-topic results, topics in
    the order they first come."""
    by_topic: dict[str, list[PartitionResult]] = {}
    for topic, partition, code, message in results:
        by_topic.setdefault(topic, []).append(PartitionResult(partition, code, message))
    return tuple(ReplicaElectionResult(t, tuple(parts)) for t, parts in by_topic.items())


def _kafka_result(code: int, message: str | None) -> tuple[int, str | None]:
    """A raftlog per-partition (code, message) as Kafka's."""
    if code == 0:
        return 0, None
    return kafka_code(error_from_code(code, message or "")), message


def refused(named: list[tuple[str, int]] | None, error: RaftlogError) -> ElectLeadersResponse:
    """The whole request refused with `error` (the module rules)."""
    code = kafka_code(error)
    return ElectLeadersResponse(
        grouped((t, p, code, str(error)) for t, p in named or ()), error_code=code
    )


async def handle_elect_leaders(
    ctx: HandlerContext, request: ElectLeadersRequest, version: int, source: RequestSource
) -> ElectLeadersResponse:
    named = named_partitions(request.topic_partitions)
    kind = request.election_type
    if kind == ElectionType.UNCLEAN and named is not None:
        invalid = kafka_code(InvalidRequestError(UNCLEAN_REFUSED))
        return ElectLeadersResponse(grouped((t, p, invalid, UNCLEAN_REFUSED) for t, p in named))
    if kind == ElectionType.UNCLEAN:
        return refused(named, InvalidRequestError(f"{UNCLEAN_REFUSED}; nothing was elected"))
    if kind != ElectionType.PREFERRED:
        return refused(
            named,
            InvalidRequestError(f"unknown election type {kind} (0: preferred, 1: unclean)"),
        )
    if named == []:
        return ElectLeadersResponse(())
    try:
        elected = await ctx.elect_leaders(named)
    except RaftlogError as e:
        return refused(named, e)
    return ElectLeadersResponse(
        grouped((t, p, *_kafka_result(code, message)) for t, p, code, message in elected)
    )


HANDLERS: dict[int, Callable[..., Any]] = {ApiKey.ELECT_LEADERS: handle_elect_leaders}
