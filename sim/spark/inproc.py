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
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final, final

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from sim.history.model import Event, History

__all__ = [
    "COVERED", "INPROC", "NATIVE", "RESULT_COLUMNS", "RESULT_SCHEMA", "Slice", "balance", "check_run", "check_segment",
    "check_slice", "read_slice", "slice_results", "with_row_order",
]  # fmt: skip

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
#: the slice (`anomaly` null, `outcome` set; `count` = its anomalies in all,
#: including those the checker only counted); `grp` is the slice's group.
RESULT_COLUMNS: Final = ("run", "anomaly", "checker", "op_id", "ops", "detail", "outcome", "skipped", "count", "grp")
RESULT_SCHEMA: Final = (
    "run string, anomaly string, checker string, op_id bigint, ops array<bigint>, detail string, "
    "outcome string, skipped boolean, count bigint, grp bigint"
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
    """Result rows (`RESULT_COLUMNS` less `grp`) for one run: the in-process
    checkers' verdicts. With `native` (the native plans run too), checker 3
    does not run here and the anomalies the native plans report are left out
    (so the union of both has each once); without, every checker of
    `CHECKERS` runs here."""
    from sim.history.checker import check_blackbox, check_named, check_oracle_events, check_replay
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
    """Result rows for one group of segments of a cut run (`segments`):
    checkers 1-3 on its ops with the carry rows appended; checker 4 on the
    run's events and checker 5's verdict on the run (too large: skipped, as
    in-process) come from group 0."""
    from sim.history.checker import check_blackbox, check_named, check_oracle_events, check_replay
    from sim.history.model import validate

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
    """The slice's result rows, as tuples in `RESULT_COLUMNS` order."""
    h, events = read_slice(s)
    if s.cut:
        rows = check_segment(s.run, s.grp, s.run_ops, h, events, list(s.carries))
    else:
        rows = check_run(s.run, h, events, native=native)
    return [(*(r[c] for c in RESULT_COLUMNS[:-1]), s.grp) for r in rows]


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
