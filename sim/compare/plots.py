"""Every plot's look, shared by `coordsim compare`, `--ablate` and `coordsim
replay`: one fixed colour and marker per configuration (`style`), a log-2
concurrency axis ticked at the measured levels, hollow markers for cells that
conclusions leave out, and PNGs written atomically. The invariant: a
configuration looks the same in every plot of every command.

Figures are built as `matplotlib.figure.Figure` objects (no pyplot: no global
state, no GUI backend) by `*_figure` functions that return them, so tests can
inspect what was drawn before anything is saved.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import sys
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

from sim.compare.ablation import ORDER
from sim.runtime.outputs import atomic_write

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from sim.compare.ablation import Step
    from sim.compare.rows import LevelRow

__all__ = [
    "BUILTIN",
    "DPI",
    "FIGSIZE",
    "HOLLOW_NOTE",
    "Point",
    "Style",
    "concurrency_axis",
    "latency_figure",
    "plot",
    "plot_waterfall",
    "point",
    "save_figure",
    "style",
    "throughput_figure",
    "waterfall_figure",
]

#: A single plot's size: 960 x 500 px at DPI, room for the legends to the right.
FIGSIZE: Final = (9.6, 5.0)
DPI: Final = 100
#: What a hollow marker (or an unfilled bar) means, in every plot's legend.
HOLLOW_NOTE: Final = "hollow: not steady or host-bound,\nleft out of conclusions"


@final
@dataclass(frozen=True)
class Style:
    """How one configuration is drawn: its colour, its marker in line plots,
    and its hatch in bar plots (where there is no marker to tell apart two
    configurations that share a colour)."""

    color: str
    marker: str
    hatch: str


# Okabe & Ito's colour-blind-safe palette ("Color Universal Design", 2008).
# Yellow (#F0E442) is left out: a thin line of it on white is barely visible.
_VERMILLION: Final = "#D55E00"
_PURPLE: Final = "#CC79A7"
_BLUE: Final = "#0072B2"
#: The named configurations' fixed styles; a test checks every entry of
#: `coordinator.config.CONFIGURATIONS` has one, so a new one gets a choice.
BUILTIN: Final[dict[str, Style]] = {
    "event-loop": Style(_VERMILLION, "o", ""),
    "event-loop+pg-oracle": Style(_PURPLE, "s", ""),
    "decoupled": Style(_BLUE, "^", ""),
}
#: What other names (config-file variants, ablation steps) are drawn with:
#: the palette's remaining colours, and markers and hatches the named ones do
#: not use (a hatch tells bars of one colour apart, as a marker does points).
_COLORS: Final = ("#E69F00", "#56B4E9", "#009E73", "#000000")  # orange, sky blue, bluish green, black
_MARKERS: Final = ("D", "v", "P", "X", "p", "h", "<", ">", "*", "d", "H", "8")
_HATCHES: Final = ("//", "\\\\", "xx", "..", "--", "||", "++", "oo", "/.", "\\.", "x.", "-.")
#: An ablation step's name, `<from> +<mechanism>=<value>` (`sim.compare.ablation.chain`).
_STEP: Final = re.compile(r" \+(\w+)=\S*$")


def style(config: str) -> Style:
    """The configuration's style, a function of its name alone.

    The named configurations have fixed styles. An ablation step is styled by
    the mechanism it changes, in `sim.compare.ablation.ORDER`'s order: the
    four colours in turn, so adjacent steps of a chain differ in colour, and
    a marker (and hatch) of its own, so no two steps look alike. Any other
    name is hashed into those 4 x 12 styles with BLAKE2 (Python's `hash` is
    randomized per process, and a plot's colours must not change between
    runs); two such names may then coincide, which the legends' names
    resolve."""
    if config in BUILTIN:
        return BUILTIN[config]
    step = _STEP.search(config)
    if step and step[1] in ORDER:
        i = ORDER.index(step[1])
        c, m = i % len(_COLORS), i % len(_MARKERS)
    else:
        h = int.from_bytes(hashlib.blake2b(config.encode(), digest_size=8).digest(), "big")
        c, m = h % len(_COLORS), (h // len(_COLORS)) % len(_MARKERS)
    return Style(_COLORS[c], _MARKERS[m], _HATCHES[m])


@final
@dataclass(frozen=True)
class Point:
    """One cell as the plots see it (a compare row, or a replay metrics row)."""

    config: str
    concurrency: int
    throughput_ops_s: float
    throughput_ci95: float | None = None  # 95 % half-width; None: one sample
    p50_ms: float | None = None  # None: too few samples to estimate
    p99_ms: float | None = None
    errors: int = 0
    hollow: bool = False  # not steady or host-bound: conclusions leave it out


def point(row: LevelRow) -> Point:
    """The plotted view of a compare row."""
    return Point(row.config, row.concurrency, row.throughput_ops_s, row.throughput_ci95, row.p50_ms, row.p99_ms,
                 row.errors, not row.concludable)


def _offsets(levels: Sequence[int], n: int) -> list[float]:
    """Per configuration, a factor to multiply its x by ("dodge"), so that
    intervals at one level sit side by side: about 1.5 % of the axis apart,
    and all of them within 40 % of the narrowest gap between levels."""
    if n < 2:
        return [1.0] * n
    logs = [math.log2(c) for c in sorted(set(levels)) if c > 0]
    span = logs[-1] - logs[0] if len(logs) > 1 else 2.0
    gap = min((b - a for a, b in itertools.pairwise(logs)), default=2.0)
    step = min(0.015 * (span + 1.0), 0.4 * gap / (n - 1))
    return [2 ** ((i - (n - 1) / 2) * step) for i in range(n)]


def _x_span(ax: Axes, levels: Sequence[int], offsets: Sequence[float]) -> None:
    """Every measured level on the axis, even one with nothing to draw (a
    latency plot's level with too few samples), so a plot's levels line up
    with its sibling's."""
    if levels and levels[0] > 0:
        pad = 2**0.4
        ax.set_xlim(levels[0] * min(offsets, default=1.0) / pad, levels[-1] * max(offsets, default=1.0) * pad)


def _markers(ax: Axes, xs: Sequence[float], ys: Sequence[float], hollow: Sequence[bool], st: Style, *,
             size: float) -> None:
    """The points themselves, filled or hollow; drawn apart from the line so
    one series can mix both."""
    for want in (False, True):
        pts = [(x, y) for x, y, h in zip(xs, ys, hollow, strict=True) if h == want]
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], linestyle="none", marker=st.marker, color=st.color,
                    markeredgecolor=st.color, markerfacecolor="none" if want else st.color, markeredgewidth=1.5,
                    markersize=size)


