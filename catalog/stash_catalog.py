"""The durable catalog in the stash (today's store, seed 004's stash implementation).

The stash holds the catalog as tables: the current objects (one row per
entry), an update log `(ts, kind, key, value, diff)` that serves
`snapshot_at`/`subscribe_at`, and one meta row per environment (upper, since,
the token of the last write). Every write is one transaction that locks the meta
row, checks the opener's epoch (the `config` epoch row) and the expected upper,
then applies the change to both tables — so a fenced opener writes nothing, and
`confirm_leadership` is exactly that transaction without the change.

`StashStore` is the storage seam: `MemStashStore` here (virtual time) and
`catalog.stash_postgres.PostgresStashStore` (asyncpg, CockroachDB-compatible).
"""

from __future__ import annotations

import functools
import uuid
from abc import ABC, abstractmethod
from itertools import groupby
from typing import TYPE_CHECKING, Final, Literal, Self, TypeVar, final

import anyio
from anyio.lowlevel import checkpoint

from catalog.api import Appended, BelowSince, Changes, Conflict, Progress, Subscription
from catalog.base import CachedCatalog
from catalog.objects import CatalogState, CatalogUpdate, config_key, parse_json
from sim.runtime.errors import Fenced, InvalidUsage
from sim.runtime.retry import RetryPolicy, retry_external

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence

    from catalog.api import AppendResult, CatalogEvent
    from oracle.api import TimestampOracle
    from sim.runtime.core import Runtime

__all__ = ["MemStashStore", "StashCatalog", "StashStore", "consolidate_log", "epoch_of"]

T = TypeVar("T")

#: Retries of store calls: Postgres has its own (PostgresClient), so this mostly
#: serves fault-injecting and in-memory stores.
DEFAULT_RETRY: Final = RetryPolicy()

#: The key of the epoch row (`config` kind), checked by every write transaction.
EPOCH_KEY: Final = config_key("epoch")


def epoch_of(value: str | None) -> int | None:
    """The epoch stored in a `config` epoch row's value."""
    if value is None:
        return None
    v = parse_json(value, "config epoch").get("value")
    return v if isinstance(v, int) else None


def fenced(current: int | None, epoch: int) -> Fenced:
    return Fenced(f"catalog epoch is {current}, this opener holds epoch {epoch}")


def consolidate_log(rows: Iterable[CatalogUpdate], ts: int) -> CatalogState:
    """The state at `ts` of a log: entries whose diffs at times `<= ts` sum to 1."""
    acc: dict[tuple[str, str, str], int] = {}
    for u in rows:
        if u.ts <= ts:
            k = (u.kind, u.key, u.value)
            acc[k] = acc.get(k, 0) + u.diff
    state = CatalogState()
    for (kind, key, value), n in sorted(acc.items()):
        if n == 1:
            state.entries[(kind, key)] = value
        elif n != 0:
            raise InvalidUsage(f"stash log holds {kind} {key} with multiplicity {n}")
    return state


