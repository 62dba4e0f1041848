"""The data source's options: named, typed and checked as Spark's Kafka source does.

`SourceOptions.parse(options, streaming)` checks everything that needs no cluster (names,
types, JSON, which options go together) and raises `RaftlogSparkOptionError` naming the option
and the value; `offsets.py` then checks what needs the cluster (topics exist, a group has
committed offsets). Both run when `load()` is called (the DataSource's `schema()`), so a bad
option fails before any job runs.

Option names are case-insensitive, as everywhere in Spark. An unknown option is refused with
the closest known name: a typo (`startingOffset`) must not silently read from the default.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raftlog.errors import InvalidConfigError
from raftlog.topics import TopicPartition

EARLIEST = -2
LATEST = -1

# Per-request timeout of the data source's clients (Kafka's request.timeout.ms default).
REQUEST_TIMEOUT_MS_DEFAULT = 30_000


class RaftlogSparkOptionError(InvalidConfigError):
    """An option of the raftlog data source is missing, unknown, malformed or contradictory.

    Raised on Spark's driver, never sent on the wire (client-side code, see DataLossError)."""

    code = 101


# Offset specs: what a starting or ending position is before it is resolved on the cluster.
@dataclass(frozen=True, slots=True)
class Earliest:
    pass


@dataclass(frozen=True, slots=True)
class Latest:
    pass


@dataclass(frozen=True, slots=True)
class PerPartition:
    """JSON offsets: {tp: offset, -2 earliest, -1 latest}; must name every partition read."""

    offsets: dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class Group:
    """The committed offsets of a consumer group (the replay primitive)."""

    group_id: str


@dataclass(frozen=True, slots=True)
class ByTimestamp:
    """The first offset whose timestamp is at or after the given one (ms), per partition, or
    one timestamp for every partition (`all_ms`)."""

    per_partition: dict[TopicPartition, int]
    all_ms: int | None = None


OffsetSpec = Earliest | Latest | PerPartition | Group | ByTimestamp

COMMON = {
    "raftlog.bootstrap.servers",
    "raftlog.request.timeout.ms",
    "raftlog.max.partition.fetch.bytes",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "startingtimestamp",
    "startingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "failondataloss",
    "minpartitions",
    "includeheaders",
}
BATCH_ONLY = {"endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"}
STREAM_ONLY = {"maxoffsetspertrigger", "committogroup"}
# Spark's own names, for messages.
CANONICAL = {
    name.lower(): name
    for name in (
        "raftlog.bootstrap.servers",
        "raftlog.request.timeout.ms",
        "raftlog.max.partition.fetch.bytes",
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "failOnDataLoss",
        "minPartitions",
        "includeHeaders",
        "endingOffsets",
        "endingTimestamp",
        "endingOffsetsByTimestamp",
        "maxOffsetsPerTrigger",
        "commitToGroup",
    )
}


