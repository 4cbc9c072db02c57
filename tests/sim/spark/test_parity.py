"""Parity by construction: on the regression corpus (tests/data/traces and
tests/data/histories), the known-bad matrix, generated histories with their
mutants and hand-written histories no checker fully judges, the Spark job
runs every checker of `sim.history.checker.run.CHECKERS` and reports exactly the
anomalies, with the same op ids, that `check_history` reports in-process, and
the same verdict with the same coverage: `unknown` included."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest

from sim.history.checker.run import CHECKERS
from tests.sim.spark.conftest import CRASH_RUN, GOLDEN, GOLDEN_RUNS, unjudged_histories
from tests.sim.spark.expected import (
    in_process_report,
    in_process_verdict,
    spark_checkers,
    spark_rows,
    spark_verdicts,
)

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


def test_same_verdicts_same_coverage(golden_out: Path, generated: list[Path], known_bad: list[Path]) -> None:
    # Issue 34: a verdict is `valid` only if every operation to judge was
    # judged; Spark decides it from the same coverage, and carries it.
    got = spark_verdicts(golden_out)
    seen = set()
    for t in _traces(generated, known_bad):
        want = in_process_verdict(t)
        assert got[t.name] == want, t.name
        seen.add(want["verdict"])
    assert seen == {"valid", "invalid", "unknown"}
    # The hand-written ones: only a skipped checker (checker 3, without
    # timestamps) could judge the column read; nothing models a COUNT
    # without its count; an anomaly is invalid whatever went unjudged.
    verdict = {n: got[n]["verdict"] for n in unjudged_histories()}
    assert verdict == {"unjudged-column-read": "unknown", "judged-column-read": "valid",
                       "unjudged-countless": "unknown", "unjudged-and-invalid": "invalid"}
    (gap,) = got["unjudged-column-read"]["not_judged"]
    assert gap["op_ids"] == [1]
    assert any(r.startswith("whitebox: no system timestamps") for r in gap["reasons"]), gap
    report = (golden_out / "report.md").read_text()
    assert "## Coverage (" in report
    assert "- unjudged-column-read (unknown): 1 of 2 operations judged" in report
    assert "table: unsupported operation: a COUNT without its count (1)" in report


def test_known_bad_variants_are_invalid_in_spark(golden_out: Path, known_bad: list[Path]) -> None:
    rows = {r["run"]: r for r in pq.read_table(golden_out / "verdicts.parquet").to_pylist()}
    names = {(r[0], r[1]) for r in spark_rows(golden_out)}
    for t in known_bad:
        assert rows[t.name]["verdict"] == "invalid", t.name
        if "apply_write_before_append" in t.name:
            assert (t.name, "timestamp-regression") in names, t.name
            assert rows[t.name]["timestamp-regression"] > 0
    assert sum("apply_write_before_append" in t.name for t in known_bad) == 4
    # The newest checks, each on the side that decides it (checker 3: a lost
    # update; checker 4: appends out of write_ts order).
    table = pq.read_table(golden_out / "anomalies.parquet").to_pylist()
    by_checker = {(r["run"], r["anomaly"], r["checker"]) for r in table}
    lost = [t.name for t in known_bad if "no_write_lock" in t.name]
    order = [t.name for t in known_bad if "unbounded_group_commits" in t.name]
    assert lost
    assert order
    assert all((n, "not-strict-serializable", "whitebox") in by_checker for n in lost), lost
    assert all((n, "timestamp-regression", "oracle") in by_checker for n in order), order


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
    verdicts = spark_verdicts(tmp_path)
    for t in traces:
        want, _ = in_process_report(t)
        assert {r for r in got if r[0] == t.name} == want, t.name
        assert verdicts[t.name] == in_process_verdict(t), t.name
    assert set().union(*spark_checkers(tmp_path).values()) == set(CHECKERS)


def _regress(trace: Path, n: int, *, first: bool = False) -> int:
    """Sets timestamps to 1 in the trace's last chunks (rows past the first
    three quarters): below what earlier segments reached, a timestamp
    regression across a cut. `first`: only the earliest-invoked op there, so
    nothing of its own segment completed before it began and only the carry
    row (`inproc.append_carries`) can bound it; else the read_ts of `n`
    reads. Returns the op id of the first op changed."""
    import pyarrow as pa

    f = trace / "ops.parquet"
    t = pq.read_table(f)
    cols = {c: t[c].to_pylist() for c in ("read_ts", "write_ts", "catalog_ts", "invoke_ns")}
    late = range(3 * t.num_rows // 4, t.num_rows)
    if first:
        i = min(late, key=lambda i: (cols["invoke_ns"][i], i))
        changed = [(c, i) for c in ("read_ts", "write_ts", "catalog_ts") if cols[c][i] is not None]
        assert changed, "the earliest op carries no timestamp: pick another seed"
    else:
        changed = [("read_ts", i) for i in late if cols["read_ts"][i] is not None][:n]
        assert len(changed) == n
    for c, i in changed:
        cols[c][i] = 1
    for c in ("read_ts", "write_ts", "catalog_ts"):
        t = t.set_column(t.schema.get_field_index(c), c, pa.array(cols[c], pa.int64()))
    pq.write_table(t, f)
    return int(t["op_id"][changed[0][1]].as_py())


def _countless(trace: Path) -> int:
    """Makes the last ok read of the trace a COUNT without its count, which
    no checker models: the run's coverage is incomplete. Returns its op id."""
    import pyarrow as pa

    f = trace / "ops.parquet"
    t = pq.read_table(f)
    kinds, status = t["kind"].cast(pa.string()).to_pylist(), t["status"].cast(pa.string()).to_pylist()
    i = max(i for i in range(t.num_rows) if kinds[i] == "read" and status[i] == "ok")
    cols = {c: t[c].to_pylist() for c in ("args", "result", "count")}
    cols["args"][i], cols["result"][i], cols["count"][i] = '{"count": true}', None, None
    for c, typ in (("args", pa.string()), ("result", pa.list_(pa.int64())), ("count", pa.int64())):
        t = t.set_column(t.schema.get_field_index(c), c, pa.array(cols[c], typ))
    pq.write_table(t, f)
    return int(t["op_id"][i].as_py())


