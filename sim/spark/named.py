"""The named anomalies of checker 1 (`sim.history.checker.named`) that are joins:
`insert-unknown-table` / `select-unknown-table`, `dropped-object-visible`,
`read-from-future` and `stale-read`, judged from real time alone.

Each rule is the in-process rule restated over whole tables at once: "some
witness completed before the op began" becomes a running max over a time
ordered window, "no drop could have intervened" an anti-join, "the element's
add" a lookup in the per-element frame (`frames.elements`). Rules stay silent
where an indeterminate op could explain the observation, exactly as
in-process, and the op ids each anomaly names are the same (the tests compare
them).

Every frame here is partitioned by table (`frames.KEYS`), so the
joins and windows run within a partition, without shuffles; the joins of a
large frame with a few suspect rows hash the few rows (`shuffle_hash`), so the
large side is streamed, not sorted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.spark.anomaly_rows import anomaly
from sim.spark.frames import INF, KEYS, NAMES

if TYPE_CHECKING:
    from sim.spark.frames import Kept

__all__ = ["named_parts"]


def _F() -> Any:
    from pyspark.sql import functions as F

    return F


def _W() -> Any:
    from pyspark.sql import Window

    return Window


def _sel(df: Any, prefix: str, cols: tuple[str, ...] = ("op_id", "inv", "e", "status")) -> Any:
    F = _F()
    return df.select(*KEYS, *[F.col(c).alias(f"{prefix}_{c}") for c in cols])


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
    ev = wit.select(*KEYS, *NAMES, F.col("e").alias("t"), F.lit(1).alias("typ"), "op_id",
                    F.struct("inv", (-F.col("e")).alias("ne"), (-F.col("op_id")).alias("nid"),
                             F.col("op_id").alias("id")).alias("w"),
                    F.lit(None).cast("string").alias("kind"), F.lit(None).cast("long").alias("fe"))
    q = unknown.select(*KEYS, *NAMES, F.col("inv").alias("t"), F.lit(0).alias("typ"), "op_id",
                       F.lit(None).alias("w"), "kind", F.col("e").alias("fe"))
    win = W.partitionBy(*KEYS).orderBy("t", "typ", "op_id").rowsBetween(W.unboundedPreceding, 0)
    best = (
        ev.unionByName(q).withColumn("best", F.max("w").over(win)).filter((F.col("typ") == 0) & F.col("best").isNotNull())
        .select(*KEYS, *NAMES, "op_id", "kind", F.col("t").alias("f_inv"), "fe",
                F.col("best.id").alias("w_id"), F.col("best.inv").alias("w_inv"))
    )
    drops = _sel(t.filter((k == "drop-table") & (st != "fail")), "d")
    cond = (
        (best.pk == drops.pk) & (best.tid == drops.tid)
        & (drops.d_e > best.w_inv) & (drops.d_inv < best.fe)
    )
    fired = best.join(drops, cond, "left_anti")
    return anomaly(
        fired,
        F.when(F.col("kind") == "read", "select-unknown-table").otherwise("insert-unknown-table"),
        "named", F.col("op_id"), F.array("w_id", "op_id"),
        F.format_string("failed 42P01 although op %d on %s completed before it began", F.col("w_id"), F.col("object")),
    )


def _writer(elems: Any) -> Any:
    """element -> its last non-failed add (`frames.elements`), for elements
    that have one."""
    F = _F()
    return elems.filter(F.col("a_op_id").isNotNull()).select(*KEYS, "el", "a_op_id", "a_inv", "a_e", "a_ok")


def _dropped_visible(t: Any, elems: Any) -> list[Any]:
    F = _F()
    k, st = F.col("kind"), F.col("status")
    succ = t.filter(k.isin("add", "read", "update", "delete") & (st == "ok")).select(
        *KEYS, *NAMES, "op_id", "kind", "inv", "e"
    )
    okdrops = _sel(t.filter((k == "drop-table") & (st == "ok")), "d")
    # Drops are few per table: hashed, so the ops stream past them unsorted.
    pairs = succ.join(okdrops.hint("shuffle_hash"), list(KEYS)).filter(F.col("d_e") < F.col("inv"))
    s = pairs.groupBy(*KEYS, *NAMES, "op_id", "kind", "e").agg(
        F.max(F.struct("d_inv", "d_op_id", "d_e")).alias("d")
    ).select(*KEYS, *NAMES, "op_id", "kind", "e", F.col("d.d_inv").alias("d_inv"), F.col("d.d_op_id").alias("d_id"))
    creates = _sel(t.filter((k == "create-table") & (st != "fail")), "c")
    cond = (
        (s.pk == creates.pk) & (s.tid == creates.tid)
        & (creates.c_e > s.d_inv) & (creates.c_inv < s.e)
    )
    a1 = anomaly(
        s.join(creates, cond, "left_anti"), "dropped-object-visible", "named", F.col("op_id"),
        F.array("d_id", "op_id"),
        F.format_string("succeeded after op %d dropped %s", F.col("d_id"), F.col("object")),
    )
    # Re-created in between: a read may still not return the old incarnation's
    # elements (added and acknowledged before the drop began). Few reads:
    # their results are fetched and looked up by hashing them.
    rs = s.join(creates, cond, "left_semi").filter(F.col("kind") == "read").select(
        *KEYS, "run", "op_id", "d_id", "d_inv"
    )
    rs = (
        t.select(*KEYS, "op_id", "result").join(rs.hint("shuffle_hash"), [*KEYS, "op_id"])
        .select(*KEYS, "run", "op_id", "d_id", "d_inv", F.posexplode("result").alias("pos", "el"))
    )
    old = (
        _writer(elems).join(rs.hint("shuffle_hash"), [*KEYS, "el"])
        .filter(F.col("a_e") < F.col("d_inv"))
        .groupBy(*KEYS, "run", "op_id", "d_id")
        .agg(F.min(F.struct("pos", "a_op_id", "el")).alias("o"))
    )
    a2 = anomaly(
        old, "dropped-object-visible", "named", F.col("op_id"), F.array("o.a_op_id", "d_id", "op_id"),
        F.format_string("returned %d, added before op %d dropped the table", F.col("o.el"), F.col("d_id")),
    )
    return [a1, a2]


def _from_future(t: Any, elems: Any, facts: Any) -> Any:
    """From the per-read facts (`frames.read_facts`): the first element, in
    result order, that no add had begun by the read's end, named with its
    last non-failed or first failed add (looked up for those reads only)."""
    F = _F()
    x = (
        t.select(*KEYS, "op_id", "run", "result")
        .join(facts.filter(F.col("ff").isNotNull()).hint("shuffle_hash"), [*KEYS, "op_id"])
        .select(*KEYS, "op_id", "run", F.array_distinct("result")[F.col("ff")].alias("el"))
    )
    x = elems.select(*KEYS, "el", "a_op_id", "f_id").join(x.hint("shuffle_hash"), [*KEYS, "el"], "right")
    other = F.coalesce("a_op_id", "f_id")
    return anomaly(
        x, "read-from-future", "named", F.col("op_id"),
        F.when(other.isNull(), F.array("op_id")).otherwise(F.array(F.col("op_id"), other)),
        F.format_string("returned %d, which no write could have produced yet", F.col("el")),
    )


def _stale(t: Any, elems: Any, facts: Any, keep: Kept) -> Any:
    """A full read missing an element whose add was acknowledged before the read
    began. Detected by counting (elements acknowledged before the read, from a
    running sum, against how many of them the read returned: `got` of the
    per-read facts), then named by a join on the few stale reads only (kept:
    both the naming and the elements' first reads start from them)."""
    F, W = _F(), _W()
    k, st = F.col("kind"), F.col("status")
    full = (F.col("mutated") == 0) & (k == "read") & (st == "ok") & F.col("args").isNull()
    okw = _writer(elems).filter("a_ok")
    # A drop/re-create that may have happened before the read ends sets a
    # horizon: only elements added after it must be there (a drop that may
    # land any time skips the read).
    drops = _sel(t.filter((k == "drop-table") & (st != "fail")), "d")
    creates = _sel(t.filter((k == "create-table") & (st != "fail")), "c")
    dc = drops.join(creates, list(KEYS)).select(*KEYS, "d_inv", "d_e", "c_inv", "c_e")
    between = (F.col("d_inv") < F.col("e")) & (F.col("c_e") > F.col("d_inv")) & (F.col("c_inv") < F.col("e"))
    reads = (
        t.filter(full).select(*KEYS, "op_id", "inv", "e")
        .join(dc.hint("shuffle_hash"), list(KEYS), "left")
        .groupBy(*KEYS, "op_id", "inv").agg(F.max(F.when(between, F.col("d_e"))).alias("horizon"))
        .filter(F.col("horizon").isNull() | (F.col("horizon") < INF))
    )
    # Count: acknowledged elements (with end < the read's invoke) vs found,
    # for reads without a horizon.
    ev = okw.groupBy(*KEYS, "a_op_id", "a_e").agg(F.count("*").alias("n")).select(
        *KEYS, F.col("a_e").alias("t"), F.lit(1).alias("typ"), F.col("a_op_id").alias("op_id"), "n",
        F.lit(None).cast("long").alias("horizon"),
    )
    q = reads.select(*KEYS, F.col("inv").alias("t"), F.lit(0).alias("typ"), "op_id",
                     F.lit(0).cast("long").alias("n"), "horizon")
    win = W.partitionBy(*KEYS).orderBy("t", "typ", "op_id").rowsBetween(W.unboundedPreceding, 0)
    cand = keep(
        ev.unionByName(q).withColumn("want", F.sum("n").over(win)).filter(F.col("typ") == 0)
        .join(facts.select(*KEYS, "op_id", "got"), [*KEYS, "op_id"], "left")
        .filter(F.col("horizon").isNotNull() | (F.col("want") > F.coalesce("got", F.lit(0))))
        .select(*KEYS, "op_id", F.col("t").alias("inv"), "horizon")
    )
    c = t.select(*KEYS, "run", "op_id", "result").join(cand.hint("shuffle_hash"), [*KEYS, "op_id"])
    miss = (
        okw.join(c.hint("shuffle_hash"), list(KEYS))
        .filter((F.col("a_e") < F.col("inv")) & (F.col("horizon").isNull() | (F.col("a_inv") > F.col("horizon"))))
        .filter(~F.array_contains("result", F.col("el")))
    )
    # The element named first is the earliest known: acknowledged, or returned
    # by a completed read, whichever came first (looked up for the tables of
    # the candidates only).
    first_read = (
        t.filter(full).select(*KEYS, "e", "result")
        .join(cand.select(*KEYS).distinct().hint("shuffle_hash"), list(KEYS), "left_semi")
        .select(*KEYS, "e", F.explode("result").alias("el"))
        .groupBy(*KEYS, "el").agg(F.min("e").alias("fr"))
    )
    named = (
        miss.join(first_read, [*KEYS, "el"], "left")
        .withColumn("known", F.least("a_e", F.coalesce("fr", F.col("a_e"))))
        .groupBy(*KEYS, "run", "op_id")
        .agg(F.min(F.struct("known", "el", "a_op_id")).alias("m"), F.count("*").alias("n_missing"))
    )
    return anomaly(
        named, "stale-read", "named", F.col("op_id"), F.array("m.a_op_id", "op_id"),
        F.format_string("misses %d element(s), e.g. %d acknowledged by op %d before the read began",
                        F.col("n_missing"), F.col("m.el"), F.col("m.a_op_id")),
    )


def named_parts(t: Any, elems: Any, facts: Any, keep: Kept) -> list[Any]:
    """Checker 1's join-shaped anomalies over the table ops (`t`, with the
    per-table `mutated` flag), their elements (`frames.elements`) and the
    per-read facts (`frames.read_facts`); `keep` persists what more than one
    step reads. The element rules skip tables with UPDATE/DELETE, as in-process."""
    return [
        _unknown_table(t),
        *_dropped_visible(t, elems),
        _from_future(t, elems, facts),
        _stale(t, elems, facts, keep),
    ]
