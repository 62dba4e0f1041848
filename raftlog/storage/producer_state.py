"""`ProducerState`: what a partition remembers of each idempotent producer, to refuse duplicates.

An idempotent producer stamps every batch with its producer id, its epoch and the sequence
number of the batch's first record, counted per partition from 0 (records.py's header). The
partition keeps, per producer id, the epoch and the metadata of the last
`NUM_BATCHES_TO_RETAIN` (5, Kafka's `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`) batches it
appended: first and last sequence, first and last offset, max timestamp. The leader checks a
batch against it before appending (`check`); every replica records every appended batch
(`record`), on the leader's path, the follower's, and when recovery replays the log.

The checks, Kafka's `ProducerAppendInfo.checkProducerEpoch` / `checkSequence`, in this order:
- a batch of the producer's current epoch whose first and last sequence equal a retained
  batch's is a duplicate: `check` returns that batch's metadata, and the leader answers with
  its original offsets without appending anything;
- an epoch below the producer's current one is refused: InvalidProducerEpochError;
- a new (higher) epoch must start at sequence 0, else OutOfOrderSequenceError;
- in the current epoch the batch must start right after the last sequence (sequences are
  int32 and wrap from 2^31 - 1 to 0); anything else is OutOfOrderSequenceError, a batch that
  lies wholly behind the retained window included. Such a batch is never called a duplicate
  (DuplicateSequenceError, which clients count as delivered): the first batch a partition saw
  of a producer may start at any sequence (below), so a batch behind the window may be one
  that was never appended, e.g. the first batch of a new producer refused by a broker that
  did not host the partition yet while the producer's next batch, sent meanwhile, was
  appended. Answering "duplicate" there acknowledged records that are in no log. Kafka's
  broker (`ProducerAppendInfo.checkSequence`) answers OUT_OF_ORDER_SEQUENCE_NUMBER too;
- an unknown producer id (new, expired, evicted, or its batches went with retention) may start
  at any sequence, as in Kafka: the broker cannot tell a gap from state it no longer has.

Bounds (TigerBeetle's "put a limit on everything"):
- at most `producer_ids_max` producers per partition; a new one beyond it evicts the least
  recently appended producer (dict order is append order), with one WARNING per
  `EVICTION_WARNING_INTERVAL_MS`. An evicted producer is an unknown one: its next batch is
  accepted at any sequence, so a retry of a batch it had appended before eviction is appended
  again. Refusing new producers instead would let idle ones lock out live ones.
- a producer whose last batch is older than `producer_id_expiration_ms` (Kafka's
  `producer.id.expiration.ms`, 1 day) is dropped by `remove_expired`. Timestamps are the
  batches' max timestamps, so every replica and every replay computes the same state.

Transactions: `begin` returns a `ProducerAppend` that checks and records the batches of one
log append against a private copy of the entries it touches; `commit` publishes them once the
write succeeded. A failed write drops it and the state is unchanged.

Snapshots (`encode_snapshot` / `decode_snapshot`): written by the log at segment rolls and on
close, named `<offset, 20 digits>.snapshot` where `offset` is the log end the state covers.
Recovery loads the newest snapshot at or below the log end and replays the batches after it.
Layout, little-endian::

    offset size field
    0      4    magic            b"RLPS"
    4      2    version          int16, 0
    6      8    offset           int64  log end offset the state covers
    14     4    producer_count   int32
    18     8    checksum         uint64 xxh3_64 of every byte after this field
    26     ...  producers, in append order (least recent first), each:
                  8 producer_id  int64
                  2 epoch        int16
                  1 batch_count  int8   1..5
                  batch_count x 32 bytes: first_seq int32, last_seq int32,
                                          first_offset int64, last_offset int64,
                                          max_timestamp int64

A snapshot that fails its checks is ignored (derived data: the log is replayed instead).
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from typing import NamedTuple

import xxhash

from raftlog.errors import InvalidProducerEpochError, OutOfOrderSequenceError

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
SEQUENCE_MODULUS = 2**31  # sequences are int32 >= 0 and wrap from 2^31 - 1 to 0
PRODUCER_ID_EXPIRATION_MS_DEFAULT = 24 * 60 * 60 * 1000  # Kafka's producer.id.expiration.ms
PRODUCER_IDS_MAX_DEFAULT = 10_000
EVICTION_WARNING_INTERVAL_MS = 10_000

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_MAGIC = b"RLPS"
_SNAP_HEADER = struct.Struct("<4shqiQ")
_SNAP_PRODUCER = struct.Struct("<qhb")
_SNAP_BATCH = struct.Struct("<iiqqq")
_CHECKSUMMED_FROM = _SNAP_HEADER.size  # 26


class SnapshotError(ValueError):
    """A producer state snapshot that fails its checks (the log is replayed instead)."""


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


def last_sequence(base_sequence: int, record_count: int) -> int:
    """The sequence of a batch's last record, wrapping past 2^31 - 1 to 0."""
    return (base_sequence + record_count - 1) % SEQUENCE_MODULUS


