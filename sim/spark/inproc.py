"""The in-process checkers run by Spark, one run per group: the checks that
have no native Spark form (checker 1's per-read rules non-monotonic-read and
lost-write, the black-box checker 2, the oracle-events checker 4 and the
per-table linearizability checker 5) read each run's rows back into the
project's `History`/`Event` model and call `sim.history.checker` directly, so their
anomalies are the in-process ones by construction.

Scope: every one of these checkers takes a whole history (checker 4 the run's
events, checker 2 reasons across tables through real-time order), so the
groups are runs — or, for a run too large for one task to be the critical
path, groups of its independent segments (`sim.spark.segments`): `ops` and
`events` are co-grouped by (`run`, `grp`) and handed to `check_run` or
`check_segment` as Arrow tables (`applyInArrow`, no pandas conversion).
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from sim.spark.segments import Plan

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sim.history.model import Event, History

__all__ = [
    "COVERED", "INPROC", "NATIVE", "RESULT_SCHEMA", "check_run", "check_segment", "inproc_results", "with_row_order",
]

#: Anomaly names the Spark job decides, with the in-process checker they match.
COVERED: Final = {
    "insert-unknown-table": "named",
    "select-unknown-table": "named",
    "dropped-object-visible": "named",
    "read-from-future": "named",
    "stale-read": "named",
    "not-strict-serializable": "replay",
}
#: Checkers whose every anomaly comes from the Spark-native plans (`COVERED`
#: holds which names); `named` is also in `INPROC` for its per-read rules.
NATIVE: Final = ("named", "replay")
#: Checkers run in-process per run (an anomaly of them is kept unless
#: `COVERED` says the native plans produce it).
INPROC: Final = ("named", "blackbox", "oracle", "linear")
#: One row per anomaly (`anomaly` not null) and one per checker that ran on
#: the run (`anomaly` null, `outcome` set; `count` = its anomalies in all,
#: including those the checker only counted).
RESULT_SCHEMA: Final = (
    "run string, anomaly string, checker string, op_id bigint, ops array<bigint>, detail string, "
    "outcome string, skipped boolean, count bigint"
)


def _events(t: Any) -> list[Event]:
    from sim.history.traces import events_from_table

    return events_from_table(t.sort_by("seq"))


def _history(t: Any) -> History:
    from sim.history.traces import history_from_table

    # Rows in trace order (`_row`, taken at load): checkers break ties by row.
    if "_row" in t.column_names:
        t = t.sort_by("_row").drop_columns(["_row"])
    t = t.drop_columns([c for c in ("grp", "slot") if c in t.column_names])
    return history_from_table(t)


def check_run(
    run: str,
    h: History,
    events: Sequence[Event],
    *,
    linear_time_limit_s: float = 10.0,
    native: bool = True,
) -> list[dict[str, Any]]:
    """`RESULT_SCHEMA` rows for one run: the in-process checkers' verdicts.
    With `native` (the native plans run too), checker 3 does not run here
    and the anomalies the native plans report are left out (so the union of
    both has each once); without, every checker of `CHECKERS` runs here."""
    from sim.history.checker import (
        check_blackbox,
        check_named,
        check_oracle_events,
        check_replay,
    )
    from sim.history.model import validate

    validate(h)
    verdicts = [check_named(h), check_blackbox(h)]
    if not native:
        verdicts.append(check_replay(h))
    verdicts.append(check_oracle_events(events))
    verdicts.append(_linear(h, h.n, linear_time_limit_s))
    return _rows(run, verdicts, native=native)


def check_segment(
    run: str, grp: int, run_ops: int, h: History, events: Sequence[Event], carries: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`RESULT_SCHEMA` rows for one group of segments of a cut run
    (`segments`): checkers 1-3 on its ops with the carry rows appended;
    checker 4 on the run's events and checker 5's verdict on the run (too
    large: skipped, as in-process) come from group 0."""
    from sim.history.checker import check_blackbox, check_named, check_oracle_events, check_replay
    from sim.history.model import validate
    from sim.spark.segments import append_carries

    validate(h)
    append_carries(h, carries)
    verdicts = [check_named(h), check_blackbox(h), check_replay(h)]
    if grp == 0:
        verdicts += [check_oracle_events(events), _linear(h, run_ops, 0.0)]
    return _rows(run, verdicts, native=False)


