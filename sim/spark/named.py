"""The named anomalies of checker 1 (`sim.checker.named`) that are joins:
`insert-unknown-table` / `select-unknown-table`, `dropped-object-visible`,
`read-from-future` and `stale-read`, judged from real time alone.

Each rule is the in-process rule restated over whole tables at once: "some
witness completed before the op began" becomes a running max over a time
ordered window, "no drop could have intervened" an anti-join, "the element's
add" an equi-join on (run, table, element). Rules stay silent where an
indeterminate op could explain the observation, exactly as in-process, and the
op ids each anomaly names are the same (the tests compare them).
"""

from __future__ import annotations

from typing import Any

from sim.spark.frames import cut
from sim.spark.replay import anomaly

__all__ = ["named_parts"]


def _F() -> Any:
    from pyspark.sql import functions as F

    return F


def _W() -> Any:
    from pyspark.sql import Window

    return Window


def _sel(df: Any, prefix: str, cols: tuple[str, ...] = ("op_id", "inv", "e", "status")) -> Any:
    F = _F()
    return df.select("run", "object", *[F.col(c).alias(f"{prefix}_{c}") for c in cols])


def _unknown_table(t: Any) -> Any:
    F, W = _F(), _W()
    k, st = F.col("kind"), F.col("status")
    wit = t.filter(
        ((k == "create-table") & (st == "ok"))
        | (k.isin("add", "read", "update", "delete") & (st == "ok"))
    )
    unknown = t.filter(k.isin("add", "read", "update", "delete") & (st == "fail") & (F.col("error_code") == "42P01"))
    # Among witnesses that completed before the failure began, the one that
    # began last (ties: the earliest-completing, then the lowest id).
    ev = wit.select("run", "object", F.col("e").alias("t"), F.lit(1).alias("typ"), "op_id",
                    F.struct("inv", (-F.col("e")).alias("ne"), (-F.col("op_id")).alias("nid"),
                             F.col("op_id").alias("id")).alias("w"),
                    F.lit(None).cast("string").alias("kind"), F.lit(None).cast("long").alias("fe"))
    q = unknown.select("run", "object", F.col("inv").alias("t"), F.lit(0).alias("typ"), "op_id",
                       F.lit(None).alias("w"), "kind", F.col("e").alias("fe"))  # fmt: skip
    win = W.partitionBy("run", "object").orderBy("t", "typ", "op_id").rowsBetween(W.unboundedPreceding, 0)
    best = (
        ev.unionByName(q).withColumn("best", F.max("w").over(win)).filter((F.col("typ") == 0) & F.col("best").isNotNull())
        .select("run", "object", "op_id", "kind", F.col("t").alias("f_inv"), "fe",
                F.col("best.id").alias("w_id"), F.col("best.inv").alias("w_inv"))
    )  # fmt: skip
    drops = _sel(t.filter((k == "drop-table") & (st != "fail")), "d")
    cond = (
        (best.run == drops.run) & (best.object == drops.object)
        & (drops.d_e > best.w_inv) & (drops.d_inv < best.fe)
    )  # fmt: skip
    fired = best.join(drops, cond, "left_anti")
    return anomaly(
        fired,
        F.when(F.col("kind") == "read", "select-unknown-table").otherwise("insert-unknown-table"),
        "named", F.col("op_id"), F.array("w_id", "op_id"),
        F.format_string("failed 42P01 although op %d on %s completed before it began", F.col("w_id"), F.col("object")),
    )  # fmt: skip


def _writers(t: Any) -> tuple[Any, Any]:
    """(element -> its last non-failed add, element -> its first failed add),
    per table, with the add's times and status."""
    F = _F()
    k, st = F.col("kind"), F.col("status")
    adds = t.filter(k == "add").select("run", "object", "op_id", "inv", "e", "status",
                                       F.explode("elements").alias("el"))  # fmt: skip
    last = adds.filter(st != "fail").groupBy("run", "object", "el").agg(
        F.max(F.struct("op_id", "inv", "e", "status")).alias("a")
    ).select("run", "object", "el", F.col("a.op_id").alias("a_op_id"), F.col("a.inv").alias("a_inv"),
             F.col("a.e").alias("a_e"), F.col("a.status").alias("a_status"))  # fmt: skip
    failed = adds.filter(st == "fail").groupBy("run", "object", "el").agg(F.min("op_id").alias("f_id"))
    return cut(last), cut(failed)


