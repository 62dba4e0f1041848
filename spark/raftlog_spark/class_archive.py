"""A class-data-sharing archive of the classes a Spark session loads, so sessions start faster.

A local Spark session spends most of its start loading and verifying ~20,000 JVM classes: 11-13 s
here, more than the main job's cluster, produce and consume together. The JVM can map them from
an archive written by an earlier run instead (JDK 13+ "dynamic CDS": -XX:ArchiveClassesAtExit
to write it, -XX:SharedArchiveFile to use it); with one, a session started in 7 s here.

Rules:
- The archive is built once, by `python -m raftlog_spark.class_archive` (scripts/run and
  scripts/test call it), in a child process that runs the same kind of job the main job runs
  (a Python data source, an aggregate, a Parquet write and read) and exits: the JVM writes the
  archive when it exits, so the build waits for that JVM to be gone, then renames the file
  into place. A half-written archive is never at the path sessions use.
- Its name carries what it is only valid for (this Java's `-version` text and path, this
  pyspark's version and place), so a new Java or Spark never meets an old archive: sessions
  then start without one, as before, and the next build makes a new one.
- It lives in this virtual environment (sys.prefix/var/raftlog, or $RAFTLOG_SPARK_ARCHIVE_DIR),
  never in the repository.
- `java_options()` is all local_session needs: the flag when the archive exists, else "".
  A JVM that cannot map the archive prints a warning and starts without it: never an error.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

# RAFTLOG_SPARK_ARCHIVE_DIR puts it elsewhere (a shared cache; the tests' broken archive).
ARCHIVE_DIR_ENV = "RAFTLOG_SPARK_ARCHIVE_DIR"


def archive_dir() -> str:
    return os.environ.get(ARCHIVE_DIR_ENV) or os.path.join(sys.prefix, "var", "raftlog")


# The build took ~60 s here: ~40 s the job, ~20 s the JVM writing the archive as it exits.
BUILD_TIMEOUT_S = 600.0
JVM_EXIT_TIMEOUT_S = 120.0


def archive_path() -> str | None:
    """Where the archive for this Java and this pyspark is (or goes); None without Java."""
    from raftlog_spark.environment import java_version_text

    java = java_version_text()
    if java is None:
        return None
    import pyspark

    key = "\n".join([java, pyspark.__version__, os.path.dirname(pyspark.__file__ or "")])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(archive_dir(), f"spark-classes-{pyspark.__version__}-{digest}.jsa")


def java_options() -> str:
    """The JVM option that maps the archive, or "" when there is none yet."""
    path = archive_path()
    return f"-XX:SharedArchiveFile={path}" if path and os.path.isfile(path) else ""


def build(force: bool = False) -> str:
    """Build the archive unless it exists; returns its path. Prints progress (a line every
    10 s: the build is a whole Spark job). RuntimeError saying what failed."""
    path = archive_path()
    if path is None:
        raise RuntimeError("no Java found: nothing to build a class archive for")
    if os.path.isfile(path) and not force:
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.{os.getpid()}.partial"
    print("== building Spark's class archive once (a Spark job: about a minute here)", flush=True)
    started = time.monotonic()
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "raftlog_spark.class_archive", "--dump-to", partial],
            stdout=subprocess.PIPE,
            text=True,
        )
        out = _wait(child, started)
        jvm_pid = _jvm_pid(out)
        deadline = time.monotonic() + JVM_EXIT_TIMEOUT_S
        while _alive(jvm_pid):  # the JVM writes the archive as it exits
            if time.monotonic() > deadline:
                raise RuntimeError(f"Spark's JVM (pid {jvm_pid}) did not exit in time")
            time.sleep(0.2)
        if not os.path.isfile(partial) or os.path.getsize(partial) == 0:
            raise RuntimeError("the JVM exited without writing the class archive")
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    size_mb = os.path.getsize(path) / 1e6
    print(f"   {path} ({size_mb:.0f} MB) in {time.monotonic() - started:.0f} s", flush=True)
    return path


def _wait(child: subprocess.Popen[str], started: float) -> str:
    deadline = started + BUILD_TIMEOUT_S
    while True:
        try:
            out, _ = child.communicate(timeout=10)
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline:
                child.kill()
                child.communicate()
                raise RuntimeError(
                    f"the class archive's job ran past {BUILD_TIMEOUT_S:.0f} s"
                ) from None
            print(f"   ... {time.monotonic() - started:.0f} s", flush=True)
    if child.returncode != 0:
        tail = "\n".join(out.splitlines()[-10:])
        raise RuntimeError(
            f"the class archive's job failed (exit status {child.returncode}):\n{tail}"
        )
    return out


def _jvm_pid(out: str) -> int:
    for line in out.splitlines():
        if line.startswith("jvm-pid "):
            return int(line.split()[1])
    raise RuntimeError("the class archive's job did not say which JVM it ran")


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie has exited: its archive is written)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _dump_job(partial: str) -> None:
    """The job the archive learns from (runs in the child): what the main job's step 6 does,
    on rows made up here instead of a cluster's."""
    import shutil

    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from raftlog_spark.environment import JAVA_OPTIONS, SHORT_JOBS_CONF, local_session
    from raftlog_spark.jobs import pageviews
    from raftlog_spark.source import SCHEMA

    class WarmupReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(3)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import json

            import pyarrow as pa

            from raftlog_spark.arrow import arrow_schema

            n = 100
            values = [
                json.dumps({"page": f"/p{i % 7}", "user": f"u{i % 13}", "ts": i * 1000}).encode()
                for i in range(n)
            ]
            yield pa.RecordBatch.from_pydict(
                {
                    "key": [None] * n,
                    "value": values,
                    "topic": ["warmup"] * n,
                    "partition": [partition.value] * n,
                    "offset": list(range(n)),
                    "timestamp": [i * 1000 for i in range(n)],
                    "timestampType": [0] * n,
                },
                schema=arrow_schema(False),
            )

    class WarmupSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "raftlog_warmup"

        def schema(self) -> str:
            return SCHEMA

        def reader(self, schema: Any) -> DataSourceReader:
            return WarmupReader()

    # -Xlog:cds=off: without the hundreds of warnings about the classes the archive leaves out
    # (signed jars, generated classes): expected, and no use to anyone.
    options = f"{SHORT_JOBS_CONF[JAVA_OPTIONS]} -XX:ArchiveClassesAtExit={partial} -Xlog:cds=off"
    spark = local_session(
        "class-archive", conf={JAVA_OPTIONS: options, "spark.ui.showConsoleProgress": "false"}
    )
    print(f"jvm-pid {spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()}", flush=True)
    spark.dataSource.register(WarmupSource)
    out_dir = tempfile.mkdtemp(prefix="raftlog-class-archive-")
    try:
        raw = spark.read.format("raftlog_warmup").load()
        agg = pageviews.activity(pageviews.events(raw))
        assert sum(r.views for r in agg.collect()) == 300
        # and what the tests and the job's command line do: Parquet written and read back
        path = os.path.join(out_dir, "activity")
        agg.write.parquet(path)
        assert sum(r.views for r in spark.read.parquet(path).collect()) == 300
    finally:
        spark.stop()
        shutil.rmtree(out_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m raftlog_spark.class_archive",
        description="build the class archive Spark sessions start from (once per Java/Spark)",
    )
    parser.add_argument("--force", action="store_true", help="build it again even if present")
    parser.add_argument("--dump-to", help=argparse.SUPPRESS)  # the child's job
    args = parser.parse_args(argv)
    if args.dump_to:
        _dump_job(args.dump_to)
        return 0
    from raftlog_spark.environment import check_environment

    problems = check_environment()
    if problems:
        print("no class archive: Spark cannot run here yet:\n  - " + "\n  - ".join(problems))
        return 1
    try:
        build(force=args.force)
    except RuntimeError as e:
        print(f"the class archive was not built: {e} (Spark sessions start without it)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
