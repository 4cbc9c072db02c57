"""`coordsim anomalies run`, `coordsim shrink`, and the pieces they stand on:
deterministic runs, fault plans that round-trip through their text form."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from sim.history.checker import check_history
from sim.history.traces import read_trace
from sim.history.verdict_file import VERDICT_FILE
from sim.nemesis.anomalies import run_scenario, run_spec
from sim.nemesis.anomaly_spec import default_spec, parse_known_bad
from sim.nemesis.plan import Fault, FaultKind, FaultPlan
from sim.nemesis.shrink import shrink

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.virtual

runner = CliRunner()


def test_same_seed_same_history() -> None:
    a, ea = run_scenario("crash-restart", "decoupled", 7)
    b, eb = run_scenario("crash-restart", "decoupled", 7)
    assert [a.op(i) for i in range(a.n)] == [b.op(i) for i in range(b.n)]
    assert ea == eb
    assert any(e.kind == "fault" for e in ea), "the default plan crashed the coordinator"


def test_fault_plan_round_trips_through_text() -> None:
    plan = FaultPlan(
        (
            Fault(0.012, FaultKind.CRASH_RESTART, 0.003),
            Fault(0.005, FaultKind.ORACLE_SLOW, 0.002, 50.0),
        )
    )
    assert FaultPlan.parse(str(plan)) == plan
    assert str(plan).startswith("oracle-slow@5ms")
    assert FaultPlan.parse("none") == FaultPlan()


def test_run_prints_verdict_and_writes_trace(tmp_path: Path) -> None:
    out = tmp_path / "trace"
    r = runner.invoke(
        app,
        ["anomalies", "run", "seed001", "--config", "decoupled", "--seed", "3", "-o", str(out)],
    )
    assert r.exit_code == 0, r.output
    assert "verdict: valid" in r.output
    assert "rerun: uv run coordsim anomalies run seed001 --config decoupled --seed 3" in r.output
    assert read_trace(out).history.n > 0
    assert r.stdout.strip().splitlines()[-1] == f"wrote {out}"


def test_run_json_is_the_verdict_with_its_directory(tmp_path: Path) -> None:
    out = tmp_path / "trace"
    r = runner.invoke(
        app,
        ["anomalies", "run", "seed001", "--config", "decoupled", "--seed", "0",
         "--known-bad", "peeks-ignore-catalog-ts", "-o", str(out), "--json"],
    )
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)  # nothing else on stdout
    assert doc["output"] == str(out)
    assert doc["valid"] is False
    written = json.loads((out / VERDICT_FILE).read_text())
    assert {k: v for k, v in doc.items() if k not in ("output", "rerun", "replay")} == written
    assert "insert-unknown-table" in {a["name"] for a in written["anomalies"]}


def test_run_of_a_known_bad_variant_exits_1() -> None:
    r = runner.invoke(
        app,
        ["anomalies", "run", "seed001", "--config", "decoupled", "--seed", "0",
         "--known-bad", "peeks-ignore-catalog-ts"],
    )
    assert r.exit_code == 1, r.output
    assert "insert-unknown-table" in r.output


def test_bad_input_exits_2() -> None:
    r = runner.invoke(app, ["anomalies", "run", "nope", "--seed", "0"])
    assert r.exit_code != 0


def test_shrink_keeps_the_anomaly_and_shrinks() -> None:
    spec = default_spec(
        "seed001", "decoupled", 0, known_bad=parse_known_bad(["peeks_ignore_catalog_ts"])
    )
    result = shrink(spec, max_runs=40)
    assert result is not None
    assert result.anomaly == "insert-unknown-table"
    assert result.spec.size < spec.size
    h, events = run_spec(result.spec)  # the printed reproduction reproduces
    assert result.anomaly in check_history(h, events).names


def test_shrink_cli_prints_smallest_reproduction() -> None:
    """On the matrix's first detecting seed (its bound is the seeds to first
    detection, so the schedule may move it without breaking this test)."""
    from sim.nemesis.matrix import MATRIX

    entry = next(e for e in MATRIX if (e.variant, e.scenario, e.config)
                 == ("skip_confirm_leadership", "split-brain", "event-loop"))
    r = runner.invoke(
        app,
        ["shrink", "split-brain", "--config", "event-loop", "--seed", str(entry.bound - 1),
         "--known-bad", "skip-confirm-leadership", "--max-runs", "30"],
    )
    assert r.exit_code == 1, r.output
    assert "smallest reproduction of" in r.output
    assert "rerun: uv run coordsim anomalies run split-brain" in r.output


def test_run_of_a_python_scenario_prints_its_coverage_and_writes_the_verdict(tmp_path: Path) -> None:
    """Issue 34: `coordsim run` of a Python scenario says what was judged, and
    its trace carries verdict.json with the coverage, as `check` writes it."""
    out = tmp_path / "run"
    r = runner.invoke(app, ["run", "seed001", "--config", "decoupled", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "coverage: 12 of 12 operations judged" in r.stdout
    doc = json.loads((out / "trace" / VERDICT_FILE).read_text())
    assert doc["valid"] is True
    assert doc["coverage"], doc
