"""SUBSCRIBE: a table's contents at a timestamp `as_of`, then every later
committed change, in timestamp order, with progress — Materialize's
`SUBSCRIBE` on a table, and what a client holds while it streams.

**Where the changes come from.** In Materialize a subscription is a compute
dataflow (the table's persist source into a subscribe sink) on a cluster
replica, whose batches reach the client through the compute controller and
the coordinator. For a table that dataflow only reads the table's persist
shard: its snapshot at `as_of`, then a listen from `as_of` on. Here the
serving process reads the shard itself (`serve_subscription`), with a
`ReadHandle` of its own persist client; the replica hop is left out (a
replica crash does not touch a subscription). The handle's since is the
subscription's read hold: registered before `as_of` is chosen, so `as_of`
can never be compacted away, and moved up behind the listen's progress, so
the shard still compacts. The table's upper moves with every group commit
(each appends to every table, `controllers.storage`), so progress arrives at
least every `group_commit_interval_s`.

**Path** (`serve_subscription`, after the coordinator planned the statement
and took the table's `read_ts` as a peek does): 1. open a reader on the
table's shard; 2. `as_of` = the later of `read_ts` and the reader's since
(`AS OF n`: n, which must not be below the since); 3. strict serializable:
if above `read_ts`, wait for the oracle to reach it (`linearize`, as a peek
does), so no later statement gets an earlier timestamp; 4. `Started` — the
client's `async with` returns; 5. the snapshot at `as_of`: one batch
`[as_of, as_of + 1)`; 6. every listen batch `[lower, upper)`, its updates
consolidated and sorted by (time, row), `upper` its progress; 7. at `UP TO`
the stream ends (`Finished`); a dropped table ends it with 42P01; the
client's `close()` stops it. Items reach the client through the
coordinator's `Sink` in order: the decoupled adapter's cores
(`peek_finish + per_row` each), or the event loop, as a controller
response per batch (`SubscribeResponse`).

**Lease expiry.** The reader's lease runs on the serving process's clock:
a step of it past persist's lease expires the reader at the next state
transition. The reader is then reopened (`PersistClient.reopen_reader`: a
new id holding the since it held) and the snapshot, or the listen from its
progress on, read again: nothing is lost or repeated. Only if another
reader let the shard compact past that since meanwhile does the stream end
(XX000).

**Contract** (what `sim.history.checker.subscribe` proves of a recorded
stream): the batches tile `[as_of, upper)` without gap or overlap (each
`lower` is the previous `upper`; the first `lower` is `as_of`); every update
has `lower <= ts < upper` of its batch; the updates at `as_of` are the
table's contents then; every committed change at a time in `(as_of,
upper)` arrives exactly once, consolidated per (time, row).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Self, TypeAlias, final

import anyio

from catalog.objects import Table
from controllers.commands import table_shard_id
from controllers.transform import decode_row
from coordinator.statements import SqlError, SqlState
from persist.machine import LeaseExpiredError
from sim.runtime.errors import ExternalError, InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable
    from types import TracebackType

    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    from controllers.transform import Row
    from coordinator.planner import CatalogView
    from coordinator.statements import Subscribe
    from persist.client import PersistClient
    from persist.codec import Update
    from persist.read import ReadHandle

__all__ = [
    "Feed",
    "Finished",
    "Item",
    "Sink",
    "Started",
    "SubscribeBatch",
    "SubscribeResponse",
    "Subscription",
    "Subscriptions",
    "serve_subscription",
    "subscribe_table",
]

#: How far (in timestamps) a subscription's reader lets its since trail its
#: progress before moving it up: a CaS on the shard's state per move, so not
#: one per batch.
SINCE_STEP: Final = 250

#: One update as a subscriber receives it: (time, row, diff).
Change: TypeAlias = "tuple[int, Row, int]"


@final
@dataclass(frozen=True, slots=True)
class SubscribeBatch:
    """Every update at a time in `[lower, upper)`, sorted by (time, row) and
    consolidated (one entry per time and row, never a zero diff). `upper` is
    the progress: nothing more will arrive at a time below it."""

    lower: int
    upper: int
    updates: tuple[Change, ...]


@final
@dataclass(frozen=True, slots=True)
class Started:
    """The subscription's timestamps, chosen: the statement's reply."""

    as_of: int
    catalog_ts: int | None
    columns: tuple[str, ...]


@final
@dataclass(frozen=True, slots=True)
class Finished:
    """`UP TO` reached: the stream ends cleanly."""


#: What a producer hands its coordinator to forward, in order.
Item: TypeAlias = Started | SubscribeBatch | Finished | SqlError
#: How a coordinator forwards an item to the client (spending its cost).
Sink: TypeAlias = "Callable[[Item], Awaitable[None]]"


@final
@dataclass(frozen=True, slots=True)
class SubscribeResponse:
    """An item on its way to the client through an event loop, as a
    controller response: the loop spends its handling cost, then calls
    `deliver`."""

    item: Item
    deliver: Callable[[], None]

    @property
    def rows(self) -> int:
        return len(self.item.updates) if isinstance(self.item, SubscribeBatch) else 0


@final
class Feed:
    """The coordinator's end of one subscription: `put` items in order; the
    client's `Subscription` takes them. Items after a terminal one (an
    error, `Finished`) or after the client closed it are dropped. Batches,
    and `Finished`, may arrive before `Started` (an event loop confirms its
    leadership before it answers); an error before `Started` fails the
    start."""

    def __init__(self) -> None:
        send, receive = anyio.create_memory_object_stream[SubscribeBatch | Finished | SqlError](math.inf)
        self._send: MemoryObjectSendStream[SubscribeBatch | Finished | SqlError] = send
        self._receive: MemoryObjectReceiveStream[SubscribeBatch | Finished | SqlError] = receive
        self._started = anyio.Event()
        self.started: Started | None = None
        self.failed: SqlError | None = None
        #: A terminal item was put, or the client closed it.
        self.done = False
        #: The client closed it.
        self.closed = False
        self._scope: anyio.CancelScope | None = None
        self._on_done: list[Callable[[], None]] = []
        self._ended = False

    def put(self, item: Item) -> None:
        if isinstance(item, Started):
            # Even after the stream's end: an event loop answers only once
            # its leadership is confirmed, which may be after `Finished`.
            if self.started is None and self.failed is None and not self.closed:
                self.started = item
                self._started.set()
            return
        if self.done:
            return
        if isinstance(item, SqlError) and self.started is None:
            self.failed = item
            self._started.set()
            self._end()
            return
        self._send.send_nowait(item)
        if not isinstance(item, SubscribeBatch):
            self._end()

    def attach(self, scope: anyio.CancelScope) -> None:
        """The producer runs in `scope`: `close()` cancels it."""
        self._scope = scope
        if self.closed:
            scope.cancel()

    def when_done(self, callback: Callable[[], None]) -> None:
        """Calls `callback` once the stream ends or the client closes it."""
        if self._ended:
            callback()
        else:
            self._on_done.append(callback)

    def close(self) -> None:
        """The client hangs up: the producer stops, nothing more arrives."""
        self.closed = True
        if self._scope is not None:
            self._scope.cancel()
        self._receive.close()
        self._end()

    async def wait_started(self) -> None:
        await self._started.wait()

    async def receive(self) -> SubscribeBatch | Finished | SqlError:
        """The next item; `anyio.EndOfStream` once every item was taken, and
        `anyio.ClosedResourceError` after `close()`."""
        return await self._receive.receive()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = self.done = True
        self._send.close()
        callbacks, self._on_done = self._on_done, []
        for callback in callbacks:
            callback()


@final
class Subscription:
    """A SUBSCRIBE as its client holds it (`Session.subscribe`). Own it with
    `async with`, which returns once the subscription has its `as_of` (or
    raises its `SqlError`: unknown table, shutdown, …); iterate it for
    `SubscribeBatch`es — the first holds the snapshot at `as_of`, each later
    one the changes up to its `upper` (the progress). Iteration ends at `UP
    TO` or after `close()`, and raises the `SqlError` that ended the stream
    otherwise (42P01 when the table is dropped, 57P01 when the coordinator
    shuts down). Leaving the `async with` closes it.

    A session streaming a subscription runs nothing else meanwhile, as a
    PostgreSQL connection in COPY OUT mode does not."""

    def __init__(self, open_: Callable[[Feed], None] | None, *, refused: SqlError | None = None) -> None:
        self._open = open_
        self._refused = refused
        self._feed: Feed | None = None
        self.as_of: int | None = None
        self.catalog_ts: int | None = None
        self.columns: tuple[str, ...] = ()

    @classmethod
    def refusing(cls, error: SqlError) -> Subscription:
        """A subscription whose start fails with `error`."""
        return cls(None, refused=error)

    async def __aenter__(self) -> Self:
        if self._feed is not None:
            raise InvalidUsage("a Subscription is entered once")
        feed = self._feed = Feed()
        if self._open is None:
            feed.put(self._refused or SqlError(SqlState.INTERNAL, "no subscription"))
        else:
            self._open(feed)
        try:
            await feed.wait_started()
        except BaseException:
            feed.close()
            raise
        if feed.failed is not None:
            feed.close()
            raise feed.failed
        assert feed.started is not None
        self.as_of, self.catalog_ts, self.columns = feed.started.as_of, feed.started.catalog_ts, feed.started.columns
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stops the subscription (idempotent)."""
        if self._feed is not None:
            self._feed.close()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SubscribeBatch:
        feed = self._feed
        if feed is None or feed.started is None:
            raise InvalidUsage("enter a Subscription (`async with`) before iterating it")
        try:
            item = await feed.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            feed.close()
            raise StopAsyncIteration from None
        if isinstance(item, SubscribeBatch):
            return item
        feed.close()  # the stream's end: nothing more to hold
        if isinstance(item, Finished):
            raise StopAsyncIteration
        raise item


