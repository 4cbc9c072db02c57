"""The one DurableCatalog conformance suite, on every implementation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from catalog.testing import check_catalog
from sim.runtime.core import Runtime

if TYPE_CHECKING:
    from tests.catalog.conftest import CatalogImpl


@pytest.mark.asyncio
async def test_conformance(catalog_impl: CatalogImpl) -> None:
    """persist, stash and shadow(persist, stash); in memory and on Postgres."""
    rt = Runtime(seed=11)
    await check_catalog(catalog_impl.new_location(rt), concurrent_openers=catalog_impl.kind != "shadow")
