"""The real-mode environment the coordinator's Postgres tests share: a fresh
database on the session's Postgres (its consensus), a file blob store under
the test's directory, both closed and the database dropped afterwards."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from coordinator.environment import Environment
from persist.open import open_blob, open_consensus
from sim.load.harness import drop_database, fresh_database
from sim.runtime.core import Runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def env(pg_url: str, tmp_path: Path) -> AsyncIterator[Environment]:
    url = await fresh_database(pg_url)
    blob_url = f"file://{tmp_path}/blob?fsync=false"
    blob = await open_blob(blob_url)
    consensus = await open_consensus(url)
    try:
        yield Environment(Runtime(seed=0), blob=blob, consensus=consensus, postgres_url=url, blob_url=blob_url)
    finally:
        await consensus.close()
        await blob.close()
        await drop_database(pg_url, url)
