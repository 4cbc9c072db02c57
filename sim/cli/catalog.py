"""`coordsim catalog …`: the catalog debug tool (seed 004) on a catalog location.

Bad input (an unknown kind, a malformed key or value, a key that does not exist,
a bad URL) and unavailable backends print one line on stderr and exit 2 with
nothing written; `upgrade-check` exits 0 if the upgrade would succeed and 1 if
it would not.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from sim.cli.options import exit_code, removed_if_unfinished, write_failed
from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.owned_files import claim_file, write_owned
from sim.runtime.urls import parse_url, redact_text

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from catalog.api import DurableCatalog
    from sim.runtime.core import Runtime

__all__ = ["catalog_app", "register"]

T = TypeVar("T")

catalog_app = typer.Typer(
    help="The durable catalog's debug tool: dump, edit, delete, upgrade-check.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Adds `coordsim catalog` (sim/cli/main.py imports this module lazily)."""
    app.add_typer(catalog_app, name="catalog")

Location = Annotated[
    str,
    typer.Option(
        "--location",
        metavar="URL",
        help="Catalog URL: persist+postgres://…?blob=file:///dir, stash+postgres://…?env=NAME, "
        "shadow+postgres://…?blob=…",
    ),
]


def _fail(exc: CoordsimError) -> typer.Exit:
    tag = "invalid input" if isinstance(exc, InvalidUsage) else "error"
    line = " ".join(redact_text(str(exc)).split())  # one line, whatever a driver's message spans
    print(f"coordsim: {tag}: {line}", file=sys.stderr)  # noqa: T201 - the CLI's error channel
    return typer.Exit(exit_code(exc))



def _check_target(target: Path) -> None:
    """Refuses, before the catalog is opened, a target that cannot be written
    or that holds something other than an earlier dump."""
    claim_file(target)
    parent = target.absolute().parent
    if not parent.is_dir():
        raise InvalidUsage(f"cannot write {target}: no directory {parent}")
    if not os.access(parent, os.W_OK):
        raise InvalidUsage(f"cannot write {target}: directory {parent} is not writable")


def _missing_blob_dir(location: str) -> Path | None:
    """The directory of a `?blob=file:///dir` that does not exist, else None.

    Opening the catalog would create it (and an empty catalog), so a mistyped
    path would print an empty dump, exit 0 and leave a directory behind."""
    blob = parse_url(location).params.get("blob", "")
    if blob.startswith("file://"):
        directory = Path(parse_url(blob).path)
        if not directory.is_dir():
            return directory
    return None


def _run(location: str, op: Callable[[DurableCatalog], Awaitable[T]]) -> T:
    from rich.console import Console

    from catalog.open import open_catalog
    from sim.cli.heartbeat import heartbeat
    from sim.runtime.core import run

    missing = _missing_blob_dir(location)
    if missing is not None:
        raise InvalidUsage(f"no catalog at {redact_text(location)}: blob directory {missing} does not exist")

    async def main(rt: Runtime) -> T:
        async with open_catalog(location, rt) as catalog:
            return await op(catalog)

    # A fresh seed per run: persist derives writer ids and batch keys from the
    # Runtime's rng, so two runs with one seed would write the same blob keys.
    # A big catalog on a remote location takes a while to read: a heartbeat
    # on stderr (stdout is the dump).
    with heartbeat(Console(stderr=True, highlight=False, soft_wrap=True), f"catalog {redact_text(location)}"):
        return run(main, virtual=False, seed=int.from_bytes(os.urandom(8), "big"))


