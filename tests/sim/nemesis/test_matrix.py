"""The known-bad matrix (sim/nemesis/matrix.py): every caught entry is caught by
one of its names within its measured bound, every not-caught one stays clean,
the split-brain x pg-oracle finding is found (asserted present, not excluded),
and `coordsim anomalies matrix` prints and writes the table."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from coordinator.config import KnownBad
from sim.cli.main import app
from sim.nemesis.matrix import (
    MATRIX,
    MATRIX_JSON,
    MATRIX_MD,
    Entry,
    EntryResult,
    run_entry,
    to_json,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.virtual

#: Seeds the slow test gives each not-caught entry (the matrix's own default
#: run uses 100 too; the default suite only checks the entries are well formed).
EVIDENCE_SEEDS = 100


def _id(e: Entry) -> str:
    return f"{e.label}-{e.scenario}-{e.config}"


def _params(expect: str) -> list[object]:
    return [pytest.param(e, id=_id(e)) for e in MATRIX if e.expect == expect]


@pytest.mark.parametrize("entry", _params("caught"))
def test_entry_is_caught_by_name_within_its_bound(entry: Entry) -> None:
    """Runs seeds 0 … bound-1 only (bounds are 1-11 seeds, ~15 s in all)."""
    r = run_entry(entry, seeds=entry.bound, jobs=1)
    named = {n for counts in r.by_checker.values() for n in counts}
    assert r.first is not None, f"{_id(entry)}: not caught in {entry.bound} seeds: {r.by_checker}"
    assert entry.expected & named, (entry.expected, r.by_checker)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("entry", _params("not-caught"))
def test_not_caught_entry_stays_valid(entry: Entry) -> None:
    r = run_entry(entry, seeds=EVIDENCE_SEEDS, jobs=1)
    assert r.as_expected, f"{_id(entry)} named {r.by_checker}: it is caught now, update the matrix"


def test_every_toggle_has_an_entry_and_the_finding_is_one() -> None:
    variants = {e.variant for e in MATRIX}
    assert set(KnownBad.__dataclass_fields__) <= variants
    # Issue 36's clean adapter rows have no variant either, but expect nothing.
    finding = [e for e in MATRIX if e.variant is None and e.expect == "caught"]
    assert [(e.scenario, e.config, e.expect) for e in finding] == [("split-brain", "event-loop+pg-oracle", "caught")]
    # Issue 38: a clock step past persist's lease ended the coordinator until
    # its expired handles were reopened; those rows are clean now.
    lease = {(e.variant, e.config, e.expect) for e in MATRIX if e.scenario == "clock-jump-past-lease"}
    assert lease == {(None, c, "not-caught") for c in ("event-loop", "event-loop+pg-oracle", "decoupled")}


def test_an_unknown_seed_voids_a_not_caught_claim() -> None:
    """Fail closed (issue 34): "not caught" over seeds a checker did not fully
    judge is "not looked at", so the entry is not as expected; a caught entry
    stays caught, and the coverage cell names the unknown seeds."""
    quiet = next(e for e in MATRIX if e.expect == "not-caught")
    caught = next(e for e in MATRIX if e.expect == "caught")
    judged = EntryResult(quiet, 3, None, 30, {}, (), 30, 30)
    partly = EntryResult(quiet, 3, None, 30, {}, (1,), 30, 25)
    assert judged.as_expected
    assert not partly.as_expected
    assert partly.coverage() == "25/30 ops judged; 1 of 3 seeds unknown (seeds 1)"
    assert EntryResult(caught, 1, 0, 10, {"x": {"y": 1}}, (0,), 10, 5).as_expected
    assert to_json([partly], seeds=3)["entries"][0]["unknown_seeds"] == [1]


def test_fewer_seeds_than_a_rows_bound_is_not_a_failure() -> None:
    """`--seeds 10` cannot reach a row first caught at seed 44: that row says
    so, and the matrix stays as expected (a clean tree never prints NOT as
    expected for want of seeds); at or past the bound, not caught fails."""
    far = next(e for e in MATRIX if e.expect == "caught" and e.bound > 10)
    short = EntryResult(far, 10, None, 100)
    assert short.as_expected
    assert short.detection() == f"not reached: 10 seeds run, caught at seed {far.bound - 1}"
    assert not EntryResult(far, far.bound, None, 100).as_expected


def test_every_toggle_is_off_by_default() -> None:
    assert KnownBad().enabled() == []


def test_matrix_command_prints_and_writes_the_table(tmp_path: Path) -> None:
    """A small matrix through the CLI (2 seeds: the caught entries with a
    larger bound then show as not caught, and the exit code says so)."""
    out = tmp_path / "m"
    result = CliRunner().invoke(app, ["anomalies", "matrix", "--seeds", "1", "--jobs", "1", "-o", str(out)])
    assert result.exit_code in (0, 1), result.output
    header = next(line for line in result.stdout.splitlines() if line.startswith("variant"))
    assert [c.strip() for c in header.split("|")][:3] == ["variant", "scenario", "config"]  # the house style, plain
    doc = json.loads((out / MATRIX_JSON).read_text())
    assert len(doc["entries"]) == len(MATRIX)
    by = {(e["variant"], e["scenario"], e["config"]): e for e in doc["entries"]}
    peek = by[("peeks_ignore_catalog_ts", "seed001", "decoupled")]
    assert peek["seeds_to_first_detection"] == 1, peek
    assert peek["ops_judged"] == peek["ops_to_judge"] > 0, peek
    assert peek["unknown_seeds"] == [], peek
    assert "| peeks-ignore-catalog-ts | seed001 | decoupled | caught | 1 (seed 0) |" in (
        out / MATRIX_MD
    ).read_text()
    expected_exit = 0 if all(e["as_expected"] for e in doc["entries"]) else 1
    assert result.exit_code == expected_exit


def test_matrix_json_under_another_schedule_is_the_document_written(tmp_path: Path) -> None:
    out = tmp_path / "m"
    argv = ["anomalies", "matrix", "--seeds", "1", "--jobs", "2", "--schedule", "random", "-o", str(out), "--json"]
    result = CliRunner().invoke(app, argv)
    doc = json.loads(result.stdout)  # progress goes to stderr
    assert doc.pop("output") == str(out)
    assert doc == json.loads((out / MATRIX_JSON).read_text())
    assert doc["schedule"] == "random"
    assert result.exit_code == (0 if doc["as_expected"] else 1)


@pytest.mark.parametrize("args", [["--seeds", "0"], ["--jobs", "0"]])
def test_matrix_bad_input_is_one_line_and_exit_2(args: list[str], tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", "from sim.cli.main import main; main()", "anomalies", "matrix",
         *args, "-o", str(tmp_path / "m")],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "must be >= 1" in run.stderr
    assert not (tmp_path / "m").exists()
