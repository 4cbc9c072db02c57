"""Checker 3 (`sim.history.checker.replay`) as Spark operations, so its verdict scales
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

Why one module past 500 lines: it is one concept, checker 3 as one Spark plan
(`replay_parts`). The catalog and data checks read the frame `annotate` builds,
the real-time check shares their anomaly rows, and all of them mirror the
in-process checker row for row; split, each part would be half a plan. (A later
issue reworks the Spark side.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from sim.spark.frames import DDL_KINDS, INF, KEYS, NAMES

if TYPE_CHECKING:
    from sim.spark.frames import Kept

__all__ = [
    "ANOMALY_COLUMNS",
    "BROADCAST_ROWS",
    "BUCKET_OPS",
    "WHERE_SCHEMA",
    "annotate",
    "element_hash",
    "has_cut_off_ddl",
    "replay_parts",
]

NAME: Final = "not-strict-serializable"
ANOMALY_COLUMNS: Final = ("run", "anomaly", "checker", "op_id", "ops", "detail")
#: The JSON of an op's `args`: `where` values are parsed as strings (Spark
#: reads a JSON number into a string field as its text), then cast.
WHERE_SCHEMA: Final = "struct<where:array<array<string>>,`set`:bigint,`add`:bigint,`count`:boolean>"
#: Operations per real-time bucket (`_realtime`): a run's timeline is cut
#: into about n / BUCKET_OPS windows of time, so no window holds a whole run.
BUCKET_OPS: Final = 1 << 16
#: Up to this many rows, a frame of violations is broadcast to a join.
BROADCAST_ROWS: Final = 100_000


def _F() -> Any:
    from pyspark.sql import functions as F

    return F


def _W() -> Any:
    from pyspark.sql import Window

    return Window


def element_hash(col: str) -> Any:
    """Sum over an array of two independent 32-bit element hashes, packed as
    one long per hash: equal for equal multisets whatever the order, and never
    overflowing (Spark 4's ANSI mode turns overflow into an error) below 2**31
    elements."""
    F = _F()
    return F.struct(
        F.expr(f"aggregate({col}, 0L, (acc, x) -> acc + (xxhash64(x) & 4294967295L))").alias("h1"),
        F.expr(f"aggregate({col}, 0L, (acc, x) -> acc + (CAST(hash(x) AS BIGINT) & 4294967295L))").alias("h2"),
    )


def anomaly(df: Any, name: str | Any, checker: str, op: Any, ops: Any, detail: Any) -> Any:
    F = _F()
    return df.select(
        F.col("run"),
        (F.lit(name) if isinstance(name, str) else name).alias("anomaly"),
        F.lit(checker).alias("checker"),
        op.cast("long").alias("op_id"),
        ops.cast("array<bigint>").alias("ops"),
        detail.cast("string").alias("detail"),
    )


def _pred(where: str, var: str = "x") -> str:
    """A SQL boolean over `var` for a parsed `where` (null: every row)."""
    cmp = " ".join(
        f"WHEN '{o}' THEN {var} {o} CAST(t[1] AS BIGINT)" for o in ("=", "<>", "<", "<=", ">", ">=")
    )
    return f"forall(coalesce({where}, array()), t -> CASE t[0] {cmp} END)"


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
    F, W = _F(), _W()
    d = (
        ops.filter(F.col("status") == "ok")
        .withColumn("ts", F.greatest("read_ts", "write_ts"))
        .filter(F.col("ts").isNotNull())
        .select("run", F.lit(0).alias("tl"), "op_id", "inv", "e", "ts",
                (F.col("kind") != "read").cast("int").alias("w"))
    )  # fmt: skip
    is_ddl = F.col("kind").isin(*DDL_KINDS)
    c = (
        ops.filter(F.col("catalog_ts").isNotNull() & (F.col("status") != "info"))
        .filter(~is_ddl | (F.col("status") == "ok"))
        .select("run", F.lit(1).alias("tl"), "op_id", "inv", "e",
                F.col("catalog_ts").alias("ts"), is_ddl.cast("int").alias("w"))
    )  # fmt: skip
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
    )  # fmt: skip

    def bucket(t: str) -> Any:
        return F.when(F.col(t) < F.col("lo"), F.lit(-1)).otherwise(F.expr(f"({t} - lo) div width"))

    # Kept: read twice (the events and the bucket maxima) and small per row.
    u = keep(
        d.unionByName(c).join(F.broadcast(span), "run")
        .select((F.col("rid") * 2 + F.col("tl")).alias("g"), "op_id", "inv", "e", "ts", "w",
                F.when(F.col("e") <= F.col("hi"), bucket("e")).alias("be"), bucket("inv").alias("bi"))
    )  # fmt: skip
    ends = u.filter(F.col("be").isNotNull()).select(
        "g", F.col("be").alias("b"), F.col("e").alias("t"), F.lit(1).alias("typ"), "op_id",
        F.col("ts").alias("val"), F.lit(None).cast("long").alias("ts"), F.lit(None).cast("int").alias("w"),
    )
    queries = u.select("g", F.col("bi").alias("b"), F.col("inv").alias("t"), F.lit(0).alias("typ"), "op_id",
                       F.lit(None).cast("long").alias("val"), "ts", "w")  # fmt: skip
    win = W.partitionBy("g", "b").orderBy("t", "typ", "op_id").rowsBetween(W.unboundedPreceding, 0)
    q = ends.unionByName(queries).withColumn("inb", F.max("val").over(win)).filter(F.col("typ") == 0)
    buckets = (
        u.select("g", F.col("be").alias("b"), F.col("ts").alias("val")).filter(F.col("b").isNotNull())
        .unionByName(u.select("g", F.col("bi").alias("b"), F.lit(None).cast("long").alias("val")))
        .groupBy("g", "b").agg(F.max("val").alias("bmax"))
    )  # fmt: skip
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
    )  # fmt: skip
    bad = (
        bad.join(first, ["g", "need"])
        .join(F.broadcast(runs), F.col("rid") == F.expr("g div 2"))
        .withColumn("tl", F.when(F.expr("g % 2") == 1, "catalog").otherwise("data"))
    )
    return anomaly(
        bad, NAME, "replay", F.col("op_id"), F.array("a", "op_id"),
        F.format_string("%s timestamp %d below %d of op %d, which completed before it began",
                        F.col("tl"), F.col("ts"), F.col("need"), F.col("a")),
    )  # fmt: skip


# --- catalog ----------------------------------------------------------------------------------


def has_cut_off_ddl(ops: Any) -> bool:
    """Whether any create/drop ended `info` without a catalog_ts (then
    `annotate` needs `cut_off=True`). One pass over three columns of the ops,
    stopping at the first."""
    F = _F()
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
    F, W = _F(), _W()
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
    )  # fmt: skip
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
    F = _F()
    k, st, cts = F.col("kind"), F.col("status"), F.col("catalog_ts")
    cut = tops.filter(k.isin("create-table", "drop-table") & (st == "info") & cts.isNull()).select(
        *NAMES, "pk", F.col("op_id").alias("d_id"), F.col("inv").alias("d_inv"),
        (k == "create-table").alias("d_create"),
    )  # fmt: skip
    ok = tops.filter(k.isin("add", "read", "update", "delete", "create-table", "drop-table") & (st == "ok")
                     & cts.isNotNull()).select(*NAMES, "pk", "e", "catalog_ts")  # fmt: skip
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
    )  # fmt: skip
    return tops.join(lows.hint("shuffle_hash"), ["pk", *NAMES], "left")


def _catalog(t: Any) -> Any:
    """Catalog anomalies from the annotated ops (`annotate`): DDL that, in
    catalog_ts order, creates an existing table or drops an absent one, and
    table ops that saw the catalog wrong."""
    F, W = _F(), _W()
    ddl = t.filter("in_ddl").select(
        *KEYS, *NAMES, "op_id", "catalog_ts", (F.col("kind") == "create-table").alias("is_create")
    )
    prev = ddl.withColumn("prev", F.lag("is_create").over(W.partitionBy(*KEYS).orderBy("catalog_ts", "op_id")))
    a_ddl = anomaly(
        prev.filter(F.col("prev") == F.col("is_create")), NAME, "replay", F.col("op_id"), F.array("op_id"),
        F.when(F.col("is_create"), F.format_string("created %s at catalog_ts %d, but it already existed",
                                                    F.col("object"), F.col("catalog_ts")))
        .otherwise(F.format_string("dropped %s at catalog_ts %d, but it did not exist",
                                   F.col("object"), F.col("catalog_ts"))),
    )  # fmt: skip
    a_ops = anomaly(
        t.filter("cat_bad"), NAME, "replay", F.col("op_id"),
        F.when(F.col("cause").isNull(), F.array("op_id")).otherwise(F.array("cause", "op_id")),
        F.when(F.col("status") == "fail",
               F.format_string("found %s unknown, but the catalog at its catalog_ts has it", F.col("object")))
        .otherwise(F.format_string("succeeded on %s, absent from the catalog at its catalog_ts",
                                   F.col("object"))),
    )  # fmt: skip
    return a_ddl.unionByName(a_ops)


# --- data -------------------------------------------------------------------------------------


def _floating(t: Any) -> Any:
    """The floating ops (`annotate`), one row per incarnation of their table
    they may have landed in (`inc`, numbered `ord` in catalog order: the
    table's initial incarnation, then each replayed create's). An UPDATE or
    DELETE makes each of them unknowable from its write_ts on (in `_data`, as
    an `info` write of that incarnation); an add is placed by `_data`. Few
    rows: only ops a crash cut off."""
    F = _F()
    creates = (
        t.filter(F.col("in_ddl") & (F.col("kind") == "create-table"))
        .groupBy(*KEYS)
        .agg(F.array_sort(F.collect_list(F.struct("catalog_ts", "op_id"))).alias("cl"))
    )
    none = F.array().cast("array<bigint>")
    cands = F.concat(
        F.when(F.col("initial"), F.array(F.lit(-1).cast("long"))).otherwise(none),
        F.coalesce(F.transform("cl", lambda c: c.op_id), none),
    )
    cols = [c for c in t.columns if c != "inc"]
    fl = t.filter("floating").select(*cols).join(creates.hint("shuffle_hash"), list(KEYS), "left")
    return fl.select(*cols, F.posexplode(cands).alias("ord", "inc"))


def _data(t: Any, keep: Kept) -> list[Any]:
    """Reads against the writes replayed in write_ts order, per incarnation.

    One window over each incarnation's ops, in (key, op id) order, gives at
    once its per-incarnation facts (mutated? filtered reads? the horizon past
    which reads are unknowable) and, for add-only incarnations, the running
    count and hashes every read is compared with. Only the few rows that need
    more (mismatching reads, incarnations with mutations) go further."""
    F, W = _F(), _W()
    k, st = F.col("kind"), F.col("status")
    keys = [*KEYS, "inc"]
    x = t.filter(F.col("inc").isNotNull())
    fl = _floating(t)
    # Indeterminate adds count iff some read of the incarnation returned one of
    # their elements (few adds: hashed, and every read's elements stream past).
    # Only the reads of incarnations with such adds are unpacked.
    info_els = (
        x.filter((k == "add") & (st == "info")).select(*keys, "op_id", "elements")
        .unionByName(fl.filter(k == "add").select(*keys, "op_id", "elements"))
        .select(*keys, "op_id", F.explode("elements").alias("el"))
    )  # fmt: skip
    seen = keep(
        x.filter((k == "read") & (st == "ok")).select(*keys, "result")
        .join(info_els.select(*keys).distinct().hint("shuffle_hash"), keys, "left_semi")
        .select(*keys, F.explode("result").alias("el"))
        .join(info_els.hint("shuffle_hash"), [*keys, "el"])
        .select(*keys, "op_id").distinct().withColumn("seen", F.lit(True))
    )  # fmt: skip
    # A floating add landed in the first incarnation (in catalog order) whose
    # reads saw it; seen by none, it may have landed in any of them.
    fl = fl.join(seen.hint("shuffle_hash"), [*keys, "op_id"], "left").fillna({"seen": False})
    first_hit = F.min(F.when(F.col("seen"), F.col("ord"))).over(W.partitionBy(*KEYS, "op_id"))
    fl = (
        fl.withColumn("first_hit", first_hit)
        .filter(F.col("first_hit").isNull() | (F.col("ord") == F.col("first_hit")))
        .drop("ord", "first_hit")
        .repartition("pk")  # as `t` is: the union below keeps its partitioning
    )
    x = x.join(seen.hint("shuffle_hash"), [*keys, "op_id"], "left").fillna({"seen": False}).unionByName(fl)
    wts = F.col("write_ts")
    # The horizon of an incarnation: the earliest write_ts from which its
    # reads are unknowable (a write that cannot be placed: from the start).
    # An unseen indeterminate add counts only in incarnations with mutations
    # (it may have been deleted unseen), so it is kept apart until that is known.
    placed_unc = (
        F.when((st == "ok") & wts.isNull(), F.lit(-1))
        .when((st == "info") & (k != "add"), F.coalesce(wts, F.lit(-1)))
        .when((st == "info") & F.col("seen") & wts.isNull(), F.lit(-1))
    )
    unseen_unc = F.when(placed_unc.isNull() & (st == "info") & ~F.col("seen"), F.coalesce(wts, F.lit(-1)))
    is_write = (k != "read") & wts.isNotNull() & ((st == "ok") | ((k == "add") & (st == "info") & F.col("seen")))
    is_read = (k == "read") & (st == "ok") & F.col("read_ts").isNotNull()
    x = x.withColumn("is_read", is_read).withColumn("is_write", is_write).withColumn(
        "key", F.when(is_read, F.col("read_ts") * 2 + 1).when(is_write, wts * 2)
    )
    # The window sorts numbers only: the arrays are reduced to their sizes
    # and order-free hashes first, and fetched back for the few rows that
    # go on.
    a = F.from_json("args", WHERE_SCHEMA)
    wh, rh = element_hash("elements"), element_hash("result")
    wrote = F.col("is_write")
    narrow = x.select(
        *keys, "op_id", "key", "is_read", "is_write", "read_ts", "write_ts", "count",
        k.isin("update", "delete").cast("int").alias("mut"),
        ((k == "read") & (st == "ok") & (F.size(F.coalesce(a.getField("where"), F.array())) > 0)).cast("int")
        .alias("filt"),
        F.coalesce(a.getField("count"), F.lit(False)).alias("is_count"),
        F.when(k != "read", placed_unc).alias("u_placed"),
        F.when(k != "read", unseen_unc).alias("u_unseen"),
        F.when(wrote, F.size("elements")).otherwise(0).alias("dn"),
        F.when(wrote, wh.h1).otherwise(0).alias("d1"),
        F.when(wrote, wh.h2).otherwise(0).alias("d2"),
        F.size("result").alias("rn"), rh.h1.alias("r1"), rh.h2.alias("r2"),
    )  # fmt: skip
    ordered = W.partitionBy(*keys).orderBy("key", "op_id")
    whole = ordered.rowsBetween(W.unboundedPreceding, W.unboundedFollowing)
    run_win = ordered.rowsBetween(W.unboundedPreceding, 0)
    x1 = narrow.select(
        "*",
        F.max("mut").over(whole).alias("inc_mutated"),
        F.max("filt").over(whole).alias("filtered"),
        F.min("u_placed").over(whole).alias("h_placed"),
        F.min("u_unseen").over(whole).alias("h_unseen"),
        F.sum("dn").over(run_win).alias("n"),
        F.sum("d1").over(run_win).alias("s1"),
        F.sum("d2").over(run_win).alias("s2"),
    ).withColumn(
        "horizon",
        F.coalesce(F.least("h_placed", F.when(F.col("inc_mutated") == 1, F.col("h_unseen"))), F.lit(INF)),
    )  # fmt: skip
    simple = (F.col("inc_mutated") == 0) & (F.col("filtered") == 0)
    mismatch = F.when(F.col("is_count"), F.col("count").isNotNull() & (F.col("count") != F.col("n"))).otherwise(
        (F.col("rn") != F.col("n")) | (F.col("r1") != F.col("s1")) | (F.col("r2") != F.col("s2"))
    )
    checked = F.col("is_read") & (F.col("read_ts") < F.col("horizon"))
    # What goes on: the add-only incarnations' mismatching reads, and every
    # event of the incarnations with mutations or filtered reads.
    goes_on = x1.filter((simple & checked & mismatch) | (~simple & (F.col("is_read") | F.col("is_write")))).select(
        *keys, "op_id", "key", "is_read", "horizon", simple.alias("simple")
    )
    rest = keep(
        t.select(*KEYS, "run", "op_id", "kind", "elements", "result", "count", "args", "read_ts", "write_ts")
        .join(goes_on.hint("shuffle_hash"), [*KEYS, "op_id"])
        .withColumn("a", a).drop("args")
    )  # fmt: skip
    is_count = F.coalesce("a.count", F.lit(False))
    simple_bad = rest.filter("simple").select(*keys, "run", "op_id", "key", "result", "count", "a", "read_ts")
    # The set of a mismatching read's incarnation, for the explanation and the
    # writers to name (few rows: only reads already known to be wrong).
    bad_keys = simple_bad.select(*keys, "op_id", "key")
    written = (
        x.filter("is_write").select(*keys, "key", "elements")
        .join(bad_keys.select(*keys).distinct().hint("shuffle_hash"), keys, "left_semi")
        .select(*keys, F.col("key").alias("wkey"), F.explode("elements").alias("el"))
    )  # fmt: skip
    want = (
        written.join(bad_keys.hint("shuffle_hash"), keys)
        .filter(F.col("wkey") < F.col("key"))
        .groupBy(*keys, "op_id")
        .agg(F.array_sort(F.collect_set("el")).alias("want"))
    )
    simple_bad = simple_bad.join(want, [*keys, "op_id"], "left").withColumn(
        "want", F.coalesce("want", F.array().cast("array<bigint>"))
    )

    # Incarnations with mutations: fold the earlier writes into the state.
    wstruct = F.struct(
        F.col("kind").alias("k"), F.col("elements").alias("els"), F.col("a.where").alias("wh"),
        F.col("a.set").alias("setv"), F.col("a.add").alias("addk"),
    )  # fmt: skip
    before = W.partitionBy(*keys).orderBy("key", "op_id").rowsBetween(W.unboundedPreceding, -1)
    p = _pred("w.wh")
    step = (
        "CASE w.k WHEN 'add' THEN array_distinct(concat(acc, w.els)) "
        f"WHEN 'delete' THEN filter(acc, x -> NOT {p}) "
        f"ELSE CASE WHEN w.addk IS NOT NULL THEN array_distinct(concat(filter(acc, x -> NOT {p}), "
        f"transform(filter(acc, x -> {p}), x -> x + w.addk))) "
        f"WHEN w.setv IS NOT NULL AND exists(acc, x -> {p}) "
        f"THEN array_distinct(concat(filter(acc, x -> NOT {p}), array(w.setv))) "
        f"ELSE filter(acc, x -> NOT {p}) END END"
    )
    cplx = (
        rest.filter(~F.col("simple"))
        .withColumn("w", F.when(~F.col("is_read"), wstruct))
        .withColumn("prior", F.collect_list("w").over(before))
        .withColumn("state", F.expr(f"aggregate(prior, CAST(array() AS ARRAY<BIGINT>), (acc, w) -> {step})"))
        .withColumn("hit", F.expr(f"filter(state, x -> {_pred('a.where')})"))
    )
    mut_bad = cplx.filter(
        ~F.col("is_read") & (F.col("kind") != "add") & (F.col("write_ts") < F.col("horizon"))
        & F.col("count").isNotNull() & (F.col("count") != F.size("hit"))
    )  # fmt: skip
    a_mut = anomaly(
        mut_bad, NAME, "replay", F.col("op_id"), F.array("op_id"),
        F.format_string("reports %d rows at write_ts %d; replay matches %d", F.col("count"),
                        F.col("write_ts"), F.size("hit")),
    )  # fmt: skip
    creads = cplx.filter(F.col("is_read") & (F.col("read_ts") < F.col("horizon")))
    cbad = creads.filter(
        F.when(is_count, F.col("count").isNotNull() & (F.col("count") != F.size("hit")))
        .otherwise((F.size("result") != F.size("hit"))
                   | (F.array_sort(F.array_distinct("result")) != F.array_sort("hit")))
    ).select(*keys, "run", "op_id", "key", "result", "count", "a", "read_ts", F.array_sort("hit").alias("want"))  # fmt: skip
    # Kept: the few wrong reads, which the naming below reads three times.
    bad = keep(
        simple_bad.unionByName(cbad)
        .withColumn("miss", F.array_min(F.array_except("want", "result")))
        .withColumn("extra", F.array_min(F.array_except("result", "want")))
    )
    # Name the writers of the smallest missing and smallest extra element, as
    # the in-process checker does: the last add of the incarnation with it
    # (only the adds of incarnations with a wrong read are unpacked).
    wanted = bad.select(*keys, "op_id", F.explode(F.array(
        F.struct(F.lit(True).alias("is_miss"), F.col("miss").alias("el")),
        F.struct(F.lit(False).alias("is_miss"), F.col("extra").alias("el")),
    )).alias("w")).select(*keys, "op_id", "w.is_miss", "w.el").filter(F.col("el").isNotNull())  # fmt: skip
    writers = (
        x.filter((k == "add") & ~(F.col("floating") & ~F.col("seen")))
        .select(*keys, F.col("op_id").alias("wr"), "elements")
        .join(bad.select(*keys).distinct().hint("shuffle_hash"), keys, "left_semi")
        .select(*keys, "wr", F.explode("elements").alias("el"))
        .join(wanted.hint("shuffle_hash"), [*keys, "el"])
        .groupBy(*keys, "op_id").agg(
            F.max(F.when(F.col("is_miss"), F.col("wr"))).alias("wm"),
            F.max(F.when(~F.col("is_miss"), F.col("wr"))).alias("we"),
        )
    )  # fmt: skip
    bad = bad.join(writers, [*keys, "op_id"], "left")
    ops = F.when(is_count, F.array("op_id")).otherwise(
        F.concat(
            F.array("op_id"),
            F.when(F.col("wm").isNotNull(), F.array("wm")).otherwise(F.array().cast("array<bigint>")),
            F.when(F.col("we").isNotNull(), F.array("we")).otherwise(F.array().cast("array<bigint>")),
        )
    )
    a_reads = anomaly(
        bad, NAME, "replay", F.col("op_id"), ops,
        F.when(is_count, F.format_string("counted %d rows at read_ts %d; replay gives %d",
                                         F.col("count"), F.col("read_ts"), F.size("want")))
        .otherwise(F.format_string("read at read_ts %d returned %d rows; replay gives %d (missing e.g. %s, extra e.g. %s)",
                                   F.col("read_ts"), F.size("result"), F.size("want"),
                                   F.coalesce(F.col("miss").cast("string"), F.lit("none")),
                                   F.coalesce(F.col("extra").cast("string"), F.lit("none")))),
    )  # fmt: skip
    return [a_mut, a_reads]


def replay_parts(ops: Any, runs: Any, t: Any, keep: Kept) -> list[Any]:
    """Checker 3's anomalies (`not-strict-serializable`) over prepared ops
    (`frames.prepare`: the real-time check is per run; `runs` numbers the
    runs, `rid`) and the annotated table ops (`annotate`), as DataFrames to
    union; `keep` persists the few intermediate frames more than one of them
    reads."""
    return [_realtime(ops, runs, keep), _catalog(t), *_data(t, keep)]
