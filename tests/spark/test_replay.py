"""The Spark replay job agrees with the in-process checkers on the golden traces
(a valid seeded run, a known-bad one, a crash that cut statements off) and on
generated histories with their mutants, anomaly for anomaly, op id for op id;
its metrics equal the same numbers computed with pyarrow."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sim.history.checker.run import check_history
from sim.history.traces import read_trace
from sim.spark.metrics import WINDOW_MS
from tests.spark.conftest import CRASH_RUN, GOLDEN, GOLDEN_RUNS
from tests.spark.expected import in_process, spark_rows

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


def _ops() -> pa.Table:
    return pa.concat_tables(
        [pq.read_table(GOLDEN / r / "ops.parquet").select(["invoke_ns", "complete_ns", "status"])
         for r in GOLDEN_RUNS]
    )  # fmt: skip


def test_metrics_equal_pyarrow(golden_out: Path) -> None:
    # Both golden runs are one group (the crash and generated runs are others).
    (m,) = [r for r in pq.read_table(golden_out / "metrics.parquet").to_pylist() if r["workload"] == "ddl-dml"]
    ops = _ops()
    ok = ops.filter(pc.equal(ops["status"].cast(pa.string()), "ok"))
    lat = pc.divide(pc.subtract(ok["complete_ns"], ok["invoke_ns"]).cast(pa.float64()), 1e6)
    s = pc.sort_indices(lat)
    sorted_lat = pc.take(lat, s).to_pylist()
    n = len(sorted_lat)
    for q, name in ((0.5, "p50_ms"), (0.99, "p99_ms"), (0.999, "p999_ms")):
        # percentile_approx (exact at this size): the smallest value with at
        # least q of the values at or below it.
        assert m[name] == pytest.approx(sorted_lat[max(0, math.ceil(q * n) - 1)])
    assert m["ok_ops"] == ok.num_rows
    assert m["errors"] == pc.sum(pc.equal(ops["status"].cast(pa.string()), "fail").cast(pa.int64())).as_py()
    assert m["ops"] == ops.num_rows
    assert m["latency_max_ms"] == pytest.approx(sorted_lat[-1])
    dur = 0.0
    windows: list[int] = []
    events = 0
    oracle = 0
    batches: list[int] = []
    for r in GOLDEN_RUNS:
        t = pq.read_table(GOLDEN / r / "ops.parquet")
        start = pc.min(t["invoke_ns"]).as_py()
        dur += (pc.max(t["complete_ns"]).as_py() - start) / 1e9
        okr = t.filter(pc.equal(t["status"].cast(pa.string()), "ok"))
        sec = pc.floor(pc.divide(pc.subtract(okr["complete_ns"], start).cast(pa.float64()), WINDOW_MS * 1e6))
        windows += [c["counts"] for c in pc.value_counts(sec).to_pylist()]
        ev = pq.read_table(GOLDEN / r / "events.parquet")
        kinds = ev["kind"].cast(pa.string())
        events += ev.num_rows
        oracle += pc.sum(pc.starts_with(kinds, "oracle.").cast(pa.int64())).as_py()
        gc = ev.filter(pc.equal(kinds, "group-commit"))
        batches += [b for b in gc["batch_size"].to_pylist() if b is not None]
    assert m["duration_s"] == pytest.approx(dur)
    assert m["throughput_ops_s"] == pytest.approx(ok.num_rows / dur)
    assert m["oracle_api_calls_per_op"] == pytest.approx(oracle / ops.num_rows)
    assert (m["window_ops_min"], m["window_ops_max"]) == (min(windows), max(windows))
    assert m["window_ops_mean"] == pytest.approx(sum(windows) / len(windows))
    assert m["group_commits"] == len(batches) > 0
    assert m["group_commit_batch_mean"] == pytest.approx(sum(batches) / len(batches))
    assert m["group_commit_batch_max"] == max(batches)
