"""`coordsim compare`, `coordsim run` and `coordsim config show`: the
architecture comparison users run (DESIGN.md §1).

Outputs go to a staging directory beside the output directory and are renamed
into place only when complete, so an interrupted or failed run leaves nothing
half-written under the output name.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coordinator.config import CONFIGURATIONS
from sim.cli import options
from sim.cli.pg import postgres_for
from sim.cli.tables import print_tables
from sim.compare.ablation import Step, chain, parse_ablate, waterfall_lines, with_scale_out
from sim.compare.conclusions import conclude
from sim.compare.hgrm import write_hgrms
from sim.compare.host import HostSampler, HostUsage
from sim.compare.hostbound import thresholds_text as hostbound_rule
from sim.compare.plots import plot, plot_waterfall
from sim.compare.provenance import ProvenanceStart, finish_provenance, start_provenance
from sim.compare.provenance import footer as provenance_footer
from sim.compare.provenance import markdown as provenance_markdown
from sim.compare.provenance import warning as provenance_warning
from sim.compare.report import (
    DEFAULT_REGRESSION_THRESHOLD,
    compare_baseline,
    read_results,
    summary,
    summary_document,
    write_csv,
    write_markdown,
)
from sim.compare.scaleout import parse_adapters, plot_scaleout, with_adapters
from sim.compare.tables import tables
from sim.load.config import (
    MAX_CONCURRENCY,
    MAX_DURATION_S,
    MAX_LEVELS,
    MAX_OPS,
    MAX_REPEAT,
    MAX_TABLES,
    Config,
    check_float,
    check_int,
    is_scenario_file,
    knobs_toml,
)
from sim.load.workloads import WORKLOADS
from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.outputs import (
    RUNS_ROOT,
    atomic_write,
    latest_name,
    output_command,
    run_dir,
    staged_dir,
)
from sim.runtime.workers import MAX_JOBS, workers

if TYPE_CHECKING:
    import concurrent.futures
    from collections.abc import Callable

    from sim.compare.breakeven import BreakEvens
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


# --- options (the shared ones: sim/cli/options.py) ------------------------------------

ConfigFile = Annotated[Path | None, typer.Option("--config-file", "-c", metavar="FILE", help="TOML file of `Config` keys (`coordsim config show` prints them all).")]
ModeOpt = options.Mode
ConfigsOpt = Annotated[str | None, typer.Option("--configs", metavar="NAMES", show_default="all", help=f"Comma-separated configurations: {', '.join(CONFIGURATIONS)}, or variants of a config file.")]
WorkloadsOpt = Annotated[str | None, typer.Option("--workloads", "-w", metavar="NAMES", show_default="select-one,insert,update", help=f"Comma-separated workloads ({', '.join(WORKLOADS)}) or scenario files (.toml: a workload with its settings; .py: a script, run --repeat times).")]
ConcOpt = Annotated[str | None, typer.Option("--concurrency", metavar="N,N,…", show_default="1,4,16,64,256", help=f"Comma-separated client counts, each 1 to {MAX_CONCURRENCY:,}, at most {MAX_LEVELS:,} of them.")]
AdaptersOpt = Annotated[str | None, typer.Option("--adapters", metavar="N,N,…", show_default="each configuration's own (1)", help="Comma-separated counts of serving processes (adapters) to sweep each decoupled configuration over, as variants <config>-<N>-adapters; event-loop configurations keep their one loop. In real mode each adapter is an OS process on the one Postgres (at most 8).")]
OpsOpt = Annotated[int | None, typer.Option("--ops", metavar="N", help=f"Instead of --duration: operations per window at concurrency 1 (scaled with sqrt(clients)), 1 to {MAX_OPS:,}.")]
RateOpt = Annotated[float | None, typer.Option("--rate", metavar="OPS_PER_S", help="Open loop: Poisson arrivals per second (latency from intended start); default: closed loop.")]
SeedOpt = options.Seed
OutOpt = options.Output
ProfileOpt = Annotated[str | None, typer.Option("--latency-profile", metavar="FILE", show_default="the shipped calibrated profile", help="Latency profile TOML/JSON (virtual mode; `coordsim calibrate` writes one).")]
DurationOpt = Annotated[float | None, typer.Option("--duration", "-T", metavar="SECONDS", show_default="1 real, 0.2 virtual", help="Seconds of each measurement window (virtual mode: simulated seconds).")]
WarmupOpt = Annotated[float | None, typer.Option("--warmup", metavar="SECONDS", show_default="0.5 real, 0.05 virtual", help="Seconds discarded before each level's window (in every pass).")]
MaxWindowOpt = Annotated[float | None, typer.Option("--max-window", metavar="SECONDS", show_default="10 real, 30 virtual", help="A closed-loop level that is not yet steady (Little's law within 15 %, window >= 10x the mean latency) is measured again in a longer window, up to this length; a level still not steady is marked so and left out of conclusions. At most --duration: never grow.")]
DrainOpt = Annotated[float | None, typer.Option("--drain-limit", metavar="SECONDS", show_default="120", help="How long after a window its operations are waited for; any still running then are counted as censored, at their lower bound.")]
RepeatOpt = Annotated[int | None, typer.Option("--repeat", metavar="N", show_default="3", help=f"Passes: each (workload, configuration) is measured N times, each on a fresh deployment (fresh database) with the next seed, interleaved across configurations (ABCABC); each pass is a warm-up then one window per level, and the intervals are over the passes. 1 to {MAX_REPEAT:,}.")]


def build_config(
    config_file: Path | None = None, **flags: Any
) -> Config:
    """The effective `Config`: defaults, then the TOML file, then flags (a
    `--mode` enum as its name, `--output` as a string, and workload names in
    their one spelling, an old one noted)."""
    cfg = Config.from_toml(config_file) if config_file is not None else Config()
    if isinstance(flags.get("mode"), options.ModeName):
        flags["mode"] = flags["mode"].value
    if isinstance(flags.get("output"), Path):
        flags["output"] = str(flags["output"])
    if isinstance(flags.get("workloads"), str):
        flags["workloads"] = ",".join(options.kebab(w.strip(), WORKLOADS) for w in flags["workloads"].split(","))
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
    adapters: AdaptersOpt = None,
    duration: DurationOpt = None,
    warmup: WarmupOpt = None,
    repeat: RepeatOpt = None,
    max_window: MaxWindowOpt = None,
    drain_limit: DrainOpt = None,
    ops: OpsOpt = None,
    rate: RateOpt = None,
    seed: SeedOpt = None,
    output: OutOpt = None,
    latency_profile: ProfileOpt = None,
) -> None:
    """Print the effective configuration (defaults < --config-file < flags) as TOML.

    First the run's settings with every mode default filled in, then every knob of every configuration it compares (architecture, oracle, catalog, group-commit policy and interval, confirm_leadership, read_ts batching, cores, batch size, CPU costs). Secrets are redacted. The output is a valid --config-file.

    Examples:
      coordsim config show
      coordsim config show -w insert --concurrency 1,16 > my.toml
      coordsim compare -c my.toml
    """
    cfg = build_config(
        config_file, mode=mode, configurations=configs, workloads=workloads, concurrency=concurrency,
        ops_per_level=ops, open_loop_rate=rate, seed=seed, output=output, latency_profile=latency_profile,
        duration_s=duration, warmup_s=warmup, repeat=repeat, max_window_s=max_window, drain_s=drain_limit,
    )
    if adapters is not None:
        cfg = with_adapters(cfg, parse_adapters(adapters))
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
    adapters: AdaptersOpt = None,
    duration: DurationOpt = None,
    warmup: WarmupOpt = None,
    repeat: RepeatOpt = None,
    max_window: MaxWindowOpt = None,
    drain_limit: DrainOpt = None,
    ops: OpsOpt = None,
    rate: RateOpt = None,
    seed: SeedOpt = None,
    output: OutOpt = None,
    latency_profile: ProfileOpt = None,
    progress: options.Progress = None,
    reference: Annotated[str | None, typer.Option("--reference", metavar="CONFIG", show_default="event-loop, else the first configuration", help="The configuration the Conclusions compare every other one with (ratios of throughput, p50 and p99 with 95 % intervals).")] = None,
    tables_: Annotated[int | None, typer.Option("--tables", metavar="N", show_default="1", help=f"Tables in the schema, 1 to {MAX_TABLES:,}.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="A short sweep: 1,4,16,64 clients, 2 passes of short windows.")] = False,
    baseline: Annotated[Path | None, typer.Option("--baseline", metavar="DIR", help="A previous compare output directory (coordsim-out/latest-compare is the newest): flag cells worse beyond the threshold and significantly (Welch's t-test, Holm-corrected over all comparisons at family-wise 5 %) (exit 1).")] = None,
    threshold: Annotated[float, typer.Option("--threshold", metavar="FRACTION", help="--baseline: the relative change that counts as a regression.")] = DEFAULT_REGRESSION_THRESHOLD,
    allow_errors: Annotated[bool, typer.Option("--allow-errors", help="Exit 0 even when a cell's error rate is above --error-threshold.")] = False,
    error_threshold: Annotated[float, typer.Option("--error-threshold", metavar="FRACTION", help="Largest error rate per cell that still exits 0.")] = DEFAULT_ERROR_THRESHOLD,
    no_check: Annotated[bool, typer.Option("--no-check", help="Skip the checkers (faster; no verdicts).")] = False,
    as_json: options.Json = False,
    ablate: Annotated[str | None, typer.Option("--ablate", metavar="FROM..TO", help="Run the chain of configurations from FROM to TO that changes one mechanism at a time, and attribute the difference to each (e.g. event-loop..event-loop+pg-oracle). With --adapters N, a chain that ends decoupled gets two more steps: one adapter with N times the cores, then N adapters at those same total cores.")] = None,
    sensitivity: Annotated[bool, typer.Option("--sensitivity", help="For each conclusion, the break-even factor of every cost (coordinator CPU, and each latency family of the profile: oracle, stash, catalog, consensus, replica, …): how far it must be scaled, alone, before the conclusion reverses (searched within 1/64x-64x by short virtual reruns; a conclusion reversed within x/÷2 is fragile). Virtual mode only; tens of reruns.")] = False,
    jobs: options.Jobs = None,
    wide: options.Wide = False,
    pg_isolation: options.PgIsolation = None,
) -> None:
    """Compare the configurations: run workloads under each with the same seeds, in steady state.

    --repeat interleaved passes, each on a fresh deployment: per level a warm-up, then one window of --duration. In virtual mode the passes run on --jobs worker processes (their numbers are simulated time: the outputs are the same for any --jobs); real mode measures wall-clock time and runs one pass at a time. Prints tables with 95 % intervals, errors and the checkers' verdict; writes plots, report.md, results.csv, config.toml, the traces and one latency histogram per level (hgrm/WORKLOAD/CONFIG/cN.hgrm) to the output directory, and prints its path last. Exit 1 on an anomaly, an error rate above --error-threshold, or a regression.

    Examples:
      coordsim compare --quick
      coordsim compare --quick --baseline coordsim-out/latest-compare
      coordsim compare -w insert,update --concurrency 1,16 -T 0.5 -P 5
      coordsim compare --mode real
    """
    from sim.compare.stats import check_fraction

    check_fraction("--threshold", threshold)
    check_fraction("--error-threshold", error_threshold)
    cfg = build_config(
        config_file, mode=mode, configurations=configs, workloads=workloads, concurrency=concurrency,
        ops_per_level=ops, open_loop_rate=rate, seed=seed, output=output, latency_profile=latency_profile,
        duration_s=duration, warmup_s=warmup, repeat=repeat, tables=tables_, max_window_s=max_window,
        drain_s=drain_limit,
    )
    steps: list[Step] = []
    if ablate is not None:
        if configs is not None:
            raise InvalidUsage("--ablate chooses the configurations itself; leave out --configs")
        steps = chain(*parse_ablate(ablate))
        if adapters is not None:
            # The scale-out as two steps of the chain: more cores, then more
            # processes at the same total cores (not a sweep of every step).
            above = [n for n in parse_adapters(adapters) if n > 1]
            if len(above) != 1:
                raise InvalidUsage("--ablate with --adapters takes one count above 1 (e.g. --adapters 2)")
            steps = with_scale_out(steps, above[0], cfg.coordinator(steps[-1].name).cores)
            adapters = None
        cfg = cfg.with_overrides(
            configurations=[st.name for st in steps],
            variants={**cfg.variants, **{st.name: st.variant for st in steps if st.variant is not None}},
        )
    if adapters is not None:
        cfg = with_adapters(cfg, parse_adapters(adapters))
    if quick:
        cfg = cfg.with_overrides(
            concurrency=concurrency or [1, 4, 16, 64], repeat=repeat or 2,
            # With --ops the windows are counted in operations: leave them so.
            duration_s=duration or (None if ops else 0.3 if cfg.mode == "real" else 0.02),
            warmup_s=warmup or (None if ops else 0.2 if cfg.mode == "real" else 0.01),
        )
    isolation = _pg_isolation(cfg, pg_isolation)
    n_jobs = _jobs(cfg, jobs)
    ref = _reference(cfg, reference)
    if sensitivity and cfg.mode != "virtual":  # refused before the sweep, not after it
        raise InvalidUsage("--sensitivity reruns the comparison tens of times with one cost scaled: "
                           "it needs --mode virtual (deterministic, short reruns)")  # fmt: skip
    base_rows = read_results(_baseline(baseline)) if baseline is not None else None
    _check_progress(progress)
    target = options_run_dir(cfg, "compare")
    wall0 = time.perf_counter()
    prov_start = start_provenance(argv=sys.argv, started=datetime.now(UTC))
    with staged_dir(target, "compare") as stage, postgres_for(cfg, isolation=isolation, output=target) as cfg, \
            workers(n_jobs, preload="sim.compare.runner") as pool:  # fmt: skip
        from sim.compare.runner import postmaster_pids  # heavy: not at start-up

        sampler = HostSampler(also_own=postmaster_pids(cfg) or list)
        sampler.start()
        rows, verdicts, anomalies = _sweep(
            cfg, stage, check=not no_check, progress=progress, dest=target, pool=pool
        )
        usage = sampler.stop()
        write_hgrms(stage, rows)
        checked = compare_baseline(rows, base_rows, threshold=threshold) if base_rows is not None else None
        regressions = checked.regressions if checked is not None else []
        plots = plot(stage, rows) + plot_scaleout(stage, rows)  # the second: with an adapter sweep
        waterfall = waterfall_lines(rows, steps) if steps else []
        if steps:
            plots += plot_waterfall(stage, rows, steps)
        write_csv(stage / "results.csv", rows)
        fragile_lines: list[str] = []
        found: BreakEvens | None = None
        if sensitivity:
            from sim.compare.breakeven import break_even, markdown_lines

            def rerun(scaled: Config, label: str) -> list[LevelRow]:
                _err.print(f"compare --sensitivity: {label}", markup=False, highlight=False)
                sub = stage / "sensitivity" / label.replace(" ", "-")
                return _sweep(scaled, sub, check=False, progress=progress, pool=pool)[0]

            found = break_even(cfg, rows, rerun, stage / "sensitivity", reference=ref)
            fragile_lines = markdown_lines(found)
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
            + f"{how}; wall time {time.perf_counter() - wall0:.0f} s on {os.cpu_count()} cores"
            + (f", passes on {n_jobs} worker processes. " if n_jobs > 1 else ". ")
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
        concluded = conclude(rows, reference=ref)
        prov = _provenance(prov_start, cfg, usage)
        # Virtual figures are simulated time, whatever else the host ran: the
        # warning is for real mode (provenance records the load either way).
        busy = provenance_warning(prov) if cfg.mode == "real" else None
        write_markdown(stage / "report.md", rows, plots, header=header, regressions=regressions,
                       knobs=knobs, verdicts=verdicts, ablation=waterfall, sensitivity=fragile_lines,
                       conclusions=concluded.markdown(), provenance=provenance_markdown(prov),
                       warning=busy)  # fmt: skip
        erring = [r for r in rows if r.error_rate > error_threshold]
        failed = bool(anomalies) or (bool(erring) and not allow_errors) or bool(regressions)
        doc = summary_document(
            rows, output=str(target), anomalies=anomalies, erring=erring, regressions=regressions,
            exit_code=1 if failed else 0,
            header={
                "mode": cfg.mode, "seed": cfg.seed, "configurations": list(cfg.configurations),
                "workloads": list(dict.fromkeys(r.workload for r in rows)), "passes": w.repeat,
                "window_s": w.duration_s, "warmup_s": w.warmup_s, "error_threshold": error_threshold,
                "wall_s": round(time.perf_counter() - wall0, 3), "cores": os.cpu_count(),
                "max_window_s": w.max_duration_s, "drain_s": w.drain_s,
            },
            conclusions=concluded.as_dict(), provenance=prov,
        )  # fmt: skip
        if found is not None:
            doc["break_even"] = found.as_dict()
        summary_text = json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"
        atomic_write(stage / "summary.json", lambda p: p.write_text(summary_text))
    if as_json:
        options.print_json(doc)
        raise typer.Exit(1 if failed else 0)
    plain = not _out.is_terminal
    out = Console(width=1000, soft_wrap=True) if plain else _out
    if busy is not None:  # at the top, as in report.md
        out.print(busy.strip("*"), style="bold", markup=False, highlight=False)
    for t in tables(rows, plain=plain, wide=wide or plain):
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
    if found is not None:
        from sim.compare.breakeven import render_lines

        for line in render_lines(found):
            out.print(line, markup=False, highlight=False)
    for line in concluded.lines():
        out.print(line, markup=False, highlight=False)
    _print_isolation(out, rows)
    if busy is not None:
        out.print(busy.strip("*"), style="bold", markup=False, highlight=False)
    out.print(provenance_footer(prov, simulated=cfg.mode == "virtual"), markup=False, highlight=False)
    out.print(f"report: {target}/report.md ({time.perf_counter() - wall0:.0f} s)", markup=False)
    for line in verdicts:
        out.print(line, markup=False, highlight=False)
    if erring:
        worst = max(erring, key=lambda r: r.error_rate)
        codes = ", ".join(f"{k} x{n}" for k, n in worst.errors_by_code)
        note = "" if allow_errors else " (exit 1; --allow-errors to accept)"
        out.print(f"errors above {error_threshold:.2%} in {len(erring)} cell(s); worst: {worst.workload} "
                  f"{worst.config} c={worst.concurrency}: {worst.error_rate:.2%} ({codes}){note}", markup=False)  # fmt: skip
    if checked is not None:
        out.print(checked.line(), markup=False, highlight=False)
        for x in checked.regressions:
            out.print(f"  {x}", markup=False, highlight=False)
    options.wrote(target)
    if failed:
        raise typer.Exit(1)


def _pg_isolation(cfg: Config, given: options.PgIsolationName | None) -> str | None:
    """`--pg-isolation`'s level, which only real mode has a use for."""
    if given is not None and cfg.mode != "real":
        raise InvalidUsage("--pg-isolation sets real mode's Postgres isolation level: use it with --mode real")
    return None if given is None else given.value


