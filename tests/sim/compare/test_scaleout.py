"""The scale-out section of a compare report (issue 36): the equal-cores
variants `--adapters` adds, the table per workload, and where scaling stops
with what the cells show about why."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sim.compare.rows import LevelRow
from sim.compare.scaleout import (
    equal_cores_variant_name,
    markdown_lines,
    plot_scaleout,
    scaleout_groups,
    with_adapters,
)
from sim.load.run_config import RunConfig

if TYPE_CHECKING:
    from pathlib import Path


def _row(config: str, adapters: int, cores: int, clients: int, tput: float, *, busy: float = 0.3,
         races: float | None = None, host_bound: str = "") -> LevelRow:
    return LevelRow(
        workload="insert", config=config, mode="virtual", concurrency=clients, repeats=3, window_s=1.0,
        ops=3000, errors=0, errors_by_code=(), throughput_ops_s=tput, throughput_ci95=tput * 0.02,
        throughput_samples=(tput,) * 3, latency_samples=3000, p50_ms=1.0, p99_ms=2.0, p999_ms=None,
        p50_samples_ms=(1.0,), p99_samples_ms=(2.0,), oracle_queries_per_op=1.5, loop_busy_fraction=busy,
        host_bound=host_bound, adapters=adapters, cores=cores, lost_races_per_commit=races,
    )


def test_with_adapters_adds_one_adapter_with_the_same_cores() -> None:
    cfg = with_adapters(RunConfig(configurations=("event-loop", "decoupled")), (1, 2, 4))
    per = cfg.coordinator("decoupled").cores
    assert cfg.configurations == (
        "event-loop", "decoupled", "decoupled-2-adapters", "decoupled-4-adapters",
        equal_cores_variant_name("decoupled", 2 * per), equal_cores_variant_name("decoupled", 4 * per),
    )
    one = cfg.coordinator(equal_cores_variant_name("decoupled", 4 * per))
    assert (one.adapters, one.cores) == (1, 4 * per)
    assert cfg.coordinator("decoupled-4-adapters").cores * 4 == one.cores


def test_scaling_stops_where_a_step_gains_too_little_and_says_why(tmp_path: Path) -> None:
    rows = [
        _row("decoupled", 1, 2, 64, 1000.0, busy=0.95),
        _row("decoupled-2-adapters", 2, 4, 64, 1900.0, busy=0.9),
        _row("decoupled-4-adapters", 4, 8, 64, 1950.0, busy=0.4, races=0.7),
        _row("decoupled-1-adapter-4-cores", 1, 4, 64, 1850.0),
        _row("decoupled-1-adapter-8-cores", 1, 8, 64, 2600.0),
    ]
    [g] = scaleout_groups(rows)
    assert sorted(g.by_adapters) == [1, 2, 4]
    assert sorted(g.by_cores) == [4, 8]
    text = "\n".join(markdown_lines(rows))
    assert "| 1 (cores of 4) | 8 |" in text
    assert "64 clients: 1 → 4 adapters gives 1.95x; scaling stops at 2 → 4 (1.03x)" in text
    assert "append races on the shared shards (0.70 retries per group commit)" in text
    assert "one adapter with the same 8 cores does 1.33x" in text
    [png] = plot_scaleout(tmp_path, rows)
    assert png.name == "insert-scaleout.png"
    assert png.stat().st_size > 10_000


def test_no_section_without_an_adapter_sweep() -> None:
    assert markdown_lines([_row("decoupled", 1, 2, 4, 100.0), _row("event-loop", 1, 1, 4, 50.0)]) == []


def test_ablate_with_adapters_steps_more_cores_then_more_processes_at_the_same_cores() -> None:
    from sim.compare.ablation import chain, with_scale_out
    from sim.runtime.errors import InvalidUsage

    steps = with_scale_out(chain("event-loop+pg-oracle", "decoupled"), 2, cores=2)
    assert [s.name for s in steps[-3:]] == ["decoupled", "decoupled +cores=4", "decoupled +adapters=2"]
    assert steps[-2].variant == {"base": "decoupled", "cores": 4}
    assert steps[-1].variant == {"base": "decoupled", "adapters": 2, "cores": 2}
    cfg = RunConfig().with_overrides(variants={s.name: s.variant for s in steps if s.variant is not None})
    one, two = cfg.coordinator("decoupled +cores=4"), cfg.coordinator("decoupled +adapters=2")
    assert (one.adapters, one.cores) == (1, 4)
    assert (two.adapters, two.adapters * two.cores) == (2, 4)  # the same total cores
    with pytest.raises(InvalidUsage, match="must end at a decoupled"):
        with_scale_out(chain("decoupled", "event-loop"), 2, cores=2)
    with pytest.raises(InvalidUsage, match="one count above 1"):
        with_scale_out(chain("event-loop", "decoupled"), 1, cores=2)


def test_compare_ablate_with_adapters_runs_the_two_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from sim.cli.main import main

    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["coordsim", "compare", "--ablate", "event-loop+pg-oracle..decoupled",
                                      "--adapters", "2", "-w", "select-one", "--concurrency", "4", "--ops", "3",
                                      "--repeat", "2", "-o", str(out)])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 0, capsys.readouterr().err
    report = (out / "report.md").read_text()
    assert "| decoupled +cores=4 (cores) |" in report
    assert "| decoupled +adapters=2 (adapters) |" in report
    monkeypatch.setattr(sys, "argv", ["coordsim", "compare", "--ablate", "event-loop+pg-oracle..decoupled",
                                      "--adapters", "2,4", "-o", str(tmp_path / "o2")])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    assert "takes one count above 1" in capsys.readouterr().err
