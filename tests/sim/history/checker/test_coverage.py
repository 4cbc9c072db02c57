"""Fail closed (DESIGN.md §7, issue 34): a verdict is `valid` only when every
operation to judge was judged by some checker. Each way a checker can leave
an operation unjudged turns a `valid` into `unknown` (exit 3), with the
reason in the report's coverage."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from sim.history.checker import blackbox, linear, whitebox_terms
from sim.history.checker.run import CHECKERS, Report, check_history
from sim.history.checker.verdict import Outcome
from sim.history.import_edn import read_edn
from sim.history.model import History, Kind, Op, Status
from sim.history.traces import write_trace

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

runner = CliRunner()
#: Every checker but the timestamp-free multiset one: what judged a history
#: before it existed.
OLD: tuple[str, ...] = tuple(c for c in CHECKERS if c != "table")

#: Issue 34's smallest reproduction: a read that began after an update
#: completed still sees the old value. No system timestamps.
REPRO = """\
{:index 0, :time 0, :type :invoke, :process 9, :f :add, :value ["acct" 0]}
{:index 1, :time 1, :type :ok, :process 9, :f :add, :value ["acct" 0]}
{:index 2, :time 10, :type :invoke, :process 0, :f :update, :value ["acct" {:set 5}]}
{:index 3, :time 20, :type :ok, :process 0, :f :update, :value ["acct" {:set 5}], :count 1}
{:index 4, :time 30, :type :invoke, :process 1, :f :read, :value ["acct" nil]}
{:index 5, :time 40, :type :ok, :process 1, :f :read, :value ["acct" #{0}]}
"""


def _op(oid: int, kind: Kind, obj: str, t: int, **kw: Any) -> Op:
    """An op of process `oid` invoked at `t` ns, ok 5 ns later unless told."""
    kw.setdefault("status", Status.OK)
    kw.setdefault("complete_ns", None if kw["status"] is Status.INFO else t + 5)
    return Op(op_id=oid, process=kw.pop("process", oid), kind=kind, obj=obj, invoke_ns=t, **kw)


def _update_table(*, timestamps: bool, update_ts: bool = True) -> History:
    """A correct UPDATE table: insert 0, SET 5 WHERE = 0 (1 row), read {5}."""
    ts: dict[str, Any] = {}
    return History.from_ops([
        _op(0, Kind.ADD, "acct", 0, elements=(0,), **({"write_ts": 1} if timestamps else ts)),
        _op(1, Kind.UPDATE, "acct", 10, args={"set": 5, "where": [["=", 0]]}, count=1,
            **({"read_ts": 1, "write_ts": 2} if timestamps and update_ts else ts)),
        _op(2, Kind.READ, "acct", 20, result=(5,), **({"read_ts": 2} if timestamps else ts)),
    ])


def _set_table(n: int = 3) -> History:
    """A correct grow-only set, no timestamps: n adds, then a read of all."""
    ops = [_op(i, Kind.ADD, "s", 10 * i, elements=(i,)) for i in range(n)]
    ops.append(_op(n, Kind.READ, "s", 10 * n, result=tuple(range(n))))
    return History.from_ops(ops)


def _reasons(report: Report) -> dict[str, dict[str, int]]:
    """checker -> reason -> ops, over every table."""
    out: dict[str, dict[str, int]] = {}
    for t in report.coverage:
        for c, rs in t.why.items():
            for r, n in rs.items():
                out.setdefault(c, {})[r] = out.get(c, {}).get(r, 0) + n
    return out


def _check(h: History, checkers: Sequence[str] = CHECKERS, **kw: Any) -> Report:
    return check_history(h, checkers=checkers, **kw)


# --- the smallest reproduction ------------------------------------------------------------------


def test_the_issue_reproduction_is_no_longer_valid(tmp_path: Path) -> None:
    path = tmp_path / "repro.edn"
    path.write_text(REPRO)
    h, events = read_edn(path)
    # What judged it before the multiset checker: nothing did, so unknown.
    old = check_history(h, events, checkers=OLD)
    assert old.outcome is Outcome.UNKNOWN
    assert (old.ops_to_judge, old.ops_judged) == (3, 0)
    why = _reasons(old)
    assert why["whitebox"] == {whitebox_terms.NO_TIMESTAMPS: 3}
    assert why["blackbox"][blackbox.MUTATION] == 1
    assert why["linear"][linear.MUTATION] == 1
    # With every checker it is invalid, never valid.
    report = check_history(h, events)
    assert report.outcome is Outcome.INVALID, report
    r = runner.invoke(app, ["check", str(path), *[a for c in OLD for a in ("--checker", c)]])
    assert r.exit_code == 3, r.output
    assert "verdict: unknown" in r.stdout
    assert f"whitebox: {whitebox_terms.NO_TIMESTAMPS} (3)" in r.stdout
    r = runner.invoke(app, ["check", str(path)])
    assert r.exit_code == 1, r.output


# --- each reason turns valid into unknown ---------------------------------------------------------


def test_update_table_without_timestamps_is_unknown_unless_a_checker_models_it() -> None:
    h = _update_table(timestamps=False)
    r = _check(h, OLD)
    assert r.outcome is Outcome.UNKNOWN
    assert not r.names
    (t,) = r.coverage
    assert (t.table, t.ops, t.judged) == ("acct", 3, 0)
    assert t.unjudged_ops == (0, 1, 2)
    # The timestamp-free multiset checker judges it: valid, fully covered.
    full = _check(h)
    assert full.outcome is Outcome.VALID, full.coverage
    assert full.complete


def test_whitebox_judges_an_update_table_with_timestamps_and_not_without() -> None:
    assert _check(_update_table(timestamps=True), ["whitebox"]).outcome is Outcome.VALID
    r = _check(_update_table(timestamps=True, update_ts=False), ["whitebox"])
    assert r.outcome is Outcome.UNKNOWN
    # The update lacks its write_ts; the read after it cannot be replayed.
    assert _reasons(r) == {"whitebox": {whitebox_terms.NO_TS: 1, whitebox_terms.UNKNOWABLE: 1}}
    assert r.coverage[0].unjudged_ops == (1, 2)


def test_an_indeterminate_update_makes_later_reads_unknown_to_the_whitebox_checker() -> None:
    ops = list(_update_table(timestamps=True).ops())
    h = History.from_ops([
        ops[0],
        _op(1, Kind.UPDATE, "acct", 10, args={"set": 5, "where": [["=", 0]]}, status=Status.INFO, write_ts=2),
        _op(2, Kind.READ, "acct", 20, result=(5,), read_ts=2),
    ])
    r = _check(h, ["whitebox"])
    assert r.outcome is Outcome.UNKNOWN
    assert _reasons(r) == {"whitebox": {whitebox_terms.UNKNOWABLE: 1}}
    # Indeterminate writes are operations to judge; indeterminate reads are not.
    assert r.coverage[0].ops == 3


def test_linear_over_its_op_limit_is_unknown() -> None:
    h = _set_table(5)
    assert _check(h, ["linear"], linear_max_ops=6).outcome is Outcome.VALID
    r = _check(h, ["linear"], linear_max_ops=5)
    assert r.outcome is Outcome.UNKNOWN
    assert _reasons(r) == {"linear": {"over the limit of 5 operations": 6}}


def test_updates_over_linears_limit_without_timestamps_are_unknown() -> None:
    """The issue's "WGL stops at 2,000 operations": a big update table that
    no checker but the multiset one can judge, and that one out of time."""
    ops = [_op(0, Kind.ADD, "acct", 0, elements=(0,))]
    ops += [_op(i, Kind.UPDATE, "acct", 10 * i, args={"add": 1}, count=1) for i in range(1, 2_100)]
    h = History.from_ops(ops)
    r = _check(h, linear_time_limit_s=0)
    assert r.outcome is Outcome.UNKNOWN
    why = _reasons(r)
    assert why["linear"] == {"over the limit of 2000 operations": 2_100}
    assert r.ops_judged == 0


@pytest.mark.parametrize("checkers", [["linear"], ["table"]])
def test_out_of_time_is_unknown(checkers: list[str]) -> None:
    h = _set_table(3) if checkers == ["linear"] else _update_table(timestamps=False)
    assert _check(h, checkers).outcome is Outcome.VALID
    r = _check(h, checkers, linear_time_limit_s=0)
    assert r.outcome is Outcome.UNKNOWN
    ((checker, reasons),) = _reasons(r).items()
    assert checker == checkers[0]
    assert any("out of time" in reason for reason in reasons), reasons


def test_a_filtered_read_is_not_judged_by_the_set_checkers() -> None:
    h = History.from_ops([
        _op(0, Kind.ADD, "s", 0, elements=(1, 2)),
        _op(1, Kind.READ, "s", 10, result=(2,), args={"where": [[">", 1]]}),
    ])
    r = _check(h, ["blackbox", "linear"])
    assert r.outcome is Outcome.UNKNOWN
    # The add is judged (by the blackbox); the filtered read by neither.
    assert _reasons(r) == {"blackbox": {blackbox.FILTERED: 1}, "linear": {linear.FILTERED: 1}}
    assert r.coverage[0].by_checker == {"blackbox": 1, "linear": 0}
    assert _check(h, ["table"]).outcome is Outcome.VALID


def test_a_recreated_table_is_not_judged_by_the_blackbox_but_by_linear() -> None:
    h = History.from_ops([
        _op(0, Kind.CREATE_TABLE, "t", 0),
        _op(1, Kind.ADD, "t", 10, elements=(1,)),
        _op(2, Kind.DROP_TABLE, "t", 20),
        _op(3, Kind.CREATE_TABLE, "t", 30),
        _op(4, Kind.READ, "t", 40, result=()),
    ])
    r = _check(h, ["blackbox"])
    assert r.outcome is Outcome.UNKNOWN
    assert _reasons(r) == {"blackbox": {blackbox.RECREATED: 5}}
    assert _check(h, ["blackbox", "linear"]).outcome is Outcome.VALID


def test_a_read_with_a_row_twice_is_not_judged_as_a_set() -> None:
    """The issue's vector read: it returns 1 twice, which was added once. The
    set checkers searched it as the set {1} and found nothing: unknown."""
    h = History.from_ops([
        _op(0, Kind.ADD, "s", 0, elements=(1,)),
        _op(1, Kind.READ, "s", 10, result=(1, 1)),
    ])
    r = _check(h, ["named", "blackbox", "linear"])
    assert r.outcome is Outcome.UNKNOWN
    assert _reasons(r) == {"blackbox": {blackbox.DUPLICATE_READ: 1}, "linear": {linear.DUPLICATE_READ: 1}}
    assert _check(h).outcome is Outcome.INVALID


def test_a_value_added_twice_is_not_judged_as_a_set_and_not_flagged() -> None:
    """A multiset table: the set checkers must neither judge it nor invent an
    anomaly from taking a value to name one write."""
    h = History.from_ops([
        _op(0, Kind.ADD, "m", 0, elements=(1,), write_ts=1),
        _op(1, Kind.ADD, "m", 10, elements=(1,), write_ts=2),
        _op(2, Kind.READ, "m", 20, result=(1, 1), read_ts=2),
    ])
    r = _check(h, ["named", "blackbox", "whitebox", "linear"])
    assert r.outcome is Outcome.UNKNOWN
    assert _reasons(r) == {"blackbox": {blackbox.REPEATED: 3}, "whitebox": {whitebox_terms.REPEATED: 3},
                           "linear": {linear.REPEATED: 3}}
    assert _check(h, ["table"]).outcome is Outcome.VALID


def test_a_skipped_checker_no_longer_makes_a_verdict_valid() -> None:
    """Before issue 34, a checker with nothing to judge was left out of the
    verdict: whitebox alone on a history without timestamps said valid."""
    h = _set_table()
    r = _check(h, ["whitebox"])
    (v,) = r.verdicts
    assert v.skipped
    assert r.outcome is Outcome.UNKNOWN
    # And a checker that judges no operation vouches for none.
    assert _check(h, ["named", "oracle"]).outcome is Outcome.UNKNOWN
    assert _check(h, ["blackbox"]).outcome is Outcome.VALID


def test_an_anomaly_is_invalid_whatever_the_coverage() -> None:
    h = History.from_ops([
        _op(0, Kind.ADD, "s", 0, elements=(1,)),
        _op(1, Kind.READ, "s", 10, result=()),  # misses an acknowledged add
        _op(2, Kind.UPDATE, "u", 20, args={"set": 1}, count=0),
    ])
    r = _check(h, OLD)
    assert not r.complete
    assert r.outcome is Outcome.INVALID


# --- what is to judge -------------------------------------------------------------------------


def test_what_counts_as_an_operation_to_judge() -> None:
    h = History.from_ops([
        _op(0, Kind.CREATE_TABLE, "t", 0),
        _op(1, Kind.ADD, "t", 10, elements=(1,)),
        _op(2, Kind.READ, "t", 20, status=Status.INFO),  # observed nothing
        _op(3, Kind.ADD, "t", 30, elements=(2,), status=Status.FAIL, error_code="40001"),  # no effect
        _op(4, Kind.READ, "u", 40, status=Status.FAIL, error_code="42P01"),  # observed the catalog
        _op(5, Kind.ADD, "t", 50, elements=(3,), status=Status.INFO),  # may have taken effect
        _op(6, Kind.CREATE_VIEW, "v", 60, args={"on": "t"}),
        _op(7, Kind.READ, "v", 70, result=(10,)),  # a view: not a table
        _op(8, Kind.CREATE_TABLE, "t", 80, status=Status.FAIL, error_code="42P07"),  # it existed
        _op(9, Kind.DROP_TABLE, "u", 90, status=Status.FAIL, error_code="42P01"),  # it did not
    ])
    r = _check(h)
    assert r.outcome is Outcome.VALID, r.coverage
    by = {t.table: t for t in r.coverage}
    assert (by["t"].ops, by["t"].judged, by["t"].not_required) == (4, 4, 2)
    assert (by["u"].ops, by["u"].judged) == (2, 2)
    assert r.not_tables == 2
    assert by["t"].by_checker["blackbox"] == 3
    assert by["t"].by_checker["named"] == 0
    # Only the multiset checker models what a failed CREATE/DROP observed.
    old = _check(h, OLD)
    assert old.outcome is Outcome.UNKNOWN
    assert [(t.table, t.unjudged_ops) for t in old.coverage] == [("t", (8,)), ("u", (9,))]


def test_the_report_says_what_was_not_judged() -> None:
    r = _check(_update_table(timestamps=False), OLD)
    lines = r.coverage_lines()
    assert lines[0] == "coverage: 0 of 3 operations judged; 0 of 1 tables fully"
    assert lines[1].startswith("  acct: 3 of 3 operations not judged (e.g. ops 0, 1, 2)")
    assert f"    whitebox: {whitebox_terms.NO_TIMESTAMPS} (3)" in lines
    assert r.coverage_summary().startswith("0 of 3 operations judged; not judged: acct 3 (")
    doc = r.coverage_json()
    assert doc["complete"] is False
    assert doc["tables"][0]["why_not_judged"]["whitebox"] == {whitebox_terms.NO_TIMESTAMPS: 3}
    assert doc["tables"][0]["not_judged_op_ids"] == [0, 1, 2]


# --- coordsim check ---------------------------------------------------------------------------


def test_check_exits_3_and_prints_the_coverage_when_no_checker_can_judge_a_table(tmp_path: Path) -> None:
    write_trace(tmp_path / "tr", _update_table(timestamps=False))
    r = runner.invoke(app, ["check", str(tmp_path / "tr"), "--linear-limit", "0"])
    assert r.exit_code == 3, r.output
    out = r.stdout
    assert "acct: 3 of 3 operations not judged" in out
    assert f"whitebox: {whitebox_terms.NO_TIMESTAMPS} (3)" in out
    assert "table: out of time" in out
    assert out.strip().splitlines()[-2] == "verdict: unknown"
    j = runner.invoke(app, ["check", str(tmp_path / "tr"), "--linear-limit", "0", "--json"])
    assert j.exit_code == 3
    doc = json.loads(j.stdout)
    assert doc["valid"] == "unknown"
    assert doc["coverage"]["complete"] is False
    assert doc["coverage"]["tables"][0]["judged"] == 0


def _histories(d: Path) -> dict[str, Path]:
    """A directory of histories: valid, invalid, unknown (EDN) and a trace."""
    d.mkdir()
    (d / "a-valid.edn").write_text(
        '{:index 0, :time 0, :type :invoke, :process 0, :f :add, :value ["s" 1]}\n'
        '{:index 1, :time 1, :type :ok, :process 0, :f :add, :value ["s" 1]}\n'
    )
    (d / "b-invalid.edn").write_text(REPRO)
    (d / "sub").mkdir()
    write_trace(d / "sub" / "c-unknown", _update_table(timestamps=True, update_ts=False))
    return {p.name: p for p in [d / "a-valid.edn", d / "b-invalid.edn", d / "sub" / "c-unknown"]}


def test_check_a_directory_on_two_workers(tmp_path: Path) -> None:
    paths = _histories(tmp_path / "h")
    args = ["check", str(tmp_path / "h"), "--jobs", "2", "--checker", "whitebox", "--checker", "table"]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 1, r.output  # the worst: invalid
    docs = json.loads(r.stdout)
    assert [d["trace"] for d in docs] == [str(p.absolute()) for p in paths.values()]
    assert [d["valid"] for d in docs] == [True, False, True]  # c: the table checker judges it
    assert all("coverage" in d for d in docs)
    # A progress line per history on stderr.
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("check: [")]
    assert len(progress) == 3, r.stderr
    # Without the table checker, b and c are unknown; the summary table has a row each.
    r = runner.invoke(app, ["check", str(tmp_path / "h"), "--checker", "whitebox", "--checker", "blackbox"])
    rows = [[c.strip() for c in ln.split("|")] for ln in r.stdout.splitlines() if "|" in ln][1:]
    assert [row[2] for row in rows] == ["valid", "unknown", "unknown"], r.stdout
    assert r.stdout.strip().splitlines()[-1] == "verdict: unknown (3 histories: 1 valid, 2 unknown)"
    assert r.exit_code == 3


def test_check_a_directory_with_a_bad_history_reports_it_and_goes_on(tmp_path: Path) -> None:
    d = tmp_path / "h"
    _histories(d)
    (d / "z-bad.edn").write_text("{:index 0, :type :ok, :process 0, :f :add, :value [\"s\" 1]}\n")
    r = runner.invoke(app, ["check", str(d), "--json", "-j", "1"])
    docs = json.loads(r.stdout)
    assert [d.get("error") is not None for d in docs] == [False, False, False, True]
    assert r.exit_code == 1  # an anomaly outranks bad input
    (d / "b-invalid.edn").unlink()
    r = runner.invoke(app, ["check", str(d), "-j", "1"])
    assert r.exit_code == 2, r.output  # bad input outranks unknown and valid
    assert "bad input" in r.stdout