@final
class Subscriptions:
    """A coordinator's live subscriptions, so that shutting it down ends
    every one with an error (in insertion order: deterministic)."""

    def __init__(self) -> None:
        self._feeds: dict[Feed, None] = {}

    def add(self, feed: Feed) -> None:
        self._feeds[feed] = None
        feed.when_done(lambda: self._feeds.pop(feed, None))

    def __len__(self) -> int:
        return len(self._feeds)

    def shutdown(self, error: SqlError) -> None:
        for feed in list(self._feeds):
            feed.put(error)


def subscribe_table(view: CatalogView, stmt: Subscribe) -> Table:
    """The table `stmt` subscribes to; 42P01 if there is none, 0A000 for a
    view (a subscription to a view would need its dataflow's output, which
    the simulated replicas do not stream)."""
    rel = view.relation(stmt.table)
    if not isinstance(rel, Table):
        raise SqlError(
            SqlState.FEATURE_NOT_SUPPORTED, f"SUBSCRIBE to {stmt.table!r}: only tables can be subscribed to"
        )
    return rel


def shutdown_error() -> SqlError:
    return SqlError(SqlState.ADMIN_SHUTDOWN, "the coordinator shut down")


async def serve_subscription(
    feed: Feed,
    stmt: Subscribe,
    table: Table,
    *,
    persist: PersistClient,
    read_ts: int,
    catalog_ts: int | None,
    linearize: Callable[[int], Awaitable[None]],
    sink: Sink,
) -> None:
    """Streams `stmt` on `table` into `sink` until it ends, fails, or the
    client closes `feed` (see the module docstring's path). Client-visible
    failures end the stream as an `SqlError` item; cancellation by the
    coordinator's shutdown ends it with 57P01.

    Args:
        read_ts: the table timeline's `read_ts`, taken after the statement
            began (the strict-serializable lower bound of `as_of`).
        linearize: returns once the oracle's `read_ts` is at least its
            argument.
    """
    with anyio.CancelScope() as scope:
        feed.attach(scope)
        try:
            await _stream(stmt, table, persist, read_ts, catalog_ts, linearize, sink)
        except SqlError as exc:
            await sink(exc)
        except ExternalError as exc:
            await sink(SqlError(SqlState.SERIALIZATION_FAILURE, f"SUBSCRIBE to {stmt.table!r}: {exc}"))
        except LeaseExpiredError as exc:
            await sink(SqlError(SqlState.INTERNAL, f"SUBSCRIBE to {stmt.table!r}: {exc}"))
        except anyio.get_cancelled_exc_class():
            # The coordinator is shutting down (the client's close cancels
            # `scope`, which ends here without an exception).
            feed.put(shutdown_error())
            raise


