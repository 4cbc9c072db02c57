"""The `StashStore` conformance suite, on every implementation — and on broken
variants it must reject.

`check_stash_store(make)` is pytest-free: `make(env)` opens a handle on the
stash environment `env`; two handles on one environment are two "processes"
sharing it. Each check uses fresh environments, so runs never interfere on a
shared server. With `reliable=False` (the fault-injecting wrapper) the checks
retry failed calls — appends with their token, as the contract allows — and
still assert the whole contract: retries make it hold again.
"""

from __future__ import annotations

import functools
import itertools
import random
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias, TypeVar, final

import anyio
import anyio.lowlevel
import pytest

from catalog.api import Appended, Conflict
from catalog.faults import UnreliableStashStore
from catalog.objects import CatalogState, CatalogUpdate, Config, Setting
from catalog.stash_catalog import MemStashStore, StashStore
from sim.runtime.conformance import ConformanceFailure, expect, fresh_name
from sim.runtime.core import Runtime
from sim.runtime.errors import ExternalError, Fenced
from sim.runtime.latency import LatencyModel, Uniform
from sim.runtime.pg import Isolation, with_isolation

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from catalog.api import AppendResult

#: Opens a handle on the stash environment named by the argument (`async with`).
MakeStore: TypeAlias = "Callable[[str], Awaitable[StashStore]]"

T = TypeVar("T")

#: A liveness guard, not a performance bound: a wait that should end ends long before.
GUARD_S = 10.0





def _setting(name: str, value: str, ts: int, diff: int = 1) -> CatalogUpdate:
    return CatalogUpdate.of(Setting(name, value), ts, diff)


def _epoch(epoch: int, ts: int, diff: int = 1) -> CatalogUpdate:
    return CatalogUpdate.of(Config("epoch", epoch), ts, diff)


def _state_at(log: Sequence[CatalogUpdate], ts: int) -> CatalogState:
    """The model: the updates at times <= ts, applied in order."""
    state = CatalogState()
    state.apply(u for u in log if u.ts <= ts)
    return state


async def _retry(reliable: bool, op: Callable[[], Awaitable[T]]) -> T:
    """Every StashStore method is safe to retry: so retry failures of an
    unreliable store (a reliable one must not fail at all)."""
    for _ in range(199):
        try:
            return await op()
        except ExternalError:
            if reliable:
                raise
    return await op()


async def _expect_fenced(what: str, op: Callable[[], Awaitable[object]]) -> None:
    try:
        await op()
    except Fenced:
        return
    except Exception as exc:
        raise ConformanceFailure(f"{what}: expected Fenced, got {exc!r}") from exc
    raise ConformanceFailure(f"{what}: expected Fenced")


@dataclass
class _Writer:
    """One writer: one append at a time, each with a fresh token (retried with it)."""

    store: StashStore
    reliable: bool
    name: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: The arguments of this writer's last committed append.
    committed: tuple[int, int, tuple[CatalogUpdate, ...], int | None, str] | None = None

    async def append(
        self, expected: int, new: int, updates: Sequence[CatalogUpdate], epoch: int | None = None,
        *, token: str | None = None,
    ) -> AppendResult:
        args = (expected, new, tuple(updates), epoch, token or uuid.uuid4().hex)
        result = await self._send(*args)
        if isinstance(result, Appended):
            self.committed = args
        return result

    async def retry_committed(self) -> AppendResult:
        """Sends the last committed append again, token and all."""
        assert self.committed is not None
        return await self._send(*self.committed)

    async def _send(
        self, expected: int, new: int, updates: tuple[CatalogUpdate, ...], epoch: int | None, token: str
    ) -> AppendResult:
        store = self.store
        return await _retry(
            self.reliable, lambda: store.append(expected, new, updates, epoch, self.name, token)
        )


# --- The suite --------------------------------------------------------------------------


async def check_stash_store(make: MakeStore, *, reliable: bool = True) -> None:
    """Runs every check of the `StashStore` contract on stores from `make`."""
    await _check_fresh(make, reliable)
    await _check_appends(make, reliable)
    await _check_token_retries(make, reliable)
    await _check_fencing(make, reliable)
    await _check_compaction(make, reliable)
    await _check_race(make, reliable)
    await _check_wait_for_change(make, reliable)


