"""The demo's Spark step runs again once in a new session when Spark fails, and says so.

The job itself is replaced here (its real runs are tests/integration/test_demo.py and
tests/spark/): what is tested is the demo's handling of a failed attempt."""

from __future__ import annotations

import collections
from typing import Any

import pytest
from raftlog_spark.jobs import pageviews

from raftlog.cli import demo_cmd
from raftlog.topics import TopicPartition

PAGES = collections.Counter({"/": 3, "/docs": 1})


def flaky_job(failures: int) -> tuple[list[str], Any]:
    """A stand-in for run_pageview_report failing `failures` times first."""
    out_dirs: list[str] = []

    def job(bootstrap: str, topic: str, out_dir: str, *args: Any, **kw: Any) -> dict[str, Any]:
        out_dirs.append(out_dir)
        if len(out_dirs) <= failures:
            raise RuntimeError("[INTERNAL_ERROR_STORAGE] Block broadcast_0 does not exist.\nmore")
        return {"events": 4, "pages": dict(PAGES), "job_s": 1.0, "session_start_s": 2.0}

    return out_dirs, job


def test_a_failed_spark_attempt_is_reported_and_run_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dirs, job = flaky_job(failures=1)
    monkeypatch.setattr(pageviews, "run_pageview_report", job)
    ok, line = demo_cmd._spark_report("b:1", "t", {TopicPartition("t", 0): 0}, PAGES)
    out = capsys.readouterr().out
    assert ok and "the same per-page counts" in line
    assert "failed (attempt 1 of 2): [INTERNAL_ERROR_STORAGE] Block broadcast_0" in out
    assert "Spark ran with Java" in out and "running it again" in out
    assert len(out_dirs) == 2 and out_dirs[0] != out_dirs[1]  # a fresh output directory


def test_the_spark_step_gives_up_after_its_attempts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dirs, job = flaky_job(failures=demo_cmd.SPARK_ATTEMPTS)
    monkeypatch.setattr(pageviews, "run_pageview_report", job)
    with pytest.raises(RuntimeError, match="broadcast_0"):
        demo_cmd._spark_report("b:1", "t", {TopicPartition("t", 0): 0}, PAGES)
    assert len(out_dirs) == demo_cmd.SPARK_ATTEMPTS
    assert f"attempt {demo_cmd.SPARK_ATTEMPTS} of {demo_cmd.SPARK_ATTEMPTS}" in (
        capsys.readouterr().out
    )