def _legends(ax: Axes, configs: Sequence[str], extra: Sequence[Artist]) -> None:
    """To the right of the axes: the configurations by colour and marker
    (only those drawn), and below them a second legend for the line styles
    and hollow markers that were drawn (none if there are none)."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=style(c).color, marker=style(c).marker, label=c) for c in configs]
    legends = []
    if handles:
        legends.append(ax.legend(handles=handles, title="configuration", fontsize="small", title_fontsize="small",
                                 loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0))
    if extra:
        legends.append(ax.legend(handles=list(extra), fontsize="small", loc="lower left", bbox_to_anchor=(1.01, 0.0),
                                 borderaxespad=0.0))
    # `ax.legend` replaces the axes' legend: the first is kept as an artist,
    # unclipped, or the layout would clip it to the axes and cut it off.
    for leg in legends[:-1]:
        ax.add_artist(leg)
        leg.set_clip_on(False)


def _hollow_handle() -> Artist:
    from matplotlib.lines import Line2D

    return Line2D([], [], linestyle="none", marker="o", color="0.35", markerfacecolor="none", markeredgewidth=1.5,
                  label=HOLLOW_NOTE)


def _new_axes() -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    return fig, fig.add_subplot()


def throughput_figure(points: Sequence[Point], *, title: str, ylabel: str = "operations / s (mean, 95% CI)") -> Figure:
    """Throughput against concurrency, one line per configuration, each level
    with its 95 % interval, the configurations dodged sideways so intervals do
    not hide each other; a level with errors is labelled with their count.

    The y axis is linear from zero, so heights compare as amounts. The
    interval is mean ± t·s/√n, symmetric by construction: with two or three
    noisy passes it can reach below zero, which no throughput can. Its lower
    bar is therefore clipped at zero (a log axis would instead have nowhere to
    draw such an interval, and would hide how small the small levels are)."""
    from matplotlib.ticker import StrMethodFormatter

    fig, ax = _new_axes()
    configs = list(dict.fromkeys(p.config for p in points))
    levels = sorted({p.concurrency for p in points})
    offsets = _offsets(levels, len(configs))
    hollow = False
    for cfg, k in zip(configs, offsets, strict=True):
        st = style(cfg)
        mine = sorted((p for p in points if p.config == cfg and math.isfinite(p.throughput_ops_s)),
                      key=lambda p: p.concurrency)
        xs = [p.concurrency * k for p in mine]
        ys = [p.throughput_ops_s for p in mine]
        ax.plot(xs, ys, color=st.color, linewidth=1.5)
        bars = [(x, y, p.throughput_ci95) for x, y, p in zip(xs, ys, mine, strict=True) if p.throughput_ci95]
        if bars:
            ax.errorbar([x for x, _, _ in bars], [y for _, y, _ in bars], fmt="none", ecolor=st.color, capsize=3,
                        elinewidth=1.2, yerr=[[min(h or 0.0, max(y, 0.0)) for _, y, h in bars],
                                              [h or 0.0 for _, _, h in bars]])
        _markers(ax, xs, ys, [p.hollow for p in mine], st, size=7)
        hollow |= any(p.hollow for p in mine)
        for x, p in zip(xs, mine, strict=True):
            if p.errors:
                ax.annotate(f"{p.errors:,} err", (x, p.throughput_ops_s), fontsize=7, color=st.color,
                            textcoords="offset points", xytext=(5, 5))
    concurrency_axis(ax, levels)
    _x_span(ax, levels, offsets)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    _legends(ax, configs, [_hollow_handle()] if hollow else [])
    return fig


def latency_figure(points: Sequence[Point], *, title: str) -> Figure:
    """p50 (solid, large markers) and p99 (dashed, small markers) latency
    against concurrency on a log axis; one colour per configuration. A legend
    entry stands for something drawn: a configuration or p99 with no point
    has none, and the configurations with no estimate at all are named in a
    note instead (too few samples). The mean is left out: a third series per
    configuration made the two that matter hard to tell apart."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator

    fig, ax = _new_axes()
    configs = list(dict.fromkeys(p.config for p in points))
    levels = sorted({p.concurrency for p in points})
    drawn: list[str] = []
    kinds: set[str] = set()
    hollow = False
    values: list[float] = []
    offsets = _offsets(levels, len(configs))
    for cfg, k in zip(configs, offsets, strict=True):
        st = style(cfg)
        mine = sorted((p for p in points if p.config == cfg), key=lambda p: p.concurrency)
        for kind, dash, size in (("p50", "-", 7.0), ("p99", "--", 4.5)):
            pts = [(p.concurrency * k, v, p.hollow) for p in mine
                   if (v := getattr(p, f"{kind}_ms")) is not None and v > 0]
            if not pts:
                continue
            xs, ys, hs = [x for x, _, _ in pts], [y for _, y, _ in pts], [h for _, _, h in pts]
            ax.plot(xs, ys, color=st.color, linestyle=dash, linewidth=1.5)
            _markers(ax, xs, ys, hs, st, size=size)
            kinds.add(kind)
            values += ys
            hollow |= any(hs)
            if cfg not in drawn:
                drawn.append(cfg)
    # The small marker is part of the p99 key: a level's lone p99 point has no
    # dashes to show.
    extra: list[Artist] = [
        Line2D([], [], color="0.35", linestyle="-", marker="o", markersize=7, label="p50"),
        Line2D([], [], color="0.35", linestyle="--", marker="o", markersize=4.5, label="p99"),
    ]
    extra = [h for h in extra if h.get_label() in kinds]
    if hollow:
        extra.append(_hollow_handle())
    concurrency_axis(ax, levels)
    _x_span(ax, levels, offsets)
    if values:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        # Within a decade or two the powers of ten alone leave the axis
        # (nearly) unlabelled: label the minor ticks too, fewer the wider.
        ratio = max(values) / min(values)
        subs = (2.0, 3.0, 4.0, 5.0, 6.0, 8.0) if ratio < 4 else (2.0, 5.0)
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=subs))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if ratio < 1000 else ""))
    else:
        ax.text(0.5, 0.5, "too few samples for any percentile", transform=ax.transAxes, ha="center", va="center",
                color="0.35")
        ax.set_yticks([])
    missing = [c for c in configs if c not in drawn]
    if missing and values:
        note = "\n".join(textwrap.wrap("no estimate (too few samples): " + ", ".join(missing), 34))
        ax.text(1.02, 0.5, note, transform=ax.transAxes, ha="left", va="center", fontsize="small", color="0.35")
    ax.set_ylabel("latency (ms)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", axis="y", alpha=0.12)
    _legends(ax, drawn, extra)
    return fig