def _dropped_visible(t: Any, writer: Any) -> list[Any]:
    F = _F()
    k, st = F.col("kind"), F.col("status")
    succ = t.filter(((k == "add") & (st == "ok")) | (k.isin("read", "update", "delete") & (st == "ok")))
    okdrops = _sel(t.filter((k == "drop-table") & (st == "ok")), "d")
    pairs = succ.join(okdrops, ["run", "object"]).filter(F.col("d_e") < F.col("inv"))
    last = pairs.groupBy("run", "object", "op_id").agg(
        F.max(F.struct("d_inv", "d_op_id", "d_e")).alias("d")
    ).select("run", "object", "op_id", F.col("d.d_inv").alias("d_inv"), F.col("d.d_op_id").alias("d_id"))
    s = succ.select("run", "object", "op_id", "kind", "e", "result").join(last, ["run", "object", "op_id"])
    creates = _sel(t.filter((k == "create-table") & (st != "fail")), "c")
    cond = (
        (s.run == creates.run) & (s.object == creates.object)
        & (creates.c_e > s.d_inv) & (creates.c_inv < s.e)
    )  # fmt: skip
    a1 = anomaly(
        s.join(creates, cond, "left_anti"), "dropped-object-visible", "named", F.col("op_id"),
        F.array("d_id", "op_id"),
        F.format_string("succeeded after op %d dropped %s", F.col("d_id"), F.col("object")),
    )  # fmt: skip
    # Re-created in between: a read may still not return the old incarnation's
    # elements (added and acknowledged before the drop began).
    rs = s.join(creates, cond, "left_semi").filter(F.col("kind") == "read")
    old = (
        rs.select("run", "object", "op_id", "d_id", "d_inv", F.posexplode("result").alias("pos", "el"))
        .join(writer, ["run", "object", "el"])
        .filter(F.col("a_e") < F.col("d_inv"))
        .groupBy("run", "object", "op_id", "d_id")
        .agg(F.min(F.struct("pos", "a_op_id", "el")).alias("o"))
    )
    a2 = anomaly(
        old, "dropped-object-visible", "named", F.col("op_id"), F.array("o.a_op_id", "d_id", "op_id"),
        F.format_string("returned %d, added before op %d dropped the table", F.col("o.el"), F.col("d_id")),
    )  # fmt: skip
    return [a1, a2]


def _from_future(t: Any, writer: Any, failed: Any) -> Any:
    F = _F()
    reads = t.filter((F.col("kind") == "read") & (F.col("status") == "ok"))
    x = (
        reads.select("run", "object", "op_id", "e", F.posexplode("result").alias("pos", "el"))
        .join(writer, ["run", "object", "el"], "left")
        .filter(F.col("a_op_id").isNull() | (F.col("a_inv") > F.col("e")))
        .join(failed, ["run", "object", "el"], "left")
        .groupBy("run", "object", "op_id")
        .agg(F.min(F.struct("pos", "el", "a_op_id", "f_id")).alias("b"))
    )
    other = F.coalesce("b.a_op_id", "b.f_id")
    return anomaly(
        x, "read-from-future", "named", F.col("op_id"),
        F.when(other.isNull(), F.array("op_id")).otherwise(F.array(F.col("op_id"), other)),
        F.format_string("returned %d, which no write could have produced yet", F.col("b.el")),
    )  # fmt: skip


