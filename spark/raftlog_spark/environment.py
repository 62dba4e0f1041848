"""What Spark needs on this machine, checked with messages that say what to install.

`python -m raftlog_spark.environment` prints the check and exits 1 when something is missing.
The project's scripts install the Python side (`scripts/test` and `scripts/run` install the
dev extra, which includes the `spark` extra: pyspark, pyarrow, pandas<3); Java 17 is a system
package the script cannot install for you.

`local_session()` is the one place that starts a local Spark for jobs, benchmarks and tests:
it sets what PySpark needs here (PYSPARK_PYTHON = this interpreter, or Spark's Python workers
run the system Python without raftlog; SPARK_LOCAL_IP = loopback) and registers the source.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

JAVA_MAJOR_MIN = 17
PYSPARK_MIN = (4, 2)
JAVA_INSTALL_HINT = (
    "install a Java 17 runtime (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless; "
    "macOS: brew install openjdk@17) or point JAVA_HOME at one"
)
PIP_HINT = "install the spark extra: pip install -e '.[spark]' (scripts/test and scripts/run do)"


def _java_command() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java")


@functools.cache
def java_version_text() -> str | None:
    """What `java -version` says of the Java Spark would start (with its path), or None if
    there is none. Asked once per process."""
    java = _java_command()
    if java is None:
        return None
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return f"{os.path.realpath(java)}\n{out.stderr}{out.stdout}"


def java_major_version() -> int | None:
    """The major version of the `java` Spark would start, or None if there is none."""
    text = java_version_text()
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text or "")
    if m is None:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def check_environment() -> list[str]:
    """Every problem that would stop a local Spark job, each with what to do about it."""
    problems = []
    try:
        import pyspark

        version = tuple(int(x) for x in re.findall(r"\d+", pyspark.__version__)[:2])
        if version < PYSPARK_MIN:
            problems.append(
                f"pyspark {pyspark.__version__} is too old: the raftlog source needs "
                f"{PYSPARK_MIN[0]}.{PYSPARK_MIN[1]}+ ({PIP_HINT})"
            )
    except ImportError:
        problems.append(f"pyspark is not installed ({PIP_HINT})")
    for module in ("pyarrow", "pandas"):
        try:
            __import__(module)
        except ImportError:
            problems.append(f"{module} is not installed ({PIP_HINT})")
    major = java_major_version()
    if major is None:
        problems.append(f"no Java found (JAVA_HOME or java on PATH): {JAVA_INSTALL_HINT}")
    elif major < JAVA_MAJOR_MIN:
        problems.append(f"Java {major} is too old for Spark 4 (needs 17+): {JAVA_INSTALL_HINT}")
    return problems


# For sessions that run a few small jobs and stop (the main job's step 6, the tests): the JVM's
# client compiler only, and the serial collector. A session's start and first job took
# 13.2 s + 16.2 s here with Spark's defaults and 10.7 s + 13.3 s with these; long jobs and
# benchmarks keep the defaults, whose optimizing compiler pays off after the first minute.
JAVA_OPTIONS = "spark.driver.extraJavaOptions"  # a local session's JVM is the driver's
SHORT_JOBS_CONF = {JAVA_OPTIONS: "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


def local_session(
    app_name: str = "raftlog", cores: int = 2, conf: Mapping[str, str] | None = None
) -> Any:
    """A local SparkSession with the raftlog source registered; RuntimeError naming what is
    missing if Spark cannot run here. `conf` adds Spark settings by Spark's names, e.g.
    {"spark.sql.shuffle.partitions": "8"}; its spark.driver.extraJavaOptions are added to the
    class archive's option (class_archive.py), not put in its place."""
    problems = check_environment()
    if problems:
        raise RuntimeError("Spark cannot start here:\n  - " + "\n  - ".join(problems))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # Small local jobs: a handful of shuffle partitions, not Spark's 200.
        .config("spark.sql.shuffle.partitions", str(max(cores, 2)))
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        # A local session has no remote executor to lose, yet the driver still expires its own
        # executor and block manager after spark.network.timeout (120 s) without a heartbeat,
        # judged by wall-clock time. A VM whose clock jumps (this one's has, by minutes) then
        # drops the blocks of running jobs: "[INTERNAL_ERROR_STORAGE] Block broadcast_0 does
        # not exist" in the main job elsewhere. An hour cannot be reached by a live session.
        .config("spark.network.timeout", "3600s")
    )
    from raftlog_spark.class_archive import java_options

    conf = dict(conf or {})
    extra = conf.pop(JAVA_OPTIONS, "")
    # A JVM that writes a class archive cannot start from one (class_archive's own build).
    archive = "" if "-XX:ArchiveClassesAtExit" in extra else java_options()
    java_opts = " ".join(filter(None, [archive, extra]))
    if java_opts:
        builder = builder.config(JAVA_OPTIONS, java_opts)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from raftlog_spark import register

    register(spark)
    return spark


def main() -> int:
    started = time.monotonic()
    problems = check_environment()
    if problems:
        print("Spark cannot run here yet:")
        for p in problems:
            print(f"  - {p}")
        return 1
    import pyspark

    print(
        f"ok: pyspark {pyspark.__version__}, Java {java_major_version()} "
        f"(checked in {time.monotonic() - started:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