@dataclass(frozen=True, slots=True)
class Subscription:
    """Exactly one of: topics (subscribe), a pattern (subscribePattern), partitions (assign)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def describe(self) -> str:
        if self.pattern is not None:
            return f"subscribePattern {self.pattern!r}"
        if self.partitions:
            return "assign " + ", ".join(map(str, self.partitions))
        return "subscribe " + ", ".join(self.topics)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec  # batch only; Latest for streaming (unused)
    # "error": fail when no record is that recent; "latest": start at the end instead.
    starting_by_timestamp_strategy: str
    fail_on_data_loss: bool
    min_partitions: int | None
    include_headers: bool
    max_offsets_per_trigger: int | None
    commit_to_group: str | None
    request_timeout_ms: int
    partition_fetch_bytes: int
    streaming: bool

    @staticmethod
    def parse(options: Mapping[str, str], streaming: bool) -> SourceOptions:
        opts = {k.lower(): v for k, v in options.items()}
        allowed = COMMON | (STREAM_ONLY if streaming else BATCH_ONLY)
        for key in opts:
            if key in allowed:
                continue
            name = CANONICAL.get(key, key)
            if key in BATCH_ONLY:
                raise RaftlogSparkOptionError(
                    f"option {name!r} applies to batch queries (spark.read) only"
                )
            if key in STREAM_ONLY:
                raise RaftlogSparkOptionError(
                    f"option {name!r} applies to streaming queries (spark.readStream) only"
                )
            close = difflib.get_close_matches(key, sorted(allowed), 1, 0.7)
            hint = f"; did you mean {CANONICAL[close[0]]!r}?" if close else ""
            raise RaftlogSparkOptionError(f"unknown option {name!r} for the raftlog source{hint}")

        bootstrap = opts.get("raftlog.bootstrap.servers", "").strip()
        if not bootstrap:
            raise RaftlogSparkOptionError(
                "option 'raftlog.bootstrap.servers' is required (host:port[,host:port...])"
            )
        subscription = _subscription(opts)
        starting = _starting(opts, streaming)
        ending: OffsetSpec = Latest()
        if not streaming:
            ending = _ending(opts)
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise RaftlogSparkOptionError(
                f"startingOffsetsByTimestampStrategy={strategy!r}: must be 'error' or 'latest'"
            )
        max_per_trigger = _positive_int(opts, "maxoffsetspertrigger")
        group = opts.get("committogroup")
        if group is not None and not group.strip():
            raise RaftlogSparkOptionError("commitToGroup must name a consumer group")
        return SourceOptions(
            bootstrap_servers=bootstrap,
            subscription=subscription,
            starting=starting,
            ending=ending,
            starting_by_timestamp_strategy=strategy,
            fail_on_data_loss=_bool(opts, "failondataloss", True),
            min_partitions=_positive_int(opts, "minpartitions"),
            include_headers=_bool(opts, "includeheaders", False),
            max_offsets_per_trigger=max_per_trigger,
            commit_to_group=group.strip() if group is not None else None,
            request_timeout_ms=_positive_int(opts, "raftlog.request.timeout.ms")
            or REQUEST_TIMEOUT_MS_DEFAULT,
            partition_fetch_bytes=_positive_int(opts, "raftlog.max.partition.fetch.bytes")
            or 4 * 1024 * 1024,
            streaming=streaming,
        )


def _bool(opts: dict[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise RaftlogSparkOptionError(f"{CANONICAL[key]}={raw!r}: must be true or false")
    return value == "true"


def _positive_int(opts: dict[str, str], key: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise RaftlogSparkOptionError(
            f"{CANONICAL[key]}={raw!r}: must be a positive integer"
        ) from None
    if value < 1:
        raise RaftlogSparkOptionError(f"{CANONICAL[key]}={raw!r}: must be a positive integer")
    return value


def _subscription(opts: dict[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        names = ", ".join(CANONICAL[k] for k in given) if given else "none"
        raise RaftlogSparkOptionError(
            f"exactly one of 'subscribe', 'subscribePattern' or 'assign' must be given "
            f"(given: {names})"
        )
    key = given[0]
    raw = opts[key]
    if key == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise RaftlogSparkOptionError(f"subscribe={raw!r}: names no topic")
        return Subscription(topics=tuple(dict.fromkeys(topics)))
    if key == "subscribepattern":
        if not raw.strip():
            raise RaftlogSparkOptionError("subscribePattern is empty")
        try:
            re.compile(raw)
        except re.error as e:
            raise RaftlogSparkOptionError(
                f"subscribePattern={raw!r}: not a regular expression ({e})"
            ) from None
        return Subscription(pattern=raw)
    parsed = _json(raw, "assign", '{"topicA":[0,1],"topicB":[2]}')
    tps: list[TopicPartition] = []
    if not isinstance(parsed, dict) or not parsed:
        raise RaftlogSparkOptionError(
            f'assign={raw!r}: must be a JSON object of topic -> [partitions], e.g. {{"t":[0,1]}}'
        )
    for topic, parts in parsed.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise RaftlogSparkOptionError(
                f"assign={raw!r}: partitions of {topic!r} must be a list of integers >= 0"
            )
        tps.extend(TopicPartition(topic, p) for p in parts)
    if not tps:
        raise RaftlogSparkOptionError(f"assign={raw!r}: names no partition")
    return Subscription(partitions=tuple(sorted(set(tps))))


def _json(raw: str, name: str, example: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as e:
        raise RaftlogSparkOptionError(
            f"{name}={raw!r} is not valid JSON ({e}); expected e.g. {example}"
        ) from None


def _per_partition(
    raw: str, name: str, allowed_negative: tuple[int, ...]
) -> dict[TopicPartition, int]:
    """`{"topic": {"0": 23, "1": -2}}` -> {tp: int}; negative values only those allowed."""
    parsed = _json(raw, name, '{"topicA":{"0":23,"1":-2}}')
    if not isinstance(parsed, dict) or not parsed:
        raise RaftlogSparkOptionError(
            f'{name}={raw!r}: must be a JSON object like {{"topicA":{{"0":23,"1":-2}}}}'
        )
    out: dict[TopicPartition, int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict) or not parts:
            raise RaftlogSparkOptionError(
                f"{name}={raw!r}: the value of {topic!r} must be an object of partition -> offset"
            )
        for p, value in parts.items():
            if not (isinstance(p, str) and p.isdigit()):
                raise RaftlogSparkOptionError(
                    f"{name}={raw!r}: partition {p!r} of {topic!r} is not a number"
                )
            if not isinstance(value, int) or isinstance(value, bool):
                raise RaftlogSparkOptionError(
                    f"{name}={raw!r}: {topic}-{p} has {value!r}, not an integer"
                )
            if value < 0 and value not in allowed_negative:
                allowed = " or ".join(map(str, allowed_negative)) or "no negative value"
                raise RaftlogSparkOptionError(
                    f"{name}={raw!r}: {topic}-{p} is {value}; allowed here: >= 0, {allowed}"
                )
            out[TopicPartition(topic, int(p))] = value
    return out


def _timestamp(raw: str, name: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise RaftlogSparkOptionError(
            f"{name}={raw!r}: must be a timestamp in milliseconds since the epoch"
        ) from None
    if value < 0:
        raise RaftlogSparkOptionError(f"{name}={raw!r}: must be >= 0")
    return value


def _group(value: str, name: str) -> Group:
    group = value[len("group:") :].strip()
    if not group:
        raise RaftlogSparkOptionError(f"{name}={value!r}: group:<group_id> needs a group id")
    return Group(group)


def _starting(opts: dict[str, str], streaming: bool) -> OffsetSpec:
    # Kafka's precedence: startingTimestamp, then startingOffsetsByTimestamp, then
    # startingOffsets.
    if "startingtimestamp" in opts:
        return ByTimestamp({}, _timestamp(opts["startingtimestamp"], "startingTimestamp"))
    if "startingoffsetsbytimestamp" in opts:
        return ByTimestamp(
            _per_partition(opts["startingoffsetsbytimestamp"], "startingOffsetsByTimestamp", ())
        )
    raw = opts.get("startingoffsets")
    if raw is None:
        return Latest() if streaming else Earliest()
    value = raw.strip()
    if value.lower() == "earliest":
        return Earliest()
    if value.lower() == "latest":
        if not streaming:
            raise RaftlogSparkOptionError(
                "startingOffsets='latest' is not allowed in a batch query (it would read "
                "nothing); use 'earliest', JSON offsets or group:<group_id>"
            )
        return Latest()
    if value.lower().startswith("group:"):
        return _group(value, "startingOffsets")
    if not value.startswith("{"):
        raise RaftlogSparkOptionError(
            f"startingOffsets={raw!r}: must be 'earliest', 'latest', group:<group_id> or JSON "
            'like {"topicA":{"0":23,"1":-2}}'
        )
    allowed = (EARLIEST, LATEST) if streaming else (EARLIEST,)
    return PerPartition(_per_partition(value, "startingOffsets", allowed))


def _ending(opts: dict[str, str]) -> OffsetSpec:
    if "endingtimestamp" in opts:
        return ByTimestamp({}, _timestamp(opts["endingtimestamp"], "endingTimestamp"))
    if "endingoffsetsbytimestamp" in opts:
        return ByTimestamp(
            _per_partition(opts["endingoffsetsbytimestamp"], "endingOffsetsByTimestamp", ())
        )
    raw = opts.get("endingoffsets")
    if raw is None or raw.strip().lower() == "latest":
        return Latest()
    value = raw.strip()
    if value.lower() == "earliest":
        raise RaftlogSparkOptionError(
            "endingOffsets='earliest' is not allowed (it would read nothing); use 'latest', "
            "JSON offsets or group:<group_id>"
        )
    if value.lower().startswith("group:"):
        return _group(value, "endingOffsets")
    if not value.startswith("{"):
        raise RaftlogSparkOptionError(
            f"endingOffsets={raw!r}: must be 'latest', group:<group_id> or JSON like "
            '{"topicA":{"0":50,"1":-1}}'
        )
    return PerPartition(_per_partition(value, "endingOffsets", (LATEST,)))
