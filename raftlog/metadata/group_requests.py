"""Group requests from the network, checked before the coordinator proposes them, and upper
bounds of the size of the commands they become.

Rules: pure functions of their arguments (no I/O, no state). A malformed request is refused
here with InvalidRequestError (or PolicyViolationError past a configured limit), naming what
is wrong, so that it never reaches the state machine of every replica. The size bounds are
upper bounds of what pickle protocol 2 (pysyncobj's) makes of a command, computed from string
lengths without pickling; test_coordinator.py checks them against real pickles. They let the
coordinator cut batches and large requests into commands that fit one Raft entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn, TypeVar

from raftlog.errors import InvalidRequestError, PolicyViolationError
from raftlog.topics import MAX_NAME_LENGTH

# Kafka's wire types for partitions and generations (int32) and offsets (int64).
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# Room a batch's command needs around its commits ("commit_batch", {"commits": [...]}).
BATCH_ENVELOPE_BYTES_MAX = 64


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_str(name: str, value: object, empty_ok: bool = True) -> str:
    if not isinstance(value, str) or (not empty_ok and not value):
        raise InvalidRequestError(f"{name} must be a{'' if empty_ok else ' non-empty'} string")
    return value


def str_list(name: str, values: object) -> list[str]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise InvalidRequestError(f"{name} must be a list of strings, got {values!r}")
    if not all(isinstance(v, str) for v in values):
        raise InvalidRequestError(f"{name} must be a list of strings, got {values!r}")
    return list(values)


def offset_entries(
    group_id: str, offsets: object, width: int, metadata_bytes_max: int
) -> tuple[list[list[Any]], list[int]]:
    """`[topic, partition, offset(, metadata)]` entries as plain lists, checked, and an upper
    bound of each one's serialized size.

    The state machine unpacks these entries; a malformed one must stop here, refused, rather
    than be refused by every replica. A None metadata becomes "". On every commit's path: the
    checks are `type()` comparisons, and `_bad_entry` names the fault only when there is one.
    """
    if type(offsets) not in _SEQUENCES and (
        isinstance(offsets, str | bytes) or not isinstance(offsets, Sequence)
    ):
        raise InvalidRequestError(f"group {group_id!r}: offsets must be a list of entries")
    entries: list[list[Any]] = []
    sizes: list[int] = []
    for e in offsets:  # type: ignore[attr-defined]
        if type(e) not in _SEQUENCES or len(e) != width:
            _bad_entry(group_id, e, width)
        topic, partition, offset = e[0], e[1], e[2]
        if (
            type(topic) is not str
            or type(partition) is not int
            or type(offset) is not int
            or not 0 <= partition <= INT32_MAX
            or not 0 <= offset <= INT64_MAX
            or len(topic) > MAX_NAME_LENGTH
        ):
            _bad_entry(group_id, e, width)
        size = ENTRY_BYTES + (len(topic) if topic.isascii() else str_bytes(topic))
        if width == 4:
            metadata = e[3]
            if metadata is None:
                metadata = ""
            elif type(metadata) is not str:
                _bad_entry(group_id, e, width)
            metadata_bytes = len(metadata) if metadata.isascii() else str_bytes(metadata)
            if metadata_bytes > metadata_bytes_max:
                raise PolicyViolationError(
                    f"group {group_id!r}: metadata for {topic}-{partition} is {metadata_bytes} "
                    f"bytes; the limit is offset_metadata_bytes_max={metadata_bytes_max} "
                    "(Kafka's offset.metadata.max.bytes)"
                )
            entries.append([topic, partition, offset, metadata])
            size += metadata_bytes + STR_BYTES
        else:
            entries.append([topic, partition, offset])
        sizes.append(size)
    return entries, sizes


_SEQUENCES = (list, tuple)


def _bad_entry(group_id: str, e: object, width: int) -> NoReturn:
    """Refuse the offset entry `e`, naming what is wrong with it."""
    shape = f"[topic, partition, offset{', metadata' if width == 4 else ''}]"
    if isinstance(e, str | bytes) or not isinstance(e, Sequence) or len(e) != width:
        raise InvalidRequestError(f"group {group_id!r}: offset entry {e!r:.100} must be {shape}")
    topic, partition, offset = e[0], e[1], e[2]
    if not isinstance(topic, str) or not is_int(partition) or not is_int(offset):
        raise InvalidRequestError(
            f"group {group_id!r}: offset entry {e!r:.100} needs a str topic, int partition and "
            "int offset"
        )
    if not 0 <= partition <= INT32_MAX or not 0 <= offset <= INT64_MAX:
        raise InvalidRequestError(
            f"group {group_id!r}: {topic}-{partition} offset {offset}: partition must be "
            f"0..{INT32_MAX} and offset 0..{INT64_MAX}"
        )
    if len(topic) > MAX_NAME_LENGTH:
        raise InvalidRequestError(
            f"group {group_id!r}: offset entry for a topic name of {len(topic)} characters "
            f"(the limit is {MAX_NAME_LENGTH})"
        )
    raise InvalidRequestError(
        f"group {group_id!r}: metadata for {topic}-{partition} must be a string, got {e[3]!r:.100}"
    )


# Upper bounds of what pickle protocol 2 (pysyncobj's) makes of our values, in bytes, from
# the length of their strings: a str is BINUNICODE (5 bytes + UTF-8) plus a memo put (at most
# 5); an int at most LONG1 with 9 bytes (11); a list or dict at most 8 around its items. The
# test checks them against real pickles (test_coordinator.py).
STR_BYTES = 10
# [topic, partition, offset(, metadata)] without the strings' own bytes.
ENTRY_BYTES = 8 + STR_BYTES + 11 + 11
# A commit_offsets argument dict without group_id's and member_id's own bytes: 5 keys.
COMMIT_BYTES = 8 + (8 + 9 + 10 + 7 + 6 + 5 * STR_BYTES) + 2 * STR_BYTES + 11 + 8 + 11
# reset_offsets' and leave_group's commands, without their entries and group id's bytes.
RESET_BYTES = BATCH_ENVELOPE_BYTES_MAX + 8 + (8 + 7 + 6 + 3 * STR_BYTES) + STR_BYTES + 8 + 11
LEAVE_BYTES = BATCH_ENVELOPE_BYTES_MAX + 8 + (8 + 10 + 2 * STR_BYTES) + STR_BYTES + 8


def str_bytes(value: str) -> int:
    """The UTF-8 size of `value` as pickle writes it (lone surrogates pass, 3 bytes each)."""
    return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))


def entry_bytes_max(offset_metadata_bytes_max: int) -> int:
    """The largest offset entry's size bound: the longest topic name and metadata."""
    return ENTRY_BYTES + MAX_NAME_LENGTH + STR_BYTES + offset_metadata_bytes_max


