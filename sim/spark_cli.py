"""`coordsim replay`, `coordsim sweep` and `coordsim synth-trace`: the Spark
side of coordsim. Exit codes as `coordsim check`: 0 every run valid, 1 some
run invalid, 2 bad input or Spark unavailable (one line on stderr)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from persist.location import CoordsimError

__all__ = ["register"]

_out = Console(highlight=False, soft_wrap=True)


def _fail(msg: str) -> typer.Exit:
    print(f"coordsim: error: {msg}", file=sys.stderr)  # noqa: T201 - the CLI's error channel
    return typer.Exit(2)


def _session(master: str, verbose: bool, partitions: int | None) -> object:
    from sim.spark.session import spark_session

    return spark_session(master, verbose=verbose, shuffle_partitions=partitions)


def _summary(res: object) -> None:
    from sim.spark.job import ReplayResult

    assert isinstance(res, ReplayResult)
    _out.print(
        f"{res.runs} runs: {res.runs - res.invalid_runs} valid, {res.invalid_runs} invalid; "
        f"{res.anomalies} anomalies; {res.seconds:.1f}s"
    )
    if res.out is not None:
        _out.print(f"report: {res.out / 'report.md'}")


def replay(
    traces: Annotated[list[str], typer.Argument(help="Trace directories (or folders holding them).")],
    master: Annotated[str, typer.Option("--master", help="local[*], local[2], spark://host:7077, …")] = "local[*]",
    out: Annotated[str, typer.Option("--out", help="Output directory (Parquet, report.md, PNG).")] = "replay-out",
    partitions: Annotated[int | None, typer.Option("--shuffle-partitions", help="Spark shuffle partitions.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", help="Spark's INFO logs.")] = False,
) -> None:
    """Re-verify traces with Spark (checker 3 and the join-shaped named anomalies)
    and compare the configurations' metrics."""
    from sim.spark.frames import expand_traces
    from sim.spark.job import replay as run_replay

    try:
        expand_traces(traces)  # bad paths fail here, before Spark starts
        spark = _session(master, verbose, partitions)
        res = run_replay(spark, traces, out)
    except CoordsimError as exc:
        raise _fail(str(exc)) from exc
    _summary(res)
    raise typer.Exit(1 if res.invalid_runs else 0)


def sweep(
    seeds: Annotated[int, typer.Option("--seeds", help="How many seeds (0..N-1 from --first-seed).")],
    config: Annotated[str, typer.Option("--config", help="A named configuration.")],
    scenario: Annotated[str, typer.Option("--scenario", help="A scenario of sim/anomalies.py.")],
    spark_master: Annotated[str, typer.Option("--spark", help="Spark master.")] = "local[*]",
    first_seed: Annotated[int, typer.Option("--first-seed")] = 0,
    known_bad: Annotated[list[str] | None, typer.Option("--known-bad", help="Known-bad variant(s) on.")] = None,
    out: Annotated[str, typer.Option("--out", help="Traces go to OUT/traces, the replay to OUT.")] = "sweep-out",
    verbose: Annotated[bool, typer.Option("--verbose", help="Spark's INFO logs.")] = False,
) -> None:
    """Run N seeds of a scenario as Spark tasks (virtual mode, one seed per
    task), write their traces, then replay them all."""
    import os

    from sim.spark.job import replay as run_replay
    from sim.spark.sweep import simulate

    try:
        spark = _session(spark_master, verbose, None)
        traces = f"{out.rstrip('/')}/traces"
        if "://" not in traces:
            traces = os.path.abspath(traces)
        t0 = time.perf_counter()
        rows = simulate(spark, traces, scenario, config, range(first_seed, first_seed + seeds), known_bad or ())
        _out.print(f"simulated {len(rows)} seeds ({sum(r[2] for r in rows)} operations) "
                   f"in {time.perf_counter() - t0:.1f}s")  # fmt: skip
        res = run_replay(spark, [r[1] for r in rows], out)
    except CoordsimError as exc:
        raise _fail(str(exc)) from exc
    _summary(res)
    raise typer.Exit(1 if res.invalid_runs else 0)


def synth_trace(
    ops: Annotated[int, typer.Option("--ops", help="Operations to write.")] = 10_000_000,
    out: Annotated[Path, typer.Option("--out", help="The trace directory to write.")] = Path("synth-trace"),
    seed: Annotated[int, typer.Option("--seed")] = 0,
    planted: Annotated[int, typer.Option("--planted", help="Chunks with a planted stale read.")] = 3,
) -> None:
    """Write a large realistic trace (valid by construction, with a few planted
    anomalies) for benchmarks, in bounded memory."""
    from sim.spark.synth import synth_trace as write

    t0 = time.perf_counter()
    try:
        d = write(out, ops, seed=seed, planted=planted)
    except (CoordsimError, OSError) as exc:
        raise _fail(str(exc)) from exc
    _out.print(f"wrote {ops} operations to {d} in {time.perf_counter() - t0:.1f}s")


def register(app: typer.Typer) -> None:
    """Adds the Spark commands to the `coordsim` app (sim/cli.py calls this)."""
    app.command("replay")(replay)
    app.command("sweep")(sweep)
    app.command("synth-trace")(synth_trace)