async def _stream(
    stmt: Subscribe,
    table: Table,
    persist: PersistClient,
    read_ts: int,
    catalog_ts: int | None,
    linearize: Callable[[int], Awaitable[None]],
    sink: Sink,
) -> None:
    dropped = SqlError(SqlState.UNDEFINED_TABLE, f"SUBSCRIBE to {stmt.table!r} ended: the table was dropped")
    try:
        reader = _Reader(persist, await persist.open_reader(table_shard_id(table.id)), dropped)
    except InvalidUsage as exc:  # the shard is tombstoned: dropped, and collected
        raise dropped from exc
    try:
        since = reader.handle.since.ts
        if since is None:
            raise dropped
        if stmt.as_of is None:
            as_of = max(read_ts, since)
        elif stmt.as_of < since:
            raise SqlError(
                SqlState.INVALID_PARAMETER_VALUE,
                f"AS OF {stmt.as_of} is not valid for {stmt.table!r}: compacted up to its since {since}",
            )
        else:
            as_of = stmt.as_of
        up_to = stmt.up_to
        if up_to is not None and up_to < as_of:
            raise SqlError(SqlState.INVALID_PARAMETER_VALUE, f"UP TO {up_to} is before AS OF {as_of}")
        if stmt.as_of is None:
            await linearize(as_of)
        await sink(Started(as_of, catalog_ts, tuple(c.name for c in table.columns)))
        if up_to == as_of:
            await sink(Finished())
            return
        snapshot = await reader.snapshot(as_of)
        updates = tuple((as_of, decode_row(u.key), u.diff) for u in snapshot) if stmt.snapshot else ()
        await sink(SubscribeBatch(as_of, as_of + 1, updates))
        if up_to == as_of + 1:
            await sink(Finished())
            return
        await _follow(stmt, reader, as_of, up_to, sink, dropped)
    finally:
        with anyio.CancelScope(shield=True), contextlib.suppress(ExternalError, LeaseExpiredError):
            await reader.handle.expire()


