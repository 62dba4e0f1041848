"""DescribeConfigs: a topic's or this broker's configs, by Kafka's names, as in effect.

Rules:
- TOPIC resources (type 2): every topic config key raftlog knows (`TOPIC_CONFIG_KEYS`, Kafka's
  names, e.g. retention.ms, plus raftlog's own such as durability.policy), with the value the
  topic's logs use: the topic's own setting (source DYNAMIC_TOPIC_CONFIG), else the broker's
  `[log]` default (STATIC_BROKER_CONFIG), else raftlog's default (DEFAULT_CONFIG, the only
  one that is `is_default`). The log settings' values are read from the LogConfig the logs
  are opened with (`ctx.logs.config_for`), so what is shown is what is used. An unset
  flush.messages / flush.ms (never flush on a count or a timer) shows as Kafka spells that
  default, 9223372036854775807. An unknown topic is UNKNOWN_TOPIC_OR_PARTITION.
- BROKER resources (type 4) named by this broker's id: its settings that Kafka has names for
  (num.partitions, socket.request.max.bytes, replica.lag.time.max.ms, ...) and its log
  defaults under Kafka's broker names (log.retention.ms, message.max.bytes, ...); DEFAULT_CONFIG
  where the value is raftlog's default, else STATIC_BROKER_CONFIG. The empty name asks, as in
  Kafka, for the cluster's dynamic broker defaults: raftlog has none, so no entries. Another
  broker's id, or a name that is not an id, is INVALID_REQUEST (the client asks that broker).
- Any other resource type is INVALID_REQUEST, with the reason in error_message.
- A topic's entry is read_only false for the keys AlterConfigs and IncrementalAlterConfigs
  change on a live topic (`ALTERABLE_TOPIC_CONFIGS`: every topic config but
  durability.policy and min.insync.replicas, which stay as the topic was created), true for
  those two; a key altered on the topic shows DYNAMIC_TOPIC_CONFIG, as above. Every broker
  entry is read_only (raftlog has no dynamic broker configs: a broker's settings come from
  its config file). None is sensitive. `configuration_keys` keeps the listed keys only (an
  unknown key is left out, as Kafka does). Synonyms (v1+, when asked for) list each layer
  that sets the key, the one in effect first, named as that layer names it (retention.ms,
  then log.retention.ms).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from raftlog.errors import InvalidRequestError, RaftlogError
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import kafka_code
from raftlog.kafka.messages.configs import (
    ConfigSource,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
    ResourceType,
)
from raftlog.metadata.partition_state import TopicRules
from raftlog.metadata.state import FIXED_TOPIC_CONFIGS
from raftlog.storage.config import (
    COMPRESSION_TYPE_DEFAULT,
    TOPIC_CONFIG_KEYS,
    LogConfig,
    field_name,
)

if TYPE_CHECKING:
    from raftlog.broker.config import BrokerConfig
    from raftlog.broker.context import HandlerContext, RequestSource

# Kafka's Long.MAX_VALUE: how Kafka shows "never" for flush.messages and flush.ms.
NEVER = str(2**63 - 1)

# A topic config's name as a broker-wide default, where Kafka's differs from the topic's.
BROKER_NAMES = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "max.message.bytes": "message.max.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "compression.type": "compression.type",
    "recovery.point.checkpoint.ms": "log.flush.offset.checkpoint.interval.ms",
}

_RULES = TopicRules()
# raftlog's defaults of the topic configs that are not LogConfig fields (the layers that read
# them default the same way: TopicRules, the log's cleanup, replication's durability).
_OTHER_DEFAULTS = {
    "compression.type": COMPRESSION_TYPE_DEFAULT,
    "min.insync.replicas": str(_RULES.min_insync_replicas),
    "unclean.leader.election.enable": "true" if _RULES.unclean_election else "false",
    "durability.policy": "fsync" if _RULES.fsync else "replication",
}
_LOG_FIELDS = {f.name for f in dataclasses.fields(LogConfig)}
_LOG_DEFAULTS = LogConfig()
# The topic configs a live topic's config changes may set (alter_topic_config refuses the rest).
ALTERABLE_TOPIC_CONFIGS = TOPIC_CONFIG_KEYS - FIXED_TOPIC_CONFIGS


def _show(value: Any) -> str | None:
    """A value as Kafka's clients see it: a string; None (an unset flush.*) is Kafka's NEVER."""
    if value is None:
        return NEVER
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _value_in_effect(key: str, effective: LogConfig, stated: str | None) -> str | None:
    """`key`'s value as the logs use it (a LogConfig field), else as stated, else raftlog's
    default (None for a key this module has no default for)."""
    name = field_name(key)
    if name in _LOG_FIELDS:
        return _show(getattr(effective, name))
    if stated is not None:
        return stated
    return _OTHER_DEFAULTS.get(key)


def default_value(key: str) -> str | None:
    """raftlog's default of topic config `key`, as Kafka's clients see it (None: it has
    none)."""
    name = field_name(key)
    if name in _LOG_FIELDS:
        return _show(getattr(_LOG_DEFAULTS, name))
    return _OTHER_DEFAULTS.get(key)


def _entry(
    name: str,
    value: str | None,
    layers: list[DescribeConfigsSynonym],
    synonyms: bool,
    read_only: bool = True,
) -> DescribeConfigsResourceResult:
    """An entry whose source is that of the first of `layers` (the one in effect)."""
    source = layers[0].source
    return DescribeConfigsResourceResult(
        name,
        value,
        read_only=read_only,
        config_source=source,
        is_sensitive=False,
        synonyms=tuple(layers) if synonyms else (),
        is_default=source == ConfigSource.DEFAULT_CONFIG,
    )


def topic_entries(
    topic_config: Mapping[str, str],
    broker_defaults: Mapping[str, Any],
    effective: LogConfig,
    synonyms: bool,
) -> list[DescribeConfigsResourceResult]:
    """A topic's entries: `topic_config` as the metadata stores it, the broker's `[log]`
    defaults, and `effective`, the LogConfig its logs are opened with."""
    out = []
    for key in sorted(TOPIC_CONFIG_KEYS):
        broker_name = BROKER_NAMES.get(key, key)
        layers = []
        if key in topic_config:
            layers.append(
                DescribeConfigsSynonym(key, topic_config[key], ConfigSource.DYNAMIC_TOPIC_CONFIG)
            )
        if key in broker_defaults:
            layers.append(
                DescribeConfigsSynonym(
                    broker_name, _show(broker_defaults[key]), ConfigSource.STATIC_BROKER_CONFIG
                )
            )
        layers.append(
            DescribeConfigsSynonym(broker_name, default_value(key), ConfigSource.DEFAULT_CONFIG)
        )
        stated = topic_config.get(key, broker_defaults.get(key))
        value = _value_in_effect(key, effective, None if stated is None else str(stated))
        out.append(_entry(key, value, layers, synonyms, key not in ALTERABLE_TOPIC_CONFIGS))
    return out


# This broker's own settings that Kafka has names for: (Kafka's name, BrokerConfig field).
_BROKER_SETTINGS = (
    ("num.partitions", "default_partitions"),
    ("default.replication.factor", "default_replication_factor"),
    ("auto.create.topics.enable", "auto_create_topics"),
    ("socket.request.max.bytes", "request_bytes_max"),
    ("queued.max.request.bytes", "queued_request_bytes_max"),
    ("max.connections", "connections_max"),
    ("max.connections.per.ip", "connections_per_address_max"),
    ("connections.max.idle.ms", "connection_idle_ms_max"),
)
# Its replication settings (ReplicationConfig fields are Kafka's names, snake_case).
_REPLICATION_SETTINGS = (
    "replica_lag_time_max_ms",
    "replica_fetch_wait_max_ms",
    "replica_fetch_max_bytes",
    "replica_fetch_response_max_bytes",
    "replica_fetch_backoff_ms",
    "replica_socket_timeout_ms",
)


def _field_default(cls: Any, name: str) -> Any:
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def broker_entries(
    config: BrokerConfig, effective: LogConfig, synonyms: bool
) -> list[DescribeConfigsResourceResult]:
    """This broker's entries: its settings (`config`) and its log defaults in effect
    (`effective`, the LogConfig of a topic that sets nothing)."""
    out = []

    def add(name: str, value: Any, default: Any = dataclasses.MISSING) -> None:
        """`default`: raftlog's default of the setting (MISSING: it has none)."""
        source = (
            ConfigSource.DEFAULT_CONFIG if value == default else ConfigSource.STATIC_BROKER_CONFIG
        )
        layers = [DescribeConfigsSynonym(name, _show(value), source)]
        if source != ConfigSource.DEFAULT_CONFIG and default is not dataclasses.MISSING:
            layers.append(DescribeConfigsSynonym(name, _show(default), ConfigSource.DEFAULT_CONFIG))
        out.append(_entry(name, _show(value), layers, synonyms))

    add("broker.id", config.node_id)
    add("node.id", config.node_id)
    for name, attr in _BROKER_SETTINGS:
        add(name, getattr(config, attr), _field_default(type(config), attr))
    replication = config.replication
    for attr in _REPLICATION_SETTINGS:
        add(
            attr.replace("_", "."),
            getattr(replication, attr),
            _field_default(type(replication), attr),
        )
    # A topic that sets nothing shows the broker's log defaults; its layers already carry the
    # broker's names. Read-only here: they are the broker's, not a topic's.
    for entry in topic_entries({}, config.log_defaults, effective, synonyms):
        out.append(entry._replace(name=BROKER_NAMES.get(entry.name, entry.name), read_only=True))
    return sorted(out, key=lambda e: e.name)


