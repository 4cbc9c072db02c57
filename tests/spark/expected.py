"""What the in-process checkers say about a trace, in the shape of the Spark
job's anomalies table: the reference the Spark tests compare against."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from sim.history.checker.run import check_history
from sim.history.checker.verdict import MAX_REPORTED
from sim.history.traces import read_trace

if TYPE_CHECKING:
    from pathlib import Path

Row = tuple[str, str, tuple[int, ...]]


def in_process_report(trace: Path, *, capped: bool = False) -> tuple[set[Row], set[str]]:
    """(run, anomaly, op ids) of every checker of `check_history`, and the
    names of the checkers that ran. Unless `capped`, a checker that kept
    only some of its anomalies fails the test (which ones it keeps is then
    the comparison)."""
    t = read_trace(trace)
    run = str(t.meta["run"])
    rep = check_history(t.history, t.events)
    out: set[Row] = set()
    for v in rep.verdicts:
        for name, n in v.counts.items():
            assert capped or n <= MAX_REPORTED, f"{run}: {n} {name}: more than the checker keeps"
        out |= {(run, a.name, a.ops) for a in v.anomalies}
    return out, {v.checker for v in rep.verdicts}


def in_process(trace: Path) -> set[Row]:
    """(run, anomaly, op ids) of every in-process checker."""
    return in_process_report(trace)[0]


def spark_rows(out: Path) -> set[Row]:
    t = pq.read_table(out / "anomalies.parquet").to_pylist()
    return {(r["run"], r["anomaly"], tuple(r["ops"])) for r in t}


def spark_checkers(out: Path) -> dict[str, set[str]]:
    """Per run, the checkers the Spark job ran (verdicts.parquet's `checkers`)."""
    return {r["run"]: set(r["checkers"] or ()) for r in pq.read_table(out / "verdicts.parquet").to_pylist()}
