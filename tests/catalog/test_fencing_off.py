"""`fencing=False` (the known-bad `KnownBad.skip_epoch_fencing`): a catalog
opened before a newer opener keeps writing and confirming, where the default
one is fenced; and `Transaction.overwrite` (the blind append) replaces a
transaction's result whatever its base."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import pytest

from catalog.api import Appended
from catalog.objects import Config
from catalog.open import CatalogFlavor, CatalogSpec, open_catalog
from catalog.stash_catalog import MemStashStore
from sim.runtime.core import Runtime, run
from sim.runtime.errors import Fenced

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from catalog.api import DurableCatalog


@contextlib.asynccontextmanager
async def _deposed(rt: Runtime, *, fencing: bool) -> AsyncIterator[DurableCatalog]:
    store = MemStashStore(rt)
    async with (
        open_catalog(CatalogSpec(CatalogFlavor.STASH, store=store, fencing=fencing), rt) as old,
        open_catalog(CatalogSpec(CatalogFlavor.STASH, store=store), rt) as new,
    ):
        await old.open()
        await new.open()  # a newer opener bumps the epoch
        await old.sync()
        yield old


def test_default_catalog_is_fenced() -> None:
    async def main(rt: Runtime) -> None:
        async with _deposed(rt, fencing=True) as old:
            with pytest.raises(Fenced):
                await old.confirm_leadership()
            tx = old.transaction()
            tx.put(Config("marker", 1))
            with pytest.raises(Fenced):
                await old.commit_transaction(tx)

    run(main, seed=1)


def test_unfenced_catalog_keeps_writing() -> None:
    async def main(rt: Runtime) -> bool:
        async with _deposed(rt, fencing=False) as old:
            await old.confirm_leadership()
            tx = old.transaction()
            tx.put(Config("marker", 1))
            return isinstance(await old.commit_transaction(tx), Appended)

    assert run(main, seed=1)


def test_overwrite_replaces_the_result_not_the_base() -> None:
    async def main(rt: Runtime) -> tuple[bool, bool]:
        async with open_catalog("stash+mem://", rt) as cat:
            await cat.open()
            planned = cat.transaction()
            planned.put(Config("planned", 1))
            fresh = cat.transaction()
            fresh.put(Config("fresh", 1))
            fresh.overwrite(planned.state)
            return fresh.state.entries == planned.state.entries, fresh.is_empty()

    assert run(main, seed=1) == (True, False)
