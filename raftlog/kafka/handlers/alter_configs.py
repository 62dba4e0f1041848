"""AlterConfigs and IncrementalAlterConfigs: Kafka's admin clients and kafka-configs change a
live topic's configs.

Rules:
- Each TOPIC resource (type 2) is one `ctx.alter_topic_config` call: one metadata command (the
  native AlterTopicConfig, key 23) whose changes are key -> value to set, or None to put the
  key back to the brokers' default; checked whole as topic creation checks configs, and
  refused whole (nothing changes). The resources of a request are altered one after another,
  each answered with its own error_code and raftlog's message: INVALID_CONFIG for an unknown
  key (naming the nearest known one), a bad value, or a change to durability.policy or
  min.insync.replicas (fixed at creation); UNKNOWN_TOPIC_OR_PARTITION; and for a metadata
  quorum that cannot take the change, its retriable code (NOT_CONTROLLER, REQUEST_TIMED_OUT).
- IncrementalAlterConfigs (KIP-339): SET is key -> value, DELETE key -> None (a key the topic
  does not set: nothing changes). APPEND and SUBTRACT edit a list-type config as Kafka's
  controller does: the value in effect (the topic's, else this broker's `[log]` default, else
  raftlog's) split at commas, each listed item added when absent / removed, joined again, and
  SET, so the result is checked as any SET. cleanup.policy is the only list-type topic config
  raftlog knows, and it accepts only "delete" (no log compaction): APPEND compact, and
  SUBTRACT delete (an empty list), are INVALID_CONFIG by that check, which says so. APPEND or
  SUBTRACT on any other key is INVALID_CONFIG (its type is not a list; an unknown key named
  as unknown); an operation Kafka does not define, INVALID_REQUEST.
- AlterConfigs (the legacy API) replaces the topic's whole set: the keys named are set, and
  every other key the topic sets goes back to its default (key -> None), in the same one
  command. The topic's current config is read after a Raft read barrier (a `noop` proposal, as
  OffsetFetch), so no change acknowledged before is missed for a stale copy; two clients
  altering one topic at once still race, as with Kafka (which deprecates this API for it).
- durability.policy and min.insync.replicas stay as created. A request naming one with the
  value the topic has (DELETE: one it does not set) changes nothing, and is accepted: Kafka
  writes no record for an unchanged value, and a legacy client's read-modify-write sends back
  every key it read. An AlterConfigs that leaves out one the topic sets would put it back to
  its default: INVALID_CONFIG, saying to name it with its value. Whenever this handler reads
  the topic's current config (AlterConfigs; APPEND, SUBTRACT or a fixed key in
  IncrementalAlterConfigs) it does so after the read barrier above.
- Refused before anything is read or changed, as Kafka's broker refuses them
  (ConfigAdminManager.preprocess), INVALID_REQUEST with a message: a resource named twice in
  one request (each time), a config key named twice in one resource, a null value but for a
  DELETE, a topic resource with an empty name (Kafka has no default topic resource).
- BROKER (4) and BROKER_LOGGER (8) resources: INVALID_REQUEST saying raftlog has no dynamic
  broker configs (a broker's settings come from its config file, read at start); Kafka answers
  INVALID_REQUEST for a broker config it cannot change dynamically. Any other type:
  INVALID_REQUEST, unknown resource type, as Kafka's.
- validate_only: each resource is checked as it would be applied (alter_topic_config's
  validate_only, against the answering broker's copy of the metadata); nothing changes.
- Any broker answers: the command reaches the metadata quorum from any node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from raftlog.errors import InvalidConfigError, InvalidRequestError, RaftlogError
from raftlog.invariants import InvariantError
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import kafka_code
from raftlog.kafka.handlers.configs import default_value
from raftlog.kafka.messages.alter_configs import (
    AlterConfigsRequest,
    AlterConfigsResource,
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
    ConfigOperation,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from raftlog.kafka.messages.configs import ResourceType
from raftlog.metadata.state import FIXED_TOPIC_CONFIGS
from raftlog.storage.config import TOPIC_CONFIG_KEYS, unknown_key_message

if TYPE_CHECKING:
    from raftlog.broker.context import HandlerContext, RequestSource
    from raftlog.kafka.messages.alter_configs import IncrementalAlterConfigsResource

# The list-type topic configs raftlog knows (Kafka's ConfigDef.Type.LIST among them).
LIST_CONFIGS = frozenset({"cleanup.policy"})
_OPERATIONS = frozenset(int(op) for op in ConfigOperation)
_LIST_EDITS = frozenset({ConfigOperation.APPEND, ConfigOperation.SUBTRACT})

NO_BROKER_CONFIGS = (
    "raftlog has no dynamic broker configs: a broker's settings come from its config file, "
    "read at start (DescribeConfigs shows them); only topic resources (type 2) can be altered"
)


class _Resource(Protocol):
    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...


R = TypeVar("R", bound=_Resource)


def _named_twice(resources: Iterable[_Resource]) -> set[tuple[int, str]]:
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    return {key for key, n in counts.items() if n > 1}


def _check_resource(res: _Resource, keys: list[str], null_values: list[str]) -> None:
    """The checks every resource passes before anything is read or changed (module rules)."""
    twice = sorted(k for k, n in Counter(keys).items() if n > 1)
    if twice:
        raise InvalidRequestError(f"config keys named more than once: {', '.join(twice)}")
    if null_values:
        raise InvalidRequestError(
            f"a null value for {', '.join(null_values)}: only a DELETE may have none"
        )
    kind = res.resource_type
    if kind in (ResourceType.BROKER, ResourceType.BROKER_LOGGER):
        raise InvalidRequestError(NO_BROKER_CONFIGS)
    if kind != ResourceType.TOPIC:
        raise InvalidRequestError(f"unknown resource type {kind}: {NO_BROKER_CONFIGS}")
    if res.resource_name == "":
        raise InvalidRequestError("a topic resource needs a topic's name (no default topic)")


async def _current_config(ctx: HandlerContext, topic: str) -> dict[str, str]:
    """Topic `topic`'s own configs after a read barrier (module rules)."""
    await ctx.metadata.quorum.propose("noop")
    return dict(ctx.metadata.topic(topic).config)


