"""The catalog stash in Postgres/CockroachDB (asyncpg): three tables shared by every
environment, one namespace (`env`) per catalog.

Every statement is valid CockroachDB SQL. Writes lock the environment's meta row
(`SELECT … FOR UPDATE`) first, so they serialize with each other and with the
epoch bump of a newer opener (which is itself such a write); under SERIALIZABLE
(the client's default, as CockroachDB) the loser may get 40001 instead, and
`PostgresClient.run` retries it. A retried append is recognised by its token, so
a retry after an ambiguous commit does not apply twice. Every transaction names
the client's level; the multi-statement reads need one snapshot, which
SERIALIZABLE gives (under read committed they keep REPEATABLE READ).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import anyio

from catalog.api import Appended, Conflict
from catalog.objects import CatalogState, CatalogUpdate
from catalog.stash_catalog import EPOCH_KEY, StashStore, epoch_of, fenced
from sim.runtime.errors import InvalidUsage
from sim.runtime.pgclient import DEFAULT_RETRY, PostgresClient

if TYPE_CHECKING:
    from collections.abc import Sequence

    from catalog.api import AppendResult
    from sim.runtime.core import Runtime
    from sim.runtime.pgclient import Conn
    from sim.runtime.retry import RetryPolicy

__all__ = ["PostgresStashStore"]

_TABLES: Final = (
    """CREATE TABLE IF NOT EXISTS catalog_stash_meta (
    env text NOT NULL,
    upper bigint NOT NULL,
    since bigint NOT NULL,
    token text NOT NULL,
    PRIMARY KEY (env)
)""",
    """CREATE TABLE IF NOT EXISTS catalog_stash_objects (
    env text NOT NULL,
    kind text NOT NULL,
    key text NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (env, kind, key)
)""",
    """CREATE TABLE IF NOT EXISTS catalog_stash_log (
    env text NOT NULL,
    ts bigint NOT NULL,
    seq integer NOT NULL,
    kind text NOT NULL,
    key text NOT NULL,
    value text NOT NULL,
    diff bigint NOT NULL,
    PRIMARY KEY (env, ts, seq)
)""",
    """CREATE TABLE IF NOT EXISTS catalog_stash_writers (
    env text NOT NULL,
    writer text NOT NULL,
    token text NOT NULL,
    upper bigint NOT NULL,
    PRIMARY KEY (env, writer)
)""",
)

_INIT_META: Final = """
INSERT INTO catalog_stash_meta (env, upper, since, token) VALUES ($1, 0, 0, '')
ON CONFLICT (env) DO NOTHING"""
_META: Final = "SELECT upper, since, token FROM catalog_stash_meta WHERE env = $1"
_LOCK_META: Final = "SELECT upper, since, token FROM catalog_stash_meta WHERE env = $1 FOR UPDATE"
_EPOCH: Final = "SELECT value FROM catalog_stash_objects WHERE env = $1 AND kind = 'config' AND key = $2"
_OBJECTS: Final = "SELECT kind, key, value FROM catalog_stash_objects WHERE env = $1"
_DELETE: Final = "DELETE FROM catalog_stash_objects WHERE env = $1 AND kind = $2 AND key = $3"
_UPSERT: Final = """
INSERT INTO catalog_stash_objects (env, kind, key, value) VALUES ($1, $2, $3, $4)
ON CONFLICT (env, kind, key) DO UPDATE SET value = excluded.value"""
_LOG: Final = """
INSERT INTO catalog_stash_log (env, ts, seq, kind, key, value, diff)
VALUES ($1, $2, $3, $4, $5, $6, $7)"""
_SET_UPPER: Final = "UPDATE catalog_stash_meta SET upper = $2, token = $3 WHERE env = $1"
_WRITER: Final = "SELECT token, upper FROM catalog_stash_writers WHERE env = $1 AND writer = $2"
_SET_WRITER: Final = """
INSERT INTO catalog_stash_writers (env, writer, token, upper) VALUES ($1, $2, $3, $4)
ON CONFLICT (env, writer) DO UPDATE SET token = excluded.token, upper = excluded.upper"""
_READ_LOG: Final = """
SELECT ts, kind, key, value, diff FROM catalog_stash_log
WHERE env = $1 AND ts >= $2 AND ts < $3 ORDER BY ts, seq"""
_CONSOLIDATED: Final = """
SELECT kind, key, value, CAST(sum(diff) AS bigint) AS n FROM catalog_stash_log
WHERE env = $1 AND ts <= $2 GROUP BY kind, key, value HAVING sum(diff) <> 0
ORDER BY kind, key"""
_TRIM: Final = "DELETE FROM catalog_stash_log WHERE env = $1 AND ts <= $2"
_SET_SINCE: Final = "UPDATE catalog_stash_meta SET since = $2 WHERE env = $1"


def _state(rows: Sequence[object]) -> CatalogState:
    state = CatalogState()
    for r in rows:
        kind, key, value, n = r[0], r[1], r[2], r[3]  # type: ignore[index]
        if n != 1:
            raise InvalidUsage(f"stash log holds {kind} {key} with multiplicity {n}")
        state.entries[(kind, key)] = value
    return state


@final
class PostgresStashStore(StashStore):
    """The stash tables of environment `env` in one Postgres/CockroachDB database.

    Open with `connect` (owns its client) or `on` (shares one). Writes by this
    object wake its local waiters at once; other processes' writes are seen
    within `poll_interval_s`.
    """

    def __init__(self, client: PostgresClient, env: str, *, owns_client: bool, poll_interval_s: float) -> None:
        """Use `connect` or `on`."""
        if not isinstance(env, str) or not env or len(env) > 256:
            raise InvalidUsage(f"invalid stash environment {env!r}: a non-empty str of <= 256 chars")
        self._client = client
        self.env = env
        self._owns_client = owns_client
        self._poll_s = poll_interval_s
        self._changed = anyio.Event()

    @classmethod
    async def connect(
        cls, url: str, rt: Runtime, *, env: str = "default", pool_size: int = 4,
        poll_interval_s: float = 0.05, retry: RetryPolicy = DEFAULT_RETRY,
    ) -> PostgresStashStore:
        """Connects to `url` and creates the tables and the environment if missing."""
        client = await PostgresClient.connect(
            url, rt, pool_size=pool_size, application_name="coordsim-catalog-stash", retry=retry
        )
        try:
            return await cls.on(client, env, poll_interval_s=poll_interval_s, owns_client=True)
        except BaseException:
            await client.close()
            raise

    @classmethod
    async def on(
        cls, client: PostgresClient, env: str = "default", *, poll_interval_s: float = 0.05,
        owns_client: bool = False,
    ) -> PostgresStashStore:
        store = cls(client, env, owns_client=owns_client, poll_interval_s=poll_interval_s)
        for ddl in _TABLES:
            await client.create_table(ddl)

        async def init(conn: Conn) -> None:
            await conn.execute(_INIT_META, env)

        await client.run(f"catalog stash {env!r}: create", init, write=True, kind="setup")
        return store

    async def close(self) -> None:
        if self._owns_client:
            await self._client.close()

    def __repr__(self) -> str:
        return f"PostgresStashStore({self.env!r} at {self._client.where})"

    def _what(self, op: str) -> str:
        return f"catalog stash {self.env!r}: {op}"

    async def read_meta(self) -> tuple[int, int]:
        async def read(conn: Conn) -> tuple[int, int]:
            row = await conn.fetchrow(_META, self.env)
            assert row is not None
            return int(row[0]), int(row[1])

        return await self._client.run(self._what("read meta"), read, write=False, kind="catalog.stash.read_meta")

    async def read_state(self) -> tuple[int, CatalogState]:
        async def read(conn: Conn) -> tuple[int, CatalogState]:
            async with conn.transaction(isolation=self._client.isolation.snapshot, readonly=True):
                row = await conn.fetchrow(_META, self.env)
                assert row is not None
                rows = await conn.fetch(_OBJECTS, self.env)
            state = CatalogState()
            for r in rows:
                state.entries[(r[0], r[1])] = r[2]
            return int(row[0]), state

        return await self._client.run(self._what("read state"), read, write=False, kind="catalog.stash.read_state")

    async def read_log(self, lo: int) -> tuple[int, list[CatalogUpdate]] | None:
        async def read(conn: Conn) -> tuple[int, list[CatalogUpdate]] | None:
            async with conn.transaction(isolation=self._client.isolation.snapshot, readonly=True):
                row = await conn.fetchrow(_META, self.env)
                assert row is not None
                upper, since = int(row[0]), int(row[1])
                if lo - 1 < since:
                    return None
                rows = await conn.fetch(_READ_LOG, self.env, lo, upper)
            return upper, [CatalogUpdate(r[1], r[2], r[3], int(r[0]), int(r[4])) for r in rows]

        return await self._client.run(
            self._what(f"read log from {lo}"), read, write=False, kind="catalog.stash.read_log"
        )

    async def snapshot(self, ts: int) -> CatalogState | None:
        async def read(conn: Conn) -> CatalogState | None:
            async with conn.transaction(isolation=self._client.isolation.snapshot, readonly=True):
                row = await conn.fetchrow(_META, self.env)
                assert row is not None
                if ts < int(row[1]):
                    return None
                rows = await conn.fetch(_CONSOLIDATED, self.env, ts)
            return _state(rows)

        return await self._client.run(
            self._what(f"snapshot at {ts}"), read, write=False, kind="catalog.stash.snapshot"
        )

    async def append(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate],
        epoch: int | None, writer: str, token: str,
    ) -> AppendResult:
        final: dict[tuple[str, str], str | None] = {}
        for u in sorted(updates, key=lambda u: (u.ts, u.diff)):
            final[(u.kind, u.key)] = u.value if u.diff == 1 else None
        deletes = [(self.env, k, key) for (k, key), v in sorted(final.items()) if v is None]
        upserts = [(self.env, k, key, v) for (k, key), v in sorted(final.items()) if v is not None]
        log = [
            (self.env, u.ts, seq, u.kind, u.key, u.value, u.diff)
            for seq, u in enumerate(sorted(updates, key=lambda u: (u.ts, u.diff, u.kind, u.key)))
        ]

        async def write(conn: Conn) -> AppendResult:
            async with conn.transaction(isolation=self._client.isolation.asyncpg):
                row = await conn.fetchrow(_LOCK_META, self.env)
                assert row is not None
                upper = int(row[0])
                mine = await conn.fetchrow(_WRITER, self.env, writer)
                if mine is not None and mine[0] == token:
                    return Appended(int(mine[1]))  # our own earlier attempt committed
                if epoch is not None:
                    current = epoch_of(await conn.fetchval(_EPOCH, self.env, EPOCH_KEY))
                    if current != epoch:
                        raise fenced(current, epoch)
                if upper != expected_upper:
                    return Conflict(upper)
                if deletes:
                    await conn.executemany(_DELETE, deletes)
                if upserts:
                    await conn.executemany(_UPSERT, upserts)
                if log:
                    await conn.executemany(_LOG, log)
                await conn.execute(_SET_UPPER, self.env, new_upper, token)
                await conn.execute(_SET_WRITER, self.env, writer, token, new_upper)
            return Appended(new_upper)

        result = await self._client.run(
            self._what(f"append at {expected_upper}"), write, write=True, kind="catalog.stash.append"
        )
        if isinstance(result, Appended):
            self._changed.set()
            self._changed = anyio.Event()
        return result

    async def confirm(self, epoch: int) -> None:
        async def confirm(conn: Conn) -> None:
            async with conn.transaction(isolation=self._client.isolation.asyncpg):
                await conn.fetchrow(_LOCK_META, self.env)
                current = epoch_of(await conn.fetchval(_EPOCH, self.env, EPOCH_KEY))
                if current != epoch:
                    raise fenced(current, epoch)

        await self._client.run(
            self._what("confirm leadership"), confirm, write=True, kind="catalog.stash.confirm_leadership"
        )

    async def compact(self, since: int) -> None:
        async def compact(conn: Conn) -> None:
            async with conn.transaction(isolation=self._client.isolation.asyncpg):
                row = await conn.fetchrow(_LOCK_META, self.env)
                assert row is not None
                if since <= int(row[1]):
                    return
                state = _state(await conn.fetch(_CONSOLIDATED, self.env, since))
                await conn.execute(_TRIM, self.env, since)
                rows = [
                    (self.env, since, seq, u.kind, u.key, u.value, 1)
                    for seq, u in enumerate(state.as_updates(since))
                ]
                if rows:
                    await conn.executemany(_LOG, rows)
                await conn.execute(_SET_SINCE, self.env, since)

        await self._client.run(
            self._what(f"compact to {since}"), compact, write=True, kind="catalog.stash.compact"
        )

    async def wait_for_change(self, upper: int) -> None:
        event = self._changed
        with anyio.move_on_after(self._poll_s):
            await event.wait()
