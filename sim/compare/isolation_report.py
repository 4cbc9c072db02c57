"""The outputs of `coordsim isolation` (`sim.compare.isolation`): the table it
prints, `isolation.csv` (a row per architecture and neighbour, with the
ratios), `runs.csv` (every run the ratios come from), `report.md`, and the
one plot — the victim's p99 with / without the neighbour, per neighbour and
architecture, on a log axis with a line at 1.0 (perfect isolation) — so that
every number in the report can be traced back to the runs behind it.
"""

from __future__ import annotations

import csv
import math
from typing import TYPE_CHECKING, Final

from sim.compare.isolation import ARCHITECTURES
from sim.compare.neighbours import NEIGHBOURS
from sim.compare.plots import DPI, save_figure, style
from sim.runtime.outputs import atomic_write

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from matplotlib.figure import Figure

    from sim.compare.isolation import IsolationRow, PassResult, Ratio

__all__ = [
    "PLOT_NAME",
    "isolation_figure",
    "markdown",
    "ratio_text",
    "table_lines",
    "write_csv",
    "write_runs_csv",
]

PLOT_NAME: Final = "isolation-p99.png"
#: The ratio axis' range: a neighbour that makes the victim 1,000x slower is
#: off the chart (its bar is clipped, its label says the value).
_Y_RANGE: Final = (0.5, 1_000.0)


