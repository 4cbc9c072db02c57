"""`coordsim spark replay`, `coordsim spark sweep` and `coordsim synth-trace`:
the Spark side of coordsim. Exit codes as `coordsim check`: 0 every run valid,
1 some run invalid, 3 none invalid but some not fully judged (unknown), 2 bad
input or Spark unavailable (one line on stderr).

`coordsim replay` and `coordsim sweep`, their names before issue 37 (where
"replay" and "sweep" also named in-process things), still run them, with one
line on stderr naming the new command, until `options.ACCEPTED_UNTIL`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from sim.cli import options
from sim.load.limits import MAX_SEED, check_float, check_int
from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.run_dirs import mark_latest, run_dir
from sim.runtime.staging import claimed_dir, staged_dir

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from rich.console import Console

__all__ = ["register"]


# Made on first use, as is every import a command needs only to run (below,
# in the commands): `coordsim CMD --help` loads none of them (issue 37).
@functools.cache
def _out() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _fail(exc: CoordsimError | str) -> typer.Exit:
    tag = "invalid input" if isinstance(exc, InvalidUsage) else "error"
    line = " ".join(str(exc).split())  # one line, whatever Spark's message spans
    print(f"coordsim: {tag}: {line}", file=sys.stderr)  # noqa: T201 - the CLI's error channel
    return typer.Exit(2 if isinstance(exc, str) else options.exit_code(exc))


#: Seeds one `coordsim spark sweep` runs: each is a Spark task writing a trace.
MAX_SWEEP_SEEDS: Final = 1_000_000
#: `synth-trace`'s bounds: `sim.spark.synth`'s (imported only when it runs,
#: as it imports pyarrow; tests/sim/cli/test_help.py holds the two equal).
MAX_SYNTH_OPS: Final = 10**9
SYNTH_CHUNK: Final = 200_000
#: At most one planted anomaly per chunk of the largest trace.
MAX_PLANTED: Final = MAX_SYNTH_OPS // SYNTH_CHUNK
#: Spark shuffle partitions (Spark's own default is 200).
MAX_PARTITIONS: Final = 100_000


#: The master URLs Spark accepts (`SparkContext`'s own check, made before the
#: JVM starts so a typo is one line rather than the JVM's usage text).
_MASTER: Final = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|(spark|mesos|k8s)://\S+|yarn")


def _check_partitions(partitions: int | None) -> None:
    if partitions is not None:
        check_int("--shuffle-partitions", partitions, low=1, high=MAX_PARTITIONS, unit="partitions")


@contextlib.contextmanager
def _claim_out(out: str, command: str) -> Iterator[None]:
    """A local output is coordsim's output directory, locked for the block: a
    file there, a directory of someone else's files, or one another run is
    writing is refused before Spark starts (and nothing of theirs is
    overwritten); what the block wrote is listed in its marker. A URL
    (`s3a://…`) is Spark's to write."""
    if "://" in out:
        yield
        return
    with claimed_dir(Path(out), command):
        yield


def _latest(out: str, command: str) -> None:
    """A run directory Spark wrote in place (not staged) becomes its runs
    root's `latest` and `latest-<command>`."""
    if "://" not in out:
        mark_latest(Path(out), command)


def _check_master(option: str, master: str) -> None:
    if not _MASTER.fullmatch(master):
        raise InvalidUsage(
            f"{option} {master!r} is not a Spark master URL (local, local[N], local[*], spark://host:port, "
            "k8s://…, mesos://…, yarn)"
        )


#: The JVM's output in a run directory (unless `-v`).
SPARK_LOG: Final = "spark.log"


@functools.cache
def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _verbose(ctx: typer.Context) -> bool:
    """`coordsim -v` (before or after the command; sim/cli/main.py)."""
    return bool(getattr(ctx.find_root().obj, "verbose", False))