T_item = TypeVar("T_item")


def split_by_size(
    items: list[T_item], sizes: list[int], budget: int
) -> list[tuple[list[T_item], int]]:
    """`items` in order, cut into runs whose sizes sum to at most `budget` (at least one run,
    maybe empty); each run with its size."""
    pieces: list[tuple[list[T_item], int]] = []
    start = total = 0
    for i, size in enumerate(sizes):
        if size > budget:
            raise PolicyViolationError(
                f"one entry of {size} bytes does not fit a metadata command ({budget} bytes "
                "left for entries)"
            )
        if total + size > budget:
            pieces.append((items[start:i], total))
            start, total = i, 0
        total += size
    pieces.append((items[start:], total))
    return pieces


# A Kafka member's protocols ([name, metadata bytes], ...) in one join_group command, and a
# leader's assignments in one sync_group command, at most (their bytes as pickle writes them,
# bounded from the lengths as above): both must fit one Raft entry (quorum.COMMAND_BYTES_MAX,
# 1 MiB) with room for the rest of the command. Kafka's own bound is its message size (1 MiB).
KAFKA_PROTOCOLS_BYTES_MAX = 256 * 1024
KAFKA_ASSIGNMENTS_BYTES_MAX = 512 * 1024


def kafka_protocols(group_id: str, protocols: object) -> list[list[Any]]:
    """A Kafka JoinGroup's protocols as [[name, metadata bytes], ...], checked: at least one,
    names non-empty strings without repeats, metadata bytes, all within
    KAFKA_PROTOCOLS_BYTES_MAX (PolicyViolationError past it)."""
    if isinstance(protocols, str | bytes) or not isinstance(protocols, Sequence) or not protocols:
        raise InvalidRequestError(f"group {group_id!r}: a member must offer at least one protocol")
    out: list[list[Any]] = []
    size = 0
    for p in protocols:
        if not isinstance(p, Sequence) or len(p) != 2:
            raise InvalidRequestError(f"group {group_id!r}: a protocol is [name, metadata]")
        name = check_str("protocol name", p[0], empty_ok=False)
        if not isinstance(p[1], bytes | bytearray):
            raise InvalidRequestError(f"group {group_id!r}: protocol {name!r} metadata not bytes")
        out.append([name, bytes(p[1])])
        size += STR_BYTES + str_bytes(name) + 16 + len(p[1])
    if len({name for name, _ in out}) != len(out):
        raise InvalidRequestError(f"group {group_id!r}: a protocol name is offered twice")
    if size > KAFKA_PROTOCOLS_BYTES_MAX:
        raise PolicyViolationError(
            f"group {group_id!r}: the member's protocols take {size} bytes; the limit is "
            f"{KAFKA_PROTOCOLS_BYTES_MAX}"
        )
    return out


