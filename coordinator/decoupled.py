"""The decoupled adapter of seed 001 (platform v2): no event loop; every client
connection is its own task, and components coordinate only through timestamps —
the oracle (one timeline for tables, one for the catalog), the catalog as a pTVC,
and controllers that learn the catalog from a subscription.

Tasks: one per connection (the caller's), one command task per controller
(subscribe to the catalog, derive commands, forward them in order, advance the
catalog frontier), one group-commit task, and the peek-batching worker inside
`BatchingOracle`. CPU work runs on a pool of `cores` modeled cores.

Paths:

- **DDL**: 1. plan against the cached catalog; 2. `commit_transaction`:
  `write_ts("catalog")`, `compare_and_append` at it, `apply_write("catalog")`;
  3. on a conflict (another writer got there first) the cache is already
  refreshed: re-plan and retry; 4. with `ddl_round_trips`, the builtin-table
  write (`coordinator.environment.write_builtin_tables`); 5. reply — never
  waiting for controllers, which learn the change from their subscriptions.
- **Query or write, first**: 1. the catalog `read_ts` (batched); 2. a catalog
  snapshot at or beyond it (sync the cache if it is behind); 3. plan against it;
  ephemeral commands carry that `catalog_ts`, so a controller acts on them only
  once its catalog frontier has passed it.
- **Peek**: 1. + the table `read_ts` (batched, concurrently with the catalog's);
  2. the timestamp: the later of `read_ts` and the collection's since, held in
  the same step (see `peeks.py`); 3. `Peek(as_of=ts, catalog_ts)` to compute;
  4. wait for that peek's response, release the hold; 5. if ts was above
  `read_ts`, wait for the oracle to reach it (linearize); 6. reply — no
  `confirm_leadership()`.
- **Insert**: 1. join the pending writes; 2. the group-commit task takes all
  of them (at most one commit in flight, so a batch is what arrived during the
  previous commit; `after-draining` first lets every ready statement queue its
  write): `write_ts`, the append to every table, `apply_write`; 3. reply. A
  periodic commit advances idle tables.
- **Update/Delete**: under the global write lock: a peek at a linearized
  `read_ts`, then the diffs through group commit.
- **Subscribe**: in a task of the coordinator's: 1. the table and catalog
  `read_ts` and the plan, as a peek's; 2. wait for storage's catalog
  frontier to pass `catalog_ts`; 3. `serve_subscription`
  (`coordinator.subscribe`): `as_of` at or above `read_ts`, the snapshot,
  then the listen, each batch forwarded on this adapter's cores.

With `adapters > 1` (issue 36) a `coordinator.adapters.MultiAdapterCoordinator`
runs several of these on one deployment: each is then given an
`AdapterHost` (`coordinator.adapter_host`), which opens its incarnation (its
own oracle clients and catalog handle, the shared controllers), routes the
shared compute controller's responses and runs the controllers' command tasks
(`coordinator.follow_catalog`) once for all; its group commit then retries a
lost append race at a fresh `write_ts`.

Known-bad variants (issue 21's matrix) switch one of these rules off:
`no_write_lock`, `unbounded_group_commits` (a commit task per batch),
`blind_catalog_append` (DDL without its compare-and-append) and
`coordinator_joins_read_ts` (a statement shares a read_ts already in flight);
and across adapters (issue 36) `stale_adapter_catalog` (plans on the
adapter's cache without syncing it up to the catalog `read_ts`) and
`ack_lost_race` (group commit acknowledges writes that lost the append race).
"""

from __future__ import annotations

import contextlib
import itertools
from typing import TYPE_CHECKING, Self, final

import anyio

