"""The catalog debug tool (seed 004): dump, edit and delete single objects, and the
upgrade check, on any `DurableCatalog`.

`dump` and `upgrade_check` never write and never open the catalog (they read a
snapshot at the durable upper), so they are safe against a running
coordinator. `edit` and `delete` validate everything first — an unknown kind, a
malformed or missing key, a value that is not a valid object: `InvalidUsage`,
nothing written — and then open the catalog (which fences every other opener,
as Materialize's stash debug tool does) and commit one transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

from catalog.api import Conflict
from catalog.objects import CatalogState, canonical, kind_class, parse_json
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from catalog.api import DurableCatalog, UpgradeCheck

__all__ = ["EditResult", "delete_object", "dump_catalog", "edit_object", "read_catalog", "upgrade_check"]


@final
@dataclass(frozen=True)
class EditResult:
    """What an edit or delete changed: the old value (None: there was none), the
    new one (None: deleted), and the epoch the tool opened the catalog with."""

    kind: str
    key: str
    old: str | None
    new: str | None
    epoch: int


async def read_catalog(catalog: DurableCatalog) -> tuple[int, CatalogState]:
    """The durable upper and the catalog at `upper - 1`, without opening it."""
    upper = await catalog.fetch_upper()
    if upper == 0:
        return 0, CatalogState()
    return upper, await catalog.snapshot_at(upper - 1)


async def dump_catalog(catalog: DurableCatalog) -> str:
    """Human-readable JSON: `{"upper": u, "objects": {kind: [{key, value}]}}`.

    Every key and value is in the form `edit_object`/`delete_object` take.
    """
    upper, state = await read_catalog(catalog)
    return json.dumps({"upper": upper, "objects": state.to_json()}, indent=2, sort_keys=True)


def _canonical_key(kind: str, key: str) -> str:
    cls = kind_class(kind)
    parsed = parse_json(key, f"{kind} key")
    if not isinstance(parsed, dict) or sorted(parsed) != sorted(cls.KEY):
        raise InvalidUsage(f"a {kind} key is a JSON object with fields {list(cls.KEY)}, got {key}")
    return canonical(parsed)


async def edit_object(catalog: DurableCatalog, kind: str, key: str, value: str) -> EditResult:
    """Inserts or replaces the object `(kind, key)` with `value` (JSON)."""
    k = _canonical_key(kind, key)
    obj = kind_class(kind).decode(k, canonical(parse_json(value, f"{kind} value")))
    return await _commit(catalog, kind, k, obj.value_json())


async def delete_object(catalog: DurableCatalog, kind: str, key: str) -> EditResult:
    """Deletes the object `(kind, key)`; a key that does not exist is `InvalidUsage`."""
    k = _canonical_key(kind, key)
    _, state = await read_catalog(catalog)
    if (kind, k) not in state.entries:
        raise InvalidUsage(f"no {kind} with key {k} in the catalog")
    return await _commit(catalog, kind, k, None)


async def _commit(catalog: DurableCatalog, kind: str, key: str, value: str | None) -> EditResult:
    if not await catalog.is_initialized():
        raise InvalidUsage("the catalog is not initialized; nothing to edit")
    report = await catalog.open()
    while True:
        tx = catalog.transaction()
        old = tx.state.entries.get((kind, key))
        if value is None:
            if old is None:
                raise InvalidUsage(f"no {kind} with key {key} in the catalog")
            tx.delete(kind, key)
        else:
            tx.state.entries[(kind, key)] = value
        if not isinstance(await catalog.commit_transaction(tx), Conflict):
            return EditResult(kind, key, old, value, report.epoch)


async def upgrade_check(catalog: DurableCatalog, *, replica_sizes: frozenset[str] | None = None) -> UpgradeCheck:
    """`check_open`: what opening would migrate; `MigrationError` if it would fail."""
    return await catalog.check_open(replica_sizes=replica_sizes)