def _print_isolation(out: Console, rows: list[LevelRow]) -> None:
    """Real mode: the sessions' isolation level and the 40001 retries (read
    committed in bold: its figures are not CockroachDB's)."""
    from sim.compare.report import isolation_line

    line = isolation_line(rows)
    if line is not None:
        out.print(line, style="bold" if "not CockroachDB-like" in line else None, markup=False, highlight=False)


def _reference(cfg: Config, reference: str | None) -> str:
    """`--reference`, checked against the configurations compared, or its
    default: event-loop (today's design) when compared, else the first."""
    if reference is None:
        return "event-loop" if "event-loop" in cfg.configurations else cfg.configurations[0]
    if reference not in cfg.configurations:
        raise InvalidUsage(f"--reference {reference!r} is not among the configurations compared: "
                           f"{', '.join(cfg.configurations)}")  # fmt: skip
    return reference


def _provenance(start: ProvenanceStart, cfg: Config, usage: HostUsage) -> dict[str, Any]:
    """The run's provenance, read while its Postgres (if any) still runs."""
    from sim.runtime.core import Runtime, run

    async def finish(rt: Runtime) -> dict[str, Any]:
        return await finish_provenance(start, ended=datetime.now(UTC), host=usage,
                                       postgres_url=cfg.postgres_url if cfg.mode == "real" else None)  # fmt: skip

    return run(finish, virtual=False)