@catalog_app.command("dump")
def dump(
    location: Location,
    target: Annotated[Path | None, typer.Option(metavar="FILE", help="Write the dump here instead of stdout.")] = None,
) -> None:
    """Dump the catalog as JSON (every key and value as edit/delete take them).

    Examples:
      coordsim catalog dump --location "stash+$COORDSIM_POSTGRES_URL"
      coordsim catalog dump --location "stash+$COORDSIM_POSTGRES_URL?env=prod" --target dump.json
    """
    from catalog.debug import dump_catalog

    try:
        if target is not None:
            _check_target(target)
        text = _run(location, dump_catalog)
        if target is None:
            typer.echo(text)
            return
        try:
            with removed_if_unfinished(target):
                write_owned(target, lambda p: p.write_text(text + "\n", encoding="utf-8"))
        except OSError as exc:
            raise write_failed(target, exc) from exc
    except CoordsimError as exc:
        raise _fail(exc) from exc


@catalog_app.command("edit")
def edit(
    location: Location,
    kind: Annotated[str, typer.Argument(metavar="KIND", help="Object kind, e.g. table, cluster, config.")],
    key: Annotated[str, typer.Argument(metavar="KEY", help='JSON key, e.g. \'{"id": 3}\'.')],
    value: Annotated[str, typer.Argument(metavar="VALUE", help="JSON value, as dump shows it.")],
) -> None:
    """Insert or replace one object (opens the catalog: fences its current opener).

    Examples:
      coordsim catalog edit setting '{"name": "x"}' '{"value": "y"}' --location "stash+$COORDSIM_POSTGRES_URL"
    """
    from catalog.debug import edit_object

    try:
        result = _run(location, lambda c: edit_object(c, kind, key, value))
    except CoordsimError as exc:
        raise _fail(exc) from exc
    typer.echo(f"{kind} {result.key}: {result.old} -> {result.new} (epoch {result.epoch})")


@catalog_app.command("delete")
def delete(
    location: Location,
    kind: Annotated[str, typer.Argument(metavar="KIND", help="Object kind.")],
    key: Annotated[str, typer.Argument(metavar="KEY", help="JSON key.")],
) -> None:
    """Delete one object (opens the catalog: fences its current opener).

    Examples:
      coordsim catalog edit setting '{"name": "x"}' '{"value": "y"}' --location "stash+$COORDSIM_POSTGRES_URL"
      coordsim catalog delete setting '{"name": "x"}' --location "stash+$COORDSIM_POSTGRES_URL"
    """
    from catalog.debug import delete_object

    try:
        result = _run(location, lambda c: delete_object(c, kind, key))
    except CoordsimError as exc:
        raise _fail(exc) from exc
    typer.echo(f"deleted {kind} {result.key} (was {result.old}; epoch {result.epoch})")


@catalog_app.command("upgrade-check")
def upgrade_check_cmd(
    location: Location,
    cluster_replica_sizes: Annotated[
        str | None, typer.Option(metavar="SIZES", help="Comma-separated valid replica sizes to check against.")
    ] = None,
) -> None:
    """Check whether this binary could open (upgrade) the catalog; writes nothing. Exit 0 if it could, 1 if not.

    Examples:
      coordsim catalog upgrade-check --location "stash+$COORDSIM_POSTGRES_URL"
    """
    from catalog.debug import upgrade_check
    from catalog.migrations import MigrationError

    if _missing_blob_dir(location) is not None:  # opening would create it: writes nothing
        typer.echo("catalog is not initialized: opening would create it")
        return
    sizes = None
    if cluster_replica_sizes is not None:
        sizes = frozenset(s.strip() for s in cluster_replica_sizes.split(",") if s.strip())
    try:
        check = _run(location, lambda c: upgrade_check(c, replica_sizes=sizes))
    except MigrationError as exc:
        typer.echo(f"upgrade would fail: {exc}")
        raise typer.Exit(1) from exc
    except CoordsimError as exc:
        raise _fail(exc) from exc
    if not check.initialized:
        typer.echo("catalog is not initialized: opening would create it")
    elif check.steps:
        typer.echo(
            f"upgrade would succeed: format version {check.version} -> {check.target_version} "
            f"({'; '.join(check.steps)})"
        )
    else:
        typer.echo(f"upgrade would succeed: format version {check.version} is current")
