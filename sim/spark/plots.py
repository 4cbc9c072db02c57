"""The replay's plots, drawn as `coordsim compare` draws its own
(`sim.compare.plots`: each configuration in its fixed colour and marker, the
log-2 concurrency axis with the levels as ticks, p50 solid and p99 dashed,
one PNG per workload and measure), so the two outputs read alike. A run
without a numeric concurrency is left out of the concurrency plots (it has no
place on that axis) but not of `windows`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from matplotlib.figure import Figure

__all__ = ["MAX_POINTS", "concurrency_key", "plot", "windows_figure"]

#: The most points one line of the windows plot has: windows are merged into
#: bins of several to stay under it (at 1600 px, about one per 10 px).
MAX_POINTS: Final = 100
#: The windows plot: 16 in at 100 dpi, 1600 px wide.
WINDOWS_WIDTH_IN: Final = 16.0
_PANEL_HEIGHT_IN: Final = 3.0
_MAX_COLUMNS: Final = 4

_Key = tuple[int, float, str]


def concurrency_key(c: Any) -> _Key:
    """Concurrency sorts as a number ("1" < "4" < "16"); a non-number ("-")
    after the numbers."""
    try:
        return (0, float(c), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(c))


def _numeric(c: Any) -> int | None:
    k = concurrency_key(c)
    return int(k[1]) if k[0] == 0 else None


def plot(
    out: Path, metric_rows: Sequence[dict[str, Any]], window_rows: Sequence[dict[str, Any]], window_ms: int
) -> list[Path]:
    """Per workload: `<workload>-throughput.png`, `<workload>-latency.png`
    (by concurrency, as compare's) and `<workload>-windows.png`
    (`windows_figure`). Returns the files written, in that order."""
    from sim.compare.plots import Point, latency_figure, save_figure, throughput_figure

    paths: list[Path] = []
    workloads = sorted({str(r["workload"]) for r in metric_rows} | {str(w["workload"]) for w in window_rows})
    for wl in workloads:
        mine = [r for r in metric_rows if r["workload"] == wl and _numeric(r["concurrency"]) is not None]
        mine.sort(key=lambda r: (_config_rank(str(r["config"])), concurrency_key(r["concurrency"])))
        pts = [Point(str(r["config"]), _numeric(r["concurrency"]) or 0, float(r["throughput_ops_s"] or 0.0),
                     p50_ms=r["p50_ms"], p99_ms=r["p99_ms"], errors=int(r.get("errors") or 0)) for r in mine]
        if pts:
            fig = throughput_figure(pts, title=f"{wl}: throughput (replayed traces)", ylabel="ok operations / s")
            paths.append(save_figure(fig, out / f"{wl}-throughput.png"))
            paths.append(save_figure(latency_figure(pts, title=f"{wl}: latency (replayed traces)"),
                                     out / f"{wl}-latency.png"))
        windows = windows_figure(window_rows, window_ms, wl)
        if windows is not None:
            paths.append(save_figure(windows, out / f"{wl}-windows.png"))
    return paths


def _config_rank(config: str) -> tuple[int, str]:
    """The named configurations first, in their order, then the others by name."""
    from sim.compare.plots import BUILTIN

    names = list(BUILTIN)
    return (names.index(config), "") if config in names else (len(names), config)


def rebin(runs: Mapping[str, Mapping[int, int]], k: int, window_ms: int) -> tuple[list[float], list[float]]:
    """One line of the windows plot: bins of `k` windows → (bin's middle in s
    since the level began, ok operations / s). `runs` maps each run to its
    ok operations per window index. A bin's rate is its operations over the
    run-time it covers, summed over the runs still going (a run ends with its
    last window), so a run that ended early or a last, partial bin does not
    read as a drop."""
    ends = {r: max(w) for r, w in runs.items() if w}
    if not ends:
        return [], []
    ops: dict[int, int] = {}
    for w in runs.values():
        for i, n in w.items():
            ops[i // k] = ops.get(i // k, 0) + n
    last = max(ends.values())
    xs, ys = [], []
    for b in range(last // k + 1):
        covered = sum(max(0, min(k, e + 1 - b * k)) for e in ends.values())
        span = min(k, last + 1 - b * k)
        xs.append((b * k + span / 2) * window_ms / 1000)
        ys.append(ops.get(b, 0) / (covered * window_ms / 1000))
    return xs, ys


def windows_figure(window_rows: Sequence[dict[str, Any]], window_ms: int, workload: str) -> Figure | None:
    """The workload's ok operations per second over time: one panel per
    concurrency level (shared y axis, so levels compare by height), one line
    per configuration in its fixed style, at most `MAX_POINTS` points a line
    (windows merged into bins, `rebin`). None with no window."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import StrMethodFormatter

    from sim.compare.plots import DPI, style

    runs: dict[tuple[str, _Key], dict[str, dict[int, int]]] = {}
    names: dict[_Key, str] = {}
    for w in window_rows:
        if w["workload"] != workload:
            continue
        key = concurrency_key(w["concurrency"])
        names[key] = str(w["concurrency"])
        per = runs.setdefault((str(w["config"]), key), {}).setdefault(str(w.get("run", "")), {})
        i = int(w["window_ms"]) // window_ms
        per[i] = per.get(i, 0) + int(w["ops"])
    if not runs:
        return None
    levels = sorted({k for _, k in runs})
    configs = sorted({c for c, _ in runs}, key=_config_rank)
    ncols = min(len(levels), _MAX_COLUMNS)
    nrows = math.ceil(len(levels) / ncols)
    fig = Figure(figsize=(WINDOWS_WIDTH_IN, 1.2 + _PANEL_HEIGHT_IN * nrows), dpi=DPI, layout="constrained")
    grid = fig.subplots(nrows, ncols, sharey=True, squeeze=False)
    for n, ax in enumerate(grid.flat):
        if n >= len(levels):
            ax.set_visible(False)
            continue
        level = levels[n]
        lines = {c: runs[(c, level)] for c in configs if (c, level) in runs}
        windows = max(max(w, default=0) + 1 for r in lines.values() for w in r.values())
        k = math.ceil(windows / MAX_POINTS)
        for cfg, per_run in lines.items():
            st = style(cfg)
            xs, ys = rebin(per_run, k, window_ms)
            ax.plot(xs, ys, color=st.color, marker=st.marker, markersize=4, markevery=max(1, len(xs) // 12),
                    linewidth=1.4, label=cfg)
        c = _numeric(names[level])
        head = f"concurrency {names[level]}" if c is None else f"{c} client{'s' if c != 1 else ''}"
        ms = k * window_ms
        ax.set_title(f"{head}  ({ms / 1000:g} s bins)" if ms >= 1000 else f"{head}  ({ms} ms bins)", fontsize="medium")
        ax.set_xlim(0, windows * window_ms / 1000)  # the level's whole span, even a one-window level's
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
        ax.grid(True, alpha=0.3)
        if n % ncols == 0:
            ax.set_ylabel("ok operations / s")
        if n + ncols >= len(levels):  # the lowest panel of its column
            ax.set_xlabel("s since the level's first operation")
    # Only now, with every panel drawn: the shared y axis must fit them all.
    grid[0][0].set_ylim(bottom=0)
    handles = [Line2D([], [], color=style(c).color, marker=style(c).marker, markersize=5, label=c) for c in configs]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), fontsize="small",
               frameon=False)
    fig.suptitle(f"{workload}: ok operations per second over time, one panel per level (replayed traces)")
    return fig
