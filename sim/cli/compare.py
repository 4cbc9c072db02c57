"""`coordsim compare`, `coordsim run` and `coordsim config show`: the
architecture comparison users run (DESIGN.md §1).

Outputs go to a staging directory beside the output directory and are renamed
into place only when complete, so an interrupted or failed run leaves nothing
half-written under the output name.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sim.cli.pg import postgres_for
from sim.compare.ablation import Step, chain, parse_ablate, plot_waterfall, waterfall_lines
from sim.compare.report import (
    DEFAULT_REGRESSION_THRESHOLD,
    compare_baseline,
    plot,
    read_results,
    summary,
    tables,
    write_csv,
    write_markdown,
)
from sim.load.config import Config, is_scenario_file, knobs_toml
from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.outputs import atomic_write, staged_dir

if TYPE_CHECKING:
    from collections.abc import Callable

    from sim.compare.runner import LevelRow, RunOutput

__all__ = ["register"]

_out = Console()
_err = Console(stderr=True)

config_app = typer.Typer(help="The run configuration of `coordsim compare`.")


def register(app: typer.Typer) -> None:
    """Adds this module's commands to the `coordsim` app."""
    app.command("compare")(compare)
    app.command("run")(run_scenario)
    app.add_typer(config_app, name="config")


# --- shared options -------------------------------------------------------------------

ConfigFile = Annotated[Path | None, typer.Option("--config-file", "-c", help="TOML file of `Config` keys.")]
ModeOpt = Annotated[str | None, typer.Option("--mode", help="real (default; embedded Postgres unless COORDSIM_POSTGRES_URL) or virtual.")]
ConfigsOpt = Annotated[str | None, typer.Option("--configs", help="Comma-separated configurations.")]
WorkloadsOpt = Annotated[str | None, typer.Option("--workloads", "-w", help="Comma-separated workloads (select-one, insert, update, …) or scenario files (.toml: a workload with its settings; .py: a script, run --repeat times).")]
ConcOpt = Annotated[str | None, typer.Option("--concurrency", help="Comma-separated client counts, e.g. 1,4,16.")]
OpsOpt = Annotated[int | None, typer.Option("--ops", help="Instead of --duration: operations per window at concurrency 1 (scaled with sqrt(clients)).")]
RateOpt = Annotated[float | None, typer.Option("--rate", help="Open loop: Poisson arrivals per second (latency from intended start).")]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Seed of the first pass (pass k runs with seed + k - 1); each configuration runs with these same seeds, so they face the same random draws.")]
OutOpt = Annotated[str | None, typer.Option("--output", "-o", help="Output directory.")]
ProfileOpt = Annotated[str | None, typer.Option("--latency-profile", help="Latency profile TOML/JSON (virtual mode).")]
DurationOpt = Annotated[float | None, typer.Option("--duration", "-T", help="Seconds of each measurement window (virtual mode: simulated seconds). Default: 1 real, 0.2 virtual.")]
WarmupOpt = Annotated[float | None, typer.Option("--warmup", help="Seconds discarded before each level's window (in every pass). Default: 0.5 real, 0.05 virtual.")]
RepeatOpt = Annotated[int | None, typer.Option("--repeat", help="Passes: each (workload, configuration) is measured this many times, each time on a fresh deployment (fresh database) with seed +1, interleaved across configurations (ABCABC); each pass is a warm-up then one window per level, and the intervals are over the passes. Default: 3.")]



def build_config(
    config_file: Path | None = None, **flags: Any
) -> Config:
    """The effective `Config`: defaults, then the TOML file, then flags."""
    cfg = Config.from_toml(config_file) if config_file is not None else Config()
    cfg = cfg.with_overrides(**flags)
    cfg.latency()  # a bad profile fails now, before anything starts
    return cfg


