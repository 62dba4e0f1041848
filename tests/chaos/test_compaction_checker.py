"""The checker's compacted mode (chaos/compaction_check.py): hand-built histories of a compacted
topic, clean ones that must stay valid across gaps and cleaned replicas, and one per rule that
must fail (a lost last write, an older value read last, replicas that differ at an offset, a
read of a value never sent, a consumer that jumped over a key's last record, ...)."""

from __future__ import annotations

from typing import Any

from chaos.checker import COMPACTED_INVALIDATING, INVALIDATING, check
from tests.chaos._histories import HistoryBuilder

TP = "t-0"
ANOMALIES = (*INVALIDATING, *COMPACTED_INVALIDATING, "unseen")


def counts(report: dict[str, Any]) -> dict[str, int]:
    """Every anomaly count that is not zero."""
    return {k: report[k] for k in ANOMALIES if report.get(k)}


# The log the tests start from: two keys written twice each; offset 3 is a tombstone of k2.
#   0 k1 a   1 k2 b   2 k1 c   3 k2 ~d (tombstone)
# Compacted, it keeps offsets 2 and 3 (0 and 1 are superseded).
LOG = [(0, "a", "k1"), (1, "b", "k2"), (2, "c", "k1"), (3, "~d", "k2")]
CLEANED = [LOG[2], LOG[3]]


def written(h: HistoryBuilder, log: list[tuple[int, str, str]] = LOG) -> None:
    for offset, value, key in log:
        h.send("p1", TP, value, offset, key=key)


def replicas(h: HistoryBuilder, held: dict[int, list[tuple[int, str, str]]], hw: int = 4) -> None:
    for node, records in held.items():
        h.replica(node, TP, records, hw=hw, leo=hw, isr=[1, 2, 3])


def test_a_compacted_history_with_gaps_and_cleaned_replicas_is_valid() -> None:
    h = HistoryBuilder(seed=5, compact=True)
    written(h)
    h.poll("c1", {TP: [LOG[0]]})
    h.poll("c1", {TP: [LOG[2], LOG[3]]})  # jumps over offset 1: k2's b, superseded at 3
    h.commit("c1", {TP: 4})
    h.final_read({TP: CLEANED})
    # Node 1 cleaned, node 2 did not, node 3 cleaned only k1.
    replicas(h, {1: CLEANED, 2: LOG, 3: [LOG[1], LOG[2], LOG[3]]})
    report = check(h.ops)
    assert report["valid"], report
    assert counts(report) == {}
    assert report["mode"] == "compacted"
    c = report["compaction"]
    assert (c["superseded"], c["compacted_away"]) == (2, 2)
    assert c["max_offset_gap"] == 2 and c["offset_gap_by_partition"] == {TP: 2}
    assert c["tombstones_acknowledged"] == 1 and c["keys"] == 2


def test_the_same_gaps_under_the_delete_rules_are_loss_and_a_skip() -> None:
    """Without `compact` in the run record the checker keeps the offset-by-offset rules."""
    h = HistoryBuilder(seed=5)
    written(h)
    h.final_read({TP: CLEANED})
    report = check(h.ops)
    assert report["mode"] == "delete" and "compaction" not in report
    assert not report["valid"]
    assert report["lost"] == 2


def test_a_lost_last_write_is_found() -> None:
    h = HistoryBuilder(seed=1, compact=True)
    written(h)
    h.final_read({TP: [LOG[0], LOG[3]]})  # k1's last write (c at 2) is gone; a came back
    report = check(h.ops)
    assert not report["valid"]
    assert "lost" in report["invalid_because"]
    [case] = report["anomalies"]["lost"]
    assert (case["key"], case["value"], case["offset"]) == ("k1", "c", 2)
    assert case["last_read_of_key"] == [0, "a"]
    # a was acknowledged before c was sent: the final read's last k1 is also stale.
    assert report["stale_last_value"] == 1


def test_a_key_missing_altogether_is_lost() -> None:
    h = HistoryBuilder(seed=1, compact=True)
    written(h)
    h.final_read({TP: [LOG[2]]})  # no k2 at all: its tombstone, its last record, is gone
    report = check(h.ops)
    assert [c["value"] for c in report["anomalies"]["lost"]] == ["~d"]
    assert not report["valid"]


def test_an_older_value_read_last_is_stale() -> None:
    """k1 = a was acknowledged, then k1 = b was sent and acknowledged at a LOWER offset: the
    final read ends with a at 5, consistent by offset, but the later write lost."""
    h = HistoryBuilder(seed=1, compact=True)
    h.send("p1", TP, "a", 5, key="k1", at=1.0)
    h.send("p2", TP, "b", 3, key="k1", at=2.0)  # invoked at 2.0, after a's ack at 1.0
    h.final_read({TP: [(3, "b", "k1"), (5, "a", "k1")]})
    report = check(h.ops)
    assert not report["valid"]
    assert counts(report) == {"stale_last_value": 1}
    [case] = report["anomalies"]["stale_last_value"]
    assert case["final_last"] == [5, "a"] and case["later_send"]["value"] == "b"


def test_concurrent_writes_of_a_key_may_end_either_way() -> None:
    """Two sends of one key in flight together: either may be last."""
    h = HistoryBuilder(seed=1, compact=True)
    a = h.invoke("p1", "send", "a", tp=TP, key="k1")
    b = h.invoke("p2", "send", "b", tp=TP, key="k1")
    h.complete(b, offset=0)
    h.complete(a, offset=1)
    h.final_read({TP: [(1, "a", "k1")]})
    report = check(h.ops)
    assert report["valid"], report
    assert report["compaction"]["compacted_away"] == 1


