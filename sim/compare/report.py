"""The comparison's files: `results.csv` with a fixed column set,
`summary.json`, and `report.md` (its conclusions, tables, the plots of
`sim.compare.plots`, the configuration and the provenance), each number
with its uncertainty, sample count, errors, steadiness and the run's verdict
(DESIGN.md §10); and the `--baseline` regression check. Terminal tables are
`sim.compare.tables`. Every file is written under a temporary name and
renamed.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

from sim.compare.stats import FAMILY_ALPHA, compare_samples, holm_family
from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import atomic_write

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from sim.compare.rows import LevelRow
    from sim.compare.stats import Verdict
    from sim.runtime.backend_stats import KindStats

__all__ = [
    "COLUMNS",
    "DEFAULT_REGRESSION_THRESHOLD",
    "BaselineCheck",
    "Regression",
    "compare_baseline",
    "errors_text",
    "fixed_text",
    "read_results",
    "summary",
    "summary_document",
    "tput_text",
    "write_csv",
    "write_markdown",
]

#: The columns of `results.csv`, in order. Samples are `;`-separated (one per
#: window); errors_by_code is `CODE:n;…`; an empty percentile had too few
#: samples to estimate (`sim.compare.stats.percentile_shown`).
COLUMNS: Final = (
    "workload",
    "config",
    "adapters",  # issue 36: serving processes of the configuration
    "cores",  # modeled cores of the whole configuration (every adapter's)
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
    "lost_races_per_commit",
    "group_commits_per_op",
    "verdict",
    # issue 33: every operation started in the window, steady state, the host
    "mean_ms",
    "stddev_ms",
    "min_ms",
    "max_ms",
    "censored",
    "littles_law_ratio",
    "steady",
    "steady_note",
    "host_bound",
    "coordsim_cpu",
    "loop_lag_ms",
    "postgres_cpu_cores",
    "host_cpu_cores",
    "offered_ops_s",
    "saturated",
    "mean_samples_ms",
    "window_samples_s",
    "littles_law_samples",
    "first_half_samples",
    "second_half_samples",
    # issue 35: real mode's isolation level, retries and backend round trips
    "pg_isolation",
    "retries_40001",
    "backend_retries",
    *(f"{name}_{measure}" for name in ("oracle_rtt", "oracle_read_ts", "oracle_write_ts", "oracle_apply_write",
                                       "oracle_peek_write_ts", "confirm_leadership", "stash", "catalog", "consensus")
      for measure in ("n", "p50_ms", "p99_ms")),
    "backend_ms",
    "handler_cpu_us",
)

#: The backend columns of `COLUMNS` that name a `LevelRow.backend` entry:
#: one kind, or a group (`<prefix>*`, `sim.compare.rows.BACKEND_GROUPS`).
_BACKEND_COLUMNS: Final = {
    "oracle_rtt": "oracle.pg.*",
    "oracle_read_ts": "oracle.pg.read_ts",
    "oracle_write_ts": "oracle.pg.write_ts",
    "oracle_apply_write": "oracle.pg.apply_write",
    "oracle_peek_write_ts": "oracle.pg.peek_write_ts",
    "confirm_leadership": "stash.confirm_leadership",
    "stash": "stash.*",
    "catalog": "catalog.stash.*",
    "consensus": "consensus.*",
}

#: What `read_results` needs of a baseline (an older results.csv has these
#: and not the columns added since; `compare_baseline` reads no others).
_BASELINE_COLUMNS: Final = ("workload", "config", "concurrency", "throughput_samples", "p50_samples_ms",
                            "p99_samples_ms")

#: `--baseline`'s default threshold: a cell worse than this fraction (and
#: outside the noise at family-wise 5 %, `sim.compare.stats.holm_family`) is a regression.
DEFAULT_REGRESSION_THRESHOLD: Final = 0.20


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    if isinstance(v, tuple):
        if v and isinstance(v[0], tuple):
            return ";".join(f"{k}:{n}" for k, n in v)
        return ";".join(f"{x:.6g}" for x in v)
    return str(v)


def column(r: LevelRow, name: str) -> object:
    """The value of `results.csv` column `name` for `r`: a field of the row,
    or a backend figure (None when not recorded: virtual mode, or no such
    round trip in the cell)."""
    for suffix in ("_n", "_p50_ms", "_p99_ms"):
        stem = name.removesuffix(suffix)
        if stem != name and stem in _BACKEND_COLUMNS:
            k = _backend(r, stem)
            if k is None:
                return None
            return {"_n": k.count, "_p50_ms": k.p50_ms, "_p99_ms": k.p99_ms}[suffix]
    if name == "backend_ms":
        return backend_text(r)
    if name == "handler_cpu_us":
        # Real mode: the coordinator's Python CPU per handler, `kind=calls/mean µs`.
        return ";".join(f"{h.kind}={h.count}/{h.mean_us:.4g}" for h in r.handler_cpu)
    return getattr(r, name)


def _backend(r: LevelRow, column_stem: str) -> KindStats | None:
    kind = _BACKEND_COLUMNS[column_stem]
    return next((k for k in r.backend if k.kind == kind), None)


def backend_text(r: LevelRow) -> str:
    """Every backend kind of `r`, `kind=count/p50/p99 ms` (`/40001xN` when
    retried so), `;`-separated; "" when nothing was recorded."""
    parts = []
    for k in r.backend:
        if k.kind.endswith("*"):
            continue
        p50 = "" if k.p50_ms is None else f"{k.p50_ms:.4g}"
        p99 = "" if k.p99_ms is None else f"{k.p99_ms:.4g}"
        extra = f"/40001x{k.retries_40001}" if k.retries_40001 else ""
        parts.append(f"{k.kind}={k.count}/{p50}/{p99}{extra}")
    return ";".join(parts)


def write_csv(path: Path, rows: Sequence[LevelRow]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([_cell(column(r, c)) for c in COLUMNS])
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
    if not rows or set(_BASELINE_COLUMNS) - set(rows[0]):
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


def tput_text(r: LevelRow) -> str:
    """Mean throughput ± its 95 % half-width, as every table prints it."""
    ci = "" if r.throughput_ci95 is None else f" ± {r.throughput_ci95:,.0f}"
    return f"{r.throughput_ops_s:,.0f}{ci}"


def errors_text(r: LevelRow) -> str:
    """"0", or the count with its rate and SQLSTATEs; in real mode followed by
    the backend's serialization failures that were retried (`+ 40001 retried N`),
    which clients never saw but which SERIALIZABLE cost."""
    retried = f" + 40001 retried {r.retries_40001:,}" if r.retries_40001 else ""
    if not r.errors:
        return f"0{retried}"
    codes = ", ".join(f"{k} {n}" for k, n in r.errors_by_code)
    return f"{r.errors:,} ({r.error_rate:.2%}: {codes}){retried}"


def errors_short(r: LevelRow) -> str:
    """The errors count, and the 40001 retries beside it in real mode (`0 / 12 retried`)."""
    return f"{r.errors:,}" + (f" / {r.retries_40001:,} retried" if r.retries_40001 else "")


def isolation_line(rows: Sequence[LevelRow]) -> str | None:
    """One line naming the isolation level of a real-mode run and its 40001
    retries (read committed labelled as not CockroachDB-like); None in virtual mode."""
    levels = sorted({r.pg_isolation for r in rows if r.pg_isolation})
    if not levels:
        return None
    from sim.runtime.pg import Isolation

    names = "; ".join(Isolation(v).label() for v in levels)
    retried = sum(r.retries_40001 or 0 for r in rows)
    total = sum(r.backend_retries or 0 for r in rows)
    return (f"Postgres isolation: {names}; 40001 serialization failures retried: {retried:,} "
            f"(all backend retries: {total:,})")


_HEAD: Final = ("config", "clients", "ops/s (95% CI)", "ops", "errors", "p50 ms", "p99 ms", "p99.9 ms",
                "mean ± sd ms", "lat. n", "censored", "window s", "Little", "steady", "oracle q/op", "loop busy",
                "loop msg/op", "verdict")


def _state(r: LevelRow) -> str:
    """"yes", or why the cell is left out of conclusions."""
    if r.concludable:
        return "yes"
    why = [x for x in (r.steady_note if not r.steady else "", f"host-bound: {r.host_bound}" if r.host_bound else "")
           if x]
    return "**no**: " + "; ".join(why)


def _mean_sd(r: LevelRow) -> str:
    if r.mean_ms is None:
        return "—"
    return f"{r.mean_ms:,.2f} ± {r.stddev_ms or 0.0:,.2f}"


def _cells(r: LevelRow) -> list[str]:
    return [r.config, str(r.concurrency), tput_text(r), f"{r.ops:,}", errors_text(r), _ms(r.p50_ms), _ms(r.p99_ms),
            _ms(r.p999_ms), _mean_sd(r), f"{r.latency_samples:,}", f"{r.censored:,}", f"{r.window_s:.3g}",
            fixed_text(r.littles_law_ratio, "{:.2f}"), _state(r), fixed_text(r.oracle_queries_per_op, "{:.2f}"),
            fixed_text(r.loop_busy_fraction, "{:.0%}"), fixed_text(r.loop_messages_per_op, "{:.2f}"),
            r.verdict or "—"]


def fixed_text(v: float | None, fmt: str) -> str:
    """`fmt` of `v`, or "—" when it was not measured."""
    return "—" if v is None else fmt.format(v)


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
    top: LevelRow | None = None  # the level of the most clients


def summary(rows: Sequence[LevelRow]) -> list[Peak]:
    """Per workload and configuration: the peak-throughput level (among the
    steady, not host-bound levels when there are any: a peak no conclusion
    may rest on is no peak) and the latency at the most clients — the
    numbers the README's directions are about."""
    out = []
    for wl in _workloads(rows):
        for cfg in dict.fromkeys(r.config for r in rows if r.workload == wl):
            mine = [r for r in rows if r.workload == wl and r.config == cfg]
            top = max(mine, key=lambda r: r.concurrency)
            peak = max([r for r in mine if r.concludable] or mine, key=lambda r: r.throughput_ops_s)
            out.append(Peak(wl, cfg, peak, top.p50_ms, top.concurrency, mine[0].verdict, top))
    return out


