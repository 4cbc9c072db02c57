"""The distributed oracle of seed 000 for virtual-time runs: the same one-row-per-
timeline state and the same four statements' semantics, with each statement's
round trip taken from the Runtime's latency model instead of a real database.

Virtual mode may not do real I/O, yet `coordsim compare --mode virtual` must
still show what a CockroachDB round trip per oracle call costs; `coordsim
calibrate` measures those latencies against the real Postgres oracle. The
shared `ModeledOracleRows` plays the database: every oracle opened on it (by
any number of simulated coordinators) sees one linearizable row per timeline,
updated atomically at the end of its call's modeled latency (the instant the
statement commits), so the guarantees of `TimestampOracle` hold exactly as they
do on Postgres.

Latency names: `oracle.pg.write_ts`, `oracle.pg.peek_write_ts`,
`oracle.pg.read_ts`, `oracle.pg.apply_write` (each falls back to `oracle.pg`,
then `oracle`, then the model's default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, final

from oracle.api import TimestampOracle, WriteTimestamp, check_timeline, check_timestamp
from oracle.metrics import OracleMetrics, OracleStatistics
from persist.location import InvalidUsage

if TYPE_CHECKING:
    from sim.runtime import Runtime

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

    def __init__(self, rows: ModeledOracleRows, timeline: str, rt: Runtime) -> None:
        check_timeline(timeline)
        self._rows = rows
        self._timeline = timeline
        self._rt = rt
        self._metrics = OracleMetrics(rt)
        self._closed = False
        rows.row(timeline)

    @property
    def timeline(self) -> str:
        return self._timeline

    def __repr__(self) -> str:
        return f"ModeledOracle({self._timeline!r})"

    async def _statement(self, op: str) -> _Row:
        """Waits one modeled round trip; returns the row to update atomically
        (no await between this return and the caller's update)."""
        if self._closed:
            raise InvalidUsage(f"oracle {self._timeline!r} is closed")
        await self._rt.delay(f"oracle.pg.{op}")
        self._rows.statements += 1
        return self._rows.row(self._timeline)

    async def write_ts(self) -> WriteTimestamp:
        async def go() -> WriteTimestamp:
            row = await self._statement("write_ts")
            # UPDATE … SET write_ts = GREATEST(write_ts + 1, $wall) RETURNING write_ts
            row.write_ts = max(row.write_ts + 1, self._rt.wall_ms())
            return WriteTimestamp.at(row.write_ts)

        return await self._metrics.observe("write_ts", go)

    async def peek_write_ts(self) -> int:
        async def go() -> int:
            return (await self._statement("peek_write_ts")).write_ts

        return await self._metrics.observe("peek_write_ts", go)

    async def read_ts(self) -> int:
        async def go() -> int:
            return (await self._statement("read_ts")).read_ts

        return await self._metrics.observe("read_ts", go)

    async def apply_write(self, ts: int) -> None:
        check_timestamp(ts)

        async def go() -> None:
            row = await self._statement("apply_write")
            # UPDATE … SET write_ts = GREATEST(write_ts, $ts), read_ts = GREATEST(read_ts, $ts)
            row.write_ts = max(row.write_ts, ts)
            row.read_ts = max(row.read_ts, ts)

        await self._metrics.observe("apply_write", go)

    def statistics(self) -> OracleStatistics:
        return OracleStatistics("modeled-postgres", self._timeline, self._metrics.snapshot())

    async def close(self) -> None:
        self._closed = True
