"""`coordsim compare`, `coordsim run` and `coordsim config show`: the
architecture comparison users run (DESIGN.md §1).

Outputs go to a staging directory beside the output directory and are renamed
into place only when complete, so an interrupted or failed run leaves nothing
half-written under the output name.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from coordinator.config import CONFIGURATIONS
from sim.cli import options
from sim.compare.report import DEFAULT_REGRESSION_THRESHOLD
from sim.load.limits import (
    MAX_ADAPTERS,
    MAX_CONCURRENCY,
    MAX_DURATION_S,
    MAX_LEVELS,
    MAX_OPS,
    MAX_REAL_ADAPTERS,
    MAX_REPEAT,
    MAX_TABLES,
    check_float,
    check_int,
)
from sim.load.workloads import WORKLOADS
from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.outputs import output_command
from sim.runtime.run_dirs import RUNS_ROOT, latest_name, run_dir
from sim.runtime.staging import staged_dir
from sim.runtime.workers import MAX_JOBS, workers

if TYPE_CHECKING:
    import concurrent.futures

    from rich.console import Console

    from sim.compare.ablation import Step
    from sim.compare.breakeven import BreakEvens
    from sim.compare.host import HostUsage
    from sim.compare.pairs import Measured
    from sim.compare.provenance import ProvenanceStart
    from sim.compare.rows import LevelRow
    from sim.history.recorder import HistoryRecorder
    from sim.load.run_config import RunConfig

__all__ = ["register"]


# Made on first use, as is every import a command needs only to run (below,
# in the commands): `coordsim CMD --help` loads none of them (issue 37).
@functools.cache
def _out() -> Console:
    from rich.console import Console

    return Console()


@functools.cache
def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True)


config_app = typer.Typer(help="The run configuration of `coordsim compare`.")


def register(app: typer.Typer) -> None:
    """Adds this module's commands to the `coordsim` app."""
    app.command("compare")(compare)
    app.command("run")(run_scenario)
    app.add_typer(config_app, name="config")


# --- options (the shared ones: sim/cli/options.py) ------------------------------------

ConfigFile = Annotated[Path | None, typer.Option("--config-file", "-c", metavar="FILE", help="TOML file of `RunConfig` keys (`coordsim config show` prints them all).")]
ModeOpt = options.Mode
ConfigsOpt = Annotated[str | None, typer.Option("--configs", metavar="NAMES", show_default="all", help=f"Comma-separated configurations: {', '.join(CONFIGURATIONS)}, or variants of a config file.")]
WorkloadsOpt = Annotated[str | None, typer.Option("--workloads", "-w", metavar="NAMES", show_default="select-one,insert,update", help=f"Comma-separated workloads ({', '.join(WORKLOADS)}) or scenario files (.toml: a workload with its settings; .py: a script, run --repeat times).")]
ConcOpt = Annotated[str | None, typer.Option("--concurrency", metavar="N,N,…", show_default="1,4,16,64,256", help=f"Comma-separated client counts, each 1 to {MAX_CONCURRENCY:,}, at most {MAX_LEVELS:,} of them.")]
AdaptersOpt = Annotated[str | None, typer.Option("--adapters", metavar="N,N,…", show_default="each configuration's own (1)", help=f"Comma-separated counts of serving processes (adapters), each 1 to {MAX_ADAPTERS:,}, to sweep each decoupled configuration over, as variants <config>-<N>-adapters; event-loop configurations keep their one loop. In real mode each adapter is an OS process on the one Postgres (1 to {MAX_REAL_ADAPTERS:,}).")]
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
) -> RunConfig:
    """The effective `RunConfig`: defaults, then the TOML file, then flags (a
    `--mode` enum as its name, `--output` as a string, and workload names in
    their one spelling, an old one noted)."""
    from sim.load.run_config import RunConfig

    cfg = RunConfig.from_toml(config_file) if config_file is not None else RunConfig()
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
    from sim.compare.scaleout import parse_adapters, with_adapters
    from sim.load.run_config import knobs_toml

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
    from rich.console import Console

    from sim.cli.pg import postgres_for
    from sim.compare.ablation import chain, parse_ablate, waterfall_lines, with_scale_out
    from sim.compare.conclusions import conclude
    from sim.compare.hgrm import write_hgrms
    from sim.compare.host import HostSampler
    from sim.compare.outcome import Outcome, write_outcome
    from sim.compare.plots import plot, plot_waterfall
    from sim.compare.provenance import start_provenance
    from sim.compare.report import compare_baseline, read_results, write_csv
    from sim.compare.scaleout import parse_adapters, plot_scaleout, with_adapters
    from sim.compare.stats import check_fraction
    from sim.compare.terminal import print_outcome

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
                           "it needs --mode virtual (deterministic, short reruns)")
    base_rows = read_results(_baseline(baseline)) if baseline is not None else None
    _check_progress(progress)
    target = options_run_dir(cfg, "compare")
    wall0 = time.perf_counter()
    prov_start = start_provenance(argv=sys.argv, started=datetime.now(UTC))
    from sim.runtime.events import for_run

    # -v: the in-process passes' events bound to this run (each pass binds its
    # configuration, workload and seed); worker processes (--jobs > 1) emit none.
    with options.disk_full_is_external(target), staged_dir(target, "compare") as stage, \
            for_run(run=target.name), \
            postgres_for(cfg, isolation=isolation, output=target) as cfg, \
            workers(n_jobs, preload="sim.compare.runner") as pool:
        from sim.compare.runner import postmaster_pids  # heavy: not at start-up

        sampler = HostSampler(also_own=postmaster_pids(cfg) or list)
        sampler.start()
        found = _measure(cfg, stage, check=not no_check, progress=progress, dest=target, pool=pool)
        rows = found.rows
        usage = sampler.stop()
        write_hgrms(stage, rows)
        plots = plot(stage, rows) + plot_scaleout(stage, rows)  # the second: with an adapter sweep
        if steps:
            plots += plot_waterfall(stage, rows, steps)
        write_csv(stage / "results.csv", rows)
        break_evens: BreakEvens | None = None
        if sensitivity:
            from sim.compare.breakeven_search import break_even

            def rerun(scaled: RunConfig, label: str) -> list[LevelRow]:
                _err().print(f"compare --sensitivity: {label}", markup=False, highlight=False)
                sub = stage / "sensitivity" / label.replace(" ", "-")
                return _measure(scaled, sub, check=False, progress=progress, pool=pool).rows

            break_evens = break_even(cfg, rows, rerun, stage / "sensitivity", reference=ref)
        outcome = Outcome(
            cfg=cfg, rows=rows, verdicts=found.verdicts, anomalies=found.anomalies, plots=plots,
            baseline=compare_baseline(rows, base_rows, threshold=threshold) if base_rows is not None else None,
            waterfall=waterfall_lines(rows, steps) if steps else [], break_evens=break_evens,
            conclusions=conclude(rows, reference=ref), provenance=_provenance(prov_start, cfg, usage),
            error_threshold=error_threshold, allow_errors=allow_errors,
        )
        doc = write_outcome(stage, outcome, output=target, wall_s=time.perf_counter() - wall0,
                            cores=os.cpu_count(), jobs=n_jobs)
    if as_json:
        options.print_json(doc)
        raise typer.Exit(1 if outcome.failed else 0)
    plain = not _out().is_terminal
    print_outcome(Console(width=1000, soft_wrap=True) if plain else _out(), outcome, output=target, plain=plain,
                  wide=wide or plain, wall_s=time.perf_counter() - wall0)
    options.wrote(target)
    if outcome.failed:
        raise typer.Exit(1)


