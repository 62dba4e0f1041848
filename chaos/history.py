"""The chaos suite's history: every operation of a run, one JSON object per line (`history.jsonl`).

The model is Jepsen's: each client operation appears twice, once when it is invoked and once
when it completes, so the checker knows what was in flight when a fault struck. Lines are
written in the order the events happened; `time` is seconds since the run started (monotonic
clock), so a history is independent of the wall clock of the machine that recorded it.

Fields of every line:

    index    int   position in the file, 0-based (written by HistoryWriter)
    time     float seconds since the run started
    process  str   who did it: "producer-1", "consumer-2", "final-reader", "nemesis", "runner"
    type     str   invoke | ok | fail | info
                   ok = it happened; fail = it certainly did not happen;
                   info = indeterminate (a timeout, a lost connection): it may have happened
    f        str   what (below)
    id       int   pairs an invoke with its completion; unique in the run

The operations (`f`), and what their other fields hold:

    send        tp: "topic-partition"; value: str, unique in the run;
                offset: int (ok only: the offset the broker acknowledged), or null when the
                client acknowledged the send without one (librdkafka's "implicit ack": a
                later batch of the same idempotent producer succeeded, so this one is in
                the log, at an offset it never learned)
    poll        value: {tp: [[offset, value], ...]} (ok only), group: str
    commit      group: str; value: {tp: offset} (the next offset to consume, as Kafka commits)
    assign      group: str; value: [tp, ...]: the consumer's assignment from now on (a new
                assignment starts a new run of polls for the monotonic and skip checks)
    final-read  value: {tp: [[offset, value], ...]}: every partition read from offset 0 to its
                end after the faults were healed
    replica-read  node: int; tp; value: [[offset, value], ...] read from that replica's files on
                disk; high_watermark, log_end_offset: int; isr: [node, ...] (the partition's
                ISR when it was read)
    fault       process "nemesis": invoke when the fault starts, ok when it is healed;
                value: the FaultSpec as a dict (chaos.faults.FaultSpec.to_json)
    run         process "runner", type info, once at the start: value: {"seed": int,
                "compact": bool, ...}

A compacted run (`compact` true: the topic has cleanup.policy=compact) records keys: each
send carries `key: str`, and every record of a poll, the final read and a replica read is
[offset, value, key] (key null for a record without one). A tombstone (a null value) is
recorded as "~" followed by the unique value its `id` header carries, for its send and every
read of it; no producer sends a value starting with "~".

Rules: a completion has the `id` of an earlier invoke of the same process; values are strings
(the runner writes unique strings, and the replica reader decodes what it read from disk the
same way); offsets are ints >= 0 (an ok send's may be null, above). `read_history` checks
these and names the file and line of anything wrong.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

TYPES = ("invoke", "ok", "fail", "info")
FUNCTIONS = ("send", "poll", "commit", "assign", "final-read", "replica-read", "fault", "run")
# Fields every line has; everything else is carried in `extra` and written back unchanged.
_CORE = ("index", "time", "process", "type", "f", "id", "value")


class HistoryError(ValueError):
    """A history line is not valid JSON or breaks the format's rules (file and line named).

    Not a RaftlogError: those carry wire codes that must stay unique, and a history never
    travels on the wire. A ValueError, so the CLI reports it as bad input in one line."""


@dataclass(frozen=True, slots=True)
class Op:
    """One line of the history. `extra` holds the operation's own fields (tp, offset, ...)."""

    process: str
    type: str
    f: str
    time: float
    id: int = -1
    value: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    index: int = -1

    def get(self, key: str, default: Any = None) -> Any:
        return self.extra.get(key, default)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "index": self.index,
            "time": self.time,
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "id": self.id,
        }
        if self.value is not None:
            d["value"] = self.value
        d.update(self.extra)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Op:
        return cls(
            process=d["process"],
            type=d["type"],
            f=d["f"],
            time=float(d["time"]),
            id=int(d.get("id", -1)),
            value=d.get("value"),
            extra={k: v for k, v in d.items() if k not in _CORE},
            index=int(d.get("index", -1)),
        )


