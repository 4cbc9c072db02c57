"""The plots read as the report says they do: a configuration keeps one style
everywhere, a legend entry stands for something drawn, cells left out of
conclusions are hollow, no interval reaches below zero, and the replay's
windows plot stays readable however long the run."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, cast

import pytest
from matplotlib.collections import LineCollection
from matplotlib.legend import Legend

from coordinator.config import CONFIGURATIONS
from sim.compare.ablation import chain
from sim.compare.plots import (
    BUILTIN,
    HOLLOW_NOTE,
    Point,
    Style,
    latency_figure,
    plot,
    plot_waterfall,
    point,
    style,
    throughput_figure,
    waterfall_figure,
)
from sim.compare.rows import LevelRow
from sim.spark.plots import MAX_POINTS, rebin, windows_figure

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D


def _row(config: str, c: int, tput: float, half: float | None, **kw: Any) -> LevelRow:
    return LevelRow(
        workload="insert", config=config, mode="virtual", concurrency=c, repeats=3, window_s=1.0, ops=100,
        errors=0, errors_by_code=(), throughput_ops_s=tput, throughput_ci95=half,
        throughput_samples=(tput, tput, tput), latency_samples=100, p50_ms=kw.pop("p50_ms", 1.0 + c),
        p99_ms=kw.pop("p99_ms", None), p999_ms=None, p50_samples_ms=(), p99_samples_ms=(),
        oracle_queries_per_op=None, loop_busy_fraction=None, **kw,
    )


def _legend_texts(fig: Figure) -> list[str]:
    return [t.get_text() for leg in fig.findobj(Legend) for t in leg.get_texts()]


def test_named_configurations_have_fixed_distinct_styles() -> None:
    assert set(CONFIGURATIONS) <= set(BUILTIN), "give the new configuration a fixed style in sim.compare.plots"
    styles = [style(c) for c in CONFIGURATIONS]
    assert len({s.color for s in styles}) == len(styles)
    assert len({s.marker for s in styles}) == len(styles)
    assert [style(c) for c in CONFIGURATIONS] == styles


def test_other_names_are_styled_by_name_alone() -> None:
    # Pinned: a per-process hash (Python's `hash`) would change it between runs.
    assert style("my-variant") == Style("#56B4E9", "p", "--")
    assert style("my-variant") == style("my-variant")
    named = {s.color for s in BUILTIN.values()}
    assert all(style(f"variant-{i}").color not in named for i in range(50))


def test_ablation_steps_look_apart() -> None:
    for src, dst in itertools.permutations(CONFIGURATIONS, 2):
        steps = chain(src, dst)
        looks = [style(s.name) for s in steps]
        assert len({(s.color, s.marker) for s in looks}) == len(looks), [s.name for s in steps]
        assert all(a.color != b.color for a, b in itertools.pairwise(looks)), [s.name for s in steps]
        # Bars have no marker: a shared colour is told apart by the hatch.
        assert len({(s.color, s.hatch) for s in looks}) == len(looks)


def test_latency_legend_has_no_entry_without_points() -> None:
    pts = [Point("decoupled", c, 100.0, p50_ms=float(c)) for c in (1, 4, 16)]
    pts += [Point("event-loop", c, 100.0) for c in (1, 4, 16)]  # too few samples everywhere
    texts = _legend_texts(latency_figure(pts, title="t"))
    assert "p50" in texts
    assert "p99" not in texts
    assert "decoupled" in texts
    assert "event-loop" not in texts
    assert HOLLOW_NOTE not in texts

    pts.append(Point("decoupled", 16, 100.0, p50_ms=16.0, p99_ms=40.0))
    assert "p99" in _legend_texts(latency_figure(pts, title="t"))


def _xy(line: Line2D) -> list[tuple[float, float]]:
    # An (n, 2) array; typed as any ArrayLike.
    return [(float(x), float(y)) for x, y in cast("Sequence[Sequence[float]]", line.get_xydata())]


def _hollow(fig: Figure) -> list[tuple[float, float]]:
    return [xy for line in fig.axes[0].get_lines() if line.get_markerfacecolor() == "none" for xy in _xy(line)]


@pytest.mark.parametrize("flaw", [{"steady": False, "steady_note": "trend"}, {"host_bound": "coordsim CPU 97 %"}])
def test_cells_left_out_of_conclusions_are_hollow(flaw: dict[str, Any]) -> None:
    rows = [_row("decoupled", 1, 100.0, 5.0), _row("decoupled", 4, 400.0, 5.0, p99_ms=9.0, **flaw)]
    pts = [point(r) for r in rows]
    assert [p.hollow for p in pts] == [False, True]
    for fig in (throughput_figure(pts, title="t"), latency_figure(pts, title="t")):
        hollow = _hollow(fig)
        assert hollow, "the flawed cell must be drawn hollow"
        assert all(x == pytest.approx(4.0, rel=0.2) for x, _ in hollow)  # dodged a little, never to another level
        assert HOLLOW_NOTE in _legend_texts(fig)
    assert HOLLOW_NOTE not in _legend_texts(throughput_figure(pts[:1], title="t"))


def _lowest_bar(fig: Figure) -> float:
    ys = [y for coll in fig.axes[0].collections if isinstance(coll, LineCollection)
          for seg in coll.get_segments() for _, y in seg]
    assert ys, "an interval must be drawn"
    return float(min(ys))


def test_no_throughput_interval_reaches_below_zero() -> None:
    # Three noisy passes: mean 100, half-width 300.
    rows = [_row(cfg, c, 100.0 * c, 300.0) for cfg in ("event-loop", "decoupled") for c in (1, 4)]
    assert _lowest_bar(throughput_figure([point(r) for r in rows], title="t")) == 0.0
    steps = chain("event-loop", "event-loop+pg-oracle")
    ablated = [_row(s.name, c, 100.0, 300.0) for s in steps for c in (1, 4)]
    assert _lowest_bar(waterfall_figure(ablated, steps, "insert")) == 0.0


def test_configurations_at_one_level_are_dodged_apart() -> None:
    rows = [_row(cfg, c, 100.0, 10.0) for cfg in CONFIGURATIONS for c in (1, 4, 16)]
    fig = throughput_figure([point(r) for r in rows], title="t")
    xs = {round(x, 6) for line in fig.axes[0].get_lines() for x, _ in _xy(line)}
    assert len(xs) == 3 * len(CONFIGURATIONS)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1", "4", "16"]


def test_plot_writes_each_workloads_pngs(tmp_path: Path) -> None:
    rows = [_row(cfg, c, 100.0 * c, 20.0, p99_ms=3.0 * c) for cfg in CONFIGURATIONS for c in (1, 4)]
    paths = plot(tmp_path, rows)
    assert [p.name for p in paths] == ["insert-throughput.png", "insert-latency.png"]
    steps = chain("event-loop", "decoupled")
    paths += plot_waterfall(tmp_path, [_row(s.name, c, 100.0, 5.0) for s in steps for c in (1, 4)], steps)
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted(p.name for p in paths)  # no temporary left


def _windows(windows: int) -> list[dict[str, Any]]:
    """Two runs per (configuration, level) at 100 ops per 100-ms window; the
    second run stops halfway."""
    return [{"workload": "w", "config": cfg, "concurrency": c, "run": f"{cfg}-{c}-{run}", "window_ms": i * 100,
             "ops": 100}
            for cfg in ("event-loop", "decoupled") for c in ("1", "16") for run in (0, 1)
            for i in range(windows if run == 0 else windows // 2)]


def test_windows_plot_has_at_most_max_points_a_line() -> None:
    fig = windows_figure(_windows(5_003), 100, "w")
    assert fig is not None
    assert fig.get_size_inches()[0] * fig.dpi == 1600
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 2  # one per level
    for ax in panels:
        lines = ax.get_lines()
        assert len(lines) == 2  # one per configuration
        for line in lines:
            ys = [y for _, y in _xy(line)]
            assert 50 <= len(ys) <= MAX_POINTS
            # 100 ops per 100 ms in every run while it runs: no drop where a
            # run ended or in the last, partial bin.
            assert ys == pytest.approx([1000.0] * len(ys))
    assert windows_figure(_windows(10), 100, "other") is None


def test_rebin_keeps_short_runs_as_they_are() -> None:
    xs, ys = rebin({"r": {0: 5, 1: 7, 3: 2}}, 1, 100)
    assert xs == pytest.approx([0.05, 0.15, 0.25, 0.35])
    assert ys == pytest.approx([50.0, 70.0, 0.0, 20.0])