def _stale(t: Any, writer: Any) -> Any:
    """A full read missing an element whose add was acknowledged before the read
    began. Detected by counting (elements acknowledged before the read, from a
    running sum, against how many of them the read returned), then named by a
    join on the few stale reads only."""
    F, W = _F(), _W()
    reads = t.filter((F.col("kind") == "read") & (F.col("status") == "ok") & F.col("args").isNull())
    okw = writer.filter(F.col("a_status") == "ok")
    # A drop/re-create that may have happened before the read ends sets a
    # horizon: only elements added after it must be there (a drop that may
    # land any time skips the read).
    k, st = F.col("kind"), F.col("status")
    drops = _sel(t.filter((k == "drop-table") & (st != "fail")), "d")
    creates = _sel(t.filter((k == "create-table") & (st != "fail")), "c")
    dc = drops.join(creates, ["run", "object"]).select("run", "object", "d_inv", "d_e", "c_inv", "c_e")
    hz = (
        reads.select("run", "object", "op_id", "e").join(dc, ["run", "object"])
        .filter((F.col("d_inv") < F.col("e")) & (F.col("c_e") > F.col("d_inv")) & (F.col("c_inv") < F.col("e")))
        .groupBy("run", "object", "op_id").agg(F.max("d_e").alias("horizon"))
    )  # fmt: skip
    reads = reads.join(hz, ["run", "object", "op_id"], "left").filter(
        F.col("horizon").isNull() | (F.col("horizon") < 2**62)
    )
    # Count: acknowledged elements (with end < the read's invoke) vs found.
    plain = reads.filter(F.col("horizon").isNull())
    ev = okw.groupBy("run", "object", "a_op_id", "a_e").agg(F.count("*").alias("n")).select(
        "run", "object", F.col("a_e").alias("t"), F.lit(1).alias("typ"), F.col("a_op_id").alias("op_id"), "n"
    )
    q = plain.select("run", "object", F.col("inv").alias("t"), F.lit(0).alias("typ"), "op_id",
                     F.lit(0).cast("long").alias("n"))  # fmt: skip
    win = W.partitionBy("run", "object").orderBy("t", "typ", "op_id").rowsBetween(W.unboundedPreceding, 0)
    expected = ev.unionByName(q).withColumn("want", F.sum("n").over(win)).filter(F.col("typ") == 0)
    found = (
        plain.select("run", "object", "op_id", "inv", F.explode(F.array_distinct("result")).alias("el"))
        .join(okw, ["run", "object", "el"])
        .filter(F.col("a_e") < F.col("inv"))
        .groupBy("run", "object", "op_id").agg(F.count("*").alias("got"))
    )
    stale_plain = (
        expected.select("run", "object", "op_id", "want")
        .join(found, ["run", "object", "op_id"], "left")
        .filter(F.col("want") > F.coalesce("got", F.lit(0)))
        .select("run", "object", "op_id")
    )
    cand = reads.filter(F.col("horizon").isNotNull()).select("run", "object", "op_id").unionByName(stale_plain)
    c = reads.join(cand, ["run", "object", "op_id"], "left_semi")
    miss = (
        c.select("run", "object", "op_id", "inv", "horizon", "result")
        .join(okw, ["run", "object"])
        .filter((F.col("a_e") < F.col("inv")) & (F.col("horizon").isNull() | (F.col("a_inv") > F.col("horizon"))))
        .filter(~F.array_contains("result", F.col("el")))
    )
    # The element named first is the earliest known: acknowledged, or returned
    # by a completed read, whichever came first.
    first_read = (
        t.filter((F.col("kind") == "read") & (F.col("status") == "ok") & F.col("args").isNull())
        .select("run", "object", "e", F.explode("result").alias("el"))
        .groupBy("run", "object", "el").agg(F.min("e").alias("fr"))
    )
    named = (
        miss.join(first_read, ["run", "object", "el"], "left")
        .withColumn("known", F.least("a_e", F.coalesce("fr", F.col("a_e"))))
        .groupBy("run", "object", "op_id")
        .agg(F.min(F.struct("known", "el", "a_op_id")).alias("m"), F.count("*").alias("n_missing"))
    )
    return anomaly(
        named, "stale-read", "named", F.col("op_id"), F.array("m.a_op_id", "op_id"),
        F.format_string("misses %d element(s), e.g. %d acknowledged by op %d before the read began",
                        F.col("n_missing"), F.col("m.el"), F.col("m.a_op_id")),
    )  # fmt: skip


def named_parts(tops: Any) -> list[Any]:
    """Checker 1's join-shaped anomalies over table ops (`frames.table_ops`).
    The element rules skip tables with UPDATE/DELETE, as in-process."""
    F = _F()
    mutated = (
        tops.filter(F.col("kind").isin("update", "delete") & (F.col("status") != "fail"))
        .select("run", "object").distinct()
    )  # fmt: skip
    plain = cut(tops.join(mutated, ["run", "object"], "left_anti"))
    writer, _failed = _writers(tops)
    pwriter, pfailed = _writers(plain)
    return [
        _unknown_table(tops),
        *_dropped_visible(tops, writer),
        _from_future(plain, pwriter, pfailed),
        _stale(plain, pwriter),
    ]
