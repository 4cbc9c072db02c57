"""The sensitivity analysis: families scale what they name and nothing else,
conclusions are decided only outside the noise, and a flipped conclusion is
reported as fragile."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from controllers.replica import REPLICA_LATENCIES
from coordinator.config import Costs
from sim.compare.runner import LevelRow
from sim.compare.sensitivity import FAMILIES, conclusions, scaled_config, survival_lines
from sim.load.config import Config, load_profile

if TYPE_CHECKING:
    from pathlib import Path


def _row(workload: str, config: str, tput: float, half: float | None, c: int = 4) -> LevelRow:
    return LevelRow(
        workload=workload, config=config, mode="virtual", concurrency=c, repeats=3, window_s=1.0, ops=100,
        errors=0, errors_by_code=(), throughput_ops_s=tput, throughput_ci95=half,
        throughput_samples=(tput, tput, tput), latency_samples=100, p50_ms=1.0, p99_ms=None, p999_ms=None,
        p50_samples_ms=(1.0,), p99_samples_ms=(1.0,), oracle_queries_per_op=None, loop_busy_fraction=None,
    )  # fmt: skip


def test_coordinator_cpu_scales_every_cost_and_nothing_else(tmp_path: Path) -> None:
    cfg = Config(mode="virtual", costs={"parse_plan": 1e-3})
    doubled = scaled_config(cfg, "coordinator-cpu", 2.0, tmp_path)
    assert doubled.costs["parse_plan"] == 2e-3  # the run's own override, scaled
    assert doubled.costs["peek_sequence"] == Costs().peek_sequence * 2
    assert set(doubled.costs) == set(FAMILIES["coordinator-cpu"])
    assert doubled.latency_profile == cfg.latency_profile


def test_replica_family_writes_a_profile_with_only_replica_costs_scaled(tmp_path: Path) -> None:
    cfg = Config(mode="virtual")
    half = scaled_config(cfg, "replica", 0.5, tmp_path)
    assert half.latency_profile is not None
    base, scaled = cfg.latency(), load_profile(half.latency_profile)
    for name in REPLICA_LATENCIES:
        assert scaled.distribution(name).mean() == REPLICA_LATENCIES[name].mean() * 0.5 or (
            base.configures(name) and scaled.distribution(name).mean() == base.distribution(name).mean() * 0.5
        )
    for name in base.names():
        if not name.startswith("replica."):
            assert scaled.distribution(name) == base.distribution(name)
    assert half.costs == cfg.costs


def test_conclusions_are_decided_outside_the_noise_only() -> None:
    rows = [_row("w", "a", 100, 5), _row("w", "b", 50, 5), _row("w", "c", 104, 5), _row("w", "a", 10, 1, c=1)]
    got = {k: c.decision for k, c in conclusions(rows).items()}
    assert got == {("w", "a", "b"): "a>b", ("w", "a", "c"): "=", ("w", "b", "c"): "b>a"}


def test_a_flipped_conclusion_is_fragile() -> None:
    base = [_row("w", "a", 100, 5), _row("w", "b", 50, 5)]
    same = [_row("w", "a", 90, 5), _row("w", "b", 40, 5)]
    flipped = [_row("w", "a", 40, 5), _row("w", "b", 90, 5)]
    lines, fragile = survival_lines(base, {"x0.5": same, "x2": flipped})
    assert fragile == 1
    assert "fragile" in lines[-1]
    assert "w: b faster than a" in lines[-1]
    lines, fragile = survival_lines(base, {"x0.5": same, "x2": replace_rows(same)})
    assert fragile == 0


def replace_rows(rows: list[LevelRow]) -> list[LevelRow]:
    return [replace(r, throughput_ops_s=r.throughput_ops_s * 1.01) for r in rows]


def test_compare_sensitivity_reports_every_conclusion(tmp_path: Path) -> None:
    """The CLI end to end: 6 reruns, a table row per conclusion with a cell per
    rerun, the same table in report.md."""
    import subprocess
    import sys
    from pathlib import Path as P

    coordsim = str(P(sys.executable).with_name("coordsim"))
    out = tmp_path / "out"
    proc = subprocess.run(
        [coordsim, "compare", "--mode", "virtual", "--quick", "--workloads", "select-one", "--configs",
         "event-loop,decoupled", "--concurrency", "4,16", "--no-check", "--sensitivity", "-o", str(out)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| select-one:")]
    assert len(rows) == 1
    assert rows[0].count("|") == 2 + 6 + 1  # conclusion, six reruns, survives
    assert "## Sensitivity to the unmeasured costs" in (out / "report.md").read_text()
    assert len(list((out / "sensitivity").glob("profile-*.toml"))) == 4  # replica and catalog-feed, x0.5 and x2