def _session(master: str, verbose: bool, partitions: int | None, out: str) -> object:
    """The session, its JVM's output (log4j2's lines, Spark's warnings) on
    the console with `-v` (at INFO), else in OUTPUT/spark.log (or, for an
    output Spark writes by URL, a local temporary file named on stderr)."""
    from sim.spark.session import spark_session

    log_file: Path | None = None
    if not verbose:
        if "://" in out:
            import tempfile

            fd, name = tempfile.mkstemp(prefix="coordsim-spark-", suffix=".log")
            os.close(fd)
            log_file = Path(name)
            _err().print(f"spark: the JVM's log: {log_file}", markup=False)
        else:
            log_file = Path(out) / SPARK_LOG
    return spark_session(master, verbose=verbose, shuffle_partitions=partitions, log_file=log_file)


def _progress(spark: object, label: str, every: float | None) -> Any:
    from sim.spark.progress import SparkProgress

    return SparkProgress(spark, label, console=_err(), every=every)


def _check_progress(progress: float | None) -> None:
    if progress is not None:
        check_float("--progress", progress, low=0, high=MAX_PROGRESS_S, unit="seconds", strict_low=True)


def _summary(res: object) -> None:
    from sim.spark.job import ReplayResult

    assert isinstance(res, ReplayResult)
    _out().print(
        f"{res.runs} runs: {res.runs - res.invalid_runs - res.unknown_runs} valid, {res.invalid_runs} invalid"
        + (f", {res.unknown_runs} unknown" if res.unknown_runs else "") + "; "
        f"{res.anomalies} anomalies; {res.seconds:.1f}s"
    )
    if res.out is not None:
        _out().print(f"report: {res.out / 'report.md'}")


_Partitions = Annotated[int | None, typer.Option("--shuffle-partitions", metavar="N", show_default="Spark's (200)", help=f"Spark shuffle partitions, 1 to {MAX_PARTITIONS:,}.")]
#: The most seconds between two progress lines.
MAX_PROGRESS_S: Final = 86_400.0
_Progress = Annotated[float | None, typer.Option("--progress", "-P", metavar="SECONDS", show_default="a bar on a terminal, else a line every 5 s", help=options.PROGRESS_HELP)]


def _target(output: Path | None, old: str | None, command: str) -> str:
    """The output: `-o` (or the noted `--out`) exactly, else a new run
    directory. A URL (`s3a://…`, given with the old `--out`) is Spark's to write."""
    if old is not None and "://" in old:
        options.pick(output, Path(old), old_name="--out", new_name="-o/--output")
        return old
    chosen = options.pick(output, Path(old) if old is not None else None, old_name="--out", new_name="-o/--output")
    return str(run_dir(chosen, command).absolute())


def replay(
    ctx: typer.Context,
    traces: Annotated[list[str], typer.Argument(metavar="TRACES...", help="Trace directories, or any directory holding traces below it (a run directory, coordsim-out/latest, a runs root).")],
    master: options.Master = options.DEFAULT_MASTER,
    old_spark: options.OldSpark = None,
    output: options.Output = None,
    old_out: Annotated[str | None, typer.Option("--out", hidden=True, metavar="DIR")] = None,
    partitions: _Partitions = None,
    progress: _Progress = None,
) -> None:
    """Re-verify traces with Spark and compare the configurations' metrics; writes Parquet, report.md and plots and prints the directory last.

    Every in-process checker runs per trace, a large trace cut into segments checked in parallel. Exit 0 every run valid (every operation judged), 1 some run invalid, 3 none invalid but some not fully judged (unknown). Progress (Spark tasks done) goes to stderr; the JVM's own log lines to OUTPUT/spark.log, or to the console with -v.

    Examples:
      coordsim spark replay coordsim-out/latest
      coordsim spark replay coordsim-out --master local[2] -o replay-all
    """
    from sim.spark.frames import expand_traces
    from sim.spark.job import replay as run_replay

    try:
        if old_spark is not None:
            options.deprecated("--spark", "--master")
            master = old_spark
        _check_partitions(partitions)
        _check_progress(progress)
        _check_master("--master", master)
        expand_traces(traces)  # bad paths fail here, before Spark starts
        out = _target(output, old_out, "spark replay")
        with _claim_out(out, "spark replay"):
            spark = _session(master, _verbose(ctx), partitions, out)
            with _progress(spark, "spark replay", progress):
                res = run_replay(spark, traces, out)
        _latest(out, "spark replay")
    except CoordsimError as exc:
        raise _fail(exc) from exc
    _summary(res)
    options.wrote(out)
    raise typer.Exit(1 if res.invalid_runs else 3 if res.unknown_runs else 0)


