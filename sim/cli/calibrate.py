"""`coordsim calibrate`: measure the round trips of the real components and
write the latency profile `--mode virtual` runs on (DESIGN.md §4).

The profile is claimed before measuring and written atomically, so a failed or
interrupted calibration leaves no profile, nor a half-written one, behind. On a
busy host (the report's rule: load above the cores, or other processes above a
quarter of a core) it refuses with exit 2 unless `--force`, which marks the
profile; either way the profile records the host check and where it ran.

`--from RUN_DIR` measures nothing: it builds the profile from a real-mode
compare run's recorded round trips and per-handler CPU (`sim.model.from_run`),
a profile of this host's Python coordinator that carries the run's provenance.
"""

from __future__ import annotations

import functools
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sim.cli.options import PgIsolation, removed_if_unfinished, write_failed, wrote
from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.owned_files import claim_file, write_owned

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register"]


# Made on first use, as is every import the command needs only to run (in its
# body): `coordsim calibrate --help` loads none of them (issue 37).
@functools.cache
def _out() -> Console:
    from rich.console import Console

    return Console()


@functools.cache
def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def register(app: typer.Typer) -> None:
    """Adds `calibrate` to the `coordsim` app (sim/cli/main.py calls this)."""
    app.command("calibrate")(calibrate)


def calibrate(
    output: Annotated[Path, typer.Option("--output", "-o", metavar="FILE", help="Profile file to write (.toml or .json).")] = Path(
        "latency-profile.toml"
    ),
    samples: Annotated[int, typer.Option("--samples", metavar="N", help="Round trips measured per operation, 5 to 1,000,000.")] = 200,
    s3: Annotated[str | None, typer.Option("--s3", metavar="URL", show_default="files", help="Measure Blob on this s3:// URL.")] = None,
    fsync: Annotated[bool, typer.Option(help="Embedded Postgres with fsync on (durable, as the oracle is).")] = True,
    force: Annotated[bool, typer.Option("--force", help="Calibrate even on a busy host (load above the cores, or other processes above 25 % of a core); the profile is marked forced_on_busy_host.")] = False,
    pg_isolation: PgIsolation = None,
    from_run: Annotated[Path | None, typer.Option("--from", metavar="RUN_DIR", help="Build the profile from a real-mode `coordsim compare` run's recorded round trips and per-handler Python CPU instead of measuring: a profile of this host's Python coordinator, for predicting that run in virtual mode.")] = None,
    levels: Annotated[str | None, typer.Option("--levels", metavar="N,...", show_default="the run's lowest", help="With --from: the concurrency levels whose cells the round trips are fitted from.")] = None,
) -> None:
    """Measure oracle, timestamp-store, catalog-stash and consensus round trips against the configured Postgres (embedded unless COORDSIM_POSTGRES_URL) and write a latency profile for `--mode virtual`; prints the file last.

    Examples:
      coordsim calibrate   # not in CI: it measures this host, and refuses a busy one
      coordsim calibrate --samples 500 -o my-profile.toml   # not in CI: as above
      coordsim compare --latency-profile my-profile.toml
      coordsim compare --mode real -w select-one --concurrency 1,4
      coordsim calibrate --from coordsim-out/latest-compare -o this-host.toml
    """
    if from_run is not None:
        _from_run(from_run, output, levels, s3=s3)
        return
    if levels is not None:
        raise InvalidUsage("--levels applies only with --from RUN_DIR")
    from sim.cli.pg import postgres_for
    from sim.cli.tables import new_table, plain, print_tables
    from sim.compare.host import HostSampler
    from sim.compare.runner import postmaster_pids
    from sim.load.run_config import RunConfig
    from sim.model.calibrate import (
        calibrate_profile,
        check_host,
        check_samples,
        provenance_record,
        render_profile,
    )
    from sim.runtime.pg import isolation_of

    check_samples(samples)
    if output.suffix not in (".toml", ".json"):
        raise InvalidUsage(f"{output}: a profile is a .toml or .json file")
    claim_file(output)  # before measuring: refuse early
    started = datetime.now(UTC)
    host = check_host()
    if host.busy and not force:
        raise CoordsimError(
            f"the host is busy ({host.busy_reason}): round trips measured now would carry that load into the "
            "profile; calibrate on a quiet machine, or pass --force to write a profile marked forced_on_busy_host"
        )
    if host.busy:
        _err().print(f"calibrate: --force on a busy host ({host.busy_reason}): the profile is marked "
                     "forced_on_busy_host", markup=False, highlight=False)
    isolation = None if pg_isolation is None else pg_isolation.value
    with postgres_for(RunConfig(mode="real"), fsync=fsync, isolation=isolation) as cfg:
        assert cfg.postgres_url is not None
        # Postgres's CPU is the calibration's own: what is left is other processes'.
        sampler = HostSampler(also_own=postmaster_pids(cfg) or tuple)
        sampler.start()
        from sim.cli.heartbeat import heartbeat

        with heartbeat(_err(), f"calibrate: measuring {samples:,} round trips per operation"):
            measured = calibrate_profile(cfg.postgres_url, samples=samples, s3_url=s3)
        during = sampler.stop()
        level = isolation_of(cfg.postgres_url)
    record = provenance_record(host, forced=force, pg_isolation=level.value, argv=sys.argv, started=started)
    if during.other_cores is not None:
        record["other_cpu_cores_during"] = round(during.other_cores, 3)
    measured.provenance = record
    text = render_profile(measured, json_format=output.suffix == ".json")
    try:
        with removed_if_unfinished(output):
            write_owned(output, lambda p: p.write_text(text))  # replaces only a profile coordsim recorded
    except OSError as exc:
        raise write_failed(output, exc) from exc
    table = new_table("round trip", "median ms", "sigma", "samples", plain=plain(_out()),
                      numeric=("median ms", "sigma", "samples"))
    for name, (median_ms, sigma, n) in sorted(measured.items()):
        table.add_row(name, f"{median_ms:.3f}", f"{sigma:.2f}", f"{n:,}")
    print_tables([table], console=_out())
    _out().print(f"Postgres isolation: {level.label()}", markup=False, highlight=False)
    wrote(output)