def _unchanged_fixed_left_out(
    changes: Mapping[str, str | None], current: Mapping[str, str]
) -> dict[str, str | None]:
    """`changes` without the fixed keys they leave as they are (module rules)."""
    return {
        k: v for k, v in changes.items() if not (k in FIXED_TOPIC_CONFIGS and current.get(k) == v)
    }


def edited_list(operation: int, key: str, value: str, in_effect: str) -> str:
    """The list config `key` whose value in effect is `in_effect` after APPEND or SUBTRACT of
    the comma-separated `value` (Kafka's list edit). InvalidConfigError for a key that is not
    a list."""
    edit = "APPEND to" if operation == ConfigOperation.APPEND else "SUBTRACT from"
    if key not in TOPIC_CONFIG_KEYS:
        raise InvalidConfigError(f"cannot {edit} {unknown_key_message(key)}")
    if key not in LIST_CONFIGS:
        raise InvalidConfigError(
            f"cannot {edit} {key}: its type is not a list (the list-type topic configs: "
            f"{', '.join(sorted(LIST_CONFIGS))}); SET it instead"
        )
    items = [item for item in in_effect.split(",") if item]
    listed = value.split(",")
    if operation == ConfigOperation.APPEND:
        items += [item for item in dict.fromkeys(listed) if item not in items]
    else:
        items = [item for item in items if item not in listed]
    return ",".join(items)