def op(
    process: str, type: str, f: str, time: float, id: int = -1, value: Any = None, **extra: Any
) -> Op:
    """An Op with its operation fields as keyword arguments (tp=, offset=, group=, ...)."""
    return Op(process, type, f, time, id, value, extra)


class HistoryWriter:
    """Appends operations to `history.jsonl`, one flushed line each, numbering them.

    Thread-safe: a workload's clients may record from several threads. Each line is written
    with one `write` call, so a reader of a live file never sees half a line from two writers.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file: TextIO = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()
        self._next_index = 0

    def write(self, operation: Op) -> Op:
        with self._lock:
            d = operation.to_json()
            d["index"] = self._next_index
            self._next_index += 1
            self._file.write(json.dumps(d, separators=(",", ":"), sort_keys=True) + "\n")
            self._file.flush()
            return Op.from_json(d)

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_history(path: str | Path, ops: Iterable[Op]) -> None:
    with HistoryWriter(path) as w:
        for o in ops:
            w.write(o)


# Records the runner writes once, without an invoke (id -1): the run's parameters, a consumer's
# new assignment, the reads made after the workload.
STANDALONE = ("run", "assign", "final-read", "replica-read")


def _check(o: Op, where: str, invoked: dict[int, Op]) -> None:
    if o.type not in TYPES:
        raise HistoryError(f"{where}: type {o.type!r} is not one of {', '.join(TYPES)}")
    if o.f not in FUNCTIONS:
        raise HistoryError(f"{where}: f {o.f!r} is not one of {', '.join(FUNCTIONS)}")
    if o.type == "invoke":
        if o.id < 0:
            raise HistoryError(f"{where}: an invoke needs an id >= 0, got {o.id}")
        if o.id in invoked:
            raise HistoryError(f"{where}: id {o.id} invoked twice")
        invoked[o.id] = o
    elif o.id < 0:
        if o.f not in STANDALONE:
            raise HistoryError(f"{where}: a {o.f} completion needs the id of its invoke")
    else:
        inv = invoked.get(o.id)
        if inv is None:
            raise HistoryError(f"{where}: completion of id {o.id}, which was never invoked")
        if (inv.process, inv.f) != (o.process, o.f):
            raise HistoryError(
                f"{where}: id {o.id} invoked as {inv.f} by {inv.process}, "
                f"completed as {o.f} by {o.process}"
            )
    if o.f == "send" and o.type == "ok":
        offset = o.get("offset")
        if offset is not None and (not isinstance(offset, int) or offset < 0):
            raise HistoryError(
                f"{where}: an ok send's offset is an int >= 0 or null, got {offset!r}"
            )
    if o.f in ("send", "replica-read") and not isinstance(o.get("tp"), str):
        raise HistoryError(f"{where}: {o.f} needs a tp string, got {o.get('tp')!r}")
    if o.f in ("poll", "final-read") and o.type == "ok" and not isinstance(o.value, dict):
        raise HistoryError(f"{where}: an ok {o.f} needs value {{tp: [[offset, value], ...]}}")


def iter_history(path: str | Path) -> Iterator[Op]:
    """The operations of a history file, checked line by line; HistoryError names the line."""
    invoked: dict[int, Op] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise HistoryError(f"{where}: not JSON: {e}") from None
            if not isinstance(d, dict):
                raise HistoryError(f"{where}: expected a JSON object, got {type(d).__name__}")
            try:
                o = Op.from_json(d)
            except (KeyError, TypeError, ValueError) as e:
                raise HistoryError(f"{where}: missing or bad field {e}") from None
            _check(o, where, invoked)
            yield o


def read_history(path: str | Path) -> list[Op]:
    return list(iter_history(path))