@config_app.command("show")
def config_show(
    config_file: ConfigFile = None,
    mode: ModeOpt = None,
    configs: ConfigsOpt = None,
    workloads: WorkloadsOpt = None,
    concurrency: ConcOpt = None,
    duration: DurationOpt = None,
    warmup: WarmupOpt = None,
    repeat: RepeatOpt = None,
    ops: OpsOpt = None,
    rate: RateOpt = None,
    seed: SeedOpt = None,
    output: OutOpt = None,
    latency_profile: ProfileOpt = None,
) -> None:
    """Print the effective configuration (defaults < --config-file < flags) as
    TOML: the run's settings with every mode default filled in, then every knob
    of every configuration it compares (architecture, oracle, catalog,
    group-commit policy and interval, confirm_leadership, read_ts batching,
    cores, batch size, CPU costs). Secrets are redacted."""
    cfg = build_config(
        config_file, mode=mode, configurations=configs, workloads=workloads, concurrency=concurrency,
        ops_per_level=ops, open_loop_rate=rate, seed=seed, output=output, latency_profile=latency_profile,
        duration_s=duration, warmup_s=warmup, repeat=repeat,
    )
    sys.stdout.write(knobs_toml(cfg.redacted()))


# --- compare --------------------------------------------------------------------------


#: `compare` exits 1 when a cell's error rate is above this (unless --allow-errors).
DEFAULT_ERROR_THRESHOLD = 0.001


