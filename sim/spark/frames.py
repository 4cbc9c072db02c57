"""Loading traces into Spark and the per-table views every check shares.

A trace directory (sim/history.py) holds `ops.parquet`, `events.parquet` and
`meta.json`; any number of them, from any runs and configurations, become one
ops DataFrame and one events DataFrame, keyed by `run`. Run names must be
unique across the inputs (they key every partition of the replay).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

from sim.history import EVENTS_FILE, META_FILE, OPS_FILE, SCHEMA_VERSION, HistoryError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "DDL_KINDS",
    "INF",
    "TABLE_DDL",
    "cut",
    "expand_traces",
    "load",
    "prepare",
    "table_ops",
]

#: `sim.checker.tables.INF`: the end time of an op that may take effect any time.
INF: Final = 2**62
DDL_KINDS: Final = (
    "create-table", "drop-table", "create-index", "drop-index",
    "create-view", "drop-view", "create-cluster", "drop-cluster",
)  # fmt: skip
TABLE_DDL: Final = ("create-table", "drop-table")
DATA_KINDS: Final = ("add", "read", "update", "delete")


def cut(df: Any) -> Any:
    """`df` computed now and its lineage truncated (a local checkpoint). The
    checks are deep trees of windows, joins and struct aggregates; planned as
    one query, Spark's optimizer spends minutes on alias-aware orderings, so
    each stage is materialized and the next plans from its result."""
    return df.localCheckpoint(eager=True)


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def expand_traces(paths: Sequence[str]) -> list[str]:
    """Trace directories under `paths`: a local path is a trace if it has
    `meta.json`, else every directory below it that has one (so the output
    folder of `coordsim compare` or `coordsim sweep` can be passed whole).
    Remote URLs (s3a://, hdfs://) are taken as trace directories as given.

    Raises:
        HistoryError: a local path holds no trace.
    """
    out: list[str] = []
    for p in paths:
        if _is_remote(p):
            out.append(p.rstrip("/"))
            continue
        local = p.removeprefix("file://")
        if os.path.isfile(os.path.join(local, META_FILE)):
            out.append(os.path.abspath(local))
            continue
        found = sorted(
            os.path.abspath(root) for root, _dirs, files in os.walk(local) if META_FILE in files
        )
        if not found:
            raise HistoryError(f"{p}: no trace directory (no {META_FILE}) here or below")
        out.extend(found)
    return out


def load(spark: Any, traces: Sequence[str]) -> tuple[Any, Any, Any]:
    """(ops, events, meta) DataFrames of the given trace directories.

    `meta` has one row per trace: run, config, seed, workload, concurrency —
    the last two from meta.json's extra fields when a producer wrote them
    (`coordsim compare` does), else derived from the run name.

    Raises:
        HistoryError: a trace of another schema version.
    """
    from pyspark.sql import functions as F

    ops = spark.read.parquet(*[f"{t}/{OPS_FILE}" for t in traces])
    events = spark.read.parquet(*[f"{t}/{EVENTS_FILE}" for t in traces])
    meta = spark.read.option("multiLine", True).json([f"{t}/{META_FILE}" for t in traces])
    versions = {r[0] for r in meta.select("schema_version").distinct().collect()}
    if versions != {SCHEMA_VERSION}:
        raise HistoryError(f"traces of schema version(s) {sorted(versions)}; this coordsim reads {SCHEMA_VERSION}")
    cols = set(meta.columns)
    # Without workload/concurrency fields, the run name stands for both (one
    # run = one workload at one concurrency), so nothing is merged wrongly.
    workload = F.col("workload").cast("string") if "workload" in cols else F.lit(None).cast("string")
    conc = F.col("concurrency").cast("string") if "concurrency" in cols else F.lit(None).cast("string")
    meta = meta.select(
        F.col("run").cast("string").alias("run"),
        F.col("config").cast("string").alias("config"),
        F.col("seed").cast("long").alias("seed"),
        F.coalesce(workload, F.col("run").cast("string")).alias("workload"),
        F.coalesce(conc, F.lit("-")).alias("concurrency"),
    )
    return ops, events, meta


def prepare(ops: Any) -> Any:
    """The ops columns the checks use, with `e` = completion or `INF` for an
    indeterminate op (it may take effect any time after its invoke)."""
    from pyspark.sql import functions as F

    return ops.select(
        F.col("run").cast("string").alias("run"),
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


def table_ops(ops: Any) -> Any:
    """Ops on table names only (`sim.checker.tables.index_tables`): a name that
    any index/view/cluster DDL touches is not a table of elements."""
    from pyspark.sql import functions as F

    derived = (
        ops.filter(F.col("kind").isin(*[k for k in DDL_KINDS if k not in TABLE_DDL]))
        .select("run", "object")
        .distinct()
    )
    return ops.filter(F.col("object").isNotNull()).join(derived, ["run", "object"], "left_anti")
