"""Verification at scale: every checker of `sim.history.checker.run.CHECKERS` over
any number of traces, and one verdict per run.

Checker 1's join-shaped anomalies and checker 3 are native Spark plans;
`COVERED` is their contract with the in-process checkers: on the same trace,
these names with these op ids are what `check_named` + `check_whitebox` report.
Everything else (checker 1's per-read rules, checkers 2, 4, 5 and the
multiset checker "table") runs the in-process code per run
(`sim.spark.inproc`), and so does the coverage, which decides the verdict as
`check_history` does: `unknown` when some operation to judge went unjudged.
The parity test holds the union, and the verdicts, to `check_history`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from sim.history.checker.verdict import ANOMALY_NAMES, MAX_REPORTED
from sim.spark import segments
from sim.spark.frames import elements, prepare, read_facts, table_ops
from sim.spark.inproc import COVERED, Slice, slice_results, with_row_order
from sim.spark.named import named_parts
from sim.spark.segments import GROUP_OPS
from sim.spark.whitebox import annotate, has_cut_off_ddl, whitebox_parts

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
) -> tuple[Any, Any, Any]:
    """One row per anomaly: run, anomaly, checker, op_id (the op it is about),
    ops (every op id involved, in the in-process explanation's order), detail.

    The table ops are shuffled once by (run, object) into `partitions` and
    annotated (`whitebox.annotate`); they, their per-element writers, the
    per-read facts and a few small intermediate frames are materialized with
    `keep` (the caller releases them once the result is written), and every
    check reads them from there. `runs` numbers the runs (`frames.load`).

    With `traces` (run -> its trace directory), the in-process checkers run
    too, in tasks that read the traces themselves (`inproc`); the second
    frame has one row per (run, checker) that ran: checker, outcome, skipped,
    count, and the third one row per run with its coverage (`run_coverage`)
    (else both are None). With `traces` and not `native`, every checker runs
    in-process — per run, or per group of segments for the runs of `run_ops`
    (run -> operations) above `group_ops` (`segments`) — and no native plan
    runs."""
    from functools import reduce

    if traces is not None and not native:
        return _inproc(with_row_order(ops), traces, run_ops or {}, group_ops)

    p = prepare(ops)
    tops = table_ops(p, partitions)
    cut_off = has_cut_off_ddl(p)
    t = keep(annotate(keep(tops) if cut_off else tops, cut_off=cut_off))
    elems = keep(elements(t))
    facts = keep(read_facts(t, elems))
    parts = [*named_parts(t, elems, facts, keep), *whitebox_parts(p, runs, t, keep)]
    checks = coverage = None
    if traces is not None:
        from pyspark.sql import functions as F

        whole = [Slice(r, d, ops=(run_ops or {}).get(r, 0)) for r, d in sorted(traces.items())]
        res = slice_results(ops.sparkSession, whole, native=True)
        cols = parts[0].columns
        parts.append(res.where(F.col("anomaly").isNotNull()).select(
            *[F.col(c).cast(parts[0].schema[c].dataType).alias(c) for c in cols]))
        checks = _checks(res).select("run", "checker", "outcome", "skipped", "count")
        coverage = run_coverage(res)
    return reduce(lambda a, b: a.unionByName(b), parts), checks, coverage


def _checks(res: Any) -> Any:
    """The rows of `slice_results` about one checker on one slice."""
    from pyspark.sql import functions as F

    return res.where(F.col("anomaly").isNull() & F.col("checker").isNotNull())


def run_coverage(res: Any) -> Any:
    """Per run, from the coverage rows of `slice_results` (one per slice: a
    whole run, or each group of a cut run): `ops_to_judge`, `ops_judged`,
    `tables`, `tables_not_fully_judged`, `not_table_ops` (summed over the
    groups, whose tables are disjoint), `not_judged` (the first
    `SHOWN_TABLES` tables not fully judged, in group order, with why), and
    `slice_outcome`: `invalid` if a slice's checkers found an anomaly, else
    `unknown` if any slice's is (its coverage incomplete, or a checker that
    judges no operation undecided), else `valid`. For a whole run it is
    `check_history`'s outcome; a cut run is `valid` only if every group's
    coverage is complete (`inproc.check_segment` says why that is the most
    a cut run can claim)."""
    from pyspark.sql import functions as F

    from sim.history.checker.run import SHOWN_TABLES

    cov = res.where(F.col("anomaly").isNull() & F.col("checker").isNull())
    gaps = F.transform(F.array_sort(F.collect_list(F.struct("grp", "not_judged"))), lambda g: g["not_judged"])
    return cov.groupBy("run").agg(
        F.sum("to_judge").alias("ops_to_judge"),
        F.sum("judged").alias("ops_judged"),
        F.sum("tables").alias("tables"),
        F.sum("tables_partial").alias("tables_not_fully_judged"),
        F.sum("not_tables").alias("not_table_ops"),
        F.slice(F.flatten(gaps), 1, SHOWN_TABLES).alias("not_judged"),
        F.when(F.max((F.col("outcome") == "invalid").cast("int")) > 0, "invalid")
        .when(F.max((F.col("outcome") != "valid").cast("int")) > 0, "unknown")
        .otherwise("valid").alias("slice_outcome"),
    )


def _inproc(ops: Any, traces: Mapping[str, str], run_ops: Mapping[str, int], group_ops: int) -> tuple[Any, Any, Any]:
    """Every checker in-process; a cut run's groups merged into one verdict
    per checker and one coverage. A cut run whose checker reported more
    anomalies than a whole-run check keeps (`MAX_REPORTED`) is checked again
    whole, so what is kept is what `check_history` keeps.

    A group that could not judge all its operations is not checked again
    whole (it once was, when `skipped` decided the verdict): the whole run
    would judge no more — the checkers' bounds are per table, and a cut
    keeps each table in one group — and its coverage makes the run
    `unknown` already."""
    from pyspark.sql import functions as F

    spark = ops.sparkSession
    plan = segments.plan(ops, run_ops, group_ops=group_ops)
    res = slice_results(spark, plan.slices(traces, run_ops), native=False)
    if plan.runs:
        cut = F.col("run").isin(list(plan.runs))
        redo = [r["run"] for r in _checks(res).where(cut).groupBy("run", "checker").agg(F.sum("count").alias("n"))
                .where(F.col("n") > MAX_REPORTED).select("run").distinct().collect()]
        if redo:
            whole = slice_results(spark, [Slice(r, traces[r], ops=run_ops.get(r, 0)) for r in sorted(redo)],
                                  native=False)
            res = res.where(~F.col("run").isin(redo)).unionByName(whole)
    an = res.where(F.col("anomaly").isNotNull()).select(*ANOMALY_COLS)
    merged = _checks(res).groupBy("run", "checker").agg(
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
                           (F.col("skipped") & (F.col("count") == 0)).alias("skipped"), "count")
    return an, checks, run_coverage(res)


#: verdicts.parquet's coverage columns (`run_coverage`).
COVERAGE_COLS: Final = ("ops_to_judge", "ops_judged", "tables", "tables_not_fully_judged", "not_table_ops",
                        "not_judged")


def verdicts(ops: Any, anomalies_df: Any, meta: Any, checks: Any = None, coverage: Any = None) -> Any:
    """Per run: its config/seed/workload, op count, whether any op carries a
    system timestamp (else checker 3 had nothing to judge), the anomaly count
    per name, the coverage (`COVERAGE_COLS`, `coverage_complete`) and the
    verdict, decided as `check_history` decides it: `invalid` iff any anomaly
    (or a slice's checkers found one), else `unknown` unless every operation
    to judge was judged and no checker that judges none was undecided
    (`run_coverage`'s `slice_outcome`), else `valid`. A run without coverage
    (`coverage` None: only the native plans ran) is at best `unknown`. With
    `checks` (`anomalies`' second frame), `checkers` lists the checkers that
    ran."""
    from pyspark.sql import functions as F

    per_run = ops.groupBy(F.col("run").cast("string").alias("run")).agg(
        F.count("*").alias("ops"),
        F.max((F.col("read_ts").isNotNull() | F.col("write_ts").isNotNull()
               | F.col("catalog_ts").isNotNull()).cast("int")).alias("timestamped"),
    )
    counts = anomalies_df.groupBy("run").pivot("anomaly", list(ANOMALY_NAMES)).count()
    out = meta.join(per_run, "run", "right").join(counts, "run", "left")
    for name in ANOMALY_NAMES:
        out = out.withColumn(name, F.coalesce(F.col(f"`{name}`"), F.lit(0)).cast("long"))
    total = sum((F.col(f"`{n}`") for n in ANOMALY_NAMES), F.lit(0))
    if checks is not None:
        from sim.spark.inproc import NATIVE

        per = checks.groupBy("run").agg(
            F.array_sort(F.array_distinct(F.concat(F.collect_list("checker"), F.array(*map(F.lit, NATIVE)))))
            .alias("checkers"),
        )
        out = out.join(per, "run", "left")
    if coverage is not None:
        out = out.join(coverage, "run", "left")
    else:
        from sim.spark.inproc import GAP_TYPE

        out = out.select("*", *[F.lit(None).cast("long").alias(c) for c in COVERAGE_COLS[:-1]],
                         F.lit(None).cast(f"array<{GAP_TYPE}>").alias("not_judged"),
                         F.lit(None).cast("string").alias("slice_outcome"))
    slices = F.coalesce(F.col("slice_outcome"), F.lit("unknown"))
    out = (
        out.withColumn("anomalies", total)
        .withColumn("verdict", F.when((F.col("anomalies") > 0) | (slices == "invalid"), "invalid")
                    .when(slices == "unknown", "unknown").otherwise("valid"))
        .withColumn("coverage_complete", F.coalesce(F.col("ops_judged") == F.col("ops_to_judge"), F.lit(False)))
        .withColumn("whitebox_skipped", F.col("timestamped") == 0)
        .drop("timestamped", "slice_outcome")
    )
    return out.orderBy("run")
