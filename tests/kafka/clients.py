"""Kafka's own clients, driven against a Kafka-protocol broker: one thin helper per client.

Every helper takes the bootstrap address "host:port" and a topic that exists (create it first,
with raftlog's Admin or confluent-kafka's AdminClient). Producers write keyed records with
headers to ONE explicit partition; consumers read that partition from its beginning, assigned
by hand (assign/seek, kcat's `-o beginning -e`, Sarama's partition consumer); consumer groups
are tested with members of their own (group_worker.py, test_kafka_groups.py). What a helper
reads comes back as
`Record` tuples (key, value, headers, timestamp, partition, offset), the same shape from every
client, so a test compares clients and doors with `==` (`payloads` drops the broker's part).

Options are keywords, the same for every client: producers take those of `Produce`
(partition, compression in COMPRESSIONS, acks "all"/"1"/"0", config, timeout_s), consumers
those of `Consume` (partition, end_offset, config, timeout_s); `config` holds client-specific
settings in the client's own spelling (librdkafka's "enable.idempotence", kafka-python's
`enable_idempotence`, kcat's `-X` properties). A producer returns the offset after the last
record acknowledged (-1 with acks=0, where none comes back); `*_roundtrip` produces, then
reads the partition from its beginning up to that offset. Every wait has a deadline
(timeout_s): a helper that runs out of time raises TimeoutError saying how far it got; a
client's error raises KafkaClientError naming the client, the topic-partition and the error.

The clients:

- confluent-kafka (librdkafka 2.16 in its wheel): `confluent_produce` / `confluent_consume` /
  `confluent_roundtrip`. Its Consumer refuses to start without a group.id even when it only
  assigns partitions, so it gets one (ASSIGN_ONLY_GROUP) and never commits; librdkafka still
  sends FindCoordinator for it at start (seen on the wire), and GetTelemetrySubscriptions
  when the broker advertises it.
- kafka-python 3.0 (pure Python): `kafka_python_*`. Its snappy codec needs python-snappy.
- aiokafka 0.14 (asyncio): `aiokafka_*_async` coroutines, and `aiokafka_*` that run them with
  `asyncio.run` (for synchronous tests; an async test awaits the coroutines). Its idempotent
  producer sends InitProducerId v0 with transaction_timeout_ms = 2^31-1.
- kcat 1.7.1 (librdkafka 2.0.2, /usr/bin/kcat): `kcat_produce` / `kcat_consume`. kcat reads
  keys and values as lines (`-K '\\t'`), so they must be UTF-8 text without tabs or newlines,
  and its headers (`-H`) hold for a whole run: records are sent in runs of equal headers. It
  reports no offsets (kcat_produce returns None); `-J` gives what it reads as JSON.
- Sarama 1.22 (Go, Kafka 2.0's protocol): `sarama_produce` / `sarama_consume` /
  `sarama_roundtrip` run tests/kafka/sarama_roundtrip (built by tests/kafka/golang.py), whose
  records are always `keyed_records(n, prefix)`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from tests.kafka.golang import sarama_binary
from tests.kafka.tools import KCAT

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("all", "1", "0")
# Generous: a 2-core machine shared with a 3-node cluster starts clients slowly.
DEFAULT_TIMEOUT_S = 60.0
# confluent-kafka's Consumer needs a group.id to start; it is never joined or committed to.
ASSIGN_ONLY_GROUP = "raftlog-tests-assign-only"
# How long one poll waits: short, so deadlines are checked often.
POLL_S = 0.2

Headers = tuple[tuple[str, bytes], ...]
# What a producer sends: (key, value, headers).
Outgoing = tuple[bytes | None, bytes | None, Headers]


class Record(NamedTuple):
    """One record as a consumer read it. `timestamp` is milliseconds since the epoch (the
    producer's create time, or the broker's log-append time if the topic says so)."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int
    partition: int
    offset: int


