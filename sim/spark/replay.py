"""Checker 3 (`sim.checker.replay`) as Spark operations, so its verdict scales
past one process: DDL replayed in `catalog_ts` order, writes in `write_ts`
order, each read compared with the state at its `read_ts`, and timestamps
checked against real time.

Everything is windows and joins partitioned by run and table incarnation —
nothing is collected to the driver. An add-only incarnation (the common case)
is checked by running sums: the count and an order-free hash of the elements
written up to a read's timestamp must equal the count and hash of what it
returned. Incarnations with UPDATE/DELETE or filtered reads need the actual
set; there each read folds the earlier writes with Spark's `aggregate` (a
built-in higher-order function, no Python UDF). Anomalies carry the same op
ids as the in-process checker's, which the tests compare row for row.
"""

from __future__ import annotations

from typing import Any, Final

from sim.spark.frames import DDL_KINDS, INF, cut

__all__ = ["ANOMALY_COLUMNS", "WHERE_SCHEMA", "element_hash", "replay_parts"]

NAME: Final = "not-strict-serializable"
ANOMALY_COLUMNS: Final = ("run", "anomaly", "checker", "op_id", "ops", "detail")
#: The JSON of an op's `args`: `where` values are parsed as strings (Spark
#: reads a JSON number into a string field as its text), then cast.
WHERE_SCHEMA: Final = "struct<where:array<array<string>>,`set`:bigint,`add`:bigint,`count`:boolean>"


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


def _realtime(ops: Any) -> Any:
    """An op whose timestamp is below (a write: not above) the largest of any op
    that completed before it began; per timeline, a running max over ends and
    invokes in time order (an end at the same instant as an invoke is not
    before it)."""
    F, W = _F(), _W()
    d = (
        ops.filter(F.col("status") == "ok")
        .withColumn("ts", F.greatest("read_ts", "write_ts"))
        .filter(F.col("ts").isNotNull())
        .select("run", F.lit("data").alias("tl"), "op_id", "inv", "e", "ts",
                (F.col("kind") != "read").cast("int").alias("w"))
    )  # fmt: skip
    is_ddl = F.col("kind").isin(*DDL_KINDS)
    c = (
        ops.filter(F.col("catalog_ts").isNotNull() & (F.col("status") != "info"))
        .filter(~is_ddl | (F.col("status") == "ok"))
        .select("run", F.lit("catalog").alias("tl"), "op_id", "inv", "e",
                F.col("catalog_ts").alias("ts"), is_ddl.cast("int").alias("w"))
    )  # fmt: skip
    u = d.unionByName(c)
    ends = u.select("run", "tl", F.col("e").alias("t"), F.lit(1).alias("typ"), "op_id",
                    F.col("ts").alias("val"), F.lit(None).cast("long").alias("ts"),
                    F.lit(None).cast("int").alias("w"))  # fmt: skip
    queries = u.select("run", "tl", F.col("inv").alias("t"), F.lit(0).alias("typ"), "op_id",
                       F.lit(None).cast("long").alias("val"), "ts", "w")  # fmt: skip
    win = W.partitionBy("run", "tl").orderBy("t", "typ", "op_id").rowsBetween(W.unboundedPreceding, 0)
    q = ends.unionByName(queries).withColumn("need", F.max("val").over(win)).filter(F.col("typ") == 0)
    bad = q.filter(F.col("need").isNotNull() & ((F.col("ts") - F.col("w")) < F.col("need")))
    first = u.groupBy("run", "tl", "ts").agg(F.min(F.struct("e", "op_id")).op_id.alias("a"))
    bad = bad.join(first.withColumnRenamed("ts", "need"), ["run", "tl", "need"])
    return anomaly(
        bad, NAME, "replay", F.col("op_id"), F.array("a", "op_id"),
        F.format_string("%s timestamp %d below %d of op %d, which completed before it began",
                        F.col("tl"), F.col("ts"), F.col("need"), F.col("a")),
    )  # fmt: skip