def _baseline(path: Path) -> Path:
    """`--baseline`: a directory must be a `compare` run (`latest` may name a
    `check` or `run` one; `latest-compare` is the newest comparison)."""
    if path.is_dir():
        command = output_command(path)
        if command != "compare":
            what = f"it is a `coordsim {command}` output" if command else "it is not a coordsim output"
            raise InvalidUsage(
                f"--baseline {path} is not a compare run ({what}): name a compare output directory "
                f"(the newest is {RUNS_ROOT}/{latest_name('compare')})"
            )
    return path


def options_run_dir(cfg: Config, command: str) -> Path:
    """Where `command` writes: `cfg.output` exactly, else a new run directory
    (`sim.runtime.outputs.run_dir`), as an absolute path."""
    return run_dir(cfg.output or None, command).absolute()


def _jobs(cfg: Config, jobs: int | None) -> int:
    """`--jobs`, or its default: one worker per core in virtual mode, 1 in real
    mode, where passes run one at a time (their numbers are wall-clock)."""
    if jobs is None:
        return (os.cpu_count() or 1) if cfg.mode == "virtual" else 1
    check_int("--jobs", jobs, low=1, high=MAX_JOBS, unit="worker processes")  # as `anomalies sweep` does
    if jobs > 1 and cfg.mode != "virtual":
        raise InvalidUsage(
            f"--jobs {jobs}: real mode measures wall-clock throughput, so its passes run one at a time "
            "(leave out --jobs, or use --mode virtual)"
        )
    return jobs