def kafka_assignments(group_id: str, assignments: object) -> list[list[Any]]:
    """A Kafka leader's SyncGroup assignments as [[member id, bytes, [[topic, partition], ...]],
    ...] (the bytes as sent, the partitions decoded from them), checked: member ids strings
    without repeats, partitions int32, all within KAFKA_ASSIGNMENTS_BYTES_MAX."""
    if isinstance(assignments, str | bytes) or not isinstance(assignments, Sequence):
        raise InvalidRequestError(f"group {group_id!r}: assignments must be a list")
    out: list[list[Any]] = []
    size = 0
    for a in assignments:
        if not isinstance(a, Sequence) or len(a) != 3 or not isinstance(a[1], bytes | bytearray):
            raise InvalidRequestError(
                f"group {group_id!r}: an assignment is [member id, bytes, partitions]"
            )
        member_id = check_str("member id", a[0])
        tps: list[list[Any]] = []
        for tp in a[2]:
            if (
                not isinstance(tp, Sequence)
                or len(tp) != 2
                or not isinstance(tp[0], str)
                or not is_int(tp[1])
                or not 0 <= tp[1] <= INT32_MAX
            ):
                raise InvalidRequestError(
                    f"group {group_id!r}: member {member_id!r} assigned {tp!r:.80}, not a "
                    "[topic, partition]"
                )
            tps.append([tp[0], tp[1]])
            size += STR_BYTES + str_bytes(tp[0]) + 11 + 8
        out.append([member_id, bytes(a[1]), tps])
        size += 2 * STR_BYTES + str_bytes(member_id) + len(a[1]) + 16
    if len({a[0] for a in out}) != len(out):
        raise InvalidRequestError(f"group {group_id!r}: a member is assigned twice")
    if size > KAFKA_ASSIGNMENTS_BYTES_MAX:
        raise PolicyViolationError(
            f"group {group_id!r}: the leader's assignments take {size} bytes; the limit is "
            f"{KAFKA_ASSIGNMENTS_BYTES_MAX}"
        )
    return out