async def incremental_changes(
    ctx: HandlerContext, res: IncrementalAlterConfigsResource
) -> dict[str, str | None]:
    """The alter_topic_config changes of one checked IncrementalAlterConfigs resource."""
    for c in res.configs:
        if c.config_operation not in _OPERATIONS:
            raise InvalidRequestError(
                f"unknown config operation {c.config_operation} for {c.name} (0 SET, "
                "1 DELETE, 2 APPEND, 3 SUBTRACT)"
            )
    reads = any(
        c.config_operation in _LIST_EDITS or c.name in FIXED_TOPIC_CONFIGS for c in res.configs
    )
    current = await _current_config(ctx, res.resource_name) if reads else {}
    changes: dict[str, str | None] = {}
    for c in res.configs:
        if c.config_operation == ConfigOperation.SET:
            changes[c.name] = c.value
        elif c.config_operation == ConfigOperation.DELETE:
            changes[c.name] = None
        else:
            if c.value is None:  # _check_resource refuses a null value but DELETE's
                raise InvariantError(f"{c.name}: a null value reached a list edit")
            in_effect = current.get(c.name)
            if in_effect is None:
                stated = ctx.config.log_defaults.get(c.name)
                in_effect = default_value(c.name) if stated is None else str(stated)
            changes[c.name] = edited_list(c.config_operation, c.name, c.value, in_effect or "")
    return _unchanged_fixed_left_out(changes, current) if reads else changes


async def whole_set_changes(
    ctx: HandlerContext, res: AlterConfigsResource
) -> dict[str, str | None]:
    """The alter_topic_config changes of one checked AlterConfigs resource: its configs set,
    every other key the topic sets back to its default (module rules)."""
    current = await _current_config(ctx, res.resource_name)
    named = {c.name: c.value for c in res.configs}
    kept = sorted(k for k in current if k in FIXED_TOPIC_CONFIGS and k not in named)
    if kept:
        shown = ", ".join(f"{k}={current[k]}" for k in kept)
        raise InvalidConfigError(
            f"topic {res.resource_name!r} sets {shown}, which stays as the topic was created: "
            "AlterConfigs replaces the whole set, so name it with that value (or use "
            "IncrementalAlterConfigs, which changes only the keys it names)"
        )
    changes: dict[str, str | None] = {k: None for k in current if k not in named}
    changes.update(named)
    return _unchanged_fixed_left_out(changes, current)


async def _alter_each(
    ctx: HandlerContext,
    resources: tuple[R, ...],
    validate_only: bool,
    keys_and_nulls: Callable[[R], tuple[list[str], list[str]]],
    changes_of: Callable[[HandlerContext, R], Awaitable[dict[str, str | None]]],
) -> tuple[AlterConfigsResourceResponse, ...]:
    """Each resource checked, then altered (module rules); its outcome."""
    twice = _named_twice(resources)
    out = []
    for res in resources:
        kind, name = res.resource_type, res.resource_name
        try:
            if (kind, name) in twice:
                raise InvalidRequestError(f"resource {kind} {name!r} appears more than once")
            _check_resource(res, *keys_and_nulls(res))
            changes = await changes_of(ctx, res)
            await ctx.alter_topic_config(name, changes, validate_only)
        except RaftlogError as e:
            out.append(AlterConfigsResourceResponse(kind, name, kafka_code(e), str(e)))
            continue
        out.append(AlterConfigsResourceResponse(kind, name))
    return tuple(out)


def _whole_set_keys(res: AlterConfigsResource) -> tuple[list[str], list[str]]:
    keys = [c.name for c in res.configs]
    return keys, [c.name for c in res.configs if c.value is None]


def _incremental_keys(res: IncrementalAlterConfigsResource) -> tuple[list[str], list[str]]:
    keys = [c.name for c in res.configs]
    nulls = [
        c.name
        for c in res.configs
        if c.value is None and c.config_operation != ConfigOperation.DELETE
    ]
    return keys, nulls


async def handle_alter_configs(
    ctx: HandlerContext, request: AlterConfigsRequest, version: int, source: RequestSource
) -> AlterConfigsResponse:
    responses = await _alter_each(
        ctx, request.resources, request.validate_only, _whole_set_keys, whole_set_changes
    )
    return AlterConfigsResponse(responses)


async def handle_incremental_alter_configs(
    ctx: HandlerContext,
    request: IncrementalAlterConfigsRequest,
    version: int,
    source: RequestSource,
) -> IncrementalAlterConfigsResponse:
    responses = await _alter_each(
        ctx, request.resources, request.validate_only, _incremental_keys, incremental_changes
    )
    return IncrementalAlterConfigsResponse(responses)


HANDLERS: dict[int, Callable[..., Any]] = {
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
}
