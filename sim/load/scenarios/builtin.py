"""The shipped scenario programs: seed 001's three steps (and its index
variant), concurrent DDL + DML + reads (also the body of the crash-restart
and split-brain runs, whose faults the nemesis adds), busy batched reads, and
two that issue 21's known-bad matrix needed: racing UPDATEs and reads that
outlive the compaction window.

Each is an `async def program(sim)` against `sim.load.driver.Sim`, like a
user's scenario file: `coordsim run <name>` and `coordsim compare -w <name>`
run them as they are, `coordsim anomalies run <name>` under a nemesis.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

import anyio

if TYPE_CHECKING:
    from sim.load.driver import Client, Sim

__all__ = ["PROGRAMS", "Program"]

#: A scenario program: drives its `Sim` to the end of the scenario.
Program = Callable[["Sim"], Awaitable[None]]


async def _seed001(sim: Sim, *, index: bool) -> None:
    """Seed 001's c1 CREATE TABLE foo; c2 INSERT INTO foo; c1 SELECT * FROM foo —
    each step starting after the previous one returned (the side channel) —
    for `size` rounds, by `clients // 2` pairs at once."""
    clients = sim.clients(max(2, sim.n_clients + sim.n_clients % 2))

    async def pair(p: int, c1: Client, c2: Client) -> None:
        for n in range(sim.size):
            t = f"foo_{p}_{n}"
            await c1.execute(f"CREATE TABLE {t} (a int)")
            if index:
                await c1.execute(f"CREATE INDEX {t}_idx ON {t} (a)")
            await c1.jitter()
            await c2.execute(f"INSERT INTO {t} VALUES ({p * 1000 + n})")
            await c2.jitter()
            await c1.execute(f"SELECT * FROM {t}")

    pairs = [(clients[i], clients[i + 1]) for i in range(0, len(clients) - 1, 2)]
    await sim.concurrently(*(lambda p=p, a=a, b=b: pair(p, a, b) for p, (a, b) in enumerate(pairs)))


async def _seed001_plain(sim: Sim) -> None:
    await _seed001(sim, index=False)


async def _seed001_index(sim: Sim) -> None:
    await _seed001(sim, index=True)


async def _ddl_dml(sim: Sim, *, readers: bool = False) -> None:
    """Each client, `size` times: insert a unique value into or read one of a
    few shared tables, or create / drop / write / read its own table — so
    catalog changes interleave with every peek and write. Tables are dropped
    only by the client that uses them: an INSERT racing a DROP of its table is
    the pinned `test_insert_racing_drop` case (tests/sim/nemesis).

    With `readers`, even-numbered clients only read: after a split they stay
    on the old coordinator (clients spread by index) while the others write
    through the new one — the hazard confirm_leadership guards against."""
    shared = max(2, sim.n_clients // 2)

    async def client(c: Client) -> None:
        own, exists = f"d{c.index}", False
        for i in range(sim.size):
            r = c.rng.random()
            value = c.index * 10_000 + i
            if readers and c.index % 2 == 0:
                await c.execute(f"SELECT * FROM t{c.rng.randrange(shared)}")
            elif r < 0.15:
                await c.execute(f"DROP TABLE {own}" if exists else f"CREATE TABLE {own} (a int)")
                exists = not exists
            elif r < 0.25:
                await c.execute(
                    f"INSERT INTO {own} VALUES ({value})" if exists else f"SELECT * FROM {own}"
                )
            elif r < 0.6:
                await c.execute(f"INSERT INTO t{c.rng.randrange(shared)} VALUES ({value})")
            else:
                await c.execute(f"SELECT * FROM t{c.rng.randrange(shared)}")
            await c.jitter()

    setup = sim.client(sim.n_clients)
    for k in range(shared):
        await setup.execute(f"CREATE TABLE t{k} (a int)")
    await sim.concurrently(*(lambda c=c: client(c) for c in sim.clients()))


async def _split_brain(sim: Sim) -> None:
    await _ddl_dml(sim, readers=True)


#: read-after-ack's side channel: how long after the insert's acknowledgement
#: the read starts. Any positive time will do; without one, the ack and the
#: read's invocation fall on the same virtual instant, and a history cannot
#: say which came first, so no checker may call a read that missed the insert
#: stale.
SIDE_CHANNEL_S: Final = 1e-6


async def _busy_reads(sim: Sim, *, gap: float = 0.0) -> None:
    """Unrecorded background readers keep the read_ts batcher busy; one client
    inserts n and, once acknowledged (`gap` seconds later), another reads the
    table."""
    writer, reader, setup = sim.client(0), sim.client(1), sim.client(2)
    await setup.execute("CREATE TABLE t (a int)")
    done = anyio.Event()

    async def background(k: int) -> None:
        while not done.is_set():
            coord = sim.dep.newest
            if coord is None:
                await sim.dep.wait_changed()
                continue
            await coord.connect().execute("SELECT count(*) FROM t")

    async def main() -> None:
        for n in range(sim.size):
            await writer.jitter()
            await writer.execute(f"INSERT INTO t VALUES ({n})")
            if gap > 0:
                await sim.wait(gap)
            await reader.execute("SELECT * FROM t")
        done.set()

    await sim.concurrently(main, *(lambda k=k: background(k) for k in range(max(0, sim.n_clients - 2))))


async def _read_after_ack(sim: Sim) -> None:
    """busy-reads with a side channel that takes time (`SIDE_CHANNEL_S`): real
    time orders each read after the insert it follows, so a read that misses
    it is a stale read any checker can name (issue 21's
    `coordinator_joins_read_ts`: the read joins a read_ts call whose answer
    was chosen before the insert's apply_write)."""
    await _busy_reads(sim, gap=SIDE_CHANNEL_S)


async def _update_race(sim: Sim) -> None:
    """Read-then-writes that overlap: every client, `size` times, adds one to
    the one row of a shared counter table (`UPDATE c SET a = a + 1`) or reads
    it. The global write lock is what serializes the updates; without it two
    read the same row and both retract it (issue 21's `no_write_lock`)."""
    setup = sim.client(sim.n_clients)
    await setup.execute("CREATE TABLE c (a int)")
    await setup.execute("INSERT INTO c VALUES (0)")

    async def client(c: Client) -> None:
        for _ in range(sim.size):
            if c.rng.random() < 0.6:
                await c.execute("UPDATE c SET a = a + 1")
            else:
                await c.execute("SELECT * FROM c")
            await c.jitter()

    await sim.concurrently(*(lambda c=c: client(c) for c in sim.clients()))


async def _slow_reads(sim: Sim) -> None:
    """Reads that outlive the compaction window: one client inserts a value
    every few milliseconds while the others read the table, for `size` rounds
    spread over about 3 s of simulated time; the scenario's fault slows the
    replicas so a peek stays in flight past `upper - compaction_window`, the
    case a read hold exists for (issue 21's `peeks_skip_read_holds`)."""
    setup = sim.client(sim.n_clients)
    await setup.execute("CREATE TABLE t (a int)")
    writer, *readers = sim.clients(max(2, sim.n_clients))
    gap = 3.0 / max(1, sim.size)

    async def write() -> None:
        for n in range(sim.size):
            await writer.execute(f"INSERT INTO t VALUES ({n})")
            await sim.wait(gap)

    async def read(c: Client) -> None:
        for _ in range(sim.size):
            await c.execute("SELECT * FROM t")
            await sim.wait(gap * c.rng.uniform(0.5, 1.5))

    await sim.concurrently(write, *(lambda c=c: read(c) for c in readers))


PROGRAMS: Final[dict[str, Program]] = {
    "seed001": _seed001_plain,
    "seed001-index": _seed001_index,
    "ddl-dml": _ddl_dml,
    "split-brain": _split_brain,
    "busy-reads": _busy_reads,
    "read-after-ack": _read_after_ack,
    "update-race": _update_race,
    "slow-reads": _slow_reads,
}
