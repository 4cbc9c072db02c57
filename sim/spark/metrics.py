"""Metrics of many runs, per configuration x workload x concurrency: the numbers
the comparison of the configurations rests on, computed where the traces are.

The names and definitions are docs/metrics.md's (shared with `coordsim
compare` where the two measure the same thing); the tests recompute them
with pyarrow and must agree. Windows are `WINDOW_MS` long: a virtual-mode
level lasts a fraction of a second.

A trace of `coordsim compare` holds one workload on one configuration at
several concurrency levels (its meta.json lists them): its clients are named
`L<n>/…` per level, and each level counts as a run of its own here. Where
meta.json records the windows compare measured a level in
(`sim.spark.frames.load_windows`), the level is measured as compare measures
it: the ops its windows start, and the ok ops completing in them over their
length. A level's clients also ran discarded attempts and warm-ups, which
only the windows tell apart. Without windows (older traces), a level is its
ops and the internal events that started between its first invoke and last
completion. Set-up and warm-up ops belong to no level and are not measured,
as compare does not measure them.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["GROUP", "PERCENTILES", "WINDOW_MS", "metrics"]

GROUP: Final = ("config", "workload", "concurrency")
#: Percentile -> column, compare's names (`results.csv`).
PERCENTILES: Final = {0.5: "p50_ms", 0.99: "p99_ms", 0.999: "p999_ms"}
ACCURACY: Final = 1_000_000
#: Width of a throughput window.
WINDOW_MS: Final = 100


def metrics(ops: Any, events: Any, meta: Any, *, level_windows: Any = None) -> tuple[Any, Any]:
    """(comparison, windows): one row per group, and one row per group, run and
    100-ms window (`window_ms`: its start since the run's or level's first
    invoke, or since its first measured window's start) with the ok
    operations that throughput counts completed in it.

    `level_windows` (`sim.spark.frames.load_windows`; None: none) says which
    levels of compare traces were measured in which windows; the levels it
    does not name are measured as before windows were recorded."""
    from pyspark.sql import functions as F

    from sim.spark.frames import WINDOWS_SCHEMA

    if level_windows is None:
        level_windows = ops.sparkSession.createDataFrame([], WINDOWS_SCHEMA)
    levels = F.col("concurrency").startswith("[")  # a compare trace: one run per level
    level = F.regexp_extract(F.col("client"), r"^L(\d+)/", 1)
    key = ["run", "concurrency"]
    # The windows are a few per trace: broadcast.
    lw = F.broadcast(level_windows.select(*key, F.col("start_ns").alias("w_start"), F.col("end_ns").alias("w_end")))
    windowed = F.broadcast(level_windows.select(*key).distinct().withColumn("windowed", F.lit(True)))
    o = (
        ops.select(F.col("run").cast("string").alias("run"), "client", "invoke_ns", "complete_ns",
                   F.col("status").cast("string").alias("status"))
        .join(F.broadcast(meta), "run")
        .withColumn("concurrency", F.when(~levels, F.col("concurrency")).when(level != "", level))
        .filter(F.col("concurrency").isNotNull())
        .drop("client")
        .join(windowed, key, "left")
        .withColumn("windowed", F.coalesce(F.col("windowed"), F.lit(False)))
    )
    ok = F.col("status") == "ok"
    lat_ms = (F.col("complete_ns") - F.col("invoke_ns")) / 1e6
    unit = ("run", *GROUP)  # a run, or one level of a compare trace
    cols = [*unit, "invoke_ns", "complete_ns", "status"]
    plain, inw = o.filter(~F.col("windowed")), o.filter(F.col("windowed")).join(lw, key)
    # Compare's sets: latency of every op a window starts (to its completion,
    # wherever it falls); throughput of the ops that complete in it. The end
    # is inclusive for completions: a fixed-operations level's window ends at
    # its last completion, which compare counts.
    measured = plain.select(*cols).unionByName(
        inw.filter((F.col("invoke_ns") >= F.col("w_start")) & (F.col("invoke_ns") < F.col("w_end"))).select(*cols)
    )
    plain_runs = plain.groupBy(*unit).agg(
        F.min("invoke_ns").alias("start_ns"),
        F.max("complete_ns").alias("end_ns"),
        ((F.max("complete_ns") - F.min("invoke_ns")) / 1e9).alias("duration_s"),
    )
    names = meta.select("run", "config", "workload")
    win = level_windows.join(names, "run")
    per_run = plain_runs.unionByName(
        win.groupBy(*unit).agg(
            F.min("start_ns").alias("start_ns"),
            F.max("end_ns").alias("end_ns"),
            (F.sum(F.col("end_ns") - F.col("start_ns")) / 1e9).alias("duration_s"),
        )
    )
    durations = per_run.groupBy(*GROUP).agg(F.sum("duration_s").alias("duration_s"), F.count("*").alias("runs"))
    lat = measured.groupBy(*GROUP).agg(
        F.count("*").alias("ops"),
        F.sum(ok.cast("long")).alias("ok_ops"),
        F.sum((F.col("status") == "fail").cast("long")).alias("errors"),
        F.percentile_approx(F.when(ok, lat_ms), list(PERCENTILES), ACCURACY).alias("p"),
        F.max(F.when(ok, lat_ms)).alias("latency_max_ms"),
        F.avg(F.when(ok, lat_ms)).alias("latency_mean_ms"),
    )
    # Events by the run they belong to; in a compare trace, by the level
    # whose time span (or measured window) they started in. The spans are
    # few: broadcast. Ends are inclusive ns: a window's is one before its end.
    spans = F.broadcast(
        plain_runs.select(*unit, F.col("start_ns").alias("lo"), F.col("end_ns").alias("hi"))
        .join(meta.select("run", levels.alias("levels")), "run")
        .unionByName(win.select(*unit, F.col("start_ns").alias("lo"), (F.col("end_ns") - 1).alias("hi"),
                                F.lit(True).alias("levels")))
    )
    e = events.select(F.col("run").cast("string").alias("run"), F.col("kind").cast("string").alias("kind"),
                      "start_ns", "batch_size").alias("e")
    ev = e.join(
        spans.alias("s"),
        (F.col("e.run") == F.col("s.run"))
        & (~F.col("s.levels") | F.col("e.start_ns").between(F.col("s.lo"), F.col("s.hi"))),
    ).select(*[F.col(f"s.{c}") for c in GROUP], "e.kind", "e.batch_size")
    evm = ev.groupBy(*GROUP).agg(
        F.sum(F.col("kind").startswith("oracle.").cast("long")).alias("oracle_calls"),
        F.sum((F.col("kind") == "group-commit").cast("long")).alias("group_commits"),
        F.avg(F.when(F.col("kind") == "group-commit", F.col("batch_size"))).alias("group_commit_batch_mean"),
        F.max(F.when(F.col("kind") == "group-commit", F.col("batch_size"))).alias("group_commit_batch_max"),
    )
    # The ok ops a level completed: all of a run's or level's without
    # windows; those completing in a window, with.
    done = plain.filter(ok).select(*unit, "complete_ns").unionByName(
        inw.filter(ok & F.col("complete_ns").between(F.col("w_start"), F.col("w_end"))).select(*unit, "complete_ns")
    )
    windows = (
        done.join(per_run.select(*unit, "start_ns"), list(unit))
        .withColumn("window_ms", (F.floor((F.col("complete_ns") - F.col("start_ns")) / (WINDOW_MS * 1_000_000))
                                  * WINDOW_MS).cast("long"))
        .groupBy(*GROUP, "run", "window_ms").agg(F.count("*").alias("ops"))
    )
    wstats = windows.groupBy(*GROUP).agg(
        F.min("ops").alias("window_ops_min"), F.max("ops").alias("window_ops_max"),
        F.avg("ops").alias("window_ops_mean"), F.sum("ops").alias("done"),
    )
    comp = (
        lat.join(durations, list(GROUP))
        .join(evm, list(GROUP), "left")
        .join(wstats, list(GROUP), "left")
        .fillna({"oracle_calls": 0, "group_commits": 0, "done": 0})
        .select(
            *GROUP, "runs", "ops", "ok_ops", "errors", "duration_s",
            (F.col("done") / F.col("duration_s")).alias("throughput_ops_s"),
            *[F.col("p")[i].alias(name) for i, name in enumerate(PERCENTILES.values())],
            "latency_mean_ms", "latency_max_ms",
            "window_ops_min", "window_ops_mean", "window_ops_max",
            (F.col("oracle_calls") / F.col("ops")).alias("oracle_api_calls_per_op"),
            "group_commits", "group_commit_batch_mean", "group_commit_batch_max",
        )
        .orderBy(*GROUP)
    )
    return comp, windows.orderBy(*GROUP, "run", "window_ms")
