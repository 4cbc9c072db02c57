"""The one place a run's stores are opened: in memory (virtual mode, with or
without modeled latency), or a fresh database on the user's server plus files
(real mode), removed afterwards because shard ids and the timestamp-store and catalog-stash tables are not
namespaced per run. `sim.load.deployment.Deployment`, the one harness that
builds coordinators (for compare's passes, scenario programs and scripts,
validate's experiments and the anomaly runs alike), opens its stores here."""

from __future__ import annotations

import contextlib
import shutil
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

import anyio

from persist.open import open_location
from sim.load.latent import LatentBlob, LatentConsensus
from sim.runtime.owners import private_tmpdir
from sim.runtime.urls import driver_url, with_query_param

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from persist.location import Blob, Consensus
    from sim.runtime.core import Runtime

__all__ = [
    "DROP_WITHIN_S",
    "Stores",
    "drop_database",
    "fresh_database",
    "open_stores",
]


async def fresh_database(pg_url: str) -> str:
    """Creates a database with a random name on `pg_url`'s server; returns its URL.
    (Shard ids and the timestamp-store and catalog-stash tables are not namespaced, so each deployment gets its own.)"""
    import asyncpg

    name = f"coordsim_{uuid.uuid4().hex[:12]}"
    # Bounded (DESIGN.md §9): a server that stalls must not hold the run up.
    conn = await asyncpg.connect(driver_url(pg_url), timeout=SETUP_TIMEOUT_S, command_timeout=SETUP_TIMEOUT_S)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close(timeout=SETUP_TIMEOUT_S)
    base, _, query = pg_url.partition("?")
    root = base.rsplit("/", 1)[0]
    return f"{root}/{name}" + (f"?{query}" if query else "")


#: How long each statement creating a run's database may take (connecting,
#: CREATE DATABASE, closing); a timeout of the CREATE is Indeterminate (the
#: database may exist), and ends the run.
SETUP_TIMEOUT_S: Final = 30.0

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


@final
@dataclass(frozen=True)
class Stores:
    """A run's base stores (before any fault or latency wrapper a caller adds)."""

    blob: Blob
    consensus: Consensus
    #: Real mode: the run's database (oracle, timestamp store, catalog stash, Consensus); None: virtual.
    database_url: str | None = None
    #: Real mode: where `blob` is (adapter processes open it themselves).
    blob_url: str | None = None


@contextlib.asynccontextmanager
async def open_stores(
    postgres_url: str | None, *, modeled: Runtime | None = None, blob_url: str | None = None
) -> AsyncIterator[Stores]:
    """In-memory stores (`postgres_url` None; with `modeled`, behind the latency
    model of that runtime), or real ones: a fresh database on `postgres_url`'s
    server for Consensus, the oracle, its timestamp store and the catalog stash, and `blob_url` or files in
    a temporary directory for Blob; all removed afterwards."""
    if postgres_url is None:
        if modeled is None:
            yield Stores(*await open_location())
        else:
            # The modeled round trip is the yield before each call.
            mem = await open_location(yields=False)
            yield Stores(LatentBlob(mem.blob, modeled), LatentConsensus(mem.consensus, modeled))
        return
    db = await fresh_database(postgres_url)
    tmp = str(private_tmpdir("coordsim-blob-", "blob"))  # claimed: reclaimed after a SIGKILL
    try:
        blob_url = blob_url or f"file://{tmp}?fsync=false"
        # Consensus is named, so a pg-kill's event says whose backends it killed.
        consensus_url = with_query_param(db, "application_name", "coordsim-consensus")
        async with await open_location(blob=blob_url, consensus=consensus_url) as location:
            yield Stores(*location, db, blob_url)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        await drop_database(postgres_url, db)
