"""`coordsim replay`, `coordsim sweep` and `coordsim synth-trace`: the Spark
side of coordsim. Exit codes as `coordsim check`: 0 every run valid, 1 some
run invalid, 2 bad input or Spark unavailable (one line on stderr)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Annotated, Final

import typer
from rich.console import Console

from sim.load.config import MAX_SEED, check_int
from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.outputs import claim_dir, staged_dir

__all__ = ["register"]

_out = Console(highlight=False, soft_wrap=True)


def _fail(exc: CoordsimError | str) -> typer.Exit:
    tag = "invalid input" if isinstance(exc, InvalidUsage) else "error"
    line = " ".join(str(exc).split())  # one line, whatever Spark's message spans
    print(f"coordsim: {tag}: {line}", file=sys.stderr)  # noqa: T201 - the CLI's error channel
    return typer.Exit(2)


#: Seeds one `coordsim sweep` runs: each is a Spark task writing a trace.
MAX_SWEEP_SEEDS: Final = 1_000_000
#: Spark shuffle partitions (Spark's own default is 200).
MAX_PARTITIONS: Final = 100_000


#: The master URLs Spark accepts (`SparkContext`'s own check, made before the
#: JVM starts so a typo is one line rather than the JVM's usage text).
_MASTER: Final = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|(spark|mesos|k8s)://\S+|yarn")


def _check_partitions(partitions: int | None) -> None:
    if partitions is not None:
        check_int("--shuffle-partitions", partitions, low=1, high=MAX_PARTITIONS, unit="partitions")


def _claim_out(out: str, command: str) -> None:
    """A local `--out` becomes coordsim's output directory: a file there, or a
    directory of someone else's files, is refused before Spark starts (and
    nothing of theirs is overwritten); called again after the run to list what
    was written. A URL (`s3a://…`) is Spark's to write."""
    if "://" not in out:
        claim_dir(Path(out), command)


def _check_master(option: str, master: str) -> None:
    if not _MASTER.fullmatch(master):
        raise InvalidUsage(
            f"{option} {master!r} is not a Spark master URL (local, local[N], local[*], spark://host:port, "
            "k8s://…, mesos://…, yarn)"
        )


def _session(master: str, verbose: bool, partitions: int | None) -> object:
    from sim.spark.session import spark_session

    return spark_session(master, verbose=verbose, shuffle_partitions=partitions)


def _summary(res: object) -> None:
    from sim.spark.job import ReplayResult

    assert isinstance(res, ReplayResult)
    _out.print(
        f"{res.runs} runs: {res.runs - res.invalid_runs - res.unknown_runs} valid, {res.invalid_runs} invalid"
        + (f", {res.unknown_runs} unknown" if res.unknown_runs else "") + "; "
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
    """Re-verify traces with Spark (every in-process checker, a large run cut
    into segments checked in parallel) and compare the configurations' metrics."""
    from sim.spark.frames import expand_traces
    from sim.spark.job import replay as run_replay

    try:
        _check_partitions(partitions)
        _check_master("--master", master)
        expand_traces(traces)  # bad paths fail here, before Spark starts
        _claim_out(out, "replay")
        spark = _session(master, verbose, partitions)
        res = run_replay(spark, traces, out)
        _claim_out(out, "replay")
    except CoordsimError as exc:
        raise _fail(exc) from exc
    _summary(res)
    raise typer.Exit(1 if res.invalid_runs else 0)


def sweep(
    seeds: Annotated[int, typer.Option("--seeds", help="How many seeds (0..N-1 from --first-seed).")],
    config: Annotated[str, typer.Option("--config", help="A named configuration.")],
    scenario: Annotated[str, typer.Option("--scenario", help="A scenario of sim/nemesis/anomalies.py.")],
    spark_master: Annotated[str, typer.Option("--spark", help="Spark master.")] = "local[*]",
    first_seed: Annotated[int, typer.Option("--first-seed")] = 0,
    known_bad: Annotated[list[str] | None, typer.Option("--known-bad", help="Known-bad variant(s) on.")] = None,
    out: Annotated[str, typer.Option("--out", help="Traces go to OUT/traces, the replay to OUT.")] = "sweep-out",
    verbose: Annotated[bool, typer.Option("--verbose", help="Spark's INFO logs.")] = False,
) -> None:
    """Run N seeds of a scenario as Spark tasks (virtual mode, one seed per
    task), write their traces, then replay them all."""
    import os

    from sim.nemesis.anomalies import default_spec, parse_known_bad
    from sim.spark.job import replay as run_replay
    from sim.spark.sweep import simulate

    try:
        # Bad names and numbers fail here, before Spark starts.
        check_int("--seeds", seeds, low=1, high=MAX_SWEEP_SEEDS, unit="seeds")
        check_int("--first-seed", first_seed, low=-MAX_SEED, high=MAX_SEED - seeds)
        default_spec(scenario, config, first_seed, known_bad=parse_known_bad(known_bad or []))
        _check_master("--spark", spark_master)
        _claim_out(out, "sweep")
        spark = _session(spark_master, verbose, None)
        traces = f"{out.rstrip('/')}/traces"
        if "://" not in traces:
            traces = os.path.abspath(traces)
        t0 = time.perf_counter()
        rows = simulate(spark, traces, scenario, config, range(first_seed, first_seed + seeds), known_bad or ())
        _out.print(f"simulated {len(rows)} seeds ({sum(r[2] for r in rows)} operations) "
                   f"in {time.perf_counter() - t0:.1f}s")  # fmt: skip
        res = run_replay(spark, [r[1] for r in rows], out)
        _claim_out(out, "sweep")
    except CoordsimError as exc:
        raise _fail(exc) from exc
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
    from sim.spark.synth import MAX_SYNTH_OPS
    from sim.spark.synth import synth_trace as write

    t0 = time.perf_counter()
    try:
        # Refused before anything is created: bad numbers, then an output that
        # is not ours (staged: a failed or interrupted run leaves nothing).
        check_int("--ops", ops, low=1, high=MAX_SYNTH_OPS, unit="operations")
        check_int("--planted", planted, low=0, high=MAX_SYNTH_OPS, unit="chunks")
        check_int("--seed", seed, low=-MAX_SEED, high=MAX_SEED)
        with staged_dir(out, "synth-trace") as stage:
            write(stage, ops, seed=seed, planted=planted)
    except OSError as exc:
        raise _fail(f"cannot write {out}: {exc.strerror or exc}") from exc
    except CoordsimError as exc:
        raise _fail(exc) from exc
    _out.print(f"wrote {ops} operations to {out} in {time.perf_counter() - t0:.1f}s")


def register(app: typer.Typer) -> None:
    """Adds the Spark commands to the `coordsim` app (sim/cli/main.py calls this)."""
    app.command("replay")(replay)
    app.command("sweep")(sweep)
    app.command("synth-trace")(synth_trace)
