"""The comparison's outputs: a table per workload, PNG plots (throughput with
its interval vs concurrency per configuration; latency percentiles),
`results.csv` with a fixed column set, and `report.md` linking them — each
number with its uncertainty, sample count, errors and the run's verdict
(DESIGN.md §10). Every file is written under a temporary name and renamed.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

from rich import box
from rich.table import Table

from sim.compare.stats import FAMILY_ALPHA, compare_samples, holm_family
from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import atomic_write

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from sim.compare.runner import LevelRow
    from sim.compare.stats import Verdict

__all__ = [
    "COLUMNS",
    "DEFAULT_REGRESSION_THRESHOLD",
    "BaselineCheck",
    "Regression",
    "compare_baseline",
    "plot",
    "read_results",
    "save_figure",
    "summary",
    "summary_document",
    "tables",
    "write_csv",
    "write_markdown",
]

#: The columns of `results.csv`, in order. Samples are `;`-separated (one per
#: window); errors_by_code is `CODE:n;…`; an empty percentile had too few
#: samples to estimate (`sim.compare.stats.percentile_shown`).
COLUMNS: Final = (
    "workload",
    "config",
    "mode",
    "concurrency",
    "repeats",
    "window_s",
    "ops",
    "errors",
    "error_rate",
    "errors_by_code",
    "throughput_ops_s",
    "throughput_ci95",
    "throughput_samples",
    "latency_samples",
    "p50_ms",
    "p99_ms",
    "p999_ms",
    "p50_samples_ms",
    "p99_samples_ms",
    "oracle_queries_per_op",
    "loop_busy_fraction",
    "loop_messages_per_op",
    "verdict",
)

#: `--baseline`'s default threshold: a cell worse than this fraction (and
#: outside the noise at family-wise 5 %, `sim.compare.stats.holm_family`) is a regression.
DEFAULT_REGRESSION_THRESHOLD: Final = 0.20


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    if isinstance(v, tuple):
        if v and isinstance(v[0], tuple):
            return ";".join(f"{k}:{n}" for k, n in v)
        return ";".join(f"{x:.6g}" for x in v)
    return str(v)


def write_csv(path: Path, rows: Sequence[LevelRow]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([_cell(getattr(r, c)) for c in COLUMNS])
    text = buf.getvalue()
    atomic_write(path, lambda p: p.write_text(text))


def read_results(path: Path) -> list[dict[str, str]]:
    """Reads a `results.csv` (or the one in directory `path`); `InvalidUsage`
    if it is unreadable or not one of ours."""
    p = path / "results.csv" if path.is_dir() else path
    try:
        with p.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InvalidUsage(f"cannot read baseline {p}: {getattr(exc, 'strerror', None) or exc}") from exc
    if not rows or set(COLUMNS) - set(rows[0]):
        raise InvalidUsage(f"{p} is not a coordsim results.csv of this version (missing columns)")
    for r in rows:
        try:
            int(r["concurrency"])
            _samples(r["throughput_samples"])
            _samples(r["p50_samples_ms"])
            _samples(r["p99_samples_ms"])
        except ValueError as exc:
            raise InvalidUsage(f"{p}: a row has a value that is not a number: {exc}") from exc
    return rows


def _samples(text: str) -> list[float]:
    return [float(x) for x in text.split(";") if x]


def _workloads(rows: Sequence[LevelRow]) -> list[str]:
    return list(dict.fromkeys(r.workload for r in rows))


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:,.2f}"


def _tput(r: LevelRow) -> str:
    ci = "" if r.throughput_ci95 is None else f" ± {r.throughput_ci95:,.0f}"
    return f"{r.throughput_ops_s:,.0f}{ci}"


def _errors(r: LevelRow) -> str:
    if not r.errors:
        return "0"
    codes = ", ".join(f"{k} {n}" for k, n in r.errors_by_code)
    return f"{r.errors} ({r.error_rate:.2%}: {codes})"


_HEAD: Final = ("config", "clients", "ops/s (95% CI)", "ops", "errors", "p50 ms", "p99 ms", "p99.9 ms",
                "lat. n", "oracle q/op", "loop busy", "loop msg/op", "verdict")  # fmt: skip


def _cells(r: LevelRow) -> list[str]:
    return [r.config, str(r.concurrency), _tput(r), f"{r.ops:,}", _errors(r), _ms(r.p50_ms), _ms(r.p99_ms),
            _ms(r.p999_ms), f"{r.latency_samples:,}", _fixed(r.oracle_queries_per_op, "{:.2f}"),
            _fixed(r.loop_busy_fraction, "{:.0%}"), _fixed(r.loop_messages_per_op, "{:.2f}"),
            r.verdict or "—"]  # fmt: skip


def _fixed(v: float | None, fmt: str) -> str:
    return "—" if v is None else fmt.format(v)


def tables(rows: Sequence[LevelRow], *, plain: bool = False) -> list[Table]:
    """One table per workload: configuration x concurrency → the measures.
    `plain` (stdout not a terminal): ASCII borders and nothing folded."""
    out = []
    for wl in _workloads(rows):
        t = Table(*_HEAD, title=f"{wl} ({rows[0].mode} mode)", box=box.ASCII if plain else box.HEAVY_HEAD)
        for col in t.columns:
            col.no_wrap = True
            if col.header in ("config", "errors"):
                col.overflow = "fold" if not plain else "ignore"
        for r in rows:
            if r.workload == wl:
                t.add_row(*_cells(r))
        out.append(t)
    return out


@final
@dataclass(frozen=True)
class Peak:
    """A (workload, configuration)'s level of highest mean throughput."""

    workload: str
    config: str
    row: LevelRow
    top_p50_ms: float | None  # p50 at the highest concurrency
    top_concurrency: int
    verdict: str


