"""`coordsim anomalies sweep` and sim/nemesis/sweep.py: counts that match the
seeds' own runs, failing seeds whose replay lines reproduce, the same summary
whatever the number of workers, and bad input as one line and exit 2."""

from __future__ import annotations

import json
import shlex
import sys
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from sim.cli.main import main as cli_main
from sim.history.traces import read_trace
from sim.history.verdict_file import VERDICT_FILE
from sim.nemesis import sweep as sweep_mod
from sim.nemesis.anomalies import run_spec
from sim.nemesis.anomaly_spec import default_spec, parse_known_bad
from sim.nemesis.sweep import SUMMARY_FILE, Summary, sweep, tasks
from tests.sim.nemesis.helpers import sweep as reference_sweep

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.virtual

runner = CliRunner()
BAD = "peeks-ignore-catalog-ts"  # caught on seed001 / decoupled (test_known_bad.py)
BAD_ARGS = ["--scenario", "seed001", "--config", "decoupled", "--known-bad", BAD, "--seeds", "6"]


def _sweep(out: Path, *args: str) -> tuple[int, str, dict[str, object]]:
    r = runner.invoke(app, ["anomalies", "sweep", *args, "-o", str(out)])
    summary = json.loads((out / SUMMARY_FILE).read_text()) if (out / SUMMARY_FILE).exists() else {}
    return r.exit_code, r.output, summary


def test_clean_sweep_exits_0_with_the_seeds_counts(tmp_path: Path) -> None:
    code, output, summary = _sweep(
        tmp_path / "o", "--scenario", "seed001", "--config", "decoupled",
        "--seeds", "3", "--first-seed", "5", "--jobs", "1",
    )
    assert code == 0, output
    ops = sum(run_spec(default_spec("seed001", "decoupled", s))[0].n for s in (5, 6, 7))
    assert summary["runs"] == 3
    assert summary["seeds"] == {"first": 5, "last": 7, "count": 3}
    assert summary["ops"] == ops
    assert summary["valid"] is True
    assert (summary["anomalies"], summary["failing"]) == ({}, [])
    assert "anomalies: none" in output
    verdict = json.loads((tmp_path / "o" / VERDICT_FILE).read_text())
    assert (verdict["valid"], verdict["ops"], verdict["runs"]) == (True, ops, 3)
    # Valid means every operation to judge was judged (issue 34).
    cov = verdict["coverage"]
    assert cov["ops"] > 0
    assert (cov["judged"], cov["unknown_seeds"]) == (cov["ops"], [])


def test_sweep_json_is_the_summary_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "o"
    r = runner.invoke(app, ["anomalies", "sweep", *BAD_ARGS, "--jobs", "1", "-o", str(out), "--json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)  # progress goes to stderr
    assert doc.pop("output") == str(out)
    assert doc == json.loads((out / SUMMARY_FILE).read_text())
    assert doc["valid"] is False
    assert doc["failing"]


def test_known_bad_sweep_exits_1_and_its_replay_lines_reproduce(tmp_path: Path) -> None:
    out = tmp_path / "o"
    code, output, summary = _sweep(out, *BAD_ARGS, "--jobs", "2")
    assert code == 1, output
    # The failing seeds are those the test suite's own loop finds.
    expected = reference_sweep("seed001", "decoupled", range(6), known_bad=parse_known_bad([BAD]))
    failing = summary["failing"]
    assert isinstance(failing, list)
    assert [f["seed"] for f in failing] == [f.seed for f in expected]
    assert failing, "the known-bad variant was not caught in 6 seeds"
    for f in failing:
        assert {"insert-unknown-table", "select-unknown-table"} & set(f["anomalies"]), f
        trace = read_trace(out / f["trace"])
        assert trace.meta["rerun"] == f["rerun"] == trace.meta["replay"] == f["replay"]
        seed_verdict = json.loads((out / f["trace"] / VERDICT_FILE).read_text())
        assert seed_verdict["valid"] is False
        assert seed_verdict["coverage"]["tables"], seed_verdict["coverage"]
        assert f"seed {f['seed']}: " in output
        assert f"rerun: {f['rerun']}" in output
    # Run one replay line as printed: the same anomalies come back.
    first = failing[0]
    argv = shlex.split(first["rerun"])
    assert argv[:3] == ["uv", "run", "coordsim"]
    r = runner.invoke(app, argv[3:])
    assert r.exit_code == 1, r.output
    assert f"anomalies: {', '.join(first['anomalies'])}" in r.output


def test_summary_is_the_same_whatever_the_jobs(tmp_path: Path) -> None:
    texts = []
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}"
        code, output, _ = _sweep(out, *BAD_ARGS, "--jobs", jobs)
        assert code == 1, output
        texts.append((out / SUMMARY_FILE).read_bytes())
    assert texts[0] == texts[1]


def test_a_crash_is_a_failing_seed_with_its_replay_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(spec: object) -> None:
        raise RuntimeError("the coordinator fell over\nbadly")

    monkeypatch.setattr(sweep_mod, "run_spec", crash)
    work = tasks("seed001", "decoupled", seeds=2)
    results = sweep(work, jobs=1)
    assert [(r.seed, r.outcome, r.error) for r in results] == [
        (0, "crashed", "RuntimeError: the coordinator fell over badly"),
        (1, "crashed", "RuntimeError: the coordinator fell over badly"),
    ]
    summary = Summary("seed001", "decoupled", (), tuple(results)).to_json()
    assert summary["valid"] is False
    assert summary["crashed"] == [0, 1]
    assert [f["rerun"] for f in summary["failing"]] == [t.spec().command() for t in work]


def test_a_foreign_output_directory_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    code, output, _ = _sweep(out, "--scenario", "seed001", "--config", "decoupled", "--seeds", "1")
    assert code != 0, output
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "nope", "--seeds", "2"], "unknown scenario 'nope'"),
        (["--scenario", "seed001", "--seeds", "0"], "--seeds must be between 1"),
        (["--scenario", "seed001", "--seeds", "2", "--jobs", "0"], "--jobs must be >= 1"),
        (
            ["--scenario", "seed001", "--seeds", "2", "--known-bad", "zz"],
            "unknown known-bad variant",
        ),
        (["--scenario", "seed001", "--seeds", "2", "--first-seed", str(2**63 - 1)], "exceeds the maximum"),
        (["--scenario", "seed001"], "Missing option '--seeds'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        sys, "argv", ["coordsim", "anomalies", "sweep", "--config", "decoupled", *args]
    )
    with pytest.raises(SystemExit) as exc:
        cli_main()
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("coordsim: invalid input:"), err
    assert message in err[0], err
    assert list(tmp_path.iterdir()) == []  # nothing written