def _sig(x: float) -> str:
    """3 significant digits, trailing zeros kept (`1.00`, `0.930`, `12.6`, `216`)."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:#.3g}"


def ratio_text(r: Ratio) -> str:
    """`1.23 [1.10, 1.38]`: the ratio and its 95 % interval (none with one
    pass), to 3 significant digits."""
    if not r.n or not math.isfinite(r.value):
        return "—"
    if r.low is None or r.high is None:
        return _sig(r.value)
    return f"{_sig(r.value)} [{_sig(r.low)}, {_sig(r.high)}]"


def _pair(r: Ratio, fmt: str) -> str:
    return f"{format(r.without.mean, fmt)} → {format(r.with_.mean, fmt)}"


def table_lines(rows: Sequence[IsolationRow]) -> list[str]:
    """The short table printed on stdout: per row the victim's p50, p99 and
    throughput without → with the neighbour, and the with/without ratios."""
    cells = [("architecture", "neighbour", "p50 ms", "p50 ratio [95% CI]", "p99 ms", "p99 ratio [95% CI]",
              "victim ops/s", "ops/s ratio [95% CI]", "neighbour ops/s")]
    for r in rows:
        cells.append((r.architecture, r.neighbour, _pair(r.p50, ".3g"), ratio_text(r.p50), _pair(r.p99, ".3g"),
                      ratio_text(r.p99) + ("*" if r.thin_tail else ""), _pair(r.throughput, ".0f"),
                      ratio_text(r.throughput), f"{r.neighbour_ops_s.mean:,.0f}"))
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in cells]
    if any(r.thin_tail for r in rows):
        lines.append("* some pass had fewer than 1,000 victim operations: its p99 is among its few slowest")
    return lines


_CSV_FIELDS: Final = ("architecture", "neighbour", "passes", "seeds")
_METRICS: Final = (("p50_ms", "p50"), ("p99_ms", "p99"), ("throughput_ops_s", "throughput"))


def write_csv(path: Path, rows: Sequence[IsolationRow]) -> None:
    """`isolation.csv`: a row per (architecture, neighbour): for each victim
    metric its mean without and with the neighbour, the ratio and its 95 %
    interval; the neighbour's achieved rate; a `note` (the two-adapter row in
    real mode, with no figures)."""
    cols = [*_CSV_FIELDS]
    for prefix, _ in _METRICS:
        cols += [f"{prefix}_without", f"{prefix}_with", f"{prefix}_ratio", f"{prefix}_ratio_low",
                 f"{prefix}_ratio_high"]
    cols += ["neighbour_ops_s", "victim_errors", "neighbour_errors", "p99_thin_tail", "note"]

    def write(p: Path) -> None:
        with p.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            for r in rows:
                out: dict[str, object] = {"architecture": r.architecture, "neighbour": r.neighbour,
                                          "passes": r.passes, "seeds": " ".join(map(str, r.seeds))}
                for prefix, attr in _METRICS:
                    d = getattr(r, attr).as_dict()
                    out |= {f"{prefix}_without": d["without"], f"{prefix}_with": d["with"],
                            f"{prefix}_ratio": d["ratio"], f"{prefix}_ratio_low": d["ratio_low"],
                            f"{prefix}_ratio_high": d["ratio_high"]}
                out |= {"neighbour_ops_s": round(r.neighbour_ops_s.mean, 3), "victim_errors": r.victim_errors,
                        "neighbour_errors": r.neighbour_errors, "p99_thin_tail": r.thin_tail, "note": r.note}
                w.writerow(out)

    atomic_write(path, write)


def write_runs_csv(path: Path, results: Sequence[PassResult]) -> None:
    """`runs.csv`: every run (architecture, neighbour or `none`, pass, seed)."""

    def write(p: Path) -> None:
        with p.open("w", newline="") as f:
            docs = [r.as_dict() for r in results]
            w = csv.DictWriter(f, fieldnames=list(docs[0]) if docs else ["architecture"])
            w.writeheader()
            w.writerows(docs)

    atomic_write(path, write)


def isolation_figure(rows: Sequence[IsolationRow], *, subtitle: str) -> Figure:
    """Grouped bars: per neighbour (a group), per architecture (a bar), the
    victim's p99 with / without that neighbour, with its 95 % interval, on a
    log axis (a ratio of 2 and one of 1/2 are the same distance from 1), a
    line at 1.0 and each bar labelled with its value."""
    from matplotlib.figure import Figure

    archs = [a for a in ARCHITECTURES if any(r.architecture == a.name for r in rows)]
    neighbours = [n for n in NEIGHBOURS if any(r.neighbour == n for r in rows)]
    fig = Figure(figsize=(9.6, 5.4), dpi=DPI)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(archs))
    lo, hi = _Y_RANGE
    for i, arch in enumerate(archs):
        st = style(arch.config)
        xs: list[float] = []
        ys: list[float] = []
        errs: list[list[float]] = [[], []]
        labels: list[str] = []
        for g, n in enumerate(neighbours):
            row = next((r for r in rows if r.architecture == arch.name and r.neighbour == n), None)
            if row is None or not row.p99.n:
                continue
            est = row.p99
            y = min(max(est.value, lo), hi)
            xs.append(g - 0.4 + width * (i + 0.5))
            ys.append(y)
            low = y if est.low is None else min(max(est.low, lo), hi)
            high = y if est.high is None else min(max(est.high, lo), hi)
            errs[0].append(max(0.0, y - low))
            errs[1].append(max(0.0, high - y))
            labels.append(f"{_sig(est.value)}x" + ("*" if row.thin_tail else ""))
        ax.bar(xs, [y - 1 for y in ys], width * 0.92, bottom=1, color=st.color, hatch=st.hatch,
               edgecolor="white", label=f"{arch.name} ({arch.description})")
        ax.errorbar(xs, ys, yerr=errs, fmt="none", ecolor="0.15", elinewidth=1.2, capsize=4)
        for x, y, text, down, up in zip(xs, ys, labels, errs[0], errs[1], strict=True):
            # Beyond the bar's end and its error bar, so neither hides the number.
            above = y >= 1
            ax.annotate(text, (x, y + up if above else y - down), xytext=(0, 3 if above else -3),
                        textcoords="offset points", ha="center", va="bottom" if above else "top", fontsize=9,
                        fontweight="bold")
    ax.axhline(1.0, color="0.2", linewidth=1.2, linestyle="--", label="1.0 = perfect isolation (no impact)")
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ax.set_xticks(range(len(neighbours)))
    ax.set_xticklabels([f"{n}\n({NEIGHBOURS[n].clients} clients)" for n in neighbours])
    ax.set_xlim(-0.5, len(neighbours) - 0.5)
    ax.set_ylabel("victim p99 with ÷ without neighbour\n(log scale; geometric mean of paired passes, 95% CI)")
    ax.set_title("How much a noisy neighbour slows the victim's p99 (higher = worse isolation)", fontsize=12)
    if any(r.thin_tail for r in rows):
        subtitle += "\n* p99 from fewer than 1,000 victim operations in some pass: among its few slowest"
    fig.text(0.5, 0.005, subtitle, ha="center", va="bottom", fontsize=8.5, color="0.3", wrap=True)
    ax.grid(axis="y", which="major", color="0.88")
    ax.set_axisbelow(True)
    ax.legend(loc="upper right", fontsize=9, framealpha=0.95)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def plot(directory: Path, rows: Sequence[IsolationRow], *, subtitle: str) -> Path:
    """Writes `PLOT_NAME` in `directory`; returns its path."""
    return save_figure(isolation_figure(rows, subtitle=subtitle), directory / PLOT_NAME)


def markdown(
    rows: Sequence[IsolationRow], *, header: str, victim: str, neighbours: Sequence[str], plot_name: str,
    provenance: Sequence[str], knobs: str,
) -> str:
    """`report.md`: what was measured, the ratios (the measure seed 004
    defines) per architecture and neighbour, the plot, the raw means, and
    the run's provenance and configuration."""
    lines = ["# coordsim isolation\n", f"{header}\n", f"**Victim**: {victim}.\n", "**Neighbours** (the same in every architecture):\n"]
    lines += [f"- `{n}`: {NEIGHBOURS[n].description}." for n in neighbours]
    lines.append("\n**Architectures**:\n")
    lines += [f"- `{a.name}`: {a.description}." for a in ARCHITECTURES]
    lines.append("\n## With / without the neighbour (1.0 = perfect isolation)\n")
    lines.append("Ratio of the victim's figure with the neighbour to without it: the geometric mean over "
                 "paired passes (same seed) with its 95 % Student-t interval on the log scale. Latency ratios above 1 and throughput ratios "
                 "below 1 are the neighbour's impact.\n")
    lines.append("| architecture | neighbour | p50 ratio | p99 ratio | throughput ratio | passes |")
    lines.append("|---|---|---:|---:|---:|---:|")
    for r in rows:
        thin = "\\*" if r.thin_tail else ""
        lines.append(f"| {r.architecture} | {r.neighbour} | {ratio_text(r.p50)} | {ratio_text(r.p99)}{thin} | "
                     f"{ratio_text(r.throughput)} | {r.passes} |")
    if any(r.thin_tail for r in rows):
        lines.append("\n\\* some pass had fewer than 1,000 victim operations in its window: that p99 is among "
                     "its few slowest operations.")
    lines.append(f"\n![victim p99 ratio]({plot_name})\n")
    lines.append("## The victim's figures (means over the passes)\n")
    lines.append("| architecture | neighbour | p50 ms without → with | p99 ms without → with | "
                 "ops/s without → with | neighbour ops/s achieved | errors (victim / neighbour) |")
    lines.append("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        lines.append(f"| {r.architecture} | {r.neighbour} | {_pair(r.p50, '.2f')} | {_pair(r.p99, '.2f')} | "
                     f"{_pair(r.throughput, ',.0f')} | {r.neighbour_ops_s.mean:,.0f} | "
                     f"{r.victim_errors} / {r.neighbour_errors} |")
    lines.append("\nA neighbour is closed-loop: the same clients and statements everywhere, so what it "
                 "achieves (above) depends on how fast the architecture serves it. `runs.csv` has every run.\n")
    if provenance:
        lines.append("## Provenance\n")
        lines.extend(provenance)
        lines.append("")
    lines.append("## Configuration\n")
    lines.append(f"```toml\n{knobs}```\n")
    return "\n".join(lines)