def test_replicas_that_differ_at_an_offset_diverge() -> None:
    h = HistoryBuilder(seed=1, compact=True)
    written(h)
    h.final_read({TP: CLEANED})
    replicas(h, {1: CLEANED, 2: [LOG[0], LOG[1], (2, "a", "k1"), LOG[3]]})
    report = check(h.ops)
    assert not report["valid"]
    [case] = [c for c in report["anomalies"]["replica_divergence"] if "offset" in c]
    assert case == {"tp": TP, "offset": 2, "values": {"1": "c", "2": "a"}}
    # a at two offsets, and offset 2 holding two values: the version order sees it too.
    assert report["duplicated"] == 1 and report["inconsistent_offsets"] == 1


def test_an_isr_member_without_a_keys_last_record_diverges() -> None:
    """Node 2 dropped k1's last record (c at 2) but kept the older a: a bad clean."""
    h = HistoryBuilder(seed=1, compact=True)
    written(h)
    h.final_read({TP: CLEANED})
    replicas(h, {1: CLEANED, 2: [LOG[0], LOG[3]]})
    report = check(h.ops)
    assert not report["valid"]
    assert counts(report) == {"replica_divergence": 1}
    [case] = report["anomalies"]["replica_divergence"]
    assert case["node"] == 2 and case["missing_last_records"] == [{"offset": 2, "key": "k1"}]


def test_a_replica_outside_the_isr_may_lack_records() -> None:
    h = HistoryBuilder(seed=1, compact=True)
    written(h)
    h.final_read({TP: CLEANED})
    h.replica(1, TP, CLEANED, hw=4, leo=4, isr=[1, 2])
    h.replica(2, TP, CLEANED, hw=4, leo=4, isr=[1, 2])
    h.replica(3, TP, [LOG[0]], hw=1, leo=1, isr=[1, 2])  # fell behind, never cleaned
    report = check(h.ops)
    assert report["valid"], report


def test_a_read_of_a_value_never_sent_is_found() -> None:
    h = HistoryBuilder(seed=1, compact=True)
    written(h)
    h.final_read({TP: [*CLEANED, (4, "zzz", "k1")]})
    report = check(h.ops)
    assert not report["valid"]
    [case] = report["anomalies"]["unsent_read"]
    assert (case["offset"], case["value"], case["sent"]) == (4, "zzz", None)


def test_a_value_read_under_another_key_or_as_no_tombstone_was_never_sent() -> None:
    h = HistoryBuilder(seed=1, compact=True)
    written(h)
    # c was sent with key k1; the tombstone ~d read back as the value d.
    h.final_read({TP: [(2, "c", "k2"), (3, "d", "k2")]})
    report = check(h.ops)
    assert not report["valid"]
    cases = report["anomalies"]["unsent_read"]
    assert [(c["value"], c["sent"]) for c in cases] == [
        ("c", {"tp": TP, "key": "k1"}),
        ("d", None),
    ]


def test_a_consumer_that_jumps_over_a_keys_last_record_skips() -> None:
    h = HistoryBuilder(seed=1, compact=True)
    written(h)
    h.poll("c1", {TP: [LOG[1]]})
    h.poll("c1", {TP: [LOG[3]]})  # jumped over 2: c, k1's last record, never superseded
    h.final_read({TP: CLEANED})
    report = check(h.ops)
    assert not report["valid"]
    assert counts(report) == {"poll_skip": 1}
    [case] = report["anomalies"]["poll_skip"]
    assert case["offsets"] == [1, 3] and case["jumped_over"] == [2]


def test_a_consumer_that_steps_back_is_still_nonmonotonic() -> None:
    h = HistoryBuilder(seed=1, compact=True)
    written(h)
    h.poll("c1", {TP: [LOG[2], LOG[0]]})
    h.final_read({TP: CLEANED})
    report = check(h.ops)
    assert counts(report) == {"nonmonotonic_poll": 1}


def test_a_committed_record_that_vanished_is_found() -> None:
    """k3 = e was sent with an unknown outcome; a consumer read it (so it was committed), yet
    the final read holds no k3."""
    h = HistoryBuilder(seed=1, compact=True)
    written(h)
    h.send("p1", TP, "e", None, type="info", key="k3")
    h.poll("c1", {TP: [*CLEANED, (4, "e", "k3")]})
    h.final_read({TP: CLEANED})
    report = check(h.ops)
    assert not report["valid"]
    assert counts(report) == {"vanished": 1}
    assert report["anomalies"]["vanished"][0]["key"] == "k3"


def test_without_a_final_read_a_missing_last_write_is_only_unseen() -> None:
    h = HistoryBuilder(seed=1, compact=True)
    written(h)
    h.poll("c1", {TP: [LOG[0], LOG[1]]})
    report = check(h.ops)
    assert report["valid"], report
    assert report["unseen"] == 2 and report["lost"] == 0


def test_a_value_of_a_send_still_open_when_the_history_ends_was_sent() -> None:
    """Its outcome is unknown, so it may be in the log: reading it is no anomaly."""
    h = HistoryBuilder(seed=1, compact=True)
    written(h)
    h.invoke("p2", "send", "e", tp=TP, key="k3")  # never completed
    h.final_read({TP: [*CLEANED, (4, "e", "k3")]})
    report = check(h.ops)
    assert report["valid"], report