def _linear(h: History, n: int, time_limit_s: float) -> Any:
    from sim.history.checker import check_linear
    from sim.history.checker.run import LINEAR_MAX_OPS
    from sim.history.checker.verdict import Collector

    if n <= LINEAR_MAX_OPS:
        return check_linear(h, time_limit_s=time_limit_s)
    t0 = time.perf_counter()  # as check_history does: checker 5 is exponential
    return Collector("linear").verdict(
        unknown=f"{n} operations exceed checker 5's limit of {LINEAR_MAX_OPS}",
        skipped=True, seconds=time.perf_counter() - t0)  # fmt: skip


def _rows(run: str, verdicts: Sequence[Any], *, native: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for v in verdicts:
        own = {n: c for n, c in v.counts.items() if not native or COVERED.get(n) != v.checker}
        rows.append({"run": run, "anomaly": None, "checker": v.checker, "op_id": None, "ops": None,
                     "detail": v.reason, "outcome": str(v.outcome), "skipped": v.skipped,
                     "count": sum(own.values())})  # fmt: skip
        rows += [
            {"run": run, "anomaly": a.name, "checker": a.checker, "op_id": a.ops[0] if a.ops else None,
             "ops": list(a.ops), "detail": a.explanation, "outcome": None, "skipped": None, "count": None}
            for a in v.anomalies
            if not native or COVERED.get(a.name) != a.checker
        ]  # fmt: skip
    return rows


def _arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema([
        ("run", pa.string()), ("anomaly", pa.string()), ("checker", pa.string()),
        ("op_id", pa.int64()), ("ops", pa.list_(pa.int64())), ("detail", pa.string()),
        ("outcome", pa.string()), ("skipped", pa.bool_()), ("count", pa.int64()), ("grp", pa.int64()),
    ])  # fmt: skip


def _apply(
    key: tuple[Any, ...], ops: Any, events: Any, *, native: bool, run_ops: Mapping[str, int],
    carries: Mapping[tuple[str, int], list[dict[str, Any]]],
) -> Any:
    import pyarrow as pa

    schema = _arrow_schema()
    if ops.num_rows == 0:
        return schema.empty_table()
    # The key is the group's slot (`Plan.slots`); its run and grp are in its rows.
    run, grp = str(ops["run"][0].as_py()), int(ops["grp"][0].as_py())
    if run in run_ops:
        rows = check_segment(run, grp, run_ops[run], _history(ops), _events(events), carries.get((run, grp), []))
    else:
        rows = check_run(run, _history(ops), _events(events), native=native)
    for r in rows:
        r["grp"] = grp
    return pa.Table.from_pylist(rows, schema=schema)


def inproc_results(ops: Any, events: Any, *, native: bool, plan: Plan | None = None) -> Any:
    """`RESULT_SCHEMA` rows (plus `grp`) of every run in `ops` (raw trace
    rows, with the `_row` column `with_row_order` adds) and `events`
    (`check_run`'s `native`); the runs `plan` cuts, one row set per group of
    segments (`verify.anomalies` merges them)."""
    from pyspark.sql import DataFrame
    from pyspark.sql.pandas.functions import _create_vectorized_udf  # type: ignore[attr-defined]
    from pyspark.util import PythonEvalType

    plan = plan or Plan()
    ops, events = plan.assign(ops), plan.assign_events(events)
    # `cogroup(...).applyInArrow(_apply, RESULT_SCHEMA)` less its pandas
    # import check: applyInArrow builds its UDF with `pandas_udf`, which
    # refuses to run without pandas although an Arrow UDF never uses it (the
    # project does not depend on pandas). This is the same UDF, built as an
    # Arrow one, and the same JVM call.
    # (`_create_vectorized_udf` is what `pandas_udf` calls after its checks.)
    g1, g2 = ops.groupBy("slot"), events.groupBy("slot")
    # keyword-only, so Spark sees (key, left, right); the plan's small
    # parts travel with the function to the workers.
    fn = partial(_apply, native=native, run_ops=dict(plan.runs), carries=dict(plan.carries))
    udf = _create_vectorized_udf(
        fn, RESULT_SCHEMA + ", grp bigint", PythonEvalType.SQL_COGROUPED_MAP_ARROW_UDF, "pandas"
    )
    cols = [ops[c] for c in ops.columns] + [events[c] for c in events.columns]
    jdf = g1._jgd.flatMapCoGroupsInArrow(g2._jgd, udf(*cols)._jc)
    return DataFrame(jdf, ops.sparkSession)


def with_row_order(ops: Any) -> Any:
    """`ops` with `_row`, increasing in file order: a trace is one Parquet
    file, and Spark reads a file's splits in order (row ids grow with the
    partition index and the row within it)."""
    from pyspark.sql import functions as F

    return ops.withColumn("_row", F.monotonically_increasing_id())