def _check_progress(progress: float | None) -> None:
    if progress is not None:
        check_float("--progress", progress, low=0, high=MAX_DURATION_S, unit="seconds", strict_low=True)


def _label(entry: str) -> str:
    """A `--workloads` entry as the name outputs use: a scenario file's stem."""
    return Path(entry).stem if is_scenario_file(entry) else entry


def _run_entry(
    cfg: Config,
    entry: str,
    traces: dict[str, Path],
    on_level: Callable[[str, int, LevelRow], None],
    on_pass: Callable[[str, int, RunOutput], None],
    pool: concurrent.futures.Executor | None,
) -> dict[str, RunOutput]:
    """One `--workloads` entry under every configuration: a built-in workload's
    sweep or a TOML scenario's (its workload, with its own settings) in
    `--repeat` passes interleaved across the configurations
    (`sim.compare.runner.run_workload`), or a Python scenario run `--repeat` times per
    configuration as one row. `on_pass` gets each pass's (or script's first
    run's) own output, to check. `pool`: worker processes for the passes of
    a virtual sweep (`run_workload`)."""
    from sim.compare.runner import run_workload
    from sim.compare.scripts import run_script
    from sim.load.scenarios import PythonScenario, load

    if not is_scenario_file(entry):
        return run_workload(cfg, cfg.configurations, entry, traces, on_level=on_level,
                            on_pass=lambda name, p: on_pass(name, p.index, p.output), pool=pool)  # fmt: skip
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
                        on_pass=lambda name, p: on_pass(name, p.index, p.output), pool=pool)  # fmt: skip
    return {name: replace(out, rows=[replace(r, workload=sc.name) for r in out.rows]) for name, out in outs.items()}


