"""Loading traces into Spark and the per-table views every check shares.

A trace directory (sim/history/model.py) holds `ops.parquet`, `events.parquet` and
`meta.json`; any number of them, from any runs and configurations, become one
ops DataFrame and one events DataFrame, keyed by `run`. Run names must be
unique across the inputs (they key every partition of the replay).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

from sim.history.model import HistoryError
from sim.history.traces import EVENTS_FILE, META_FILE, OPS_FILE, SCHEMA_VERSION, find_traces

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "DDL_KINDS",
    "INF",
    "KEYS",
    "NAMES",
    "TABLE_DDL",
    "Kept",
    "elements",
    "expand_traces",
    "load",
    "load_windows",
    "prepare",
    "read_facts",
    "table_ops",
]

#: `sim.history.checker.tables.INF`: the end time of an op that may take effect any time.
INF: Final = 2**62
DDL_KINDS: Final = (
    "create-table", "drop-table", "create-index", "drop-index",
    "create-view", "drop-view", "create-cluster", "drop-cluster",
)
TABLE_DDL: Final = ("create-table", "drop-table")
DATA_KINDS: Final = ("add", "read", "update", "delete")
#: A table of a run: `pk`, a hash of (run, object), partitions the table ops
#: (each check is per table, so one shuffle by it puts each table's ops in
#: one partition for all of them); `tid` (`whitebox.annotate`) tells apart the
#: tables of a partition. Both are longs: the element-level joins, groupings
#: and sorts hash and compare them instead of names, many millions of times.
KEYS: Final = ("pk", "tid")
#: The names a table id stands for.
NAMES: Final = ("run", "object")


@final
class Kept:
    """The frames one replay materializes, released together when it is done.

    The checks share a few frames (the annotated table ops, their
    per-element and per-read summaries); each is computed once, here, as a
    local checkpoint, and every check reads it from memory (spilling to
    disk). Truncating the lineage matters as much as not recomputing: every
    DataFrame call re-analyzes its whole plan, and over the uncut plans of
    the checks that alone took minutes. Adaptive execution is off while a
    frame is checkpointed so that the frame keeps its hash partitioning by
    (run, object) (an adaptive plan reports none), and the checks over it
    then join, group and window without shuffles."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark
        self._frames: list[Any] = []

    def __call__(self, df: Any) -> Any:
        conf = self._spark.conf
        before = conf.get("spark.sql.adaptive.enabled")
        conf.set("spark.sql.adaptive.enabled", "false")
        try:
            kept = df.localCheckpoint(eager=True)
        finally:
            conf.set("spark.sql.adaptive.enabled", before)
        self._frames.append(kept)
        return kept

    def release(self) -> None:
        """Drops the checkpoints' blocks now rather than at the JVM's next
        garbage collection (a long-lived session, such as the tests', would
        hold every replay's frames until then)."""
        for df in self._frames:
            # No public API unpersists a local checkpoint: its plan is the
            # checkpointed RDD, which can be.
            df._jdf.queryExecution().logical().rdd().unpersist(False)
        self._frames.clear()


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def expand_traces(paths: Sequence[str]) -> list[str]:
    """Trace directories under `paths` (`sim.history.traces.find_traces` for
    a local path, so a run directory or a runs root can be passed whole).
    Remote URLs (s3a://, hdfs://) are taken as trace directories as given.

    Raises:
        HistoryError: a local path holds no trace.
    """
    out: list[str] = []
    for p in paths:
        if _is_remote(p):
            out.append(p.rstrip("/"))
        else:
            out.extend(str(t) for t in find_traces(p.removeprefix("file://")))
    return out


#: The columns of `load`'s meta frame.
META_SCHEMA: Final = "run string, config string, seed bigint, workload string, concurrency string"
#: The columns of `load_windows`' frame: one row per measured window of a
#: concurrency level (`concurrency` as a string, as `metrics` names levels).
WINDOWS_SCHEMA: Final = "run string, concurrency string, start_ns bigint, end_ns bigint"


