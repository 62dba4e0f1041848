"""The `raftlog` sink: `df.write.format("raftlog")` and `writeStream.format("raftlog")`.

Columns, as Kafka's sink reads them: `value` (binary or string, required), `key` (binary or
string), `topic` (string; the `topic` option overrides it), `partition` (int; else the
producer's partitioner: by key hash, round robin without a key), `headers`
(array<struct<key: string, value: binary>>). Other columns are ignored, as Kafka's sink does.

Each Spark task sends its rows with one idempotent Producer (acks=all: a record counts as
written once the partition committed it), flushes, and fails the task if any record was not
acknowledged.

Delivery guarantee: at-least-once, as Kafka's sink. The idempotent producer removes duplicates
from its own retries within a task, but a task Spark retries, or a micro-batch replayed after
a crash (its output was sent, the checkpoint had not recorded it), sends its rows again as new
records. Readers that need exactly-once deduplicate on a key of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from raftlog.client.producer import Producer
from raftlog.errors import RaftlogError
from raftlog_spark.options import RaftlogSparkOptionError

log = logging.getLogger(__name__)

SINK_OPTIONS = {"raftlog.bootstrap.servers", "topic", "raftlog.request.timeout.ms"}
# Spark's own options that it passes to a streaming sink with the user's.
SPARK_OPTIONS = {"checkpointlocation", "path"}
# How long a task waits for its records to be acknowledged at the end (delivery timeout).
FLUSH_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    request_timeout_ms: int

    @staticmethod
    def parse(options: Mapping[str, str], schema: StructType) -> SinkOptions:
        opts = {k.lower(): v for k, v in options.items()}
        unknown = sorted(set(opts) - SINK_OPTIONS - SPARK_OPTIONS)
        if unknown:
            raise RaftlogSparkOptionError(
                f"unknown option(s) {', '.join(map(repr, unknown))} for the raftlog sink "
                f"(known: {', '.join(sorted(SINK_OPTIONS))})"
            )
        bootstrap = opts.get("raftlog.bootstrap.servers", "").strip()
        if not bootstrap:
            raise RaftlogSparkOptionError("option 'raftlog.bootstrap.servers' is required")
        topic = opts.get("topic")
        if topic is not None and not topic.strip():
            raise RaftlogSparkOptionError("option 'topic' is empty")
        fields = {f.name: f.dataType for f in schema.fields}
        if topic is None and "topic" not in fields:
            raise RaftlogSparkOptionError(
                "the raftlog sink needs a 'topic' option or a 'topic' column"
            )
        _check_type(fields, "value", (BinaryType, StringType), required=True)
        _check_type(fields, "key", (BinaryType, StringType))
        _check_type(fields, "topic", (StringType,))
        _check_type(fields, "partition", (IntegerType,))
        headers = fields.get("headers")
        if headers is not None and not (
            isinstance(headers, ArrayType)
            and isinstance(headers.elementType, StructType)
            and [(f.name, type(f.dataType)) for f in headers.elementType.fields]
            == [("key", StringType), ("value", BinaryType)]
        ):
            raise RaftlogSparkOptionError(
                f"column 'headers' has type {headers.simpleString()}; the raftlog sink needs "
                "array<struct<key:string,value:binary>>"
            )
        timeout = opts.get("raftlog.request.timeout.ms", "30000")
        if not timeout.strip().isdigit() or int(timeout) < 1:
            raise RaftlogSparkOptionError(
                f"raftlog.request.timeout.ms={timeout!r}: must be a positive integer"
            )
        return SinkOptions(bootstrap, topic.strip() if topic else None, int(timeout))


def _check_type(
    fields: dict[str, Any], name: str, types: tuple[type, ...], required: bool = False
) -> None:
    if name not in fields:
        if required:
            raise RaftlogSparkOptionError(
                f"the raftlog sink needs a '{name}' column (binary or string); columns: "
                + ", ".join(fields)
            )
        return
    if not isinstance(fields[name], types):
        wanted = " or ".join(t.typeName() for t in types)  # type: ignore[attr-defined]
        raise RaftlogSparkOptionError(
            f"column '{name}' has type {fields[name].simpleString()}; the raftlog sink needs "
            f"{wanted}"
        )


@dataclass
class SentMessage(WriterCommitMessage):
    records: int


def _as_bytes(v: Any) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


def send_all(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> SentMessage:
    """Send every row of `batches`; raise if any record was not acknowledged (acks=all)."""
    sent = 0
    futures = []
    with Producer(
        bootstrap_servers=options.bootstrap_servers,
        client_id="raftlog-spark-sink",
        acks="all",
        enable_idempotence=True,
        request_timeout_ms=options.request_timeout_ms,
    ) as producer:
        for batch in batches:
            cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
            n = batch.num_rows
            values = cols["value"]
            keys = cols.get("key") or [None] * n
            topics = cols.get("topic") or [None] * n
            partitions = cols.get("partition") or [None] * n
            headers = cols.get("headers") or [None] * n
            for i in range(n):
                topic = options.topic or topics[i]
                if topic is None:
                    raise RaftlogSparkOptionError(
                        f"row {sent + i} has a null topic and no 'topic' option is set"
                    )
                hs = headers[i]
                futures.append(
                    producer.send(
                        topic,
                        _as_bytes(values[i]),
                        key=_as_bytes(keys[i]),
                        headers=[(h["key"], h["value"]) for h in hs] if hs else None,
                        partition=partitions[i],
                    )
                )
            sent += n
        producer.flush(FLUSH_TIMEOUT_S)
    for f in futures:
        error = f.exception(0)
        if error is not None:
            raise RaftlogError(f"raftlog sink: a record was not acknowledged: {error}") from error
    return SentMessage(sent)


class RaftlogWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType):
        self.options = SinkOptions.parse(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentMessage:
        return send_all(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, SentMessage))
        log.info("raftlog sink: %d records written", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = sum(m.records for m in messages if isinstance(m, SentMessage))
        log.warning(
            "raftlog sink: the write failed after %d records were acknowledged; they stay "
            "written (at-least-once: a retry writes them again)",
            sent,
        )


class RaftlogStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType):
        self.options = SinkOptions.parse(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentMessage:
        return send_all(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, SentMessage))
        log.info("raftlog sink: micro-batch %d wrote %d records", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "raftlog sink: micro-batch %d failed; records already acknowledged stay written "
            "and its replay writes them again (at-least-once)",
            batchId,
        )
