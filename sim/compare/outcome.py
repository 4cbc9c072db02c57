"""A finished comparison's outcome: what it found, the files that record it
(`config.toml`, `report.md`, `summary.json`) and its exit code.

The files, the terminal summary (`sim.compare.terminal`) and the exit code are
all read from one `Outcome`, so they never disagree about a run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

from sim.compare.hostbound import thresholds_text as hostbound_rule
from sim.compare.provenance import markdown as provenance_markdown
from sim.compare.provenance import warning as provenance_warning
from sim.compare.report import summary_document, write_markdown
from sim.load.run_config import knobs_toml
from sim.runtime.outputs import atomic_write

if TYPE_CHECKING:
    from pathlib import Path

    from sim.compare.breakeven import BreakEvens
    from sim.compare.conclusions import Conclusions
    from sim.compare.report import BaselineCheck, Regression
    from sim.compare.rows import LevelRow
    from sim.load.run_config import RunConfig

__all__ = ["Outcome", "method_text", "write_outcome"]


@final
@dataclass(frozen=True)
class Outcome:
    """Everything a comparison found, and the thresholds that judge it.

    `baseline` is the `--baseline` check (None without one), `waterfall` the
    ablation's lines (`--ablate`), `break_evens` the sensitivity search's
    result (`--sensitivity`)."""

    cfg: RunConfig
    rows: list[LevelRow]
    verdicts: list[str]
    anomalies: list[str]
    plots: list[Path]
    baseline: BaselineCheck | None
    waterfall: list[str]
    break_evens: BreakEvens | None
    conclusions: Conclusions
    provenance: dict[str, Any]
    error_threshold: float
    allow_errors: bool

    @property
    def regressions(self) -> list[Regression]:
        return self.baseline.regressions if self.baseline is not None else []

    @property
    def erring(self) -> list[LevelRow]:
        """The cells whose error rate is above `error_threshold`."""
        return [r for r in self.rows if r.error_rate > self.error_threshold]

    @property
    def failed(self) -> bool:
        """Exit 1: an anomaly, a regression, or (unless allowed) an erring cell."""
        return bool(self.anomalies) or (bool(self.erring) and not self.allow_errors) or bool(self.regressions)

    @property
    def warning(self) -> str | None:
        """The busy-host warning, in real mode only: virtual figures are
        simulated time whatever else the host ran (provenance records the
        load either way)."""
        return provenance_warning(self.provenance) if self.cfg.mode == "real" else None


def write_outcome(stage: Path, outcome: Outcome, *, output: Path, wall_s: float, cores: int | None,
                  jobs: int) -> dict[str, Any]:
    """Writes `config.toml`, `report.md` and `summary.json` into `stage` (to be
    published as `output`) and returns the summary document (`--json`).
    `wall_s`, `cores` and `jobs` describe the run in both files."""
    from sim.compare.breakeven import markdown_lines as break_even_lines

    cfg = outcome.cfg
    knobs = knobs_toml(cfg.redacted())
    atomic_write(stage / "config.toml", lambda p: p.write_text(knobs))
    write_markdown(stage / "report.md", outcome.rows, outcome.plots,
                   header=method_text(cfg, wall_s=wall_s, cores=cores, jobs=jobs),
                   regressions=outcome.regressions, knobs=knobs, verdicts=outcome.verdicts,
                   ablation=outcome.waterfall,
                   sensitivity=break_even_lines(outcome.break_evens) if outcome.break_evens is not None else [],
                   conclusions=outcome.conclusions.markdown(), provenance=provenance_markdown(outcome.provenance),
                   warning=outcome.warning)
    w = cfg.window()
    doc = summary_document(
        outcome.rows, output=str(output), anomalies=outcome.anomalies, erring=outcome.erring,
        regressions=outcome.regressions, exit_code=1 if outcome.failed else 0,
        header={
            "mode": cfg.mode, "seed": cfg.seed, "configurations": list(cfg.configurations),
            "workloads": list(dict.fromkeys(r.workload for r in outcome.rows)), "passes": w.repeat,
            "window_s": w.duration_s, "warmup_s": w.warmup_s, "error_threshold": outcome.error_threshold,
            "wall_s": round(wall_s, 3), "cores": cores, "max_window_s": w.max_duration_s, "drain_s": w.drain_s,
        },
        conclusions=outcome.conclusions.as_dict(), provenance=outcome.provenance,
    )
    if outcome.break_evens is not None:
        doc["break_even"] = outcome.break_evens.as_dict()
    text = json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"
    atomic_write(stage / "summary.json", lambda p: p.write_text(text))
    return doc


def method_text(cfg: RunConfig, *, wall_s: float, cores: int | None, jobs: int) -> str:
    """`report.md`'s opening paragraph: how every number below was measured,
    so a reader can judge a figure without the command line that made it."""
    w = cfg.window()
    seeds = f"seed {cfg.seed}" if w.repeat == 1 else f"seeds {cfg.seed}..{cfg.seed + w.repeat - 1}"
    how = (f"steady state: {w.repeat} passes interleaved across configurations, each on a fresh deployment "
           f"({seeds}), measuring each level after {w.warmup_s:g} s warm-up in one window of {w.duration_s:g} s"
           if w.duration_s is not None else
           f"{w.repeat} passes interleaved across configurations, each on a fresh deployment ({seeds}), "
           "of a fixed number of operations per level")
    return (
        f"mode `{cfg.mode}`, seed {cfg.seed}, configurations {', '.join(cfg.configurations)}; "
        + (
            f"open loop at {cfg.open_loop_rate:g} ops/s (Poisson; latency from intended start; "
            "clients = connection pool); "
            if cfg.open_loop_rate
            else "closed loop; "
        )
        + f"{how}; wall time {wall_s:.0f} s on {cores} cores"
        + (f", passes on {jobs} worker processes. " if jobs > 1 else ". ")
        + "Throughput: operations completed in the window, mean over the passes ± the 95 % Student-t "
        "half-width; latencies: every operation started in a window, measured to its completion "
        f"(`censored`: still running {w.drain_s:g} s after the window, counted at their lower bound), from "
        "HdrHistograms over all passes, `lat. n` operations (a percentile needs 10 samples beyond it, "
        "else —), with their mean ± standard deviation; "
        + (f"a level not yet steady is measured again in a longer window, up to {w.max_duration_s:g} s; "
           if w.max_duration_s else "")
        + "steady = Little's law (mean latency x throughput / clients) within 15 %, the window at least "
        "10x the mean latency and its two halves' throughput within the noise (an open loop: not "
        "saturated); "
        + (hostbound_rule() + "; " if cfg.mode == "real" else "")
        + "cells not steady or host-bound are marked and left out of the conclusions; errors by SQLSTATE; oracle q/op = backing oracle queries per statement; "
        "loop busy = modeled coordinator CPU / (time x cores); loop msg/op = messages the event loop "
        "handled per statement (— for the decoupled design, which has no loop); verdict = the checkers on every "
        "pass's trace (the worst of them)."
    )
