"""`coordsim spark replay` on what `coordsim compare` writes: every trace of the
sweep is found under the output folder, verified (valid, as the in-process
checkers say) and measured per (configuration, workload, concurrency); bad
input is one line and exit 2, before Spark starts."""

from __future__ import annotations

import csv
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from tests.sim.spark.expected import in_process, spark_rows

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def test_replay_the_output_of_compare(spark: Any, tmp_path: Path) -> None:
    cmp = tmp_path / "compare"
    res = CliRunner().invoke(app, ["compare", "--mode", "virtual", "--configs", "event-loop,decoupled",
                                   "--workloads", "select-one,insert", "--concurrency", "1,4", "--ops", "30",
                                   "--repeat", "1", "--seed", "3", "--output", str(cmp)])
    assert res.exit_code == 0, res.output
    traces = sorted(p.parent for p in (cmp / "traces").rglob("meta.json"))
    assert len(traces) == 2 * 2  # one per (workload, configuration), every level in it
    out = tmp_path / "replay"
    res = CliRunner().invoke(app, ["spark", "replay", str(cmp), "--master", "local[2]", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert f"{len(traces)} runs: {len(traces)} valid" in res.output
    assert spark_rows(out) == set().union(*(in_process(t) for t in traces)) == set()
    verdicts = pq.read_table(out / "verdicts.parquet").to_pylist()
    assert {v["verdict"] for v in verdicts} == {"valid"}
    assert len(verdicts) == len(traces)
    metrics = pq.read_table(out / "metrics.parquet").to_pylist()
    groups = {(m["config"], m["workload"], str(m["concurrency"])) for m in metrics}
    assert groups == {(c, w, n) for c in ("event-loop", "decoupled") for w in ("select-one", "insert") for n in ("1", "4")}
    # Each level of a compare trace is measured on its own: its ops are the
    # clients named L<n>/…, and its span is close to the one compare timed.
    with (cmp / "results.csv").open() as f:
        results = {(r["config"], r["workload"], r["concurrency"]): r for r in csv.DictReader(f)}
    for m in metrics:
        key = (m["config"], m["workload"], str(m["concurrency"]))
        t = pq.read_table(cmp / "traces" / m["workload"] / m["config"] / "ops.parquet").to_pylist()
        level = [r for r in t if (r["client"] or "").startswith(f"L{m['concurrency']}/")]
        assert m["ops"] == len(level)
        assert m["ok_ops"] == sum(r["status"] == "ok" for r in level) > 0
        assert m["duration_s"] == pytest.approx(float(results[key]["window_s"]), rel=0.25), key
    assert "event-loop" in (out / "report.md").read_text()


def test_replay_of_a_missing_path_is_one_line_and_exit_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["spark", "replay", str(tmp_path / "nope"), "--master", "local[2]"])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1
    assert "no trace directory" in lines[0]
    assert "Traceback" not in res.output
