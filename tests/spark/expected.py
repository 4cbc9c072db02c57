"""What the in-process checkers say about a trace, in the shape of the Spark
job's anomalies table: the reference the Spark tests compare against."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from sim.checker import check_named, check_replay
from sim.checker.verdict import MAX_REPORTED
from sim.spark.verify import COVERED
from sim.traces import read_trace

if TYPE_CHECKING:
    from pathlib import Path

Row = tuple[str, str, tuple[int, ...]]


def in_process(trace: Path) -> set[Row]:
    """(run, anomaly, op ids) of checker 1's join-shaped anomalies and checker 3's."""
    t = read_trace(trace)
    run = str(t.meta["run"])
    out: set[Row] = set()
    for v in (check_named(t.history), check_replay(t.history)):
        for name, n in v.counts.items():
            if COVERED.get(name) == v.checker:
                assert n <= MAX_REPORTED, f"{run}: {n} {name}: more than the checker keeps"
        out |= {(run, a.name, a.ops) for a in v.anomalies if COVERED.get(a.name) == a.checker}
    return out


def spark_rows(out: Path) -> set[Row]:
    t = pq.read_table(out / "anomalies.parquet").to_pylist()
    return {(r["run"], r["anomaly"], tuple(r["ops"])) for r in t}
