"""`coordsim catalog dump|edit|delete|upgrade-check` on real locations (Postgres)."""

from __future__ import annotations

import json
import sys
import uuid
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest
from typer.testing import CliRunner

from catalog.migrations import legacy_state
from catalog.objects import Column
from catalog.open import open_catalog
from sim.cli.catalog import catalog_app
from sim.cli.main import app
from sim.runtime.core import Runtime, run
from sim.runtime.errors import Fenced, InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from catalog.api import DurableCatalog
    from catalog.objects import CatalogState

T = TypeVar("T")

pytestmark = pytest.mark.postgres


def catalog_url(pg_url: str, kind: str, tmp: Path) -> str:
    """A fresh catalog location of `kind` on the test Postgres."""
    parts = urlsplit(pg_url)
    tag = uuid.uuid4().hex[:10]
    params = {
        "persist": f"blob=file://{tmp}/blob-{tag}&shard=cat-{tag}",
        "stash": f"env=env-{tag}",
        "shadow": f"blob=file://{tmp}/blob-{tag}&shard=cat-{tag}&env=env-{tag}",
    }[kind]
    query = f"{parts.query}&{params}" if parts.query else params
    return urlunsplit(parts._replace(scheme=f"{kind}+postgres", query=query))


def on(url: str, op: Callable[[DurableCatalog], Awaitable[T]]) -> T:
    async def main(rt: Runtime) -> T:
        async with open_catalog(url, rt) as c:
            return await op(c)

    return run(main, virtual=False, seed=uuid.uuid4().int & (2**63 - 1))  # see sim/cli/catalog.py


async def _seed(c: DurableCatalog, bootstrap: CatalogState | None = None) -> None:
    await c.open(bootstrap=bootstrap)
    if bootstrap is None:
        tx = c.transaction()
        tx.create_table(1, "orders", [Column("id", "int", False), Column("note", "text")])
        await c.commit_transaction(tx)


def cli(*args: str) -> Any:
    # The sub-app itself: the other `coordsim` commands are not under test here.
    return CliRunner().invoke(catalog_app, list(args))


def test_registered_as_coordsim_catalog() -> None:
    import typer.main

    root = typer.main.get_group(app)
    root.load_all()  # type: ignore[attr-defined]  # the commands are imported lazily
    group = root.commands["catalog"]
    assert isinstance(group, typer.core.TyperGroup)
    assert {"dump", "edit", "delete", "upgrade-check"} <= set(group.commands), sorted(group.commands)


def dump(url: str) -> dict[str, Any]:
    result = cli("dump", "--location", url)
    assert result.exit_code == 0, result.output
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


@pytest.fixture(params=["persist", "stash", "shadow"])
def url(request: pytest.FixtureRequest, pg_url: str, tmp_path: Path) -> str:
    return catalog_url(pg_url, request.param, tmp_path)


def test_dump_edit_delete_round_trip(url: str, tmp_path: Path) -> None:
    on(url, _seed)
    before = dump(url)
    (table,) = before["objects"]["table"]
    assert table["value"]["name"] == "orders"

    renamed = {**table["value"], "name": "orders2"}
    result = cli("edit", "--location", url, "table", json.dumps(table["key"]), json.dumps(renamed))
    assert result.exit_code == 0, result.output
    after = dump(url)
    assert after["objects"]["table"] == [{"key": table["key"], "value": renamed}]
    # Nothing else changed, except the epoch the tool opened the catalog with.
    epoch_of = {e["key"]["name"]: e["value"]["value"] for e in after["objects"]["config"]}
    assert epoch_of["epoch"] == 2  # the edit opened the catalog (fencing its opener)

    def strip(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d["objects"].items() if k not in ("table", "config")}

    assert strip(after) == strip(before)

    target = tmp_path / "dump.json"
    assert cli("dump", "--location", url, "--target", str(target)).exit_code == 0
    assert json.loads(target.read_text()) == after

    result = cli("delete", "--location", url, "table", json.dumps(table["key"]))
    assert result.exit_code == 0, result.output
    assert "table" not in dump(url)["objects"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("edit", "tabel", '{"id": 1}', "{}"), "unknown object kind 'tabel'"),
        (("edit", "table", "{id: 1", "{}"), "table key is not valid JSON"),
        (("edit", "table", '{"name": "x"}', "{}"), "key is a JSON object with fields ['id']"),
        (("edit", "table", '{"id": 1}', '{"name": "x"}'), "value must have fields"),
        (("edit", "table", '{"id": 1}', "[1"), "value is not valid JSON"),
        (("delete", "table", '{"id": 999}'), "no table with key"),
        (("delete", "cluster", '{"id": "one"}'), None),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(url: str, args: tuple[str, ...], message: str | None) -> None:
    on(url, _seed)
    upper = on(url, lambda c: c.fetch_upper())
    result = cli(args[0], "--location", url, *args[1:])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("coordsim: invalid input: "), result.stderr
    if message is not None:
        assert message in lines[0]
    assert on(url, lambda c: c.fetch_upper()) == upper


