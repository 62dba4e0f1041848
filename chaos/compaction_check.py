"""The checker's rules for a compacted topic (cleanup.policy=compact): what a history proves
when the log may drop every record of a key but its last.

chaos/checker.py uses these in place of its offset-by-offset rules when the history's `run`
record says `compact` (the runner's `--compact`). Pure, like the checker: no clock, no I/O.

What compaction changes (docs/ARCHITECTURE.md, "Log compaction"): each replica's cleaner drops,
below the high watermark, a record whose key has a later record there; offsets never change, so
a compacted partition has gaps, and the replicas clean on their own schedules, so they hold
different subsets of the same log. Records are keyed; a record is [offset, value, key] in the
history, a tombstone's value "~" and its unique id (chaos/history.py). The runner's
delete.retention.ms (a day) outlasts every run, so a tombstone that is the last record of its
key stays like any last record, and these rules hold tombstones to the same standard.

What is exactly true, and so what each rule checks ("known" records: every acknowledged send
with an offset, every record a poll or the final read returned, every replica's record below
the high watermark):

- lost (per key, replacing the by-offset rule): for each partition and key, the acknowledged
  send with the highest offset must be returned by the final read, unless the final read
  returned a record of that key at a higher offset (a later write, acknowledged or not, that
  superseded it). The cleaner drops a record only for a later one of its key that is below the
  high watermark, so committed, and the last record of a key is never dropped. An acknowledged
  send superseded so may be missing (`compacted_away` counts those). Without a final read the
  same cases are `unseen` (polls may lag), reported but not invalidating.
- vanished: the same for records nobody acknowledged to us but that a poll returned or a
  replica held below the high watermark (so committed): for each key, the highest such offset
  must be met by a final-read record of the key at that offset or above. (With the delete
  policy such a loss shows as a skip in the final read; here skips are allowed, so this rule
  takes its place.)
- unsent_read: every record returned by a poll or the final read, or held by a replica, is one
  a producer sent: its value was sent, to that partition, with that key (a tombstone read as a
  value, or a value read as a tombstone, has a value nobody sent). A value read at another
  offset than its acknowledged one is `duplicated` / `inconsistent_offsets` (checker.py).
- stale_last_value: for each key, the final read's last record must not be older than an
  acknowledged write of the key: if its send was acknowledged before another acknowledged send
  of the key was invoked, that later send went to a higher offset and superseded it (the final
  read returning the older value last is a lost update even when offsets agree).
- poll_skip (replacing "a jump of more than one"): within one assignment a consumer's offsets
  still go up (nonmonotonic_poll is unchanged), and may jump, but only over records that were
  superseded: a jump over a known record whose key has no known record at a higher offset is a
  skip (a consumer cannot have missed it to compaction). The final read is held to the same.
- replica_divergence (replacing "every replica holds the same value at every offset"): where two
  replicas both hold an offset below the high watermark they hold the same value; and each ISR
  member holds, for each key, the key's last known record below the high watermark, at its
  offset (an ISR member has the log up to the high watermark, and no cleaner drops the last
  record of a key below it). A replica that has not cleaned keeps more: not an anomaly.

Figures for the report (`compaction`): keys and tombstones sent; acknowledged sends superseded
by a later record of their key in the final read, and of those the ones compacted away (not in
the final read); the longest run of missing offsets in each partition's final read; and, from
the replica reads, where each replica's last clean ended and how many cleans its node logged.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chaos.history import Op

if TYPE_CHECKING:
    from chaos.checker import ReplicaRead, Send

# A tombstone's value in the history: this prefix and the unique id its header carried.
TOMBSTONE_PREFIX = "~"
# Offsets listed per poll_skip case (the count of cases stays exact).
SKIPPED_LISTED_MAX = 8


@dataclass(frozen=True, slots=True)
class Keyed:
    """A record as a read or a replica returned it."""

    offset: int
    value: str
    key: str | None


def keyed(raw: Sequence[Sequence[Any]]) -> list[Keyed]:
    """[[offset, value, key], ...] (a record without a key: [offset, value])."""
    return [Keyed(int(r[0]), r[1], r[2] if len(r) > 2 else None) for r in raw]


def client_reads(ops: Sequence[Op]) -> list[tuple[Op, dict[str, list[Keyed]]]]:
    """Every ok poll and final read with its keyed records per partition, in history order."""
    return [
        (o, {tp: keyed(recs) for tp, recs in o.value.items()})
        for o in ops
        if o.type == "ok" and o.f in ("poll", "final-read")
    ]


def replica_records(ops: Sequence[Op]) -> list[tuple[int, str, list[Keyed]]]:
    """(node, tp, keyed records) of every replica read."""
    return [
        (int(o.get("node")), o.get("tp"), keyed(o.value or []))
        for o in ops
        if o.f == "replica-read" and o.type == "ok"
    ]


class Known:
    """Per partition, every key known at every offset (acknowledged sends, client reads,
    replicas below the high watermark), and each key's highest known offset."""

    def __init__(
        self,
        sends: Sequence[Send],
        reads: Sequence[tuple[Op, dict[str, list[Keyed]]]],
        replicas: Sequence[tuple[int, str, list[Keyed]]],
        hw: dict[str, int],
    ):
        self.keys_at: dict[str, dict[int, set[str | None]]] = defaultdict(lambda: defaultdict(set))
        for s in sends:
            if s.type == "ok" and s.offset is not None:
                self.keys_at[s.tp][s.offset].add(s.key)
        for _, by_tp in reads:
            for tp, recs in by_tp.items():
                for r in recs:
                    self.keys_at[tp][r.offset].add(r.key)
        for _, tp, recs in replicas:
            for r in recs:
                if r.offset < hw.get(tp, 0):
                    self.keys_at[tp][r.offset].add(r.key)
        self.last: dict[str, dict[str | None, int]] = defaultdict(dict)
        for tp, by_offset in self.keys_at.items():
            for offset, keys in by_offset.items():
                for k in keys:
                    if offset > self.last[tp].get(k, -1):
                        self.last[tp][k] = offset
        self.offsets = {tp: sorted(by_offset) for tp, by_offset in self.keys_at.items()}

    def unsuperseded_between(self, tp: str, low: int, high: int) -> list[int]:
        """Known offsets strictly between `low` and `high` holding a record whose key has no
        known record at a higher offset (a reader cannot have lost it to compaction)."""
        offsets = self.offsets.get(tp, [])
        lo, hi = bisect.bisect_right(offsets, low), bisect.bisect_left(offsets, high)
        last = self.last[tp]
        return [o for o in offsets[lo:hi] if any(last[k] <= o for k in self.keys_at[tp][o])]


