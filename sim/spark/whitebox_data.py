"""Checker 3's data half as Spark operations (`sim.history.checker.whitebox_data`
in process): each read compared with the writes replayed in `write_ts` order
up to its `read_ts`, per incarnation of its table. The frame it reads is the
one `sim.spark.whitebox.annotate` builds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.spark.anomaly_rows import NAME, WHERE_SCHEMA, anomaly, element_hash, pred
from sim.spark.anomaly_rows import F as spark_F
from sim.spark.anomaly_rows import W as spark_W
from sim.spark.frames import INF, KEYS

if TYPE_CHECKING:
    from sim.spark.frames import Kept

__all__ = ["data_parts"]


def _floating(t: Any) -> Any:
    """The floating ops (`annotate`), one row per incarnation of their table
    they may have landed in (`inc`, numbered `ord` in catalog order: the
    table's initial incarnation, then each replayed create's). An UPDATE or
    DELETE makes each of them unknowable from its write_ts on (in `_data`, as
    an `info` write of that incarnation); an add is placed by `_data`. Few
    rows: only ops a crash cut off."""
    F = spark_F()
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


def data_parts(t: Any, keep: Kept) -> list[Any]:
    """Reads against the writes replayed in write_ts order, per incarnation.

    One window over each incarnation's ops, in (key, op id) order, gives at
    once its per-incarnation facts (mutated? filtered reads? the horizon past
    which reads are unknowable) and, for add-only incarnations, the running
    count and hashes every read is compared with. Only the few rows that need
    more (mismatching reads, incarnations with mutations) go further."""
    F, W = spark_F(), spark_W()
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
    )
    seen = keep(
        x.filter((k == "read") & (st == "ok")).select(*keys, "result")
        .join(info_els.select(*keys).distinct().hint("shuffle_hash"), keys, "left_semi")
        .select(*keys, F.explode("result").alias("el"))
        .join(info_els.hint("shuffle_hash"), [*keys, "el"])
        .select(*keys, "op_id").distinct().withColumn("seen", F.lit(True))
    )
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
    )
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
    )
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
    )
    is_count = F.coalesce("a.count", F.lit(False))
    simple_bad = rest.filter("simple").select(*keys, "run", "op_id", "key", "result", "count", "a", "read_ts")
    # The set of a mismatching read's incarnation, for the explanation and the
    # writers to name (few rows: only reads already known to be wrong).
    bad_keys = simple_bad.select(*keys, "op_id", "key")
    written = (
        x.filter("is_write").select(*keys, "key", "elements")
        .join(bad_keys.select(*keys).distinct().hint("shuffle_hash"), keys, "left_semi")
        .select(*keys, F.col("key").alias("wkey"), F.explode("elements").alias("el"))
    )
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
    )
    before = W.partitionBy(*keys).orderBy("key", "op_id").rowsBetween(W.unboundedPreceding, -1)
    p = pred("w.wh")
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
        .withColumn("hit", F.expr(f"filter(state, x -> {pred('a.where')})"))
    )
    mut_bad = cplx.filter(
        ~F.col("is_read") & (F.col("kind") != "add") & (F.col("write_ts") < F.col("horizon"))
        & F.col("count").isNotNull() & (F.col("count") != F.size("hit"))
    )
    a_mut = anomaly(
        mut_bad, NAME, "whitebox", F.col("op_id"), F.array("op_id"),
        F.format_string("reports %d rows at write_ts %d; replay matches %d", F.col("count"),
                        F.col("write_ts"), F.size("hit")),
    )
    creads = cplx.filter(F.col("is_read") & (F.col("read_ts") < F.col("horizon")))
    cbad = creads.filter(
        F.when(is_count, F.col("count").isNotNull() & (F.col("count") != F.size("hit")))
        .otherwise((F.size("result") != F.size("hit"))
                   | (F.array_sort(F.array_distinct("result")) != F.array_sort("hit")))
    ).select(*keys, "run", "op_id", "key", "result", "count", "a", "read_ts", F.array_sort("hit").alias("want"))
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
    )).alias("w")).select(*keys, "op_id", "w.is_miss", "w.el").filter(F.col("el").isNotNull())
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
    )
    bad = bad.join(writers, [*keys, "op_id"], "left")
    ops = F.when(is_count, F.array("op_id")).otherwise(
        F.concat(
            F.array("op_id"),
            F.when(F.col("wm").isNotNull(), F.array("wm")).otherwise(F.array().cast("array<bigint>")),
            F.when(F.col("we").isNotNull(), F.array("we")).otherwise(F.array().cast("array<bigint>")),
        )
    )
    a_reads = anomaly(
        bad, NAME, "whitebox", F.col("op_id"), ops,
        F.when(is_count, F.format_string("counted %d rows at read_ts %d; replay gives %d",
                                         F.col("count"), F.col("read_ts"), F.size("want")))
        .otherwise(F.format_string("read at read_ts %d returned %d rows; replay gives %d (missing e.g. %s, extra e.g. %s)",
                                   F.col("read_ts"), F.size("result"), F.size("want"),
                                   F.coalesce(F.col("miss").cast("string"), F.lit("none")),
                                   F.coalesce(F.col("extra").cast("string"), F.lit("none")))),
    )
    return [a_mut, a_reads]


