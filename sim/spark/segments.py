"""Cutting a large run into segments that the in-process checkers can judge
one at a time, in parallel, with the verdicts they give the whole run.

A cut at time T is sound when no table has operations on both sides and
every determinate operation before it completed before every operation
after it began (an `info` one counts at its invoke: it never precedes
anything in real time). Then no precedence edge of checker 2 points back
across the cut, so its cycles lie within a segment; checkers 1 and 3 work
per table, except 3's timestamps-vs-real-time sweep, for which every earlier
segment is "completed before": each segment gets the op carrying the largest
earlier timestamp of each timeline (`carry`) appended as an extra row without
a table, so the sweep flags and names exactly what it flags on the whole run.
Consecutive segments are grouped to about `GROUP_OPS` operations per task.

What a segment cannot reproduce is a checker's cap on kept anomalies
(`MAX_REPORTED`, checker 2's cycles): a run whose segments report more than
that in all is checked again whole (`verify.anomalies`). The multiset checker
("table") works per table, so a table's verdict and coverage are its
segment's, and a run is fully judged iff each of its groups is; but its time
limit applies per group, not once per run, so a cut run can be judged where
the whole run would run out of time (`inproc.check_segment`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, final

from sim.history.checker.run import LINEAR_MAX_OPS
from sim.spark.frames import DDL_KINDS
from sim.spark.inproc import Slice

if TYPE_CHECKING:
    from collections.abc import Mapping


__all__ = ["GROUP_OPS", "Plan", "key_column", "plan"]

#: Runs larger than this are cut, and a task checks at least this many ops
#: (or one segment): a few seconds of checking, so scheduling is not the cost.
GROUP_OPS: Final = 100_000
#: The carry rows' fields, in `History` row order.
_CARRY: Final = ("op_id", "process", "kind", "invoke_ns", "complete_ns", "status", "read_ts", "write_ts",
                 "catalog_ts", "client")


@final
@dataclass(frozen=True)
class Plan:
    """Which runs are cut (`runs`: run -> its op count); per cut run the
    invoke time each group starts at (`starts`, ascending: every op of a
    segment was invoked within its segment's span, and spans are disjoint,
    so an op's invoke time alone places it); per (run, grp) its carry rows
    and its size in operations."""

    runs: Mapping[str, int] = field(default_factory=dict)
    starts: Mapping[str, list[int]] = field(default_factory=dict)
    carries: Mapping[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    sizes: Mapping[tuple[str, int], int] = field(default_factory=dict)

    def slices(self, traces: Mapping[str, str], run_ops: Mapping[str, int]) -> list[Slice]:
        """One `Slice` per group of a cut run (the ops invoked from its start
        to the next group's) and one per other run of `traces` (run -> trace
        directory), whole."""
        out = [Slice(run, trace, ops=run_ops.get(run, 0)) for run, trace in sorted(traces.items())
               if run not in self.runs]
        for run, starts in sorted(self.starts.items()):
            for g in range(len(starts)):
                out.append(Slice(run, traces[run], ops=self.sizes[(run, g)], grp=g,
                                 lo=None if g == 0 else starts[g], hi=starts[g + 1] if g + 1 < len(starts) else None,
                                 cut=True, run_ops=self.runs[run], carries=tuple(self.carries[(run, g)])))
        return out


def key_column() -> Any:
    """What keeps ops together: their table, or the op alone if it has none
    (a name cannot start with NUL, so the two never meet)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col("object"), F.concat(F.lit("\0"), F.col("op_id").cast("string")))


def plan(ops: Any, run_ops: Mapping[str, int], *, group_ops: int = GROUP_OPS) -> Plan:
    """Segments and groups of the runs above `group_ops` (and checker 5's
    limit, so that it is skipped on them as on the whole run). `ops` has
    `_row` (`inproc.with_row_order`). One Spark job over a few columns of
    those runs' ops; one row per segment reaches the driver."""
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    big = {r: n for r, n in sorted(run_ops.items()) if n > max(group_ops, LINEAR_MAX_OPS)}
    if not big:
        return Plan()
    st, kind = F.col("status").cast("string"), F.col("kind").cast("string")
    info = (st == "info") | F.col("complete_ns").isNull()
    end = F.when(info, F.col("invoke_ns")).otherwise(F.col("complete_ns"))

    def carry(ts: Any, cond: Any, drop: tuple[str, ...]) -> Any:
        # The largest timestamp; of those, the earliest to complete, then the
        # first row: the op `_sweep` names (`first_at`).
        cols = [F.lit(None).cast("long").alias(c) if c in drop else
                (kind if c == "kind" else st if c == "status" else F.col(c)).alias(c) for c in _CARRY]
        return F.max(F.when(cond, F.struct(ts.alias("ts"), (-F.col("complete_ns")).alias("ne"),
                                           (-F.col("_row")).alias("nr"), *cols)))

    dts = F.greatest("read_ts", "write_ts")
    data = (st == "ok") & dts.isNotNull() & F.col("complete_ns").isNotNull()
    cat = F.col("catalog_ts").isNotNull() & ~info & (~kind.isin(*DDL_KINDS) | (st == "ok"))
    by_lo = W.partitionBy("run").orderBy("lo", "key")
    segs = (
        ops.filter(F.col("run").isin(list(big)))
        .groupBy(F.col("run").cast("string").alias("run"), key_column().alias("key"))
        .agg(F.min("invoke_ns").alias("lo"), F.max(end).alias("hi"), F.count(F.lit(1)).alias("n"),
             carry(dts, data, ("catalog_ts",)).alias("d"),
             carry(F.col("catalog_ts"), cat, ("read_ts", "write_ts")).alias("c"))
        .withColumn("prev", F.max("hi").over(by_lo.rowsBetween(W.unboundedPreceding, -1)))
        .withColumn("seg", F.sum((F.col("prev").isNull() | (F.col("prev") < F.col("lo"))).cast("long"))
                    .over(by_lo.rowsBetween(W.unboundedPreceding, 0)))
        .groupBy("run", "seg").agg(F.min("lo").alias("lo"), F.sum("n").alias("n"), F.max("d").alias("d"),
                                   F.max("c").alias("c"))
        .collect()
    )
    by_run: dict[str, list[Any]] = {}
    for r in segs:
        by_run.setdefault(r["run"], []).append(r)
    starts: dict[str, list[int]] = {}
    carries: dict[tuple[str, int], list[dict[str, Any]]] = {}
    sizes: dict[tuple[str, int], int] = {}
    for run, rows in by_run.items():
        rows.sort(key=lambda r: int(r["lo"]))
        best: dict[str, Any] = {"d": None, "c": None}
        pending: dict[str, Any] = {"d": None, "c": None}
        grp, filled = -1, group_ops
        for r in rows:
            if filled >= group_ops:  # a new group starts at this segment
                grp, filled = grp + 1, 0
                starts.setdefault(run, []).append(int(r["lo"]))
                for tl in ("d", "c"):
                    best[tl] = _later(best[tl], pending[tl])
                carries[(run, grp)] = [b.asDict() for b in best.values() if b is not None]
            filled += int(r["n"])
            sizes[(run, grp)] = filled
            for tl in ("d", "c"):
                pending[tl] = _later(pending[tl], r[tl])
    return Plan(big, starts, carries, sizes)


def _later(a: Any, b: Any) -> Any:
    """Of two carry candidates, the one `_sweep` would name."""
    if a is None:
        return b
    if b is None:
        return a
    return b if (b["ts"], b["ne"], b["nr"]) > (a["ts"], a["ne"], a["nr"]) else a