# --- catalog ----------------------------------------------------------------------------------


def _catalog(tops: Any) -> tuple[Any, Any]:
    """(anomalies, table ops with their incarnation): DDL replayed in
    catalog_ts order per table; each table op's catalog_ts must see the table
    (an unknown-table failure must not). The incarnation is the create's op id,
    or -1 for a table that existed from the start."""
    F, W = _F(), _W()
    st, k, cts = F.col("status"), F.col("kind"), F.col("catalog_ts")
    is_top = k.isin("add", "read", "update", "delete") & ((st != "fail") | (F.col("error_code") == "42P01"))
    is_create = (k == "create-table") & (st != "fail")
    is_drop = (k == "drop-table") & (st != "fail")
    per = tops.groupBy("run", "object").agg(
        F.max(F.when(is_top & (st == "ok"), cts)).alias("ok_max_cts"),
        F.max(F.when(is_top & (st == "fail"), cts)).alias("unk_max_cts"),
        F.max((is_top & ((st == "ok") | ((k == "add") & (st == "info")))).cast("int")).alias("any_ok"),
        F.max(((is_create | is_drop) & cts.isNull() & (st == "ok")).cast("int")).alias("unplaceable"),
        F.sum((is_create | is_drop).cast("int")).alias("n_ddl_all"),
    )
    t = tops.join(per, ["run", "object"])
    ddl = t.filter(
        (is_create & cts.isNotNull() & ((st != "info") | (F.col("ok_max_cts") >= cts)))
        | (is_drop & cts.isNotNull() & ((st != "info") | (F.col("unk_max_cts") >= cts)))
    ).select("run", "object", "op_id", "catalog_ts", (k == "create-table").alias("is_create"))
    n_ddl = ddl.groupBy("run", "object").agg(
        F.count("*").alias("n_ddl"),
        F.min(F.struct("catalog_ts", "op_id", "is_create")).is_create.alias("first_create"),
    )
    per = per.join(n_ddl, ["run", "object"], "left").fillna({"n_ddl": 0})
    checked = per.filter(~((F.col("unplaceable") == 1) | ((F.col("n_ddl") == 0) & (F.col("n_ddl_all") > 0))))
    ddl = ddl.join(checked.select("run", "object"), ["run", "object"], "left_semi")
    dwin = W.partitionBy("run", "object").orderBy("catalog_ts", "op_id")
    prev = ddl.withColumn("prev", F.lag("is_create").over(dwin))
    bad_ddl = prev.filter(F.col("prev") == F.col("is_create"))
    a_ddl = anomaly(
        bad_ddl, NAME, "replay", F.col("op_id"), F.array("op_id"),
        F.when(F.col("is_create"), F.format_string("created %s at catalog_ts %d, but it already existed",
                                                    F.col("object"), F.col("catalog_ts")))
        .otherwise(F.format_string("dropped %s at catalog_ts %d, but it did not exist",
                                   F.col("object"), F.col("catalog_ts"))),
    )  # fmt: skip

    ops = t.filter(is_top).join(
        checked.select("run", "object", "n_ddl", "first_create"), ["run", "object"]
    )
    # Tables without DDL: existed all along iff some op on them succeeded.
    no_ddl = ops.filter(F.col("n_ddl") == 0).withColumn(
        "state", F.when(F.col("any_ok") == 1, F.lit(-1)).cast("long")
    ).withColumn("cause", F.lit(None).cast("long"))
    with_ddl = ops.filter((F.col("n_ddl") > 0) & cts.isNotNull())
    ev = with_ddl.select("run", "object", "catalog_ts", F.lit(1).alias("typ"), "op_id",
                         F.lit(None).alias("ddl"), "status", "error_code", "first_create")  # fmt: skip
    dd = ddl.join(n_ddl.select("run", "object", "first_create"), ["run", "object"]).select(
        "run", "object", "catalog_ts", F.lit(0).alias("typ"), "op_id",
        F.struct("op_id", "is_create").alias("ddl"), F.lit(None).cast("string").alias("status"),
        F.lit(None).cast("string").alias("error_code"), "first_create",
    )
    owin = (W.partitionBy("run", "object").orderBy("catalog_ts", "typ", "op_id")
            .rowsBetween(W.unboundedPreceding, 0))  # fmt: skip
    placed = (
        ev.unionByName(dd)
        .withColumn("last", F.last("ddl", ignorenulls=True).over(owin))
        .filter(F.col("typ") == 1)
        .select(
            "run", "object", "op_id",
            F.when(F.col("last").isNull(), F.when(~F.col("first_create"), F.lit(-1)))
            .when(F.col("last.is_create"), F.col("last.op_id"))
            .cast("long").alias("state"),
            F.col("last.op_id").alias("cause"),
        )
    )  # fmt: skip
    placed = with_ddl.select("run", "object", "op_id", "status", "kind").join(placed, ["run", "object", "op_id"])
    nd = no_ddl.select("run", "object", "op_id", "status", "kind", "state", "cause")
    allp = placed.unionByName(nd)
    wrong = allp.filter(
        ((F.col("status") == "fail") & F.col("state").isNotNull())
        | ((F.col("status") == "ok") & F.col("state").isNull())
    )
    a_ops = anomaly(
        wrong, NAME, "replay", F.col("op_id"),
        F.when(F.col("cause").isNull(), F.array("op_id")).otherwise(F.array("cause", "op_id")),
        F.when(F.col("status") == "fail",
               F.format_string("found %s unknown, but the catalog at its catalog_ts has it", F.col("object")))
        .otherwise(F.format_string("succeeded on %s, absent from the catalog at its catalog_ts",
                                   F.col("object"))),
    )  # fmt: skip
    inc = allp.filter((F.col("status") != "fail") & F.col("state").isNotNull()).select(
        "run", "object", "op_id", F.col("state").alias("inc")
    )
    return a_ddl.unionByName(a_ops), inc


