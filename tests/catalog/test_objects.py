"""Catalog objects: stable encodings, strict decoding, migrations, the oracle path."""

from __future__ import annotations

import pytest

from catalog.api import Appended
from catalog.migrations import MigrationError, initial_state, legacy_state, migrate
from catalog.objects import (
    FORMAT_VERSION,
    KINDS,
    CatalogState,
    CatalogUpdate,
    Column,
    Index,
    MaterializedView,
    Schema,
    Table,
    canonical,
    decode_object,
)
from catalog.open import open_catalog
from catalog.transaction import CatalogError, Transaction
from oracle.api import CATALOG_TIMELINE
from oracle.open import open_oracles
from sim.runtime.core import Runtime
from sim.runtime.errors import InvalidUsage


def test_encodings_are_stable() -> None:
    """Golden bytes: changing them is a format change (bump FORMAT_VERSION, add a step)."""
    t = Table(7, 1, "orders", (Column("id", "int", False), Column("note", "text")), 2)
    assert t.key_json() == '{"id":7}'
    assert t.value_json() == (
        '{"columns":[{"name":"id","nullable":false,"type":"int"},'
        '{"name":"note","nullable":true,"type":"text"}],"name":"orders","owner_id":2,"schema_id":1}'
    )
    assert decode_object("table", t.key_json(), t.value_json()) == t
    s = Schema(2, None, "mz_catalog", 1)
    assert s.value_json() == '{"database_id":null,"name":"mz_catalog","owner_id":1}'
    mv = MaterializedView(9, 1, "v", "SELECT 1", (Column("a", "int"),), (7, 8), 1, 1)
    assert decode_object("materialized_view", mv.key_json(), mv.value_json()) == mv
    assert FORMAT_VERSION == 3


def test_every_builtin_object_round_trips() -> None:
    state = initial_state()
    for (kind, key), value in state.entries.items():
        obj = decode_object(kind, key, value)
        assert (obj.key_json(), obj.value_json()) == (key, value)
    assert {k for k, _ in state.entries} <= set(KINDS)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ('{"id":1}', '{"name":"x"}', "must have fields"),
        ('{"id":"1"}', '{"keys":[],"name":"i","on_id":1,"cluster_id":1,"owner_id":1,"schema_id":1}', "must be an integer"),
        ('{"id":1}', '{"keys":"a","name":"i","on_id":1,"cluster_id":1,"owner_id":1,"schema_id":1}', "must be a list"),
        ('{"id":true}', '{"keys":[],"name":"i","on_id":1,"cluster_id":1,"owner_id":1,"schema_id":1}', "integer"),
        ("[1]", "{}", "key must be an object"),
        ("{", "{}", "not valid JSON"),
    ],
)
def test_decoding_is_strict(key: str, value: str, message: str) -> None:
    with pytest.raises(InvalidUsage, match=message):
        Index.decode(key, value)


def test_state_apply_checks_consistency() -> None:
    s = CatalogState()
    add = CatalogUpdate("setting", canonical({"name": "a"}), canonical({"value": "1"}), 0, 1)
    s.apply([add])
    with pytest.raises(InvalidUsage, match="added twice"):
        s.copy().apply([add])
    with pytest.raises(InvalidUsage, match="inconsistent retraction"):
        s.copy().apply([add._replace(value=canonical({"value": "2"}), diff=-1)])
    replace = [add._replace(diff=-1), add._replace(value=canonical({"value": "2"}))]
    s.apply(replace)  # retractions apply first
    assert s.objects(KINDS["setting"])[0] == decode_object("setting", add.key, canonical({"value": "2"}))


def test_migrations_upgrade_each_old_version() -> None:
    for version in range(1, FORMAT_VERSION + 1):
        plan = migrate(legacy_state(version))
        assert plan.from_version == version
        assert len(plan.steps) == FORMAT_VERSION - version
        assert plan.state.config("version") == FORMAT_VERSION
        (table,) = plan.state.objects(Table)
        assert table.columns == (Column("a", "int"), Column("b", "text"))
    for bad, message in ((0, "older than"), (FORMAT_VERSION + 1, "newer than")):
        with pytest.raises(MigrationError, match=message):
            migrate(legacy_state(bad))
    with pytest.raises(MigrationError, match="not one of"):
        migrate(initial_state(), replica_sizes=frozenset({"2"}))


def test_transaction_ids_and_errors() -> None:
    tx = Transaction(initial_state(), 1)
    a = tx.create_table(1, "a", [Column("x", "int")])
    b = tx.create_table(1, "b", [Column("x", "int")])
    assert (a.id, b.id) == (1, 2)
    with pytest.raises(CatalogError) as err:
        tx.create_table(1, "a", [])
    assert err.value.code == "42P07"
    with pytest.raises(CatalogError) as err:
        tx.create_table(99, "z", [])
    assert err.value.code == "3F000"
    updates = tx.updates(5)
    assert all(u.ts == 5 for u in updates)
    assert sum(u.diff for u in updates if u.kind == "table") == 2


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_writes_use_and_advance_the_catalog_oracle() -> None:
    """Decoupled path: commit at write_ts, then apply_write(ts): a read at the
    oracle's read_ts sees the change."""
    rt = Runtime(seed=5)
    oracle = await (await open_oracles("mem://", rt)).timeline(CATALOG_TIMELINE, owns_backend=True)
    async with open_catalog("stash+mem://", rt, oracle=oracle) as catalog:
        await catalog.open()
        assert catalog.cached_upper > rt.wall_ms() - 1_000  # timestamps from the oracle
        tx = catalog.transaction()
        tx.create_table(1, "t", [Column("a", "int")])
        result = await catalog.commit_transaction(tx)
        assert isinstance(result, Appended)
        read_ts = await oracle.read_ts()
        assert read_ts == result.upper - 1
        snapshot = await catalog.snapshot_at(read_ts)
        assert [t.name for t in snapshot.objects(Table)] == ["t"]
        assert (await oracle.write_ts()).ts >= result.upper
