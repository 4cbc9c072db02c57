"""The distributed oracle of seed 000 for virtual-time runs: the same one-row-per-
timeline state and the same four statements' semantics, with each statement's
round trip taken from the Runtime's latency model instead of a real database.

Virtual mode may not do real I/O, yet `coordsim compare --mode virtual` must
still show what a CockroachDB round trip per oracle call costs; `coordsim
calibrate` measures those latencies against the real Postgres oracle. The
shared `ModeledOracleRows` plays the database: every oracle opened on it (by
any number of simulated coordinators) sees one linearizable row per timeline,
read or updated atomically halfway through its call's modeled round trip (the
request's trip to the server, then the reply's way back), so the guarantees of
`TimestampOracle` hold exactly as they do on Postgres — and so does the hazard
of a result computed before a concurrent call completed.

Latency names: `oracle.pg.write_ts`, `oracle.pg.peek_write_ts`,
`oracle.pg.read_ts`, `oracle.pg.apply_write` (each falls back to `oracle.pg`,
then `oracle`, then the model's default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, final

from oracle.api import TimestampOracle, WriteTimestamp, check_timeline, check_timestamp
from oracle.metrics import OracleMetrics, OracleStatistics
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Callable

    from sim.runtime.core import Runtime

T = TypeVar("T")

__all__ = ["ModeledOracle", "ModeledOracleRows"]


@dataclass
class _Row:
    read_ts: int = 0
    write_ts: int = 0


@final
class ModeledOracleRows:
    """The `timestamp_oracle` table, in memory: one row per timeline, shared."""

    def __init__(self) -> None:
        self._rows: dict[str, _Row] = {}
        self.statements = 0

    def row(self, timeline: str) -> _Row:
        """The row of `timeline` (`INSERT … ON CONFLICT DO NOTHING` at 0)."""
        return self._rows.setdefault(timeline, _Row())


@final
class ModeledOracle(TimestampOracle):
    """One timeline's oracle over `ModeledOracleRows` with modeled round trips."""

    def __init__(
        self, rows: ModeledOracleRows, timeline: str, rt: Runtime, *, unguarded_clock: bool = False
    ) -> None:
        """`unguarded_clock`: known-bad variant (issue 38), `write_ts` without
        `GREATEST` (see `PostgresOracle`'s `_WRITE_TS_UNGUARDED`)."""
        check_timeline(timeline)
        self._rows = rows
        self._timeline = timeline
        self._rt = rt
        self._metrics = OracleMetrics(rt, timeline=timeline, implementation="modeled-postgres")
        self._closed = False
        self._unguarded_clock = unguarded_clock
        rows.row(timeline)

    @property
    def timeline(self) -> str:
        return self._timeline

    def __repr__(self) -> str:
        return f"ModeledOracle({self._timeline!r})"

    async def _statement(self, op: str, apply: Callable[[_Row], T]) -> T:
        """One modeled round trip (a sample of the latency `oracle.pg.<op>`,
        half each way); `apply` runs atomically at the server in between."""
        if self._closed:
            raise InvalidUsage(f"oracle {self._timeline!r} is closed")
        # The two directions vary independently, as network and queueing do.
        await self._rt.sleep(self._rt.sample(f"oracle.pg.{op}") / 2)
        self._rows.statements += 1
        result = apply(self._rows.row(self._timeline))
        await self._rt.sleep(self._rt.sample(f"oracle.pg.{op}") / 2)
        return result

    async def write_ts(self) -> WriteTimestamp:
        def allocate(row: _Row) -> WriteTimestamp:
            # UPDATE … SET write_ts = GREATEST(write_ts + 1, $wall) RETURNING write_ts
            wall = self._rt.wall_ms()
            if self._unguarded_clock:  # … SET write_ts = CASE WHEN $wall = write_ts THEN … ELSE $wall END
                row.write_ts = row.write_ts + 1 if wall == row.write_ts else wall
            else:
                row.write_ts = max(row.write_ts + 1, wall)
            return WriteTimestamp.at(row.write_ts)

        return await self._metrics.observe("write_ts", lambda: self._statement("write_ts", allocate))

    async def peek_write_ts(self) -> int:
        return await self._metrics.observe(
            "peek_write_ts", lambda: self._statement("peek_write_ts", lambda row: row.write_ts)
        )

    async def read_ts(self) -> int:
        return await self._metrics.observe(
            "read_ts", lambda: self._statement("read_ts", lambda row: row.read_ts)
        )

    async def apply_write(self, ts: int) -> None:
        check_timestamp(ts)

        def apply(row: _Row) -> None:
            # UPDATE … SET write_ts = GREATEST(write_ts, $ts), read_ts = GREATEST(read_ts, $ts)
            row.write_ts = max(row.write_ts, ts)
            row.read_ts = max(row.read_ts, ts)

        await self._metrics.observe("apply_write", lambda: self._statement("apply_write", apply))

    async def advance(self, *, read_ts: int, write_ts: int) -> None:
        """Fast-forwards the row (`oracle.switching.Advancing`), one statement:
        `UPDATE … SET write_ts = GREATEST(write_ts, $w, $r), read_ts = GREATEST(read_ts, $r)`."""
        check_timestamp(read_ts, "advance read_ts")
        check_timestamp(write_ts, "advance write_ts")

        def forward(row: _Row) -> None:
            row.write_ts = max(row.write_ts, write_ts, read_ts)
            row.read_ts = max(row.read_ts, read_ts)

        # The same single-row UPDATE as apply_write's, so its measured latency
        # (`coordsim calibrate` has no separate figure for a rare statement).
        await self._metrics.observe("advance", lambda: self._statement("apply_write", forward))

    def statistics(self) -> OracleStatistics:
        return OracleStatistics("modeled-postgres", self._timeline, self._metrics.snapshot())

    async def close(self) -> None:
        self._closed = True
