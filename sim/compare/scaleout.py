"""`compare --adapters 1,2,4`: the scale-out dimension of a sweep (issue 36).

Each decoupled configuration is measured once per adapter count, as a variant
of itself named `<config>-<N>-adapters` (the plain name where N is its own
count), so every other part of a comparison — passes, conclusions, report,
`results.csv`'s `adapters` column — treats it as a configuration of its own.
Event-loop configurations have one loop by design and stay as they are.

Adding an adapter adds its cores. So that a reader can tell "more processes"
from "more cores", each count N above the smallest also gets one adapter
with N times the cores, `<config>-1-adapter-<K>-cores` (K the total). The
report's scale-out section (`markdown_lines`, `plot_scaleout`) shows both
against N at every client count, and says where scaling stops and what the
cells show about why.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

from coordinator.config import Architecture
from sim.load.limits import MAX_ADAPTERS, MAX_CORES, MAX_REAL_ADAPTERS, check_int
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from matplotlib.figure import Figure

    from sim.compare.rows import LevelRow
    from sim.load.run_config import RunConfig

__all__ = [
    "adapter_variant_name",
    "equal_cores_variant_name",
    "markdown_lines",
    "parse_adapters",
    "plot_scaleout",
    "scaleout_groups",
    "with_adapters",
]

#: A step up in adapters that gains less than this (or whose interval says
#: no gain) is where scaling stops.
MIN_GAIN: Final = 1.10
#: Cores busier than this are the bottleneck's first suspect.
BUSY: Final = 0.8


def parse_adapters(spec: str) -> tuple[int, ...]:
    """`--adapters N,N,…` as distinct counts in the order given; `InvalidUsage`
    for anything else."""
    counts: list[int] = []
    for part in spec.split(","):
        try:
            n = int(part.strip())
        except ValueError:
            raise InvalidUsage(f"--adapters must be comma-separated integers, got {spec!r}") from None
        check_int("--adapters", n, low=1, high=MAX_ADAPTERS, unit="adapters")
        if n not in counts:
            counts.append(n)
    return tuple(counts)


def adapter_variant_name(config_name: str, adapters: int) -> str:
    return f"{config_name}-{adapters}-adapters"


def equal_cores_variant_name(config_name: str, cores: int) -> str:
    """One adapter with `cores` cores: the equal-cores partner of N adapters."""
    return f"{config_name}-1-adapter-{cores}-cores"


def with_adapters(cfg: RunConfig, counts: tuple[int, ...]) -> RunConfig:
    """`cfg` with each decoupled configuration replaced by one per count in
    `counts` (see the module docstring).

    Raises:
        InvalidUsage: real mode with a count above 1 (a later increment), or
            no decoupled configuration to sweep while a count above 1 is asked.
    """
    if cfg.mode == "real" and max(counts) > MAX_REAL_ADAPTERS:
        raise InvalidUsage(f"real mode runs at most {MAX_REAL_ADAPTERS} adapters (each is an OS process), got {max(counts)}")
    if "adapters" in cfg.overrides:
        raise InvalidUsage("--adapters sweeps what [overrides] adapters would fix: use one of them")
    names: list[str] = []
    variants: dict[str, Any] = dict(cfg.variants)
    swept = False
    for name in cfg.configurations:
        base = cfg.coordinator(name)
        if base.architecture is not Architecture.DECOUPLED:
            names.append(name)
            continue
        swept = True
        own = dict(cfg.variants.get(name, {"base": name}))
        for n in counts:
            if n == base.adapters:
                names.append(name)
                continue
            vname = adapter_variant_name(name, n)
            variants[vname] = {**own, "adapters": n}
            names.append(vname)
        least = min(counts)
        for n in counts:
            total = n * base.cores
            if n > least and n * base.adapters != least * base.adapters and total <= MAX_CORES:
                # The same cores as n adapters, in one process.
                ename = equal_cores_variant_name(name, total)
                variants[ename] = {**own, "adapters": 1, "cores": total}
                names.append(ename)
    if not swept and any(n > 1 for n in counts):
        raise InvalidUsage(
            "--adapters sweeps decoupled configurations; none is among those compared "
            "(an event loop is single by design)"
        )
    return cfg.with_overrides(configurations=list(dict.fromkeys(names)), variants=variants)


# --- the report's scale-out section ---------------------------------------------------

_ADAPTERS: Final = re.compile(r"^(?P<base>.+)-(?P<n>\d+)-adapters$")
_EQUAL: Final = re.compile(r"^(?P<base>.+)-1-adapter-(?P<k>\d+)-cores$")


@final
@dataclass(frozen=True)
class Group:
    """One workload's scale-out of one base configuration: its rows by
    adapter count, and the equal-cores single adapters by total cores."""

    workload: str
    base: str
    by_adapters: dict[int, list[LevelRow]]
    by_cores: dict[int, list[LevelRow]]


def scaleout_groups(rows: Sequence[LevelRow]) -> list[Group]:
    """The groups with at least two adapter counts (`with_adapters`' names)."""
    groups: dict[tuple[str, str], Group] = {}
    for r in rows:
        if (m := _EQUAL.match(r.config)) is not None:
            g = groups.setdefault((r.workload, m["base"]), Group(r.workload, m["base"], {}, {}))
            g.by_cores.setdefault(r.cores, []).append(r)
            continue
        base = m["base"] if (m := _ADAPTERS.match(r.config)) is not None else r.config
        g = groups.setdefault((r.workload, base), Group(r.workload, base, {}, {}))
        g.by_adapters.setdefault(r.adapters, []).append(r)
    return [g for g in groups.values() if len(g.by_adapters) >= 2]


def _at(rows: Sequence[LevelRow], clients: int) -> LevelRow | None:
    return next((r for r in rows if r.concurrency == clients), None)


def _cell(r: LevelRow | None) -> str:
    if r is None:
        return "—"
    ci = f" ± {r.throughput_ci95:,.0f}" if r.throughput_ci95 else ""
    p50 = f", p50 {r.p50_ms:.3g} ms" if r.p50_ms is not None else ""
    flag = "" if r.concludable else " (!)"
    return f"{r.throughput_ops_s:,.0f}{ci}{p50}{flag}"


def _gain(a: LevelRow, b: LevelRow) -> tuple[float, bool]:
    """b's throughput over a's, and whether b is clearly above a (its interval
    above a's, and at least `MIN_GAIN`)."""
    ratio = b.throughput_ops_s / a.throughput_ops_s if a.throughput_ops_s > 0 else math.inf
    lo_b = b.throughput_ops_s - (b.throughput_ci95 or 0.0)
    hi_a = a.throughput_ops_s + (a.throughput_ci95 or 0.0)
    return ratio, ratio >= MIN_GAIN and lo_b > hi_a


def _why(r: LevelRow, equal: LevelRow | None) -> str:
    """What the cell at the stopping point shows about its limit."""
    parts: list[str] = []
    if r.host_bound:
        parts.append(f"the host's cores ({r.host_bound})")
    if r.loop_busy_fraction is not None and r.loop_busy_fraction >= BUSY:
        parts.append(f"the adapters' cores ({r.loop_busy_fraction:.0%} busy)")
    if r.lost_races_per_commit:
        parts.append(f"append races on the shared shards ({r.lost_races_per_commit:.2f} retries per group commit)")
    if not parts:
        busy = f"{r.loop_busy_fraction:.0%}" if r.loop_busy_fraction is not None else "unknown"
        oracle = f"{r.oracle_queries_per_op:.2f}" if r.oracle_queries_per_op is not None else "unknown"
        parts.append(f"something shared, not the adapters' cores ({busy} busy): the oracle "
                     f"({oracle} queries per statement), the catalog or persist")
    if equal is not None and equal.throughput_ops_s > 0:
        parts.append(f"one adapter with the same {equal.cores} cores does {equal.throughput_ops_s / r.throughput_ops_s:.2f}x")
    return "; ".join(parts)


def markdown_lines(rows: Sequence[LevelRow]) -> list[str]:
    """The report's `## Scale-out` section, [] without an adapter sweep."""
    lines: list[str] = []
    for g in scaleout_groups(rows):
        if not lines:
            lines += ["\n## Scale-out: adapters\n",
                      "Throughput (95 % CI) and p50 against serving processes, at each client count. "
                      "A row `1 (cores of N)` is one adapter with the cores of N adapters, so that more "
                      "processes can be told from more cores. (!): not steady or host-bound, no "
                      "conclusion rests on it.\n"]
        levels = sorted({r.concurrency for rs in g.by_adapters.values() for r in rs})
        lines.append(f"### {g.workload}: {g.base}\n")
        lines.append("| adapters | cores | " + " | ".join(f"{c} clients" for c in levels) + " |")
        lines.append("|---|---:|" + "---:|" * len(levels))
        least = min(g.by_adapters)
        per = max(1, g.by_adapters[least][0].cores // least)
        entries = [(f"{n}", rs) for n, rs in sorted(g.by_adapters.items())]
        entries += [(f"1 (cores of {k // per})", rs) for k, rs in sorted(g.by_cores.items())]
        for label, rs in entries:
            lines.append(f"| {label} | {rs[0].cores} | " + " | ".join(_cell(_at(rs, c)) for c in levels) + " |")
        lines.append("")
        lines.extend(f"- {s}" for s in _scaling_sentences(g, levels))
        lines.append("")
    return lines


def _scaling_sentences(g: Group, levels: Sequence[int]) -> list[str]:
    """Per client count: how far throughput scaled, where it stopped and why."""
    out: list[str] = []
    counts = sorted(g.by_adapters)
    for c in levels:
        cells = [(n, _at(g.by_adapters[n], c)) for n in counts]
        known = [(n, r) for n, r in cells if r is not None]
        if len(known) < 2:
            continue
        (n0, r0), (n_last, r_last) = known[0], known[-1]
        total = r_last.throughput_ops_s / r0.throughput_ops_s if r0.throughput_ops_s > 0 else math.inf
        stop = next(((a, b) for a, b in itertools.pairwise(known) if not _gain(a[1], b[1])[1]), None)
        if stop is None:
            out.append(f"{c} clients: {n0} → {n_last} adapters gives {total:.2f}x; every step gained "
                       f"≥ {MIN_GAIN:.2f}x beyond its interval")
            continue
        (na, ra), (nb, rb) = stop
        equal = _at(g.by_cores.get(rb.cores, []), c)
        out.append(f"{c} clients: {n0} → {n_last} adapters gives {total:.2f}x; scaling stops at {na} → {nb} "
                   f"({_gain(ra, rb)[0]:.2f}x): {_why(rb, equal)}")
    return out


def scaleout_figure(g: Group) -> Figure:
    """Throughput against adapters (log2 x), one line per client count:
    solid for N adapters, dashed for one adapter with their cores (drawn at
    the N it matches); 95 % intervals; hollow markers for cells no conclusion
    rests on."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedFormatter, FixedLocator, StrMethodFormatter

    fig = Figure(figsize=(7.5, 4.5), dpi=110)
    ax = fig.add_subplot()
    counts = sorted(g.by_adapters)
    per_adapter = g.by_adapters[counts[0]][0].cores // max(1, counts[0])
    levels = sorted({r.concurrency for rs in g.by_adapters.values() for r in rs})
    colors = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
    for i, c in enumerate(levels):
        color = colors[i % len(colors)]
        for series, dashed in ((g.by_adapters, False), (g.by_cores, True)):
            pts = []
            for key, rs in sorted(series.items()):
                r = _at(rs, c)
                if r is not None:
                    x = key if not dashed else key / max(1, per_adapter)
                    pts.append((x, r))
            if not pts:
                continue
            xs, ys = [x for x, _ in pts], [r.throughput_ops_s for _, r in pts]
            ax.plot(xs, ys, color=color, linestyle="--" if dashed else "-", linewidth=1.5,
                    label=f"{c} clients" + (", 1 adapter with their cores" if dashed else ""))
            ax.errorbar(xs, ys, yerr=[r.throughput_ci95 or 0.0 for _, r in pts], fmt="none", ecolor=color, capsize=3)
            for x, (_, r) in zip(xs, pts, strict=True):
                ax.plot([x], [r.throughput_ops_s], marker="s" if dashed else "o", color=color,
                        markerfacecolor="white" if not r.concludable else color, markersize=6)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(counts))
    ax.xaxis.set_major_formatter(FixedFormatter([str(n) for n in counts]))
    ax.xaxis.set_minor_locator(FixedLocator([]))
    ax.set_xlabel("serving processes (adapters); dashed: one adapter with the same cores")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_ylabel("operations / s (mean, 95% CI)")
    mode = g.by_adapters[counts[0]][0].mode
    ax.set_title(f"{g.workload}: scale-out of {g.base} ({mode} mode)")
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if any(not r.concludable for rs in (*g.by_adapters.values(), *g.by_cores.values()) for r in rs):
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], linestyle="none", marker="o", color="grey", markerfacecolor="white"))
        labels.append("hollow: not steady or host-bound")
    ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return fig


def plot_scaleout(directory: Path, rows: Sequence[LevelRow]) -> list[Path]:
    """`<workload>-scaleout.png` per group (several bases: `-<base>` added)."""
    from sim.compare.plots import save_figure

    groups = scaleout_groups(rows)
    paths = []
    for g in groups:
        several = sum(1 for h in groups if h.workload == g.workload) > 1
        name = f"{g.workload}-scaleout" + (f"-{g.base}" if several else "") + ".png"
        paths.append(save_figure(scaleout_figure(g), directory / name))
    return paths
