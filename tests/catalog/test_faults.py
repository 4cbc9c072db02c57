"""The catalog over failing storage: injected failures and timeouts (some after
the write applied) must not lose or duplicate an acknowledged DDL change."""

from __future__ import annotations

import contextlib
import random
from typing import TYPE_CHECKING

import pytest

from catalog.faults import UnreliableStashStore
from catalog.open import CatalogFlavor, CatalogSpec, open_catalog
from catalog.stash_catalog import MemStashStore
from persist.client import PersistClient
from persist.faults import UnreliableBlob, UnreliableConsensus
from persist.open import open_blob, open_consensus
from sim.runtime.core import Runtime
from tests.catalog.test_concurrent_ddl import run_concurrent_ddl

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from catalog.api import DurableCatalog
    from catalog.testing import OpenCatalog
    from oracle.api import TimestampOracle

pytestmark = [pytest.mark.virtual, pytest.mark.asyncio]


async def test_persist_catalog_on_unreliable_blob_and_consensus() -> None:
    rt = Runtime(seed=31)
    blob = UnreliableBlob(await open_blob("mem://"), random.Random(1), p_fail=0.05, p_timeout=0.05)
    consensus = UnreliableConsensus(await open_consensus("mem://"), random.Random(2), p_fail=0.05, p_timeout=0.05)

    def location(oracle: TimestampOracle) -> OpenCatalog:
        @contextlib.asynccontextmanager
        async def handle() -> AsyncIterator[DurableCatalog]:
            async with PersistClient(blob, consensus, rt) as client, open_catalog(
                CatalogSpec(CatalogFlavor.PERSIST), rt, oracle=oracle, persist=client
            ) as cat:
                yield cat

        return handle

    await run_concurrent_ddl(location, rt)
    assert blob.statistics().failed + consensus.statistics().timed_out_after_applying > 0


async def test_stash_catalog_on_an_unreliable_store() -> None:
    rt = Runtime(seed=32)
    store = UnreliableStashStore(MemStashStore(rt), random.Random(3), p_fail=0.05, p_timeout=0.1)

    def location(oracle: TimestampOracle) -> OpenCatalog:
        def handle() -> contextlib.AbstractAsyncContextManager[DurableCatalog]:
            return open_catalog(CatalogSpec(CatalogFlavor.STASH, store=store), rt, oracle=oracle)

        return handle

    await run_concurrent_ddl(location, rt)
    assert store.applied_then_timed_out > 0