class KafkaClientError(RuntimeError):
    """A Kafka client reported an error (its own message, with the client and partition)."""


@dataclass(frozen=True, slots=True)
class Produce:
    """How a helper produces. Invariant: compression in COMPRESSIONS, acks in ACKS."""

    partition: int = 0
    compression: str = "none"
    acks: str = "all"
    config: Mapping[str, Any] | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression {self.compression!r}: want one of {COMPRESSIONS}")
        if self.acks not in ACKS:
            raise ValueError(f"acks {self.acks!r}: want one of {ACKS}")

    @property
    def codec(self) -> str | None:
        """The compression as kafka-python and aiokafka name it (None for none)."""
        return None if self.compression == "none" else self.compression

    @property
    def acks_value(self) -> str | int:
        """acks as kafka-python and aiokafka take it."""
        return "all" if self.acks == "all" else int(self.acks)


@dataclass(frozen=True, slots=True)
class Consume:
    """How a helper consumes: partition `partition` from its beginning up to `end_offset`
    (exclusive) or, when None, up to the end the broker reports (how depends on the client)."""

    partition: int = 0
    end_offset: int | None = None
    config: Mapping[str, Any] | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    def done(self, got: Sequence[Record]) -> bool:
        """True once what was read reaches end_offset (never when it is None)."""
        if self.end_offset is None:
            return False
        return self.end_offset <= 0 or (bool(got) and got[-1].offset + 1 >= self.end_offset)

    def timed_out(self, what: str, got: Sequence[Record]) -> TimeoutError:
        last = got[-1].offset if got else None
        want = "the end" if self.end_offset is None else f"end offset {self.end_offset}"
        return TimeoutError(
            f"{what}: read {len(got)} records (last offset {last}) in {self.timeout_s:g} s; "
            f"want {want}"
        )


def keyed_records(n: int, prefix: str = "test") -> list[Outgoing]:
    """n keyed records with two headers each: key PREFIX-key-I, value PREFIX-value-I, headers
    source=PREFIX and index=I (what sarama_roundtrip sends with -prefix PREFIX)."""
    return [
        (
            f"{prefix}-key-{i}".encode(),
            f"{prefix}-value-{i}".encode(),
            (("source", prefix.encode()), ("index", str(i).encode())),
        )
        for i in range(n)
    ]


def payloads(read: Iterable[Record]) -> list[Outgoing]:
    """The (key, value, headers) of each record read, to compare with what was sent."""
    return [(r.key, r.value, r.headers) for r in read]


def _end_of(what: str, o: Produce, offsets: Sequence[int], n: int) -> int:
    """The offset after the last record acknowledged: what a consumer reads up to."""
    if o.acks == "0":
        return -1
    if len(offsets) != n:
        raise KafkaClientError(f"{what}: {len(offsets)} of {n} records acknowledged")
    return max(offsets, default=-1) + 1


def _roundtrip(
    produce: Callable[..., int],
    consume: Callable[..., list[Record]],
    bootstrap: str,
    topic: str,
    records: Sequence[Outgoing],
    options: dict[str, Any],
) -> list[Record]:
    o = Produce(**options)
    end = produce(bootstrap, topic, records, **options)
    return consume(
        bootstrap,
        topic,
        partition=o.partition,
        end_offset=None if end < 0 else end,
        timeout_s=o.timeout_s,
    )


# confluent-kafka ------------------------------------------------------------------------------