def test_cut_runs_equal_the_in_process_checkers(spark: Any, tmp_path: Path) -> None:
    # Runs cut into segments (`sim.spark.segments`) on several tasks: the
    # planted stale reads, a timestamp regression across a cut (the carry
    # rows), one with more anomalies than a checker keeps (checked again
    # whole), and one with an operation no checker judges (its segment's
    # coverage is incomplete) give what `check_history` gives on the whole
    # run, verdict and coverage included.
    from sim.spark import segments
    from sim.spark.frames import load
    from sim.spark.inproc import balance, read_slice, with_row_order
    from sim.spark.job import replay
    from sim.spark.synth import synth_trace

    traces = [synth_trace(tmp_path / "cut-planted", 6000, seed=5, chunk=1000, planted=3, run="cut-planted"),
              synth_trace(tmp_path / "cut-regress", 6000, seed=6, chunk=1000, planted=0, run="cut-regress"),
              synth_trace(tmp_path / "cut-many", 6000, seed=7, chunk=1000, planted=0, run="cut-many"),
              synth_trace(tmp_path / "cut-unknown", 6000, seed=8, chunk=1000, planted=0, run="cut-unknown")]
    regressed = _regress(traces[1], 1, first=True)
    _regress(traces[2], 30)
    countless = _countless(traces[3])
    ops, _, _, _, run_ops, dirs = load(spark, [str(t) for t in traces])
    plan = segments.plan(with_row_order(ops), run_ops, group_ops=1000)
    assert set(plan.runs) == {t.name for t in traces}
    groups = set(plan.carries)
    assert len(groups) >= 4 * 4, groups  # every run in several groups
    assert all(plan.carries[(r, g)] for r, g in groups if g > 0)
    # Each group is a slice, and a task, of its own; together they hold every op once.
    slices = plan.slices(dirs, run_ops)
    assert {(s.run, s.grp) for s in slices} == groups
    assert len(balance(slices, len(slices))) == len(slices)
    for t in traces:
        ids = sorted(i for s in slices if s.run == t.name for i in read_slice(s)[0].op_id)
        assert ids == sorted(pq.read_table(t / "ops.parquet")["op_id"].to_pylist()), t.name
    replay(spark, [str(t) for t in traces], tmp_path / "out", with_metrics=False, group_ops=1000)
    got = spark_rows(tmp_path / "out")
    checks = {(r["run"], r["checker"]): r for r in pq.read_table(tmp_path / "out" / "checks.parquet").to_pylist()}
    verdicts = spark_verdicts(tmp_path / "out")
    for t in traces:
        want, ran = in_process_report(t, capped=t.name == "cut-many")
        assert want or t.name == "cut-unknown", t.name
        assert {r for r in got if r[0] == t.name} == want, t.name
        assert ran == set(CHECKERS) == {c for r, c in checks if r == t.name}
        assert verdicts[t.name] == in_process_verdict(t), t.name
    assert verdicts["cut-unknown"]["verdict"] == "unknown"
    (gap,) = verdicts["cut-unknown"]["not_judged"]
    assert gap["op_ids"] == [countless]
    # The op no op of its own segment bounds is flagged, naming an op of an
    # earlier segment: the carry row's.
    flagged = [r for r in got if r[0] == "cut-regress" and r[2][-1:] == (regressed,) and len(r[2]) == 2]
    assert flagged, sorted(r for r in got if r[0] == "cut-regress")
    assert all(r[2][0] < regressed for r in flagged)
    assert checks[("cut-many", "whitebox")]["count"] > 20
