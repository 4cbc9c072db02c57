"""`fencing=False` (the known-bad `KnownBad.skip_epoch_fencing`): a catalog
opened before a newer opener keeps writing and confirming, where the default
one is fenced; and `Transaction.overwrite` (the blind append) replaces a
transaction's result whatever its base."""

from __future__ import annotations

import pytest

from catalog.api import Appended, Fenced
from catalog.objects import Config
from catalog.stash_catalog import MemStashStore, StashCatalog
from sim.runtime.core import Runtime, run


async def _deposed(rt: Runtime, *, fencing: bool) -> StashCatalog:
    store = MemStashStore(rt)
    old = StashCatalog(store, rt, fencing=fencing)
    await old.open()
    await StashCatalog(store, rt).open()  # a newer opener bumps the epoch
    await old.sync()
    return old


def test_default_catalog_is_fenced() -> None:
    async def main(rt: Runtime) -> None:
        old = await _deposed(rt, fencing=True)
        with pytest.raises(Fenced):
            await old.confirm_leadership()
        tx = old.transaction()
        tx.put(Config("marker", 1))
        with pytest.raises(Fenced):
            await old.commit_transaction(tx)

    run(main, seed=1)


def test_unfenced_catalog_keeps_writing() -> None:
    async def main(rt: Runtime) -> bool:
        old = await _deposed(rt, fencing=False)
        await old.confirm_leadership()
        tx = old.transaction()
        tx.put(Config("marker", 1))
        return isinstance(await old.commit_transaction(tx), Appended)

    assert run(main, seed=1)


def test_overwrite_replaces_the_result_not_the_base() -> None:
    async def main(rt: Runtime) -> tuple[bool, bool]:
        cat = StashCatalog(MemStashStore(rt), rt)
        await cat.open()
        planned = cat.transaction()
        planned.put(Config("planned", 1))
        fresh = cat.transaction()
        fresh.put(Config("fresh", 1))
        fresh.overwrite(planned.state)
        return fresh.state.entries == planned.state.entries, fresh.is_empty()

    assert run(main, seed=1) == (True, False)
