"""`RangeReader`: read exactly the offsets [start, end) of one partition, as raw batches.

What a batch job needs (the Spark data source, raftlog_spark) where a `Consumer`'s positions,
groups and per-record tuples are in the way: a planned range is fetched as whole record
batches, checked (checksums, offsets that continue), trimmed to the range, and handed out as
`RangeChunk`s that a columnar decoder turns into arrays without a Python object per record.

Rules this module keeps:
- Only committed records: a range is planned below the high watermark (ListOffsets "latest"),
  and a fetch never returns records at or past it, so a reader sees what the partition has
  committed and nothing else.
- Gaps, and which of them are data loss (the rule of Spark's Kafka source): a compacted log
  has offsets without records (whole batches gone, cleaned v2 batches with holes or without
  records; client/fetched.py). Offsets are lost only where records were deleted from the
  start of the log: below the partition's log start offset (retention, DeleteRecords, a fetch
  out of range), or past a log that now ends below the planned end. With
  `fail_on_data_loss` that is a `DataLossError` naming the topic-partition and the missing
  offsets; without, a warning and the reader goes on with what is still there. A gap at or
  above the log start is compaction, skipped silently, whether between chunks, between
  batches of a chunk, inside a batch or at the end of the range (nothing below the high
  watermark past the gap). The log start comes with every Fetch response (the leader's, when
  it read the batches); only where a response lacks it (-1) is it asked for (ListOffsets).
- A chunk's batches go forward: each starts at or past where the one before ends; a batch
  that overlaps the one before, or a fetch that brings no batch past its offset, is a
  CorruptRecordError.
- Retriable errors (a moved leader, a lost connection) refresh metadata and retry until
  `request_timeout_ms` has passed without progress.
- Every batch is checked (checksum, lengths, counts) before any of it is handed out.
- Batches come as the log holds them, raftlog's own (magic 1) or Kafka's v2 (magic 2, maybe
  compressed); `RangeChunk.records` decodes both (client/fetched.py says how they differ).
- The sync `RangeReader` keeps one fetch in flight while its caller decodes the previous one.

Also here, for jobs that use a consumer group only to keep offsets (Spark's `commitToGroup`,
`startingOffsets=group:<id>`): `committed_offsets` and `commit_offsets` (a standalone commit:
no membership, generation -1, accepted while the group has no members, as in Kafka).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from raftlog import protocol
from raftlog.client.cluster import ClusterClient
from raftlog.client.fetched import check_record_offsets, cut_off
from raftlog.client.group import coordinator_request
from raftlog.errors import (
    CorruptRecordError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    RaftlogError,
    error_from_code,
)
from raftlog.messages.fetch import FetchPartition, FetchRequest, FetchResponse
from raftlog.messages.groups import OffsetCommitRequest, OffsetFetchRequest, OffsetFetchResponse
from raftlog.records import BatchHeader, Record, decode_records, validate_batch
from raftlog.records_v2 import CONTROL_BIT, MAGIC_V2
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

# Bytes asked for per fetch: big enough that per-request costs vanish next to decoding, small
# enough that a chunk and its decoded arrays stay a few tens of MiB in a Spark task.
PARTITION_FETCH_BYTES_DEFAULT = 4 * 1024 * 1024
# A fetch that found no records waits this long on the broker for some (long poll).
EMPTY_FETCH_WAIT_MS = 200
RETRY_BACKOFF_S = 0.1


class DataLossError(OffsetOutOfRangeError):
    """Records a reader was asked for no longer exist: [missing_start, missing_end) of `tp`.

    Raised by the client, never sent on the wire; its code only has to be unique (codes from
    100 up are client-side errors)."""

    code = 100

    def __init__(self, tp: TopicPartition, missing_start: int, missing_end: int, why: str):
        super().__init__(
            f"data loss in {tp}: offsets [{missing_start}, {missing_end}) are no longer "
            f"available ({why}); set failOnDataLoss=false to skip them with a warning"
        )
        self.tp = tp
        self.missing_start = missing_start
        self.missing_end = missing_end


@dataclass(frozen=True, slots=True)
class RangeChunk:
    """Whole, checked batches of one partition and the offsets [start, end) to keep of them.

    `batches` are (byte position in `data`, header), in offset order; the first batch may begin
    below `start` and the last end past `end` (batches are never split on the wire). Batches
    may have gaps between and inside them (compaction), so no record need sit at `start` or
    at `end - 1`, and a chunk may hold no record at all: its offsets are still read.
    """

    tp: TopicPartition
    data: bytes
    batches: tuple[tuple[int, BatchHeader], ...]
    start: int
    end: int

    def records(self) -> list[Record]:
        """The records in [start, end), decoded one by one (the slow, general path), from
        batches of either format (raftlog's own, Kafka's v2, compressed or not); control
        batches (Kafka's transaction markers) hold none, nor do compacted offsets. Raises
        CorruptRecordError for a v2 batch whose record offsets leave it or go back."""
        out: list[Record] = []
        start, end = self.start, self.end
        for pos, header in self.batches:
            if header.magic == MAGIC_V2 and header.attributes & CONTROL_BIT:
                continue
            records = decode_records(self.data, pos, header)
            if header.magic == MAGIC_V2:
                check_record_offsets([r.offset for r in records], header)
            out.extend(r for r in records if start <= r.offset < end)
        return out


@dataclass(frozen=True, slots=True)
class Step:
    """What one fetch means for a range read at `next_offset` (`plan_step`): the offsets lost
    below the log start (to report), the chunk to hand out, and where reading goes on (the
    range's end: done); `wait`: nothing came and the high watermark is below the range end."""

    lost: tuple[int, int] | None
    chunk: RangeChunk | None
    next_offset: int
    wait: bool = False


def plan_step(
    tp: TopicPartition,
    data: bytes,
    batches: Sequence[tuple[int, BatchHeader]],
    next_offset: int,
    end: int,
    high_watermark: int,
    log_start: int,
) -> Step:
    """Pure: the whole, checked `batches` of a fetch of `tp` at `next_offset` (payload
    `data`) for the range's rest [next_offset, end), given the response's high watermark and
    the log start (-1: unknown, then no gap can be called a loss). See the module docstring's
    rule: a gap is loss only below the log start; compaction's gaps are skipped."""
    if not batches:
        if data:
            raise CorruptRecordError(
                f"fetch of {tp} at offset {next_offset} returned {len(data)} bytes "
                "without a whole batch"
            )
        if next_offset < log_start:
            cut = min(log_start, end)
            return Step((next_offset, cut), None, cut)
        if high_watermark >= end:
            # Committed records reach the range's end, yet none lies past next_offset: the
            # rest of the range was compacted away (say, tombstones removed at the log's end).
            return Step(None, None, end)
        return Step(None, None, next_offset, wait=True)
    kept: list[tuple[int, BatchHeader]] = []
    previous: BatchHeader | None = None
    for pos, header in batches:
        if previous is not None and header.base_offset < previous.next_offset:
            raise CorruptRecordError(
                f"{tp}: batch at offset {header.base_offset} overlaps the one ending at "
                f"{previous.next_offset}"
            )
        previous = header
        if header.next_offset <= next_offset:
            continue  # the batch holding the fetch offset starts below it
        if header.base_offset >= end:
            break
        kept.append((pos, header))
    first_past = next((h for _pos, h in batches if h.next_offset > next_offset), None)
    if first_past is None:
        raise CorruptRecordError(f"{tp}: fetch at offset {next_offset} returned no batch past it")
    gap_end = min(first_past.base_offset, end)
    lost = None
    if next_offset < min(gap_end, log_start):
        lost = (next_offset, min(gap_end, log_start))
    if not kept:
        return Step(lost, None, end)  # the range ends inside the gap
    chunk_end = min(kept[-1][1].next_offset, end)
    return Step(lost, RangeChunk(tp, data, tuple(kept), next_offset, chunk_end), chunk_end)


def _check_range(tp: TopicPartition, start: int, end: int) -> None:
    if not 0 <= start <= end:
        raise InvalidConfigError(f"range [{start}, {end}) of {tp}: need 0 <= start <= end")


class AsyncRangeReader:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        client_id: str = "raftlog-range-reader",
        request_timeout_ms: int = 30_000,
        partition_fetch_bytes: int = PARTITION_FETCH_BYTES_DEFAULT,
    ):
        if partition_fetch_bytes < 1:
            raise InvalidConfigError(f"partition_fetch_bytes={partition_fetch_bytes}: must be >= 1")
        self.client = ClusterClient(bootstrap_servers, client_id, request_timeout_ms)
        self.partition_fetch_bytes = partition_fetch_bytes

    async def close(self) -> None:
        await self.client.close()

    async def list_offsets(
        self, specs: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """{tp: -2 earliest | -1 latest (the high watermark) | timestamp ms} -> (offset, ts)."""
        return await self.client.list_offsets(specs)

    async def _fetch_once(
        self, tp: TopicPartition, offset: int, max_wait_ms: int
    ) -> tuple[memoryview, int, int]:
        """One Fetch of `tp` from `offset`: (payload, high watermark, log start); raises the
        partition's error."""
        await self.client.topic(tp.topic)
        node = self.client.leader_for(tp)
        request = FetchRequest.of(
            [(tp.topic, FetchPartition(tp.partition, offset, self.partition_fetch_bytes))],
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=self.partition_fetch_bytes,
        )
        body, payload = await self.client.request(node, protocol.ApiKey.FETCH, request.to_body())
        for _tp, r in FetchResponse.from_body(body).results():
            if r.error:
                err = error_from_code(r.error, r.message or "")
                if isinstance(err, OffsetOutOfRangeError):
                    err.log_start_offset = r.log_start_offset
                    err.log_end_offset = r.high_watermark
                raise err
            return payload[: r.nbytes], r.high_watermark, r.log_start_offset
        raise CorruptRecordError(f"fetch response for {tp} does not name the partition")

    async def read_range(
        self, tp: TopicPartition, start: int, end: int, fail_on_data_loss: bool = True
    ) -> AsyncGenerator[RangeChunk, None]:
        """Chunks covering the records of `tp` in [start, end), in offset order.

        Every offset of the range is either in a chunk or reported as lost (see the module
        docstring); nothing at or past `end` is kept.
        """
        _check_range(tp, start, end)
        next_offset = start
        deadline = time.monotonic() + self.client.request_timeout_s
        while next_offset < end:
            try:
                payload, hw, log_start = await self._fetch_once(
                    tp, next_offset, EMPTY_FETCH_WAIT_MS
                )
            except OffsetOutOfRangeError:
                next_offset = await self._out_of_range(tp, next_offset, end, fail_on_data_loss)
                deadline = time.monotonic() + self.client.request_timeout_s
                continue
            except RaftlogError as e:
                if not e.retriable or time.monotonic() >= deadline:
                    raise
                log.debug("fetching %s at %d failed, will retry: %s", tp, next_offset, e)
                self.client.invalidate()
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            data = bytes(payload)
            batches = self._batches(tp, data)
            if log_start < 0 and (not batches or batches[0][1].base_offset > next_offset):
                log_start = await self._log_start(tp)  # a gap to judge, and no log start
            step = plan_step(tp, data, batches, next_offset, end, hw, log_start)
            if step.wait:
                # Nothing below the high watermark from here: the records planned were
                # committed once, so the high watermark moved back (a new leader that has not
                # caught up yet, or a log cut after an unclean election). Wait for it, then
                # call what is still missing lost.
                if time.monotonic() < deadline:
                    continue
                next_offset = self._lost(
                    tp, next_offset, end, fail_on_data_loss, f"the high watermark is now {hw}"
                )
                continue
            if step.lost is not None:
                self._lost(
                    tp, *step.lost, fail_on_data_loss,
                    f"the log start moved to {log_start}",
                )  # fmt: skip
            if step.chunk is not None:
                yield step.chunk
            elif step.next_offset > next_offset:
                log.debug(
                    "%s: offsets [%d, %d) hold no records (compacted)",
                    tp, next_offset, step.next_offset,
                )  # fmt: skip
            next_offset = step.next_offset
            deadline = time.monotonic() + self.client.request_timeout_s

    def _batches(self, tp: TopicPartition, data: bytes) -> list[tuple[int, BatchHeader]]:
        """The whole batches in a fetch payload, each checked (checksum, lengths, counts) as
        the consumer checks them; a partial one at the end is dropped."""
        out = []
        pos, size = 0, len(data)
        while pos < size:
            if cut_off(data, pos, size):
                break
            try:
                header = validate_batch(data, pos, size)
            except CorruptRecordError as e:
                raise CorruptRecordError(f"{tp}: {e}") from None
            out.append((pos, header))
            pos += header.size
        return out

    async def _log_start(self, tp: TopicPartition) -> int:
        """The partition's log start offset now (ListOffsets "earliest")."""
        offsets = await self.client.list_offsets({tp: protocol.EARLIEST_TIMESTAMP})
        return offsets[tp][0]

    async def _out_of_range(
        self, tp: TopicPartition, offset: int, end: int, fail_on_data_loss: bool
    ) -> int:
        """The fetch offset is outside the log: where to go on from (or DataLossError)."""
        log_start = await self._log_start(tp)
        if offset < log_start:
            return self._lost(
                tp, offset, min(log_start, end), fail_on_data_loss,
                f"retention moved the log start to {log_start}",
            )  # fmt: skip
        latest = (await self.client.list_offsets({tp: protocol.LATEST_TIMESTAMP}))[tp][0]
        return self._lost(
            tp, max(offset, latest), end, fail_on_data_loss, f"the log now ends at {latest}"
        )

    @staticmethod
    def _lost(tp: TopicPartition, start: int, end: int, fail: bool, why: str) -> int:
        """Report [start, end) of `tp` as lost; returns where reading goes on."""
        if fail:
            raise DataLossError(tp, start, end, why)
        log.warning(
            "data loss in %s: skipping offsets [%d, %d) that are no longer available (%s)",
            tp,
            start,
            end,
            why,
        )
        return end


class RangeReader:
    """The AsyncRangeReader on a private event loop in the caller's thread (Spark tasks)."""

    def __init__(self, bootstrap_servers: str | Sequence[str], **options: Any):
        self._loop = asyncio.new_event_loop()
        self._async = AsyncRangeReader(bootstrap_servers, **options)

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self._async.close())
            self._loop.close()

    def list_offsets(
        self, specs: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        return self._loop.run_until_complete(self._async.list_offsets(specs))

    def read_range(
        self, tp: TopicPartition, start: int, end: int, fail_on_data_loss: bool = True
    ) -> Iterator[RangeChunk]:
        """As AsyncRangeReader.read_range; the next fetch is sent before a chunk is handed
        out, so the broker reads and sends it while the caller decodes this one."""
        loop = self._loop
        chunks = self._async.read_range(tp, start, end, fail_on_data_loss)
        pending = loop.create_task(anext_or_none(chunks))
        try:
            while True:
                chunk = loop.run_until_complete(pending)
                if chunk is None:
                    return
                pending = loop.create_task(anext_or_none(chunks))
                loop.run_until_complete(asyncio.sleep(0))  # the next request goes out now
                yield chunk
        finally:
            if not pending.done():
                pending.cancel()
                loop.run_until_complete(asyncio.gather(pending, return_exceptions=True))
            loop.run_until_complete(chunks.aclose())


async def anext_or_none(chunks: AsyncIterator[RangeChunk]) -> RangeChunk | None:
    try:
        return await chunks.__anext__()
    except StopAsyncIteration:
        return None


# -- offsets kept in a consumer group by a job that is not a member ----------------------------


async def committed_offsets(
    client: ClusterClient, group_id: str, tps: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The group's committed offsets for these partitions (absent: none committed)."""
    body = await coordinator_request(
        client,
        group_id,
        protocol.ApiKey.OFFSET_FETCH,
        OffsetFetchRequest(group_id, tuple(tps)).to_body(),
        client.request_timeout_s,
    )
    return {tp: o for tp, o in OffsetFetchResponse.from_body(body).committed().items() if o >= 0}


async def commit_offsets(
    client: ClusterClient, group_id: str, offsets: dict[TopicPartition, int]
) -> None:
    """A standalone commit (no member, generation -1): refused while the group has members
    (CommitFailedError), so a job never overwrites the progress of live consumers."""
    if not offsets:
        return
    await coordinator_request(
        client,
        group_id,
        protocol.ApiKey.OFFSET_COMMIT,
        OffsetCommitRequest.of(group_id, offsets).to_body(),  # standalone: no member
        client.request_timeout_s,
    )