from catalog.api import Conflict
from controllers.commands import Peek
from controllers.compute import PeekWaiters
from coordinator.config import GroupCommitPolicy
from coordinator.environment import write_builtin_tables
from coordinator.follow_catalog import follow_catalog
from coordinator.group_commit import PendingWrite, group_commit
from coordinator.peeks import (
    MAX_PEEK_ATTEMPTS,
    below_since,
    choose_timestamp,
    constant_result,
    linearize,
    peek_result,
    shared_read_ts,
)
from coordinator.planner import DDL, CatalogView, PeekPlan, apply_ddl
from coordinator.running import RunningCoordinator
from coordinator.session import Result
from coordinator.statements import (
    Delete,
    Insert,
    Select,
    SelectConstant,
    SqlError,
    SqlState,
    Update,
)
from coordinator.subscribe import SubscribeBatch, serve_subscription, subscribe_table
from sim.runtime.errors import ExternalError, Fenced
from sim.runtime.tasks import AsyncExitStack, concurrently

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator
    from contextlib import AbstractAsyncContextManager

    from anyio.abc import TaskGroup

    from catalog.api import AppendResult
    from catalog.transaction import Transaction
    from controllers.commands import ComputeResponse, DeterministicCommand
    from coordinator.adapter_host import AdapterHost
    from coordinator.config import CoordinatorConfig
    from coordinator.environment import Environment
    from coordinator.events import EventSink
    from coordinator.session import Session
    from coordinator.statements import Statement, Subscribe
    from coordinator.subscribe import Feed, Item
    from oracle.gated import ProcessGate
    from sim.runtime.core import Runtime

__all__ = ["DecoupledCoordinator"]

#: DDL retries on catalog conflicts before giving up with 40001.
MAX_DDL_ATTEMPTS = 64