def selected(
    entries: Iterable[DescribeConfigsResourceResult], keys: tuple[str, ...] | None
) -> tuple[DescribeConfigsResourceResult, ...]:
    """The entries named in `keys` (None: all), in `entries`' order."""
    if keys is None:
        return tuple(entries)
    wanted = set(keys)
    return tuple(e for e in entries if e.name in wanted)


def _describe(
    ctx: HandlerContext, res: DescribeConfigsResource, synonyms: bool
) -> list[DescribeConfigsResourceResult]:
    """One resource's entries, or the RaftlogError to answer it with."""
    if res.resource_type == ResourceType.TOPIC:
        topic = ctx.metadata.topic(res.resource_name)
        config = dict(topic.config)
        effective = ctx.logs.config_for(config)
        return topic_entries(config, ctx.config.log_defaults, effective, synonyms)
    if res.resource_type == ResourceType.BROKER:
        node_id = ctx.config.node_id
        if res.resource_name == "":
            return []
        if res.resource_name != str(node_id):
            raise InvalidRequestError(
                f"this is broker {node_id}; ask broker {res.resource_name!r} for its own configs"
            )
        return broker_entries(ctx.config, ctx.logs.config_for({}), synonyms)
    raise InvalidRequestError(
        f"resource type {res.resource_type} is not supported: raftlog describes topics "
        f"({int(ResourceType.TOPIC)}) and brokers ({int(ResourceType.BROKER)})"
    )


def handle_describe_configs(
    ctx: HandlerContext, request: DescribeConfigsRequest, version: int, source: RequestSource
) -> DescribeConfigsResponse:
    synonyms = request.include_synonyms and version >= 1
    results = []
    for res in request.resources:
        kind, name = res.resource_type, res.resource_name
        try:
            entries = _describe(ctx, res, synonyms)
        except RaftlogError as e:
            results.append(DescribeConfigsResult(kind, name, (), kafka_code(e), str(e)))
            continue
        results.append(DescribeConfigsResult(kind, name, selected(entries, res.configuration_keys)))
    return DescribeConfigsResponse(tuple(results))


HANDLERS: dict[int, Callable[..., Any]] = {ApiKey.DESCRIBE_CONFIGS: handle_describe_configs}
