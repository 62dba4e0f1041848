"""AlterConfigs and IncrementalAlterConfigs: the messages match kafka-python's codecs (generated,
and hand-written for AlterConfigs) byte for byte and refuse broken bodies; the handlers, over a
real metadata state machine (MetadataState behind ClusterMetadata, its proposals applied at
once, the broker's alter_topic_config as Broker.alter_topic_config calls it), turn each topic
resource into one alter_topic_config call: SET, DELETE, APPEND and SUBTRACT (list edits of
cleanup.policy), the legacy whole-set replacement, the keys fixed at creation, validate_only,
and every refusal as Kafka's code with raftlog's message, per resource."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.admin.configs import AlterConfigsRequest as KpAlterRequest
from kafka.protocol.admin.configs import AlterConfigsResponse as KpAlterResponse
from kafka.protocol.admin.configs import IncrementalAlterConfigsRequest as KpIncrementalRequest
from kafka.protocol.admin.configs import IncrementalAlterConfigsResponse as KpIncrementalResponse
from kafka.protocol.old import admin as old
from kp_oracle import INT8, INT16, INT32, NULLABLE_TEXT, TEXT, assert_matches_kafka_python
from kp_oracle import small_tuples as tuples

from raftlog.errors import NotControllerError, RaftlogError, RaftlogTimeoutError, error_from_code
from raftlog.invariants import InvariantError
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.handlers.alter_configs import (
    NO_BROKER_CONFIGS,
    edited_list,
    handle_alter_configs,
    handle_incremental_alter_configs,
)
from raftlog.kafka.handlers.registry import HANDLERS
from raftlog.kafka.messages import decode_request
from raftlog.kafka.messages.alter_configs import (
    AlterableConfig,
    AlterConfigsRequest,
    AlterConfigsResource,
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
    ConfigOperation,
    IncrementalAlterableConfig,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResource,
    IncrementalAlterConfigsResponse,
)
from raftlog.kafka.wire import KafkaDecodeError
from raftlog.metadata.cluster import ClusterMetadata
from raftlog.metadata.quorum import QuorumStatus
from raftlog.metadata.state import MetadataState

SET, DELETE = ConfigOperation.SET, ConfigOperation.DELETE
APPEND, SUBTRACT = ConfigOperation.APPEND, ConfigOperation.SUBTRACT
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8

# -- the messages --------------------------------------------------------------------------------


def _alter_requests(version: int) -> st.SearchStrategy[AlterConfigsRequest]:
    config = st.builds(AlterableConfig, TEXT, NULLABLE_TEXT)
    resource = st.builds(AlterConfigsResource, INT8, TEXT, tuples(config))
    return st.builds(AlterConfigsRequest, tuples(resource), st.booleans())


def _incremental_requests(version: int) -> st.SearchStrategy[IncrementalAlterConfigsRequest]:
    config = st.builds(IncrementalAlterableConfig, TEXT, INT8, NULLABLE_TEXT)
    resource = st.builds(IncrementalAlterConfigsResource, INT8, TEXT, tuples(config))
    return st.builds(IncrementalAlterConfigsRequest, tuples(resource), st.booleans())


def _results() -> st.SearchStrategy[tuple[AlterConfigsResourceResponse, ...]]:
    return tuples(st.builds(AlterConfigsResourceResponse, INT8, TEXT, INT16, NULLABLE_TEXT))


def _alter_responses(version: int) -> st.SearchStrategy[AlterConfigsResponse]:
    return st.builds(AlterConfigsResponse, _results(), INT32)


def _incremental_responses(version: int) -> st.SearchStrategy[IncrementalAlterConfigsResponse]:
    return st.builds(IncrementalAlterConfigsResponse, _results(), INT32)


@pytest.mark.parametrize(
    ("version", "messages", "kp_class", "old_name"),
    [
        (0, _alter_requests, KpAlterRequest, "AlterConfigsRequest"),
        (1, _alter_requests, KpAlterRequest, "AlterConfigsRequest"),
        (0, _alter_responses, KpAlterResponse, "AlterConfigsResponse"),
        (1, _alter_responses, KpAlterResponse, "AlterConfigsResponse"),
        (0, _incremental_requests, KpIncrementalRequest, ""),
        (0, _incremental_responses, KpIncrementalResponse, ""),
    ],
    ids=[
        "alter-request-v0",
        "alter-request-v1",
        "alter-response-v0",
        "alter-response-v1",
        "incremental-request-v0",
        "incremental-response-v0",
    ],
)
@given(data=st.data())
def test_messages_match_kafka_python(
    version: int, messages: Any, kp_class: Any, old_name: str, data: st.DataObject
) -> None:
    message = data.draw(messages(version))
    assert_matches_kafka_python(message, version, kp_class, old, old_name)


# Topic "t": retention.ms=5 and "k" null; validate_only.
_ALTER = AlterConfigsRequest(
    (
        AlterConfigsResource(
            TOPIC, "t", (AlterableConfig("retention.ms", "5"), AlterableConfig("k", None))
        ),
    ),
    True,
)
_ALTER_BYTES = bytes.fromhex(
    "00000001"  # resources
    "02 0001 74"  # TOPIC, "t"
    "00000002"  # configs
    "000c 726574656e74696f6e2e6d73 0001 35"  # "retention.ms", "5"
    "0001 6b ffff"  # "k", null
    "01"  # validate_only
)
# Topic "t": SET retention.ms=5, DELETE k, APPEND cleanup.policy=delete; not validate_only.
_INCREMENTAL = IncrementalAlterConfigsRequest(
    (
        IncrementalAlterConfigsResource(
            TOPIC,
            "t",
            (
                IncrementalAlterableConfig("retention.ms", SET, "5"),
                IncrementalAlterableConfig("k", DELETE, None),
                IncrementalAlterableConfig("cleanup.policy", APPEND, "delete"),
            ),
        ),
    ),
)
_INCREMENTAL_BYTES = bytes.fromhex(
    "00000001 02 0001 74 00000003"
    "000c 726574656e74696f6e2e6d73 00 0001 35"  # SET
    "0001 6b 01 ffff"  # DELETE, null
    "000e 636c65616e75702e706f6c696379 02 0006 64656c657465"  # APPEND "delete"
    "00"
)
_RESPONSE_RESULTS = (
    AlterConfigsResourceResponse(TOPIC, "t"),
    AlterConfigsResourceResponse(BROKER, "1", ErrorCode.INVALID_REQUEST, "no"),
)
_RESPONSE_BYTES = bytes.fromhex(
    "00000007 00000002"  # throttle_time_ms, responses
    "0000 ffff 02 0001 74"  # 0, null, TOPIC, "t"
    "002a 0002 6e6f 04 0001 31"  # INVALID_REQUEST (42), "no", BROKER, "1"
)


@pytest.mark.parametrize("version", [0, 1])
def test_alter_configs_bytes(version: int) -> None:
    assert _ALTER.encode(version) == _ALTER_BYTES
    hand_written = getattr(old, f"AlterConfigsRequest_v{version}")
    kp = hand_written(
        resources=[(2, "t", [("retention.ms", "5"), ("k", None)])], validate_only=True
    )
    assert bytes(kp.encode()) == _ALTER_BYTES
    assert AlterConfigsRequest.decode(_ALTER_BYTES, version) == _ALTER
    head = b"head"
    decoded = decode_request(ApiKey.ALTER_CONFIGS, version, memoryview(head + _ALTER_BYTES), 4)
    assert decoded == _ALTER
    response = AlterConfigsResponse(_RESPONSE_RESULTS, 7)
    assert response.encode(version) == _RESPONSE_BYTES
    assert AlterConfigsResponse.decode(_RESPONSE_BYTES, version) == response


def test_incremental_alter_configs_bytes() -> None:
    assert _INCREMENTAL.encode(0) == _INCREMENTAL_BYTES
    kp = KpIncrementalRequest(
        resources=[
            (2, "t", [("retention.ms", 0, "5"), ("k", 1, None), ("cleanup.policy", 2, "delete")])
        ],
        validate_only=False,
    )
    assert bytes(kp.encode(version=0)) == _INCREMENTAL_BYTES
    assert IncrementalAlterConfigsRequest.decode(_INCREMENTAL_BYTES, 0) == _INCREMENTAL
    body = memoryview(b"head" + _INCREMENTAL_BYTES)
    assert decode_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, body, 4) == _INCREMENTAL
    response = IncrementalAlterConfigsResponse(_RESPONSE_RESULTS, 7)
    assert response.encode(0) == _RESPONSE_BYTES
    assert IncrementalAlterConfigsResponse.decode(_RESPONSE_BYTES, 0) == response
    # An operation Kafka does not define still decodes: the handler refuses it.
    odd = bytes.fromhex("00000001 02 0001 74 00000001 0001 6b 7f ffff 00")
    assert IncrementalAlterConfigsRequest.decode(odd, 0).resources[0].configs[0] == (
        IncrementalAlterableConfig("k", 127, None)
    )


_BODIES: list[tuple[Any, int, bytes]] = [
    (AlterConfigsRequest, 0, _ALTER_BYTES),
    (AlterConfigsRequest, 1, _ALTER_BYTES),
    (IncrementalAlterConfigsRequest, 0, _INCREMENTAL_BYTES),
    (AlterConfigsResponse, 0, _RESPONSE_BYTES),
    (AlterConfigsResponse, 1, _RESPONSE_BYTES),
    (IncrementalAlterConfigsResponse, 0, _RESPONSE_BYTES),
]


@pytest.mark.parametrize(("cls", "version", "data"), _BODIES)
def test_truncated_bodies_raise_the_decode_error(cls: Any, version: int, data: bytes) -> None:
    for cut in range(len(data)):
        with pytest.raises(KafkaDecodeError):
            cls.decode(data[:cut], version)


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(ApiKey.ALTER_CONFIGS, 0), (ApiKey.ALTER_CONFIGS, 1), (ApiKey.INCREMENTAL_ALTER_CONFIGS, 0)],
)
def test_garbage_bodies_raise_the_decode_error(api_key: ApiKey, version: int) -> None:
    def decode(body_hex: str) -> object:
        return decode_request(api_key, version, memoryview(bytes.fromhex(body_hex)), 0)

    body = _ALTER_BYTES if api_key == ApiKey.ALTER_CONFIGS else _INCREMENTAL_BYTES
    with pytest.raises(KafkaDecodeError, match="the body"):
        decode(body.hex() + "00")
    # A null configs array (only values may be null), a null resource name.
    with pytest.raises(KafkaDecodeError, match=r"resources\[0\]\.configs"):
        decode("00000001 02 0001 74 ffffffff 00")
    with pytest.raises(KafkaDecodeError, match="resource_name"):
        decode("00000001 02 ffff 00000000 00")
    # A negative count other than -1, a null resources array, a count far beyond the bytes.
    with pytest.raises(KafkaDecodeError, match="resources"):
        decode("fffffffe 00")
    with pytest.raises(KafkaDecodeError, match="resources"):
        decode("ffffffff 00")
    with pytest.raises(KafkaDecodeError):
        decode("7fffffff 02 0001 74")
    # A string cut short.
    with pytest.raises(KafkaDecodeError, match="name"):
        decode("00000001 02 0001 74 00000001 0010 6b")
    with pytest.raises(KafkaDecodeError, match="responses"):
        AlterConfigsResponse.decode(bytes.fromhex("00000000 ffffffff"), 0)


def test_versions_outside_the_spoken_ones() -> None:
    """AlterConfigs v2 and IncrementalAlterConfigs v1 are flexible: not spoken."""
    with pytest.raises(KafkaDecodeError, match="not one we speak"):
        AlterConfigsRequest.decode(_ALTER_BYTES, 2)
    with pytest.raises(KafkaDecodeError, match="not one we speak"):
        IncrementalAlterConfigsRequest.decode(_INCREMENTAL_BYTES, 1)
    with pytest.raises(KafkaDecodeError, match="version not spoken"):
        decode_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, memoryview(_INCREMENTAL_BYTES), 0)
    with pytest.raises(InvariantError):
        _ALTER.encode(2)
    with pytest.raises(InvariantError):
        IncrementalAlterConfigsResponse(()).encode(1)


def test_both_apis_are_registered() -> None:
    assert HANDLERS[ApiKey.ALTER_CONFIGS] is handle_alter_configs
    assert HANDLERS[ApiKey.INCREMENTAL_ALTER_CONFIGS] is handle_incremental_alter_configs


# -- the list edits ---------------------------------------------------------------------------


def test_list_edits_are_kafkas() -> None:
    assert edited_list(APPEND, "cleanup.policy", "compact", "delete") == "delete,compact"
    assert edited_list(APPEND, "cleanup.policy", "delete,a,a", "delete") == "delete,a"
    assert edited_list(APPEND, "cleanup.policy", "delete", "") == "delete"
    assert edited_list(SUBTRACT, "cleanup.policy", "delete", "delete") == ""
    assert edited_list(SUBTRACT, "cleanup.policy", "b,x", "a,b,c") == "a,c"
    with pytest.raises(
        RaftlogError, match=r"cannot APPEND to retention\.ms: its type is not a list"
    ):
        edited_list(APPEND, "retention.ms", "5", "1")
    with pytest.raises(
        RaftlogError, match=r"cannot SUBTRACT from unknown topic config 'cleanup\.x'"
    ):
        edited_list(SUBTRACT, "cleanup.x", "5", "")


# -- the handlers, over a real metadata state machine ----------------------------------------------


class StateQuorum:
    """The parts of MetadataQuorum that ClusterMetadata and the handlers use, over one
    MetadataState whose commands apply at once; `failure` refuses every proposal."""

    def __init__(self, state: MetadataState):
        self.state = state
        self.lock = threading.Lock()
        self.failure: RaftlogError | None = None
        self.proposed: list[str] = []

    def read(self, fn: Callable[[MetadataState], Any]) -> Any:
        with self.lock:
            return fn(self.state)

    def status(self) -> QuorumStatus:
        return QuorumStatus(True, "127.0.0.1:19001", 3, 40, 40, True, {})

    async def propose(self, name: str, /, timeout_s: float = 5.0, **args: Any) -> Any:
        self.proposed.append(name)
        if self.failure is not None:
            raise self.failure
        with self.lock:
            result = self.state.apply((name, args))
        if result[0] == "ok":
            return result[1]
        raise error_from_code(result[1], result[2])


TOPIC_CONFIG = {"min.insync.replicas": "2", "retention.ms": "60000", "segment.ms": "3600000"}


class Cluster:
    """Three registered brokers and topics "t" and "u" (1 partition each, RF 3, configs
    TOPIC_CONFIG); `ctx` is what the handlers use of a broker: its metadata, its `[log]`
    defaults, and alter_topic_config as Broker.alter_topic_config does it (validate_only
    against this node's copy, else the metadata command). Every call is recorded."""

    def __init__(self, log_defaults: dict[str, Any] | None = None) -> None:
        self.state = MetadataState()
        self.quorum = StateQuorum(self.state)
        for node in (1, 2, 3):
            self.apply(
                "register_broker",
                node_id=node,
                host="127.0.0.1",
                port=9000 + node,
                rack=None,
                incarnation=f"inc-{node}",
                now_ms=0,
            )
        for name in ("t", "u"):
            self.apply(
                "create_topic",
                name=name,
                topic_id=f"id-{name}",
                partitions=1,
                replication_factor=3,
                config=dict(TOPIC_CONFIG),
            )
        self.metadata = ClusterMetadata(self.quorum, {1: "127.0.0.1:19001"})  # type: ignore[arg-type]
        self.calls: list[tuple[str, dict[str, str | None], bool]] = []
        self.ctx = SimpleNamespace(
            metadata=self.metadata,
            config=SimpleNamespace(log_defaults=log_defaults or {}),
            alter_topic_config=self.alter_topic_config,
        )

    def apply(self, name: str, /, **args: Any) -> Any:
        result = self.state.apply((name, args))
        assert result[0] == "ok", result
        return result[1]

    async def alter_topic_config(
        self, name: str, changes: dict[str, str | None], validate_only: bool = False
    ) -> dict[str, str]:
        self.calls.append((name, dict(changes), validate_only))
        if validate_only:
            return self.metadata.check_topic_config(name, changes)
        return await self.metadata.alter_topic_config(name, changes)

    def config(self, name: str = "t") -> dict[str, str]:
        return dict(self.state.topics[name]["config"])

    def incremental(
        self,
        resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
        validate_only: bool = False,
    ) -> list[tuple[int, str, int, str | None]]:
        """The request through the codec, as the broker gets it and answers it."""
        request = IncrementalAlterConfigsRequest(
            tuple(
                IncrementalAlterConfigsResource(
                    kind, name, tuple(IncrementalAlterableConfig(*c) for c in configs)
                )
                for kind, name, configs in resources
            ),
            validate_only,
        )
        request = IncrementalAlterConfigsRequest.decode(request.encode(0), 0)
        answer = asyncio.run(handle_incremental_alter_configs(self.ctx, request, 0, None))  # type: ignore[arg-type]
        answer = IncrementalAlterConfigsResponse.decode(answer.encode(0), 0)
        return [tuple(r) for r in answer.responses]  # type: ignore[misc]

    def whole_set(
        self,
        resources: list[tuple[int, str, dict[str, str | None]]],
        validate_only: bool = False,
        version: int = 1,
    ) -> list[tuple[int, str, int, str | None]]:
        request = AlterConfigsRequest(
            tuple(
                AlterConfigsResource(
                    kind, name, tuple(AlterableConfig(k, v) for k, v in configs.items())
                )
                for kind, name, configs in resources
            ),
            validate_only,
        )
        request = AlterConfigsRequest.decode(request.encode(version), version)
        answer = asyncio.run(handle_alter_configs(self.ctx, request, version, None))  # type: ignore[arg-type]
        answer = AlterConfigsResponse.decode(answer.encode(version), version)
        return [tuple(r) for r in answer.responses]  # type: ignore[misc]


OK_T = (TOPIC, "t", 0, None)


def test_set_and_delete_are_one_alter_topic_config_call_without_a_barrier() -> None:
    c = Cluster()
    answer = c.incremental(
        [(TOPIC, "t", [("retention.ms", SET, "5000"), ("segment.ms", DELETE, None)])]
    )
    assert answer == [OK_T]
    assert c.calls == [("t", {"retention.ms": "5000", "segment.ms": None}, False)]
    assert c.quorum.proposed == ["alter_topic_config"]  # nothing read: no barrier
    assert c.config() == {"min.insync.replicas": "2", "retention.ms": "5000"}
    # DELETE of a key the topic does not set: nothing changes, and that is no error.
    assert c.incremental([(TOPIC, "t", [("flush.ms", DELETE, "ignored")])]) == [OK_T]
    assert c.config() == {"min.insync.replicas": "2", "retention.ms": "5000"}
    assert c.config("u") == TOPIC_CONFIG


def test_each_resource_is_altered_alone_and_answered_with_its_own_code() -> None:
    c = Cluster()
    answer = c.incremental(
        [
            (TOPIC, "t", [("max.message.bytes", SET, "10000")]),
            (TOPIC, "nope", [("retention.ms", SET, "5")]),
            (TOPIC, "u", [("retention.ms", SET, "5")]),
            (TOPIC, "u", [("segment.ms", SET, "5")]),
        ]
    )
    assert answer[0] == OK_T
    assert answer[1] == (
        TOPIC,
        "nope",
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "unknown topic 'nope'",
    )
    # "u" twice: both refused before anything is read or changed, as Kafka's broker does.
    refused = (ErrorCode.INVALID_REQUEST, f"resource {TOPIC} 'u' appears more than once")
    assert answer[2:] == [(TOPIC, "u", *refused)] * 2
    assert [name for name, _, _ in c.calls] == ["t", "nope"]
    assert c.config()["max.message.bytes"] == "10000"
    assert c.config("u") == TOPIC_CONFIG
    # Refused by alter_topic_config, with its message: an unknown key (with the nearest known
    # one), a bad value, a fixed key.
    assert c.incremental([(TOPIC, "u", [("retention.msx", SET, "5")])]) == [
        (TOPIC, "u", ErrorCode.INVALID_CONFIG, _refusal(c, "u", {"retention.msx": "5"}))
    ]
    assert "did you mean 'retention.ms'" in _refusal(c, "u", {"retention.msx": "5"})
    (bad,) = c.incremental(
        [(TOPIC, "u", [("segment.bytes", SET, "5"), ("retention.ms", SET, "1")])]
    )
    assert bad[2] == ErrorCode.INVALID_CONFIG and "segment.bytes=5" in str(bad[3])
    (fixed,) = c.incremental([(TOPIC, "u", [("min.insync.replicas", SET, "3")])])
    assert fixed[2] == ErrorCode.INVALID_CONFIG
    assert "min.insync.replicas cannot be changed on a live topic" in str(fixed[3])
    (fixed,) = c.incremental([(TOPIC, "u", [("durability.policy", DELETE, None)])])
    assert fixed == (TOPIC, "u", 0, None)  # the topic does not set it: unchanged
    (fixed,) = c.incremental([(TOPIC, "u", [("min.insync.replicas", DELETE, None)])])
    assert fixed[2] == ErrorCode.INVALID_CONFIG
    assert c.config("u") == TOPIC_CONFIG  # refused whole, nothing changed


def _refusal(c: Cluster, name: str, changes: dict[str, str | None]) -> str:
    """The message alter_topic_config refuses `changes` with."""
    with pytest.raises(RaftlogError) as refused:
        c.state.new_topic_config(name, changes)
    return str(refused.value)


def test_a_fixed_key_named_with_its_value_changes_nothing_and_is_accepted() -> None:
    c = Cluster()
    answer = c.incremental(
        [(TOPIC, "t", [("min.insync.replicas", SET, "2"), ("retention.ms", SET, "7")])]
    )
    assert answer == [OK_T]
    assert c.calls == [("t", {"retention.ms": "7"}, False)]
    assert c.quorum.proposed == ["noop", "alter_topic_config"]  # read after a barrier
    assert c.config()["min.insync.replicas"] == "2"


def test_append_and_subtract_edit_cleanup_policy_then_check_it_as_a_set() -> None:
    c = Cluster()
    # APPEND delete to the default "delete": unchanged list, set on the topic.
    assert c.incremental([(TOPIC, "t", [("cleanup.policy", APPEND, "delete")])]) == [OK_T]
    assert c.calls[-1] == ("t", {"cleanup.policy": "delete"}, False)
    assert c.quorum.proposed == ["noop", "alter_topic_config"]
    assert c.config()["cleanup.policy"] == "delete"
    # APPEND compact: "delete,compact", a policy of Kafka's.
    assert c.incremental([(TOPIC, "t", [("cleanup.policy", APPEND, "compact")])]) == [OK_T]
    assert c.config()["cleanup.policy"] == "delete,compact"
    # SUBTRACT compact, then delete: an empty list, refused.
    assert c.incremental([(TOPIC, "t", [("cleanup.policy", SUBTRACT, "compact")])]) == [OK_T]
    (refused,) = c.incremental([(TOPIC, "t", [("cleanup.policy", SUBTRACT, "delete")])])
    assert refused[2] == ErrorCode.INVALID_CONFIG and "cleanup.policy=''" in str(refused[3])
    assert c.config()["cleanup.policy"] == "delete"
    # Not a list, and an unknown key.
    (refused,) = c.incremental([(TOPIC, "t", [("retention.ms", APPEND, "5")])])
    assert refused[2:] == (
        ErrorCode.INVALID_CONFIG,
        "cannot APPEND to retention.ms: its type is not a list (the list-type topic configs: "
        "cleanup.policy); SET it instead",
    )
    (refused,) = c.incremental([(TOPIC, "t", [("cleanup.polcy", SUBTRACT, "delete")])])
    assert refused[2] == ErrorCode.INVALID_CONFIG
    assert "unknown topic config 'cleanup.polcy' (did you mean 'cleanup.policy'?)" in str(
        refused[3]
    )


def test_a_list_edit_starts_from_the_brokers_default_when_the_topic_sets_none() -> None:
    c = Cluster(log_defaults={"cleanup.policy": "compact"})
    assert c.incremental([(TOPIC, "t", [("cleanup.policy", APPEND, "delete")])]) == [OK_T]
    assert c.config()["cleanup.policy"] == "compact,delete"
    c = Cluster(log_defaults={"cleanup.policy": "compact"})
    (refused,) = c.incremental([(TOPIC, "t", [("cleanup.policy", SUBTRACT, "compact")])])
    assert "cleanup.policy=''" in str(refused[3])


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)],
            "config keys named more than once: retention.ms",
        ),
        (
            [("retention.ms", SET, None), ("cleanup.policy", APPEND, None)],
            "a null value for retention.ms, cleanup.policy: only a DELETE may have none",
        ),
        (
            [("retention.ms", 4, "1")],
            "unknown config operation 4 for retention.ms (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT)",
        ),
        ([("retention.ms", -1, "1")], "unknown config operation -1 for retention.ms"),
    ],
)
def test_malformed_changes_are_invalid_request(
    configs: list[tuple[str, int, str | None]], message: str
) -> None:
    c = Cluster()
    (refused,) = c.incremental([(TOPIC, "t", configs)])
    assert refused[2] == ErrorCode.INVALID_REQUEST and message in str(refused[3])
    assert c.calls == [] and c.quorum.proposed == []