def _pg_isolation(cfg: RunConfig, given: options.PgIsolationName | None) -> str | None:
    """`--pg-isolation`'s level, which only real mode has a use for."""
    if given is not None and cfg.mode != "real":
        raise InvalidUsage("--pg-isolation sets real mode's Postgres isolation level: use it with --mode real")
    return None if given is None else given.value


def _reference(cfg: RunConfig, reference: str | None) -> str:
    """`--reference`, checked against the configurations compared, or its
    default: event-loop (today's design) when compared, else the first."""
    if reference is None:
        return "event-loop" if "event-loop" in cfg.configurations else cfg.configurations[0]
    if reference not in cfg.configurations:
        raise InvalidUsage(f"--reference {reference!r} is not among the configurations compared: "
                           f"{', '.join(cfg.configurations)}")
    return reference


def _provenance(start: ProvenanceStart, cfg: RunConfig, usage: HostUsage) -> dict[str, Any]:
    """The run's provenance, read while its Postgres (if any) still runs."""
    from sim.compare.provenance import finish_provenance
    from sim.runtime.core import Runtime, run

    async def finish(rt: Runtime) -> dict[str, Any]:
        return await finish_provenance(start, ended=datetime.now(UTC), host=usage,
                                       postgres_url=cfg.postgres_url if cfg.mode == "real" else None)

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


def options_run_dir(cfg: RunConfig, command: str) -> Path:
    """Where `command` writes: `cfg.output` exactly, else a new run directory
    (`sim.runtime.run_dirs.run_dir`), as an absolute path."""
    return run_dir(cfg.output or None, command).absolute()


def _jobs(cfg: RunConfig, jobs: int | None) -> int:
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