class StashStore(ABC):
    """The stash tables of one environment. Every method is one transaction.

    State: an `upper` and a `since` (both 0 in a fresh environment), the
    objects (the catalog at `upper - 1`: every logged update added up), the
    update log (every update at times in `(since, upper)`, and the updates at
    times `<= since` consolidated into rows at `since`), and each writer's last
    append token. The epoch row is the `config` object `EPOCH_KEY`, written by
    appends like any object. Every handle on one environment (from any
    process) shares this state, and every method takes effect at one instant
    between its call and its return.

    Failures raise `ExternalError` after the implementation's retries; every
    method is safe to retry (`append` through its `token`). `Fenced` is an
    answer, not a failure: it is never retried.
    """

    @abstractmethod
    async def read_meta(self) -> tuple[int, int]:
        """`(upper, since)`."""

    @abstractmethod
    async def read_state(self) -> tuple[int, CatalogState]:
        """`(upper, the objects)`, consistent with each other (the objects are
        the catalog at `upper - 1`; none while the upper is 0)."""

    @abstractmethod
    async def read_log(self, lo: int) -> tuple[int, list[CatalogUpdate]] | None:
        """`(upper, every logged update at times in [lo, upper))` in time order, or
        None if those times were compacted (`lo - 1 < since`)."""

    @abstractmethod
    async def snapshot(self, ts: int) -> CatalogState | None:
        """The state at `ts` (caller ensures `ts < upper`): the logged updates at
        times `<= ts` added up. None if `ts < since`."""

    @abstractmethod
    async def append(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate],
        epoch: int | None, writer: str, token: str,
    ) -> AppendResult:
        """In one transaction: lock the meta row; if `writer`'s last committed
        append carries `token`, return `Appended(new_upper)` (this is a retry of
        it, however far the upper moved since); if `epoch` is given and the
        epoch row differs (or is missing), raise `Fenced`; if the upper is not
        `expected_upper`, return `Conflict(the upper)`; else apply and log
        `updates`, set the upper to `new_upper`, record `token` as `writer`'s
        last and return `Appended(new_upper)`. Nothing is written unless the
        result is a first `Appended`.

        The caller ensures `expected_upper < new_upper` and that every update's
        time is in `[expected_upper, new_upper)` and consistent with the objects.
        A writer issues one append at a time, so retrying an append with its
        token after an `Indeterminate` failure is safe; tokens are per writer.
        """

    @abstractmethod
    async def confirm(self, epoch: int) -> None:
        """One transaction that locks the meta row and checks the epoch row
        (returns iff it holds `epoch`).

        Raises:
            Fenced: the epoch row holds another epoch (or is missing).
        """

    @abstractmethod
    async def compact(self, since: int) -> None:
        """Raises the since to `since` (never lowers it), consolidating the log
        rows at times `<= since` into rows at `since`. The caller ensures
        `since < upper`. Idempotent."""

    @abstractmethod
    async def wait_for_change(self, upper: int) -> None:
        """Returns once the upper may have moved past `upper`: when a write
        through this handle completes, or after at most the implementation's
        poll interval, which bounds the wait whoever moved the upper (a store
        whose every write is local polls nothing: it returns at once if the
        upper is already past `upper`). May return when nothing changed:
        callers re-read the upper."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Releases connections."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


@final
class MemStashStore(StashStore):
    """The stash in memory, for virtual-time runs: durable while the object lives
    (restart = a new `StashCatalog` on the same store). Each transaction costs one
    sample of a latency named for its shape, and commits at its end:
    `catalog.stash.txn.read` (a read: the meta, the state, the log, a
    snapshot), `catalog.stash.txn.write` (an append or a compaction) or
    `catalog.stash.txn.confirm` (the epoch check alone). A profile's
    `catalog.stash.txn` covers all three; the shapes exist because Materialize's
    stash made a different number of round trips for each (about 4, 8-9 and 3
    on CockroachDB in 2024: BEGIN and COMMIT each one, then the reads or the
    savepointed writes between them), which a slow backend multiplies
    (`sim/model/validate.py`'s `backend-round-trips`)."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self.upper = 0
        self.since = 0
        self.writers: dict[str, str] = {}  # writer -> token of its last append
        self.objects = CatalogState()
        self.log: list[CatalogUpdate] = []
        self.transactions = 0
        self._changed = anyio.Event()

    async def _txn(self, shape: Literal["read", "write", "confirm"]) -> None:
        await checkpoint()
        await self._rt.delay(f"catalog.stash.txn.{shape}")
        self.transactions += 1

    async def read_meta(self) -> tuple[int, int]:
        await self._txn("read")
        return self.upper, self.since

    async def read_state(self) -> tuple[int, CatalogState]:
        await self._txn("read")
        return self.upper, self.objects.copy()

    async def read_log(self, lo: int) -> tuple[int, list[CatalogUpdate]] | None:
        await self._txn("read")
        if lo - 1 < self.since:
            return None
        return self.upper, [u for u in self.log if u.ts >= lo]

    async def snapshot(self, ts: int) -> CatalogState | None:
        await self._txn("read")
        if ts < self.since:
            return None
        return consolidate_log(self.log, ts)

    async def append(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate],
        epoch: int | None, writer: str, token: str,
    ) -> AppendResult:
        await self._txn("write")
        if self.writers.get(writer) == token:
            return Appended(new_upper)
        if epoch is not None:
            current = epoch_of(self.objects.entries.get(("config", EPOCH_KEY)))
            if current != epoch:
                raise fenced(current, epoch)
        if self.upper != expected_upper:
            return Conflict(self.upper)
        work = self.objects.copy()
        work.apply(updates)
        self.objects = work
        self.log.extend(sorted(updates, key=lambda u: (u.ts, u.diff, u.kind, u.key)))
        self.upper = new_upper
        self.writers[writer] = token
        self._changed.set()
        self._changed = anyio.Event()
        return Appended(new_upper)

    async def confirm(self, epoch: int) -> None:
        await self._txn("confirm")
        current = epoch_of(self.objects.entries.get(("config", EPOCH_KEY)))
        if current != epoch:
            raise fenced(current, epoch)

    async def compact(self, since: int) -> None:
        await self._txn("write")
        if since <= self.since:
            return
        state = consolidate_log(self.log, since)
        self.log = [*state.as_updates(since), *(u for u in self.log if u.ts > since)]
        self.since = since

    async def wait_for_change(self, upper: int) -> None:
        if self.upper <= upper:
            await self._changed.wait()


