"""Metrics of many runs, per configuration x workload x concurrency: the numbers
the comparison of the configurations rests on, computed where the traces are.

Definitions (the tests recompute them with pyarrow and must agree):
- latency: `complete_ns - invoke_ns` of `ok` operations, in ms; percentiles by
  `percentile_approx` with an accuracy that makes them exact below a million
  operations per group (the smallest latency with at least p of them ≤ it);
- throughput: `ok` operations / the sum over runs of (last completion - first
  invoke);
- throughput per 1-s window: `ok` operations by the second (since the run's
  first invoke) they completed in;
- `oracle_api_calls_per_op`: internal events of kind `oracle.*` / operations
  (API calls, not compare's backing queries: docs/metrics.md);
- group-commit batch sizes: `batch_size` of `group-commit` events (mean, max).

A trace of `coordsim compare` holds one workload on one configuration at
several concurrency levels (its meta.json lists them): its clients are named
`L<n>/…` per level, and each level counts as a run of its own here — its ops,
and the internal events that started between its first invoke and last
completion. Set-up and warm-up ops belong to no level and are not measured,
as compare does not measure them.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["GROUP", "PERCENTILES", "metrics"]

GROUP: Final = ("config", "workload", "concurrency")
PERCENTILES: Final = (0.5, 0.95, 0.99)
ACCURACY: Final = 1_000_000


def metrics(ops: Any, events: Any, meta: Any) -> tuple[Any, Any]:
    """(comparison, windows): one row per group, and one row per group, run and
    second with the operations completed in it."""
    from pyspark.sql import functions as F

    levels = F.col("concurrency").startswith("[")  # a compare trace: one run per level
    level = F.regexp_extract(F.col("client"), r"^L(\d+)/", 1)
    o = (
        ops.select(F.col("run").cast("string").alias("run"), "client", "invoke_ns", "complete_ns",
                   F.col("status").cast("string").alias("status"))
        .join(F.broadcast(meta), "run")
        .withColumn("concurrency", F.when(~levels, F.col("concurrency")).when(level != "", level))
        .filter(F.col("concurrency").isNotNull())
        .drop("client")
    )  # fmt: skip
    ok = F.col("status") == "ok"
    lat_ms = (F.col("complete_ns") - F.col("invoke_ns")) / 1e6
    unit = ("run", *GROUP)  # a run, or one level of a compare trace
    per_run = o.groupBy(*unit).agg(
        F.min("invoke_ns").alias("start_ns"),
        F.max("complete_ns").alias("end_ns"),
        ((F.max("complete_ns") - F.min("invoke_ns")) / 1e9).alias("duration_s"),
    )
    durations = per_run.groupBy(*GROUP).agg(F.sum("duration_s").alias("duration_s"), F.count("*").alias("runs"))
    lat = o.groupBy(*GROUP).agg(
        F.count("*").alias("ops"),
        F.sum(ok.cast("long")).alias("ok_ops"),
        F.percentile_approx(F.when(ok, lat_ms), list(PERCENTILES), ACCURACY).alias("p"),
        F.max(F.when(ok, lat_ms)).alias("latency_max_ms"),
        F.avg(F.when(ok, lat_ms)).alias("latency_mean_ms"),
    )
    # Events by the run they belong to; in a compare trace, by the level
    # whose time span they started in (the levels are few: broadcast).
    spans = F.broadcast(per_run.join(meta.select("run", levels.alias("levels")), "run"))
    e = events.select(F.col("run").cast("string").alias("run"), F.col("kind").cast("string").alias("kind"),
                      "start_ns", "batch_size").alias("e")  # fmt: skip
    ev = e.join(
        spans.alias("s"),
        (F.col("e.run") == F.col("s.run"))
        & (~F.col("s.levels") | F.col("e.start_ns").between(F.col("s.start_ns"), F.col("s.end_ns"))),
    ).select(*[F.col(f"s.{c}") for c in GROUP], "e.kind", "e.batch_size")
    evm = ev.groupBy(*GROUP).agg(
        F.sum(F.col("kind").startswith("oracle.").cast("long")).alias("oracle_calls"),
        F.sum((F.col("kind") == "group-commit").cast("long")).alias("group_commits"),
        F.avg(F.when(F.col("kind") == "group-commit", F.col("batch_size"))).alias("group_commit_batch_mean"),
        F.max(F.when(F.col("kind") == "group-commit", F.col("batch_size"))).alias("group_commit_batch_max"),
    )
    windows = (
        o.filter(ok).join(per_run.select(*unit, "start_ns"), list(unit))
        .withColumn("second", F.floor((F.col("complete_ns") - F.col("start_ns")) / 1e9).cast("long"))
        .groupBy(*GROUP, "run", "second").agg(F.count("*").alias("ops"))
    )  # fmt: skip
    wstats = windows.groupBy(*GROUP).agg(
        F.min("ops").alias("window_ops_min"), F.max("ops").alias("window_ops_max"),
        F.avg("ops").alias("window_ops_mean"),
    )  # fmt: skip
    comp = (
        lat.join(durations, list(GROUP))
        .join(evm, list(GROUP), "left")
        .join(wstats, list(GROUP), "left")
        .fillna({"oracle_calls": 0, "group_commits": 0})
        .select(
            *GROUP, "runs", "ops", "ok_ops", "duration_s",
            (F.col("ok_ops") / F.col("duration_s")).alias("throughput_ops_s"),
            *[F.col("p")[i].alias(f"latency_p{round(q * 100)}_ms") for i, q in enumerate(PERCENTILES)],
            "latency_mean_ms", "latency_max_ms",
            "window_ops_min", "window_ops_mean", "window_ops_max",
            (F.col("oracle_calls") / F.col("ops")).alias("oracle_api_calls_per_op"),
            "group_commits", "group_commit_batch_mean", "group_commit_batch_max",
        )
        .orderBy(*GROUP)
    )  # fmt: skip
    return comp, windows.orderBy(*GROUP, "run", "second")