def unsent_reads(
    ops: Sequence[Op],
    reads: Sequence[tuple[Op, dict[str, list[Keyed]]]],
    replicas: Sequence[tuple[int, str, list[Keyed]]],
) -> list[dict[str, Any]]:
    """Records whose value no send invoked, or invoked for another partition or key. Every
    invoked send counts, completed or not (a send still open when a history ends may be
    written)."""
    by_value: dict[str, tuple[str, str | None]] = {}
    for o in ops:
        if o.f == "send" and o.type == "invoke":
            by_value.setdefault(o.value, (o.get("tp"), o.get("key")))
    sources: list[tuple[str, str, list[Keyed]]] = [
        (o.process, tp, recs) for o, by_tp in reads for tp, recs in by_tp.items()
    ]
    sources += [(f"replica {node}", tp, recs) for node, tp, recs in replicas]
    found: dict[tuple[str, int, str, str | None], dict[str, Any]] = {}
    for source, tp, recs in sources:
        for r in recs:
            s = by_value.get(r.value)
            if s == (tp, r.key):
                continue
            place = (tp, r.offset, r.value, r.key)
            if place not in found:
                found[place] = {
                    "tp": tp,
                    "offset": r.offset,
                    "value": r.value,
                    "key": r.key,
                    "reader": source,
                    "sent": None if s is None else {"tp": s[0], "key": s[1]},
                }
    return [found[p] for p in sorted(found, key=lambda p: (p[0], p[1], p[2]))]


def _final(
    reads: Sequence[tuple[Op, dict[str, list[Keyed]]]],
) -> dict[str, list[Keyed]] | None:
    finals = [by_tp for o, by_tp in reads if o.f == "final-read"]
    if not finals:
        return None
    merged: dict[str, list[Keyed]] = defaultdict(list)
    for by_tp in finals:
        for tp, recs in by_tp.items():
            merged[tp].extend(recs)
    return merged


def _last_by_key(records: dict[str, list[Keyed]]) -> dict[str, dict[str | None, Keyed]]:
    out: dict[str, dict[str | None, Keyed]] = defaultdict(dict)
    for tp, recs in records.items():
        for r in recs:
            prev = out[tp].get(r.key)
            if prev is None or r.offset > prev.offset:
                out[tp][r.key] = r
    return out


