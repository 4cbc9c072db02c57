"""The comparison's outputs: a rich table per workload, PNG plots (throughput vs
concurrency per configuration; latency percentiles), `results.csv` with a fixed
column set, and `report.md` linking them. Every file is written under a
temporary name and renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, Any, Final

from rich.table import Table

from persist.location import InvalidUsage
from sim.outputs import atomic_write

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from sim.runner import LevelRow

__all__ = [
    "COLUMNS",
    "REGRESSION_THRESHOLD",
    "compare_baseline",
    "plot",
    "read_results",
    "summary",
    "tables",
    "write_csv",
    "write_markdown",
]

#: The columns of `results.csv`, in order.
COLUMNS: Final = (
    "workload",
    "config",
    "mode",
    "concurrency",
    "ops",
    "elapsed_s",
    "throughput_ops_s",
    "p50_ms",
    "p99_ms",
    "p999_ms",
    "oracle_queries_per_op",
    "loop_busy_fraction",
)

#: `--baseline`: throughput more than this fraction below the baseline is flagged.
REGRESSION_THRESHOLD: Final = 0.20


def _fmt(col: str, v: object) -> str:
    if isinstance(v, float):
        if col == "elapsed_s":
            return f"{v:.6f}"
        return f"{v:.4f}"
    return str(v)


def write_csv(path: Path, rows: Sequence[LevelRow]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([_fmt(c, getattr(r, c)) for c in COLUMNS])
    text = buf.getvalue()
    atomic_write(path, lambda p: p.write_text(text))


def read_results(path: Path) -> list[dict[str, str]]:
    """Reads a `results.csv` (or the one in directory `path`)."""
    p = path / "results.csv" if path.is_dir() else path
    try:
        with p.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise InvalidUsage(f"cannot read baseline {p}: {exc.strerror or exc}") from exc
    if rows and set(COLUMNS) - set(rows[0]):
        raise InvalidUsage(f"{p} is not a coordsim results.csv (columns {sorted(rows[0])})")
    return rows


def _workloads(rows: Sequence[LevelRow]) -> list[str]:
    return list(dict.fromkeys(r.workload for r in rows))


def tables(rows: Sequence[LevelRow]) -> list[Table]:
    """One table per workload: configuration x concurrency → the measures."""
    out = []
    for wl in _workloads(rows):
        t = Table(
            "config", "clients", "ops", "ops/s", "p50 ms", "p99 ms", "p99.9 ms", "oracle q/op", "loop busy",
            title=f"{wl} ({rows[0].mode} mode)",
        )
        for r in rows:
            if r.workload != wl:
                continue
            t.add_row(
                r.config,
                str(r.concurrency),
                str(r.ops) + (f" ({r.errors} err)" if r.errors else ""),
                f"{r.throughput_ops_s:,.0f}",
                f"{r.p50_ms:.2f}",
                f"{r.p99_ms:.2f}",
                f"{r.p999_ms:.2f}",
                f"{r.oracle_queries_per_op:.2f}",
                f"{r.loop_busy_fraction:.0%}",
            )
        out.append(t)
    return out


def summary(rows: Sequence[LevelRow]) -> list[tuple[str, str, float, float]]:
    """Per workload and configuration: (workload, config, peak throughput, p50 at
    the highest concurrency) — the numbers the README's directions are about."""
    out = []
    for wl in _workloads(rows):
        for cfg in dict.fromkeys(r.config for r in rows if r.workload == wl):
            mine = [r for r in rows if r.workload == wl and r.config == cfg]
            top = max(mine, key=lambda r: r.concurrency)
            out.append((wl, cfg, max(r.throughput_ops_s for r in mine), top.p50_ms))
    return out


def plot(directory: Path, rows: Sequence[LevelRow]) -> list[Path]:
    """Two PNGs per workload: throughput vs concurrency, and p50/p99 latency vs
    concurrency, one line per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for wl in _workloads(rows):
        configs = list(dict.fromkeys(r.config for r in rows if r.workload == wl))
        for kind in ("throughput", "latency"):
            fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
            for cfg in configs:
                mine = sorted((r for r in rows if r.workload == wl and r.config == cfg), key=lambda r: r.concurrency)
                xs = [r.concurrency for r in mine]
                if kind == "throughput":
                    ax.plot(xs, [r.throughput_ops_s for r in mine], marker="o", label=cfg)
                else:
                    line = ax.plot(xs, [r.p50_ms for r in mine], marker="o", label=f"{cfg} p50")
                    ax.plot(xs, [r.p99_ms for r in mine], linestyle="--", color=line[0].get_color(), label=f"{cfg} p99")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrent clients")
            if kind == "throughput":
                ax.set_ylabel("operations / s")
                ax.set_ylim(bottom=0)
            else:
                ax.set_yscale("log")
                ax.set_ylabel("latency (ms)")
            ax.set_title(f"{wl}: {kind} ({rows[0].mode} mode)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small")
            fig.tight_layout()
            path = directory / f"{wl}-{kind}.png"
            def save(p: Path, fig: Any = fig) -> None:
                fig.savefig(p, format="png")

            atomic_write(path, save)
            plt.close(fig)
            paths.append(path)
    return paths


def compare_baseline(rows: Sequence[LevelRow], baseline: Sequence[dict[str, str]]) -> list[str]:
    """Workload/configuration/concurrency points whose throughput is more than
    `REGRESSION_THRESHOLD` below the baseline's, as one line each."""
    base = {
        (b["workload"], b["config"], int(b["concurrency"])): float(b["throughput_ops_s"]) for b in baseline
    }
    out = []
    for r in rows:
        b = base.get((r.workload, r.config, r.concurrency))
        if b and r.throughput_ops_s < b * (1 - REGRESSION_THRESHOLD):
            out.append(
                f"{r.workload} {r.config} c={r.concurrency}: {r.throughput_ops_s:,.0f} ops/s "
                f"vs baseline {b:,.0f} ({r.throughput_ops_s / b - 1:+.0%})"
            )
    return out


def write_markdown(
    path: Path, rows: Sequence[LevelRow], plots: Sequence[Path], *, header: str, regressions: Sequence[str]
) -> None:
    lines = [f"# coordsim compare\n\n{header}\n", "## Summary\n"]
    lines.append("| workload | config | peak ops/s | p50 ms at most clients |")
    lines.append("|---|---|---:|---:|")
    for wl, cfg, peak, p50 in summary(rows):
        lines.append(f"| {wl} | {cfg} | {peak:,.0f} | {p50:.2f} |")
    if regressions:
        lines.append("\n## Regressions against the baseline (> 20 % slower)\n")
        lines.extend(f"- {x}" for x in regressions)
    for wl in _workloads(rows):
        lines.append(f"\n## {wl}\n")
        for p in plots:
            if p.name.startswith(f"{wl}-"):
                lines.append(f"![{p.stem}]({p.name})")
        lines.append("")
        lines.append("| config | clients | ops | ops/s | p50 ms | p99 ms | p99.9 ms | oracle q/op | loop busy |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if r.workload == wl:
                lines.append(
                    f"| {r.config} | {r.concurrency} | {r.ops} | {r.throughput_ops_s:,.0f} | {r.p50_ms:.2f} | "
                    f"{r.p99_ms:.2f} | {r.p999_ms:.2f} | {r.oracle_queries_per_op:.2f} | {r.loop_busy_fraction:.0%} |"
                )
    lines.append("\nMachine-readable: [results.csv](results.csv); traces: `traces/<workload>/<config>/`.\n")
    text = "\n".join(lines)
    atomic_write(path, lambda p: p.write_text(text))
