"""`coordsim isolation` (issue 36, build item 4): the ratio computation, the
command's files in virtual mode, real mode's two-adapter refusal, and that
the experiment measures something real (an insert storm hurts a victim that
shares the event loop more than one on an adapter of its own)."""

from __future__ import annotations

import csv
import json
import math
import statistics
from typing import TYPE_CHECKING

import pytest
import typer
from typer.testing import CliRunner

from sim.cli.isolation import register
from sim.compare.isolation import (
    ARCHITECTURES,
    PassResult,
    isolation_config,
    isolation_rows,
    ratio_estimate,
    run_pass,
)
from sim.compare.neighbours import BASELINE
from sim.compare.stats import t975
from sim.load.run_config import RunConfig
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from pathlib import Path


def _app() -> typer.Typer:
    """The command alone, as `coordsim` registers it (the other commands'
    imports are not this test's concern)."""
    app = typer.Typer(pretty_exceptions_enable=False)
    register(app)

    @app.callback()
    def _root() -> None:
        pass

    return app


def test_the_ratio_is_the_geometric_mean_of_paired_ratios_with_a_log_t_interval() -> None:
    r = ratio_estimate([2.0, 4.0, 5.0], [4.0, 4.0, 20.0])  # per pass: x2, x1, x4
    logs = [math.log(2), 0.0, math.log(4)]
    half = t975(2) * statistics.stdev(logs) / math.sqrt(3)
    assert r.n == 3
    assert r.value == pytest.approx(2.0)  # (2 * 1 * 4) ** (1/3)
    assert r.low == pytest.approx(math.exp(statistics.fmean(logs) - half))
    assert r.high == pytest.approx(math.exp(statistics.fmean(logs) + half))
    assert r.low is not None
    assert r.low > 0  # never below 0, unlike a t-interval of the raw ratios
    assert r.without.mean == pytest.approx(11 / 3)
    assert r.with_.mean == pytest.approx(28 / 3)
    one = ratio_estimate([3.0], [6.0])
    assert one.value == pytest.approx(2.0)
    assert (one.low, one.high) == (None, None)
    assert ratio_estimate([0.0, 2.0], [5.0, 3.0]).n == 1  # a pass with nothing measured has no ratio
    with pytest.raises(InvalidUsage, match="paired"):
        ratio_estimate([1.0, 2.0], [1.0])


def _result(arch: str, neighbour: str, index: int, p99: float, ops_s: float) -> PassResult:
    return PassResult(arch, neighbour, index, 10 + index, 1.0, int(ops_s), int(ops_s), 0, ops_s, p99 / 2, p99,
                      0.0 if neighbour == BASELINE else 500.0, 0)


def test_rows_pair_each_neighbour_run_with_its_baseline_at_the_same_pass() -> None:
    results = [
        _result("event-loop", BASELINE, 1, 2.0, 2000.0), _result("event-loop", "insert-storm", 1, 6.0, 1000.0),
        _result("event-loop", BASELINE, 2, 4.0, 1000.0), _result("event-loop", "insert-storm", 2, 6.0, 1000.0),
        _result("decoupled", BASELINE, 1, 1.0, 3000.0), _result("decoupled", "insert-storm", 1, 1.0, 999.0),
    ]
    rows = isolation_rows(results, ["insert-storm"])
    assert [(r.architecture, r.passes, r.seeds) for r in rows] == [("event-loop", 2, (11, 12)), ("decoupled", 1, (11,))]
    el = rows[0]
    assert el.p99.value == pytest.approx(math.sqrt(3.0 * 1.5))  # passes: 6/2 and 6/4
    assert el.throughput.value == pytest.approx(math.sqrt(0.5 * 1.0))
    assert el.neighbour_ops_s.mean == 500.0
    assert not el.thin_tail  # >= 1,000 samples per pass: 10 beyond the p99
    assert rows[1].thin_tail  # 999 in one pass
    assert rows[1].p99.value == pytest.approx(1.0)
    assert rows[1].p99.low is None


def test_both_modes_have_the_two_adapter_row() -> None:
    names = tuple(a.config for a in ARCHITECTURES)
    assert isolation_config(RunConfig(mode="real")).configurations == names
    assert isolation_config(RunConfig(mode="real")).coordinator("decoupled-2-adapters").adapters == 2
    virtual = isolation_config(RunConfig())
    assert virtual.coordinator("decoupled-2-adapters").adapters == 2


def test_the_command_writes_its_files_in_virtual_mode(tmp_path: Path) -> None:
    out = tmp_path / "iso"
    r = CliRunner().invoke(_app(), [
        "isolation", "--neighbour", "ddl-churn", "--victim-clients", "1", "-T", "0.05", "--warmup", "0.02",
        "--repeat", "2", "--jobs", "1", "-o", str(out),
    ])
    assert r.exit_code == 0, r.output
    assert r.output.rstrip().endswith(f"wrote {out}")
    assert {"isolation.csv", "runs.csv", "summary.json", "report.md", "isolation-p99.png", "config.toml"} <= {
        p.name for p in out.iterdir()
    }
    doc = json.loads((out / "summary.json").read_text())
    assert (doc["passes"], doc["seeds"], doc["mode"]) == (2, [0, 1], "virtual")
    assert [(row["architecture"], row["neighbour"]) for row in doc["rows"]] == [
        ("event-loop", "ddl-churn"), ("decoupled", "ddl-churn"), ("decoupled-2-adapters", "ddl-churn")]
    assert all(row["p99_ms"]["passes"] == 2 and row["p99_ms"]["ratio"] > 0 for row in doc["rows"])
    assert doc["provenance"]["command"].startswith("coordsim")
    with (out / "isolation.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 3
    with (out / "runs.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 3 * 2 * 2  # architectures x (without, with) x passes
    assert "p99 ratio" in r.output
    assert "decoupled-2-adapters" in r.output
    assert (out / "isolation-p99.png").read_bytes()[:4] == b"\x89PNG"


def test_an_unknown_neighbour_is_refused() -> None:
    r = CliRunner().invoke(_app(), ["isolation", "--neighbour", "noisy"])
    assert isinstance(r.exception, InvalidUsage)
    assert "known: ddl-churn, insert-storm, heavy-peek" in str(r.exception)


def test_an_insert_storm_hurts_the_event_loop_victim_more_than_the_two_adapter_one() -> None:
    cfg = isolation_config(RunConfig(duration_s=0.5, warmup_s=0.2))
    ratios = {}
    for arch in (ARCHITECTURES[0], ARCHITECTURES[2]):
        runs = [run_pass(cfg, arch, n, index=i, victim_clients=4)
                for i in (1, 2) for n in (BASELINE, "insert-storm")]
        (row,) = isolation_rows(runs, ["insert-storm"])
        ratios[arch.name] = row
        print(f"{arch.name}: victim p99 {row.p99.without.mean:.2f} -> {row.p99.with_.mean:.2f} ms, "
              f"ratio {row.p99.value:.3f} [{row.p99.low:.3f}, {row.p99.high:.3f}]; "
              f"neighbour {row.neighbour_ops_s.mean:,.0f} inserts/s")
    el, two = ratios["event-loop"], ratios["decoupled-2-adapters"]
    # Seen (seeds 0, 1; 0.5 s windows): event-loop p99 ratio ~1.26, two adapters ~1.0.
    assert el.p99.value > two.p99.value
    assert el.p99.value > 1.1
    assert two.p99.value < 1.1