@pytest.mark.parametrize("kind", [BROKER, BROKER_LOGGER, 0, 16, 32, -1])
def test_only_topic_resources_are_altered(kind: int) -> None:
    c = Cluster()
    answer = c.incremental([(kind, "1", [("log.retention.ms", SET, "5")]), (TOPIC, "", [])])
    message = NO_BROKER_CONFIGS if kind in (BROKER, BROKER_LOGGER) else "unknown resource type"
    assert answer[0][:3] == (kind, "1", ErrorCode.INVALID_REQUEST)
    assert message in str(answer[0][3]) and "no dynamic broker configs" in str(answer[0][3])
    assert answer[1] == (
        TOPIC,
        "",
        ErrorCode.INVALID_REQUEST,
        "a topic resource needs a topic's name (no default topic)",
    )
    assert c.calls == []
    (legacy,) = c.whole_set([(kind, "1", {"log.retention.ms": "5"})])
    assert legacy[2] == ErrorCode.INVALID_REQUEST and message in str(legacy[3])


def test_validate_only_checks_and_changes_nothing() -> None:
    c = Cluster()
    assert c.incremental([(TOPIC, "t", [("retention.ms", SET, "1")])], validate_only=True) == [OK_T]
    assert c.calls == [("t", {"retention.ms": "1"}, True)]
    (refused,) = c.incremental([(TOPIC, "t", [("segment.bytes", SET, "5")])], validate_only=True)
    assert refused[2] == ErrorCode.INVALID_CONFIG
    (refused,) = c.incremental([(TOPIC, "nope", [("retention.ms", DELETE, None)])], True)
    assert refused[2] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.whole_set([(TOPIC, "t", {"min.insync.replicas": "2"})], validate_only=True) == [OK_T]
    assert c.quorum.proposed.count("alter_topic_config") == 0
    assert c.config() == TOPIC_CONFIG


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (RaftlogTimeoutError("metadata command alter_topic_config not committed"), 7),
        (NotControllerError("this node's Raft thread failed"), 41),
    ],
)
def test_a_quorum_that_cannot_take_the_change_is_each_resources_retriable_error(
    failure: RaftlogError, code: int
) -> None:
    c = Cluster()
    c.quorum.failure = failure
    answer = c.incremental(
        [
            (TOPIC, "t", [("retention.ms", SET, "1")]),
            (TOPIC, "u", [("cleanup.policy", APPEND, "delete")]),  # fails at the barrier
        ]
    )
    assert answer == [(TOPIC, "t", code, str(failure)), (TOPIC, "u", code, str(failure))]
    assert c.whole_set([(TOPIC, "t", {})]) == [(TOPIC, "t", code, str(failure))]
    assert c.config() == TOPIC_CONFIG


