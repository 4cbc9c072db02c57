"""The distributed timestamp oracle of seed 000: one row per timeline in
Postgres/CockroachDB, every operation one single-row statement.

Linearizability is outsourced to the database: each statement is its own
(implicit) transaction on one row, so there is no in-process state to lose and
no `confirm_leadership()` to do — any number of processes may share a row. All
statements are valid CockroachDB SQL and take its 1-phase-commit fast path.

Every statement is idempotent to retry (`GREATEST` is; a retried allocation only
skips a timestamp), so 40001, dropped connections and 57P01 are retried with
backoff by `PostgresClient.run` and counted as `ts_oracle_retry_count`. The
client runs them at SERIALIZABLE by default, as CockroachDB would: two
`write_ts` on one row then conflict with 40001 instead of queueing on its lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import asyncpg

from oracle.api import (
    MAX_TIMESTAMP,
    TimestampOracle,
    WriteTimestamp,
    check_timeline,
    check_timestamp,
)
from oracle.metrics import OracleMetrics, OracleStatistics
from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.pgclient import DEFAULT_RETRY, PostgresClient

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sim.runtime.core import Runtime
    from sim.runtime.pgclient import Conn
    from sim.runtime.retry import RetryPolicy

__all__ = ["PostgresOracle"]

# The seed's table, verbatim.
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS timestamp_oracle (
    timeline text NOT NULL,
    read_ts bigint NOT NULL,
    write_ts bigint NOT NULL,
    PRIMARY KEY(timeline)
)"""

# Initialisation: the first opener of a timeline creates its row; later ones
# (and racing ones) leave it alone.
_INIT: Final = """
INSERT INTO timestamp_oracle (timeline, read_ts, write_ts) VALUES ($1, $2, $2)
ON CONFLICT (timeline) DO NOTHING"""

# allocate_write_ts(timeline, wall_clock_ts)
_WRITE_TS: Final = """
UPDATE timestamp_oracle SET write_ts = GREATEST(write_ts + 1, $2)
WHERE timeline = $1
RETURNING write_ts"""

# Known-bad variant (issue 38): the caller's wall clock without GREATEST's
# floor, bumped only where it would repeat the last timestamp. A clock behind
# the row (stepped back, stalled, or another process's clock ahead) hands out
# timestamps below those already allocated.
_WRITE_TS_UNGUARDED: Final = """
UPDATE timestamp_oracle SET write_ts = CASE WHEN $2 = write_ts THEN write_ts + 1 ELSE $2 END
WHERE timeline = $1
RETURNING write_ts"""

# peek_write_ts(timeline)
_PEEK_WRITE_TS: Final = "SELECT write_ts FROM timestamp_oracle WHERE timeline = $1"

# get_read_ts(timeline)
_READ_TS: Final = "SELECT read_ts FROM timestamp_oracle WHERE timeline = $1"

# apply_write(timeline, write_ts). The seed's text says `read_ts = GREATEST(read_ts,
# write_ts)`; in an UPDATE the right-hand `write_ts` is the row's *old* value, so
# that form (a) leaves read_ts below $2 when $2 > write_ts, breaking "read_ts >=
# every applied write" (the conformance suite's "above write" scenario), and (b)
# when other writers have allocated but not yet applied, raises read_ts to *their*
# timestamp, letting reads happen at a timestamp whose write is still in flight.
# `GREATEST(read_ts, $2)` gives exactly the contract: read_ts >= $2, and never
# beyond a timestamp that has been applied. (Materialize's implementation uses
# this form too.) `seed_literal_apply_write=True` keeps the seed's text as a
# known-bad variant the conformance suite must reject.
_APPLY_WRITE: Final = """
UPDATE timestamp_oracle SET write_ts = GREATEST(write_ts, $2), read_ts = GREATEST(read_ts, $2)
WHERE timeline = $1"""

