"""What a consumer makes of a fetched partition's bytes: `ConsumerRecord`s in runs, one run
per batch, each with the offset a consumer's position moves to once the run is handed out.

`decode_fetch` is the consumer's decode path (AsyncConsumer, and so the sync Consumer and
`raftlog consume`), pure: bytes in, records out, no I/O, no clock. `FetchBuffer` keeps what a
consumer fetched until `poll` hands it out, and says where each partition's position goes.

A partition's log holds batches of two formats, told apart by the magic byte at byte 16 of
each: raftlog's own (magic 1, records.py: little-endian, fixed-width records, never
compressed) and Kafka's record batch v2 (magic 2, records_v2.py: big-endian, varint records,
maybe compressed), what Kafka's clients and a compressing raftlog producer write. Both decode
to the same `ConsumerRecord`s, offsets, keys, values, headers and timestamps alike. Raftlog's
own batches keep their fast path and a v2 batch is decompressed and decoded by records_v2,
both behind records.decode_records_as, which dispatches on the magic byte.

Gaps (log compaction): offsets never change, but a compacted log has offsets that hold no
record. Whole batches may be gone (the next batch starts above the last one's next offset,
and a fetch at offset X may begin with a batch above X); a cleaned v2 batch keeps its base
offset and last offset delta but only some records, each at its own offset; and a v2 batch
may hold no record at all. So a position never comes from record offsets alone: once a
batch's records are all handed out, the position is the batch's `next_offset` (Kafka's
consumer uses batch.nextOffset() the same way), and a fetch whose batches hold no record
still moves the position past them. Otherwise the consumer would fetch the same batch again
forever.

Rules it keeps:
- Every whole batch is checked before any of its records is handed out (`validate_batch`:
  lengths, counts, and the checksum unless `check_crcs` is off; a reader that trusted a
  corrupt length could loop, so only the checksum can be skipped). A v2 batch's records must
  lie inside it, in increasing offsets (`check_record_offsets`), since positions follow them.
- A batch cut off by the fetch's byte limit at the end is not an error: it is left for the
  next fetch. A batch that fails its checks raises CorruptRecordError naming the partition and
  the offset where it starts; the runs before it have been yielded, with their positions.
- A fetch may start inside a batch: records below the fetch offset are dropped (by offset,
  not by index: a cleaned batch has holes).
- Runs (`Fetched`) hold at least one record, except a fetch whose whole batches hold none at
  or past its start offset (compacted away, empty batches, transaction markers): it yields
  one run without records whose `next_offset` is where the position goes. A batch without
  records after a run with records is folded into that run (its `next_offset` grows), so
  the position passes it when the run is handed out.
- A batch "cut off at the end" is told by its length field, read in its format's byte order
  (little-endian for magic 1, big-endian for magic 2); fewer bytes left than its format's
  header (65 for magic 1, 61 for magic 2; 17 to tell the format) are always a cut-off batch.
  A v2 batch without records is its bare 61-byte header: were it taken for a cut-off one at
  the end of a fetch, a consumer at the log's last (empty) batch would fetch it forever.
- Control batches (Kafka's transaction markers, attribute bit 5) hold no application records
  and are skipped, as Kafka's consumer skips them; the position passes them too.
- `FetchBuffer.take` moves a partition's position to a run's `next_offset` when it hands the
  run out whole, and to the offset after the last record handed out when `limit` cuts the run
  (the rest of the run starts past it, so nothing is handed out twice or skipped).
"""

from __future__ import annotations

import bisect
import collections
import itertools
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from raftlog.errors import CorruptRecordError
from raftlog.record_types import BatchHeader
from raftlog.records import (
    HEADER_SIZE,
    INT32,
    LENGTH_AT,
    LOG_OVERHEAD,
    MAGIC_AT,
    decode_records_as,
    validate_batch,
)
from raftlog.records_v2 import CONTROL_BIT, HEADER_V2_SIZE, MAGIC_V2
from raftlog.topics import TopicPartition

INT32_BE = struct.Struct(">i")


class ConsumerRecord(NamedTuple):
    """One record as a consumer hands it out; `offset` is its place in the partition."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class Fetched(NamedTuple):
    """A run of one partition's fetched records, in offset order, and `next_offset`: the
    position once all of them are handed out (the next offset of the last batch the run
    covers, past any compacted offsets). Invariant: every record's offset < next_offset."""

    records: list[ConsumerRecord]
    next_offset: int


