"""The oracle's timestamp store in Postgres/CockroachDB: two small tables, one namespace per
store (an environment), every method one transaction over asyncpg.

Fencing without advisory locks: `write_upper` and `confirm_leadership` lock the
store's epoch row (`SELECT … FOR UPDATE`) and compare it with their epoch in the
same transaction, so they serialize with `open`'s bump: a bump either commits
first (the check fails) or waits until the write has committed (the new opener
then reads it). Under SERIALIZABLE (the client's default, as CockroachDB) the
loser may get 40001 instead, and retries. Transactions name the client's level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, TypeVar, final

from oracle.api import check_timeline
from oracle.timestamp_store import TimestampStore, check_epoch, check_upper
from sim.runtime.errors import Fenced, InvalidUsage
from sim.runtime.pgclient import DEFAULT_RETRY, PostgresClient

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sim.runtime.core import Runtime
    from sim.runtime.pgclient import Conn
    from sim.runtime.retry import RetryPolicy

__all__ = ["PostgresTimestampStore"]

T = TypeVar("T")

# The tables and their `stash` column keep the store's former name ("the oracle
# stash", issue 37 renamed it so that "stash" names only the catalog's store):
# renaming them would orphan every existing database's epochs and uppers. The
# backend-statistics kinds (`stash.open`, `stash.confirm_leadership`, …) and the
# `stash.txn` latency of the profiles keep it too, as names recorded in run
# directories and latency profiles.
_EPOCH_TABLE: Final = """
CREATE TABLE IF NOT EXISTS oracle_stash_epoch (
    stash text NOT NULL,
    epoch bigint NOT NULL,
    PRIMARY KEY (stash)
)"""

_UPPER_TABLE: Final = """
CREATE TABLE IF NOT EXISTS oracle_stash_upper (
    stash text NOT NULL,
    timeline text NOT NULL,
    upper bigint NOT NULL,
    PRIMARY KEY (stash, timeline)
)"""

# One statement, so the bump is atomic; the row lock orders it against the
# transactions below.
_BUMP: Final = """
INSERT INTO oracle_stash_epoch (stash, epoch) VALUES ($1, 1)
ON CONFLICT (stash) DO UPDATE SET epoch = oracle_stash_epoch.epoch + 1
RETURNING epoch"""

_LOCK_EPOCH: Final = "SELECT epoch FROM oracle_stash_epoch WHERE stash = $1 FOR UPDATE"

_READ_UPPER: Final = "SELECT upper FROM oracle_stash_upper WHERE stash = $1 AND timeline = $2"

_WRITE_UPPER: Final = """
INSERT INTO oracle_stash_upper (stash, timeline, upper) VALUES ($1, $2, $3)
ON CONFLICT (stash, timeline)
DO UPDATE SET upper = GREATEST(oracle_stash_upper.upper, excluded.upper)"""


@final
class PostgresTimestampStore(TimestampStore):
    """The store named `name` in a Postgres/CockroachDB database.

    Open with `PostgresTimestampStore.connect(url, rt, name=…)` (owns its client) or
    `on(client, name)` (shares one, e.g. with Postgres oracles).
    """

    def __init__(self, client: PostgresClient, name: str, *, owns_client: bool) -> None:
        """Use `open` or `on`."""
        if not isinstance(name, str) or not name or len(name) > 256:
            raise InvalidUsage(f"invalid store name {name!r}: a non-empty str of <= 256 chars")
        self._client = client
        self._name = name
        self._owns_client = owns_client
        #: Failed transactions that were retried (the store's share of
        #: `ts_oracle_retry_count`; the oracles sharing it do not see them).
        self.retry_count = 0

    @classmethod
    async def connect(
        cls,
        url: str,
        rt: Runtime,
        *,
        name: str = "default",
        pool_size: int = 2,
        application_name: str = "coordsim-oracle-timestamp-store",
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> PostgresTimestampStore:
        """Connects to `url` and creates the store tables if they are missing."""
        client = await PostgresClient.connect(
            url, rt, pool_size=pool_size, application_name=application_name, retry=retry
        )
        store = cls(client, name, owns_client=True)
        try:
            await store._create_tables()
        except BaseException:
            await client.close()
            raise
        return store

    @classmethod
    async def on(cls, client: PostgresClient, name: str = "default") -> PostgresTimestampStore:
        """The store `name` on a shared client (not closed with the store)."""
        store = cls(client, name, owns_client=False)
        await store._create_tables()
        return store

    async def _create_tables(self) -> None:
        await self._client.create_table(_EPOCH_TABLE)
        await self._client.create_table(_UPPER_TABLE)

    async def close(self) -> None:
        if self._owns_client:
            await self._client.close()

    @property
    def client(self) -> PostgresClient:
        return self._client

    def __repr__(self) -> str:
        return f"PostgresTimestampStore({self._name!r} at {self._client.where})"

    # --- the TimestampStore interface

    async def open(self) -> int:
        async def bump(conn: Conn) -> int:
            epoch: int = await conn.fetchval(_BUMP, self._name)
            return epoch

        return await self._run(f"store {self._name!r}: open", bump, write=True, kind="stash.open")

    async def read_upper(self, timeline: str) -> int | None:
        check_timeline(timeline)

        async def read(conn: Conn) -> int | None:
            upper: int | None = await conn.fetchval(_READ_UPPER, self._name, timeline)
            return upper

        return await self._run(
            f"store {self._name!r}: read_upper({timeline!r})", read, write=False, kind="stash.read_upper"
        )

    async def write_upper(self, timeline: str, upper: int, epoch: int) -> None:
        check_timeline(timeline)
        check_upper(upper)
        check_epoch(epoch)

        async def write(conn: Conn) -> None:
            async with conn.transaction(isolation=self._client.isolation.asyncpg):
                self._check(await conn.fetchval(_LOCK_EPOCH, self._name), epoch)
                await conn.execute(_WRITE_UPPER, self._name, timeline, upper)

        await self._run(
            f"store {self._name!r}: write_upper({timeline!r}, {upper})", write, write=True,
            kind="stash.write_upper",
        )

    async def confirm_leadership(self, epoch: int) -> None:
        check_epoch(epoch)

        async def confirm(conn: Conn) -> None:
            async with conn.transaction(isolation=self._client.isolation.asyncpg):
                self._check(await conn.fetchval(_LOCK_EPOCH, self._name), epoch)

        await self._run(
            f"store {self._name!r}: confirm_leadership", confirm, write=True, kind="stash.confirm_leadership"
        )

    async def _run(self, what: str, call: Callable[[Conn], Awaitable[T]], *, write: bool, kind: str) -> T:
        def count(_exc: Exception) -> None:
            self.retry_count += 1

        return await self._client.run(what, call, write=write, on_retry=count, kind=kind)

    def _check(self, current: int | None, epoch: int) -> None:
        if current != epoch:
            raise Fenced(
                f"store {self._name!r}: epoch is {current}, this process opened epoch {epoch}"
            )
