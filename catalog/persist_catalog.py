"""The durable catalog in one persist shard (seed 004's persist implementation).

Every entry is an update `(kind "\\n" key JSON, value JSON, ts, ±1)` of one shard.
The in-memory cache is kept current from a listen on the shard; writes are
`compare_and_append` at a commit timestamp against the cached upper. Fencing
needs no extra check in the write: `open` bumps the epoch with an append, which
moves the upper, so an older opener's next append finds a different upper,
syncs, sees the newer epoch and raises `Fenced` — having written nothing.
`confirm_leadership` is seed 004's linearized upper check (`fetch_recent_upper`
equals the cached upper), falling back to the epoch when the upper moved.
A handle whose lease expired (a step of the process's clock past persist's
lease) is reopened and the operation retried: persist refuses it with
`LeaseExpiredError` only when it did not take effect.
"""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING, final

from catalog.api import Appended, BelowSince, Changes, Conflict, Progress, Subscription
from catalog.base import CachedCatalog
from catalog.objects import CatalogState, CatalogUpdate
from persist.client import UpperMismatch
from persist.codec import Update
from persist.machine import LeaseExpiredError
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Sequence

    from catalog.api import AppendResult, CatalogEvent
    from oracle.api import TimestampOracle
    from persist.client import PersistClient, WriteHandle
    from persist.frontier import Frontier
    from persist.read import ListenBatch, ReadHandle
    from sim.runtime.core import Runtime

__all__ = ["PersistCatalog", "decode_update", "encode_update"]


def encode_update(u: CatalogUpdate) -> Update:
    return Update(f"{u.kind}\n{u.key}".encode(), u.value.encode(), u.ts, u.diff)


def decode_update(u: Update) -> CatalogUpdate:
    kind, sep, key = u.key.decode().partition("\n")
    if not sep:
        raise InvalidUsage(f"catalog shard holds a malformed key {u.key!r}")
    return CatalogUpdate(kind, key, u.value.decode(), u.ts, u.diff)


def _ts(f: Frontier) -> int:
    if f.ts is None:
        raise InvalidUsage("the catalog shard is closed (its upper is the empty frontier)")
    return f.ts


def _state(rows: Iterable[Update]) -> CatalogState:
    state = CatalogState()
    for u in rows:
        if u.diff != 1:
            raise InvalidUsage(f"catalog shard entry {u.key!r} has multiplicity {u.diff}")
        c = decode_update(u)
        state.entries[(c.kind, c.key)] = c.value
    return state