def confluent_produce(
    bootstrap: str, topic: str, records: Sequence[Outgoing], **options: Any
) -> int:
    """Produce `records` (options: Produce's) with a confluent-kafka Producer."""
    from confluent_kafka import KafkaException, Producer

    o = Produce(**options)
    what = f"confluent-kafka producing to {topic}-{o.partition}"
    offsets: list[int] = []
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            offsets.append(msg.offset())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": o.acks,
            "compression.type": o.compression,
            "linger.ms": 5,
            "enable.idempotence": False,
            "message.timeout.ms": int(o.timeout_s * 1000),
            **(o.config or {}),
        }
    )
    deadline = time.monotonic() + o.timeout_s
    for key, value, headers in records:
        while True:
            try:
                producer.produce(
                    topic, value, key, o.partition, on_delivery=delivered, headers=list(headers)
                )
                break
            except BufferError:  # the local queue is full: serve callbacks, then retry
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{what}: queue full for {o.timeout_s:g} s") from None
                producer.poll(POLL_S)
            except KafkaException as e:
                raise KafkaClientError(f"{what}: {e}") from e
    left = producer.flush(max(0.0, deadline - time.monotonic()))
    if errors:
        raise KafkaClientError(f"{what}: {len(errors)} records failed, first: {errors[0]}")
    if left:
        raise TimeoutError(f"{what}: {left} records unacknowledged after {o.timeout_s:g} s")
    return _end_of(what, o, offsets, len(records))


def confluent_consume(bootstrap: str, topic: str, **options: Any) -> list[Record]:
    """Read a partition (options: Consume's) with a confluent-kafka Consumer; with no
    end_offset, up to librdkafka's partition EOF (the fetch's high watermark)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    o = Consume(**options)
    what = f"confluent-kafka reading {topic}-{o.partition}"
    got: list[Record] = []
    if o.done(got):
        return got
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": ASSIGN_ONLY_GROUP,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            **(o.config or {}),
        }
    )
    try:
        consumer.assign([TopicPartition(topic, o.partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + o.timeout_s
        while not o.done(got):
            if time.monotonic() > deadline:
                raise o.timed_out(what, got)
            for msg in consumer.consume(10_000, POLL_S):
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    if o.end_offset is None:
                        return got
                    continue
                if err is not None:
                    raise KafkaClientError(f"{what}: {err}")
                got.append(
                    Record(
                        msg.key(),
                        msg.value(),
                        tuple(msg.headers() or ()),
                        msg.timestamp()[1],
                        msg.partition(),
                        msg.offset(),
                    )
                )
        return got
    finally:
        consumer.close()


def confluent_roundtrip(
    bootstrap: str, topic: str, records: Sequence[Outgoing], **options: Any
) -> list[Record]:
    """confluent_produce, then confluent_consume up to the last offset acknowledged."""
    return _roundtrip(confluent_produce, confluent_consume, bootstrap, topic, records, options)


# kafka-python ---------------------------------------------------------------------------------


def kafka_python_produce(
    bootstrap: str, topic: str, records: Sequence[Outgoing], **options: Any
) -> int:
    """Produce `records` (options: Produce's) with a kafka-python KafkaProducer."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    o = Produce(**options)
    what = f"kafka-python producing to {topic}-{o.partition}"
    deadline = time.monotonic() + o.timeout_s
    timeout_ms = int(o.timeout_s * 1000)
    try:
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks=o.acks_value,
            compression_type=o.codec,
            linger_ms=5,
            request_timeout_ms=timeout_ms,
            max_block_ms=timeout_ms,
            **(o.config or {}),
        )
    except KafkaError as e:
        raise KafkaClientError(f"{what}: {e!r}") from e
    try:
        futures = [
            producer.send(topic, value=v, key=k, headers=list(h), partition=o.partition)
            for k, v, h in records
        ]
        producer.flush(timeout=max(0.0, deadline - time.monotonic()))
        offsets = [f.get(timeout=max(0.0, deadline - time.monotonic())).offset for f in futures]
    except KafkaError as e:
        raise KafkaClientError(f"{what}: {e!r}") from e
    finally:
        producer.close(timeout=max(0.0, deadline - time.monotonic()))
    return _end_of(what, o, offsets, len(records))


