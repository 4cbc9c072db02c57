"""Today's Coordinator: one loop task that owns all coordinator state and works
off messages in strict priority — internal commands, then controller responses,
then client commands (up to `max_batch` per wake, cut short as soon as a handler
posts an internal message) — on one modeled core. Taking a message off a queue
costs `loop_dispatch`; `loop_messages` counts them.

Every handler spends modeled CPU on the loop's single core, and every `await`
inside a handler blocks the loop: that is the point of the model (seed 001).

Paths (seed 000, seed 001, DESIGN.md §6):

- **DDL**: 1. plan against the catalog; 2. with `ddl_round_trips`, a CREATE's
  id allocation (an oracle `write_ts`, then a catalog transaction of its own)
  and the statement's `write_ts`, on the loop; 3. the catalog transaction (the
  stash by default) on the loop; 4. derive the deterministic controller
  commands and apply them (storage's set-up of a new table's shard is awaited
  on the loop, as Materialize's `create_collections`), advancing the
  controllers' catalog frontier; 5. reply.
- **Peek, oracle calls on the loop** (`event-loop`): 1. `read_ts()` in the handler;
  2. the timestamp: the later of it and the collection's since, held in the
  same step (see `peeks.py`); `Peek` to the compute controller; 3. the
  response arrives as a controller message (a timestamp above `read_ts` first
  waits off the loop for the oracle to reach it) and is buffered; 4. once no
  controller message is waiting, one `confirm_leadership()` (a durable timestamp-store transaction, on the loop) for the
  whole buffer; 5. reply to every buffered peek. A statement that finds its
  table unknown is answered through the same buffer: that answer read the
  in-memory catalog, which is current only while this coordinator leads.
- **Peek, oracle calls off the loop** (`event-loop+pg-oracle`): 1. the peek
  waits off the loop for `read_ts()` (batched by `BatchingOracle` when
  `batch_read_ts`); 2. an internal message brings the timestamp back; 3. `Peek` to compute; 4. reply on the response —
  no `confirm_leadership()` (seed 000's end state; `confirm_leadership=True`
  keeps the check, through the catalog's epoch, as its rollout did — without
  it a deposed coordinator serves reads from a stale catalog, see
  tests/sim/nemesis/test_findings.py).
- **Insert**: 1. the write joins the pending writes and posts the
  group-commit trigger, an internal message — at once (`immediate`) or once
  no client message is queued (`after-draining`, the fix seed 000's rollout
  needed); 2. the trigger, run before any further client message, starts a
  commit of *every* pending write unless `commits_in_flight` are in flight
  (1 by default; no bound in today's loop, which so starts one commit per
  write), so how many writes a commit takes is an outcome of the loop; 3. the
  oracle's calls in the era's places (`OracleCalls`, after PR #37363): on the
  loop, `peek_write_ts` and `write_ts` awaited in the trigger's handler, the
  append and `apply_write` in a task, `read_ts` awaited in the completion's
  handler (3 of 4 calls on the loop); off the loop, all but the completion in
  one task; 4. an internal message replies to its writers and triggers again
  for writes that arrived meanwhile. A periodic group commit (every
  `group_commit_interval_s`, whatever the load) advances idle tables.
- **Constant query** (`SELECT 1`): answered on the loop (the fast path), once
  the optimizer stage is back when staged.

**Messages per statement** (`PeekStages`, from "A Small Coordinator"): staged,
every statement is also a `catalog_snapshot` message before its execute and a
`commit` message after it, and a peek's two off-loop stages (optimizer,
timestamp) each post a `peek_stage_ready`: six messages per SELECT, four per
`SELECT 1`. Combined (the loop as seed 000 describes it): execute, the
timestamp message when read_ts runs off the loop, and the response.
- **Subscribe**: a client message: 1. plan on the loop; 2. `read_ts` as a
  peek's (on the loop, or off it with the oracle's calls off the loop);
  3. a task runs `serve_subscription` (`coordinator.subscribe`); each item
  it produces comes back as a controller response (`SubscribeResponse`,
  `controller_response + peek_finish + per_row` on the loop, as
  Materialize's subscribe responses reach the client through its loop); the
  reply (`as_of`) waits for the batch's `confirm_leadership()`, as a peek's
  result does.
- **Update/Delete**: a task takes the global write lock, reads the matching rows
  through the peek path at a linearized timestamp, writes their replacements
  through group commit and replies: nothing amortizes, so each pays every
  oracle round trip (seed 000 predicts these get slower with the Postgres oracle).

Known-bad variants: `fifo_event_loop` (one queue in arrival order, no
priorities), `skip_confirm_leadership` (reply to peeks without the durable
check, so a deposed coordinator's stale reads go unnoticed), `no_write_lock`
(read-then-writes overlap), `unbounded_group_commits` (a commit per trigger
even with the oracle's calls off the loop) and `coordinator_joins_read_ts`
(a peek takes the answer of a read_ts already in flight).

Its parts, one module each, share the loop's state (every handler runs on
the one loop): the loop and its queues (`event_loop_queues`), peeks and the
confirm buffer (`event_loop_peeks`), writes (`event_loop_writes`), SUBSCRIBE
(`event_loop_subscribe`), and here the statements and DDL. What both
architectures share lives in `running.py`, `peeks.py` and `group_commit.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from catalog.api import Conflict
from controllers.derive import derive
from coordinator.config import GroupCommitPolicy
from coordinator.environment import advance_catalog_frontier, write_builtin_tables
from coordinator.event_loop_peeks import EventLoopPeeks, PeekJob
from coordinator.event_loop_subscribe import EventLoopSubscriptions
from coordinator.event_loop_writes import EventLoopWrites
from coordinator.group_commit import PendingWrite
from coordinator.peeks import constant_result
from coordinator.planner import CREATES_ITEM, DDL, apply_ddl
from coordinator.session import Result
from coordinator.statements import (
    Delete,
    Insert,
    Select,
    SelectConstant,
    SqlError,
    SqlState,
    Subscribe,
    Update,
)
from sim.runtime.errors import ExternalError, Fenced

if TYPE_CHECKING:
    from catalog.transaction import Transaction
    from coordinator.event_loop_queues import Request
    from coordinator.statements import Statement

__all__ = ["EventLoopCoordinator"]


def _not_begun(exc: ExternalError) -> Result:
    """A DDL whose backend failed before its catalog transaction began: nothing
    was written, so the failure is determinate (DESIGN.md §9), and retryable."""
    return Result.failed(SqlError(SqlState.SERIALIZATION_FAILURE, f"before the catalog transaction: {exc}"))


@final
class EventLoopCoordinator(EventLoopPeeks, EventLoopWrites, EventLoopSubscriptions):
    """See the module docstring. Own it with `async with`."""

    async def _handle_client(self, req: Request) -> None:
        self._counts["statements"] += 1
        costs = self.config.costs
        await self._cpu(costs.parse_plan)
        if self._fenced is not None:
            req.reply(Result.failed(self._fenced))
            return
        stmt = req.statement
        try:
            if isinstance(stmt, DDL):
                await self._ddl(req)
            elif isinstance(stmt, SelectConstant):
                # The fast path: answered from the plan (staged: once the
                # optimizer stage is back), on the loop.
                async def answer() -> None:
                    await self._cpu(costs.per_row)
                    req.reply(constant_result(stmt))

                await self._stage(answer)
            elif isinstance(stmt, Select):
                self._counts["peeks"] += 1
                plan = self._catalog_view().plan_select(stmt)
                await self._cpu(costs.peek_sequence)
                job = PeekJob(plan, req.reply, self.config.confirm_leadership)
                await self._stage(lambda: self._start_peek(job))
            elif isinstance(stmt, Insert):
                self._counts["writes"] += 1
                write = self._catalog_view().plan_insert(stmt)
                await self._cpu(costs.write_sequence + costs.per_row * len(write.updates))
                pending = PendingWrite(write.table_id, write.updates, self._catalog_ts())
                self._pending_writes.append((pending, req))
                if self.config.group_commit is GroupCommitPolicy.IMMEDIATE:
                    self._trigger_group_commit()
            elif isinstance(stmt, Update | Delete):
                self._counts["writes"] += 1
                rtw = self._catalog_view().plan_read_then_write(stmt)
                assert self._tg is not None
                self._tg.start_soon(self._read_then_write, req, rtw)
            elif isinstance(stmt, Subscribe):
                await self._subscribe(req, stmt)
            else:
                raise SqlError(
                    SqlState.FEATURE_NOT_SUPPORTED, f"{type(stmt).__name__} is not supported"
                )
        except SqlError as exc:
            if (
                exc.code is SqlState.UNDEFINED_TABLE
                and self.config.confirm_leadership
                and not self.config.known_bad.skip_confirm_leadership
            ):
                # The catalog said no: only true if we still lead.
                self._confirm_buffer.append((req.reply, Result.failed(exc)))
            else:
                req.reply(Result.failed(exc))

    def _catalog_moved(self) -> SqlError:
        """A catalog transaction met a conflict. Only another writer moves the
        catalog under the loop: a newer coordinator whose epoch bump we have
        not seen yet, so this loop is fenced."""
        return self._fence(RuntimeError("the catalog moved under the loop"))

    async def _allocate_ids(self, stmt: Statement, tx: Transaction) -> Transaction | None:
        """What Materialize's CREATE does before its catalog transaction, on the
        loop: `get_catalog_write_ts` (an oracle `write_ts`), then
        `allocate_user_id`, a durable catalog transaction of its own; the
        statement is then planned again on the catalog that transaction left,
        with the id it allocated. Other DDL allocates nothing: `tx` as it is.
        None: another writer moved the catalog (this coordinator is deposed).
        The oracle's timestamp is not used (the model's catalog keeps its own
        timestamps): the round trip is what the loop pays (`ddl_round_trips`)."""
        if not isinstance(stmt, CREATES_ITEM):
            return tx
        inc = self.incarnation
        await inc.oracle.write_ts()
        allocation = inc.catalog.transaction()
        item_id = allocation.allocate_id("item")
        result = await inc.catalog.commit_transaction(allocation)
        if isinstance(result, Conflict):
            return None
        planned = inc.catalog.transaction()
        planned.reserve_id("item", item_id)
        apply_ddl(planned, self._catalog_view(), stmt)
        return planned

    async def _ddl(self, req: Request) -> None:
        self._counts["ddl"] += 1
        inc = self.incarnation
        costs = self.config.costs
        await self._cpu(costs.ddl_sequence + costs.ddl_per_entry * len(inc.catalog.state().entries))
        tx = inc.catalog.transaction()
        apply_ddl(tx, self._catalog_view(), req.statement)
        if tx.is_empty():  # IF [NOT] EXISTS that changed nothing
            req.reply(Result(catalog_ts=self._catalog_ts()))
            return
        try:  # the round trips before the statement's own catalog write
            planned: Transaction | None = tx
            if self.config.ddl_round_trips:
                planned = await self._allocate_ids(req.statement, tx)
                # catalog_transact's get_local_write_ts (its audit-log timestamp)
                await inc.oracle.write_ts()
            if self.config.stash_commit_reads and planned is not None:
                await inc.catalog.sync()  # transaction()'s snapshot
                for _ in range(2):  # is_stash_initialized: the collections, then the config
                    await inc.catalog.is_initialized()
        except Fenced as exc:
            req.reply(Result.failed(self._fence(exc)))
            return
        except ExternalError as exc:  # nothing of the statement's written yet: determinate
            req.reply(_not_begun(exc))
            return
        if planned is None:
            req.reply(Result.failed(self._catalog_moved()))
            return
        tx = planned
        start = self._rt.now()
        try:
            result = await inc.catalog.commit_transaction(tx)
        except Fenced as exc:
            req.reply(Result.failed(self._fence(exc)))
            return
        except ExternalError as exc:
            req.reply(
                Result.failed(SqlError(SqlState.INDETERMINATE, f"catalog transaction: {exc}"))
            )
            return
        if isinstance(result, Conflict):
            req.reply(Result.failed(self._catalog_moved()))
            return
        ts = result.upper - 1
        inc.emit("catalog-append", "catalog", start, timeline=self._catalog_timeline, ts=ts)
        for cmd in derive(tx.updates(ts)):
            await inc.storage.apply(cmd)
            inc.compute.send(cmd)
        await advance_catalog_frontier(inc, result.upper)
        if self.config.ddl_round_trips:
            try:
                await write_builtin_tables(inc)
            except SqlError as err:  # committed, but not acknowledged as such
                req.reply(Result.failed(err))
                return
        req.reply(Result(catalog_ts=ts))
