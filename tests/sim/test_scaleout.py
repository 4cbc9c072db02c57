"""The scale-out section of a compare report (issue 36): the equal-cores
variants `--adapters` adds, the table per workload, and where scaling stops
with what the cells show about why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.compare.runner import LevelRow
from sim.compare.scaleout import (
    equal_cores_variant_name,
    markdown_lines,
    plot_scaleout,
    scaleout_groups,
    with_adapters,
)
from sim.load.config import Config

if TYPE_CHECKING:
    from pathlib import Path


def _row(config: str, adapters: int, cores: int, clients: int, tput: float, *, busy: float = 0.3,
         races: float | None = None, host_bound: str = "") -> LevelRow:  # fmt: skip
    return LevelRow(
        workload="insert", config=config, mode="virtual", concurrency=clients, repeats=3, window_s=1.0,
        ops=3000, errors=0, errors_by_code=(), throughput_ops_s=tput, throughput_ci95=tput * 0.02,
        throughput_samples=(tput,) * 3, latency_samples=3000, p50_ms=1.0, p99_ms=2.0, p999_ms=None,
        p50_samples_ms=(1.0,), p99_samples_ms=(2.0,), oracle_queries_per_op=1.5, loop_busy_fraction=busy,
        host_bound=host_bound, adapters=adapters, cores=cores, lost_races_per_commit=races,
    )  # fmt: skip


def test_with_adapters_adds_one_adapter_with_the_same_cores() -> None:
    cfg = with_adapters(Config(configurations=("event-loop", "decoupled")), (1, 2, 4))
    per = cfg.coordinator("decoupled").cores
    assert cfg.configurations == (
        "event-loop", "decoupled", "decoupled-2-adapters", "decoupled-4-adapters",
        equal_cores_variant_name("decoupled", 2 * per), equal_cores_variant_name("decoupled", 4 * per),
    )  # fmt: skip
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