def sweep(
    ctx: typer.Context,
    seeds: Annotated[int, typer.Option("--seeds", metavar="N", help=options.SEEDS_HELP.format(maximum=MAX_SWEEP_SEEDS))],
    scenario: options.ScenarioArg = None,
    scenario_opt: options.ScenarioOpt = None,
    config: options.Config = None,
    master: options.Master = options.DEFAULT_MASTER,
    old_spark: options.OldSpark = None,
    first_seed: Annotated[int, typer.Option("--first-seed", metavar="N", help="The first seed.")] = 0,
    known_bad: Annotated[list[str] | None, typer.Option("--known-bad", metavar="NAME", help="Switch on a known-bad variant (repeatable).")] = None,
    output: options.Output = None,
    old_out: Annotated[str | None, typer.Option("--out", hidden=True, metavar="DIR")] = None,
    progress: _Progress = None,
) -> None:
    """Run N seeds of an anomaly scenario as Spark tasks (virtual mode, one seed per task), write their traces to OUTPUT/traces, then replay them all into OUTPUT; prints the directory last.

    `coordsim anomalies sweep` runs the same seeds in process, without Spark. Exit 0 every run valid (every operation judged), 1 some run invalid, 3 none invalid but some not fully judged (unknown). Progress (Spark tasks done) goes to stderr; the JVM's own log lines to OUTPUT/spark.log, or to the console with -v.

    Examples:
      coordsim spark sweep seed001 --seeds 100
      coordsim spark sweep split-brain --config event-loop --seeds 1000 --master local[2]
    """
    from coordinator.config import check_known_bad
    from sim.nemesis.anomaly_scenarios import SCENARIOS
    from sim.nemesis.anomaly_spec import coordinator_config, default_spec, parse_known_bad
    from sim.spark.job import replay as run_replay
    from sim.spark.sweep import simulate

    try:
        if old_spark is not None:
            options.deprecated("--spark", "--master")
            master = old_spark
        scenario = options.kebab(options.scenario(scenario, scenario_opt), SCENARIOS)
        config = config or options.DEFAULT_CONFIG
        # Bad names and numbers fail here, before Spark starts.
        check_int("--seeds", seeds, low=1, high=MAX_SWEEP_SEEDS, unit="seeds")
        check_int("--first-seed", first_seed, low=-MAX_SEED, high=MAX_SEED - seeds)
        spec = default_spec(scenario, config, first_seed, known_bad=parse_known_bad(known_bad or []))
        check_known_bad(coordinator_config(config).with_overrides(known_bad=spec.known_bad))
        _check_progress(progress)
        _check_master("--master", master)
        out = _target(output, old_out, "spark sweep")
        with _claim_out(out, "spark sweep"):
            spark = _session(master, _verbose(ctx), None, out)
            traces = f"{out.rstrip('/')}/traces"
            if "://" not in traces:
                traces = os.path.abspath(traces)
            t0 = time.perf_counter()
            with _progress(spark, "spark sweep: simulate", progress):
                rows = simulate(spark, traces, scenario, config, range(first_seed, first_seed + seeds),
                                known_bad or ())
            _out().print(f"simulated {len(rows)} seeds ({sum(r[2] for r in rows)} operations) "
                         f"in {time.perf_counter() - t0:.1f}s")
            with _progress(spark, "spark sweep: replay", progress):
                res = run_replay(spark, [r[1] for r in rows], out)
        _latest(out, "spark sweep")
    except CoordsimError as exc:
        raise _fail(exc) from exc
    _summary(res)
    options.wrote(out)
    raise typer.Exit(1 if res.invalid_runs else 3 if res.unknown_runs else 0)