async def _check_log(
    store: StashStore, reliable: bool, lo: int, upper: int, log: Sequence[CatalogUpdate], what: str
) -> None:
    got = await _retry(reliable, lambda: store.read_log(lo))
    expect(got is not None, f"{what}: read_log({lo}) is None")
    assert got is not None
    got_upper, rows = got
    expect(got_upper == upper, f"{what}: read_log({lo}) says upper {got_upper}, must be {upper}")
    expect([u.ts for u in rows] == sorted(u.ts for u in rows), f"{what}: read_log({lo}) not in time order")
    want = sorted(u for u in log if lo <= u.ts < upper)
    expect(sorted(rows) == want, f"{what}: read_log({lo}) = {rows}, must hold {want}")


async def _check_fresh(make: MakeStore, reliable: bool) -> None:
    async with await make(fresh_name("fresh")) as s:
        expect(await _retry(reliable, s.read_meta) == (0, 0), "a fresh environment has upper 0, since 0")
        expect(await _retry(reliable, s.read_state) == (0, CatalogState()), "a fresh environment is empty")
        expect(await _retry(reliable, lambda: s.read_log(1)) == (0, []), "a fresh environment's log is empty")
        expect(await _retry(reliable, lambda: s.read_log(0)) is None, "read_log(lo <= since) is None")


async def _check_appends(make: MakeStore, reliable: bool) -> None:
    env = fresh_name("appends")
    async with await make(env) as a, await make(env) as b:
        w = _Writer(a, reliable)
        first = [_setting("a", "1", 0), _epoch(1, 0)]
        expect(await w.append(0, 1, first) == Appended(1), "the first append commits")
        expect(await _retry(reliable, a.read_meta) == (1, 0), "append sets the upper")
        second = [_setting("a", "1", 3, -1), _setting("a", "2", 3), _setting("b", "1", 4)]
        expect(await w.append(1, 5, second, epoch=1) == Appended(5), "an append at the upper commits")
        log = first + second
        for handle in (a, b):  # every handle sees the same, consistent state
            expect(await _retry(reliable, handle.read_meta) == (5, 0), "read_meta after two appends")
            state = await _retry(reliable, handle.read_state)
            expect(state == (5, _state_at(log, 4)), f"read_state after two appends: {state}")
            await _check_log(handle, reliable, 1, 5, log, "two appends")
            await _check_log(handle, reliable, 4, 5, log, "two appends")
            await _check_log(handle, reliable, 5, 5, log, "two appends")
            for ts in range(5):
                got = await _retry(reliable, functools.partial(handle.snapshot, ts))
                expect(got == _state_at(log, ts), f"snapshot({ts}) = {got}")

        other = _Writer(b, reliable)
        stale = await other.append(1, 6, [_setting("c", "1", 1)], epoch=1)
        expect(stale == Conflict(5), f"an append at a stale upper: {stale}, must be Conflict(5)")
        ahead = await other.append(7, 8, [_setting("c", "1", 7)], epoch=1)
        expect(ahead == Conflict(5), f"an append beyond the upper: {ahead}, must be Conflict(5)")
        expect(await _retry(reliable, a.read_state) == (5, _state_at(log, 4)), "a conflict wrote something")
        await _check_log(a, reliable, 1, 5, log, "after conflicts")
    async with await make(fresh_name("appends-other")) as elsewhere:
        expect(await _retry(reliable, elsewhere.read_meta) == (0, 0), "environments are independent")


async def _check_token_retries(make: MakeStore, reliable: bool) -> None:
    env = fresh_name("tokens")
    async with await make(env) as a, await make(env) as b:
        w, other = _Writer(a, reliable), _Writer(b, reliable)
        log = [_epoch(1, 0)]
        await w.append(0, 1, log)
        x = [_setting("x", "1", 1)]
        expect(await w.append(1, 2, x) == Appended(2), "append commits")
        log += x
        expect(await w.retry_committed() == Appended(2), "a retried append (same token) is Appended")
        expect(await _retry(reliable, b.read_state) == (2, _state_at(log, 1)), "a retry applied twice")
        y = [_setting("y", "1", 2)]
        expect(await other.append(2, 3, y) == Appended(3), "another writer appends")
        log += y
        retried = await w.retry_committed()
        expect(retried == Appended(2), f"a retry after the upper moved on: {retried}, must be Appended(2)")
        expect(await _retry(reliable, a.read_state) == (3, _state_at(log, 2)), "a late retry applied again")
        await _check_log(a, reliable, 1, 3, log, "after retries")
        assert w.committed is not None
        stolen = await _Writer(b, reliable).append(1, 2, x, token=w.committed[-1])
        expect(stolen == Conflict(3), f"tokens are per writer: another writer's token gave {stolen}")