# --- data -------------------------------------------------------------------------------------


def _data(tops: Any, inc: Any) -> list[Any]:
    """Reads against the writes replayed in write_ts order, per incarnation."""
    F, W = _F(), _W()
    x = tops.join(inc, ["run", "object", "op_id"]).withColumn("a", F.from_json("args", WHERE_SCHEMA))
    k, st = F.col("kind"), F.col("status")
    keys = ["run", "object", "inc"]
    # Incarnations whose reads need real sets: mutations or filtered reads.
    complex_inc = x.groupBy(*keys).agg(
        F.max(k.isin("update", "delete").cast("int")).alias("mutated"),
        F.max(((k == "read") & (st == "ok") & (F.size(F.coalesce("a.where", F.array())) > 0)).cast("int"))
        .alias("filtered"),
    )
    x = x.join(complex_inc, keys)
    # Indeterminate adds count iff some read of the incarnation returned one of
    # their elements.
    info_adds = x.filter((k == "add") & (st == "info"))
    seen_els = (
        x.filter((k == "read") & (st == "ok"))
        .join(info_adds.select(*keys).distinct(), keys, "left_semi")
        .select(*keys, F.explode("result").alias("el"))
        .distinct()
    )
    seen = (
        info_adds.select(*keys, "op_id", F.explode("elements").alias("el"))
        .join(seen_els, [*keys, "el"], "left_semi")
        .select(*keys, "op_id").distinct().withColumn("seen", F.lit(True))
    )  # fmt: skip
    x = x.join(seen, [*keys, "op_id"], "left").fillna({"seen": False})
    wts = F.col("write_ts")
    unc = x.filter(k != "read").select(
        *keys,
        F.when((st == "ok") & wts.isNull(), F.lit(-1))
        .when((st == "info") & (k != "add"), F.coalesce(wts, F.lit(-1)))
        .when((st == "info") & F.col("seen") & wts.isNull(), F.lit(-1))
        .when((st == "info") & ~F.col("seen") & (F.col("mutated") == 1), F.coalesce(wts, F.lit(-1)))
        .alias("u"),
    )
    horizon = unc.groupBy(*keys).agg(F.min("u").alias("horizon"))
    x = cut(x.join(horizon, keys, "left").withColumn("horizon", F.coalesce("horizon", F.lit(INF))))
    is_write = (k != "read") & wts.isNotNull() & ((st == "ok") | ((k == "add") & (st == "info") & F.col("seen")))
    is_read = (k == "read") & (st == "ok") & F.col("read_ts").isNotNull()
    ev = x.filter(is_write | is_read).withColumn(
        "key", F.when(is_read, F.col("read_ts") * 2 + 1).otherwise(wts * 2)
    ).withColumn("is_read", is_read)
    ev = cut(ev)
    simple = ev.filter((F.col("mutated") == 0) & (F.col("filtered") == 0))
    cplx = ev.filter((F.col("mutated") == 1) | (F.col("filtered") == 1))
    run_win = W.partitionBy(*keys).orderBy("key", "op_id").rowsBetween(W.unboundedPreceding, 0)
    hashed = element_hash("elements")
    simple = (
        simple.withColumn("dn", F.when(F.col("is_read"), 0).otherwise(F.size("elements")))
        .withColumn("d1", F.when(F.col("is_read"), 0).otherwise(hashed.h1))
        .withColumn("d2", F.when(F.col("is_read"), 0).otherwise(hashed.h2))
        .withColumn("n", F.sum("dn").over(run_win))
        .withColumn("s1", F.sum("d1").over(run_win))
        .withColumn("s2", F.sum("d2").over(run_win))
        .filter(F.col("is_read") & (F.col("read_ts") < F.col("horizon")))
    )
    rh = element_hash("result")
    is_count = F.coalesce("a.count", F.lit(False))
    simple_bad = simple.filter(
        F.when(is_count, F.col("count").isNotNull() & (F.col("count") != F.col("n")))
        .otherwise((F.size("result") != F.col("n")) | (rh.h1 != F.col("s1")) | (rh.h2 != F.col("s2")))
    ).select(*keys, "op_id", "key", "result", "count", "a", "read_ts")
    # The set of a mismatching read's incarnation, for the explanation and the
    # writers to name (few rows: only reads already known to be wrong).
    written = ev.filter(~F.col("is_read")).select(*keys, F.col("key").alias("wkey"),
                                                  F.explode("elements").alias("el"))  # fmt: skip
    want = (
        simple_bad.select(*keys, "op_id", "key")
        .join(written, keys)
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
        cplx.withColumn("w", F.when(~F.col("is_read"), wstruct))
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
    ).select(*keys, "op_id", "key", "result", "count", "a", "read_ts", F.array_sort("hit").alias("want"))  # fmt: skip
    bad = simple_bad.unionByName(cbad)
    # Name the writers of the smallest missing and smallest extra element, as
    # the in-process checker does: the last add of the incarnation with it.
    writer = (
        x.filter(k == "add").select(*keys, "op_id", F.explode("elements").alias("el"))
        .groupBy(*keys, "el").agg(F.max("op_id").alias("wr"))
    )  # fmt: skip
    bad = bad.withColumn("miss", F.array_min(F.array_except("want", "result"))).withColumn(
        "extra", F.array_min(F.array_except("result", "want"))
    )
    bad = bad.join(
        writer.select(*keys, F.col("el").alias("miss"), F.col("wr").alias("wm")), [*keys, "miss"], "left"
    ).join(writer.select(*keys, F.col("el").alias("extra"), F.col("wr").alias("we")), [*keys, "extra"], "left")
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


def replay_parts(ops: Any, tops: Any) -> list[Any]:
    """Checker 3's anomalies (`not-strict-serializable`) over prepared ops
    (`frames.prepare`) and their table subset (`frames.table_ops`), as
    DataFrames to union (each small, planned on its own)."""
    cat, inc = _catalog(tops)
    return [_realtime(ops), cat, *_data(tops, cut(inc))]