def summary(rows: Sequence[LevelRow]) -> list[Peak]:
    """Per workload and configuration: the peak-throughput level and the
    median latency at the most clients — the numbers the README's directions
    are about."""
    out = []
    for wl in _workloads(rows):
        for cfg in dict.fromkeys(r.config for r in rows if r.workload == wl):
            mine = [r for r in rows if r.workload == wl and r.config == cfg]
            top = max(mine, key=lambda r: r.concurrency)
            peak = max(mine, key=lambda r: r.throughput_ops_s)
            out.append(Peak(wl, cfg, peak, top.p50_ms, top.concurrency, mine[0].verdict))
    return out


def summary_document(
    rows: Sequence[LevelRow], *, output: str, header: dict[str, Any], anomalies: Sequence[str],
    erring: Sequence[LevelRow], regressions: Sequence[object], exit_code: int,
) -> dict[str, Any]:
    """`summary.json` of a compare run (and `compare --json`): every cell as
    in results.csv, the peaks the tables print, and why the run exits as it
    does. Sample lists stay lists and an empty estimate is null."""

    def cell(r: LevelRow) -> dict[str, Any]:
        d = {c: getattr(r, c) for c in COLUMNS if c != "errors_by_code"}
        d["errors_by_code"] = dict(r.errors_by_code)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    return {
        "generator": "coordsim compare",
        "output": output,
        **header,
        "cells": [cell(r) for r in rows],
        "peaks": [
            {
                "workload": pk.workload, "config": pk.config, "concurrency": pk.row.concurrency,
                "throughput_ops_s": pk.row.throughput_ops_s, "throughput_ci95": pk.row.throughput_ci95,
                "p50_ms_at_most_clients": pk.top_p50_ms, "most_clients": pk.top_concurrency,
                "verdict": pk.verdict,
            }
            for pk in summary(rows)
        ],
        "anomalies": list(anomalies),
        "cells_above_error_threshold": [
            {"workload": r.workload, "config": r.config, "concurrency": r.concurrency, "error_rate": r.error_rate}
            for r in erring
        ],
        "regressions": [str(x) for x in regressions],
        "exit_code": exit_code,
    }


