"""The in-process checkers run by Spark, one run per group: the checks that
have no native Spark form (checker 1's per-read rules non-monotonic-read and
lost-write, the black-box checker 2, the oracle-events checker 4 and the
per-table linearizability checker 5) read each run's rows back into the
project's `History`/`Event` model and call `sim.history.checker` directly, so their
anomalies are the in-process ones by construction.

Scope: every one of these checkers takes a whole history (checker 4 the run's
events, checker 2 reasons across tables through real-time order), so the
groups are runs: `ops` and `events` are co-grouped by `run` and handed to
`check_run` as Arrow tables (`applyInArrow`, no pandas conversion).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sim.history.model import Event, History

__all__ = ["COVERED", "INPROC", "NATIVE", "RESULT_SCHEMA", "check_run", "inproc_results", "with_row_order"]

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
        check_linear,
        check_named,
        check_oracle_events,
        check_replay,
    )
    from sim.history.checker.run import LINEAR_MAX_OPS
    from sim.history.checker.verdict import Collector
    from sim.history.model import validate

    validate(h)
    verdicts = [check_named(h), check_blackbox(h)]
    if not native:
        verdicts.append(check_replay(h))
    verdicts.append(check_oracle_events(events))
    if h.n <= LINEAR_MAX_OPS:
        verdicts.append(check_linear(h, time_limit_s=linear_time_limit_s))
    else:  # as check_history does: checker 5 is exponential
        t0 = time.perf_counter()
        verdicts.append(Collector("linear").verdict(
            unknown=f"{h.n} operations exceed checker 5's limit of {LINEAR_MAX_OPS}",
            skipped=True, seconds=time.perf_counter() - t0))  # fmt: skip
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
        ("outcome", pa.string()), ("skipped", pa.bool_()), ("count", pa.int64()),
    ])  # fmt: skip


def _apply(key: tuple[Any, ...], ops: Any, events: Any, *, native: bool) -> Any:
    import pyarrow as pa

    schema = _arrow_schema()
    if ops.num_rows == 0:
        return schema.empty_table()
    run = str(key[0])
    rows = check_run(run, _history(ops), _events(events), native=native)
    return pa.Table.from_pylist(rows, schema=schema)


def _apply_with_native(key: tuple[Any, ...], ops: Any, events: Any) -> Any:
    return _apply(key, ops, events, native=True)


def _apply_alone(key: tuple[Any, ...], ops: Any, events: Any) -> Any:
    return _apply(key, ops, events, native=False)


def inproc_results(ops: Any, events: Any, *, native: bool) -> Any:
    """`RESULT_SCHEMA` rows of every run in `ops` (raw trace rows, with the
    `_row` column `with_row_order` adds) and `events` (`check_run`'s `native`)."""
    from pyspark.sql import DataFrame
    from pyspark.sql.pandas.functions import _create_vectorized_udf  # type: ignore[attr-defined]
    from pyspark.util import PythonEvalType

    # `cogroup(...).applyInArrow(_apply, RESULT_SCHEMA)` less its pandas
    # import check: applyInArrow builds its UDF with `pandas_udf`, which
    # refuses to run without pandas although an Arrow UDF never uses it (the
    # project does not depend on pandas). This is the same UDF, built as an
    # Arrow one, and the same JVM call.
    # (`_create_vectorized_udf` is what `pandas_udf` calls after its checks.)
    g1, g2 = ops.groupBy("run"), events.groupBy("run")
    fn = _apply_with_native if native else _apply_alone
    udf = _create_vectorized_udf(
        fn, RESULT_SCHEMA, PythonEvalType.SQL_COGROUPED_MAP_ARROW_UDF, "pandas"
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