@final
class PersistCatalog(CachedCatalog):
    """The catalog in shard `shard_id` of a `PersistClient` (which the caller owns
    and keeps entered for the catalog's life). Open with `PersistCatalog.connect`."""

    def __init__(
        self, client: PersistClient, shard_id: str, write: WriteHandle, read: ReadHandle,
        rt: Runtime, oracle: TimestampOracle | None, *, fencing: bool = True,
    ) -> None:
        """Use `connect`."""
        super().__init__(rt, oracle, fencing=fencing)
        self._client = client
        self.shard_id = shard_id
        self._w = write
        self._r = read
        self._listen: AsyncIterator[ListenBatch] | None = None
        self._close_listen: object = None

    @classmethod
    async def connect(
        cls, client: PersistClient, rt: Runtime, *, shard_id: str = "catalog",
        oracle: TimestampOracle | None = None, fencing: bool = True,
    ) -> PersistCatalog:
        """seed 004's `init_persist_catalog_state`: a writer and a reader on the
        shard; nothing is read or written until an `open*`. `fencing=False`:
        the known-bad variant without the epoch check."""
        write, read = await client.open(shard_id)
        return cls(client, shard_id, write, read, rt, oracle, fencing=fencing)

    def __repr__(self) -> str:
        return f"PersistCatalog({self.shard_id!r}, {self._mode_name()}, upper {self._upper})"

    async def close(self) -> None:
        self._drop_listen()
        await self._w.expire()
        await self._r.expire()

    # --- primitives ----------------------------------------------------------------------

    async def _recent_upper(self) -> int:
        return _ts(await self._w.fetch_recent_upper())

    async def _read_current(self) -> tuple[int, CatalogState]:
        upper = await self._recent_upper()
        if upper == 0:
            return 0, CatalogState()
        return upper, _state(await self._snapshot(upper - 1))

    async def _snapshot(self, ts: int) -> list[Update]:
        while True:
            try:
                return await self._r.snapshot(ts)
            except LeaseExpiredError:
                await self._reopen_reader(ts)

    async def _reopen_reader(self, needed: int) -> None:
        """A new reader in place of the expired one, which must still read `needed`."""
        self._drop_listen()  # the old reader's listen ended with it
        self._r = await self._client.reopen_reader(self._r)
        if not self._r.since.less_equal(needed):
            raise LeaseExpiredError(
                f"the catalog's reader expired, and the shard was compacted to {self._r.since} meanwhile, "
                f"past {needed}"
            )

    def _drop_listen(self) -> None:
        close = self._close_listen
        self._listen = self._close_listen = None
        if callable(close):
            close()

    def _start_listen(self) -> None:
        self._drop_listen()
        listen = self._r.listen(self._upper - 1)
        self._listen, self._close_listen = aiter(listen), listen.close

    async def _load(self) -> None:
        upper, state = await self._read_current()
        self._cache, self._upper = state, upper
        if upper > 0:
            self._start_listen()
        else:
            self._drop_listen()

    async def _catch_up(self, target: int) -> None:
        while self._upper < target:
            if self._listen is None:
                await self._load()
                continue
            try:
                batch = await anext(self._listen)
            except StopAsyncIteration:  # the listen died (a cancelled reader): start over
                await self._load()
                continue
            except LeaseExpiredError:  # reopen the reader, then start over
                await self._reopen_reader(self._upper - 1)
                await self._load()
                continue
            if batch.updates:
                cache = self._cache.copy()  # all or nothing: a bad batch leaves the cache intact
                cache.apply(decode_update(u) for u in batch.updates)
                self._cache = cache
            self._upper = _ts(batch.progress)

    async def _write(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate], epoch: int | None
    ) -> AppendResult:
        # `epoch` needs no check here: the caller checked it on the cache at
        # `expected_upper`, and any newer epoch moved the upper (see module doc).
        rows = [encode_update(u) for u in updates]
        while True:
            try:
                result = await self._w.compare_and_append(rows, expected_upper, new_upper)
                break
            except LeaseExpiredError:  # not applied: retry on a new writer
                self._w = await self._client.reopen_writer(self._w)
        if isinstance(result, UpperMismatch):
            return Conflict(_ts(result.current))
        return Appended(new_upper)

    async def _after_write(self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate]) -> None:
        await self._catch_up(new_upper)

    async def _confirm(self, epoch: int) -> None:
        upper = await self._recent_upper()
        async with self._lock:
            if upper != self._upper:
                await self._catch_up(upper)
            self._check_epoch()

    # --- the pTVC ------------------------------------------------------------------------

    async def since(self) -> int:
        since = self._r.since.ts
        return 0 if since is None else since

    async def _check_since(self, ts: int) -> None:
        if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
            raise InvalidUsage(f"catalog timestamps are ints >= 0, got {ts!r}")
        since = await self.since()
        if ts < since:
            raise BelowSince(f"cannot read the catalog at {ts}: below its since {since}")

    async def snapshot_at(self, ts: int) -> CatalogState:
        await self._check_since(ts)
        return _state(await self._snapshot(ts))

    async def subscribe_at(self, ts: int) -> Subscription:
        await self._check_since(ts)
        # Its own reader: a subscription holds back only its own since.
        held = _Held(self._client, await self._client.open_reader(self.shard_id))
        try:
            while True:
                try:
                    snapshot = _state(await held.reader.snapshot(ts))
                    break
                except LeaseExpiredError:
                    await held.reopen(ts)
        except BaseException:
            await held.expire()
            raise
        return Subscription(ts, snapshot, _events(held, ts), held.expire)

    async def downgrade_since(self, ts: int) -> None:
        if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
            raise InvalidUsage(f"catalog timestamps are ints >= 0, got {ts!r}")
        if ts <= await self.since():
            return
        async with self._lock:
            if ts >= self._upper:
                await self._catch_up(await self._recent_upper())
            if ts >= self._upper:
                raise InvalidUsage(f"since {ts} must be below the catalog's upper {self._upper}")
            if self._listen is not None:
                self._start_listen()  # its progress is the cache's upper: > ts
            while True:
                try:
                    await self._r.downgrade_since(ts)
                    return
                except LeaseExpiredError:
                    await self._reopen_reader(self._upper - 1)
                    if self._listen is None and self._upper > 0:
                        self._start_listen()


@final
class _Held:
    """A catalog subscription's reader, reopened when its lease expires."""

    def __init__(self, client: PersistClient, reader: ReadHandle) -> None:
        self._client = client
        self.reader = reader

    async def reopen(self, needed: int) -> None:
        self.reader = await self._client.reopen_reader(self.reader)
        if not self.reader.since.less_equal(needed):
            raise LeaseExpiredError(
                f"a catalog subscription's reader expired, and the shard was compacted to {self.reader.since} "
                f"meanwhile, past {needed}"
            )

    async def expire(self) -> None:
        await self.reader.expire()


async def _events(held: _Held, as_of: int) -> AsyncIterator[CatalogEvent]:
    """The listen from `as_of` on; one cut short by the reader's lease
    expiring starts again, on a reopened reader, from its progress."""
    while True:
        try:
            async for batch in held.reader.listen(as_of):
                updates = sorted(
                    (decode_update(u) for u in batch.updates), key=lambda u: (u.ts, u.diff, u.kind, u.key)
                )
                for ts, group in groupby(updates, key=lambda u: u.ts):
                    yield Changes(ts, tuple(group))
                yield Progress(_ts(batch.progress))
                as_of = _ts(batch.progress) - 1
            return
        except LeaseExpiredError:
            await held.reopen(as_of)
