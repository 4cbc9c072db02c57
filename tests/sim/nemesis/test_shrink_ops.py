"""Operation-level shrinking (sim/nemesis/shrink.py): ddmin over statements,
clients and fault events yields a scenario file that `coordsim anomalies run
--scenario FILE` replays to the same anomaly."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from sim.cli.main import main as cli_main
from sim.history.checker import check_history
from sim.load.scenarios.builtin import PROGRAMS
from sim.nemesis.anomalies import run_spec
from sim.nemesis.anomaly_spec import default_spec, parse_known_bad
from sim.nemesis.shrink import ddmin, run_program, script_file, shrink_ops

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.virtual

runner = CliRunner()


def test_ddmin_finds_a_one_minimal_subset() -> None:
    calls: list[list[int]] = []

    def fails(xs: list[int]) -> bool:
        calls.append(xs)
        return {3, 7, 11} <= set(xs)

    assert ddmin(list(range(16)), fails) == [3, 7, 11]
    assert ddmin(list(range(5)), lambda xs: True) == []
    assert ddmin([], lambda xs: True) == []
    # Order is kept, and every candidate tried was a sublist.
    assert all(c == sorted(c) for c in calls)


@pytest.mark.parametrize(("scenario", "config"), [("ddl-dml", "decoupled"), ("busy-reads", "event-loop")])
@pytest.mark.parametrize("schedule", ["fifo", "random"])
def test_run_program_is_run_spec_for_the_scenarios_own_program(scenario: str, config: str, schedule: str) -> None:
    """The shrinker's runner must not drift from the anomaly runs' (it mirrors
    `sim.nemesis.anomalies._run`)."""
    spec = default_spec(scenario, config, 2, schedule=schedule)
    a, ea = run_spec(spec)
    from sim.nemesis.anomaly_scenarios import SCENARIOS

    b, eb = run_program(spec, PROGRAMS[SCENARIOS[scenario].program], schedule=schedule)
    assert [a.op(i) for i in range(a.n)] == [b.op(i) for i in range(b.n)]
    assert ea == eb


def test_shrink_ops_writes_a_file_that_reproduces(tmp_path: Path) -> None:
    spec = default_spec("seed001", "decoupled", 0, known_bad=parse_known_bad(["peeks_ignore_catalog_ts"]))
    h, ev = run_spec(spec)
    assert "insert-unknown-table" in check_history(h, ev).names
    result = shrink_ops(spec, anomaly="insert-unknown-table", max_runs=100)
    assert result is not None
    assert result.history.n <= 3 < result.original_ops
    assert "insert-unknown-table" in result.report.names
    path = tmp_path / "min.py"
    path.write_text(script_file(result, rerun=f"coordsim anomalies run --scenario-file {path}"))
    r = runner.invoke(app, ["anomalies", "run", "--scenario-file", str(path)])
    assert r.exit_code == 1, r.output
    assert "insert-unknown-table" in r.output
    assert f"{result.history.n} operations" in r.output


def test_cli_shrink_writes_the_scenario_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["shrink", "seed001", "--config", "event-loop", "--seed", "0",
                            "--known-bad", "apply-write-before-append", "-o", "min.py"])
    assert r.exit_code == 1, r.output
    assert "smallest reproduction of timestamp-regression" in r.output
    assert "rerun: uv run coordsim anomalies run --scenario-file min.py" in r.output
    again = runner.invoke(app, ["anomalies", "run", "--scenario-file", "min.py"])
    assert again.exit_code == 1, again.output
    assert "timestamp-regression" in again.output


@pytest.mark.parametrize(
    ("args", "make", "message"),
    [
        (["shrink", "seed001", "-o", "x.py"], "x.py", "x.py exists"),
        (["run", "--scenario-file", "w.toml"], "w.toml", "TOML scenarios are load workloads"),
        (["run", "--scenario-file", "nope.py"], None, "no scenario file nope.py"),
        (["run", "--scenario-file", "bad.py"], "bad.py", "unknown RUN key 'zz'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], make: str | None, message: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    if make is not None:
        (tmp_path / make).write_text('RUN = {"zz": 1}\nasync def scenario(sim):\n    pass\n' if make == "bad.py" else "")
    before = sorted(p.name for p in tmp_path.iterdir())
    # `coordsim shrink`; `anomalies shrink` is its deprecated name (a note on stderr)
    monkeypatch.setattr(sys, "argv", ["coordsim", *(args if args[0] == "shrink" else ["anomalies", *args])])
    with pytest.raises(SystemExit) as exc:
        cli_main()
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert message in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
