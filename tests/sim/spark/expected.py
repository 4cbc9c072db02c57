"""What the in-process checkers say about a trace, in the shape of the Spark
job's anomalies table: the reference the Spark tests compare against."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from sim.history.checker.run import SHOWN_TABLES, check_history
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


#: verdicts.parquet's columns that `in_process_verdict` predicts.
VERDICT_COLS = ("verdict", "ops_to_judge", "ops_judged", "coverage_complete", "tables",
                "tables_not_fully_judged", "not_table_ops", "not_judged")


def in_process_verdict(trace: Path) -> dict[str, Any]:
    """`check_history`'s verdict on the trace and its coverage, in
    verdicts.parquet's columns (`VERDICT_COLS`)."""
    t = read_trace(trace)
    rep = check_history(t.history, t.events)
    gaps = [c for c in rep.coverage if not c.complete]
    return {
        "verdict": str(rep.outcome), "ops_to_judge": rep.ops_to_judge, "ops_judged": rep.ops_judged,
        "coverage_complete": rep.complete, "tables": len(rep.coverage), "tables_not_fully_judged": len(gaps),
        "not_table_ops": rep.not_tables,
        "not_judged": [{"table": c.table, "ops": c.ops, "judged": c.judged, "reasons": c.reasons(),
                        "op_ids": list(c.unjudged_ops)} for c in gaps[:SHOWN_TABLES]],
    }


def spark_verdicts(out: Path) -> dict[str, dict[str, Any]]:
    """Per run, verdicts.parquet's `VERDICT_COLS`."""
    return {r["run"]: {c: r[c] for c in VERDICT_COLS} for r in pq.read_table(out / "verdicts.parquet").to_pylist()}
