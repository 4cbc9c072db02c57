"""`coordsim isolation`: use-case isolation measured as seed 004 defines it
(issue 36): a victim's latency and throughput with a noisy neighbour ÷ without
it, per architecture (`sim.compare.isolation`). A command of its own, not a
`compare` flag: it measures pairs of runs and ratios, not a sweep of levels,
and shares none of compare's level, baseline or ablation options.

Outputs are staged and renamed into place when complete, as compare's are.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from sim.cli import options
from sim.compare.neighbours import (
    BASELINE,
    DEFAULT_VICTIM_CLIENTS,
    NEIGHBOURS,
    VICTIM_WORKLOAD,
    parse_neighbours,
)
from sim.load.limits import MAX_CONCURRENCY, MAX_DURATION_S, MAX_REPEAT, check_float, check_int
from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import atomic_write
from sim.runtime.staging import staged_dir
from sim.runtime.workers import MAX_JOBS, workers

if TYPE_CHECKING:
    from rich.console import Console

    from sim.compare.isolation import Architecture, PassResult
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


#: Defaults per mode: long enough windows that a quiet victim's p99 rests on
#: thousands of operations (4 clients of ~1-2 ms peeks).
DEFAULT_DURATION_S: Final = {"virtual": 2.0, "real": 3.0}
DEFAULT_WARMUP_S: Final = {"virtual": 0.5, "real": 1.0}
DEFAULT_PASSES: Final = 3


def register(app: typer.Typer) -> None:
    """Adds `isolation` to the `coordsim` app."""
    app.command("isolation")(isolation)


def isolation(
    mode: options.Mode = None,
    neighbour: Annotated[str | None, typer.Option("--neighbour", metavar="NAMES", show_default="all, each its own row", help=f"Comma-separated noisy neighbours: {', '.join(NEIGHBOURS)}.")] = None,
    victim_clients: Annotated[int, typer.Option("--victim-clients", metavar="N", help=f"The victim's closed-loop {VICTIM_WORKLOAD} clients, 1 to {MAX_CONCURRENCY:,}.")] = DEFAULT_VICTIM_CLIENTS,
    repeat: Annotated[int, typer.Option("--repeat", metavar="N", help=f"Passes: each a seed (--seed, then counting up), each run on a fresh deployment; the intervals are over the passes. 1 to {MAX_REPEAT:,}.")] = DEFAULT_PASSES,
    duration: Annotated[float | None, typer.Option("--duration", "-T", metavar="SECONDS", show_default="2 virtual, 3 real", help="Seconds of the victim's measured window in each run (virtual mode: simulated seconds).")] = None,
    warmup: Annotated[float | None, typer.Option("--warmup", metavar="SECONDS", show_default="0.5 virtual, 1 real", help="Seconds discarded before the window, the neighbour already running.")] = None,
    seed: options.Seed = None,
    output: options.Output = None,
    latency_profile: Annotated[str | None, typer.Option("--latency-profile", metavar="FILE", show_default="the shipped calibrated profile", help="Latency profile TOML/JSON (virtual mode; `coordsim calibrate` writes one).")] = None,
    jobs: options.Jobs = None,
    as_json: options.Json = False,
    pg_isolation: options.PgIsolation = None,
) -> None:
    """Measure use-case isolation (seed 004): a victim's latency with and without a noisy neighbour, per architecture.

    The victim is select-one (strict-serializable point peeks) from --victim-clients closed-loop clients. Each neighbour (ddl-churn, insert-storm, heavy-peek: the same clients and statements in every architecture) runs beside it on: event-loop (the one loop), decoupled (one adapter, shared), and decoupled with 2 adapters (victim on adapter 1, neighbour on adapter 2; in real mode two OS processes). Each pass runs every architecture without and with each neighbour at one seed, each run on a fresh deployment; the with/without ratios of the victim's p50, p99 and throughput are the geometric means of the paired passes' ratios with 95 % intervals (1.0 = perfect isolation). Writes isolation.csv, runs.csv, summary.json, report.md and isolation-p99.png, prints a table and the directory last.

    Examples:
      coordsim isolation
      coordsim isolation --neighbour insert-storm --repeat 5
      coordsim isolation --mode real --neighbour ddl-churn -T 5
    """
    from sim.cli.pg import postgres_for
    from sim.compare.isolation import ARCHITECTURES, isolation_config, isolation_rows
    from sim.load.run_config import knobs_toml

    check_int("--victim-clients", victim_clients, low=1, high=MAX_CONCURRENCY, unit="clients")
    check_int("--repeat", repeat, low=1, high=MAX_REPEAT, unit="passes")
    neighbours = parse_neighbours(neighbour)
    from sim.cli.compare import build_config, options_run_dir

    m = mode.value if mode is not None else options.DEFAULT_MODE
    for name, value in (("--duration", duration), ("--warmup", warmup)):
        if value is not None:
            check_float(name, value, low=0, high=MAX_DURATION_S, unit="seconds", strict_low=name == "--duration")
    if pg_isolation is not None and m != "real":
        raise InvalidUsage("--pg-isolation sets real mode's Postgres isolation level: use it with --mode real")
    cfg = isolation_config(build_config(
        None, mode=mode, seed=seed, output=output, latency_profile=latency_profile, repeat=repeat,
        duration_s=duration if duration is not None else DEFAULT_DURATION_S[m],
        warmup_s=warmup if warmup is not None else DEFAULT_WARMUP_S[m],
    ))
    n_jobs = _jobs(cfg, jobs)
    archs = ARCHITECTURES
    target = options_run_dir(cfg, "isolation")
    wall0 = time.perf_counter()
    from sim.compare.provenance import start_provenance

    prov_start = start_provenance(argv=sys.argv, started=datetime.now(UTC))
    level = None if pg_isolation is None else pg_isolation.value
    with options.disk_full_is_external(target), staged_dir(target, "isolation") as stage, \
            postgres_for(cfg, isolation=level, output=target) as cfg, \
            workers(n_jobs, preload="sim.compare.isolation") as pool:
        from sim.compare.host import HostSampler
        from sim.compare.runner import postmaster_pids

        sampler = HostSampler(also_own=postmaster_pids(cfg) or tuple)
        sampler.start()
        order = [(i, a, n) for i in range(1, repeat + 1) for a in archs for n in (BASELINE, *neighbours)]
        results = _run_all(cfg, order, victim_clients, pool, wall0)
        usage = sampler.stop()
        rows = isolation_rows(results, neighbours)
        w = cfg.window()
        seeds = list(range(cfg.seed, cfg.seed + repeat))
        how = (f"mode `{cfg.mode}`, {repeat} pass{'es' if repeat > 1 else ''} (seeds {seeds[0]}..{seeds[-1]}), "
               f"each run a fresh deployment measuring the victim for {w.duration_s:g} s after {w.warmup_s:g} s "
               f"warm-up{' (simulated time)' if cfg.mode == 'virtual' else ''}")
        from sim.compare import isolation_report as report
        from sim.compare.provenance import markdown as provenance_markdown

        png = report.plot(stage, rows, subtitle=(
            f"victim: {victim_clients} closed-loop {VICTIM_WORKLOAD} clients · {cfg.mode} mode · {repeat} "
            f"pass{'es' if repeat > 1 else ''} (seeds {seeds[0]}..{seeds[-1]}) · {w.duration_s:g} s windows"))
        report.write_csv(stage / "isolation.csv", rows)
        report.write_runs_csv(stage / "runs.csv", results)
        prov = _provenance(prov_start, cfg, usage)
        knobs = knobs_toml(cfg.redacted())
        atomic_write(stage / "config.toml", lambda p: p.write_text(knobs))
        victim = (f"{victim_clients} closed-loop clients of `{VICTIM_WORKLOAD}` "
                  "(`SELECT * FROM t0 WHERE a = 1`, strict serializable)")
        text = report.markdown(rows, header=how + f"; wall time {time.perf_counter() - wall0:.0f} s.",
                               victim=victim, neighbours=neighbours, plot_name=png.name,
                               provenance=provenance_markdown(prov), knobs=knobs)
        atomic_write(stage / "report.md", lambda p: p.write_text(text))
        doc: dict[str, Any] = {
            "command": "isolation", "output": str(target), "mode": cfg.mode, "seed": cfg.seed, "seeds": seeds,
            "passes": repeat, "window_s": w.duration_s, "warmup_s": w.warmup_s,
            "victim": {"workload": VICTIM_WORKLOAD, "clients": victim_clients},
            "neighbours": {n: {"clients": NEIGHBOURS[n].clients, "description": NEIGHBOURS[n].description}
                           for n in neighbours},
            "architectures": [{"name": a.name, "config": a.config, "adapters": a.adapters,
                               "description": a.description} for a in ARCHITECTURES],
            "ratio": "with / without the neighbour: geometric mean of the paired passes' ratios (same seed), "
                     "95 % Student-t interval on their logarithms; 1.0 = perfect isolation",
            "rows": [r.as_dict() for r in rows], "plot": png.name,
            "wall_s": round(time.perf_counter() - wall0, 3), "cores": os.cpu_count(), "provenance": prov,
        }
        summary = json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"
        atomic_write(stage / "summary.json", lambda p: p.write_text(summary))
    if as_json:
        options.print_json(doc)
        return
    from sim.compare.provenance import footer

    for line in report.table_lines(rows):
        _out().print(line, markup=False, highlight=False, soft_wrap=True)
    _out().print(f"ratio = with / without the neighbour (geometric mean of paired passes [95% CI]); {how}",
                 markup=False, highlight=False, soft_wrap=True)
    _out().print(footer(prov, simulated=cfg.mode == "virtual"), markup=False, highlight=False, soft_wrap=True)
    _out().print(f"report: {target}/report.md, plot: {target}/{png.name}", markup=False, highlight=False,
                 soft_wrap=True)
    options.wrote(target)


def _jobs(cfg: RunConfig, jobs: int | None) -> int:
    """`--jobs`, or its default: one worker per core in virtual mode; real mode
    runs one at a time (its figures are wall-clock)."""
    if jobs is None:
        return (os.cpu_count() or 1) if cfg.mode == "virtual" else 1
    check_int("--jobs", jobs, low=1, high=MAX_JOBS, unit="worker processes")
    if jobs > 1 and cfg.mode != "virtual":
        raise InvalidUsage(f"--jobs {jobs}: real mode measures wall-clock latency, so its runs go one at a time "
                           "(leave out --jobs, or use --mode virtual)")
    return jobs


def _run_all(
    cfg: RunConfig, order: list[tuple[int, Architecture, str]], victim_clients: int, pool: Any, wall0: float
) -> list[PassResult]:
    """Every run of `order`, on `pool`'s workers when there is one (virtual
    mode: simulated time, so the same figures), with a line per run on stderr
    and a heartbeat while each runs."""
    from sim.cli.heartbeat import heartbeat
    from sim.compare.isolation import run_pass

    futures = ([pool.submit(run_pass, cfg, a, n, index=i, victim_clients=victim_clients) for i, a, n in order]
               if pool is not None else None)
    results: list[PassResult] = []
    try:
        for k, (i, a, n) in enumerate(order):
            # One real-mode run takes its whole duration: say which one runs meanwhile.
            with heartbeat(_err(), f"isolation: {a.name} / {n} pass {i} ({k + 1}/{len(order)})"):
                r = (futures[k].result() if futures is not None
                     else run_pass(cfg, a, n, index=i, victim_clients=victim_clients))
            results.append(r)
            _err().print(f"isolation: {a.name} / {n} pass {i}: victim p50 {r.victim_p50_ms:.2f} ms, p99 "
                         f"{r.victim_p99_ms:.2f} ms, {r.victim_ops_s:,.0f} ops/s; neighbour {r.neighbour_ops_s:,.0f} "
                         f"ops/s ({k + 1}/{len(order)}, {time.perf_counter() - wall0:.0f} s)",
                         markup=False, highlight=False, soft_wrap=True)
    finally:
        for f in futures or ():
            f.cancel()
    return results


def _provenance(start: Any, cfg: RunConfig, usage: Any) -> dict[str, Any]:
    """The run's provenance, read while its Postgres (if any) still runs."""
    from sim.compare.provenance import finish_provenance
    from sim.runtime.core import Runtime, run

    async def finish(rt: Runtime) -> dict[str, Any]:
        return await finish_provenance(start, ended=datetime.now(UTC), host=usage,
                                       postgres_url=cfg.postgres_url if cfg.mode == "real" else None)

    result = run(finish, virtual=False)
    assert isinstance(result, dict)
    return result
