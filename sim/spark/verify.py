"""Verification at scale: every checker of `sim.history.checker.run.CHECKERS` over
any number of traces, and one verdict per run.

Checker 1's join-shaped anomalies and checker 3 are native Spark plans;
`COVERED` is their contract with the in-process checkers: on the same trace,
these names with these op ids are what `check_named` + `check_replay` report.
Everything else (checker 1's per-read rules, checkers 2, 4 and 5) runs the
in-process code per run (`sim.spark.inproc`). The parity test holds the union
to `check_history`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from sim.history.checker.verdict import ANOMALY_NAMES, MAX_REPORTED
from sim.spark import segments
from sim.spark.frames import elements, prepare, read_facts, table_ops
from sim.spark.inproc import COVERED, Slice, slice_results, with_row_order
from sim.spark.named import named_parts
from sim.spark.replay import annotate, has_cut_off_ddl, replay_parts
from sim.spark.segments import GROUP_OPS

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sim.spark.frames import Kept

__all__ = ["COVERED", "anomalies", "verdicts"]

#: Which form decides checker 1's join-shaped anomalies and checker 3, the
#: two checkers that have both. Measured (local[2], 2 shared cores, 4 synthetic
#: runs x 50,000 ops, `bench`-style synth traces; second, warm round):
#: native plans 23.1 s (46.8 s cold), the in-process code per run over Arrow
#: 3.0 s (6.9 s cold), same 8 anomalies; one synthetic run of 1,000,000 ops:
#: native 66.6 s (cold), per run 16.7 s, same 6 anomalies (script in the
#: issue-22 report). One run is one task in the per-run form, so it does not
#: scale with cores within a run; it still beat the native plans here.
#: The per-run form wins; the native plans stay (`native=True`) for a run too
#: big for one task's memory, and the tests hold both to the in-process
#: checkers.
NATIVE_FORM: Final = False
ANOMALY_COLS: Final = ("run", "anomaly", "checker", "op_id", "ops", "detail")


def anomalies(
    ops: Any,
    runs: Any,
    keep: Kept,
    partitions: int,
    traces: Mapping[str, str] | None = None,
    *,
    native: bool = NATIVE_FORM,
    run_ops: Mapping[str, int] | None = None,
    group_ops: int = GROUP_OPS,
) -> tuple[Any, Any]:
    """One row per anomaly: run, anomaly, checker, op_id (the op it is about),
    ops (every op id involved, in the in-process explanation's order), detail.

    The table ops are shuffled once by (run, object) into `partitions` and
    annotated (`replay.annotate`); they, their per-element writers, the
    per-read facts and a few small intermediate frames are materialized with
    `keep` (the caller releases them once the result is written), and every
    check reads them from there. `runs` numbers the runs (`frames.load`).

    With `traces` (run -> its trace directory), the in-process checkers run
    too, in tasks that read the traces themselves (`inproc`), and the second
    frame has one row per (run, checker) that ran: checker, outcome, skipped,
    count (else it is None). With `traces` and not `native`, every checker
    runs in-process — per run, or per group of segments for the runs of
    `run_ops` (run -> operations) above `group_ops` (`segments`) — and no
    native plan runs."""
    from functools import reduce

    if traces is not None and not native:
        return _inproc(with_row_order(ops), traces, run_ops or {}, group_ops)

    p = prepare(ops)
    tops = table_ops(p, partitions)
    cut_off = has_cut_off_ddl(p)
    t = keep(annotate(keep(tops) if cut_off else tops, cut_off=cut_off))
    elems = keep(elements(t))
    facts = keep(read_facts(t, elems))
    parts = [*named_parts(t, elems, facts, keep), *replay_parts(p, runs, t, keep)]
    checks = None
    if traces is not None:
        from pyspark.sql import functions as F

        whole = [Slice(r, d, ops=(run_ops or {}).get(r, 0)) for r, d in sorted(traces.items())]
        res = slice_results(ops.sparkSession, whole, native=True)
        cols = parts[0].columns
        parts.append(res.where(F.col("anomaly").isNotNull()).select(
            *[F.col(c).cast(parts[0].schema[c].dataType).alias(c) for c in cols]))  # fmt: skip
        checks = res.where(F.col("anomaly").isNull()).select("run", "checker", "outcome", "skipped", "count")
    return reduce(lambda a, b: a.unionByName(b), parts), checks


def _inproc(ops: Any, traces: Mapping[str, str], run_ops: Mapping[str, int], group_ops: int) -> tuple[Any, Any]:
    """Every checker in-process; a cut run's groups merged into one verdict
    per checker. A cut run whose checker reported more anomalies than a
    whole-run check keeps (`MAX_REPORTED`), or could not decide on a segment,
    is checked again whole, so what is kept is what `check_history` keeps."""
    from pyspark.sql import functions as F

    spark = ops.sparkSession
    plan = segments.plan(ops, run_ops, group_ops=group_ops)
    res = slice_results(spark, plan.slices(traces, run_ops), native=False)
    if plan.runs:
        cut = F.col("run").isin(list(plan.runs))
        redo = [r["run"] for r in res.where(cut & F.col("anomaly").isNull()).groupBy("run", "checker").agg(
            F.sum("count").alias("n"), F.max((F.col("outcome") == "unknown") & ~F.col("skipped")).alias("u"))
            .where((F.col("n") > MAX_REPORTED) | F.col("u")).select("run").distinct().collect()]  # fmt: skip
        if redo:
            whole = slice_results(spark, [Slice(r, traces[r], ops=run_ops.get(r, 0)) for r in sorted(redo)],
                                  native=False)  # fmt: skip
            res = res.where(~F.col("run").isin(redo)).unionByName(whole)
    an = res.where(F.col("anomaly").isNotNull()).select(*ANOMALY_COLS)
    c = res.where(F.col("anomaly").isNull())
    merged = c.groupBy("run", "checker").agg(
        F.sum("count").alias("count"),
        F.max((F.col("outcome") == "unknown") & ~F.col("skipped")).alias("undecided"),
        F.max(F.col("outcome") == "unknown").alias("any_unknown"),
        F.min("skipped").alias("skipped"),
        F.first("detail", ignorenulls=True).alias("detail"),
    )
    # As `Collector.verdict` on the whole run: invalid iff an anomaly; a
    # segment that found nothing to judge decides nothing if another did.
    outcome = (
        F.when(F.col("count") > 0, "invalid")
        .when(F.col("undecided") | (F.col("skipped") & F.col("any_unknown")), "unknown")
        .otherwise("valid")
    )
    checks = merged.select("run", "checker", outcome.alias("outcome"),
                           (F.col("skipped") & (F.col("count") == 0)).alias("skipped"), "count")  # fmt: skip
    return an, checks


def verdicts(ops: Any, anomalies_df: Any, meta: Any, checks: Any = None) -> Any:
    """Per run: its config/seed/workload, op count, whether any op carries a
    system timestamp (else checker 3 had nothing to judge), the anomaly count
    per name and the verdict (`invalid` iff any anomaly, else `unknown` if a
    checker could not decide, else `valid`). With `checks` (`anomalies`'
    second frame), `checkers` lists the checkers that ran (a skipped
    checker, as `combine` does, decides nothing)."""
    from pyspark.sql import functions as F

    per_run = ops.groupBy(F.col("run").cast("string").alias("run")).agg(
        F.count("*").alias("ops"),
        F.max((F.col("read_ts").isNotNull() | F.col("write_ts").isNotNull()
               | F.col("catalog_ts").isNotNull()).cast("int")).alias("timestamped"),
    )  # fmt: skip
    counts = anomalies_df.groupBy("run").pivot("anomaly", list(ANOMALY_NAMES)).count()
    out = meta.join(per_run, "run", "right").join(counts, "run", "left")
    for name in ANOMALY_NAMES:
        out = out.withColumn(name, F.coalesce(F.col(f"`{name}`"), F.lit(0)).cast("long"))
    total = sum((F.col(f"`{n}`") for n in ANOMALY_NAMES), F.lit(0))
    undecided = F.lit(False)
    if checks is not None:
        from sim.spark.inproc import NATIVE

        per = checks.groupBy("run").agg(
            F.array_sort(F.array_distinct(F.concat(F.collect_list("checker"), F.array(*map(F.lit, NATIVE)))))
            .alias("checkers"),
            F.max(((F.col("outcome") == "unknown") & ~F.col("skipped")).cast("int")).alias("undecided"),
        )  # fmt: skip
        out = out.join(per, "run", "left")
        undecided = F.coalesce(F.col("undecided"), F.lit(0)) > 0
    out = out.withColumn("anomalies", total).withColumn(
        "verdict", F.when(F.col("anomalies") > 0, "invalid").when(undecided, "unknown").otherwise("valid")
    ).withColumn("replay_skipped", F.col("timestamped") == 0).drop("timestamped")
    return (out.drop("undecided") if checks is not None else out).orderBy("run")
