"""Checker 3 (`sim.history.checker.whitebox`) as Spark operations, so its verdict scales
past one process: DDL replayed in `catalog_ts` order, writes in `write_ts`
order, each read compared with the state at its `read_ts`, and timestamps
checked against real time.

Everything is windows and joins partitioned by run and table (the table
checks never shuffle: see `frames.KEYS`) — nothing is collected to the driver. An add-only incarnation (the common case)
is checked by running sums: the count and an order-free hash of the elements
written up to a read's timestamp must equal the count and hash of what it
returned. Incarnations with UPDATE/DELETE or filtered reads need the actual
set; there each read folds the earlier writes with Spark's `aggregate` (a
built-in higher-order function, no Python UDF). Anomalies carry the same op
ids as the in-process checker's, which the tests compare row for row.

This module holds the plan (`whitebox_parts`), the real-time and catalog
checks, and `annotate`, the frame the catalog and data checks read; the data
check is `sim.spark.whitebox_data`, and the anomaly rows all of them emit are
`sim.spark.anomaly_rows`, as the in-process checker is split.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from sim.spark.anomaly_rows import BROADCAST_ROWS, NAME, anomaly
from sim.spark.anomaly_rows import F as spark_F
from sim.spark.anomaly_rows import W as spark_W
from sim.spark.frames import DDL_KINDS, INF, KEYS, NAMES
from sim.spark.whitebox_data import data_parts

if TYPE_CHECKING:
    from sim.spark.frames import Kept

__all__ = ["BUCKET_OPS", "annotate", "has_cut_off_ddl", "whitebox_parts"]

#: Operations per real-time bucket (`_realtime`): a run's timeline is cut
#: into about n / BUCKET_OPS windows of time, so no window holds a whole run.
BUCKET_OPS: Final = 1 << 16


# --- timestamps vs real time ------------------------------------------------------------------


def _realtime(ops: Any, runs: Any, keep: Kept) -> Any:
    """An op whose timestamp is below (a write: not above) the largest of any op
    that completed before it began; per timeline, a running max over ends and
    invokes in time order (an end at the same instant as an invoke is not
    before it).

    A run's timeline is one order, but one window over it would be one task
    holding the whole run. So time is cut into buckets: the max over ends in
    earlier buckets is a prefix max over per-bucket maxima (a few rows per
    run), and only the ends in the op's own bucket need the running max.
    Timelines are keyed by a number (`runs`: run -> `rid`), so the sorts
    compare longs, not run names; the op the in-process checker names (of
    those with the largest timestamp, the earliest to complete) is looked up
    for the few violations only."""
    F, W = spark_F(), spark_W()
    d = (
        ops.filter(F.col("status") == "ok")
        .withColumn("ts", F.greatest("read_ts", "write_ts"))
        .filter(F.col("ts").isNotNull())
        .select("run", F.lit(0).alias("tl"), "op_id", "inv", "e", "ts",
                (F.col("kind") != "read").cast("int").alias("w"))
    )
    is_ddl = F.col("kind").isin(*DDL_KINDS)
    c = (
        ops.filter(F.col("catalog_ts").isNotNull() & (F.col("status") != "info"))
        .filter(~is_ddl | (F.col("status") == "ok"))
        .select("run", F.lit(1).alias("tl"), "op_id", "inv", "e",
                F.col("catalog_ts").alias("ts"), is_ddl.cast("int").alias("w"))
    )
    # Bucket width per run: every invoke is in [lo, hi]; ends before lo (a
    # malformed trace) go to bucket -1, before every invoke's, and ends after
    # hi precede no invoke at all.
    span = (
        ops.groupBy("run").agg(
            F.min("inv").alias("lo"), F.max("inv").alias("hi"),
            F.expr(f"greatest(1L, (max(inv) - min(inv)) div ((count(1) + {BUCKET_OPS - 1}) div {BUCKET_OPS}) + 1)")
            .alias("width"),
        )
        .join(F.broadcast(runs), "run")
    )

    def bucket(t: str) -> Any:
        return F.when(F.col(t) < F.col("lo"), F.lit(-1)).otherwise(F.expr(f"({t} - lo) div width"))

    # Kept: read twice (the events and the bucket maxima) and small per row.
    u = keep(
        d.unionByName(c).join(F.broadcast(span), "run")
        .select((F.col("rid") * 2 + F.col("tl")).alias("g"), "op_id", "inv", "e", "ts", "w",
                F.when(F.col("e") <= F.col("hi"), bucket("e")).alias("be"), bucket("inv").alias("bi"))
    )
    ends = u.filter(F.col("be").isNotNull()).select(
        "g", F.col("be").alias("b"), F.col("e").alias("t"), F.lit(1).alias("typ"), "op_id",
        F.col("ts").alias("val"), F.lit(None).cast("long").alias("ts"), F.lit(None).cast("int").alias("w"),
    )
    queries = u.select("g", F.col("bi").alias("b"), F.col("inv").alias("t"), F.lit(0).alias("typ"), "op_id",
                       F.lit(None).cast("long").alias("val"), "ts", "w")
    win = W.partitionBy("g", "b").orderBy("t", "typ", "op_id").rowsBetween(W.unboundedPreceding, 0)
    q = ends.unionByName(queries).withColumn("inb", F.max("val").over(win)).filter(F.col("typ") == 0)
    buckets = (
        u.select("g", F.col("be").alias("b"), F.col("ts").alias("val")).filter(F.col("b").isNotNull())
        .unionByName(u.select("g", F.col("bi").alias("b"), F.lit(None).cast("long").alias("val")))
        .groupBy("g", "b").agg(F.max("val").alias("bmax"))
    )
    earlier = W.partitionBy("g").orderBy("b").rowsBetween(W.unboundedPreceding, -1)
    pre = buckets.select("g", "b", F.max("bmax").over(earlier).alias("pre"))
    # Buckets are few (about ops / BUCKET_OPS per run): broadcast. Kept: the
    # violations (usually none) are read twice, and the window is not redone.
    bad = keep(
        q.join(F.broadcast(pre), ["g", "b"])
        .withColumn("need", F.greatest("pre", "inb"))
        .filter(F.col("need").isNotNull() & ((F.col("ts") - F.col("w")) < F.col("need")))
        .select("g", "op_id", "ts", "need")
    )
    # The op that set the bound: the earliest to complete with that timestamp.
    # Few bounds are broadcast, so finding them is a pass over `u`, not a
    # shuffle of it.
    bounds = bad.select("g", F.col("need").alias("ts")).distinct()
    if bad.count() <= BROADCAST_ROWS:
        bounds = F.broadcast(bounds)
    first = (
        u.join(bounds, ["g", "ts"])
        .groupBy("g", "ts").agg(F.min(F.struct("e", "op_id")).op_id.alias("a"))
        .withColumnRenamed("ts", "need")
    )
    bad = (
        bad.join(first, ["g", "need"])
        .join(F.broadcast(runs), F.col("rid") == F.expr("g div 2"))
        .withColumn("tl", F.when(F.expr("g % 2") == 1, "catalog").otherwise("data"))
    )
    return anomaly(
        bad, NAME, "whitebox", F.col("op_id"), F.array("a", "op_id"),
        F.format_string("%s timestamp %d below %d of op %d, which completed before it began",
                        F.col("tl"), F.col("ts"), F.col("need"), F.col("a")),
    )


# --- catalog ----------------------------------------------------------------------------------


def has_cut_off_ddl(ops: Any) -> bool:
    """Whether any create/drop ended `info` without a catalog_ts (then
    `annotate` needs `cut_off=True`). One pass over three columns of the ops,
    stopping at the first."""
    F = spark_F()
    cut = F.col("kind").isin("create-table", "drop-table") & (F.col("status") == "info") & F.col("catalog_ts").isNull()
    return bool(ops.filter(cut).select("op_id").take(1))


def annotate(tops: Any, *, cut_off: bool) -> Any:
    """The table ops (`frames.table_ops`) with what every later check needs to
    know about their table, in one pass:

    - `mutated`: 1 if the table has a non-failed UPDATE/DELETE (the named
      element rules skip such tables);
    - `inc`: the incarnation the op acted on, from DDL replayed in catalog_ts
      order — the create's op id, -1 for a table that existed from the start,
      null for an op outside any (failed, unplaceable, or in an unchecked table);
    - `cat_bad`, `cause`: the op's view of the catalog at its catalog_ts is
      wrong (an unknown-table failure where the table existed, a success
      where it did not), and the DDL that decided it;
    - `in_ddl`: a create/drop that takes part in the replay (`_catalog`);
    - `floating`: an `info` INSERT/UPDATE/DELETE without a catalog_ts (a
      crash cut it off before planning finished) on a table with DDL: it may
      have landed in any incarnation (`_floating`); `initial`: whether the
      table existed before its first replayed DDL (null: it has none);
    - `tid`: a number for the table, unique among all (`frames.KEYS`): the
      smallest row id among its ops (row ids are unique per partition and
      row, and this frame is computed once, as a checkpoint).

    Windows over each table in catalog_ts order: the input is sorted once.
    With `cut_off` (`has_cut_off_ddl`), a join (`_cut_off_ddl`) first looks
    up a few rows in it; it reads the input three times, so the caller
    materializes the input for it."""
    F, W = spark_F(), spark_W()
    st, k, cts = F.col("status"), F.col("kind"), F.col("catalog_ts")
    is_top = k.isin("add", "read", "update", "delete") & ((st != "fail") | (F.col("error_code") == "42P01"))
    is_create = (k == "create-table") & (st != "fail")
    is_drop = (k == "drop-table") & (st != "fail")
    # One sort by catalog_ts serves both windows: the facts over the whole
    # table, then the DDL replayed up to each op (a range frame takes in the
    # DDL at the op's own catalog_ts; of those, the last by op id counts).
    by_cts = W.partitionBy("pk", *NAMES).orderBy("catalog_ts")
    table = by_cts.rowsBetween(W.unboundedPreceding, W.unboundedFollowing)
    # What shows that a create (drop) at a catalog_ts happened: an op that
    # found the table there (not there) at or after it, or an ok drop
    # (create) strictly after it (at ts - 1 here, so both compare with >=).
    saw_table = F.when(is_top & (st == "ok"), cts).when((k == "drop-table") & (st == "ok"), cts - 1)
    saw_none = F.when(is_top & (st == "fail"), cts).when((k == "create-table") & (st == "ok"), cts - 1)
    x = (_cut_off_ddl(tops) if cut_off else tops).withColumn("rowid", F.monotonically_increasing_id()).select(
        "*",
        F.min("rowid").over(table).alias("tid"),
        F.max(saw_table).over(table).alias("ok_max_cts"),
        F.max(saw_none).over(table).alias("unk_max_cts"),
        F.max((is_top & ((st == "ok") | ((k == "add") & (st == "info")))).cast("int")).over(table).alias("any_ok"),
        # DDL without a catalog_ts that may have happened (ok, or cut off by a
        # crash) cannot be placed on the catalog timeline.
        F.max(((is_create | is_drop) & cts.isNull() & (st == "ok")).cast("int")).over(table).alias("unplaceable"),
        F.sum((is_create | is_drop).cast("int")).over(table).alias("n_ddl_all"),
        F.max((k.isin("update", "delete") & (st != "fail")).cast("int")).over(table).alias("mutated"),
    )
    # A create/drop is replayed if it has a catalog_ts and, when indeterminate,
    # some op saw its effect.
    replayed = F.coalesce(
        (is_create & cts.isNotNull() & ((st != "info") | (F.col("ok_max_cts") >= cts)))
        | (is_drop & cts.isNotNull() & ((st != "info") | (F.col("unk_max_cts") >= cts))),
        F.lit(False),
    )
    ddl = F.when(F.col("replayed"), F.struct("catalog_ts", "op_id", (k == "create-table").alias("is_create")))
    x = x.withColumn("replayed", replayed).select(
        "*",
        F.sum(F.col("replayed").cast("int")).over(table).alias("n_ddl"),
        F.min(ddl).over(table).is_create.alias("first_create"),
        F.max(ddl).over(by_cts.rangeBetween(W.unboundedPreceding, W.currentRow)).alias("last"),
    )
    n = F.col("n_ddl")
    last = F.col("last")
    checked = ~((F.col("unplaceable") == 1) | ((n == 0) & (F.col("n_ddl_all") > 0)))
    if cut_off:
        seen = (F.col("ok_max_cts") >= F.col("low_create")) | (F.col("unk_max_cts") >= F.col("low_drop"))
        checked = checked & ~F.coalesce(seen, F.lit(False))
    # Without DDL in the history, the table existed all along iff some op on
    # it succeeded; else the last replayed DDL at or before the op's catalog_ts
    # decides (none: it exists iff the first DDL is a drop).
    state = (
        F.when(n == 0, F.when(F.col("any_ok") == 1, F.lit(-1)))
        .when(last.isNull(), F.when(~F.col("first_create"), F.lit(-1)))
        .when(last.is_create, last.op_id)
        .cast("long")
    )
    placed = checked & is_top & ((n == 0) | cts.isNotNull())
    return x.select(
        *tops.columns,
        "tid",
        "mutated",
        F.when(placed & (st != "fail") & state.isNotNull(), state).alias("inc"),
        (placed & (((st == "fail") & state.isNotNull()) | ((st == "ok") & state.isNull()))).alias("cat_bad"),
        F.when(n > 0, last.op_id).alias("cause"),
        (checked & F.col("replayed")).alias("in_ddl"),
        (checked & (n > 0) & cts.isNull() & (st == "info") & k.isin("add", "update", "delete")).alias("floating"),
        F.when(n > 0, ~F.col("first_create")).alias("initial"),
    )


def _cut_off_ddl(tops: Any) -> Any:
    """`tops` with, per table, the least catalog_ts at which an `info`
    create (`low_create`) or drop (`low_drop`) without a catalog_ts may have
    taken effect (null: there is none). A crash cut it off before it got one;
    it took effect, if at all, at or after the catalog_ts of every ok op of
    the table that completed before it began. `annotate` leaves the table
    unchecked if something at or after that shows it may have happened.

    Such DDL is rare: the few rows are hashed, and the ops of a partition
    stream past them (the three references to `tops` share its shuffle)."""
    F = spark_F()
    k, st, cts = F.col("kind"), F.col("status"), F.col("catalog_ts")
    cut = tops.filter(k.isin("create-table", "drop-table") & (st == "info") & cts.isNull()).select(
        *NAMES, "pk", F.col("op_id").alias("d_id"), F.col("inv").alias("d_inv"),
        (k == "create-table").alias("d_create"),
    )
    ok = tops.filter(k.isin("add", "read", "update", "delete", "create-table", "drop-table") & (st == "ok")
                     & cts.isNotNull()).select(*NAMES, "pk", "e", "catalog_ts")
    before = (
        ok.join(cut.hint("shuffle_hash"), ["pk", *NAMES])
        .filter(F.col("e") < F.col("d_inv"))
        .groupBy("pk", *NAMES, "d_id")
        .agg(F.max("catalog_ts").alias("low"))
    )
    low = F.coalesce(F.col("low"), F.lit(-INF))
    lows = (
        cut.join(before, ["pk", *NAMES, "d_id"], "left")
        .groupBy("pk", *NAMES)
        .agg(F.min(F.when(F.col("d_create"), low)).alias("low_create"),
             F.min(F.when(~F.col("d_create"), low)).alias("low_drop"))
    )
    return tops.join(lows.hint("shuffle_hash"), ["pk", *NAMES], "left")


def _catalog(t: Any) -> Any:
    """Catalog anomalies from the annotated ops (`annotate`): DDL that, in
    catalog_ts order, creates an existing table or drops an absent one, and
    table ops that saw the catalog wrong."""
    F, W = spark_F(), spark_W()
    ddl = t.filter("in_ddl").select(
        *KEYS, *NAMES, "op_id", "catalog_ts", (F.col("kind") == "create-table").alias("is_create")
    )
    prev = ddl.withColumn("prev", F.lag("is_create").over(W.partitionBy(*KEYS).orderBy("catalog_ts", "op_id")))
    a_ddl = anomaly(
        prev.filter(F.col("prev") == F.col("is_create")), NAME, "whitebox", F.col("op_id"), F.array("op_id"),
        F.when(F.col("is_create"), F.format_string("created %s at catalog_ts %d, but it already existed",
                                                    F.col("object"), F.col("catalog_ts")))
        .otherwise(F.format_string("dropped %s at catalog_ts %d, but it did not exist",
                                   F.col("object"), F.col("catalog_ts"))),
    )
    a_ops = anomaly(
        t.filter("cat_bad"), NAME, "whitebox", F.col("op_id"),
        F.when(F.col("cause").isNull(), F.array("op_id")).otherwise(F.array("cause", "op_id")),
        F.when(F.col("status") == "fail",
               F.format_string("found %s unknown, but the catalog at its catalog_ts has it", F.col("object")))
        .otherwise(F.format_string("succeeded on %s, absent from the catalog at its catalog_ts",
                                   F.col("object"))),
    )
    return a_ddl.unionByName(a_ops)


def whitebox_parts(ops: Any, runs: Any, t: Any, keep: Kept) -> list[Any]:
    """Checker 3's anomalies (`not-strict-serializable`) over prepared ops
    (`frames.prepare`: the real-time check is per run; `runs` numbers the
    runs, `rid`) and the annotated table ops (`annotate`), as DataFrames to
    union; `keep` persists the few intermediate frames more than one of them
    reads."""
    return [_realtime(ops, runs, keep), _catalog(t), *data_parts(t, keep)]
