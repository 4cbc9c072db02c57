"""Fresh environments: modeled in-memory stores (virtual mode), or a fresh
database on the server plus files (real mode), removed afterwards."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from typing import TYPE_CHECKING, Final

import anyio

from coordinator.environment import Environment
from persist.mem import MemBlob, MemConsensus
from sim.load.latent import LatentBlob, LatentConsensus
from sim.runtime.errors import CoordsimError
from sim.runtime.urls import driver_url

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sim.load.config import Config
    from sim.runtime.core import Runtime

__all__ = ['fresh_database']

async def fresh_database(pg_url: str) -> str:
    """Creates a database with a random name on `pg_url`'s server; returns its URL.
    (Shard ids and stash tables are not namespaced, so each deployment gets its own.)"""
    import asyncpg

    name = f"coordsim_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(driver_url(pg_url), timeout=10)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    base, _, query = pg_url.partition("?")
    root = base.rsplit("/", 1)[0]
    return f"{root}/{name}" + (f"?{query}" if query else "")


#: How long dropping a run's database may take when the run is being stopped.
DROP_WITHIN_S: Final = 5.0


async def drop_database(pg_url: str, db_url: str) -> None:
    """Best effort, but it happens: a leftover database on a user's server is
    litter, not an error. Runs shielded (within `DROP_WITHIN_S`), because it is
    the cleanup of a run that Ctrl-C or an error is unwinding, and first ends
    the run's own sessions that a cancelled close left open: PostgreSQL's DROP
    DATABASE would wait 5 s for them and then fail."""
    import asyncpg

    name = db_url.partition("?")[0].rsplit("/", 1)[1]
    with anyio.move_on_after(DROP_WITHIN_S, shield=True):
        try:
            conn = await asyncpg.connect(driver_url(pg_url), timeout=DROP_WITHIN_S)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return
        try:
            with contextlib.suppress(asyncpg.PostgresError):
                # PostgreSQL only (CockroachDB has no such function, and drops
                # a database in use anyway); the sessions are our own.
                await conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = $1 AND pid <> pg_backend_pid()",
                    name,
                )
            with contextlib.suppress(asyncpg.PostgresError):
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        finally:
            await conn.close()


@contextlib.asynccontextmanager
async def environment(cfg: Config, rt: Runtime) -> AsyncIterator[Environment]:
    """A fresh deployment: modeled in-memory stores (virtual) or a fresh database
    plus files or `blob_url` (real)."""
    if cfg.mode == "virtual":
        yield Environment(
            rt, blob=LatentBlob(MemBlob(), rt), consensus=LatentConsensus(MemConsensus(), rt)
        )
        return
    from persist.open import open_blob, open_consensus

    pg = cfg.effective_postgres_url()
    if pg is None:
        raise CoordsimError("real mode needs a Postgres (start one or set COORDSIM_POSTGRES_URL)")
    db = await fresh_database(pg)
    tmp = tempfile.mkdtemp(prefix="coordsim-blob-")
    try:
        blob = await open_blob(cfg.blob_url or f"file://{tmp}?fsync=false")
        consensus = await open_consensus(db)
        try:
            yield Environment(rt, blob=blob, consensus=consensus, postgres_url=db)
        finally:
            await consensus.close()
            await blob.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        await drop_database(pg, db)
