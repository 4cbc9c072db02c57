"""The replay's plots, drawn as `coordsim compare` draws its own (same size,
log-2 concurrency axis with the levels as ticks, one line per configuration,
p50 solid and p99 dashed, one PNG per workload and measure), so the two
outputs read alike. A run without a numeric concurrency is left out of the
concurrency plots (it has no place on that axis) but not of `windows`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = ["concurrency_key", "plot"]

FIGSIZE: Final = (7.2, 4.4)


def concurrency_key(c: Any) -> tuple[int, float, str]:
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
    (by concurrency) and `<workload>-windows.png` (ok operations per second in
    each `window_ms` window since a level began, one line per configuration
    and concurrency). Returns the files written, in that order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sim.compare.report import concurrency_axis, save_figure

    paths: list[Path] = []
    workloads = sorted({str(r["workload"]) for r in metric_rows} | {str(w["workload"]) for w in window_rows})
    for wl in workloads:
        mine = [r for r in metric_rows if r["workload"] == wl and _numeric(r["concurrency"]) is not None]
        configs = sorted({str(r["config"]) for r in mine})
        levels = sorted({_numeric(r["concurrency"]) or 0 for r in mine})
        for kind in ("throughput", "latency") if mine else ():
            fig, ax = plt.subplots(figsize=FIGSIZE, dpi=100)
            for cfg in configs:
                pts = sorted((r for r in mine if r["config"] == cfg), key=lambda r: concurrency_key(r["concurrency"]))
                xs = [_numeric(r["concurrency"]) or 0 for r in pts]
                if kind == "throughput":
                    ax.plot(xs, [r["throughput_ops_s"] or 0.0 for r in pts], marker="o", label=cfg)
                else:
                    p50 = [(x, r["p50_ms"]) for x, r in zip(xs, pts, strict=True) if r["p50_ms"] is not None]
                    p99 = [(x, r["p99_ms"]) for x, r in zip(xs, pts, strict=True) if r["p99_ms"] is not None]
                    (line,) = ax.plot([x for x, _ in p50], [y for _, y in p50], marker="o", label=f"{cfg} p50")
                    ax.plot([x for x, _ in p99], [y for _, y in p99], linestyle="--", marker=".",
                            color=line.get_color(), label=f"{cfg} p99")  # fmt: skip
            concurrency_axis(ax, levels)
            if kind == "throughput":
                ax.set_ylabel("ok operations / s")
                ax.set_ylim(bottom=0)
            else:
                if any(r["p50_ms"] or r["p99_ms"] for r in mine):
                    ax.set_yscale("log")
                ax.set_ylabel("latency (ms)")
            ax.set_title(f"{wl}: {kind} (replayed traces)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small", loc="best")
            paths.append(save_figure(fig, out / f"{wl}-{kind}.png"))
        wins: dict[tuple[str, tuple[int, float, str]], dict[int, int]] = {}
        names: dict[tuple[str, tuple[int, float, str]], str] = {}
        for w in window_rows:
            if w["workload"] != wl:
                continue
            k = (str(w["config"]), concurrency_key(w["concurrency"]))
            names[k] = f"{w['config']} c={w['concurrency']}"
            s = wins.setdefault(k, {})
            s[w["window_ms"]] = s.get(w["window_ms"], 0) + w["ops"]
        if not wins:
            continue
        fig, ax = plt.subplots(figsize=FIGSIZE, dpi=100)
        # A configuration keeps one colour (as in the other plots), each
        # concurrency a line style, so a dozen lines stay apart.
        cfgs = sorted({k[0] for k in wins})
        concs = sorted({k[1] for k in wins})
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        styles = ("-", "--", ":", "-.")
        marks = (".", "o", "^", "s", "x", "d")
        for k in sorted(wins):
            per = wins[k]
            xs = sorted(per)
            i = concs.index(k[1])
            ax.plot(xs, [per[x] * 1000 / window_ms for x in xs], label=names[k],
                    color=colors[cfgs.index(k[0]) % len(colors)], linestyle=styles[i % len(styles)],
                    marker=marks[i % len(marks)], markersize=4)  # fmt: skip
        ax.set_xlabel(f"ms since the level's first operation ({window_ms}-ms windows)")
        ax.set_ylabel("ok operations / s")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{wl}: throughput over time (replayed traces)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small", loc="best")
        paths.append(save_figure(fig, out / f"{wl}-windows.png"))
    return paths
