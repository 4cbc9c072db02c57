"""`coordsim validate`: every shipped fact is two-sided and has its role; the
calibration facts hold (they only show a calibration took); the validation
facts are reported apart, and none of them fed a constant; the outputs carry
the tables and each fact's source; a bad facts file is one line and exit 2."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sim.model.facts import FACTS
from sim.model.unmeasured import CALIBRATED_BY, COST_SOURCES, LATENCY_SOURCES
from sim.model.validate import EXPERIMENTS, ROLES, Fact, load_facts

COORDSIM = [str(Path(sys.executable).with_name("coordsim"))]


def _validate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COORDSIM, "validate", "-o", str(tmp_path / "out"), *args],
                          capture_output=True, text=True, check=False, timeout=900)


#: Validation facts the model does not reproduce today (issue 35; reported,
#: never tuned away): the pgwire frontend's tail, calibrated on issue #29526,
#: makes the off-loop victim's p95 ~38 ms against PR #37363's 9 ms; and a
#: CREATE TABLE on an empty catalog takes ~10 ms against the DDL audit's 31 ms
#: (this host's Postgres round trips stand in for CockroachDB's, and the
#: model's DDL has no builtin-table group commit nor storage set-up); and a
#: lone SUBSCRIBE with its read_ts on the loop takes ~1.7 s against PR
#: #37355's ~500 ms (the model's keepalive commit holds the loop too); and
#: issue #24395's 2024 system made several times the model's backend round
#: trips (CREATE TABLE 89 against 44, INSERT 28 against 8.7, SELECT 6.5
#: against 4.0, with the 2024 stash's counts and a psql-paced session).
KNOWN_FAILING: frozenset[str] = frozenset({
    "victim-off-loop-p95", "ddl-create-table-empty-catalog", "subscribe-linearize-on-loop-one",
    "ddl-under-slow-metadata-store", "insert-under-slow-metadata-store", "insert-workload-two-connections",
    "select-under-slow-metadata-store",
})


def test_the_shipped_facts_are_well_formed_and_cited() -> None:
    facts = load_facts()
    assert len(facts) >= 12
    assert {f.experiment for f in facts} == set(EXPERIMENTS)  # every experiment is used
    for f in facts:
        assert all(v.strip() for v in (f.source, f.mechanism, f.published, f.band_reason)), f.id
        assert f.role in ROLES
        lo, hi = f.between
        assert lo <= hi, f.id
    ids = {f.id for f in facts}
    for must in ("peeks-faster", "inserts-faster", "updates-slower", "barely-batches",
                 "read-ts-one-query-per-round-trip", "read-ts-wait-two-round-trips",
                 "update-one-write-per-commit", "inserts-batch", "victim-on-loop", "victim-off-loop-p50",
                 "victim-off-loop-p95", "loop-messages-per-select", "select-throughput-loop-bound"):
        assert must in ids
    assert {f.role for f in facts} == set(ROLES)


def test_every_fact_is_two_sided_in_the_file() -> None:
    """`between` is the only check: no one-sided `above`/`below` is left."""
    text = FACTS.read_text()
    assert "expect =" not in text
    assert text.count("between = [") == len(load_facts())


def test_calibrated_constants_name_only_calibration_facts() -> None:
    """A validation fact may never feed calibration: every constant's recorded
    calibration names calibration facts only, and no source text of a modeled
    cost or latency (or the shipped profile) mentions a validation fact."""
    facts = {f.id: f for f in load_facts()}
    for name, ids in CALIBRATED_BY.items():
        assert ids, name
        for fid in ids:
            assert fid in facts, f"{name} names unknown fact {fid}"
            assert facts[fid].role == "calibration", f"{name} is calibrated on validation fact {fid}"
    validation = [fid for fid, f in facts.items() if f.role == "validation"]
    profile = (Path(FACTS).parent / "profiles" / "default.toml").read_text()
    for text in [*COST_SOURCES.values(), *LATENCY_SOURCES.values(), profile]:
        for fid in validation:
            assert not re.search(rf"\b{re.escape(fid)}\b", text), f"validation fact {fid} is cited as a source"
    # Every calibration fact is used by some constant (else it is a validation fact).
    used = {fid for ids in CALIBRATED_BY.values() for fid in ids}
    assert used == {fid for fid, f in facts.items() if f.role == "calibration"}


def test_holds_reads_the_band() -> None:
    def fact(lo: float, hi: float) -> Fact:
        return Fact("x", "validation", "c", "s", "m", "victim", "v", "p", (lo, hi), "r")

    assert fact(1.0, 2.0).holds(1.5)
    assert fact(1.0, 2.0).holds(1.0)
    assert fact(1.0, 2.0).holds(2.0)
    assert not fact(1.0, 2.0).holds(2.1)
    assert not fact(1.0, 2.0).holds(0.9)
    assert not fact(0.0, 1.0).holds(float("nan"))


@pytest.mark.timeout(900)  # ~70 s of wall time alone; a busy shared host stretches it
def test_quick_subset_reports_both_groups_and_writes_its_tables(tmp_path: Path) -> None:
    proc = _validate(tmp_path, "--quick")
    quick = [f for f in load_facts() if f.quick]
    expected_code = 1 if KNOWN_FAILING & {f.id for f in quick} else 0
    assert proc.returncode == expected_code, proc.stdout + proc.stderr
    headers = [line for line in proc.stdout.splitlines() if line.split("|")[0].strip().endswith(" fact")]
    assert [[c.strip() for c in h.split("|")] for h in headers] == [
        ["calibration fact", "published", "band", "simulated", "holds"],
        ["validation fact", "published", "band", "simulated", "holds"],
    ]  # the house style, plain, one table per role
    with (tmp_path / "out" / "validate.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["id"] for r in rows] == [f.id for f in quick]
    for r in rows:
        if r["role"] == "calibration" or r["id"] not in KNOWN_FAILING:
            assert r["holds"] == "True", r
        else:
            assert r["holds"] == "False", f"{r['id']} holds now: take it off KNOWN_FAILING"
    report = (tmp_path / "out" / "validate.md").read_text()
    assert "## Calibration facts" in report
    assert "## Validation facts" in report
    assert "seed 000" in report
    assert "Measured:" in report
    assert "Band:" in report


def test_json_groups_the_facts_by_role(tmp_path: Path) -> None:
    proc = _validate(tmp_path, "--json", "--only", "loop-messages-per-select,update-one-write-per-commit")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert [f["id"] for f in doc["calibration"]] == ["loop-messages-per-select"]
    assert [f["id"] for f in doc["validation"]] == ["update-one-write-per-commit"]
    assert doc["summary"] == {"calibration": {"facts": 1, "hold": 1}, "validation": {"facts": 1, "hold": 1}}
    assert doc["calibration"][0]["between"] == [5.0, 7.0]
    assert json.loads((tmp_path / "out" / "validate.json").read_text()) == doc


@pytest.mark.slow
def test_every_shipped_fact_holds_but_the_known_failures(tmp_path: Path) -> None:
    """Every fact holds except the validation facts in `KNOWN_FAILING`, which
    still fail (not an xfail: a fact that newly fails, or a known one that
    starts holding, fails this test, and `KNOWN_FAILING` must follow)."""
    proc = _validate(tmp_path)
    assert proc.returncode == (1 if KNOWN_FAILING else 0), proc.stdout + proc.stderr
    with (tmp_path / "out" / "validate.csv").open() as fh:
        holds = {r["id"]: r["holds"] == "True" for r in csv.DictReader(fh)}
    assert set(holds) == {f.id for f in load_facts()}
    assert {i for i, ok in holds.items() if not ok} == KNOWN_FAILING, proc.stdout
    if not KNOWN_FAILING:
        assert f"all {len(load_facts())} facts hold" in proc.stdout


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[[fact]]\nid = 'a'\n", "lacks"),
        ("not toml = = 1", "cannot read facts file"),
        (FACTS.read_text().replace('experiment = "victim"', 'experiment = "nope"', 1), "unknown experiment"),
        (FACTS.read_text().replace('role = "validation"', 'role = "both"', 1), "role must be one of"),
        (FACTS.read_text().replace("between = [1.05, 20.0]", "between = [20.0, 1.05]", 1), "between must be"),
        (FACTS.read_text().replace('"catalog.stash.txn.write" = 8.5', '"catalog.stash.txn.write" = -1', 1),
         "round_trips must map"),
    ],
)
def test_a_bad_facts_file_is_one_line_and_exit_2(tmp_path: Path, text: str, fragment: str) -> None:
    bad = tmp_path / "facts.toml"
    bad.write_text(text)
    proc = _validate(tmp_path, "--facts", str(bad))
    assert proc.returncode == 2
    assert fragment in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_an_unknown_fact_id_is_exit_2(tmp_path: Path) -> None:
    proc = _validate(tmp_path, "--only", "no-such-fact")
    assert proc.returncode == 2
    assert "unknown fact id" in proc.stderr


def test_the_oracle_traffic_of_each_era_is_its_calls_per_commit() -> None:
    """PR #37706 counts four oracle queries per group commit, one commit per
    keepalive tick when idle: the on-loop era has four (peek_write_ts,
    write_ts, apply_write and the completion's read_ts), the off-loop era
    three (no read_ts in the completion), and an idle environment commits
    once per `group_commit_interval_s`."""
    from sim.model import experiments as ex
    from sim.model.validate import _config

    for era, calls in (("on-loop", 4.0), ("off-loop", 3.0)):
        cfg = _config("event-loop+pg-oracle", {"oracle_calls": era})
        idle = ex.oracle_traffic(cfg, inserters=0, duration_s=10.0)
        assert idle.commits_per_s == pytest.approx(1.0, abs=0.1), era
        assert idle.queries_per_commit == pytest.approx(calls), era
        busy = ex.oracle_traffic(cfg, inserters=4, duration_s=2.0)
        assert busy.commits_per_s > 10 * idle.commits_per_s, era
        assert busy.queries_per_commit == pytest.approx(calls, abs=0.05), era


def test_the_psql_sessions_figures_do_not_depend_on_the_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #24395's session is paced as a person types (`PSQL_PAUSE_S` plus
    up to one keepalive period): past the backlog of keepalive ticks a long
    on-loop DDL leaves, a longer pause moves no statement's p50 by more than
    10 %, so the floor is not a knob that decides a fact."""
    from sim.model import experiments as ex
    from sim.model.validate import _backend_round_trips

    (fact,) = [f for f in load_facts() if f.id == "select-under-slow-metadata-store"]
    got = {}
    for floor in (2.0, 5.0):
        monkeypatch.setattr(ex, "PSQL_PAUSE_S", floor)
        got[floor], _ = _backend_round_trips(fact.params)
    for kind in ("create_ms", "select_ms", "insert_ms"):
        assert got[5.0][kind] == pytest.approx(got[2.0][kind], rel=0.10), kind


def test_facts_that_share_an_experiment_run_it_once_in_a_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #24395's three facts read three metrics of one session: with the
    validation's `measured`, the experiment runs once; without, per fact."""
    from sim.model import validate

    calls: list[dict[str, object]] = []

    def session(p: dict[str, object]) -> tuple[dict[str, float], str]:
        calls.append(p)
        return {"create_ms": 1.0, "select_ms": 2.0}, "a session"

    monkeypatch.setitem(validate.EXPERIMENTS, "backend-round-trips", session)
    facts = [f for f in load_facts() if f.id in ("ddl-under-slow-metadata-store", "select-under-slow-metadata-store")]
    measured: dict[str, tuple[dict[str, float], str]] = {}
    assert [validate.run_fact(f, measured).value for f in facts] == [1.0, 2.0]
    assert len(calls) == 1
    for f in facts:
        validate.run_fact(f)
    assert len(calls) == 3
