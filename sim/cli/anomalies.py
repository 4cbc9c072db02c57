"""`coordsim anomalies run|list` and `coordsim shrink`: run one anomaly scenario
for one seed and check it, or shrink a failing one to its smallest reproduction.

Exit codes follow `coordsim check`: 0 valid, 1 invalid, 3 unknown, 2 bad input.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path  # noqa: TC003 - typer reads the annotations at run time
from typing import TYPE_CHECKING, Annotated, Final

import typer
from rich.console import Console
from rich.markup import escape

from sim.history.checker import ANOMALY_NAMES, check_history
from sim.history.checker.verdict import Outcome
from sim.history.traces import write_trace
from sim.load.config import check_int
from sim.nemesis.anomalies import (
    MAX_CLIENTS,
    MAX_SIZE,
    MODES,
    SCENARIOS,
    Spec,
    default_spec,
    parse_known_bad,
    run_spec,
)
from sim.nemesis.plan import FaultPlan
from sim.nemesis.shrink import shrink
from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import staged_dir

if TYPE_CHECKING:
    from sim.nemesis.plan import Mode

__all__ = ["register"]

_out = Console(soft_wrap=True)
EXIT = {Outcome.VALID: 0, Outcome.INVALID: 1, Outcome.UNKNOWN: 3}
#: `shrink --max-runs`: each run is a whole scenario (a second or so).
MAX_SHRINK_RUNS: Final = 100_000

anomalies_app = typer.Typer(help="Anomaly scenarios: run and check one scenario for one seed.")

_Config = Annotated[str, typer.Option("--config", help="Coordinator configuration name.")]
_Seed = Annotated[int, typer.Option("--seed", help="The seed (same seed, same history).")]
_KnownBad = Annotated[
    list[str] | None,
    typer.Option("--known-bad", help="Switch on a known-bad variant (repeatable)."),
]
_Clients = Annotated[int | None, typer.Option(help="Clients (default: the scenario's).")]
_Size = Annotated[
    int | None, typer.Option(help="Operations or rounds per client (default: the scenario's).")
]
_Faults = Annotated[
    str | None,
    typer.Option(help="Fault plan, e.g. 'crash-restart@12ms+3ms,oracle-slow@20ms+5msx20' (virtual), "
                 "'pg-kill@10ms+50ms' (real) or 'none' "
                 "(default: drawn from the seed)."),
]  # fmt: skip


_Mode = Annotated[
    str,
    typer.Option("--mode", help="virtual (deterministic, in memory) or real (Postgres: "
                 "COORDSIM_POSTGRES_URL, else an embedded throwaway cluster)."),
]  # fmt: skip


def _mode(text: str) -> Mode:
    for m in MODES:
        if m == text:
            return m
    raise InvalidUsage(f"unknown mode {text!r}; known: {', '.join(MODES)}")


def _spec(
    scenario: str, config: str, seed: int, known_bad: list[str] | None,
    clients: int | None, size: int | None, faults: str | None, mode: str,
) -> Spec:  # fmt: skip
    if clients is not None:
        check_int("--clients", clients, low=1, high=MAX_CLIENTS, unit="clients")
    if size is not None:
        check_int("--size", size, low=1, high=MAX_SIZE, unit="operations per client")
    spec = default_spec(
        scenario, config, seed, known_bad=parse_known_bad(known_bad or []), mode=_mode(mode)
    )
    return replace(
        spec,
        clients=spec.clients if clients is None else clients,
        size=spec.size if size is None else size,
        faults=spec.faults if faults is None else FaultPlan.parse(faults),
    )


def _print_report(
    spec: Spec, n_ops: int, report_names: list[str], anomalies: list[tuple[str, str, str]]
) -> None:
    _out.print(f"[bold]{spec.scenario}[/bold] on {spec.config}, seed {spec.seed}, {spec.mode} mode: "
               f"{n_ops} operations, faults: {spec.faults}")  # fmt: skip
    for name, checker, explanation in anomalies:
        _out.print(f"\n[bold red]{name}[/bold red] [dim]({checker})[/dim]")
        _out.print(escape(explanation))
    _out.print(f"\nanomalies: {', '.join(report_names) or 'none'}")
    _out.print(f"replay: {escape(spec.command())}")


def _check_postgres(mode: str) -> None:
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
    scenario: Annotated[str, typer.Argument(help=f"One of: {', '.join(SCENARIOS)}.")],
    config: _Config = "event-loop",
    seed: _Seed = 0,
    known_bad: _KnownBad = None,
    clients: _Clients = None,
    size: _Size = None,
    faults: _Faults = None,
    mode: _Mode = "virtual",
    out: Annotated[Path | None, typer.Option("--out", help="Write the run's trace here.")] = None,
) -> None:
    """Run one scenario for one seed and check its history (virtual mode: the
    same seed gives the same history; real mode: the same statements and faults
    on Postgres, in whatever interleaving the run takes)."""
    spec = _spec(scenario, config, seed, known_bad, clients, size, faults, mode)
    _check_postgres(spec.mode)
    with contextlib.ExitStack() as stack:
        # Staged: an output that is not coordsim's is refused before the run,
        # and a failed or interrupted run leaves nothing under `out`.
        stage = stack.enter_context(staged_dir(out, "anomalies run")) if out is not None else None
        history, events = run_spec(spec)
        report = check_history(history, events)
        if stage is not None:
            write_trace(stage, history, events, run=f"{spec.scenario}-{spec.seed}", config=spec.config,
                        seed=spec.seed, extra_meta={"scenario": spec.scenario, "mode": spec.mode,
                                                    "replay": spec.command()})  # fmt: skip
    shown = [(a.name, v.checker, a.explanation) for v in report.verdicts for a in v.anomalies[:2]]
    _print_report(spec, history.n, report.names, shown)
    if out is not None:
        _out.print(f"trace: {escape(str(out))}")
    _out.print(f"verdict: [bold]{report.outcome.value}[/bold]")
    raise typer.Exit(EXIT[report.outcome])


@anomalies_app.command("list")
def anomalies_list() -> None:
    """List the scenarios."""
    for name, sc in SCENARIOS.items():
        _out.print(f"[bold]{name}[/bold] (clients {sc.clients}, size {sc.size}): {escape(sc.doc)}")


def shrink_command(
    scenario: Annotated[str, typer.Argument(help=f"One of: {', '.join(SCENARIOS)}.")],
    config: _Config = "event-loop",
    seed: _Seed = 0,
    known_bad: _KnownBad = None,
    clients: _Clients = None,
    size: _Size = None,
    faults: _Faults = None,
    mode: _Mode = "virtual",
    anomaly: Annotated[
        str | None, typer.Option(help="Keep this anomaly (default: the most specific found).")
    ] = None,
    max_runs: Annotated[int, typer.Option(help="At most this many scenario runs.")] = 200,
) -> None:
    """Shrink a failing scenario (fewer clients, operations, faults) while the
    same anomaly still appears; print the smallest reproduction. (In real mode
    a candidate that happens not to show the anomaly is dropped, so shrinking
    is best effort there.)"""
    spec = _spec(scenario, config, seed, known_bad, clients, size, faults, mode)
    check_int("--max-runs", max_runs, low=1, high=MAX_SHRINK_RUNS, unit="runs")
    if anomaly is not None and anomaly not in ANOMALY_NAMES:
        raise InvalidUsage(f"unknown anomaly {anomaly!r}; known: {', '.join(ANOMALY_NAMES)}")
    _check_postgres(spec.mode)
    with contextlib.ExitStack() as stack:
        url = None
        if spec.mode == "real":
            from sim.services.postgres import postgres_server

            url = stack.enter_context(postgres_server(fsync=False))
        result = shrink(
            spec,
            anomaly=anomaly,
            max_runs=max_runs,
            progress=lambda s: _out.print(f"[dim]{escape(s)}[/dim]"),
            postgres_url=url,
        )
    if result is None:
        _out.print(f"{escape(spec.command())}: no {anomaly or 'anomaly'} to shrink")
        raise typer.Exit(0)
    shown = [
        (a.name, v.checker, a.explanation)
        for v in result.report.verdicts
        for a in v.anomalies
        if a.name == result.anomaly
    ][:1]
    _out.print(f"smallest reproduction of [bold]{result.anomaly}[/bold] after {result.runs} runs:")
    _print_report(result.spec, result.history.n, result.report.names, shown)
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Adds `anomalies` and `shrink` to the `coordsim` app (sim/cli/main.py calls this)."""
    app.add_typer(anomalies_app, name="anomalies")
    app.command("shrink")(shrink_command)