#: Checkers' outcomes from best to worst: a pair's verdict is its worst pass's.
_OUTCOME_RANK = {"valid": 0, "unknown": 1, "invalid": 2}


class _Ticker:
    """`-P SECONDS`, as pgbench's: a line on stderr every SECONDS of wall time
    with the level last measured, the operations measured so far and their
    rate. Its thread is started and joined by the `with` block that owns it."""

    def __init__(self, every: float | None, total: int) -> None:
        self.every = every
        self.total = total
        self.levels = 0
        self.ops = 0
        self.level = "starting"
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="coordsim-progress", daemon=True)

    def __enter__(self) -> _Ticker:
        if self.every is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def add(self, level: str, ops: int) -> None:
        self.levels += 1
        self.ops += ops
        self.level = level

    def line(self) -> str:
        wall = time.perf_counter() - self.t0
        rate = self.ops / wall if wall > 0 else 0.0
        return (f"progress: {wall:.1f} s, {self.level} ({self.levels}/{self.total} levels), "
                f"{self.ops:,} ops, {rate:,.0f} ops/s")  # fmt: skip

    def _loop(self) -> None:
        assert self.every is not None
        while not self._stop.wait(self.every):
            _err.print(self.line(), markup=False, highlight=False, soft_wrap=True)


def _sweep(
    cfg: Config, stage: Path, *, check: bool, progress: float | None = None, dest: Path | None = None,
    pool: concurrent.futures.Executor | None = None,
) -> tuple[list[LevelRow], list[str], list[str]]:
    """Every (workload, configuration) pair: measured in interleaved passes,
    each pass traced and (unless `check` is off) judged by the in-process
    checkers. Returns the rows (with their verdict: the worst of their
    passes'), one verdict line per pair (plus one per pass with an anomaly),
    and the anomaly lines. `dest` is where `stage` will be published (named
    in the anomaly lines); `progress` is `-P`; `pool` runs virtual passes
    (`--jobs`)."""
    from sim.history.checker import check_history

    rows: list[LevelRow] = []
    verdicts: list[str] = []
    anomalies: list[str] = []
    passes = cfg.window().repeat
    total = len(cfg.workloads) * len(cfg.configurations) * len(cfg.concurrency) * passes
    done = [0]
    t0 = time.perf_counter()
    live = _err.is_terminal
    where_to = dest if dest is not None else stage
    with _Ticker(progress, total) as ticker, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=_err, transient=True, disable=not live,
    ) as bar:  # fmt: skip
        task = bar.add_task("compare", total=total)
        for wl in cfg.workloads:
            label = _label(wl)
            bar.update(task, description=f"{wl}")
            outcome: dict[str, str] = {}
            found: dict[str, list[str]] = {}

            def on_level(name: str, index: int, row: LevelRow, wl: str = wl) -> None:
                bar.advance(task)
                bar.update(task, description=f"{wl} / {name} pass {index}")
                done[0] += 1
                ticker.add(f"{wl} / {name} pass {index} c={row.concurrency}", row.ops)
                if not live and progress is None:  # a line per level on a pipe or log, unless -P
                    _err.print(f"compare: {wl} / {name} pass {index} c={row.concurrency}: "
                               f"{row.throughput_ops_s:,.0f} ops/s, {row.errors} errors "
                               f"({done[0]}/{total}, {time.perf_counter() - t0:.0f} s)",
                               markup=False, highlight=False, soft_wrap=True)  # fmt: skip

            def on_pass(name: str, index: int, out: RunOutput, wl: str = wl, label: str = label,
                        outcome: dict[str, str] = outcome, found: dict[str, list[str]] = found) -> None:
                if not check:
                    return
                bar.update(task, description=f"{wl} / {name} pass {index}: checking")
                report = check_history(out.history, out.events)
                verdict = report.outcome.value
                if _OUTCOME_RANK.get(verdict, 1) >= _OUTCOME_RANK.get(outcome.get(name, "valid"), 1):
                    outcome[name] = verdict
                if report.names:
                    where = where_to / out.trace_dir.relative_to(stage)
                    line = (f"{label} / {name} (pass {index}): {verdict} — {', '.join(report.names)}; "
                            f"inspect: coordsim check {where}")  # fmt: skip
                    found.setdefault(name, []).append(line)
                    anomalies.append(line)
                elif verdict == "unknown":  # not an anomaly: what the checkers could not judge
                    found.setdefault(name, []).append(f"{label} / {name} (pass {index}): unknown — "
                                                      f"{report.coverage_summary()}")  # fmt: skip

            traces = {name: stage / "traces" / label / name for name in cfg.configurations}
            outs = _run_entry(cfg, wl, traces, on_level, on_pass, pool)
            for name in cfg.configurations:
                verdict = outcome.get(name, "") if check else ""
                if check:
                    verdicts.append(f"{label} / {name}: {verdict}")
                    verdicts.extend(found.get(name, []))
                rows.extend(replace(r, verdict=verdict) for r in outs[name].rows)
    return rows, verdicts, anomalies


