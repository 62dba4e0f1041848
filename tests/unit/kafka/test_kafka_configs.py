"""DescribeConfigs: the messages match kafka-python's codecs byte for byte at v0-2; a topic's
and a broker's entries carry Kafka's names, the values in effect and where each comes from;
other resources get INVALID_REQUEST and unknown topics UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.admin.configs import DescribeConfigsRequest as KpRequest
from kafka.protocol.admin.configs import DescribeConfigsResponse as KpResponse
from kafka.protocol.old import admin as old
from kp_oracle import (
    INT8,
    INT16,
    INT32,
    NULLABLE_TEXT,
    TEXT,
    assert_matches_kafka_python,
    small_tuples,
)

from raftlog.broker.config import BrokerConfig
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.handlers.configs import (
    NEVER,
    broker_entries,
    handle_describe_configs,
    selected,
    topic_entries,
)
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
from raftlog.metadata.model import TopicInfo
from raftlog.storage.config import TOPIC_CONFIG_KEYS, LogConfig

VERSIONS = (0, 1, 2)

_resource = st.builds(DescribeConfigsResource, INT8, TEXT, st.none() | small_tuples(TEXT))


def _requests(version: int) -> st.SearchStrategy[DescribeConfigsRequest]:
    synonyms = st.booleans() if version >= 1 else st.just(False)
    return st.builds(DescribeConfigsRequest, small_tuples(_resource), synonyms)


@st.composite
def _entry(draw: st.DrawFn, version: int) -> DescribeConfigsResourceResult:
    """An entry as decoding `version` gives it back: v0 has is_default and no source or
    synonyms; v1+ derive is_default from the source."""
    name, value, read_only, sensitive = (
        draw(TEXT),
        draw(NULLABLE_TEXT),
        draw(st.booleans()),
        draw(st.booleans()),
    )
    if version == 0:
        return DescribeConfigsResourceResult(
            name, value, read_only, -1, sensitive, (), draw(st.booleans())
        )
    source = draw(INT8)
    synonym = st.builds(DescribeConfigsSynonym, TEXT, NULLABLE_TEXT, INT8)
    return DescribeConfigsResourceResult(
        name, value, read_only, source, sensitive, draw(small_tuples(synonym)), source == 5
    )


def _responses(version: int) -> st.SearchStrategy[DescribeConfigsResponse]:
    result = st.builds(
        DescribeConfigsResult, INT8, TEXT, small_tuples(_entry(version)), INT16, NULLABLE_TEXT
    )
    return st.builds(DescribeConfigsResponse, small_tuples(result), INT32)


@pytest.mark.parametrize("version", VERSIONS)
@given(data=st.data())
def test_request_matches_kafka_python(version: int, data: st.DataObject) -> None:
    request = data.draw(_requests(version))
    assert_matches_kafka_python(request, version, KpRequest, old, "DescribeConfigsRequest")


@pytest.mark.parametrize("version", VERSIONS)
@given(data=st.data())
def test_response_matches_kafka_python(version: int, data: st.DataObject) -> None:
    response = data.draw(_responses(version))
    assert_matches_kafka_python(response, version, KpResponse, old, "DescribeConfigsResponse")


def test_v0_carries_is_default_and_v1_the_source() -> None:
    entry = DescribeConfigsResourceResult(
        "retention.ms", "5", True, ConfigSource.DEFAULT_CONFIG, False, (), True
    )
    response = DescribeConfigsResponse((DescribeConfigsResult(2, "t", (entry,)),))
    head = "00000000 00000001 0000 ffff 02 0001 74 00000001 000c" + b"retention.ms".hex()
    head += "0001 35 01"
    assert response.encode(0) == bytes.fromhex(head + "01 00")
    assert response.encode(1) == bytes.fromhex(head + "05 00 00000000")


# -- the entries --------------------------------------------------------------------------------


def _by_name(
    entries: list[DescribeConfigsResourceResult],
) -> dict[str, DescribeConfigsResourceResult]:
    return {e.name: e for e in entries}


BROKER_DEFAULTS = {"segment.bytes": 1048576, "min.insync.replicas": 2}


def _effective(topic_config: dict[str, str]) -> LogConfig:
    return LogConfig.from_topic_config({**BROKER_DEFAULTS, **topic_config}, strict=False)


def test_a_topic_shows_every_key_with_its_value_in_effect_and_its_source() -> None:
    config = {"retention.ms": "1000", "durability.policy": "fsync"}
    entries = _by_name(topic_entries(config, BROKER_DEFAULTS, _effective(config), False))
    assert set(entries) == TOPIC_CONFIG_KEYS

    def shown(name: str) -> tuple[str | None, int, bool]:
        e = entries[name]
        return e.value, e.config_source, e.is_default

    assert shown("retention.ms") == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG, False)
    assert shown("durability.policy") == ("fsync", ConfigSource.DYNAMIC_TOPIC_CONFIG, False)
    assert shown("segment.bytes") == ("1048576", ConfigSource.STATIC_BROKER_CONFIG, False)
    assert shown("min.insync.replicas") == ("2", ConfigSource.STATIC_BROKER_CONFIG, False)
    assert shown("max.message.bytes") == (str(1024 * 1024 + 12), ConfigSource.DEFAULT_CONFIG, True)
    assert shown("flush.ms") == (NEVER, ConfigSource.DEFAULT_CONFIG, True)
    assert shown("cleanup.policy") == ("delete", ConfigSource.DEFAULT_CONFIG, True)
    assert shown("unclean.leader.election.enable") == ("false", ConfigSource.DEFAULT_CONFIG, True)
    assert all(not e.is_sensitive and e.synonyms == () for e in entries.values())
    # What AlterConfigs changes is not read-only; the two keys fixed at creation are.
    assert {k for k, e in entries.items() if e.read_only} == {
        "durability.policy",
        "min.insync.replicas",
    }


def test_synonyms_list_each_layer_that_sets_a_key_the_one_in_effect_first() -> None:
    config = {"segment.bytes": "2097152"}
    entries = _by_name(topic_entries(config, BROKER_DEFAULTS, _effective(config), True))
    assert entries["segment.bytes"].value == "2097152"
    assert entries["segment.bytes"].synonyms == (
        DescribeConfigsSynonym("segment.bytes", "2097152", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        DescribeConfigsSynonym("log.segment.bytes", "1048576", ConfigSource.STATIC_BROKER_CONFIG),
        DescribeConfigsSynonym("log.segment.bytes", str(1024**3), ConfigSource.DEFAULT_CONFIG),
    )
    assert entries["retention.ms"].synonyms == (
        DescribeConfigsSynonym(
            "log.retention.ms", str(7 * 86_400_000), ConfigSource.DEFAULT_CONFIG
        ),
    )


def test_a_broker_shows_its_settings_and_log_defaults_by_kafkas_names() -> None:
    cfg = BrokerConfig(
        data_dir="unused", node_id=3, default_partitions=4, log_defaults=dict(BROKER_DEFAULTS)
    )
    entries = _by_name(broker_entries(cfg, _effective({}), True))
    assert entries["broker.id"].value == "3"
    assert entries["broker.id"].synonyms == (
        DescribeConfigsSynonym("broker.id", "3", ConfigSource.STATIC_BROKER_CONFIG),
    )
    assert entries["num.partitions"].synonyms == (
        DescribeConfigsSynonym("num.partitions", "4", ConfigSource.STATIC_BROKER_CONFIG),
        DescribeConfigsSynonym("num.partitions", "1", ConfigSource.DEFAULT_CONFIG),
    )
    assert [s.name for s in entries["log.segment.bytes"].synonyms] == ["log.segment.bytes"] * 2
    assert entries["num.partitions"].value == "4"
    assert entries["num.partitions"].config_source == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["default.replication.factor"].is_default
    assert entries["auto.create.topics.enable"].value == "false"
    assert entries["replica.lag.time.max.ms"].value == "30000"
    assert entries["log.segment.bytes"].value == "1048576"
    assert entries["log.segment.bytes"].config_source == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["min.insync.replicas"].value == "2"
    assert entries["message.max.bytes"].is_default
    assert entries["log.flush.interval.ms"].value == NEVER
    assert "segment.bytes" not in entries and "retention.ms" not in entries
    # No dynamic broker configs: every broker entry, its log defaults too, is read-only.
    assert all(e.read_only for e in entries.values())


def test_selected_keeps_the_listed_keys() -> None:
    entries = topic_entries({}, {}, LogConfig(), False)
    assert selected(entries, None) == tuple(entries)
    assert [e.name for e in selected(entries, ("retention.ms", "no.such.key", "flush.ms"))] == [
        "flush.ms",
        "retention.ms",
    ]


class _Metadata:
    def topic(self, name: str) -> TopicInfo:
        from raftlog.errors import UnknownTopicOrPartitionError

        if name != "t":
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return TopicInfo("t", "id", (), {"retention.ms": "1000"})


class _Logs:
    def config_for(self, topic_config: dict[str, str]) -> LogConfig:
        return _effective(topic_config)


class _Ctx:
    """What the handler uses of a HandlerContext: config, metadata.topic, logs.config_for."""

    config = BrokerConfig(data_dir="unused", node_id=1, log_defaults=dict(BROKER_DEFAULTS))
    metadata = _Metadata()
    logs = _Logs()


def _describe(*resources: DescribeConfigsResource, version: int = 2) -> list[Any]:
    request = DescribeConfigsRequest(resources, include_synonyms=True)
    answer = handle_describe_configs(_Ctx(), request, version, None)  # type: ignore[arg-type]
    return list(answer.results)


def test_each_resource_gets_its_entries_or_its_error() -> None:
    topic, unknown, broker, other_broker, defaults, group = _describe(
        DescribeConfigsResource(ResourceType.TOPIC, "t", ("retention.ms",)),
        DescribeConfigsResource(ResourceType.TOPIC, "nope"),
        DescribeConfigsResource(ResourceType.BROKER, "1", ("num.partitions",)),
        DescribeConfigsResource(ResourceType.BROKER, "2"),
        DescribeConfigsResource(ResourceType.BROKER, ""),
        DescribeConfigsResource(3, "g"),
    )
    assert topic.error_code == 0
    assert [(e.name, e.value) for e in topic.configs] == [("retention.ms", "1000")]
    assert len(topic.configs[0].synonyms) == 2
    assert (unknown.error_code, unknown.configs) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ())
    assert unknown.error_message == "unknown topic 'nope'"
    assert [(e.name, e.value) for e in broker.configs] == [("num.partitions", "1")]
    assert other_broker.error_code == ErrorCode.INVALID_REQUEST
    assert "this is broker 1" in other_broker.error_message
    assert (defaults.error_code, defaults.configs) == (0, ())
    assert group.error_code == ErrorCode.INVALID_REQUEST
    assert "resource type 3 is not supported" in group.error_message
    assert (group.resource_type, group.resource_name) == (3, "g")


def test_v0_gets_no_synonyms_even_when_asked() -> None:
    (topic,) = _describe(DescribeConfigsResource(ResourceType.TOPIC, "t"), version=0)
    assert all(e.synonyms == () for e in topic.configs)
