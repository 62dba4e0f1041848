"""CreateTopics and DeleteTopics: Kafka's admin clients create and delete topics.

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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raftlog.errors import InvalidConfigError, InvalidRequestError, RaftlogError
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import kafka_code
from raftlog.kafka.messages.topics import (
    BROKER_DEFAULT,
    CreatableTopic,
    CreatableTopicResult,
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


async def handle_create_topics(
    ctx: HandlerContext, request: CreateTopicsRequest, version: int, source: RequestSource
) -> CreateTopicsResponse:
    cfg = ctx.config
    twice = duplicated([t.name for t in request.topics])
    results = []
    for spec in request.topics:
        try:
            if spec.name in twice:
                raise _twice(spec.name, "CreateTopics")
            partitions, replication_factor, config = creation_args(
                spec, cfg.default_partitions, cfg.default_replication_factor
            )
            await ctx.create_topic(
                spec.name,
                partitions,
                replication_factor,
                config,
                validate_only=request.validate_only,
            )
        except RaftlogError as e:
            results.append(CreatableTopicResult(spec.name, kafka_code(e), str(e)))
            continue
        results.append(CreatableTopicResult(spec.name))
    return CreateTopicsResponse(tuple(results))


async def handle_delete_topics(
    ctx: HandlerContext, request: DeleteTopicsRequest, version: int, source: RequestSource
) -> DeleteTopicsResponse:
    """Each named topic, in request order; v0-3 carry the error code only."""
    twice = duplicated(list(request.topic_names))
    results = []
    for name in request.topic_names:
        try:
            if name in twice:
                raise _twice(name, "DeleteTopics")
            await ctx.delete_topic(name)
        except RaftlogError as e:
            results.append(DeletableTopicResult(name, kafka_code(e)))
            continue
        results.append(DeletableTopicResult(name))
    return DeleteTopicsResponse(tuple(results))


HANDLERS: dict[int, Callable[..., Any]] = {
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
}
