"""The workloads `coordsim compare` measures, mirroring the scalability suite of
the seeds' system: peeks of several shapes, inserts, updates, DDL churn, and a
mix where DDL and writers run beside the readers being measured (seed 001's
isolation question).

A workload is a schema `setup`, one measured `op` per client call, and an
optional `background` load that runs while a level is measured (`subscribe`'s
subscribers run there, each SUBSCRIBE recorded as one history operation). Every op draws
whatever it needs from its context (never from global state), so the same seed
gives the same statements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol, final, runtime_checkable

import anyio

from coordinator.statements import SqlError
from sim.runtime.errors import CoordsimError, InvalidUsage

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    from coordinator.session import Result
    from coordinator.statements import Statement
    from coordinator.subscribe import SubscribeBatch
    from sim.runtime.core import Runtime

__all__ = ["WORKLOADS", "Executor", "OpContext", "SetupFailed", "Subscriber", "Workload", "workload"]

#: Rows each table starts with (select-star reads them all).
ROWS: Final = 10


class Executor(Protocol):
    """What a workload drives: a `Session` or a `RecordingSession`."""

    def execute(self, statement: Statement | str) -> Awaitable[Result]: ...


@runtime_checkable
class Subscriber(Executor, Protocol):
    """An `Executor` that can also SUBSCRIBE (a `Session`, a `RecordingSession`)."""

    def subscribe(
        self, statement: Statement | str
    ) -> AbstractAsyncContextManager[AsyncIterator[SubscribeBatch]]: ...


class SetupFailed(CoordsimError):
    """A schema setup statement failed (a bug or a broken backend, not load)."""


@final
@dataclass
class OpContext:
    """One client's view while it issues operations."""

    client: int
    seq: int
    tables: int
    rt: Runtime
    counter: list[int] = field(default_factory=lambda: [0])
    level: int = 0  # the concurrency level being measured (0: warm-up)

    def table(self) -> int:
        """The table this op targets: clients spread over the tables."""
        return (self.client + self.seq) % self.tables

    def unique(self) -> int:
        """A value never returned before in this run (insert keys)."""
        self.counter[0] += 1
        return ROWS + self.counter[0]


async def _must(s: Executor, sql: str) -> None:
    r = await s.execute(sql)
    if r.error is not None:
        raise SetupFailed(f"setup statement {sql!r} failed: {r.error.code.value} {r.error.message}")


async def standard_schema(s: Executor, tables: int) -> None:
    """N tables `t<i> (a int)` with ROWS rows, an index and a count(*)
    materialized view on each, and a one-row counter table `c<i>` for updates."""
    for i in range(tables):
        await _must(s, f"CREATE TABLE t{i} (a int)")
        values = ", ".join(f"({v})" for v in range(1, ROWS + 1))
        await _must(s, f"INSERT INTO t{i} VALUES {values}")
        await _must(s, f"CREATE INDEX t{i}_a ON t{i} (a)")
        await _must(s, f"CREATE MATERIALIZED VIEW mv{i} AS SELECT count(*) FROM t{i}")
        await _must(s, f"CREATE TABLE c{i} (a int)")
        await _must(s, f"INSERT INTO c{i} VALUES (0)")


class Workload:
    """A named workload; subclasses override `op` (and maybe `background`)."""

    name: str = ""
    description: str = ""
    #: Operations per level relative to `RunConfig.ops_per_level`: cheap operations
    #: get more so their levels last long enough to measure in real mode.
    ops_scale: float = 1.0

    async def setup(self, s: Executor, tables: int) -> None:
        await standard_schema(s, tables)

    async def op(self, s: Executor, ctx: OpContext) -> Result:
        raise NotImplementedError

    async def background(self, s: Callable[[], Executor], tables: int, rt: Runtime, *, tag: str = "") -> None:
        """Load that runs beside the measured clients until cancelled (none by
        default); `tag` keeps the names it creates apart from earlier levels'."""
        del s, tables, rt, tag


@final
class SelectOne(Workload):
    name = "select-one"
    description = "point peek: SELECT * FROM t WHERE a = 1"
    ops_scale = 3.0

    async def op(self, s: Executor, ctx: OpContext) -> Result:
        return await s.execute(f"SELECT * FROM t{ctx.table()} WHERE a = 1")


@final
class SelectConstantWorkload(Workload):
    name = "select-constant"
    description = "constant query: SELECT 1 (the fast path: no timestamp, no peek)"
    ops_scale = 3.0

    async def op(self, s: Executor, ctx: OpContext) -> Result:
        return await s.execute("SELECT 1")


@final
class SelectStar(Workload):
    name = "select-star"
    description = "full peek: SELECT * FROM t"
    ops_scale = 3.0

    async def op(self, s: Executor, ctx: OpContext) -> Result:
        return await s.execute(f"SELECT * FROM t{ctx.table()}")


@final
class SelectCount(Workload):
    name = "select-count"
    description = "aggregate peek: SELECT count(*) FROM t"
    ops_scale = 3.0

    async def op(self, s: Executor, ctx: OpContext) -> Result:
        return await s.execute(f"SELECT count(*) FROM t{ctx.table()}")


@final
class SelectCountInMv(Workload):
    name = "select-count-in-mv"
    description = "peek of a materialized count(*): SELECT * FROM mv"
    ops_scale = 3.0

    async def op(self, s: Executor, ctx: OpContext) -> Result:
        return await s.execute(f"SELECT * FROM mv{ctx.table()}")