def kafka_python_consume(bootstrap: str, topic: str, **options: Any) -> list[Record]:
    """Read a partition (options: Consume's) with a kafka-python KafkaConsumer (no group);
    with no end_offset, up to the latest offset the broker reports (ListOffsets)."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    o = Consume(**options)
    what = f"kafka-python reading {topic}-{o.partition}"
    tp = TopicPartition(topic, o.partition)
    deadline = time.monotonic() + o.timeout_s
    got: list[Record] = []
    try:
        config = {
            # kafka-python insists that it exceeds session_timeout_ms (default 30 s); a
            # caller's config may set both lower.
            "request_timeout_ms": max(int(o.timeout_s * 1000), 30_001),
            **(o.config or {}),
        }
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, **config
        )
    except KafkaError as e:
        raise KafkaClientError(f"{what}: {e!r}") from e
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        if o.end_offset is None:
            latest = consumer.end_offsets([tp], timeout_ms=int(o.timeout_s * 1000))[tp]
            o = Consume(o.partition, latest, o.config, o.timeout_s)
        while not o.done(got):
            if time.monotonic() > deadline:
                raise o.timed_out(what, got)
            for batch in consumer.poll(timeout_ms=int(POLL_S * 1000)).values():
                got.extend(
                    Record(m.key, m.value, tuple(m.headers), m.timestamp, m.partition, m.offset)
                    for m in batch
                )
        return got
    except KafkaError as e:
        raise KafkaClientError(f"{what}: {e!r}") from e
    finally:
        consumer.close()


def kafka_python_roundtrip(
    bootstrap: str, topic: str, records: Sequence[Outgoing], **options: Any
) -> list[Record]:
    """kafka_python_produce, then kafka_python_consume up to the last offset acknowledged."""
    return _roundtrip(
        kafka_python_produce, kafka_python_consume, bootstrap, topic, records, options
    )


# aiokafka -------------------------------------------------------------------------------------


async def aiokafka_produce_async(
    bootstrap: str, topic: str, records: Sequence[Outgoing], **options: Any
) -> int:
    """Produce `records` (options: Produce's) with an aiokafka AIOKafkaProducer."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    o = Produce(**options)
    what = f"aiokafka producing to {topic}-{o.partition}"
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks=o.acks_value,
        compression_type=o.codec,
        linger_ms=5,
        request_timeout_ms=int(o.timeout_s * 1000),
        **(o.config or {}),
    )
    try:
        async with asyncio.timeout(o.timeout_s):
            try:
                await producer.start()
                futures = [
                    await producer.send(topic, v, k, partition=o.partition, headers=list(h))
                    for k, v, h in records
                ]
                sent = await asyncio.gather(*futures)
            finally:
                await producer.stop()
    except TimeoutError:
        raise TimeoutError(f"{what}: not acknowledged in {o.timeout_s:g} s") from None
    except KafkaError as e:
        raise KafkaClientError(f"{what}: {e!r}") from e
    return _end_of(what, o, [md.offset for md in sent], len(records))


