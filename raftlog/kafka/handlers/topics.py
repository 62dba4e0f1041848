"""CreateTopics, DeleteTopics and CreatePartitions: Kafka's admin clients create, delete and
grow topics.

Rules:
- Each topic goes through `ctx.create_topic` / `ctx.delete_topic`, the native handlers'
  operations: the metadata quorum checks the name, the partition count, the replication
  factor against the live brokers, min.insync.replicas and every config (INVALID_TOPIC_EXCEPTION,
  INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG, TOPIC_ALREADY_EXISTS,
  UNKNOWN_TOPIC_OR_PARTITION, each with raftlog's message where the version has a field for
  it). This module only translates the request into those calls (`creation_args`).
- num_partitions or replication_factor -1 is the broker's default (KIP-464), at every version.
- Refused before the call, each topic on its own: explicit replica assignments (INVALID_REQUEST:
  raftlog places replicas itself, by rack, and has no reassignment to honour them with), a
  config with a null value (INVALID_CONFIG, as Kafka), a config key given twice
  (INVALID_CONFIG), and a topic named twice in one request (INVALID_REQUEST for each entry,
  as Kafka).
- Topics are created one after another, in request order; one topic's error never stops
  the others. `timeout_ms` is not used: each creation is bounded by the quorum's proposal
  timeout and the broker's wait for its logs to open (raftlog/broker/server.py).
- validate_only is passed on: the broker then checks the name and the configs.
- CreatePartitions: each topic goes through `ctx.create_partitions` with its new total count;
  the broker grows a topic and never shrinks it (a count not above the current one, or above
  its maximum: INVALID_PARTITIONS), and checks an explicit assignment (one replica list per new
  partition, the topic's replication factor of distinct live brokers each, else
  INVALID_REPLICA_ASSIGNMENT); null assignments let the controller place the new partitions.
  validate_only checks against the answering broker's copy of the metadata and grows nothing.
  A topic named twice is INVALID_REQUEST for each entry (as Kafka); one topic's error never
  stops the others; `timeout_ms` is not used (as for CreateTopics).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from raftlog.errors import InvalidConfigError, InvalidRequestError, RaftlogError
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import kafka_code
from raftlog.kafka.messages.topics import (
    BROKER_DEFAULT,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource


def creation_args(
    spec: CreatableTopic, default_partitions: int, default_replication_factor: int
) -> tuple[int, int, dict[str, str]]:
    """(partitions, replication factor, config) for `ctx.create_topic`, or the RaftlogError
    that refuses `spec` before it gets there (the module rules)."""
    name = spec.name
    if spec.assignments:
        raise InvalidRequestError(
            f"topic {name!r}: explicit replica assignments are not supported; raftlog places "
            "replicas itself: give num_partitions and replication_factor instead"
        )
    config: dict[str, str] = {}
    for c in spec.configs:
        if c.value is None:
            raise InvalidConfigError(
                f"topic {name!r}: config {c.name!r} has a null value; give a value or leave "
                "the key out for the default"
            )
        if c.name in config:
            raise InvalidConfigError(f"topic {name!r}: config {c.name!r} is given twice")
        config[c.name] = c.value
    partitions = spec.num_partitions
    replication_factor = spec.replication_factor
    return (
        default_partitions if partitions == BROKER_DEFAULT else partitions,
        default_replication_factor if replication_factor == BROKER_DEFAULT else replication_factor,
        config,
    )


def duplicated(names: list[str]) -> set[str]:
    """The names that appear more than once."""
    return {name for name, n in Counter(names).items() if n > 1}


def _twice(name: str, api: str) -> InvalidRequestError:
    return InvalidRequestError(f"topic {name!r} is named more than once in one {api} request")


async def each_topic(
    names: Sequence[str], api: str, act: Callable[[int], Awaitable[object]]
) -> list[RaftlogError | None]:
    """`act(i)` for the i-th topic of an `api` request, in request order: each topic's refusal,
    None where it was done. A topic named twice is refused (INVALID_REQUEST, as Kafka) without
    reaching `act`; one topic's error never stops the others."""
    twice = duplicated(list(names))
    outcomes: list[RaftlogError | None] = []
    for i, name in enumerate(names):
        try:
            if name in twice:
                raise _twice(name, api)
            await act(i)
        except RaftlogError as e:
            outcomes.append(e)
            continue
        outcomes.append(None)
    return outcomes


def topic_results(
    names: Sequence[str], outcomes: list[RaftlogError | None]
) -> tuple[CreatableTopicResult, ...]:
    """Each topic's result with its Kafka error code and raftlog's message (CreateTopics',
    CreatePartitions')."""
    return tuple(
        CreatableTopicResult(name)
        if e is None
        else CreatableTopicResult(name, kafka_code(e), str(e))
        for name, e in zip(names, outcomes, strict=True)
    )


async def handle_create_topics(
    ctx: HandlerContext, request: CreateTopicsRequest, version: int, source: RequestSource
) -> CreateTopicsResponse:
    cfg = ctx.config

    async def create(i: int) -> None:
        spec = request.topics[i]
        partitions, replication_factor, config = creation_args(
            spec, cfg.default_partitions, cfg.default_replication_factor
        )
        await ctx.create_topic(
            spec.name, partitions, replication_factor, config, validate_only=request.validate_only
        )

    names = [t.name for t in request.topics]
    return CreateTopicsResponse(
        topic_results(names, await each_topic(names, "CreateTopics", create))
    )


async def handle_delete_topics(
    ctx: HandlerContext, request: DeleteTopicsRequest, version: int, source: RequestSource
) -> DeleteTopicsResponse:
    """Each named topic, in request order; v0-3 carry the error code only."""
    names = request.topic_names

    async def delete(i: int) -> None:
        await ctx.delete_topic(names[i])

    outcomes = await each_topic(names, "DeleteTopics", delete)
    return DeleteTopicsResponse(
        tuple(
            DeletableTopicResult(name, 0 if e is None else kafka_code(e))
            for name, e in zip(names, outcomes, strict=True)
        )
    )


def replica_assignments(spec: CreatePartitionsTopic) -> list[list[int]] | None:
    """`spec`'s assignments as `ctx.create_partitions` takes them: one replica list per new
    partition, or None (null: the controller places them)."""
    if spec.assignments is None:
        return None
    return [list(a.broker_ids) for a in spec.assignments]


async def handle_create_partitions(
    ctx: HandlerContext, request: CreatePartitionsRequest, version: int, source: RequestSource
) -> CreatePartitionsResponse:
    """Each topic grown in request order; v0-1 carry raftlog's message with each error."""

    async def grow(i: int) -> None:
        spec = request.topics[i]
        await ctx.create_partitions(
            spec.name, spec.count, replica_assignments(spec), validate_only=request.validate_only
        )

    names = [t.name for t in request.topics]
    return CreatePartitionsResponse(
        topic_results(names, await each_topic(names, "CreatePartitions", grow))
    )


HANDLERS: dict[int, Callable[..., Any]] = {
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
}
