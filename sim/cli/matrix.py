"""`coordsim anomalies matrix`: every known-bad variant on the scenario that
exposes it (sim/nemesis/matrix.py), seeds to first detection and the anomalies
each checker named; writes matrix.md and matrix.json. Exit 0 if every entry
came out as it expects (caught, or not caught), 1 if one did not, 2 on bad input.
Seeds whose verdict was `unknown` (an operation no checker judged, or a
bound hit) are shown per entry: "not caught" there means "not looked at".
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from sim.cli import options
from sim.load.limits import MAX_SEEDS, check_int
from sim.runtime.run_dirs import run_dir
from sim.runtime.staging import staged_dir

if TYPE_CHECKING:
    from rich.console import Console

    from sim.nemesis.matrix import EntryResult

__all__ = ["matrix_command"]


# Made on first use, as is every import the command needs only to run (in
# its body): `coordsim anomalies --help` loads none of them (issue 37).
@functools.cache
def _out() -> Console:
    from rich.console import Console

    return Console(soft_wrap=True, highlight=False)


@functools.cache
def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, highlight=False)


def matrix_command(
    seeds: Annotated[
        int, typer.Option("--seeds", metavar="N", help=f"At most this many seeds per entry (a caught one stops early), 1 to {MAX_SEEDS:,}.")
    ] = 20,
    jobs: options.Jobs = None,
    schedule: options.Schedule = None,
    output: options.Output = None,
    old_out: options.OldOut = None,
    as_json: options.Json = False,
) -> None:
    """Run the known-bad matrix: for each (variant, scenario, config), the seeds to its first detection, "not caught in N", or "not reached" when N is below the seed it is first caught at (not a failure), and the anomalies by checker.

    Writes matrix.md and matrix.json and prints the directory last. Exit 0 if every entry came out as expected, 1 if one did not.

    Examples:
      coordsim anomalies matrix --seeds 5 -j 2
      coordsim anomalies matrix --seeds 100 --schedule pct
    """
    from sim.cli.heartbeat import heartbeat
    from sim.cli.tables import new_table, plain, print_tables
    from sim.nemesis.matrix import COLUMNS, MATRIX_JSON, MATRIX_MD, rows, run_matrix, to_json, write
    from sim.runtime.schedule import parse_schedule
    from sim.runtime.workers import MAX_JOBS

    chosen = options.pick(output, old_out, old_name="--out", new_name="-o/--output")
    check_int("--seeds", seeds, low=1, high=MAX_SEEDS, unit="seeds")
    n_jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    check_int("--jobs", n_jobs, low=1, high=MAX_JOBS, unit="worker processes")
    command = shlex.join(["uv", "run", "coordsim", "anomalies", "matrix", *sys.argv[3:]]) \
        if sys.argv[1:3] == ["anomalies", "matrix"] else f"coordsim anomalies matrix --seeds {seeds}"
    policy = parse_schedule(schedule or "fifo")
    out = run_dir(chosen, "anomalies matrix").absolute()
    t0 = time.monotonic()

    done = [0]

    def progress(r: EntryResult) -> None:
        done[0] += 1
        _err().print(f"{r.entry.label} / {r.entry.scenario} / {r.entry.config}: {r.detection()}, "
                     f"{r.coverage()} ({time.monotonic() - t0:.0f} s)", markup=False)

    with options.disk_full_is_external(out), staged_dir(out, "anomalies matrix") as stage:
        # An entry may take many seeds: a heartbeat between the entries' lines.
        with heartbeat(_err(), "anomalies matrix", status=lambda: f"{done[0]} entries done"):
            results = run_matrix(seeds=seeds, jobs=n_jobs, schedule=policy, on_entry=progress)
        write(stage, results, seeds=seeds, command=command, schedule=policy)
    bad = [r for r in results if not r.as_expected]
    if as_json:
        options.print_json({"output": str(out), **to_json(results, seeds=seeds, schedule=policy)})
        raise typer.Exit(1 if bad else 0)
    table = new_table(*COLUMNS, plain=plain(_out()))
    for row in rows(results):
        table.add_row(*row)
    print_tables([table], console=_out())
    n_unknown = sum(len(r.unknown) for r in results)
    _out().print(f"\n{len(results)} entries, {sum(r.seeds for r in results):,} seeds, "
                 f"{sum(r.ops for r in results):,} operations in {time.monotonic() - t0:.1f} s "
                 f"on {n_jobs} worker{'s' if n_jobs > 1 else ''}; "
                 f"{len(bad)} not as expected; {n_unknown:,} seeds unknown"
                 + (" (not every operation judged: `coordsim anomalies run` one for its coverage)"
                  if n_unknown else ""), markup=False)
    _out().print(f"written: {out / MATRIX_MD}, {out / MATRIX_JSON}", markup=False)
    options.wrote(out)
    raise typer.Exit(1 if bad else 0)