@final
class InsertWorkload(Workload):
    name = "insert"
    description = "single-row INSERT (group commit)"
    ops_scale = 1.5

    async def op(self, s: Executor, ctx: OpContext) -> Result:
        return await s.execute(f"INSERT INTO t{ctx.table()} VALUES ({ctx.unique()})")


@final
class UpdateWorkload(Workload):
    name = "update"
    description = "read-then-write UPDATE c SET a = a + 1 (serialized)"

    async def op(self, s: Executor, ctx: OpContext) -> Result:
        return await s.execute(f"UPDATE c{ctx.table()} SET a = a + 1")


@final
class InsertAndSelect(Workload):
    name = "insert-and-select"
    description = "alternating INSERT and point SELECT per client"
    ops_scale = 1.5

    async def op(self, s: Executor, ctx: OpContext) -> Result:
        if ctx.seq % 2 == 0:
            return await s.execute(f"INSERT INTO t{ctx.table()} VALUES ({ctx.unique()})")
        return await s.execute(f"SELECT * FROM t{ctx.table()} WHERE a = 1")


@final
class DdlChurn(Workload):
    name = "ddl-churn"
    description = "per client: CREATE TABLE, CREATE INDEX, DROP INDEX, DROP TABLE, repeat"

    async def op(self, s: Executor, ctx: OpContext) -> Result:
        n = f"d{ctx.level}_{ctx.client}_{ctx.seq // 4}"
        step = ctx.seq % 4
        if step == 0:
            return await s.execute(f"CREATE TABLE {n} (a int)")
        if step == 1:
            return await s.execute(f"CREATE INDEX {n}_i ON {n} (a)")
        if step == 2:
            return await s.execute(f"DROP INDEX {n}_i")
        return await s.execute(f"DROP TABLE {n}")


@final
class Mixed(Workload):
    name = "mixed"
    description = "point SELECTs measured while a DDL stream and a writer run beside them"
    ops_scale = 2.0

    async def op(self, s: Executor, ctx: OpContext) -> Result:
        return await s.execute(f"SELECT * FROM t{ctx.table()} WHERE a = 1")

    async def background(self, s: Callable[[], Executor], tables: int, rt: Runtime, *, tag: str = "") -> None:
        async def ddl() -> None:
            session = s()
            k = 0
            while True:
                await session.execute(f"CREATE TABLE bg{tag}_{k} (a int)")
                await session.execute(f"DROP TABLE bg{tag}_{k}")
                k += 1
                await rt.sleep(0.001)

        async def writer() -> None:
            session = s()
            k = 0
            while True:
                await session.execute(f"INSERT INTO t{k % tables} VALUES ({1_000_000_000 + k})")
                k += 1
                await rt.sleep(0.001)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ddl)
            tg.start_soon(writer)


@final
class SubscribeWorkload(Workload):
    """Writers are measured (per client, in turn: INSERT a new value, UPDATE
    the counter, DELETE the values older than the newest `KEEP`, each on
    the client's next table) while, in the background, two subscribers per
    table follow `t<i>` (with progress) and `c<i>` (without), each for a
    random while (`HOLD_S`) at a time, then again from a fresh `as_of`.
    Subscribers connect like any client, so with several adapters they
    spread over them. Every SUBSCRIBE is recorded, what it received
    included, for `sim.history.checker.subscribe`."""

    name = "subscribe"
    description = "INSERT/UPDATE/DELETE measured while SUBSCRIBE clients follow every table"
    ops_scale = 1.5

    #: Values of `t<i>` a DELETE leaves (the newest ones), so that snapshots stay small.
    KEEP: Final = 30
    #: How long (s) each subscription is held before it is closed and taken anew.
    HOLD_S: Final = (0.05, 0.5)

    async def op(self, s: Executor, ctx: OpContext) -> Result:
        step = ctx.seq % 3
        if step == 0:
            return await s.execute(f"INSERT INTO t{ctx.table()} VALUES ({ctx.unique()})")
        if step == 1:
            return await s.execute(f"UPDATE c{ctx.table()} SET a = a + 1")
        newest = ROWS + ctx.counter[0]
        return await s.execute(f"DELETE FROM t{ctx.table()} WHERE a <= {newest - self.KEEP}")

    async def background(self, s: Callable[[], Executor], tables: int, rt: Runtime, *, tag: str = "") -> None:
        async def follow(table: str, options: str, index: int) -> None:
            session = s()
            if not isinstance(session, Subscriber):
                raise InvalidUsage(f"workload {self.name!r} needs sessions that can SUBSCRIBE, got {session!r}")
            rng = rt.derive(f"subscriber-{tag}-{index}").rng
            while True:
                try:
                    async with session.subscribe(f"SUBSCRIBE TO {table}{options}") as sub:
                        with anyio.move_on_after(rng.uniform(*self.HOLD_S)):
                            async for _ in sub:
                                pass
                except SqlError:
                    await rt.sleep(0.01)  # recorded as failed; try again, as a client would

        async with anyio.create_task_group() as tg:
            for i in range(tables):
                tg.start_soon(follow, f"t{i}", " WITH (PROGRESS)", 2 * i)
                tg.start_soon(follow, f"c{i}", "", 2 * i + 1)


WORKLOADS: Final[dict[str, Workload]] = {
    w.name: w
    for w in (
        SelectOne(),
        SelectConstantWorkload(),
        SelectStar(),
        SelectCount(),
        SelectCountInMv(),
        InsertWorkload(),
        UpdateWorkload(),
        InsertAndSelect(),
        DdlChurn(),
        Mixed(),
        SubscribeWorkload(),
    )
}


def workload(name: str) -> Workload:
    """The named workload; unknown names are an `InvalidUsage` listing the known."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise InvalidUsage(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}") from None