def _flag(r: LevelRow) -> str:
    """" (not steady)" / " (host-bound)" after a number no conclusion rests on."""
    if r.host_bound:
        return " (host-bound)"
    return "" if r.steady else " (not steady)"


def summary_document(
    rows: Sequence[LevelRow], *, output: str, header: dict[str, Any], anomalies: Sequence[str],
    erring: Sequence[LevelRow], regressions: Sequence[object], exit_code: int,
    conclusions: dict[str, Any] | None = None, provenance: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`summary.json` of a compare run (and `compare --json`): every cell as
    in results.csv, the peaks the tables print, and why the run exits as it
    does. Sample lists stay lists and an empty estimate is null."""

    def cell(r: LevelRow) -> dict[str, Any]:
        d = {c: column(r, c) for c in COLUMNS if c != "errors_by_code"}
        d["errors_by_code"] = dict(r.errors_by_code)
        # Every kind (and group) in full: count, p50, p99, retries, 40001 retries.
        d["backend"] = {k.kind: k.as_dict() for k in r.backend}
        # Real mode: the coordinator's Python CPU per handler kind (calls, total ms, mean µs).
        d["handler_cpu"] = {h.kind: h.as_dict() for h in r.handler_cpu}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    line = isolation_line(rows)
    return {
        "generator": "coordsim compare",
        "output": output,
        "pg_isolation": next((r.pg_isolation for r in rows if r.pg_isolation), None),
        "pg_isolation_note": line,
        "retries_40001": sum(r.retries_40001 or 0 for r in rows) if line else None,
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
        "conclusions": conclusions,
        "provenance": provenance,
    }


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
                "(Welch, one-sided; Holm)")
        note = (f"; {self.untested} with one sample on a side, decided by the threshold alone"
                if self.untested else "")
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
             for (r, measure), v in zip(cells, judged, strict=True) if v.regressed]
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
    conclusions: Sequence[str] = (),
    provenance: Sequence[str] = (),
    warning: str | None = None,
) -> None:
    """`report.md`: a busy-host warning first when there is one, the
    conclusions, the summary with intervals and verdicts, each workload's
    table and plots, the effective configuration, the checkers' findings
    and the run's provenance."""
    lines = ["# coordsim compare\n"]
    if warning:
        lines.append(f"{warning}\n")
    lines.append(f"{header}\n")
    iso = isolation_line(rows)
    if iso is not None:
        # Read committed in bold: its figures are not CockroachDB's.
        bold = "**" if "not CockroachDB-like" in iso else ""
        lines.append(f"{bold}{iso}.{bold} Backend round trips per cell (count, p50 / p99 ms): "
                     "results.csv `*_n`, `*_p50_ms`, `*_p99_ms` and `backend_ms`; summary.json `cells[].backend`.\n")
    if conclusions:
        lines.extend(conclusions)
        lines.append("")
    lines.append("## Summary\n")
    lines.append("| workload | config | peak ops/s (95% CI) | at clients | p50 / p99 ms at most clients | "
                 "mean ± sd ms at most clients | errors | verdict |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---|")
    for pk in summary(rows):
        top = pk.top or pk.row
        lines.append(f"| {pk.workload} | {pk.config} | {tput_text(pk.row)}{_flag(pk.row)} | {pk.row.concurrency} | "
                     f"{_ms(top.p50_ms)} / {_ms(top.p99_ms)} at {top.concurrency}{_flag(top)} | {_mean_sd(top)} | "
                     f"{errors_text(pk.row)} | {pk.verdict or '—'} |")
    from sim.compare.scaleout import markdown_lines as scaleout_lines

    lines.extend(scaleout_lines(rows))
    if verdicts:
        lines.append("\n## Correctness\n")
        lines.extend(f"- {v}" for v in verdicts)
    if ablation:
        lines.append("\n## Ablation: one mechanism at a time\n")
        lines.append("Each step changes one mechanism of the configuration before it; its share is of the whole "
                     "difference between the first configuration and the last (steps interact, so shares "
                     "depend on the order).")
        lines.extend(ablation)
    if sensitivity:  # `sim.compare.breakeven.markdown_lines`: its own heading and rule
        lines.append("")
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
                 "(also in `config.toml`):\n")
    lines.append("```toml\n" + knobs.rstrip() + "\n```")
    if provenance:
        lines.append("")
        lines.extend(provenance)
    lines.append("\nMachine-readable: [results.csv](results.csv), [summary.json](summary.json); "
                 "traces: `traces/<workload>/<config>/`.\n")
    text = "\n".join(lines)
    atomic_write(path, lambda p: p.write_text(text))