def synth_trace(
    ops: Annotated[int, typer.Option("--ops", metavar="N", help=f"Operations to write, 1 to {MAX_SYNTH_OPS:,}.")] = 10_000_000,
    output: options.Output = None,
    old_out: options.OldOut = None,
    seed: options.Seed = None,
    planted: Annotated[int, typer.Option("--planted", metavar="N", help=f"Chunks with a planted stale read, 0 to {MAX_PLANTED:,} (one per chunk of {SYNTH_CHUNK:,} operations at most: more than the trace has chunks plant one in each).")] = 3,
) -> None:
    """Write a large realistic trace (valid by construction, with a few planted anomalies) for benchmarks, in bounded memory; prints its directory last.

    Examples:
      coordsim synth-trace --ops 1000000
      coordsim synth-trace --ops 100000 --planted 0 -o big-trace
    """
    from sim.cli.heartbeat import heartbeat
    from sim.spark.synth import synth_trace as write

    t0 = time.perf_counter()
    seed = seed if seed is not None else options.DEFAULT_SEED
    out: Path | None = None
    try:
        chosen = options.pick(output, old_out, old_name="--out", new_name="-o/--output")
        # Refused before anything is created: bad numbers, then an output that
        # is not ours (staged: a failed or interrupted run leaves nothing).
        check_int("--ops", ops, low=1, high=MAX_SYNTH_OPS, unit="operations")
        check_int("--planted", planted, low=0, high=MAX_PLANTED, unit="chunks")
        check_int("--seed", seed, low=-MAX_SEED, high=MAX_SEED)
        out = run_dir(chosen, "synth-trace").absolute()
        with staged_dir(out, "synth-trace") as stage, heartbeat(_err(), f"synth-trace: {ops:,} operations"):
            write(stage, ops, seed=seed, planted=planted)
    except OSError as exc:
        raise _fail(options.write_failed(out, exc)) from exc
    except CoordsimError as exc:
        raise _fail(exc) from exc
    _out().print(f"{ops} operations in {time.perf_counter() - t0:.1f}s")
    options.wrote(out)


spark_app = typer.Typer(
    help="Spark: re-verify traces at scale (replay) and run many seeds as Spark tasks (sweep).",
    no_args_is_help=True,
)


def _deprecated(command: Callable[..., None], old: str, new: str) -> Callable[..., None]:
    """`command` under its old name: the same options, one line on stderr first."""

    @functools.wraps(command)
    def alias(*args: Any, **kwargs: Any) -> None:
        options.deprecated(old, new)
        command(*args, **kwargs)

    first, _, rest = (command.__doc__ or "").partition("\n")
    alias.__doc__ = f"Deprecated name of `{new}` (accepted until {options.ACCEPTED_UNTIL}): {first}\n{rest}"
    return alias


def register(app: typer.Typer) -> None:
    """Adds the Spark commands to the `coordsim` app (sim/cli/main.py calls this)."""
    spark_app.command("replay")(replay)
    spark_app.command("sweep")(sweep)
    app.add_typer(spark_app, name="spark")
    app.command("replay", hidden=True)(_deprecated(replay, "coordsim replay", "coordsim spark replay"))
    app.command("sweep", hidden=True)(_deprecated(sweep, "coordsim sweep", "coordsim spark sweep"))
    app.command("synth-trace")(synth_trace)
