"""Seed 001's anomalies under concurrency and a fault: several client pairs run
CREATE → INSERT → SELECT chains at once, and the coordinator restarts halfway.
Operations cut by the restart are indeterminate (`info`); the checker still
finds any unknown-table or stale read among the rest."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.load.scenarios import Sim


async def scenario(sim: Sim) -> None:
    pairs = [(sim.session(f"a{i}"), sim.session(f"b{i}")) for i in range(4)]

    async def chain(i: int, rounds: range) -> None:
        a, b = pairs[i]
        for n in rounds:
            t = f"p{i}_{n}"
            if not (await sim.sql(a, f"CREATE TABLE {t} (a int)")).ok:
                continue
            if not (await sim.sql(b, f"INSERT INTO {t} VALUES ({n})")).ok:
                continue
            r = await sim.sql(a, f"SELECT * FROM {t}")
            sim.expect(r.ok and r.rows == ((n,),), f"{t}: SELECT returned {r.rows} / {r.error}")

    await sim.concurrently(*(lambda i=i: chain(i, range(5)) for i in range(4)))
    await sim.restart()
    await sim.concurrently(*(lambda i=i: chain(i, range(5, 10)) for i in range(4)))
