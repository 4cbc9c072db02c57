"""The stash catalog on a Postgres whose default isolation is SERIALIZABLE (as
CockroachDB's is): contention surfaces as 40001, which must be retried, never
seen by the catalog's callers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from catalog.testing import check_catalog
from sim.runtime.core import Runtime
from tests.catalog.conftest import CatalogImpl, Services
from tests.catalog.test_concurrent_ddl import run_concurrent_ddl

if TYPE_CHECKING:
    from pathlib import Path

    from sim.services.postgres import EmbeddedPostgres

pytestmark = [pytest.mark.postgres, pytest.mark.asyncio]


async def test_stash_conformance_and_concurrent_ddl_under_serializable(
    pg_serializable: EmbeddedPostgres, tmp_path: Path
) -> None:
    impl = CatalogImpl("stash-serializable", "stash", True, Services(pg_serializable.url, tmp_path))
    rt = Runtime(seed=41)
    await check_catalog(impl.new_location(rt))
    await run_concurrent_ddl(impl, rt)
