"""The checker finds each anomaly exactly: synthetic histories with one planted anomaly each, and
clean ones that must stay clean (including hypothesis-generated runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.checker import INVALIDATING, check
from chaos.history import read_history, write_history
from tests.chaos._histories import HistoryBuilder

TP = "t-0"


def counts(report: dict[str, Any]) -> dict[str, int]:
    """Every anomaly count that is not zero."""
    kinds = (*INVALIDATING, "unseen")
    return {k: report[k] for k in kinds if report[k]}


def produced(h: HistoryBuilder, n: int, tp: str = TP, process: str = "p1") -> list[tuple[int, str]]:
    records = [(i, f"{process}-{tp}-{i}") for i in range(n)]
    for offset, value in records:
        h.send(process, tp, value, offset)
    return records


def test_clean_history_is_valid() -> None:
    h = HistoryBuilder(seed=7)
    recs = produced(h, 5)
    h.poll("c1", {TP: recs[:3]})
    h.commit("c1", {TP: 3})
    h.poll("c1", {TP: recs[3:]})
    h.commit("c1", {TP: 5})
    h.final_read({TP: recs})
    report = check(h.ops)
    assert report["valid"], report
    assert counts(report) == {}
    assert report["acknowledged"] == 5
    assert report["seed"] == 7
    assert report["anomalies"] == {}


def test_lost_write_is_found_exactly() -> None:
    h = HistoryBuilder()
    recs = produced(h, 5)
    h.final_read({TP: [recs[0], recs[1], recs[3], recs[4]]})  # offset 2 never read, 3 read
    report = check(h.ops)
    assert not report["valid"]
    assert [c["value"] for c in report["anomalies"]["lost"]] == [recs[2][1]]
    assert report["anomalies"]["lost"][0]["max_read_offset"] == 4
    # The final reader's jump from 1 to 3 is also a skip in its read.
    assert counts(report) == {"lost": 1, "poll_skip": 1}


def test_overwritten_acknowledged_write_is_lost_and_inconsistent() -> None:
    h = HistoryBuilder()
    recs = produced(h, 3)
    h.final_read({TP: [recs[0], (1, "intruder"), recs[2]]})
    report = check(h.ops)
    assert counts(report) == {"lost": 1, "inconsistent_offsets": 1}
    assert report["anomalies"]["inconsistent_offsets"] == [
        {"tp": TP, "offset": 1, "values": sorted(["intruder", recs[1][1]])}
    ]


def test_unseen_tail_reported_and_invalid_only_with_a_final_read() -> None:
    h = HistoryBuilder()
    recs = produced(h, 4)
    h.poll("c1", {TP: recs[:2]})
    report = check(h.ops)
    assert [c["value"] for c in report["anomalies"]["unseen"]] == [v for _, v in recs[2:]]
    assert counts(report) == {"unseen": 2}
    assert report["valid"], "a consumer that lags is not an anomaly without a final read"
    h.final_read({TP: recs[:2]})
    report = check(h.ops)
    assert counts(report) == {"unseen": 2}
    assert not report["valid"] and report["invalid_because"] == ["unseen"]


def test_duplicate_value_at_two_offsets() -> None:
    h = HistoryBuilder()
    recs = produced(h, 3)
    h.final_read({TP: [*recs, (3, recs[1][1])]})
    report = check(h.ops)
    assert counts(report) == {"duplicated": 1}
    assert report["anomalies"]["duplicated"] == [
        {"value": recs[1][1], "places": [[TP, 1], [TP, 3]]}
    ]


def test_reads_that_disagree_are_inconsistent_offsets() -> None:
    h = HistoryBuilder()
    h.poll("c1", {TP: [(0, "a"), (1, "b")]})
    h.poll("c2", {TP: [(0, "a"), (1, "c")]})
    report = check(h.ops)
    assert counts(report) == {"inconsistent_offsets": 1}


def test_read_of_a_failed_send_is_an_aborted_read() -> None:
    h = HistoryBuilder()
    h.send("p1", TP, "ok-0", 0)
    h.send("p1", TP, "failed", None, type="fail")
    h.send("p1", TP, "maybe", None, type="info")
    h.final_read({TP: [(0, "ok-0"), (1, "failed"), (2, "maybe")]})
    report = check(h.ops)
    assert counts(report) == {"aborted_read": 1}
    assert report["anomalies"]["aborted_read"][0]["value"] == "failed"
    assert (report["failed"], report["indeterminate"]) == (1, 1)


def test_nonmonotonic_send_per_producer_and_partition() -> None:
    h = HistoryBuilder()
    a = h.invoke("p1", "send", "a", tp=TP)
    b = h.invoke("p1", "send", "b", tp=TP)
    c = h.invoke("p2", "send", "c", tp=TP)
    # p1's second send acknowledged at a lower offset than its first: nonmonotonic, even though
    # the completions arrive in offset order. p2's interleaving is another producer's business.
    h.complete(b, offset=0)
    h.complete(c, offset=1)
    h.complete(a, offset=2)
    h.final_read({TP: [(0, "b"), (1, "c"), (2, "a")]})
    report = check(h.ops)
    assert counts(report) == {"nonmonotonic_send": 1}
    assert report["anomalies"]["nonmonotonic_send"] == [
        {"process": "p1", "tp": TP, "values": ["a", "b"], "offsets": [2, 0]}
    ]


def test_nonmonotonic_poll_within_an_assignment_only() -> None:
    h = HistoryBuilder()
    recs = produced(h, 4)
    h.assign("c1", [TP])
    h.poll("c1", {TP: recs[:3]})
    h.poll("c1", {TP: recs[1:]})  # went back to 1
    report = check(h.ops)
    assert counts(report) == {"nonmonotonic_poll": 1}
    assert report["anomalies"]["nonmonotonic_poll"][0]["offsets"] == [2, 1]

    h2 = HistoryBuilder()
    recs = produced(h2, 4)
    h2.assign("c1", [TP])
    h2.poll("c1", {TP: recs[:3]})
    h2.assign("c1", [TP])  # a rebalance: the consumer restarts from the committed offset
    h2.poll("c1", {TP: recs[1:]})
    assert counts(check(h2.ops)) == {}


def test_poll_skip_between_and_inside_polls() -> None:
    h = HistoryBuilder()
    recs = produced(h, 8)
    h.poll("c1", {TP: recs[:2]})
    h.poll("c1", {TP: recs[3:5]})  # skipped offset 2
    h.poll("c1", {TP: [recs[5], recs[7]]})  # skipped 6 inside one poll
    h.poll("c2", {TP: [recs[2], recs[6]]})  # c2 read what c1 skipped (and skipped itself)
    report = check(h.ops)
    assert counts(report) == {"poll_skip": 3}
    assert [c["offsets"] for c in report["anomalies"]["poll_skip"]] == [[1, 3], [5, 7], [2, 6]]


def test_committed_offset_regression_only_after_completion() -> None:
    h = HistoryBuilder()
    h.commit("c1", {TP: 10}, invoke_at=1.0, complete_at=1.1)
    h.commit("c2", {TP: 4}, invoke_at=1.05, complete_at=1.2)  # concurrent with it: allowed
    h.commit("c2", {TP: 7}, invoke_at=2.0, complete_at=2.1)  # after 10 was acknowledged
    h.commit("c1", {"t-1": 1}, group="other", invoke_at=3.0, complete_at=3.1)
    report = check(h.ops)
    assert counts(report) == {"committed_offset_regressions": 1}
    case = report["anomalies"]["committed_offset_regressions"][0]
    assert (case["group"], case["tp"], case["offset"], case["previous_offset"]) == ("g", TP, 7, 10)


def test_replica_divergence_below_the_high_watermark() -> None:
    h = HistoryBuilder()
    recs = produced(h, 3)
    h.final_read({TP: recs})
    h.replica(1, TP, recs, hw=3, leo=3, isr=[1, 2, 3])
    h.replica(2, TP, [*recs[:2], (2, "other"), (3, "tail")], hw=3, leo=4, isr=[1, 2, 3])
    h.replica(3, TP, [*recs, (3, "different tail")], hw=3, leo=4, isr=[1, 2, 3])
    report = check(h.ops)
    # Offset 2 differs on node 2 (below HW); the tails above the HW may differ.
    assert counts(report) == {"replica_divergence": 1, "inconsistent_offsets": 1}
    assert report["anomalies"]["replica_divergence"] == [
        {"tp": TP, "offset": 2, "values": {"1": recs[2][1], "2": "other", "3": recs[2][1]}}
    ]


def test_isr_member_missing_records_below_hw_diverges_but_a_lagging_follower_does_not() -> None:
    h = HistoryBuilder()
    recs = produced(h, 3)
    h.final_read({TP: recs})
    h.replica(1, TP, recs, hw=3, leo=3, isr=[1, 2])
    h.replica(2, TP, recs[:2], hw=3, leo=2, isr=[1, 2])  # in the ISR, yet short
    h.replica(3, TP, recs[:1], hw=3, leo=1, isr=[1, 2])  # out of the ISR: may lag
    report = check(h.ops)
    assert counts(report) == {"replica_divergence": 1, "hw_above_isr_leo": 1}
    assert report["anomalies"]["replica_divergence"][0]["offset"] == 2
    assert report["anomalies"]["hw_above_isr_leo"] == [
        {"tp": TP, "high_watermark": 3, "isr_log_end_offsets": {"1": 3, "2": 2}}
    ]


def test_availability_overall_and_per_fault() -> None:
    h = HistoryBuilder()
    send_times = iter([0.1, 0.2, 1.5, 1.6, 3.0])

    def send(i: int) -> None:
        h.send("p1", TP, f"v{i}", i, at=next(send_times))

    send(0)
    send(1)
    kill = h.fault("kill", [2], start=0.3, end=None)
    h.complete(kill, at=1.0)
    send(2)
    send(3)
    h.fault("pause", [1], start=1.7, end=1.8)
    send(4)
    h.final_read({TP: [(i, f"v{i}") for i in range(5)]})
    report = check(h.ops)
    assert report["valid"]
    # Acknowledgements at 0.11, 0.21, 1.51, 1.61, 3.01 (each send completes 0.01 s after).
    assert abs(report["max_unavailability_s"] - 1.4) < 1e-6
    kill, pause = report["faults"]
    assert (kill["kind"], kill["started_s"], kill["healed_s"]) == ("kill", 0.3, 1.0)
    assert abs(kill["max_unavailability_s"] - 1.3) < 1e-6
    assert abs(pause["max_unavailability_s"] - 1.4) < 1e-6


def test_availability_per_partition_shows_one_partition_down_while_others_go_on() -> None:
    h = HistoryBuilder()
    other = "t-1"
    # t-1 is acknowledged every 0.5 s; TP only at the start and the end.
    h.send("p1", TP, "a0", 0, at=0.0)
    for i in range(9):
        h.send("p2", other, f"b{i}", i, at=0.5 * i + 0.2)
    h.send("p1", TP, "a1", None, type="info", at=2.0)
    h.send("p1", TP, "a2", 1, at=4.5)
    h.final_read({TP: [(0, "a0"), (1, "a2")], other: [(i, f"b{i}") for i in range(9)]})
    report = check(h.ops)
    assert report["valid"]
    assert report["max_unavailability_s"] < 1.0  # the other partition hides the outage
    assert abs(report["partition_unavailability_s"][TP] - 4.5) < 1e-6  # 0.01 -> 4.51
    assert report["max_partition_unavailability_s"] == report["partition_unavailability_s"][TP]
    assert report["partition_unavailability_s"][other] < 1.0


def test_nothing_acknowledged_is_not_valid() -> None:
    h = HistoryBuilder()
    h.send("p1", TP, "a", None, type="info")
    report = check(h.ops)
    assert report["invalid_because"] == ["nothing_acknowledged"]


# -- generated histories ----------------------------------------------------------------------


@st.composite
def clean_runs(draw: st.DrawFn) -> tuple[HistoryBuilder, dict[str, list[tuple[int, str]]]]:
    """Producers send to a few partitions (some sends fail or time out without effect), a
    consumer reads every partition in contiguous chunks, a final read sees everything."""
    h = HistoryBuilder(seed=draw(st.integers(0, 2**32)))
    tps = [f"t-{p}" for p in range(draw(st.integers(1, 3)))]
    logs: dict[str, list[tuple[int, str]]] = {tp: [] for tp in tps}
    n = draw(st.integers(1, 40))
    for i in range(n):
        tp = draw(st.sampled_from(tps))
        process = f"p{draw(st.integers(1, 3))}"
        outcome = draw(st.sampled_from(["ok", "ok", "ok", "fail", "info"]))
        value = f"{process}-{i}"
        if outcome == "ok":
            offset = len(logs[tp])
            logs[tp].append((offset, value))
            h.send(process, tp, value, offset)
        else:
            h.send(process, tp, value, None, type=outcome)
    for tp in tps:
        log = logs[tp]
        start = 0
        while start < len(log):
            end = start + draw(st.integers(1, 5))
            h.poll("c1", {tp: log[start:end]})
            h.commit("c1", {tp: min(end, len(log))})
            start = end
    h.final_read({tp: log for tp, log in logs.items()})
    return h, logs


@settings(max_examples=60, deadline=None)
@given(clean_runs())
def test_generated_clean_histories_are_valid(run: Any) -> None:
    h, logs = run
    report = check(h.ops)
    assert counts(report) == {}
    assert report["valid"] == any(logs.values())


@settings(max_examples=60, deadline=None)
@given(clean_runs(), st.data())
def test_generated_lost_write_found_exactly(run: Any, data: st.DataObject) -> None:
    """Remove one acknowledged record that has a successor from every read: it is lost."""
    h, logs = run
    candidates = [(tp, r) for tp, log in logs.items() for r in log[:-1]]
    if not candidates:
        return
    tp, victim = data.draw(st.sampled_from(candidates))
    ops = []
    for o in h.ops:
        if o.f in ("poll", "final-read") and o.type == "ok" and tp in o.value:
            kept = [r for r in o.value[tp] if r[1] != victim[1]]
            o = type(o)(
                o.process, o.type, o.f, o.time, o.id, {**o.value, tp: kept}, o.extra, o.index
            )
        ops.append(o)
    report = check(ops)
    assert [c["value"] for c in report["anomalies"]["lost"]] == [victim[1]]
    assert report["lost"] == 1 and report["unseen"] == 0
    assert set(counts(report)) <= {"lost", "poll_skip"}
    assert not report["valid"]


@settings(max_examples=30, deadline=None)
@given(clean_runs())
def test_history_file_round_trip_checks_the_same(tmp_path_factory: Any, run: Any) -> None:
    h, _ = run
    path = Path(tmp_path_factory.mktemp("hist")) / "history.jsonl"
    write_history(path, h.ops)
    assert check(read_history(path)) == check(h.ops)


def test_an_ack_without_an_offset_must_be_read_back_like_any_other() -> None:
    """librdkafka's implicit ack reports a send delivered with no offset: valid when a read
    returned it, unseen (invalid with a final read) when none did, and never a nonmonotonic
    send for want of an offset."""
    h = HistoryBuilder()
    recs = produced(h, 3)
    h.send("p1", TP, "implicit", None)
    h.send("p1", TP, "after", 4)
    h.final_read({TP: [*recs, (3, "implicit"), (4, "after")]})
    report = check(h.ops)
    assert report["valid"] and counts(report) == {}, report
    assert report["acknowledged"] == 5 and report["acknowledged_without_offset"] == 1

    h = HistoryBuilder()
    recs = produced(h, 3)
    h.send("p1", TP, "implicit", None)
    h.final_read({TP: recs})
    report = check(h.ops)
    assert counts(report) == {"unseen": 1} and not report["valid"], report
    assert report["anomalies"]["unseen"][0]["value"] == "implicit"


def test_a_partition_added_mid_run_is_measured_from_its_first_send() -> None:
    """A topic grown by a `reassign` fault: its new partition was not unavailable before it
    existed."""
    h = HistoryBuilder()
    for i in range(20):
        h.send("p1", TP, f"a{i}", i, at=0.5 * i)
    h.send("p1", "t-1", "b0", 0, at=8.0)
    h.send("p1", "t-1", "b1", 1, at=8.5)
    h.final_read({TP: [(i, f"a{i}") for i in range(20)], "t-1": [(0, "b0"), (1, "b1")]})
    report = check(h.ops)
    assert report["valid"], report
    assert report["partition_unavailability_s"]["t-1"] < 2.0, report["partition_unavailability_s"]
