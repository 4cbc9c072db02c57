"""The scaled configurations `--sensitivity` reruns (sim/compare/sensitivity.py):
a scaling touches what it names and nothing else; and the CLI end to end
(the break-even search itself: tests/sim/compare/test_breakeven.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from controllers.replica_costs import REPLICA_LATENCIES
from coordinator.config import Costs
from sim.compare.sensitivity import scaled_costs, scaled_latencies
from sim.load.latency_profile import load_profile
from sim.load.run_config import RunConfig

if TYPE_CHECKING:
    from pathlib import Path


def test_scaled_costs_scale_the_named_costs_and_nothing_else() -> None:
    cfg = RunConfig(mode="virtual", costs={"parse_plan": 1e-3})
    doubled = scaled_costs(cfg, ["parse_plan", "peek_sequence"], 2.0)
    assert doubled.costs["parse_plan"] == 2e-3  # the run's own override, scaled
    assert doubled.costs["peek_sequence"] == Costs().peek_sequence * 2
    assert set(doubled.costs) == {"parse_plan", "peek_sequence"}
    assert doubled.latency_profile == cfg.latency_profile


def test_scaled_latencies_write_a_profile_with_only_those_scaled(tmp_path: Path) -> None:
    cfg = RunConfig(mode="virtual")
    names = sorted(REPLICA_LATENCIES)
    half = scaled_latencies(cfg, names, 0.5, tmp_path / "p.toml", why="test")
    assert half.latency_profile is not None
    base, scaled = cfg.latency(), load_profile(half.latency_profile)
    for name in names:
        before = base.distribution(name) if base.configures(name) else REPLICA_LATENCIES[name]
        assert abs(scaled.distribution(name).mean() - before.mean() * 0.5) <= 1e-12 * before.mean()
    for name in base.names():
        if name not in names:
            assert scaled.distribution(name) == base.distribution(name)
    assert half.costs == cfg.costs


def test_compare_sensitivity_reports_break_even_factors(tmp_path: Path) -> None:
    """The CLI end to end (issue 35): a break-even sentence per conclusion on
    the terminal, the section and its table in report.md, the factors in
    summary.json, and the scaled profiles the reruns used."""
    import json
    import subprocess
    import sys
    from pathlib import Path as P

    coordsim = str(P(sys.executable).with_name("coordsim"))
    out = tmp_path / "out"
    proc = subprocess.run(
        [coordsim, "compare", "--mode", "virtual", "--quick", "--workloads", "select-one", "--configs",
         "event-loop,decoupled", "--concurrency", "4", "--no-check", "--sensitivity", "-o", str(out)],
        capture_output=True, text=True, check=False, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "break-even factors vs event-loop" in proc.stdout
    assert "## Break-even factors" in (out / "report.md").read_text()
    doc = json.loads((out / "summary.json").read_text())
    assert doc["break_even"], doc.keys()
    assert list((out / "sensitivity").glob("profile-*.toml"))


def test_sensitivity_in_real_mode_is_refused_before_the_sweep(tmp_path: Path) -> None:
    import subprocess
    import sys
    from pathlib import Path as P

    coordsim = str(P(sys.executable).with_name("coordsim"))
    proc = subprocess.run([coordsim, "compare", "--mode", "real", "--sensitivity", "-o", str(tmp_path / "o")],
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "--sensitivity" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_scaled_profile_keeps_the_cores_and_costs_of_the_profile_it_scales(tmp_path: Path) -> None:
    """A rerun must differ from its base in the scaled cost alone: the
    rewritten profile carries the cores `decoupled` takes from the original
    (the shipped profile's machine: 2) and any `[costs]` tables it has."""
    from sim.load.latency_profile import profile_cores, profile_costs
    from sim.load.run_config import DEFAULT_PROFILE

    cfg = RunConfig(mode="virtual", configurations=("decoupled",))
    scaled = scaled_latencies(cfg, sorted(REPLICA_LATENCIES), 2.0, tmp_path / "a.toml", why="test")
    assert scaled.latency_profile is not None
    assert profile_cores(scaled.latency_profile) == profile_cores(DEFAULT_PROFILE)
    assert scaled.coordinator("decoupled").cores == cfg.coordinator("decoupled").cores
    own = tmp_path / "own.toml"
    own.write_text((tmp_path / "a.toml").read_text().replace("[cpu]\ncores = ", "[cpu]\ncores = 3\n# was ")
                   + '\n[costs]\nparse_plan = 0.001\n\n[costs."decoupled"]\npeek_sequence = 0.002\n')
    again = scaled_latencies(RunConfig(mode="virtual", latency_profile=str(own)), ["replica.peek"], 0.5,
                             tmp_path / "b.toml", why="test")
    assert again.latency_profile is not None
    assert profile_cores(again.latency_profile) == 3
    assert profile_costs(again.latency_profile, "decoupled") == {"parse_plan": 0.001, "peek_sequence": 0.002}