# A live oracle switch's fast-forward (`oracle.switching`): each column raised
# to at least the old oracle's value, never lowered ($2 write_ts, $3 read_ts).
_ADVANCE: Final = """
UPDATE timestamp_oracle SET write_ts = GREATEST(write_ts, $2, $3), read_ts = GREATEST(read_ts, $3)
WHERE timeline = $1"""

_APPLY_WRITE_SEED_LITERAL: Final = """
UPDATE timestamp_oracle SET write_ts = GREATEST(write_ts, $2), read_ts = GREATEST(read_ts, write_ts)
WHERE timeline = $1"""


@final
class PostgresOracle(TimestampOracle):
    """The oracle of one timeline in the `timestamp_oracle` table.

    Open with `PostgresOracle.open(url, timeline, rt)` (owns its pool) or
    `PostgresOracle.on(client, timeline, rt)` (shares a `PostgresClient`, e.g.
    across the timelines of one process).
    """

    def __init__(
        self,
        client: PostgresClient,
        timeline: str,
        rt: Runtime,
        *,
        owns_client: bool,
        seed_literal_apply_write: bool = False,
        unguarded_clock: bool = False,
    ) -> None:
        """Use `open` or `on`."""
        check_timeline(timeline)
        self._client = client
        self._timeline = timeline
        self._rt = rt
        self._owns_client = owns_client
        self._apply_sql = _APPLY_WRITE_SEED_LITERAL if seed_literal_apply_write else _APPLY_WRITE
        self._write_sql = _WRITE_TS_UNGUARDED if unguarded_clock else _WRITE_TS
        self._metrics = OracleMetrics(rt, timeline=timeline, implementation="postgres")
        self._closed = False

    @classmethod
    async def open(
        cls,
        url: str,
        timeline: str,
        rt: Runtime,
        *,
        pool_size: int = 8,
        application_name: str = "coordsim-oracle",
        statement_timeout_s: float = 10.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        initially: int = 0,
        seed_literal_apply_write: bool = False,
        unguarded_clock: bool = False,
    ) -> PostgresOracle:
        """Connects to `url`, creates the table and the timeline's row if missing.

        Args:
            pool_size: connections in the pool (the most statements in flight).
            application_name: how our sessions show in `pg_stat_activity`.
            retry: backoff and deadline for failed statements.
            initially: read_ts and write_ts of a timeline created by this call.
            seed_literal_apply_write: known-bad variant: the seed's literal
                apply_write statement (see `_APPLY_WRITE`).
            unguarded_clock: known-bad variant: write_ts without `GREATEST`
                (see `_WRITE_TS_UNGUARDED`).

        Raises:
            InvalidUsage: a bad argument or URL.
            ExternalError: the server cannot be reached (one line).
        """
        check_timeline(timeline)
        check_timestamp(initially, "initially")
        client = await PostgresClient.connect(
            url,
            rt,
            pool_size=pool_size,
            application_name=application_name,
            statement_timeout_s=statement_timeout_s,
            retry=retry,
        )
        try:
            return await cls.on(
                client,
                timeline,
                rt,
                initially=initially,
                seed_literal_apply_write=seed_literal_apply_write,
                unguarded_clock=unguarded_clock,
                _owns_client=True,
            )
        except BaseException:
            await client.close()
            raise

    @classmethod
    async def on(
        cls,
        client: PostgresClient,
        timeline: str,
        rt: Runtime,
        *,
        initially: int = 0,
        seed_literal_apply_write: bool = False,
        unguarded_clock: bool = False,
        _owns_client: bool = False,
    ) -> PostgresOracle:
        """The oracle of `timeline` on a shared client (not closed with the oracle).
        `unguarded_clock`: known-bad variant, see `_WRITE_TS_UNGUARDED`."""
        check_timeline(timeline)
        check_timestamp(initially, "initially")
        oracle = cls(
            client,
            timeline,
            rt,
            owns_client=_owns_client,
            seed_literal_apply_write=seed_literal_apply_write,
            unguarded_clock=unguarded_clock,
        )
        await client.create_table(_SCHEMA)

        async def init(conn: Conn) -> None:
            await conn.execute(_INIT, timeline, initially)

        await client.run(f"oracle {timeline!r}: initialise", init, write=True, kind="setup")
        return oracle

    @property
    def timeline(self) -> str:
        return self._timeline

    @property
    def client(self) -> PostgresClient:
        return self._client

    def __repr__(self) -> str:
        return f"PostgresOracle({self._timeline!r} at {self._client.where})"

    # --- the TimestampOracle interface

    async def write_ts(self) -> WriteTimestamp:
        async def allocate(conn: Conn) -> int | None:
            # The wall clock is read per attempt: a retry allocates at its own time.
            try:
                ts: int | None = await conn.fetchval(
                    self._write_sql, self._timeline, self._rt.wall_ms()
                )
            except asyncpg.NumericValueOutOfRangeError as exc:
                # `write_ts + 1` overflowed bigint: no retry can help.
                raise self._exhausted() from exc
            return ts

        ts = await self._run("write_ts", allocate, write=True)
        if ts > MAX_TIMESTAMP:
            raise self._exhausted()
        return WriteTimestamp.at(ts)

    def _exhausted(self) -> InvalidUsage:
        return InvalidUsage(f"timeline {self._timeline!r} has run out of timestamps")

    async def peek_write_ts(self) -> int:
        async def peek(conn: Conn) -> int | None:
            ts: int | None = await conn.fetchval(_PEEK_WRITE_TS, self._timeline)
            return ts

        return await self._run("peek_write_ts", peek, write=False)

    async def read_ts(self) -> int:
        async def read(conn: Conn) -> int | None:
            ts: int | None = await conn.fetchval(_READ_TS, self._timeline)
            return ts

        return await self._run("read_ts", read, write=False)

    async def apply_write(self, ts: int) -> None:
        check_timestamp(ts, "apply_write ts")

        async def apply(conn: Conn) -> int | None:
            status = await conn.execute(self._apply_sql, self._timeline, ts)
            return 0 if status == "UPDATE 1" else None

        await self._run("apply_write", apply, write=True)

    async def advance(self, *, read_ts: int, write_ts: int) -> None:
        """Fast-forwards the row (`oracle.switching.Advancing`, `_ADVANCE`)."""
        check_timestamp(read_ts, "advance read_ts")
        check_timestamp(write_ts, "advance write_ts")

        async def forward(conn: Conn) -> int | None:
            status = await conn.execute(_ADVANCE, self._timeline, write_ts, read_ts)
            return 0 if status == "UPDATE 1" else None

        await self._run("advance", forward, write=True)

    def statistics(self) -> OracleStatistics:
        return OracleStatistics("postgres", self._timeline, self._metrics.snapshot())

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            await self._client.close()

    # --- plumbing

    async def _run(self, op: str, call: Callable[[Conn], Awaitable[int | None]], *, write: bool) -> int:
        if self._closed:
            raise InvalidUsage(f"{self!r} is closed")
        what = f"oracle {self._timeline!r}: {op}"
        metrics = self._metrics
        retries = 0

        def retried(exc: Exception) -> None:
            nonlocal retries
            retries += 1  # a 40001 under SERIALIZABLE contention is one
            metrics.retried(op, exc)

        started = metrics.begin(op)
        try:
            result = await self._client.run(what, call, write=write, on_retry=retried, kind=f"oracle.pg.{op}")
            if result is None:
                # Someone deleted the row: re-creating it could move time backwards.
                raise CoordsimError(f"{what}: the timeline's row is missing from timestamp_oracle")
        except BaseException as exc:
            metrics.failed(started, retries=retries, error=exc)
            raise
        metrics.succeeded(started, retries=retries)
        return result