def plot(directory: Path, rows: Sequence[LevelRow]) -> list[Path]:
    """Two PNGs per workload: throughput vs concurrency with its 95 % interval,
    and p50/p99 latency vs concurrency, one line per configuration; a level
    with errors is marked with its error count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for wl in _workloads(rows):
        configs = list(dict.fromkeys(r.config for r in rows if r.workload == wl))
        levels = sorted({r.concurrency for r in rows if r.workload == wl})
        for kind in ("throughput", "latency"):
            fig, ax = plt.subplots(figsize=(7.2, 4.4), dpi=100)
            for cfg in configs:
                mine = sorted((r for r in rows if r.workload == wl and r.config == cfg), key=lambda r: r.concurrency)
                xs = [r.concurrency for r in mine]
                if kind == "throughput":
                    ys = [r.throughput_ops_s for r in mine]
                    bars = ax.errorbar(xs, ys, yerr=[r.throughput_ci95 or 0.0 for r in mine], marker="o",
                                       capsize=3, label=cfg)  # fmt: skip
                    color = bars[0].get_color()
                    for r in mine:
                        if r.errors:
                            ax.annotate(f"{r.errors} err", (r.concurrency, r.throughput_ops_s), fontsize=7,
                                        color=color, textcoords="offset points", xytext=(4, 4))  # fmt: skip
                else:
                    pts50 = [(r.concurrency, r.p50_ms) for r in mine if r.p50_ms is not None]
                    pts99 = [(r.concurrency, r.p99_ms) for r in mine if r.p99_ms is not None]
                    drawn = ax.plot([x for x, _ in pts50], [y for _, y in pts50], marker="o", label=f"{cfg} p50")
                    ax.plot([x for x, _ in pts99], [y for _, y in pts99], linestyle="--", marker=".",
                            color=drawn[0].get_color(), label=f"{cfg} p99")  # fmt: skip
            concurrency_axis(ax, levels)
            if kind == "throughput":
                ax.set_ylabel("operations / s (mean, 95% CI)")
                ax.set_ylim(bottom=0)
            else:
                if any(r.p50_ms is not None or r.p99_ms is not None for r in rows if r.workload == wl):
                    ax.set_yscale("log")  # not with no point to scale: too few samples everywhere
                ax.set_ylabel("latency (ms)")
            ax.set_title(f"{wl}: {kind} ({rows[0].mode} mode)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small", loc="best")
            paths.append(save_figure(fig, directory / f"{wl}-{kind}.png"))
    return paths


def concurrency_axis(ax: Any, levels: Sequence[int]) -> None:
    """A log2 x axis of concurrent clients, ticked and labelled at exactly
    the measured levels (1, 4, 16, … rather than 2⁰, 2², …): the look that
    compare's and replay's plots share."""
    from matplotlib.ticker import FixedFormatter, FixedLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(list(levels)))
    ax.xaxis.set_major_formatter(FixedFormatter([str(c) for c in levels]))
    ax.xaxis.set_minor_locator(FixedLocator([]))
    ax.set_xlabel("concurrent clients")


def save_figure(fig: Any, path: Path) -> Path:
    """Writes a matplotlib figure as PNG (atomically) and closes it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, format="png"))
    plt.close(fig)
    return path


@final
@dataclass(frozen=True)
class Regression:
    """One cell and measure worse than its baseline beyond threshold and noise."""

    workload: str
    config: str
    concurrency: int
    measure: str
    reason: str

    def __str__(self) -> str:
        return f"{self.workload} {self.config} c={self.concurrency} {self.measure}: {self.reason}"


#: What `compare_baseline` checks: (measure, samples column, higher is better).
_CHECKED: Final = (
    ("throughput", "throughput_samples", True),
    ("p50", "p50_samples_ms", False),
    ("p99", "p99_samples_ms", False),
)


@final
@dataclass(frozen=True)
class BaselineCheck:
    """What `compare_baseline` found: the regressions, the number of
    comparisons made, how many of them had one sample on a side (no test: the
    threshold alone decides those), how many were beyond the threshold but
    within the noise, and the threshold and family-wise alpha used."""

    regressions: list[Regression]
    compared: int
    untested: int
    threshold: float
    alpha: float
    within_noise: int = 0

    def line(self) -> str:
        """The pass/fail line `coordsim compare --baseline` prints."""
        rule = (f"beyond {self.threshold:.0%} and significant at family-wise {self.alpha:.0%} "
                "(Welch, one-sided; Holm)")  # fmt: skip
        note = (f"; {self.untested} with one sample on a side, decided by the threshold alone"
                if self.untested else "")  # fmt: skip
        if self.within_noise:
            note += f"; {self.within_noise} more beyond {self.threshold:.0%} but within the noise"
        if self.regressions:
            n = len(self.regressions)
            return f"baseline: {n} regression(s): {n} of {self.compared} comparisons {rule}{note}:"
        return f"baseline: no regression: 0 of {self.compared} comparisons {rule}{note}"