def compare(
    config_file: ConfigFile = None,
    mode: ModeOpt = None,
    configs: ConfigsOpt = None,
    workloads: WorkloadsOpt = None,
    concurrency: ConcOpt = None,
    duration: DurationOpt = None,
    warmup: WarmupOpt = None,
    repeat: RepeatOpt = None,
    ops: OpsOpt = None,
    rate: RateOpt = None,
    seed: SeedOpt = None,
    output: OutOpt = None,
    latency_profile: ProfileOpt = None,
    tables_: Annotated[int | None, typer.Option("--tables", help="Tables in the schema.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="A short sweep: 1,4,16,64 clients, 2 passes of short windows.")] = False,
    baseline: Annotated[Path | None, typer.Option("--baseline", help="A previous output directory: flag cells worse beyond the threshold and significantly (Welch's t-test, Holm-corrected over all comparisons at family-wise 5 %) (exit 1).")] = None,
    threshold: Annotated[float, typer.Option("--threshold", help="--baseline: the relative change that counts as a regression.")] = DEFAULT_REGRESSION_THRESHOLD,
    allow_errors: Annotated[bool, typer.Option("--allow-errors", help="Exit 0 even when a cell's error rate is above --error-threshold.")] = False,
    error_threshold: Annotated[float, typer.Option("--error-threshold", help="Largest error rate per cell that still exits 0.")] = DEFAULT_ERROR_THRESHOLD,
    no_check: Annotated[bool, typer.Option("--no-check", help="Skip the checkers (faster; no verdicts).")] = False,
    ablate: Annotated[str | None, typer.Option("--ablate", metavar="FROM..TO", help="Run the chain of configurations from FROM to TO that changes one mechanism at a time, and attribute the difference to each (e.g. event-loop..event-loop+pg-oracle).")] = None,
    sensitivity: Annotated[bool, typer.Option("--sensitivity", help="Rerun the comparison with each family of unmeasured costs (coordinator CPU, replica, catalog feed; sim/model/unmeasured.py) scaled x0.5 and x2, and say which conclusions survive (7 sweeps in all: use with --mode virtual or --quick).")] = False,
) -> None:
    """Run workloads under each configuration with the same seeds, in steady state
    (--repeat interleaved passes, each on a fresh deployment: per level a
    warm-up, then one window of --duration); print tables with
    95 % intervals, errors and the checkers' verdict; write plots, report.md,
    results.csv, config.toml and the traces to the output directory. Exit 1 on an
    anomaly, an error rate above --error-threshold, or a regression."""
    from sim.compare.stats import check_fraction

    check_fraction("--threshold", threshold)
    check_fraction("--error-threshold", error_threshold)
    cfg = build_config(
        config_file, mode=mode, configurations=configs, workloads=workloads, concurrency=concurrency,
        ops_per_level=ops, open_loop_rate=rate, seed=seed, output=output, latency_profile=latency_profile,
        duration_s=duration, warmup_s=warmup, repeat=repeat, tables=tables_,
    )
    steps: list[Step] = []
    if ablate is not None:
        if configs is not None:
            raise InvalidUsage("--ablate chooses the configurations itself; leave out --configs")
        steps = chain(*parse_ablate(ablate))
        cfg = cfg.with_overrides(
            configurations=[st.name for st in steps],
            variants={**cfg.variants, **{st.name: st.variant for st in steps if st.variant is not None}},
        )
    if quick:
        cfg = cfg.with_overrides(
            concurrency=concurrency or [1, 4, 16, 64], repeat=repeat or 2,
            # With --ops the windows are counted in operations: leave them so.
            duration_s=duration or (None if ops else 0.3 if cfg.mode == "real" else 0.02),
            warmup_s=warmup or (None if ops else 0.2 if cfg.mode == "real" else 0.01),
        )
    base_rows = read_results(baseline) if baseline is not None else None
    wall0 = time.perf_counter()
    with staged_dir(Path(cfg.output), "compare") as stage, postgres_for(cfg) as cfg:
        rows, verdicts, anomalies = _sweep(cfg, stage, check=not no_check)
        checked = compare_baseline(rows, base_rows, threshold=threshold) if base_rows is not None else None
        regressions = checked.regressions if checked is not None else []
        plots = plot(stage, rows)
        waterfall = waterfall_lines(rows, steps) if steps else []
        if steps:
            plots += plot_waterfall(stage, rows, steps)
        write_csv(stage / "results.csv", rows)
        fragile_lines: list[str] = []
        fragile = 0
        if sensitivity:
            from sim.compare.sensitivity import run_sensitivity, survival_lines

            def rerun(scaled: Config, label: str) -> list[LevelRow]:
                _err.print(f"compare --sensitivity: {label}", markup=False, highlight=False)
                sub = stage / "sensitivity" / label.replace(" ", "-")
                return _sweep(scaled, sub, check=False)[0]

            reruns = run_sensitivity(cfg, stage / "sensitivity", rerun)
            fragile_lines, fragile = survival_lines(rows, reruns)
        knobs = knobs_toml(cfg.redacted())
        atomic_write(stage / "config.toml", lambda p: p.write_text(knobs))
        w = cfg.window()
        seeds = f"seed {cfg.seed}" if w.repeat == 1 else f"seeds {cfg.seed}..{cfg.seed + w.repeat - 1}"
        how = (f"steady state: {w.repeat} passes interleaved across configurations, each on a fresh deployment "
               f"({seeds}), measuring each level after {w.warmup_s:g} s warm-up in one window of {w.duration_s:g} s"
               if w.duration_s is not None else
               f"{w.repeat} passes interleaved across configurations, each on a fresh deployment ({seeds}), "
               "of a fixed number of operations per level")  # fmt: skip
        header = (
            f"mode `{cfg.mode}`, seed {cfg.seed}, configurations {', '.join(cfg.configurations)}; "
            + (
                f"open loop at {cfg.open_loop_rate:g} ops/s (Poisson; latency from intended start; "
                "clients = connection pool); "
                if cfg.open_loop_rate
                else "closed loop; "
            )
            + f"{how}; wall time {time.perf_counter() - wall0:.0f} s on {os.cpu_count()} cores. "
            "Throughput: mean over the passes ± the 95 % Student-t half-width; latencies from "
            "HdrHistograms over all passes, `lat. n` operations (a percentile needs 10 samples beyond it, "
            "else —); errors by SQLSTATE; oracle q/op = backing oracle queries per statement; "
            "loop busy = modeled coordinator CPU / (time x cores); loop msg/op = messages the event loop "
            "handled per statement (— for the decoupled design, which has no loop); verdict = the checkers on every "
            "pass's trace (the worst of them)."
        )
        write_markdown(stage / "report.md", rows, plots, header=header, regressions=regressions,
                       knobs=knobs, verdicts=verdicts, ablation=waterfall, sensitivity=fragile_lines)  # fmt: skip
    plain = not _out.is_terminal
    out = Console(width=1000, soft_wrap=True) if plain else _out
    for t in tables(rows, plain=plain):
        out.print(t)
    out.print("peak throughput (95% CI) / p50 at most clients / verdict")
    for pk in summary(rows):
        ci = "" if pk.row.throughput_ci95 is None else f" ± {pk.row.throughput_ci95:,.0f}"
        p50 = "—" if pk.top_p50_ms is None else f"{pk.top_p50_ms:,.2f} ms"
        out.print(f"  {pk.workload:20} {pk.config:22} {pk.row.throughput_ops_s:10,.0f}{ci} ops/s "
                  f"at {pk.row.concurrency}  {p50}  {pk.verdict or '—'}", markup=False, highlight=False)  # fmt: skip
    if waterfall:
        out.print("ablation (one mechanism at a time; a step's share depends on the order):", markup=False)
        for line in waterfall:
            out.print(line, markup=False, highlight=False)
    if fragile_lines:
        out.print("sensitivity (peak-throughput conclusions, decided outside the 95 % intervals; each unmeasured "
                  "cost family x0.5 and x2):", markup=False)  # fmt: skip
        for line in fragile_lines:
            out.print(line, markup=False, highlight=False)
        out.print(f"{fragile} conclusion(s) fragile" if fragile else "every conclusion survives", markup=False)
    out.print(f"wrote {Path(cfg.output).absolute()}/report.md ({time.perf_counter() - wall0:.0f} s)", markup=False)
    failed = False
    for line in verdicts:
        out.print(line, markup=False, highlight=False)
    if anomalies:
        failed = True
    erring = [r for r in rows if r.error_rate > error_threshold]
    if erring:
        worst = max(erring, key=lambda r: r.error_rate)
        codes = ", ".join(f"{k} x{n}" for k, n in worst.errors_by_code)
        note = "" if allow_errors else " (exit 1; --allow-errors to accept)"
        out.print(f"errors above {error_threshold:.2%} in {len(erring)} cell(s); worst: {worst.workload} "
                  f"{worst.config} c={worst.concurrency}: {worst.error_rate:.2%} ({codes}){note}", markup=False)  # fmt: skip
        failed = failed or not allow_errors
    if checked is not None:
        out.print(checked.line(), markup=False, highlight=False)
        for x in checked.regressions:
            out.print(f"  {x}", markup=False, highlight=False)
        failed = failed or bool(checked.regressions)
    if failed:
        raise typer.Exit(1)


def _label(entry: str) -> str:
    """A `--workloads` entry as the name outputs use: a scenario file's stem."""
    return Path(entry).stem if is_scenario_file(entry) else entry


def _run_entry(
    cfg: Config,
    entry: str,
    traces: dict[str, Path],
    on_level: Callable[[str, int, LevelRow], None],
    on_pass: Callable[[str, int, RunOutput], None],
) -> dict[str, RunOutput]:
    """One `--workloads` entry under every configuration: a built-in workload's
    sweep or a TOML scenario's (its workload, with its own settings) in
    `--repeat` passes interleaved across the configurations
    (`sim.compare.runner.run_workload`), or a Python scenario run `--repeat` times per
    configuration as one row. `on_pass` gets each pass's (or script's first
    run's) own output, to check."""
    from sim.compare.runner import run_workload
    from sim.compare.scripts import run_script
    from sim.load.scenarios import PythonScenario, load

    if not is_scenario_file(entry):
        return run_workload(cfg, cfg.configurations, entry, traces, on_level=on_level,
                            on_pass=lambda name, p: on_pass(name, p.index, p.output))  # fmt: skip
    sc = load(entry)
    if isinstance(sc, PythonScenario):
        outs = {}
        for name in cfg.configurations:
            out = run_script(cfg, name, sc, traces[name])
            for row in out.rows:
                on_level(name, 1, row)
            on_pass(name, 1, out)
            outs[name] = out
        return outs
    own = cfg.with_overrides(**sc.params)
    outs = run_workload(own, cfg.configurations, sc.workload, traces, on_level=on_level,
                        on_pass=lambda name, p: on_pass(name, p.index, p.output))  # fmt: skip
    return {name: replace(out, rows=[replace(r, workload=sc.name) for r in out.rows]) for name, out in outs.items()}


#: Checkers' outcomes from best to worst: a pair's verdict is its worst pass's.
_OUTCOME_RANK = {"valid": 0, "unknown": 1, "invalid": 2}


def _sweep(cfg: Config, stage: Path, *, check: bool) -> tuple[list[LevelRow], list[str], list[str]]:
    """Every (workload, configuration) pair: measured in interleaved passes,
    each pass traced and (unless `check` is off) judged by the in-process
    checkers. Returns the rows (with their verdict: the worst of their
    passes'), one verdict line per pair (plus one per pass with an anomaly),
    and the anomaly lines."""
    from sim.history.checker import check_history

    rows: list[LevelRow] = []
    verdicts: list[str] = []
    anomalies: list[str] = []
    passes = cfg.window().repeat
    total = len(cfg.workloads) * len(cfg.configurations) * len(cfg.concurrency) * passes
    done = [0]
    t0 = time.perf_counter()
    live = _err.is_terminal
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=_err, transient=True, disable=not live,
    ) as progress:
        task = progress.add_task("compare", total=total)
        for wl in cfg.workloads:
            label = _label(wl)
            progress.update(task, description=f"{wl}")
            outcome: dict[str, str] = {}
            found: dict[str, list[str]] = {}

            def on_level(name: str, index: int, row: LevelRow, wl: str = wl) -> None:
                progress.advance(task)
                progress.update(task, description=f"{wl} / {name} pass {index}")
                done[0] += 1
                if not live:  # like pgbench -P: one line per level on a pipe or log
                    _err.print(f"compare: {wl} / {name} pass {index} c={row.concurrency}: "
                               f"{row.throughput_ops_s:,.0f} ops/s, {row.errors} errors "
                               f"({done[0]}/{total}, {time.perf_counter() - t0:.0f} s)",
                               markup=False, highlight=False, soft_wrap=True)  # fmt: skip

            def on_pass(name: str, index: int, out: RunOutput, wl: str = wl, label: str = label,
                        outcome: dict[str, str] = outcome, found: dict[str, list[str]] = found) -> None:
                if not check:
                    return
                progress.update(task, description=f"{wl} / {name} pass {index}: checking")
                report = check_history(out.history, out.events)
                verdict = report.outcome.value
                if _OUTCOME_RANK.get(verdict, 1) >= _OUTCOME_RANK.get(outcome.get(name, "valid"), 1):
                    outcome[name] = verdict
                if report.names:
                    where = Path(cfg.output).absolute() / out.trace_dir.relative_to(stage)
                    line = (f"{label} / {name} (pass {index}): {verdict} — {', '.join(report.names)}; "
                            f"inspect: coordsim check {where}")  # fmt: skip
                    found.setdefault(name, []).append(line)
                    anomalies.append(line)

            traces = {name: stage / "traces" / label / name for name in cfg.configurations}
            outs = _run_entry(cfg, wl, traces, on_level, on_pass)
            for name in cfg.configurations:
                verdict = outcome.get(name, "") if check else ""
                if check:
                    verdicts.append(f"{label} / {name}: {verdict}")
                    verdicts.extend(found.get(name, []))
                rows.extend(replace(r, verdict=verdict) for r in outs[name].rows)
    return rows, verdicts, anomalies


# --- run ------------------------------------------------------------------------------


def run_scenario(
    scenario: Annotated[str, typer.Argument(help="Shipped scenario name, workload name, or a .py/.toml path.")],
    config: Annotated[str, typer.Option("--config", help="Coordinator configuration.")] = "decoupled",
    mode: Annotated[str, typer.Option("--mode", help="virtual (default) or real.")] = "virtual",
    seed: SeedOpt = None,
    output: OutOpt = None,
    latency_profile: ProfileOpt = None,
) -> None:
    """Run one scenario under one configuration; write its trace (and, for a
    Python scenario, the checker's verdicts)."""
    from sim.load.scenarios import PythonScenario, load

    sc = load(scenario)
    cfg = build_config(
        None, mode=mode, configurations=[config], seed=seed, latency_profile=latency_profile,
        output=output or f"coordsim-run-{sc.name}",
    )
    if isinstance(sc, PythonScenario):
        with staged_dir(Path(cfg.output), "run") as stage, postgres_for(cfg) as cfg:
            verdict = _run_python(cfg, config, sc, stage)
        _out.print(verdict, markup=False, highlight=False)
        if verdict.rstrip().endswith("FAIL"):
            raise typer.Exit(1)
        return
    cfg = cfg.with_overrides(**sc.params).with_overrides(workloads=[sc.workload], configurations=[config])
    with staged_dir(Path(cfg.output), "run") as stage, postgres_for(cfg) as cfg:
        rows, verdicts, anomalies = _sweep(cfg, stage, check=True)
        write_csv(stage / "results.csv", rows)
    for t in tables(rows, plain=not _out.is_terminal):
        _out.print(t)
    for line in verdicts:
        _out.print(line, markup=False, highlight=False)
    _out.print(f"wrote {Path(cfg.output).absolute()}", markup=False, highlight=False)
    if anomalies:
        raise typer.Exit(1)


def _run_python(cfg: Config, config_name: str, sc: Any, stage: Path) -> str:
    from sim.compare.scripts import run_script_once
    from sim.history.checker import check_history
    from sim.history.traces import write_trace
    from sim.load.scenarios import scenario_error

    one = run_script_once(cfg, config_name, sc, seed=cfg.seed)
    history, events, error = one.history, one.events, one.error
    if error is not None:
        # Report the scenario's error as one line (exit 2) and keep what it
        # recorded until then. The stage is discarded when this raises, so the
        # partial trace goes out through a staging of its own; the stage is
        # still empty here, and removing it frees its name for that one.
        failure = scenario_error(Path(getattr(sc, "path", None) or sc.name), error)
        note = ""
        try:
            with contextlib.suppress(OSError):
                stage.rmdir()
            with staged_dir(Path(cfg.output), "run") as partial:
                write_trace(partial / "trace", history, events, run=sc.name, config=config_name, seed=cfg.seed)
                (partial / "verdict.txt").write_text(f"{failure}\nFAIL\n")
            n = len(history)
            note = f" (trace of the {n} operation{'' if n == 1 else 's'} before it: {Path(cfg.output) / 'trace'})"
        except (CoordsimError, OSError) as exc:
            note = f" (trace not written: {' '.join(str(exc).split())})"
        raise CoordsimError(f"{failure}{note}") from error
    write_trace(stage / "trace", history, events, run=sc.name, config=config_name, seed=cfg.seed)
    report = check_history(history, events)
    lines = [f"{sc.name} under {config_name} ({cfg.mode}, seed {cfg.seed}): {len(history)} operations"]
    for v in report.verdicts:
        counts = ", ".join(f"{n} x{c}" for n, c in v.counts.items())
        state = "skipped" if v.skipped else v.outcome.value
        lines.append(f"  {v.checker:<9} {state}{' - ' + counts if counts else ''}")
        lines.extend(f"    {a.name}: ops {', '.join(str(o) for o in a.ops)}: {a.explanation}" for a in v.anomalies)
    lines.append(f"checker verdict: {report.outcome.value}")
    lines.extend(f"expectation failed: {f}" for f in one.failures)
    if one.failures or report.outcome.value == "invalid":
        lines.append("FAIL")
    text = "\n".join(lines) + "\n"
    (stage / "verdict.txt").write_text(text)
    return text