@final
class DecoupledCoordinator(RunningCoordinator):
    """See the module docstring. Own it with `async with`.

    Args:
        host: run as one adapter of several (`coordinator.adapters`); None:
            the deployment's only adapter, which opens everything itself.
        gate: one adapter of several: its process's pause and partition
            switches (a nemesis's; `oracle.gated`). A paused adapter also
            starts no modeled CPU work.
    """

    def __init__(
        self,
        config: CoordinatorConfig,
        env: Environment,
        rt: Runtime,
        *,
        events: EventSink | None = None,
        actor: str = "coordinator",
        host: AdapterHost | None = None,
        gate: ProcessGate | None = None,
    ) -> None:
        super().__init__(config, env, rt, cores=config.cores, events=events, actor=actor)
        self._host = host
        self._gate = gate
        self._waiters = PeekWaiters() if host is None else host.waiters
        self._peek_ids: Iterator[int] = itertools.count(1) if host is None else host.peek_ids
        self._pending: list[PendingWrite] = []
        self._gc_wake = anyio.Event()
        self._write_lock: AbstractAsyncContextManager[object] = anyio.Lock() if host is None else host.write_lock
        bad = config.known_bad
        self._table_read_ts = shared_read_ts(bad.coordinator_joins_read_ts)
        self._catalog_read_ts = shared_read_ts(bad.coordinator_joins_read_ts)
        #: Statements in flight (insertion-ordered: shutdown cancels them in order).
        self._statements: dict[anyio.CancelScope, None] = {}
        self._running = 0

    # --- lifecycle -------------------------------------------------------------------

    #: The command tasks derive the controllers' commands from a subscription.
    _DERIVE_COMMANDS = False

    async def __aenter__(self) -> Self:
        if self._host is None:
            return await super().__aenter__()
        # One adapter of several: the host opens what it runs on; the rest of
        # the lifecycle (`__aexit__`, the hooks) is `RunningCoordinator`'s.
        async with AsyncExitStack() as stack:
            self._inc = await stack.enter_async_context(
                self._host.open_adapter(self._rt, self.actor, self._gate)
            )
            stack.callback(self._stopped)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)
            await self._start(self._tg)
            self._stack = stack.pop_all()
        return self

    async def _start(self, tg: TaskGroup) -> None:
        """Starts the command tasks and group commit; returns once both
        controllers have caught up with the catalog. (One adapter of several
        starts its group commit only: its host runs the command tasks.)"""
        if self._host is not None:
            tg.start_soon(self._group_commit_task)
            return
        inc = self.incarnation
        storage_ready, compute_ready = anyio.Event(), anyio.Event()

        async def to_compute(cmd: DeterministicCommand) -> None:
            inc.compute.send(cmd)

        tg.start_soon(self._command_task, inc.storage.apply, storage_ready)
        tg.start_soon(self._command_task, to_compute, compute_ready)
        tg.start_soon(self._group_commit_task)
        await storage_ready.wait()
        await compute_ready.wait()

    def _on_response(self, response: ComputeResponse) -> None:
        self._waiters(response)

    def _stopping(self) -> None:
        # Statements in flight run in their callers' tasks: cancel them first, so
        # each answers (57P01, or 08007 if it may have taken effect) before the
        # components it waits on close under it.
        for scope in list(self._statements):
            scope.cancel()
        shutdown = SqlError(SqlState.ADMIN_SHUTDOWN, "the coordinator shut down")
        for w in self._pending:
            w.resolve(None, shutdown)

    # --- the controllers' command tasks ----------------------------------------------

    async def _command_task(
        self, apply: Callable[[DeterministicCommand], Awaitable[None]], ready: anyio.Event
    ) -> None:
        """`follow_catalog` for one of this coordinator's controllers."""
        await follow_catalog(self.incarnation, self._rt, apply, ready)

    def _cpu(self, seconds: float) -> Awaitable[None]:
        # A paused process (a nemesis's stop-the-world pause) starts no work
        # until it resumes; work already on a core finishes.
        if self._gate is not None and self._gate.paused and seconds > 0:
            return self._cpu_after_pause(seconds)
        return super()._cpu(seconds)

    async def _cpu_after_pause(self, seconds: float) -> None:
        assert self._gate is not None
        await self._gate.wait_running()
        await super()._cpu(seconds)

    # --- the client API --------------------------------------------------------------

    async def _serve(self, session: Session, statement: Statement) -> Result:
        self._counts["statements"] += 1
        with anyio.CancelScope() as scope:
            self._statements[scope] = None
            try:
                if self._handler_cpu is None:
                    return await self._execute(statement)
                kind = "ddl" if isinstance(statement, DDL) else type(statement).__name__
                return await self._timed(f"statement.{kind}", self._execute(statement))
            finally:
                del self._statements[scope]
        # Cancelled by shutdown: a read certainly did nothing; a write or DDL
        # may have been applied.
        if isinstance(statement, Select | SelectConstant):
            return Result.failed(SqlError(SqlState.ADMIN_SHUTDOWN, "the coordinator shut down"))
        return Result.failed(
            SqlError(SqlState.INDETERMINATE, "the coordinator shut down mid-statement")
        )

    async def _execute(self, statement: Statement) -> Result:
        await self._cpu(self.config.costs.parse_plan)
        try:
            if isinstance(statement, DDL):
                return await self._ddl(statement)
            if isinstance(statement, Select):
                return await self._select(statement)
            if isinstance(statement, SelectConstant):
                await self._cpu(self.config.costs.per_row)
                return constant_result(statement)
            if isinstance(statement, Insert):
                return await self._insert(statement)
            if isinstance(statement, Update | Delete):
                return await self._read_then_write(statement)
            raise SqlError(
                SqlState.FEATURE_NOT_SUPPORTED, f"{type(statement).__name__} is not supported"
            )
        except SqlError as exc:
            return Result.failed(exc)
        except Fenced as exc:
            return Result.failed(self._fence(exc))

    async def _catalog_at_read_ts(self) -> tuple[int, CatalogView]:
        """The catalog `read_ts` and a snapshot at or beyond it."""
        inc = self.incarnation
        try:
            catalog_ts = await self._catalog_read_ts(inc.catalog_oracle)
        except ExternalError as exc:
            raise SqlError(SqlState.SERIALIZATION_FAILURE, f"catalog read_ts: {exc}") from exc
        # Known-bad `stale_adapter_catalog`: plan on whatever this adapter's
        # cache holds, though the statement is stamped with `catalog_ts`.
        if inc.catalog.cached_upper <= catalog_ts and not self.config.known_bad.stale_adapter_catalog:
            try:
                await inc.catalog.sync()
            except ExternalError as exc:
                raise SqlError(SqlState.SERIALIZATION_FAILURE, f"catalog sync: {exc}") from exc
        view_ts = self._catalog_ts()
        if view_ts > catalog_ts and not self.config.known_bad.stale_adapter_catalog:
            # The snapshot is beyond read_ts: it holds a durable catalog write
            # the oracle has not applied yet (its DDL is between its append
            # and its apply_write, or its adapter crashed there). The
            # statement plans on that state, so it carries that catalog_ts,
            # and applies the write itself (durable, and apply_write is a
            # high-water mark) so that no later read_ts falls below it.
            # Found by the adapter-crash fault: stamped with the older
            # read_ts, a statement that saw a new table looked older than
            # one that had not (not-strict-serializable on the catalog).
            try:
                await inc.catalog_oracle.apply_write(view_ts)
            except ExternalError as exc:
                raise SqlError(SqlState.SERIALIZATION_FAILURE, f"catalog apply_write: {exc}") from exc
            catalog_ts = view_ts
        return catalog_ts, self._catalog_view()

    async def _timestamps(self) -> tuple[int, int, CatalogView]:
        """(table read_ts, catalog_ts, catalog snapshot), the two oracle calls
        pipelined (seed 000: separate oracles, requested concurrently)."""

        async def table_ts() -> int:
            try:
                return await self._table_read_ts(self.incarnation.oracle)
            except ExternalError as exc:
                raise SqlError(SqlState.SERIALIZATION_FAILURE, f"read_ts: {exc}") from exc

        read_ts, (catalog_ts, view) = await concurrently(table_ts, self._catalog_at_read_ts)
        return read_ts, catalog_ts, view

    # --- DDL ---------------------------------------------------------------------------

    async def _ddl(self, stmt: Statement) -> Result:
        self._counts["ddl"] += 1
        inc = self.incarnation
        for _ in range(MAX_DDL_ATTEMPTS):
            costs = self.config.costs
            await self._cpu(costs.ddl_sequence + costs.ddl_per_entry * len(inc.catalog.state().entries))
            tx = inc.catalog.transaction()
            try:
                apply_ddl(tx, CatalogView(tx.state), stmt)
            except SqlError:
                if await self._catalog_moved():
                    continue
                raise
            if tx.is_empty():
                if await self._catalog_moved():
                    continue
                return Result(catalog_ts=self._catalog_ts())
            start = self._rt.now()
            try:
                if self.config.known_bad.blind_catalog_append:
                    result = await self._blind_append(tx)
                else:
                    result = await inc.catalog.commit_transaction(tx)
            except ExternalError as exc:
                raise SqlError(SqlState.INDETERMINATE, f"catalog append: {exc}") from exc
            if not isinstance(result, Conflict):
                ts = result.upper - 1
                inc.emit("catalog-append", "catalog", start, timeline=self._catalog_timeline, ts=ts)
                if self.config.ddl_round_trips:
                    await write_builtin_tables(inc)
                return Result(catalog_ts=ts)
            inc.emit("catalog-append", "catalog", start, ok=False, timeline=self._catalog_timeline)
            self._counts["conflicts"] += 1
        raise SqlError(SqlState.SERIALIZATION_FAILURE, f"DDL conflicted {MAX_DDL_ATTEMPTS} times")

    async def _catalog_moved(self) -> bool:
        """One adapter of several: whether the durable catalog moved past this
        adapter's cache (now synced to it). A DDL planned on a stale cache
        may fail, or be a no-op, only because another adapter's DDL is not
        in the cache yet: it must be planned again, not answered (a DDL
        acknowledged elsewhere before this one started must be seen). The
        only adapter's cache is never behind (False, no round trip)."""
        if self._host is None:
            return False
        catalog = self.incarnation.catalog
        before = catalog.cached_upper
        try:
            return await catalog.sync() > before
        except ExternalError as exc:
            raise SqlError(SqlState.SERIALIZATION_FAILURE, f"catalog sync: {exc}") from exc

    async def _blind_append(self, tx: Transaction) -> AppendResult:
        """Known-bad `blind_catalog_append`: writes the catalog `tx` planned as
        a change from whatever the catalog is now (last writer wins), instead
        of a compare-and-append at the upper it was planned at — so a DDL that
        committed in between is silently undone. (The store's own upper check
        still orders the bytes; only the expectation about the plan is gone.)"""
        inc = self.incarnation
        result: AppendResult = Conflict(inc.catalog.cached_upper)
        for _ in range(MAX_DDL_ATTEMPTS):
            await inc.catalog.sync()
            blind = inc.catalog.transaction()
            blind.overwrite(tx.state)
            result = await inc.catalog.commit_transaction(blind)
            if not isinstance(result, Conflict):
                break
        return result

    # --- peeks ---------------------------------------------------------------------------

    async def _select(self, stmt: Select) -> Result:
        self._counts["peeks"] += 1
        read_ts, catalog_ts, view = await self._timestamps()
        plan = view.plan_select(stmt)
        return await self._peek(plan, read_ts, catalog_ts)

    async def _peek(self, plan: PeekPlan, read_ts: int, catalog_ts: int) -> Result:
        costs = self.config.costs
        inc = self.incarnation
        await self._cpu(costs.peek_sequence)
        # Storage must know the catalog as of catalog_ts to hold the table.
        await inc.storage.wait_catalog_frontier(catalog_ts)
        at_least = 0
        for _ in range(MAX_PEEK_ATTEMPTS):
            chosen, hold = choose_timestamp(
                inc.storage, inc.compute, plan, read_ts, at_least=at_least,
                hold=not self.config.known_bad.peeks_skip_read_holds,
            )
            try:
                peek_id = next(self._peek_ids)
                inc.compute.send(
                    Peek(peek_id, plan.collection_id, plan.cluster_id, chosen, catalog_ts, plan.transform)
                )
                response = await self._waiters.wait(peek_id)
            finally:
                if hold is not None:
                    hold.release()
            since = below_since(response)
            if since is None:
                break
            at_least = since
        await linearize(inc.oracle, self._rt, chosen, read_ts)
        read_ts = chosen
        result = peek_result(plan, response, read_ts=read_ts, catalog_ts=catalog_ts)
        await self._cpu(costs.peek_finish + costs.per_row * len(result.rows))
        return result

    # --- subscriptions ---------------------------------------------------------------------

    def _start_subscription(self, session: Session, statement: Subscribe, feed: Feed) -> None:
        assert self._tg is not None
        self._tg.start_soon(self._subscription, statement, feed)

    async def _subscription(self, stmt: Subscribe, feed: Feed) -> None:
        """The Subscribe path of the module docstring."""
        inc = self.incarnation
        costs = self.config.costs
        try:
            await self._cpu(costs.parse_plan)
            read_ts, catalog_ts, view = await self._timestamps()
            table = subscribe_table(view, stmt)
            await self._cpu(costs.peek_sequence)
            await inc.storage.wait_catalog_frontier(catalog_ts)
        except SqlError as exc:
            feed.put(exc)
            return
        except Fenced as exc:
            feed.put(self._fence(exc))
            return

        async def linearized(ts: int) -> None:
            try:
                await linearize(inc.oracle, self._rt, ts, read_ts)
            except Fenced as exc:
                raise self._fence(exc) from exc

        async def forward(item: Item) -> None:
            if isinstance(item, SubscribeBatch):
                await self._cpu(costs.peek_finish + costs.per_row * len(item.updates))
            feed.put(item)

        await serve_subscription(
            feed, stmt, table, persist=inc.persist, read_ts=read_ts, catalog_ts=catalog_ts,
            linearize=linearized, sink=forward,
        )

    # --- writes -------------------------------------------------------------------------

    async def _insert(self, stmt: Insert) -> Result:
        self._counts["writes"] += 1
        catalog_ts, view = await self._catalog_at_read_ts()
        write = view.plan_insert(stmt)
        costs = self.config.costs
        await self._cpu(costs.write_sequence + costs.per_row * len(write.updates))
        pending = PendingWrite(write.table_id, write.updates, catalog_ts)
        await self._commit(pending)
        return pending.result(len(write.updates))

    async def _commit(self, pending: PendingWrite) -> None:
        self._pending.append(pending)
        self._gc_wake.set()
        await pending.done.wait()

    async def _read_then_write(self, stmt: Update | Delete) -> Result:
        self._counts["writes"] += 1
        bad = self.config.known_bad.no_write_lock
        async with contextlib.nullcontext() if bad else self._write_lock:
            read_ts, catalog_ts, view = await self._timestamps()
            rtw = view.plan_read_then_write(stmt)
            read = await self._peek(rtw.read, read_ts, catalog_ts)
            if not read.ok:
                return read
            diffs = rtw.diffs(read.rows)
            if not diffs:
                return Result(rows_affected=0, read_ts=read_ts, catalog_ts=catalog_ts)
            costs = self.config.costs
            await self._cpu(costs.write_sequence + costs.per_row * len(diffs))
            pending = PendingWrite(rtw.table_id, diffs, catalog_ts)
            await self._commit(pending)
        return pending.result(len(read.rows), read_ts=read_ts)

    async def _group_commit_task(self) -> None:
        """Commits pending writes (at most one commit in flight); every
        `group_commit_interval_s` without writes, an empty commit advances idle
        tables."""
        bad = self.config.known_bad
        while True:
            if not self._pending:
                with anyio.move_on_after(self.config.group_commit_interval_s):
                    await self._gc_wake.wait()
                self._gc_wake = anyio.Event()
            if self.config.group_commit is GroupCommitPolicy.AFTER_DRAINING:
                # No loop to drain: let every statement that is ready to queue
                # its write do so first (one scheduling turn, no modeled time).
                await anyio.lowlevel.checkpoint()
            # Every pending write: how many there are is an outcome (those
            # that arrived while the previous commit was in flight).
            batch, self._pending = self._pending, []
            await self._cpu(
                self.config.costs.group_commit
                + self.config.costs.per_row * sum(len(w.updates) for w in batch)
            )
            # What started it, for its event: the tick when it carries nothing.
            policy = self.config.group_commit
            trigger = "tick" if not batch else "drain" if policy is GroupCommitPolicy.AFTER_DRAINING else "write"
            if bad.unbounded_group_commits:
                # Known-bad: the next batch does not wait for this commit.
                assert self._tg is not None
                self._tg.start_soon(self._commit_batch, batch, trigger)
            else:
                await self._timed("group_commit", self._commit_batch(batch, trigger))

    async def _commit_batch(self, batch: list[PendingWrite], trigger: str) -> None:
        await group_commit(
            self.incarnation,
            batch,
            apply_write_before_append=self.config.known_bad.apply_write_before_append,
            stats=self._gc_stats,
            # Other adapters append to the same shards: losing a race is
            # expected, not a fence (see `coordinator.adapters`).
            retry_lost_races=self._host is not None,
            ack_lost_races=self.config.known_bad.ack_lost_race,
            trigger=trigger,
        )
        if any(w.error is not None and w.error.code is SqlState.ADMIN_SHUTDOWN for w in batch):
            self._fence(RuntimeError("a table append was fenced"))
