"""`coordsim calibrate`: measure the round trips of the real components and
write the latency profile `--mode virtual` runs on (DESIGN.md §4).

The profile is claimed before measuring and written atomically, so a failed or
interrupted calibration leaves no profile, nor a half-written one, behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from sim.cli.options import wrote
from sim.cli.pg import postgres_for
from sim.cli.tables import new_table, plain, print_tables
from sim.load.config import Config
from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import atomic_write, claim_file

__all__ = ["register"]

_out = Console()


def register(app: typer.Typer) -> None:
    """Adds `calibrate` to the `coordsim` app (sim/cli/main.py calls this)."""
    app.command("calibrate")(calibrate)


def calibrate(
    output: Annotated[Path, typer.Option("--output", "-o", metavar="FILE", help="Profile file to write (.toml or .json).")] = Path(
        "latency-profile.toml"
    ),
    samples: Annotated[int, typer.Option("--samples", metavar="N", help="Round trips measured per operation.")] = 200,
    s3: Annotated[str | None, typer.Option("--s3", metavar="URL", show_default="files", help="Measure Blob on this s3:// URL.")] = None,
    fsync: Annotated[bool, typer.Option(help="Embedded Postgres with fsync on (durable, as the oracle is).")] = True,
) -> None:
    """Measure oracle, stash and consensus round trips against the configured Postgres (embedded unless COORDSIM_POSTGRES_URL) and write a latency profile for `--mode virtual`; prints the file last.

    Examples:
      coordsim calibrate
      coordsim calibrate --samples 500 -o my-profile.toml
      coordsim compare --latency-profile my-profile.toml
    """
    from sim.model.calibrate import calibrate_profile, check_samples, render_profile

    check_samples(samples)
    if output.suffix not in (".toml", ".json"):
        raise InvalidUsage(f"{output}: a profile is a .toml or .json file")
    claim_file(output, "coordsim calibrate")  # before measuring: refuse early
    with postgres_for(Config(mode="real"), fsync=fsync) as cfg:
        assert cfg.postgres_url is not None
        measured = calibrate_profile(cfg.postgres_url, samples=samples, s3_url=s3)
    text = render_profile(measured, json_format=output.suffix == ".json")
    try:
        claim_file(output, "coordsim calibrate")
        atomic_write(output, lambda p: p.write_text(text))
    except OSError as exc:
        raise InvalidUsage(f"cannot write {output}: {exc.strerror or exc}") from exc
    table = new_table("round trip", "median ms", "sigma", "samples", plain=plain(_out),
                      numeric=("median ms", "sigma", "samples"))  # fmt: skip
    for name, (median_ms, sigma, n) in sorted(measured.items()):
        table.add_row(name, f"{median_ms:.3f}", f"{sigma:.2f}", f"{n:,}")
    print_tables([table], console=_out)
    wrote(output)