def lost_and_unseen(
    sends: Sequence[Send], reads: Sequence[tuple[Op, dict[str, list[Keyed]]]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per partition and key: the acknowledged send with the highest offset, missing from the
    final read (lost) or, without one, from every read (unseen), with no record of its key
    read at a higher offset."""
    final = _final(reads)
    if final is not None:
        seen = final
    else:
        seen = defaultdict(list)
        for _, by_tp in reads:
            for tp, recs in by_tp.items():
                seen[tp].extend(recs)
    seen_values = {tp: {r.value for r in recs} for tp, recs in seen.items()}
    seen_last = _last_by_key(seen)
    latest: dict[tuple[str, str | None], Send] = {}
    for s in sends:
        if s.type != "ok" or s.offset is None:
            continue
        best = latest.get((s.tp, s.key))
        if best is None or (best.offset is not None and s.offset > best.offset):
            latest[(s.tp, s.key)] = s
    missing = []
    for (tp, key), s in sorted(latest.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        assert s.offset is not None
        if s.value in seen_values.get(tp, ()):
            continue
        later = seen_last.get(tp, {}).get(key)
        if later is not None and later.offset > s.offset:
            continue
        missing.append(
            {
                "tp": tp,
                "key": key,
                "value": s.value,
                "offset": s.offset,
                "process": s.process,
                "acknowledged_s": s.complete_time,
                "last_read_of_key": None if later is None else [later.offset, later.value],
            }
        )
    return (missing, []) if final is not None else ([], missing)


def vanished(
    reads: Sequence[tuple[Op, dict[str, list[Keyed]]]],
    replicas: Sequence[tuple[int, str, list[Keyed]]],
    hw: dict[str, int],
) -> list[dict[str, Any]]:
    """Per partition and key, the highest record a poll returned or a replica held below the
    high watermark must be met by a final-read record of the key at that offset or above."""
    final = _final(reads)
    if final is None:
        return []
    committed: dict[str, list[Keyed]] = defaultdict(list)
    for o, by_tp in reads:
        if o.f == "poll":
            for tp, recs in by_tp.items():
                committed[tp].extend(recs)
    for _, tp, recs in replicas:
        committed[tp].extend(r for r in recs if r.offset < hw.get(tp, 0))
    final_last = _last_by_key(final)
    cases = []
    for tp, by_key in sorted(_last_by_key(committed).items()):
        for key, r in sorted(by_key.items(), key=lambda kv: str(kv[0])):
            f = final_last.get(tp, {}).get(key)
            if f is None or f.offset < r.offset:
                cases.append(
                    {
                        "tp": tp,
                        "key": key,
                        "offset": r.offset,
                        "value": r.value,
                        "final_last": None if f is None else [f.offset, f.value],
                    }
                )
    return cases


def stale_last_values(
    sends: Sequence[Send], reads: Sequence[tuple[Op, dict[str, list[Keyed]]]]
) -> list[dict[str, Any]]:
    """Per partition and key, the final read's last record, if a producer's acknowledged send,
    must not have been acknowledged before another acknowledged send of the key was invoked."""
    final = _final(reads)
    if final is None:
        return []
    by_value = {s.value: s for s in sends}
    acked: dict[tuple[str, str | None], list[Send]] = defaultdict(list)
    for s in sends:
        if s.type == "ok":
            acked[(s.tp, s.key)].append(s)
    cases = []
    for tp, by_key in sorted(_last_by_key(final).items()):
        for key, r in sorted(by_key.items(), key=lambda kv: str(kv[0])):
            s = by_value.get(r.value)
            if s is None or s.type != "ok":
                continue
            later = [w for w in acked[(tp, key)] if w.invoke_time > s.complete_time]
            if later:
                w = min(later, key=lambda w: w.invoke_time)
                cases.append(
                    {
                        "tp": tp,
                        "key": key,
                        "final_last": [r.offset, r.value],
                        "acknowledged_s": s.complete_time,
                        "later_send": {
                            "value": w.value,
                            "offset": w.offset,
                            "invoked_s": w.invoke_time,
                        },
                    }
                )
    return cases


def replica_checks(
    replicas: Sequence[ReplicaRead],
    keyed_replicas: Sequence[tuple[int, str, list[Keyed]]],
    known: Known,
    hw: dict[str, int],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(replica_divergence, hw_above_isr_leo) for replicas that clean on their own."""
    isr_of: dict[str, set[int]] = defaultdict(set)
    leos: dict[str, dict[int, int]] = defaultdict(dict)
    for r in replicas:
        isr_of[r.tp].update(r.isr)
        leos[r.tp][r.node] = r.log_end_offset
    held: dict[str, dict[int, dict[int, Keyed]]] = defaultdict(dict)
    for node, tp, recs in keyed_replicas:
        held[tp][node] = {r.offset: r for r in recs if r.offset < hw.get(tp, 0)}
    divergence, hw_cases = [], []
    for tp in sorted(set(held) | set(isr_of)):
        nodes = held.get(tp, {})
        offsets = sorted(set().union(*(set(h) for h in nodes.values())))
        for offset in offsets:
            values = {n: h[offset].value for n, h in sorted(nodes.items()) if offset in h}
            if len(set(values.values())) > 1:
                divergence.append(
                    {"tp": tp, "offset": offset, "values": {str(n): v for n, v in values.items()}}
                )
        # Each key's last known record below the high watermark, which every ISR member holds.
        last_below: dict[str | None, int] = {}
        for offset, keys in known.keys_at.get(tp, {}).items():
            if offset < hw.get(tp, 0):
                for k in keys:
                    last_below[k] = max(last_below.get(k, -1), offset)
        for node in sorted(n for n in nodes if n in isr_of[tp]):
            h = nodes[node]
            missing = sorted((o, str(k)) for k, o in last_below.items() if o not in h)
            if missing:
                divergence.append(
                    {
                        "tp": tp,
                        "node": node,
                        "missing_last_records": [
                            {"offset": o, "key": k} for o, k in missing[:SKIPPED_LISTED_MAX]
                        ],
                        "missing": len(missing),
                    }
                )
        isr_leos = {n: e for n, e in leos[tp].items() if n in isr_of[tp]}
        if isr_leos and hw.get(tp, 0) > min(isr_leos.values()):
            hw_cases.append(
                {
                    "tp": tp,
                    "high_watermark": hw[tp],
                    "isr_log_end_offsets": {str(n): e for n, e in sorted(isr_leos.items())},
                }
            )
    return divergence, hw_cases


def figures(
    sends: Sequence[Send],
    reads: Sequence[tuple[Op, dict[str, list[Keyed]]]],
    replica_ops: Sequence[Op],
) -> dict[str, Any]:
    """The report's `compaction` entry (the module docstring)."""
    final = _final(reads) or {}
    final_values = {tp: {r.value for r in recs} for tp, recs in final.items()}
    final_last = _last_by_key(final)
    acked = [s for s in sends if s.type == "ok" and s.offset is not None]
    superseded = []
    for s in acked:
        f = final_last.get(s.tp, {}).get(s.key)
        if f is not None and s.offset is not None and f.offset > s.offset:
            superseded.append(s)
    compacted_away = [s for s in superseded if s.value not in final_values.get(s.tp, ())]
    gaps: dict[str, int] = {}
    for tp, recs in sorted(final.items()):
        offsets = sorted(r.offset for r in recs)
        gaps[tp] = max((b - a - 1 for a, b in itertools.pairwise([-1, *offsets])), default=0)
    cleaning = [
        {
            "node": o.get("node"),
            "tp": o.get("tp"),
            "cleaned_to": o.get("cleaned_to"),
            "cleans": o.get("cleans"),
        }
        for o in replica_ops
        if o.f == "replica-read" and o.type == "ok"
    ]
    counted = [c["cleans"] for c in cleaning if c["cleans"] is not None]
    return {
        "keys": len({(s.tp, s.key) for s in sends}),
        "tombstones_sent": sum(1 for s in sends if s.value.startswith(TOMBSTONE_PREFIX)),
        "tombstones_acknowledged": sum(1 for s in acked if s.value.startswith(TOMBSTONE_PREFIX)),
        "superseded": len(superseded),
        "compacted_away": len(compacted_away),
        "final_read_records": sum(len(recs) for recs in final.values()),
        "max_offset_gap": max(gaps.values(), default=0),
        "offset_gap_by_partition": gaps,
        "cleans": sum(counted) if counted else None,
        "replicas_cleaned": sum(1 for c in cleaning if c["cleaned_to"] is not None),
        "cleaning": cleaning,
    }
