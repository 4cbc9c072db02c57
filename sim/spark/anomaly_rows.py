"""The rows every Spark checker emits and the column helpers they share:
`anomaly` shapes a frame of violations as the anomaly table (`ANOMALY_COLUMNS`,
the same columns as the in-process checkers' anomalies), `element_hash` is an
order-free hash of an array column, `pred` a `where` as a SQL boolean.
pyspark is imported only when a plan is built (`F`, `W`), so importing this
costs nothing."""

from __future__ import annotations

from typing import Any, Final

__all__ = ["ANOMALY_COLUMNS", "BROADCAST_ROWS", "NAME", "WHERE_SCHEMA", "F", "W", "anomaly", "element_hash", "pred"]

NAME: Final = "not-strict-serializable"
ANOMALY_COLUMNS: Final = ("run", "anomaly", "checker", "op_id", "ops", "detail")
#: The JSON of an op's `args`: `where` values are parsed as strings (Spark
#: reads a JSON number into a string field as its text), then cast.
WHERE_SCHEMA: Final = "struct<where:array<array<string>>,`set`:bigint,`add`:bigint,`count`:boolean>"
#: Up to this many rows, a frame of violations is broadcast to a join.
BROADCAST_ROWS: Final = 100_000


def F() -> Any:
    from pyspark.sql import functions as F

    return F


def W() -> Any:
    from pyspark.sql import Window

    return Window


def element_hash(col: str) -> Any:
    """Sum over an array of two independent 32-bit element hashes, packed as
    one long per hash: equal for equal multisets whatever the order, and never
    overflowing (Spark 4's ANSI mode turns overflow into an error) below 2**31
    elements."""
    F_ = F()
    return F_.struct(
        F_.expr(f"aggregate({col}, 0L, (acc, x) -> acc + (xxhash64(x) & 4294967295L))").alias("h1"),
        F_.expr(f"aggregate({col}, 0L, (acc, x) -> acc + (CAST(hash(x) AS BIGINT) & 4294967295L))").alias("h2"),
    )


def anomaly(df: Any, name: str | Any, checker: str, op: Any, ops: Any, detail: Any) -> Any:
    F_ = F()
    return df.select(
        F_.col("run"),
        (F_.lit(name) if isinstance(name, str) else name).alias("anomaly"),
        F_.lit(checker).alias("checker"),
        op.cast("long").alias("op_id"),
        ops.cast("array<bigint>").alias("ops"),
        detail.cast("string").alias("detail"),
    )


def pred(where: str, var: str = "x") -> str:
    """A SQL boolean over `var` for a parsed `where` (null: every row)."""
    cmp = " ".join(
        f"WHEN '{o}' THEN {var} {o} CAST(t[1] AS BIGINT)" for o in ("=", "<>", "<", "<=", ">", ">=")
    )
    return f"forall(coalesce({where}, array()), t -> CASE t[0] {cmp} END)"


