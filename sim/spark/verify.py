"""Verification at scale: the anomalies of checker 1 (the join-shaped named
ones) and checker 3 over any number of traces, and one verdict per run.

`COVERED` is the contract with the in-process checker: on the same trace,
these names with these op ids are what `check_named` + `check_replay` report
(the tests hold the two to it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from sim.spark.frames import elements, prepare, read_facts, table_ops
from sim.spark.named import named_parts
from sim.spark.replay import annotate, has_cut_off_ddl, replay_parts

if TYPE_CHECKING:
    from sim.spark.frames import Kept

__all__ = ["COVERED", "anomalies", "verdicts"]

#: Anomaly names the Spark job decides, with the in-process checker they match.
COVERED: Final = {
    "insert-unknown-table": "named",
    "select-unknown-table": "named",
    "dropped-object-visible": "named",
    "read-from-future": "named",
    "stale-read": "named",
    "not-strict-serializable": "replay",
}


def anomalies(ops: Any, runs: Any, keep: Kept, partitions: int) -> Any:
    """One row per anomaly: run, anomaly, checker, op_id (the op it is about),
    ops (every op id involved, in the in-process explanation's order), detail.

    The table ops are shuffled once by (run, object) into `partitions` and
    annotated (`replay.annotate`); they, their per-element writers, the
    per-read facts and a few small intermediate frames are materialized with
    `keep` (the caller releases them once the result is written), and every
    check reads them from there. `runs` numbers the runs (`frames.load`)."""
    from functools import reduce

    p = prepare(ops)
    tops = table_ops(p, partitions)
    cut_off = has_cut_off_ddl(p)
    t = keep(annotate(keep(tops) if cut_off else tops, cut_off=cut_off))
    elems = keep(elements(t))
    facts = keep(read_facts(t, elems))
    parts = [*named_parts(t, elems, facts, keep), *replay_parts(p, runs, t, keep)]
    return reduce(lambda a, b: a.unionByName(b), parts)


def verdicts(ops: Any, anomalies_df: Any, meta: Any) -> Any:
    """Per run: its config/seed/workload, op count, whether any op carries a
    system timestamp (else checker 3 had nothing to judge), the anomaly count
    per name and the verdict (`invalid` iff any anomaly)."""
    from pyspark.sql import functions as F

    per_run = ops.groupBy(F.col("run").cast("string").alias("run")).agg(
        F.count("*").alias("ops"),
        F.max((F.col("read_ts").isNotNull() | F.col("write_ts").isNotNull()
               | F.col("catalog_ts").isNotNull()).cast("int")).alias("timestamped"),
    )  # fmt: skip
    counts = anomalies_df.groupBy("run").pivot("anomaly", sorted(COVERED)).count()
    out = meta.join(per_run, "run", "right").join(counts, "run", "left")
    for name in COVERED:
        out = out.withColumn(name, F.coalesce(F.col(f"`{name}`"), F.lit(0)).cast("long"))
    total = sum((F.col(f"`{n}`") for n in sorted(COVERED)), F.lit(0))
    return out.withColumn("anomalies", total).withColumn(
        "verdict", F.when(F.col("anomalies") > 0, "invalid").otherwise("valid")
    ).withColumn("replay_skipped", F.col("timestamped") == 0).drop("timestamped").orderBy("run")
