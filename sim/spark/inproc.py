"""The in-process checkers run by Spark: each task reads its own slice of a
trace straight from the trace's Parquet files (pyarrow, no JVM in between),
builds the project's `History`/`Event` model and calls `sim.history.checker`
on it, so its anomalies are the in-process ones by construction.

A slice is a whole run, or — for a run too large for one task to be the
critical path — a group of its independent segments (`sim.spark.segments`):
the ops invoked within the group's span of time, found through the row
groups' `invoke_ns` statistics. Why the tasks read the files themselves:
on a 2 M-operation synthetic trace (`synth-trace`, `local[2]`, 2 cores) the
earlier form — Spark reading the ops, shuffling them by group and handing
each group to Python as Arrow — took 40.9 s, with 44.6 CPU-s in the JVM
(9 s of it the shuffle by group) against 35 in the Python workers; tasks
that open their own row groups took 24.6 s (JVM 21.5 CPU-s, most of it the
segment plan's scan; Python 26): each op is read once for checking, with no
shuffle, and a task's cost is the checkers'.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Final, final

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from sim.history.checker.run import Report
    from sim.history.checker.verdict import Verdict
    from sim.history.model import Event, History

__all__ = [
    "COVERED", "GAP_TYPE", "INPROC", "NATIVE", "RESULT_COLUMNS", "RESULT_SCHEMA", "Slice", "balance", "check_run", "check_segment",
    "check_slice", "read_slice", "slice_results", "with_row_order",
]

#: Anomaly names the Spark job decides, with the in-process checker they match.
COVERED: Final = {
    "insert-unknown-table": "named",
    "select-unknown-table": "named",
    "dropped-object-visible": "named",
    "read-from-future": "named",
    "stale-read": "named",
    "not-strict-serializable": "whitebox",
}
#: Checkers whose every anomaly comes from the Spark-native plans (`COVERED`
#: holds which names); `named` is also in `INPROC` for its per-read rules.
NATIVE: Final = ("named", "whitebox")
#: Checkers run in-process per run (an anomaly of them is kept unless
#: `COVERED` says the native plans produce it). With the native plans,
#: checker 3 runs in-process too, for its coverage only (`check_run`).
INPROC: Final = ("named", "blackbox", "oracle", "linear", "table", "subscribe")
#: Three kinds of row. One per anomaly (`anomaly` not null); one per checker
#: that ran on the slice (`anomaly` null, `checker` set: `outcome`, `skipped`
#: and `count` = its anomalies in all, including those the checker only
#: counted); and one coverage row per slice (`anomaly` and `checker` null):
#: `outcome` is the slice's combined outcome (`check_history`'s, coverage
#: included), `detail` its `Report.coverage_summary`, `to_judge`/`judged` its
#: operations to judge and judged, `tables`/`tables_partial` its tables and
#: those not fully judged, `not_tables` its operations on views, indexes and
#: clusters, and `not_judged` the first `SHOWN_TABLES` of those tables with
#: their reasons. `grp` is the slice's group.
RESULT_COLUMNS: Final = ("run", "anomaly", "checker", "op_id", "ops", "detail", "outcome", "skipped", "count",
                         "to_judge", "judged", "tables", "tables_partial", "not_tables", "not_judged", "grp")
#: One table not fully judged: its operations to judge, how many were
#: judged, every reason given (`TableCoverage.reasons`) and the first op ids
#: not judged.
GAP_TYPE: Final = "struct<table:string, ops:bigint, judged:bigint, reasons:array<string>, op_ids:array<bigint>>"
RESULT_SCHEMA: Final = (
    "run string, anomaly string, checker string, op_id bigint, ops array<bigint>, detail string, "
    "outcome string, skipped boolean, count bigint, to_judge bigint, judged bigint, tables bigint, "
    f"tables_partial bigint, not_tables bigint, not_judged array<{GAP_TYPE}>, grp bigint"
)
#: Tasks per core when whole runs are packed into tasks (`slice_results`):
#: the sweep's reasoning (`sim.spark.sweep.TASKS_PER_CORE`) — enough that a
#: slow run does not leave a core idle at the end, few enough that scheduling
#: is not the cost.
TASKS_PER_CORE: Final = 8


@final
@dataclass(frozen=True)
class Slice:
    """One unit of checking: the ops of `run` (trace directory `trace`)
    invoked in [`lo`, `hi`) — None: unbounded — as group `grp` of a run cut
    into segments (`cut`), else the whole run. `run_ops` is the whole run's
    size (checker 5's limit), `carries` the group's carry rows
    (`append_carries`), `ops` its size, for balancing tasks."""

    run: str
    trace: str
    ops: int = 0
    grp: int = 0
    lo: int | None = None
    hi: int | None = None
    cut: bool = False
    run_ops: int = 0
    carries: tuple[dict[str, Any], ...] = ()


def check_run(
    run: str,
    h: History,
    events: Sequence[Event],
    *,
    linear_time_limit_s: float = 10.0,
    native: bool = True,
) -> list[dict[str, Any]]:
    """Result rows (`RESULT_COLUMNS` less `grp`) for one run: `check_history`
    itself, so the verdicts, the coverage and the outcome are the in-process
    ones by construction. With `native` (the native plans run too), the
    anomalies the native plans report are left out (so the union of both has
    each once); checker 3 still runs here, because its coverage is part of
    the verdict and the native plans compute none."""
    from sim.history.checker.run import check_history

    rep = check_history(h, events, linear_time_limit_s=linear_time_limit_s)
    return [*_rows(run, rep.verdicts, native=native), _coverage_row(run, rep)]


def check_segment(
    run: str,
    grp: int,
    run_ops: int,
    h: History,
    events: Sequence[Event],
    carries: list[dict[str, Any]],
    *,
    linear_time_limit_s: float = 10.0,
) -> list[dict[str, Any]]:
    """Result rows for one group of segments of a cut run (`segments`), as
    `check_history` would give them on the group's ops with the carry rows
    appended: the same checkers in the same order, checker 4 (on the run's
    events) only in group 0, checker 5 skipped as on the whole run (which is
    over its limit), and the coverage of the group's ops.

    Why this is not `check_history` itself: the carry rows name no table,
    which `validate` refuses, so the group is validated before they are
    appended and the checkers run here; the coverage is `check_history`'s own
    (`run.coverage_of`, the one function that turns verdicts into it).

    What a group's coverage says of the run: a cut keeps each table's
    operations in one group, so a table's coverage is its group's, and the
    run is fully judged iff every group is. It is not always the coverage
    `check_history` finds on the whole run: the checkers with a time limit
    (checker "table") get it per group rather than once for the run, so a
    group may judge a table that the whole run, out of time, would not (and
    a cut run is then `valid` where `check_history` says `unknown`). Exact
    parity is impossible there; the run is `valid` only if every group's
    coverage is complete, else at best `unknown`. The reverse should not
    happen (a group's tables start their search no later than on the whole
    run, and each group has the whole time limit), but the limit is
    wall-clock time: a busy executor may run out where an idle host did not,
    and the run is then `unknown`, never wrongly `valid`."""
    from sim.history.checker import check_blackbox, check_named, check_oracle_events, check_whitebox
    from sim.history.checker.multiset import check_multiset
    from sim.history.checker.run import LINEAR_MAX_OPS, Report, coverage_of
    from sim.history.checker.subscribe import check_subscribe, remap, without_subscriptions
    from sim.history.checker.verdict import Collector, combine, nothing_judged
    from sim.history.model import validate

    if run_ops <= LINEAR_MAX_OPS:
        raise ValueError(f"run {run}: {run_ops} operations, within checker 5's limit: cut runs are larger")
    validate(h)
    append_carries(h, carries)
    # As `check_history`: the checkers but "subscribe" see the history without
    # its SUBSCRIBE rows, their coverage mapped back (a cut keeps a table's
    # subscriptions in its group, with the writes they must have received).
    rest, rows = without_subscriptions(h)

    def back(v: Verdict) -> Verdict:
        return v if rows is None else remap(v, rows)

    verdicts = [back(check_named(rest)), back(check_blackbox(rest)), back(check_whitebox(rest))]
    if grp == 0:
        verdicts.append(check_oracle_events(events))
    # As `check_history` on the whole run: checker 5 is exponential, skipped
    # above its limit, and judges none of the group's operations.
    t0 = time.perf_counter()
    skip = Collector("linear").verdict(
        unknown=f"{run_ops} operations exceed checker 5's limit of {LINEAR_MAX_OPS}",
        skipped=True, seconds=time.perf_counter() - t0)
    verdicts.append(replace(skip, coverage=nothing_judged(f"over the limit of {LINEAR_MAX_OPS} operations",
                                                          range(h.n))))
    verdicts.append(back(check_multiset(rest, time_limit_s=linear_time_limit_s)))
    verdicts.append(check_subscribe(h))
    tables, not_tables = coverage_of(h, verdicts)
    rep = Report(combine(verdicts, complete=all(t.complete for t in tables)), tuple(verdicts), tables, not_tables)
    return [*_rows(run, verdicts, native=False), _coverage_row(run, rep)]


def _rows(run: str, verdicts: Sequence[Verdict], *, native: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for v in verdicts:
        own = {n: c for n, c in v.counts.items() if not native or COVERED.get(n) != v.checker}
        rows.append({"run": run, "checker": v.checker, "detail": v.reason, "outcome": str(v.outcome),
                     "skipped": v.skipped, "count": sum(own.values())})
        rows += [
            {"run": run, "anomaly": a.name, "checker": a.checker, "op_id": a.ops[0] if a.ops else None,
             "ops": list(a.ops), "detail": a.explanation}
            for a in v.anomalies
            if not native or COVERED.get(a.name) != a.checker
        ]
    return rows


def _coverage_row(run: str, rep: Report) -> dict[str, Any]:
    """The slice's coverage row (`RESULT_COLUMNS`)."""
    from sim.history.checker.run import SHOWN_TABLES

    gaps = [t for t in rep.coverage if not t.complete]
    return {
        "run": run, "detail": rep.coverage_summary(), "outcome": str(rep.outcome),
        "to_judge": rep.ops_to_judge, "judged": rep.ops_judged, "tables": len(rep.coverage),
        "tables_partial": len(gaps), "not_tables": rep.not_tables,
        "not_judged": [(t.table, t.ops, t.judged, t.reasons(), list(t.unjudged_ops)) for t in gaps[:SHOWN_TABLES]],
    }


# --- reading a slice ------------------------------------------------------------------------------


def _filesystem(url: str) -> tuple[Any, str]:
    """A pyarrow filesystem and path for a trace directory: local paths and
    file:// URLs as they are; remote URLs through pyarrow's own filesystems
    (`s3a://`, Hadoop's name for S3, read as `s3://`, with the executors'
    AWS credentials)."""
    import pyarrow.fs as pafs

    if "://" not in url or url.startswith("file://"):
        return pafs.LocalFileSystem(), url.removeprefix("file://")
    fs, path = pafs.FileSystem.from_uri(url.replace("s3a://", "s3://", 1))
    return fs, path


def _row_groups(md: Any, lo: int | None, hi: int | None) -> list[int]:
    """The row groups that may hold an op invoked in [lo, hi): all of them
    unless their `invoke_ns` statistics rule them out."""
    col = next(j for j in range(md.num_columns) if md.schema.column(j).path == "invoke_ns")
    out = []
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(col).statistics
        if st is not None and st.has_min_max and (
            (lo is not None and st.max < lo) or (hi is not None and st.min >= hi)
        ):
            continue
        out.append(i)
    return out


def read_slice(s: Slice) -> tuple[History, list[Event]]:
    """The slice's ops, in trace order (checkers break ties by row), and —
    for a whole run or group 0 — the run's events."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from sim.history.traces import EVENTS_FILE, OPS_FILE, events_from_table, history_from_table

    fs, base = _filesystem(s.trace)
    with fs.open_input_file(f"{base}/{OPS_FILE}") as f:
        pf = pq.ParquetFile(f)
        t = pf.read_row_groups(_row_groups(pf.metadata, s.lo, s.hi))
    if s.lo is not None or s.hi is not None:
        inv = t["invoke_ns"]
        keep = None
        if s.lo is not None:
            keep = pc.greater_equal(inv, s.lo)
        if s.hi is not None:
            below = pc.less(inv, s.hi)
            keep = below if keep is None else pc.and_(keep, below)
        t = t.filter(keep)
    events: list[Event] = []
    if s.grp == 0:
        with fs.open_input_file(f"{base}/{EVENTS_FILE}") as f:
            events = events_from_table(pq.read_table(f).sort_by("seq"))
    return history_from_table(t), events


def check_slice(s: Slice, *, native: bool) -> list[tuple[Any, ...]]:
    """The slice's result rows, as tuples in `RESULT_COLUMNS` order (a
    column a row does not have is null)."""
    h, events = read_slice(s)
    if s.cut:
        rows = check_segment(s.run, s.grp, s.run_ops, h, events, list(s.carries))
    else:
        rows = check_run(s.run, h, events, native=native)
    return [(*(r.get(c) for c in RESULT_COLUMNS[:-1]), s.grp) for r in rows]


def _check_task(slices: list[Slice], *, native: bool) -> Iterator[tuple[Any, ...]]:
    for s in slices:
        yield from check_slice(s, native=native)


def balance(slices: Sequence[Slice], tasks: int) -> list[list[Slice]]:
    """`slices` in `tasks` lists of about equal work (largest first, each to
    the least loaded: Graham's LPT rule), the most loaded first — Spark starts
    tasks in partition order, so the longest start first."""
    heap = [(0, i) for i in range(tasks)]
    bins: list[list[Slice]] = [[] for _ in range(tasks)]
    load = [0] * tasks
    for s in sorted(slices, key=lambda s: (-s.ops, s.run, s.grp)):
        n, i = heapq.heappop(heap)
        bins[i].append(s)
        load[i] = n + max(s.ops, 1)
        heapq.heappush(heap, (load[i], i))
    return [bins[i] for i in sorted(range(tasks), key=lambda i: (-load[i], i)) if bins[i]]


def slice_results(spark: Any, slices: Sequence[Slice], *, native: bool) -> Any:
    """A DataFrame of the result rows (`RESULT_SCHEMA`) of every slice, each
    group of a cut run a task of its own and whole runs packed into
    `TASKS_PER_CORE` tasks per core. The rows are few (anomalies are capped
    per checker) and reach the driver, which the merge of a cut run's groups
    and the outputs then read as a local relation."""
    cores = max(1, int(spark.sparkContext.defaultParallelism))
    tasks = min(len(slices), max(cores * TASKS_PER_CORE, sum(s.cut for s in slices)))
    rows: list[tuple[Any, ...]] = []
    if tasks:
        bins = balance(slices, tasks)
        rdd = spark.sparkContext.parallelize(bins, len(bins))
        rows = rdd.flatMap(partial(_check_task, native=native)).collect()
    return spark.createDataFrame(rows, RESULT_SCHEMA)


def with_row_order(ops: Any) -> Any:
    """`ops` with `_row`, increasing in file order: a trace is one Parquet
    file, and Spark reads a file's splits in order (row ids grow with the
    partition index and the row within it)."""
    from pyspark.sql import functions as F

    return ops.withColumn("_row", F.monotonically_increasing_id())


def append_carries(h: History, rows: list[dict[str, Any]]) -> None:
    """Appends the carry rows to `h` (validated before): each names no table,
    so only the timestamp sweeps and checker 2's real-time chain see it, and it
    completed before every row of `h` began, so it bounds them all and is
    bounded by none."""
    from sim.history.model import KIND_CODE, NONE, STATUSES, Kind

    status = {s.value: i for i, s in enumerate(STATUSES)}
    for r in rows:
        h.op_id.append(r["op_id"])
        h.process.append(r["process"])
        h.kind.append(KIND_CODE[Kind(r["kind"])])
        h.obj.append(-1)
        h.invoke.append(r["invoke_ns"])
        h.complete.append(r["complete_ns"])
        h.status.append(status[r["status"]])
        h.el_off.append(len(h.el))
        h.res_off.append(len(h.res))
        h.count.append(NONE)
        h.args.append(None)
        h.error_code.append(None)
        h.error.append(None)
        for f in ("read_ts", "write_ts", "catalog_ts"):
            getattr(h, f).append(NONE if r[f] is None else r[f])
        h.client.append(r["client"])
        h.n += 1
