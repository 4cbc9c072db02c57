"""`coordsim check`: output and exit codes (0 valid, 1 invalid, 3 unknown, 2 bad input)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from sim.cli.main import app
from sim.cli.options import ACCEPTED_UNTIL
from sim.history.checker.generate import GenConfig, generate
from sim.history.traces import write_trace
from sim.history.verdict_file import VERDICT_FILE

DATA = Path(__file__).resolve().parents[3] / "data" / "histories"
runner = CliRunner()


def test_valid_edn_exits_0() -> None:
    r = runner.invoke(app, ["check", str(DATA / "seed001-valid.edn")])
    assert r.exit_code == 0, r.output
    assert "verdict: valid" in r.output


def test_invalid_edn_exits_1_and_explains(tmp_path: Path) -> None:
    page = tmp_path / "t.html"
    r = runner.invoke(app, ["check", str(DATA / "seed001-stale-read.edn"), "--html", str(page)])
    assert r.exit_code == 1, r.output
    assert "stale-read" in r.output
    assert "misses {1}" in r.output
    assert "verdict: invalid" in r.output
    text = page.read_text()
    assert 'class="ok bad"' in text
    assert "stale-read" in text


def test_unknown_exits_3(tmp_path: Path) -> None:
    # Checker 5 out of time before it finishes a table: unknown, not valid.
    write_trace(tmp_path, generate(GenConfig(ops=1500, p_info=0.05, seed=1)))
    r = runner.invoke(app, ["check", str(tmp_path), "--checker", "linear", "--linear-limit", "0"])
    assert r.exit_code == 3, r.output
    assert "verdict: unknown" in r.output


def test_trace_directory(tmp_path: Path) -> None:
    write_trace(tmp_path, generate(GenConfig(ops=300, p_info=0.05, seed=1)))
    r = runner.invoke(app, ["check", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "whitebox" in r.output


def test_the_old_checker_name_replay_runs_whitebox_with_one_note(tmp_path: Path) -> None:
    """`--checker replay` (its name until issue 37, now the Spark job's) still
    works: one line on stderr names `whitebox`, and every output says whitebox."""
    write_trace(tmp_path, generate(GenConfig(ops=300, p_info=0.05, seed=1)))
    r = runner.invoke(app, ["check", str(tmp_path), "--checker", "replay", "--checker", "replay", "--json"])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        f"coordsim: note: --checker replay is deprecated; use --checker whitebox (accepted until {ACCEPTED_UNTIL})"
    ]
    doc = json.loads(r.stdout)
    assert [c["name"] for c in doc["checkers"]] == ["whitebox"]
    written = (tmp_path / VERDICT_FILE).read_text()
    assert '"whitebox"' in written
    assert "replay" not in written
    assert "replay" not in r.stdout


def test_bad_input_exits_2_with_one_line() -> None:
    for path in [DATA / "malformed" / "process-after-info.edn", DATA / "no-such-file.edn"]:
        r = runner.invoke(app, ["check", str(path)])
        assert r.exit_code == 2, r.output
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert len(lines) == 1, r.output
        assert lines[0].startswith("coordsim: invalid input:"), r.output


def test_unknown_checker_name_is_bad_input() -> None:
    r = runner.invoke(app, ["check", str(DATA / "seed001-valid.edn"), "--checker", "nope"])
    assert r.exit_code == 2


def test_trace_with_an_oracle_regression_exits_1(tmp_path: Path) -> None:
    from sim.history.model import Event, Kind
    from sim.history.recorder import HistoryRecorder

    rec = HistoryRecorder(lambda: 0.0)
    op = rec.invoke(0, Kind.CREATE_TABLE, "t")
    rec.ok(op)
    events = [
        Event(seq=0, kind="oracle.apply_write", component="oracle", start_ns=0, end_ns=10, ts=9, timeline="user"),
        Event(seq=1, kind="oracle.read_ts", component="oracle", start_ns=20, end_ns=30, ts=8, timeline="user"),
    ]
    write_trace(tmp_path, rec.history(), events)
    r = runner.invoke(app, ["check", str(tmp_path)])
    assert r.exit_code == 1, r.output
    assert "timestamp-regression" in r.output