@pytest.mark.parametrize("version", [0, 1])
def test_alter_configs_replaces_the_whole_set(version: int) -> None:
    c = Cluster()
    answer = c.whole_set(
        [(TOPIC, "t", {"max.message.bytes": "10000", "min.insync.replicas": "2"})],
        version=version,
    )
    assert answer == [OK_T]
    # retention.ms and segment.ms went back to their defaults; min.insync.replicas (fixed,
    # named with its value) is left out of the change, in one command after a barrier.
    assert c.calls == [
        ("t", {"retention.ms": None, "segment.ms": None, "max.message.bytes": "10000"}, False)
    ]
    assert c.quorum.proposed == ["noop", "alter_topic_config"]
    assert c.config() == {"min.insync.replicas": "2", "max.message.bytes": "10000"}
    assert c.config("u") == TOPIC_CONFIG


def test_alter_configs_refuses_to_put_a_fixed_key_back_and_every_bad_set() -> None:
    c = Cluster()
    (refused,) = c.whole_set([(TOPIC, "t", {"retention.ms": "1"})])
    assert refused == (
        TOPIC,
        "t",
        ErrorCode.INVALID_CONFIG,
        "topic 't' sets min.insync.replicas=2, which stays as the topic was created: "
        "AlterConfigs replaces the whole set, so name it with that value (or use "
        "IncrementalAlterConfigs, which changes only the keys it names)",
    )
    (refused,) = c.whole_set([(TOPIC, "t", {"min.insync.replicas": "3"})])
    assert refused[2] == ErrorCode.INVALID_CONFIG
    assert "min.insync.replicas cannot be changed on a live topic" in str(refused[3])
    (refused,) = c.whole_set([(TOPIC, "t", {"min.insync.replicas": "2", "retention.ms": None})])
    assert refused[2:] == (
        ErrorCode.INVALID_REQUEST,
        "a null value for retention.ms: only a DELETE may have none",
    )
    (refused,) = c.whole_set([(TOPIC, "t", {"min.insync.replicas": "2", "segment.ms": "0"})])
    assert refused[2] == ErrorCode.INVALID_CONFIG and "segment.ms=0" in str(refused[3])
    (refused,) = c.whole_set([(TOPIC, "nope", {})])
    assert refused[2] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.calls[-1:] == [("t", {"retention.ms": None, "segment.ms": "0"}, False)]
    assert c.config() == TOPIC_CONFIG
    # A topic that sets no fixed key: an empty set puts every key back to its default.
    c.apply(
        "create_topic",
        name="v",
        topic_id="id-v",
        partitions=1,
        replication_factor=3,
        config={"flush.ms": "5"},
    )
    assert c.whole_set([(TOPIC, "v", {})]) == [(TOPIC, "v", 0, None)]
    assert c.config("v") == {}
