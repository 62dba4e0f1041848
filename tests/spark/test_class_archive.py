"""The class archive Spark sessions start from (raftlog_spark/class_archive.py).

The README's test command builds it (scripts/test); these tests check that a session really
maps it, that an archive a session cannot use never stops one, and that an archive is never
used with another Java or Spark than its own. Sessions run in child processes: a JVM's options
are fixed when it starts, and the test run's shared session is already up.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from raftlog_spark import class_archive, environment

SESSION_COUNTS = """
from raftlog_spark import local_session
spark = local_session("class-archive-test", conf={"spark.driver.extraJavaOptions": %r})
print("count", spark.range(7).count())
runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print("jvm-args", " ".join(runtime.getInputArguments()))
spark.stop()
"""


def run_session(java_options: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", SESSION_COUNTS % java_options],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout + out.stderr


def test_a_session_maps_the_archive_the_test_command_built() -> None:
    path = class_archive.archive_path()
    assert path is not None and os.path.isfile(path), (
        f"no class archive at {path}: scripts/test builds it "
        "(python -m raftlog_spark.class_archive)"
    )
    assert class_archive.java_options() == f"-XX:SharedArchiveFile={path}"
    # -Xshare:on makes a JVM that cannot map its archive exit with an error instead of
    # starting without it, so this session counting proves the archive was used.
    out = run_session("-Xshare:on")
    assert f"-XX:SharedArchiveFile={path}" in out and "count 7" in out


def test_an_archive_a_session_cannot_use_does_not_stop_it(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(class_archive.ARCHIVE_DIR_ENV, str(tmp_path))  # for the child too
    broken = class_archive.archive_path()
    assert broken is not None and broken.startswith(str(tmp_path))
    pathlib.Path(broken).write_bytes(b"not a class archive" * 100)
    out = run_session("")
    assert f"-XX:SharedArchiveFile={broken}" in out  # the JVM was given it...
    assert "count 7" in out  # ...and started without it


def test_the_archive_is_named_for_its_java_and_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "java_version_text", lambda: "/usr/bin/java\nopenjdk 17.0.1")
    first = class_archive.archive_path()
    monkeypatch.setattr(environment, "java_version_text", lambda: "/usr/bin/java\nopenjdk 17.0.2")
    second = class_archive.archive_path()
    assert first is not None and second is not None and first != second
    monkeypatch.setattr(environment, "java_version_text", lambda: None)
    assert class_archive.archive_path() is None and class_archive.java_options() == ""
