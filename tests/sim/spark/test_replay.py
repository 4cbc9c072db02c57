"""The Spark replay job agrees with the in-process checkers on the golden traces
(a valid seeded run, a known-bad one, a crash that cut statements off) and on
generated histories with their mutants, anomaly for anomaly, op id for op id;
its metrics equal the same numbers computed with pyarrow (tests/sim/spark/reference.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest

from sim.history.checker.run import check_history
from sim.history.traces import read_trace
from tests.sim.spark.conftest import CRASH_RUN, GOLDEN, GOLDEN_RUNS
from tests.sim.spark.expected import in_process, spark_rows
from tests.sim.spark.reference import assert_rows_equal, reference_metrics

if TYPE_CHECKING:
    from pathlib import Path

# Spark on a shared 2-core machine: the first test also starts the JVM and runs
# the whole replay (its fixture), which can exceed the default per-test limit.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def test_golden_anomalies_equal_the_in_process_checkers(golden_out: Path) -> None:
    want = set().union(*(in_process(GOLDEN / r) for r in GOLDEN_RUNS))
    assert want, "the known-bad golden trace must show anomalies"
    assert {r for r in spark_rows(golden_out) if r[0] in GOLDEN_RUNS} == want


def test_crash_cut_off_statements_are_placed_as_in_process(golden_out: Path) -> None:
    # Checker 3 places `info` writes without a catalog_ts in the incarnation
    # whose reads saw them, and leaves a table with such DDL unchecked: the
    # run is valid (the Spark job once flagged its reads).
    assert in_process(GOLDEN / CRASH_RUN) == set()
    assert {r for r in spark_rows(golden_out) if r[0] == CRASH_RUN} == set()
    rows = {r["run"]: r for r in pq.read_table(golden_out / "verdicts.parquet").to_pylist()}
    assert rows[CRASH_RUN]["verdict"] == "valid"


def test_generated_histories_and_mutants_as_in_process(golden_out: Path, generated: list[Path]) -> None:
    want = set().union(*(in_process(g) for g in generated))
    assert any(r[1] == "not-strict-serializable" for r in want), "the mutants must be caught"
    names = {g.name for g in generated}
    assert {r for r in spark_rows(golden_out) if r[0] in names} == want


def test_golden_verdicts(golden_out: Path) -> None:
    rows = {r["run"]: r for r in pq.read_table(golden_out / "verdicts.parquet").to_pylist()}
    assert rows["seed001-valid"]["verdict"] == "valid"
    bad = rows["seed001-peeks-ignore-catalog-ts"]
    assert bad["verdict"] == "invalid"
    # One row per anomaly per checker (checkers 2 and 3 can both report the
    # same ops as not-strict-serializable).
    t = read_trace(GOLDEN / "seed001-peeks-ignore-catalog-ts")
    assert bad["anomalies"] == sum(len(v.anomalies) for v in check_history(t.history, t.events).verdicts)
    assert bad["workload"] == "ddl-dml"
    assert bad["concurrency"] == "4"
    assert (golden_out / "report.md").read_text().count("seed001-") >= 2
    for png in ("ddl-dml-throughput.png", "ddl-dml-latency.png", "ddl-dml-windows.png"):
        assert (golden_out / png).stat().st_size > 1000
        assert f"]({png})" in (golden_out / "report.md").read_text()


def test_metrics_equal_pyarrow(golden_out: Path, generated: list[Path], known_bad: list[Path]) -> None:
    # Every group of the replay: both golden runs are one (ddl-dml, 4), the
    # crash run and each generated and known-bad run others.
    rows = pq.read_table(golden_out / "metrics.parquet").to_pylist()
    traces = [GOLDEN / r for r in (*GOLDEN_RUNS, CRASH_RUN)] + [*generated, *known_bad]
    assert_rows_equal(rows, reference_metrics(traces))
    (m,) = [r for r in rows if r["workload"] == "ddl-dml"]
    assert m["runs"] == len(GOLDEN_RUNS)
    assert m["group_commits"] > 0