def _check_ts(ts: int) -> None:
    if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
        raise InvalidUsage(f"catalog timestamps are ints >= 0, got {ts!r}")


@final
class StashCatalog(CachedCatalog):
    """The catalog on a `StashStore` (seed 004's `init_stash_catalog_state`). The
    caller owns the store."""

    def __init__(
        self, store: StashStore, rt: Runtime, *, oracle: TimestampOracle | None = None,
        retry: RetryPolicy = DEFAULT_RETRY, fencing: bool = True,
    ) -> None:
        super().__init__(rt, oracle, fencing=fencing)
        self.store = store
        self._retry = retry
        # Unique per process, not drawn from `rt.rng`: two processes seeded alike
        # must not share a writer id (each would take the other's appends for its
        # own retries).
        self._writer = uuid.uuid4().hex

    async def _call(self, op: Callable[[], Awaitable[T]]) -> T:
        """Every store call is idempotent (appends through their token): retry
        both error tiers until the policy's deadline."""
        return await retry_external(self._rt, op, idempotent=True, policy=self._retry)

    def __repr__(self) -> str:
        return f"StashCatalog({self.store!r}, {self._mode_name()}, upper {self._upper})"

    # --- primitives ----------------------------------------------------------------------

    async def _recent_upper(self) -> int:
        return (await self._call(self.store.read_meta))[0]

    async def _read_current(self) -> tuple[int, CatalogState]:
        return await self._call(self.store.read_state)

    async def _load(self) -> None:
        self._upper, self._cache = await self._call(self.store.read_state)

    async def _catch_up(self, target: int) -> None:
        while self._upper < target:
            got = await self._call(functools.partial(self.store.read_log, self._upper))
            if got is None:  # compacted past the cache: reload
                await self._load()
                continue
            upper, rows = got
            cache = self._cache.copy()  # all or nothing: a bad log leaves the cache intact
            cache.apply(rows)
            self._cache, self._upper = cache, upper

    async def _write(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate], epoch: int | None
    ) -> AppendResult:
        token = self._rt.unique_hex(64)
        return await self._call(
            lambda: self.store.append(expected_upper, new_upper, updates, epoch, self._writer, token)
        )

    async def _after_write(self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate]) -> None:
        # Committed against exactly the cached upper: the cache plus `updates`
        # is the durable state at `new_upper`.
        self._cache.apply(updates)
        self._upper = new_upper

    async def _confirm(self, epoch: int) -> None:
        await self._call(lambda: self.store.confirm(epoch))

    # --- the pTVC ------------------------------------------------------------------------

    async def since(self) -> int:
        return (await self._call(self.store.read_meta))[1]

    async def _wait_beyond(self, ts: int) -> None:
        _check_ts(ts)
        while True:
            upper, since = await self._call(self.store.read_meta)
            if ts < since:
                raise BelowSince(f"cannot read the catalog at {ts}: below its since {since}")
            if ts < upper:
                return
            await self.store.wait_for_change(upper)

    async def snapshot_at(self, ts: int) -> CatalogState:
        await self._wait_beyond(ts)
        state = await self._call(lambda: self.store.snapshot(ts))
        if state is None:
            raise BelowSince(f"cannot read the catalog at {ts}: compacted meanwhile")
        return state

    async def subscribe_at(self, ts: int) -> Subscription:
        snapshot = await self.snapshot_at(ts)
        return Subscription(ts, snapshot, self._events(ts + 1))

    async def _events(self, frontier: int) -> AsyncIterator[CatalogEvent]:
        while True:
            got = await self._call(functools.partial(self.store.read_log, frontier))
            if got is None:
                raise BelowSince(f"catalog subscription at {frontier}: the log was compacted past it")
            upper, rows = got
            if upper <= frontier:
                await self.store.wait_for_change(upper)
                continue
            for ts, group in groupby(rows, key=lambda u: u.ts):
                yield Changes(ts, tuple(sorted(group, key=lambda u: (u.diff, u.kind, u.key))))
            yield Progress(upper)
            frontier = upper

    async def downgrade_since(self, ts: int) -> None:
        _check_ts(ts)
        upper, since = await self._call(self.store.read_meta)
        if ts >= upper:
            raise InvalidUsage(f"since {ts} must be below the catalog's upper {upper}")
        if ts > since:
            await self._call(lambda: self.store.compact(ts))
