"""The Spark metrics of a `coordsim compare` trace measure each level in the
windows compare measured it in (meta.json's `windows`), so they equal
compare's results.csv: in virtual mode the trace's clock is compare's clock.
A trace without windows keeps the older measure: the level's whole span."""

from __future__ import annotations

import csv
import json
import shutil
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from sim.spark.frames import load, load_windows
from sim.spark.metrics import metrics
from tests.sim.spark.reference import assert_rows_equal, reference_metrics

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

LEVELS = ("16", "64")


def _replayed(spark: Any, trace: Path) -> list[dict[str, Any]]:
    ops, events, meta, *_ = load(spark, [str(trace)])
    comp, _ = metrics(ops, events, meta, level_windows=load_windows(spark, [str(trace)]))
    return [r.asDict() for r in comp.collect()]


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compare run whose 64-client level grows its window: its clients also
    ran a discarded first attempt and a second warm-up, which a replay must
    not measure."""
    out = tmp_path_factory.mktemp("compare") / "out"
    res = CliRunner().invoke(app, ["compare", "--mode", "virtual", "-w", "update", "--configs", "event-loop",
                                   "--concurrency", ",".join(LEVELS), "--repeat", "1", "--seed", "0",
                                   "--no-check", "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_levels_measured_in_their_windows_equal_compare(spark: Any, compared: Path) -> None:
    trace = compared / "traces" / "update" / "event-loop"
    windows = json.loads((trace / "meta.json").read_text())["windows"]
    assert sorted(str(w["concurrency"]) for w in windows) == sorted(LEVELS)
    rows = _replayed(spark, trace)
    assert_rows_equal(rows, reference_metrics([trace]))
    with (compared / "results.csv").open() as f:
        results = {r["concurrency"]: r for r in csv.DictReader(f)}
    got = {str(r["concurrency"]): r for r in rows}
    assert set(got) == set(LEVELS)
    for n in LEVELS:
        m, want = got[n], results[n]
        # Compare's p50 is an HDR histogram's (3 significant digits).
        assert m["p50_ms"] == pytest.approx(float(want["p50_ms"]), rel=0.01), n
        assert m["throughput_ops_s"] == pytest.approx(float(want["throughput_ops_s"]), rel=0.01), n
        # The same operations and window (results.csv keeps six significant digits).
        assert m["ops"] == int(want["latency_samples"]), n
        assert m["errors"] == int(want["errors"]) == 0, n
        assert m["duration_s"] == pytest.approx(float(want["window_s"]), rel=1e-5), n
        assert m["latency_mean_ms"] == pytest.approx(float(want["mean_ms"]), rel=1e-5), n
        print(f"c={n}: p50 compare {float(want['p50_ms']):.3f} ms, replay {m['p50_ms']:.3f} ms; "
              f"throughput compare {float(want['throughput_ops_s']):.3f}, replay {m['throughput_ops_s']:.3f} ops/s")


def test_a_trace_without_windows_is_measured_over_each_level_span(
    spark: Any, compared: Path, tmp_path: Path
) -> None:
    trace = tmp_path / "old"
    shutil.copytree(compared / "traces" / "update" / "event-loop", trace)
    meta = json.loads((trace / "meta.json").read_text())
    del meta["windows"]
    (trace / "meta.json").write_text(json.dumps(meta))
    rows = _replayed(spark, trace)
    assert_rows_equal(rows, reference_metrics([trace]))
    with (compared / "results.csv").open() as f:
        results = {r["concurrency"]: r for r in csv.DictReader(f)}
    # The span takes in the discarded attempt and the warm-ups: more ops, over a longer time.
    for r in rows:
        assert r["ops"] > int(results[str(r["concurrency"])]["latency_samples"])
        assert r["duration_s"] > float(results[str(r["concurrency"])]["window_s"])
