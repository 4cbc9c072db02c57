"""A comparison's pairs: every (workload, configuration) pair measured in
interleaved passes (`sim.compare.runner.run_workload`), or a Python scenario
run per configuration, with each pass judged by the in-process checkers.

A pair's verdict is its worst pass's, so one anomalous pass is never averaged
away; each anomaly line names the trace to inspect with `coordsim check`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

from sim.load.run_config import is_scenario_file

if TYPE_CHECKING:
    import concurrent.futures
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from sim.compare.rows import LevelRow
    from sim.compare.runner import RunOutput
    from sim.load.run_config import RunConfig

__all__ = ["Measured", "PairProgress", "measure_pairs"]

#: Checkers' outcomes from best to worst: a pair's verdict is its worst pass's.
_OUTCOME_RANK: Final = {"valid": 0, "unknown": 1, "invalid": 2}


class PairProgress(ABC):
    """What `measure_pairs` tells whoever shows its progress (`coordsim
    compare`'s bar and `-P` lines). Called on its thread, between levels: a
    slow implementation slows the run, not its numbers (they are per window)."""

    @abstractmethod
    def workload(self, workload: str) -> None:
        """`workload` (a `--workloads` entry) starts."""

    @abstractmethod
    def level(self, workload: str, config: str, index: int, row: LevelRow) -> None:
        """Pass `index` (1-based) of `config` measured one level: `row`."""

    @abstractmethod
    def checking(self, workload: str, config: str, index: int) -> None:
        """The checkers start on pass `index` of `config`."""

    @abstractmethod
    def script(self, workload: str, config: str) -> AbstractContextManager[None]:
        """A Python scenario runs its `--repeat` times under `config` for the
        block: one row, no levels to count meanwhile."""


@final
@dataclass(frozen=True)
class Measured:
    """What `measure_pairs` found: the rows (each with its pair's verdict), one verdict
    line per pair (plus one per pass with an anomaly or an unknown), and the
    anomaly lines alone (any of them fails the run)."""

    rows: list[LevelRow]
    verdicts: list[str]
    anomalies: list[str]


def _label(entry: str) -> str:
    """A `--workloads` entry as the name outputs use: a scenario file's stem."""
    return Path(entry).stem if is_scenario_file(entry) else entry


def measure_pairs(
    cfg: RunConfig, stage: Path, progress: PairProgress, *, check: bool, dest: Path | None = None,
    pool: concurrent.futures.Executor | None = None,
) -> Measured:
    """Every (workload, configuration) pair of `cfg`: measured in interleaved
    passes, each pass traced under `stage / "traces"` and, unless `check` is
    off, judged by the checkers.

    Args:
        dest: where `stage` will be published (named in the anomaly lines).
        pool: worker processes for the passes in virtual mode (`--jobs`).
    """
    from sim.history.checker import check_history

    rows: list[LevelRow] = []
    verdicts: list[str] = []
    anomalies: list[str] = []
    where_to = dest if dest is not None else stage
    for wl in cfg.workloads:
        label = _label(wl)
        progress.workload(wl)
        outcome: dict[str, str] = {}
        found: dict[str, list[str]] = {}

        def on_level(name: str, index: int, row: LevelRow, wl: str = wl) -> None:
            progress.level(wl, name, index, row)

        def on_pass(name: str, index: int, out: RunOutput, wl: str = wl, label: str = label,
                    outcome: dict[str, str] = outcome, found: dict[str, list[str]] = found) -> None:
            if not check:
                return
            progress.checking(wl, name, index)
            report = check_history(out.history, out.events)
            verdict = report.outcome.value
            if _OUTCOME_RANK.get(verdict, 1) >= _OUTCOME_RANK.get(outcome.get(name, "valid"), 1):
                outcome[name] = verdict
            if report.names:
                where = where_to / out.trace_dir.relative_to(stage)
                line = (f"{label} / {name} (pass {index}): {verdict} — {', '.join(report.names)}; "
                        f"inspect: coordsim check {where}")
                found.setdefault(name, []).append(line)
                anomalies.append(line)
            elif verdict == "unknown":  # not an anomaly: what the checkers could not judge
                found.setdefault(name, []).append(f"{label} / {name} (pass {index}): unknown — "
                                                  f"{report.coverage_summary()}")

        traces = {name: stage / "traces" / label / name for name in cfg.configurations}
        def around_script(name: str, label: str = label) -> AbstractContextManager[None]:
            return progress.script(label, name)

        outs = _run_entry(cfg, wl, traces, on_level, on_pass, pool, around_script)
        for name in cfg.configurations:
            verdict = outcome.get(name, "") if check else ""
            if check:
                verdicts.append(f"{label} / {name}: {verdict}")
                verdicts.extend(found.get(name, []))
            rows.extend(replace(r, verdict=verdict) for r in outs[name].rows)
    return Measured(rows, verdicts, anomalies)


def _run_entry(
    cfg: RunConfig,
    entry: str,
    traces: dict[str, Path],
    on_level: Callable[[str, int, LevelRow], None],
    on_pass: Callable[[str, int, RunOutput], None],
    pool: concurrent.futures.Executor | None,
    around_script: Callable[[str], AbstractContextManager[None]],
) -> dict[str, RunOutput]:
    """One `--workloads` entry under every configuration: a built-in workload's
    sweep or a TOML scenario's (its workload, with its own settings) in
    `--repeat` passes interleaved across the configurations, or a Python
    scenario run `--repeat` times per configuration as one row. `on_pass`
    gets each pass's (or script's first run's) own output, to check."""
    from sim.compare.runner import run_workload
    from sim.compare.scripts import run_script
    from sim.load.scenarios import PythonScenario, load

    if not is_scenario_file(entry):
        return run_workload(cfg, cfg.configurations, entry, traces, on_level=on_level,
                            on_pass=lambda name, p: on_pass(name, p.index, p.output), pool=pool)
    sc = load(entry)
    if isinstance(sc, PythonScenario):
        outs = {}
        for name in cfg.configurations:
            with around_script(name):
                out = run_script(cfg, name, sc, traces[name])
            for row in out.rows:
                on_level(name, 1, row)
            on_pass(name, 1, out)
            outs[name] = out
        return outs
    own = cfg.with_overrides(**sc.params)
    outs = run_workload(own, cfg.configurations, sc.workload, traces, on_level=on_level,
                        on_pass=lambda name, p: on_pass(name, p.index, p.output), pool=pool)
    return {name: replace(out, rows=[replace(r, workload=sc.name) for r in out.rows]) for name, out in outs.items()}
