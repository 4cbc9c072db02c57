"""`coordsim anomalies run|sweep|list` and `coordsim shrink`: run one anomaly
scenario for one seed and check it, run it over many seeds on worker processes
(sim/nemesis/sweep.py), or shrink a failing one to its smallest reproduction.
`coordsim anomalies shrink` is the deprecated second name of `coordsim shrink`.

Exit codes follow `coordsim check`: 0 valid, 1 invalid, 3 unknown, 2 bad input.
A known-bad variant that has no effect on the chosen configuration is bad input
(`coordinator.config.check_known_bad`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from sim.cli import options
from sim.cli.matrix import matrix_command
from sim.load.limits import (
    MAX_CLIENTS,
    MAX_SEED,
    MAX_SEEDS,
    MAX_SIZE,
    MAX_STUCK_AFTER_S,
    REAL_STUCK_AFTER_S,
    STUCK_AFTER_S,
    check_int,
)
from sim.nemesis.anomaly_scenarios import SCENARIOS
from sim.runtime.errors import InvalidUsage
from sim.runtime.run_dirs import run_dir
from sim.runtime.staging import staged_dir

if TYPE_CHECKING:
    from rich.console import Console

    from sim.nemesis.anomaly_spec import Spec
    from sim.nemesis.plan import Mode
    from sim.nemesis.sweep import SeedResult, Summary

__all__ = ["register"]


# Made on first use, as is every import a command needs only to run (below,
# in the commands): `coordsim CMD --help` loads none of them (issue 37).
@functools.cache
def _out() -> Console:
    from rich.console import Console

    return Console(soft_wrap=True)


@functools.cache
def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, highlight=False)


#: Exit codes by `Outcome`, keyed by its values (a StrEnum: `EXIT[Outcome.VALID]`
#: is 0) so that the checkers are imported only when a command runs.
EXIT: Final = {"valid": 0, "invalid": 1, "unknown": 3}
#: `shrink --max-runs`: each run is a whole scenario (a second or so).
MAX_SHRINK_RUNS: Final = 100_000
#: Failing seeds a sweep prints (summary.json has them all).
SHOWN_FAILING: Final = 50

anomalies_app = typer.Typer(help="Anomaly scenarios: run and check one scenario for one seed.")

_KnownBad = Annotated[
    list[str] | None,
    typer.Option("--known-bad", metavar="NAME", help="Switch on a known-bad variant (repeatable)."),
]
_Clients = Annotated[
    int | None, typer.Option(metavar="N", show_default="the scenario's", help=f"Clients, 1 to {MAX_CLIENTS:,}.")
]
_Size = Annotated[
    int | None, typer.Option(metavar="N", show_default="the scenario's", help=f"Operations or rounds per client, 1 to {MAX_SIZE:,}.")
]
_Faults = Annotated[
    str | None,
    typer.Option(metavar="PLAN", show_default="drawn from the seed",
                 help="Fault plan, e.g. 'crash-restart@12ms+3ms,oracle-slow@20ms+5msx20' (virtual), "
                 "'pg-kill@10ms+50ms' (real) or 'none'."),
]




def _schedule(text: str | None) -> str:
    """The canonical policy (`Spec` refuses one other than fifo in real mode)."""
    from sim.runtime.schedule import parse_schedule

    return parse_schedule(text or "fifo")


def _mode(text: str | options.ModeName | None) -> Mode:
    from sim.nemesis.plan import MODES

    text = str(text.value if isinstance(text, options.ModeName) else text or options.DEFAULT_MODE)
    for m in MODES:
        if m == text:
            return m
    raise InvalidUsage(f"unknown mode {text!r}; known: {', '.join(MODES)}")


def _spec(
    scenario: str, config: str, seed: int, known_bad: list[str] | None,
    clients: int | None, size: int | None, faults: str | None, mode: str | options.ModeName | None,
) -> Spec:
    from coordinator.config import check_known_bad
    from sim.nemesis.anomaly_spec import coordinator_config, default_spec, parse_known_bad
    from sim.nemesis.plan import FaultPlan

    if clients is not None:
        check_int("--clients", clients, low=1, high=MAX_CLIENTS, unit="clients")
    if size is not None:
        check_int("--size", size, low=1, high=MAX_SIZE, unit="operations per client")
    spec = default_spec(
        scenario, config, seed, known_bad=parse_known_bad(known_bad or []), mode=_mode(mode)
    )
    check_known_bad(coordinator_config(config).with_overrides(known_bad=spec.known_bad))
    return replace(
        spec,
        clients=spec.clients if clients is None else clients,
        size=spec.size if size is None else size,
        faults=spec.faults if faults is None else FaultPlan.parse(faults),
    )


def _print_report(
    spec: Spec, n_ops: int, report_names: list[str], anomalies: list[tuple[str, str, str]],
    *, schedule: str = "fifo", rerun: str | None = None, what: str | None = None,
) -> None:
    from rich.markup import escape

    sched = f", schedule {schedule}" if schedule != "fifo" else ""
    _out().print(f"[bold]{escape(what or spec.scenario)}[/bold] on {spec.config}, seed {spec.seed}, "
                 f"{spec.mode} mode{sched}: {n_ops} operations, faults: {spec.faults}")
    for name, checker, explanation in anomalies:
        _out().print(f"\n[bold red]{name}[/bold red] [dim]({checker})[/dim]")
        _out().print(escape(explanation))
    _out().print(f"\nanomalies: {', '.join(report_names) or 'none'}")
    _out().print(f"rerun: {escape(rerun or spec.command())}")


def _check_postgres(mode: str | None) -> None:
    """Real mode on `$COORDSIM_POSTGRES_URL`: one line now if the server cannot
    be reached or refuses us (a wrong password), rather than a driver's
    traceback from inside the run. (An embedded server is started, and
    reported on, by the run itself.)"""
    if mode != "real":
        return
    from sim.cli.pg import check_reachable
    from sim.runtime.urls import driver_url
    from sim.services.postgres import postgres_url_from_env

    url = postgres_url_from_env()
    if url is not None:
        check_reachable(url, dsn=driver_url(url), timeout=10, verb="use")


@anomalies_app.command("run")
def anomalies_run(
    scenario: Annotated[
        str | None, typer.Argument(metavar="SCENARIO", show_default=False,
                                   help=f"One of: {', '.join(SCENARIOS)} (with --scenario-file: "
                                   "whose settings the file's program runs with).")
    ] = None,
    scenario_opt: options.ScenarioOpt = None,
    scenario_file: Annotated[
        Path | None, typer.Option("--scenario-file", metavar="FILE", help="A .py scenario file "
                                  "(`async def scenario(sim)`, e.g. written by `coordsim shrink -o`) to run "
                                  "instead of the scenario's own program; its RUN settings are the defaults.")
    ] = None,
    config: options.Config = None,
    seed: options.Seed = None,
    known_bad: _KnownBad = None,
    clients: _Clients = None,
    size: _Size = None,
    faults: _Faults = None,
    mode: options.Mode = None,
    schedule: options.Schedule = None,
    output: options.Output = None,
    old_out: options.OldOut = None,
    as_json: options.Json = False,
    stuck_after: Annotated[
        float | None, typer.Option("--stuck-after", metavar="SECONDS", show_default=f"{REAL_STUCK_AFTER_S:g} (real mode)",
                                   help="Real mode: stop the run as stuck after this many seconds of wall time "
                                   f"(at most {MAX_STUCK_AFTER_S:g}) and report it (exit 1, with its last "
                                   f"operations). Virtual mode's limit is {STUCK_AFTER_S:g} simulated seconds, "
                                   "which only the simulation's own progress advances.")
    ] = None,
) -> None:
    """Run one anomaly scenario for one seed and check its history; write the trace and verdict.json, and print the directory last.

    Virtual mode: the same seed and schedule give the same history. Real mode: the same statements and faults on Postgres, in whatever interleaving the run takes. Exit 0 valid, 1 invalid, 3 unknown.

    Examples:
      coordsim anomalies run seed001 --seed 3
      coordsim anomalies run seed001 --known-bad peeks-ignore-catalog-ts   # exit 1: the checkers name it
      coordsim anomalies run --scenario-file repro.py   # exit 1: a file `coordsim shrink -o repro.py` wrote
    """
    from rich.markup import escape

    from sim.cli.check import document
    from sim.cli.heartbeat import heartbeat, virtual_status
    from sim.cli.pg import DeathWatch, on_postgres_death
    from sim.history.checker import check_history
    from sim.history.verdict_file import VERDICT_FILE, write_verdict
    from sim.nemesis.anomalies import RunStuck, run_spec
    from sim.nemesis.shrink import load_scenario_file, run_program
    from sim.nemesis.sweep import write_run_trace
    from sim.runtime.events import for_run

    output = options.pick(output, old_out, old_name="--out", new_name="-o/--output")
    if scenario_opt is not None and (scenario_opt.endswith(".py") or Path(scenario_opt).is_file()):
        # `--scenario FILE` was this command's spelling of --scenario-file.
        options.deprecated(f"--scenario {scenario_opt}", "--scenario-file")
        scenario_file, scenario_opt = scenario_file or Path(scenario_opt), None
    scenario = options.maybe_scenario(scenario, scenario_opt)
    program = None
    settings: dict[str, Any] = {}
    if scenario_file is not None:
        program, settings = load_scenario_file(scenario_file)
        if _mode(mode) != "virtual":
            raise InvalidUsage("--scenario-file runs in virtual mode only")
    base = scenario if scenario is not None else settings.get("scenario")
    if not isinstance(base, str):
        raise InvalidUsage("name a scenario (or a --scenario-file whose RUN names one)")
    spec = _spec(
        options.kebab(base, SCENARIOS),
        config or str(settings.get("config", options.DEFAULT_CONFIG)),
        seed if seed is not None else settings.get("seed", options.DEFAULT_SEED),
        known_bad if known_bad is not None else [str(k) for k in settings.get("known_bad", [])],
        clients, size, faults if faults is not None else settings.get("faults"), mode,
    )
    policy = _schedule(schedule if schedule is not None else settings.get("schedule"))
    spec = replace(spec, schedule=policy, stuck_after_s=stuck_after)
    _check_postgres(spec.mode)
    rerun = spec.command()
    if scenario_file is not None:
        rerun = f"{rerun} --scenario-file {shlex.quote(str(scenario_file))}"
    target = run_dir(output, f"anomalies run {spec.scenario}").absolute()
    # Staged: an output that is not coordsim's is refused before the run, and
    # a failed or interrupted run leaves nothing there.
    watch = DeathWatch(target)
    with options.disk_full_is_external(target), staged_dir(target, "anomalies run") as stage, \
            for_run(run=target.name, config=spec.config), on_postgres_death(watch):
        try:
            with heartbeat(_err(), f"anomalies run {spec.scenario} on {spec.config}, seed {spec.seed}",
                           status=virtual_status):
                if program is not None:
                    history, events = run_program(spec, program, schedule=policy)
                else:
                    history, events = run_spec(spec, on_death=watch)
        except RunStuck as exc:
            # A result, not a crash: the liveness failure and where it stopped.
            print(f"coordsim: {exc}; rerun: {rerun}", file=sys.stderr, flush=True)  # noqa: T201
            raise typer.Exit(1) from None
        report = check_history(history, events)
        write_run_trace(stage, spec, history, events)
        doc = document(report, trace=str(target), ops=history.n)
        write_verdict(stage / VERDICT_FILE, doc)
    if as_json:
        # "replay", the key's name before 0.2 ("replay" names the Spark job), is kept until 0.3.
        options.print_json({"output": str(target), "rerun": rerun, "replay": rerun, **doc})
        raise typer.Exit(EXIT[report.outcome])
    shown = [(a.name, v.checker, a.explanation) for v in report.verdicts for a in v.anomalies[:2]]
    what = f"{scenario_file} ({spec.scenario})" if scenario_file is not None else None
    _print_report(spec, history.n, report.names, shown, schedule=policy, rerun=rerun, what=what)
    # Fail closed: what no checker judged is why a verdict is unknown.
    for line in report.coverage_lines() if not report.complete else [f"coverage: {report.coverage_summary()}"]:
        _out().print(escape(line))
    _out().print(f"verdict: [bold]{report.outcome.value}[/bold]")
    options.wrote(target)
    raise typer.Exit(EXIT[report.outcome])


def _print_summary(summary: Summary, out: Path, seconds: float, jobs: int) -> None:
    from rich.markup import escape

    from sim.history.checker.verdict import Outcome
    from sim.nemesis.sweep import SUMMARY_FILE

    bad = f", known-bad: {', '.join(summary.known_bad)}" if summary.known_bad else ""
    seeds = [r.seed for r in summary.results]
    _out().print(f"[bold]{summary.scenario}[/bold] on {summary.config}{escape(bad)}, seeds "
                 f"{seeds[0]}..{seeds[-1]}: {len(seeds):,} runs, {summary.ops:,} operations "
                 f"in {seconds:.1f} s on {jobs} worker{'s' if jobs > 1 else ''}")
    names = summary.by_name()
    shown = ", ".join(f"{n} in {e['seeds']} seeds ({e['count']} in all)" for n, e in names.items())
    _out().print(f"anomalies: {shown or 'none'}")
    internal = sum(r.internal_errors for r in summary.results)
    if internal:
        _out().print(f"internal errors (XX000): {internal}")
    unknown = [r.seed for r in summary.results if r.outcome == Outcome.UNKNOWN.value]
    if unknown:
        more = f" … ({len(unknown)} in all)" if len(unknown) > 20 else ""
        _out().print(f"unknown (not every operation judged: no checker could, or a bound was hit; "
                     f"`coordsim anomalies run` a seed for its coverage): seeds "
                     f"{', '.join(map(str, unknown[:20]))}{more}")
    failing = summary.failing
    if failing:
        _out().print(f"\nfailing seeds ({len(failing)}):")
    for r in failing[:SHOWN_FAILING]:
        what = ", ".join(r.anomalies) or ("crashed: " + (r.error or "") if r.error else "")
        if r.internal_errors:
            what += f"{', ' if what else ''}{r.internal_errors} internal errors"
        _out().print(f"  seed {r.seed}: {escape(what)}")
        _out().print(f"    rerun: {escape(r.rerun)}")
    if len(failing) > SHOWN_FAILING:
        _out().print(f"  … and {len(failing) - SHOWN_FAILING} more in {SUMMARY_FILE}")
    _out().print(f"\nsummary: {escape(str(out / SUMMARY_FILE))}")
    _out().print(f"verdict: [bold]{summary.outcome.value}[/bold]")


FirstSeed = Annotated[
    int, typer.Option("--first-seed", metavar="N", help="The first seed: it and the last, N + --seeds - 1, are 64-bit integers.")
]
_Seeds = Annotated[int, typer.Option("--seeds", metavar="N", help=options.SEEDS_HELP.format(maximum=MAX_SEEDS))]


@anomalies_app.command("sweep")
def anomalies_sweep(
    seeds: _Seeds,
    scenario: options.ScenarioArg = None,
    scenario_opt: options.ScenarioOpt = None,
    config: options.Config = None,
    known_bad: _KnownBad = None,
    first_seed: FirstSeed = 0,
    jobs: options.Jobs = None,
    schedule: options.Schedule = None,
    output: options.Output = None,
    old_out: options.OldOut = None,
    as_json: options.Json = False,
) -> None:
    """Run a scenario over many seeds (virtual mode) on worker processes, check every seed with every checker, and summarize.

    Prints anomalies by name and each failing seed with its rerun command; writes summary.json, verdict.json and each failing seed's trace, and prints the directory last. Exit 1 if any seed failed. (`coordsim spark sweep` runs the seeds as Spark tasks.)

    Examples:
      coordsim anomalies sweep seed001 --seeds 200
      coordsim anomalies sweep split-brain --config event-loop --seeds 1000 -j 2 --schedule random
    """
    from coordinator.config import check_known_bad
    from sim.cli.heartbeat import heartbeat
    from sim.nemesis.anomaly_spec import coordinator_config, parse_known_bad
    from sim.nemesis.sweep import Summary, SweepWriter, sweep, tasks
    from sim.runtime.events import for_run
    from sim.runtime.workers import MAX_JOBS

    output = options.pick(output, old_out, old_name="--out", new_name="-o/--output")
    scenario = options.kebab(options.scenario(scenario, scenario_opt), SCENARIOS)
    config = config or options.DEFAULT_CONFIG
    check_known_bad(coordinator_config(config).with_overrides(known_bad=parse_known_bad(known_bad or [])))
    if 1 <= seeds <= MAX_SEEDS:  # (a bad --seeds is `tasks`'s to name)
        check_int("--first-seed", first_seed, low=-MAX_SEED, high=MAX_SEED - seeds + 1)
    work = tasks(scenario, config, seeds=seeds, first_seed=first_seed, known_bad=known_bad or [],
                 schedule=_schedule(schedule))
    n_jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    check_int("--jobs", n_jobs, low=1, high=MAX_JOBS, unit="worker processes")
    by_seed = {t.seed: t for t in work}
    out = run_dir(output, "anomalies sweep").absolute()
    t0 = time.monotonic()
    # -v: the seeds' events bound to this run (--jobs 1; worker processes emit none).
    with options.disk_full_is_external(out), staged_dir(out, "anomalies sweep") as stage, \
            for_run(run=out.name, config=config):
        writer = SweepWriter(stage, out)
        done = [0, 0]  # seeds, failing ones

        def on_result(r: SeedResult) -> None:
            writer.add(by_seed[r.seed], r)
            done[0] += 1
            done[1] += r.failing

        with heartbeat(_err(), f"anomalies sweep {scenario} on {config}",
                       status=lambda: f"{done[0]}/{len(work)} seeds, {done[1]} failing"):
            results = sweep(work, jobs=n_jobs, on_result=on_result)
        summary = Summary(scenario, config, work[0].known_bad, tuple(results), work[0].schedule)
        writer.finish(summary)
    if as_json:
        options.print_json({"output": str(out), **summary.to_json()})
        raise typer.Exit(EXIT[summary.outcome])
    _print_summary(summary, out, time.monotonic() - t0, min(n_jobs, len(work)))
    options.wrote(out)
    raise typer.Exit(EXIT[summary.outcome])


@anomalies_app.command("list")
def anomalies_list() -> None:
    """List the anomaly scenarios, with their clients, size and what each exercises.

    Examples:
      coordsim anomalies list
    """
    from rich.markup import escape

    for name, sc in SCENARIOS.items():
        _out().print(f"[bold]{name}[/bold] (clients {sc.clients}, size {sc.size}): {escape(sc.doc)}")


ShrinkOutput = Annotated[
    Path | None,
    typer.Option("--output", "-o", metavar="FILE", help="Write the minimal reproduction as a .py scenario file "
                 "here (virtual mode), replayable with `coordsim anomalies run --scenario-file FILE`."),
]


def shrink_command(
    scenario: Annotated[
        str | None, typer.Argument(metavar="SCENARIO", show_default=False, help=f"One of: {', '.join(SCENARIOS)}.")
    ] = None,
    scenario_opt: options.ScenarioOpt = None,
    config: options.Config = None,
    seed: options.Seed = None,
    known_bad: _KnownBad = None,
    clients: _Clients = None,
    size: _Size = None,
    faults: _Faults = None,
    mode: options.Mode = None,
    anomaly: Annotated[
        str | None, typer.Option(metavar="NAME", show_default="the most specific found", help="Keep this anomaly.")
    ] = None,
    max_runs: Annotated[int, typer.Option(metavar="N", help=f"At most this many scenario runs, 1 to {MAX_SHRINK_RUNS:,}.")] = 400,
    schedule: options.Schedule = None,
    output: ShrinkOutput = None,
    old_out: Annotated[Path | None, typer.Option("--out", hidden=True, metavar="FILE")] = None,
) -> None:
    """Shrink a failing scenario while the same anomaly still appears, and print the smallest reproduction.

    Virtual mode: fewer clients, operations and faults, then delta debugging over single statements, clients and fault events; with -o, writes the minimal reproduction as a scenario file (its path printed last). Real mode: the first pass only, best effort (a candidate that happens not to show the anomaly is dropped). Exit 1 with the reproduction, 0 if there was no anomaly to shrink.

    Examples:
      coordsim shrink seed001 --config decoupled --known-bad peeks-ignore-catalog-ts -o repro.py   # exit 1
      coordsim anomalies run --scenario-file repro.py   # exit 1: the same anomaly
    """
    from rich.markup import escape

    from sim.cli.heartbeat import heartbeat
    from sim.history.checker import ANOMALY_NAMES
    from sim.nemesis.shrink import shrink

    out = options.pick(output, old_out, old_name="--out", new_name="-o/--output")
    scenario = options.kebab(options.scenario(scenario, scenario_opt), SCENARIOS)
    config = config or options.DEFAULT_CONFIG
    seed = seed if seed is not None else options.DEFAULT_SEED
    spec = _spec(scenario, config, seed, known_bad, clients, size, faults, mode)
    check_int("--max-runs", max_runs, low=1, high=MAX_SHRINK_RUNS, unit="runs")
    if anomaly is not None and anomaly not in ANOMALY_NAMES:
        raise InvalidUsage(f"unknown anomaly {anomaly!r}; known: {', '.join(ANOMALY_NAMES)}")
    policy = _schedule(schedule)
    spec = replace(spec, schedule=policy)
    if spec.mode == "virtual":
        _shrink_ops(spec, policy, anomaly, max_runs, out)
    if out is not None:
        raise InvalidUsage("-o/--output needs virtual mode (a scenario file replays deterministically)")
    _check_postgres(spec.mode)
    with contextlib.ExitStack() as stack:
        url = None
        if spec.mode == "real":
            from sim.services.postgres import postgres_server

            url = stack.enter_context(postgres_server(fsync=False))
        stack.enter_context(heartbeat(_err(), f"shrink {spec.scenario} on {spec.config}"))
        result = shrink(
            spec,
            anomaly=anomaly,
            max_runs=max_runs,
            progress=lambda s: _out().print(f"[dim]{escape(s)}[/dim]"),
            postgres_url=url,
        )
    if result is None:
        _out().print(f"{escape(spec.command())}: no {anomaly or 'anomaly'} to shrink")
        raise typer.Exit(0)
    shown = [
        (a.name, v.checker, a.explanation)
        for v in result.report.verdicts
        for a in v.anomalies
        if a.name == result.anomaly
    ][:1]
    _out().print(f"smallest reproduction of [bold]{result.anomaly}[/bold] after {result.runs} runs:")
    _print_report(result.spec, result.history.n, result.report.names, shown)
    raise typer.Exit(1)


def _shrink_ops(spec: Spec, policy: str, anomaly: str | None, max_runs: int, out: Path | None) -> None:
    """`shrink` in virtual mode: down to single operations, into a scenario file."""
    from rich.markup import escape

    from sim.cli.heartbeat import heartbeat
    from sim.nemesis.shrink import script_file, shrink_ops
    from sim.runtime.outputs import atomic_write

    if out is not None and out.exists():
        # coordsim never overwrites a file it did not create.
        raise InvalidUsage(f"{out} exists; name another -o/--output")
    if out is not None and out.suffix != ".py":
        raise InvalidUsage(f"-o/--output {out}: a scenario file ends in .py")
    path = out if out is not None else Path("FILE.py")
    with heartbeat(_err(), f"shrink {spec.scenario} on {spec.config}"):
        result = shrink_ops(spec, schedule=policy, anomaly=anomaly, max_runs=max_runs,
                            progress=lambda s: _out().print(f"[dim]{escape(s)}[/dim]"))
    if result is None:
        _out().print(f"{escape(spec.command())}: no {anomaly or 'anomaly'} to shrink")
        raise typer.Exit(0)
    rerun = f"uv run coordsim anomalies run --scenario-file {shlex.quote(str(path))}"
    text = script_file(result, rerun=rerun)
    if out is not None:
        with options.disk_full_is_external(out):
            atomic_write(out, lambda p: p.write_text(text, encoding="utf-8"))
    shown = [
        (a.name, v.checker, a.explanation)
        for v in result.report.verdicts
        for a in v.anomalies
        if a.name == result.anomaly
    ][:1]
    s = result.script
    _out().print(f"smallest reproduction of [bold]{result.anomaly}[/bold] after {result.runs} runs: "
                 f"{len(s.steps)} statements by {len(s.clients)} clients, {result.history.n} operations "
                 f"(from {result.original_ops}), faults: {s.spec.faults}")
    for step in s.steps:
        _out().print(f"  {step.at_s * 1000:8.3f} ms  {step.client}: {escape(step.sql)}")
    _print_report(s.spec, result.history.n, result.report.names, shown, schedule=policy,
                  rerun=rerun, what=f"{path} ({s.spec.scenario})")
    # The first pass's result, with the scenario's own program: a reproduction
    # that needs no file.
    _out().print(f"coarse rerun: {escape(result.coarse.command())}")
    if out is not None:
        options.wrote(out)
    else:
        _out().print("(pass -o FILE.py to write it as a scenario file)")
    raise typer.Exit(1)


@functools.wraps(shrink_command)
def _anomalies_shrink(*args: Any, **kwargs: Any) -> None:
    options.deprecated("coordsim anomalies shrink", "coordsim shrink")
    shrink_command(*args, **kwargs)


_anomalies_shrink.__doc__ = (
    f"Deprecated name of `coordsim shrink` (accepted until {options.ACCEPTED_UNTIL}): "
    + (shrink_command.__doc__ or "")
)


def register(app: typer.Typer) -> None:
    """Adds `anomalies` and `shrink` to the `coordsim` app (sim/cli/main.py calls this)."""
    app.add_typer(anomalies_app, name="anomalies")
    anomalies_app.command("matrix")(matrix_command)
    app.command("shrink")(shrink_command)
    # Shrinking has one name (issue 37); the second one still works, noted.
    anomalies_app.command("shrink", hidden=True)(_anomalies_shrink)
