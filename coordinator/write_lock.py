"""The deployment's write lock when its adapters are separate OS processes
(issue 36, real mode): a row of the deployment's database, held `FOR UPDATE`
for as long as one read-then-write (UPDATE/DELETE) runs.

Why a lock at all: an UPDATE reads the rows it changes at `read_ts` and
appends their retractions and replacements at a later `write_ts`; two
adapters doing that to one row concurrently would both retract it (a lost
update). In one process the adapters share an `anyio.Lock`; across processes
the lock must live where all of them meet, and the oracle's database is that
place. `SELECT … FOR UPDATE` inside a transaction is valid on PostgreSQL and
on CockroachDB (whose `pg_advisory_lock` is a no-op), so the lock keeps the
oracle's SQL portable. Within one process an `anyio.Lock` queues the
process's own writers first, so each process holds at most one row lock
(one connection) at a time.

Failure: a connection lost while the lock is held releases it on the server
(the transaction ends), so the caller's statement is ended indeterminate by
the error, never left holding a lock nobody has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Self, final

import anyio

from sim.runtime.errors import Indeterminate
from sim.runtime.urls import driver_url, redact_text

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["LOCK_TABLE", "PostgresWriteLock", "create_lock_row"]

#: The table of write-lock rows, one per deployment (its environment name).
LOCK_TABLE: Final = "coordsim_write_lock"

#: How long connecting may take before it is an external failure.
CONNECT_TIMEOUT_S: Final = 30.0


async def create_lock_row(database_url: str, env_name: str) -> None:
    """Creates deployment `env_name`'s lock row (idempotent); the deployment's
    own process runs it once before its adapters start."""
    import asyncpg

    conn = await asyncpg.connect(driver_url(database_url), timeout=CONNECT_TIMEOUT_S)
    try:
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {LOCK_TABLE} (env TEXT PRIMARY KEY)")
        await conn.execute(
            f"INSERT INTO {LOCK_TABLE} (env) VALUES ($1) ON CONFLICT (env) DO NOTHING", env_name
        )
    finally:
        await conn.close()


@final
class PostgresWriteLock:
    """`async with lock:` holds deployment `env_name`'s write lock (see the
    module docstring). Open it with `connect`, close it with `close`."""

    def __init__(self, conn: Any, env_name: str) -> None:
        self._conn = conn  # asyncpg.Connection: kept untyped, asyncpg is imported lazily
        self._env = env_name
        self._local = anyio.Lock()
        self._tx: Any = None

    @classmethod
    async def connect(cls, database_url: str, env_name: str) -> Self:
        import asyncpg

        conn = await asyncpg.connect(
            driver_url(database_url), timeout=CONNECT_TIMEOUT_S,
            server_settings={"application_name": "coordsim-write-lock"},
        )
        return cls(conn, env_name)

    async def close(self) -> None:
        await self._conn.close()

    async def __aenter__(self) -> Self:
        import asyncpg

        await self._local.acquire()
        try:
            self._tx = self._conn.transaction()
            await self._tx.start()
            await self._conn.fetchval(f"SELECT 1 FROM {LOCK_TABLE} WHERE env = $1 FOR UPDATE", self._env)
        except BaseException as exc:
            await self._abandon()
            if isinstance(exc, (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)):
                raise Indeterminate(f"write lock: {redact_text(str(exc))}") from exc
            raise
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        import asyncpg

        try:
            # Shielded: a cancelled statement must still give the row back.
            with anyio.CancelScope(shield=True):
                await self._tx.commit()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            await self._abandon()
            if et is None:
                raise Indeterminate(f"write lock release: {redact_text(str(exc))}") from exc
            return
        finally:
            self._tx = None
            if self._local.locked():
                self._local.release()

    async def _abandon(self) -> None:
        """Ends a half-started transaction (the server drops the row lock with it)."""
        tx, self._tx = self._tx, None
        if tx is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5.0):
                try:
                    await tx.rollback()
                except Exception:  # the connection is gone: so is the lock
                    self._conn.terminate()
        if self._local.locked():
            self._local.release()
