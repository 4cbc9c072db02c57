"""verdict.json (sim/history/verdict_file.py) and the commands that write it:
`coordsim check` (and `--json`, `--verdict`) and `coordsim anomalies run --out`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from sim.history.checker import CHECKERS, check_history
from sim.history.checker.generate import GenConfig, generate
from sim.history.import_edn import read_edn
from sim.history.traces import write_trace
from sim.history.verdict_file import VERDICT_FILE, verdict_document, write_verdict
from sim.nemesis.anomalies import run_scenario
from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import MARKER
from sim.runtime.staging import claimed_dir

DATA = Path(__file__).resolve().parents[2] / "data" / "histories"
runner = CliRunner()


def test_valid_run_gives_valid_true() -> None:
    h, events = run_scenario("seed001", "decoupled", 3)
    doc = verdict_document(check_history(h, events), trace="t", ops=h.n)
    assert doc["valid"] is True
    assert doc["anomalies"] == []
    assert doc["anomaly_counts"] == {}
    assert [c["name"] for c in doc["checkers"]] == list(CHECKERS)
    assert all(c["valid"] is True and not c["skipped"] for c in doc["checkers"]), doc["checkers"]
    assert all(c["seconds"] > 0 for c in doc["checkers"])
    assert (doc["trace"], doc["ops"]) == ("t", h.n)


def test_invalid_history_lists_anomalies_with_op_ids() -> None:
    h, events = read_edn(DATA / "seed001-insert-unknown-table.edn")
    doc = verdict_document(check_history(h, events), trace=None, ops=h.n)
    assert doc["valid"] is False
    named = [a for a in doc["anomalies"] if a["checker"] == "named"]
    assert [(a["name"], a["op_ids"]) for a in named] == [("insert-unknown-table", [0, 1])]
    assert "failed with 42P01" in named[0]["explanation"]
    assert set(doc["anomaly_counts"]) == {
        "insert-unknown-table", "not-strict-serializable", "not-linearizable"
    }
    by_name = {c["name"]: c for c in doc["checkers"]}
    assert by_name["named"]["valid"] is False
    assert by_name["whitebox"]["skipped"] is True  # an EDN history carries no timestamps
    assert doc["trace"] is None


def test_a_checker_out_of_time_gives_unknown() -> None:
    h = generate(GenConfig(ops=1500, p_info=0.05, seed=1))
    report = check_history(h, checkers=["linear"], linear_time_limit_s=0)
    doc = verdict_document(report, trace=None, ops=h.n)
    assert doc["valid"] == "unknown"
    assert doc["checkers"][0]["reason"]


def test_write_verdict_refuses_a_file_it_did_not_write(tmp_path: Path) -> None:
    theirs = tmp_path / "verdict.json"
    theirs.write_text('{"mine": true}\n')
    with pytest.raises(InvalidUsage, match="not written by coordsim"):
        write_verdict(theirs, {"generator": "coordsim", "valid": True})
    assert theirs.read_text() == '{"mine": true}\n'
    ours = tmp_path / "ours.json"
    write_verdict(ours, {"generator": "coordsim", "valid": True})
    write_verdict(ours, {"generator": "coordsim", "valid": False})  # its own: replaced
    assert json.loads(ours.read_text())["valid"] is False


def test_check_writes_verdict_into_a_trace_directory(tmp_path: Path) -> None:
    h, events = run_scenario("seed001", "decoupled", 3)
    write_trace(tmp_path, h, events)
    r = runner.invoke(app, ["check", str(tmp_path)])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / VERDICT_FILE).read_text())
    assert (doc["valid"], doc["ops"], doc["trace"]) == (True, h.n, str(tmp_path))
    # Checkers take a millisecond or so: their times are not printed as "0.00s".
    lines = [ln for ln in r.output.splitlines() if ln.lstrip().startswith(CHECKERS)]
    assert len(lines) == len(CHECKERS), r.output
    assert all(ln.endswith("ms") for ln in lines), r.output


def test_check_json_prints_the_document_only(tmp_path: Path) -> None:
    edn = tmp_path / "h.edn"
    shutil.copy(DATA / "seed001-insert-unknown-table.edn", edn)
    r = runner.invoke(app, ["check", "--json", str(edn)])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["valid"] is False
    assert doc["trace"] == str(edn)
    assert "insert-unknown-table" in doc["anomaly_counts"]
    # Beside an EDN file (often a source tree) nothing is written unasked.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.edn"]


def test_check_verdict_option_writes_the_same_document(tmp_path: Path) -> None:
    out = tmp_path / "v.json"
    edn = str(DATA / "seed001-valid.edn")
    r = runner.invoke(app, ["check", "--json", edn, "--verdict", str(out)])
    assert r.exit_code == 0, r.output
    written = json.loads(out.read_text())
    printed = json.loads(r.stdout)
    for d in (written, printed):  # the one non-deterministic field
        for c in d["checkers"]:
            c.pop("seconds")
    assert written == printed
    assert written["valid"] is True


def test_check_refuses_to_overwrite_a_foreign_verdict_file(tmp_path: Path) -> None:
    out = tmp_path / "v.json"
    out.write_text("user data\n")
    r = runner.invoke(app, ["check", str(DATA / "seed001-valid.edn"), "--verdict", str(out)])
    assert r.exit_code == 2, r.output
    assert out.read_text() == "user data\n"


def test_check_lists_its_verdict_in_the_coordsim_output_it_writes_into(tmp_path: Path) -> None:
    """A verdict.json check adds to a run's output is listed in that output's
    marker, so the output stays replaceable whole (an unlisted file would
    count as the user's and make coordsim refuse to replace it)."""
    h, events = run_scenario("seed001", "decoupled", 3)
    with claimed_dir(tmp_path / "out", "test") as out:
        write_trace(out / "trace", h, events)
    r = runner.invoke(app, ["check", str(out / "trace")])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "trace" / VERDICT_FILE).read_text())["valid"] is True
    assert "trace/verdict.json" in json.loads((out / MARKER).read_text())["files"]


def test_anomalies_run_writes_verdict_json_that_check_refreshes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["anomalies", "run", "seed001", "--config", "decoupled", "--seed", "0",
            "--known-bad", "peeks-ignore-catalog-ts", "--out", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 1, r.output
    doc = json.loads((out / VERDICT_FILE).read_text())
    assert doc["valid"] is False
    assert "insert-unknown-table" in doc["anomaly_counts"]
    assert doc["trace"] == str(out)
    # Listed in the run's output, so check may rewrite it in place...
    r = runner.invoke(app, ["check", str(out)])
    assert r.exit_code == 1, r.output
    assert r.stdout.strip().splitlines()[-1] == f"wrote {out / VERDICT_FILE}"
    # ...and the output stays coordsim's to replace.
    r = runner.invoke(app, args)
    assert r.exit_code == 1, r.output