def _measure(
    cfg: RunConfig, stage: Path, *, check: bool, progress: float | None = None, dest: Path | None = None,
    pool: concurrent.futures.Executor | None = None,
) -> Measured:
    """`sim.compare.pairs.measure_pairs` with its progress on stderr (`-P` is
    `progress`)."""
    from sim.cli.pair_progress import shown
    from sim.compare.pairs import measure_pairs

    with shown(_err(), cfg, progress) as shows:
        return measure_pairs(cfg, stage, shows, check=check, dest=dest, pool=pool)


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
    events: Annotated[bool, typer.Option("--events", help="Keep the components' structured events (group commits, oracle calls, catalog transactions, fencing, read_ts batches, faults) in the run directory as events.jsonl; -v shows them on stderr.")] = False,
) -> None:
    """Run one scenario under one configuration and check it; write its trace (and the checker's verdicts) and print the directory last.

    A workload (or a TOML scenario) is measured as `compare` measures it, over its concurrency levels; a Python scenario runs once. Exit 1 if the checkers find an anomaly (or a scenario's own expectation fails); a Python scenario whose operations were not all judged exits 3, as `coordsim check` does.

    Examples:
      coordsim run seed001
      coordsim run select-one --config event-loop --seed 3
      coordsim run my-scenario.py -o my-run
      coordsim run seed001 --events -v --log-json
    """
    from sim.cli.pg import postgres_for
    from sim.cli.tables import print_tables
    from sim.compare.hgrm import write_hgrms
    from sim.compare.report import write_csv
    from sim.compare.tables import tables
    from sim.compare.terminal import print_isolation
    from sim.load.scenarios import PythonScenario, load, shipped
    from sim.runtime.events import for_run

    _check_progress(progress)
    name = options.kebab(options.scenario(scenario, scenario_opt), [*shipped(), *WORKLOADS])
    sc = load(name)
    config = config or options.DEFAULT_CONFIG
    cfg = build_config(
        None, mode=mode, configurations=[config], seed=seed, latency_profile=latency_profile, output=output,
    )
    if isinstance(sc, PythonScenario):
        target = options_run_dir(cfg, f"run {sc.name}")
        with options.disk_full_is_external(target), staged_dir(target, "run") as stage, \
                for_run(run=target.name, config=config, directory=stage if events else None), \
                postgres_for(cfg, isolation=_pg_isolation(cfg, pg_isolation), output=target) as cfg:
            verdict = _run_python(cfg, config, sc, stage, target, every=progress)
        _out().print(verdict, markup=False, highlight=False)
        options.wrote(target)
        if verdict.rstrip().endswith("FAIL"):
            raise typer.Exit(1)
        if "\nchecker verdict: unknown\n" in verdict:
            raise typer.Exit(3)  # as `coordsim check`: not every operation was judged
        return
    cfg = cfg.with_overrides(**sc.params).with_overrides(workloads=[sc.workload], configurations=[config])
    target = options_run_dir(cfg, f"run {sc.name}")
    isolation = _pg_isolation(cfg, pg_isolation)
    with options.disk_full_is_external(target), staged_dir(target, "run") as stage, \
            for_run(run=target.name, config=config, directory=stage if events else None), \
            postgres_for(cfg, isolation=isolation, output=target) as cfg:
        found = _measure(cfg, stage, check=True, progress=progress, dest=target)
        write_csv(stage / "results.csv", found.rows)
        write_hgrms(stage, found.rows)
    out = _out()
    print_tables(tables(found.rows, plain=not out.is_terminal, wide=wide or not out.is_terminal), console=out)
    print_isolation(out, found.rows)
    for line in found.verdicts:
        out.print(line, markup=False, highlight=False)
    options.wrote(target)
    if found.anomalies:
        raise typer.Exit(1)


def _run_python(cfg: RunConfig, config_name: str, sc: Any, stage: Path, target: Path, *, every: float | None) -> str:
    from sim.cli.heartbeat import heartbeat, virtual_status
    from sim.compare.scripts import run_script_once, verdict_text
    from sim.history.checker import check_history
    from sim.history.traces import write_trace
    from sim.history.verdict_file import VERDICT_FILE, verdict_document, write_verdict
    from sim.load.scenarios import scenario_error

    seen: list[HistoryRecorder] = []

    def status() -> str:
        done = f"{seen[-1].completed:,} operations done" if seen else "starting"
        vt = virtual_status() if cfg.mode == "virtual" else ""
        return f"{vt}, {done}" if vt else done

    # A script may run for long with no level to count: a heartbeat (-P: its period).
    with heartbeat(_err(), f"run {sc.name} on {config_name}", every=every, status=status):
        one = run_script_once(cfg, config_name, sc, seed=cfg.seed, on_recorder=seen.append)
    history, events, error = one.history, one.events, one.error
    if one.stuck is not None:
        # A result, not bad input (issue 38 item 5): its line, exit 1.
        print(f"coordsim: error: scenario {getattr(sc, 'path', None) or sc.name}: {one.stuck}", file=sys.stderr)  # noqa: T201
        raise typer.Exit(1)
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
    text = verdict_text(one, report, scenario=sc.name, config_name=config_name, cfg=cfg)
    (stage / "verdict.txt").write_text(text)
    return text
