"""Seed 001's three anomalies: c1 creates a table, c2 inserts into it, c1 reads
it, each starting only after the previous one returned. Any of "INSERT: unknown
table", "SELECT: unknown table" or a SELECT missing the insert is an anomaly
(`insert-unknown-table`, `select-unknown-table`, `stale-read`); the checker
judges the recorded history, the `expect`s say what went wrong in words."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.load.scenarios import Sim


async def scenario(sim: Sim) -> None:
    c1, c2 = sim.session("c1"), sim.session("c2")
    for n in range(20):
        r = await sim.sql(c1, f"CREATE TABLE foo{n} (a int)")
        sim.expect(r.ok, f"CREATE TABLE foo{n} failed: {r.error}")
        r = await sim.sql(c2, f"INSERT INTO foo{n} VALUES ({n})")
        sim.expect(r.ok, f"insert-unknown-table: INSERT INTO foo{n} failed: {r.error}")
        r = await sim.sql(c1, f"SELECT * FROM foo{n}")
        sim.expect(r.ok, f"select-unknown-table: SELECT * FROM foo{n} failed: {r.error}")
        if r.ok:
            sim.expect(r.rows == ((n,),), f"stale-read: SELECT * FROM foo{n} returned {r.rows}")
