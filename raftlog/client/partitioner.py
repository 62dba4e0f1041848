"""Where a producer's records go: keyed records by a hash of the key (`default_partitioner`,
xxhash, or `murmur2_partitioner`, Kafka's), keyless ones by the uniform sticky partitioner
(Kafka's KIP-794).

Keyed records: `ProducerConfig.partitioner` names the hash ("default": xxh3-64, the project's
one hash; "murmur2": Kafka's Java client's `Utils.murmur2`, so a key lands in the partition a
Java, kafka-python or aiokafka producer puts it in) or is any callable (key, partitions) ->
partition. `murmur2` is Kafka's 32-bit MurmurHash2 (seed 0x9747b28c, m 0x5bd1e995, r 24, the
key's bytes read as little-endian 32-bit words, the 1-3 trailing bytes folded in last), made
non-negative with `& 0x7fffffff` (Kafka's `Utils.toPositive`, not `abs`) and taken modulo the
partition count: `BuiltInPartitioner.partitionForKey`. docs/ARCHITECTURE.md (Clients,
Partitioning) says which default each Kafka client uses and how to line them up.

Keyless records: the uniform sticky partitioner, below.

Records without a key or an explicit partition all go to one partition of their topic, the
sticky partition, so that they form big batches (KIP-480), until about `batch_size` bytes have
gone to it; then the next record starts a stint on another partition. Records with a key go by
the key's hash and records with a partition go there: neither passes through here.

Why bytes and not batches: the sticky partition used to move only when its batch filled. At
moderate rates batches leave by `linger_ms` before they fill, so it never moved: a default
producer sending 2,000 records/s put 40,000 of 40,000 into one of six partitions, and that
partition's leader and the one group member consuming it took all the load (issue #21). Kafka
had the same skew and fixed it the same way (KIP-794).

Rules this type keeps:

- A stint ends only at a batch boundary: the producer asks `maybe_move` when the sticky
  partition's open batch can take no more records (it filled, it left by linger or flush, or
  the next record does not fit), and the partition moves if the stint with that record would
  pass `batch_size`. So a partition change never cuts a batch short, and a stint holds between
  `batch_size` and `batch_size` plus one batch: a batch that never leaves still fills up.
  (Kafka counts the same bytes and caps a stint at twice `batch_size`; the cap is implied here.)
- Stints go round the partitions in rounds: every partition gets one stint per round, in a new
  random order each round (never the same partition twice in a row). Over any window of whole
  rounds every partition got the same number of stints. Kafka picks each next partition at
  random; simulated over 20 s at 500 records/s of 200 bytes (34 stints of 64 KiB on 6
  partitions), random picks give some partition more than twice its fair share in 4% of
  windows, rounds never (at worst 1.24x). The random order keeps producers that started
  together from moving in step.
- Pure: no clock, no I/O, no lock (the producer calls it with its accumulator lock held); its
  randomness comes from the `random.Random` it is given, so tests replay it. Its checks raise
  AssertionError (they run under `python -O` too).

Not done: KIP-794's adaptive part, which sends fewer records to partitions whose leader is
slow (weights from each partition's queue of unsent batches). Without it a slow leader gets
the same bytes as the others, as with the old partitioner, so nothing got worse; with it, a
slow leader no longer fills `buffer_memory` and stalls every `send()`. Kafka's weighted random
pick would break the rounds' bound above; a version that keeps it (a partition whose queue
holds a batch its leader has not taken sits out the rest of the round) needs a benchmark with
a slow leader to show that it pays. docs/ARCHITECTURE.md (Clients, Partitioning) has the plan.

Bounded memory: per topic one `Stint` and a list of at most its partition count.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

import xxhash

KeyPartitioner = Callable[[bytes, int], int]

# Kafka's murmur2 (clients' Utils.murmur2); every step is modulo 2^32, as Java's int is.
_MURMUR2_SEED = 0x9747B28C
_MURMUR2_M = 0x5BD1E995
_MURMUR2_R = 24
_U32 = 0xFFFFFFFF


def murmur2(key: bytes) -> int:
    """Kafka's `Utils.murmur2(key)`, as the signed 32-bit int Java returns."""
    n = len(key)
    m = _MURMUR2_M
    h = (_MURMUR2_SEED ^ n) & _U32
    whole = n & ~3
    for k in struct.unpack_from(f"<{whole >> 2}I", key):
        k = (k * m) & _U32
        k ^= k >> _MURMUR2_R
        h = ((h * m) & _U32) ^ ((k * m) & _U32)
    tail = n & 3
    if tail:
        if tail == 3:
            h ^= key[whole + 2] << 16
        if tail >= 2:
            h ^= key[whole + 1] << 8
        h = ((h ^ key[whole]) * m) & _U32
    h ^= h >> 13
    h = (h * m) & _U32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partitioner(key: bytes, partitions: int) -> int:
    """The partition Kafka's Java client (`BuiltInPartitioner.partitionForKey`), kafka-python
    and aiokafka give `key`: murmur2, non-negative by `& 0x7fffffff`, modulo `partitions`."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def default_partitioner(key: bytes, partitions: int) -> int:
    """raftlog's default: xxh3-64, the project's one hash (a C call, where murmur2 is a Python
    loop per 4 bytes of key)."""
    return xxhash.xxh3_64_intdigest(key) % partitions


# The names `ProducerConfig(partitioner=...)` accepts.
PARTITIONERS: dict[str, KeyPartitioner] = {
    "default": default_partitioner,
    "murmur2": murmur2_partitioner,
}


class Stint:
    """A topic's sticky partition and the bytes sent to it since it became sticky.

    The producer adds the bytes it appends to `nbytes` itself (its per-record path counts
    them on the batch and adds them up at the next batch boundary: a method call per record
    would cost more than the rest of the record); everything else changes only through the
    partitioner.
    """

    __slots__ = ("nbytes", "partition", "partitions", "round")

    def __init__(self, partition: int, partitions: int, round_: list[int]):
        self.partition = partition
        # Invariant: nbytes >= 0; reset to 0 at every move.
        self.nbytes = 0
        # The topic's partition count the rounds are made of (a topic can grow).
        self.partitions = partitions
        # The partitions of the current round still to come, the next one last.
        # Invariant: distinct, in range(partitions), and `partition` is not among them (so
        # the next stint is never on the partition of this one).
        self.round = round_


class UniformStickyPartitioner:
    """The sticky partitions of one producer's topics; see the module docstring."""

    def __init__(self, batch_size: int, rng: random.Random | None = None):
        if batch_size < 1:
            raise AssertionError(f"batch_size={batch_size}: must be >= 1")
        self.batch_size = batch_size
        self._rng = random.Random() if rng is None else rng
        self._stints: dict[str, Stint] = {}

    def stint(self, topic: str, partitions: int) -> Stint:
        """The topic's current stint; a new one, the first of a new round, for a topic seen
        for the first time or whose partition count changed."""
        s = self._stints.get(topic)
        if s is None or s.partitions != partitions:
            if partitions < 1:
                raise AssertionError(f"topic {topic!r} has {partitions} partitions")
            round_ = self._new_round(partitions, None)
            s = self._stints[topic] = Stint(round_.pop(), partitions, round_)
        return s

    def partition(self, topic: str, partitions: int) -> int:
        """The partition the topic's next keyless record goes to."""
        return self.stint(topic, partitions).partition

    def maybe_move(self, stint: Stint, next_bytes: int) -> bool:
        """The stint's open batch can take no more records and a record of `next_bytes`
        comes: move to the next partition of the round if the stint with that record would
        pass batch_size. Returns whether the partition changed."""
        if next_bytes < 1:
            raise AssertionError(f"a record of {next_bytes} bytes")
        if stint.nbytes + next_bytes <= self.batch_size:
            return False
        stint.nbytes = 0
        partitions = stint.partitions
        if partitions == 1:
            return False
        if not stint.round:
            stint.round = self._new_round(partitions, stint.partition)
        stint.partition = stint.round.pop()
        return True

    def _new_round(self, partitions: int, last: int | None) -> list[int]:
        """Every partition once, in a random order (the next one last) that does not start
        with `last`, the partition of the stint that just ended: it never gets two in a row."""
        round_ = list(range(partitions))
        self._rng.shuffle(round_)
        if partitions > 1 and round_[-1] == last:
            # Swapping it with a random other place gives every order that does not start
            # with it the same chance.
            i = self._rng.randrange(partitions - 1)
            round_[i], round_[-1] = round_[-1], round_[i]
        return round_