def _behind(seq: int, last_seq: int) -> bool:
    """`seq` comes before `last_seq` in the wrapping sequence space (within half of it)."""
    d = (last_seq - seq) % SEQUENCE_MODULUS
    return 0 < d < SEQUENCE_MODULUS // 2


class ProducerEntry:
    """One producer's epoch and its last batches (oldest first)."""

    __slots__ = ("batches", "epoch", "producer_id")

    def __init__(self, producer_id: int, epoch: int, batches: deque[BatchMetadata] | None = None):
        self.producer_id = producer_id
        self.epoch = epoch
        # Invariant: 1 <= len(batches) <= NUM_BATCHES_TO_RETAIN, in sequence order.
        self.batches: deque[BatchMetadata] = (
            deque(maxlen=NUM_BATCHES_TO_RETAIN) if batches is None else batches
        )

    def copy(self) -> ProducerEntry:
        return ProducerEntry(self.producer_id, self.epoch, self.batches.copy())

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq

    @property
    def last_timestamp(self) -> int:
        return self.batches[-1].max_timestamp

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset

    def duplicate_of(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


class ProducerState:
    """The producer state of one partition. `name` names the partition in errors and logs."""

    def __init__(
        self,
        name: str,
        producer_ids_max: int = PRODUCER_IDS_MAX_DEFAULT,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
    ):
        if producer_ids_max < 1:
            raise ValueError(f"producer_ids_max={producer_ids_max}: must be >= 1")
        self.name = name
        self.producer_ids_max = producer_ids_max
        self.producer_id_expiration_ms = producer_id_expiration_ms
        # producer id -> entry, least recently appended first (eviction takes the first).
        self._producers: dict[int, ProducerEntry] = {}
        self.evictions = 0
        self._evictions_warned_at = -EVICTION_WARNING_INTERVAL_MS

    def __len__(self) -> int:
        return len(self._producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def entries(self) -> list[ProducerEntry]:
        return list(self._producers.values())

    def begin(self) -> ProducerAppend:
        return ProducerAppend(self)

    def record(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        record_count: int,
        first_offset: int,
        max_timestamp: int,
    ) -> None:
        """Record a batch that is in the log (follower appends, recovery replays): no check.
        The log is the truth; the state follows it."""
        append = ProducerAppend(self)
        append.record(producer_id, epoch, base_sequence, record_count, first_offset, max_timestamp)
        append.commit()

    def _put(self, entry: ProducerEntry) -> None:
        producers = self._producers
        pid = entry.producer_id
        if pid in producers:
            del producers[pid]  # re-inserted at the end: the most recently appended
        elif len(producers) >= self.producer_ids_max:
            oldest = next(iter(producers))
            del producers[oldest]
            self.evictions += 1
            now = entry.last_timestamp
            if now - self._evictions_warned_at >= EVICTION_WARNING_INTERVAL_MS:
                self._evictions_warned_at = now
                log.warning(
                    "%s: %d producers tracked (producer_ids_max); evicted producer %d, the "
                    "least recently appended (%d evictions so far): a retry of its earlier "
                    "batches is no longer recognised as a duplicate",
                    self.name,
                    len(producers) + 1,
                    oldest,
                    self.evictions,
                )
        producers[pid] = entry

    def remove_expired(self, now_ms: int) -> int:
        """Drop producers whose last batch is older than producer_id_expiration_ms."""
        horizon = now_ms - self.producer_id_expiration_ms
        expired = [pid for pid, e in self._producers.items() if e.last_timestamp < horizon]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget producers none of whose batches remain in the log (retention, deleted
        records): as Kafka does, their state goes with their data."""
        gone = [p for p, e in self._producers.items() if e.last_offset < log_start_offset]
        for pid in gone:
            del self._producers[pid]

    def clear(self) -> None:
        self._producers.clear()

    # -- snapshots -----------------------------------------------------------------------------

    def encode_snapshot(self, offset: int) -> bytes:
        parts: list[bytes] = []
        for e in self._producers.values():
            parts.append(_SNAP_PRODUCER.pack(e.producer_id, e.epoch, len(e.batches)))
            parts.extend(_SNAP_BATCH.pack(*b) for b in e.batches)
        body = b"".join(parts)
        count = len(self._producers)
        checksum = xxhash.xxh3_64_intdigest(body)
        return _SNAP_HEADER.pack(SNAPSHOT_MAGIC, 0, offset, count, checksum) + body

    def load_snapshot(self, data: bytes, where: str) -> int:
        """Replace the state with a snapshot's; returns the offset it covers. Raises
        SnapshotError naming `where` and the byte if it fails a check (state then empty)."""
        self._producers.clear()
        if len(data) < _SNAP_HEADER.size:
            raise SnapshotError(f"{where}: {len(data)} bytes, a header needs {_SNAP_HEADER.size}")
        magic, version, offset, count, checksum = _SNAP_HEADER.unpack_from(data)
        if magic != SNAPSHOT_MAGIC or version != 0:
            raise SnapshotError(f"{where}: not a version 0 producer state snapshot")
        if xxhash.xxh3_64_intdigest(memoryview(data)[_CHECKSUMMED_FROM:]) != checksum:
            raise SnapshotError(f"{where}: checksum mismatch")
        pos = _CHECKSUMMED_FROM
        try:
            for _ in range(count):
                pid, epoch, n = _SNAP_PRODUCER.unpack_from(data, pos)
                pos += _SNAP_PRODUCER.size
                if not 1 <= n <= NUM_BATCHES_TO_RETAIN:
                    raise SnapshotError(f"{where}: producer {pid} with {n} batches at byte {pos}")
                batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
                for _ in range(n):
                    batches.append(BatchMetadata._make(_SNAP_BATCH.unpack_from(data, pos)))
                    pos += _SNAP_BATCH.size
                self._producers[pid] = ProducerEntry(pid, epoch, batches)
        except struct.error:
            self._producers.clear()
            raise SnapshotError(f"{where}: truncated at byte {pos}") from None
        except SnapshotError:
            self._producers.clear()
            raise
        if pos != len(data):
            self._producers.clear()
            raise SnapshotError(f"{where}: {len(data) - pos} bytes after the last producer")
        return int(offset)


class ProducerAppend:
    """The batches of one log append, checked and recorded against copies of the entries
    they touch; `commit` publishes them (after the write succeeded)."""

    __slots__ = ("_state", "_touched")

    def __init__(self, state: ProducerState):
        self._state = state
        self._touched: dict[int, ProducerEntry | None] = {}

    def _entry(self, producer_id: int) -> ProducerEntry | None:
        touched = self._touched
        if producer_id in touched:
            return touched[producer_id]
        current = self._state._producers.get(producer_id)
        entry = None if current is None else current.copy()
        touched[producer_id] = entry
        return entry

    def check(
        self, producer_id: int, epoch: int, base_sequence: int, record_count: int
    ) -> BatchMetadata | None:
        """The leader's check of one batch: its duplicate's metadata (append nothing), None
        (append it, then `record` it), or raises (refuse it)."""
        name = self._state.name
        if base_sequence < 0 or epoch < 0:
            raise OutOfOrderSequenceError(
                f"{name}: producer {producer_id} sent epoch {epoch}, base sequence "
                f"{base_sequence}: an idempotent batch needs both >= 0"
            )
        entry = self._entry(producer_id)
        if entry is None:
            return None  # unknown producer: any sequence starts it
        last = last_sequence(base_sequence, record_count)
        dup = entry.duplicate_of(epoch, base_sequence, last)
        if dup is not None:
            return dup
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"{name}: producer {producer_id} sent epoch {epoch}, but epoch {entry.epoch} "
                "has already written here (a newer instance of this producer took over)"
            )
        if epoch > entry.epoch:
            if base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"{name}: producer {producer_id} starts epoch {epoch} (was {entry.epoch}) "
                    f"at sequence {base_sequence}; a new epoch starts at 0"
                )
            return None
        expected = (entry.last_seq + 1) % SEQUENCE_MODULUS
        if base_sequence == expected:
            return None
        first_kept = entry.batches[0].first_seq
        if _behind(last, first_kept):
            # Not a duplicate for certain: see the module's docstring.
            raise OutOfOrderSequenceError(
                f"{name}: producer {producer_id} epoch {epoch} sent sequences "
                f"{base_sequence}..{last}, behind the last {NUM_BATCHES_TO_RETAIN} batches "
                f"(from {first_kept}) this partition keeps: it cannot tell whether they were "
                "appended"
            )
        raise OutOfOrderSequenceError(
            f"{name}: producer {producer_id} epoch {epoch} sent base sequence {base_sequence}, "
            f"expected {expected} (the last batch appended ends at {entry.last_seq})"
        )

    def record(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        record_count: int,
        first_offset: int,
        max_timestamp: int,
    ) -> None:
        entry = self._entry(producer_id)
        batch = BatchMetadata(
            base_sequence,
            last_sequence(base_sequence, record_count),
            first_offset,
            first_offset + record_count - 1,
            max_timestamp,
        )
        if entry is None or epoch != entry.epoch:
            # A new producer, or a new epoch: the old epoch's batches can never match again.
            entry = ProducerEntry(producer_id, epoch)
            self._touched[producer_id] = entry
        entry.batches.append(batch)

    def commit(self) -> None:
        state = self._state
        for entry in self._touched.values():
            if entry is not None and entry.batches:
                state._put(entry)
        self._touched.clear()
