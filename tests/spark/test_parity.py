"""Parity by construction: on the regression corpus (tests/data/traces), the
known-bad matrix and generated histories with their mutants, the Spark job
runs every checker of `sim.history.checker.run.CHECKERS` and reports exactly the
anomalies, with the same op ids, that `check_history` reports in-process."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest

from sim.history.checker.run import CHECKERS
from tests.spark.conftest import CRASH_RUN, GOLDEN, GOLDEN_RUNS
from tests.spark.expected import in_process_report, spark_checkers, spark_rows

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def _traces(generated: list[Path], known_bad: list[Path]) -> list[Path]:
    return [GOLDEN / r for r in (*GOLDEN_RUNS, CRASH_RUN)] + [*generated, *known_bad]


def test_every_checker_runs_on_both_sides(
    golden_out: Path, generated: list[Path], known_bad: list[Path]
) -> None:
    ran = spark_checkers(golden_out)
    for t in _traces(generated, known_bad):
        _, local = in_process_report(t)
        run = t.name
        assert local == set(CHECKERS), (
            f"{run}: in-process ran {sorted(local)}, not {list(CHECKERS)}"
        )
        assert ran.get(run) == set(CHECKERS), (
            f"{run}: Spark ran {sorted(ran.get(run, ()))}, not {list(CHECKERS)}"
        )


def test_same_anomalies_same_op_ids(
    golden_out: Path, generated: list[Path], known_bad: list[Path]
) -> None:
    got = spark_rows(golden_out)
    for t in _traces(generated, known_bad):
        want, _ = in_process_report(t)
        assert {r for r in got if r[0] == t.name} == want, t.name


def test_known_bad_variants_are_invalid_in_spark(golden_out: Path, known_bad: list[Path]) -> None:
    rows = {r["run"]: r for r in pq.read_table(golden_out / "verdicts.parquet").to_pylist()}
    names = {(r[0], r[1]) for r in spark_rows(golden_out)}
    for t in known_bad:
        assert rows[t.name]["verdict"] == "invalid", t.name
        if "apply_write_before_append" in t.name:
            assert (t.name, "timestamp-regression") in names, t.name
            assert rows[t.name]["timestamp-regression"] > 0
    assert sum("apply_write_before_append" in t.name for t in known_bad) == 4


def test_native_plans_equal_the_in_process_checkers(
    spark: Any, generated: list[Path], tmp_path: Path
) -> None:
    # The replay decides checkers 1 and 3 per run in-process by default
    # (verify.NATIVE_FORM); the native plans, kept for runs too large for one
    # task, must agree too.
    from sim.spark.job import replay

    traces = [GOLDEN / r for r in (*GOLDEN_RUNS, CRASH_RUN)] + generated
    replay(spark, [str(t) for t in traces], tmp_path, with_metrics=False, native=True)
    got = spark_rows(tmp_path)
    for t in traces:
        want, _ = in_process_report(t)
        assert {r for r in got if r[0] == t.name} == want, t.name
    assert set().union(*spark_checkers(tmp_path).values()) == set(CHECKERS)
