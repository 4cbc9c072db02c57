"""Starting Spark: one place that checks Java, builds the session and keeps
Spark's own logging at WARN, so every entry point (CLI, spark-submit script,
tests, benchmark) fails the same way — one line naming what is missing — when
a local session cannot start, and starts the same java: JAVA_HOME's, else the
one on PATH, else the packaged one (`sim.services.binaries.find_java`).

The JVM writes its log lines (log4j2's, "WARN NativeCodeLoader" and the like)
to the standard output and error it inherits; with `log_file` the JVM a call
starts inherits that file instead (the CLI's `spark.log`), so nothing of it
reaches the console.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any, Final

from sim.runtime.errors import CoordsimError
from sim.services.binaries import find_java, spark_java_home
from sim.services.errors import BackendUnavailable

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path

__all__ = [
    "DEFAULT_MASTER",
    "SparkUnavailable",
    "java_binary",
    "java_env",
    "java_problem",
    "spark_session",
]

DEFAULT_MASTER: Final = "local[*]"


class SparkUnavailable(CoordsimError):
    """No Spark session could start (no Java, or the JVM failed to launch)."""


def java_binary() -> str | None:
    """The java a Spark session starts (`find_java`): `$JAVA_HOME/bin/java` when
    JAVA_HOME is set, else the first on PATH, else the packaged one; None if
    none is usable."""
    try:
        return str(find_java().path)
    except BackendUnavailable:
        return None


def java_problem() -> str | None:
    """Why a local Spark session cannot start, or None if a usable Java is there.
    Spark 4 needs Java 17 or 21; a missing `java` is the usual failure on a fresh
    machine and the JVM's own error for it is a page of stack trace."""
    try:
        find_java()
    except BackendUnavailable as exc:
        return str(exc)
    return None


def java_env() -> dict[str, str]:
    """The variables a Spark launcher (`spark-submit`, `spark-class`, pyspark's
    gateway) needs in its environment to start the java `find_java` chose:
    `JAVA_HOME` for the packaged one (`spark_java_home`), nothing when the
    launcher finds the system's by itself (or there is none: `java_problem`
    says why)."""
    try:
        home = spark_java_home(find_java())
    except BackendUnavailable:
        return {}
    return {} if home is None else {"JAVA_HOME": str(home)}


@contextlib.contextmanager
def _launch_env(extra: Mapping[str, str]) -> Iterator[None]:
    """`extra` in os.environ while pyspark launches its gateway: `launch_gateway`
    starts `spark-submit` with a copy of os.environ and takes no environment of
    its own from the builder. Restored after, so JAVA_HOME keeps meaning what
    the user set (`find_java` reads it)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _output_to(log_file: Path) -> Iterator[None]:
    """This process's standard output and error, the file descriptors, into
    `log_file` (emptied first) for the block: a JVM started in it inherits
    them and keeps writing there for its life. pyspark starts the JVM with no
    way to redirect its output but a developer's hook; the descriptors are
    the operating system's. Only the block's own writes to fd 1 and 2 are
    diverted with it (start-up, before any progress display runs)."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    saved = (os.dup(1), os.dup(2))  # not inherited by children (PEP 446)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (*saved, fd):
            os.close(f)


def spark_session(
    master: str | None = None,
    *,
    app_name: str = "coordsim-replay",
    verbose: bool = False,
    shuffle_partitions: int | None = None,
    conf: Mapping[str, str] | None = None,
    log_file: Path | None = None,
) -> Any:
    """A SparkSession (the active one if it exists, which `spark-submit` made).

    Args:
        master: `local[*]`, `local[2]`, `spark://host:7077`, …; None keeps what
            `spark-submit` configured (or `local[*]` when run directly).
        verbose: Spark's INFO logs instead of WARN.
        shuffle_partitions: small for small inputs (Spark's 200 default makes
            a test spend its time scheduling empty tasks).
        log_file: where the JVM this call starts writes its output (its log
            lines) instead of this process's stdout and stderr. A JVM that
            already runs (an earlier session of the process, spark-submit's)
            keeps writing where it does.

    Raises:
        SparkUnavailable: Java is missing or the JVM did not start.
    """
    problem = java_problem()
    if problem is not None and (master is None or master.startswith("local")):
        raise SparkUnavailable(problem)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - pyspark is a dependency
        raise SparkUnavailable(f"pyspark is not installed: {exc}") from exc
    b = SparkSession.builder.appName(app_name)
    if master is not None:
        b = b.master(master)
    elif not os.environ.get("SPARK_ENV_LOADED") and "PYSPARK_GATEWAY_PORT" not in os.environ:
        b = b.master(DEFAULT_MASTER)
    b = b.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    # Parquet from pyarrow writes dictionary-encoded strings and nanosecond
    # integers; nothing needs Spark's legacy date rebasing.
    b = b.config("spark.sql.session.timeZone", "UTC")
    if shuffle_partitions is not None:
        b = b.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    if "PYSPARK_PYTHON" not in os.environ and "spark.pyspark.python" not in (conf or {}):
        # Workers on this machine run this interpreter (with coordsim and
        # pyarrow importable), not whatever `python3` PATH finds first. The
        # variable, because RDD jobs read only it (pyspark's SparkContext).
        os.environ["PYSPARK_PYTHON"] = sys.executable
    if (master or DEFAULT_MASTER).startswith("local") and "spark.driver.memory" not in (conf or {}):
        # In local mode the driver is the executor; Spark's 1 GB default runs
        # out on a million-operation trace.
        b = b.config("spark.driver.memory", os.environ.get("COORDSIM_SPARK_DRIVER_MEMORY", "4g"))
    # Spark sizes memory pages from the heap (64 MB at a few GB), and a task
    # of the replay runs dozens of sorts, aggregates and hash joins at once,
    # each holding a page: with big pages they exhaust the task's share before
    # any has data to spill. Small pages cost nothing measurable.
    b = b.config("spark.buffer.pageSize", "2m")
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    if not verbose:
        # Quiet from the first line: the JVM logs at INFO until setLogLevel
        # runs. Under spark-submit the driver's JVM is already running: the
        # context applies `spark.log.level` as it starts.
        b = b.config("spark.driver.extraJavaOptions", "-Dlog4j2.level=warn").config("spark.log.level", "WARN")
    try:
        redirect = _output_to(log_file) if log_file is not None else contextlib.nullcontext()
        with _launch_env(java_env()), redirect:
            spark = b.getOrCreate()
    except Exception as exc:  # the JVM's errors are not typed from Python
        first = str(exc).strip().splitlines()[:1]
        where = f" (the JVM's output: {log_file})" if log_file is not None else ""
        raise SparkUnavailable(f"Spark did not start: {first[0] if first else type(exc).__name__}{where}") from exc
    spark.sparkContext.setLogLevel("INFO" if verbose else "WARN")
    jvm = spark.sparkContext._jvm
    if not verbose and jvm is not None:
        # Releasing a local checkpoint (`frames.Kept.release`) warns, once per
        # frame, that it cannot be recomputed: by design, and no news.
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            "org.apache.spark.rdd.MapPartitionsRDD", jvm.org.apache.logging.log4j.Level.ERROR
        )
    return spark