async def _check_fencing(make: MakeStore, reliable: bool) -> None:
    env = fresh_name("fencing")
    async with await make(env) as a, await make(env) as b:
        old, new = _Writer(a, reliable), _Writer(b, reliable)
        log = [_epoch(1, 0)]
        await old.append(0, 1, log)
        await _retry(reliable, lambda: a.confirm(1))
        await _expect_fenced("confirm(2) while the epoch row holds 1", lambda: _retry(reliable, lambda: a.confirm(2)))
        expect(await old.append(1, 2, [_setting("a", "1", 1)], epoch=1) == Appended(2), "the leader appends")
        log += [_setting("a", "1", 1)]
        bump = [_epoch(1, 2, -1), _epoch(2, 2)]  # a newer opener, as `open` writes it: unchecked
        expect(await new.append(2, 3, bump) == Appended(3), "the epoch bump commits")
        log += bump
        for handle in (a, b):
            await _expect_fenced("confirm(1) after the bump", functools.partial(_retry, reliable, functools.partial(handle.confirm, 1)))
            await _retry(reliable, functools.partial(handle.confirm, 2))
        await _expect_fenced(
            "append at the upper with a fenced epoch",
            lambda: old.append(3, 4, [_setting("c", "1", 3)], epoch=1),
        )
        await _expect_fenced(
            "append at a stale upper with a fenced epoch (the epoch is checked first)",
            lambda: old.append(2, 3, [_setting("c", "1", 2)], epoch=1),
        )
        expect(await _retry(reliable, a.read_state) == (3, _state_at(log, 2)), "a fenced append wrote something")
        retried = await old.retry_committed()
        expect(retried == Appended(2), f"a fenced writer's retry of a committed append: {retried}, must be Appended(2)")
        expect(await new.append(3, 4, [_setting("c", "1", 3)], epoch=2) == Appended(4), "the new leader appends")
    async with await make(fresh_name("no-epoch")) as s:
        await _expect_fenced("append with an epoch where there is no epoch row",
                             lambda: _Writer(s, reliable).append(0, 1, [_setting("a", "1", 0)], epoch=1))
        await _expect_fenced("confirm where there is no epoch row", lambda: _retry(reliable, lambda: s.confirm(1)))
        expect(await _retry(reliable, s.read_meta) == (0, 0), "a fenced append wrote something")


async def _check_compaction(make: MakeStore, reliable: bool) -> None:
    env = fresh_name("compaction")
    async with await make(env) as a, await make(env) as b:
        w = _Writer(a, reliable)
        steps = [
            [_setting("a", "1", 0), _setting("b", "1", 0)],
            [_setting("a", "1", 1, -1), _setting("a", "2", 1)],
            [_setting("c", "1", 2)],
            [_setting("b", "1", 3, -1)],
        ]
        log: list[CatalogUpdate] = []
        for ts, updates in enumerate(steps):
            await w.append(ts, ts + 1, updates)
            log += updates

        async def expect_history(since: int, upper: int) -> None:
            for handle in (a, b):
                expect(await _retry(reliable, handle.read_meta) == (upper, since), f"read_meta after compact({since})")
                state = await _retry(reliable, handle.read_state)
                expect(state == (upper, _state_at(log, upper - 1)), f"compact({since}) changed the objects")
                for ts in range(upper):
                    got = await _retry(reliable, functools.partial(handle.snapshot, ts))
                    want = None if ts < since else _state_at(log, ts)
                    expect(got == want, f"since {since}: snapshot({ts}) = {got}, must be {want}")
                for lo in range(since + 1):
                    got_log = await _retry(reliable, functools.partial(handle.read_log, lo))
                    expect(got_log is None, f"since {since}: read_log({lo}) = {got_log}, must be None")
                for lo in range(since + 1, upper + 1):
                    await _check_log(handle, reliable, lo, upper, log, f"since {since}")

        await _retry(reliable, lambda: a.compact(2))
        await expect_history(2, 4)
        await _retry(reliable, lambda: a.compact(1))
        await expect_history(2, 4)  # never lowers
        await _retry(reliable, lambda: b.compact(2))
        await expect_history(2, 4)  # idempotent: nothing consolidated twice
        d = [_setting("d", "1", 4)]
        expect(await w.append(4, 5, d) == Appended(5), "append after compaction")
        log += d
        await expect_history(2, 5)
        await _retry(reliable, lambda: b.compact(4))
        await expect_history(4, 5)