# --- run ------------------------------------------------------------------------------


def run_scenario(
    scenario: Annotated[str | None, typer.Argument(metavar="SCENARIO", show_default=False, help="A shipped scenario (coordsim anomalies list, or a workload's TOML: select-one, insert, …), a workload name, or a .py/.toml path.")] = None,
    scenario_opt: options.ScenarioOpt = None,
    config: options.Config = None,
    mode: ModeOpt = None,
    seed: SeedOpt = None,
    output: OutOpt = None,
    latency_profile: ProfileOpt = None,
    progress: options.Progress = None,
    wide: options.Wide = False,
    pg_isolation: options.PgIsolation = None,
) -> None:
    """Run one scenario under one configuration and check it; write its trace (and the checker's verdicts) and print the directory last.

    A workload (or a TOML scenario) is measured as `compare` measures it, over its concurrency levels; a Python scenario runs once. Exit 1 if the checkers find an anomaly (or a scenario's own expectation fails); a Python scenario whose operations were not all judged exits 3, as `coordsim check` does.

    Examples:
      coordsim run seed001
      coordsim run select-one --config event-loop --seed 3
      coordsim run my-scenario.py -o my-run
    """
    from sim.load.scenarios import PythonScenario, load, shipped

    _check_progress(progress)
    name = options.kebab(options.scenario(scenario, scenario_opt), [*shipped(), *WORKLOADS])
    sc = load(name)
    config = config or options.DEFAULT_CONFIG
    cfg = build_config(
        None, mode=mode, configurations=[config], seed=seed, latency_profile=latency_profile, output=output,
    )
    if isinstance(sc, PythonScenario):
        target = options_run_dir(cfg, f"run {sc.name}")
        with staged_dir(target, "run") as stage, \
                postgres_for(cfg, isolation=_pg_isolation(cfg, pg_isolation), output=target) as cfg:
            verdict = _run_python(cfg, config, sc, stage, target)
        _out.print(verdict, markup=False, highlight=False)
        options.wrote(target)
        if verdict.rstrip().endswith("FAIL"):
            raise typer.Exit(1)
        if "\nchecker verdict: unknown\n" in verdict:
            raise typer.Exit(3)  # as `coordsim check`: not every operation was judged
        return
    cfg = cfg.with_overrides(**sc.params).with_overrides(workloads=[sc.workload], configurations=[config])
    target = options_run_dir(cfg, f"run {sc.name}")
    isolation = _pg_isolation(cfg, pg_isolation)
    with staged_dir(target, "run") as stage, postgres_for(cfg, isolation=isolation, output=target) as cfg:
        rows, verdicts, anomalies = _sweep(cfg, stage, check=True, progress=progress, dest=target)
        write_csv(stage / "results.csv", rows)
        write_hgrms(stage, rows)
    print_tables(tables(rows, plain=not _out.is_terminal, wide=wide or not _out.is_terminal), console=_out)
    _print_isolation(_out, rows)
    for line in verdicts:
        _out.print(line, markup=False, highlight=False)
    options.wrote(target)
    if anomalies:
        raise typer.Exit(1)