def test_bad_location_is_exit_2(tmp_path: Path) -> None:
    for location in ("nope+postgres://x/y", "persist+postgres://u@h/db", "stash+mem://?env=x"):
        result = cli("dump", "--location", location)
        assert result.exit_code == 2, result.output
        assert len(result.stderr.strip().splitlines()) == 1


def test_a_missing_blob_directory_is_exit_2_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    location = f"persist+postgres://u@h/db?blob=file://{missing}"
    for args in (("dump",), ("edit", "setting", '{"name": "x"}', '{"value": "y"}'), ("delete", "table", '{"id": 1}')):
        result = cli(args[0], "--location", location, *args[1:])
        assert result.exit_code == 2, result.output
        assert result.stderr.strip().splitlines() == [
            f"coordsim: invalid input: no catalog at {location}: blob directory {missing} does not exist"
        ]
    result = cli("upgrade-check", "--location", location)
    assert result.exit_code == 0, result.output
    assert "not initialized" in result.stdout
    assert not missing.exists()


def test_upgrade_check(url: str) -> None:
    result = cli("upgrade-check", "--location", url)
    assert result.exit_code == 0
    assert "not initialized" in result.stdout
    on(url, _seed)
    result = cli("upgrade-check", "--location", url)
    assert result.exit_code == 0, result.output
    assert "is current" in result.stdout
    result = cli("upgrade-check", "--location", url, "--cluster-replica-sizes", "2,4")
    assert result.exit_code == 1, result.output
    assert "size '1'" in result.stdout


def test_upgrade_check_on_old_versions(pg_url: str, tmp_path: Path) -> None:
    old = catalog_url(pg_url, "persist", tmp_path)
    on(old, lambda c: _seed(c, legacy_state(1)))
    upper = on(old, lambda c: c.fetch_upper())
    result = cli("upgrade-check", "--location", old)
    assert result.exit_code == 0, result.output
    assert "format version 1 -> 3" in result.stdout
    assert on(old, lambda c: c.fetch_upper()) == upper  # the check wrote nothing
    # The dump shows the old shapes as they are (dump needs no migration).
    (replica,) = dump(old)["objects"]["cluster_replica"]
    assert "size_name" in replica["value"]

    unsupported = catalog_url(pg_url, "stash", tmp_path)
    on(unsupported, lambda c: _seed(c, legacy_state(0)))
    result = cli("upgrade-check", "--location", unsupported)
    assert result.exit_code == 1
    assert "older than the oldest upgradable" in result.stdout


def test_edit_rejects_before_touching_an_uninitialized_catalog(url: str) -> None:
    with pytest.raises(InvalidUsage, match="not initialized"):
        on(url, lambda c: _edit(c))
    assert on(url, lambda c: c.fetch_upper()) == 0


async def _edit(c: DurableCatalog) -> None:
    from catalog.debug import edit_object

    await edit_object(c, "setting", '{"name": "x"}', '{"value": "y"}')


@pytest.mark.asyncio
async def test_an_edit_from_another_process_fences_the_running_opener(url: str) -> None:
    """The debug tool opens the catalog (a new epoch) in its own OS process: the
    catalog a "running coordinator" holds can no longer write or confirm."""
    rt = Runtime(seed=uuid.uuid4().int & (2**63 - 1))
    async with open_catalog(url, rt) as running:
        await _seed(running)
        before = running.epoch()
        code = "import sys; from sim.cli.catalog import catalog_app; catalog_app(sys.argv[1:])"
        proc = await anyio.run_process(
            [sys.executable, "-c", code, "edit", "--location", url, "setting", '{"name": "x"}', '{"value": "y"}'],
            check=False,
        )
        assert proc.returncode == 0, proc.stderr.decode()
        assert b"(epoch 2)" in proc.stdout
        tx = running.transaction()
        tx.set_setting("z", "w")
        with pytest.raises(Fenced):
            await running.commit_transaction(tx)
        with pytest.raises(Fenced):
            await running.confirm_leadership()
        assert running.epoch() == before
        upper = await running.fetch_upper()
        assert (await running.snapshot_at(upper - 1)).entries.get(("setting", '{"name":"x"}')) == '{"value":"y"}'