async def aiokafka_consume_async(bootstrap: str, topic: str, **options: Any) -> list[Record]:
    """Read a partition (options: Consume's) with an aiokafka AIOKafkaConsumer (no group);
    with no end_offset, up to the latest offset the broker reports (ListOffsets)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import KafkaError

    o = Consume(**options)
    what = f"aiokafka reading {topic}-{o.partition}"
    tp = TopicPartition(topic, o.partition)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=int(o.timeout_s * 1000),
        **(o.config or {}),
    )
    got: list[Record] = []
    try:
        async with asyncio.timeout(o.timeout_s):
            try:
                await consumer.start()
                consumer.assign([tp])
                await consumer.seek_to_beginning(tp)
                if o.end_offset is None:
                    latest = (await consumer.end_offsets([tp]))[tp]
                    o = Consume(o.partition, latest, o.config, o.timeout_s)
                while not o.done(got):
                    batches = await consumer.getmany(tp, timeout_ms=int(POLL_S * 1000))
                    got.extend(
                        Record(m.key, m.value, tuple(m.headers), m.timestamp, m.partition, m.offset)
                        for m in batches.get(tp, ())
                    )
            finally:
                await consumer.stop()
    except TimeoutError:
        raise o.timed_out(what, got) from None
    except KafkaError as e:
        raise KafkaClientError(f"{what}: {e!r}") from e
    return got


async def aiokafka_roundtrip_async(
    bootstrap: str, topic: str, records: Sequence[Outgoing], **options: Any
) -> list[Record]:
    """aiokafka_produce_async, then aiokafka_consume_async up to the last offset acknowledged."""
    o = Produce(**options)
    end = await aiokafka_produce_async(bootstrap, topic, records, **options)
    return await aiokafka_consume_async(
        bootstrap,
        topic,
        partition=o.partition,
        end_offset=None if end < 0 else end,
        timeout_s=o.timeout_s,
    )


def aiokafka_produce(bootstrap: str, topic: str, records: Sequence[Outgoing], **kw: Any) -> int:
    """aiokafka_produce_async in a fresh event loop (from synchronous code only)."""
    return asyncio.run(aiokafka_produce_async(bootstrap, topic, records, **kw))


def aiokafka_consume(bootstrap: str, topic: str, **kw: Any) -> list[Record]:
    """aiokafka_consume_async in a fresh event loop (from synchronous code only)."""
    return asyncio.run(aiokafka_consume_async(bootstrap, topic, **kw))


def aiokafka_roundtrip(
    bootstrap: str, topic: str, records: Sequence[Outgoing], **kw: Any
) -> list[Record]:
    """aiokafka_roundtrip_async in a fresh event loop (from synchronous code only)."""
    return asyncio.run(aiokafka_roundtrip_async(bootstrap, topic, records, **kw))


# kcat -----------------------------------------------------------------------------------------


def _kcat(
    args: Sequence[str],
    config: Mapping[str, Any] | None,
    what: str,
    timeout_s: float,
    stdin: str | None = None,
) -> str:
    options = [f"-X{k}={v}" for k, v in (config or {}).items()]
    cmd = [KCAT, *options, *args]
    try:
        proc = subprocess.run(
            cmd, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        raise TimeoutError(f"{what}: kcat ran past {timeout_s:g} s; stderr:\n{err}") from None
    if proc.returncode != 0:
        command = " ".join(cmd)
        raise KafkaClientError(f"{what}: `{command}` exited {proc.returncode}:\n{proc.stderr}")
    return proc.stdout


def kcat_produce(bootstrap: str, topic: str, records: Sequence[Outgoing], **options: Any) -> None:
    """Produce `records` (options: Produce's; config: -X properties) with kcat -P, one kcat
    run per run of records with equal headers."""
    o = Produce(**options)
    what = f"kcat producing to {topic}-{o.partition}"
    deadline = time.monotonic() + o.timeout_s
    for headers, group in itertools.groupby(records, key=lambda r: r[2]):
        lines = []
        for key, value, _ in group:
            if key is None or value is None:
                raise ValueError("kcat_produce: kcat sends no null keys or values here")
            k, v = key.decode(), value.decode()
            if any(c in k + v for c in "\t\n"):
                raise ValueError(f"kcat_produce: a tab or newline in {k!r} / {v!r}")
            lines.append(f"{k}\t{v}\n")
        args = ["-P", "-b", bootstrap, "-t", topic, "-p", str(o.partition), "-K", "\t"]
        args += ["-z", o.compression, "-X", f"acks={o.acks}"]
        args += ["-X", f"message.timeout.ms={int(o.timeout_s * 1000)}"]
        for name, value in headers:
            args += ["-H", f"{name}={value.decode()}"]
        _kcat(args, o.config, what, max(0.1, deadline - time.monotonic()), "".join(lines))


def kcat_consume(
    bootstrap: str,
    topic: str,
    *,
    partition: int = 0,
    count: int | None = None,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Record]:
    """Read topic-partition with kcat -C -o beginning -e -J (config: -X properties): up to
    the end the broker reports (the fetch's high watermark), or the first `count` records."""
    what = f"kcat reading {topic}-{partition}"
    args = ["-C", "-b", bootstrap, "-t", topic, "-p", str(partition)]
    args += ["-o", "beginning", "-e", "-J", "-q"]
    if count is not None:
        args += ["-c", str(count)]
    got = []
    for line in _kcat(args, config, what, timeout_s).splitlines():
        m = json.loads(line)
        flat = m.get("headers") or []
        headers = tuple(
            (str(k), str(v).encode()) for k, v in zip(flat[::2], flat[1::2], strict=True)
        )
        key = None if m["key"] is None else m["key"].encode()
        value = None if m["payload"] is None else m["payload"].encode()
        got.append(Record(key, value, headers, m["ts"], m["partition"], m["offset"]))
    return got


# Sarama ---------------------------------------------------------------------------------------


def _sarama(
    bootstrap: str, topic: str, mode: str, n: int, o: Produce, idempotent: bool, prefix: str
) -> list[Record]:
    what = f"sarama {mode} on {topic}-{o.partition}"
    cmd = [str(sarama_binary()), "-brokers", bootstrap, "-topic", topic, "-mode", mode]
    cmd += ["-n", str(n), "-partition", str(o.partition), "-compression", o.compression]
    cmd += ["-acks", o.acks, "-prefix", prefix, "-timeout", f"{o.timeout_s:g}s"]
    if idempotent:
        cmd.append("-idempotent")
    # The program's deadlines are per phase: give it both phases and its start.
    timeout_s = 2 * o.timeout_s + 10
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"{what}: ran past {timeout_s:g} s") from None
    if proc.returncode != 0:
        raise KafkaClientError(f"{what}: exited {proc.returncode}: {proc.stderr.strip()}")
    got = []
    for line in proc.stdout.splitlines():
        m = json.loads(line)
        got.append(
            Record(
                None if m["key"] is None else m["key"].encode(),
                None if m["value"] is None else m["value"].encode(),
                tuple((k, v.encode()) for k, v in m["headers"]),
                m["timestamp_ms"],
                m["partition"],
                m["offset"],
            )
        )
    return sorted(got, key=lambda r: (r.partition, r.offset))


def sarama_roundtrip(
    bootstrap: str,
    topic: str,
    n: int,
    *,
    mode: str = "roundtrip",
    idempotent: bool = False,
    prefix: str = "sarama",
    **options: Any,
) -> list[Record]:
    """Produce keyed_records(n, prefix) from Go with a Sarama 1.22 SyncProducer, then read the
    partition from its oldest offset past the last offset acknowledged (with acks=0: until n
    records); returns every record read, sorted by offset. Options: Produce's but config;
    idempotent: Sarama's idempotent producer (one request in flight). mode "produce" only
    produces; mode "consume" only reads the first n records (n=0: up to the newest offset the
    broker reports, from ListOffsets)."""
    if mode not in ("produce", "consume", "roundtrip"):
        raise ValueError(f"mode {mode!r}: want produce, consume or roundtrip")
    return _sarama(bootstrap, topic, mode, n, Produce(**options), idempotent, prefix)


def sarama_produce(bootstrap: str, topic: str, n: int, **options: Any) -> None:
    """sarama_roundtrip's produce half."""
    sarama_roundtrip(bootstrap, topic, n, mode="produce", **options)


def sarama_consume(bootstrap: str, topic: str, n: int, **options: Any) -> list[Record]:
    """sarama_roundtrip's consume half (options: partition, timeout_s)."""
    return sarama_roundtrip(bootstrap, topic, n, mode="consume", **options)