@final
class _Reader:
    """The subscription's read handle, reopened when its lease expires."""

    def __init__(self, persist: PersistClient, handle: ReadHandle, dropped: SqlError) -> None:
        self._persist = persist
        self.handle = handle
        self._dropped = dropped

    async def reopen(self, needed: int) -> ReadHandle:
        """A new handle in place of the expired one, which must still read
        times from `needed` on (its since at or below `needed`)."""
        try:
            self.handle = await self._persist.reopen_reader(self.handle)
        except InvalidUsage as exc:  # tombstoned meanwhile: dropped, and collected
            raise self._dropped from exc
        since = self.handle.since
        if not since.less_equal(needed):
            raise LeaseExpiredError(
                f"the reader of shard {self.handle.shard_id} expired, and the shard was compacted to {since} "
                f"meanwhile, past {needed}"
            )
        return self.handle

    async def snapshot(self, as_of: int) -> list[Update]:
        while True:
            try:
                return await self.handle.snapshot(as_of)
            except LeaseExpiredError:
                await self.reopen(as_of)


async def _follow(
    stmt: Subscribe, reader: _Reader, as_of: int, up_to: int | None, sink: Sink, dropped: SqlError
) -> None:
    """The listen from `as_of` on, batch by batch (steps 6 and 7); a listen
    cut short by the reader's lease expiring is started again, on a reopened
    reader, from the progress it had handed out."""
    lower = as_of + 1
    progress = as_of + 1  # every update before it was taken from a listen
    while True:
        batches = aiter(reader.handle.listen(progress - 1))
        try:
            async for batch in batches:
                upper = batch.progress.ts
                updates = _consolidated(batch.updates, up_to)
                if upper is None:  # the shard was finalized: the table is gone
                    if updates:
                        await sink(SubscribeBatch(lower, updates[-1][0] + 1, updates))
                    raise dropped
                progress = upper
                done = up_to is not None and upper >= up_to
                if done:
                    assert up_to is not None
                    upper = up_to
                if updates or stmt.progress or done:
                    await sink(SubscribeBatch(lower, upper, updates))
                    lower = upper
                if done:
                    await sink(Finished())
                    return
                since = reader.handle.since.ts
                if since is not None and upper - 1 - since >= SINCE_STEP:
                    await reader.handle.downgrade_since(upper - 1)
        except LeaseExpiredError:
            await reader.reopen(progress - 1)
            continue
        finally:
            # Closed now, not whenever the garbage collector gets to it (which
            # would put its cleanup at an arbitrary point of the schedule).
            aclose = getattr(batches, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()
        return  # the listen ended (it only does at the empty upper, handled above)


def _consolidated(updates: Iterable[Update], up_to: int | None) -> tuple[Change, ...]:
    """`updates` summed per (time, row), zeros dropped, sorted by (time, row
    encoding); those at or beyond `up_to` left out."""
    acc: dict[tuple[int, bytes], int] = {}
    for u in updates:
        if up_to is None or u.ts < up_to:
            key = (u.ts, u.key)
            acc[key] = acc.get(key, 0) + u.diff
    return tuple((ts, decode_row(key), diff) for (ts, key), diff in sorted(acc.items()) if diff)