def waterfall_figure(rows: Sequence[LevelRow], steps: Sequence[Step], workload: str) -> Figure:
    """At each level, the throughput of each step of the chain (bars left to
    right in chain order, each step in its `style`), so a
    step's effect is the change from the bar before it. The 95 % interval's
    lower bar stops at zero, as in the throughput plot; a cell that is not
    steady or host-bound is an unfilled bar; a cell not measured has none."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    from matplotlib.ticker import StrMethodFormatter

    by = {(r.config, r.concurrency): r for r in rows if r.workload == workload}
    levels = sorted({c for _, c in by})
    fig = Figure(figsize=(12.0, 5.0), dpi=DPI)
    ax = fig.add_subplot()
    width = 0.8 / len(steps)
    handles: list[Patch] = []
    hollow = False
    for i, st in enumerate(steps):
        look = style(st.name)
        cells = [(j + (i - (len(steps) - 1) / 2) * width, by[(st.name, c)]) for j, c in enumerate(levels)
                 if (st.name, c) in by]
        for x, r in cells:
            empty = not r.concludable
            hollow |= empty
            # A hatch is drawn in the edge colour: white on a filled bar (which
            # also parts adjacent bars), the step's colour on an unfilled one.
            ax.bar(x, r.throughput_ops_s, width, color="none" if empty else look.color, hatch=look.hatch or None,
                   edgecolor=look.color if empty else "white", linewidth=1.2 if empty else 0.6)
            if half := r.throughput_ci95:
                low = min(half, max(r.throughput_ops_s, 0.0))
                ax.errorbar(x, r.throughput_ops_s, yerr=[[low], [half]], fmt="none", ecolor="0.2", capsize=2,
                            elinewidth=1.0)
        label = st.name if i < len(steps) - 1 else f"{st.name} (+{st.mechanism})"
        handles.append(Patch(facecolor=look.color, edgecolor="white", hatch=look.hatch or None, label=label))
    if hollow:
        handles.append(Patch(facecolor="none", edgecolor="0.35", label=HOLLOW_NOTE))
    ax.set_xticks(range(len(levels)), [str(c) for c in levels])
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("operations / s (mean, 95% CI)")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_title(f"{workload}: {steps[0].name} → {steps[-1].name}, one mechanism at a time")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(handles=handles, title="step (in chain order)", fontsize="small", title_fontsize="small",
              loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return fig


def plot(directory: Path, rows: Sequence[LevelRow]) -> list[Path]:
    """Two PNGs per workload, `<workload>-throughput.png` then
    `<workload>-latency.png` (see `throughput_figure`, `latency_figure`)."""
    paths = []
    for wl in dict.fromkeys(r.workload for r in rows):
        mine = [r for r in rows if r.workload == wl]
        pts = [point(r) for r in mine]
        mode = mine[0].mode
        paths.append(save_figure(throughput_figure(pts, title=f"{wl}: throughput ({mode} mode)"),
                                 directory / f"{wl}-throughput.png"))
        paths.append(save_figure(latency_figure(pts, title=f"{wl}: latency ({mode} mode)"),
                                 directory / f"{wl}-latency.png"))
    return paths


def concurrency_axis(ax: Axes, levels: Sequence[int]) -> None:
    """A log2 x axis of concurrent clients, ticked and labelled at exactly
    the measured levels (1, 4, 16, … rather than 2⁰, 2², …): the look that
    compare's and replay's plots share."""
    from matplotlib.ticker import FixedFormatter, FixedLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(list(levels)))
    ax.xaxis.set_major_formatter(FixedFormatter([str(c) for c in levels]))
    ax.xaxis.set_minor_locator(FixedLocator([]))
    ax.set_xlabel("concurrent clients")


def save_figure(fig: Figure, path: Path) -> Path:
    """Writes a matplotlib figure as PNG (atomically) and closes it. A figure
    without a layout engine of its own is laid out tight first."""
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, format="png"))
    if "matplotlib.pyplot" in sys.modules:  # a pyplot figure: pyplot holds it until closed
        import matplotlib.pyplot as plt

        plt.close(fig)
    return path


def plot_waterfall(directory: Path, rows: Sequence[LevelRow], steps: Sequence[Step]) -> list[Path]:
    """One PNG per workload, `<workload>-ablation.png`: at each level, the
    throughput of each step of the chain (bars left to right in chain order),
    so a step's effect is the change from the bar before it
    (`sim.compare.plots.waterfall_figure`)."""
    return [save_figure(waterfall_figure(rows, steps, wl), directory / f"{wl}-ablation.png")
            for wl in dict.fromkeys(r.workload for r in rows)]