def _run_python(cfg: Config, config_name: str, sc: Any, stage: Path, target: Path) -> str:
    from sim.compare.scripts import run_script_once
    from sim.history.checker import check_history
    from sim.history.traces import write_trace
    from sim.history.verdict import VERDICT_FILE, verdict_document, write_verdict
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
            with staged_dir(target, "run") as partial:
                write_trace(partial / "trace", history, events, run=sc.name, config=config_name, seed=cfg.seed)
                (partial / "verdict.txt").write_text(f"{failure}\nFAIL\n")
            n = len(history)
            note = f" (trace of the {n} operation{'' if n == 1 else 's'} before it: {target / 'trace'})"
        except (CoordsimError, OSError) as exc:
            note = f" (trace not written: {' '.join(str(exc).split())})"
        raise CoordsimError(f"{failure}{note}") from error
    write_trace(stage / "trace", history, events, run=sc.name, config=config_name, seed=cfg.seed)
    report = check_history(history, events)
    write_verdict(stage / "trace" / VERDICT_FILE, verdict_document(report, trace="trace", ops=len(history)))
    lines = [f"{sc.name} under {config_name} ({cfg.mode}, seed {cfg.seed}): {len(history)} operations"]
    for v in report.verdicts:
        counts = ", ".join(f"{n} x{c}" for n, c in v.counts.items())
        state = (f"skipped ({v.reason})" if v.reason else "skipped") if v.skipped else v.outcome.value
        lines.append(f"  {v.checker:<9} {state}{' - ' + counts if counts else ''}")
        lines.extend(f"    {a.name}: ops {', '.join(str(o) for o in a.ops)}: {a.explanation}" for a in v.anomalies)
    # A skipped checker is fine only where another judged the same operations
    # (issue 34): the coverage says whether every operation was judged.
    lines.extend(report.coverage_lines() if not report.complete else [f"coverage: {report.coverage_summary()}"])
    lines.append(f"checker verdict: {report.outcome.value}")
    lines.extend(f"expectation failed: {f}" for f in one.failures)
    if one.failures or report.outcome.value == "invalid":
        lines.append("FAIL")
    text = "\n".join(lines) + "\n"
    (stage / "verdict.txt").write_text(text)
    return text