class FetchBuffer:
    """One consumer's fetched runs not yet handed out, in fetch order, across partitions.

    Invariant: every run holds at least one record, and a partition's runs follow each other
    in offset order; its position (kept by the consumer) is at or below its first run's first
    record. A consumer adds a partition's fetch only while none of its runs is buffered."""

    def __init__(self) -> None:
        self._runs: collections.deque[Fetched] = collections.deque()

    def __bool__(self) -> bool:
        return bool(self._runs)

    def __len__(self) -> int:
        return len(self._runs)

    def add(
        self, tp: TopicPartition, chunk: memoryview | bytes, start: int, check_crcs: bool = True
    ) -> int | None:
        """Buffer the runs of `tp`'s fetched `chunk` (fetched at position `start`); returns
        the position `tp` moves to at once when the fetch's batches hold no record for it
        (compacted away, empty, markers), else None. A bad batch raises CorruptRecordError
        once the runs before it are buffered."""
        for run in decode_fetch(tp, chunk, start, check_crcs):
            if not run.records:
                return run.next_offset  # decode_fetch's only run then
            self._runs.append(run)
        return None

    def take(
        self, limit: int
    ) -> tuple[dict[TopicPartition, list[ConsumerRecord]], dict[TopicPartition, int]]:
        """Up to `limit` buffered records by partition, and the positions they move their
        partitions to (see the module docstring)."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        positions: dict[TopicPartition, int] = {}
        runs = self._runs
        n = 0
        while runs and n < limit:
            records, next_offset = runs[0]
            take = limit - n
            if len(records) > take:
                runs[0] = Fetched(records[take:], next_offset)
                records = records[:take]
                next_offset = records[-1].offset + 1
            else:
                runs.popleft()
            first = records[0]
            tp = TopicPartition(first.topic, first.partition)
            taken = out.get(tp)
            if taken is None:
                out[tp] = records
            else:
                taken.extend(records)
            positions[tp] = next_offset
            n += len(records)
        return out, positions

    def drop(self, pred: Callable[[TopicPartition], bool]) -> None:
        """Forget the runs of partitions matching `pred` (their positions point before them)."""
        if self._runs:
            self._runs = collections.deque(r for r in self._runs if not pred(_partition_of(r)))

    def clear(self) -> None:
        self._runs.clear()


def _partition_of(run: Fetched) -> TopicPartition:
    first = run.records[0]
    return TopicPartition(first.topic, first.partition)


def decode_fetch(
    tp: TopicPartition, chunk: memoryview | bytes, start: int, check_crcs: bool = True
) -> Iterator[Fetched]:
    """The records of `chunk` (one partition's fetched bytes) at offsets >= `start`, in runs
    with the position after each; see the module docstring for the rules."""
    held: Fetched | None = None  # the last run, kept back until the next batch is seen
    try:
        for header, records in _batches(tp, chunk, start, check_crcs):
            if held is None:
                held = Fetched(records, header.next_offset)
            elif records:
                if held.records:
                    yield held
                # A run without records before this one: its position is passed anyway.
                held = Fetched(records, header.next_offset)
            else:
                held = Fetched(held.records, header.next_offset)
    except CorruptRecordError:
        if held is not None:
            yield held  # the runs before the bad batch, and where the position gets to
        raise
    if held is not None:
        yield held


def _batches(
    tp: TopicPartition, chunk: memoryview | bytes, start: int, check_crcs: bool
) -> Iterator[tuple[BatchHeader, list[ConsumerRecord]]]:
    """Each whole batch of `chunk` that ends past `start`, with its records at >= `start`."""
    pos, end = 0, len(chunk)
    topic, partition = tp
    at = start  # the offset the next batch holds, at the least (for the error message)
    while pos < end:
        if cut_off(chunk, pos, end):
            break  # a partial batch at the end of a fetch is not an error
        try:
            header = validate_batch(chunk, pos, end, check_crcs)
            if header.magic == MAGIC_V2 and header.attributes & CONTROL_BIT:
                records = []  # a transaction marker: no application records
            else:
                records = decode_records_as(chunk, pos, header, ConsumerRecord, topic, partition)
                if header.magic == MAGIC_V2:
                    check_record_offsets([r.offset for r in records], header)
        except CorruptRecordError as e:
            raise CorruptRecordError(
                f"{tp}: corrupt record batch at offset {at} (byte {pos} of the fetch): {e}; "
                f"the position stays at offset {at}: seek past it to go on"
            ) from None
        pos += header.size
        if header.next_offset <= start:
            continue  # wholly below the fetch offset (a broker never sends one, but be sure)
        if start > header.base_offset and records:
            records = records[first_at_or_after([r.offset for r in records], start) :]
        at = max(at, header.next_offset)
        yield header, records


def first_at_or_after(offsets: Sequence[int], start: int) -> int:
    """The index of the first of `offsets` (increasing) at or after `start`."""
    return bisect.bisect_left(offsets, start)


def check_record_offsets(offsets: Sequence[int], header: BatchHeader) -> None:
    """A batch's record offsets must increase and lie in [base_offset, next_offset): positions
    and range trims rely on it. Raftlog's own batches compute their offsets from the base, so
    only v2 batches need the check; an ungapped one (as many records as offsets) only needs
    its ends checked, a cleaned one (fewer) every step. Raises CorruptRecordError."""
    if not offsets:
        return
    base, next_offset = header.base_offset, header.next_offset
    if offsets[0] < base or offsets[-1] >= next_offset:
        raise CorruptRecordError(
            f"record offsets {offsets[0]}..{offsets[-1]} lie outside their batch "
            f"[{base}, {next_offset})"
        )
    if len(offsets) < next_offset - base:
        for a, b in itertools.pairwise(offsets):
            if b <= a:
                raise CorruptRecordError(
                    f"record offset {b} follows {a} in the batch at offset {base}"
                )


def cut_off(chunk: memoryview | bytes, pos: int, end: int) -> bool:
    """Whether the bytes [pos, end) are the start of a batch that the fetch's byte limit cut
    off (the next fetch brings it whole): too few bytes for its format's header, or a
    plausible length field (in the byte order of the batch's format) that reaches past `end`.
    A length too small for any batch of its format is not a cut: validate_batch then says
    what is wrong."""
    if end - pos <= MAGIC_AT:
        return True
    v2 = chunk[pos + MAGIC_AT] == MAGIC_V2
    header_size = HEADER_V2_SIZE if v2 else HEADER_SIZE
    if end - pos < header_size:
        return True
    length: int = (INT32_BE if v2 else INT32).unpack_from(chunk, pos + LENGTH_AT)[0]
    return length >= header_size - LOG_OVERHEAD and pos + LOG_OVERHEAD + length > end