async def _check_race(make: MakeStore, reliable: bool) -> None:
    """Writers race appends at the upper they just read: exactly one wins each
    upper, the log holds exactly the winners' updates, a loser's Conflict names
    an upper past the one it expected."""
    env = fresh_name("race")
    target = 25
    async with await make(env) as s0:
        await _Writer(s0, reliable).append(0, 1, [_epoch(1, 0)])
    handles = [await make(env) for _ in range(4)]
    try:
        winners: dict[int, list[str]] = {}
        bad_conflicts: list[tuple[int, int]] = []

        async def writer(store: StashStore) -> None:
            w = _Writer(store, reliable)
            while True:
                upper, _ = await _retry(reliable, store.read_meta)
                if upper >= target:
                    return
                # A key per writer and upper: a double win shows as two rows, not a crash.
                result = await w.append(upper, upper + 1, [_setting(f"{w.name}@{upper}", "won", upper)], epoch=1)
                if isinstance(result, Appended):
                    winners.setdefault(upper, []).append(w.name)
                elif result.current_upper <= upper:
                    bad_conflicts.append((upper, result.current_upper))

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for store in handles * 3:
                    tg.start_soon(writer, store)
        expect(not bad_conflicts, f"Conflict(current_upper) not past the expected upper: {bad_conflicts}")
        doubles = {u: names for u, names in winners.items() if len(names) > 1}
        expect(not doubles, f"two writers won one upper: {doubles}")
        expect(sorted(winners) == list(range(1, target)), f"uppers won: {sorted(winners)}")
        got = await _retry(reliable, lambda: handles[0].read_log(1))
        expect(got is not None and got[0] == target, f"after the race read_log(1) says {got and got[0]}")
        assert got is not None
        expect(
            [(u.ts, u.key) for u in got[1]]
            == [(ts, Setting(f"{winners[ts][0]}@{ts}", "won").key_json()) for ts in range(1, target)],
            "the log holds exactly each upper's winner",
        )
    finally:
        for store in handles:
            await store.close()


async def _check_wait_for_change(make: MakeStore, reliable: bool) -> None:
    """Liveness only (a wait may end early): waits end after writes, and at once
    or within a poll interval when the upper has already moved."""
    env = fresh_name("wait")
    async with await make(env) as a, await make(env) as b:
        w = _Writer(a, reliable)
        returned: list[str] = []

        async def waiter(name: str, store: StashStore) -> None:
            await store.wait_for_change(0)
            returned.append(name)

        try:
            with anyio.fail_after(GUARD_S):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(waiter, "same handle", a)
                    tg.start_soon(waiter, "other handle", b)
                    await anyio.lowlevel.checkpoint()
                    await w.append(0, 1, [_setting("a", "1", 0)])
        except TimeoutError:
            raise ConformanceFailure(f"wait_for_change(0) never returned after a write; only {returned}") from None
        for name, store in (("same handle", a), ("other handle", b)):
            try:
                with anyio.fail_after(GUARD_S):
                    await store.wait_for_change(0)
            except TimeoutError:
                raise ConformanceFailure(f"wait_for_change(0) on the {name} blocks though the upper is 1") from None


# --- Every implementation -----------------------------------------------------------------


@final
@dataclass(frozen=True)
class StoreImpl:
    make: MakeStore
    reliable: bool


def _modeled_runtime(seed: int) -> Runtime:
    """A random transaction latency, so concurrent calls finish in other orders
    than they started."""
    return Runtime(seed=seed, latency=LatencyModel({"catalog.stash.txn": Uniform(0.0002, 0.002)}))


def _memory(*, unreliable: bool) -> StoreImpl:
    stores: dict[str, MemStashStore] = {}
    rt = _modeled_runtime(23)
    handles = itertools.count()

    async def make(env: str) -> StashStore:
        # One object is the environment: every "process" shares it.
        store = stores.setdefault(env, MemStashStore(rt))
        if not unreliable:
            return store
        return UnreliableStashStore(store, random.Random(next(handles)), p_fail=0.1, p_timeout=0.1)

    return StoreImpl(make, reliable=not unreliable)


def _postgres(url: str) -> StoreImpl:
    from catalog.stash_postgres import PostgresStashStore

    rt = Runtime(seed=24)

    async def make(env: str) -> StashStore:
        return await PostgresStashStore.connect(url, rt, env=env, pool_size=2, poll_interval_s=0.02)

    return StoreImpl(make, reliable=True)


