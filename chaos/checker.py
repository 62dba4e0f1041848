"""The history checker: what a chaos run's history proves about raftlog's promises.

A pure function of the history (chaos/history.py): no clock, no I/O, no randomness, so a saved
history checks the same way every time (`raftlog chaos check DIR/history.jsonl`). The anomaly
names and definitions are Jepsen's (jepsen.tests.kafka), adapted where raftlog is simpler:
raftlog's offsets are consecutive (no transaction markers take an offset), so polls and sends
are compared by offset where Jepsen compares positions in its inferred version order.

The version order of a partition is, for each offset, the set of values anyone saw there: the
offsets of acknowledged sends, every record a poll or the final read returned, and every record
of a replica's log below the high watermark. From it:

- inconsistent_offsets: one offset of a partition holding two or more values.
- duplicated: one value at two or more (partition, offset) places.
- lost: an acknowledged send that no read returned, although some read returned a value placed
  later in the same partition (Jepsen's lost-write: the reader went past it).
- unseen: an acknowledged send that no read returned, and no read went past it. With a final
  read of every partition (the runner makes one after healing) this is a loss at the tail, so
  it invalidates the history; without a final read it is only reported (readers may lag).
- aborted_read: a read returned a value whose send failed (a `fail` must mean "not written").
- nonmonotonic_send: per producer and partition, in the order the producer invoked its sends,
  the acknowledged offsets must increase.
- An acknowledged send without an offset (librdkafka's implicit ack: a later batch of the same
  idempotent producer succeeded first) is checked as acknowledged: lost or unseen if no read
  returned it, duplicated if two places hold it; only the checks by offset (the version order
  of its own offset, nonmonotonic_send) cannot look at it. `acknowledged_without_offset`
  counts them.
- nonmonotonic_poll, poll_skip: per consumer and partition, within one assignment (an `assign`
  starts a new one), each poll's offsets must continue exactly where the previous records left
  off: a step back or a repeat is nonmonotonic, a jump of more than one is a skip. The same
  holds inside one poll and inside the final read.
- committed_offset_regressions: per group and partition, an acknowledged commit invoked after
  another acknowledged commit had completed must not commit a lower offset.
- replica_divergence: below the high watermark every replica holds the same value at each
  offset, and every ISR member holds every offset.
- hw_above_isr_leo: the high watermark must not exceed the log end offset of any ISR member.
- availability: the longest time without an acknowledged send, over the whole workload and
  within each fault's window (Redpanda's chaos suite measures unavailability this way); and per
  partition over the workload (`max_partition_unavailability_s`): one partition without a
  quorum while the others go on shows only there.

A compacted topic (the history's `run` record says `compact`): the log keeps only the last
record of each key, so a partition has gaps and replicas hold different subsets. Then lost,
unseen, poll_skip and replica_divergence follow chaos/compaction_check.py's per-key rules, which
add vanished, unsent_read and stale_last_value, and the report's `compaction` holds its figures;
the rest above holds as written. The report's `mode` says which ("delete" or "compacted").

Rules: the report's top-level anomaly entries are counts; `anomalies` holds the cases, at most
`examples_max` of each kind (the counts are always exact); `valid` is true only when every
count that invalidates is zero and, if the workload sent anything, something was acknowledged.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from chaos import compaction_check
from chaos.history import Op

# A report lists this many cases of each anomaly; the counts stay exact. Enough to debug from,
# small enough that report.json of a bad 10-minute run stays readable.
EXAMPLES_MAX = 32

# Anomalies that make a history invalid whenever they occur.
INVALIDATING = (
    "lost",
    "duplicated",
    "inconsistent_offsets",
    "aborted_read",
    "nonmonotonic_send",
    "nonmonotonic_poll",
    "poll_skip",
    "committed_offset_regressions",
    "replica_divergence",
    "hw_above_isr_leo",
)
# The compacted mode's own anomalies (chaos/compaction_check.py), invalidating too.
COMPACTED_INVALIDATING = ("vanished", "unsent_read", "stale_last_value")


@dataclass(frozen=True, slots=True)
class Send:
    """A completed send, with the time and position of its invoke."""

    process: str
    tp: str
    value: str
    type: str
    offset: int | None
    invoke_index: int
    invoke_time: float
    complete_time: float
    # The record's key (a compacted run's sends have one; chaos/compaction_check.py).
    key: str | None = None


@dataclass(frozen=True, slots=True)
class ReplicaRead:
    node: int
    tp: str
    records: list[tuple[int, str]]
    high_watermark: int
    log_end_offset: int
    isr: list[int]


def _records(raw: Iterable[Any]) -> list[tuple[int, str]]:
    """(offset, value) of [[offset, value], ...] or of a compacted run's [[offset, value, key],
    ...] (the keys are compaction_check.py's)."""
    return [(int(r[0]), r[1]) for r in raw]


def _pair(ops: Sequence[Op]) -> list[tuple[Op, Op]]:
    """(invoke, completion) for every completed operation, in completion order."""
    invokes: dict[int, Op] = {}
    pairs = []
    for o in ops:
        if o.type == "invoke":
            invokes[o.id] = o
        elif o.id >= 0 and o.id in invokes:
            pairs.append((invokes[o.id], o))
    return pairs


def _sends(pairs: Sequence[tuple[Op, Op]]) -> list[Send]:
    return [
        Send(
            process=c.process,
            tp=c.get("tp", i.get("tp")),
            value=c.value if c.value is not None else i.value,
            type=c.type,
            offset=c.get("offset") if c.type == "ok" else None,
            invoke_index=i.index,
            invoke_time=i.time,
            complete_time=c.time,
            key=c.get("key", i.get("key")),
        )
        for i, c in pairs
        if c.f == "send"
    ]


def _client_reads(ops: Sequence[Op]) -> list[tuple[Op, dict[str, list[tuple[int, str]]]]]:
    """Every ok poll and final read with its records per partition, in history order."""
    return [
        (o, {tp: _records(recs) for tp, recs in o.value.items()})
        for o in ops
        if o.type == "ok" and o.f in ("poll", "final-read")
    ]


def _replica_reads(ops: Sequence[Op]) -> list[ReplicaRead]:
    return [
        ReplicaRead(
            node=int(o.get("node")),
            tp=o.get("tp"),
            records=_records(o.value or []),
            high_watermark=int(o.get("high_watermark")),
            log_end_offset=int(o.get("log_end_offset")),
            isr=[int(n) for n in o.get("isr", [])],
        )
        for o in ops
        if o.f == "replica-read" and o.type == "ok"
    ]


def _high_watermarks(replicas: Sequence[ReplicaRead]) -> dict[str, int]:
    hw: dict[str, int] = {}
    for r in replicas:
        hw[r.tp] = max(hw.get(r.tp, 0), r.high_watermark)
    return hw


# -- the version order ------------------------------------------------------------------------


def version_order(
    sends: Sequence[Send],
    reads: Sequence[tuple[Op, dict[str, list[tuple[int, str]]]]],
    replicas: Sequence[ReplicaRead],
) -> dict[str, dict[int, set[str]]]:
    """tp -> offset -> every value seen there (acknowledged sends, reads, replicas below HW)."""
    log: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for s in sends:
        if s.type == "ok" and s.offset is not None:
            log[s.tp][s.offset].add(s.value)
    for _, by_tp in reads:
        for tp, recs in by_tp.items():
            for offset, value in recs:
                log[tp][offset].add(value)
    hw = _high_watermarks(replicas)
    for r in replicas:
        for offset, value in r.records:
            if offset < hw[r.tp]:
                log[r.tp][offset].add(value)
    return log


def inconsistent_offsets(log: dict[str, dict[int, set[str]]]) -> list[dict[str, Any]]:
    return [
        {"tp": tp, "offset": offset, "values": sorted(values)}
        for tp in sorted(log)
        for offset, values in sorted(log[tp].items())
        if len(values) > 1
    ]


def duplicated(log: dict[str, dict[int, set[str]]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    twice: set[str] = set()
    for by_offset in log.values():
        for values in by_offset.values():
            twice.update(values & seen)
            seen.update(values)
    places: dict[str, list[list[Any]]] = defaultdict(list)
    for tp in sorted(log):
        for offset, values in sorted(log[tp].items()):
            for v in values & twice:
                places[v].append([tp, offset])
    return [{"value": v, "places": places[v]} for v in sorted(twice)]


def lost_and_unseen(
    sends: Sequence[Send],
    reads: Sequence[tuple[Op, dict[str, list[tuple[int, str]]]]],
    log: dict[str, dict[int, set[str]]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Jepsen's lost-write and unseen, per partition.

    Positions are indices into the partition's offsets that anyone saw (dense, sorted). A
    value's first position bounds how far a reader that returned it got; a value must have
    been read if its last position is at or before the furthest position any reader reached.
    """
    read_values: dict[str, set[str]] = defaultdict(set)
    for _, records in reads:
        for tp, recs in records.items():
            read_values[tp].update(v for _, v in recs)
    all_read = set().union(*read_values.values()) if read_values else set()
    lost, unseen = [], []
    acked = [s for s in sends if s.type == "ok"]
    sends_of: dict[str, list[Send]] = defaultdict(list)
    for s in acked:
        sends_of[s.tp].append(s)
    for tp, tp_sends in sorted(sends_of.items()):
        offsets = sorted(log.get(tp, {}))
        first_pos: dict[str, int] = {}
        last_pos: dict[str, int] = {}
        for pos, offset in enumerate(offsets):
            for v in log[tp][offset]:
                first_pos.setdefault(v, pos)
                last_pos[v] = pos
        bound = max((first_pos[v] for v in read_values.get(tp, ()) if v in first_pos), default=-1)
        max_read_offset = offsets[bound] if bound >= 0 else None
        for s in sorted(tp_sends, key=lambda s: (s.offset or 0, s.value)):
            if s.value in all_read:
                continue
            case = {
                "tp": tp,
                "value": s.value,
                "offset": s.offset,
                "process": s.process,
                "acknowledged_s": s.complete_time,
            }
            if last_pos.get(s.value, len(offsets)) <= bound:
                lost.append({**case, "max_read_offset": max_read_offset})
            else:
                unseen.append(case)
    return lost, unseen


def aborted_reads(
    sends: Sequence[Send], reads: Sequence[tuple[Op, dict[str, list[tuple[int, str]]]]]
) -> list[dict[str, Any]]:
    failed = {s.value: s for s in sends if s.type == "fail"}
    found: dict[str, dict[str, Any]] = {}
    for o, by_tp in reads:
        for tp, recs in by_tp.items():
            for offset, v in recs:
                if v in failed and v not in found:
                    found[v] = {"tp": tp, "offset": offset, "value": v, "reader": o.process}
    return [found[v] for v in sorted(found)]


def nonmonotonic_sends(sends: Sequence[Send]) -> list[dict[str, Any]]:
    by_key: dict[tuple[str, str], list[Send]] = defaultdict(list)
    for s in sends:
        if s.type == "ok" and s.offset is not None:
            by_key[(s.process, s.tp)].append(s)
    cases = []
    for (process, tp), ss in sorted(by_key.items()):
        ss.sort(key=lambda s: s.invoke_index)
        for a, b in itertools.pairwise(ss):
            assert a.offset is not None and b.offset is not None
            if b.offset <= a.offset:
                cases.append(
                    {
                        "process": process,
                        "tp": tp,
                        "values": [a.value, b.value],
                        "offsets": [a.offset, b.offset],
                    }
                )
    return cases


def poll_order(
    ops: Sequence[Op],
    reads: Sequence[tuple[Op, dict[str, list[tuple[int, str]]]]],
    jumped_over: Callable[[str, int, int], list[int]] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(nonmonotonic_poll, poll_skip), per process and partition within one assignment.

    A jump of more than one offset is a skip; with `jumped_over` (a compacted log, whose gaps
    are allowed) only if it names offsets in the jump that must not have been jumped over."""
    records_of = {id(o): by_tp for o, by_tp in reads}
    last: dict[str, dict[str, tuple[int, str]]] = defaultdict(dict)  # process -> tp -> last
    nonmonotonic, skips = [], []
    for o in ops:
        if o.type != "ok":
            continue
        if o.f == "assign":
            last[o.process] = {}
            continue
        if id(o) not in records_of:
            continue
        seen = last[o.process]
        for tp, recs in sorted(records_of[id(o)].items()):
            prev = seen.get(tp)
            for offset, value in recs:
                if prev is not None:
                    delta = offset - prev[0]
                    case = {
                        "process": o.process,
                        "tp": tp,
                        "offsets": [prev[0], offset],
                        "values": [prev[1], value],
                        "index": o.index,
                    }
                    if delta < 1:
                        nonmonotonic.append(case)
                    elif delta > 1 and jumped_over is None:
                        skips.append(case)
                    elif delta > 1 and jumped_over is not None:
                        missed = jumped_over(tp, prev[0], offset)
                        if missed:
                            skips.append({**case, "jumped_over": missed[:8], "count": len(missed)})
                prev = (offset, value)
            if prev is not None:
                seen[tp] = prev
    return nonmonotonic, skips


def commit_regressions(pairs: Sequence[tuple[Op, Op]]) -> list[dict[str, Any]]:
    commits: dict[tuple[str, str], list[tuple[float, float, int, int]]] = defaultdict(list)
    for inv, done in pairs:
        if done.f == "commit" and done.type == "ok":
            group = done.get("group", inv.get("group"))
            value = done.value if done.value is not None else inv.value
            for tp, offset in value.items():
                commits[(group, tp)].append((inv.time, done.time, int(offset), done.id))
    cases = []
    for (group, tp), cs in sorted(commits.items()):
        by_completion = sorted(cs, key=lambda c: c[1])
        completions = [c[1] for c in by_completion]
        # best[k]: the commit with the highest offset among the first k+1 to complete.
        best: list[tuple[float, float, int, int]] = []
        top: tuple[float, float, int, int] | None = None
        for c in by_completion:
            if top is None or c[2] > top[2]:
                top = c
            best.append(top)
        for invoke_time, _, offset, op_id in sorted(cs):
            k = bisect.bisect_left(completions, invoke_time) - 1
            if k >= 0 and best[k][2] > offset:
                cases.append(
                    {
                        "group": group,
                        "tp": tp,
                        "offset": offset,
                        "id": op_id,
                        "previous_offset": best[k][2],
                        "previous_id": best[k][3],
                    }
                )
    return cases


def replica_checks(
    replicas: Sequence[ReplicaRead],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(replica_divergence, hw_above_isr_leo)."""
    hw = _high_watermarks(replicas)
    by_tp: dict[str, list[ReplicaRead]] = defaultdict(list)
    for r in replicas:
        by_tp[r.tp].append(r)
    divergence, hw_cases = [], []
    for tp, rs in sorted(by_tp.items()):
        isr = set().union(*(r.isr for r in rs))
        held = {r.node: dict(r.records) for r in rs}
        for offset in range(hw[tp]):
            values = {node: recs.get(offset) for node, recs in sorted(held.items())}
            present = {v for v in values.values() if v is not None}
            missing = [n for n, v in values.items() if v is None and n in isr]
            if len(present) > 1 or missing:
                divergence.append(
                    {"tp": tp, "offset": offset, "values": {str(n): v for n, v in values.items()}}
                )
        leos = {r.node: r.log_end_offset for r in rs if r.node in isr}
        if leos and hw[tp] > min(leos.values()):
            hw_cases.append(
                {
                    "tp": tp,
                    "high_watermark": hw[tp],
                    "isr_log_end_offsets": {str(n): e for n, e in sorted(leos.items())},
                }
            )
    return divergence, hw_cases


# -- availability ------------------------------------------------------------------------------


def _longest_gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest interval of [start, end] that contains none of `times` (sorted)."""
    inside = [t for t in times if start < t < end]
    points = [start, *inside, end]
    return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


def faults(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """Each fault with the times it started and was healed (None if the history ends first)."""
    started: dict[int, dict[str, Any]] = {}
    for o in ops:
        if o.f != "fault":
            continue
        if o.type == "invoke":
            started[o.id] = {**(o.value or {}), "started_s": o.time, "healed_s": None}
        elif o.id in started:
            started[o.id]["healed_s"] = o.time
            # What the injector found or did (a toxic's effect, the damage it wrote, ...).
            if isinstance(o.value, dict) and "result" in o.value:
                started[o.id]["result"] = o.value["result"]
            if o.get("error") is not None:
                started[o.id]["error"] = o.get("error")
    return [started[k] for k in sorted(started, key=lambda k: started[k]["started_s"])]


def availability(
    sends: Sequence[Send], fault_list: list[dict[str, Any]]
) -> tuple[float, list[dict[str, Any]]]:
    """The longest time without an acknowledged send: over the workload, and per fault.

    The workload spans from the first send's invoke to the last send's completion. A fault's
    window runs from its start to its healing (or the workload's end); the gap measured for it
    is the longest one that overlaps the window, so it counts from the last acknowledgement
    before the fault to the first one after it.
    """
    if not sends:
        return 0.0, [{**f, "max_unavailability_s": None} for f in fault_list]
    start = min(s.invoke_time for s in sends)
    end = max(s.complete_time for s in sends)
    acks = sorted(s.complete_time for s in sends if s.type == "ok")
    overall = _longest_gap(acks, start, end)
    per_fault = []
    for f in fault_list:
        f_start = f["started_s"]
        f_end = f["healed_s"] if f["healed_s"] is not None else end
        before = [t for t in acks if t <= f_start]
        after = [t for t in acks if t >= f_end]
        lo = before[-1] if before else start
        hi = after[0] if after else end
        per_fault.append({**f, "max_unavailability_s": round(_longest_gap(acks, lo, hi), 6)})
    return round(overall, 6), per_fault


def partition_availability(sends: Sequence[Send]) -> dict[str, float]:
    """Per partition, the longest time without an acknowledged send to it, over the workload.
    The overall figure hides a partition that stays unwritable while the others go on; this
    shows it. Only partitions that something was sent to are listed, each from its first send
    (a partition added mid-run, by a `reassign` fault's growth, is measured from then)."""
    if not sends:
        return {}
    end = max(s.complete_time for s in sends)
    acks: dict[str, list[float]] = {}
    first: dict[str, float] = {}
    for s in sends:
        times = acks.setdefault(s.tp, [])  # listed even if none of its sends was acknowledged
        first[s.tp] = min(first.get(s.tp, s.invoke_time), s.invoke_time)
        if s.type == "ok":
            times.append(s.complete_time)
    return {
        tp: round(_longest_gap(sorted(ts), first[tp], end), 6) for tp, ts in sorted(acks.items())
    }


# -- the report --------------------------------------------------------------------------------


def check(ops: Sequence[Op], examples_max: int = EXAMPLES_MAX) -> dict[str, Any]:
    """Check a history; the report's keys are documented in the module docstring."""
    indices = [o.index for o in ops]
    if min(indices, default=0) >= 0 and indices != sorted(indices):
        ops = sorted(ops, key=lambda o: o.index)
    pairs = _pair(ops)
    sends = _sends(pairs)
    reads = _client_reads(ops)
    replicas = _replica_reads(ops)
    log = version_order(sends, reads, replicas)

    run = next((o.value for o in ops if o.f == "run"), None) or {}
    compacted = bool(run.get("compact"))

    anomalies: dict[str, list[dict[str, Any]]] = {}
    anomalies["duplicated"] = duplicated(log)
    anomalies["inconsistent_offsets"] = inconsistent_offsets(log)
    anomalies["aborted_read"] = aborted_reads(sends, reads)
    anomalies["nonmonotonic_send"] = nonmonotonic_sends(sends)
    anomalies["committed_offset_regressions"] = commit_regressions(pairs)
    compaction: dict[str, Any] | None = None
    if compacted:
        # The per-key rules of a compacted log (chaos/compaction_check.py's docstring).
        cc = compaction_check
        hw = _high_watermarks(replicas)
        keyed_reads = cc.client_reads(ops)
        keyed_replicas = cc.replica_records(ops)
        known = cc.Known(sends, keyed_reads, keyed_replicas, hw)
        anomalies["lost"], anomalies["unseen"] = cc.lost_and_unseen(sends, keyed_reads)
        anomalies["vanished"] = cc.vanished(keyed_reads, keyed_replicas, hw)
        anomalies["unsent_read"] = cc.unsent_reads(ops, keyed_reads, keyed_replicas)
        anomalies["stale_last_value"] = cc.stale_last_values(sends, keyed_reads)
        anomalies["nonmonotonic_poll"], anomalies["poll_skip"] = poll_order(
            ops, reads, known.unsuperseded_between
        )
        anomalies["replica_divergence"], anomalies["hw_above_isr_leo"] = cc.replica_checks(
            replicas, keyed_replicas, known, hw
        )
        compaction = cc.figures(sends, keyed_reads, ops)
    else:
        anomalies["lost"], anomalies["unseen"] = lost_and_unseen(sends, reads, log)
        anomalies["nonmonotonic_poll"], anomalies["poll_skip"] = poll_order(ops, reads)
        anomalies["replica_divergence"], anomalies["hw_above_isr_leo"] = replica_checks(replicas)

    fault_list = faults(ops)
    max_unavailability_s, fault_report = availability(sends, fault_list)
    has_final_read = any(o.f == "final-read" and o.type == "ok" for o in ops)
    acknowledged = sum(1 for s in sends if s.type == "ok")
    send_invokes = sum(1 for o in ops if o.f == "send" and o.type == "invoke")

    invalid = [k for k in (*INVALIDATING, *COMPACTED_INVALIDATING) if anomalies.get(k)]
    if has_final_read and anomalies["unseen"]:
        invalid.append("unseen")
    if send_invokes and not acknowledged:
        invalid.append("nothing_acknowledged")

    report: dict[str, Any] = {
        "valid": not invalid,
        "invalid_because": invalid,
        "seed": run.get("seed"),
        # Which rules checked it: "delete" (offset by offset) or "compacted" (per key).
        "mode": "compacted" if compacted else "delete",
        "sends": send_invokes,
        "acknowledged": acknowledged,
        "acknowledged_without_offset": sum(1 for s in sends if s.type == "ok" and s.offset is None),
        "failed": sum(1 for s in sends if s.type == "fail"),
        "indeterminate": sum(1 for s in sends if s.type == "info"),
        "final_read": has_final_read,
    }
    for kind, cases in anomalies.items():
        report[kind] = len(cases)
    report["max_unavailability_s"] = max_unavailability_s
    by_partition = partition_availability(sends)
    report["max_partition_unavailability_s"] = max(by_partition.values(), default=0.0)
    report["partition_unavailability_s"] = by_partition
    report["faults"] = fault_report
    if compaction is not None:
        report["compaction"] = compaction
    report["anomalies"] = {k: v[:examples_max] for k, v in anomalies.items() if v}
    return report