def _from_run(run_dir: Path, output: Path, levels: str | None, *, s3: str | None) -> None:
    """`calibrate --from`: nothing is measured, so there is no host to check;
    the profile carries the run's own provenance (and its busy verdict)."""
    from sim.cli.tables import new_table, plain, print_tables
    from sim.load.run_config import DEFAULT_PROFILE
    from sim.model.from_run import profile_from_run, render_run_profile

    if s3 is not None:
        raise InvalidUsage("--s3 measures Blob; --from RUN_DIR measures nothing (Blob comes from the base profile)")
    if output.suffix not in (".toml", ".json"):
        raise InvalidUsage(f"{output}: a profile is a .toml or .json file")
    try:
        chosen = [int(x) for x in levels.split(",") if x.strip()] if levels else None
    except ValueError as exc:
        raise InvalidUsage(f"--levels must be integers, got {levels!r}") from exc
    profile = profile_from_run(run_dir, base_profile=DEFAULT_PROFILE, levels=chosen)
    text = render_run_profile(profile, json_format=output.suffix == ".json")
    try:
        with removed_if_unfinished(output):
            write_owned(output, lambda p: p.write_text(text))  # replaces only a profile coordsim recorded
    except OSError as exc:
        raise write_failed(output, exc) from exc
    table = new_table("latency", "median ms", "sigma", "source", plain=plain(_out()), numeric=("median ms", "sigma"))
    for name, source in profile.latency_sources.items():
        if source.startswith("carried"):
            continue
        spec = profile.latency[name]
        table.add_row(name, f"{spec['median_ms']:.3f}", f"{spec['sigma']:.2f}", source.split(": ", 1)[-1])
    costs = new_table("configuration", "cost", "seconds", plain=plain(_out()), numeric=("seconds",))
    for config, values in profile.costs.items():
        for name, seconds in values.items():
            costs.add_row(config, name, f"{seconds:.3g}")
    print_tables([table, costs], console=_out())
    if profile.meta["host_busy"]:
        _err().print(f"calibrate --from: the run's host was busy ({profile.meta['busy_reason']}); the profile "
                     "says so", markup=False, highlight=False)
    wrote(output)