@pytest.fixture(
    params=[
        pytest.param("memory", marks=pytest.mark.virtual),
        pytest.param("unreliable-memory", marks=pytest.mark.virtual),
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("postgres-read-committed", marks=pytest.mark.postgres),
    ]
)
def store_impl(request: pytest.FixtureRequest) -> StoreImpl:
    """Every `StashStore` implementation, the Postgres one at both levels. At
    SERIALIZABLE (the client's default) write conflicts are answered with
    40001, which the Postgres store must retry."""
    if request.param in ("memory", "unreliable-memory"):
        return _memory(unreliable=request.param == "unreliable-memory")
    url: str = request.getfixturevalue("pg_url")
    if request.param == "postgres":
        return _postgres(url)
    return _postgres(with_isolation(url, Isolation.READ_COMMITTED))


@pytest.mark.asyncio
async def test_conformance(store_impl: StoreImpl) -> None:
    await check_stash_store(store_impl.make, reliable=store_impl.reliable)


# --- Broken variants the suite must reject -------------------------------------------------


class _Delegating(StashStore):
    """A `MemStashStore` with one bug (each subclass): the suite must catch it."""

    def __init__(self, inner: MemStashStore) -> None:
        self.inner = inner

    async def read_meta(self) -> tuple[int, int]:
        return await self.inner.read_meta()

    async def read_state(self) -> tuple[int, CatalogState]:
        return await self.inner.read_state()

    async def read_log(self, lo: int) -> tuple[int, list[CatalogUpdate]] | None:
        return await self.inner.read_log(lo)

    async def snapshot(self, ts: int) -> CatalogState | None:
        return await self.inner.snapshot(ts)

    async def append(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate],
        epoch: int | None, writer: str, token: str,
    ) -> AppendResult:
        return await self.inner.append(expected_upper, new_upper, updates, epoch, writer, token)

    async def confirm(self, epoch: int) -> None:
        await self.inner.confirm(epoch)

    async def compact(self, since: int) -> None:
        await self.inner.compact(since)

    async def wait_for_change(self, upper: int) -> None:
        await self.inner.wait_for_change(upper)


@final
class _ForgetsTokens(_Delegating):
    async def append(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate],
        epoch: int | None, writer: str, token: str,
    ) -> AppendResult:
        return await self.inner.append(expected_upper, new_upper, updates, epoch, writer, uuid.uuid4().hex)


@final
class _UpperBeforeEpoch(_Delegating):
    async def append(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate],
        epoch: int | None, writer: str, token: str,
    ) -> AppendResult:
        if self.inner.writers.get(writer) != token and self.inner.upper != expected_upper:
            return Conflict(self.inner.upper)
        return await self.inner.append(expected_upper, new_upper, updates, epoch, writer, token)


@final
class _CheckThenAppend(_Delegating):
    """Compares the upper, then appends in a second round trip: racers both win."""

    async def append(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate],
        epoch: int | None, writer: str, token: str,
    ) -> AppendResult:
        upper, _ = await self.inner.read_meta()
        if upper == expected_upper:
            await anyio.sleep(0.001)  # the second round trip, which writes blindly
            expected_upper = self.inner.upper
        return await self.inner.append(expected_upper, new_upper, updates, epoch, writer, token)


@final
class _LowersSince(_Delegating):
    async def compact(self, since: int) -> None:
        await self.inner.compact(since)
        self.inner.since = since


@final
class _SleepsThroughWrites(_Delegating):
    """Waits for the next write even when the upper has already moved."""

    async def wait_for_change(self, upper: int) -> None:
        await self.inner.wait_for_change(self.inner.upper)


@pytest.mark.virtual
@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("broken", "caught"),
    [
        (_ForgetsTokens, "retried append"),
        (_UpperBeforeEpoch, "epoch is checked first"),
        (_CheckThenAppend, "two writers won one upper"),
        (_LowersSince, "compact"),
        (_SleepsThroughWrites, "blocks though the upper is 1"),
    ],
)
async def test_suite_rejects(broken: type[_Delegating], caught: str) -> None:
    rt = _modeled_runtime(25)
    stores: dict[str, MemStashStore] = {}

    async def make(env: str) -> StashStore:
        return broken(stores.setdefault(env, MemStashStore(rt)))

    with pytest.raises(ConformanceFailure, match=caught):
        await check_stash_store(make)
