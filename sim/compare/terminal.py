"""A finished comparison on the terminal: its tables, peaks, ablation,
break-evens, conclusions, warnings and failures, in the order a reader
decides by; `report.md` (`sim.compare.outcome`) says the same at length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.compare.provenance import footer as provenance_footer
from sim.compare.report import isolation_line, summary
from sim.compare.tables import tables

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from rich.console import Console

    from sim.compare.outcome import Outcome
    from sim.compare.rows import LevelRow

__all__ = ["print_isolation", "print_outcome"]


def print_outcome(out: Console, outcome: Outcome, *, output: Path, plain: bool, wide: bool, wall_s: float) -> None:
    """Prints `outcome` (written to `output`, after `wall_s` seconds) on `out`;
    `plain`: for a pipe or a log, not a terminal; `wide`: every column."""
    busy = outcome.warning
    if busy is not None:  # at the top, as in report.md
        out.print(busy.strip("*"), style="bold", markup=False, highlight=False)
    for t in tables(outcome.rows, plain=plain, wide=wide):
        out.print(t)
    out.print("peak throughput (95% CI) / p50 at most clients / verdict")
    for pk in summary(outcome.rows):
        ci = "" if pk.row.throughput_ci95 is None else f" ± {pk.row.throughput_ci95:,.0f}"
        p50 = "—" if pk.top_p50_ms is None else f"{pk.top_p50_ms:,.2f} ms"
        out.print(f"  {pk.workload:20} {pk.config:22} {pk.row.throughput_ops_s:10,.0f}{ci} ops/s "
                  f"at {pk.row.concurrency}  {p50}  {pk.verdict or '—'}", markup=False, highlight=False)
    if outcome.waterfall:
        out.print("ablation (one mechanism at a time; a step's share depends on the order):", markup=False)
        for line in outcome.waterfall:
            out.print(line, markup=False, highlight=False)
    if outcome.break_evens is not None:
        from sim.compare.breakeven import render_lines

        for line in render_lines(outcome.break_evens):
            out.print(line, markup=False, highlight=False)
    for line in outcome.conclusions.lines():
        out.print(line, markup=False, highlight=False)
    print_isolation(out, outcome.rows)
    if busy is not None:
        out.print(busy.strip("*"), style="bold", markup=False, highlight=False)
    out.print(provenance_footer(outcome.provenance, simulated=outcome.cfg.mode == "virtual"),
              markup=False, highlight=False)
    out.print(f"report: {output}/report.md ({wall_s:.0f} s)", markup=False)
    for line in outcome.verdicts:
        out.print(line, markup=False, highlight=False)
    erring = outcome.erring
    if erring:
        worst = max(erring, key=lambda r: r.error_rate)
        codes = ", ".join(f"{k} x{n}" for k, n in worst.errors_by_code)
        note = "" if outcome.allow_errors else " (exit 1; --allow-errors to accept)"
        out.print(f"errors above {outcome.error_threshold:.2%} in {len(erring)} cell(s); worst: {worst.workload} "
                  f"{worst.config} c={worst.concurrency}: {worst.error_rate:.2%} ({codes}){note}", markup=False)
    if outcome.baseline is not None:
        out.print(outcome.baseline.line(), markup=False, highlight=False)
        for x in outcome.baseline.regressions:
            out.print(f"  {x}", markup=False, highlight=False)


def print_isolation(out: Console, rows: Sequence[LevelRow]) -> None:
    """Real mode: the sessions' isolation level and the 40001 retries (read
    committed in bold: its figures are not CockroachDB's)."""
    line = isolation_line(rows)
    if line is not None:
        out.print(line, style="bold" if "not CockroachDB-like" in line else None, markup=False, highlight=False)
