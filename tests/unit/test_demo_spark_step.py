"""The demo's Spark step: its summary line, and a failed job reported with what Spark ran on.

The job itself is replaced here (its real runs are tests/integration/test_demo.py and
tests/spark/): what is tested is the demo's handling of the job's answer and of its failure."""

from __future__ import annotations

import collections
from typing import Any

import pytest
from raftlog_spark.jobs import pageviews

from raftlog.cli import demo_cmd
from raftlog.topics import TopicPartition

PAGES = collections.Counter({"/": 3, "/docs": 1})
START = {TopicPartition("t", 0): 0}


class ReadySession:
    """Stands in for the demo's background session starter: the replaced job needs none."""

    start_s = 2.0

    def session(self) -> None:
        return None


def job_counting(pages: dict[str, int]) -> Any:
    """A stand-in for run_pageview_report that counts `pages`; it records its arguments."""

    def job(*args: Any) -> dict[str, Any]:
        job.args = args  # type: ignore[attr-defined]
        return {"events": sum(pages.values()), "pages": dict(pages), "job_s": 0.0}

    return job


def test_the_spark_step_reads_to_the_groups_commits_and_compares_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = job_counting(PAGES)
    monkeypatch.setattr(pageviews, "run_pageview_report", job)
    ok, line = demo_cmd._spark_report("b:1", "t", START, PAGES, ReadySession())  # type: ignore[arg-type]
    assert ok and "4 events over 2 pages" in line and "the same per-page counts" in line
    assert "session start 2.0 s" in line
    bootstrap, topic, out_dir, starting, ending, _ = job.args  # type: ignore[attr-defined]
    assert (bootstrap, topic, out_dir) == ("b:1", "t", None)  # the demo writes no files
    assert starting == '{"t": {"0": 0}}' and ending == "group:pageview-report"


def test_different_counts_are_not_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pageviews, "run_pageview_report", job_counting({"/": 3}))
    ok, line = demo_cmd._spark_report("b:1", "t", START, PAGES, ReadySession())  # type: ignore[arg-type]
    assert not ok and "per-page counts DIFFER" in line


def test_a_failed_spark_job_is_reported_with_what_spark_ran_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def job(*args: Any) -> dict[str, Any]:
        raise RuntimeError("[INTERNAL_ERROR_STORAGE] Block broadcast_0 does not exist.\nmore")

    monkeypatch.setattr(pageviews, "run_pageview_report", job)
    with pytest.raises(RuntimeError, match="broadcast_0"):
        demo_cmd._spark_report("b:1", "t", START, PAGES, ReadySession())  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "the Spark job failed: [INTERNAL_ERROR_STORAGE] Block broadcast_0" in out
    assert "more" not in out  # the first line only
    assert "Spark ran with Java" in out