def compare_baseline(
    rows: Sequence[LevelRow],
    baseline: Sequence[dict[str, str]],
    *,
    threshold: float = DEFAULT_REGRESSION_THRESHOLD,
    alpha: float = FAMILY_ALPHA,
) -> BaselineCheck:
    """Cells whose throughput, p50 or p99 is worse than the baseline's by more
    than `threshold` *and* beyond both runs' noise, judged as one family: each
    comparison's Welch p-value (`sim.compare.stats.compare_samples`), Holm-corrected
    over every comparison of the run at family-wise `alpha`
    (`sim.compare.stats.holm_family` says which test and why). A comparison with one
    sample on a side has no p-value and is flagged by the threshold alone.
    A p99 per repetition needs at least 100 operations in it to mean anything,
    so a cell whose repetitions are smaller is compared on throughput and p50
    only."""
    base = {(b["workload"], b["config"], int(b["concurrency"])): b for b in baseline}
    cells: list[tuple[LevelRow, str]] = []
    verdicts: list[Verdict] = []
    untested = 0
    for r in rows:
        b = base.get((r.workload, r.config, r.concurrency))
        if b is None:
            continue
        for measure, column, higher in _CHECKED:
            if measure == "p99" and r.latency_samples < 100 * max(1, r.repeats):
                continue
            new = list(getattr(r, column))
            old = _samples(b[column])
            if not new or not old:
                continue
            cells.append((r, measure))
            untested += len(new) < 2 or len(old) < 2
            verdicts.append(compare_samples(old, new, threshold=threshold, higher_is_better=higher))
    judged = holm_family(verdicts, alpha=alpha)
    found = [Regression(r.workload, r.config, r.concurrency, measure, v.reason)
             for (r, measure), v in zip(cells, judged, strict=True) if v.regressed]  # fmt: skip
    within_noise = sum(v.beyond and not v.regressed for v in judged)
    return BaselineCheck(found, len(verdicts), untested, threshold, alpha, within_noise)


def write_markdown(
    path: Path,
    rows: Sequence[LevelRow],
    plots: Sequence[Path],
    *,
    header: str,
    regressions: Sequence[Regression],
    knobs: str,
    verdicts: Sequence[str] = (),
    ablation: Sequence[str] = (),
    sensitivity: Sequence[str] = (),
) -> None:
    """`report.md`: the summary with intervals and verdicts, each workload's
    table and plots, the effective configuration, and the checkers' findings."""
    lines = [f"# coordsim compare\n\n{header}\n", "## Summary\n"]
    lines.append("| workload | config | peak ops/s (95% CI) | at clients | errors | p50 ms at most clients | verdict |")
    lines.append("|---|---|---:|---:|---:|---:|---|")
    for pk in summary(rows):
        lines.append(f"| {pk.workload} | {pk.config} | {_tput(pk.row)} | {pk.row.concurrency} | {_errors(pk.row)} | "
                     f"{_ms(pk.top_p50_ms)} | {pk.verdict or '—'} |")  # fmt: skip
    if verdicts:
        lines.append("\n## Correctness\n")
        lines.extend(f"- {v}" for v in verdicts)
    if ablation:
        lines.append("\n## Ablation: one mechanism at a time\n")
        lines.append("Each step changes one mechanism of the configuration before it; its share is of the whole "
                     "difference between the first configuration and the last (steps interact, so shares "
                     "depend on the order).")  # fmt: skip
        lines.extend(ablation)
    if sensitivity:
        lines.append("\n## Sensitivity to the unmeasured costs\n")
        lines.append("Each family of costs no measurement backs (sim/model/unmeasured.py) scaled x0.5 and x2, all else "
                     "equal. A conclusion is one configuration's peak throughput above another's outside both "
                     "95 % intervals; it survives if every rerun decides the same.\n")  # fmt: skip
        lines.extend(sensitivity)
    if regressions:
        lines.append("\n## Regressions against the baseline\n")
        lines.extend(f"- {x}" for x in regressions)
    for wl in _workloads(rows):
        lines.append(f"\n## {wl}\n")
        for p in plots:
            if p.name.startswith(f"{wl}-"):
                lines.append(f"![{p.stem}]({p.name})")
        lines.append("")
        lines.append("| " + " | ".join(_HEAD) + " |")
        lines.append("|---|" + "---:|" * (len(_HEAD) - 2) + "---|")
        for r in rows:
            if r.workload == wl:
                lines.append("| " + " | ".join(_cells(r)) + " |")
    lines.append("\n## Effective configuration\n")
    lines.append("Every knob of every configuration compared, as the run used it "
                 "(also in `config.toml`):\n")  # fmt: skip
    lines.append("```toml\n" + knobs.rstrip() + "\n```")
    lines.append("\nMachine-readable: [results.csv](results.csv); traces: `traces/<workload>/<config>/`.\n")
    text = "\n".join(lines)
    atomic_write(path, lambda p: p.write_text(text))
