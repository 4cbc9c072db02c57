"""The `TimestampStore` conformance suite, on every implementation — and on broken
variants it must reject.

`check_timestamp_store(make)` is pytest-free: `make(name)` opens a handle on the
store called `name`; two handles on one name are two "processes" sharing it.
Each check uses fresh names, so runs never interfere on a shared server.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, TypeAlias, final

import anyio
import anyio.lowlevel
import pytest

from oracle.api import check_timeline
from oracle.timestamp_store import MemTimestampStore, TimestampStore, check_epoch, check_upper
from sim.runtime.conformance import ConformanceFailure, expect, expect_raises, fresh_name
from sim.runtime.core import Runtime
from sim.runtime.errors import Fenced, InvalidUsage
from sim.runtime.latency import LatencyModel, Uniform
from sim.runtime.pg import Isolation, with_isolation

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


#: Opens a handle on the store named by the argument (used as `async with`).
MakeStore: TypeAlias = "Callable[[str], Awaitable[TimestampStore]]"

_BIGINT_MAX = 2**63 - 1






# --- The suite --------------------------------------------------------------------------


async def check_timestamp_store(make: MakeStore) -> None:
    """Runs every check of the `TimestampStore` contract on stores from `make`."""
    await _check_epochs(make)
    await _check_uppers(make)
    await _check_fencing(make)
    await _check_open_sees_every_older_write(make)
    await _check_concurrent_opens(make)
    await _check_concurrent_writes(make)
    await _check_misuse(make)


async def _check_epochs(make: MakeStore) -> None:
    name = fresh_name("epochs")
    async with await make(name) as a, await make(name) as b:
        e1 = await a.open()
        expect(e1 >= 1, f"the first epoch is {e1}, must be >= 1")
        e2 = await a.open()
        expect(e2 > e1, f"open must bump the epoch: {e1} then {e2}")
        e3 = await b.open()
        expect(e3 > e2, f"open on another handle must bump past {e2}, got {e3}")
        # The epoch is the token, whichever handle presents it.
        await a.confirm_leadership(e3)
        await b.confirm_leadership(e3)
        for old in (e1, e2):
            await expect_raises(Fenced, f"confirm_leadership({old}) after open -> {e3}",
                                 functools.partial(a.confirm_leadership, old))
        await expect_raises(Fenced, "confirm_leadership of an epoch never opened",
                             lambda: a.confirm_leadership(e3 + 1))
        async with await make(fresh_name("epochs-other")) as other:
            await other.open()
        await b.confirm_leadership(e3)  # another store's bump fences nobody here


async def _check_uppers(make: MakeStore) -> None:
    name = fresh_name("uppers")
    t, u = fresh_name("t"), fresh_name("u")
    async with await make(name) as a:
        epoch = await a.open()
        expect(await a.read_upper(t) is None, "read_upper of a timeline never written is None")
        await a.write_upper(t, 5, epoch)
        expect(await a.read_upper(t) == 5, "read_upper returns what write_upper wrote")
        await a.write_upper(t, 3, epoch)
        expect(await a.read_upper(t) == 5, "write_upper never lowers the upper")
        await a.write_upper(t, 5, epoch)
        expect(await a.read_upper(t) == 5, "write_upper is idempotent")
        await a.write_upper(t, 9, epoch)
        expect(await a.read_upper(t) == 9, "write_upper raises the upper")
        expect(await a.read_upper(u) is None, "timelines are independent")
        await a.write_upper(u, 0, epoch)
        expect(await a.read_upper(u) == 0, "an upper of 0 is an upper, not None")
        await a.write_upper(u, _BIGINT_MAX, epoch)
        expect(await a.read_upper(u) == _BIGINT_MAX, "the largest upper round-trips")
        expect(await a.read_upper(t) == 9, "writing one timeline leaves another alone")
    # Durable and shared: a later handle (a restarted process) sees it all,
    # before and after its own open; another store sees none of it.
    async with await make(name) as b:
        expect(await b.read_upper(t) == 9, "uppers outlive the handle that wrote them")
        await b.open()
        expect(await b.read_upper(u) == _BIGINT_MAX, "uppers survive a newer open")
    async with await make(fresh_name("uppers-other")) as other:
        expect(await other.read_upper(t) is None, "stores are independent")


async def _check_fencing(make: MakeStore) -> None:
    name = fresh_name("fencing")
    t = fresh_name("t")
    async with await make(name) as a, await make(name) as b:
        ea = await a.open()
        await a.write_upper(t, 10, ea)
        await a.confirm_leadership(ea)
        eb = await b.open()
        await expect_raises(Fenced, "write_upper with a fenced epoch", lambda: a.write_upper(t, 20, ea))
        expect(await a.read_upper(t) == 10, "a fenced write_upper writes nothing")
        await expect_raises(Fenced, "write_upper of a new timeline with a fenced epoch",
                             lambda: a.write_upper(fresh_name("t"), 1, ea))
        await expect_raises(Fenced, "confirm_leadership with a fenced epoch",
                             lambda: a.confirm_leadership(ea))
        await b.confirm_leadership(eb)
        await b.write_upper(t, 15, eb)
        expect(await a.read_upper(t) == 15, "the new leader writes; every handle reads it")


async def _check_open_sees_every_older_write(make: MakeStore) -> None:
    """An old leader writes as fast as it can while a new one opens: every write
    the old leader saw succeed is in what the new one reads right after `open`,
    and every write after the bump is refused."""
    name = fresh_name("handover")
    t = fresh_name("t")
    async with await make(name) as old, await make(name) as new:
        e_old = await old.open()
        done: list[int] = []
        some_done = anyio.Event()
        fenced = anyio.Event()
        seen_by_new: list[int | None] = []

        async def old_leader() -> None:
            for upper in range(1, 100_000):
                try:
                    await old.write_upper(t, upper, e_old)
                except Fenced:
                    fenced.set()
                    return
                done.append(upper)
                if len(done) == 5:
                    some_done.set()

        async def new_leader() -> None:
            await some_done.wait()
            await new.open()
            seen_by_new.append(await new.read_upper(t))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(old_leader)
                tg.start_soon(new_leader)
        expect(fenced.is_set(), "the old leader was never fenced")
        expect(
            seen_by_new == [max(done)],
            f"after open the new leader read {seen_by_new}, but the old leader's "
            f"last successful write was {max(done)}",
        )
        expect(await new.read_upper(t) == max(done), "a refused write left something behind")


async def _check_concurrent_opens(make: MakeStore) -> None:
    name = fresh_name("opens")
    t = fresh_name("t")
    epochs: list[int] = []
    async with await make(name) as a, await make(name) as b, await make(name) as c:

        async def opener(store: TimestampStore) -> None:
            epochs.append(await store.open())

        async with anyio.create_task_group() as tg:
            for store in (a, b, c) * 4:
                tg.start_soon(opener, store)
        expect(len(set(epochs)) == len(epochs), f"concurrent opens shared epochs: {sorted(epochs)}")
        current = max(epochs)
        await a.confirm_leadership(current)
        await c.write_upper(t, 1, current)
        for e in sorted(epochs)[:-1]:
            await expect_raises(Fenced, f"epoch {e} below the current {current}",
                                 functools.partial(b.confirm_leadership, e))
            await expect_raises(Fenced, f"write_upper with epoch {e} below the current {current}",
                                 functools.partial(b.write_upper, t, 2, e))
        expect(await b.read_upper(t) == 1, "fenced concurrent writers wrote something")


async def _check_concurrent_writes(make: MakeStore) -> None:
    """Racing write_upper calls of the leader leave the greatest (never lowers)."""
    name = fresh_name("writes")
    t = fresh_name("t")
    async with await make(name) as a, await make(name) as b:
        epoch = await a.open()
        uppers = [(i * 7919) % 101 for i in range(1, 25)]  # a scrambled order

        async def writer(store: TimestampStore, upper: int) -> None:
            await store.write_upper(t, upper, epoch)

        async with anyio.create_task_group() as tg:
            for i, upper in enumerate(uppers):
                tg.start_soon(writer, (a, b)[i % 2], upper)
        got = await b.read_upper(t)
        expect(got == max(uppers), f"after racing writes the upper is {got}, must be {max(uppers)}")


async def _check_misuse(make: MakeStore) -> None:
    name = fresh_name("misuse")
    async with await make(name) as a:
        epoch = await a.open()
        t = fresh_name("t")
        for bad_t in ("", "x" * 257):
            await expect_raises(InvalidUsage, f"read_upper({bad_t!r})",
                                 functools.partial(a.read_upper, bad_t))
            await expect_raises(InvalidUsage, f"write_upper({bad_t!r}, ...)",
                                 functools.partial(a.write_upper, bad_t, 1, epoch))
        for bad_u in (-1, _BIGINT_MAX + 1, True, 1.5, "7", None):
            await expect_raises(InvalidUsage, f"write_upper(t, {bad_u!r}, epoch)",
                                 functools.partial(a.write_upper, t, bad_u, epoch))  # type: ignore[arg-type]
        for bad_e in (0, -1, True, 1.5, None):
            await expect_raises(InvalidUsage, f"write_upper(t, 1, {bad_e!r})",
                                 functools.partial(a.write_upper, t, 1, bad_e))  # type: ignore[arg-type]
            await expect_raises(InvalidUsage, f"confirm_leadership({bad_e!r})",
                                 functools.partial(a.confirm_leadership, bad_e))  # type: ignore[arg-type]
        expect(await a.read_upper(t) is None, "misuse wrote something")
        await a.confirm_leadership(epoch)  # and left the epoch alone


# --- Every implementation -----------------------------------------------------------------


def _modeled_runtime(seed: int) -> Runtime:
    """A random transaction latency, so concurrent calls finish in other orders
    than they started."""
    return Runtime(seed=seed, latency=LatencyModel({"stash.txn": Uniform(0.0002, 0.002)}))


def _memory() -> MakeStore:
    stores: dict[str, MemTimestampStore] = {}
    rt = _modeled_runtime(17)

    async def make(name: str) -> TimestampStore:
        # One object is the store: every "process" shares it (closing is a no-op).
        return stores.setdefault(name, MemTimestampStore(rt))

    return make


def _postgres(url: str) -> MakeStore:
    from oracle.timestamp_store_postgres import PostgresTimestampStore

    rt = Runtime(seed=18)

    async def make(name: str) -> TimestampStore:
        return await PostgresTimestampStore.connect(url, rt, name=name, pool_size=2)

    return make


@pytest.fixture(
    params=[
        pytest.param("memory", marks=pytest.mark.virtual),
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("postgres-read-committed", marks=pytest.mark.postgres),
    ]
)
def make_store(request: pytest.FixtureRequest) -> MakeStore:
    """Opens handles on every `TimestampStore` implementation, the Postgres one
    at both levels. At SERIALIZABLE (the client's default) conflicts are
    answered with 40001, which the Postgres store must retry."""
    if request.param == "memory":
        return _memory()
    url: str = request.getfixturevalue("pg_url")
    if request.param == "postgres":
        return _postgres(url)
    return _postgres(with_isolation(url, Isolation.READ_COMMITTED))


@pytest.mark.asyncio
async def test_conformance(make_store: MakeStore) -> None:
    await check_timestamp_store(make_store)


# --- Broken variants the suite must reject -------------------------------------------------


class _Broken(TimestampStore):
    """A store in memory with one bug (each subclass): the suite must catch it."""

    def __init__(self) -> None:
        self.epoch = 0
        self.uppers: dict[str, int] = {}

    async def open(self) -> int:
        await anyio.lowlevel.checkpoint()
        self.epoch += 1
        return self.epoch

    async def read_upper(self, timeline: str) -> int | None:
        check_timeline(timeline)
        await anyio.lowlevel.checkpoint()
        return self.uppers.get(timeline)

    def _check(self, epoch: int) -> None:
        if epoch != self.epoch:
            raise Fenced(f"epoch {epoch} is not {self.epoch}")

    async def write_upper(self, timeline: str, upper: int, epoch: int) -> None:
        _check_write(timeline, upper, epoch)
        await anyio.lowlevel.checkpoint()
        self._check(epoch)
        self.uppers[timeline] = max(self.uppers.get(timeline, 0), upper)

    async def confirm_leadership(self, epoch: int) -> None:
        check_epoch(epoch)
        await anyio.lowlevel.checkpoint()
        self._check(epoch)


def _check_write(timeline: str, upper: int, epoch: int) -> None:
    check_timeline(timeline)
    check_upper(upper)
    check_epoch(epoch)


@final
class _Lowers(_Broken):
    async def write_upper(self, timeline: str, upper: int, epoch: int) -> None:
        _check_write(timeline, upper, epoch)
        await anyio.lowlevel.checkpoint()
        self._check(epoch)
        self.uppers[timeline] = upper


@final
class _Unfenced(_Broken):
    async def write_upper(self, timeline: str, upper: int, epoch: int) -> None:
        _check_write(timeline, upper, epoch)
        await anyio.lowlevel.checkpoint()
        self.uppers[timeline] = max(self.uppers.get(timeline, 0), upper)


@final
class _CheckThenWrite(_Broken):
    """Checks the epoch in one round trip and writes in another, without a lock
    between them: a bump in between lets a fenced write land after the new
    leader has read the uppers."""

    async def write_upper(self, timeline: str, upper: int, epoch: int) -> None:
        _check_write(timeline, upper, epoch)
        await anyio.lowlevel.checkpoint()
        self._check(epoch)
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        self.uppers[timeline] = max(self.uppers.get(timeline, 0), upper)


@final
class _SharedEpochs(_Broken):
    """Reads the epoch, yields, then writes epoch + 1: racing opens share one."""

    async def open(self) -> int:
        current = self.epoch
        await anyio.lowlevel.checkpoint()
        self.epoch = current + 1
        return self.epoch


@final
class _NoMisuseChecks(_Broken):
    async def confirm_leadership(self, epoch: int) -> None:
        await anyio.lowlevel.checkpoint()
        self._check(epoch)


@pytest.mark.virtual
@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("broken", "caught"),
    [
        (_Lowers, "never lowers"),
        (_Unfenced, "fenced epoch"),
        (_CheckThenWrite, "last successful write"),
        (_SharedEpochs, "shared epochs"),
        (_NoMisuseChecks, "confirm_leadership"),
    ],
)
async def test_suite_rejects(broken: type[_Broken], caught: str) -> None:
    stores: dict[str, TimestampStore] = {}

    async def make(name: str) -> TimestampStore:
        return stores.setdefault(name, broken())

    with pytest.raises(ConformanceFailure, match=caught):
        await check_timestamp_store(make)