def _read_metas(spark: Any, traces: Sequence[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """(places, documents): each trace's meta.json, read once (by the driver
    when local, else by Spark), and where it was found.

    Raises:
        HistoryError: a trace of another schema version.
    """
    from pyspark.sql import functions as F

    if any(_is_remote(t) for t in traces):
        # Spark reads the files in an order of its own: each document names
        # its trace by its file's URL.
        docs = [r.asDict() for r in spark.read.option("multiLine", True).json([f"{t}/{META_FILE}" for t in traces])
                .select(F.input_file_name().alias("f"), F.to_json(F.struct("*")).alias("doc")).collect()]
        places = [str(d["f"]).rsplit("/", 1)[0] for d in docs]
        metas = [json.loads(d["doc"]) for d in docs]
    else:
        # A few hundred bytes per trace: read here, not by a Spark job.
        places = list(traces)
        metas = [json.loads(Path(t.removeprefix("file://"), META_FILE).read_text()) for t in traces]
    versions = {m.get("schema_version") for m in metas}
    if versions != {SCHEMA_VERSION}:
        raise HistoryError(f"traces of schema version(s) {sorted(map(str, versions))}; this coordsim reads {SCHEMA_VERSION}")
    return places, metas


def load(spark: Any, traces: Sequence[str]) -> tuple[Any, Any, Any, Any, dict[str, int], dict[str, str]]:
    """(ops, events, meta, runs, run_ops, dirs) of the given trace directories.

    `meta` has one row per trace: run, config, seed, workload, concurrency —
    the last two from meta.json's extra fields when a producer wrote them
    (`coordsim compare` does), else derived from the run name. The meta.json
    files are read once (by the driver when local, else by Spark) into a
    local relation, so its consumers do not re-read them. `runs` numbers the
    runs (run, rid), and `run_ops` maps each run to its `ops` field.

    Raises:
        HistoryError: a trace of another schema version.
    """
    ops = spark.read.parquet(*[f"{t}/{OPS_FILE}" for t in traces])
    events = spark.read.parquet(*[f"{t}/{EVENTS_FILE}" for t in traces])
    places, metas = _read_metas(spark, traces)
    # Without workload/concurrency fields, the run name stands for both (one
    # run = one workload at one concurrency), so nothing is merged wrongly.
    rows = [
        (str(m["run"]), str(m["config"]), int(m["seed"]), str(m["run"] if m.get("workload") is None else m["workload"]),
         "-" if m.get("concurrency") is None else str(m["concurrency"]))
        for m in metas
    ]
    meta = spark.createDataFrame(rows, META_SCHEMA)
    runs = spark.createDataFrame([(r, i) for i, r in enumerate(sorted({r[0] for r in rows}))], "run string, rid bigint")
    run_ops = {str(m["run"]): int(m.get("ops") or 0) for m in metas}
    dirs: dict[str, str] = {}
    for t, m in zip(places, metas, strict=True):
        if dirs.setdefault(str(m["run"]), t) != t:
            raise HistoryError(f"two traces of run {m['run']!r}: {dirs[str(m['run'])]} and {t}")
    return ops, events, meta, runs, run_ops, dirs


def load_windows(spark: Any, traces: Sequence[str]) -> Any:
    """The windows `coordsim compare` measured each level of the given traces
    in (`WINDOWS_SCHEMA`), for `sim.spark.metrics.metrics`: compare measures
    only the operations a window starts, so a replay that agrees with it must
    know them. From meta.json's `windows` (seconds in the trace's clock, to
    ns as the recorder rounds them); a trace without them has no rows. Reads
    the meta.json files again (a few hundred bytes a trace), so that `load`'s
    callers that measure nothing are unchanged.

    Raises:
        HistoryError: a trace of another schema version.
    """
    rows = [
        (str(m["run"]), str(int(w["concurrency"])), round(float(w["start_s"]) * 1e9), round(float(w["end_s"]) * 1e9))
        for m in _read_metas(spark, traces)[1]
        for w in m.get("windows") or ()
    ]
    return spark.createDataFrame(rows, WINDOWS_SCHEMA)


def prepare(ops: Any) -> Any:
    """The ops columns the checks use, with `e` = completion or `INF` for an
    indeterminate op (it may take effect any time after its invoke)."""
    from pyspark.sql import functions as F

    return ops.select(
        # `run` as read (a string): a no-op cast's alias is dropped by the
        # optimizer, and a checkpoint of a frame partitioned by the unaliased
        # column would then lose its partitioning.
        F.col("run"),
        F.col("op_id"),
        F.col("kind").cast("string").alias("kind"),
        F.col("object"),
        F.col("elements"),
        F.col("args"),
        F.col("invoke_ns").alias("inv"),
        F.when((F.col("status") == "info") | F.col("complete_ns").isNull(), F.lit(INF))
        .otherwise(F.col("complete_ns"))
        .alias("e"),
        F.col("status").cast("string").alias("status"),
        F.col("error_code"),
        F.col("result"),
        F.col("count"),
        F.col("read_ts"),
        F.col("write_ts"),
        F.col("catalog_ts"),
    )


def table_ops(ops: Any, partitions: int) -> Any:
    """Ops on table names only (`sim.history.checker.tables.index_tables`): a name that
    any index/view/cluster DDL touches is not a table of elements. Hash
    partitioned by `pk` into `partitions`: the one shuffle of the table
    checks (they all join, group and window within a table)."""
    from pyspark.sql import functions as F

    derived = (
        ops.filter(F.col("kind").isin(*[k for k in DDL_KINDS if k not in TABLE_DDL]))
        .select(*NAMES)
        .distinct()
    )
    # The names are few (one per index/view/cluster DDL): broadcast, so the
    # partitioned side stays as it is.
    return (
        ops.filter(F.col("object").isNotNull())
        .withColumn("pk", F.xxhash64(*NAMES))
        .repartition(partitions, "pk")
        .join(F.broadcast(derived), list(NAMES), "left_anti")
    )


def elements(t: Any) -> Any:
    """One row per (table, element) added: its last non-failed add (`a_op_id`,
    `a_inv`, `a_e`, and `a_ok`: whether that add is ok; null if every add of
    it failed) and its first failed add (`f_id`) — the writer the named
    checks blame. Computed once and shared: the element-level joins of every
    check look elements up here instead of re-exploding and re-grouping the
    adds. Every aggregate is of numbers, so Spark hashes the elements rather
    than sorting them."""
    from pyspark.sql import functions as F

    nf = F.col("status") != "fail"
    last = F.when(nf, F.col("op_id"))
    return (
        t.filter(F.col("kind") == "add")
        .select(*KEYS, "op_id", "inv", "e", "status", F.explode("elements").alias("el"))
        .groupBy(*KEYS, "el")
        .agg(
            F.max(last).alias("a_op_id"),
            F.max_by(F.when(nf, F.col("inv")), last).alias("a_inv"),
            F.max_by(F.when(nf, F.col("e")), last).alias("a_e"),
            F.max_by(F.when(nf, F.col("status") == "ok"), last).alias("a_ok"),
            F.min(F.when(~nf, F.col("op_id"))).alias("f_id"),
        )
    )


def read_facts(t: Any, elems: Any) -> Any:
    """Per ok read of a table without UPDATE/DELETE (`mutated` = 0) that
    returned something (keyed by `KEYS` and op_id): `ff`, the position in
    its distinct result of the first element no add had begun by the read's
    end (null: none), and `got`, how many distinct elements it returned that
    were acknowledged before it began.

    This is the one pass over every returned element: each is looked up in
    `elems` hashed per partition (the reads stream past it, unsorted), and
    the lookups are counted per read in a hash aggregate, so no per-element
    row outlives it."""
    from pyspark.sql import functions as F

    # Positions in the distinct result keep the order of first occurrences,
    # which is all the first-element rule looks at.
    r = t.filter((F.col("mutated") == 0) & (F.col("kind") == "read") & (F.col("status") == "ok")).select(
        *KEYS, "op_id", "inv", "e", F.posexplode(F.array_distinct("result")).alias("pos", "el")
    )
    x = r.join(elems.hint("shuffle_hash"), [*KEYS, "el"], "left")
    future = F.col("a_op_id").isNull() | (F.col("a_inv") > F.col("e"))
    return x.groupBy(*KEYS, "op_id").agg(
        F.min(F.when(future, F.col("pos"))).alias("ff"),
        F.count(F.when(F.col("a_ok") & (F.col("a_e") < F.col("inv")), 1)).alias("got"),
    )
